//! Hop-by-hop acknowledgement on links (issue 25, link version 3): version
//! negotiation with older peers, `Reliable` frames delivered once and
//! acknowledged, events of a reliable tag held until acknowledged and
//! routed again over the next route when their link is lost, and bad
//! `Reliable`/`Ack` frames refused by name. The "peers" are raw clients
//! speaking link frames.

mod common;

use bytes::{Bytes, BytesMut};
use common::{event, link_frame, link_peer as peer, publish_frame, recv_link, tcp_config, Raw};
use tagwire_proto::{Ack, Event, Frame, Interest, LinkFrame, LINK_VERSION};
use tagwire_router::{FederationConfig, Router, RouterConfig, RouterHandle};

fn router(qos: &[(&str, &str)]) -> RouterHandle {
    Router::start(RouterConfig {
        federation: FederationConfig::default(),
        qos: qos
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..tcp_config()
    })
    .expect("start")
}

/// Links a raw peer as daemon `node` saying `version`; returns it, the
/// version the router answered and the router's node id.
fn linked(h: &RouterHandle, version: u16, node: u64) -> (Raw, u16, u64) {
    let mut raw = Raw::hello(h);
    raw.send_bytes(&link_frame(&peer(version, node)));
    match recv_link(&mut raw) {
        Ok(LinkFrame::Peer {
            version, node: r, ..
        }) => (raw, version, r),
        other => panic!("expected the router's Peer, got {other:?}"),
    }
}

/// Waits for the router's close, returning the error or close message.
fn closing_message(raw: &mut Raw) -> String {
    loop {
        match recv_link(raw) {
            Ok(_) => continue,
            Err(Some(Frame::Error { message, .. }))
            | Err(Some(Frame::Close {
                reason: message, ..
            })) => return message,
            Err(Some(_)) => continue,
            Err(None) => panic!("closed without a message"),
        }
    }
}

/// The next frame of the kind `pick` accepts (others skipped); bounded by
/// the raw client's read timeout.
fn next_matching<T>(raw: &mut Raw, mut pick: impl FnMut(LinkFrame) -> Option<T>) -> T {
    for _ in 0..10_000 {
        match recv_link(raw) {
            Ok(f) => {
                if let Some(t) = pick(f) {
                    return t;
                }
            }
            Err(Some(_)) => {}
            Err(None) => panic!("the link closed"),
        }
    }
    panic!("no such frame in 10,000");
}

/// A `Ping` round trip on a link (link frames meanwhile are skipped).
fn link_ping(raw: &mut Raw, nonce: u64) {
    raw.send(&Frame::Ping { nonce });
    loop {
        match recv_link(raw) {
            Ok(_) => continue,
            Err(Some(Frame::Pong { nonce: n })) if n == nonce => return,
            Err(Some(_)) => continue,
            Err(None) => panic!("the link closed"),
        }
    }
}

fn encoded(e: &Event) -> Bytes {
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("encodable");
    b.freeze()
}

fn numbered(publisher: &str, tag: &str, seq: u64) -> Event {
    let mut e = event(publisher, tag, format!("n{seq}"));
    e.header.seq = seq;
    e
}

#[test]
fn a_version_3_peer_gets_version_3_and_a_version_2_peer_gets_version_2() {
    let h = router(&[]);
    let (_newest, v, _) = linked(&h, LINK_VERSION, 33);
    assert_eq!(v, LINK_VERSION);
    let (_new, v, _) = linked(&h, 3, 31);
    assert_eq!(v, 3);
    // An older daemon still links, on its version.
    let (_old, v, _) = linked(&h, 2, 32);
    assert_eq!(v, 2);
}

