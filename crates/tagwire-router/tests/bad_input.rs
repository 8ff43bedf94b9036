//! Bad input at the daemon: each case gets an `Error` frame naming the
//! problem (where the connection still allows it), only that connection
//! fails, and the router keeps serving a healthy client throughout.

mod common;

use bytes::BytesMut;
use std::net::Shutdown;
use std::time::Duration;

use common::{event, owner_token, publish_frame, start_tcp, Raw};
use serde_json::json;
use tagwire_proto::{EndpointKind, ErrorCode, Event, Frame};
use tagwire_router::{Limits, RouterHandle};

/// A healthy subscriber+publisher pair: proves the router still routes.
fn assert_router_serves(h: &RouterHandle) {
    let mut c = Raw::hello_tcp(h);
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
    c.publish(2, &format!("/ok/pub{n}"), "/ok/x", "fine");
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
    let h = start_tcp(Limits::default());
    let mut bad = Raw::connect_tcp(&h);
    bad.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // "GET " as a little-endian length is ~542 MB: over the frame limit.
    bad.expect_error(ErrorCode::FrameTooLarge, "exceeds the maximum");
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn truncated_frame_then_eof_leaves_the_router_serving() {
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h);
    let mut b = bytes::BytesMut::new();
    Frame::Ping { nonce: 1 }.encode(&mut b).expect("encode");
    bad.send_bytes(&b[..b.len() - 3]);
    bad.shutdown(Shutdown::Write);
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn length_over_the_limit_is_refused_naming_both_sizes() {
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h);
    bad.send_bytes(&(200u32 << 20).to_le_bytes());
    bad.expect_error(ErrorCode::FrameTooLarge, &format!("{}", 200u32 << 20));
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn unknown_frame_type_gets_an_error_and_the_connection_carries_on() {
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h);
    bad.send_bytes(&[1, 0, 0, 0, 0x7f]);
    bad.expect_error(ErrorCode::UnknownFrameType, "0x7f");
    bad.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn non_utf8_tag_is_refused_and_the_connection_carries_on() {
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h).publisher("/u8");
    let mut b = publish_frame(1, &event("/u8", "/ab", "x"));
    // Corrupt the tag's second byte (frame header 5 + endpoint 4 + tag length 2 + 1).
    b[12] = 0xff;
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::Malformed, "UTF-8");
    bad.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn non_utf8_names_are_refused_after_a_valid_publish_on_the_same_tag() {
    // The daemon compares a publish's names with the endpoint's name and the
    // tag it last validated instead of validating them again: bytes that
    // differ from those are still checked.
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h).publisher("/u8");
    let good = publish_frame(1, &event("/u8", "/ab", "x"));
    bad.send_bytes(&good);
    bad.expect_alive();
    let mut tag = good.clone();
    tag[12] = 0xff;
    bad.send_bytes(&tag);
    bad.expect_error(ErrorCode::Malformed, "tag is not valid UTF-8");
    // The publisher's second byte (after tag length 2, tag 3, its length 1).
    let mut publisher = good.clone();
    publisher[16] = 0xff;
    bad.send_bytes(&publisher);
    bad.expect_error(ErrorCode::Malformed, "publisher is not valid UTF-8");
    bad.send_bytes(&publish_frame(1, &event("/u9", "/ab", "x")));
    bad.expect_error(ErrorCode::PublisherMismatch, "\"/u9\"");
    bad.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn a_refused_publish_read_with_a_request_does_not_take_the_requests_answer() {
    // Publishes read together are routed as a batch and their refusals sent
    // when it ends, after the next frame (here a request) was read: the
    // refusal has request id 0 and the request gets its own answer.
    let h = start_tcp(Limits::default());
    let mut raw = Raw::hello_tcp(&h).publisher("/rq");
    let mut bytes = publish_frame(1, &event("/other", "/rq/a", "x"));
    Frame::DeclareEndpoint {
        req: 77,
        id: 2,
        kind: EndpointKind::Subscriber,
        name: "/rq/sub".into(),
    }
    .encode(&mut bytes)
    .expect("encodes");
    raw.send_bytes(&bytes);
    let mut got = Vec::new();
    while got.len() < 2 {
        match raw.recv_control() {
            Some(f @ (Frame::Error { .. } | Frame::Ok { .. })) => got.push(f),
            Some(_) => {}
            None => panic!("connection closed; got {got:?}"),
        }
    }
    assert!(
        got.iter().any(|f| matches!(
            f,
            Frame::Error {
                req: 0,
                code: ErrorCode::PublisherMismatch,
                ..
            }
        )),
        "the publish's refusal has request id 0: {got:?}"
    );
    assert!(
        got.iter().any(|f| matches!(f, Frame::Ok { req: 77 })),
        "the declare got its own answer: {got:?}"
    );
    raw.expect_alive();
    assert_router_serves(&h);
}

