//! [`Sample`]: one received event, kept in its encoded form (a shared
//! `Bytes`) and read through accessors without copying the payload.

use bytes::Bytes;
use tagwire_proto::{DecodeError, Event, EventRef};

/// A received event. Cheap to clone (the bytes are shared).
#[derive(Clone, PartialEq, Eq)]
pub struct Sample {
    raw: Bytes,
    payload_start: usize,
    tag_len: usize,
}

impl Sample {
    /// Validates an encoded event.
    pub(crate) fn new(raw: Bytes) -> Result<Sample, DecodeError> {
        let ev = EventRef::parse(&raw)?;
        Ok(Sample {
            payload_start: raw.len() - ev.payload.len(),
            tag_len: ev.tag.len(),
            raw,
        })
    }

    /// The tag the event was published on.
    pub fn tag(&self) -> &str {
        // Validated as UTF-8 in `new`; the tag starts after its u16 length.
        std::str::from_utf8(&self.raw[2..2 + self.tag_len]).unwrap_or_default()
    }

    /// The payload, shared with the receive buffer (no copy).
    pub fn payload(&self) -> Bytes {
        self.raw.slice(self.payload_start..)
    }

    /// The full header and fields, borrowed.
    pub fn event(&self) -> EventRef<'_> {
        // `new` validated these bytes, so parsing again cannot fail; fall back
        // to an empty view rather than panic if that invariant were broken.
        EventRef::parse(&self.raw).unwrap_or_else(|_| empty_event())
    }

    /// An owned copy of the event (allocates for the header and fields).
    pub fn to_event(&self) -> Event {
        Event::decode(&self.raw).unwrap_or_default()
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
            .field("payload_len", &ev.payload.len())
            .finish()
    }
}
