//! Bad input at the daemon: each case gets an `Error` frame naming the
//! problem (where the connection still allows it), only that connection
//! fails, and the router keeps serving a healthy client throughout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_proto::{
    EndpointKind, ErrorCode, Event, Expiry, Frame, FrameDecoder, PROTOCOL_VERSION,
};
use tagwire_router::{Router, RouterConfig, RouterHandle};

const WAIT: Duration = Duration::from_secs(5);

fn start() -> RouterHandle {
    let cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    Router::start(cfg).expect("start router")
}

/// A raw protocol client over TCP.
struct Raw {
    s: TcpStream,
    buf: BytesMut,
    dec: FrameDecoder,
}

impl Raw {
    /// Declares an endpoint and expects `Ok`.
    fn declare(&mut self, req: u32, id: u32, kind: EndpointKind, name: &str) {
        self.send(&Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.into(),
        });
        assert_eq!(self.recv(), Some(Frame::Ok { req }), "declare {name}");
    }

    /// Subscribes and expects `Ok`.
    fn subscribe(
        &mut self,
        req: u32,
        sub: u32,
        endpoint: u32,
        pattern: &str,
        qos: Vec<(String, String)>,
    ) {
        self.send(&Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.into(),
            qos,
        });
        assert_eq!(self.recv(), Some(Frame::Ok { req }), "subscribe {pattern}");
    }

    fn connect(h: &RouterHandle) -> Raw {
        let s = TcpStream::connect(h.tcp_addr().expect("tcp")).expect("connect");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        Raw {
            s,
            buf: BytesMut::new(),
            dec: FrameDecoder::new(1 << 24),
        }
    }

    fn hello(h: &RouterHandle) -> Raw {
        let mut r = Raw::connect(h);
        let port = h.tcp_addr().expect("tcp").port();
        let token = tagwire_router::local::read_token(&tagwire_router::local::token_path(port))
            .expect("the router wrote its local token");
        r.send(&Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame: 1 << 20,
            name: "raw".into(),
            token,
            session: [0; 16],
        });
        assert!(matches!(r.recv(), Some(Frame::Welcome { .. })));
        r
    }

    fn send(&mut self, f: &Frame) {
        let mut b = BytesMut::new();
        f.encode(&mut b).expect("encode");
        self.send_bytes(&b);
    }

    fn send_bytes(&mut self, b: &[u8]) {
        // The router may already have closed; a failed write shows up as EOF on read.
        let _ = self.s.write_all(b);
    }

    /// The next frame, or None at end of stream.
    fn recv(&mut self) -> Option<Frame> {
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

    fn expect_error(&mut self, code: ErrorCode, needle: &str) {
        match self.recv() {
            Some(Frame::Error {
                code: c, message, ..
            }) => {
                assert_eq!(c, code, "message: {message}");
                assert!(
                    message.contains(needle),
                    "{message:?} should name {needle:?}"
                );
            }
            other => panic!("expected an Error frame, got {other:?}"),
        }
    }

    fn expect_closed(&mut self) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            match self.recv() {
                None => return,
                Some(Frame::Close { .. }) => continue,
                Some(other) => panic!("expected the connection to close, got {other:?}"),
            }
        }
        panic!("connection not closed");
    }

    fn expect_alive(&mut self) {
        self.send(&Frame::Ping { nonce: 42 });
        assert_eq!(
            self.recv(),
            Some(Frame::Pong { nonce: 42 }),
            "connection still serves"
        );
    }
}

