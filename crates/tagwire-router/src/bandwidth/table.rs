//! What the daemon keeps of bandwidth reservations: the `[bandwidth]`
//! section and the reservations' state (not set up, refused, or live).
//! The `tc` work over them is [`crate::bandwidth`]'s.

use serde::{Deserialize, Serialize};
use tagwire_core::bandwidth::Reservations;

/// The `[bandwidth]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BandwidthConfig {
    /// The egress interface reservations apply to (e.g. `eth0`); `None`:
    /// reservations are refused.
    pub interface: Option<String>,
    /// Its capacity, e.g. `100mbit`: the sum of reservations may not
    /// exceed it, and the htb root is set to it.
    pub link_rate: String,
    /// Most reservations at once.
    pub max_reservations: usize,
}

impl Default for BandwidthConfig {
    fn default() -> Self {
        BandwidthConfig {
            interface: None,
            link_rate: String::new(),
            max_reservations: 16,
        }
    }
}

/// The daemon's reservations: not set up yet, refused (and why), or live.
#[derive(Debug, Default)]
pub(crate) enum Bandwidth {
    /// Nothing asked yet.
    #[default]
    Idle,
    /// Reservations cannot be made here; the reason is the refusal.
    Unavailable(String),
    /// The htb tree is in place.
    Live {
        iface: String,
        link_bps: u64,
        res: Reservations,
        /// holder (channel) → its connection, to release on close.
        conns: Vec<(u64, u64)>,
    },
}
