//! Behaviours `docs/protocol.md` promises a client written from it alone,
//! checked with the raw client: mapping filters and QoS properties given
//! twice, the answer to an invalid pattern, the error for publishing on a
//! subscriber endpoint, an admin request with request id 0, one delivery
//! per matching subscription, the `Close` of a shutdown, deliveries within
//! the subscriber's frame limit, the answer to a long `Hello` of an unknown
//! version, a client's own `Error` frame, and the application's flags
//! (issue 24 item 12: the documented `publish_full_event` vector, a
//! version-1 publisher's flag `0x0001`).

mod common;
#[path = "../../tagwire-proto/tests/common/mod.rs"]
mod doc_vectors;

use bytes::{BufMut, Bytes, BytesMut};
use common::{event, start, start_tcp, Raw};
use serde_json::json;
use tagwire_proto::{kind, EndpointKind, ErrorCode, Event, EventRef, Frame, MAGIC};
use tagwire_router::Limits;

fn qos(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The next `Deliver`: its subscription id and event bytes.
fn next_delivery(c: &mut Raw) -> (u32, Bytes) {
    loop {
        match c.recv_raw() {
            Some((kind::DELIVER, body)) => {
                let sub = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
                return (sub, body.slice(4..));
            }
            Some(_) => continue,
            None => panic!("connection ended before a Deliver"),
        }
    }
}

/// A `Publish` frame of `event` (raw event bytes) on endpoint `endpoint`.
fn publish_raw(endpoint: u32, event: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u32_le(1 + 4 + event.len() as u32);
    b.put_u8(kind::PUBLISH);
    b.put_u32_le(endpoint);
    b.put_slice(event);
    b
}

#[test]
fn a_mapped_subscription_gets_a_re_encoded_copy_and_the_others_the_published_bytes() {
    let h = start(Limits::default());
    let mut s = Raw::hello(&h);
    s.declare(1, EndpointKind::Subscriber, "/map/plain");
    s.declare(2, EndpointKind::Subscriber, "/map/mapped");
    s.subscribe(1, 1, "/map/**", &[]);
    s.subscribe(2, 2, "/map/**", &qos(&[("map", "map priority=high")]));
    let mut p = Raw::hello(&h).publisher("/map/pub");
    // An event whose flags part is present but holds its default (0): a
    // decoder accepts it, an encoder never writes it.
    let mut ev = event("/map/pub", "/map/x", Bytes::new());
    ev.header.priority = 5;
    ev.header.virtual_time = Some(42);
    let mut published = BytesMut::new();
    ev.encode(&mut published).expect("encode");
    let presence = 2 + "/map/x".len() + 1 + "/map/pub".len() + 8 + 8 + 1;
    published[presence] |= 0x40;
    published.put_u16_le(0);
    p.send_bytes(&publish_raw(1, &published));

    let mut got = [next_delivery(&mut s), next_delivery(&mut s)];
    got.sort_by_key(|(sub, _)| *sub);
    let [(1, plain), (2, mapped)] = got else {
        panic!("expected one delivery per subscription, got {got:?}");
    };
    assert_eq!(
        plain, published,
        "an unmapped subscription gets the published bytes"
    );
    let mut want = Event::decode(&published.clone().freeze()).expect("decodes");
    want.header.priority = 128;
    let mut canonical = BytesMut::new();
    want.encode(&mut canonical).expect("encode");
    assert_eq!(
        mapped, canonical,
        "a mapped copy is re-encoded by an encoder"
    );
    assert_eq!(
        mapped.len(),
        published.len() - 2,
        "the empty flags part is gone"
    );
    assert_eq!(EventRef::parse(&mapped).expect("parses").priority, 128);
}

#[test]
fn a_second_map_property_is_refused_and_other_properties_take_their_last_value() {
    let h = start(Limits::default());
    let mut c = Raw::hello(&h);
    c.declare(1, EndpointKind::Subscriber, "/twice");
    let two_maps = qos(&[("map", "map priority=high"), ("map", "map priority=low")]);
    match c.try_subscribe(1, 1, "/twice/a", &two_maps) {
        Frame::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::InvalidFilter, "{message}");
            assert_eq!(message, "at most one `map` property per subscription");
        }
        other => panic!("expected InvalidFilter, got {other:?}"),
    }
    // Not made: the subscription id is still free.
    let last_wins = qos(&[
        ("discard", "reject"),
        ("max_queue_length", "8"),
        ("discard", "drop_newest"),
        ("max_queue_length", "16"),
    ]);
    c.subscribe(1, 1, "/twice/b", &last_wins);
    let listing = c.list();
    let [sub] = &listing.subscriptions[..] else {
        panic!("one subscription, got {:?}", listing.subscriptions);
    };
    assert_eq!((sub.discard.as_str(), sub.queue_bound), ("drop_newest", 16));
}

