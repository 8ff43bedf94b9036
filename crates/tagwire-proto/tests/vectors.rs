//! The hex test vectors of `docs/protocol.md`: each valid vector decodes to
//! the frame written here and re-encodes byte for byte; each invalid vector is
//! refused with the error written here; no vector goes unchecked.

mod common;

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use common::{doc_vectors, parse_vectors, seed_corpus, Vector};
use tagwire_proto::handshake::{client_proof, server_proof};
use tagwire_proto::limits::MIN_MAX_FRAME;
use tagwire_proto::{
    DecodeError, EndpointKind, ErrorCode, Event, EventRef, Expiry, Frame, FrameDecoder, Interest,
    LinkFrame, Origins, ProxyAt, Pull, PullOutcome, PullQuery, PullReply, PullStatus, StreamError,
    TokenTag, Value,
};

const TS: u64 = 1_700_000_000_000_000_000;

/// The token, client nonce and server nonce of the token-proof vectors.
const PROOF_TOKEN: &str = "0123456789abcdef";
const NC: [u8; 32] = {
    let mut n = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        n[i] = i as u8;
        i += 1;
    }
    n
};
const NS: [u8; 32] = {
    let mut n = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        n[i] = 32 + i as u8;
        i += 1;
    }
    n
};

fn minimal_event() -> Event {
    let mut e = Event::new("/cam/left", Bytes::from_static(b"hi"));
    e.header.publisher = "cam-left".into();
    e.header.seq = 1;
    e.header.source_time_ns = TS;
    e.header.priority = 5;
    e
}

fn full_event() -> Event {
    let mut e = minimal_event();
    let h = &mut e.header;
    h.seq = 2;
    h.priority = 200;
    h.virtual_time = Some(42);
    // Long enough that a daemon delivers the vector (a test publishes it).
    h.expiry = Expiry::AfterNs(4_000_000_000_000_000_000);
    h.start_time_ns = Some(TS);
    h.type_name = Some("Alarm".into());
    h.event_name = Some("lost".into());
    h.flags = 0x0003;
    e.fields = vec![
        ("n".into(), Value::Int(-2)),
        ("x".into(), Value::Float(1.5)),
        ("ok".into(), Value::Bool(true)),
        ("s".into(), Value::Str("hé".into())),
        ("b".into(), Value::Bytes(Bytes::from_static(&[0x00, 0xff]))),
    ];
    e
}

fn expiry_at_event() -> Event {
    let mut e = Event::new("/t", Bytes::new());
    e.header.publisher = "p".into();
    e.header.expiry = Expiry::AtNs(TS);
    e
}

/// `/t` from `p` with the application's flag `0x0001` (what a version-1
/// publisher may set) and payload `hi`.
fn app_flag_event() -> Event {
    let mut e = Event::new("/t", Bytes::from_static(b"hi"));
    e.header.publisher = "p".into();
    e.header.flags = 0x0001;
    e
}

/// `/t` from `p` whose payload is a shared-memory reference (presence bit
/// 0x80): region 7, packet 3, 2 bytes, chunk 0 (as published).
fn shm_ref_event() -> Event {
    let r = tagwire_proto::ShmRef {
        region: 7,
        seq: 3,
        len: 2,
        chunk: 0,
    };
    let mut e = Event::new("/t", Bytes::copy_from_slice(&r.encode()));
    e.header.publisher = "p".into();
    e.header.payload_in_shm = true;
    e
}

fn encoded(e: &Event) -> Bytes {
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("test event encodes");
    b.freeze()
}

