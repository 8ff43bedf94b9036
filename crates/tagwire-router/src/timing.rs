//! Wall-clock helpers for event lifetimes and start times (the router's
//! only clock reads; `tagwire-core` takes time as an argument).

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tagwire_proto::{EventRef, Expiry};

/// The deadline of an event that does not expire.
pub(crate) const NEVER: u64 = u64::MAX;

/// Wall-clock time, ns since the Unix epoch (0 before it).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// When the event expires (its timeout or stop time), ns since the Unix
/// epoch; [`NEVER`] if it does not. Events without a source timestamp cannot
/// expire relative to it.
pub(crate) fn deadline(ev: &EventRef<'_>) -> u64 {
    match ev.expiry {
        Expiry::Never => NEVER,
        Expiry::AfterNs(_) if ev.source_time_ns == 0 => NEVER,
        Expiry::AfterNs(d) => ev.source_time_ns.saturating_add(d),
        Expiry::AtNs(t) => t,
    }
}

/// The deadline of an encoded event.
pub(crate) fn deadline_of(event: &Bytes) -> Option<u64> {
    EventRef::parse(event).ok().map(|e| deadline(&e))
}

/// Whether `deadline` has passed (reads the clock only if there is one).
pub(crate) fn expired(deadline: u64) -> bool {
    deadline != NEVER && now_ns() > deadline
}
