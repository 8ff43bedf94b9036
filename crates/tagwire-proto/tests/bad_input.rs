//! Bad input at the codec level, one test per case: each asserts the precise
//! error variant and that its message names the problem.

use bytes::{BufMut, Bytes, BytesMut};
use tagwire_proto::limits::{HARD_MAX_FRAME, MAX_FIELDS, MAX_NAME_LEN, MAX_TAG_LEN, MIN_MAX_FRAME};
use tagwire_proto::{
    kind, validate_max_frame, DecodeError, EncodeError, EndpointKind, Event, EventRef, Frame,
    FrameDecoder, StreamError, Value, MAGIC,
};

/// One frame: length, type, body.
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 1) as u32).to_le_bytes().to_vec();
    v.push(kind);
    v.extend_from_slice(body);
    v
}

/// Splits exactly one frame off `bytes` and decodes it.
fn decode_one(bytes: &[u8]) -> Result<Frame, DecodeError> {
    let mut buf = BytesMut::from(bytes);
    let (kind, body) = FrameDecoder::new(MIN_MAX_FRAME)
        .next_raw(&mut buf)
        .expect("the stream splits")
        .expect("the frame is complete");
    assert!(buf.is_empty());
    Frame::decode(kind, body)
}

/// The fixed header of an event: tag, publisher, seq, time, priority, presence.
fn event_head(tag: &[u8], publisher: &[u8], presence: u8) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(tag.len() as u16).to_le_bytes());
    v.extend_from_slice(tag);
    v.push(publisher.len() as u8);
    v.extend_from_slice(publisher);
    v.extend_from_slice(&[0; 17]); // seq, source time, priority
    v.push(presence);
    v
}

fn fields_event(fields: &[(&str, Value)]) -> Event {
    let mut e = Event::new("/t", Bytes::new());
    e.fields = fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    e
}

fn encode_event(e: &Event) -> BytesMut {
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("valid event encodes");
    b
}

#[test]
fn garbage_bytes_an_http_request_is_refused_as_too_large() {
    // "GET " read as a little-endian length is 542,393,671 bytes.
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
    let err = FrameDecoder::new(MIN_MAX_FRAME)
        .next_raw(&mut buf)
        .expect_err("garbage is refused");
    assert_eq!(
        err,
        StreamError::FrameTooLarge {
            len: u32::from_le_bytes(*b"GET "),
            max: MIN_MAX_FRAME
        }
    );
    assert_eq!(
        err.to_string(),
        "frame of 542393671 bytes exceeds the maximum of 4096"
    );
}

#[test]
fn garbage_bytes_that_form_a_frame_are_refused_by_type() {
    let err = decode_one(&[0x03, 0, 0, 0, 0x42, 0x13, 0x37]).expect_err("garbage");
    assert_eq!(err, DecodeError::UnknownFrameType(0x42));
    assert_eq!(err.to_string(), "unknown frame type 0x42");
}

#[test]
fn garbage_frames_are_refused_or_decode_to_exactly_their_bytes() {
    // Deterministic pseudo-random frames: valid lengths, random types and
    // bodies. Each one is either refused or decodes to a frame that
    // re-encodes to exactly its bytes (nothing is silently misread), and the
    // stream stays in sync throughout.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let count = 20_000;
    let mut soup = Vec::new();
    for _ in 0..count {
        let kind = (next() % 0x12) as u8;
        let body: Vec<u8> = (0..next() % 24).map(|_| (next() % 4) as u8).collect();
        soup.extend(frame(kind, &body));
    }
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(&soup[..]);
    let (mut split, mut decoded) = (0, 0);
    loop {
        let before = buf.len();
        let Some((kind, body)) = dec.next_raw(&mut buf).expect("lengths are valid") else {
            break;
        };
        split += 1;
        let at = soup.len() - before;
        let raw = &soup[at..at + before - buf.len()];
        if let Ok(f) = Frame::decode(kind, body) {
            decoded += 1;
            if matches!(f, Frame::Hello { version, .. } if !(1..=3).contains(&version)) {
                continue; // may carry appended bytes, skipped by design
            }
            let mut out = BytesMut::new();
            f.encode(&mut out).expect("decoded frame encodes");
            assert_eq!(&out[..], raw, "{f:?}");
        }
    }
    assert_eq!(split, count);
    assert!(
        decoded > 0 && decoded < count,
        "{decoded} of {count} decoded"
    );
}

