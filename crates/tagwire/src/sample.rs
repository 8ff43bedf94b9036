//! [`Sample`]: one received event, kept in its encoded form (a shared
//! `Bytes`) and read through accessors without copying the payload.

use bytes::Bytes;
use tagwire_proto::{DecodeError, Event, EventRef, NamedError};

use crate::clock::now_ns;

/// A received event. Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct Sample {
    raw: Bytes,
    payload_start: usize,
    tag_len: usize,
    /// The event's payload is a shared-memory reference (its presence
    /// bit `SHM_REF`), noted when `new` parsed it.
    shm_flagged: bool,
    /// A payload read in place in shared memory (`docs/shm.md`).
    shm: Option<InPlace>,
}

/// A payload in shared memory: the bytes hold the daemon's pin for this
/// session until the last clone drops.
#[derive(Clone, Debug)]
struct InPlace {
    bytes: Bytes,
    /// The event's deadline: past it the sample is not handed over (DSI's
    /// bounded validity), counted in `expired`.
    deadline: u64,
    expired: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl PartialEq for Sample {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw && self.payload() == other.payload()
    }
}

impl Eq for Sample {}

/// The tag and publisher of the last delivery a reader thread validated
/// as UTF-8: deliveries to a subscription mostly repeat them, so the next
/// event's names are compared with these instead of validated again (the
/// daemon's `TagCache` does the same for publishes).
#[derive(Debug, Default)]
pub(crate) struct KnownNames {
    tag: String,
    publisher: String,
}

impl KnownNames {
    /// [`EventRef::parse`], validating only names that differ from the
    /// last ones (and remembering those).
    fn parse<'a>(&'a mut self, raw: &'a [u8]) -> Result<EventRef<'a>, DecodeError> {
        let utf8 = |bytes, what| {
            std::str::from_utf8(bytes).map_err(|e| DecodeError::NotUtf8 {
                what,
                at: e.valid_up_to(),
            })
        };
        EventRef::parse_named(raw, move |tag, publisher| {
            let known: &'a mut KnownNames = self;
            if tag != known.tag.as_bytes() {
                utf8(tag, "tag")?.clone_into(&mut known.tag);
            }
            if publisher != known.publisher.as_bytes() {
                utf8(publisher, "publisher")?.clone_into(&mut known.publisher);
            }
            let known: &'a KnownNames = known;
            Ok((known.tag.as_str(), known.publisher.as_str()))
        })
        .map_err(|e| match e {
            NamedError::Decode(e) | NamedError::Names(e) => e,
        })
    }
}

impl Sample {
    /// Validates an encoded event.
    pub(crate) fn new(raw: Bytes) -> Result<Sample, DecodeError> {
        let ev = EventRef::parse(&raw)?;
        let (payload_start, tag_len, shm_flagged) = (
            raw.len() - ev.payload.len(),
            ev.tag.len(),
            ev.payload_in_shm,
        );
        Ok(Sample {
            payload_start,
            tag_len,
            shm_flagged,
            raw,
            shm: None,
        })
    }

