//! Reliable events held for daemons that are away (issue 25, a partition
//! healed): when a daemon this one reached becomes unreachable, its
//! interest is kept ([`KeptInterest`]), and every reliable event published
//! *here* that it wanted is held for it, bounded, until it is reachable
//! again; then the node hands them back in order
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
}

impl Default for AwayLimits {
    fn default() -> Self {
        AwayLimits {
            max_daemons: 16,
            max_events: 65_536,
            max_bytes: 16 << 20,
            max_age_ns: 60_000_000_000,
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
    /// Reachable again (its held events go out; nothing new is held).
    back: bool,
    events: VecDeque<HeldEvent>,
    bytes: usize,
}

/// The away daemons and their held events.
#[derive(Debug)]
pub(crate) struct AwayHold {
    limits: AwayLimits,
    daemons: BTreeMap<NodeId, Away>,
    /// How many daemons are away and not back: the event path's one test.
    not_back: usize,
    counters: AwayCounters,
}

impl AwayHold {
    pub(crate) fn new(limits: AwayLimits) -> Self {
        AwayHold {
            limits,
            daemons: BTreeMap::new(),
            not_back: 0,
            counters: AwayCounters::default(),
        }
    }

    pub(crate) fn counters(&self) -> AwayCounters {
        self.counters
    }

    /// Whether some daemon is away (events may be held for it).
    pub(crate) fn any_away(&self) -> bool {
        self.not_back > 0
    }

    /// Away daemons (not back) and the events and bytes held now.
    pub(crate) fn held_now(&self) -> (usize, usize, usize) {
        let events = self.daemons.values().map(|a| a.events.len()).sum();
        let bytes = self.daemons.values().map(|a| a.bytes).sum();
        (self.not_back, events, bytes)
    }

    fn recount(&mut self) {
        self.not_back = self.daemons.values().filter(|a| !a.back).count();
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
                    back: false,
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
        let mut released = Vec::new();
        let back: Vec<NodeId> = self
            .daemons
            .keys()
            .copied()
            .filter(|id| after.contains(id))
            .collect();
        for id in back {
            if let Some(events) = self.release(id) {
                released.push((id, events));
            }
        }
        for (id, a) in &mut self.daemons {
            a.back = after.contains(id);
        }
        self.recount();
        released
    }

    /// Daemon `id`'s held events, now that it is reachable, oldest first
    /// (`None`: nothing held); an entry with nothing held is forgotten.
    fn release(&mut self, id: NodeId) -> Option<Vec<HeldEvent>> {
        let a = self.daemons.get_mut(&id)?;
        a.back = true;
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
    /// whose kept interest wants it. Returns for how many.
    pub(crate) fn hold(
        &mut self,
        ev: &EventRef<'_>,
        event: &Bytes,
        label: &Arc<str>,
        now: u64,
    ) -> usize {
        let publisher = crate::proxy::publisher_key(ev.publisher);
        let limits = self.limits;
        let mut n = 0;
        for a in self.daemons.values_mut() {
            if a.back || !a.interest.matches(ev) {
                continue;
            }
            a.events.push_back(HeldEvent {
                event: event.clone(),
                label: label.clone(),
                publisher,
                seq: ev.seq,
                at: now,
            });
            a.bytes += event.len();
            self.counters.held += 1;
            n += 1;
            Self::bound(a, &limits, &mut self.counters);
        }
        n
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
                    back,
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
        // From the back: after the last event of the same publisher with a
        // smaller number (or at the front if there is none).
        let mut at = 0;
        for (i, h) in a.events.iter().enumerate().rev() {
            if h.publisher == publisher {
                if h.seq == ev.seq {
                    return true;
                }
                if h.seq < ev.seq {
                    at = i + 1;
                    break;
                }
            }
        }
        a.events.insert(
            at,
            HeldEvent {
                event: event.clone(),
                label: label.clone(),
                publisher,
                seq: ev.seq,
                at: now,
            },
        );
        a.bytes += event.len();
        self.counters.held_again += 1;
        Self::bound(a, &limits, &mut self.counters);
        self.recount();
        true
    }

    /// Time passed: events held longer than the age bound are dropped
    /// (counted), and daemons away longer that hold nothing are forgotten. Returns the daemons
    /// that are back (reachable) and still hold events (handed back by
    /// [`hold_again`](Self::hold_again)), with those events, to send again.
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
            a.back = reachable.contains(id);
            if !a.back && a.events.is_empty() && now.saturating_sub(a.since) > max_age {
                gone.push(*id);
            }
        }
        for id in gone {
            if let Some(a) = self.daemons.remove(&id) {
                self.counters.dropped_gone += a.events.len() as u64;
            }
        }
        let back: Vec<NodeId> = self
            .daemons
            .iter()
            .filter(|(_, a)| a.back)
            .map(|(id, _)| *id)
            .collect();
        let mut released = Vec::new();
        for id in back {
            if let Some(events) = self.release(id) {
                released.push((id, events));
            }
        }
        self.recount();
        released
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
            let limits = AwayLimits { max_events, max_bytes, ..AwayLimits::default() };
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
                prop_assert_eq!(hold.hold(&ev, &b, &label, 1), 1);
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
            let mut hold = AwayHold::new(AwayLimits::default());
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
