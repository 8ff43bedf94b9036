//! What run-time placement keeps: what each channel saw of its stream
//! ([`StreamSeen`], the problem's period and size) and the placements chosen
//! ([`Placement`], held in [`State`](super::State)). Choosing them
//! is `placement`'s.

use std::collections::HashMap;

use serde::Serialize;

use crate::channel::event::EventMeta;

/// What a channel saw of its stream (for the problem's period and size).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StreamSeen {
    /// The daemon the last event came from (0: this one).
    pub origin: u64,
    seq: u64,
    time: u64,
    /// Estimated publisher period, ns (0: not yet known).
    pub period_ns: u64,
    /// Mean event size, bytes.
    pub bytes: u64,
}

impl StreamSeen {
    /// Takes one event of the stream.
    pub(crate) fn see(&mut self, meta: &EventMeta, len: usize) {
        if meta.origin == self.origin && meta.seq > self.seq && meta.source_time > self.time {
            let gap = (meta.source_time - self.time) / (meta.seq - self.seq);
            self.period_ns = match self.period_ns {
                0 => gap,
                p => (p * 7 + gap) / 8,
            };
        }
        self.bytes = match self.bytes {
            0 => len as u64,
            b => (b * 7 + len as u64) / 8,
        };
        (self.origin, self.seq, self.time) = (meta.origin, meta.seq, meta.source_time);
    }
}

/// One subscription's placement, as `tagwire admin show` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placed {
    /// The daemon the proxy runs on.
    pub node: String,
    /// The optimiser's objective value (bytes/s over all links), if it ran.
    pub objective: Option<f64>,
    /// Why there.
    pub reason: String,
}

/// The placements of this daemon's `proxy=auto` subscriptions.
#[derive(Debug, Default)]
pub(crate) struct Placement {
    pub(crate) chosen: HashMap<u64, Placed>,
    pub(crate) next_run: u64,
    /// The `proxy=auto` channels, as of channel-table generation `auto_of`.
    pub(crate) auto: Vec<u64>,
    pub(crate) auto_of: Option<u64>,
    /// Solves run, and those that found no feasible placement.
    pub solves: u64,
    pub infeasible: u64,
}

impl Placement {
    /// The daemon channel `global`'s proxy was placed on.
    pub(crate) fn node_of(&self, global: u64) -> Option<&str> {
        self.chosen.get(&global).map(|p| p.node.as_str())
    }

    /// Channel `global`'s placement and its reason.
    pub(crate) fn get(&self, global: u64) -> Option<&Placed> {
        self.chosen.get(&global)
    }
}