/// What each valid vector decodes to, and the event it carries, if any.
fn valid_vectors() -> Vec<(&'static str, Frame, Option<Event>)> {
    let s = |x: &str| x.to_owned();
    vec![
        (
            "hello",
            Frame::Hello {
                version: 1,
                max_frame: 1 << 20,
                name: s("cli"),
                token: String::new(),
                proof: None,
                session: [0; 16],
            },
            None,
        ),
        (
            "hello_v2",
            Frame::Hello {
                version: 2,
                max_frame: 1 << 20,
                name: s("cli"),
                token: s("0123456789abcdef"),
                proof: None,
                session: [
                    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
                    0xdd, 0xee, 0xff,
                ],
            },
            None,
        ),
        (
            "hello_v3",
            Frame::Hello {
                version: 3,
                max_frame: 1 << 20,
                name: s("cli"),
                token: String::new(),
                proof: Some(Box::new(TokenTag::new(PROOF_TOKEN, NC))),
                session: [
                    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
                    0xdd, 0xee, 0xff,
                ],
            },
            None,
        ),
        (
            "challenge",
            Frame::Challenge {
                nonce: NS,
                proof: server_proof(PROOF_TOKEN, &NC, &NS),
            },
            None,
        ),
        (
            "proof",
            Frame::Proof {
                proof: client_proof(PROOF_TOKEN, &NC, &NS),
            },
            None,
        ),
        (
            "welcome",
            Frame::Welcome {
                version: 1,
                max_frame: 1 << 20,
                name: s("tagwired"),
            },
            None,
        ),
        (
            "declare_endpoint_publisher",
            Frame::DeclareEndpoint {
                req: 1,
                id: 1,
                kind: EndpointKind::Publisher,
                name: s("cam-left"),
            },
            None,
        ),
        (
            "declare_endpoint_subscriber",
            Frame::DeclareEndpoint {
                req: 2,
                id: 2,
                kind: EndpointKind::Subscriber,
                name: s("viewer"),
            },
            None,
        ),
        (
            "undeclare_endpoint",
            Frame::UndeclareEndpoint { req: 6, id: 1 },
            None,
        ),
        (
            "subscribe",
            Frame::Subscribe {
                req: 3,
                sub: 7,
                endpoint: 2,
                pattern: s("/cam/*"),
                qos: vec![
                    (s("discard"), s("drop_newest")),
                    (s("max_queue_length"), s("64")),
                ],
            },
            None,
        ),
        (
            "subscribe_no_qos",
            Frame::Subscribe {
                req: 4,
                sub: 8,
                endpoint: 2,
                pattern: s("/cam/**"),
                qos: vec![],
            },
            None,
        ),
        ("unsubscribe", Frame::Unsubscribe { req: 5, sub: 7 }, None),
        (
            "publish_minimal",
            Frame::Publish {
                endpoint: 1,
                event: encoded(&minimal_event()),
            },
            Some(minimal_event()),
        ),
        (
            "publish_full_event",
            Frame::Publish {
                endpoint: 1,
                event: encoded(&full_event()),
            },
            Some(full_event()),
        ),
        (
            "publish_expiry_at",
            Frame::Publish {
                endpoint: 1,
                event: encoded(&expiry_at_event()),
            },
            Some(expiry_at_event()),
        ),
        (
            "publish_app_flag",
            Frame::Publish {
                endpoint: 1,
                event: encoded(&app_flag_event()),
            },
            Some(app_flag_event()),
        ),
        (
            "publish_shm_ref",
            Frame::Publish {
                endpoint: 1,
                event: encoded(&shm_ref_event()),
            },
            Some(shm_ref_event()),
        ),
        (
            "deliver",
            Frame::Deliver {
                sub: 7,
                event: encoded(&minimal_event()),
            },
            Some(minimal_event()),
        ),
        (
            "hello_v4",
            Frame::Hello {
                version: 4,
                max_frame: 1 << 20,
                name: s("cli"),
                token: String::new(),
                proof: None,
                session: [
                    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
                    0xdd, 0xee, 0xff,
                ],
            },
            None,
        ),
        (
            "publish_reliable",
            Frame::PublishReliable {
                endpoint: 1,
                seq: 3,
                event: encoded(&minimal_event()),
            },
            Some(minimal_event()),
        ),
        (
            "publish_ack",
            Frame::PublishAck(tagwire_proto::Ack {
                done: 2,
                ranges: vec![tagwire_proto::AckRange {
                    first: 4,
                    last: 4,
                    failed: false,
                }],
            }),
            None,
        ),
        (
            "deliver_reliable",
            Frame::DeliverReliable {
                sub: 1,
                seq: 3,
                event: encoded(&minimal_event()),
            },
            Some(minimal_event()),
        ),
        (
            "deliver_ack",
            Frame::DeliverAck {
                sub: 1,
                ack: tagwire_proto::Ack {
                    done: 2,
                    ranges: vec![],
                },
            },
            None,
        ),
        (
            "publish_piece",
            Frame::PublishPiece {
                endpoint: 1,
                seq: 2,
                of: tagwire_proto::PieceOf {
                    id: 0x11,
                    total: 5,
                    checksum: 0x3610_a686,
                    offset: 3,
                },
                data: Bytes::from_static(b"lo"),
            },
            None,
        ),
        (
            "deliver_piece",
            Frame::DeliverPiece {
                sub: 1,
                of: tagwire_proto::PieceOf {
                    id: 0x11,
                    total: 5,
                    checksum: 0x3610_a686,
                    offset: 0,
                },
                data: Bytes::from_static(b"hel"),
            },
            None,
        ),
        (
            "deliver_reliable_piece",
            Frame::DeliverReliablePiece {
                sub: 1,
                seq: 2,
                of: tagwire_proto::PieceOf {
                    id: 2,
                    total: 5,
                    checksum: 0x3610_a686,
                    offset: 3,
                },
                data: Bytes::from_static(b"lo"),
            },
            None,
        ),
        ("healed", Frame::Healed { daemons: 3 }, None),
        (
            "piece_resume",
            Frame::PieceResume {
                endpoint: 1,
                id: 0x11,
                have: 3,
            },
            None,
        ),
        ("ok", Frame::Ok { req: 3 }, None),
        (
            "error",
            Frame::Error {
                req: 3,
                code: ErrorCode::InvalidPattern,
                // What the router answers to a Subscribe of "/a/**b".
                message: s(
                    r#"pattern "/a/**b": invalid wildcard in level "**b" (a level is '*', '**' or has no '*')"#,
                ),
            },
            None,
        ),
        (
            "error_permission_denied",
            Frame::Error {
                req: 0,
                code: ErrorCode::PermissionDenied,
                message: s("may not publish on /b"),
            },
            None,
        ),
        (
            "ping",
            Frame::Ping {
                nonce: 0x0807_0605_0403_0201,
            },
            None,
        ),
        (
            "pong",
            Frame::Pong {
                nonce: 0x0807_0605_0403_0201,
            },
            None,
        ),
        (
            "close",
            Frame::Close {
                code: 0,
                reason: s("bye"),
            },
            None,
        ),
        (
            "admin",
            Frame::Admin {
                req: 9,
                body: s("{}"),
            },
            None,
        ),
        (
            "admin_reply",
            Frame::AdminReply {
                req: 9,
                body: s("{\"ok\":true}"),
            },
            None,
        ),
        (
            "pull_latest",
            Frame::Pull(Pull {
                req: 3,
                node: s(""),
                publisher: s(""),
                tag: s("/cam/left"),
                query: PullQuery::Latest,
            }),
            None,
        ),
        (
            "pull_seq_range",
            Frame::Pull(Pull {
                req: 4,
                node: s(""),
                publisher: s("cam-left"),
                tag: s("/cam/left"),
                query: PullQuery::SeqRange { first: 1, last: 2 },
            }),
            None,
        ),
        (
            "pull_time_range",
            Frame::Pull(Pull {
                req: 5,
                node: s("edge"),
                publisher: s(""),
                tag: s("/t"),
                query: PullQuery::TimeRange {
                    from_ns: TS,
                    to_ns: TS + 1000,
                    from_seq: 0,
                },
            }),
            None,
        ),
        (
            "pull_stored",
            Frame::Pull(Pull {
                req: 6,
                node: s(""),
                publisher: s(""),
                tag: s("/t"),
                query: PullQuery::Stored {
                    from_pos: 3,
                    from_seq: 0,
                    from_ns: 0,
                    origins: Origins::all(),
                },
            }),
            None,
        ),
        (
            "pull_stored_origin",
            Frame::Pull(Pull {
                req: 7,
                node: s("edge"),
                publisher: s(""),
                tag: s("/t"),
                query: PullQuery::Stored {
                    from_pos: 0,
                    from_seq: 0,
                    from_ns: 0,
                    origins: Origins::Only(0x3a75_2460_2c72_007c),
                },
            }),
            None,
        ),
        (
            "pull_reply_events",
            Frame::PullReply(PullReply {
                req: 3,
                status: PullStatus::Complete,
                oldest: 1,
                newest: 1,
                held: 1,
                events: vec![encoded(&minimal_event())],
            }),
            None,
        ),
        (
            "pull_reply_gone",
            Frame::PullReply(PullReply {
                req: 4,
                status: PullStatus::Gone,
                oldest: 7,
                newest: 10,
                held: 4,
                events: vec![],
            }),
            None,
        ),
        (
            "shm_region",
            Frame::ShmRegion {
                region: 7,
                role: tagwire_proto::ShmRole::Consumer,
                endpoint: 0,
            },
            None,
        ),
    ]
}

