//! Protocol conformance at the daemon, as docs/protocol.md states it: the
//! cases a client written from the document alone ran into (issue 13).

mod common;

use common::{event, start_tcp, wait_for, Raw};
use tagwire_proto::{kind, ErrorCode, Frame, MAGIC};
use tagwire_router::Limits;

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
    match small.recv() {
        Some(Frame::Deliver { event, .. }) => assert_eq!(
            tagwire_proto::EventRef::parse(&event)
                .expect("event")
                .payload,
            b"small"
        ),
        other => panic!("expected the small delivery, got {other:?}"),
    }
    // The drop is counted where an operator looks.
    let mut admin = Raw::hello_tcp(&h);
    wait_for(&mut admin, "the too-large drop to be counted", |l| {
        l.subscriptions
            .iter()
            .any(|s| s.endpoint == "/conf/small" && s.too_large == 1)
    });
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
