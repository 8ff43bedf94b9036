//! The state of the daemon's bandwidth reservations (not set up, refused,
//! or live), as [`State`](super::State) holds it. The `tc` work over
//! it is `bandwidth`'s.

use tagwire_core::bandwidth::Reservations;

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
