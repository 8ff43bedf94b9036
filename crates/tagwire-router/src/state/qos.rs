//! The QoS layers the router keeps above its channels' own: the tag layers
//! ([`TagQos`]) and the publishers seen per `max_suppliers` scope
//! ([`Suppliers`]), as [`State`](super::State) holds them (the daemon
//! layer is parsed in [`crate::config::qos`]), and the DSCP a resolved QoS
//! claims ([`explicit_dscp`]). Resolving and putting QoS in force is
//! `qos`'s.

use std::sync::Arc;

use tagwire_core::qos::{Dscp, Property, QosLayer, Resolved, Source};

/// Most tag layers a router keeps (`tagwire admin qos` on patterns).
pub const MAX_TAG_LAYERS: usize = 1024;

/// QoS set on a tag pattern (core's: the node engine decides with it).
pub(crate) use tagwire_core::qos::TagQos;

/// Suppliers seen per `max_suppliers` scope: the tag pattern of the layer
/// that sets it (`""`: the daemon's), and the publisher endpoints that have
/// published on a tag it matches. Bounded by the endpoint table; an endpoint
/// leaves every scope when it goes.
#[derive(Debug, Default)]
pub(crate) struct Suppliers {
    pub(crate) scopes: std::collections::HashMap<String, std::collections::HashSet<Arc<str>>>,
    /// Whether any daemon or tag layer sets `max_suppliers` (so a publish
    /// without one costs a flag test, not a pass over the tag layers).
    pub(crate) limited: bool,
}

impl Suppliers {
    /// Recomputes [`limited`](Self::limited) after a layer changed.
    pub(crate) fn refresh(&mut self, daemon: &QosLayer, tags: &[TagQos]) {
        self.limited = daemon.is_set(Property::MaxSuppliers)
            || tags.iter().any(|t| t.layer.is_set(Property::MaxSuppliers));
    }

    /// Forgets a publisher endpoint that went away.
    pub(crate) fn forget(&mut self, publisher: &str) {
        for set in self.scopes.values_mut() {
            set.remove(publisher);
        }
    }
}

/// The DSCP a resolved QoS puts on its channel's connection: an explicit
/// `dscp` above the built-in default that is not `auto` (`None`: the
/// connection keeps its marking, its band's unless a channel set one).
pub(crate) fn explicit_dscp(resolved: &Resolved) -> Option<u8> {
    (resolved.source(Property::Dscp) != Source::Default)
        .then(|| resolved.values().dscp)
        .filter(|d| *d != Dscp::Auto)
        .map(|d| d.code(resolved.values().priority))
}
