//! Pull buffers in the router: the `history` QoS property made effective,
//! pulls of every kind, and each bad input of issue 15 item 1 refused with
//! an error naming it.

mod common;

use common::{event, start_tcp, Raw};
use serde_json::json;
use tagwire_proto::{ErrorCode, Event, Frame, Pull, PullQuery, PullReply, PullStatus};
use tagwire_router::{Limits, Router, RouterConfig};

/// A router, a publisher `/h/pub` (endpoint 1) and an admin connection that
/// set `history=4` on `/h/**`.
fn setup(limits: Limits) -> (tagwire_router::RouterHandle, Raw, Raw) {
    let h = start_tcp(limits);
    let mut admin = Raw::hello_tcp(&h);
    let r = admin.admin(&json!({"op": "qos", "target": ["/h/**"], "set": {"history": "4"}}));
    assert_eq!(r["level"], "tag", "{r}");
    let publisher = Raw::hello_tcp(&h).publisher("/h/pub");
    (h, publisher, admin)
}

fn publish_seqs(p: &mut Raw, tag: &str, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        let mut ev = event("/h/pub", tag, format!("e{seq}"));
        ev.header.seq = seq;
        ev.header.source_time_ns = 1_000 * seq;
        p.publish_event(1, &ev);
    }
}

fn pull(c: &mut Raw, tag: &str, publisher: &str, node: &str, query: PullQuery) -> Frame {
    c.request(|req| {
        Frame::Pull(Pull {
            req,
            node: node.into(),
            publisher: publisher.into(),
            tag: tag.into(),
            query,
        })
    })
}

fn reply(f: Frame) -> PullReply {
    match f {
        Frame::PullReply(r) => r,
        other => panic!("expected a PullReply, got {other:?}"),
    }
}

fn seqs(r: &PullReply) -> Vec<u64> {
    r.events
        .iter()
        .map(|e| Event::decode(e).expect("a valid event").header.seq)
        .collect()
}

#[track_caller]
fn refused(f: Frame, code: ErrorCode, needle: &str) {
    match f {
        Frame::Error {
            code: c, message, ..
        } => {
            assert_eq!(c, code, "{message}");
            assert!(
                message.contains(needle),
                "{message:?} should name {needle:?}"
            );
        }
        other => panic!("expected {code:?} naming {needle:?}, got {other:?}"),
    }
}

#[test]
fn every_query_kind_reads_the_last_history_events() {
    let (_h, mut p, _admin) = setup(Limits::default());
    publish_seqs(&mut p, "/h/a", 1..=6);
    let r = reply(pull(&mut p, "/h/a", "", "", PullQuery::Latest));
    assert_eq!((seqs(&r), r.status), (vec![6], PullStatus::Complete));
    assert_eq!((r.oldest, r.newest, r.held), (3, 6, 4));
    assert_eq!(
        seqs(&reply(pull(&mut p, "/h/a", "", "", PullQuery::Nth(2)))),
        [4]
    );
    assert_eq!(
        seqs(&reply(pull(
            &mut p,
            "/h/a",
            "/h/pub",
            "",
            PullQuery::Seq(5)
        ))),
        [5]
    );
    let range = PullQuery::SeqRange { first: 4, last: 6 };
    assert_eq!(seqs(&reply(pull(&mut p, "/h/a", "", "", range))), [4, 5, 6]);
    let time = PullQuery::TimeRange {
        from_ns: 3_500,
        to_ns: 5_000,
        from_seq: 0,
    };
    assert_eq!(seqs(&reply(pull(&mut p, "/h/a", "", "", time))), [4, 5]);
}

#[test]
fn a_pull_from_a_tag_without_history_answers_no_history() {
    let (_h, mut p, _admin) = setup(Limits::default());
    p.publish(1, "/h/pub", "/other/tag", "x");
    refused(
        pull(&mut p, "/other/tag", "", "", PullQuery::Latest),
        ErrorCode::NoHistory,
        "/other/tag",
    );
    publish_seqs(&mut p, "/h/a", 1..=1);
    refused(
        pull(&mut p, "/h/a", "/nobody", "", PullQuery::Latest),
        ErrorCode::NoHistory,
        "/nobody",
    );
    p.expect_alive();
}

