//! Temporal scaling proxies (push-pull-qos-proxies §2.1, §3.1), sans-I/O:
//! which events of a stream one subscriber gets.
//!
//! - `scale = n`: one event of every `n` — those whose per-publisher
//!   sequence number is a multiple of `n`. The choice depends on the event
//!   alone, so it is the same on every run for the same input, and two
//!   subscribers with factors 2 and 4 get nested samples (every event the
//!   second gets, the first gets too), whatever the order in which their
//!   channels see it.
//! - `min_interval = d`: an event only if its source timestamp is at least
//!   `d` after the last one passed from the same publisher. Deterministic
//!   for a given sequence of events per publisher.
//!
//! Both may be set; an event must pass both.
//!
//! Spatial scaling runs a [`Transform`] plug-in on the payload for the
//! subscribers that ask for it (`transform = "NAME:PARAMS"`); the router
//! makes the transformed copy once per distinct spec and event, shared by
//! those subscribers, and [`apply_isolated`] turns a plug-in's panic into an
//! error for that subscription alone. The per-publisher memory of
//! `min_interval` is bounded ([`MAX_PUBLISHERS`]): past it, it is cleared
//! (the next event of each publisher then passes).
//!
//! ```
//! use tagwire_core::proxy::{publisher_key, TemporalScaler};
//! let mut s = TemporalScaler::new(3, 0);
//! let cam = publisher_key("/cam");
//! let kept: Vec<u64> = (1..=9).filter(|&seq| s.admit(cam, seq, seq * 10)).collect();
//! assert_eq!(kept, vec![3, 6, 9]);
//! ```

use std::collections::HashMap;

/// Largest scaling factor.
pub const MAX_SCALE: u32 = 1_000_000;
/// Publishers remembered per channel for `min_interval`.
pub const MAX_PUBLISHERS: usize = 1024;

/// One subscriber's temporal scaling.
#[derive(Debug, Clone, Default)]
pub struct TemporalScaler {
    scale: u32,
    min_interval: u64,
    last: HashMap<u64, u64>,
}

impl TemporalScaler {
    /// 1 of every `scale` events (0 or 1: all), at least `min_interval` ns of
    /// source time apart per publisher (0: no minimum).
    pub fn new(scale: u32, min_interval: u64) -> Self {
        TemporalScaler {
            scale: scale.clamp(1, MAX_SCALE),
            min_interval,
            last: HashMap::new(),
        }
    }

    /// Whether it passes everything (no scaling configured).
    pub fn is_identity(&self) -> bool {
        self.scale <= 1 && self.min_interval == 0
    }

    /// Changes the parameters; the `min_interval` memory is kept.
    pub fn set(&mut self, scale: u32, min_interval: u64) {
        self.scale = scale.clamp(1, MAX_SCALE);
        self.min_interval = min_interval;
        if min_interval == 0 {
            self.last.clear();
        }
    }

    /// Whether the event `seq` of the publisher with key `publisher` (see
    /// [`publisher_key`]), stamped `source_time` (ns), goes to this
    /// subscriber.
    pub fn admit(&mut self, publisher: u64, seq: u64, source_time: u64) -> bool {
        if self.scale > 1 && !seq.is_multiple_of(self.scale as u64) {
            return false;
        }
        if self.min_interval == 0 {
            return true;
        }
        let key = publisher;
        match self.last.get(&key) {
            Some(&last) if source_time < last.saturating_add(self.min_interval) => false,
            _ => {
                if self.last.len() >= MAX_PUBLISHERS && !self.last.contains_key(&key) {
                    self.last.clear();
                }
                self.last.insert(key, source_time);
                true
            }
        }
    }
}

