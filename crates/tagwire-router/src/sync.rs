//! Thread-safe stand-ins for `RefCell` and `Cell`, so state shared by the
//! lanes reads like the single-threaded code it was: [`Locked`] is a mutex
//! whose `borrow`/`borrow_mut` lock it (a poisoned lock is taken over: the
//! router's invariants are restored by the code that holds it, not by
//! unwinding), [`Flag`] and [`Count`] are relaxed atomics.
//!
//! Lock order, outermost first: the router `State`, then a channel's queue,
//! then an outbox's lists. Nothing holds a lock across an `.await`.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A mutex with `RefCell`'s method names. Unlike `RefCell`, two borrows on
/// one thread deadlock: take one and pass it down.
#[derive(Debug, Default)]
pub(crate) struct Locked<T>(Mutex<T>);

impl<T> Locked<T> {
    pub(crate) fn new(value: T) -> Self {
        Locked(Mutex::new(value))
    }

    /// Locks (shared use; the same lock as [`borrow_mut`](Self::borrow_mut)).
    pub(crate) fn borrow(&self) -> MutexGuard<'_, T> {
        self.0.lock()
    }

    /// The value, with no lock (the caller owns it exclusively).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    /// Runs `f` under the lock and hands the lock to a waiting lane, if any,
    /// when done (for background work that re-locks at once: housekeeping,
    /// admin requests).
    pub(crate) fn with_fair<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut g = self.0.lock();
        let r = f(&mut g);
        MutexGuard::unlock_fair(g);
        r
    }

    /// Locks for a change.
    pub(crate) fn borrow_mut(&self) -> MutexGuard<'_, T> {
        self.borrow()
    }
}

/// A boolean shared between lanes.
#[derive(Debug, Default)]
pub(crate) struct Flag(AtomicBool);

impl Flag {
    pub(crate) fn new(v: bool) -> Self {
        Flag(AtomicBool::new(v))
    }
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    pub(crate) fn set(&self, v: bool) {
        self.0.store(v, Ordering::Relaxed)
    }
    pub(crate) fn replace(&self, v: bool) -> bool {
        self.0.swap(v, Ordering::Relaxed)
    }
}

/// A counter shared between lanes.
#[derive(Debug, Default)]
pub(crate) struct Count(AtomicU64);

impl Count {
    pub(crate) fn new(v: u64) -> Self {
        Count(AtomicU64::new(v))
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    pub(crate) fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
    /// Adds `n`; returns the new value.
    pub(crate) fn add(&self, n: u64) -> u64 {
        self.0.fetch_add(n, Ordering::Relaxed).wrapping_add(n)
    }
    /// Subtracts `n`, saturating at 0.
    pub(crate) fn sub_saturating(&self, n: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    pub(crate) fn replace(&self, v: u64) -> u64 {
        self.0.swap(v, Ordering::Relaxed)
    }
}

/// The router's shared state may move between lane threads.
#[allow(dead_code)]
fn assert_shareable() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Locked<crate::state::State>>();
    send_sync::<crate::channel::Channel>();
    send_sync::<crate::channel::Outbox>();
}
