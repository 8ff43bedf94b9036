//! The node engine: what one daemon *decides*, sans-I/O (quinn-proto's
//! `Endpoint` above its connections). It takes events, link frames and
//! `now` in, and hands back what to send where, as values:
//!
//! - an event published here or arriving on a link is checked (expiry,
//!   start time, hop limit) and routed: to every local channel its
//!   [`Routes`] give and to the neighbours on its origin's tree whose
//!   subtree wants it ([`Topology`]), except the one it came from. The
//!   event path hands each target to a [`Sink`] (no allocation per event);
//! - adverts (link-state routing), link ups and downs, local interest
//!   changes and pulls over links produce [`Output`]s, drained with
//!   [`Node::poll_output`];
//! - events held until their start time wait in the node; the caller asks
//!   [`Node::poll_timeout`] when to call [`Node::handle_timeout`];
//! - reliable events published here for a daemon that is away (a
//!   partition) wait in the node's hold ([`Node::hold_for_away`]) and come
//!   back as [`Output::Release`] in the step that finds it reachable again
//!   (`away`'s module doc).
//!
//! The router *executes*: sockets, threads, clocks, DSCP, queues. The
//! channel value `C` is whatever the caller delivers to (the router's
//! `Arc<Channel>`; a test's name). Pair tests wire several nodes in memory
//! with simulated time (`tests/node_pairs.rs`).
//!
//! Bounds: the routes' and the topology's own limits, held events
//! ([`NodeLimits::max_deferred_events`], `max_deferred_bytes`), pulls in
//! flight ([`NodeLimits::max_pending_pulls`]) and the tag → origin table
//! ([`NodeLimits::max_origins`]). Every call costs what its tables' lookups
//! cost; none scans a table per event.

mod away;
mod history;
mod pull;

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;
use tagwire_proto::{EventRef, Interest, LinkFrame, Pull, PullOutcome, PullQuery};

use crate::defer::{admit_with, Admit, DeferError, Deferred};
use crate::federation::{
    Applied, CompiledAdvert, FederationError, NodeId, PreparedInterest, Topology, MAX_HOPS,
};
use crate::filter::{FilterLimits, Overrides};
use crate::history::{HistoryLimits, HistoryTable};
use crate::route::Routes;

pub use away::{AwayCounters, AwayLimits, HeldEvent};
pub use pull::{Asker, PullError, AT_PUBLISHER};

/// The bounds of one node's tables.
#[derive(Debug, Clone)]
pub struct NodeLimits {
    /// The routing tables' bounds (daemons, interest entries).
    pub federation: crate::federation::Limits,
    /// Limits for compiling local filters.
    pub filters: FilterLimits,
    /// Most events held until their start time.
    pub max_deferred_events: usize,
    /// Most bytes of events held until their start time.
    pub max_deferred_bytes: usize,
    /// Most pulls in flight through this node.
    pub max_pending_pulls: usize,
    /// How long a pull waits for its answer, ns.
    pub pull_timeout_ns: u64,
    /// Most tags whose origin daemon is remembered (for pulls at the
    /// publisher's daemon); at the bound the table starts over.
    pub max_origins: usize,
    /// The pull buffers' bounds.
    pub history: HistoryLimits,
    /// The hold of reliable events for daemons that are away.
    pub away: AwayLimits,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            federation: Default::default(),
            filters: Default::default(),
            max_deferred_events: 65_536,
            max_deferred_bytes: 64 << 20,
            max_pending_pulls: 1024,
            pull_timeout_ns: 5_000_000_000,
            max_origins: 4096,
            history: HistoryLimits::default(),
            away: AwayLimits::default(),
        }
    }
}

/// Where one routed event goes; the node calls it once per target.
pub trait Sink<C> {
    /// Offer the event to local channel `channel`, with what its mapping
    /// filter sets (empty: the event as it is).
    fn channel(&mut self, channel: &C, overrides: Overrides);
    /// Send the event on the link to neighbour `to`, as a `Forward` with
    /// this `origin` and `hops`.
    fn link(&mut self, to: NodeId, origin: NodeId, hops: u8);
}

