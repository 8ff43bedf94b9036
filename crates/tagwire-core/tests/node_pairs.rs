//! Pair tests of the node engine: several daemons' `Node`s wired in
//! memory, with simulated time and no sockets (the harness is
//! `common/node_net.rs`: it carries frames and decides nothing).

#[path = "common/node_net.rs"]
mod node_net;

use std::collections::BTreeMap;

use node_net::*;
use tagwire_core::node::{Asker, Node, NodeLimits, Verdict};
use tagwire_proto::{
    ErrorCode, EventRef, Expiry, LinkFrame, Origins, ProxyAt, PullOutcome, PullQuery, PullReply,
    PullStatus, Value,
};

fn got(entries: &[(Id, &str, usize)]) -> BTreeMap<(Id, String), usize> {
    entries
        .iter()
        .map(|(id, ch, n)| ((*id, ch.to_string()), *n))
        .collect()
}

#[test]
fn an_event_crosses_three_daemons_to_the_only_subscriber_once() {
    let mut net = Net::line(3);
    net.subscribe(3, "viewer", "/cam/**");
    let verdict = net.publish(1, &event("/cam/left", 1));
    assert!(
        matches!(verdict, Verdict::Routed { links: 1, .. }),
        "{verdict:?}"
    );
    assert_eq!(net.got(), got(&[(3, "viewer", 1)]));
    assert_eq!(net.forwarded.get(&(1, 2)), Some(&1));
    assert_eq!(net.forwarded.get(&(2, 3)), Some(&1));
    assert_eq!(net.forwarded.len(), 2, "no event goes back or elsewhere");
}

#[test]
fn an_event_nobody_wants_stays_home() {
    let mut net = Net::line(3);
    net.subscribe(3, "viewer", "/cam/**");
    net.publish(1, &event("/mic/1", 1));
    assert!(net.delivered.is_empty());
    assert!(net.forwarded.is_empty(), "{:?}", net.forwarded);
}

#[test]
fn a_ring_delivers_each_event_exactly_once_everywhere() {
    let mut net = Net::new(5);
    for (a, b) in [(1, 2), (2, 3), (3, 4), (4, 5), (5, 1)] {
        net.connect(a, b);
    }
    for id in 1..=5 {
        net.subscribe(id, &format!("s{id}"), "/x/**");
    }
    for origin in 1..=5 {
        net.publish(origin, &event("/x/y", origin));
    }
    let want: Vec<(Id, String, usize)> = (1..=5).map(|id| (id, format!("s{id}"), 5)).collect();
    let want: BTreeMap<_, _> = want.into_iter().map(|(i, c, n)| ((i, c), n)).collect();
    assert_eq!(net.got(), want);
    // Each event crosses exactly the 4 links of its origin's tree.
    let crossings: usize = net.forwarded.values().sum();
    assert_eq!(crossings, 5 * 4);
}

#[test]
fn a_closed_link_is_routed_around() {
    let mut net = Net::new(3);
    for (a, b) in [(1, 2), (2, 3), (1, 3)] {
        net.connect(a, b);
    }
    net.subscribe(3, "viewer", "/t");
    net.publish(1, &event("/t", 1));
    assert_eq!(
        net.forwarded.get(&(1, 3)),
        Some(&1),
        "the direct link first"
    );
    net.disconnect(1, 3);
    net.publish(1, &event("/t", 2));
    assert_eq!(net.got(), got(&[(3, "viewer", 2)]));
    assert_eq!(net.forwarded.get(&(1, 2)), Some(&1));
    assert_eq!(net.forwarded.get(&(2, 3)), Some(&1));
}

#[test]
fn a_partition_delivers_nothing_across_and_heals() {
    let mut net = Net::line(3);
    net.subscribe(3, "viewer", "/t");
    net.disconnect(2, 3);
    let verdict = net.publish(1, &event("/t", 1));
    assert!(
        matches!(verdict, Verdict::Routed { links: 0, .. }),
        "{verdict:?}"
    );
    assert!(net.delivered.is_empty());
    net.connect(2, 3);
    net.publish(1, &event("/t", 2));
    assert_eq!(net.got(), got(&[(3, "viewer", 1)]));
}

