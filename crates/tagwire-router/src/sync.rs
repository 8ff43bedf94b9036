//! Thread-safe stand-ins for `RefCell` and `Cell`, so state shared by the
//! lanes reads like the single-threaded code it was: [`Locked`] is a mutex
//! whose `borrow`/`borrow_mut` lock it (there is no poisoning: the router's
//! invariants are restored by the code that holds it, not by unwinding),
//! [`Flag`] and [`Count`] are relaxed atomics.
//!
//! [`Locked`] **inherits priority** (a Linux PI futex, `FUTEX_LOCK_PI`): a
//! real-time lane that waits for a lock held by a lower lane lends that
//! lane its priority until it unlocks, so an ordinary thread preempted while
//! holding the lock cannot stall a real-time one for a CFS time slice (the
//! inversion TAO's lanes exist to avoid). Uncontended it costs what any
//! mutex does (one compare-and-swap each way); contended, the kernel hands
//! the lock to the highest-priority waiter.
//!
//! Lock order, outermost first: the router `State`, then a channel's queue,
//! then an outbox's lists. Nothing holds a lock across an `.await`.

use priority_inheriting_lock::{
    PriorityInheritingLock as Mutex, PriorityInheritingLockGuard as MutexGuard,
};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::priority::SchedPolicy;

/// A held [`Locked`]. An ordinary lane holding it may run at the lock's
/// priority ceiling ([`set_lane_slot`]); the guard puts the lane's own
/// policy back after the unlock.
pub(crate) struct Guard<'a, T> {
    // Fields drop in order: the lock is released before the policy goes
    // back.
    guard: MutexGuard<'a, T>,
    _restore: Restore,
}

/// Puts an ordinary lane's own policy back (when it was raised to the
/// ceiling) once dropped.
struct Restore(Option<SchedPolicy>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(own) = self.0 {
            if let Err(e) = crate::priority::set_policy(own) {
                tracing::warn!(
                    "a lane could not go back to {own} after holding the table lock: {e}"
                );
            }
        }
    }
}

impl<T> std::ops::Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// How long after a real-time lane waited for a lock ordinary lanes take it
/// at its ceiling (ns).
const CEILING_FOR_NS: u64 = 1_000_000_000;

/// A mutex with `RefCell`'s method names. Unlike `RefCell`, two borrows on
/// one thread deadlock: take one and pass it down. It counts the threads
/// blocked on it, so that a holder doing a batch of work can hand it over
/// early ([`contended`](Self::contended)).
#[derive(Debug, Default)]
pub(crate) struct Locked<T> {
    lock: Mutex<T>,
    /// Threads blocked in [`borrow`](Self::borrow) right now.
    waiting: AtomicU32,
    /// How long threads blocked on it, per lane.
    waits: Arc<LockWaits>,
}

impl<T> Locked<T> {
    pub(crate) fn new(value: T) -> Self {
        Locked {
            lock: Mutex::new(value),
            waiting: AtomicU32::new(0),
            waits: Arc::default(),
        }
    }

    /// Locks (shared use; the same lock as [`borrow_mut`](Self::borrow_mut)).
    /// Uncontended: one compare-and-swap. Contended: the thread is counted
    /// as waiting while it blocks (and lends the holder its priority).
    pub(crate) fn borrow(&self) -> Guard<'_, T> {
        let restore = Restore(self.raise_to_ceiling());
        Guard {
            guard: self.lock_counted(),
            _restore: restore,
        }
    }

    /// An ordinary lane, while a real-time lane has waited for this lock in
    /// the last second: runs at the ceiling until the guard drops, so that
    /// no ordinary process deschedules it while it holds the lock (the
    /// real-time lane would wait for two wake-ups; BENCHMARKS.md, "A priority
    /// ceiling on the table lock"). Returns the policy to go back to.
    fn raise_to_ceiling(&self) -> Option<SchedPolicy> {
        let (prio, own) = CEILING.with(Cell::get)?;
        let waited = self.waits.realtime_waited.load(Ordering::Relaxed);
        if waited == 0 || since_start().saturating_sub(waited) > CEILING_FOR_NS {
            return None;
        }
        crate::priority::set_policy(SchedPolicy::Fifo(prio)).ok()?;
        Some(own)
    }

    fn lock_counted(&self) -> MutexGuard<'_, T> {
        if let Some(g) = self.lock.try_lock() {
            return g;
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let start = std::time::Instant::now();
        let g = self.lock.lock();
        self.waits.record(start.elapsed());
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        g
    }

    /// The counts of this lock's contended acquisitions, per lane.
    pub(crate) fn waits(&self) -> Arc<LockWaits> {
        self.waits.clone()
    }

    /// Whether another thread is blocked waiting for this lock: a holder
    /// that batches work under it (a lane routing several publishes) ends
    /// its batch, so that the waiter — perhaps a higher band's lane — waits
    /// for one step, not for the whole batch.
    pub(crate) fn contended(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// The value, with no lock (the caller owns it exclusively).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.lock.get_mut()
    }

    /// Runs `f` under the lock, for background work that re-locks at once
    /// (housekeeping, admin requests): a waiting lane gets the lock when `f`
    /// is done, since the kernel hands a contended PI lock to its
    /// highest-priority waiter at unlock.
    pub(crate) fn with_fair<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.borrow())
    }

    /// Locks for a change.
    pub(crate) fn borrow_mut(&self) -> Guard<'_, T> {
        self.borrow()
    }
}

