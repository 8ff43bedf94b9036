//! Wall-clock helpers for event lifetimes and start times (the router's
//! only clock reads; `tagwire-core` takes time as an argument).

use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) use tagwire_core::defer::NEVER;

/// Wall-clock time, ns since the Unix epoch (0 before it).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether `deadline` has passed (reads the clock only if there is one).
pub(crate) fn expired(deadline: u64) -> bool {
    deadline != NEVER && now_ns() > deadline
}
