//! A daemon's links under bad input from a peer (one test per case of the
//! federation issue): a wrong link version, link frames before `Peer`, a
//! peer claiming another daemon's id or this daemon's, a flood of interest,
//! events nobody asked for, a peer that never reads, and a configured peer
//! that is not there. The "peer" is a raw client speaking link frames.

mod common;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{event, link_frame, publish_frame, recv_link, tcp_config, Raw, WAIT};
use tagwire_proto::{ErrorCode, Frame, Interest, LinkFrame, LINK_VERSION};
use tagwire_router::{FederationConfig, Router, RouterConfig, RouterHandle};

fn router(f: FederationConfig) -> RouterHandle {
    Router::start(RouterConfig {
        federation: f,
        ..tcp_config()
    })
    .expect("start")
}

/// A `Peer` for a connection of band `band`.
fn peer_on(node: u64, name: &str, band: &str) -> LinkFrame {
    match peer(node, name) {
        LinkFrame::Peer {
            version,
            node,
            name,
            cluster,
            bands,
            ..
        } => LinkFrame::Peer {
            version,
            node,
            name,
            cluster,
            band: band.into(),
            bands,
            udp_bands: vec![],
        },
        other => other,
    }
}

fn peer(node: u64, name: &str) -> LinkFrame {
    LinkFrame::Peer {
        version: LINK_VERSION,
        node,
        name: name.into(),
        cluster: "tagwire".into(),
        band: "normal".into(),
        bands: vec![],
        udp_bands: vec![],
    }
}

