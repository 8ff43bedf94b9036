//! A raw protocol client over in-process sockets, for the budget and
//! memory tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use std::os::unix::net::UnixStream;
use tagwire_proto::{EndpointKind, ErrorCode, Event, Frame, FrameDecoder, PROTOCOL_VERSION};
use tagwire_router::{Limits, Listing, Router, RouterHandle};

pub const WAIT: Duration = Duration::from_secs(10);

pub fn start(limits: Limits) -> RouterHandle {
    Router::start_embedded(limits).expect("start router")
}

/// A raw protocol client over an in-process socket.
pub struct Raw {
    s: UnixStream,
    buf: BytesMut,
    dec: FrameDecoder,
    req: u32,
}

impl Raw {
    pub fn connect(h: &RouterHandle) -> Raw {
        let s = h.connect_in_process().expect("connect");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        Raw {
            s,
            buf: BytesMut::new(),
            dec: FrameDecoder::new(1 << 24),
            req: 100,
        }
    }

    pub fn hello(h: &RouterHandle) -> Raw {
        let mut r = Raw::connect(h);
        r.send(&Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame: 1 << 24,
            name: "raw".into(),
            // In-process: the router's owner, no token needed.
            token: String::new(),
            session: [0; 16],
        });
        match r.recv() {
            Some(Frame::Welcome { .. }) => r,
            other => panic!("expected Welcome, got {other:?}"),
        }
    }

    pub fn send(&mut self, f: &Frame) {
        let mut b = BytesMut::new();
        f.encode(&mut b).expect("encode");
        self.send_bytes(&b);
    }

    pub fn send_bytes(&mut self, b: &[u8]) {
        // The router may already have closed; that shows up as EOF on read.
        let _ = self.s.write_all(b);
    }

    /// The next frame, or None at end of stream.
    pub fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some((k, body)) = self
                .dec
                .next_raw(&mut self.buf)
                .expect("server frames are valid")
            {
                return Some(Frame::decode(k, body).expect("server frame decodes"));
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next frame that is not a `Deliver`.
    pub fn recv_control(&mut self) -> Option<Frame> {
        loop {
            match self.recv()? {
                Frame::Deliver { .. } => continue,
                f => return Some(f),
            }
        }
    }

    pub fn expect_error(&mut self, code: ErrorCode, needle: &str) {
        match self.recv_control() {
            Some(Frame::Error {
                code: c, message, ..
            }) => {
                assert_eq!(c, code, "message: {message}");
                assert!(
                    message.contains(needle),
                    "{message:?} should name {needle:?}"
                );
            }
            other => panic!("expected an Error frame naming {needle:?}, got {other:?}"),
        }
    }

    pub fn expect_closed(&mut self) {
        match self.recv_control() {
            None => {}
            Some(other) => panic!("expected the connection to close, got {other:?}"),
        }
    }

    pub fn declare(&mut self, id: u32, kind: EndpointKind, name: &str) {
        self.req += 1;
        let req = self.req;
        self.send(&Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.into(),
        });
        assert_eq!(
            self.recv_control(),
            Some(Frame::Ok { req }),
            "declare {name}"
        );
    }

    pub fn subscribe(&mut self, sub: u32, endpoint: u32, pattern: &str) {
        self.req += 1;
        let req = self.req;
        self.send(&Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.into(),
            qos: vec![],
        });
        assert_eq!(self.recv_control(), Some(Frame::Ok { req }), "subscribe");
    }

    /// Publishes `n` events of `size` payload bytes on `tag` (one write).
    pub fn publish(&mut self, endpoint: u32, publisher: &str, tag: &str, size: usize, n: usize) {
        let mut ev = Event::new(tag, vec![0u8; size]);
        ev.header.publisher = publisher.into();
        let mut one = BytesMut::new();
        tagwire_proto::encode_publish(endpoint, &ev, &mut one).expect("encode");
        let mut all = Vec::with_capacity(one.len() * n);
        for _ in 0..n {
            all.extend_from_slice(&one);
        }
        self.send_bytes(&all);
    }

    /// The router's listing, asked on this connection (so it is answered
    /// after everything this connection sent before).
    pub fn list(&mut self) -> Listing {
        self.req += 1;
        let req = self.req;
        self.send(&Frame::Admin {
            req,
            body: r#"{"op":"list"}"#.into(),
        });
        match self.recv_control() {
            Some(Frame::AdminReply { req: r, body }) if r == req => {
                serde_json::from_str(&body).expect("listing parses")
            }
            other => panic!("expected the listing, got {other:?}"),
        }
    }

    pub fn expect_alive(&mut self) {
        self.send(&Frame::Ping { nonce: 42 });
        loop {
            match self.recv_control() {
                // The router's own idle Ping: answer it.
                Some(Frame::Ping { nonce }) => self.send(&Frame::Pong { nonce }),
                other => {
                    assert_eq!(
                        other,
                        Some(Frame::Pong { nonce: 42 }),
                        "connection still serves"
                    );
                    return;
                }
            }
        }
    }
}

/// Polls the listing (on `admin`) until `done` holds; panics after [`WAIT`].
pub fn wait_for(admin: &mut Raw, what: &str, done: impl Fn(&Listing) -> bool) -> Listing {
    let deadline = Instant::now() + WAIT;
    loop {
        let l = admin.list();
        if done(&l) {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {l:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A subscriber to `pattern` that never reads.
pub fn stalled_subscriber(h: &RouterHandle, name: &str, pattern: &str) -> Raw {
    let mut s = Raw::hello(h);
    s.declare(1, EndpointKind::Subscriber, name);
    s.subscribe(1, 1, pattern);
    s
}
