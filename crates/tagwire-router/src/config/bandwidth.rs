//! The `[bandwidth]` section: where reservations apply and how much the
//! link carries.

use serde::{Deserialize, Serialize};

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