#[test]
fn truncated_frame_waits_for_the_rest_then_decodes() {
    let mut whole = BytesMut::new();
    Frame::Ping { nonce: 42 }
        .encode(&mut whole)
        .expect("encodes");
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::new();
    for (i, b) in whole.iter().enumerate() {
        assert_eq!(
            dec.next_raw(&mut buf).expect("no error"),
            None,
            "after {i} bytes"
        );
        buf.put_u8(*b);
    }
    let (kind, body) = dec.next_raw(&mut buf).expect("no error").expect("complete");
    assert_eq!(Frame::decode(kind, body), Ok(Frame::Ping { nonce: 42 }));
}

#[test]
fn truncated_frame_body_is_refused_naming_the_field() {
    // A Ping whose length covers only 3 of the nonce's 8 bytes.
    let err = decode_one(&frame(kind::PING, &[1, 2, 3])).expect_err("truncated");
    assert_eq!(
        err,
        DecodeError::Truncated {
            what: "nonce",
            need: 8,
            have: 3
        }
    );
    assert_eq!(err.to_string(), "truncated nonce: need 8 bytes, have 3");
}

#[test]
fn truncated_string_is_refused_naming_the_string() {
    // DeclareEndpoint whose name claims 9 bytes but has 2.
    let mut body = vec![1, 0, 0, 0, 1, 0, 0, 0, 1, 9];
    body.extend_from_slice(b"ab");
    let err = decode_one(&frame(kind::DECLARE_ENDPOINT, &body)).expect_err("truncated");
    assert_eq!(
        err,
        DecodeError::Truncated {
            what: "endpoint name",
            need: 9,
            have: 2
        }
    );
    assert!(err.to_string().contains("endpoint name"), "{err}");
}

#[test]
fn truncated_event_is_refused_naming_the_part() {
    let full = encode_event(&fields_event(&[("n", Value::Int(1))]));
    let err = EventRef::parse(&full[..full.len() - 3]).expect_err("truncated");
    assert_eq!(
        err,
        DecodeError::Truncated {
            what: "int value",
            need: 8,
            have: 5
        }
    );
    assert_eq!(err.to_string(), "truncated int value: need 8 bytes, have 5");
}

#[test]
fn length_over_the_limit_is_refused_naming_length_and_limit() {
    let mut buf = BytesMut::new();
    buf.put_u32_le(MIN_MAX_FRAME + 1);
    buf.put_u8(kind::PING);
    let err = FrameDecoder::new(MIN_MAX_FRAME)
        .next_raw(&mut buf)
        .expect_err("too large");
    assert_eq!(
        err,
        StreamError::FrameTooLarge {
            len: MIN_MAX_FRAME + 1,
            max: MIN_MAX_FRAME
        }
    );
    assert_eq!(
        err.to_string(),
        "frame of 4097 bytes exceeds the maximum of 4096"
    );
}

#[test]
fn length_at_the_limit_is_accepted() {
    // type + 4 request id bytes + admin body filling the rest of the limit.
    let body_len = MIN_MAX_FRAME as usize - 1;
    let mut body = vec![0u8; 4];
    body.resize(body_len, b' ');
    let mut buf = BytesMut::from(&frame(kind::ADMIN, &body)[..]);
    let (kind, body) = FrameDecoder::new(MIN_MAX_FRAME)
        .next_raw(&mut buf)
        .expect("at the limit is fine")
        .expect("complete");
    assert!(matches!(Frame::decode(kind, body), Ok(Frame::Admin { .. })));
}