/// Lanes whose waits [`LockWaits`] tells apart (bands are at most 16);
/// other threads (the store's, blocking tasks') count in slot [`LANES`].
pub(crate) const LANES: usize = 16;
/// Buckets of [`LockWaits`]' histogram: bucket 0 holds waits under 1 µs,
/// bucket k ≥ 1 those of 2^(k-1) to 2^k µs, the last everything longer.
pub(crate) const WAIT_BUCKETS: usize = 16;

thread_local! {
    /// This thread's lane slot (its band's index), [`LANES`] if none.
    static LANE_SLOT: Cell<usize> = const { Cell::new(LANES) };
    /// Whether this thread is a real-time lane.
    static REALTIME: Cell<bool> = const { Cell::new(false) };
    /// For an ordinary lane when real-time lanes exist: the priority it
    /// holds a [`Locked`] at while a real-time lane waits for locks, and
    /// its own policy to go back to.
    static CEILING: Cell<Option<(u8, SchedPolicy)>> = const { Cell::new(None) };
}

/// Marks the calling thread as the lane of band number `slot` (its index
/// in the configuration), so that its waits on a [`Locked`] count there;
/// `realtime` if it runs a real-time policy; `ceiling`, for an ordinary
/// lane: the `SCHED_FIFO` priority it holds a lock at while a real-time
/// lane has waited for that lock in the last second (the priority
/// ceiling: the lowest real-time lane's priority), and its own policy.
pub(crate) fn set_lane_slot(slot: usize, realtime: bool, ceiling: Option<(u8, SchedPolicy)>) {
    LANE_SLOT.with(|s| s.set(slot.min(LANES)));
    REALTIME.with(|r| r.set(realtime));
    CEILING.with(|c| c.set(ceiling));
}

/// One lane's waits on a lock.
#[derive(Debug, Default)]
pub(crate) struct LaneWaits {
    /// Waits by length (see [`WAIT_BUCKETS`]).
    pub buckets: [AtomicU64; WAIT_BUCKETS],
    /// Their total, nanoseconds.
    pub total_ns: AtomicU64,
    /// The longest, nanoseconds.
    pub max_ns: AtomicU64,
}

impl LaneWaits {
    /// For listings: the histogram without its trailing empty buckets, the
    /// longest wait and the total, µs.
    pub(crate) fn summary_us(&self) -> (Vec<u64>, u64, u64) {
        let mut buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        while buckets.last() == Some(&0) {
            buckets.pop();
        }
        let us = |a: &AtomicU64| a.load(Ordering::Relaxed) / 1000;
        (buckets, us(&self.max_ns), us(&self.total_ns))
    }
}

/// How often, and how long, each lane blocked on a [`Locked`] another
/// thread held (an uncontended lock counts nothing): a real-time lane
/// that waits for the shared tables is what band isolation measures
/// (docs/configuration.md, "Lanes and shared tables"). Relaxed atomics,
/// touched only on a contended lock.
#[derive(Debug, Default)]
pub(crate) struct LockWaits {
    lanes: [LaneWaits; LANES + 1],
    /// When a real-time lane last waited (ns on [`since_start`]'s clock; 0:
    /// never).
    realtime_waited: AtomicU64,
}

/// Nanoseconds since the first call (a monotonic clock for the ceiling).
fn since_start() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

