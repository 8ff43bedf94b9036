//! Property tests of the node engine: random connected networks of 2–8
//! daemons (a random spanning tree plus random extra links, brought up in a
//! random order), random subscriptions and publishes, random link cuts,
//! random pulls — wired in memory by the harness of `common/node_net.rs`,
//! which carries frames and decides nothing.
//!
//! The oracle is independent of the engine's tables: who wants an event is
//! `Pattern::matches` (the glob walk, not the engine's tag trie) and the
//! filter `$.k == N` evaluated here; the links an event may cross are those
//! of the origin's breadth-first tree over the live links, neighbours in id
//! order (the tree docs/federation.md and `federation.rs` specify), leading
//! toward a daemon that wants it.
//!
//! Each property was seen failing with the engine broken on purpose: routing
//! ignoring advertised filters (1–3), forwarded events skipping local
//! channels (1–3), `link_down` not re-advertising (2, 3), not re-sending
//! the adverts of daemons that became reachable again (3: the bug it found),
//! `route` skipping its `from` check (5; at rest no daemon sends an event
//! backwards, so 1–3 cannot see it), `link_down` forgetting the pulls sent
//! on the link (4). `route`'s live-link check cannot be caught: a daemon's
//! own advert lists exactly its live links, so its trees never hold another.

#[path = "common/node_net.rs"]
mod node_net;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use node_net::*;
use proptest::prelude::*;
use tagwire_core::node::{Asker, PullError, AT_PUBLISHER};
use tagwire_core::tags::Pattern;
use tagwire_proto::{ErrorCode, EventRef, ProxyAt, Pull, PullOutcome, PullQuery, Value};

/// The patterns subscriptions pick from.
const PATTERNS: &[&str] = &["/a/**", "/a/b", "/c/*", "/a/*/d"];
/// The tags events pick from (some match no pattern).
const TAGS: &[&str] = &["/a", "/a/b", "/a/c", "/a/b/d", "/c/x", "/c", "/d"];
/// The values of field `k` filters and events pick from (`None`: no
/// filter, or no field).
const KS: &[Option<i64>] = &[None, Some(1), Some(2)];

/// One channel of the net, as the oracle sees it.
#[derive(Debug, Clone)]
struct Sub {
    at: Id,
    channel: String,
    pattern: &'static str,
    /// `$.k == N`, or no filter.
    k: Option<i64>,
}

impl Sub {
    fn wants(&self, tag: &str, k: Option<i64>) -> bool {
        let pattern = Pattern::parse(self.pattern).expect("test pattern parses");
        pattern.matches(tag) && self.k.is_none_or(|want| k == Some(want))
    }
}

/// A network's links, each once as (smaller id, larger id).
#[derive(Debug, Clone)]
struct Graph {
    n: u64,
    /// In the order they are brought up.
    links: Vec<(Id, Id)>,
}

fn pair(a: Id, b: Id) -> (Id, Id) {
    (a.min(b), a.max(b))
}

/// A random connected graph of 2–8 daemons: a random spanning tree over a
/// random numbering, plus up to `n` random extra links, in random order.
fn graph() -> impl Strategy<Value = Graph> {
    (2u64..=8)
        .prop_flat_map(|n| {
            // Daemon i (in the shuffled order) hangs off one of the first i.
            let parents: Vec<std::ops::Range<usize>> = (1..n as usize).map(|i| 0..i).collect();
            let extra = prop::collection::vec((0..n as usize, 0..n as usize), 0..=n as usize);
            let order = Just((1..=n).collect::<Vec<Id>>()).prop_shuffle();
            (Just(n), parents, extra, order)
        })
        .prop_flat_map(|(n, parents, extra, order)| {
            let mut links = BTreeSet::new();
            for (i, p) in parents.into_iter().enumerate() {
                links.insert(pair(order[i + 1], order[p]));
            }
            for (a, b) in extra {
                if a != b {
                    links.insert(pair(order[a], order[b]));
                }
            }
            let links: Vec<(Id, Id)> = links.into_iter().collect();
            (Just(n), Just(links).prop_shuffle())
        })
        .prop_map(|(n, links)| Graph { n, links })
}