#[test]
fn reliable_frames_are_delivered_once_and_acknowledged() {
    let h = router(&[]);
    let (mut raw, v, _) = linked(&h, 3, 41);
    assert_eq!(v, 3);
    let mut sub = Raw::hello(&h).subscriber("/s", "/r/**", &[]);
    sub.ping(1);
    // Events 1, 2, 3 of publisher /p at daemon 41, then a copy of 2 that
    // came over another route.
    for (seq, n) in [(1, 1), (2, 2), (3, 3), (4, 2)] {
        raw.send_bytes(&link_frame(&LinkFrame::Reliable {
            seq,
            origin: 41,
            hops: 0,
            event: encoded(&numbered("/p", "/r/x", n)),
        }));
    }
    let done = next_matching(&mut raw, |f| match f {
        LinkFrame::Ack(Ack { done, .. }) if done == 4 => Some(done),
        _ => None,
    });
    assert_eq!(done, 4, "all four settled (the copy as a duplicate)");
    let mut got = Vec::new();
    while got.len() < 3 {
        match sub.recv() {
            Some(Frame::Deliver { event, .. }) => {
                got.push(Event::decode(&event).expect("event").header.seq)
            }
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(got, vec![1, 2, 3]);
    sub.ping(2);
    // Nothing more came: the copy of 2 was dropped.
    let mut more = 0;
    sub.send(&Frame::Ping { nonce: 3 });
    while let Some(f) = sub.recv() {
        match f {
            Frame::Deliver { .. } => more += 1,
            Frame::Pong { nonce: 3 } => break,
            _ => {}
        }
    }
    assert_eq!(more, 0, "the duplicate was not delivered");
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.reliable.duplicates, 1, "{:?}", f.reliable);
    assert!(f.links.iter().all(|l| l.acknowledged), "{:?}", f.links);
}

#[test]
fn a_gap_an_unsent_ack_and_reliable_frames_on_a_version_2_link_close_it_by_name() {
    let h = router(&[]);
    let ev = encoded(&numbered("/p", "/r/x", 1));
    let (mut raw, _, _) = linked(&h, 3, 51);
    raw.send_bytes(&link_frame(&LinkFrame::Reliable {
        seq: 2,
        origin: 51,
        hops: 0,
        event: ev.clone(),
    }));
    let m = closing_message(&mut raw);
    assert!(m.contains("sequence number 2, expected 1"), "{m}");

    let (mut raw, _, _) = linked(&h, 3, 52);
    raw.send_bytes(&link_frame(&LinkFrame::Ack(Ack {
        done: 5,
        ranges: vec![],
    })));
    let m = closing_message(&mut raw);
    assert!(m.contains("only up to 0 were sent"), "{m}");

    let (mut raw, v, _) = linked(&h, 2, 53);
    assert_eq!(v, 2);
    raw.send_bytes(&link_frame(&LinkFrame::Reliable {
        seq: 1,
        origin: 53,
        hops: 0,
        event: ev,
    }));
    let m = closing_message(&mut raw);
    assert!(m.contains("version 2"), "{m}");
}

#[test]
fn a_reliable_tags_events_are_held_until_acknowledged_and_go_over_the_next_route_when_the_link_is_lost(
) {
    let h = router(&[("reliability", "reliable")]);
    // Daemon 61 wants /r/**; 62 links both to the router and to 61, so when
    // the router's link to 61 is lost the route to it goes through 62.
    let (mut a, va, me) = linked(&h, 3, 61);
    let (mut b, vb, _) = linked(&h, 3, 62);
    assert_eq!((va, vb), (3, 3));
    a.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 61,
        version: 1,
        name: "raw61".into(),
        neighbors: vec![me, 62],
        interest: vec![Interest::pattern("/r/**")],
    }));
    b.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 62,
        version: 1,
        name: "raw62".into(),
        neighbors: vec![me, 61],
        interest: vec![],
    }));
    link_ping(&mut a, 1);
    link_ping(&mut b, 1);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    for n in 1..=3 {
        publisher.send_bytes(&publish_frame(1, &numbered("/pub", "/r/x", n)));
    }
    publisher.ping(2);
    let mut seqs = Vec::new();
    while seqs.len() < 3 {
        let (seq, ev) = next_matching(&mut a, |f| match f {
            LinkFrame::Reliable { seq, event, .. } => Some((seq, event)),
            LinkFrame::Forward { .. } => panic!("a reliable tag's event went as Forward"),
            _ => None,
        });
        seqs.push((seq, Event::decode(&ev).expect("event").header.seq));
    }
    assert_eq!(seqs, vec![(1, 1), (2, 2), (3, 3)]);
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    let to_a = f
        .links
        .iter()
        .find(|l| l.peer == "raw61")
        .expect("link to 61");
    assert_eq!(to_a.unacked, 3, "held until acknowledged: {to_a:?}");
    // 61 acknowledges the first, then its link is lost.
    a.send_bytes(&link_frame(&LinkFrame::Ack(Ack {
        done: 1,
        ranges: vec![],
    })));
    link_ping(&mut a, 3);
    drop(a);
    // The two it did not acknowledge go to 62, toward 61.
    let mut again = Vec::new();
    while again.len() < 2 {
        let (seq, ev) = next_matching(&mut b, |f| match f {
            LinkFrame::Reliable { seq, event, .. } => Some((seq, event)),
            _ => None,
        });
        again.push((seq, Event::decode(&ev).expect("event").header.seq));
    }
    assert_eq!(again, vec![(1, 2), (2, 3)]);
}