/// What the node did with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its deadline had passed: dropped (counted).
    Expired,
    /// Its start time is ahead: the caller holds it with [`Node::hold`]
    /// (which may copy it first) until `until`.
    Hold {
        /// The start time.
        until: u64,
        /// Its deadline.
        deadline: u64,
    },
    /// Routed now.
    Routed {
        /// Its deadline.
        deadline: u64,
        /// Links it was sent on.
        links: usize,
    },
    /// It arrived over [`MAX_HOPS`] links: dropped (counted).
    HopLimited,
}

/// A control decision for the router to carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send `frame` on the link to neighbour `to`. If the link cannot take
    /// it, tell the node with [`Node::unsent`].
    Link {
        /// The neighbour.
        to: NodeId,
        /// What to send.
        frame: LinkFrame,
    },
    /// A local client's pull came back: give it `outcome`.
    PullDone {
        /// The client connection.
        conn: u64,
        /// Its request id.
        req: u32,
        /// The largest reply it takes.
        max_reply: u32,
        /// The reply or the refusal.
        outcome: PullOutcome,
    },
    /// A `Stored` pull (a replay, pull query 6/7) reached this daemon from
    /// a neighbour: the router's durable store answers it, later, with
    /// [`Node::answer`] or straight on the link as a `PullAnswer` with this
    /// asker's id (the store is not the node's to read).
    Stored {
        /// Who asked (a neighbour's request).
        asker: Asker,
        /// The largest reply it takes.
        max_reply: u32,
        /// The pull, its `node` cleared.
        pull: Pull,
    },
    /// Daemons became reachable that were not (a partition healed, a
    /// daemon on the path came back, or one joined): the router tells its
    /// clients (`Healed`), whose durable subscriptions resume from the
    /// stores what was published there meanwhile.
    Healed {
        /// Daemons reachable now, this one included.
        daemons: u32,
    },
    /// Daemon `to`, away (unreachable) for a while, has been reachable again
    /// for [`AwayLimits::settle_ns`]: here are the reliable events published
    /// here that it wanted meanwhile, oldest first (its interest is back in
    /// this daemon's own routes from this step on). The router sends them toward it
    /// (`ReliableTo`, [`Node::next_hop_toward`]) now, before any newer
    /// event, and gives back with [`Node::hold_again`] those it cannot.
    Release {
        /// The daemon they are for.
        to: NodeId,
        /// The events, in the order they were held.
        events: Vec<HeldEvent>,
    },
    /// A neighbour's advert was refused (over a bound, malformed, forged);
    /// the link stays. The router logs it and tells the peer.
    AdvertRefused {
        /// The neighbour that sent it.
        from: NodeId,
        /// Why.
        error: FederationError,
    },
}

/// What the node counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Events dropped because their deadline had passed.
    pub expired: u64,
    /// Events received on a link that nobody here or beyond wanted.
    pub unwanted: u64,
    /// Events dropped at the hop limit.
    pub hop_limited: u64,
    /// Adverts refused.
    pub refused_adverts: u64,
    /// Pulls answered `Timeout` here.
    pub pulls_timed_out: u64,
}

/// One daemon's decisions: its local routes, its view of the network, its
/// live links, held events and pulls in flight.
#[derive(Debug)]
pub struct Node<C> {
    routes: Routes<C>,
    topo: Topology,
    links: BTreeSet<NodeId>,
    deferred: Deferred<Bytes>,
    pulls: pull::PullRelay,
    /// The pull buffers (the `history` QoS property).
    history: HistoryTable,
    counters: Counters,
    out: VecDeque<Output>,
    /// Reliable events held for daemons that are away.
    away: away::AwayHold,
    /// The latest time a call brought (ns), for what a call without one
    /// (a link going up or down) records.
    now: u64,
}

impl<C: Clone> Node<C> {
    /// Daemon `me`, called `name`, alone; its advert versions count up
    /// from `version` (its start time, so that a restart under the same id
    /// supersedes the old adverts).
    pub fn new(me: NodeId, name: &str, limits: NodeLimits, version: u64) -> Self {
        Node {
            routes: Routes::new(limits.filters.clone()),
            topo: Topology::starting_at(me, name, limits.federation.clone(), version),
            links: BTreeSet::new(),
            deferred: Deferred::new(limits.max_deferred_events, limits.max_deferred_bytes),
            pulls: pull::PullRelay::new(&limits),
            history: HistoryTable::new(limits.history),
            counters: Counters::default(),
            out: VecDeque::new(),
            away: away::AwayHold::new(limits.away),
            now: version,
        }
    }

