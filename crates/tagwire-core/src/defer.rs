//! Events held until their start time (TAO's `StartTime`: the earliest time
//! an event may be delivered). Sans-I/O: the caller passes the current time
//! and asks for what is due; it also sleeps until [`Deferred::next_due`].

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Why an item was not deferred.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeferError {
    /// Holding it would exceed a bound.
    #[error("{held} events ({held_bytes} bytes) already wait for their start time; the limit is {max_items} events and {max_bytes} bytes")]
    Full {
        /// Items held now.
        held: usize,
        /// Bytes held now.
        held_bytes: usize,
        /// The item bound.
        max_items: usize,
        /// The byte bound.
        max_bytes: usize,
    },
}

#[derive(Debug)]
struct Entry<T> {
    due: u64,
    seq: u64,
    bytes: usize,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// The deadline of an event that does not expire.
pub const NEVER: u64 = u64::MAX;

/// When the event expires (its timeout after the source timestamp, or its
/// stop time), ns since the Unix epoch; [`NEVER`] if it does not. An event
/// without a source timestamp cannot expire relative to it.
pub fn deadline(ev: &tagwire_proto::EventRef<'_>) -> u64 {
    use tagwire_proto::Expiry;
    match ev.expiry {
        Expiry::Never => NEVER,
        Expiry::AfterNs(_) if ev.source_time_ns == 0 => NEVER,
        Expiry::AfterNs(d) => ev.source_time_ns.saturating_add(d),
        Expiry::AtNs(t) => t,
    }
}

/// What to do with an event arriving at `now` (wall-clock ns since the Unix
/// epoch), decided once per event from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Its deadline has passed: drop and count it.
    Expired,
    /// Its start time is still ahead: hold it until then.
    Hold {
        /// The start time.
        until: u64,
        /// Its deadline ([`NEVER`]: none).
        deadline: u64,
    },
    /// Deliver it now; it expires at `deadline` ([`NEVER`]: never).
    Now {
        /// Its deadline.
        deadline: u64,
    },
}

/// Decides [`Admit`] for `ev` at `now`.
pub fn admit(ev: &tagwire_proto::EventRef<'_>, now: u64) -> Admit {
    let deadline = deadline(ev);
    if deadline != NEVER && now > deadline {
        return Admit::Expired;
    }
    match ev.start_time_ns {
        Some(until) if until > now => Admit::Hold { until, deadline },
        _ => Admit::Now { deadline },
    }
}

/// [`admit`], asking for the time only when `ev` has a lifetime or a start
/// time: most events have neither, and a clock read per event is a
/// measurable share of the router's per-event cost.
pub fn admit_with(ev: &tagwire_proto::EventRef<'_>, now: impl FnOnce() -> u64) -> Admit {
    if ev.start_time_ns.is_none() && deadline(ev) == NEVER {
        return Admit::Now { deadline: NEVER };
    }
    admit(ev, now())
}

/// Items held until a due time (ns, any clock the caller uses consistently),
/// released in due-time order, ties in the order they were deferred.
///
/// Bounded by an item count and a byte total; [`Deferred::push`] refuses an
/// item beyond either (nothing already held is dropped).
#[derive(Debug)]
pub struct Deferred<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    bytes: usize,
    max_items: usize,
    max_bytes: usize,
    next_seq: u64,
}

impl<T> Deferred<T> {
    /// An empty set holding at most `max_items` items and `max_bytes` bytes.
    pub fn new(max_items: usize, max_bytes: usize) -> Self {
        Deferred {
            heap: BinaryHeap::new(),
            bytes: 0,
            max_items,
            max_bytes,
            next_seq: 0,
        }
    }

    /// Holds `item` (accounted as `bytes`) until `due`.
    pub fn push(&mut self, due: u64, item: T, bytes: usize) -> Result<(), DeferError> {
        if self.heap.len() >= self.max_items || self.bytes.saturating_add(bytes) > self.max_bytes {
            return Err(DeferError::Full {
                held: self.heap.len(),
                held_bytes: self.bytes,
                max_items: self.max_items,
                max_bytes: self.max_bytes,
            });
        }
        self.bytes += bytes;
        self.next_seq += 1;
        self.heap.push(Reverse(Entry {
            due,
            seq: self.next_seq,
            bytes,
            item,
        }));
        Ok(())
    }