#[test]
fn length_over_the_limit_is_refused_before_the_body_arrives() {
    // Only the 4 length bytes: the decoder refuses at once, it does not wait
    // for (or buffer) a frame it would refuse anyway.
    let mut buf = BytesMut::from(&u32::MAX.to_le_bytes()[..]);
    let err = FrameDecoder::new(HARD_MAX_FRAME).next_raw(&mut buf);
    assert_eq!(
        err,
        Err(StreamError::FrameTooLarge {
            len: u32::MAX,
            max: HARD_MAX_FRAME
        })
    );
}

#[test]
fn length_over_tag_limit_is_refused_naming_the_tag() {
    let tag = vec![b'a'; MAX_TAG_LEN + 1];
    let err = EventRef::parse(&event_head(&tag, b"p", 0)).expect_err("tag too long");
    assert_eq!(
        err,
        DecodeError::TooLong {
            what: "tag",
            len: MAX_TAG_LEN + 1,
            max: MAX_TAG_LEN
        }
    );
    assert_eq!(err.to_string(), "tag is 1025 bytes, over the limit of 1024");
}

#[test]
fn field_count_over_the_limit_is_refused_naming_the_count() {
    let mut ev = event_head(b"/t", b"p", 0x20);
    ev.extend_from_slice(&((MAX_FIELDS + 1) as u16).to_le_bytes());
    let err = EventRef::parse(&ev).expect_err("too many fields");
    assert_eq!(
        err,
        DecodeError::TooMany {
            what: "fields",
            count: MAX_FIELDS + 1,
            max: MAX_FIELDS
        }
    );
    assert_eq!(err.to_string(), "257 fields, over the limit of 256");
}

#[test]
fn zero_length_is_refused_as_an_empty_frame() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 0, 0x0a][..]);
    let err = FrameDecoder::new(MIN_MAX_FRAME)
        .next_raw(&mut buf)
        .expect_err("empty frame");
    assert_eq!(err, StreamError::EmptyFrame);
    assert_eq!(err.to_string(), "empty frame (length 0)");
}

#[test]
fn unknown_frame_type_is_refused_naming_the_type() {
    for t in [0x00, 0x1f, 0x2f, 0x80, 0xff] {
        let err = decode_one(&frame(t, &[])).expect_err("unknown type");
        assert_eq!(err, DecodeError::UnknownFrameType(t));
        assert_eq!(err.to_string(), format!("unknown frame type {t:#04x}"));
    }
}

#[test]
fn undecodable_frame_leaves_the_stream_in_sync() {
    // An unknown frame type, then a truncated Ok, then a valid Ping: the
    // first two are refused, the Ping still decodes.
    let mut stream = frame(0x7e, b"whatever");
    stream.extend(frame(kind::OK, &[1]));
    stream.extend(frame(kind::PING, &7u64.to_le_bytes()));
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(&stream[..]);
    let mut results = Vec::new();
    while let Some((kind, body)) = dec.next_raw(&mut buf).expect("splits") {
        results.push(Frame::decode(kind, body));
    }
    assert_eq!(results.len(), 3);
    assert_eq!(results[0], Err(DecodeError::UnknownFrameType(0x7e)));
    assert!(matches!(
        results[1],
        Err(DecodeError::Truncated {
            what: "request id",
            ..
        })
    ));
    assert_eq!(results[2], Ok(Frame::Ping { nonce: 7 }));
}

#[test]
fn non_utf8_tag_is_refused_naming_the_tag_and_offset() {
    let err = EventRef::parse(&event_head(b"/a\xc3", b"p", 0)).expect_err("not UTF-8");
    assert_eq!(err, DecodeError::NotUtf8 { what: "tag", at: 2 });
    assert_eq!(
        err.to_string(),
        "tag is not valid UTF-8 (invalid byte at offset 2)"
    );
}

