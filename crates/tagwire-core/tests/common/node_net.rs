//! The in-memory network of node engines the node tests share
//! (`node_pairs.rs`, `node_props.rs`): several daemons' [`Node`]s wired
//! with simulated time and no sockets. The harness does what the router
//! does — carries link frames (each hop takes `hop_ns`), delivers to local
//! channels — and nothing it decides (pulls are answered from the nodes' own
//! pull buffers):
//! every routing choice is the engine's.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};
use tagwire_core::filter::{Filter, FilterLimits, Overrides};
use tagwire_core::node::{Asker, Node, NodeLimits, Output, Sink, Verdict};
use tagwire_core::tags::Pattern;
use tagwire_proto::{Event, EventRef, Interest, LinkFrame, ProxyAt, Pull, PullOutcome};

/// A daemon's id in the net (1..=n; its name is a, b, c…).
pub type Id = u64;

/// Most frames one `run` may carry; past it the network is looping.
pub const MAX_STEPS: usize = 100_000;

/// Daemons, the links between them, frames in flight and what arrived.
pub struct Net {
    /// The daemons' engines by id.
    pub nodes: BTreeMap<Id, Node<String>>,
    /// Live links, both directions.
    pub up: BTreeSet<(Id, Id)>,
    /// Frames in flight: (arrival time, sequence, from, to, frame).
    pub wires: VecDeque<(u64, u64, Id, Id, LinkFrame)>,
    /// The last frame's sequence number (orders frames due at once).
    pub seq: u64,
    /// Simulated time, ns.
    pub now: u64,
    /// How long a frame takes over one link, ns.
    pub hop_ns: u64,
    /// Every local delivery: (daemon, channel, event).
    pub delivered: Vec<(Id, String, Bytes)>,
    /// Each daemon's local interest (its channels' patterns), re-advertised
    /// on every change.
    pub interest: BTreeMap<Id, Vec<Interest>>,
    /// Pulls answered to local clients: (daemon, conn, req, outcome).
    pub pulls_done: Vec<(Id, u64, u32, PullOutcome)>,
    /// `Stored` pulls that reached their daemon, for its store (the test
    /// answers them with `Node::answer`).
    pub stored_pulls: Vec<(Id, Asker, Pull)>,
    /// `Healed` outputs: (daemon, daemons it reaches).
    pub healed: Vec<(Id, u32)>,
    /// Events forwarded per link direction.
    pub forwarded: BTreeMap<(Id, Id), usize>,
    /// The next channel id (unique across the net).
    pub next_channel: u64,
    /// Every event published is reliable (the router's reliable tags): one
    /// published while a daemon that wants it is away is held for it, and
    /// what a daemon back gets goes as `ReliableTo`.
    pub reliable: bool,
    /// `ReliableTo` events released: (origin, to, how many).
    pub released: Vec<(Id, Id, usize)>,
}

/// Collects one event's targets at one daemon.
pub struct Collect {
    /// The daemon routing it.
    pub here: Id,
    /// The event, encoded.
    pub event: Bytes,
    /// The local channels it goes to.
    pub channels: Vec<String>,
    /// The frames to send, by neighbour.
    pub links: Vec<(Id, LinkFrame)>,
}

impl Sink<String> for Collect {
    fn channel(&mut self, channel: &String, _overrides: Overrides) {
        self.channels.push(channel.clone());
    }
    fn link(&mut self, to: Id, origin: Id, hops: u8) {
        let frame = LinkFrame::Forward {
            origin,
            hops,
            event: self.event.clone(),
        };
        self.links.push((to, frame));
    }
}

/// Daemon `id`'s name: a, b, c…
pub fn name(id: Id) -> String {
    ((b'a' + (id - 1) as u8) as char).to_string()
}

/// `ev` encoded.
pub fn encode(ev: &Event) -> Bytes {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf.freeze()
}

/// An event of `tag` with sequence number `seq`.
pub fn event(tag: &str, seq: u64) -> Event {
    let mut ev = Event::new(tag, Bytes::from(format!("payload {seq}")));
    ev.header.seq = seq;
    ev.header.publisher = "/pub".into();
    ev
}