#[test]
fn an_overwritten_sequence_answers_gone_and_one_not_yet_published_is_out_of_range() {
    let (_h, mut p, _admin) = setup(Limits::default());
    publish_seqs(&mut p, "/h/a", 1..=10);
    let r = reply(pull(&mut p, "/h/a", "", "", PullQuery::Seq(2)));
    assert_eq!(r.status, PullStatus::Gone, "never an empty success");
    assert_eq!((r.oldest, r.newest, r.events.len()), (7, 10, 0));
    refused(
        pull(&mut p, "/h/a", "", "", PullQuery::Seq(11)),
        ErrorCode::BadRequest,
        "sequence number 11 is out of range: the newest held is 10",
    );
    refused(
        pull(&mut p, "/h/a", "", "", PullQuery::Nth(4)),
        ErrorCode::BadRequest,
        "history keeps 4 events",
    );
}

#[test]
fn a_range_larger_than_the_buffer_is_refused_naming_it() {
    let (_h, mut p, _admin) = setup(Limits::default());
    publish_seqs(&mut p, "/h/a", 1..=10);
    refused(
        pull(
            &mut p,
            "/h/a",
            "",
            "",
            PullQuery::SeqRange { first: 1, last: 10 },
        ),
        ErrorCode::BadRequest,
        "spans 10 events, larger than the buffer of 4 (history=4)",
    );
    refused(
        pull(
            &mut p,
            "/h/a",
            "",
            "",
            PullQuery::SeqRange { first: 9, last: 8 },
        ),
        ErrorCode::BadRequest,
        "backwards",
    );
}