#[test]
fn an_invalid_pattern_is_answered_with_the_error_vector_of_the_protocol_document() {
    let vector = doc_vectors::doc_vectors()
        .into_iter()
        .find(|v| v.name == "error")
        .expect("docs/protocol.md has the vector `error`");
    let h = start(Limits::default());
    let mut c = Raw::hello(&h);
    c.declare(1, EndpointKind::Subscriber, "/vec");
    c.send(&Frame::Subscribe {
        req: 3,
        sub: 1,
        endpoint: 1,
        pattern: "/a/**b".into(),
        qos: vec![],
    });
    let (kind, body) = c.recv_raw().expect("an answer");
    let mut frame = BytesMut::new();
    frame.put_u32_le(1 + body.len() as u32);
    frame.put_u8(kind);
    frame.put_slice(&body);
    assert_eq!(
        &frame[..],
        &vector.bytes[..],
        "{:?}",
        Frame::decode(kind, body)
    );
}

#[test]
fn publishing_on_a_subscriber_endpoint_is_refused_with_unknown_endpoint() {
    let h = start(Limits::default());
    let mut c = Raw::hello(&h).subscriber("/wrong/kind", "/wrong/**", &[]);
    c.publish(1, "/wrong/kind", "/wrong/x", "hi");
    match c.recv_control() {
        Some(Frame::Error { req, code, message }) => {
            assert_eq!((req, code), (0, ErrorCode::UnknownEndpoint), "{message}");
            assert_eq!(
                message,
                "publish on endpoint id 1, which this connection has not declared as a publisher"
            );
        }
        other => panic!("expected UnknownEndpoint, got {other:?}"),
    }
    c.expect_alive();
    assert_eq!(c.list().tags.len(), 0, "nothing was published");
}

#[test]
fn an_admin_request_with_id_0_still_gets_its_reply_with_id_0() {
    let h = start(Limits::default());
    let mut c = Raw::hello(&h);
    c.send(&Frame::Admin {
        req: 0,
        body: json!({"op": "filter_list"}).to_string(),
    });
    match c.recv_control() {
        Some(Frame::AdminReply { req: 0, body }) => {
            let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(v, json!({"filters": []}));
        }
        other => panic!("expected an AdminReply with request id 0, got {other:?}"),
    }
    c.send(&Frame::Admin {
        req: 0,
        body: json!({"op": "filter_remove", "id": 7}).to_string(),
    });
    match c.recv_control() {
        Some(Frame::Error { req: 0, code, .. }) => assert_eq!(code, ErrorCode::BadRequest),
        other => panic!("expected an Error with request id 0, got {other:?}"),
    }
}

#[test]
fn an_endpoint_with_two_matching_subscriptions_gets_the_event_twice() {
    let h = start(Limits::default());
    let mut s = Raw::hello(&h);
    s.declare(1, EndpointKind::Subscriber, "/both");
    s.subscribe(10, 1, "/two/*", &[]);
    s.subscribe(11, 1, "/two/**", &[]);
    let mut p = Raw::hello(&h).publisher("/two/pub");
    let ev = event("/two/pub", "/two/x", "once");
    p.publish_event(1, &ev);
    let mut got = [next_delivery(&mut s), next_delivery(&mut s)];
    got.sort_by_key(|(sub, _)| *sub);
    let mut published = BytesMut::new();
    ev.encode(&mut published).expect("encode");
    assert_eq!([got[0].0, got[1].0], [10, 11]);
    assert!(got.iter().all(|(_, e)| *e == published));
    // And no third copy: the next frame is the answer to a Ping.
    s.expect_alive();
}

#[test]
fn shutdown_sends_close_with_code_16_shutting_down() {
    let h = start(Limits::default());
    let mut c = Raw::hello(&h);
    c.expect_alive();
    h.shutdown();
    assert_eq!(
        c.recv_control(),
        Some(Frame::Close {
            code: ErrorCode::ShuttingDown.code(),
            reason: "server shutting down".into(),
        })
    );
    assert_eq!(ErrorCode::ShuttingDown.code(), 16);
    assert_eq!(c.recv(), None, "the socket closes after the Close");
}

#[test]
fn no_delivery_is_longer_than_the_frame_limit_the_subscriber_negotiated() {
    let h = start_tcp(Limits::default());
    let mut small = Raw::hello_tcp_with(&h, 4096).subscriber("/conf/small", "/conf/**", &[]);
    let mut big = Raw::hello_tcp(&h).subscriber("/conf/big", "/conf/**", &[]);
    let mut publisher = Raw::hello_tcp(&h).publisher("/conf/pub");
    publisher.publish_event(1, &event("/conf/pub", "/conf/a", vec![7u8; 8000]));
    publisher.publish_event(1, &event("/conf/pub", "/conf/a", b"small".to_vec()));
    // The large subscriber gets both; the 4096-byte one only the small
    // event (its decoder refuses anything over 4096, so a longer frame
    // would fail this read).
    for want in [8000usize, 5] {
        match big.recv() {
            Some(Frame::Deliver { event, .. }) => assert_eq!(
                tagwire_proto::EventRef::parse(&event)
                    .expect("event")
                    .payload
                    .len(),
                want
            ),
            other => panic!("expected a delivery, got {other:?}"),
        }
    }
    // The 4096-byte subscriber (protocol version 5) gets the large event in
    // pieces, every frame within its limit (its decoder refuses anything
    // longer, so a longer frame would fail these reads), then the small one.
    let mut pieced = 0u64;
    loop {
        match small.recv() {
            Some(Frame::DeliverPiece { of, data, .. }) => {
                assert_eq!(of.offset, pieced, "pieces in order");
                pieced += data.len() as u64;
            }
            Some(Frame::Deliver { event, .. }) => {
                assert!(
                    pieced > 8000,
                    "the large event, whole, before ({pieced} bytes)"
                );
                assert_eq!(
                    tagwire_proto::EventRef::parse(&event)
                        .expect("event")
                        .payload,
                    b"small"
                );
                break;
            }
            other => panic!("expected pieces then the small delivery, got {other:?}"),
        }
    }
}