impl Net {
    /// `n` daemons named a, b, c… with ids 1..=n, no links.
    pub fn new(n: u64) -> Self {
        let nodes = (1..=n)
            .map(|id| (id, Node::new(id, &name(id), NodeLimits::default(), 0)))
            .collect();
        Net {
            nodes,
            up: BTreeSet::new(),
            wires: VecDeque::new(),
            seq: 0,
            now: 1_000_000_000,
            hop_ns: 1_000_000,
            delivered: Vec::new(),
            interest: BTreeMap::new(),
            pulls_done: Vec::new(),
            stored_pulls: Vec::new(),
            healed: Vec::new(),
            forwarded: BTreeMap::new(),
            next_channel: 1,
            reliable: false,
            released: Vec::new(),
        }
    }

    /// Daemon `id`'s engine.
    pub fn node(&mut self, id: Id) -> &mut Node<String> {
        self.nodes.get_mut(&id).expect("a daemon of the net")
    }

    /// Brings up the link between `a` and `b` and carries the adverts to rest.
    pub fn connect(&mut self, a: Id, b: Id) {
        self.up.insert((a, b));
        self.up.insert((b, a));
        self.node(a).link_up(b);
        self.node(b).link_up(a);
        self.run();
    }

    /// Cuts the link: frames in flight on it are lost.
    pub fn disconnect(&mut self, a: Id, b: Id) {
        self.up.remove(&(a, b));
        self.up.remove(&(b, a));
        self.wires
            .retain(|w| !((w.2, w.3) == (a, b) || (w.2, w.3) == (b, a)));
        self.node(a).link_down(b);
        self.node(b).link_down(a);
        self.run();
    }

    /// `n` daemons linked as `links` says, brought up in that order.
    pub fn with_links(n: u64, links: &[(Id, Id)]) -> Self {
        let mut net = Net::new(n);
        for &(a, b) in links {
            net.connect(a, b);
        }
        net
    }

    /// `n` daemons in a line, 1 - 2 - … - n.
    pub fn line(n: u64) -> Self {
        let mut net = Net::new(n);
        for id in 1..n {
            net.connect(id, id + 1);
        }
        net
    }

    /// Channel `channel` at daemon `at` on `pattern` (filter `filter` if
    /// not empty, scaled 1/`scale` by a proxy at `proxy`).
    pub fn subscribe_with(
        &mut self,
        at: Id,
        channel: &str,
        pattern: &str,
        filter: &str,
        scale: u32,
        proxy: ProxyAt,
    ) {
        let id = self.next_channel;
        self.next_channel += 1;
        let filters = if filter.is_empty() {
            Vec::new()
        } else {
            let f = Filter::compile(filter, &FilterLimits::default()).expect("filter compiles");
            vec![(id, f)]
        };
        let pat = Pattern::parse(pattern).expect("pattern");
        self.node(at)
            .routes_mut()
            .add_channel(id, 1, pat, channel.to_owned(), filters, None)
            .expect("channel added");
        let interest = self.interest.entry(at).or_default();
        interest.push(Interest {
            pattern: pattern.into(),
            filter: filter.into(),
            scale,
            proxy,
        });
        let interest = interest.clone();
        self.node(at).set_interest(interest);
        self.run();
    }

    /// Channel `channel` at daemon `at` on `pattern`, unfiltered.
    pub fn subscribe(&mut self, at: Id, channel: &str, pattern: &str) {
        self.subscribe_with(at, channel, pattern, "", 1, ProxyAt::Subscriber);
    }

    /// Publishes `ev` at daemon `at` and carries everything to rest.
    pub fn publish(&mut self, at: Id, ev: &Event) -> Verdict {
        let bytes = encode(ev);
        let parsed = EventRef::parse(&bytes).expect("parses");
        let now = self.now;
        let mut sink = self.collect(at, &bytes);
        let verdict = self
            .nodes
            .get_mut(&at)
            .expect("daemon")
            .publish(&parsed, || now, &mut sink);
        if let Verdict::Hold { until, .. } = verdict {
            self.node(at).hold(until, bytes.clone()).expect("held");
        }
        if self.reliable && self.node(at).has_away() {
            // As the router does for a reliable event published here.
            let label: std::sync::Arc<str> = "normal".into();
            self.node(at).hold_for_away(&parsed, &bytes, &label, now);
        }
        self.take(sink);
        self.run();
        verdict
    }

