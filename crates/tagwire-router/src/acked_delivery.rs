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
//! While parked, the subscription **stays in the routes**: events of its
//! tag published meanwhile go on into its queue (its `max_queue_length`,
//! `limits.max_queue_bytes` and `discard` policy, charged to
//! `limits.max_buffered_bytes`; what its policy drops there is counted in
//! `held_dropped`), and come after the parked ones on the resume.
//!
//! Bounds: parked bytes are charged to the router's memory budget
//! (`limits.max_buffered_bytes`); what does not fit is dropped, counted
//! and logged. At most `limits.max_reservations` subscriptions are parked;
//! past it (and past their time, checked every second) the oldest go,
//! counted.

use std::sync::Arc;

use tagwire_core::qos::Reliability;
use tagwire_core::reliable::WindowLimits;
use tagwire_proto::SESSION_ID_LEN;

use crate::channel::Channel;
use crate::state::parked::{Key, Parked};
use crate::state::State;

/// Takes parked subscriptions that are gone out of the routes: each stops
/// receiving at once; the routes' entry of its old connection goes with
/// the last of them.
fn unroute(st: &mut State, gone: Vec<Parked>) {
    if gone.is_empty() {
        return;
    }
    for p in gone {
        let conn = p.global >> 32;
        st.node.routes_mut().retire_channel(p.global);
        let more = st
            .parked_deliveries
            .by_key
            .values()
            .any(|q| q.global >> 32 == conn);
        if !more {
            st.node.routes_mut().retire_session(conn);
        }
    }
    st.housekeeping.notify_one();
}

/// Forgets the parked subscriptions whose time ran out (the daemon's
/// one-second tick).
pub(crate) fn expire_due(st: &mut State, now: u64) {
    let Some((first, _)) = st.parked_deliveries.by_expiry.first() else {
        return;
    };
    if *first > now {
        return;
    }
    let max = st.config.limits.max_reservations;
    let budget = st.memory.clone();
    let gone = st.parked_deliveries.expire(now, max.max(1), &budget);
    unroute(st, gone);
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
/// `until_ns`. Returns the router-wide ids of those parked: the caller
/// leaves them in the routes (they hold what is published meanwhile) and
/// retires the rest.
pub(crate) fn park(
    st: &mut State,
    session: [u8; SESSION_ID_LEN],
    channels: &[(u64, Arc<Channel>)],
    now: u64,
    until_ns: u64,
) -> Vec<u64> {
    let max = st.config.limits.max_reservations;
    let budget = st.memory.clone();
    let mut kept = Vec::new();
    let mut gone = Vec::new();
    for (global, ch) in channels {
        let events = ch.park(None);
        let key: Key = (session, ch.endpoint.clone(), ch.sub, ch.pattern.clone());
        let parked = &mut st.parked_deliveries;
        if let Some(old) = parked.remove(&key) {
            budget.release(old.bytes);
            parked.stats.dropped += old.events.len() as u64;
            gone.push(old);
        }
        gone.extend(parked.expire(now, max.saturating_sub(1), &budget));
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
        if let Some(a) = &ch.acked {
            a.parked.set(true);
        }
        parked.stats.parked += 1;
        parked.stats.parked_events += events.len() as u64;
        parked.by_expiry.insert((until_ns, key.clone()));
        let dropped_before = ch.queue.borrow().dropped();
        parked.by_key.insert(
            key,
            Parked {
                events,
                bytes,
                until_ns,
                channel: ch.clone(),
                global: *global,
                dropped_before,
            },
        );
        kept.push(*global);
    }
    // Parked subscriptions of other connections pushed out (their own
    // connection's entries are retired by the caller).
    gone.retain(|p| !channels.iter().any(|(g, _)| *g == p.global));
    unroute(st, gone);
    kept
}

/// Gives `ch` (just made by session `session`, not yet in the routes) the
/// events parked for it, queued ahead of anything live: those it had not
/// had acknowledged, then those published while it was away. Its parked
/// subscription leaves the routes; what was staged for it still goes to
/// `ch`.
pub(crate) fn resume(st: &mut State, session: [u8; SESSION_ID_LEN], ch: &Arc<Channel>, now: u64) {
    if st.parked_deliveries.by_key.is_empty() {
        return;
    }
    let max = st.config.limits.max_reservations;
    let budget = st.memory.clone();
    let gone = st.parked_deliveries.expire(now, max, &budget);
    unroute(st, gone);
    let key: Key = (session, ch.endpoint.clone(), ch.sub, ch.pattern.clone());
    let Some(mut p) = st.parked_deliveries.remove(&key) else {
        return;
    };
    budget.release(p.bytes);
    let held_dropped = p.held_dropped();
    let mut events = std::mem::take(&mut p.events);
    let parked = events.len();
    events.extend(p.channel.park(Some(ch)));
    let held = events.len() - parked;
    let n = events.len();
    let queued = ch.preload(events);
    let s = &mut st.parked_deliveries.stats;
    s.resumed += 1;
    s.resent += queued as u64;
    s.dropped += (n - queued) as u64;
    s.held += held as u64;
    s.held_dropped += held_dropped;
    tracing::debug!(
        "subscriber {} (subscription {}) came back: {queued} of {n} events sent ({parked} unacknowledged, {held} published while it was away; {held_dropped} of those dropped by its queue's bound)",
        ch.endpoint,
        ch.sub
    );
    unroute(st, vec![p]);
}
