//! End-to-end `Session::pull` through a real router: the history QoS set by
//! an admin request, every query, gone, no history, a named node, and a
//! long range followed across replies.

mod common;

use common::{all_servers, history, payloads};
use tagwire::{HistoryAt, Pull, PullError, PullOptions, Session};

#[test]
fn session_pull_reads_latest_nth_seq_range_and_time() {
    for (name, server) in all_servers() {
        let s = server.session();
        history(&s, "/pull/**", "5");
        let p = s.declare_publisher("/pull/pub").expect("declare");
        for i in 1..=8 {
            p.publish("/pull/a", format!("v{i}")).expect("publish");
        }
        let latest = s.pull("/pull/a", Pull::Latest).expect("latest");
        assert_eq!(payloads(&latest), ["v8"], "{name}");
        assert_eq!(latest[0].event().seq, 8, "{name}");
        assert_eq!(
            payloads(&s.pull("/pull/a", Pull::Nth(1)).expect("nth")),
            ["v7"]
        );
        assert_eq!(
            payloads(&s.pull("/pull/a", Pull::Seq(5)).expect("seq")),
            ["v5"]
        );
        let range = s
            .pull("/pull/a", Pull::SeqRange { first: 5, last: 7 })
            .expect("range");
        assert_eq!(payloads(&range), ["v5", "v6", "v7"], "{name}");
        let recent = s
            .pull("/pull/a", Pull::since(std::time::Duration::from_secs(3600)))
            .expect("since");
        assert_eq!(recent.len(), 5, "{name}: the whole buffer is recent");
        let opts = PullOptions {
            publisher: Some("/pull/pub".into()),
            at: HistoryAt::Publisher,
        };
        assert_eq!(
            payloads(
                &s.pull_with("/pull/a", Pull::Latest, &opts)
                    .expect("at publisher")
            ),
            ["v8"]
        );
    }
}

#[test]
fn session_pull_errors_are_typed() {
    for (name, server) in all_servers() {
        let s = server.session();
        history(&s, "/gone/**", "3");
        let p = s.declare_publisher("/gone/pub").expect("declare");
        for i in 1..=6 {
            p.publish("/gone/a", format!("v{i}")).expect("publish");
        }
        match s.pull("/gone/a", Pull::Seq(1)) {
            Err(PullError::Gone {
                oldest,
                newest,
                held,
            }) => {
                assert_eq!((oldest, newest, held), (4, 6, 3), "{name}")
            }
            other => panic!("{name}: expected gone, got {other:?}"),
        }
        assert!(matches!(
            s.pull("/nothing/here", Pull::Latest),
            Err(PullError::NoHistory { .. })
        ));
        match s.pull("/gone/a", Pull::SeqRange { first: 1, last: 9 }) {
            Err(PullError::OutOfRange { message }) => {
                assert!(message.contains("larger than the buffer"), "{message}")
            }
            other => panic!("{name}: expected out of range, got {other:?}"),
        }
        let at_node = PullOptions {
            publisher: None,
            at: "node:edge".parse().expect("valid syntax"),
        };
        assert!(matches!(
            s.pull_with("/gone/a", Pull::Latest, &at_node),
            Err(PullError::UnknownNode { .. })
        ));
        assert!(matches!(
            "node:".parse::<HistoryAt>(),
            Err(PullError::Invalid { .. })
        ));
        assert!(matches!(
            s.pull("not-a-tag", Pull::Latest),
            Err(PullError::Session(tagwire::Error::Tag(_)))
        ));
    }
}

#[test]
fn a_range_longer_than_one_reply_is_followed_to_its_end() {
    let server = common::tcp_server();
    let s = server.session();
    history(&s, "/big/**", "3000");
    let p = s.declare_publisher("/big/pub").expect("declare");
    for i in 1..=2500 {
        p.publish("/big/a", format!("{i}")).expect("publish");
    }
    // The router's default reply cap is 1024 events: three replies.
    let all = s
        .pull(
            "/big/a",
            Pull::SeqRange {
                first: 1,
                last: 2500,
            },
        )
        .expect("range");
    assert_eq!(all.len(), 2500);
    assert!(all
        .windows(2)
        .all(|w| w[0].event().seq + 1 == w[1].event().seq));
}

/// A daemon named `name` on a loopback port, linked to `peers`.
fn linked_daemon(name: &str, peers: Vec<String>) -> (tagwire::router::RouterHandle, String) {
    use tagwire::router::{FederationConfig, Router, RouterConfig};
    let h = Router::start(RouterConfig {
        name: name.into(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        federation: FederationConfig {
            peers,
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    })
    .expect("start");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp"));
    (h, url)
}

#[test]
fn the_subscribers_daemon_keeps_history_of_events_that_crossed_a_link() {
    let (_a, a_url) = linked_daemon("pull-a", vec![]);
    let (_b, b_url) = linked_daemon("pull-b", vec![a_url.clone()]);
    let at_a = Session::connect(&a_url).expect("connect a");
    let at_b = Session::connect(&b_url).expect("connect b");
    history(&at_b, "/fed/**", "4");
    // Interest at B draws A's events over the link.
    let sub = at_b.subscribe("/fed/**").receiver().expect("subscribe");
    let p = at_a.declare_publisher("/fed/pub").expect("declare");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        p.publish("/fed/x", "probe").expect("publish");
        if sub
            .recv_timeout(std::time::Duration::from_millis(50))
            .expect("receive")
            .is_some()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing crossed the link"
        );
    }
    let got = at_b.pull("/fed/x", Pull::Latest).expect("held at B");
    assert_eq!(got[0].event().publisher, "/fed/pub");
    // A keeps none (no history set there): asked over the link, it says so.
    assert!(matches!(
        at_a.pull("/fed/x", Pull::Latest),
        Err(PullError::NoHistory { .. })
    ));
    let at_a_node = PullOptions {
        publisher: None,
        at: HistoryAt::Node("pull-a".into()),
    };
    assert!(matches!(
        at_b.pull_with("/fed/x", Pull::Latest, &at_a_node),
        Err(PullError::NoHistory { .. })
    ));
    let at_b_node = PullOptions {
        publisher: None,
        at: HistoryAt::Node("pull-b".into()),
    };
    assert_eq!(
        at_b.pull_with("/fed/x", Pull::Latest, &at_b_node)
            .expect("its own name")
            .len(),
        1
    );
}
