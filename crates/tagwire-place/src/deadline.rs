//! The wall-clock deadline of one placement: `--time-limit` counted from
//! the start of the command, checked while building the problem, in every
//! search loop and handed to the MIP backend as its remaining time.

use std::time::{Duration, Instant};

/// A point in time after which a placement stops working and answers with
/// what it has (or says it has nothing). `Deadline::none()` never expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deadline {
    at: Option<Instant>,
    /// The whole budget, for messages ("within the time limit of 1 s").
    limit: Option<Duration>,
}

impl Deadline {
    /// No deadline.
    pub fn none() -> Self {
        Deadline::default()
    }

    /// `limit` from `start`.
    pub fn from(start: Instant, limit: Duration) -> Self {
        Deadline {
            at: start.checked_add(limit),
            limit: Some(limit),
        }
    }

    /// `limit` from now.
    pub fn after(limit: Duration) -> Self {
        Deadline::from(Instant::now(), limit)
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.at.is_some_and(|at| Instant::now() >= at)
    }

    /// Time left (`None`: unlimited; zero once expired).
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// The whole budget in seconds (for messages); infinite without one.
    pub fn limit_secs(&self) -> f64 {
        self.limit.map_or(f64::INFINITY, |l| l.as_secs_f64())
    }

    /// A deadline that ends after `share` (0–1) of the time left, or at
    /// this one's end, whichever is first. Unlimited stays unlimited.
    pub fn share(&self, share: f64) -> Self {
        match self.remaining() {
            None => *self,
            Some(left) => Deadline {
                at: Instant::now().checked_add(left.mul_f64(share.clamp(0.0, 1.0))),
                limit: self.limit,
            },
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