/// Raw subscriptions: (daemon, pattern, filter) indices, taken modulo.
fn subs() -> impl Strategy<Value = Vec<(usize, usize, usize)>> {
    prop::collection::vec((0..8usize, 0..PATTERNS.len(), 0..KS.len()), 0..=6)
}

/// Raw publishes: (daemon, tag, field k) indices, taken modulo.
fn publishes() -> impl Strategy<Value = Vec<(usize, usize, usize)>> {
    prop::collection::vec((0..8usize, 0..TAGS.len(), 0..KS.len()), 1..=8)
}

/// The net `graph` describes, with the subscriptions made (each carried to
/// rest).
fn build(graph: &Graph, raw: &[(usize, usize, usize)]) -> (Net, Vec<Sub>) {
    let mut net = Net::with_links(graph.n, &graph.links);
    let mut subs = Vec::new();
    for (i, &(d, p, k)) in raw.iter().enumerate() {
        let sub = Sub {
            at: d as u64 % graph.n + 1,
            channel: format!("s{i}"),
            pattern: PATTERNS[p],
            k: KS[k],
        };
        let filter = sub.k.map(|k| format!("$.k == {k}")).unwrap_or_default();
        net.subscribe_with(
            sub.at,
            &sub.channel,
            sub.pattern,
            &filter,
            1,
            ProxyAt::Subscriber,
        );
        subs.push(sub);
    }
    (net, subs)
}

/// The daemons reachable from `from` over the live links.
fn component(up: &BTreeSet<(Id, Id)>, from: Id) -> BTreeSet<Id> {
    bfs(up, from).into_keys().collect()
}

/// Breadth-first from `root` over the live links, neighbours in id order:
/// each reached daemon's parent (the root's is itself).
fn bfs(up: &BTreeSet<(Id, Id)>, root: Id) -> BTreeMap<Id, Id> {
    let mut parent = BTreeMap::from([(root, root)]);
    let mut queue = VecDeque::from([root]);
    while let Some(u) = queue.pop_front() {
        for &(_, v) in up.range((u, 0)..=(u, Id::MAX)) {
            if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(v) {
                e.insert(u);
                queue.push_back(v);
            }
        }
    }
    parent
}

/// Publishes one event at `origin` on a settled net and checks where it
/// went: exactly once to every channel that wants it on the origin's side,
/// nowhere else, and over exactly the links of the origin's tree that lead
/// toward a daemon that wants it (each once).
fn publish_and_check(
    net: &mut Net,
    subs: &[Sub],
    origin: Id,
    tag: &str,
    k: Option<i64>,
    seq: u64,
) -> Result<(), TestCaseError> {
    net.delivered.clear();
    net.forwarded.clear();
    let mut ev = event(tag, seq);
    if let Some(k) = k {
        ev.fields.push(("k".into(), Value::Int(k)));
    }
    net.publish(origin, &ev);

    let side = component(&net.up, origin);
    let wanting: Vec<&Sub> = subs
        .iter()
        .filter(|s| side.contains(&s.at) && s.wants(tag, k))
        .collect();
    let want: BTreeMap<(Id, String), usize> = wanting
        .iter()
        .map(|s| ((s.at, s.channel.clone()), 1))
        .collect();
    prop_assert_eq!(
        net.got(),
        want,
        "event {} k={:?} from {}: channels (daemon, channel) → times",
        tag,
        k,
        name(origin)
    );

    let interested: BTreeSet<Id> = wanting.iter().map(|s| s.at).collect();
    if interested.iter().all(|&d| d == origin) {
        prop_assert!(
            net.forwarded.is_empty(),
            "event {} from {}: only its own daemon (or nobody) wants it, yet it crossed {:?}",
            tag,
            name(origin),
            net.forwarded
        );
    }
    let parent = bfs(&net.up, origin);
    let mut crossings = BTreeMap::new();
    for &d in &interested {
        let mut v = d;
        while v != origin {
            let p = parent[&v];
            crossings.insert((p, v), 1usize);
            v = p;
        }
    }
    prop_assert_eq!(
        &net.forwarded,
        &crossings,
        "event {} from {}: links crossed (from, to) → times, against the tree toward {:?}",
        tag,
        name(origin),
        interested
    );
    for (&id, node) in &net.nodes {
        prop_assert_eq!(
            node.counters().unwanted,
            0,
            "daemon {} received an event nobody there or beyond wanted",
            name(id)
        );
    }
    Ok(())
}

