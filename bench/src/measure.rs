//! The measurement contract every system follows (the same as `tagwire bench`).
//!
//! - throughput / fanout: one publisher sends back to back for the run's
//!   duration; each subscriber's rate is taken from its first to its last
//!   received message ([`SubCounter`]); the run ends when every subscriber
//!   has been idle for [`IDLE_END`] after the publisher stopped, or after
//!   [`DRAIN_LIMIT`] at most ([`wait_drained`]).
//! - latency: one message in flight; every round trip goes in an
//!   hdrhistogram, the first [`WARMUP_ROUND_TRIPS`] are dropped ([`RttRecorder`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;

use crate::BenchError;

/// Round trips run before any is recorded, so connections, caches and
/// allocators are warm.
pub const WARMUP_ROUND_TRIPS: u64 = 1_000;
/// A subscriber that received nothing for this long after the publisher
/// stopped has drained.
pub const IDLE_END: Duration = Duration::from_millis(500);
/// The longest a run waits for subscribers to drain after the publisher
/// stopped; what has not arrived by then is not counted.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);
/// How long a pinger waits for one echo before it gives up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest payload a run accepts (the raw relay's frame limit too).
pub const MAX_SIZE: usize = 16 * 1024 * 1024;
/// Longest run accepted, so a typo cannot hold the machine for hours.
pub const MAX_DURATION_S: f64 = 600.0;
/// Most subscribers a fan-out run accepts.
pub const MAX_SUBSCRIBERS: usize = 256;
/// The payload byte every system sends (content does not matter; it is
/// not zero so nothing can compress a page of zeros for free).
pub const PAYLOAD_BYTE: u8 = 0xAB;

/// Which measurement to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One publisher → one subscriber, back to back.
    Throughput,
    /// Ping → echo → pong, one message in flight.
    Latency,
    /// One publisher → N subscribers, each on its own connection.
    Fanout,
}

impl Mode {
    /// The name used in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Throughput => "throughput",
            Mode::Latency => "latency",
            Mode::Fanout => "fanout",
        }
    }
}

/// The parameters of one run, checked.
#[derive(Clone, Copy, Debug)]
pub struct RunParams {
    /// Payload bytes per message.
    pub size: usize,
    /// How long the publisher (or pinger) runs.
    pub duration: Duration,
    /// Subscribers (1 for throughput).
    pub subscribers: usize,
}

impl RunParams {
    /// Checks the command-line values and builds the parameters of a run.
    pub fn new(
        mode: Mode,
        size: usize,
        duration_s: f64,
        subscribers: usize,
    ) -> Result<Self, BenchError> {
        if size > MAX_SIZE {
            return Err(BenchError::InvalidArgument {
                name: "size",
                value: size.to_string(),
                reason: "larger than 16 MiB",
            });
        }
        if !(duration_s > 0.0 && duration_s <= MAX_DURATION_S) {
            return Err(BenchError::InvalidArgument {
                name: "duration",
                value: duration_s.to_string(),
                reason: "must be more than 0 and at most 600 seconds",
            });
        }
        if subscribers == 0 || subscribers > MAX_SUBSCRIBERS {
            return Err(BenchError::InvalidArgument {
                name: "subscribers",
                value: subscribers.to_string(),
                reason: "must be between 1 and 256",
            });
        }
        Ok(RunParams {
            size,
            duration: Duration::from_secs_f64(duration_s),
            subscribers: if mode == Mode::Fanout { subscribers } else { 1 },
        })
    }

    /// The payload every publisher sends.
    pub fn payload(&self) -> bytes::Bytes {
        bytes::Bytes::from(vec![PAYLOAD_BYTE; self.size])
    }
}

/// What one subscriber received, updated by that subscriber alone and read
/// by the coordinator; lock-free so that counting costs a few stores.
#[derive(Debug)]
pub struct SubCounter {
    base: Instant,
    received: AtomicU64,
    first_batch: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
}

/// A copy of a [`SubCounter`] taken at the end of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SubSnapshot {
    /// Messages received.
    pub received: u64,
    /// Messages counted at the first timestamp (a read can hold several).
    pub first_batch: u64,
    /// First receive, ns since the run's base instant.
    pub first_ns: u64,
    /// Last receive, ns since the run's base instant.
    pub last_ns: u64,
}

