//! What decides which tags keep pull buffers (the `history` QoS
//! property); the buffers are the node engine's. Recording, answering and
//! re-sizing are [`crate::history`]'s; the bounds they are configured with
//! are checked in [`crate::config::history`].

use tagwire_core::history::HistoryLimits;

use crate::config::RouterConfig;

/// The pull buffers' bounds, from `[limits]` (the node engine holds the
/// buffers).
pub(crate) fn limits(config: &RouterConfig) -> HistoryLimits {
    let l = &config.limits;
    HistoryLimits {
        max_tags: l.max_history_tags,
        max_total_bytes: l.max_history_bytes,
        max_bytes_per_tag: l.max_history_bytes_per_tag,
        max_publishers_per_tag: l.max_history_publishers_per_tag,
        max_reply_events: l.history_reply_events,
        max_reply_bytes: l.history_reply_bytes,
    }
}