/// A healthy subscriber+publisher pair: proves the router still routes.
fn assert_router_serves(h: &RouterHandle) {
    let mut c = Raw::hello(h);
    let n = rand_id();
    c.send(&Frame::DeclareEndpoint {
        req: 1,
        id: 1,
        kind: EndpointKind::Subscriber,
        name: format!("/ok/sub{n}"),
    });
    c.send(&Frame::Subscribe {
        req: 2,
        sub: 7,
        endpoint: 1,
        pattern: "/ok/**".into(),
        qos: vec![],
    });
    c.send(&Frame::DeclareEndpoint {
        req: 3,
        id: 2,
        kind: EndpointKind::Publisher,
        name: format!("/ok/pub{n}"),
    });
    for want in [1, 2, 3] {
        assert_eq!(c.recv(), Some(Frame::Ok { req: want }));
    }
    let mut ev = Event::new("/ok/x", "fine");
    ev.header.publisher = format!("/ok/pub{n}");
    let mut b = BytesMut::new();
    tagwire_proto::encode_publish(2, &ev, &mut b).expect("encode");
    c.send_bytes(&b);
    match c.recv() {
        Some(Frame::Deliver { sub: 7, event }) => {
            assert_eq!(Event::decode(&event).expect("event").payload, "fine")
        }
        other => panic!("expected a delivery, got {other:?}"),
    }
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn garbage_bytes_before_handshake_get_an_error_and_close_only_that_connection() {
    let h = start();
    let mut bad = Raw::connect(&h);
    bad.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // "GET " as a little-endian length is ~542 MB: over the frame limit.
    bad.expect_error(ErrorCode::FrameTooLarge, "exceeds the maximum");
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn truncated_frame_then_eof_leaves_the_router_serving() {
    let h = start();
    let mut bad = Raw::hello(&h);
    let mut b = BytesMut::new();
    Frame::Ping { nonce: 1 }.encode(&mut b).expect("encode");
    bad.send_bytes(&b[..b.len() - 3]);
    bad.s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn length_over_the_limit_is_refused_naming_both_sizes() {
    let h = start();
    let mut bad = Raw::hello(&h);
    bad.send_bytes(&(200u32 << 20).to_le_bytes());
    bad.expect_error(ErrorCode::FrameTooLarge, &format!("{}", 200u32 << 20));
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn unknown_frame_type_gets_an_error_and_the_connection_carries_on() {
    let h = start();
    let mut bad = Raw::hello(&h);
    bad.send_bytes(&[1, 0, 0, 0, 0x7f]);
    bad.expect_error(ErrorCode::UnknownFrameType, "0x7f");
    bad.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn non_utf8_tag_is_refused_and_the_connection_carries_on() {
    let h = start();
    let mut bad = Raw::hello(&h);
    bad.declare(1, 1, EndpointKind::Publisher, "/u8");
    let mut ev = Event::new("/ab", "x");
    ev.header.publisher = "/u8".into();
    let mut b = BytesMut::new();
    tagwire_proto::encode_publish(1, &ev, &mut b).expect("encode");
    // Corrupt the tag's second byte (frame header 5 + endpoint 4 + tag length 2 + 1).
    b[12] = 0xff;
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::Malformed, "UTF-8");
    bad.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn invalid_patterns_are_refused_naming_the_problem() {
    let h = start();
    let mut bad = Raw::hello(&h);
    bad.declare(1, 1, EndpointKind::Subscriber, "/pat");
    bad.send(&Frame::Subscribe {
        req: 2,
        sub: 1,
        endpoint: 1,
        pattern: "/a/**b".into(),
        qos: vec![],
    });
    bad.expect_error(ErrorCode::InvalidPattern, "**b");
    bad.send(&Frame::Subscribe {
        req: 3,
        sub: 2,
        endpoint: 1,
        pattern: "/a//b".into(),
        qos: vec![],
    });
    bad.expect_error(ErrorCode::InvalidPattern, "empty level");
    bad.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn duplicate_endpoint_name_is_refused_naming_it() {
    let h = start();
    let mut a = Raw::hello(&h);
    let mut b = Raw::hello(&h);
    a.declare(1, 1, EndpointKind::Publisher, "/dup");
    b.send(&Frame::DeclareEndpoint {
        req: 9,
        id: 1,
        kind: EndpointKind::Publisher,
        name: "/dup".into(),
    });
    b.expect_error(ErrorCode::DuplicateEndpoint, "/dup");
    b.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn publish_before_handshake_is_refused_and_closed() {
    let h = start();
    let mut bad = Raw::connect(&h);
    let mut ev = Event::new("/x", "early");
    ev.header.publisher = "/p".into();
    let mut b = BytesMut::new();
    tagwire_proto::encode_publish(1, &ev, &mut b).expect("encode");
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::HandshakeRequired, "Hello");
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn publish_on_undeclared_or_mismatched_endpoint_is_refused() {
    let h = start();
    let mut bad = Raw::hello(&h);
    let mut ev = Event::new("/x", "who");
    ev.header.publisher = "/nobody".into();
    let mut b = BytesMut::new();
    tagwire_proto::encode_publish(5, &ev, &mut b).expect("encode");
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::UnknownEndpoint, "endpoint id 5");
    bad.declare(1, 5, EndpointKind::Publisher, "/real");
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::PublisherMismatch, "/nobody");
    bad.expect_alive();
}

#[test]
fn stalled_subscriber_drops_by_policy_while_a_healthy_one_receives_everything() {
    let h = start();
    // The stalled subscriber never reads.
    let mut stalled = Raw::hello(&h);
    stalled.declare(1, 1, EndpointKind::Subscriber, "/stalled");
    stalled.subscribe(
        2,
        1,
        1,
        "/flood",
        vec![("max_queue_length".into(), "16".into())],
    );
    let mut healthy = Raw::hello(&h);
    healthy.declare(1, 1, EndpointKind::Subscriber, "/healthy");
    healthy.subscribe(
        2,
        1,
        1,
        "/flood",
        vec![("max_queue_length".into(), "100000".into())],
    );
    let mut publisher = Raw::hello(&h);
    publisher.declare(1, 1, EndpointKind::Publisher, "/flooder");
    // 40 MB through a subscriber that never reads: far more than socket buffers hold.
    let n = 10_000;
    let mut ev = Event::new("/flood", vec![1u8; 4096]);
    ev.header.publisher = "/flooder".into();
    let mut batch = BytesMut::new();
    for _ in 0..100 {
        tagwire_proto::encode_publish(1, &ev, &mut batch).expect("encode");
    }
    let reader = std::thread::spawn(move || {
        let mut got = 0;
        while got < n {
            match healthy.recv() {
                Some(Frame::Deliver { .. }) => got += 1,
                other => panic!("healthy subscriber got {other:?} after {got}"),
            }
        }
        got
    });
    for _ in 0..n / 100 {
        publisher.send_bytes(&batch);
    }
    assert_eq!(
        reader.join().expect("reader thread"),
        n,
        "the healthy subscriber received every event"
    );
    let mut admin = Raw::hello(&h);
    admin.send(&Frame::Admin {
        req: 1,
        body: r#"{"op":"list"}"#.into(),
    });
    let Some(Frame::AdminReply { body, .. }) = admin.recv() else {
        panic!("no admin reply")
    };
    let listing: tagwire_router::Listing = serde_json::from_str(&body).expect("listing");
    let s = listing
        .subscriptions
        .iter()
        .find(|s| s.endpoint == "/stalled")
        .expect("stalled listed");
    assert!(
        s.queue_depth <= 16,
        "queue stays within its bound: {}",
        s.queue_depth
    );
    assert!(s.dropped > 0, "the stalled subscriber's drops are counted");
}

#[test]
fn events_that_expire_while_queued_for_a_stalled_subscriber_are_dropped_not_delivered() {
    let h = start();
    let mut stalled = Raw::hello(&h);
    stalled.declare(1, 1, EndpointKind::Subscriber, "/slow");
    stalled.subscribe(
        2,
        1,
        1,
        "/exp",
        vec![("max_queue_length".into(), "100000".into())],
    );
    let mut publisher = Raw::hello(&h);
    publisher.declare(1, 1, EndpointKind::Publisher, "/exp/pub");
    let event = |payload: Vec<u8>, expiry: Expiry| {
        let mut ev = Event::new("/exp", payload);
        ev.header.publisher = "/exp/pub".into();
        ev.header.expiry = expiry;
        ev.header.source_time_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64;
        let mut buf = BytesMut::new();
        tagwire_proto::encode_publish(1, &ev, &mut buf).expect("encode");
        buf
    };
    // 20 MB that never expire, far more than the socket buffers hold, so
    // what follows waits in the router's queue for the subscriber.
    let filler = event(vec![0u8; 4096], Expiry::Never);
    for _ in 0..5_000 {
        publisher.send_bytes(&filler);
    }
    let lifetime = Duration::from_secs(2);
    for _ in 0..100 {
        publisher.send_bytes(&event(
            vec![1u8; 16],
            Expiry::AfterNs(lifetime.as_nanos() as u64),
        ));
    }
    publisher.send_bytes(&event(b"end".to_vec(), Expiry::Never));
    std::thread::sleep(lifetime + Duration::from_millis(500));

    let (mut filler_seen, mut expiring_seen) = (0, 0);
    loop {
        match stalled.recv() {
            Some(Frame::Deliver { event, .. }) => {
                match tagwire_proto::EventRef::parse(&event)
                    .expect("event")
                    .payload
                {
                    b"end" => break,
                    [1, ..] => expiring_seen += 1,
                    _ => filler_seen += 1,
                }
            }
            other => panic!("subscriber got {other:?} after {filler_seen} events"),
        }
    }
    assert_eq!(
        filler_seen, 5_000,
        "events without expiry are all delivered"
    );
    assert_eq!(
        expiring_seen, 0,
        "events that expired while queued are not delivered"
    );
    let mut admin = Raw::hello(&h);
    admin.send(&Frame::Admin {
        req: 1,
        body: r#"{"op":"list"}"#.into(),
    });
    let Some(Frame::AdminReply { body, .. }) = admin.recv() else {
        panic!("no admin reply")
    };
    let listing: tagwire_router::Listing = serde_json::from_str(&body).expect("listing");
    let s = listing
        .subscriptions
        .iter()
        .find(|s| s.endpoint == "/slow")
        .expect("subscription listed");
    assert_eq!(s.expired, 100, "they are counted as expired in its queue");
    assert_eq!(listing.expired, 0, "none had expired on arrival");
}

#[test]
fn events_beyond_the_deferred_limit_are_refused_with_limit_reached() {
    let mut cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    cfg.limits.max_deferred_events = 2;
    let h = Router::start(cfg).expect("router");
    let mut publisher = Raw::hello(&h);
    publisher.declare(1, 1, EndpointKind::Publisher, "/defer/pub");
    let an_hour = std::time::SystemTime::now() + Duration::from_secs(3600);
    let mut ev = Event::new("/defer/x", &b"held"[..]);
    ev.header.publisher = "/defer/pub".into();
    ev.header.start_time_ns = Some(
        an_hour
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64,
    );
    let mut buf = BytesMut::new();
    tagwire_proto::encode_publish(1, &ev, &mut buf).expect("encode");
    for _ in 0..3 {
        publisher.send_bytes(&buf);
    }
    publisher.expect_error(ErrorCode::LimitReached, "start time");
    publisher.expect_alive();
}

#[test]
fn admin_request_that_is_not_json_is_refused_and_the_connection_carries_on() {
    let h = start();
    let mut a = Raw::hello(&h);
    a.send(&Frame::Admin {
        req: 4,
        body: "{\"op\":\"explode\"}".into(),
    });
    a.expect_error(ErrorCode::BadRequest, "explode");
    a.expect_alive();
}

#[test]
fn connections_over_the_limit_are_refused_with_limit_reached() {
    let mut cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    cfg.limits.max_connections = 1;
    let h = Router::start(cfg).expect("router");
    let mut first = Raw::hello(&h);
    // The limit counts established connections: refused at its Hello.
    let mut second = Raw::connect(&h);
    let port = h.tcp_addr().expect("tcp").port();
    second.send(&Frame::Hello {
        version: PROTOCOL_VERSION,
        max_frame: 1 << 20,
        name: "second".into(),
        token: tagwire_router::local::read_token(&tagwire_router::local::token_path(port))
            .expect("local token"),
        session: [0; 16],
    });
    second.expect_error(ErrorCode::LimitReached, "connection limit");
    second.expect_closed();
    first.expect_alive();
}