    /// This daemon's id.
    pub fn me(&self) -> NodeId {
        self.topo.me()
    }

    /// The local routes (channels by pattern and filter).
    pub fn routes(&self) -> &Routes<C> {
        &self.routes
    }

    /// The local routes, to add or remove channels and filters.
    pub fn routes_mut(&mut self) -> &mut Routes<C> {
        &mut self.routes
    }

    /// The network as this daemon knows it.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The neighbours with a live link, in id order.
    pub fn links(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.links.iter().copied()
    }

    /// Whether any link is up (an event published with none goes only to
    /// local channels).
    pub fn has_links(&self) -> bool {
        !self.links.is_empty()
    }

    /// What the node counted.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Events held until their start time: how many, and their bytes.
    pub fn held(&self) -> (usize, usize) {
        (self.deferred.len(), self.deferred.bytes())
    }

    /// Pulls in flight through this node.
    pub fn pulls_in_flight(&self) -> usize {
        self.pulls.in_flight()
    }

    /// The next control decision to carry out, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    // ----- links and adverts -----

    /// A link to `peer` came up: it gets every advert known here, and every
    /// other daemon learns of the new neighbour.
    pub fn link_up(&mut self, peer: NodeId) {
        self.links.insert(peer);
        for frame in self.topo.adverts() {
            self.out.push_back(Output::Link { to: peer, frame });
        }
        self.neighbors_changed();
    }

    /// The link to `peer` went down: routes around it, and the pulls that
    /// went out on it are answered `UnknownNode` at once.
    pub fn link_down(&mut self, peer: NodeId) {
        if self.links.remove(&peer) {
            self.neighbors_changed();
            let outcomes = self.pulls.link_closed(peer);
            for (asker, outcome) in outcomes {
                self.answer(asker, outcome);
            }
        }
    }

    /// Drops the adverts of daemons unreachable from here for
    /// [`UNREACHABLE_GRACE_NS`](crate::federation::UNREACHABLE_GRACE_NS)
    /// (see [`Topology::expire_unreachable`]); call it every second or so
    /// with the time. Returns how many were dropped.
    pub fn expire_unreachable(&mut self, now: u64) -> usize {
        self.now = now;
        let n = self
            .topo
            .expire_unreachable(now, crate::federation::UNREACHABLE_GRACE_NS);
        let reachable = self.topo.reachable();
        for (to, events) in self.away.tick(&reachable, now) {
            self.out.push_back(Output::Release { to, events });
        }
        self.topo.set_held_for(self.away.ids());
        n
    }

    /// Membership declared `peer` down: its advert goes now if it is
    /// unreachable (see [`Topology::forget_if_unreachable`]).
    pub fn declared_down(&mut self, peer: NodeId) -> bool {
        self.topo.forget_if_unreachable(peer)
    }

    /// This daemon's local interest changed: advertise it if it differs.
    pub fn set_interest(&mut self, interest: Vec<Interest>) {
        if let Some(advert) = self.topo.set_interest(interest) {
            self.flood(advert, None);
        }
    }

    /// Like [`set_interest`](Self::set_interest) with interest compiled
    /// beforehand ([`Topology::prepare_interest`], e.g. off the lane).
    pub fn set_prepared_interest(&mut self, prepared: PreparedInterest) {
        if let Some(advert) = self.topo.set_prepared_interest(prepared) {
            self.flood(advert, None);
        }
    }

    /// An advert from neighbour `from` whose interest was compiled
    /// beforehand ([`CompiledAdvert`], e.g. off the lane): as
    /// [`on_link_frame`](Self::on_link_frame) with it, without compiling
    /// here. Any other frame is handed to `on_link_frame`.
    pub fn on_compiled_advert(
        &mut self,
        from: NodeId,
        frame: LinkFrame,
        compiled: Result<CompiledAdvert, FederationError>,
        now: u64,
    ) -> Option<LinkFrame> {
        if !matches!(frame, LinkFrame::Advert { .. }) {
            return self.on_link_frame(from, frame, now);
        }
        self.on_advert(from, frame, Some(compiled));
        None
    }

