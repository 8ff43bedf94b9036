//! What membership learned, as [`State`](super::State) holds it:
//! each daemon foca knows ([`Member`]) and the members up ([`Members`]).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// A daemon as foca knows it: its node id, where its gossip and its links
/// listen, and when it started (a restarted daemon on the same gossip
/// address wins the address over its predecessor).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// Node id (0 in an announcement to an address whose daemon is not
    /// known yet).
    pub node: u64,
    /// UDP gossip address.
    pub gossip: SocketAddr,
    /// TCP address its links are dialed at.
    pub link: SocketAddr,
    /// Start time (ns since the epoch), then bumped on each renewal.
    pub started: u64,
}

impl foca::Identity for Member {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Member {
            started: self.started.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.gossip
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        (self.started, self.node) > (adversary.started, adversary.node)
    }
}

/// What membership learned, kept in the router's state for the listing.
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// Members up, by node id.
    pub up: std::collections::HashMap<u64, Member>,
    /// Gossip datagrams foca refused, and beacons that did not parse.
    pub bad_datagrams: u64,
    /// Whether membership runs (false: no gossip socket).
    pub running: bool,
    /// Times the member table passed twice `max_nodes` and was started over.
    pub resets: u64,
}