/// What each link-frame vector decodes to.
fn link_vectors() -> Vec<(&'static str, LinkFrame)> {
    vec![
        (
            "link_peer",
            LinkFrame::Peer {
                version: 2,
                node: 0x0102_0304_0506_0708,
                name: "a".into(),
                cluster: "tagwire".into(),
                band: "normal".into(),
                bands: vec![("high".into(), 7703)],
                udp_bands: vec![],
            },
        ),
        (
            "link_peer_udp",
            LinkFrame::Peer {
                version: 6,
                node: 0x0102_0304_0506_0708,
                name: "b".into(),
                cluster: "tagwire".into(),
                band: "normal".into(),
                bands: vec![("high".into(), 7703)],
                udp_bands: vec![("normal".into(), 7710), ("high".into(), 40001)],
            },
        ),
        (
            "link_advert",
            LinkFrame::Advert {
                origin: 1,
                version: 3,
                name: "b".into(),
                neighbors: vec![2],
                interest: vec![Interest {
                    pattern: "/a/**".into(),
                    filter: String::new(),
                    scale: 4,
                    proxy: ProxyAt::Node("m".into()),
                }],
            },
        ),
        (
            "link_forward",
            LinkFrame::Forward {
                origin: 0x0102_0304_0506_0708,
                hops: 2,
                event: Bytes::from_static(&[0xde, 0xad]),
            },
        ),
        (
            "link_time_reply",
            LinkFrame::TimeReply {
                id: 7,
                t1: 1,
                t2: 2,
                t3: 3,
            },
        ),
        (
            "link_pull_request",
            LinkFrame::PullRequest {
                id: 9,
                target: 2,
                hops: 0,
                max_reply: 65_536,
                pull: Pull {
                    req: 0,
                    node: "b".into(),
                    publisher: String::new(),
                    tag: "/a".into(),
                    query: PullQuery::Latest,
                },
            },
        ),
        (
            "link_pull_refused",
            LinkFrame::PullAnswer {
                id: 9,
                outcome: PullOutcome::Refused {
                    code: ErrorCode::NoHistory,
                    message: "none".into(),
                },
            },
        ),
        (
            "link_reliable",
            LinkFrame::Reliable {
                seq: 5,
                origin: 0x0102_0304_0506_0708,
                hops: 1,
                event: Bytes::from_static(&[0xde, 0xad]),
            },
        ),
        (
            "link_reliable_to",
            LinkFrame::ReliableTo {
                seq: 5,
                origin: 0x0102_0304_0506_0708,
                hops: 1,
                to: 0x1112_1314_1516_1718,
                event: Bytes::from_static(&[0xde, 0xad]),
            },
        ),
        (
            "link_fragment",
            LinkFrame::Fragment {
                id: 0x11,
                total: 5,
                checksum: 0x3610_a686,
                offset: 3,
                of: tagwire_proto::FragmentOf::Reliable {
                    seq: 5,
                    origin: 0x0102_0304_0506_0708,
                    hops: 1,
                },
                data: Bytes::from_static(b"lo"),
            },
        ),
        (
            "link_forward_compressed",
            LinkFrame::Compressed {
                of: tagwire_proto::FragmentOf::Forward {
                    origin: 0x0102_0304_0506_0708,
                    hops: 1,
                },
                codec: tagwire_proto::Codec::Lz4,
                raw_len: 5,
                data: Bytes::from_static(b"\x50hello"),
            },
        ),
        (
            "link_reliable_compressed",
            LinkFrame::Compressed {
                of: tagwire_proto::FragmentOf::Reliable {
                    seq: 5,
                    origin: 0x0102_0304_0506_0708,
                    hops: 1,
                },
                codec: tagwire_proto::Codec::Lz4,
                raw_len: 5,
                data: Bytes::from_static(b"\x50hello"),
            },
        ),
        (
            "link_fragment_compressed",
            LinkFrame::FragmentCompressed {
                id: 0x11,
                total: 5,
                checksum: 0x3610_a686,
                offset: 0,
                of: tagwire_proto::FragmentOf::Reliable {
                    seq: 5,
                    origin: 0x0102_0304_0506_0708,
                    hops: 1,
                },
                codec: tagwire_proto::Codec::Lz4,
                raw_len: 5,
                data: Bytes::from_static(b"\x50hello"),
            },
        ),
        (
            "link_fragment_resume",
            LinkFrame::FragmentResume {
                id: 0x11,
                total: 5,
                checksum: 0x3610_a686,
                have: 3,
            },
        ),
        (
            "link_ack",
            LinkFrame::Ack(tagwire_proto::Ack {
                done: 7,
                ranges: vec![
                    tagwire_proto::AckRange {
                        first: 9,
                        last: 10,
                        failed: false,
                    },
                    tagwire_proto::AckRange {
                        first: 12,
                        last: 12,
                        failed: true,
                    },
                ],
            }),
        ),
    ]
}