    fn on_advert(
        &mut self,
        from: NodeId,
        frame: LinkFrame,
        compiled: Option<Result<CompiledAdvert, FederationError>>,
    ) {
        let LinkFrame::Advert { origin, .. } = frame else {
            return;
        };
        let before = self.topo.reachable();
        let applied = match compiled {
            Some(c) => self.topo.apply_compiled(frame.clone(), c),
            None => self.topo.apply(frame.clone()),
        };
        match applied {
            Ok(Applied::Newer) => {
                self.flood(frame, Some(from));
                let after = self.topo.reachable();
                self.away_reach_changed(&before, &after);
                self.resend_newly_reachable(&before, origin);
            }
            Ok(Applied::Stale) => {}
            Err(error) => {
                self.counters.refused_adverts += 1;
                self.out.push_back(Output::AdvertRefused { from, error });
            }
        }
    }

    /// A link frame from neighbour `from` that the node handles (adverts
    /// and pulls); any other frame is handed back (`Forward` goes to
    /// [`on_forward`](Self::on_forward) with its parsed event, the peer
    /// handshake and clock probes are the router's).
    pub fn on_link_frame(&mut self, from: NodeId, frame: LinkFrame, now: u64) -> Option<LinkFrame> {
        self.now = self.now.max(now);
        match frame {
            LinkFrame::Advert { .. } => {
                self.on_advert(from, frame, None);
                None
            }
            LinkFrame::PullRequest {
                id,
                target,
                hops,
                max_reply,
                pull,
            } => {
                self.on_pull_request(from, id, target, hops, max_reply, pull, now);
                None
            }
            LinkFrame::PullAnswer { id, outcome } => {
                if let Some((asker, _)) = self.pulls.answered(from, id) {
                    self.answer(asker, outcome);
                }
                None
            }
            other => Some(other),
        }
    }

    /// A link could not take `frame` (its queue is full or it closed): a
    /// pull request that was to go on it is refused to its asker at once.
    pub fn unsent(&mut self, to: NodeId, frame: &LinkFrame) {
        if let LinkFrame::PullRequest { id, .. } = frame {
            // Nothing will answer a request that was not sent.
            if let Some((asker, name)) = self.pulls.answered(to, *id) {
                let outcome = PullError::NotReading(name.into()).outcome();
                self.answer(asker, outcome);
            }
        }
    }

    fn neighbors_changed(&mut self) {
        let ids: Vec<NodeId> = self.links.iter().copied().collect();
        let before = self.topo.reachable();
        if let Some(advert) = self.topo.set_neighbors(ids) {
            self.flood(advert, None);
        }
        // Before the prune: the interest of daemons that went away is read
        // from their adverts.
        let after = self.topo.reachable();
        self.away_reach_changed(&before, &after);
        self.topo.prune();
    }

    /// Keeps the interest of daemons that became unreachable, and hands
    /// back what was held for those reachable again (in the same step that
    /// found them reachable: before any newer event can be routed to them).
    fn away_reach_changed(&mut self, before: &BTreeSet<NodeId>, after: &BTreeSet<NodeId>) {
        if before == after {
            return;
        }
        for (to, events) in self.away.reach_changed(&self.topo, before, after, self.now) {
            self.out.push_back(Output::Release { to, events });
        }
        self.topo.set_held_for(self.away.ids());
    }

    // ----- reliable events held for daemons that are away -----

    /// Whether some daemon is away with an interest (reliable events
    /// published here may be held for it): the event path's one test.
    pub fn has_away(&self) -> bool {
        self.away.any_away()
    }

    /// Holds reliable event `event` (published here, parsed as `ev`) for
    /// every away daemon whose kept interest wants it (pattern and filter),
    /// bounded by [`AwayLimits`]; `label` is handed back with it (the
    /// router's band). Returns for how many daemons it is held.
    pub fn hold_for_away(
        &mut self,
        ev: &EventRef<'_>,
        event: &Bytes,
        label: &std::sync::Arc<str>,
        now: u64,
    ) -> usize {
        self.now = self.now.max(now);
        let (n, first) = self.away.hold(ev, event, label, now);
        if first {
            self.topo.set_held_for(self.away.ids());
        }
        n
    }