/// A spatial scaling plug-in: transforms one event's payload (e.g. scales
/// an image down) for the subscribers that asked for it. Implementations
/// must bound their own cost by the payload's size.
pub trait Transform: Send + Sync + std::fmt::Debug {
    /// Its name in a spec (`downscale` in `downscale:2`).
    fn name(&self) -> &'static str;
    /// Checks the parameters when a subscription asks for it.
    fn check(&self, params: &str) -> Result<(), String>;
    /// The transformed payload, or why the payload cannot be transformed.
    fn apply(&self, params: &str, payload: &[u8]) -> Result<Vec<u8>, String>;
}

/// Splits a transform spec `NAME:PARAMS` (`PARAMS` may be empty).
pub fn split_spec(spec: &str) -> (&str, &str) {
    spec.split_once(':').unwrap_or((spec, ""))
}

/// Runs `t` on `payload`; a panic in the plug-in becomes an error (that
/// subscription is told, nobody else is affected).
pub fn apply_isolated(t: &dyn Transform, params: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.apply(params, payload))) {
        Ok(r) => r,
        Err(_) => Err(format!("the {} plug-in panicked", t.name())),
    }
}

/// The key [`TemporalScaler::admit`] knows a publisher by (computed once per
/// event, shared by every channel that sees it).
pub fn publisher_key(s: &str) -> u64 {
    use std::hash::BuildHasher;
    // Computed once per routed event: foldhash (fixed seed, so a key is
    // the same everywhere in the process) costs a few ns where SipHash
    // cost ~10.
    foldhash::fast::FixedState::with_seed(0x7467_7769_7265_0001).hash_one(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_minimum_interval_keeps_events_at_least_that_far_apart_per_publisher() {
        let mut s = TemporalScaler::new(1, 100);
        let kept: Vec<u64> = [0u64, 30, 99, 100, 150, 250, 260]
            .iter()
            .filter(|&&t| s.admit(publisher_key("/a"), t, t))
            .copied()
            .collect();
        assert_eq!(kept, vec![0, 100, 250]);
        // Another publisher is timed on its own.
        assert!(s.admit(publisher_key("/b"), 1, 30));
    }

    #[derive(Debug)]
    struct Panics;
    impl Transform for Panics {
        fn name(&self) -> &'static str {
            "panics"
        }
        fn check(&self, _: &str) -> Result<(), String> {
            Ok(())
        }
        fn apply(&self, _: &str, _: &[u8]) -> Result<Vec<u8>, String> {
            panic!("a broken plug-in")
        }
    }

    #[test]
    fn a_panicking_plug_in_is_an_error_not_a_crash() {
        let e = apply_isolated(&Panics, "", b"x").unwrap_err();
        assert!(e.contains("panics plug-in panicked"), "{e}");
        assert_eq!(split_spec("downscale:2"), ("downscale", "2"));
        assert_eq!(split_spec("noop"), ("noop", ""));
    }

    proptest! {
        /// The same input gives the same samples; factors that divide each
        /// other give nested samples, whatever else happens.
        #[test]
        fn scaling_is_deterministic_and_nested(seqs in prop::collection::vec(1u64..10_000, 0..200), a in 1u32..20) {
            let b = a * 3;
            let run = |n: u32| {
                let mut s = TemporalScaler::new(n, 0);
                seqs.iter().copied().filter(|&q| s.admit(7, q, q)).collect::<Vec<_>>()
            };
            prop_assert_eq!(run(a), run(a));
            let (fine, coarse) = (run(a), run(b));
            prop_assert!(coarse.iter().all(|q| fine.contains(q)));
            prop_assert!(coarse.iter().all(|q| q % b as u64 == 0));
        }

        /// Passed events of one publisher are never closer than the interval.
        #[test]
        fn passed_events_respect_the_interval(times in prop::collection::vec(0u64..1_000_000, 0..200), gap in 1u64..50_000) {
            let mut sorted = times.clone();
            sorted.sort_unstable();
            let mut s = TemporalScaler::new(1, gap);
            let kept: Vec<u64> = sorted.iter().copied().filter(|&t| s.admit(7, 1, t)).collect();
            prop_assert!(kept.windows(2).all(|w| w[1] - w[0] >= gap));
        }
    }
}
