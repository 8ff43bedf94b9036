//! Property tests of the codec: every frame and every event survives
//! encode → decode unchanged, a stream splits into the same frames however it
//! is chunked, and no input makes a decoder panic.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use tagwire_proto::limits::{HARD_MAX_FRAME, MAX_FIELDS, MIN_MAX_FRAME};
use tagwire_proto::{
    encode_publish, DecodeError, EndpointKind, ErrorCode, Event, EventRef, Expiry, Frame,
    FrameDecoder, Header, NamedError, Origins, Pull, PullQuery, PullReply, PullStatus, ShmRef,
    Value, FRAME_HEADER_LEN, SESSION_ID_LEN,
};

/// A string of at most `max_chars` characters (so at most 4 × that many bytes).
fn text(max_chars: usize) -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..=max_chars).prop_map(String::from_iter)
}

/// A name that fits a `str8` (≤ 255 bytes).
fn name() -> impl Strategy<Value = String> {
    text(63)
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_map(Value::Float), // NaN and infinities included
        any::<bool>().prop_map(Value::Bool),
        text(40).prop_map(Value::Str),
        vec(any::<u8>(), 0..40).prop_map(|b| Value::Bytes(b.into())),
    ]
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        Just(Expiry::Never),
        any::<u64>().prop_map(Expiry::AfterNs),
        any::<u64>().prop_map(Expiry::AtNs),
    ]
}

fn header() -> impl Strategy<Value = Header> {
    (
        (text(200), name(), any::<u64>(), any::<u64>()),
        (
            any::<Option<u64>>(),
            any::<u8>(),
            expiry(),
            any::<Option<u64>>(),
        ),
        (
            proptest::option::of(name()),
            proptest::option::of(name()),
            any::<u16>(),
        ),
    )
        .prop_map(
            |(
                (tag, publisher, seq, source_time_ns),
                (virtual_time, priority, expiry, start_time_ns),
                (type_name, event_name, flags),
            )| Header {
                tag,
                publisher,
                seq,
                source_time_ns,
                virtual_time,
                priority,
                expiry,
                start_time_ns,
                type_name,
                event_name,
                flags,
                payload_in_shm: false,
            },
        )
}

/// Fields with unique, non-empty names in arbitrary order.
fn fields(max: usize) -> impl Strategy<Value = Vec<(String, Value)>> {
    btree_set(
        text(20).prop_filter("non-empty", |s| !s.is_empty()),
        0..=max,
    )
    .prop_map(Vec::from_iter)
    .prop_shuffle()
    .prop_flat_map(|names| {
        let n = names.len();
        (Just(names), vec(value(), n))
    })
    .prop_map(|(names, values)| names.into_iter().zip(values).collect())
}

/// An event; one in four has a shared-memory reference (24 bytes) for a payload.
fn event() -> impl Strategy<Value = Event> {
    (
        header(),
        fields(12),
        vec(any::<u8>(), 0..200),
        any::<[u8; 24]>(),
        0..4u8,
    )
        .prop_map(|(mut header, fields, payload, reference, one_in_four)| {
            header.payload_in_shm = one_in_four == 0;
            let payload = if header.payload_in_shm {
                reference.to_vec()
            } else {
                payload
            };
            Event {
                header,
                fields,
                payload: payload.into(),
            }
        })
}

fn encode_event(e: &Event) -> Bytes {
    let mut b = BytesMut::new();
    e.encode(&mut b)
        .expect("generated events are within the limits");
    b.freeze()
}

