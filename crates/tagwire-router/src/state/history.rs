//! The router's pull buffers (the `history` QoS property), as
//! [`State`](crate::state::State) holds them. Recording, answering and
//! re-sizing are [`crate::history`]'s; the bounds they are configured with
//! are checked in [`crate::config::history`].

use std::collections::HashMap;

use tagwire_core::history::{HistoryLimits, HistoryTable};

use crate::config::RouterConfig;

/// The router's pull buffers and what decides which tags keep one.
#[derive(Debug)]
pub(crate) struct RouterHistory {
    pub table: HistoryTable,
    /// Whether any daemon or tag layer sets `history` above 0.
    pub(crate) enabled: bool,
    /// Each tag's `history`, as last resolved.
    pub(crate) cache: HashMap<Box<str>, usize>,
}

impl RouterHistory {
    pub(crate) fn new(config: &RouterConfig) -> Self {
        let l = &config.limits;
        RouterHistory {
            table: HistoryTable::new(HistoryLimits {
                max_tags: l.max_history_tags,
                max_total_bytes: l.max_history_bytes,
                max_bytes_per_tag: l.max_history_bytes_per_tag,
                max_publishers_per_tag: l.max_history_publishers_per_tag,
                max_reply_events: l.history_reply_events,
                max_reply_bytes: l.history_reply_bytes,
            }),
            enabled: false,
            cache: HashMap::new(),
        }
    }
}
