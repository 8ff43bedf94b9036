//! Pull buffers at run time: which tags keep history (the `history` QoS
//! property, daemon `[qos]` and tag layers), recording delivered events into
//! core's [`HistoryTable`](tagwire_core::history::HistoryTable), and
//! answering `Pull` frames.
//!
//! **Where events are recorded.** In `dispatch::deliver`, the one
//! place every accepted event passes when it is handed to channels: an event
//! published now, and an event held for its start time when that time comes
//! (so a pull never sees an event its subscribers cannot see yet). Events
//! refused (ACL, expired, filtered at the source, `max_suppliers`) are not
//! recorded.
//!
//! **What a held event keeps alive.** A small event read into the shared
//! 64 KiB read chunk is copied out once (the copy is shared with the
//! channels that get it, see `channel.rs`), so history never pins a chunk
//! for a small event; a large one is counted at what it keeps alive. Bytes
//! are bounded by `limits.max_history_bytes` (all tags) and
//! `limits.max_history_bytes_per_tag`; tags by `limits.max_history_tags`;
//! see [`tagwire_core::history`] for the behaviour at each bound.
//!
//! **Which `history` applies to a tag** is core's decision
//! ([`tagwire_core::history::HistoryPolicy`]): the most specific tag layer
//! whose pattern matches the tag and sets `history` (the longest pattern
//! text), else the daemon's `[qos]`, else 0 (none). A publish costs one flag
//! test when no layer sets `history`; otherwise one lookup in a bounded
//! cache of each tag's value, cleared whenever a QoS layer changes.
//!
//! **Modes.** A pull names where the history is kept: at the subscriber's
//! daemon (served here, from what is delivered here: events of local
//! publishers, and events that crossed a link because something here
//! subscribes to them), at the publisher's daemon (the daemon the tag's
//! last event came from; here when it was published here or none came yet)
//! or at a named node (`node:NAME`). A pull for another daemon travels
//! over the links (core's node engine, [`tagwire_core::node`]) and is answered from that
//! daemon's buffers.

use std::collections::HashMap;

use tagwire_core::history::capacity_of;
use tagwire_core::tags::{validate_tag, Pattern};
use tagwire_proto::{ErrorCode, EventRef, Pull};

use crate::auth::Rights;
use crate::channel::Outgoing;
use crate::state::State;

/// After a daemon or tag layer changed: whether history is on anywhere,
/// and every held tag's new `history` (a tag at 0 loses its history).
pub(crate) fn layers_changed(st: &mut State) {
    st.history.layers_changed(&st.qos_daemon, &st.qos_tags);
    let tags = st.node.history().tags(usize::MAX);
    let caps: HashMap<std::sync::Arc<str>, usize> = tags
        .into_iter()
        .map(|t| {
            let c = capacity_of(&st.qos_daemon, &st.qos_tags, &t);
            (t, c)
        })
        .collect();
    st.node
        .history_mut()
        .recapacity(|t| caps.get(t).copied().unwrap_or(0));
}

/// Records a delivered event in its tag's history, if the tag keeps one.
pub(crate) fn record(st: &mut State, event: &mut Outgoing, ev: &EventRef<'_>) {
    if !st.history.enabled() {
        return;
    }
    let cap = st.history.capacity(&st.qos_daemon, &st.qos_tags, ev.tag);
    if cap == 0 {
        return;
    }
    let (bytes, cost) = event.for_history();
    st.node.record(ev, bytes, cost, cap);
}

/// Refuses a `Pull` of a bad tag or one the identity with `rights` may
/// not read. The daemon the client is connected to checks this, wherever
/// the history is kept.
pub(crate) fn check_readable(pull: &Pull, rights: &Rights) -> Result<(), (ErrorCode, String)> {
    validate_tag(&pull.tag).map_err(|e| (ErrorCode::InvalidTag, e.to_string()))?;
    let readable = Pattern::parse(&pull.tag).is_ok_and(|p| rights.may_subscribe(&p));
    if !readable {
        return Err((
            ErrorCode::PermissionDenied,
            format!(
                "this identity may not read {} (no [[acl]] subscribe pattern covers it)",
                tagwire_proto::excerpt(&pull.tag)
            ),
        ));
    }
    Ok(())
}

/// What `tagwire admin show TAG` adds for a tag with history.
pub(crate) fn show(st: &State, tag: &str) -> Option<HistoryShow> {
    let info = st.node.history().info(tag)?;
    let publishers = info
        .publishers
        .iter()
        .map(|(p, oldest, newest, held)| PublisherHistory {
            publisher: p.to_string(),
            oldest: *oldest,
            newest: *newest,
            held: *held,
        })
        .collect();
    Some(HistoryShow {
        history: info.capacity,
        events: info.events,
        bytes: info.bytes,
        publishers,
    })
}

pub use tagwire_proto::admin::HistoryTotals;
use tagwire_proto::admin::{HistoryShow, PublisherHistory};

/// Router-wide counters of the pull buffers.
pub(crate) fn totals(st: &State) -> HistoryTotals {
    let table = st.node.history();
    let s = table.stats();
    HistoryTotals {
        tags: table.tag_count(),
        bytes: table.total_bytes(),
        recorded: s.recorded,
        evicted: s.evicted,
        not_recorded: s.too_large + s.tags_refused + s.over_budget,
    }
}
