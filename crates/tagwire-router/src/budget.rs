//! The router-wide memory budget (`limits.max_buffered_bytes`): one bound
//! shared by every read buffer grown for a large frame and every queued
//! event, so that no mix of clients can make the daemon hold more than the
//! budget in frames and queues, as the OS counts it.
//!
//! Who pays what:
//! - a connection whose next frame does not fit its 64 KiB read chunk
//!   reserves the frame's whole size before the buffer grows, and gives it
//!   back when the frame is complete (or the connection ends); a refused
//!   reservation closes that connection with `LimitReached`;
//! - a channel reserves each event it queues (what the event really keeps
//!   alive, see [`crate::channel`]) and gives it back when the event leaves
//!   the queue or the channel is dropped; a refused reservation is handled
//!   by the channel's discard policy, like its own byte bound.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crate::sync::Count;

/// Bytes charged against `limits.max_buffered_bytes`. Single-threaded: one
/// per lane, shared by `Rc`.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    used: AtomicUsize,
    max: usize,
    /// Events a queue dropped or refused because the budget was spent.
    discards: Count,
    /// Connections closed because the budget was spent.
    refusals: Count,
    /// Counts reads: identifies the read chunk whose frames are being
    /// handled (see [`crate::channel::Outgoing`]).
    epoch: Count,
}

impl MemoryBudget {
    /// A budget of `max` bytes, nothing used.
    pub(crate) fn new(max: usize) -> Self {
        MemoryBudget {
            used: AtomicUsize::new(0),
            max,
            discards: Count::new(0),
            refusals: Count::new(0),
            epoch: Count::new(0),
        }
    }

    /// Reserves `n` bytes if they fit; false (and nothing reserved) if not.
    pub(crate) fn try_reserve(&self, n: usize) -> bool {
        self.used
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(n).filter(|u| *u <= self.max)
            })
            .is_ok()
    }

    /// Takes `n` bytes unconditionally (the caller already checked with
    /// [`room`](Self::room)).
    pub(crate) fn charge(&self, n: usize) {
        let _ = self
            .used
            .fetch_update(Relaxed, Relaxed, |u| Some(u.saturating_add(n)));
    }

    /// Gives back `n` bytes reserved earlier.
    pub(crate) fn release(&self, n: usize) {
        let before = self
            .used
            .fetch_update(Relaxed, Relaxed, |u| Some(u.saturating_sub(n)))
            .unwrap_or(0);
        debug_assert!(n <= before, "released more than was reserved");
    }

    /// A new read epoch: frames handled from now on come from a new read.
    pub(crate) fn next_epoch(&self) -> u64 {
        self.epoch.add(1)
    }

    /// Counts an event a queue dropped or refused for want of budget.
    pub(crate) fn note_discard(&self) {
        let _ = self.discards.add(1);
    }

    /// Counts a connection closed for want of budget.
    pub(crate) fn note_refusal(&self) {
        let _ = self.refusals.add(1);
    }

    /// Events dropped or refused for want of budget so far.
    pub(crate) fn discards(&self) -> u64 {
        self.discards.get()
    }

    /// Connections closed for want of budget so far.
    pub(crate) fn refusals(&self) -> u64 {
        self.refusals.get()
    }

    /// Bytes still free.
    pub(crate) fn room(&self) -> usize {
        self.max.saturating_sub(self.used.load(Relaxed))
    }

    /// Bytes in use.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The bound.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// A reservation that is given back when dropped (a read buffer grown for a
/// large frame).
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Reservation {
    /// Reserves `bytes` from `budget`, or `None` if they do not fit.
    pub(crate) fn take(budget: &Arc<MemoryBudget>, bytes: usize) -> Option<Self> {
        budget.try_reserve(bytes).then(|| Reservation {
            budget: budget.clone(),
            bytes,
        })
    }

    /// Charges `bytes` to `budget` whether or not they fit (bytes already
    /// held elsewhere, kept in the budget while they move), given back when
    /// dropped.
    pub(crate) fn charged(budget: &Arc<MemoryBudget>, bytes: usize) -> Self {
        budget.charge(bytes);
        Reservation {
            budget: budget.clone(),
            bytes,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_refused_past_the_bound_and_given_back_on_drop() {
        let b = Arc::new(MemoryBudget::new(100));
        let r = Reservation::take(&b, 60).expect("fits");
        assert!(Reservation::take(&b, 41).is_none(), "60 + 41 > 100");
        assert_eq!(b.used(), 60);
        assert_eq!(b.room(), 40);
        drop(r);
        assert_eq!(b.used(), 0);
        assert!(!b.try_reserve(usize::MAX), "overflow is a refusal");
    }
}