    /// Holds again an event released toward `to` that could not be sent
    /// (the way to `to` is gone again, or does not take `ReliableTo`): in
    /// order among `to`'s held events of its publisher. Sent again once `to`
    /// has been reachable for the settle time (checked every second). Returns
    /// whether it is held (not: `to` is unknown or the hold is off or full
    /// of daemons).
    pub fn hold_again(
        &mut self,
        to: NodeId,
        ev: &EventRef<'_>,
        event: &Bytes,
        label: &std::sync::Arc<str>,
        now: u64,
    ) -> bool {
        self.now = self.now.max(now);
        let interest = self.topo.kept_interest(to);
        let back = self.topo.reachable().contains(&to);
        let held = self
            .away
            .hold_again(to, interest, back, ev, event, label, now);
        self.topo.set_held_for(self.away.ids());
        held
    }

    /// The live link to pass an event of `origin` addressed to `to` on
    /// ([`Topology::next_hop_toward`]), if its neighbour is linked now.
    pub fn next_hop_toward(&self, origin: NodeId, to: NodeId) -> Option<NodeId> {
        self.topo
            .next_hop_toward(origin, to)
            .filter(|n| self.links.contains(n))
    }

    /// What the hold for away daemons counted.
    pub fn away_counters(&self) -> AwayCounters {
        self.away.counters()
    }

    /// Away daemons now, and the events and bytes held for them.
    pub fn away_held(&self) -> (usize, usize, usize) {
        self.away.held_now()
    }

    /// Sends every neighbour the adverts of the daemons that became
    /// reachable (but `skip`'s, just flooded). A daemon forgets those it
    /// cannot reach when its own links change (prune) while its neighbours
    /// may keep them; when the partition heals, a daemon that kept an
    /// advert stops its flood as stale, so without this one that forgot it
    /// behind it would never learn it again (its origin's version did not
    /// change). Costs a walk of the graph per newer advert.
    fn resend_newly_reachable(&mut self, before: &BTreeSet<NodeId>, skip: NodeId) {
        let now = self.topo.reachable();
        for id in now.difference(before).copied().filter(|id| *id != skip) {
            if let Some(advert) = self.topo.advert_of(id) {
                self.flood(advert, None);
            }
        }
        if now.difference(before).next().is_some() {
            self.out.push_back(Output::Healed {
                daemons: u32::try_from(now.len()).unwrap_or(u32::MAX),
            });
        }
    }

    fn flood(&mut self, frame: LinkFrame, except: Option<NodeId>) {
        for to in self.links.iter().copied().filter(|l| Some(*l) != except) {
            self.out.push_back(Output::Link {
                to,
                frame: frame.clone(),
            });
        }
    }

    // ----- events -----

    /// Checks an event published by a local client: expired (counted), to
    /// be held until its start time, or to route now. `now` is read only
    /// when the event has a time to check.
    pub fn admit(&mut self, ev: &EventRef<'_>, now: impl FnOnce() -> u64) -> Admit {
        let admit = admit_with(ev, now);
        if admit == Admit::Expired {
            self.counters.expired += 1;
        }
        admit
    }

    /// Checks an event that arrived in a `Forward` (published at `origin`,
    /// `hops` links ago): its deadline if it is to be routed, else why it
    /// is dropped ([`Verdict::HopLimited`] or [`Verdict::Expired`], counted).
    /// Its start time is the publisher's daemon's business: it was held
    /// there.
    pub fn admit_forward(
        &mut self,
        origin: NodeId,
        hops: u8,
        ev: &EventRef<'_>,
        now: impl FnOnce() -> u64,
    ) -> Result<u64, Verdict> {
        if hops >= MAX_HOPS {
            self.counters.hop_limited += 1;
            return Err(Verdict::HopLimited);
        }
        self.pulls.note_origin(ev.tag, origin);
        self.admit_due(ev, now)
    }

    /// Checks an event whose start time came (or that arrived from a
    /// link): its deadline, or [`Verdict::Expired`] if it expired meanwhile
    /// (counted).
    pub fn admit_due(
        &mut self,
        ev: &EventRef<'_>,
        now: impl FnOnce() -> u64,
    ) -> Result<u64, Verdict> {
        let deadline = crate::defer::deadline(ev);
        if deadline != crate::defer::NEVER && deadline <= now() {
            self.counters.expired += 1;
            return Err(Verdict::Expired);
        }
        Ok(deadline)
    }