    /// A sink for `bytes` routed at daemon `at`; like the router, the
    /// daemon first records it in its pull buffers (4 events a tag here).
    pub fn collect(&mut self, at: Id, bytes: &Bytes) -> Collect {
        let ev = EventRef::parse(bytes).expect("parses");
        self.nodes
            .get_mut(&at)
            .expect("daemon")
            .record(&ev, bytes.clone(), bytes.len(), 4);
        Collect {
            here: at,
            event: bytes.clone(),
            channels: Vec::new(),
            links: Vec::new(),
        }
    }

    /// Delivers what `sink` collected: local channels, then frames on the links.
    pub fn take(&mut self, sink: Collect) {
        for ch in sink.channels {
            self.delivered.push((sink.here, ch, sink.event.clone()));
        }
        for (to, frame) in sink.links {
            *self.forwarded.entry((sink.here, to)).or_default() += 1;
            self.send(sink.here, to, frame);
        }
    }

    /// Puts `frame` on the wire `from` → `to`, or tells `from` it was not
    /// sent if the link is down.
    pub fn send(&mut self, from: Id, to: Id, frame: LinkFrame) {
        if !self.up.contains(&(from, to)) {
            self.node(from).unsent(to, &frame);
            return;
        }
        self.seq += 1;
        let at = self.now + self.hop_ns;
        self.wires.push_back((at, self.seq, from, to, frame));
    }

    /// Carries out every node's outputs, then frames in arrival order,
    /// until nothing moves.
    pub fn run(&mut self) {
        for _ in 0..MAX_STEPS {
            if !self.step() {
                return;
            }
        }
        panic!("the network did not settle within {MAX_STEPS} frames (a loop?)");
    }

