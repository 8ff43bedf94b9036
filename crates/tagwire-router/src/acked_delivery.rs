//! Acknowledged delivery to subscribers across a reconnect (protocol
//! version 4, `DeliverReliable`/`DeliverAck`; docs/reliability.md,
//! "Between a daemon and its subscribers"). Each such channel holds what
//! it wrote until the subscriber acknowledges it ([`crate::channel`]'s
//! `acked` module); this module decides which subscriptions get it and
//! keeps, when a subscriber's connection drops without `Close`, what it
//! had not acknowledged and what was queued for it — **parked** under its
//! session id, endpoint name, subscription id and pattern for
//! `limits.endpoint_reservation_secs` (the time its endpoint name is
//! reserved) — so that the same subscription, made again by the same
//! session after its reconnect, gets it first.
//!
//! Bounds: parked bytes are charged to the router's memory budget
//! (`limits.max_buffered_bytes`); what does not fit is dropped, counted
//! and logged. At most `limits.max_reservations` subscriptions are parked;
//! past it (and past their time) the oldest go, counted.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use tagwire_core::qos::Reliability;
use tagwire_core::reliable::WindowLimits;
use tagwire_proto::SESSION_ID_LEN;

use crate::channel::Channel;
use crate::state::State;

/// What identifies a subscription across its session's reconnects.
type Key = ([u8; SESSION_ID_LEN], Arc<str>, u32, String);

#[derive(Debug)]
struct Parked {
    events: Vec<Bytes>,
    /// Bytes charged to the memory budget.
    bytes: usize,
    until_ns: u64,
}

/// Counters of acknowledged delivery's parking (`tagwire list --json`,
/// `delivery_acks`).
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub(crate) struct ParkStats {
    /// Subscriptions parked when their connection dropped.
    pub parked: u64,
    /// Events parked.
    pub parked_events: u64,
    /// Subscriptions given their parked events after a reconnect.
    pub resumed: u64,
    /// Events sent again after a reconnect.
    pub resent: u64,
    /// Parked events dropped: no room in the memory budget, the bound on
    /// parked subscriptions, or their time ran out.
    pub dropped: u64,
}

/// The parked subscriptions.
#[derive(Debug, Default)]
pub(crate) struct ParkedDeliveries {
    by_key: HashMap<Key, Parked>,
    by_expiry: BTreeSet<(u64, Key)>,
    pub stats: ParkStats,
}

impl ParkedDeliveries {
    fn remove(&mut self, key: &Key) -> Option<Parked> {
        let p = self.by_key.remove(key)?;
        self.by_expiry.remove(&(p.until_ns, key.clone()));
        Some(p)
    }

    /// Forgets what expired at `now` and, at `max`, the closest to expiry,
    /// giving its bytes back to `budget`.
    fn expire(&mut self, now: u64, max: usize, budget: &crate::budget::MemoryBudget) {
        while let Some((until, key)) = self.by_expiry.first().cloned() {
            if until > now && self.by_key.len() < max {
                break;
            }
            if let Some(p) = self.remove(&key) {
                budget.release(p.bytes);
                self.stats.dropped += p.events.len() as u64;
                tracing::warn!(
                    "{} unacknowledged events parked for subscriber {} (subscription {}) were dropped: it did not come back within limits.endpoint_reservation_secs (or limits.max_reservations subscriptions were parked)",
                    p.events.len(),
                    key.1,
                    key.2
                );
            }
        }
    }
}

/// Whether a subscription gets acknowledged delivery: its client speaks
/// protocol version 4 and its effective reliability (any level, the tag's
/// included) is `reliable` or more. Decided when the subscription is made.
pub(crate) fn wants_acks(version: u16, reliability: Reliability) -> bool {
    version >= tagwire_proto::ACK_PROTOCOL_VERSION && reliability != Reliability::BestEffort
}

/// A subscription's window: as many events and bytes as its queue holds
/// (`max_queue_length`, `limits.max_queue_bytes`), so that what the daemon
/// keeps for one subscriber is at most twice its queue's bound.
pub(crate) fn window_limits(queue_events: usize, queue_bytes: usize) -> WindowLimits {
    WindowLimits {
        max_events: queue_events.max(1),
        max_bytes: queue_bytes.max(1),
    }
}

/// Parks what `channels` (a connection's acknowledged subscriptions, its
/// session `session`; the connection dropped without `Close`) hold, until
/// `until_ns`.
pub(crate) fn park(
    st: &mut State,
    session: [u8; SESSION_ID_LEN],
    channels: &[Arc<Channel>],
    now: u64,
    until_ns: u64,
) {
    let max = st.config.limits.max_reservations;
    let budget = st.memory.clone();
    for ch in channels {
        let events = ch.park();
        if events.is_empty() {
            continue;
        }
        let key: Key = (session, ch.endpoint.clone(), ch.sub, ch.pattern.clone());
        let parked = &mut st.parked_deliveries;
        if let Some(old) = parked.remove(&key) {
            budget.release(old.bytes);
            parked.stats.dropped += old.events.len() as u64;
        }
        parked.expire(now, max.saturating_sub(1), &budget);
        let bytes: usize = events.iter().map(|e| e.len() + 64).sum();
        if max == 0 || !budget.try_reserve(bytes) {
            parked.stats.dropped += events.len() as u64;
            tracing::warn!(
                "{} unacknowledged events of subscriber {} (subscription {}) were dropped when its connection dropped: no room to park them (limits.max_buffered_bytes)",
                events.len(),
                ch.endpoint,
                ch.sub
            );
            continue;
        }
        parked.stats.parked += 1;
        parked.stats.parked_events += events.len() as u64;
        parked.by_expiry.insert((until_ns, key.clone()));
        parked.by_key.insert(
            key,
            Parked {
                events,
                bytes,
                until_ns,
            },
        );
    }
}

/// Gives `ch` (just made by session `session`, not yet in the routes) the
/// events parked for it, queued ahead of anything live.
pub(crate) fn resume(st: &mut State, session: [u8; SESSION_ID_LEN], ch: &Arc<Channel>, now: u64) {
    if st.parked_deliveries.by_key.is_empty() {
        return;
    }
    let max = st.config.limits.max_reservations;
    let budget = st.memory.clone();
    st.parked_deliveries.expire(now, max, &budget);
    let key: Key = (session, ch.endpoint.clone(), ch.sub, ch.pattern.clone());
    let Some(p) = st.parked_deliveries.remove(&key) else {
        return;
    };
    budget.release(p.bytes);
    let n = p.events.len();
    let queued = ch.preload(p.events);
    let s = &mut st.parked_deliveries.stats;
    s.resumed += 1;
    s.resent += queued as u64;
    s.dropped += (n - queued) as u64;
    tracing::debug!(
        "subscriber {} (subscription {}) came back: {queued} of {n} unacknowledged events sent again",
        ch.endpoint,
        ch.sub
    );
}