#[test]
fn non_utf8_strings_in_frames_are_refused_naming_the_string() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            frame(
                kind::DECLARE_ENDPOINT,
                &[1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0xff],
            ),
            "endpoint name",
        ),
        (
            frame(
                kind::SUBSCRIBE,
                &[1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0xfe, 0],
            ),
            "pattern",
        ),
        (frame(kind::ADMIN, &[1, 0, 0, 0, b'{', 0x80]), "admin body"),
        (
            frame(kind::ERROR, &[0, 0, 0, 0, 1, 0, 1, 0, 0xc0]),
            "error message",
        ),
    ];
    for (bytes, what) in cases {
        let err = decode_one(&bytes).expect_err(what);
        assert!(
            matches!(err, DecodeError::NotUtf8 { what: w, .. } if w == what),
            "{what}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{what} is not valid UTF-8")),
            "{err}"
        );
    }
}

#[test]
fn non_utf8_field_string_is_refused_naming_the_value() {
    let mut ev = event_head(b"/t", b"p", 0x20);
    ev.extend_from_slice(&[1, 0, 1, b's', 4, 2, 0, 0, 0, b'o', 0xff]);
    let err = EventRef::parse(&ev).expect_err("not UTF-8");
    assert_eq!(
        err,
        DecodeError::NotUtf8 {
            what: "string value",
            at: 1
        }
    );
    assert!(err.to_string().contains("string value"), "{err}");
}

#[test]
fn bad_magic_is_refused_naming_the_bytes() {
    let mut body = b"TAGX".to_vec();
    body.extend_from_slice(&[1, 0, 0, 0x10, 0, 0, 0]);
    let err = decode_one(&frame(kind::HELLO, &body)).expect_err("bad magic");
    assert_eq!(err, DecodeError::BadMagic(*b"TAGX"));
    assert_eq!(
        err.to_string(),
        "not a tagwire peer (bad magic [54, 41, 47, 58])"
    );
}

#[test]
fn hello_of_another_version_with_appended_bytes_still_decodes() {
    // Regression: a future client's Hello must reach the version check so the
    // server can answer UnsupportedVersion (not Malformed).
    let mut body = MAGIC.to_vec();
    let future = tagwire_proto::PROTOCOL_VERSION + 1;
    body.extend_from_slice(&future.to_le_bytes());
    body.extend_from_slice(&(1u32 << 20).to_le_bytes());
    body.extend_from_slice(&[3, b'n', b'e', b'w', 0xaa, 0xbb]);
    assert_eq!(
        decode_one(&frame(kind::HELLO, &body)),
        Ok(Frame::Hello {
            version: future,
            max_frame: 1 << 20,
            name: "new".into(),
            token: String::new(),
            proof: None,
            session: [0; 16],
        })
    );
}

#[test]
fn hello_of_this_version_with_appended_bytes_is_refused() {
    let mut body = MAGIC.to_vec();
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&(1u32 << 20).to_le_bytes());
    body.extend_from_slice(&[0, 0xaa]);
    assert_eq!(
        decode_one(&frame(kind::HELLO, &body)),
        Err(DecodeError::TrailingBytes {
            what: "Hello",
            count: 1
        })
    );
}

#[test]
fn max_frame_out_of_range_is_refused_naming_the_value() {
    assert_eq!(validate_max_frame(MIN_MAX_FRAME), Ok(MIN_MAX_FRAME));
    assert_eq!(validate_max_frame(HARD_MAX_FRAME), Ok(HARD_MAX_FRAME));
    for bad in [0, MIN_MAX_FRAME - 1, HARD_MAX_FRAME + 1, u32::MAX] {
        let err = validate_max_frame(bad).expect_err("out of range");
        assert_eq!(
            err,
            DecodeError::BadValue {
                what: "max frame size",
                value: bad as u64
            }
        );
        assert_eq!(err.to_string(), format!("invalid max frame size: {bad}"));
    }
}

