//! What each acknowledged subscription was delivered, across reconnects,
//! so that an event the daemon sends again after a reconnect (its
//! acknowledgement was lost with the connection) is dropped, not delivered
//! twice (docs/reliability.md, "Between a daemon and its subscribers").
//!
//! Bounded: per subscription at most [`DEDUPE_PUBLISHERS`] publishers
//! (the least recently heard half forgotten at the bound), and a publisher
//! not heard from for [`DEDUPE_IDLE`] to twice that is forgotten — counted
//! from the session's latest reconnect, so what the daemon sends again
//! right after a reconnect still finds its publisher. Subscriptions that
//! are gone are forgotten at the same time.

use std::collections::HashMap;

use tagwire_core::reliable::{Dedupe, Seen};
use tagwire_proto::EventRef;

/// Most publishers remembered per acknowledged subscription (about 160
/// bytes each: ~650 KB at the bound).
pub(crate) const DEDUPE_PUBLISHERS: usize = 4096;

/// A publisher that sent a subscription nothing for this long (ns) is
/// forgotten by its dedupe, at the latest after twice this. The daemon
/// sends again what was not acknowledged at once after a reconnect, so
/// only publishers heard from since the reconnect can send a copy.
pub(crate) const DEDUPE_IDLE_NS: u64 = 30_000_000_000;

/// Per acknowledged subscription, its [`Dedupe`] and the clock mark of
/// the last prune.
#[derive(Debug)]
pub(crate) struct Delivered {
    subs: HashMap<u32, (Dedupe, u64), foldhash::fast::RandomState>,
    /// When the next prune is due (ns on the session's clock).
    next_prune: u64,
}

impl Delivered {
    /// Nothing remembered yet; `now`: the session's clock (ns).
    pub(crate) fn new(now: u64) -> Self {
        Delivered {
            subs: HashMap::default(),
            next_prune: now.saturating_add(DEDUPE_IDLE_NS),
        }
    }

    /// Whether event `ev`, delivered to acknowledged subscription `sub` at
    /// `now`, is new to it: keyed by publisher, its sequence number and
    /// source time (see [`Dedupe`]). `live`: whether a subscription still
    /// exists (for the prune, at most once per [`DEDUPE_IDLE_NS`]).
    pub(crate) fn is_new(
        &mut self,
        sub: u32,
        ev: &EventRef<'_>,
        now: u64,
        live: impl Fn(u32) -> bool,
    ) -> bool {
        if now >= self.next_prune {
            self.prune(now, live);
        }
        let key = tagwire_core::proxy::publisher_key(ev.publisher);
        let (d, _) = self
            .subs
            .entry(sub)
            .or_insert_with(|| (Dedupe::new(DEDUPE_PUBLISHERS), 0));
        d.check(key, 0, ev.seq, ev.source_time_ns) == Seen::New
    }

    /// The session reconnected at `now`: the next prune forgets only
    /// publishers not heard from since (the copies come first).
    pub(crate) fn reconnected(&mut self, now: u64) {
        for (d, mark) in self.subs.values_mut() {
            *mark = d.clock();
        }
        self.next_prune = now.saturating_add(DEDUPE_IDLE_NS);
    }

    /// Forgets the subscriptions that are gone and the publishers not
    /// heard from since the last prune (or reconnect).
    fn prune(&mut self, now: u64, live: impl Fn(u32) -> bool) {
        self.subs.retain(|sub, _| live(*sub));
        for (d, mark) in self.subs.values_mut() {
            d.forget_unused_since(*mark);
            *mark = d.clock();
        }
        self.next_prune = now.saturating_add(DEDUPE_IDLE_NS);
    }

    /// Publishers remembered, over every subscription.
    #[cfg(test)]
    pub(crate) fn publishers(&self) -> usize {
        self.subs.values().map(|(d, _)| d.len()).sum()
    }

    /// Bytes remembered, over every subscription (an estimate).
    #[cfg(test)]
    pub(crate) fn memory(&self) -> usize {
        self.subs.values().map(|(d, _)| d.memory()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(publisher: &str, seq: u64) -> bytes::Bytes {
        let mut e = tagwire_proto::Event::new("/t", "x");
        e.header.publisher = publisher.into();
        e.header.seq = seq;
        e.header.source_time_ns = seq;
        let mut b = bytes::BytesMut::new();
        e.encode(&mut b).expect("encode");
        b.freeze()
    }

    impl Delivered {
        /// `is_new` of event `seq` of `publisher` (source time `seq`).
        fn is_new_of(
            &mut self,
            sub: u32,
            publisher: &str,
            seq: u64,
            now: u64,
            live: impl Fn(u32) -> bool,
        ) -> bool {
            let raw = encoded(publisher, seq);
            let ev = EventRef::parse(&raw).expect("parse");
            self.is_new(sub, &ev, now, live)
        }
    }

    #[test]
    fn dedupe_memory_is_bounded_and_idle_publishers_are_forgotten() {
        let s = DEDUPE_IDLE_NS;
        let mut d = Delivered::new(0);
        let all = |_| true;
        // 10,000 publishers, one event each: at most DEDUPE_PUBLISHERS kept.
        for p in 0..10_000 {
            assert!(d.is_new_of(1, &format!("/p{p}"), 1, 1, all));
        }
        assert!(d.publishers() <= DEDUPE_PUBLISHERS, "{}", d.publishers());
        assert!(d.memory() < 2 * 1024 * 1024, "{} bytes", d.memory());
        // One publisher goes on; the others go quiet for twice the age.
        assert!(d.is_new_of(1, "/p9999", 2, s / 2, all));
        assert!(d.is_new_of(1, "/p9999", 3, s + 1, all));
        assert!(d.is_new_of(1, "/p9999", 4, 2 * s + 2, all));
        assert_eq!(d.publishers(), 1, "only the publisher heard from is kept");
        // Its copies are still recognised.
        assert!(!d.is_new_of(1, "/p9999", 3, 2 * s + 3, all));
        // A subscription that is gone is forgotten at the next prune.
        assert!(d.is_new_of(2, "/q", 1, 2 * s + 4, all));
        assert!(d.is_new_of(1, "/p9999", 5, 4 * s, |sub| sub == 1));
        assert_eq!(d.publishers(), 1);
    }

    #[test]
    fn a_publisher_quiet_while_the_session_was_away_is_kept_for_the_copies_after_the_reconnect() {
        let s = DEDUPE_IDLE_NS;
        let mut d = Delivered::new(0);
        let all = |_| true;
        assert!(d.is_new_of(1, "/p", 1, 1, all));
        assert!(d.is_new_of(1, "/p", 2, 2, all));
        // Away for five times the age; back at `back`.
        let back = 5 * s;
        d.reconnected(back);
        // The daemon sends 2 again (its acknowledgement was lost): a copy.
        assert!(!d.is_new_of(1, "/p", 2, back + 1, all));
        assert!(d.is_new_of(1, "/p", 3, back + 2, all));
    }
}
