//! Reliable events held for daemons that are away (issue 25, a partition
//! healed): when a daemon this one reached becomes unreachable, its
//! interest is kept ([`KeptInterest`]), and every reliable event published
//! *here* that it wanted is held for it, bounded, until it has been
//! reachable again for `settle_ns` (held for meanwhile too, and left out of
//! this daemon's own routes while anything is held for it); then the node
//! hands them back in order
//! ([`Output::Release`](super::Output::Release)) for the router to send
//! toward it as `ReliableTo` frames, before anything newer.
//!
//! Which daemons: those that were reachable and became unreachable with an
//! interest; not one superseded by a daemon of the same name under another
//! id (a restart: it cannot resume a reliable stream — `durable` covers
//! that). Bounds ([`AwayLimits`]): daemons kept, events and bytes per
//! daemon, and age; at each bound the oldest goes and is counted
//! ([`AwayCounters`]). Time is an argument.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tagwire_proto::EventRef;

use crate::federation::{KeptInterest, NodeId, Topology};

/// The bounds of the hold for away daemons (`[federation]
/// reliable_hold_*` in the daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwayLimits {
    /// Most away daemons kept at once; at the bound the one away longest
    /// is forgotten with what it held (counted `dropped_gone`).
    pub max_daemons: usize,
    /// Most events held per away daemon; at the bound the oldest is
    /// dropped (counted `dropped_full`). 0 turns the hold off.
    pub max_events: usize,
    /// Most bytes held per away daemon (the events' encoded length); at
    /// the bound the oldest are dropped (counted `dropped_full`).
    pub max_bytes: usize,
    /// How long an event is held, ns: older ones are dropped (counted
    /// `dropped_age`); a daemon away longer that holds nothing any more is
    /// forgotten (its interest no longer kept).
    pub max_age_ns: u64,
    /// How long a daemon must stay reachable again before what is held for
    /// it is sent, ns (the adverts of a heal take a moment to settle, and a
    /// route that moves while the held events are on their way can make
    /// them arrive behind newer ones). Meanwhile nothing published here
    /// goes to it live: it is left out of this daemon's own routes and its
    /// events are held, so they go out in order. 0: at once.
    pub settle_ns: u64,
}

impl Default for AwayLimits {
    fn default() -> Self {
        AwayLimits {
            max_daemons: 16,
            max_events: 65_536,
            max_bytes: 16 << 20,
            max_age_ns: 60_000_000_000,
            settle_ns: 1_000_000_000,
        }
    }
}

/// What the hold counted since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AwayCounters {
    /// Events held for an away daemon (once per daemon they were held for).
    pub held: u64,
    /// Held events handed back for sending when their daemon came back.
    pub released: u64,
    /// Dropped at the count or byte bound.
    pub dropped_full: u64,
    /// Dropped at the age bound.
    pub dropped_age: u64,
    /// Dropped with a daemon that was forgotten: superseded by a restart,
    /// or over `max_daemons`.
    pub dropped_gone: u64,
    /// Events handed back by the router (their daemon went away again, or
    /// the way to it does not take them) and held again.
    pub held_again: u64,
}

/// One event held for an away daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEvent {
    /// The encoded event.
    pub event: Bytes,
    /// What the caller routes it with (the router: the band it was
    /// published on), handed back as it was given.
    pub label: Arc<str>,
    /// Its publisher's key and sequence number (order per publisher).
    publisher: u64,
    seq: u64,
    /// When it was held, ns.
    at: u64,
}

/// One away daemon: its interest, since when, what is held for it.
#[derive(Debug)]
struct Away {
    interest: KeptInterest,
    since: u64,
    /// Reachable again since then (settling: still held for, and left out
    /// of this daemon's own routes, until `settle_ns` have passed).
    reachable_since: Option<u64>,
    events: VecDeque<HeldEvent>,
    bytes: usize,
}

/// The away daemons and their held events.
#[derive(Debug)]
pub(crate) struct AwayHold {
    limits: AwayLimits,
    daemons: BTreeMap<NodeId, Away>,
    counters: AwayCounters,
}

impl AwayHold {
    pub(crate) fn new(limits: AwayLimits) -> Self {
        AwayHold {
            limits,
            daemons: BTreeMap::new(),
            counters: AwayCounters::default(),
        }
    }

