//! Bounded per-subscriber queues and their discard policies.
//!
//! Every subscriber's queue has a bound; what happens when an event arrives at
//! a full queue is the channel's [`DiscardPolicy`]:
//! - [`DropOldest`](DiscardPolicy::DropOldest) (default, TAO `fifo`): the
//!   oldest queued event makes room. Pick it for telemetry and video, where
//!   the newest sample matters most.
//! - [`DropNewest`](DiscardPolicy::DropNewest) (TAO `lifo`): the arriving event
//!   is dropped. Pick it when the first events of a burst matter most.
//! - [`Reject`](DiscardPolicy::Reject) (TAO `reject_new`): the arriving event
//!   is refused and the publisher is told (`QueueFull`), so it can slow down.
//!
//! Each queue counts what it dropped, so a slow consumer is visible in
//! `tagwire list`.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// What a full queue does with the next event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum DiscardPolicy {
    /// Drop the oldest queued event (TAO `fifo`).
    #[default]
    DropOldest,
    /// Drop the arriving event (TAO `lifo`).
    DropNewest,
    /// Refuse the arriving event and report it to the publisher (TAO `reject_new`).
    Reject,
}

impl DiscardPolicy {
    /// The canonical name (`drop_oldest`, `drop_newest`, `reject`).
    pub fn as_str(self) -> &'static str {
        match self {
            DiscardPolicy::DropOldest => "drop_oldest",
            DiscardPolicy::DropNewest => "drop_newest",
            DiscardPolicy::Reject => "reject",
        }
    }
}

impl fmt::Display for DiscardPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown discard policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown discard policy {0:?} (expected drop_oldest|fifo, drop_newest|lifo or reject|reject_new)")]
pub struct UnknownPolicy(pub String);

impl FromStr for DiscardPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop_oldest" | "fifo" => Ok(DiscardPolicy::DropOldest),
            "drop_newest" | "lifo" => Ok(DiscardPolicy::DropNewest),
            "reject" | "reject_new" => Ok(DiscardPolicy::Reject),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// The result of [`BoundedQueue::push`]. What was not kept is handed back.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Pushed<T> {
    /// Queued; `dropped` of the oldest events were discarded to make room
    /// (`DropOldest`; 0 when there was room).
    Queued {
        /// How many old events were dropped.
        dropped: usize,
    },
    /// Not queued: the queue was full (`DropNewest`), or the event alone is
    /// larger than the byte bound (any policy).
    DroppedNewest(T),
    /// Not queued: the queue was full and the policy is `Reject`.
    Rejected(T),
}

/// A FIFO bounded both in events and in bytes, with a discard policy; counts
/// what it discards.
#[derive(Debug, Clone)]
pub struct BoundedQueue<T> {
    items: VecDeque<(T, usize)>,
    bound: usize,
    max_bytes: usize,
    bytes: usize,
    policy: DiscardPolicy,
    dropped: u64,
}

impl<T> BoundedQueue<T> {
    /// A queue holding at most `bound` items (at least 1), with no byte bound.
    pub fn new(bound: usize, policy: DiscardPolicy) -> Self {
        Self::with_byte_limit(bound, usize::MAX, policy)
    }

    /// A queue holding at most `bound` items (at least 1) and `max_bytes`
    /// bytes, as counted by the sizes given to [`push`](Self::push).
    pub fn with_byte_limit(bound: usize, max_bytes: usize, policy: DiscardPolicy) -> Self {
        let bound = bound.max(1);
        // No slots up front: a subscription that never queues costs none
        // (64 preallocated slots were KBs per subscription, hundreds of MB
        // for 65,536 idle ones); the deque grows on demand up to `bound`.
        BoundedQueue {
            items: VecDeque::new(),
            bound,
            max_bytes,
            bytes: 0,
            policy,
            dropped: 0,
        }
    }

    fn fits_within(&self, size: usize, cap: usize) -> bool {
        self.items.len() < self.bound && self.bytes.saturating_add(size) <= cap
    }

    /// Offers `item` of `size` bytes; at a bound, applies the discard policy.
    pub fn push(&mut self, item: T, size: usize) -> Pushed<T> {
        self.push_within(item, size, usize::MAX)
    }

    /// Like [`push`](Self::push), but the queue may grow by at most `room`
    /// bytes beyond what it holds now (a share of a wider memory budget): its
    /// byte bound for this push is `min(max_bytes, bytes() + room)`. At that
    /// bound the discard policy applies as at the queue's own bound, so a
    /// `DropOldest` queue makes room by dropping its own oldest events, and
    /// an event that cannot fit even in an emptied queue is dropped (and
    /// counted) whatever the policy.
    pub fn push_within(&mut self, item: T, size: usize, room: usize) -> Pushed<T> {
        let cap = self.max_bytes.min(self.bytes.saturating_add(room));
        if size > cap {
            self.dropped += 1;
            return Pushed::DroppedNewest(item);
        }
        if !self.fits_within(size, cap) {
            match self.policy {
                DiscardPolicy::DropOldest => {}
                DiscardPolicy::DropNewest => {
                    self.dropped += 1;
                    return Pushed::DroppedNewest(item);
                }
                DiscardPolicy::Reject => {
                    self.dropped += 1;
                    return Pushed::Rejected(item);
                }
            }
        }
        let mut dropped = 0;
        while !self.fits_within(size, cap) {
            // size <= max_bytes, so emptying the queue always makes room.
            let Some((_, old)) = self.items.pop_front() else {
                break;
            };
            self.bytes -= old;
            dropped += 1;
        }
        self.dropped += dropped as u64;
        self.bytes += size;
        self.items.push_back((item, size));
        Pushed::Queued { dropped }
    }