impl SubSnapshot {
    /// Messages per second from the first to the last received message
    /// (0 when fewer than two receive instants were seen).
    pub fn msgs_per_sec(&self) -> f64 {
        let span_ns = self.last_ns.saturating_sub(self.first_ns);
        if span_ns == 0 || self.received <= self.first_batch {
            return 0.0;
        }
        (self.received - self.first_batch) as f64 * 1e9 / span_ns as f64
    }
}

impl SubCounter {
    /// A counter whose timestamps count from `base`.
    pub fn new(base: Instant) -> Self {
        SubCounter {
            base,
            received: AtomicU64::new(0),
            first_batch: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
        }
    }

    /// Counts `n` messages received now. Only one thread may record into a
    /// counter (its subscriber); others only read.
    pub fn record(&self, n: u64) {
        if n == 0 {
            return;
        }
        let now = self.ns_since_base(Instant::now());
        if self.received.load(Ordering::Relaxed) == 0 {
            self.first_ns.store(now, Ordering::Relaxed);
            self.first_batch.store(n, Ordering::Relaxed);
        }
        self.last_ns.store(now, Ordering::Relaxed);
        self.received.fetch_add(n, Ordering::Release);
    }

    /// The counter's current values.
    pub fn snapshot(&self) -> SubSnapshot {
        let received = self.received.load(Ordering::Acquire);
        SubSnapshot {
            received,
            first_batch: self.first_batch.load(Ordering::Relaxed),
            first_ns: self.first_ns.load(Ordering::Relaxed),
            last_ns: self.last_ns.load(Ordering::Relaxed),
        }
    }