    /// Validates an encoded event (its names only where they differ from
    /// `known`'s) and lets `look` read its parsed header (one parse per
    /// delivery: the reader's dedupe reads it here).
    pub(crate) fn new_with<R>(
        raw: Bytes,
        known: &mut KnownNames,
        look: impl FnOnce(&EventRef<'_>) -> R,
    ) -> Result<(Sample, R), DecodeError> {
        let ev = known.parse(&raw)?;
        let seen = look(&ev);
        let (payload_start, tag_len, shm_flagged) = (
            raw.len() - ev.payload.len(),
            ev.tag.len(),
            ev.payload_in_shm,
        );
        let sample = Sample {
            payload_start,
            tag_len,
            shm_flagged,
            raw,
            shm: None,
        };
        Ok((sample, seen))
    }

    /// The payload reference of an event whose payload is in shared memory.
    /// (Every delivery asks, so the common answer, none, costs no parse.)
    pub(crate) fn shm_ref(&self) -> Option<tagwire_proto::ShmRef> {
        if !self.shm_flagged {
            return None;
        }
        tagwire_proto::ShmRef::decode(&self.raw[self.payload_start..]).ok()
    }

    /// Attaches the payload its shared-memory reference points at;
    /// `expired` counts it if its deadline passes before it is handed over.
    pub(crate) fn with_shm_payload(
        mut self,
        bytes: Bytes,
        expired: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Sample {
        let deadline = tagwire_core::defer::deadline(&self.event());
        self.shm = Some(InPlace {
            bytes,
            deadline,
            expired,
        });
        self
    }

    /// The sample as handed to the application: `None` for a shared-memory
    /// payload past its deadline (skipped, counted; its pin is given back).
    pub(crate) fn settle(self) -> Option<Sample> {
        match &self.shm {
            Some(p) if p.deadline != tagwire_core::defer::NEVER && now_ns() >= p.deadline => {
                p.expired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                None
            }
            _ => Some(self),
        }
    }

    /// Whether the payload is read in place in shared memory (no copy was
    /// made on the way from the publisher; see `docs/shm.md`).
    pub fn is_in_place(&self) -> bool {
        self.shm.is_some()
    }

    /// The tag the event was published on.
    pub fn tag(&self) -> &str {
        // Validated as UTF-8 in `new`; the tag starts after its u16 length.
        std::str::from_utf8(&self.raw[2..2 + self.tag_len]).unwrap_or_default()
    }

    /// The payload, shared with the receive buffer (no copy), or with the
    /// shared-memory packet it lies in (see [`Sample::is_in_place`]; the
    /// packet is not reused while a clone of these bytes lives).
    pub fn payload(&self) -> Bytes {
        match &self.shm {
            None => self.raw.slice(self.payload_start..),
            Some(p) => p.bytes.clone(),
        }
    }

    /// The full header and fields, borrowed; the payload is the one
    /// [`Sample::payload`] gives (for a shared-memory payload, the bytes in
    /// place, not the reference that travelled).
    pub fn event(&self) -> EventRef<'_> {
        // `new` validated these bytes, so parsing again cannot fail; fall back
        // to an empty view rather than panic if that invariant were broken.
        let mut ev = EventRef::parse(&self.raw).unwrap_or_else(|_| empty_event());
        if let Some(p) = &self.shm {
            ev.payload = &p.bytes;
            ev.payload_in_shm = false;
        }
        ev
    }

    /// An owned copy of the event (allocates for the header and fields).
    pub fn to_event(&self) -> Event {
        let mut e = Event::decode(&self.raw).unwrap_or_default();
        if self.shm.is_some() {
            e.header.payload_in_shm = false;
            e.payload = self.payload();
        }
        e
    }

    /// The encoded event, as it travelled.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

fn empty_event() -> EventRef<'static> {
    const EMPTY: &[u8] = &[
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    EventRef::parse(EMPTY).expect("the empty event encoding is valid")
}

impl std::fmt::Debug for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ev = self.event();
        f.debug_struct("Sample")
            .field("tag", &ev.tag)
            .field("publisher", &ev.publisher)
            .field("seq", &ev.seq)
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::ShmRef;

    fn encoded(ev: &Event) -> Bytes {
        let mut out = bytes::BytesMut::new();
        ev.encode(&mut out).expect("encodes");
        out.freeze()
    }

    #[test]
    fn shm_ref_is_read_from_a_flagged_payload_only() {
        let r = ShmRef {
            region: 7,
            seq: 42,
            len: 1024,
            chunk: 3,
        };
        let mut ev = Event::new("/a/b", Bytes::copy_from_slice(&r.encode()));
        let plain = Sample::new(encoded(&ev)).expect("valid");
        assert_eq!(plain.shm_ref(), None, "no flag: the bytes are a payload");
        ev.header.payload_in_shm = true;
        let flagged = Sample::new(encoded(&ev)).expect("valid");
        assert_eq!(flagged.shm_ref(), Some(r));
        assert_eq!(flagged.tag(), "/a/b");
    }

    /// `raw` with the first occurrence of `name` changed to invalid UTF-8
    /// of the same length.
    fn spoiled(raw: &Bytes, name: &[u8]) -> Bytes {
        let at = raw
            .windows(name.len())
            .position(|w| w == name)
            .expect("the name is in the event");
        let mut out = raw.to_vec();
        out[at + 1] = 0xff;
        Bytes::from(out)
    }

    #[test]
    fn known_names_are_validated_again_whenever_they_differ() {
        let mut ev = Event::new("/a/b", Bytes::from_static(b"x"));
        ev.header.publisher = "/pub".into();
        let good = encoded(&ev);
        let mut known = KnownNames::default();
        for _ in 0..2 {
            let (s, ()) = Sample::new_with(good.clone(), &mut known, |_| ()).expect("valid");
            assert_eq!(s.tag(), "/a/b");
            assert_eq!(s.event().publisher, "/pub");
        }
        // Same lengths as the known names, other (invalid) bytes.
        for (name, what) in [(&b"/a/b"[..], "tag"), (&b"/pub"[..], "publisher")] {
            let bad = spoiled(&good, name);
            match Sample::new_with(bad, &mut known, |_| ()) {
                Err(DecodeError::NotUtf8 { what: w, .. }) => assert_eq!(w, what),
                Err(e) => panic!("{what}: wrong error {e}"),
                Ok(_) => panic!("{what}: invalid UTF-8 accepted"),
            }
            let (s, ()) = Sample::new_with(good.clone(), &mut known, |_| ()).expect("valid");
            assert_eq!(s.tag(), "/a/b");
        }
    }
}