#[test]
fn a_shm_ref_bit_without_a_24_byte_reference_is_refused_naming_the_length() {
    // Presence bit 0x80 (SHM_REF, reserved before issue 24 item 12): the
    // payload must be a 24-byte reference. Here it is empty, after a
    // virtual time (0x01) and flags (0x20: a field count of 0).
    let mut ev = event_head(b"/t", b"p", 0xa1);
    ev.extend_from_slice(&7u64.to_le_bytes());
    ev.extend_from_slice(&[0, 0]);
    let err = EventRef::parse(&ev).expect_err("no reference");
    assert_eq!(
        err,
        DecodeError::BadValue {
            what: "shared-memory reference length",
            value: 0
        }
    );
    assert_eq!(err.to_string(), "invalid shared-memory reference length: 0");
}

#[test]
fn duplicate_field_name_is_refused_naming_the_field() {
    let mut ev = event_head(b"/t", b"p", 0x20);
    ev.extend_from_slice(&[3, 0]);
    ev.extend_from_slice(&[1, b'a', 3, 1]);
    ev.extend_from_slice(&[1, b'b', 3, 1]);
    ev.extend_from_slice(&[1, b'a', 3, 0]);
    let err = EventRef::parse(&ev).expect_err("duplicate");
    assert_eq!(err, DecodeError::DuplicateField { name: "a".into() });
    assert_eq!(err.to_string(), "duplicate field \"a\"");
}

#[test]
fn duplicate_field_name_among_many_fields_is_refused_naming_the_field() {
    // Over 8 fields the check sorts instead of comparing pairwise.
    let mut ev = event_head(b"/t", b"p", 0x20);
    let names: Vec<String> = (0..200)
        .map(|i| format!("f{i}"))
        .chain(["f7".into()])
        .collect();
    ev.extend_from_slice(&(names.len() as u16).to_le_bytes());
    for n in &names {
        ev.push(n.len() as u8);
        ev.extend_from_slice(n.as_bytes());
        ev.extend_from_slice(&[3, 1]);
    }
    let err = EventRef::parse(&ev).expect_err("duplicate");
    assert_eq!(err, DecodeError::DuplicateField { name: "f7".into() });
}

#[test]
fn duplicate_field_name_is_refused_by_the_encoder() {
    // Regression: the encoder used to write events every decoder refuses.
    for n in [2, 40] {
        let mut fields: Vec<(String, Value)> =
            (0..n).map(|i| (format!("f{i}"), Value::Int(i))).collect();
        fields.push(("f1".into(), Value::Bool(true)));
        let mut e = Event::new("/t", Bytes::new());
        e.fields = fields;
        let mut out = BytesMut::from(&b"keep"[..]);
        let err = e.encode(&mut out).expect_err("duplicate");
        assert_eq!(err, EncodeError::DuplicateField { name: "f1".into() });
        assert_eq!(err.to_string(), "duplicate field \"f1\"");
        assert_eq!(&out[..], b"keep", "nothing written on error");
    }
}

#[test]
fn empty_field_name_is_refused() {
    let mut ev = event_head(b"/t", b"p", 0x20);
    ev.extend_from_slice(&[1, 0, 0, 3, 1]);
    let err = EventRef::parse(&ev).expect_err("empty name");
    assert_eq!(err, DecodeError::Empty { what: "field name" });
    assert_eq!(err.to_string(), "empty field name");
}

#[test]
fn bool_value_other_than_zero_or_one_is_refused_naming_the_value() {
    let mut ev = event_head(b"/t", b"p", 0x20);
    ev.extend_from_slice(&[1, 0, 1, b'b', 3, 2]);
    let err = EventRef::parse(&ev).expect_err("bad bool");
    assert_eq!(
        err,
        DecodeError::BadValue {
            what: "bool value",
            value: 2
        }
    );
    assert_eq!(err.to_string(), "invalid bool value: 2");
}