    /// Routes an admitted event: every local channel, then every neighbour
    /// on `origin`'s tree that wants it but `from` (the neighbour it came
    /// from, which also marks it as arrived over a link: one that nobody
    /// here or beyond wanted is counted). Returns the links it went on.
    pub fn route(
        &mut self,
        ev: &EventRef<'_>,
        origin: NodeId,
        hops: u8,
        from: Option<NodeId>,
        sink: &mut impl Sink<C>,
    ) -> usize {
        self.route_skipping(ev, origin, hops, from, |_| false, sink)
    }

    /// Routes an event to the local channels only (a `ReliableTo` that
    /// reached the daemon it was for: it goes on no link). Returns how many
    /// channels took it.
    pub fn route_local(&mut self, ev: &EventRef<'_>, sink: &mut impl Sink<C>) -> usize {
        let mut local = 0usize;
        self.routes.route(ev, |ch, overrides| {
            local += 1;
            sink.channel(ch, overrides)
        });
        local
    }

    /// Whether [`route`](Self::route) would send `ev` (from `origin`, come
    /// from `from`) over a link to a neighbour for which `member` says yes:
    /// its tree there wants it, after the filters and the scaling proxies
    /// placed on the way. The router sends an event to a multicast group
    /// only then, so a group carries no event that no member's subscribers
    /// want, nor what a `proxy=at_publisher` scaled away
    /// (docs/transports.md "Multicast").
    pub fn routes_to_any(
        &mut self,
        ev: &EventRef<'_>,
        origin: NodeId,
        from: Option<NodeId>,
        member: impl Fn(NodeId) -> bool,
    ) -> bool {
        if self.links.is_empty() {
            return false;
        }
        self.topo
            .next_hops(origin, ev)
            .into_iter()
            .any(|to| Some(to) != from && self.links.contains(&to) && member(to))
    }

    /// [`route`](Self::route), except that no link goes to a neighbour for
    /// which `skip` says yes: the live members of the multicast group the
    /// event goes to, which get it from the group
    /// ([`crate::multicast`], docs/transports.md "Multicast").
    pub fn route_skipping(
        &mut self,
        ev: &EventRef<'_>,
        origin: NodeId,
        hops: u8,
        from: Option<NodeId>,
        skip: impl Fn(NodeId) -> bool,
        sink: &mut impl Sink<C>,
    ) -> usize {
        let mut local = 0usize;
        self.routes.route(ev, |ch, overrides| {
            local += 1;
            sink.channel(ch, overrides)
        });
        let mut n = 0;
        if !self.links.is_empty() {
            for to in self.topo.next_hops(origin, ev) {
                if Some(to) != from && self.links.contains(&to) && !skip(to) {
                    sink.link(to, origin, hops);
                    n += 1;
                }
            }
        }
        if from.is_some() && n == 0 && local == 0 {
            self.counters.unwanted += 1;
        }
        n
    }

    /// [`admit`](Self::admit) then, if it is to go now,
    /// [`route`](Self::route): the whole decision for a local publish.
    pub fn publish(
        &mut self,
        ev: &EventRef<'_>,
        now: impl FnOnce() -> u64,
        sink: &mut impl Sink<C>,
    ) -> Verdict {
        match self.admit(ev, now) {
            Admit::Expired => Verdict::Expired,
            Admit::Hold { until, deadline } => Verdict::Hold { until, deadline },
            Admit::Now { deadline } => {
                let links = self.route(ev, self.me(), 0, None, sink);
                Verdict::Routed { deadline, links }
            }
        }
    }

    /// [`admit_forward`](Self::admit_forward) then [`route`](Self::route):
    /// the whole decision for an event from neighbour `from`.
    pub fn on_forward(
        &mut self,
        from: NodeId,
        origin: NodeId,
        hops: u8,
        ev: &EventRef<'_>,
        now: impl FnOnce() -> u64,
        sink: &mut impl Sink<C>,
    ) -> Verdict {
        match self.admit_forward(origin, hops, ev, now) {
            Err(dropped) => dropped,
            Ok(deadline) => {
                let links = self.route(ev, origin, hops.saturating_add(1), Some(from), sink);
                Verdict::Routed { deadline, links }
            }
        }
    }