    fn ns_since_base(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Makes `n` counters sharing one base instant.
pub fn counters(n: usize) -> Vec<Arc<SubCounter>> {
    let base = Instant::now();
    (0..n).map(|_| Arc::new(SubCounter::new(base))).collect()
}

/// Blocks until every subscriber has been idle for [`IDLE_END`] (counting
/// from `publisher_done` at the earliest), or [`DRAIN_LIMIT`] has passed since
/// `publisher_done`; then returns the counters' final values.
pub fn wait_drained(counters: &[Arc<SubCounter>], publisher_done: Instant) -> Vec<SubSnapshot> {
    let limit = publisher_done + DRAIN_LIMIT;
    loop {
        let now = Instant::now();
        let latest = counters
            .iter()
            .map(|c| c.base + Duration::from_nanos(c.snapshot().last_ns))
            .fold(publisher_done, |a, b| a.max(b));
        if now.saturating_duration_since(latest) >= IDLE_END || now >= limit {
            return counters.iter().map(|c| c.snapshot()).collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Round-trip times of a latency run, in nanoseconds, warm-up dropped.
pub struct RttRecorder {
    hist: Histogram<u64>,
    round_trips: u64,
    warmup: u64,
}

impl RttRecorder {
    /// An empty recorder (1 ns to 60 s, 3 significant digits) that drops
    /// the first [`WARMUP_ROUND_TRIPS`].
    pub fn new() -> Self {
        Self::with_warmup(WARMUP_ROUND_TRIPS)
    }

    /// An empty recorder that drops the first `round_trips` (0: none, for a
    /// caller that times its own warm-up).
    pub fn with_warmup(round_trips: u64) -> Self {
        // 1 ns .. 60 s with 3 significant figures: fixed, valid bounds.
        let hist = Histogram::new_with_bounds(1, 60_000_000_000, 3)
            .expect("fixed histogram bounds 1 ns..60 s with 3 digits are valid");
        RttRecorder {
            hist,
            round_trips: 0,
            warmup: round_trips,
        }
    }

    /// Records one round trip (dropped while still in warm-up).
    pub fn record(&mut self, rtt: Duration) {
        self.round_trips += 1;
        if self.round_trips > self.warmup {
            let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
            self.hist.saturating_record(ns.max(1));
        }
    }

    /// Round trips done so far, warm-up included.
    pub fn round_trips(&self) -> u64 {
        self.round_trips
    }

    /// The recorded samples (warm-up excluded).
    pub fn samples(&self) -> u64 {
        self.hist.len()
    }

    /// The RTT at quantile `q` (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

impl Default for RttRecorder {
    fn default() -> Self {
        Self::new()
    }
}

/// The JSON line of a throughput or fan-out run.
pub fn stream_report(
    system: &str,
    mode: Mode,
    size: usize,
    subs: &[SubSnapshot],
) -> serde_json::Value {
    let rates: Vec<f64> = subs.iter().map(SubSnapshot::msgs_per_sec).collect();
    let total: f64 = rates.iter().sum();
    if mode == Mode::Fanout {
        let per_sub = if rates.is_empty() {
            0.0
        } else {
            total / rates.len() as f64
        };
        json!({
            "system": system,
            "mode": "fanout",
            "size": size,
            "subscribers": subs.len(),
            "per_sub_msgs_per_sec": per_sub,
            "total_msgs_per_sec": total,
        })
    } else {
        let received: u64 = subs.iter().map(|s| s.received).sum();
        json!({
            "system": system,
            "mode": "throughput",
            "size": size,
            "msgs_per_sec": total,
            "mb_per_sec": total * size as f64 / 1e6,
            "received": received,
        })
    }
}

/// The JSON line of a latency run.
pub fn latency_report(system: &str, size: usize, rtt: &RttRecorder) -> serde_json::Value {
    json!({
        "system": system,
        "mode": "latency",
        "size": size,
        "rtt_p50_us": rtt.quantile_us(0.50),
        "rtt_p99_us": rtt.quantile_us(0.99),
        "samples": rtt.samples(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_counts_messages_after_the_first_instant() {
        let s = SubSnapshot {
            received: 1_001,
            first_batch: 1,
            first_ns: 1_000_000_000,
            last_ns: 2_000_000_000,
        };
        assert_eq!(s.msgs_per_sec(), 1_000.0);
    }

    #[test]
    fn rate_is_zero_with_a_single_receive_instant() {
        let s = SubSnapshot {
            received: 5,
            first_batch: 5,
            first_ns: 10,
            last_ns: 10,
        };
        assert_eq!(s.msgs_per_sec(), 0.0);
    }

    #[test]
    fn counter_keeps_first_batch_and_total() {
        let c = SubCounter::new(Instant::now());
        c.record(3);
        c.record(0);
        c.record(2);
        let s = c.snapshot();
        assert_eq!((s.received, s.first_batch), (5, 3));
        assert!(s.last_ns >= s.first_ns);
    }

    #[test]
    fn warmup_round_trips_are_not_recorded() {
        let mut r = RttRecorder::new();
        for _ in 0..WARMUP_ROUND_TRIPS {
            r.record(Duration::from_secs(1));
        }
        r.record(Duration::from_micros(20));
        assert_eq!(r.samples(), 1);
        assert!((r.quantile_us(0.5) - 20.0).abs() < 0.1);
    }

    #[test]
    fn a_recorder_without_warmup_records_the_first_round_trip() {
        let mut r = RttRecorder::with_warmup(0);
        r.record(Duration::from_micros(30));
        assert_eq!(r.samples(), 1);
    }

    #[test]
    fn fanout_report_sums_and_averages_subscribers() {
        let one = SubSnapshot {
            received: 101,
            first_batch: 1,
            first_ns: 0,
            last_ns: 1_000_000_000,
        };
        let two = SubSnapshot {
            received: 301,
            ..one
        };
        let v = stream_report("x", Mode::Fanout, 64, &[one, two]);
        assert_eq!(v["per_sub_msgs_per_sec"], 200.0);
        assert_eq!(v["total_msgs_per_sec"], 400.0);
        assert_eq!(v["subscribers"], 2);
    }

    #[test]
    fn bad_parameters_are_refused_with_their_name() {
        let e = RunParams::new(Mode::Throughput, 64, 0.0, 1).unwrap_err();
        assert!(e.to_string().contains("--duration"), "{e}");
        let e = RunParams::new(Mode::Fanout, 64, 1.0, 0).unwrap_err();
        assert!(e.to_string().contains("--subscribers"), "{e}");
        let e = RunParams::new(Mode::Throughput, MAX_SIZE + 1, 1.0, 1).unwrap_err();
        assert!(e.to_string().contains("--size"), "{e}");
    }
}