#[test]
fn link_vectors_decode_to_the_documented_frame_and_reencode_byte_exact() {
    for (name, expected) in link_vectors() {
        let v = vector(name);
        let (kind, body) = split_one(name, &v.bytes);
        assert_eq!(kind, expected.kind(), "{name}: frame type");
        let frame = LinkFrame::decode(kind, body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(frame, expected, "{name}");
        let mut out = BytesMut::new();
        expected.encode(&mut out).expect("documented frame encodes");
        assert_eq!(&out[..], &v.bytes[..], "{name}");
    }
}

/// Where an invalid vector is refused.
#[derive(Debug)]
enum Refusal {
    /// By `FrameDecoder::next_raw`.
    Stream(StreamError),
    /// By `Frame::decode`.
    Frame(DecodeError),
    /// By `EventRef::parse` of a `Publish`'s event.
    Event(DecodeError),
}

/// What each invalid vector is refused with, and the message.
fn invalid_vectors() -> Vec<(&'static str, Refusal, &'static str)> {
    use Refusal::*;
    vec![
        (
            "bad_zero_length",
            Stream(StreamError::EmptyFrame),
            "empty frame (length 0)",
        ),
        (
            "bad_length_over_limit",
            Stream(StreamError::FrameTooLarge {
                len: 4097,
                max: 4096,
            }),
            "frame of 4097 bytes exceeds the maximum of 4096",
        ),
        (
            "bad_unknown_frame_type",
            Frame(DecodeError::UnknownFrameType(0xff)),
            "unknown frame type 0xff",
        ),
        (
            "bad_magic",
            Frame(DecodeError::BadMagic(*b"HTTP")),
            "not a tagwire peer (bad magic [48, 54, 54, 50])",
        ),
        (
            "bad_hello_v2_truncated_session",
            Frame(DecodeError::Truncated {
                what: "session id",
                need: 16,
                have: 8,
            }),
            "truncated session id: need 16 bytes, have 8",
        ),
        (
            "bad_truncated_ok",
            Frame(DecodeError::Truncated {
                what: "request id",
                need: 4,
                have: 2,
            }),
            "truncated request id: need 4 bytes, have 2",
        ),
        (
            "bad_trailing_bytes",
            Frame(DecodeError::TrailingBytes {
                what: "Ping",
                count: 1,
            }),
            "1 trailing bytes after Ping",
        ),
        (
            "bad_endpoint_kind",
            Frame(DecodeError::BadValue {
                what: "endpoint kind",
                value: 3,
            }),
            "invalid endpoint kind: 3",
        ),
        (
            "bad_pull_query",
            Frame(DecodeError::BadValue {
                what: "pull query",
                value: 9,
            }),
            "invalid pull query: 9",
        ),
        (
            "bad_pull_stored_except_empty",
            Frame(DecodeError::BadValue {
                what: "origin count of an except selection (none: that is query 6)",
                value: 0,
            }),
            "invalid origin count of an except selection (none: that is query 6): 0",
        ),
        (
            "bad_pull_reply_gone_with_events",
            Frame(DecodeError::TooMany {
                what: "events in a gone reply",
                count: 1,
                max: 0,
            }),
            "1 events in a gone reply, over the limit of 0",
        ),
        (
            "bad_event_tag_not_utf8",
            Event(DecodeError::NotUtf8 { what: "tag", at: 1 }),
            "tag is not valid UTF-8 (invalid byte at offset 1)",
        ),
        (
            "bad_event_shm_ref_length",
            Event(DecodeError::BadValue {
                what: "shared-memory reference length",
                value: 2,
            }),
            "invalid shared-memory reference length: 2",
        ),
        (
            "bad_event_duplicate_field",
            Event(DecodeError::DuplicateField { name: "n".into() }),
            "duplicate field \"n\"",
        ),
        (
            "bad_event_field_type",
            Event(DecodeError::BadValue {
                what: "field type",
                value: 6,
            }),
            "invalid field type: 6",
        ),
        (
            "bad_event_expiry_kind",
            Event(DecodeError::BadValue {
                what: "expiry kind",
                value: 3,
            }),
            "invalid expiry kind: 3",
        ),
    ]
}

fn vector(name: &str) -> Vector {
    doc_vectors()
        .into_iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("docs/protocol.md has no vector {name}"))
}

