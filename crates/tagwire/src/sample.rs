//! [`Sample`]: one received event, kept in its encoded form (a shared
//! `Bytes`) and read through accessors without copying the payload.

use bytes::Bytes;
use tagwire_proto::{DecodeError, Event, EventRef};

/// A received event. Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct Sample {
    raw: Bytes,
    payload_start: usize,
    tag_len: usize,
    /// A payload in shared memory (`docs/shm.md`): `Pending` until handed
    /// to the application, then the bytes (in place, or a copy).
    shm: Option<ShmPayload>,
}

#[derive(Clone, Debug)]
enum ShmPayload {
    Pending(crate::shm::Pending),
    Read { bytes: Bytes, in_place: bool },
}

impl PartialEq for Sample {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw && self.payload() == other.payload()
    }
}

impl Eq for Sample {}

impl Sample {
    /// Validates an encoded event.
    pub(crate) fn new(raw: Bytes) -> Result<Sample, DecodeError> {
        let ev = EventRef::parse(&raw)?;
        Ok(Sample {
            payload_start: raw.len() - ev.payload.len(),
            tag_len: ev.tag.len(),
            raw,
            shm: None,
        })
    }

    /// The payload reference of an event whose payload is in shared memory.
    pub(crate) fn shm_ref(&self) -> Option<tagwire_proto::ShmRef> {
        let ev = EventRef::parse(&self.raw).ok()?;
        if ev.flags & tagwire_proto::flags::SHM_PAYLOAD == 0 {
            return None;
        }
        tagwire_proto::ShmRef::decode(ev.payload).ok()
    }

    /// Attaches the mapped region its reference points into (read later, at hand-over).
    pub(crate) fn with_pending(mut self, p: crate::shm::Pending) -> Sample {
        self.shm = Some(ShmPayload::Pending(p));
        self
    }

    /// Reads a pending shared-memory payload (at hand-over to the
    /// application); `None`: the packet was reclaimed meanwhile, skip it.
    pub(crate) fn settle(mut self) -> Option<Sample> {
        if let Some(ShmPayload::Pending(p)) = &self.shm {
            let (bytes, in_place) = p.read()?;
            self.shm = Some(ShmPayload::Read { bytes, in_place });
        }
        Some(self)
    }

    /// Whether the payload is read in place in shared memory (no copy was
    /// made on the way from the publisher; see `docs/shm.md`).
    pub fn is_in_place(&self) -> bool {
        matches!(self.shm, Some(ShmPayload::Read { in_place: true, .. }))
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
            Some(ShmPayload::Read { bytes, .. }) => bytes.clone(),
            Some(ShmPayload::Pending(_)) => Bytes::new(),
        }
    }

    /// The full header and fields, borrowed.
    pub fn event(&self) -> EventRef<'_> {
        // `new` validated these bytes, so parsing again cannot fail; fall back
        // to an empty view rather than panic if that invariant were broken.
        EventRef::parse(&self.raw).unwrap_or_else(|_| empty_event())
    }

    /// An owned copy of the event (allocates for the header and fields).
    pub fn to_event(&self) -> Event {
        let mut e = Event::decode(&self.raw).unwrap_or_default();
        if self.shm.is_some() {
            e.header.flags &= !tagwire_proto::flags::SHM_PAYLOAD;
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