/// When a partition heals, each daemon that reaches again daemons it
/// could not says so (`Output::Healed`, with how many it reaches), so that
/// the router can tell its clients; a link that comes and goes within what
/// is reachable anyway (a ring's other path) makes no such output.
#[test]
fn a_healed_partition_is_an_output_where_daemons_became_reachable_again() {
    let mut net = Net::line(3);
    net.healed.clear();
    net.disconnect(2, 3);
    net.run();
    assert!(
        net.healed.is_empty(),
        "a cut heals nothing: {:?}",
        net.healed
    );
    net.connect(2, 3);
    net.run();
    let mut at: Vec<Id> = net.healed.iter().map(|(id, _)| *id).collect();
    at.sort_unstable();
    at.dedup();
    assert_eq!(
        at,
        vec![1, 2, 3],
        "every daemon reaches another again: {:?}",
        net.healed
    );
    assert!(net.healed.iter().all(|(_, n)| *n == 3), "{:?}", net.healed);
    // A ring: one link cut and back, everything stays reachable.
    let mut ring = Net::new(4);
    for (a, b) in [(1, 2), (2, 3), (3, 4), (4, 1)] {
        ring.connect(a, b);
    }
    ring.run();
    ring.healed.clear();
    ring.disconnect(1, 2);
    ring.run();
    ring.connect(1, 2);
    ring.run();
    assert!(
        ring.healed.is_empty(),
        "nothing was unreachable: {:?}",
        ring.healed
    );
}

#[test]
fn unsubscribing_stops_the_flow_upstream() {
    let mut net = Net::line(3);
    net.subscribe(3, "viewer", "/t");
    net.publish(1, &event("/t", 1));
    // The channel goes and the interest with it.
    net.node(3).routes_mut().remove_channel(1);
    net.interest.insert(3, Vec::new());
    net.node(3).set_interest(Vec::new());
    net.run();
    net.publish(1, &event("/t", 2));
    assert_eq!(
        net.forwarded.get(&(1, 2)),
        Some(&1),
        "only the first crossed"
    );
    assert_eq!(net.got(), got(&[(3, "viewer", 1)]));
}

#[test]
fn a_filtered_interest_keeps_unwanted_events_off_the_links() {
    let mut net = Net::line(3);
    net.subscribe_with(3, "hot", "/temp", "$.c > 30", 1, ProxyAt::Subscriber);
    for (seq, c) in [(1, 10), (2, 40), (3, 20), (4, 50)] {
        let mut ev = event("/temp", seq);
        ev.fields.push(("c".into(), Value::Int(c)));
        net.publish(1, &ev);
    }
    assert_eq!(net.got(), got(&[(3, "hot", 2)]));
    assert_eq!(
        net.forwarded.get(&(1, 2)),
        Some(&2),
        "cool events stay at a"
    );
}

#[test]
fn a_proxy_at_the_publisher_scales_before_the_links() {
    let mut net = Net::line(3);
    net.subscribe_with(3, "half", "/v", "", 2, ProxyAt::Publisher);
    for seq in 1..=10 {
        net.publish(1, &event("/v", seq));
    }
    // Only the even sequence numbers cross any link.
    assert_eq!(net.forwarded.get(&(1, 2)), Some(&5));
    assert_eq!(net.forwarded.get(&(2, 3)), Some(&5));
}

#[test]
fn a_start_time_holds_the_event_at_its_daemon_until_then() {
    let mut net = Net::line(3);
    net.subscribe(3, "later", "/t");
    let start = net.now + 50_000_000;
    let mut ev = event("/t", 1);
    ev.header.start_time_ns = Some(start);
    let verdict = net.publish(1, &ev);
    assert!(matches!(verdict, Verdict::Hold { until, .. } if until == start));
    assert!(net.delivered.is_empty() && net.forwarded.is_empty());
    assert_eq!(net.node(1).poll_timeout(), Some(start));
    net.advance_to(start - 1);
    assert!(net.delivered.is_empty(), "not before its start time");
    net.advance_to(start);
    assert_eq!(net.got(), got(&[(3, "later", 1)]));
}

#[test]
fn an_event_that_expires_on_the_way_is_dropped_where_it_expires() {
    let mut net = Net::line(3);
    net.hop_ns = 10_000_000; // 10 ms a hop
    net.subscribe(3, "viewer", "/t");
    let mut ev = event("/t", 1);
    ev.header.source_time_ns = net.now;
    ev.header.expiry = Expiry::AfterNs(15_000_000); // lives 15 ms: one hop
    net.publish(1, &ev);
    assert!(
        net.delivered.is_empty(),
        "it would arrive 20 ms after publication"
    );
    assert_eq!(net.node(2).counters().expired, 0);
    assert_eq!(net.node(3).counters().expired, 1);
}

