//! The node engine against whatever neighbours send: arbitrary adverts
//! (bad patterns and filters, forged origins, this daemon's own id, more
//! daemons and interest than the bounds), pull requests and answers with
//! any ids and targets, forwards with any origin and hop count. Nothing
//! panics, every bound holds, and what the node asks to send per frame is
//! bounded by what it knows (a frame per link per advert it knows, at most).
//! The same input as bytes is the `link_frame` fuzz target's
//! (`scripts/fuzz.sh link_frame`).

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tagwire_core::federation::Limits;
use tagwire_core::filter::Overrides;
use tagwire_core::node::{Node, NodeLimits, Output, Sink};
use tagwire_core::tags::Pattern;
use tagwire_proto::{
    ErrorCode, Event, EventRef, Interest, LinkFrame, ProxyAt, Pull, PullOutcome, PullQuery,
};

const ME: u64 = 1;
const NEIGHBOURS: [u64; 2] = [2, 3];
const MAX_NODES: usize = 6;
const MAX_PENDING: usize = 4;

#[derive(Default)]
struct Count {
    channels: usize,
    links: Vec<u64>,
}

impl Sink<u32> for Count {
    fn channel(&mut self, _: &u32, _: Overrides) {
        self.channels += 1;
    }
    fn link(&mut self, to: u64, _origin: u64, _hops: u8) {
        self.links.push(to);
    }
}

fn node() -> Node<u32> {
    let limits = NodeLimits {
        federation: Limits {
            max_nodes: MAX_NODES,
            max_interest: 3,
            ..Limits::default()
        },
        max_pending_pulls: MAX_PENDING,
        ..NodeLimits::default()
    };
    let mut n = Node::new(ME, "me", limits, 0);
    let p = Pattern::parse("/a/**").expect("pattern");
    n.routes_mut()
        .add_channel(1, 1, p, 1, Vec::new(), None)
        .expect("channel");
    for l in NEIGHBOURS {
        n.link_up(l);
    }
    n.set_interest(vec![Interest::pattern("/a/**")]);
    while n.poll_output().is_some() {}
    n
}

fn interest() -> impl Strategy<Value = Interest> {
    (
        prop::sample::select(vec!["/a/**", "/b/*", "/a/b", "bad pattern", "", "/**"]),
        prop::sample::select(vec!["", "$.k == 1", "$.k ==", "$.s ~ 'x'", "((("]),
        0u32..4,
        prop::sample::select(vec![
            ProxyAt::Subscriber,
            ProxyAt::Publisher,
            ProxyAt::Node("me".into()),
        ]),
    )
        .prop_map(|(pattern, filter, scale, proxy)| Interest {
            pattern: pattern.into(),
            filter: filter.into(),
            scale,
            proxy,
        })
}

fn event(tag: &str, seq: u64) -> Bytes {
    let mut ev = Event::new(tag, &b"x"[..]);
    ev.header.seq = seq;
    ev.header.publisher = "/p".into();
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("encodes");
    buf.freeze()
}

fn pull(node: &str) -> Pull {
    Pull {
        req: 0,
        node: node.into(),
        publisher: String::new(),
        tag: "/a/x".into(),
        query: PullQuery::Latest,
    }
}

