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

use std::cell::Cell;

/// Bytes charged against `limits.max_buffered_bytes`. Single-threaded: one
/// per lane, shared by `Rc`.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    used: Cell<usize>,
    max: usize,
    /// Events a queue dropped or refused because the budget was spent.
    discards: Cell<u64>,
    /// Connections closed because the budget was spent.
    refusals: Cell<u64>,
    /// Counts reads: identifies the read chunk whose frames are being
    /// handled (see [`crate::channel::Outgoing`]).
    epoch: Cell<u64>,
}

impl MemoryBudget {
    /// A budget of `max` bytes, nothing used.
    pub(crate) fn new(max: usize) -> Self {
        MemoryBudget {
            used: Cell::new(0),
            max,
            discards: Cell::new(0),
            refusals: Cell::new(0),
            epoch: Cell::new(0),
        }
    }

    /// Reserves `n` bytes if they fit; false (and nothing reserved) if not.
    pub(crate) fn try_reserve(&self, n: usize) -> bool {
        match self.used.get().checked_add(n) {
            Some(u) if u <= self.max => {
                self.used.set(u);
                true
            }
            _ => false,
        }
    }

    /// Takes `n` bytes unconditionally (the caller already checked with
    /// [`room`](Self::room)).
    pub(crate) fn charge(&self, n: usize) {
        self.used.set(self.used.get().saturating_add(n));
    }

    /// Gives back `n` bytes reserved earlier.
    pub(crate) fn release(&self, n: usize) {
        debug_assert!(n <= self.used.get(), "released more than was reserved");
        self.used.set(self.used.get().saturating_sub(n));
    }

    /// A new read epoch: frames handled from now on come from a new read.
    pub(crate) fn next_epoch(&self) -> u64 {
        let e = self.epoch.get() + 1;
        self.epoch.set(e);
        e
    }

    /// Counts an event a queue dropped or refused for want of budget.
    pub(crate) fn note_discard(&self) {
        self.discards.set(self.discards.get() + 1);
    }

    /// Counts a connection closed for want of budget.
    pub(crate) fn note_refusal(&self) {
        self.refusals.set(self.refusals.get() + 1);
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
        self.max.saturating_sub(self.used.get())
    }

    /// Bytes in use.
    pub(crate) fn used(&self) -> usize {
        self.used.get()
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
    budget: std::rc::Rc<MemoryBudget>,
    bytes: usize,
}

impl Reservation {
    /// Reserves `bytes` from `budget`, or `None` if they do not fit.
    pub(crate) fn take(budget: &std::rc::Rc<MemoryBudget>, bytes: usize) -> Option<Self> {
        budget.try_reserve(bytes).then(|| Reservation {
            budget: budget.clone(),
            bytes,
        })
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
    use std::rc::Rc;

    #[test]
    fn reservations_are_refused_past_the_bound_and_given_back_on_drop() {
        let b = Rc::new(MemoryBudget::new(100));
        let r = Reservation::take(&b, 60).expect("fits");
        assert!(Reservation::take(&b, 41).is_none(), "60 + 41 > 100");
        assert_eq!(b.used(), 60);
        assert_eq!(b.room(), 40);
        drop(r);
        assert_eq!(b.used(), 0);
        assert!(!b.try_reserve(usize::MAX), "overflow is a refusal");
    }
}