#[test]
fn a_pull_travels_to_the_named_daemon_and_back() {
    let mut net = Net::line(3);
    net.publish(1, &event("/log", 7));
    let pull = latest("a");
    let target = net.node(3).pull_target(&pull).expect("known daemon");
    assert_eq!(target, Some(1));
    let asker = Asker::Client {
        conn: 9,
        req: 4,
        max_reply: 1 << 20,
    };
    let now = net.now;
    net.node(3)
        .ask(asker, 1, 1 << 20, pull, now)
        .expect("a route to a");
    net.run();
    assert_eq!(net.pulls_done.len(), 1);
    let (at, conn, req, outcome) = &net.pulls_done[0];
    assert_eq!((*at, *conn, *req), (3, 9, 4));
    match outcome {
        PullOutcome::Reply(r) => {
            let ev = EventRef::parse(&r.events[0]).expect("parses");
            assert_eq!((ev.tag, ev.seq), ("/log", 7));
        }
        other => panic!("expected the event, got {other:?}"),
    }
    assert_eq!(net.node(2).pulls_in_flight(), 0, "the relay forgot it");
}

/// A replay that reads another daemon's store: a `Stored` pull travels to
/// the named daemon like a history pull, but there it is handed to the
/// router's store (`Output::Stored`, its node cleared) instead of being
/// answered from the pull buffers; the store's answer retraces the path.
#[test]
fn a_stored_pull_reaches_the_named_daemons_store_and_its_answer_comes_back() {
    let mut net = Net::line(3);
    let mut pull = latest("a");
    pull.query = PullQuery::Stored {
        from_pos: 0,
        from_seq: 0,
        from_ns: 0,
        origins: Origins::Only(7),
    };
    let asker = Asker::Client {
        conn: 9,
        req: 4,
        max_reply: 1 << 20,
    };
    let now = net.now;
    net.node(3)
        .ask(asker, 1, 1 << 20, pull.clone(), now)
        .expect("a route to a");
    net.run();
    assert!(
        net.pulls_done.is_empty(),
        "not answered from the pull buffers"
    );
    assert_eq!(net.stored_pulls.len(), 1, "handed to a's store, once");
    let (at, via, got) = net.stored_pulls.pop().expect("one");
    assert_eq!(at, 1, "at daemon a");
    assert!(matches!(via, Asker::Link { node: 2, .. }), "{via:?}");
    assert_eq!((got.node.as_str(), &got.query), ("", &pull.query));
    let reply = PullReply {
        req: 0,
        status: PullStatus::Complete,
        oldest: 1,
        newest: 1,
        held: 1,
        events: vec![encode(&event("/log", 5))],
    };
    net.node(1).answer(via, PullOutcome::Reply(reply));
    net.run();
    assert_eq!(net.pulls_done.len(), 1);
    let (at, conn, req, outcome) = &net.pulls_done[0];
    assert_eq!((*at, *conn, *req), (3, 9, 4));
    match outcome {
        PullOutcome::Reply(r) => assert_eq!(EventRef::parse(&r.events[0]).map(|e| e.seq), Ok(5)),
        other => panic!("expected the store's event, got {other:?}"),
    }
    assert_eq!(net.node(2).pulls_in_flight(), 0, "the relay forgot it");
}

#[test]
fn a_pull_for_an_unknown_daemon_is_refused_naming_it() {
    let mut net = Net::line(2);
    let pull = latest("zed");
    let err = net.node(1).pull_target(&pull).expect_err("unknown");
    let text = err.to_string();
    assert!(
        text.contains("zed") && text.contains("known: a, b"),
        "{text}"
    );
}

#[test]
fn a_pull_whose_link_closes_or_that_times_out_is_answered() {
    let mut net = Net::line(3);
    net.hop_ns = 1_000_000_000; // frames take a second a hop
    let now = net.now;
    net.node(3)
        .ask(client(1), 1, 1 << 20, latest("a"), now)
        .expect("sent");
    net.drain_outputs();
    assert_eq!(net.wires.len(), 1, "the request is on its way");
    // The link the request went out on closes before the answer.
    net.disconnect(2, 3);
    let closed = net.pulls_done.iter().find(|p| p.2 == 1).expect("answered");
    assert!(
        matches!(
            &closed.3,
            PullOutcome::Refused {
                code: ErrorCode::UnknownNode,
                ..
            }
        ),
        "{:?}",
        closed.3
    );
    // A pull nobody answers times out at the asker's daemon.
    net.connect(2, 3);
    let now = net.now;
    net.node(3)
        .ask(client(2), 1, 1 << 20, latest("a"), now)
        .expect("sent");
    net.wires.clear(); // the request is lost on the way
    let deadline = net.node(3).poll_timeout().expect("a pull deadline");
    net.advance_to(deadline);
    let timed_out = net.pulls_done.iter().find(|p| p.2 == 2).expect("answered");
    assert!(
        matches!(
            &timed_out.3,
            PullOutcome::Refused {
                code: ErrorCode::Timeout,
                ..
            }
        ),
        "{:?}",
        timed_out.3
    );
    assert_eq!(net.node(3).counters().pulls_timed_out, 1);
}