#[test]
fn a_batchs_refusal_goes_out_before_the_pong_of_a_ping_read_with_it() {
    // A client that pings after its publishes (as `tagwire pub` does before
    // it exits) learns of every refusal before the `Pong`.
    let h = start_tcp(Limits::default());
    let mut raw = Raw::hello_tcp(&h).publisher("/po");
    let mut bytes = BytesMut::new();
    for _ in 0..3 {
        bytes.extend_from_slice(&publish_frame(1, &event("/other", "/po/a", "x")));
    }
    Frame::Ping { nonce: 9 }
        .encode(&mut bytes)
        .expect("encodes");
    raw.send_bytes(&bytes);
    let mut refusals = 0;
    loop {
        match raw.recv_control() {
            Some(Frame::Error { req: 0, code, .. }) => {
                assert_eq!(code, ErrorCode::PublisherMismatch);
                refusals += 1;
            }
            Some(Frame::Pong { nonce: 9 }) => break,
            Some(_) => {}
            None => panic!("connection closed after {refusals} refusals"),
        }
    }
    assert_eq!(refusals, 3, "every refusal came before the Pong");
    raw.expect_alive();
}

#[test]
fn invalid_patterns_are_refused_naming_the_problem() {
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h);
    bad.declare(1, EndpointKind::Subscriber, "/pat");
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
    let h = start_tcp(Limits::default());
    let mut a = Raw::hello_tcp(&h);
    let mut b = Raw::hello_tcp(&h);
    a.declare(1, EndpointKind::Publisher, "/dup");
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
    let h = start_tcp(Limits::default());
    let mut bad = Raw::connect_tcp(&h);
    bad.publish(1, "/p", "/x", "early");
    bad.expect_error(ErrorCode::HandshakeRequired, "Hello");
    bad.expect_closed();
    assert_router_serves(&h);
}

#[test]
fn publish_on_undeclared_or_mismatched_endpoint_is_refused() {
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello_tcp(&h);
    let b = publish_frame(5, &event("/nobody", "/x", "who"));
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::UnknownEndpoint, "endpoint id 5");
    bad.declare(5, EndpointKind::Publisher, "/real");
    bad.send_bytes(&b);
    bad.expect_error(ErrorCode::PublisherMismatch, "/nobody");
    bad.expect_alive();
}