    /// The earliest item due at or before `now`, taken out.
    pub fn pop_due(&mut self, now: u64) -> Option<T> {
        if self.heap.peek()?.0.due > now {
            return None;
        }
        let Reverse(e) = self.heap.pop()?;
        self.bytes -= e.bytes;
        Some(e.item)
    }

    /// When the earliest held item is due.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.0.due)
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Bytes held (as accounted by `push`).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn admit_with_reads_the_clock_only_for_timed_events() {
        let plain = tagwire_proto::Event::new("/t", "x");
        let bytes = encoded(&plain);
        let ev = tagwire_proto::EventRef::parse(&bytes).expect("parse");
        let mut asked = false;
        let d = admit_with(&ev, || {
            asked = true;
            5
        });
        assert_eq!(d, Admit::Now { deadline: NEVER });
        assert!(
            !asked,
            "an event without lifetime or start time needs no clock"
        );

        let mut timed = tagwire_proto::Event::new("/t", "x");
        timed.header.start_time_ns = Some(100);
        let bytes = encoded(&timed);
        let ev = tagwire_proto::EventRef::parse(&bytes).expect("parse");
        let d = admit_with(&ev, || 50);
        assert_eq!(
            d,
            admit(&ev, 50),
            "a timed event is decided at the time given"
        );
        assert!(matches!(d, Admit::Hold { until: 100, .. }));
    }

    fn encoded(e: &tagwire_proto::Event) -> Vec<u8> {
        let mut b = bytes::BytesMut::new();
        e.encode(&mut b).expect("encode");
        b.to_vec()
    }

    #[test]
    fn releases_in_due_order_and_only_when_due() {
        let mut d = Deferred::new(10, 100);
        d.push(30, "c", 1).expect("room");
        d.push(10, "a", 1).expect("room");
        d.push(20, "b", 1).expect("room");
        assert_eq!(d.next_due(), Some(10));
        assert_eq!(d.pop_due(9), None);
        assert_eq!(d.pop_due(25), Some("a"));
        assert_eq!(d.pop_due(25), Some("b"));
        assert_eq!(d.pop_due(25), None);
        assert_eq!(d.len(), 1);
        assert_eq!(d.pop_due(u64::MAX), Some("c"));
        assert!(d.is_empty());
        assert_eq!(d.bytes(), 0);
    }

    #[test]
    fn refuses_beyond_either_bound_and_keeps_what_it_holds() {
        let mut d = Deferred::new(2, 10);
        d.push(1, 1, 6).expect("room");
        let e = d.push(1, 2, 5).unwrap_err();
        assert!(e.to_string().contains("10 bytes"), "{e}");
        d.push(1, 3, 4).expect("room");
        assert!(matches!(
            d.push(1, 4, 0),
            Err(DeferError::Full { held: 2, .. })
        ));
        assert_eq!(d.pop_due(1), Some(1));
        assert_eq!(d.pop_due(1), Some(3));
    }

    proptest! {
        #[test]
        fn pops_sorted_by_due_then_push_order(dues in prop::collection::vec(0u64..20, 0..50), now in 0u64..25) {
            let mut d = Deferred::new(usize::MAX, usize::MAX);
            for (i, due) in dues.iter().enumerate() {
                d.push(*due, i, 1).expect("unbounded");
            }
            let mut want: Vec<(u64, usize)> = dues.iter().copied().zip(0..).filter(|(due, _)| *due <= now).collect();
            want.sort();
            let mut got = Vec::new();
            while let Some(i) = d.pop_due(now) {
                got.push((dues[i], i));
            }
            prop_assert_eq!(got, want);
            prop_assert!(!matches!(d.next_due(), Some(n) if n <= now));
        }
    }
}