    pub(crate) fn counters(&self) -> AwayCounters {
        self.counters
    }

    /// Whether some daemon is away or settling (events may be held for it).
    pub(crate) fn any_away(&self) -> bool {
        !self.daemons.is_empty()
    }

    /// The daemons something is held for: left out of this daemon's own
    /// routes until it is sent (so that nothing newer overtakes it).
    pub(crate) fn ids(&self) -> BTreeSet<NodeId> {
        self.daemons
            .iter()
            .filter(|(_, a)| !a.events.is_empty())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Daemons held for, and the events and bytes held now.
    pub(crate) fn held_now(&self) -> (usize, usize, usize) {
        let events = self.daemons.values().map(|a| a.events.len()).sum();
        let bytes = self.daemons.values().map(|a| a.bytes).sum();
        (self.daemons.len(), events, bytes)
    }

    /// Reachability changed from `before` to `after` (both with this
    /// daemon): daemons that became unreachable are kept with their
    /// interest (read from `topo` before their adverts are pruned), those
    /// superseded are forgotten, and those reachable again are returned
    /// with their held events, oldest first.
    pub(crate) fn reach_changed(
        &mut self,
        topo: &Topology,
        before: &BTreeSet<NodeId>,
        after: &BTreeSet<NodeId>,
        now: u64,
    ) -> Vec<(NodeId, Vec<HeldEvent>)> {
        if self.limits.max_events == 0 {
            return Vec::new();
        }
        for id in before.difference(after) {
            if *id == topo.me() || self.daemons.contains_key(id) {
                continue;
            }
            let Some(interest) = topo.kept_interest(*id) else {
                continue;
            };
            if self.daemons.len() >= self.limits.max_daemons {
                // The one away longest goes, with what it held.
                if let Some(oldest) = self
                    .daemons
                    .iter()
                    .min_by_key(|(_, a)| a.since)
                    .map(|(id, _)| *id)
                {
                    if let Some(a) = self.daemons.remove(&oldest) {
                        self.counters.dropped_gone += a.events.len() as u64;
                    }
                }
            }
            self.daemons.insert(
                *id,
                Away {
                    interest,
                    since: now,
                    reachable_since: None,
                    events: VecDeque::new(),
                    bytes: 0,
                },
            );
        }
        // A daemon restarted under a new id (its name reachable again) is
        // not coming back: forget it and what it held.
        let superseded: Vec<NodeId> = self
            .daemons
            .iter()
            .filter(|(id, a)| !after.contains(id) && topo.superseded(**id, a.interest.name()))
            .map(|(id, _)| *id)
            .collect();
        for id in superseded {
            if let Some(a) = self.daemons.remove(&id) {
                self.counters.dropped_gone += a.events.len() as u64;
            }
        }
        for (id, a) in &mut self.daemons {
            a.reachable_since = match (after.contains(id), a.reachable_since) {
                (false, _) => None,
                (true, None) => Some(now),
                (true, since) => since,
            };
        }
        if self.limits.settle_ns == 0 {
            return self.release_settled(now);
        }
        Vec::new()
    }

    /// Releases the daemons reachable again for `settle_ns` or more.
    fn release_settled(&mut self, now: u64) -> Vec<(NodeId, Vec<HeldEvent>)> {
        let settle = self.limits.settle_ns;
        let due: Vec<NodeId> = self
            .daemons
            .iter()
            .filter(|(_, a)| {
                a.reachable_since
                    .is_some_and(|t| now.saturating_sub(t) >= settle)
            })
            .map(|(id, _)| *id)
            .collect();
        let mut released = Vec::new();
        for id in due {
            if let Some(events) = self.release(id) {
                released.push((id, events));
            }
        }
        released
    }

    /// Daemon `id`'s held events, now that it is reachable, oldest first
    /// (`None`: nothing held); an entry with nothing held is forgotten.
    fn release(&mut self, id: NodeId) -> Option<Vec<HeldEvent>> {
        let a = self.daemons.get_mut(&id)?;
        if a.events.is_empty() {
            self.daemons.remove(&id);
            return None;
        }
        let events: Vec<HeldEvent> = a.events.drain(..).collect();
        a.bytes = 0;
        self.daemons.remove(&id);
        self.counters.released += events.len() as u64;
        Some(events)
    }

    /// Holds reliable event `event` (published here) for every away daemon
    /// whose kept interest wants it — and for a daemon reachable again that
    /// still has events held (settling: it gets nothing live meanwhile).
    /// Returns for how many, and whether one of them held nothing before
    /// (the caller leaves it out of its routes from now on).
    pub(crate) fn hold(
        &mut self,
        ev: &EventRef<'_>,
        event: &Bytes,
        label: &Arc<str>,
        now: u64,
    ) -> (usize, bool) {
        let publisher = crate::proxy::publisher_key(ev.publisher);
        let limits = self.limits;
        let mut n = 0;
        let mut first = false;
        for a in self.daemons.values_mut() {
            let holding = a.reachable_since.is_none() || !a.events.is_empty();
            if !holding || !a.interest.matches(ev) {
                continue;
            }
            first |= a.events.is_empty();
            let h = HeldEvent {
                event: event.clone(),
                label: label.clone(),
                publisher,
                seq: ev.seq,
                at: now,
            };
            if !Self::insert_in_order(a, h) {
                // Held already (a copy routed again).
                continue;
            }
            self.counters.held += 1;
            n += 1;
            Self::bound(a, &limits, &mut self.counters);
        }
        (n, first)
    }

    /// Puts `h` among `a`'s events in order per publisher: at the back if
    /// it is newer than every one of its publisher's held (an event just
    /// published) or none is held; else (one that comes back: it was on
    /// its way when the daemon went away) after the last of its
    /// publisher's with a smaller number. A copy already held is not held twice: returns
    /// false. Looks from the back: O(1) for the newest event of a
    /// publisher that published last.
    fn insert_in_order(a: &mut Away, h: HeldEvent) -> bool {
        let mut at = None;
        let mut first_same = None;
        for (i, o) in a.events.iter().enumerate().rev() {
            if o.publisher != h.publisher {
                continue;
            }
            if o.seq == h.seq {
                return false;
            }
            if o.seq < h.seq {
                // Newer than all of its publisher's held: the back.
                at = Some(if first_same.is_none() {
                    a.events.len()
                } else {
                    i + 1
                });
                break;
            }
            first_same = Some(i);
        }
        let at = at.or(first_same).unwrap_or(a.events.len());
        a.bytes += h.event.len();
        a.events.insert(at, h);
        true
    }

    /// Drops the oldest events of `a` past the count and byte bounds.
    fn bound(a: &mut Away, limits: &AwayLimits, counters: &mut AwayCounters) {
        while a.events.len() > limits.max_events
            || (a.bytes > limits.max_bytes && a.events.len() > 1)
        {
            if let Some(old) = a.events.pop_front() {
                a.bytes -= old.event.len();
                counters.dropped_full += 1;
            }
        }
    }

    /// Holds again an event released toward `to` that the router could not
    /// send on (`to` went away again, or the way to it does not take it):
    /// in order among `to`'s held events of the same publisher (by
    /// sequence number; a copy already held is not held twice). `to`
    /// unknown here is kept with `interest` if given; `back`: `to` is
    /// reachable (its events go out again at the next
    /// [`tick`](Self::tick), and nothing new is held for it). Returns
    /// whether it is held.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn hold_again(
        &mut self,
        to: NodeId,
        interest: Option<KeptInterest>,
        back: bool,
        ev: &EventRef<'_>,
        event: &Bytes,
        label: &Arc<str>,
        now: u64,
    ) -> bool {
        if self.limits.max_events == 0 {
            return false;
        }
        if !self.daemons.contains_key(&to) {
            let Some(interest) = interest else {
                return false;
            };
            if self.daemons.len() >= self.limits.max_daemons {
                return false;
            }
            self.daemons.insert(
                to,
                Away {
                    interest,
                    since: now,
                    reachable_since: back.then_some(now),
                    events: VecDeque::new(),
                    bytes: 0,
                },
            );
        }
        let limits = self.limits;
        let Some(a) = self.daemons.get_mut(&to) else {
            return false;
        };
        let publisher = crate::proxy::publisher_key(ev.publisher);
        let h = HeldEvent {
            event: event.clone(),
            label: label.clone(),
            publisher,
            seq: ev.seq,
            at: now,
        };
        if !Self::insert_in_order(a, h) {
            return true;
        }
        self.counters.held_again += 1;
        Self::bound(a, &limits, &mut self.counters);
        true
    }

