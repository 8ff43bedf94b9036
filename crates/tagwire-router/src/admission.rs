//! Who may hold a connection, and how much a connection may make the router
//! log: the counts behind `limits.max_pending_handshakes` and
//! `limits.max_connections`, and rate limits on warnings caused by peers.
//!
//! Connections not yet through the handshake are counted apart from
//! established ones, so sockets that never say `Hello` can only fill the
//! (small) pending bound, never take the established connections' slots.
//! At the pending bound the connection that has waited longest is closed to
//! make room for the new one: a real client, which says `Hello` at once,
//! gets through even while idle sockets keep arriving.
//!
//! A peer that keeps sending bad frames must not turn into a log flood: each
//! connection logs its first [`LOGGED_PER_CONNECTION`] errors, then one
//! summary line per second at most ("N more suppressed"); and the whole
//! router logs at most [`ROUTER_LOG_PER_SECOND`] such lines per second,
//! counting the rest and saying how many it suppressed once the second ends.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tagwire_proto::truncate;
use tokio::sync::Notify;

/// Errors a connection logs one by one before it only logs summaries.
pub(crate) const LOGGED_PER_CONNECTION: u32 = 8;
/// Peer-caused warning lines the router writes per second, all connections
/// together.
pub(crate) const ROUTER_LOG_PER_SECOND: u32 = 20;
/// Shortest time between two summary lines.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// Connection counts and the router-wide log limit (one per lane).
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// Connections accepted and not yet through the handshake, oldest first
    /// (ids increase), each with the signal that closes it.
    pending: BTreeMap<u64, Arc<Notify>>,
    /// Connections through the handshake.
    pub established: usize,
    /// The router-wide rate limit on peer-caused log lines.
    pub log: RouterLog,
}

impl Admission {
    /// Adds connection `id` as pending; if `max` are pending already, tells
    /// the oldest to close and returns true. The returned `Notify` fires
    /// when this one must close to make room.
    pub(crate) fn add_pending(&mut self, id: u64, max: usize) -> (Arc<Notify>, bool) {
        let mut evicted = false;
        while self.pending.len() >= max.max(1) {
            let Some((_, oldest)) = self.pending.pop_first() else {
                break;
            };
            oldest.notify_one();
            evicted = true;
        }
        let n = Arc::new(Notify::new());
        self.pending.insert(id, n.clone());
        (n, evicted)
    }

    /// Connection `id` is no longer pending (through the handshake, closed,
    /// or evicted).
    pub(crate) fn remove_pending(&mut self, id: u64) {
        self.pending.remove(&id);
    }

    /// Connections pending their handshake.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// At most [`ROUTER_LOG_PER_SECOND`] peer-caused lines per second.
#[derive(Debug, Default)]
pub(crate) struct RouterLog {
    window: Cell<Option<Instant>>,
    lines: Cell<u32>,
    suppressed: Cell<u64>,
}

impl RouterLog {
    /// Whether a line may be written now; counts it either way. When a new
    /// second starts after suppressed lines, says how many first.
    pub(crate) fn allow(&self, now: Instant) -> bool {
        let fresh = self
            .window
            .get()
            .is_none_or(|w| now.duration_since(w) >= SUMMARY_EVERY);
        if fresh {
            let n = self.suppressed.replace(0);
            if n > 0 {
                tracing::warn!(
                    "{n} log lines about misbehaving clients suppressed in the last second \
                     (at most {ROUTER_LOG_PER_SECOND} per second)"
                );
            }
            self.window.set(Some(now));
            self.lines.set(0);
        }
        if self.lines.get() < ROUTER_LOG_PER_SECOND {
            self.lines.set(self.lines.get() + 1);
            true
        } else {
            self.suppressed.set(self.suppressed.get() + 1);
            false
        }
    }
}

/// One connection's error log: the first few in full, then summaries.
#[derive(Debug, Default)]
pub(crate) struct ConnLog {
    logged: Cell<u32>,
    suppressed: Cell<u64>,
    last_summary: Cell<Option<Instant>>,
    last_message: std::cell::RefCell<String>,
}

/// What [`ConnLog::note`] says to write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LogLine {
    /// Write this error in full.
    Full,
    /// Write a summary: this many errors were not written, the latest is
    /// the one given.
    Summary(u64),
    /// Write nothing.
    Nothing,
}

impl ConnLog {
    /// Counts an error with `message` at `now` and says what to log.
    pub(crate) fn note(&self, message: &str, now: Instant) -> LogLine {
        if self.logged.get() < LOGGED_PER_CONNECTION {
            self.logged.set(self.logged.get() + 1);
            return LogLine::Full;
        }
        self.suppressed.set(self.suppressed.get() + 1);
        let due = self
            .last_summary
            .get()
            .is_none_or(|t| now.duration_since(t) >= SUMMARY_EVERY);
        if due {
            self.last_summary.set(Some(now));
            LogLine::Summary(self.suppressed.replace(0))
        } else {
            let mut last = self.last_message.borrow_mut();
            last.clear();
            // Bounded: only the start of the latest message is kept.
            last.push_str(truncate(message, 200));
            LogLine::Nothing
        }
    }

    /// Errors not yet written or summarised, and the latest one's message
    /// (for a last summary when the connection closes).
    pub(crate) fn take_unreported(&self) -> Option<(u64, String)> {
        let n = self.suppressed.replace(0);
        (n > 0).then(|| (n, std::mem::take(&mut *self.last_message.borrow_mut())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    #[test]
    fn a_connection_logs_its_first_errors_then_one_summary_per_second() {
        let log = ConnLog::default();
        let t0 = Instant::now();
        for _ in 0..LOGGED_PER_CONNECTION {
            assert_eq!(log.note("bad", t0), LogLine::Full);
        }
        assert_eq!(log.note("bad", t0), LogLine::Summary(1));
        for _ in 0..1000 {
            assert_eq!(log.note("bad", t0), LogLine::Nothing);
        }
        let t1 = t0 + SUMMARY_EVERY;
        assert_eq!(log.note("bad", t1), LogLine::Summary(1001));
        assert_eq!(log.note("last", t1), LogLine::Nothing);
        assert_eq!(log.take_unreported(), Some((1, "last".into())));
        assert_eq!(log.take_unreported(), None);
    }

    #[test]
    fn the_router_writes_at_most_its_bound_of_lines_per_second() {
        let log = RouterLog::default();
        let t0 = Instant::now();
        let allowed = (0..1000).filter(|_| log.allow(t0)).count();
        assert_eq!(allowed, ROUTER_LOG_PER_SECOND as usize);
        assert!(log.allow(t0 + SUMMARY_EVERY), "a new second starts afresh");
    }

    #[test]
    fn at_the_pending_bound_the_oldest_pending_connection_is_told_to_close() {
        let mut a = Admission::default();
        let (first, evicted) = a.add_pending(1, 2);
        assert!(!evicted);
        let _ = a.add_pending(2, 2);
        let (_third, evicted) = a.add_pending(3, 2);
        assert!(evicted);
        assert_eq!(a.pending(), 2);
        // The oldest got the signal (a stored permit: `notified` is ready).
        let mut fut = std::pin::pin!(first.notified());
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(fut.as_mut().poll(&mut cx).is_ready());
        a.remove_pending(2);
        a.remove_pending(3);
        assert_eq!(a.pending(), 0);
    }
}
