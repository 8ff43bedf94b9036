//! This host's wall clock, in nanoseconds since the Unix epoch: what events
//! are stamped with, and what replays and resumes measure from.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock nanoseconds now (0 before the epoch).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