impl LockWaits {
    fn record(&self, waited: Duration) {
        if REALTIME.with(Cell::get) {
            self.realtime_waited.store(since_start(), Ordering::Relaxed);
        }
        let slot = LANE_SLOT.with(Cell::get);
        let w = &self.lanes[slot];
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        let k = usize::try_from(u64::BITS - us.leading_zeros())
            .unwrap_or(WAIT_BUCKETS)
            .min(WAIT_BUCKETS - 1);
        w.buckets[k].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        w.total_ns.fetch_add(ns, Ordering::Relaxed);
        w.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// The waits of band number `slot`'s lane.
    pub(crate) fn lane(&self, slot: usize) -> &LaneWaits {
        &self.lanes[slot.min(LANES)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contended_lock_excludes_and_hands_over() {
        let n = Arc::new(Locked::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let n = n.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = n.borrow_mut();
                        let v = *g;
                        std::hint::black_box(&g);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(*n.borrow(), 80_000, "no increment lost under contention");
    }

    #[test]
    fn a_lane_that_blocks_on_a_held_lock_has_its_wait_counted_in_its_slot() {
        let n = Arc::new(Locked::new(0u64));
        let held = n.borrow_mut();
        let waiter = {
            let n = n.clone();
            std::thread::spawn(move || {
                set_lane_slot(3, false, None);
                *n.borrow_mut() += 1;
            })
        };
        // Bounded: the waiter blocks within a few ms on any machine.
        for _ in 0..5_000 {
            if n.contended() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(held);
        waiter.join().expect("waiter");
        let count = |slot: usize| -> u64 {
            n.waits()
                .lane(slot)
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .sum()
        };
        assert_eq!(
            count(3),
            1,
            "the blocked lane's wait is counted in its slot"
        );
        assert_eq!(count(0) + count(LANES), 0, "nothing counted elsewhere");
        let w = n.waits();
        assert!(
            w.lane(3).max_ns.load(Ordering::Relaxed) >= 1_000_000,
            "it waited at least the 2 ms the holder held on after it blocked"
        );
        // Uncontended: nothing more.
        *n.borrow_mut() += 1;
        assert_eq!(count(3) + count(0) + count(LANES), 1);
    }

    fn policy_now() -> thread_priority::ThreadSchedulePolicy {
        thread_priority::unix::thread_schedule_policy().expect("read this thread's policy")
    }

    #[test]
    fn an_ordinary_lane_holds_the_lock_at_the_ceiling_only_while_a_realtime_lane_waited_lately() {
        use thread_priority::{RealtimeThreadSchedulePolicy as Rt, ThreadSchedulePolicy as P};
        let n = Arc::new(Locked::new(0u64));
        let n2 = n.clone();
        std::thread::spawn(move || {
            set_lane_slot(0, false, Some((10, SchedPolicy::Other { nice: 0 })));
            // No real-time lane waited: the lane's own policy.
            drop(n2.borrow_mut());
            assert!(matches!(policy_now(), P::Normal(_)), "{:?}", policy_now());
            // One did, just now: the ceiling while held, its own after.
            n2.waits
                .realtime_waited
                .store(since_start(), Ordering::Relaxed);
            {
                let _g = n2.borrow_mut();
                assert_eq!(
                    policy_now(),
                    P::Realtime(Rt::Fifo),
                    "SCHED_FIFO while it holds the lock (needs CAP_SYS_NICE: run the tests as root)"
                );
            }
            assert!(
                matches!(policy_now(), P::Normal(_)),
                "back to SCHED_OTHER: {:?}",
                policy_now()
            );
        })
        .join()
        .expect("lane thread");
    }

    #[test]
    fn a_holder_sees_a_blocked_waiter_until_it_gets_the_lock() {
        let n = Arc::new(Locked::new(0u64));
        let held = n.borrow_mut();
        assert!(!n.contended(), "nobody waits yet");
        let waiter = {
            let n = n.clone();
            std::thread::spawn(move || *n.borrow_mut() += 1)
        };
        // Bounded: the waiter blocks within a few ms on any machine.
        let mut seen = false;
        for _ in 0..5_000 {
            if n.contended() {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(seen, "a thread blocked on the lock is counted as waiting");
        drop(held);
        waiter.join().expect("waiter");
        assert!(
            !n.contended(),
            "the waiter is no longer counted once it has the lock"
        );
        assert_eq!(*n.borrow(), 1);
    }
}