#[test]
fn a_forged_pull_answer_reaches_nobody() {
    let mut net = Net::line(3);
    net.hop_ns = 1_000_000;
    let asker = client(1);
    let pull = latest("a");
    let now = net.now;
    net.node(3).ask(asker, 1, 1 << 20, pull, now).expect("sent");
    net.drain_outputs();
    let id = match net.wires.iter().find(|w| w.2 == 3) {
        Some((_, _, _, _, LinkFrame::PullRequest { id, .. })) => *id,
        other => panic!("expected the request on the wire, got {other:?}"),
    };
    // Daemon 1 is not a neighbour of 3: its answer with the right id is
    // not taken.
    let forged = LinkFrame::PullAnswer {
        id,
        outcome: PullOutcome::Refused {
            code: ErrorCode::UnknownEndpoint,
            message: "forged".into(),
        },
    };
    assert!(net.node(3).on_link_frame(1, forged, now).is_none());
    net.drain_outputs();
    assert!(net.pulls_done.is_empty(), "{:?}", net.pulls_done);
    assert_eq!(net.node(3).pulls_in_flight(), 1);
}

#[test]
fn events_past_the_hop_limit_are_dropped_and_counted() {
    let mut net = Net::line(2);
    net.subscribe(2, "s", "/t");
    let bytes = encode(&event("/t", 1));
    let parsed = EventRef::parse(&bytes).expect("parses");
    let mut sink = Collect {
        here: 2,
        event: bytes.clone(),
        channels: Vec::new(),
        links: Vec::new(),
    };
    let verdict = net.node(2).on_forward(1, 1, 32, &parsed, || 0, &mut sink);
    assert_eq!(verdict, Verdict::HopLimited);
    assert!(sink.channels.is_empty());
    assert_eq!(net.node(2).counters().hop_limited, 1);
}

#[test]
fn a_scale_changed_at_run_time_changes_what_crosses_the_links() {
    let mut net = Net::line(3);
    net.subscribe_with(3, "v", "/v", "", 1, ProxyAt::Publisher);
    for seq in 1..=4 {
        net.publish(1, &event("/v", seq));
    }
    assert_eq!(
        net.forwarded.get(&(1, 2)),
        Some(&4),
        "unscaled: every event"
    );
    // The subscriber's QoS changes to 1 in 4, its proxy at the publisher:
    // the daemon re-advertises and the publisher's daemon scales.
    let mut interest = net.interest[&3].clone();
    interest[0].scale = 4;
    net.interest.insert(3, interest.clone());
    net.node(3).set_interest(interest);
    net.run();
    for seq in 5..=12 {
        net.publish(1, &event("/v", seq));
    }
    assert_eq!(
        net.forwarded.get(&(1, 2)),
        Some(&(4 + 2)),
        "then 8 and 12 only"
    );
    assert_eq!(net.forwarded.get(&(2, 3)), Some(&(4 + 2)));
}

/// Regression (found by `node_props.rs`): when the link a pull went out on
/// closed, the daemon forgot the now unreachable target (prune) before it
/// wrote the refusal, which then read "the link toward daemon ? closed".
#[test]
fn a_pull_refused_after_its_target_became_unreachable_names_it() {
    let mut net = Net::line(3);
    net.hop_ns = 1_000_000_000;
    let asker = client(1);
    let pull = latest("a");
    let now = net.now;
    net.node(3).ask(asker, 1, 1 << 20, pull, now).expect("sent");
    net.drain_outputs();
    // Cutting c's only link leaves it alone: it forgets a and b.
    net.disconnect(2, 3);
    assert_eq!(net.node(3).topology().len(), 1, "c pruned a and b");
    match &net.pulls_done[..] {
        [(3, 1, 1, PullOutcome::Refused { code, message })] => {
            assert_eq!(*code, ErrorCode::UnknownNode);
            assert!(message.contains("daemon a "), "{message}");
        }
        other => panic!("expected one refusal, got {other:?}"),
    }
}

