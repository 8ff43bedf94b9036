//! A raw protocol client for the router's integration tests: frames in,
//! frames out, no client library in between. It talks over an in-process
//! socket (the router's owner: no token needed) or over TCP (with the
//! owner's local token, or a chosen token and session id).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::ops::Range;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use tagwire_proto::{
    EndpointKind, ErrorCode, Event, Frame, FrameDecoder, LinkFrame, PROTOCOL_VERSION,
};
use tagwire_router::config::{AclRule, AuthConfig, TokenConfig};
use tagwire_router::{Limits, Listing, Router, RouterConfig, RouterHandle};

/// How long [`wait_for`] polls before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// How long a read waits before it gives up (and reports end of stream).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The max frame a client offers in its `Hello` unless told otherwise.
pub const MAX_FRAME: u32 = 1 << 24;

/// An embedded router with `limits`, reached through in-process sockets.
pub fn start(limits: Limits) -> RouterHandle {
    Router::start_embedded(limits).expect("start router")
}

/// A router configuration listening on an ephemeral loopback TCP port only.
pub fn tcp_config() -> RouterConfig {
    RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    }
}

/// A router with `limits` on an ephemeral loopback TCP port.
pub fn start_tcp(limits: Limits) -> RouterHandle {
    Router::start(RouterConfig {
        limits,
        ..tcp_config()
    })
    .expect("start router")
}

/// The local token of the router's owner, for a TCP `Hello`.
pub fn owner_token(h: &RouterHandle) -> String {
    let port = h.tcp_addr().expect("tcp").port();
    tagwire_router::local::read_token(&tagwire_router::local::token_path(port))
        .expect("the router wrote its local token")
}

/// An event on `tag` from the publisher endpoint named `publisher`.
pub fn event(publisher: &str, tag: &str, payload: impl Into<Bytes>) -> Event {
    let mut ev = Event::new(tag, payload);
    ev.header.publisher = publisher.into();
    ev
}

/// The bytes of a `Publish` frame of `ev` through endpoint `endpoint`.
pub fn publish_frame(endpoint: u32, ev: &Event) -> BytesMut {
    let mut b = BytesMut::new();
    tagwire_proto::encode_publish(endpoint, ev, &mut b).expect("encode");
    b
}

enum Socket {
    InProcess(UnixStream),
    Tcp(TcpStream),
}

impl Socket {
    fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        match self {
            Socket::InProcess(s) => s.shutdown(how),
            Socket::Tcp(s) => s.shutdown(how),
        }
    }
}

/// A raw protocol client.
pub struct Raw {
    s: Socket,
    buf: BytesMut,
    dec: FrameDecoder,
    /// The last request id used; requests count up from 1.
    req: u32,
    /// The max frame the router granted in `Welcome` (0 before it).
    pub max_frame: u32,
}

impl Raw {
    fn over(s: Socket) -> Raw {
        Raw {
            s,
            buf: BytesMut::new(),
            dec: FrameDecoder::new(MAX_FRAME),
            req: 0,
            max_frame: 0,
        }
    }

    /// An in-process socket, before its `Hello`.
    pub fn connect(h: &RouterHandle) -> Raw {
        let s = h.connect_in_process().expect("connect");
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        Raw::over(Socket::InProcess(s))
    }

    /// A TCP connection, before its `Hello`.
    pub fn connect_tcp(h: &RouterHandle) -> Raw {
        let s = TcpStream::connect(h.tcp_addr().expect("tcp")).expect("connect");
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        Raw::over(Socket::Tcp(s))
    }

