//! Acknowledged subscriptions parked across a reconnect
//! ([`ParkedDeliveries`]), as [`State`](super::State) holds them: each
//! parked subscription's events, its expiry and the counters. Parking,
//! resuming and expiring them is `acked_delivery`'s.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use tagwire_proto::SESSION_ID_LEN;

use crate::channel::Channel;

/// What identifies a subscription across its session's reconnects.
pub(crate) type Key = ([u8; SESSION_ID_LEN], Arc<str>, u32, String);

/// One parked subscription.
#[derive(Debug)]
pub(crate) struct Parked {
    /// What it had not had acknowledged and what was queued for it when
    /// its connection dropped, in order.
    pub(crate) events: Vec<Bytes>,
    /// Bytes charged to the memory budget.
    pub(crate) bytes: usize,
    pub(crate) until_ns: u64,
    /// The subscription, left in the routes (router-wide id `global`):
    /// its queue holds what is published while it is away.
    pub(crate) channel: Arc<Channel>,
    pub(crate) global: u64,
    /// Its queue's `dropped` when it was parked.
    pub(crate) dropped_before: u64,
}

impl Parked {
    /// Events its queue's discard policy dropped while it was parked.
    pub(crate) fn held_dropped(&self) -> u64 {
        self.channel
            .queue
            .borrow()
            .dropped()
            .saturating_sub(self.dropped_before)
    }
}

/// Counters of acknowledged delivery's parking (`tagwire list --json`,
/// `parked`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ParkStats {
    /// Subscriptions parked when their connection dropped.
    pub parked: u64,
    /// Events parked.
    pub parked_events: u64,
    /// Subscriptions given their parked events after a reconnect.
    pub resumed: u64,
    /// Events sent again after a reconnect.
    pub resent: u64,
    /// Parked events dropped: no room in the memory budget, the bound on
    /// parked subscriptions, or their time ran out.
    pub dropped: u64,
    /// Events published while their subscriber was away, held for it.
    pub held: u64,
    /// Of those, what its queue's discard policy dropped at its bound
    /// (subscriptions no longer parked).
    pub held_dropped: u64,
}

/// The parked subscriptions.
#[derive(Debug, Default)]
pub(crate) struct ParkedDeliveries {
    pub(crate) by_key: HashMap<Key, Parked>,
    pub(crate) by_expiry: BTreeSet<(u64, Key)>,
    pub stats: ParkStats,
}

impl ParkedDeliveries {
    pub(crate) fn remove(&mut self, key: &Key) -> Option<Parked> {
        let p = self.by_key.remove(key)?;
        self.by_expiry.remove(&(p.until_ns, key.clone()));
        Some(p)
    }

    /// Forgets what expired at `now` and, at `max`, the closest to expiry,
    /// giving its bytes back to `budget`; returns the subscriptions to
    /// take out of the routes.
    pub(crate) fn expire(
        &mut self,
        now: u64,
        max: usize,
        budget: &crate::budget::MemoryBudget,
    ) -> Vec<Parked> {
        let mut gone = Vec::new();
        while let Some((until, key)) = self.by_expiry.first().cloned() {
            if until > now && self.by_key.len() < max {
                break;
            }
            if let Some(p) = self.remove(&key) {
                budget.release(p.bytes);
                let held = p.channel.queue.borrow().len();
                self.stats.dropped += (p.events.len() + held) as u64;
                self.stats.held_dropped += p.held_dropped();
                tracing::warn!(
                    "{} unacknowledged events parked (and {held} published since) for subscriber {} (subscription {}) were dropped: it did not come back within limits.endpoint_reservation_secs (or limits.max_reservations subscriptions were parked)",
                    p.events.len(),
                    key.1,
                    key.2
                );
                gone.push(p);
            }
        }
        gone
    }

    /// Counters and what is parked now, for `tagwire list`.
    pub(crate) fn info(&self) -> tagwire_proto::admin::ParkedInfo {
        let s = &self.stats;
        let mut info = tagwire_proto::admin::ParkedInfo {
            subscriptions: self.by_key.len() as u64,
            parked: s.parked,
            resumed: s.resumed,
            resent: s.resent,
            dropped: s.dropped,
            held_total: s.held,
            held_dropped: s.held_dropped,
            ..Default::default()
        };
        for p in self.by_key.values() {
            let q = p.channel.queue.borrow();
            info.events += (p.events.len() + q.len()) as u64;
            info.bytes += (p.bytes + q.bytes()) as u64;
            info.held_dropped += q.dropped().saturating_sub(p.dropped_before);
        }
        info
    }
}