/// A raw peer linked as daemon `node`; returns it and the router's node id.
fn linked(h: &RouterHandle, node: u64) -> (Raw, u64) {
    let mut raw = Raw::hello(h);
    raw.send_bytes(&link_frame(&peer(node, &format!("raw{node}"))));
    match recv_link(&mut raw) {
        Ok(LinkFrame::Peer { node: theirs, .. }) => (raw, theirs),
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

fn federation(h: &RouterHandle) -> tagwire_router::FederationInfo {
    let mut raw = Raw::hello(h);
    raw.list().federation.unwrap_or_default()
}

#[test]
fn a_peer_speaking_another_link_version_is_refused_by_name() {
    let h = router(FederationConfig::default());
    let mut raw = Raw::hello(&h);
    raw.send_bytes(&link_frame(&LinkFrame::Peer {
        version: LINK_VERSION + 1,
        node: 7,
        name: "future".into(),
        cluster: "tagwire".into(),
        band: "normal".into(),
        bands: vec![],
        udp_bands: vec![],
    }));
    let m = closing_message(&mut raw);
    let theirs = format!("link protocol version {}", LINK_VERSION + 1);
    assert!(
        m.contains(&theirs) && m.contains(&LINK_VERSION.to_string()),
        "{m}"
    );
}

/// The router's answer to a raw peer's `Peer` of `version`.
fn answer_to(h: &RouterHandle, version: u16, node: u64) -> LinkFrame {
    let mut raw = Raw::hello(h);
    let LinkFrame::Peer { name, .. } = peer(node, "raw") else {
        unreachable!("peer() makes a Peer")
    };
    raw.send_bytes(&link_frame(&LinkFrame::Peer {
        version,
        node,
        name,
        cluster: "tagwire".into(),
        band: "normal".into(),
        bands: vec![],
        udp_bands: vec![],
    }));
    recv_link(&mut raw).unwrap_or_else(|e| panic!("no Peer in answer: {e:?}"))
}

#[test]
fn an_acceptor_lists_its_bands_udp_ports_to_a_version_6_dialer_only() {
    let h = Router::start(RouterConfig {
        udp: tagwire_router::config::UdpConfig {
            listen: "127.0.0.1:0".parse().ok(),
            ..Default::default()
        },
        ..tcp_config()
    })
    .expect("start");
    let LinkFrame::Peer {
        version, udp_bands, ..
    } = answer_to(&h, 6, 61)
    else {
        panic!("not a Peer")
    };
    assert_eq!(version, 6);
    let names: Vec<&str> = udp_bands.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(
        names,
        ["low", "normal", "high", "critical"],
        "{udp_bands:?}"
    );
    let normal = udp_bands.iter().find(|(b, _)| b == "normal").map(|b| b.1);
    assert_eq!(
        normal,
        h.udp_addr().map(|a| a.port()),
        "the default band's port"
    );
    // A version-5 dialer would refuse bytes after the TCP ports.
    let LinkFrame::Peer {
        version, udp_bands, ..
    } = answer_to(&h, 5, 62)
    else {
        panic!("not a Peer")
    };
    assert_eq!((version, udp_bands), (5, vec![]));
}

#[test]
fn a_daemon_capped_at_link_version_5_refuses_the_newest_naming_5() {
    let h = router(FederationConfig {
        link_version: 5,
        ..FederationConfig::default()
    });
    let mut raw = Raw::hello(&h);
    raw.send_bytes(&link_frame(&peer(63, "raw63")));
    let m = closing_message(&mut raw);
    assert!(
        m.contains(&format!("link protocol version {LINK_VERSION}")) && m.contains("speaks 2 to 5"),
        "{m}"
    );
    let LinkFrame::Peer { version, .. } = answer_to(&h, 5, 64) else {
        panic!("not a Peer")
    };
    assert_eq!(version, 5);
}

#[test]
fn a_link_version_outside_what_the_daemon_speaks_is_refused_at_start() {
    for v in [1, LINK_VERSION + 1] {
        let e = Router::start(RouterConfig {
            federation: FederationConfig {
                link_version: v,
                ..FederationConfig::default()
            },
            ..tcp_config()
        })
        .expect_err("refused");
        assert!(e.to_string().contains("federation.link_version"), "{e}");
    }
}

#[test]
fn link_frames_before_peer_close_the_connection() {
    let h = router(FederationConfig::default());
    let mut raw = Raw::hello(&h);
    raw.send_bytes(&link_frame(&LinkFrame::TimeProbe { id: 1, t1: 1 }));
    let m = closing_message(&mut raw);
    assert!(m.contains("before Peer"), "{m}");
}

#[test]
fn a_peer_claiming_a_linked_daemons_id_or_ours_is_refused() {
    let h = router(FederationConfig::default());
    let (_first, router_id) = linked(&h, 42);
    let mut impostor = Raw::hello(&h);
    impostor.send_bytes(&link_frame(&peer(42, "impostor")));
    let m = closing_message(&mut impostor);
    assert!(m.contains("already linked"), "{m}");
    let mut mirror = Raw::hello(&h);
    mirror.send_bytes(&link_frame(&peer(router_id, "mirror")));
    let m = closing_message(&mut mirror);
    assert!(m.contains("claims this daemon's node id"), "{m}");
    // The genuine link is still there.
    assert_eq!(federation(&h).links.len(), 1);
}

#[test]
fn a_band_connection_must_follow_the_link_and_come_to_its_bands_listener() {
    let h = router(FederationConfig::default());
    // A band connection for a daemon that has no link yet.
    let mut early = Raw::hello_tcp_on(&h, "high");
    early.send_bytes(&link_frame(&peer_on(21, "raw21", "high")));
    let m = closing_message(&mut early);
    assert!(m.contains("before its link on the default band"), "{m}");
    // A connection on the high band's listener that claims to be for critical.
    let (_link, _) = linked(&h, 21);
    let mut wrong = Raw::hello_tcp_on(&h, "high");
    wrong.send_bytes(&link_frame(&peer_on(21, "raw21", "critical")));
    let m = closing_message(&mut wrong);
    assert!(m.contains("came to band high's listener"), "{m}");
    // The right one is attached, a second one for the same band is not.
    let mut high = Raw::hello_tcp_on(&h, "high");
    high.send_bytes(&link_frame(&peer_on(21, "raw21", "high")));
    assert!(matches!(recv_link(&mut high), Ok(LinkFrame::Peer { .. })));
    let mut again = Raw::hello_tcp_on(&h, "high");
    again.send_bytes(&link_frame(&peer_on(21, "raw21", "high")));
    let m = closing_message(&mut again);
    assert!(m.contains("already has a band high connection"), "{m}");
    assert_eq!(federation(&h).links[0].bands, vec!["high"]);
}

#[test]
fn a_flood_of_interest_is_refused_and_the_link_stays() {
    let h = router(FederationConfig {
        max_interest: 4,
        ..FederationConfig::default()
    });
    let (mut raw, router_id) = linked(&h, 9);
    let interest: Vec<Interest> = (0..5)
        .map(|i| Interest::pattern(format!("/flood/{i}")))
        .collect();
    raw.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 9,
        version: 1,
        name: "raw9".into(),
        neighbors: vec![router_id],
        interest,
    }));
    loop {
        match recv_link(&mut raw) {
            Ok(_) => continue,
            Err(Some(Frame::Error { code, message, .. })) => {
                assert_eq!(code, ErrorCode::LimitReached);
                assert!(message.contains("max_interest"), "{message}");
                break;
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    link_ping(&mut raw, 5);
    assert_eq!(federation(&h).refused_adverts, 1);
}

#[test]
fn events_for_tags_nobody_asked_for_are_dropped_and_counted() {
    let h = router(FederationConfig::default());
    let (mut raw, _) = linked(&h, 11);
    let mut ev = BytesMut::new();
    event("/p", "/nobody/wants", "x")
        .encode(&mut ev)
        .expect("encodable");
    for _ in 0..3 {
        raw.send_bytes(&link_frame(&LinkFrame::Forward {
            origin: 11,
            hops: 0,
            event: ev.clone().freeze(),
        }));
    }
    link_ping(&mut raw, 1);
    assert_eq!(federation(&h).unwanted, 3);
    // A malformed event in a Forward closes the link with the reason.
    raw.send_bytes(&link_frame(&LinkFrame::Forward {
        origin: 11,
        hops: 0,
        event: bytes::Bytes::from_static(b"\xff\xff garbage"),
    }));
    let m = closing_message(&mut raw);
    assert!(m.contains("bad event in Forward"), "{m}");
}

#[test]
fn a_peer_that_never_reads_fills_only_its_own_link_queue() {
    let h = router(FederationConfig {
        link_queue_length: 16,
        ..FederationConfig::default()
    });
    let (mut stalled, router_id) = linked(&h, 13);
    stalled.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 13,
        version: 1,
        name: "raw13".into(),
        neighbors: vec![router_id],
        interest: vec![Interest::pattern("/**")],
    }));
    link_ping(&mut stalled, 1);
    // A local subscriber beside it, and a publisher of large events.
    let mut sub = Raw::hello(&h).subscriber("/local", "/big/**", &[]);
    let mut publisher = Raw::hello(&h).publisher("/pubber");
    let payload = vec![7u8; 32 * 1024];
    let n = 2000;
    let reader = std::thread::spawn(move || {
        let mut got = 0;
        while got < n {
            match sub.recv() {
                Some(Frame::Deliver { .. }) => got += 1,
                Some(_) => {}
                None => break,
            }
        }
        got
    });
    for _ in 0..n {
        publisher.send_bytes(&publish_frame(
            1,
            &event("/pubber", "/big/x", payload.clone()),
        ));
    }
    publisher.ping(2);
    assert_eq!(
        reader.join().expect("reader"),
        n,
        "the local subscriber got every event"
    );
    let f = federation(&h);
    let l = &f.links[0];
    assert!(l.queue_depth <= 16, "{l:?}");
    assert!(l.dropped > 0, "the stalled link dropped its oldest: {l:?}");
    drop(stalled);
}

