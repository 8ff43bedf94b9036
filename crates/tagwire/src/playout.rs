//! The time-differential service in the client library
//! ([`SubscriptionBuilder::playout`](crate::SubscriptionBuilder::playout);
//! docs/time.md, "In the client library"): the subscription's events are
//! held in this process and handed to the application keeping the
//! publisher's spacing (their source times) after a playout delay, with
//! the same engine as the daemon's `playout=tds:D` (`tagwire_core::tds`).
//!
//! Which to pick: the daemon's `--qos playout=tds:D` removes the jitter of
//! the path up to the subscriber's daemon, for any client; the library's
//! removes it up to this process (the last hop and the daemon's writer
//! too), and works against a daemon that does not have it. Both may be
//! set; the library's then sees the daemon's output.
//!
//! A thread per playout subscription (`tagwire-playout`) sleeps until the
//! next release (a condition variable with a deadline: the kernel's timer,
//! ~50 µs slack) and hands released events to the subscription's queue or
//! callback. [`PlayoutState`] is the part that decides, with the clock as
//! an argument, so that its tests run in simulated time.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::clock::now_ns;

pub use tagwire_core::tds::{LatePolicy, PlayoutConfig, TimeStats};
use tagwire_core::tds::{TimeService, DEFAULT_MAX_BYTES};

use crate::deliver::Deliver;
use crate::error::Error;
use crate::sample::Sample;
use crate::sync::lock;

/// What a playout subscription did: its counters (as the daemon's `time`
/// in `tagwire list`) and the RFC 3550 jitter at its input and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlayoutStats {
    /// Events held now.
    pub held: usize,
    /// Released, late, dropped, forced and re-anchored counts.
    pub counters: TimeStats,
    /// RFC 3550 jitter of the events as they arrived here (arrival vs
    /// source time), ns.
    pub input_jitter_ns: u64,
    /// RFC 3550 jitter of the events as they were handed over, ns.
    pub output_jitter_ns: u64,
}

/// The deciding half of a client playout, in simulated time: events in
/// with their arrival time, events out at a given time.
pub(crate) struct PlayoutState {
    service: TimeService<Sample>,
}

impl PlayoutState {
    /// A playout bounded by `max_events` events and 8 MiB.
    pub(crate) fn new(cfg: PlayoutConfig, max_events: usize) -> Self {
        PlayoutState {
            service: TimeService::new(None, Some(cfg), max_events.max(1), DEFAULT_MAX_BYTES),
        }
    }

    /// Takes a sample that arrived at `now` (ns since the Unix epoch); one
    /// without a source time is timed by its arrival.
    pub(crate) fn offer(&mut self, sample: Sample, now: u64) {
        let src = match sample.event().source_time_ns {
            0 => now,
            t => t,
        };
        let bytes = sample.raw().len();
        self.service.push(sample, src, bytes, now);
    }

    /// Moves the samples due at `now` into `out`; returns when the next is
    /// due (`None`: nothing held).
    pub(crate) fn release(&mut self, now: u64, out: &mut Vec<Sample>) -> Option<u64> {
        while let Some(s) = self.service.poll(now) {
            out.push(s);
        }
        self.service.next_wake()
    }

    fn stats(&self) -> PlayoutStats {
        PlayoutStats {
            held: self.service.len(),
            counters: self.service.stats(),
            input_jitter_ns: self.service.input_jitter_ns(),
            output_jitter_ns: self.service.output_jitter_ns(),
        }
    }
}

/// How a playout ends.
enum Ending {
    /// Running.
    No,
    /// The subscription was closed (the session closed): hand over what
    /// is held, then close the sink.
    Close,
    /// The subscription failed: hand over what is held, then fail the sink.
    Fail(Error),
    /// The subscription was dropped: what is held is dropped with it.
    Dropped,
}

struct Shared<D> {
    state: Mutex<(PlayoutState, Ending)>,
    /// How long before a release the thread stops sleeping and spins, ns.
    spin_ns: u64,
    wake: Condvar,
    inner: Arc<D>,
}

/// A playout subscription's sink: what the reader thread hands events to,
/// released in time to `D` (the application's sink).
/// Dropped with the subscription: its thread then ends, dropping what it
/// holds.
pub(crate) struct Playout<D> {
    shared: Arc<Shared<D>>,
}

/// The application's view of a playout, for its counters.
pub(crate) struct PlayoutProbe<D>(Weak<Shared<D>>);

impl<D> Clone for PlayoutProbe<D> {
    fn clone(&self) -> Self {
        PlayoutProbe(self.0.clone())
    }
}

