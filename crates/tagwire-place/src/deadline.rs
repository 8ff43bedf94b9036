//! The wall-clock deadline of one placement: `--time-limit` counted from
//! the start of the command, checked while building the problem, in every
//! search loop and handed to the MIP backend as its remaining time.
//!
//! A deadline reads the system's monotonic clock, or — in tests — a
//! [`TestClock`] that moves only when it is read, so that a test can
//! check *that* the work stops at its deadline, and after how many clock
//! reads, without asserting wall time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A clock for tests: every read advances it by `step`, so time is the
/// number of reads × `step`, the same on every machine. Leaked to
/// `'static` so that the [`Deadline`]s reading it stay `Copy`.
#[derive(Debug)]
pub struct TestClock {
    reads: AtomicU64,
    step: Duration,
}

impl TestClock {
    /// A clock at zero that advances `step` per read (leaked: one per test).
    pub fn leaked(step: Duration) -> &'static TestClock {
        Box::leak(Box::new(TestClock {
            reads: AtomicU64::new(0),
            step,
        }))
    }

    /// How many times a deadline has read this clock.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Its time now, without advancing it.
    pub fn peek(&self) -> Duration {
        self.step
            .saturating_mul(self.reads().min(u64::from(u32::MAX)) as u32)
    }

    fn read(&self) -> Duration {
        let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        self.step.saturating_mul(n.min(u64::from(u32::MAX)) as u32)
    }
}

/// When a deadline expires, on the clock it reads.
#[derive(Debug, Clone, Copy)]
enum End {
    /// On the system's monotonic clock.
    System(Instant),
    /// On a [`TestClock`], at this reading.
    Test(&'static TestClock, Duration),
}

impl PartialEq for End {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (End::System(a), End::System(b)) => a == b,
            (End::Test(c, a), End::Test(d, b)) => std::ptr::eq(*c, *d) && a == b,
            _ => false,
        }
    }
}

impl Eq for End {}

impl End {
    /// Time left (zero once expired); reads the clock.
    fn remaining(&self) -> Duration {
        match self {
            End::System(at) => at.saturating_duration_since(Instant::now()),
            End::Test(c, at) => at.saturating_sub(c.read()),
        }
    }

    /// The point `after` from now on the same clock.
    fn later_by(&self, after: Duration) -> Self {
        match self {
            End::System(_) => {
                let now = Instant::now();
                End::System(now.checked_add(after).unwrap_or(now))
            }
            End::Test(c, _) => End::Test(c, c.read().saturating_add(after)),
        }
    }
}

/// A point in time after which a placement stops working and answers with
/// what it has (or says it has nothing). `Deadline::none()` never expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deadline {
    end: Option<End>,
    /// The whole budget, for messages ("within the time limit of 1 s").
    limit: Option<Duration>,
}

impl Deadline {
    /// No deadline.
    pub fn none() -> Self {
        Deadline::default()
    }

    /// `limit` from `start` (on the system clock).
    pub fn from(start: Instant, limit: Duration) -> Self {
        Deadline {
            end: start.checked_add(limit).map(End::System),
            limit: Some(limit),
        }
    }

    /// `limit` from now.
    pub fn after(limit: Duration) -> Self {
        Deadline::from(Instant::now(), limit)
    }

    /// `limit` from now on a [`TestClock`] (which this reads once).
    pub fn after_on_test_clock(clock: &'static TestClock, limit: Duration) -> Self {
        Deadline {
            end: Some(End::Test(clock, clock.read().saturating_add(limit))),
            limit: Some(limit),
        }
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.end.is_some_and(|e| e.remaining().is_zero())
    }

    /// Time left (`None`: unlimited; zero once expired).
    pub fn remaining(&self) -> Option<Duration> {
        self.end.map(|e| e.remaining())
    }

    /// The whole budget in seconds (for messages); infinite without one.
    pub fn limit_secs(&self) -> f64 {
        self.limit.map_or(f64::INFINITY, |l| l.as_secs_f64())
    }

    /// A deadline that ends after `share` (0–1) of the time left, or at
    /// this one's end, whichever is first. Unlimited stays unlimited.
    pub fn share(&self, share: f64) -> Self {
        match self.end {
            None => *self,
            Some(e) => {
                let left = e.remaining();
                Deadline {
                    end: Some(e.later_by(left.mul_f64(share.clamp(0.0, 1.0)))),
                    limit: self.limit,
                }
            }
        }
    }

    /// A stopwatch on this deadline's clock: `elapsed()` since now (the
    /// system clock for a deadline without one). The branch and bound
    /// measures its budget with it, so a test clock drives it too.
    pub fn stopwatch(&self) -> Box<dyn FnMut() -> Duration> {
        match self.end {
            Some(End::Test(c, _)) => {
                let start = c.read();
                Box::new(move || c.read().saturating_sub(start))
            }
            _ => {
                let start = Instant::now();
                Box::new(move || start.elapsed())
            }
        }
    }
}

/// Checks a [`Deadline`] only every `every` calls, so that hot loops pay
/// for the clock rarely.
#[derive(Debug)]
pub(crate) struct Ticker {
    deadline: Deadline,
    every: u32,
    count: u32,
    expired: bool,
}

impl Ticker {
    pub(crate) fn new(deadline: Deadline, every: u32) -> Self {
        Ticker {
            deadline,
            every: every.max(1),
            count: 0,
            expired: false,
        }
    }

    /// Whether the deadline has passed (read from the clock every
    /// `every` calls; once expired, always true).
    pub(crate) fn expired(&mut self) -> bool {
        if !self.expired && self.deadline.end.is_some() {
            self.count += 1;
            if self.count >= self.every {
                self.count = 0;
                self.expired = self.deadline.expired();
            }
        }
        self.expired
    }
}