/// An event body: either a valid encoded event or arbitrary bytes (the frame
/// layer does not look inside).
fn event_bytes() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        event().prop_map(|e| encode_event(&e)),
        vec(any::<u8>(), 0..100).prop_map(Bytes::from),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    let endpoint_kind = prop_oneof![
        Just(EndpointKind::Publisher),
        Just(EndpointKind::Subscriber)
    ];
    prop_oneof![
        (
            any::<u16>(),
            any::<u32>(),
            name(),
            name(),
            any::<[u8; SESSION_ID_LEN]>(),
            prop::option::of(any::<([u8; 32], [u8; 32])>()),
        )
            .prop_map(|(version, max_frame, name, token, session, tag)| {
                // Version 2 carries a bearer token, version 3 a token tag;
                // both a session id.
                // (version 4's Hello is version 3's.)
                let (v2, v3) = (version == 2, version == 3 || version == 4);
                Frame::Hello {
                    version,
                    max_frame,
                    name,
                    token: if v2 { token } else { String::new() },
                    proof: tag
                        .filter(|_| v3)
                        .map(|(nonce, tag)| Box::new(tagwire_proto::TokenTag { nonce, tag })),
                    session: if v2 || v3 {
                        session
                    } else {
                        [0; SESSION_ID_LEN]
                    },
                }
            }),
        (any::<[u8; 32]>(), any::<[u8; 32]>())
            .prop_map(|(nonce, proof)| Frame::Challenge { nonce, proof }),
        any::<[u8; 32]>().prop_map(|proof| Frame::Proof { proof }),
        (any::<u16>(), any::<u32>(), name()).prop_map(|(version, max_frame, name)| {
            Frame::Welcome {
                version,
                max_frame,
                name,
            }
        }),
        (any::<u32>(), any::<u32>(), endpoint_kind, name()).prop_map(|(req, id, kind, name)| {
            Frame::DeclareEndpoint {
                req,
                id,
                kind,
                name,
            }
        }),
        (
            (any::<u32>(), any::<u32>(), any::<u32>()),
            text(100),
            vec((name(), text(30)), 0..6)
        )
            .prop_map(|((req, sub, endpoint), pattern, qos)| Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos
            }),
        (any::<u32>(), any::<u32>()).prop_map(|(req, id)| Frame::UndeclareEndpoint { req, id }),
        (any::<u32>(), any::<u32>()).prop_map(|(req, sub)| Frame::Unsubscribe { req, sub }),
        (any::<u32>(), event_bytes())
            .prop_map(|(endpoint, event)| Frame::Publish { endpoint, event }),
        (any::<u32>(), any::<u64>(), event_bytes()).prop_map(|(endpoint, seq, event)| {
            Frame::PublishReliable {
                endpoint,
                seq,
                event,
            }
        }),
        (
            any::<u64>(),
            vec((any::<u64>(), 0u64..1000, any::<bool>()), 0..=16)
        )
            .prop_map(|(done, ranges)| Frame::PublishAck(tagwire_proto::Ack {
                done,
                ranges: ranges
                    .into_iter()
                    .map(|(first, len, failed)| tagwire_proto::AckRange {
                        first,
                        last: first.saturating_add(len),
                        failed,
                    })
                    .collect(),
            })),
        (any::<u32>(), event_bytes()).prop_map(|(sub, event)| Frame::Deliver { sub, event }),
        (any::<u32>(), any::<u64>(), event_bytes())
            .prop_map(|(sub, seq, event)| Frame::DeliverReliable { sub, seq, event }),
        (
            any::<u32>(),
            any::<u64>(),
            vec((any::<u64>(), 0u64..1000, any::<bool>()), 0..=16)
        )
            .prop_map(|(sub, done, ranges)| Frame::DeliverAck {
                sub,
                ack: tagwire_proto::Ack {
                    done,
                    ranges: ranges
                        .into_iter()
                        .map(|(first, len, failed)| tagwire_proto::AckRange {
                            first,
                            last: first.saturating_add(len),
                            failed,
                        })
                        .collect(),
                },
            }),
        (any::<u32>(), any::<u64>(), piece()).prop_map(|(endpoint, seq, (of, data))| {
            Frame::PublishPiece {
                endpoint,
                seq,
                of,
                data,
            }
        }),
        (any::<u32>(), piece()).prop_map(|(sub, (of, data))| Frame::DeliverPiece { sub, of, data }),
        (any::<u32>(), any::<u64>(), piece())
            .prop_map(|(sub, seq, (of, data))| Frame::DeliverReliablePiece { sub, seq, of, data }),
        (any::<u32>(), any::<u64>(), any::<u64>())
            .prop_map(|(endpoint, id, have)| Frame::PieceResume { endpoint, id, have }),
        any::<u32>().prop_map(|daemons| Frame::Healed { daemons }),
        any::<u32>().prop_map(|req| Frame::Ok { req }),
        (any::<u32>(), any::<u16>(), text(100)).prop_map(|(req, code, message)| Frame::Error {
            req,
            code: ErrorCode::from_code(code),
            message
        }),
        any::<u64>().prop_map(|nonce| Frame::Ping { nonce }),
        any::<u64>().prop_map(|nonce| Frame::Pong { nonce }),
        (any::<u16>(), text(100)).prop_map(|(code, reason)| Frame::Close { code, reason }),
        (any::<u32>(), text(100)).prop_map(|(req, body)| Frame::Admin { req, body }),
        (any::<u32>(), text(100)).prop_map(|(req, body)| Frame::AdminReply { req, body }),
        (any::<u32>(), name(), name(), text(100), pull_query()).prop_map(
            |(req, node, publisher, tag, query)| Frame::Pull(Pull {
                req,
                node,
                publisher,
                tag,
                query
            })
        ),
        (
            any::<u32>(),
            0u8..3,
            (any::<u64>(), any::<u64>(), any::<u32>(), any::<u64>()),
            vec(event_bytes(), 0..4)
        )
            .prop_map(|(req, status, (oldest, newest, held, next), events)| {
                let (status, events) = match status {
                    0 => (PullStatus::Complete, events),
                    1 => (PullStatus::More { next }, events),
                    _ => (PullStatus::Gone, vec![]),
                };
                Frame::PullReply(PullReply {
                    req,
                    status,
                    oldest,
                    newest,
                    held,
                    events,
                })
            }),
    ]
}