/// Regression (found by `node_props.rs`): on a line a-b-c-d-e-f, cutting
/// b-c and e-f makes c and e forget a and b (they prune what they cannot
/// reach when their own links change), while d, whose links did not
/// change, keeps a's advert. When b-c comes back, c learns a's advert
/// again and floods it to d, which already has that version and stops the
/// flood: e never learnt a again, and a's subscriber got nothing from e.
#[test]
fn a_daemon_that_forgot_another_learns_it_again_when_the_partition_heals() {
    let mut net = Net::line(6);
    net.subscribe(1, "far", "/t");
    net.disconnect(2, 3);
    net.disconnect(5, 6);
    net.connect(2, 3);
    assert!(
        net.node(5).topology().name_of(1).is_some(),
        "e knows a again"
    );
    net.publish(5, &event("/t", 1));
    assert_eq!(net.got(), got(&[(1, "far", 1)]));
}

#[test]
fn a_restarted_daemon_supersedes_its_old_advert_everywhere() {
    // a – b – c; c restarts under a new id (its ids are random per start)
    // and links to b again.
    let mut net = Net::line(3);
    net.disconnect(2, 3);
    net.nodes.remove(&3);
    net.nodes
        .insert(9, Node::new(9, "c", NodeLimits::default(), 0));
    net.connect(2, 9);
    // a never had a link change of its own, yet forgets the old c ...
    let known: Vec<u64> = net.node(1).topology().nodes().iter().map(|n| n.0).collect();
    assert_eq!(known, vec![1, 2, 9], "the old c (3) is dropped at a");
    // ... and a pull for node c goes to the new one.
    let pull = latest("c");
    assert_eq!(net.node(1).pull_target(&pull).expect("known"), Some(9));
}

/// The payload sequence numbers daemon `at`'s channel `ch` got, in order.
fn seqs_at(net: &Net, at: Id, ch: &str) -> Vec<u64> {
    net.delivered
        .iter()
        .filter(|(id, c, _)| *id == at && c == ch)
        .map(|(_, _, bytes)| EventRef::parse(bytes).expect("parses").seq)
        .collect()
}

/// Issue 25, a partition with `reliable`: daemons a – b – c, a subscriber
/// at c. c is cut off (b – c down), a publishes, the link comes back: what
/// a published meanwhile was held at a for c (c's interest kept while it
/// was away); for a settling second after c is reachable again what a
/// publishes for c is held too (not routed live), then it all goes to c as
/// `ReliableTo`, before anything newer — c gets every event once, in
/// order.
#[test]
fn a_reliable_stream_loses_nothing_across_a_healed_partition() {
    let mut net = Net::line(3);
    net.reliable = true;
    net.subscribe(3, "viewer", "/t/**");
    for seq in 1..=5 {
        net.publish(1, &event("/t/x", seq));
    }
    net.disconnect(2, 3);
    assert!(net.node(1).has_away(), "c is away from a");
    for seq in 6..=15 {
        net.publish(1, &event("/t/x", seq));
    }
    assert_eq!(seqs_at(&net, 3, "viewer"), (1..=5).collect::<Vec<_>>());
    assert_eq!(net.node(1).away_held(), (1, 10, net.node(1).away_held().2));
    net.connect(2, 3);
    for seq in 16..=18 {
        net.publish(1, &event("/t/x", seq));
    }
    assert_eq!(
        seqs_at(&net, 3, "viewer"),
        (1..=5).collect::<Vec<_>>(),
        "settling: nothing goes to c live before what was held for it"
    );
    net.settle();
    for seq in 19..=20 {
        net.publish(1, &event("/t/x", seq));
    }
    assert_eq!(
        seqs_at(&net, 3, "viewer"),
        (1..=20).collect::<Vec<_>>(),
        "c gets every event once, in order"
    );
    assert_eq!(net.released, vec![(1, 3, 13)]);
    let c = net.node(1).away_counters();
    assert_eq!((c.held, c.released, c.dropped_full), (13, 13, 0));
    assert!(!net.node(1).has_away());
    assert_eq!(net.node(1).away_held().1, 0);
}