#[test]
fn a_link_the_peer_stops_advertising_gives_back_its_held_events_over_the_next_route_at_once() {
    let h = router(&[("reliability", "reliable")]);
    let (mut a, _, me) = linked(&h, 3, 71);
    let (mut b, _, _) = linked(&h, 3, 72);
    a.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 71,
        version: 1,
        name: "raw71".into(),
        neighbors: vec![me, 72],
        interest: vec![Interest::pattern("/r/**")],
    }));
    b.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 72,
        version: 1,
        name: "raw72".into(),
        neighbors: vec![me, 71],
        interest: vec![],
    }));
    link_ping(&mut a, 1);
    link_ping(&mut b, 1);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    for n in 1..=2 {
        publisher.send_bytes(&publish_frame(1, &numbered("/pub", "/r/x", n)));
    }
    publisher.ping(2);
    for want in 1..=2 {
        let got = next_matching(&mut a, |f| match f {
            LinkFrame::Reliable { seq, .. } => Some(seq),
            _ => None,
        });
        assert_eq!(got, want);
    }
    // 71 says (through 72, as a flood would) that it lost its link to the
    // router, while the router's connection to it still looks alive.
    b.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 71,
        version: 2,
        name: "raw71".into(),
        neighbors: vec![72],
        interest: vec![Interest::pattern("/r/**")],
    }));
    let mut again = Vec::new();
    while again.len() < 2 {
        let ev = next_matching(&mut b, |f| match f {
            LinkFrame::Reliable { event, .. } => Some(event),
            _ => None,
        });
        again.push(Event::decode(&ev).expect("event").header.seq);
    }
    assert_eq!(again, vec![1, 2], "the held events, in order, over 72");
    // A third event takes the new route after them.
    publisher.send_bytes(&publish_frame(1, &numbered("/pub", "/r/x", 3)));
    publisher.ping(3);
    let ev = next_matching(&mut b, |f| match f {
        LinkFrame::Reliable { event, .. } => Some(event),
        _ => None,
    });
    assert_eq!(Event::decode(&ev).expect("event").header.seq, 3);
}

#[test]
fn a_reliable_event_that_goes_nowhere_here_is_acknowledged_as_failed() {
    // No subscriber and no other link: the sender's view of the routes
    // disagrees with this daemon's, so it must route the event again
    // rather than take it as delivered.
    let h = router(&[]);
    let (mut raw, _, _) = linked(&h, 3, 81);
    raw.send_bytes(&link_frame(&LinkFrame::Reliable {
        seq: 1,
        origin: 81,
        hops: 0,
        event: encoded(&numbered("/p", "/nobody/x", 1)),
    }));
    let ack = next_matching(&mut raw, |f| match f {
        LinkFrame::Ack(a) => Some(a),
        _ => None,
    });
    assert_eq!(
        ack,
        Ack {
            done: 1,
            ranges: vec![tagwire_proto::AckRange {
                first: 1,
                last: 1,
                failed: true
            }],
        }
    );
}

fn router_with(f: FederationConfig) -> RouterHandle {
    Router::start(RouterConfig {
        federation: f,
        qos: [("reliability".to_string(), "reliable".to_string())]
            .into_iter()
            .collect(),
        ..tcp_config()
    })
    .expect("start")
}

/// A raw peer wanting `/r/**` that never acknowledges, and a publisher of
/// `n` events; returns the peer, the publisher and the router.
fn unacknowledging(f: FederationConfig, n: u64) -> (Raw, Raw, RouterHandle) {
    let h = router_with(f);
    let (mut a, _, me) = linked(&h, 3, 91);
    a.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 91,
        version: 1,
        name: "raw91".into(),
        neighbors: vec![me],
        interest: vec![Interest::pattern("/r/**")],
    }));
    link_ping(&mut a, 1);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    for k in 1..=n {
        publisher.send_bytes(&publish_frame(1, &numbered("/pub", "/r/x", k)));
    }
    (a, publisher, h)
}