/// Splits `bytes` as exactly one frame, with the limit in force before the handshake.
fn split_one(name: &str, bytes: &[u8]) -> (u8, Bytes) {
    let mut buf = BytesMut::from(bytes);
    let (kind, body) = FrameDecoder::new(MIN_MAX_FRAME)
        .next_raw(&mut buf)
        .unwrap_or_else(|e| panic!("{name}: stream error {e}"))
        .unwrap_or_else(|| panic!("{name}: incomplete frame"));
    assert!(
        buf.is_empty(),
        "{name}: {} bytes after the frame",
        buf.len()
    );
    (kind, body)
}

#[test]
fn every_doc_vector_is_checked_and_every_checked_vector_is_in_the_doc() {
    let in_doc: Vec<String> = doc_vectors().into_iter().map(|v| v.name).collect();
    let unique: BTreeSet<&String> = in_doc.iter().collect();
    assert_eq!(unique.len(), in_doc.len(), "duplicate vector titles");
    let in_doc: BTreeSet<String> = in_doc.into_iter().collect();
    let checked: BTreeSet<String> = valid_vectors()
        .iter()
        .map(|(n, ..)| n.to_string())
        .chain(link_vectors().iter().map(|(n, _)| n.to_string()))
        .chain(invalid_vectors().iter().map(|(n, ..)| n.to_string()))
        .collect();
    assert_eq!(in_doc, checked);
}