#[test]
fn stalled_subscriber_drops_by_policy_while_a_healthy_one_receives_everything() {
    let h = start_tcp(Limits::default());
    // The stalled subscriber never reads.
    let _stalled = Raw::hello_tcp(&h).subscriber("/stalled", "/flood", &max_queue_length(16));
    let mut healthy =
        Raw::hello_tcp(&h).subscriber("/healthy", "/flood", &max_queue_length(100_000));
    let mut publisher = Raw::hello_tcp(&h).publisher("/flooder");
    // 40 MB through a subscriber that never reads: far more than socket buffers hold.
    let n = 10_000;
    let batch = publish_frame(1, &event("/flooder", "/flood", vec![1u8; 4096])).repeat(100);
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
    let listing = Raw::hello_tcp(&h).list();
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
fn events_beyond_the_deferred_limit_are_refused_with_limit_reached() {
    let h = start_tcp(Limits {
        max_deferred_events: 2,
        ..Limits::default()
    });
    let mut publisher = Raw::hello_tcp(&h).publisher("/defer/pub");
    let an_hour = std::time::SystemTime::now() + Duration::from_secs(3600);
    let mut ev = event("/defer/pub", "/defer/x", &b"held"[..]);
    ev.header.start_time_ns = Some(
        an_hour
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64,
    );
    let buf = publish_frame(1, &ev);
    for _ in 0..3 {
        publisher.send_bytes(&buf);
    }
    publisher.expect_error(ErrorCode::LimitReached, "start time");
    publisher.expect_alive();
}

#[test]
fn admin_request_that_is_not_json_is_refused_and_the_connection_carries_on() {
    let h = start_tcp(Limits::default());
    let mut a = Raw::hello_tcp(&h);
    a.send(&Frame::Admin {
        req: 4,
        body: "{\"op\":\"explode\"}".into(),
    });
    a.expect_error(ErrorCode::BadRequest, "explode");
    a.expect_alive();
}

#[test]
fn every_admin_request_refuses_an_unknown_key_naming_it() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h).subscriber("/keys", "/keys/**", &[]);
    for mut request in [
        json!({"op": "list"}),
        json!({"op": "list", "after": "connections:1", "limit": 5}),
        json!({"op": "filter_list"}),
        json!({"op": "filter_list", "after": 1, "limit": 5}),
        json!({"op": "filter_add", "endpoint": "/keys", "filter": "true"}),
        json!({"op": "filter_add", "endpoint": "/keys", "level": "channel", "map": "map priority=1"}),
        json!({"op": "filter_remove", "id": 1}),
        json!({"op": "filter_op", "endpoint": "/keys", "interfilter": "or"}),
    ] {
        request["colour"] = json!("blue");
        match c.try_admin(&request) {
            Frame::Error { code, message, .. } => {
                assert_eq!(code, ErrorCode::BadRequest, "{request}: {message}");
                assert!(
                    message.contains("unknown field `colour`"),
                    "{request}: {message}"
                );
            }
            other => panic!("{request} should be refused, got {other:?}"),
        }
    }
    c.expect_alive();
}

#[test]
fn an_admin_request_that_is_not_a_json_object_is_refused() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    // serde would read these as `list` and `filter_remove` (a tagged enum
    // also accepts a sequence: the tag, then the fields in order).
    for body in [r#"["list"]"#, r#" ["filter_remove", 1]"#, r#""list""#, "1"] {
        match c.request(|req| Frame::Admin {
            req,
            body: body.into(),
        }) {
            Frame::Error { code, message, .. } => {
                assert_eq!(code, ErrorCode::BadRequest, "{body}: {message}");
                assert!(message.contains("JSON object"), "{body}: {message}");
            }
            other => panic!("{body} should be refused, got {other:?}"),
        }
    }
    let spaced = " \n\t{\"op\": \"filter_list\"}";
    assert!(matches!(
        c.request(|req| Frame::Admin {
            req,
            body: spaced.into()
        }),
        Frame::AdminReply { .. }
    ));
    c.expect_alive();
}

#[test]
fn connections_over_the_limit_are_refused_with_limit_reached() {
    let h = start_tcp(Limits {
        max_connections: 1,
        ..Limits::default()
    });
    let mut first = Raw::hello_tcp(&h);
    // The limit counts established connections: refused at its Hello.
    let mut second = Raw::connect_tcp(&h);
    second.send(&Frame::Hello {
        // Version 2: a bearer token, still served.
        version: 2,
        max_frame: 1 << 20,
        name: "second".into(),
        token: owner_token(&h),
        proof: None,
        session: [0; 16],
    });
    second.expect_error(ErrorCode::LimitReached, "connection limit");
    second.expect_closed();
    first.expect_alive();
}

fn max_queue_length(n: usize) -> Vec<(String, String)> {
    vec![("max_queue_length".into(), n.to_string())]
}

#[test]
fn a_shared_memory_reference_of_the_wrong_length_is_malformed() {
    // docs/protocol.md, "ShmRegion": a reference of another length than 24
    // bytes is `Malformed` (it was answered `BadRequest`).
    let h = start_tcp(Limits::default());
    let mut bad = Raw::hello(&h);
    bad.declare(1, EndpointKind::Publisher, "/shmref");
    // The encoder refuses such an event: mark the reference by hand
    // (presence bit 0x80, SHM_REF).
    let ev = event("/shmref", "/shm/x", vec![0u8; 5]);
    let mut frame = publish_frame(1, &ev);
    let presence = 9 + 2 + "/shm/x".len() + 1 + "/shmref".len() + 8 + 8 + 1;
    frame[presence] |= 0x80;
    bad.send_bytes(&frame);
    bad.expect_error(ErrorCode::Malformed, "shared-memory reference length");
    assert_router_serves(&h);
}