#[test]
fn a_long_hello_of_an_unknown_version_is_told_the_version_not_the_length() {
    let h = start_tcp(Limits::default());
    let mut r = Raw::connect_tcp(&h);
    // Version 9 with 8 KiB of extension bytes: longer than the 4,096 bytes
    // accepted before the handshake.
    let len: u32 = 1 + 4 + 2 + 8192;
    let mut bytes = len.to_le_bytes().to_vec();
    bytes.push(kind::HELLO);
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&9u16.to_le_bytes());
    r.send_bytes(&bytes);
    r.expect_error(ErrorCode::UnsupportedVersion, "version 9");
    r.expect_closed();
    // The same length at a supported version is refused for its length.
    let mut r = Raw::connect_tcp(&h);
    let mut bytes = len.to_le_bytes().to_vec();
    bytes.push(kind::HELLO);
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&2u16.to_le_bytes());
    r.send_bytes(&bytes);
    r.expect_error(ErrorCode::FrameTooLarge, "before the handshake");
}

#[test]
fn a_clients_error_frame_is_accepted_and_not_answered() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    c.send(&Frame::Error {
        req: 0,
        code: ErrorCode::Internal,
        message: "the client had trouble".into(),
    });
    // The next thing the client hears is the Pong to its Ping: no Error
    // came back for the Error it sent.
    c.expect_alive();
}

/// Issue 24 item 12: docs/protocol.md's own valid vector `publish_full_event`
/// (flags `0x0003`) was refused (`Malformed`: bit `0x0001` meant "the
/// payload is a shared-memory reference"). Published byte for byte, it is
/// delivered byte for byte.
#[test]
fn the_documented_publish_full_event_vector_is_delivered_as_published() {
    let vector = doc_vectors::doc_vectors()
        .into_iter()
        .find(|v| v.name == "publish_full_event")
        .expect("docs/protocol.md has the vector `publish_full_event`");
    let h = start(Limits::default());
    let mut s = Raw::hello(&h).subscriber("/full/sub", "/cam/**", &[]);
    // The vector publishes on endpoint 1 as publisher `cam-left`.
    let mut p = Raw::hello(&h).publisher("cam-left");
    p.send_bytes(&vector.bytes);
    p.expect_alive();
    let published = &vector.bytes[9..];
    let (sub, delivered) = next_delivery(&mut s);
    assert_eq!(sub, 1);
    assert_eq!(
        &delivered[..],
        published,
        "the vector's event, delivered as published"
    );
    let ev = EventRef::parse(&delivered).expect("parses");
    assert_eq!((ev.flags, ev.payload), (0x0003, &b"hi"[..]));
}

/// Issue 24 item 12: version 1 documented every flag bit as carried
/// through; a version-1 publisher that set `0x0001` was refused. Its event
/// reaches a version-1 subscriber and a current one, flag and payload intact.
#[test]
fn a_version_1_publishers_flag_0x0001_is_delivered_intact() {
    let h = start(Limits::default());
    let mut v1_sub = Raw::hello_v1(&h).subscriber("/v1/sub", "/v1/**", &[]);
    let mut v3_sub = Raw::hello(&h).subscriber("/v3/sub", "/v1/**", &[]);
    let mut p = Raw::hello_v1(&h).publisher("/v1/pub");
    let mut ev = event("/v1/pub", "/v1/flagged", Bytes::from_static(b"inline"));
    ev.header.flags = 0x0001;
    p.publish_event(1, &ev);
    p.expect_alive();
    let mut want = BytesMut::new();
    ev.encode(&mut want).expect("encode");
    for (who, s) in [("version 1", &mut v1_sub), ("version 3", &mut v3_sub)] {
        let (_, got) = next_delivery(s);
        assert_eq!(got, want, "{who} subscriber: the event as published");
        let got = Event::decode(&got).expect("decodes");
        assert_eq!(got.header.flags, 0x0001, "{who} subscriber: the flag");
        assert_eq!(&got.payload[..], b"inline", "{who} subscriber: the payload");
    }
}
