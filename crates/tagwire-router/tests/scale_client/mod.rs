//! A raw protocol client over TCP for the router's integration tests that
//! drive large tables (admin work at scale): frames in, frames out, no
//! client library in between.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use tagwire_proto::{EndpointKind, Event, Frame, FrameDecoder, PROTOCOL_VERSION};
use tagwire_router::{Router, RouterConfig, RouterHandle};

/// How long a read waits before the test fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// A router on an ephemeral loopback port with the default limits.
pub fn start() -> RouterHandle {
    let cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    Router::start(cfg).expect("start router")
}

/// A raw protocol client.
pub struct Raw {
    pub s: TcpStream,
    buf: BytesMut,
    dec: FrameDecoder,
    /// The max frame the router granted in `Welcome`.
    pub max_frame: u32,
}

impl Raw {
    /// Connects and says Hello offering `max_frame`.
    pub fn hello_with(h: &RouterHandle, max_frame: u32) -> Raw {
        let s = TcpStream::connect(h.tcp_addr().expect("tcp")).expect("connect");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut r = Raw {
            s,
            buf: BytesMut::new(),
            dec: FrameDecoder::new(max_frame),
            max_frame: 0,
        };
        let port = h.tcp_addr().expect("tcp").port();
        let token = tagwire_router::local::read_token(&tagwire_router::local::token_path(port))
            .expect("the router wrote its local token");
        r.send(&Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame,
            name: "raw".into(),
            token,
            session: [0; 16],
        });
        match r.recv() {
            Some(Frame::Welcome { max_frame, .. }) => r.max_frame = max_frame,
            other => panic!("expected Welcome, got {other:?}"),
        }
        r
    }

    /// Connects and says Hello offering 16 MiB frames.
    pub fn hello(h: &RouterHandle) -> Raw {
        Raw::hello_with(h, 1 << 24)
    }

    pub fn send(&mut self, f: &Frame) {
        let mut b = BytesMut::new();
        f.encode(&mut b).expect("encode");
        self.send_bytes(&b);
    }

    pub fn send_bytes(&mut self, b: &[u8]) {
        let _ = self.s.write_all(b);
    }

    /// The next frame, or None at end of stream (or after [`WAIT`]).
    pub fn recv(&mut self) -> Option<Frame> {
        self.recv_raw()
            .map(|(k, body)| Frame::decode(k, body).expect("server frame decodes"))
    }

    /// The next frame undecoded, with its length as sent (type + body).
    pub fn recv_raw(&mut self) -> Option<(u8, bytes::Bytes)> {
        loop {
            if let Some(f) = self
                .dec
                .next_raw(&mut self.buf)
                .expect("server frames fit the negotiated max frame")
            {
                return Some(f);
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Declares an endpoint and expects `Ok`.
    pub fn declare(&mut self, req: u32, id: u32, kind: EndpointKind, name: &str) {
        self.send(&Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.into(),
        });
        assert_eq!(self.recv(), Some(Frame::Ok { req }), "declare {name}");
    }

    /// Subscribes endpoint `endpoint` with subscription ids `first..first+n`
    /// on `pattern` with the given QoS, pipelined, and expects every `Ok`.
    pub fn subscribe_many(
        &mut self,
        endpoint: u32,
        first: u32,
        n: u32,
        pattern: &str,
        qos: &[(String, String)],
    ) {
        let mut b = BytesMut::new();
        for sub in first..first + n {
            Frame::Subscribe {
                req: sub,
                sub,
                endpoint,
                pattern: pattern.into(),
                qos: qos.to_vec(),
            }
            .encode(&mut b)
            .expect("encode");
            if b.len() > 1 << 16 {
                self.send_bytes(&b);
                b.clear();
            }
        }
        self.send_bytes(&b);
        for sub in first..first + n {
            assert_eq!(self.recv(), Some(Frame::Ok { req: sub }), "subscribe {sub}");
        }
    }

    /// Unsubscribes `first..first+n`, pipelined, and expects every `Ok`.
    pub fn unsubscribe_many(&mut self, first: u32, n: u32) {
        let mut b = BytesMut::new();
        for sub in first..first + n {
            Frame::Unsubscribe { req: sub, sub }
                .encode(&mut b)
                .expect("encode");
        }
        self.send_bytes(&b);
        for sub in first..first + n {
            assert_eq!(
                self.recv(),
                Some(Frame::Ok { req: sub }),
                "unsubscribe {sub}"
            );
        }
    }

    /// Sends an admin request and returns the reply's JSON; panics on an
    /// error frame.
    pub fn admin(&mut self, req: u32, body: &serde_json::Value) -> serde_json::Value {
        self.send(&Frame::Admin {
            req,
            body: body.to_string(),
        });
        match self.recv() {
            Some(Frame::AdminReply { req: r, body }) if r == req => {
                serde_json::from_str(&body).expect("admin reply is JSON")
            }
            other => panic!("expected the admin reply to {body}, got {other:?}"),
        }
    }

    /// Ping round trip.
    pub fn ping(&mut self, nonce: u64) {
        self.send(&Frame::Ping { nonce });
        assert_eq!(self.recv(), Some(Frame::Pong { nonce }), "pong {nonce}");
    }

    /// Publishes `payload` on `tag` through publisher endpoint `id` named `name`.
    pub fn publish(&mut self, id: u32, name: &str, tag: &str, payload: &'static str) {
        let mut ev = Event::new(tag, payload);
        ev.header.publisher = name.into();
        let mut b = BytesMut::new();
        tagwire_proto::encode_publish(id, &ev, &mut b).expect("encode");
        self.send_bytes(&b);
    }
}