impl<D> PlayoutProbe<D> {
    pub(crate) fn stats(&self) -> Option<PlayoutStats> {
        self.0.upgrade().map(|s| lock(&s.state).0.stats())
    }

    /// The subscription is dropped: the thread ends now, dropping what is
    /// held (the reader thread may hold the sink a while longer).
    pub(crate) fn stop(&self) {
        if let Some(s) = self.0.upgrade() {
            let mut st = lock(&s.state);
            st.1 = Ending::Dropped;
            drop(st.0.service.drain_all());
            drop(st);
            s.wake.notify_one();
        }
    }
}

impl<D: Deliver> Playout<D> {
    /// A playout in front of `inner`, with its thread.
    pub(crate) fn start(
        cfg: PlayoutConfig,
        spin: Duration,
        max_events: usize,
        inner: Arc<D>,
    ) -> std::io::Result<(Playout<D>, PlayoutProbe<D>)> {
        let shared = Arc::new(Shared {
            state: Mutex::new((PlayoutState::new(cfg, max_events), Ending::No)),
            spin_ns: spin.min(MAX_PLAYOUT_SPIN).as_nanos() as u64,
            wake: Condvar::new(),
            inner,
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("tagwire-playout".into())
            .spawn(move || run(weak))?;
        let probe = PlayoutProbe(Arc::downgrade(&shared));
        Ok((Playout { shared }, probe))
    }

    /// An event from the reader thread.
    pub(crate) fn offer(&self, sample: Sample) {
        let mut st = lock(&self.shared.state);
        if matches!(st.1, Ending::Dropped) {
            return;
        }
        st.0.offer(sample, now_ns());
        drop(st);
        self.shared.wake.notify_one();
    }

    fn end(&self, how: Ending) {
        lock(&self.shared.state).1 = how;
        self.shared.wake.notify_one();
    }

    /// The session closed: what is held goes to the sink, then it closes.
    pub(crate) fn close(&self) {
        self.end(Ending::Close);
    }

    /// The subscription failed: what is held goes first.
    pub(crate) fn fail(&self, error: Error) {
        self.end(Ending::Fail(error));
    }
}

impl<D> Drop for Playout<D> {
    fn drop(&mut self) {
        // Wakes the thread: it finds no sink owner left and ends.
        self.shared.wake.notify_one();
    }
}

/// The longest [`SubscriptionBuilder::playout_spin`](crate::SubscriptionBuilder::playout_spin):
/// a thread that spins longer per release is a busy loop, not a timer.
pub const MAX_PLAYOUT_SPIN: Duration = Duration::from_millis(1);

/// Longest the thread sleeps without checking whether its subscription is
/// gone.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// The playout's thread: releases due events to the sink, sleeps until the
/// next is due. Holds the shared state strongly only while it works and
/// waits; it ends once the subscription's [`Playout`] is gone.
fn run<D: Deliver>(weak: Weak<Shared<D>>) {
    let mut out = Vec::new();
    loop {
        let Some(shared) = weak.upgrade() else { return };
        // The sink's owner (Playout) and this thread hold it; with only
        // this thread's reference (and probes' weak ones) left, it is over.
        if Arc::strong_count(&shared) == 1 {
            return;
        }
        let mut st = lock(&shared.state);
        if matches!(st.1, Ending::Dropped) {
            return;
        }
        let now = now_ns();
        let next = st.0.release(now, &mut out);
        let ending = std::mem::replace(&mut st.1, Ending::No);
        if !matches!(ending, Ending::No) {
            out.extend(st.0.service.drain_all());
        }
        if out.is_empty() && matches!(ending, Ending::No) {
            let spin = shared.spin_ns;
            match next {
                // Due within the spin: busy-wait for it, unlocked (the
                // reader thread goes on offering events meanwhile).
                Some(at) if at.saturating_sub(now) <= spin => {
                    drop(st);
                    while now_ns() < at {
                        std::hint::spin_loop();
                    }
                }
                _ => {
                    let wait = next.map_or(CHECK_EVERY, |at| {
                        Duration::from_nanos(at.saturating_sub(now) - spin).min(CHECK_EVERY)
                    });
                    drop(shared.wake.wait_timeout(st, wait));
                }
            }
            continue;
        }
        drop(st);
        for s in out.drain(..) {
            shared.inner.deliver_sample(s);
        }
        match ending {
            Ending::No => {}
            Ending::Close => return shared.inner.close(),
            Ending::Fail(e) => return shared.inner.fail(e),
            Ending::Dropped => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::Event;

    const MS: u64 = 1_000_000;

    fn sample(n: u64, src: u64) -> Sample {
        let mut e = Event::new("/t", n.to_string());
        e.header.source_time_ns = src;
        let mut out = bytes::BytesMut::new();
        e.encode(&mut out).expect("a valid event");
        Sample::new(out.freeze()).expect("a valid sample")
    }

    fn names(v: &[Sample]) -> Vec<String> {
        v.iter()
            .map(|s| String::from_utf8_lossy(&s.payload()).into_owned())
            .collect()
    }

    #[test]
    fn a_client_playout_releases_in_source_order_with_the_original_spacing() {
        let cfg = PlayoutConfig {
            delay_ns: 50 * MS,
            late: LatePolicy::Deliver,
        };
        let mut p = PlayoutState::new(cfg, 64);
        // Source times 10 ms apart; arrivals jittered by up to 40 ms and
        // out of order: 0 at 1000 ms (transit 1000), 2 at 1021, 1 at 1050.
        let t0 = 1_000 * MS;
        p.offer(sample(0, 1), t0);
        p.offer(sample(2, 20 * MS + 1), t0 + 21 * MS);
        p.offer(sample(1, 10 * MS + 1), t0 + 50 * MS);
        let mut out = Vec::new();
        // Due at the first transit + source time + delay: 1050, 1060, 1070.
        assert_eq!(p.release(t0 + 49 * MS, &mut out), Some(t0 + 50 * MS));
        assert!(out.is_empty(), "nothing before its playout time");
        let mut at = Vec::new();
        let mut now = t0 + 50 * MS;
        while let Some(next) = p.release(now, &mut out) {
            at.push(now);
            now = next;
        }
        at.push(now);
        assert_eq!(names(&out), ["0", "1", "2"]);
        // Each released exactly at its time: spacing 10 ms, as published.
        assert_eq!(at, [t0 + 50 * MS, t0 + 60 * MS, t0 + 70 * MS]);
        let s = p.stats();
        assert_eq!((s.held, s.counters.released, s.counters.late), (0, 3, 0));
        assert!(s.input_jitter_ns > 0);
        assert_eq!(s.output_jitter_ns, 0, "the output keeps the spacing");
    }

    #[test]
    fn a_client_playout_drops_late_events_under_drop_and_is_bounded() {
        let cfg = PlayoutConfig {
            delay_ns: 5 * MS,
            late: LatePolicy::Drop,
        };
        let mut p = PlayoutState::new(cfg, 4);
        let t0 = 1_000 * MS;
        p.offer(sample(0, 1), t0);
        // 20 ms more transit than the anchor: late, dropped.
        p.offer(sample(1, MS + 1), t0 + 21 * MS);
        let mut out = Vec::new();
        let _ = p.release(t0 + 100 * MS, &mut out);
        assert_eq!(names(&out), ["0"]);
        assert_eq!(p.stats().counters.late_dropped, 1);
        // Ten events held at once against a bound of 4: the earliest are
        // forced out, never more than 4 held.
        let mut p = PlayoutState::new(
            PlayoutConfig {
                delay_ns: 60_000 * MS,
                late: LatePolicy::Deliver,
            },
            4,
        );
        let mut out = Vec::new();
        for i in 0..10 {
            p.offer(sample(i, i * MS + 1), t0 + i * MS);
            // As the playout's thread does after each event.
            let _ = p.release(t0 + i * MS, &mut out);
            assert!(p.stats().held <= 4, "never more than the bound held");
        }
        assert_eq!(
            names(&out),
            ["0", "1", "2", "3", "4", "5"],
            "the earliest forced out first, in order"
        );
        assert_eq!(p.stats().counters.forced, 6);
    }

    #[test]
    fn events_without_a_source_time_are_timed_by_their_arrival() {
        let mut p = PlayoutState::new(
            PlayoutConfig {
                delay_ns: 10 * MS,
                late: LatePolicy::Deliver,
            },
            8,
        );
        let t0 = 1_000 * MS;
        p.offer(sample(0, 0), t0);
        p.offer(sample(1, 0), t0 + 3 * MS);
        let mut out = Vec::new();
        assert_eq!(p.release(t0, &mut out), Some(t0 + 10 * MS));
        assert_eq!(p.release(t0 + 10 * MS, &mut out), Some(t0 + 13 * MS));
        assert_eq!(names(&out), ["0"]);
    }
}
