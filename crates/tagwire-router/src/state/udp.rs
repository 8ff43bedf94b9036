//! A UDP session's counters ([`UdpStats`]), as the connection table
//! ([`ConnEntry`](super::ConnEntry)) and a connection's transport hold
//! them. The UDP listener and dialer that count are `udp`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tagwire_proto::admin::{NetLossInfo, UdpInfo};
use tagwire_proto::datagram::Report;

/// A UDP session's counters, shared with the connection table so that
/// `tagwire list` shows them (`UdpInfo`).
#[derive(Debug, Default)]
pub struct UdpStats {
    pub(crate) session: AtomicU64,
    pub(crate) received: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) reordered: AtomicU64,
    pub(crate) duplicate: AtomicU64,
    pub(crate) bad: AtomicU64,
    pub(crate) overrun: AtomicU64,
    pub(crate) sent: AtomicU64,
    pub(crate) too_large: AtomicU64,
    pub(crate) send_dropped: AtomicU64,
    pub(crate) peer: [AtomicU64; 4],
    pub(crate) unattributed: AtomicU64,
    pub(crate) acknowledged: std::sync::atomic::AtomicBool,
    pub(crate) resent: AtomicU64,
    /// Per subscription id: its events the client reported lost or late
    /// (at most [`MAX_CHANNELS_COUNTED`] subscriptions).
    pub(crate) channels: std::sync::Mutex<HashMap<u32, NetLossInfo>>,
}

/// Subscriptions of one UDP session whose loss is counted; past it, the
/// loss of further ones counts in `unattributed`.
const MAX_CHANNELS_COUNTED: usize = 4096;

impl UdpStats {
    /// The counters as `tagwire list` shows them.
    pub fn info(&self) -> UdpInfo {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UdpInfo {
            session: g(&self.session),
            received: g(&self.received),
            lost: g(&self.lost),
            reordered: g(&self.reordered),
            duplicate: g(&self.duplicate),
            bad: g(&self.bad),
            overrun: g(&self.overrun),
            sent: g(&self.sent),
            too_large: g(&self.too_large),
            send_dropped: g(&self.send_dropped),
            peer_received: g(&self.peer[0]),
            peer_lost: g(&self.peer[1]),
            peer_reordered: g(&self.peer[2]),
            peer_dropped: g(&self.peer[3]),
            unattributed: g(&self.unattributed),
            acknowledged: self.acknowledged.load(Ordering::Relaxed),
            resent: g(&self.resent),
        }
    }

    /// Subscription `sub`'s events lost and reordered on the way to the
    /// client (zero until the client reports any).
    pub fn channel_loss(&self, sub: u32) -> NetLossInfo {
        let m = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&sub).copied().unwrap_or_default()
    }

    /// Counts `n` events of `sub` lost (`late` false) or late.
    pub(crate) fn count_channel(&self, sub: u32, n: u64, late: bool) {
        let mut m = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_CHANNELS_COUNTED && !m.contains_key(&sub) {
            drop(m);
            self.unattributed.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let c = m.entry(sub).or_default();
        if late {
            c.reordered += n;
        } else {
            c.lost += n;
        }
    }

    /// Adds one to counter `a`.
    pub(crate) fn bump(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_window(&self, r: &Report) {
        self.received.store(r.received, Ordering::Relaxed);
        self.lost.store(r.lost, Ordering::Relaxed);
        self.reordered.store(r.reordered, Ordering::Relaxed);
        self.duplicate.store(r.duplicate, Ordering::Relaxed);
        self.bad.store(r.bad, Ordering::Relaxed);
    }

    pub(crate) fn set_peer(&self, r: &Report) {
        self.peer[0].store(r.received, Ordering::Relaxed);
        self.peer[1].store(r.lost, Ordering::Relaxed);
        self.peer[2].store(r.reordered, Ordering::Relaxed);
        self.peer[3].store(r.duplicate + r.bad, Ordering::Relaxed);
    }
}

/// A handle on a session's counters that compares by identity (so that
/// `auth::Transport` stays `Eq`).
#[derive(Debug, Clone)]
pub struct StatsRef(pub Arc<UdpStats>);

impl PartialEq for StatsRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for StatsRef {}