#[test]
fn valid_vectors_decode_to_the_documented_frame() {
    for (name, expected, _) in valid_vectors() {
        let v = vector(name);
        let (kind, body) = split_one(name, &v.bytes);
        assert_eq!(kind, expected.kind(), "{name}: frame type");
        let frame = Frame::decode(kind, body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(frame, expected, "{name}");
    }
}

#[test]
fn valid_vectors_reencode_byte_exact() {
    for (name, expected, _) in valid_vectors() {
        let v = vector(name);
        let mut out = BytesMut::new();
        expected.encode(&mut out).expect("documented frame encodes");
        assert_eq!(&out[..], &v.bytes[..], "{name}");
    }
}

#[test]
fn event_vectors_decode_to_the_documented_event() {
    let mut checked = 0;
    for (name, _, expected) in valid_vectors() {
        let Some(expected) = expected else { continue };
        let (kind, body) = split_one(name, &vector(name).bytes);
        let event = match Frame::decode(kind, body).expect("vector decodes") {
            Frame::Publish { event, .. }
            | Frame::Deliver { event, .. }
            | Frame::PublishReliable { event, .. }
            | Frame::DeliverReliable { event, .. } => event,
            other => panic!("{name}: not an event frame: {other:?}"),
        };
        let decoded = Event::decode(&event).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, expected, "{name}");
        // The borrowed view agrees with the owned one, field by field.
        let view = EventRef::parse(&event).expect("event parses");
        let fields: Vec<_> = view.fields().map(|(n, v)| (n, v.to_owned())).collect();
        let want: Vec<_> = expected
            .fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        assert_eq!(fields, want, "{name}: fields");
        assert_eq!(view.payload, &expected.payload[..], "{name}: payload");
        checked += 1;
    }
    assert_eq!(
        checked, 8,
        "publish_minimal, publish_full_event, publish_expiry_at, publish_app_flag, publish_shm_ref, deliver, publish_reliable, deliver_reliable"
    );
}