    /// Holds `event` (already admitted with [`Verdict::Hold`]) until `until`.
    pub fn hold(&mut self, until: u64, event: Bytes) -> Result<(), DeferError> {
        let len = event.len();
        self.deferred.push(until, event, len)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the
    /// earliest held event's start time or pull deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        match (self.deferred.next_due(), self.pulls.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passed: answers the pulls that waited too long (`Timeout`) and
    /// returns the held events whose start time has come, for the caller
    /// to route with [`release`](Self::release) (so that subscriptions
    /// made meanwhile get them too).
    pub fn handle_timeout(&mut self, now: u64) -> Vec<Bytes> {
        for (asker, outcome) in self.pulls.expire(now) {
            self.counters.pulls_timed_out += 1;
            self.answer(asker, outcome);
        }
        let mut due = Vec::new();
        while let Some(event) = self.deferred.pop_due(now) {
            due.push(event);
        }
        due
    }

    /// [`admit_due`](Self::admit_due) then [`route`](Self::route): a held
    /// event whose start time came, routed as if published now.
    pub fn release(&mut self, ev: &EventRef<'_>, now: u64, sink: &mut impl Sink<C>) -> Verdict {
        match self.admit_due(ev, || now) {
            Err(dropped) => dropped,
            Ok(deadline) => {
                let links = self.route(ev, self.me(), 0, None, sink);
                Verdict::Routed { deadline, links }
            }
        }
    }

    /// Counts an event the caller found expired on its own path (after a
    /// mapping filter shortened its lifetime).
    pub fn count_expired(&mut self, n: u64) {
        self.counters.expired += n;
    }

    // ----- pulls over links -----

    /// Where `pull` is to be answered: `None` here, or another daemon
    /// (`node:NAME`, or the daemon the tag's events came from).
    pub fn pull_target(&self, pull: &Pull) -> Result<Option<NodeId>, PullError> {
        self.pulls.target(&self.topo, pull)
    }

    /// Sends a local client's `pull` toward `target` (from
    /// [`pull_target`](Self::pull_target)); its outcome comes back as
    /// [`Output::PullDone`]. An error is the refusal to give the client now.
    pub fn ask(
        &mut self,
        asker: Asker,
        target: NodeId,
        max_reply: u32,
        pull: Pull,
        now: u64,
    ) -> Result<(), PullError> {
        self.relay(asker, target, 0, max_reply, pull, now)
    }

    /// Gives `outcome` to `asker`: a neighbour's `PullAnswer` or a local
    /// client's [`Output::PullDone`].
    pub fn answer(&mut self, asker: Asker, outcome: PullOutcome) {
        self.out.push_back(match asker {
            Asker::Link { node, id } => Output::Link {
                to: node,
                frame: LinkFrame::PullAnswer { id, outcome },
            },
            Asker::Client {
                conn,
                req,
                max_reply,
            } => Output::PullDone {
                conn,
                req,
                max_reply,
                outcome,
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn on_pull_request(
        &mut self,
        from: NodeId,
        id: u32,
        target: NodeId,
        hops: u8,
        max_reply: u32,
        mut pull: Pull,
        now: u64,
    ) {
        let asker = Asker::Link { node: from, id };
        if target == self.me() {
            pull.node.clear();
            if let PullQuery::Stored { .. } = pull.query {
                self.out.push_back(Output::Stored {
                    asker,
                    max_reply,
                    pull,
                });
                return;
            }
            let outcome = match self.answer_here(&pull, max_reply) {
                Ok(reply) => PullOutcome::Reply(reply),
                Err((code, message)) => PullOutcome::Refused { code, message },
            };
            self.answer(asker, outcome);
            return;
        }
        if let Err(e) = self.relay(asker, target, hops.saturating_add(1), max_reply, pull, now) {
            self.answer(asker, e.outcome());
        }
    }

    fn relay(
        &mut self,
        asker: Asker,
        target: NodeId,
        hops: u8,
        max_reply: u32,
        pull: Pull,
        now: u64,
    ) -> Result<(), PullError> {
        let (via, frame) = self.pulls.send(
            asker,
            target,
            hops,
            max_reply,
            pull,
            now,
            &self.topo,
            &self.links,
        )?;
        self.out.push_back(Output::Link { to: via, frame });
        Ok(())
    }
}