/// A valid piece (version 5): its data within its event's 1 ..= 4 GiB.
fn piece() -> impl Strategy<Value = (tagwire_proto::PieceOf, Bytes)> {
    (
        any::<u64>(),
        1u64..=tagwire_proto::MAX_PIECED_EVENT,
        any::<u32>(),
        vec(any::<u8>(), 1..64),
        any::<u64>(),
    )
        .prop_map(|(id, total, checksum, data, at)| {
            let total = total.max(data.len() as u64);
            let offset = at % (total - data.len() as u64 + 1);
            let of = tagwire_proto::PieceOf {
                id,
                total,
                checksum,
                offset,
            };
            (of, Bytes::from(data))
        })
}

proptest! {
    /// A piece's fields are checked against its data: a total of 0 or over
    /// 4 GiB, or data reaching past the total, never decodes.
    #[test]
    fn a_piece_that_decodes_lies_within_its_event(body in vec(any::<u8>(), 0..96)) {
        for k in [tagwire_proto::kind::PUBLISH_PIECE, tagwire_proto::kind::DELIVER_PIECE] {
            if let Ok(f) = Frame::decode(k, Bytes::from(body.clone())) {
                let (of, data) = match f {
                    Frame::PublishPiece { of, data, .. }
                    | Frame::DeliverPiece { of, data, .. }
                    | Frame::DeliverReliablePiece { of, data, .. } => (of, data),
                    other => panic!("decoded as {other:?}"),
                };
                prop_assert!(of.total >= 1 && of.total <= tagwire_proto::MAX_PIECED_EVENT);
                prop_assert!(!data.is_empty());
                prop_assert!(of.offset + data.len() as u64 <= of.total);
            }
        }
    }
}

fn pull_query() -> impl Strategy<Value = PullQuery> {
    prop_oneof![
        Just(PullQuery::Latest),
        any::<u32>().prop_map(PullQuery::Nth),
        any::<u64>().prop_map(PullQuery::Seq),
        (any::<u64>(), any::<u64>()).prop_map(|(first, last)| PullQuery::SeqRange { first, last }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(from_ns, to_ns, from_seq)| {
            PullQuery::TimeRange {
                from_ns,
                to_ns,
                from_seq,
            }
        }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop_oneof![
                any::<u64>().prop_map(Origins::Only),
                prop::collection::vec(any::<u64>(), 0..8).prop_map(Origins::Except),
            ],
        )
            .prop_map(|(from_pos, from_seq, from_ns, origins)| PullQuery::Stored {
                from_pos,
                from_seq,
                from_ns,
                origins,
            }),
    ]
}

fn encode_frame(f: &Frame) -> BytesMut {
    let mut b = BytesMut::new();
    f.encode(&mut b)
        .expect("generated frames are within the limits");
    b
}