fn frame() -> impl Strategy<Value = LinkFrame> {
    let id = 0u64..10;
    prop_oneof![
        (
            id.clone(),
            0u64..5,
            prop::collection::vec(0u64..10, 0..5),
            prop::collection::vec(interest(), 0..5)
        )
            .prop_map(|(origin, version, neighbors, interest)| LinkFrame::Advert {
                origin,
                version,
                name: format!("n{origin}"),
                neighbors,
                interest,
            }),
        (
            id.clone(),
            any::<u8>(),
            prop::sample::select(vec!["/a/x", "/b/y", "/z"]),
            0u64..64
        )
            .prop_map(|(origin, hops, tag, seq)| LinkFrame::Forward {
                origin,
                hops,
                event: event(tag, seq),
            }),
        (
            0u32..8,
            id.clone(),
            any::<u8>(),
            0u32..4096,
            prop::sample::select(vec!["", "me", "n2", "n5", "@publisher", "nobody"])
        )
            .prop_map(
                |(id, target, hops, max_reply, node)| LinkFrame::PullRequest {
                    id,
                    target,
                    hops,
                    max_reply,
                    pull: pull(node),
                }
            ),
        (
            id.clone(),
            any::<u8>(),
            id.clone(),
            prop::sample::select(vec!["/a/x", "/b/y", "/z"]),
            0u64..64
        )
            .prop_map(|(origin, hops, to, tag, seq)| LinkFrame::ReliableTo {
                seq: 1,
                origin,
                hops,
                to,
                event: event(tag, seq),
            }),
        (0u32..8).prop_map(|id| LinkFrame::PullAnswer {
            id,
            outcome: PullOutcome::Refused {
                code: ErrorCode::Timeout,
                message: "whatever".into(),
            },
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn whatever_neighbours_send_nothing_panics_and_every_bound_holds(
        frames in prop::collection::vec((prop::sample::select(NEIGHBOURS.to_vec()), frame()), 1..40),
        asks in prop::collection::vec(prop::sample::select(vec!["n2", "n5", "@publisher", "me"]), 0..8),
    ) {
        let mut n = node();
        let mut now = 1_000_000_000u64;
        let half = frames.len() / 2;
        for (k, (from, frame)) in frames.into_iter().enumerate() {
            now += 1_000_000;
            if k == half {
                // Clients ask for pulls once some adverts may have come.
                for (i, node_name) in asks.iter().enumerate() {
                    let p = pull(node_name);
                    if let Ok(Some(target)) = n.pull_target(&p) {
                        let asker = tagwire_core::node::Asker::Client {
                            conn: 7,
                            req: i as u32,
                            max_reply: 1 << 20,
                        };
                        let _ = n.ask(asker, target, 1 << 20, p, now);
                    }
                }
                while n.poll_output().is_some() {}
                prop_assert!(n.pulls_in_flight() <= MAX_PENDING);
            }
            let known_before = n.topology().len();
            match frame {
                LinkFrame::Forward { origin, hops, event } => {
                    let ev = EventRef::parse(&event).expect("test events parse");
                    let mut sink = Count::default();
                    let _ = n.on_forward(from, origin, hops, &ev, || now, &mut sink);
                    // Never back to where it came from; only to live links.
                    prop_assert!(!sink.links.contains(&from));
                    prop_assert!(sink.links.iter().all(|l| NEIGHBOURS.contains(l)));
                    // As the router does for a reliable event published
                    // here: held for daemons that are away.
                    if n.has_away() {
                        let label: std::sync::Arc<str> = "normal".into();
                        let _ = n.hold_for_away(&ev, &event, &label, now);
                    }
                }
                LinkFrame::ReliableTo { origin, to, event, .. } => {
                    // The way on toward `to` is a live link, if any; the
                    // hold takes it back or refuses it, never panics.
                    if let Some(next) = n.next_hop_toward(origin, to) {
                        prop_assert!(NEIGHBOURS.contains(&next), "toward {to} over {next}");
                    }
                    let ev = EventRef::parse(&event).expect("test events parse");
                    let label: std::sync::Arc<str> = "normal".into();
                    let _ = n.hold_again(to, &ev, &event, &label, now);
                }
                other => {
                    prop_assert!(n.on_link_frame(from, other, now).is_none());
                }
            }
            let mut outputs = 0;
            while let Some(out) = n.poll_output() {
                outputs += 1;
                if let Output::Link { to, .. } = out {
                    prop_assert!(NEIGHBOURS.contains(&to), "a frame for a link that is not up: {to}");
                }
            }
            // At most: the frame flooded on, plus every newly reachable
            // daemon's advert, on each link; plus a pull's answer.
            // And one `Release` per away daemon back (at most the hold's
            // `max_daemons`).
            let bound = NEIGHBOURS.len() * (1 + known_before.max(n.topology().len()))
                + 1
                + tagwire_core::node::AwayLimits::default().max_daemons;
            prop_assert!(outputs <= bound, "{outputs} outputs for one frame (bound {bound})");
            prop_assert!(n.topology().len() <= MAX_NODES);
            prop_assert!(n.pulls_in_flight() <= MAX_PENDING);
        }
        // Time passes: every pull still in flight is answered.
        let _ = n.handle_timeout(now + 60_000_000_000);
        prop_assert_eq!(n.pulls_in_flight(), 0);
    }
}