    /// Time passed: events held longer than the age bound are dropped
    /// (counted), and daemons away longer that hold nothing are forgotten.
    /// Returns the daemons reachable again for `settle_ns` or more, with
    /// their held events, oldest first, to send now.
    pub(crate) fn tick(
        &mut self,
        reachable: &BTreeSet<NodeId>,
        now: u64,
    ) -> Vec<(NodeId, Vec<HeldEvent>)> {
        let max_age = self.limits.max_age_ns;
        let mut gone = Vec::new();
        for (id, a) in &mut self.daemons {
            while a
                .events
                .front()
                .is_some_and(|h| now.saturating_sub(h.at) > max_age)
            {
                if let Some(old) = a.events.pop_front() {
                    a.bytes -= old.event.len();
                    self.counters.dropped_age += 1;
                }
            }
            let here = reachable.contains(id);
            a.reachable_since = match (here, a.reachable_since) {
                (false, _) => None,
                (true, None) => Some(now),
                (true, since) => since,
            };
            if !here && a.events.is_empty() && now.saturating_sub(a.since) > max_age {
                gone.push(*id);
            }
        }
        for id in gone {
            if let Some(a) = self.daemons.remove(&id) {
                self.counters.dropped_gone += a.events.len() as u64;
            }
        }
        self.release_settled(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tagwire_proto::{Event, Interest, LinkFrame};

    /// A topology of daemon 1 that knew daemon 2 (wanting `/t/**`), and the
    /// reachable sets before and after 2 went away.
    fn away_topology() -> (Topology, BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let mut t = Topology::new(1, "a", Default::default());
        t.set_neighbors(vec![2]);
        t.apply(LinkFrame::Advert {
            origin: 2,
            version: 1,
            name: "b".into(),
            neighbors: vec![1],
            interest: vec![Interest::pattern("/t/**")],
        })
        .expect("advert applies");
        let before = t.reachable();
        t.set_neighbors(vec![]);
        let after = t.reachable();
        (t, before, after)
    }

    fn encoded(publisher: u8, seq: u64, size: usize) -> Bytes {
        let mut ev = Event::new("/t/x", Bytes::from(vec![0u8; size]));
        ev.header.seq = seq;
        ev.header.publisher = format!("/p{publisher}");
        let mut buf = bytes::BytesMut::new();
        ev.encode(&mut buf).expect("encodes");
        buf.freeze()
    }

    fn key(b: &Bytes) -> (String, u64) {
        let ev = EventRef::parse(b).expect("parses");
        (ev.publisher.to_owned(), ev.seq)
    }

    proptest! {
        /// Held events come back, when their daemon is reachable again, as a
        /// model says: in the order held, the oldest dropped at the count and
        /// byte bounds (and counted); none twice.
        #[test]
        fn the_hold_releases_what_a_bounded_model_keeps(
            events in prop::collection::vec((0u8..3, 0usize..200), 0..60),
            max_events in 1usize..20,
            max_bytes in 200usize..4000,
        ) {
            let limits = AwayLimits { max_events, max_bytes, settle_ns: 0, ..AwayLimits::default() };
            let mut hold = AwayHold::new(limits);
            let (topo, before, after) = away_topology();
            prop_assert!(hold.reach_changed(&topo, &before, &after, 0).is_empty());
            prop_assert!(hold.any_away());
            let label: Arc<str> = "normal".into();
            let mut model: VecDeque<Bytes> = VecDeque::new();
            let mut seqs = [0u64; 3];
            for (p, size) in events {
                seqs[p as usize] += 1;
                let b = encoded(p, seqs[p as usize], size);
                let ev = EventRef::parse(&b).expect("parses");
                prop_assert_eq!(hold.hold(&ev, &b, &label, 1).0, 1);
                model.push_back(b);
                while model.len() > max_events
                    || (model.iter().map(Bytes::len).sum::<usize>() > max_bytes && model.len() > 1)
                {
                    model.pop_front();
                }
            }
            let released = hold.reach_changed(&topo, &after, &before, 2);
            let got: Vec<Bytes> = released.into_iter().flat_map(|(_, e)| e).map(|h| h.event).collect();
            prop_assert_eq!(&got, &Vec::from(model));
            let c = hold.counters();
            prop_assert_eq!(c.held, c.released + c.dropped_full);
            prop_assert!(!hold.any_away());
            prop_assert_eq!(hold.held_now(), (0, 0, 0));
        }

        /// Events given back in any order (`hold_again`, some twice) are held
        /// in order per publisher, each once.
        #[test]
        fn events_held_again_keep_their_order_per_publisher_and_are_held_once(
            order in prop::collection::vec((0u8..3, 1u64..30), 1..40),
        ) {
            let mut hold = AwayHold::new(AwayLimits { settle_ns: 0, ..AwayLimits::default() });
            let (topo, before, after) = away_topology();
            hold.reach_changed(&topo, &before, &after, 0);
            let label: Arc<str> = "normal".into();
            for (p, seq) in &order {
                let b = encoded(*p, *seq, 1);
                let ev = EventRef::parse(&b).expect("parses");
                prop_assert!(hold.hold_again(2, None, false, &ev, &b, &label, 1));
            }
            let released = hold.reach_changed(&topo, &after, &before, 2);
            let got: Vec<(String, u64)> = released
                .into_iter()
                .flat_map(|(_, e)| e)
                .map(|h| key(&h.event))
                .collect();
            let distinct: BTreeSet<(String, u64)> = got.iter().cloned().collect();
            prop_assert_eq!(distinct.len(), got.len(), "none twice: {:?}", got);
            let wanted: BTreeSet<(String, u64)> =
                order.iter().map(|(p, s)| (format!("/p{p}"), *s)).collect();
            prop_assert_eq!(&distinct, &wanted);
            for p in 0..3 {
                let mine: Vec<u64> = got
                    .iter()
                    .filter(|(q, _)| *q == format!("/p{p}"))
                    .map(|(_, s)| *s)
                    .collect();
                prop_assert!(mine.windows(2).all(|w| w[0] < w[1]), "publisher {p}: {mine:?}");
            }
        }
    }

    #[test]
    fn an_event_that_comes_back_older_than_those_held_goes_before_them_once() {
        let mut hold = AwayHold::new(AwayLimits {
            settle_ns: 0,
            ..AwayLimits::default()
        });
        let (topo, before, after) = away_topology();
        hold.reach_changed(&topo, &before, &after, 0);
        let label: Arc<str> = "normal".into();
        for (p, seq) in [(0, 5), (1, 1), (0, 6), (0, 3), (1, 2), (0, 3)] {
            let b = encoded(p, seq, 1);
            let ev = EventRef::parse(&b).expect("parses");
            hold.hold(&ev, &b, &label, 1);
        }
        let got: Vec<(String, u64)> = hold
            .reach_changed(&topo, &after, &before, 2)
            .into_iter()
            .flat_map(|(_, e)| e)
            .map(|h| key(&h.event))
            .collect();
        let want: Vec<(String, u64)> = [(0, 3), (0, 5), (1, 1), (0, 6), (1, 2)]
            .iter()
            .map(|(p, s)| (format!("/p{p}"), *s))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_daemon_that_wanted_nothing_is_not_kept_and_nothing_is_held_when_off() {
        let mut t = Topology::new(1, "a", Default::default());
        t.set_neighbors(vec![2]);
        t.apply(LinkFrame::Advert {
            origin: 2,
            version: 1,
            name: "b".into(),
            neighbors: vec![1],
            interest: vec![],
        })
        .expect("advert applies");
        let before = t.reachable();
        t.set_neighbors(vec![]);
        let after = t.reachable();
        let mut hold = AwayHold::new(AwayLimits::default());
        hold.reach_changed(&t, &before, &after, 0);
        assert!(!hold.any_away(), "no interest, nothing to hold");
        let (topo, before, after) = away_topology();
        let mut off = AwayHold::new(AwayLimits {
            max_events: 0,
            ..AwayLimits::default()
        });
        off.reach_changed(&topo, &before, &after, 0);
        assert!(!off.any_away(), "reliable_hold_events = 0 turns it off");
    }
}
