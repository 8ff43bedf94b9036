//! The wall-clock deadline of one placement: `--time-limit` counted from
//! the start of the command, checked while building the problem, in every
//! search loop and handed to the MIP backend as its remaining time.
//!
//! A deadline reads the system's monotonic clock, or — in tests — a
//! [`TestClock`] that moves only when it is read, so that a test can
//! check *that* the work stops at its deadline, and after how many clock
//! reads, without asserting wall time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
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

/// Which clock a deadline reads.
#[derive(Debug, Clone, Copy, Default)]
enum Clock {
    /// The system's monotonic clock.
    #[default]
    System,
    /// A [`TestClock`].
    Test(&'static TestClock),
}

impl PartialEq for Clock {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Clock::System, Clock::System) => true,
            (Clock::Test(a), Clock::Test(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }
}

impl Eq for Clock {}

impl Clock {
    /// Time since the clock's origin (for the system clock, the first read
    /// in this process).
    fn now(&self) -> Duration {
        match self {
            Clock::System => {
                static ORIGIN: OnceLock<Instant> = OnceLock::new();
                ORIGIN.get_or_init(Instant::now).elapsed()
            }
            Clock::Test(c) => c.read(),
        }
    }
}

/// A point in time after which a placement stops working and answers with
/// what it has (or says it has nothing). `Deadline::none()` never expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deadline {
    /// When it expires, on `clock`.
    at: Option<Duration>,
    clock: Clock,
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
        let clock = Clock::System;
        let now = clock.now();
        let since_start = start.elapsed();
        Deadline {
            at: Some(now.saturating_sub(since_start).saturating_add(limit)),
            clock,
            limit: Some(limit),
        }
    }

    /// `limit` from now.
    pub fn after(limit: Duration) -> Self {
        Deadline::after_on(Clock::System, limit)
    }

    /// `limit` from now on a [`TestClock`] (which this reads once).
    pub fn after_on_test_clock(clock: &'static TestClock, limit: Duration) -> Self {
        Deadline::after_on(Clock::Test(clock), limit)
    }

    fn after_on(clock: Clock, limit: Duration) -> Self {
        Deadline {
            at: Some(clock.now().saturating_add(limit)),
            clock,
            limit: Some(limit),
        }
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.at.is_some_and(|at| self.clock.now() >= at)
    }

    /// Time left (`None`: unlimited; zero once expired).
    pub fn remaining(&self) -> Option<Duration> {
        self.at.map(|at| at.saturating_sub(self.clock.now()))
    }

    /// The whole budget in seconds (for messages); infinite without one.
    pub fn limit_secs(&self) -> f64 {
        self.limit.map_or(f64::INFINITY, |l| l.as_secs_f64())
    }

    /// A deadline that ends after `share` (0–1) of the time left, or at
    /// this one's end, whichever is first. Unlimited stays unlimited.
    pub fn share(&self, share: f64) -> Self {
        match self.at {
            None => *self,
            Some(at) => {
                let now = self.clock.now();
                let left = at.saturating_sub(now);
                Deadline {
                    at: Some(now.saturating_add(left.mul_f64(share.clamp(0.0, 1.0)))),
                    ..*self
                }
            }
        }
    }

    /// A stopwatch on this deadline's clock: `elapsed()` since now (the
    /// system clock for a deadline without one). The branch and bound
    /// measures its budget with it, so a test clock drives it too.
    pub fn stopwatch(&self) -> impl FnMut() -> Duration {
        let clock = self.clock;
        let start = clock.now();
        move || clock.now().saturating_sub(start)
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
        if !self.expired && self.deadline.at.is_some() {
            self.count += 1;
            if self.count >= self.every {
                self.count = 0;
                self.expired = self.deadline.expired();
            }
        }
        self.expired
    }
}