#[test]
fn full_event_vector_has_every_optional_part_and_field_type() {
    let e = full_event();
    let h = &e.header;
    assert!(h.virtual_time.is_some() && h.start_time_ns.is_some());
    assert!(h.type_name.is_some() && h.event_name.is_some());
    assert!(h.expiry != Expiry::Never && h.flags != 0);
    let types: BTreeSet<u8> = e
        .fields
        .iter()
        .map(|(_, v)| match v {
            Value::Int(_) => 1,
            Value::Float(_) => 2,
            Value::Bool(_) => 3,
            Value::Str(_) => 4,
            Value::Bytes(_) => 5,
        })
        .collect();
    assert_eq!(types, (1..=5).collect());
    // Byte 6 of the event after the fixed header is the presence byte: all 7
    // parts (0x80 is no part: the payload is a shared-memory reference).
    let bytes = encoded(&e);
    let presence_at = 2 + h.tag.len() + 1 + h.publisher.len() + 8 + 8 + 1;
    assert_eq!(bytes[presence_at], 0x7f);
}

#[test]
fn invalid_vectors_are_refused_with_the_documented_error() {
    for (name, refusal, message) in invalid_vectors() {
        let v = vector(name);
        let mut buf = BytesMut::from(&v.bytes[..]);
        let split = FrameDecoder::new(MIN_MAX_FRAME).next_raw(&mut buf);
        match refusal {
            Refusal::Stream(want) => {
                let got = split.expect_err(name);
                assert_eq!(got, want, "{name}");
                assert_eq!(got.to_string(), message, "{name}");
            }
            Refusal::Frame(want) => {
                let (kind, body) = split_one(name, &v.bytes);
                let got = Frame::decode(kind, body).expect_err(name);
                assert_eq!(got, want, "{name}");
                assert_eq!(got.to_string(), message, "{name}");
            }
            Refusal::Event(want) => {
                let (kind, body) = split_one(name, &v.bytes);
                let event = match Frame::decode(kind, body) {
                    Ok(Frame::Publish { event, .. }) => event,
                    other => panic!("{name}: expected a Publish frame, got {other:?}"),
                };
                let got = EventRef::parse(&event).expect_err(name);
                assert_eq!(got, want, "{name}");
                assert_eq!(got.to_string(), message, "{name}");
                assert_eq!(Event::decode(&event).expect_err(name), want, "{name}");
            }
        }
    }
}

#[test]
fn vector_parser_ignores_comments_and_whitespace() {
    let doc = "text\n```hex title=a\n01 02 # one two\n  0304\n# only a comment\n```\n";
    let v = parse_vectors(doc);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].name, "a");
    assert_eq!(v[0].bytes, vec![1, 2, 3, 4]);
}

#[test]
fn seed_corpus_session_splits_into_every_valid_vector() {
    let corpus = seed_corpus();
    let (_, session) = corpus
        .iter()
        .find(|(n, _)| n == "session-all-valid-vectors")
        .expect("session input");
    let mut buf = BytesMut::from(&session[..]);
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut frames = Vec::new();
    let mut links = Vec::new();
    while let Some((kind, body)) = dec.next_raw(&mut buf).expect("session splits") {
        if tagwire_proto::is_link_kind(kind) {
            links.push(LinkFrame::decode(kind, body).expect("valid link vector decodes"));
        } else {
            frames.push(Frame::decode(kind, body).expect("valid vector decodes"));
        }
    }
    let want_links: Vec<LinkFrame> = link_vectors().into_iter().map(|(_, f)| f).collect();
    assert_eq!(links, want_links);
    assert!(buf.is_empty());
    let want: Vec<Frame> = valid_vectors().into_iter().map(|(_, f, _)| f).collect();
    assert_eq!(frames, want);
    assert_eq!(corpus.len(), doc_vectors().len() + 1);
}