#[test]
fn history_over_the_configured_bound_is_refused_naming_the_bound() {
    let (_h, _p, mut admin) = setup(Limits {
        max_history: 50,
        ..Limits::default()
    });
    match admin.try_admin(&json!({"op": "qos", "target": ["/h/**"], "set": {"history": "51"}})) {
        Frame::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::BadRequest);
            assert!(message.contains("history=51"), "{message}");
            assert!(message.contains("limits.max_history"), "{message}");
            assert!(message.contains("50"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The old value stands.
    let shown = admin.admin(&json!({"op": "show", "target": "/h/**"}));
    assert_eq!(shown["set"][0]["value"], "4", "{shown}");
    // And in the daemon's [qos].
    let mut config = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    config.limits.max_history = 50;
    config.qos.insert("history".into(), "51".into());
    let e = Router::start(config).expect_err("refused");
    assert!(e.to_string().contains("limits.max_history"), "{e}");
}

#[test]
fn a_named_node_other_than_this_daemon_is_refused_and_says_so() {
    let (_h, mut p, _admin) = setup(Limits::default());
    publish_seqs(&mut p, "/h/a", 1..=2);
    refused(
        pull(&mut p, "/h/a", "", "edge", PullQuery::Latest),
        ErrorCode::UnknownNode,
        "no daemon of this network is named so",
    );
    // This daemon's own name is served here.
    let own = RouterConfig::default().name;
    assert_eq!(
        seqs(&reply(pull(&mut p, "/h/a", "", &own, PullQuery::Latest))),
        [2]
    );
    refused(
        pull(&mut p, "no-slash", "", "", PullQuery::Latest),
        ErrorCode::InvalidTag,
        "",
    );
}

#[test]
fn a_long_answer_is_cut_at_the_reply_cap_and_says_where_to_go_on() {
    let (_h, mut p, _admin) = setup(Limits {
        history_reply_events: 2,
        ..Limits::default()
    });
    publish_seqs(&mut p, "/h/a", 1..=4);
    let r = reply(pull(
        &mut p,
        "/h/a",
        "",
        "",
        PullQuery::SeqRange { first: 1, last: 4 },
    ));
    assert_eq!(
        (seqs(&r), r.status),
        (vec![1, 2], PullStatus::More { next: 3 })
    );
}

#[test]
fn show_and_the_listing_report_what_history_holds_and_zero_turns_it_off() {
    let (_h, mut p, mut admin) = setup(Limits::default());
    publish_seqs(&mut p, "/h/a", 1..=6);
    p.expect_alive();
    let shown = admin.admin(&json!({"op": "show", "target": "/h/a"}));
    assert_eq!(shown["history"]["history"], 4, "{shown}");
    assert_eq!(shown["history"]["events"], 4, "{shown}");
    assert_eq!(shown["history"]["publishers"][0]["oldest"], 3, "{shown}");
    let l = admin.list();
    assert_eq!(
        (l.history.tags, l.history.recorded),
        (1, 6),
        "{:?}",
        l.history
    );
    assert_eq!(l.history.evicted, 2);
    admin.admin(&json!({"op": "qos", "target": ["/h/**"], "set": {"history": "0"}}));
    refused(
        pull(&mut p, "/h/a", "", "", PullQuery::Latest),
        ErrorCode::NoHistory,
        "/h/a",
    );
    assert_eq!(admin.list().history.bytes, 0);
}

#[test]
fn a_malformed_pull_is_refused_and_the_connection_stays() {
    let (_h, mut p, _admin) = setup(Limits::default());
    // Pull with query code 9 (the bad_pull_query vector).
    p.send_bytes(&[0x0c, 0, 0, 0, 0x10, 3, 0, 0, 0, 0, 0, 2, 0, b'/', b't', 9]);
    p.expect_error(ErrorCode::Malformed, "invalid pull query: 9");
    p.expect_alive();
}

#[test]
fn refused_pulls_are_answers_not_protocol_errors() {
    let (_h, mut p, _admin) = setup(Limits {
        max_protocol_errors: 4,
        ..Limits::default()
    });
    publish_seqs(&mut p, "/h/a", 1..=2);
    for _ in 0..10 {
        // A poller asking for the next sequence number before it exists.
        refused(
            pull(&mut p, "/h/a", "", "", PullQuery::Seq(3)),
            ErrorCode::BadRequest,
            "out of range",
        );
        refused(
            pull(&mut p, "/none", "", "", PullQuery::Latest),
            ErrorCode::NoHistory,
            "/none",
        );
    }
    p.expect_alive();
}

#[test]
fn an_event_held_for_its_start_time_is_recorded_when_it_is_delivered() {
    let (_h, mut p, _admin) = setup(Limits::default());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    let mut ev = event("/h/pub", "/h/later", "x");
    ev.header.seq = 1;
    ev.header.source_time_ns = now;
    ev.header.start_time_ns = Some(now + 300_000_000);
    p.publish_event(1, &ev);
    refused(
        pull(&mut p, "/h/later", "", "", PullQuery::Latest),
        ErrorCode::NoHistory,
        "/h/later",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match pull(&mut p, "/h/later", "", "", PullQuery::Latest) {
            Frame::PullReply(r) => {
                assert_eq!(seqs(&r), [1]);
                break;
            }
            Frame::Error {
                code: ErrorCode::NoHistory,
                ..
            } => {
                assert!(std::time::Instant::now() < deadline, "never recorded");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn an_event_too_large_for_the_pullers_frame_limit_is_refused_naming_it() {
    let (h, mut p, _admin) = setup(Limits::default());
    let mut ev = event("/h/pub", "/h/big", vec![0u8; 6000]);
    ev.header.seq = 1;
    p.publish_event(1, &ev);
    p.expect_alive();
    let mut small = Raw::hello_tcp_with(&h, 4096);
    refused(
        pull(&mut small, "/h/big", "", "", PullQuery::Latest),
        ErrorCode::LimitReached,
        "frame limit of 4096 bytes",
    );
    small.expect_alive();
    assert_eq!(
        seqs(&reply(pull(&mut p, "/h/big", "", "", PullQuery::Latest))),
        [1]
    );
}

#[test]
fn history_is_not_a_channel_property() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    c.declare(1, tagwire_proto::EndpointKind::Subscriber, "/h/viewer");
    match c.try_subscribe(1, 1, "/h/**", &[("history".into(), "5".into())]) {
        Frame::Error { message, .. } => {
            assert!(message.contains("history"), "{message}");
            assert!(message.contains("daemon, tag"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