    /// Takes the oldest item.
    pub fn pop(&mut self) -> Option<T> {
        let (item, size) = self.items.pop_front()?;
        self.bytes -= size;
        Some(item)
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The bound, in events.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The discard policy.
    pub fn policy(&self) -> DiscardPolicy {
        self.policy
    }

    /// Events dropped or rejected so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Iterates over queued items, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(policy: DiscardPolicy) -> (BoundedQueue<u32>, Vec<Pushed<u32>>) {
        let mut q = BoundedQueue::new(3, policy);
        let out = (0..5).map(|i| q.push(i, 1)).collect();
        (q, out)
    }

    #[test]
    fn drop_oldest_keeps_the_newest_events_and_counts_drops() {
        let (mut q, out) = fill(DiscardPolicy::DropOldest);
        assert_eq!(out[2], Pushed::Queued { dropped: 0 });
        assert_eq!(out[3], Pushed::Queued { dropped: 1 });
        assert_eq!(out[4], Pushed::Queued { dropped: 1 });
        assert_eq!(q.dropped(), 2);
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(2), Some(3), Some(4), None)
        );
    }

    #[test]
    fn drop_newest_keeps_the_first_events() {
        let (q, out) = fill(DiscardPolicy::DropNewest);
        assert_eq!(out[3], Pushed::DroppedNewest(3));
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(q.dropped(), 2);
    }

    #[test]
    fn reject_hands_the_event_back_and_counts_it() {
        let (q, out) = fill(DiscardPolicy::Reject);
        assert_eq!(out[4], Pushed::Rejected(4));
        assert_eq!(q.len(), 3);
        assert_eq!(q.dropped(), 2);
    }

    #[test]
    fn byte_bound_drops_as_many_old_events_as_needed() {
        let mut q = BoundedQueue::with_byte_limit(100, 10, DiscardPolicy::DropOldest);
        for i in 0..5 {
            assert_eq!(q.push(i, 2), Pushed::Queued { dropped: 0 });
        }
        assert_eq!(q.push(9, 6), Pushed::Queued { dropped: 3 });
        assert_eq!(q.bytes(), 10);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![3, 4, 9]);
        assert_eq!(
            q.push(7, 11),
            Pushed::DroppedNewest(7),
            "larger than the byte bound"
        );
        assert_eq!(q.dropped(), 4);
    }

    #[test]
    fn byte_bound_applies_reject_policy() {
        let mut q = BoundedQueue::with_byte_limit(100, 4, DiscardPolicy::Reject);
        assert_eq!(q.push(1, 4), Pushed::Queued { dropped: 0 });
        assert_eq!(q.push(2, 1), Pushed::Rejected(2));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn push_within_a_budget_share_applies_the_policy_at_the_share() {
        // Room for 3 more bytes: a DropOldest queue makes room from itself.
        let mut q = BoundedQueue::with_byte_limit(100, 100, DiscardPolicy::DropOldest);
        assert_eq!(q.push(1, 4), Pushed::Queued { dropped: 0 });
        assert_eq!(q.push_within(2, 4, 3), Pushed::Queued { dropped: 1 });
        assert_eq!(q.bytes(), 4);
        // Nothing queued and no room: dropped and counted, whatever the policy.
        let mut q = BoundedQueue::with_byte_limit(100, 100, DiscardPolicy::DropOldest);
        assert_eq!(q.push_within(1, 4, 3), Pushed::DroppedNewest(1));
        assert_eq!(q.dropped(), 1);
        let mut q = BoundedQueue::with_byte_limit(100, 100, DiscardPolicy::Reject);
        assert_eq!(q.push(1, 4), Pushed::Queued { dropped: 0 });
        assert_eq!(q.push_within(2, 4, 0), Pushed::Rejected(2));
        assert_eq!(q.bytes(), 4);
    }

    #[test]
    fn policy_names_parse_with_tao_aliases_and_unknown_names_are_named() {
        assert_eq!("fifo".parse(), Ok(DiscardPolicy::DropOldest));
        assert_eq!("lifo".parse(), Ok(DiscardPolicy::DropNewest));
        assert_eq!("reject_new".parse(), Ok(DiscardPolicy::Reject));
        let e = "sometimes".parse::<DiscardPolicy>().unwrap_err();
        assert!(e.to_string().contains("\"sometimes\""));
    }
}