#[test]
fn the_version_2_vectors_use_the_codes_and_layout_of_version_2() {
    assert_eq!(tagwire_proto::PROTOCOL_VERSION, 7);
    assert_eq!(tagwire_proto::MIN_PROTOCOL_VERSION, 1);
    assert_eq!(ErrorCode::Unauthenticated.code(), 19);
    assert_eq!(ErrorCode::PermissionDenied.code(), 20);
    assert_eq!(ErrorCode::from_code(20), ErrorCode::PermissionDenied);
    // The v2 Hello is the v1 Hello (same name and max_frame) plus the
    // credentials: its frozen prefix is byte for byte the v1 body, version
    // aside.
    let v1 = vector("hello").bytes;
    let v2 = vector("hello_v2").bytes;
    let prefix = 5 + 4; // length, type, magic
    assert_eq!(v1[prefix..prefix + 2], [1, 0], "v1 version");
    assert_eq!(v2[prefix..prefix + 2], [2, 0], "v2 version");
    let after_version = prefix + 2;
    assert_eq!(v1[after_version..], v2[after_version..v1.len()]);
    assert_eq!(
        v2.len() - v1.len(),
        1 + 16 + tagwire_proto::SESSION_ID_LEN,
        "token (str8, 16 bytes) and session id appended"
    );
}

/// The three lines of the "Token proof" block in docs/protocol.md.
fn doc_token_proof_lines() -> Vec<(String, Vec<u8>)> {
    let doc = include_str!("../../../docs/protocol.md");
    let start = doc
        .find("\n```text\ntag ")
        .expect("docs/protocol.md has the token-proof vector");
    doc[start + 9..]
        .lines()
        .take(3)
        .map(|l| {
            let (name, hex) = l.split_at(13);
            let bytes = hex
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).expect("hex byte"))
                .collect();
            (name.trim().to_owned(), bytes)
        })
        .collect()
}

#[test]
fn the_token_proof_vector_of_the_doc_is_what_the_code_computes() {
    let lines = doc_token_proof_lines();
    let want = [
        ("tag", TokenTag::new(PROOF_TOKEN, NC).tag),
        ("server proof", server_proof(PROOF_TOKEN, &NC, &NS)),
        ("client proof", client_proof(PROOF_TOKEN, &NC, &NS)),
    ];
    assert_eq!(lines.len(), 3, "{lines:?}");
    for ((name, bytes), (want_name, want_bytes)) in lines.iter().zip(want) {
        assert_eq!(name, want_name);
        assert_eq!(bytes[..], want_bytes[..], "{name}");
    }
}

/// The `| \`0xNN\` | Name |` rows of the table under `heading` in
/// docs/protocol.md (up to the next blank line after the table).
fn frame_table(heading: &str) -> Vec<(u8, String)> {
    let doc = common::PROTOCOL_MD;
    let at = doc
        .find(heading)
        .unwrap_or_else(|| panic!("docs/protocol.md has no {heading:?}"));
    doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let code = cells.get(1)?.trim_matches('`').strip_prefix("0x")?;
            let code = u8::from_str_radix(code, 16).ok()?;
            Some((code, cells.get(2)?.to_string()))
        })
        .collect()
}

/// Issue 24 item 12: the frame-type table omitted `0x12` and left
/// `0x27`–`0x2f` undefined. Every type the tables list is the frame the
/// code names so, and every type they do not list (`0x27`–`0x2f` included)
/// is refused as an unknown frame type, naming it.
#[test]
fn the_frame_type_tables_list_exactly_the_frames_the_decoder_knows() {
    let mut listed = frame_table("## Frame types\n");
    listed.extend(frame_table("## Links between daemons\n"));
    let codes: BTreeSet<u8> = listed.iter().map(|(c, _)| *c).collect();
    assert_eq!(codes.len(), listed.len(), "a type listed twice: {listed:?}");
    assert!(codes.contains(&0x12), "ShmRegion (0x12) is listed");
    for (code, name) in &listed {
        let named = if tagwire_proto::is_link_kind(*code) {
            tagwire_proto::link_frame_name(*code)
        } else {
            tagwire_proto::frame_name(*code)
        };
        assert_eq!(named, name, "type {code:#04x}");
    }
    for code in 0..=u8::MAX {
        if codes.contains(&code) {
            continue;
        }
        let err = if tagwire_proto::is_link_kind(code) {
            LinkFrame::decode(code, Bytes::new()).expect_err("unlisted link type")
        } else {
            Frame::decode(code, Bytes::new()).expect_err("unlisted type")
        };
        assert_eq!(err, DecodeError::UnknownFrameType(code), "type {code:#04x}");
        assert_eq!(err.to_string(), format!("unknown frame type {code:#04x}"));
    }
    // The text under the table names the unlisted ranges.
    assert!(
        common::PROTOCOL_MD.contains("(`0x00`, `0x1e`–`0x1f`, `0x2f`–`0xff`)"),
        "the unknown ranges are named"
    );
}