/// Publishes each of `raw` (indices taken modulo) and checks each.
fn publish_all(
    net: &mut Net,
    subs: &[Sub],
    n: u64,
    raw: &[(usize, usize, usize)],
    seq: &mut u64,
) -> Result<(), TestCaseError> {
    for &(d, t, k) in raw {
        *seq += 1;
        publish_and_check(net, subs, d as u64 % n + 1, TAGS[t], KS[k], *seq)?;
    }
    Ok(())
}

/// Whether the live links without `cut` still connect all `n` daemons.
fn connected_without(up: &BTreeSet<(Id, Id)>, n: u64, cut: (Id, Id)) -> bool {
    let mut rest = up.clone();
    rest.remove(&cut);
    rest.remove(&(cut.1, cut.0));
    component(&rest, 1).len() as u64 == n
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Property 1: on a settled network every wanting channel gets each
    /// event exactly once, no other channel gets it, and it crosses only
    /// the links toward daemons that want it.
    #[test]
    fn events_reach_exactly_the_wanting_channels_once(
        g in graph(),
        raw_subs in subs(),
        raw_pubs in publishes(),
    ) {
        let (mut net, subs) = build(&g, &raw_subs);
        let mut seq = 0;
        publish_all(&mut net, &subs, g.n, &raw_pubs, &mut seq)?;
    }

    /// Property 2: after random link cuts that keep the network connected,
    /// still exactly once, over the new trees.
    #[test]
    fn cuts_that_keep_the_network_connected_keep_exactly_once(
        g in graph(),
        raw_subs in subs(),
        raw_pubs in publishes(),
        cuts in prop::collection::vec(0..64usize, 1..=4),
    ) {
        let (mut net, subs) = build(&g, &raw_subs);
        let mut seq = 0;
        publish_all(&mut net, &subs, g.n, &raw_pubs, &mut seq)?;
        let mut cut_any = false;
        for c in cuts {
            let live: Vec<(Id, Id)> = net.up.iter().copied().filter(|(a, b)| a < b).collect();
            let link = live[c % live.len()];
            if connected_without(&net.up, g.n, link) {
                net.disconnect(link.0, link.1);
                cut_any = true;
            }
        }
        prop_assert_eq!(component(&net.up, 1).len() as u64, g.n);
        if cut_any {
            publish_all(&mut net, &subs, g.n, &raw_pubs, &mut seq)?;
        }
    }

    /// Property 3: a cut that partitions the network: each side delivers to
    /// its own channels exactly once and nothing across, every daemon
    /// settles, and once the links come back exactly once everywhere again.
    #[test]
    fn a_partition_delivers_on_the_publishers_side_only_and_heals(
        g in graph(),
        raw_subs in subs(),
        raw_pubs in publishes(),
        side in 1..255u32,
    ) {
        let (mut net, subs) = build(&g, &raw_subs);
        let mut seq = 0;
        // Side A: the daemons whose bit is set (daemon 1 if none or all).
        let mut a: BTreeSet<Id> = (1..=g.n).filter(|id| side & (1 << (id - 1)) != 0).collect();
        if a.is_empty() || a.len() as u64 == g.n {
            a = BTreeSet::from([1]);
        }
        let across: Vec<(Id, Id)> = g
            .links
            .iter()
            .copied()
            .filter(|(x, y)| a.contains(x) != a.contains(y))
            .collect();
        prop_assert!(!across.is_empty(), "a connected graph has a link across any cut");
        for &(x, y) in &across {
            net.disconnect(x, y); // each runs the network to rest (bounded)
        }
        prop_assert!(component(&net.up, *a.first().expect("not empty")).len() < g.n as usize);
        publish_all(&mut net, &subs, g.n, &raw_pubs, &mut seq)?;
        for (&id, node) in &net.nodes {
            prop_assert!(
                node.links().all(|l| a.contains(&l) == a.contains(&id)),
                "daemon {} still has a link across the cut",
                name(id)
            );
        }
        for &(x, y) in &across {
            net.connect(x, y);
        }
        publish_all(&mut net, &subs, g.n, &raw_pubs, &mut seq)?;
    }

    /// Property 5: an event that arrives from a neighbour never goes back
    /// to it, whatever the origin and the neighbour claim (during a change
    /// two daemons' views of a tree may disagree; at rest they never send
    /// it backwards, so this is injected), and only on live links.
    #[test]
    fn an_event_never_goes_back_to_the_neighbour_it_came_from(
        g in graph(),
        raw_subs in subs(),
        injected in prop::collection::vec((0..8usize, 0..8usize, 0..8usize, 0..TAGS.len(), 0..KS.len()), 1..=8),
    ) {
        let (mut net, _subs) = build(&g, &raw_subs);
        for (i, &(d, nb, o, t, k)) in injected.iter().enumerate() {
            let at = d as u64 % g.n + 1;
            let links: Vec<Id> = net.node(at).links().collect();
            let from = links[nb % links.len()];
            let origin = o as u64 % g.n + 1;
            let mut ev = event(TAGS[t], i as u64 + 1);
            if let Some(k) = KS[k] {
                ev.fields.push(("k".into(), Value::Int(k)));
            }
            let bytes = encode(&ev);
            let parsed = EventRef::parse(&bytes).expect("parses");
            let now = net.now;
            let mut sink = net.collect(at, &bytes);
            net.node(at).on_forward(from, origin, 1, &parsed, || now, &mut sink);
            for (to, _) in &sink.links {
                prop_assert_ne!(*to, from, "daemon {} sent an event from {} (origin {}) back", name(at), name(from), name(origin));
                prop_assert!(links.contains(to), "daemon {} sent on a link it does not have, to {}", name(at), name(*to));
            }
            net.take(sink);
            net.run();
        }
    }

    /// Property 4: pulls from random daemons for tags last published at
    /// others (`node: NAME`, `@publisher`, or a name no daemon has) are
    /// each answered exactly once, with the event or a refusal saying why,
    /// and none stays in flight once the network is at rest — also when a
    /// random link is cut while they travel.
    #[test]
    fn every_pull_is_answered_once_and_none_stays_in_flight(
        g in graph(),
        raw_subs in subs(),
        logs in prop::collection::vec((0..8usize, 0..3usize), 1..=4),
        pulls in prop::collection::vec((0..8usize, 0..3usize, 0..8usize, 0..4usize), 1..=6),
        cut in prop::option::of((0..64usize, 0..24usize)),
    ) {
        let (mut net, _subs) = build(&g, &raw_subs);
        // Every daemon listens to the logs, so that they cross links and
        // `@publisher` has something to go by.
        for id in 1..=g.n {
            net.subscribe(id, &format!("log{id}"), "/log/*");
        }
        let mut published: BTreeMap<String, BTreeSet<Id>> = BTreeMap::new();
        for (i, &(d, t)) in logs.iter().enumerate() {
            let at = d as u64 % g.n + 1;
            let tag = format!("/log/{t}");
            net.publish(at, &event(&tag, i as u64 + 1));
            published.entry(tag).or_default().insert(at);
        }

        // Ask every pull at once. `refused_at_once` are those the asker's
        // daemon refused before sending (that is their one answer).
        let mut asked = Vec::new();
        let mut refused_at_once = BTreeSet::new();
        for (i, &(d, t, target, how)) in pulls.iter().enumerate() {
            let at = d as u64 % g.n + 1;
            let tag = format!("/log/{t}");
            let node = match how {
                0 | 1 => name(target as u64 % g.n + 1),
                2 => AT_PUBLISHER.to_owned(),
                _ => "nobody".to_owned(),
            };
            let pull = Pull {
                req: 0,
                node: node.clone(),
                publisher: String::new(),
                tag: tag.clone(),
                query: PullQuery::Latest,
            };
            let req = i as u32;
            let asker = Asker::Client { conn: 1, req, max_reply: 1 << 20 };
            let mut target = None;
            match net.node(at).pull_target(&pull) {
                Err(e) => {
                    prop_assert!(node == "nobody", "{} refused: {}", node, e);
                    let names_it = matches!(&e, PullError::UnknownDaemon { name, .. } if name.contains("nobody"));
                    prop_assert!(names_it, "{:?}", e);
                    prop_assert_eq!(e.code(), ErrorCode::UnknownNode);
                    refused_at_once.insert(req);
                }
                Ok(None) => {
                    // Answered from this daemon's own history.
                    if how < 2 {
                        prop_assert_eq!(&node, &name(at));
                    }
                    let outcome = net.answer_here(at, &pull);
                    net.pulls_done.push((at, 1, req, outcome));
                }
                Ok(Some(to)) => {
                    prop_assert!(node != "nobody");
                    if how < 2 {
                        prop_assert_eq!(&name(to), &node, "the pull goes to the daemon named");
                    } else {
                        prop_assert!(
                            published.get(&tag).is_some_and(|p| p.contains(&to)),
                            "@publisher sent {} to {}, which never published it",
                            tag,
                            name(to)
                        );
                    }
                    let now = net.now;
                    if let Err(e) = net.node(at).ask(asker, to, 1 << 20, pull, now) {
                        prop_assert!(false, "a settled connected net refused to send: {}", e);
                    }
                    target = Some(to);
                }
            }
            asked.push((req, at, tag, node, target));
        }

        // Let them travel, maybe cut a link on the way, then rest.
        let mut cut_link = None;
        if let Some((link, after)) = cut {
            for _ in 0..after {
                if !net.step() {
                    break;
                }
            }
            let live: Vec<(Id, Id)> = net.up.iter().copied().filter(|(a, b)| a < b).collect();
            if !live.is_empty() {
                let (x, y) = live[link % live.len()];
                net.disconnect(x, y);
                cut_link = Some((x, y));
            }
        }
        net.run();

        for (req, at, tag, node, target) in &asked {
            let answers: Vec<&PullOutcome> = net
                .pulls_done
                .iter()
                .filter(|p| p.2 == *req)
                .map(|p| &p.3)
                .collect();
            if refused_at_once.contains(req) {
                prop_assert!(answers.is_empty(), "pull {} refused at once, then answered {:?}", req, answers);
                continue;
            }
            prop_assert_eq!(answers.len(), 1, "pull {} at {} for {} at {}: answers {:?}", req, name(*at), tag, node, answers);
            prop_assert!(net.pulls_done.iter().filter(|p| p.2 == *req).all(|p| p.0 == *at));
            match answers[0] {
                PullOutcome::Reply(r) => {
                    let ev = EventRef::parse(&r.events[0]).expect("parses");
                    prop_assert_eq!(ev.tag, tag.as_str());
                }
                PullOutcome::Refused { code, message } => {
                    prop_assert!(!message.is_empty());
                    match code {
                        // The daemon asked has no such history.
                        ErrorCode::NoHistory => prop_assert!(message.contains(tag.as_str()), "{}", message),
                        // The way there closed: only with a cut.
                        ErrorCode::UnknownNode | ErrorCode::LimitReached => {
                            prop_assert!(cut_link.is_some(), "refused without a cut: {}", message);
                            let to = target.expect("only a pull sent on can be refused on the way");
                            // By name, or by id where a relay had forgotten it.
                            let named = message.contains(&format!("daemon {} ", name(to)))
                                || message.contains(&format!("daemon {to:#x} "));
                            prop_assert!(named, "{}", message);
                        }
                        other => prop_assert!(false, "unexpected refusal {:?}: {}", other, message),
                    }
                }
            }
            // With no cut, a named daemon that published the tag replies.
            if cut_link.is_none() && node.len() == 1 {
                let target = node.as_bytes()[0] - b'a' + 1;
                let has = net.nodes[&u64::from(target)].history().info(tag).is_some();
                prop_assert_eq!(
                    matches!(answers[0], PullOutcome::Reply(_)),
                    has,
                    "pull {} for {} at {}: {:?}",
                    req,
                    tag,
                    node,
                    answers[0]
                );
            }
        }
        for (&id, node) in &net.nodes {
            prop_assert_eq!(node.pulls_in_flight(), 0, "daemon {} still holds pulls", name(id));
        }
    }
}
