//! Durable tags on the routing path (issue 25; docs/reliability.md):
//! which tags are durable, queuing a delivered event of one for the store
//! thread with its obligation ([`record`]), handing it replay reads
//! ([`pull`]) and its totals for `tagwire list`. The database and its
//! thread are [`crate::store`]'s.

use std::sync::atomic::{AtomicU64, Ordering};

use tagwire_core::federation::NodeId;
use tagwire_core::qos::{resolve, Property, Reliability};
use tagwire_core::store::origin_key;
use tagwire_proto::{ErrorCode, EventRef, Pull};

use crate::channel::Outgoing;
use crate::state::reliable::Upstream;
use crate::state::State;
use crate::store::{AnswerTo, Job};

/// Most tags whose durability is cached; at the bound the cache is cleared.
const CACHE_TAGS: usize = 65_536;
/// Most daemons whose origin key is cached by node id; at the bound the
/// cache is cleared (a network has far fewer daemons than tags).
const CACHE_ORIGINS: usize = 4096;

/// The `reliability` a tag has under the current daemon and tag layers.
fn durable_by_layers(st: &State, tag: &str) -> bool {
    tagwire_core::qos::layer_for(&st.qos_daemon, &st.qos_tags, tag, Property::Reliability)
        .is_some_and(|l| resolve(&[l]).values().reliability == Reliability::Durable)
}

/// Whether `tag`'s events are stored.
pub(crate) fn is_durable(st: &State, tag: &str) -> bool {
    st.store.patterns.iter().any(|p| p.matches(tag)) || durable_by_layers(st, tag)
}

/// After a daemon or tag layer changed: whether any tag can be durable.
pub(crate) fn layers_changed(st: &mut State) {
    let on = |l: &tagwire_core::qos::QosLayer| {
        l.is_set(Property::Reliability)
            && resolve(&[l]).values().reliability == Reliability::Durable
    };
    let layered = on(&st.qos_daemon) || st.qos_tags.iter().any(|t| on(&t.layer));
    let s = &mut st.store;
    s.enabled = !s.patterns.is_empty() || layered;
    s.cache.clear();
}

/// Queues a delivered event of a durable tag for the store (a flag test
/// when no tag is durable). With an `upstream` obligation the event takes
/// one more, which the store thread settles after its commit; `Err`: the
/// queue is full and such an event must not be delivered (its obligation
/// is failed here, and [`RouterStore::refused`](crate::store::RouterStore::refused) says why).
pub(crate) fn record(
    st: &mut State,
    event: &mut Outgoing,
    ev: &EventRef<'_>,
    upstream: Option<Upstream>,
    origin: NodeId,
) -> Result<(), &'static str> {
    if !st.store.enabled {
        return Ok(());
    }
    let durable = match st.store.cache.get(ev.tag) {
        Some(d) => *d,
        None => {
            let d = is_durable(st, ev.tag);
            let cache = &mut st.store.cache;
            if cache.len() >= CACHE_TAGS {
                cache.clear();
            }
            cache.insert(Box::from(ev.tag), d);
            d
        }
    };
    if !durable {
        return Ok(());
    }
    let (bytes, _) = event.for_history();
    let len = bytes.len() as u64;
    let origin = origin_of(st, origin);
    let job = Job::Write {
        tag: Box::from(ev.tag),
        event: bytes,
        at_ns: crate::timing::now_ns(),
        origin,
        upstream,
    };
    let submitted = st.store.submit(job, len);
    if upstream.is_some() && submitted.is_ok() {
        st.fed.reliable.obligations += 1;
    }
    if let (Some(up), Err(why)) = (upstream, submitted) {
        // Custody cannot be taken: refused back to the publisher (failed in
        // its acknowledgement) rather than delivered unstored.
        let r = &mut st.fed.reliable;
        r.obligations += 1;
        r.completions.push((up, true));
        st.store.refused = Some(why);
        st.store.counters.refused.fetch_add(1, Ordering::Relaxed);
        let s = &mut st.store;
        if s.may_warn() {
            tracing::warn!(
                "an acknowledged event of durable tag {} is refused: {why} ({} refused so far)",
                tagwire_proto::excerpt(ev.tag),
                s.counters.refused.load(Ordering::Relaxed)
            );
        }
        return Err(why);
    }
    if let Err(why) = submitted {
        st.store.counters.not_stored.fetch_add(1, Ordering::Relaxed);
        let s = &mut st.store;
        if s.may_warn() {
            tracing::warn!(
                "an event of durable tag {} is delivered but not stored: {why} ({} not stored so far)",
                tagwire_proto::excerpt(ev.tag),
                s.counters.not_stored.load(Ordering::Relaxed)
            );
        }
    }
    Ok(())
}

/// The [`origin_key`] of the daemon an event was published at (`0` or
/// this daemon's id: here; a daemon the topology does not name: 0, not
/// known).
fn origin_of(st: &mut State, node: NodeId) -> u64 {
    if node == 0 || node == st.node.me() {
        return st.store.own_origin;
    }
    if let Some(k) = st.store.origins.get(&node) {
        return *k;
    }
    let key = st.node.topology().name_of(node).map_or(0, origin_key);
    let cache = &mut st.store.origins;
    if cache.len() >= CACHE_ORIGINS {
        cache.clear();
    }
    cache.insert(node, key);
    key
}

/// Hands a `Stored` pull (a replay) for this daemon's store to the store
/// thread, which answers `to` with request id `pull.req`. Refused at once:
/// a tag the store cannot serve, or a full queue. `max_frame`: the largest
/// reply the asker takes.
pub(crate) fn pull(
    st: &mut State,
    pull: Pull,
    to: AnswerTo,
    max_frame: u32,
) -> Result<(), (ErrorCode, String)> {
    if !pull.publisher.is_empty() {
        return Err((
            ErrorCode::BadRequest,
            "a replay (pull query 6 or 7, Stored) reads a daemon's store: its publisher must be empty".into(),
        ));
    }
    let limits = &st.config.limits;
    // The reply's own fields and each event's length prefix.
    let max_bytes = limits
        .history_reply_bytes
        .min((max_frame as usize).saturating_sub(64));
    let max_events = limits.history_reply_events;
    let durable = is_durable(st, &pull.tag);
    let job = Job::Read {
        durable,
        pull,
        to,
        max_events,
        max_bytes,
    };
    st.store
        .submit(job, 0)
        .map_err(|why| (ErrorCode::LimitReached, format!("cannot replay now: {why}")))
}

/// What `tagwire list --json` reports of the store (`None`: no store).
pub(crate) fn totals(st: &State) -> Option<tagwire_proto::admin::StoreTotals> {
    st.store.queue.as_ref()?;
    let c = &st.store.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Some(tagwire_proto::admin::StoreTotals {
        stored: get(&c.stored),
        not_stored: get(&c.not_stored),
        evicted: get(&c.evicted),
        corrupt: get(&c.corrupt),
        commits: get(&c.commits),
        refused: get(&c.refused),
    })
}