    /// Says `Hello` offering `max_frame` with `token` and `session`;
    /// returns the router's answer (a `Welcome` records the granted max
    /// frame).
    ///
    /// A token is proven (version 3): the router's `Challenge` is checked
    /// and answered with the client's `Proof`, as the client library does.
    pub fn say_hello(&mut self, max_frame: u32, token: &str, session: [u8; 16]) -> Option<Frame> {
        use tagwire_proto::handshake::{client_proof, server_proof};
        self.dec.set_max_frame(max_frame);
        let nonce = tagwire_router::local::random_nonce();
        self.send(&Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame,
            name: "raw".into(),
            token: String::new(),
            proof: (!token.is_empty())
                .then(|| Box::new(tagwire_proto::TokenTag::new(token, nonce))),
            session,
        });
        let mut answer = self.recv();
        if let Some(Frame::Challenge { nonce: ns, proof }) = answer {
            assert_eq!(
                proof,
                server_proof(token, &nonce, &ns),
                "the router proves the token"
            );
            self.send(&Frame::Proof {
                proof: client_proof(token, &nonce, &ns),
            });
            answer = self.recv();
        }
        if let Some(Frame::Welcome { max_frame, .. }) = answer {
            self.max_frame = max_frame;
        }
        answer
    }

    /// Says `Hello` and expects `Welcome`.
    fn welcome(mut self, max_frame: u32, token: &str, session: [u8; 16]) -> Raw {
        match self.say_hello(max_frame, token, session) {
            Some(Frame::Welcome { .. }) => self,
            other => panic!("expected Welcome, got {other:?}"),
        }
    }

    /// An in-process client through a **version-1** handshake (no
    /// credential, no session: the transport identifies it, the owner).
    pub fn hello_v1(h: &RouterHandle) -> Raw {
        let mut r = Raw::connect(h);
        r.send(&Frame::Hello {
            version: 1,
            max_frame: MAX_FRAME,
            name: "v1".into(),
            token: String::new(),
            proof: None,
            session: [0; 16],
        });
        match r.recv() {
            Some(Frame::Welcome {
                version: 1,
                max_frame,
                ..
            }) => r.max_frame = max_frame,
            other => panic!("expected a version-1 Welcome, got {other:?}"),
        }
        r
    }

    /// An in-process client through the handshake (the router's owner).
    pub fn hello(h: &RouterHandle) -> Raw {
        Raw::connect(h).welcome(MAX_FRAME, "", [0; 16])
    }

    /// A TCP client through the handshake with the owner's local token.
    pub fn hello_tcp(h: &RouterHandle) -> Raw {
        Raw::hello_tcp_with(h, MAX_FRAME)
    }

    /// A client over a TCP stream connected elsewhere (e.g. from a testbed
    /// namespace), through the handshake with `token`.
    pub fn welcomed_over(s: TcpStream, token: &str) -> Raw {
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        Raw::over(Socket::Tcp(s)).welcome(MAX_FRAME, token, [0; 16])
    }

    /// A TCP client of band `band`'s listener, through the handshake.
    pub fn hello_tcp_on(h: &RouterHandle, band: &str) -> Raw {
        Raw::hello_tcp_on_as(h, band, &owner_token(h), [0; 16])
    }

    /// A TCP client of band `band`'s listener with `token` and `session`.
    pub fn hello_tcp_on_as(h: &RouterHandle, band: &str, token: &str, session: [u8; 16]) -> Raw {
        let addr = h
            .bands()
            .iter()
            .find(|(n, _, _)| n == band)
            .and_then(|(_, t, _)| *t)
            .unwrap_or_else(|| panic!("no TCP listener for band {band}"));
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        Raw::over(Socket::Tcp(s)).welcome(MAX_FRAME, token, session)
    }

    /// A TCP client through the handshake with the owner's local token,
    /// offering `max_frame`.
    pub fn hello_tcp_with(h: &RouterHandle, max_frame: u32) -> Raw {
        Raw::connect_tcp(h).welcome(max_frame, &owner_token(h), [0; 16])
    }

    /// A TCP client that said `Hello` with `token` and `session`, and the
    /// router's answer.
    pub fn hello_as(h: &RouterHandle, token: &str, session: [u8; 16]) -> (Raw, Option<Frame>) {
        let mut r = Raw::connect_tcp(h);
        let answer = r.say_hello(MAX_FRAME, token, session);
        (r, answer)
    }

    /// A TCP client through the handshake with `token` and `session`.
    pub fn welcomed_as(h: &RouterHandle, token: &str, session: [u8; 16]) -> Raw {
        let (r, answer) = Raw::hello_as(h, token, session);
        assert!(matches!(answer, Some(Frame::Welcome { .. })), "{answer:?}");
        r
    }

    pub fn send(&mut self, f: &Frame) {
        let mut b = BytesMut::new();
        f.encode(&mut b).expect("encode");
        self.send_bytes(&b);
    }

    pub fn send_bytes(&mut self, b: &[u8]) {
        // The router may already have closed; that shows up as EOF on read.
        let _ = match &mut self.s {
            Socket::InProcess(s) => s.write_all(b),
            Socket::Tcp(s) => s.write_all(b),
        };
    }

    /// Shuts the socket down (`Write`: the router sees end of stream).
    pub fn shutdown(&self, how: Shutdown) {
        self.s.shutdown(how).expect("shutdown");
    }

    /// Closes the socket without a `Close` frame (a crash or a cut link).
    pub fn drop_without_close(self) {
        let _ = self.s.shutdown(Shutdown::Both);
    }

    /// The next frame, or None at end of stream (or after [`READ_TIMEOUT`]).
    pub fn recv(&mut self) -> Option<Frame> {
        self.recv_raw()
            .map(|(k, body)| Frame::decode(k, body).expect("server frame decodes"))
    }

    /// The next frame undecoded: its type and body. A `Healed` (the daemon
    /// reaches again daemons it could not: a raw peer linked) is skipped, as
    /// a client with no durable subscription ignores it.
    pub fn recv_raw(&mut self) -> Option<(u8, Bytes)> {
        loop {
            if let Some(f) = self
                .dec
                .next_raw(&mut self.buf)
                .expect("server frames fit the negotiated max frame")
            {
                if f.0 == tagwire_proto::kind::HEALED {
                    continue;
                }
                return Some(f);
            }
            let mut chunk = [0u8; 65536];
            let read = match &mut self.s {
                Socket::InProcess(s) => s.read(&mut chunk),
                Socket::Tcp(s) => s.read(&mut chunk),
            };
            match read {
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

    /// Expects end of stream (after any `Close` frames).
    pub fn expect_closed(&mut self) {
        loop {
            match self.recv_control() {
                None => return,
                Some(Frame::Close { .. }) => continue,
                Some(other) => panic!("expected the connection to close, got {other:?}"),
            }
        }
    }

    /// A `Ping` round trip, answering the router's own idle `Ping`s meanwhile.
    pub fn ping(&mut self, nonce: u64) {
        self.send(&Frame::Ping { nonce });
        loop {
            match self.recv_control() {
                Some(Frame::Ping { nonce: theirs }) => self.send(&Frame::Pong { nonce: theirs }),
                other => {
                    assert_eq!(other, Some(Frame::Pong { nonce }), "pong {nonce}");
                    return;
                }
            }
        }
    }

    /// The connection still serves: a `Ping` is answered.
    pub fn expect_alive(&mut self) {
        self.ping(42);
    }

    fn next_req(&mut self) -> u32 {
        self.req += 1;
        self.req
    }

    /// Sends a request made with a fresh request id; returns the reply
    /// (the next frame that is not a `Deliver`).
    pub fn request(&mut self, make: impl FnOnce(u32) -> Frame) -> Frame {
        let req = self.next_req();
        self.send(&make(req));
        self.recv_control().expect("a reply")
    }

    /// Sends a request made with a fresh request id and expects `Ok`.
    fn request_ok(&mut self, what: &str, make: impl FnOnce(u32) -> Frame) {
        let req = self.next_req();
        self.send(&make(req));
        assert_eq!(self.recv_control(), Some(Frame::Ok { req }), "{what}");
    }

    /// Declares endpoint `id`; returns the reply.
    pub fn try_declare(&mut self, id: u32, kind: EndpointKind, name: &str) -> Frame {
        self.request(|req| Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.into(),
        })
    }

    /// Declares endpoint `id` and expects `Ok`.
    pub fn declare(&mut self, id: u32, kind: EndpointKind, name: &str) {
        self.request_ok(&format!("declare {name}"), |req| Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.into(),
        });
    }

    /// Subscribes `sub` of endpoint `endpoint` to `pattern`; returns the reply.
    pub fn try_subscribe(
        &mut self,
        sub: u32,
        endpoint: u32,
        pattern: &str,
        qos: &[(String, String)],
    ) -> Frame {
        self.request(|req| Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.into(),
            qos: qos.to_vec(),
        })
    }

    /// Subscribes `sub` of endpoint `endpoint` to `pattern` and expects `Ok`.
    pub fn subscribe(&mut self, sub: u32, endpoint: u32, pattern: &str, qos: &[(String, String)]) {
        self.request_ok(&format!("subscribe {pattern}"), |req| Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.into(),
            qos: qos.to_vec(),
        });
    }

    /// Declares subscriber endpoint 1 named `name` and subscribes it
    /// (subscription 1) to `pattern`.
    pub fn subscriber(mut self, name: &str, pattern: &str, qos: &[(String, String)]) -> Raw {
        self.declare(1, EndpointKind::Subscriber, name);
        self.subscribe(1, 1, pattern, qos);
        self
    }

    /// Declares publisher endpoint 1 named `name`.
    pub fn publisher(mut self, name: &str) -> Raw {
        self.declare(1, EndpointKind::Publisher, name);
        self
    }

    /// Sends `make(req, item)` for every item with fresh request ids,
    /// pipelined, and expects `Ok` to each in turn.
    fn pipelined_ok(&mut self, what: &str, items: Range<u32>, make: impl Fn(u32, u32) -> Frame) {
        let first_req = self.req + 1;
        let mut b = BytesMut::new();
        for item in items.clone() {
            let req = self.next_req();
            make(req, item).encode(&mut b).expect("encode");
            if b.len() > 1 << 16 {
                self.send_bytes(&b);
                b.clear();
            }
        }
        self.send_bytes(&b);
        for (req, item) in (first_req..).zip(items) {
            assert_eq!(
                self.recv_control(),
                Some(Frame::Ok { req }),
                "{what} {item}"
            );
        }
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
        self.pipelined_ok("subscribe", first..first + n, |req, sub| Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.into(),
            qos: qos.to_vec(),
        });
    }

    /// Like [`Raw::subscribe_many`], each subscription `sub` with no QoS
    /// on endpoint and pattern `target(sub)`.
    pub fn subscribe_each(&mut self, first: u32, n: u32, target: impl Fn(u32) -> (u32, String)) {
        self.pipelined_ok("subscribe", first..first + n, |req, sub| {
            let (endpoint, pattern) = target(sub);
            Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos: Vec::new(),
            }
        });
    }

    /// Declares subscriber endpoints `first..first+n` named `name(id)`,
    /// pipelined, and expects every `Ok`.
    pub fn declare_each(&mut self, first: u32, n: u32, name: impl Fn(u32) -> String) {
        self.pipelined_ok("declare", first..first + n, |req, id| {
            Frame::DeclareEndpoint {
                req,
                id,
                kind: EndpointKind::Subscriber,
                name: name(id),
            }
        });
    }

    /// Unsubscribes `first..first+n`, pipelined, and expects every `Ok`.
    pub fn unsubscribe_many(&mut self, first: u32, n: u32) {
        self.pipelined_ok("unsubscribe", first..first + n, |req, sub| {
            Frame::Unsubscribe { req, sub }
        });
    }

    /// Sends an admin request; returns the reply, whatever it is.
    pub fn try_admin(&mut self, body: &Value) -> Frame {
        self.request(|req| Frame::Admin {
            req,
            body: body.to_string(),
        })
    }

    /// Sends an admin request and returns the reply's body; panics on an
    /// error frame.
    fn admin_body(&mut self, body: &Value) -> String {
        let req = self.next_req();
        self.send(&Frame::Admin {
            req,
            body: body.to_string(),
        });
        match self.recv_control() {
            Some(Frame::AdminReply { req: r, body }) if r == req => body,
            other => panic!("expected the admin reply to {body}, got {other:?}"),
        }
    }

    /// Sends an admin request and returns the reply's JSON; panics on an
    /// error frame.
    pub fn admin(&mut self, body: &Value) -> Value {
        serde_json::from_str(&self.admin_body(body)).expect("admin reply is JSON")
    }

    /// The router's listing (its first page), asked on this connection (so
    /// it is answered after everything this connection sent before).
    pub fn list(&mut self) -> Listing {
        serde_json::from_str(&self.admin_body(&json!({"op": "list"}))).expect("listing parses")
    }

    /// Publishes `ev` through endpoint `endpoint`.
    pub fn publish_event(&mut self, endpoint: u32, ev: &Event) {
        self.send_bytes(&publish_frame(endpoint, ev));
    }

    /// Publishes `payload` on `tag` through publisher endpoint `endpoint`
    /// named `publisher`.
    pub fn publish(
        &mut self,
        endpoint: u32,
        publisher: &str,
        tag: &str,
        payload: impl Into<Bytes>,
    ) {
        self.publish_event(endpoint, &event(publisher, tag, payload));
    }

    /// Publishes `n` events of `size` payload bytes on `tag` (one write).
    pub fn publish_many(
        &mut self,
        endpoint: u32,
        publisher: &str,
        tag: &str,
        size: usize,
        n: usize,
    ) {
        let one = publish_frame(endpoint, &event(publisher, tag, vec![0u8; size]));
        self.send_bytes(&one.repeat(n));
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

/// An in-process subscriber to `pattern` that never reads.
pub fn stalled_subscriber(h: &RouterHandle, name: &str, pattern: &str) -> Raw {
    Raw::hello(h).subscriber(name, pattern, &[])
}

/// Alice's token in [`alice_and_bob`].
pub const ALICE: &str = "alice-token-0123456789abcdef";
/// Bob's token in [`alice_and_bob`].
pub const BOB: &str = "bob-token-0123456789abcdef";

/// A TCP router config with two token identities: `token:alice` may
/// publish `/alice/**` and subscribe `/alice/**` and `/shared/*`;
/// `token:bob` may publish and subscribe everything; neither is admin.
pub fn alice_and_bob() -> RouterConfig {
    RouterConfig {
        auth: AuthConfig {
            tokens: vec![
                TokenConfig {
                    name: "alice".into(),
                    token: Some(ALICE.into()),
                    file: None,
                },
                TokenConfig {
                    name: "bob".into(),
                    token: Some(BOB.into()),
                    file: None,
                },
            ],
            ..AuthConfig::default()
        },
        acl: vec![
            AclRule {
                identity: "token:alice".into(),
                publish: vec!["/alice/**".into()],
                subscribe: vec!["/alice/**".into(), "/shared/*".into()],
                admin: false,
            },
            AclRule {
                identity: "token:bob".into(),
                publish: vec!["/**".into()],
                subscribe: vec!["/**".into()],
                admin: false,
            },
        ],
        ..tcp_config()
    }
}

/// A link frame, encoded (for tests that play a peer daemon).
pub fn link_frame(f: &LinkFrame) -> BytesMut {
    let mut b = BytesMut::new();
    f.encode(&mut b).expect("encodable");
    b
}

/// A peer daemon's `Peer` frame: link `version`, node id `node`, name
/// `rawNODE`, the default cluster and band.
pub fn link_peer(version: u16, node: u64) -> LinkFrame {
    LinkFrame::Peer {
        version,
        node,
        name: format!("raw{node}"),
        cluster: "tagwire".into(),
        band: "normal".into(),
        bands: vec![],
        udp_bands: vec![],
    }
}

/// The next link frame from the router (answering pings), or the control
/// frame that came instead. (A test helper: the large `Err` is the frame
/// itself, read once per call.)
#[allow(clippy::result_large_err)]
pub fn recv_link(raw: &mut Raw) -> Result<LinkFrame, Option<Frame>> {
    loop {
        let Some((k, body)) = raw.recv_raw() else {
            return Err(None);
        };
        if tagwire_proto::is_link_kind(k) {
            return Ok(LinkFrame::decode(k, body).expect("router link frames decode"));
        }
        let f = Frame::decode(k, body).expect("router frames decode");
        if let Frame::Ping { nonce } = f {
            raw.send(&Frame::Pong { nonce });
            continue;
        }
        return Err(Some(f));
    }
}