#[test]
fn an_unreachable_configured_peer_leaves_local_service_alone() {
    // Port 1 on loopback: nothing listens there.
    let h = router(FederationConfig {
        peers: vec!["tcp://127.0.0.1:1".into()],
        ..FederationConfig::default()
    });
    let start = Instant::now();
    let mut sub = Raw::hello(&h).subscriber("/s", "/here", &[]);
    let mut p = Raw::hello(&h).publisher("/p");
    std::thread::sleep(Duration::from_millis(300)); // a few dial attempts
    p.send_bytes(&publish_frame(1, &event("/p", "/here", "local")));
    match sub.recv() {
        Some(Frame::Deliver { .. }) => {}
        other => panic!("expected the local event, got {other:?}"),
    }
    assert!(start.elapsed() < WAIT);
    assert!(federation(&h).links.is_empty());
}

#[test]
fn a_config_naming_a_bad_peer_address_is_refused_by_name() {
    let e = Router::start(RouterConfig {
        federation: FederationConfig {
            peers: vec!["tcp://nohost".into()],
            ..FederationConfig::default()
        },
        ..tcp_config()
    })
    .expect_err("refused");
    assert!(e.to_string().contains("nohost"), "{e}");
}

/// The next `PullAnswer` on a raw link (other link frames skipped).
fn pull_answer(raw: &mut Raw) -> (u32, tagwire_proto::PullOutcome) {
    loop {
        match recv_link(raw) {
            Ok(LinkFrame::PullAnswer { id, outcome }) => return (id, outcome),
            Ok(_) => continue,
            other => panic!("expected a PullAnswer, got {other:?}"),
        }
    }
}