/// Value equality with floats compared by bits (NaN == NaN, -0.0 != 0.0).
fn same_value(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (x, y) => x == y,
    }
}

/// Field-by-field event equality, floats compared by bits.
fn same_event(a: &Event, b: &Event) -> bool {
    a.header == b.header
        && a.payload == b.payload
        && a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|((n, x), (m, y))| n == m && same_value(x, y))
}

/// Splits every complete frame off `buf`, decoding each.
fn drain(dec: &FrameDecoder, buf: &mut BytesMut, out: &mut Vec<Frame>) {
    while let Some((kind, body)) = dec.next_raw(buf).expect("valid stream splits") {
        out.push(Frame::decode(kind, body).expect("valid frame decodes"));
    }
}

/// Runs every decoder over `data`; errors are fine, panics are not.
fn decode_everything(data: &[u8]) {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        if let Ok(Frame::Publish { event, .. } | Frame::Deliver { event, .. }) =
            Frame::decode(kind, body)
        {
            if let Ok(view) = EventRef::parse(&event) {
                let n = view.fields().count();
                let decoded = Event::decode(&event).expect("parse and decode agree");
                assert_eq!(decoded.fields.len(), n);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frame_roundtrips_through_encode_and_decode(f in frame()) {
        let mut buf = encode_frame(&f);
        let total = buf.len();
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        prop_assert_eq!(len + 4, total, "length counts type + body");
        prop_assert_eq!(buf[4], f.kind());
        let (kind, body) = FrameDecoder::new(HARD_MAX_FRAME)
            .next_raw(&mut buf)
            .expect("splits")
            .expect("complete");
        prop_assert!(buf.is_empty());
        prop_assert_eq!(body.len() + FRAME_HEADER_LEN, total);
        let decoded = Frame::decode(kind, body).expect("decodes");
        prop_assert_eq!(decoded, f);
    }

    #[test]
    fn event_roundtrips_with_all_header_parts_and_fields(e in event()) {
        let bytes = encode_event(&e);
        prop_assert_eq!(bytes.len(), e.encoded_len());
        let decoded = Event::decode(&bytes).expect("decodes");
        prop_assert!(same_event(&decoded, &e), "{:?} != {:?}", decoded, e);
        // The borrowed view sees the same header, fields and payload.
        let view = EventRef::parse(&bytes).expect("parses");
        prop_assert_eq!(view.tag, e.header.tag.as_str());
        prop_assert_eq!(view.expiry, e.header.expiry);
        prop_assert_eq!(view.payload, &e.payload[..]);
        prop_assert_eq!(view.fields().count(), e.fields.len());
        for (name, v) in &e.fields {
            let got = view.field(name).expect("field present");
            let got = got.to_owned();
            prop_assert!(same_value(&got, v), "field {:?}: {:?} != {:?}", name, got, v);
        }
        // Re-encoding the decoded event gives the same bytes.
        prop_assert_eq!(encode_event(&decoded), bytes);
    }

    /// `raw_fields` (no second UTF-8 check, issue 24 item 9) yields the
    /// same names and values as `fields`, in the same order.
    #[test]
    fn raw_fields_agree_with_fields(e in event()) {
        let bytes = encode_event(&e);
        let view = EventRef::parse(&bytes).expect("parses");
        let raw: Vec<_> = view.raw_fields().collect();
        let checked: Vec<_> = view.fields().collect();
        prop_assert_eq!(raw.len(), checked.len());
        for ((rn, rv), (n, v)) in raw.into_iter().zip(checked) {
            prop_assert_eq!(rn, n.as_bytes());
            let rv = rv.checked().expect("a parsed event's strings are UTF-8");
            prop_assert!(
                same_value(&rv.to_owned(), &v.to_owned()),
                "field {:?}: {:?} != {:?}", n, rv, v
            );
        }
    }

    #[test]
    fn parse_named_agrees_with_parse_on_mutated_events(
        e in event(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut bytes = encode_event(&e).to_vec();
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let utf8 = |b| std::str::from_utf8(b).map_err(|_| "not UTF-8");
        let named = EventRef::parse_named(&bytes, |t, p| Ok::<_, &str>((utf8(t)?, utf8(p)?)));
        match (EventRef::parse(&bytes), named) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!((a.tag, a.publisher, a.seq, a.payload), (b.tag, b.publisher, b.seq, b.payload));
                prop_assert_eq!(a.fields().count(), b.fields().count());
            }
            (Err(a), Err(NamedError::Decode(b))) => prop_assert_eq!(a.to_string(), b.to_string()),
            // A tag or publisher that is not UTF-8: parse says so.
            (Err(DecodeError::NotUtf8 { .. }), Err(NamedError::Names(_))) => {}
            (a, b) => prop_assert!(false, "parse {:?} but parse_named {:?}", a, b),
        }
    }

    #[test]
    fn parse_named_takes_the_callers_names(e in event()) {
        let bytes = encode_event(&e);
        let (tag, publisher) = (e.header.tag.clone(), e.header.publisher.clone());
        let view = EventRef::parse_named(&bytes, |t, p| {
            if t == tag.as_bytes() && p == publisher.as_bytes() {
                Ok((tag.as_str(), publisher.as_str()))
            } else {
                Err("names differ")
            }
        })
        .expect("parses");
        // The strings are the caller's own, not views of the buffer.
        prop_assert_eq!(view.tag.as_ptr(), tag.as_ptr());
        prop_assert_eq!(view.publisher.as_ptr(), publisher.as_ptr());
        prop_assert_eq!(view.payload, &e.payload[..]);
        let other = EventRef::parse_named(&bytes, |_, _| Err::<(&str, &str), _>("refused"));
        prop_assert!(matches!(other, Err(NamedError::Names("refused"))));
    }

    #[test]
    fn event_with_max_fields_roundtrips(n in (MAX_FIELDS - 8)..=MAX_FIELDS, v in value()) {
        let mut e = Event::new("/many", Bytes::new());
        e.fields = (0..n).map(|i| (format!("f{i}"), v.clone())).collect();
        let decoded = Event::decode(&encode_event(&e)).expect("decodes");
        prop_assert!(same_event(&decoded, &e));
    }

    #[test]
    fn publish_encoded_in_place_equals_publish_frame(endpoint in any::<u32>(), e in event()) {
        let mut direct = BytesMut::new();
        encode_publish(endpoint, &e, &mut direct).expect("encodes");
        let framed = encode_frame(&Frame::Publish { endpoint, event: encode_event(&e) });
        prop_assert_eq!(direct, framed);
    }

    #[test]
    fn decoder_yields_the_same_frames_for_any_chunking(
        frames in vec(frame(), 1..12),
        cuts in vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let mut stream = BytesMut::new();
        for f in &frames {
            f.encode(&mut stream).expect("encodes");
        }
        let stream = stream.freeze();
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let dec = FrameDecoder::new(HARD_MAX_FRAME);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            buf.extend_from_slice(&stream[w[0]..w[1]]);
            drain(&dec, &mut buf, &mut got);
        }
        prop_assert!(buf.is_empty(), "{} bytes left over", buf.len());
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn decoder_yields_the_same_frames_fed_one_byte_at_a_time(frames in vec(frame(), 1..4)) {
        let mut stream = BytesMut::new();
        for f in &frames {
            f.encode(&mut stream).expect("encodes");
        }
        let dec = FrameDecoder::new(HARD_MAX_FRAME);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in stream.iter() {
            buf.extend_from_slice(&[*b]);
            drain(&dec, &mut buf, &mut got);
        }
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in vec(any::<u8>(), 0..600)) {
        decode_everything(&data);
    }

    #[test]
    fn decoding_arbitrary_frame_bodies_never_panics(kind in any::<u8>(), body in vec(any::<u8>(), 0..300)) {
        let _ = Frame::decode(kind, Bytes::from(body.clone()));
        let _ = EventRef::parse(&body);
        let _ = Event::decode(&Bytes::from(body));
    }

    #[test]
    fn decoding_mutated_valid_frames_never_panics(
        f in frame(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        // Mutations of valid frames reach deeper than random bytes do.
        let mut bytes = encode_frame(&f).to_vec();
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        decode_everything(&bytes);
        let keep = cut.index(bytes.len() + 1);
        decode_everything(&bytes[..keep]);
        if bytes.len() > FRAME_HEADER_LEN {
            let body = Bytes::copy_from_slice(&bytes[FRAME_HEADER_LEN..]);
            let _ = Frame::decode(bytes[4], body.clone());
            if body.len() > 4 {
                let _ = EventRef::parse(&body[4..]);
            }
        }
    }
}

/// Offset of the presence byte in `e`'s encoding.
fn presence_at(e: &Event) -> usize {
    2 + e.header.tag.len() + 1 + e.header.publisher.len() + 8 + 8 + 1
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Issue 24 item 12: the flags are the application's. Whatever bits an
    /// older client sets (0x0001 included), the payload stays the payload
    /// and the flags come back as sent.
    #[test]
    fn no_flag_bit_makes_the_payload_a_shared_memory_reference(
        e in event().prop_filter("inline payload", |e| !e.header.payload_in_shm),
        flags in any::<u16>(),
    ) {
        let mut e = e;
        e.header.flags = flags;
        let bytes = encode_event(&e);
        let view = EventRef::parse(&bytes).expect("parses");
        prop_assert!(!view.payload_in_shm);
        prop_assert_eq!(view.shm_ref(), None);
        prop_assert_eq!(view.flags, flags);
        prop_assert_eq!(view.payload, &e.payload[..]);
    }

    /// Presence bit 0x80 (SHM_REF) makes the payload a reference: exactly
    /// 24 bytes parse as one, any other length is refused naming it.
    #[test]
    fn the_shm_ref_bit_takes_exactly_a_24_byte_reference(
        e in event().prop_filter("inline payload", |e| !e.header.payload_in_shm),
    ) {
        let mut bytes = encode_event(&e).to_vec();
        bytes[presence_at(&e)] |= 0x80;
        let len = e.payload.len();
        match EventRef::parse(&bytes) {
            Ok(view) => {
                prop_assert_eq!(len, ShmRef::LEN);
                prop_assert!(view.payload_in_shm);
                prop_assert_eq!(view.shm_ref(), ShmRef::decode(&e.payload).ok());
            }
            Err(err) => {
                prop_assert_ne!(len, ShmRef::LEN);
                prop_assert_eq!(
                    err,
                    DecodeError::BadValue { what: "shared-memory reference length", value: len as u64 }
                );
            }
        }
        let mut reference = e.clone();
        reference.header.payload_in_shm = true;
        let encoded = reference.encode(&mut BytesMut::new());
        prop_assert_eq!(encoded.is_ok(), len == ShmRef::LEN, "the encoder agrees");
    }
}

proptest! {
    /// A `Pull` of query 7 that decodes re-encodes to exactly its bytes
    /// (what the frame_decoder fuzz target asserts of every frame): each
    /// selection has one encoding, and the one that would not (an empty
    /// Except, which is query 6) is refused.
    #[test]
    fn a_stored_pull_with_origins_re_encodes_to_its_own_bytes(
        mode in 0u8..3,
        keys in prop::collection::vec(any::<u64>(), 0..4),
    ) {
        let mut body = BytesMut::new();
        body.put_u32_le(8);
        body.put_u8(0); // node ""
        body.put_u8(0); // publisher ""
        body.put_u16_le(2);
        body.put_slice(b"/t");
        body.put_u8(7);
        body.put_slice(&[0u8; 24]);
        body.put_u8(mode);
        body.put_u16_le(keys.len() as u16);
        for k in &keys {
            body.put_u64_le(*k);
        }
        let mut raw = BytesMut::new();
        raw.put_u32_le(body.len() as u32 + 1);
        raw.put_u8(tagwire_proto::kind::PULL);
        raw.put_slice(&body);
        let mut buf = raw.clone();
        let (kind, frame_body) = FrameDecoder::new(1 << 20)
            .next_raw(&mut buf)
            .expect("a whole frame")
            .expect("one frame");
        let decoded = Frame::decode(kind, frame_body);
        let accepted = matches!((mode, keys.len()), (0, 1) | (1, 1..));
        match decoded {
            Ok(f) => {
                prop_assert!(accepted, "accepted mode {} with {} keys: {:?}", mode, keys.len(), f);
                prop_assert_eq!(&encode_frame(&f)[..], &raw[..]);
            }
            other => prop_assert!(!accepted, "refused a valid selection: {:?}", other),
        }
    }
}