/// Without `reliable` nothing is held: the same partition loses what it
/// lasts (so the test above can fail).
#[test]
fn a_best_effort_stream_loses_what_a_partition_lasts() {
    let mut net = Net::line(3);
    net.subscribe(3, "viewer", "/t/**");
    net.publish(1, &event("/t/x", 1));
    net.disconnect(2, 3);
    net.publish(1, &event("/t/x", 2));
    net.connect(2, 3);
    net.publish(1, &event("/t/x", 3));
    assert_eq!(seqs_at(&net, 3, "viewer"), vec![1, 3]);
}

/// A ring a – b – c – d – a with c cut off from both neighbours: the
/// events held for c go back along the path a's live events take (the
/// origin's tree), whichever link comes back first; events c's kept
/// interest does not match (another tag) are not held; the hold's bound
/// drops the oldest and counts it.
#[test]
fn a_partition_in_a_ring_holds_only_what_the_away_daemon_wanted_and_bounds_it() {
    let mut net = Net::new(4);
    for (a, b) in [(1, 2), (2, 3), (3, 4), (4, 1)] {
        net.connect(a, b);
    }
    net.reliable = true;
    net.subscribe(3, "viewer", "/t/**");
    net.disconnect(2, 3);
    net.disconnect(3, 4);
    for seq in 1..=4 {
        net.publish(1, &event("/t/x", seq));
        net.publish(1, &event("/other", 100 + seq));
    }
    assert_eq!(net.node(1).away_held().1, 4, "only /t/** is held for c");
    net.connect(3, 4);
    net.connect(2, 3);
    net.settle();
    net.publish(1, &event("/t/x", 5));
    assert_eq!(seqs_at(&net, 3, "viewer"), vec![1, 2, 3, 4, 5]);

    // The bound: at most 3 events per away daemon; the oldest go.
    let mut net = Net::new(3);
    net.nodes.insert(
        1,
        tagwire_core::node::Node::new(
            1,
            "a",
            tagwire_core::node::NodeLimits {
                away: tagwire_core::node::AwayLimits {
                    max_events: 3,
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
        ),
    );
    net.connect(1, 2);
    net.connect(2, 3);
    net.reliable = true;
    net.subscribe(3, "viewer", "/t/**");
    net.disconnect(2, 3);
    for seq in 1..=5 {
        net.publish(1, &event("/t/x", seq));
    }
    assert_eq!(net.node(1).away_counters().dropped_full, 2);
    net.connect(2, 3);
    net.settle();
    assert_eq!(seqs_at(&net, 3, "viewer"), vec![3, 4, 5]);
}

/// A daemon that comes back under a new id (a restart) is not the one
/// that was away: what was held for the old id is dropped and counted.
#[test]
fn a_daemon_restarted_under_a_new_id_gets_nothing_held_for_its_old_one() {
    let mut net = Net::line(3);
    net.reliable = true;
    net.subscribe(3, "viewer", "/t/**");
    net.disconnect(2, 3);
    for seq in 1..=3 {
        net.publish(1, &event("/t/x", seq));
    }
    assert_eq!(net.node(1).away_held().1, 3);
    // "c" again, as daemon 9.
    net.nodes.insert(
        9,
        tagwire_core::node::Node::new(9, "c", Default::default(), 0),
    );
    net.connect(2, 9);
    assert_eq!(net.node(1).away_held().1, 0);
    assert_eq!(net.node(1).away_counters().dropped_gone, 3);
    assert!(net.released.is_empty());
}

/// Held events older than the age bound are dropped (counted), and a
/// daemon away longer than it, once it holds nothing, is forgotten.
#[test]
fn held_events_and_away_daemons_expire_at_the_age_bound() {
    let mut net = Net::line(3);
    net.reliable = true;
    net.subscribe(3, "viewer", "/t/**");
    net.disconnect(2, 3);
    net.publish(1, &event("/t/x", 1));
    let t0 = net.now;
    let age = tagwire_core::node::AwayLimits::default().max_age_ns;
    net.now = t0 + age / 2;
    net.publish(1, &event("/t/x", 2));
    net.node(1).expire_unreachable(t0 + age + 1);
    assert_eq!(net.node(1).away_counters().dropped_age, 1);
    assert_eq!(net.node(1).away_held().1, 1);
    net.node(1).expire_unreachable(t0 + 2 * age + 2);
    assert_eq!(net.node(1).away_counters().dropped_age, 2);
    assert_eq!(net.node(1).away_held(), (0, 0, 0));
    assert!(!net.node(1).has_away());
}
