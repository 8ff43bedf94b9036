//! RFC 3550 interarrival jitter of a channel's input and output, for every
//! channel (docs/time.md, "Jitter of every channel"), kept in plain relaxed
//! atomics updated under the queue lock the hot path already holds, and
//! timed by clock reads the path already makes:
//! - **input**: the time of the read that brought the event (the
//!   connection reads its clock once per read, for its engine); per
//!   channel, the first event with a source time of each read is observed
//!   (the read's events share its arrival time);
//! - **output**: the writer's clock read for a write batch: every batch
//!   that reads the clock anyway (an event with a deadline, a timed or
//!   paced channel), and 1 in [`OUTPUT_SAMPLE`] of the others, so that a
//!   best-effort flood pays one clock read per [`OUTPUT_SAMPLE`] batches.

use tagwire_core::tds::Jitter;

use crate::sync::Count;

/// Write batches of a connection between two output-jitter samples when
/// no event of them needs the clock.
pub(crate) const OUTPUT_SAMPLE: u64 = 16;

/// One RFC 3550 estimator in three relaxed atomics. Its writer holds the
/// channel's queue lock (input: the publisher's lane; output: the
/// subscriber's writer), so loads and stores need no locked instruction.
#[derive(Debug, Default)]
pub(crate) struct SharedJitter([Count; 3]);

impl SharedJitter {
    /// The estimator as it stands (to update, then [`store`](Self::store)).
    pub(crate) fn load(&self) -> Jitter {
        Jitter::from_parts([self.0[0].get(), self.0[1].get(), self.0[2].get()])
    }

    /// Keeps `j` (see [`load`](Self::load)).
    pub(crate) fn store(&self, j: &Jitter) {
        for (c, v) in self.0.iter().zip(j.to_parts()) {
            c.set(v);
        }
    }

    /// The estimate, ns, or `None` before its first event.
    pub(crate) fn ns(&self) -> Option<u64> {
        let j = self.load();
        j.has_seen().then(|| j.ns())
    }
}

/// The source time of an encoded event (docs/protocol.md, "Event": tag
/// length, tag, publisher length, publisher, sequence number, source
/// time), without parsing the rest; `None` if the bytes are too short.
/// Only the sampled write batches read it.
pub(crate) fn source_time_of(event: &[u8]) -> Option<u64> {
    let tag = u16::from_le_bytes(event.get(..2)?.try_into().ok()?) as usize;
    let publisher = *event.get(2 + tag)? as usize;
    let at = 2 + tag + 1 + publisher + 8;
    Some(u64::from_le_bytes(event.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_time_is_read_from_the_encoded_event_and_short_bytes_are_none() {
        let mut out = bytes::BytesMut::new();
        let mut ev = tagwire_proto::Event::new("/a/b", bytes::Bytes::from_static(b"xyz"));
        ev.header.publisher = "/pub".into();
        ev.header.seq = 9;
        ev.header.source_time_ns = 0x0102_0304_0506_0708;
        ev.encode(&mut out).expect("a valid event");
        assert_eq!(source_time_of(&out), Some(0x0102_0304_0506_0708));
        for n in 0..2 + 4 + 1 + 4 + 8 + 8 {
            assert_eq!(source_time_of(&out[..n]), None, "{n} bytes");
        }
    }

    proptest::proptest! {
        /// On any bytes it never panics, and on an event the parser takes
        /// it reads the parser's source time.
        #[test]
        fn the_source_time_is_the_parsers_on_any_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96),
        ) {
            let ours = source_time_of(&bytes);
            if let Ok(ev) = tagwire_proto::EventRef::parse(&bytes) {
                proptest::prop_assert_eq!(ours, Some(ev.source_time_ns));
            }
        }
    }

    #[test]
    fn a_shared_estimator_is_the_core_estimator() {
        let (shared, mut plain) = (SharedJitter::default(), Jitter::default());
        assert_eq!(shared.ns(), None);
        for i in 0..50u64 {
            let (at, src) = (1_000_000 + i * 1000 + (i % 3) * 70, i * 1000);
            let mut j = shared.load();
            j.observe(at, src);
            shared.store(&j);
            plain.observe(at, src);
        }
        assert_eq!(shared.ns(), Some(plain.ns()));
        assert!(plain.ns() > 0);
    }
}