    /// Carries out every node's outputs, then the next frame to arrive;
    /// `false` if none was in flight (the network is at rest).
    pub fn step(&mut self) -> bool {
        self.drain_outputs();
        let Some(next) = self
            .wires
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (w.0, w.1))
            .map(|(i, _)| i)
        else {
            return false;
        };
        let (at, _, from, to, frame) = self.wires.remove(next).expect("present");
        self.now = self.now.max(at);
        self.arrive(from, to, frame);
        true
    }

    /// Carries out every node's control outputs (link frames go on the
    /// wires) until none is left.
    pub fn drain_outputs(&mut self) {
        let ids: Vec<Id> = self.nodes.keys().copied().collect();
        loop {
            let mut moved = false;
            for &id in &ids {
                while let Some(out) = self.node(id).poll_output() {
                    moved = true;
                    match out {
                        Output::Link { to, frame } => self.send(id, to, frame),
                        Output::PullDone {
                            conn, req, outcome, ..
                        } => self.pulls_done.push((id, conn, req, outcome)),
                        Output::Stored { asker, pull, .. } => {
                            self.stored_pulls.push((id, asker, pull))
                        }
                        Output::Healed { daemons } => self.healed.push((id, daemons)),
                        Output::Release { to, events } => {
                            self.released.push((id, to, events.len()));
                            for h in events {
                                self.send_to(id, id, 0, to, h.event, &h.label);
                            }
                        }
                        Output::AdvertRefused { error, .. } => {
                            panic!("daemon {} refused an advert: {error}", name(id))
                        }
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Lets 2 s pass (each node's once-a-second housekeeping,
    /// `expire_unreachable`): daemons reachable again for the hold's
    /// `settle_ns` get what was held for them.
    pub fn settle(&mut self) {
        let t = self.now + 2_000_000_000;
        self.now = t;
        let ids: Vec<Id> = self.nodes.keys().copied().collect();
        for id in ids {
            self.node(id).expire_unreachable(t);
        }
        self.run();
    }

    /// Daemon `at` passes `event` (published at `origin`, `hops` links
    /// ago) toward daemon `to` as a `ReliableTo`, as the router does: on
    /// the link `next_hop_toward` names; with none, at the origin it is
    /// held again (elsewhere the harness drops it: a router fails it back).
    pub fn send_to(
        &mut self,
        at: Id,
        origin: Id,
        hops: u8,
        to: Id,
        event: Bytes,
        label: &std::sync::Arc<str>,
    ) {
        match self.node(at).next_hop_toward(origin, to) {
            Some(next) if self.up.contains(&(at, next)) => {
                let frame = LinkFrame::ReliableTo {
                    seq: 1,
                    origin,
                    hops,
                    to,
                    event,
                };
                self.send(at, next, frame);
            }
            _ if at == origin => {
                let parsed = EventRef::parse(&event).expect("parses");
                let now = self.now;
                self.node(at).hold_again(to, &parsed, &event, label, now);
            }
            _ => {}
        }
    }

    /// Daemon `id` answers `pull` from its own pull buffers (as for a
    /// local client), as an outcome.
    pub fn answer_here(&mut self, id: Id, pull: &Pull) -> PullOutcome {
        match self.node(id).answer_here(pull, 1 << 20) {
            Ok(reply) => PullOutcome::Reply(reply),
            Err((code, message)) => PullOutcome::Refused { code, message },
        }
    }

    /// Frame `frame` from `from` arrives at `to`.
    pub fn arrive(&mut self, from: Id, to: Id, frame: LinkFrame) {
        let now = self.now;
        match frame {
            LinkFrame::Forward {
                origin,
                hops,
                event,
            } => {
                let parsed = EventRef::parse(&event).expect("forwarded event parses");
                let mut sink = self.collect(to, &event);
                self.nodes.get_mut(&to).expect("daemon").on_forward(
                    from,
                    origin,
                    hops,
                    &parsed,
                    || now,
                    &mut sink,
                );
                self.take(sink);
            }
            LinkFrame::ReliableTo {
                origin,
                hops,
                to: dest,
                event,
                ..
            } => {
                if dest == to {
                    // Local channels only.
                    let parsed = EventRef::parse(&event).expect("parses");
                    let mut sink = self.collect(to, &event);
                    self.nodes
                        .get_mut(&to)
                        .expect("daemon")
                        .route_local(&parsed, &mut sink);
                    self.take(sink);
                } else {
                    let label: std::sync::Arc<str> = "normal".into();
                    self.send_to(to, origin, hops.saturating_add(1), dest, event, &label);
                }
            }
            other => {
                let rest = self.node(to).on_link_frame(from, other, now);
                assert!(
                    rest.is_none(),
                    "the engine handles every link frame it is sent"
                );
            }
        }
    }

    /// Advances simulated time to `t` and lets each node act on it.
    pub fn advance_to(&mut self, t: u64) {
        self.now = t;
        let ids: Vec<Id> = self.nodes.keys().copied().collect();
        for id in ids {
            let due = self.node(id).handle_timeout(t);
            for bytes in due {
                let parsed = EventRef::parse(&bytes).expect("parses");
                let mut sink = self.collect(id, &bytes);
                self.nodes
                    .get_mut(&id)
                    .expect("daemon")
                    .release(&parsed, t, &mut sink);
                self.take(sink);
            }
        }
        self.run();
    }

    /// The channels that got events, with how many each got.
    pub fn got(&self) -> BTreeMap<(Id, String), usize> {
        let mut m = BTreeMap::new();
        for (id, ch, _) in &self.delivered {
            *m.entry((*id, ch.clone())).or_default() += 1;
        }
        m
    }
}

/// A pull of the latest event of `/log`, kept at daemon `node`.
pub fn latest(node: &str) -> Pull {
    Pull {
        req: 0,
        node: node.into(),
        publisher: String::new(),
        tag: "/log".into(),
        query: tagwire_proto::PullQuery::Latest,
    }
}

/// Request `req` of local client connection 1, which takes replies of up
/// to 1 MiB.
pub fn client(req: u32) -> Asker {
    Asker::Client {
        conn: 1,
        req,
        max_reply: 1 << 20,
    }
}
