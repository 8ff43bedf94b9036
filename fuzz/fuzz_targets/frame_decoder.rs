//! Fuzz target: arbitrary bytes through the streaming `FrameDecoder`, then
//! `Frame::decode` on every frame it splits off, and `EventRef::parse` /
//! `Event::decode` on the event of every `Publish`/`Deliver` and every
//! event of a `PullReply` (and `EventRef::parse_named`, the daemon's parse,
//! which must agree with `parse`; a payload is a shared-memory reference
//! exactly when presence bit 0x80 is set, and then 24 bytes). Errors are
//! expected; a panic, or a decoded frame that does not re-encode to exactly
//! its bytes, is a bug. Seed corpus: the test vectors of docs/protocol.md
//! (scripts/fuzz.sh writes it).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tagwire_proto::{
    limits::MIN_MAX_FRAME, Event, EventRef, Frame, FrameDecoder, PROTOCOL_VERSION,
};

fuzz_target!(|data: &[u8]| {
    // A small limit so that the length checks are exercised as well as splitting.
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        let Ok(frame) = Frame::decode(kind, body) else {
            continue;
        };
        // Every frame that decodes re-encodes to exactly its bytes, except a
        // Hello of another version, whose appended bytes are skipped.
        // (Version 4's Hello is laid out as version 3's.)
        let other_version = matches!(
            frame,
            Frame::Hello { version, .. } if !(3..=PROTOCOL_VERSION).contains(&version)
        );
        if !other_version {
            let mut out = BytesMut::new();
            frame.encode(&mut out).expect("a decoded frame encodes");
            assert_eq!(&out[..], raw, "re-encoding {frame:?}");
        }
        if let Frame::PullReply(reply) = &frame {
            for event in &reply.events {
                check_event(event);
            }
        }
        if let Frame::Publish { event, .. }
        | Frame::Deliver { event, .. }
        | Frame::PublishReliable { event, .. } = frame
        {
            check_event(&event);
        }
    }
});

/// The borrowed and the owned decoders agree, and the owned event's encoding
/// is a fixed point (a decoder accepts non-canonical presence bits, so the
/// first re-encoding may be shorter than the input, but never differ again).
fn check_event(event: &Bytes) {
    let parsed = EventRef::parse(event);
    let utf8 = |b| std::str::from_utf8(b).map_err(|_| ());
    let named = EventRef::parse_named(event, |t, p| Ok::<_, ()>((utf8(t)?, utf8(p)?)));
    assert_eq!(
        parsed.is_ok(),
        named.is_ok(),
        "parse and parse_named disagree"
    );
    if let (Ok(a), Ok(b)) = (&parsed, &named) {
        assert_eq!(
            (a.tag, a.publisher, a.payload),
            (b.tag, b.publisher, b.payload)
        );
    }
    let decoded = Event::decode(event);
    assert_eq!(parsed.is_ok(), decoded.is_ok(), "parse and decode disagree");
    let (Ok(view), Ok(owned)) = (parsed, decoded) else {
        return;
    };
    assert_eq!(view.fields().count(), owned.fields.len());
    for (name, _) in view.fields() {
        assert!(view.field(name).is_some(), "field {name:?} not found");
    }
    assert_eq!(view.payload, &owned.payload[..]);
    // Presence bit 0x80 (SHM_REF), and only it, makes the payload a
    // shared-memory reference, always of 24 bytes; the flags never do.
    assert_eq!(view.payload_in_shm, owned.header.payload_in_shm);
    assert_eq!(view.shm_ref().is_some(), view.payload_in_shm);
    if view.payload_in_shm {
        assert_eq!(view.payload.len(), tagwire_proto::ShmRef::LEN);
    }
    let mut once = BytesMut::new();
    owned.encode(&mut once).expect("a decoded event encodes");
    let once = once.freeze();
    let again = Event::decode(&once).expect("a re-encoded event decodes");
    let mut twice = BytesMut::new();
    again.encode(&mut twice).expect("encodes");
    assert_eq!(once, twice.freeze(), "event encoding is not a fixed point");
}