#[test]
fn a_full_window_gives_up_the_oldest_or_refuses_the_new_counted_and_the_publisher_told() {
    use tagwire_router::config::ReliableWindowFull;
    // drop_oldest: every event is sent; the oldest two are given up.
    let (mut a, mut publisher, h) = unacknowledging(
        FederationConfig {
            reliable_window_events: 2,
            ..FederationConfig::default()
        },
        4,
    );
    publisher.ping(2);
    for want in 1..=4 {
        let seq = next_matching(&mut a, |f| match f {
            LinkFrame::Reliable { seq, .. } => Some(seq),
            _ => None,
        });
        assert_eq!(seq, want);
    }
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!((f.reliable.window_dropped, f.links[0].unacked), (2, 2));

    // reject: two are held and sent, two refused, and the publisher hears it.
    let (mut a, mut publisher, h) = unacknowledging(
        FederationConfig {
            reliable_window_events: 2,
            reliable_window_full: ReliableWindowFull::Reject,
            ..FederationConfig::default()
        },
        4,
    );
    publisher.expect_error(
        tagwire_proto::ErrorCode::QueueFull,
        "reliable window is full",
    );
    for want in 1..=2 {
        let seq = next_matching(&mut a, |f| match f {
            LinkFrame::Reliable { seq, .. } => Some(seq),
            _ => None,
        });
        assert_eq!(seq, want);
    }
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!((f.reliable.rejected, f.links[0].unacked), (2, 2));
}

#[test]
fn a_window_over_the_protocols_or_an_unknown_full_policy_is_refused_by_name() {
    let e = FederationConfig {
        reliable_window_events: tagwire_proto::MAX_RELIABLE_WINDOW + 1,
        ..FederationConfig::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("reliable_window_events"), "{e}");
    let e = toml::from_str::<RouterConfig>("[federation]\nreliable_window_full = \"block\"\n")
        .unwrap_err();
    assert!(
        e.to_string().contains("drop_oldest") && e.to_string().contains("reject"),
        "{e}"
    );
}

/// `ReliableTo` (link version 7): one addressed to this daemon is delivered
/// to its subscribers (through the dedupe window: a copy is dropped); one
/// at the hop limit is dropped and counted, acknowledged done; one for a
/// daemon this one knows no way to is acknowledged *failed* (its sender
/// holds it again). None closes the link.
#[test]
fn reliable_to_frames_are_delivered_here_dropped_at_the_hop_limit_or_failed_when_unroutable() {
    let h = router(&[]);
    let (mut raw, v, me) = linked(&h, LINK_VERSION, 71);
    assert_eq!(v, LINK_VERSION);
    let mut sub = Raw::hello(&h).subscriber("/s", "/r/**", &[]);
    sub.ping(1);
    let frames = [
        (me, 0, 1),
        (me, tagwire_core::federation::MAX_HOPS, 2),
        (0x0999, 0, 3),
        (me, 0, 1),
        (me, 0, 4),
    ];
    for (i, (to, hops, n)) in frames.into_iter().enumerate() {
        raw.send_bytes(&link_frame(&LinkFrame::ReliableTo {
            seq: i as u64 + 1,
            origin: 71,
            hops,
            to,
            event: encoded(&numbered("/p", "/r/x", n)),
        }));
    }
    let mut failed = Vec::new();
    next_matching(&mut raw, |f| match f {
        LinkFrame::Ack(ack) => {
            failed.extend(
                ack.ranges
                    .iter()
                    .filter(|r| r.failed)
                    .flat_map(|r| r.first..=r.last),
            );
            (ack.done >= 5).then_some(())
        }
        _ => None,
    });
    failed.dedup();
    assert_eq!(failed, vec![3], "only the one for an unknown daemon failed");
    let mut got = Vec::new();
    while got.len() < 2 {
        match sub.recv() {
            Some(Frame::Deliver { event, .. }) => {
                got.push(Event::decode(&event).expect("event").header.seq)
            }
            Some(_) => {}
            None => break,
        }
    }
    sub.send(&Frame::Ping { nonce: 9 });
    while let Some(f) = sub.recv() {
        match f {
            Frame::Deliver { event, .. } => {
                got.push(Event::decode(&event).expect("event").header.seq)
            }
            Frame::Pong { nonce: 9 } => break,
            _ => {}
        }
    }
    assert_eq!(got, vec![1, 4], "delivered here once each, nothing else");
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    let r = &f.reliable;
    assert_eq!(
        (r.to_delivered, r.to_dropped, r.duplicates),
        (2, 1, 1),
        "{r:?}"
    );
    link_ping(&mut raw, 10);
    // On a link of version 6 it is refused by name.
    let (mut old, v, me) = linked(&h, 6, 72);
    assert_eq!(v, 6);
    old.send_bytes(&link_frame(&LinkFrame::ReliableTo {
        seq: 1,
        origin: 72,
        hops: 0,
        to: me,
        event: encoded(&numbered("/p", "/r/x", 5)),
    }));
    let m = closing_message(&mut old);
    assert!(m.contains("ReliableTo frame on a link of version 6"), "{m}");
}