#[test]
fn trailing_bytes_are_refused_naming_the_frame_and_count() {
    let frames = [
        Frame::Hello {
            version: 1,
            max_frame: MIN_MAX_FRAME,
            name: "c".into(),
            token: String::new(),
            proof: None,
            session: [0; 16],
        },
        Frame::Hello {
            version: 2,
            max_frame: MIN_MAX_FRAME,
            name: "c".into(),
            token: "t".into(),
            proof: None,
            session: [7; 16],
        },
        Frame::Hello {
            version: 3,
            max_frame: MIN_MAX_FRAME,
            name: "c".into(),
            token: String::new(),
            proof: Some(Box::new(tagwire_proto::TokenTag {
                nonce: [1; 32],
                tag: [2; 32],
            })),
            session: [7; 16],
        },
        Frame::Challenge {
            nonce: [1; 32],
            proof: [2; 32],
        },
        Frame::Proof { proof: [3; 32] },
        Frame::Welcome {
            version: 1,
            max_frame: MIN_MAX_FRAME,
            name: "s".into(),
        },
        Frame::DeclareEndpoint {
            req: 1,
            id: 1,
            kind: EndpointKind::Publisher,
            name: "e".into(),
        },
        Frame::Subscribe {
            req: 1,
            sub: 1,
            endpoint: 1,
            pattern: "/a".into(),
            qos: vec![("discard".into(), "reject".into())],
        },
        Frame::Unsubscribe { req: 1, sub: 1 },
        Frame::UndeclareEndpoint { req: 1, id: 1 },
        Frame::Ok { req: 1 },
        Frame::Error {
            req: 1,
            code: tagwire_proto::ErrorCode::Malformed,
            message: "m".into(),
        },
        Frame::Ping { nonce: 1 },
        Frame::Pong { nonce: 1 },
        Frame::Close {
            code: 0,
            reason: "r".into(),
        },
    ];
    for f in frames {
        let mut bytes = BytesMut::new();
        f.encode(&mut bytes).expect("encodes");
        let mut bytes = bytes.to_vec();
        bytes.extend_from_slice(&[0xee, 0xee]);
        let len = (bytes.len() - 4) as u32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        let err = decode_one(&bytes).expect_err("trailing bytes");
        let name = tagwire_proto::frame_name(f.kind());
        assert_eq!(
            err,
            DecodeError::TrailingBytes {
                what: name,
                count: 2
            },
            "{name}"
        );
        assert_eq!(err.to_string(), format!("2 trailing bytes after {name}"));
    }
}

#[test]
fn encoder_refuses_an_over_long_name_and_leaves_the_buffer_unchanged() {
    // Regression: Frame::encode used to leave a partial frame (with a zero
    // length) in the buffer when it failed.
    let f = Frame::DeclareEndpoint {
        req: 1,
        id: 1,
        kind: EndpointKind::Publisher,
        name: "x".repeat(MAX_NAME_LEN + 1),
    };
    let mut out = BytesMut::from(&b"earlier frames"[..]);
    let err = f.encode(&mut out).expect_err("name too long");
    assert_eq!(
        err,
        EncodeError::TooLong {
            what: "endpoint name",
            len: 256,
            max: 255
        }
    );
    assert_eq!(
        err.to_string(),
        "endpoint name is 256 bytes, over the limit of 255"
    );
    assert_eq!(&out[..], b"earlier frames");
}

#[test]
fn encoder_refuses_an_over_long_tag_and_leaves_the_buffer_unchanged() {
    let e = Event::new("/".repeat(MAX_TAG_LEN + 1), Bytes::new());
    let mut out = BytesMut::from(&b"x"[..]);
    let err = tagwire_proto::encode_publish(1, &e, &mut out).expect_err("tag too long");
    assert_eq!(
        err,
        EncodeError::TooLong {
            what: "tag",
            len: MAX_TAG_LEN + 1,
            max: MAX_TAG_LEN
        }
    );
    assert_eq!(&out[..], b"x");
}

#[test]
fn encoder_refuses_a_late_over_long_event_name_and_leaves_the_buffer_unchanged() {
    // Regression: the event name was checked after the header was written.
    let mut e = Event::new("/t", Bytes::new());
    e.header.event_name = Some("e".repeat(MAX_NAME_LEN + 1));
    let mut out = BytesMut::new();
    let err = e.encode(&mut out).expect_err("name too long");
    assert!(
        matches!(
            err,
            EncodeError::TooLong {
                what: "event_name",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(out.is_empty());
}