fn pull_request(id: u32, target: u64, hops: u8) -> LinkFrame {
    LinkFrame::PullRequest {
        id,
        target,
        hops,
        max_reply: 65_536,
        pull: tagwire_proto::Pull {
            req: 0,
            node: String::new(),
            publisher: String::new(),
            tag: "/nothing/here".into(),
            query: tagwire_proto::PullQuery::Latest,
        },
    }
}

#[test]
fn bad_pulls_from_a_peer_are_answered_or_dropped_and_the_link_stays() {
    let h = router(FederationConfig::default());
    let (mut raw, router_id) = linked(&h, 21);
    // For the router itself: answered from its buffers (no history here).
    raw.send_bytes(&link_frame(&pull_request(5, router_id, 0)));
    let (id, outcome) = pull_answer(&mut raw);
    assert_eq!(id, 5);
    assert!(
        matches!(
            &outcome,
            tagwire_proto::PullOutcome::Refused {
                code: ErrorCode::NoHistory,
                ..
            }
        ),
        "{outcome:?}"
    );
    // For a daemon nobody knows, and one at the hop limit: refused by name.
    raw.send_bytes(&link_frame(&pull_request(6, 0xdead, 0)));
    let (id, outcome) = pull_answer(&mut raw);
    assert_eq!(id, 6);
    assert!(
        matches!(
            &outcome,
            tagwire_proto::PullOutcome::Refused {
                code: ErrorCode::UnknownNode,
                ..
            }
        ),
        "{outcome:?}"
    );
    raw.send_bytes(&link_frame(&pull_request(7, 0xdead, 200)));
    let (id, _) = pull_answer(&mut raw);
    assert_eq!(id, 7);
    // An answer nobody asked for reaches nobody; a garbled one closes only
    // this link.
    raw.send_bytes(&link_frame(&LinkFrame::PullAnswer {
        id: 99,
        outcome: tagwire_proto::PullOutcome::Refused {
            code: ErrorCode::NoHistory,
            message: "unasked".into(),
        },
    }));
    link_ping(&mut raw, 3);
    let mut garbled = link_frame(&pull_request(8, router_id, 0));
    let n = garbled.len();
    garbled.truncate(n - 1);
    garbled[0] -= 1; // the length, kept consistent with the cut body
    raw.send_bytes(&garbled);
    let m = closing_message(&mut raw);
    assert!(m.contains("PullRequest") || m.contains("pull"), "{m}");
    // The router still serves others.
    let (mut other, _) = linked(&h, 22);
    link_ping(&mut other, 4);
}

/// Issue 24 item 5: an advert whose entries carry costly filters (regular
/// expressions, milliseconds each to build) is compiled off the lane, a
/// slice at a time: a client connecting meanwhile is welcomed and answered
/// before the advert is in force, and the advert is put in force after.
#[test]
fn a_big_advert_of_regex_filters_compiles_off_the_lane_while_clients_connect() {
    const ENTRIES: usize = 48;
    let h = router(FederationConfig::default());
    let (mut raw, router_id) = linked(&h, 21);
    let interest: Vec<Interest> = (0..ENTRIES)
        .map(|i| Interest {
            filter: format!("$.s =~ '[a-z]{{{}}}'", 400 + i),
            ..Interest::pattern(format!("/re/{i}"))
        })
        .collect();
    raw.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 21,
        version: 1,
        name: "raw21".into(),
        neighbors: vec![router_id],
        interest,
    }));
    // No pause: the lane reads the advert (on a link already up) before the
    // bystander's connection and handshake; compiled on the lane, it would
    // hold the lane until every entry is built, and the bystander's list
    // would show it in force. (A pause here let a release build finish the
    // compilation before the bystander came, and the test failed.)
    let mut bystander = Raw::hello(&h);
    bystander.ping(1);
    let known = |c: &mut Raw| {
        c.list()
            .federation
            .unwrap_or_default()
            .known
            .iter()
            .any(|d| d.name == "raw21" && d.interest == ENTRIES)
    };
    assert!(
        !known(&mut bystander),
        "the bystander was served only after the advert was compiled"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !known(&mut bystander) {
        assert!(
            Instant::now() < deadline,
            "the advert was never put in force"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    link_ping(&mut raw, 2);
    assert_eq!(federation(&h).refused_adverts, 0);
}
