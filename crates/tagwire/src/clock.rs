//! This host's wall clock, in nanoseconds since the Unix epoch: what events
//! are stamped with, and what replays and resumes measure from.

use rustix::time::{clock_gettime, ClockId};

/// Wall-clock nanoseconds now (0 before the epoch). Read straight from the
/// vDSO: a publisher stamps every event, and `SystemTime`'s conversions
/// cost it about half as much again as the read itself.
pub(crate) fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Realtime);
    if t.tv_sec < 0 {
        return 0;
    }
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}
