//! Authentication and authorization at the daemon (issue 12, items 6, 7,
//! 10 and 12): who may connect, what an identity may publish, subscribe and
//! administer, per-identity quotas, and endpoint names kept for the session
//! that held them. Driven with raw protocol frames so the tests control the
//! token and the session id.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{alice_and_bob as config, owner_token, Raw, ALICE, BOB};
use tagwire_proto::{EndpointKind, ErrorCode, Frame};
use tagwire_router::{local, Router, RouterConfig};

fn error_code(f: &Frame) -> Option<ErrorCode> {
    match f {
        Frame::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// A subscription's QoS with `filters`.
fn filter_qos(filters: &[&str]) -> Vec<(String, String)> {
    filters
        .iter()
        .map(|f| ("filter".to_owned(), (*f).to_owned()))
        .collect()
}

fn message(f: &Frame) -> String {
    match f {
        Frame::Error { message, .. } => message.clone(),
        other => format!("{other:?}"),
    }
}

#[test]
fn tcp_without_a_token_or_with_a_wrong_one_is_refused_and_closed() {
    let h = Router::start(config()).expect("start");
    for token in ["", "not-the-token-0123456789"] {
        let (mut r, answer) = Raw::hello_as(&h, token, [0; 16]);
        let answer = answer.expect("an answer");
        assert_eq!(
            error_code(&answer),
            Some(ErrorCode::Unauthenticated),
            "{answer:?}"
        );
        assert_eq!(r.recv(), None, "the connection is closed");
    }
    // The owner's local token works.
    Raw::welcomed_as(&h, &owner_token(&h), [0; 16]);
}

#[test]
fn an_acl_limits_a_token_identity_to_its_tags() {
    let h = Router::start(config()).expect("start");
    let mut alice = Raw::welcomed_as(&h, ALICE, [0; 16]);
    assert_eq!(
        alice.try_declare(1, EndpointKind::Subscriber, "/alice/sub"),
        Frame::Ok { req: 1 }
    );
    let denied = alice.try_subscribe(1, 1, "/**", &[]);
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::PermissionDenied),
        "{denied:?}"
    );
    assert!(message(&denied).contains("token:alice"), "{denied:?}");
    assert_eq!(
        error_code(&alice.try_subscribe(2, 1, "/shared/**", &[])),
        Some(ErrorCode::PermissionDenied)
    );
    assert!(matches!(
        alice.try_subscribe(3, 1, "/shared/x", &[]),
        Frame::Ok { .. }
    ));
    assert!(matches!(
        alice.try_subscribe(4, 1, "/alice/*/y", &[]),
        Frame::Ok { .. }
    ));

    // Publishing outside /alice/** is refused, inside is delivered.
    assert!(matches!(
        alice.try_declare(2, EndpointKind::Publisher, "/alice/pub"),
        Frame::Ok { .. }
    ));
    let mut publish = |tag: &str| {
        alice.publish(2, "/alice/pub", tag, "x");
    };
    publish("/bob/x");
    publish("/alice/z/y");
    let refused = alice.recv().expect("an error");
    assert_eq!(
        error_code(&refused),
        Some(ErrorCode::PermissionDenied),
        "{refused:?}"
    );
    assert!(matches!(alice.recv(), Some(Frame::Deliver { sub: 4, .. })));
}

#[test]
fn an_identity_cannot_touch_another_identitys_endpoints_and_lists_only_its_own() {
    let h = Router::start(config()).expect("start");
    let mut owner = Raw::welcomed_as(&h, &owner_token(&h), [0; 16]);
    owner.try_declare(1, EndpointKind::Subscriber, "/owner/sub");
    owner.try_subscribe(1, 1, "/alice/**", &[]);
    let mut bob = Raw::welcomed_as(&h, BOB, [0; 16]);
    bob.try_declare(1, EndpointKind::Subscriber, "/bob/sub");
    bob.try_subscribe(1, 1, "/bob/**", &[]);

    // Bob may not silence the owner's subscriber, nor change its operator.
    for request in [
        serde_json::json!({"op": "filter_add", "endpoint": "/owner/sub", "filter": "false"}),
        serde_json::json!({"op": "filter_op", "endpoint": "/owner/sub", "interfilter": "or"}),
    ] {
        let r = bob.try_admin(&request);
        assert_eq!(error_code(&r), Some(ErrorCode::PermissionDenied), "{r:?}");
    }
    // He may filter his own.
    let r = bob.try_admin(
        &serde_json::json!({"op": "filter_add", "endpoint": "/bob/sub", "filter": "true"}),
    );
    assert!(matches!(r, Frame::AdminReply { .. }), "{r:?}");
    // The owner's filter is invisible to him, and he may not remove it.
    let r = owner.try_admin(
        &serde_json::json!({"op": "filter_add", "endpoint": "/owner/sub", "filter": "true"}),
    );
    let Frame::AdminReply { body, .. } = r else {
        panic!("{r:?}")
    };
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"].clone();
    let r = bob.try_admin(&serde_json::json!({"op": "filter_remove", "id": id}));
    assert_eq!(error_code(&r), Some(ErrorCode::PermissionDenied), "{r:?}");

    let listing = |r: Frame| -> serde_json::Value {
        let Frame::AdminReply { body, .. } = r else {
            panic!("{r:?}")
        };
        serde_json::from_str(&body).expect("json")
    };
    let mine = listing(bob.try_admin(&serde_json::json!({"op": "list"})));
    let names: Vec<&str> = mine["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["/bob/sub"], "{mine}");
    let filters = listing(bob.try_admin(&serde_json::json!({"op": "filter_list"})));
    assert_eq!(
        filters["filters"].as_array().map(Vec::len),
        Some(1),
        "{filters}"
    );
    // The owner (admin right) sees everyone.
    let all = listing(owner.try_admin(&serde_json::json!({"op": "list"})));
    assert_eq!(all["endpoints"].as_array().map(Vec::len), Some(2), "{all}");
    assert!(
        all["auth"].as_str().is_some_and(|a| a.starts_with("on")),
        "{all}"
    );
}

#[test]
fn an_endpoint_name_is_kept_for_its_session_after_a_drop_and_released_by_close() {
    let h = Router::start(config()).expect("start");
    let token = owner_token(&h);
    let (s1, s2) = ([1u8; 16], [2u8; 16]);
    let mut first = Raw::welcomed_as(&h, &token, s1);
    assert!(matches!(
        first.try_declare(1, EndpointKind::Subscriber, "/kept"),
        Frame::Ok { .. }
    ));
    first.drop_without_close();

    // A stranger (another session) cannot take the name; it is not held by
    // a live connection any more, but reserved.
    let mut stranger = Raw::welcomed_as(&h, &token, s2);
    let r = loop {
        let r = stranger.try_declare(1, EndpointKind::Subscriber, "/kept");
        if message(&r).contains("reserved") || matches!(r, Frame::Ok { .. }) {
            break r;
        }
        // Still held by the old connection until the router notices the drop.
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(error_code(&r), Some(ErrorCode::DuplicateEndpoint), "{r:?}");
    // The same session, reconnecting, gets it back.
    let mut again = Raw::welcomed_as(&h, &token, s1);
    assert!(matches!(
        again.try_declare(1, EndpointKind::Subscriber, "/kept"),
        Frame::Ok { .. }
    ));

    // A clean Close releases the name at once.
    again.send(&Frame::Close {
        code: 0,
        reason: "bye".into(),
    });
    assert_eq!(again.recv(), None);
    let r = loop {
        let r = stranger.try_declare(2, EndpointKind::Subscriber, "/kept");
        if !message(&r).contains("already") {
            break r;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(matches!(r, Frame::Ok { .. }), "{r:?}");
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tagwire-auth-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    local::prepare_private_dir(&d).expect("private temp dir");
    d
}

#[test]
fn endpoint_names_stay_reserved_for_their_sessions_across_a_restart() {
    let dir = temp_dir("restart");
    let cfg = RouterConfig {
        reservations_file: Some(dir.join("reservations.json")),
        ..config()
    };
    let h = Router::start(cfg.clone()).expect("start");
    let token = owner_token(&h);
    let mut sub = Raw::welcomed_as(&h, &token, [7; 16]);
    assert!(matches!(
        sub.try_declare(1, EndpointKind::Subscriber, "/survivor"),
        Frame::Ok { .. }
    ));
    h.shutdown();

    let h = Router::start(cfg).expect("restart");
    let token = owner_token(&h);
    let mut stranger = Raw::welcomed_as(&h, &token, [8; 16]);
    let r = stranger.try_declare(1, EndpointKind::Subscriber, "/survivor");
    assert_eq!(error_code(&r), Some(ErrorCode::DuplicateEndpoint), "{r:?}");
    assert!(message(&r).contains("reserved"), "{r:?}");
    let mut back = Raw::welcomed_as(&h, &token, [7; 16]);
    assert!(matches!(
        back.try_declare(1, EndpointKind::Subscriber, "/survivor"),
        Frame::Ok { .. }
    ));
    h.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn per_identity_quotas_refuse_the_excess_and_leave_others_alone() {
    let mut cfg = config();
    cfg.limits.max_connections_per_identity = 2;
    cfg.limits.max_endpoints_per_identity = 3;
    cfg.limits.max_subscriptions_per_identity = 2;
    let h = Router::start(cfg).expect("start");
    let mut a1 = Raw::welcomed_as(&h, BOB, [0; 16]);
    let _a2 = Raw::welcomed_as(&h, BOB, [0; 16]);
    let (_, third) = Raw::hello_as(&h, BOB, [0; 16]);
    let third = third.expect("an answer");
    assert_eq!(
        error_code(&third),
        Some(ErrorCode::LimitReached),
        "{third:?}"
    );
    assert!(
        message(&third).contains("max_connections_per_identity"),
        "{third:?}"
    );
    // Another identity still connects.
    let mut alice = Raw::welcomed_as(&h, ALICE, [0; 16]);

    for id in 1..=3 {
        assert!(matches!(
            a1.try_declare(id, EndpointKind::Subscriber, &format!("/bob/{id}")),
            Frame::Ok { .. }
        ));
    }
    let r = a1.try_declare(4, EndpointKind::Subscriber, "/bob/4");
    assert_eq!(error_code(&r), Some(ErrorCode::LimitReached), "{r:?}");
    assert!(matches!(
        a1.try_subscribe(1, 1, "/a", &[]),
        Frame::Ok { .. }
    ));
    assert!(matches!(
        a1.try_subscribe(2, 1, "/b", &[]),
        Frame::Ok { .. }
    ));
    let r = a1.try_subscribe(3, 1, "/c", &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::LimitReached), "{r:?}");
    // Unsubscribing gives the quota back.
    assert!(matches!(
        a1.request(|req| Frame::Unsubscribe { req, sub: 1 }),
        Frame::Ok { .. }
    ));
    assert!(matches!(
        a1.try_subscribe(3, 1, "/c", &[]),
        Frame::Ok { .. }
    ));
    // Alice is unaffected.
    assert!(matches!(
        alice.try_declare(1, EndpointKind::Subscriber, "/alice/s"),
        Frame::Ok { .. }
    ));
    assert!(matches!(
        alice.try_subscribe(1, 1, "/alice/x", &[]),
        Frame::Ok { .. }
    ));
}

#[test]
fn filters_count_against_their_identitys_quota_in_number_and_compiled_bytes() {
    let mut cfg = config();
    cfg.limits.max_filters_per_identity = 3;
    let h = Router::start(cfg).expect("start");
    let mut bob = Raw::welcomed_as(&h, BOB, [0; 16]);
    bob.try_declare(1, EndpointKind::Subscriber, "/bob/s");
    let subscribe = |r: &mut Raw, sub: u32, filters: &[&str]| {
        r.try_subscribe(sub, 1, "/bob/**", &filter_qos(filters))
    };
    assert!(matches!(
        subscribe(&mut bob, 1, &["$.a == 1", "$.b == 2"]),
        Frame::Ok { .. }
    ));
    let r = subscribe(&mut bob, 2, &["$.c == 3", "$.d == 4"]);
    assert_eq!(error_code(&r), Some(ErrorCode::LimitReached), "{r:?}");
    assert!(message(&r).contains("max_filters_per_identity"), "{r:?}");
    // The third fits, through an admin request too; a fourth does not.
    let r = bob.try_admin(
        &serde_json::json!({"op": "filter_add", "endpoint": "/bob/s", "filter": "$.e == 5"}),
    );
    assert!(matches!(r, Frame::AdminReply { .. }), "{r:?}");
    let r = bob.try_admin(&serde_json::json!({"op": "filter_add", "endpoint": "/bob/s", "level": "session", "filter": "$.f == 6"}));
    assert_eq!(error_code(&r), Some(ErrorCode::LimitReached), "{r:?}");
    // Another identity has its own quota.
    let mut alice = Raw::welcomed_as(&h, ALICE, [0; 16]);
    alice.try_declare(1, EndpointKind::Subscriber, "/alice/s");
    let r = alice.try_subscribe(1, 1, "/alice/**", &filter_qos(&["$.a == 1"]));
    assert!(matches!(r, Frame::Ok { .. }), "{r:?}");
    // Unsubscribing gives the quota back (once housekeeping has removed
    // the channel's filters).
    assert!(matches!(
        bob.request(|req| Frame::Unsubscribe { req, sub: 1 }),
        Frame::Ok { .. }
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut sub = 10;
    loop {
        sub += 1;
        let r = subscribe(&mut bob, sub, &["$.g == 7"]);
        if matches!(r, Frame::Ok { .. }) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "quota never given back: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn compiled_filter_memory_is_bounded_per_identity() {
    let mut cfg = config();
    cfg.limits.max_filter_bytes_per_identity = 64 * 1024;
    let h = Router::start(cfg).expect("start");
    let mut bob = Raw::welcomed_as(&h, BOB, [0; 16]);
    bob.try_declare(1, EndpointKind::Subscriber, "/bob/s");
    // A regular expression's automaton alone passes 64 KiB (\w is Unicode).
    let r = bob.try_subscribe(1, 1, "/bob/**", &filter_qos(&[r"$.name =~ '\w\w\w'"]));
    assert_eq!(error_code(&r), Some(ErrorCode::LimitReached), "{r:?}");
    assert!(
        message(&r).contains("max_filter_bytes_per_identity"),
        "{r:?}"
    );
    // A small filter still fits.
    let r = bob.try_subscribe(2, 1, "/bob/**", &filter_qos(&["$.x == 1"]));
    assert!(matches!(r, Frame::Ok { .. }), "{r:?}");
}

#[test]
fn a_non_admin_cannot_reschedule_a_lane_or_reserve_bandwidth_through_its_own_channels() {
    let h = Router::start(config()).expect("start");
    let mut alice = Raw::welcomed_as(&h, ALICE, [0; 16]);
    assert_eq!(
        alice.try_declare(1, EndpointKind::Subscriber, "/alice/sub"),
        Frame::Ok { req: 1 }
    );
    let sched = [("sched".to_owned(), "fifo:99".to_owned())];
    let denied = alice.try_subscribe(2, 1, "/alice/x", &sched);
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::PermissionDenied),
        "{denied:?}"
    );
    assert!(message(&denied).contains("sched"), "{denied:?}");
    // A bandwidth reservation (the band's, on the daemon's egress) likewise.
    let reserve = [("reserve".to_owned(), "1mbit".to_owned())];
    let denied = alice.try_subscribe(4, 1, "/alice/y", &reserve);
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::PermissionDenied),
        "{denied:?}"
    );
    assert!(message(&denied).contains("reserve"), "{denied:?}");
    // Subscribed without it, the same change through `admin qos` on its own
    // endpoint is refused too.
    assert!(matches!(
        alice.try_subscribe(3, 1, "/alice/x", &[]),
        Frame::Ok { .. }
    ));
    let denied = alice.try_admin(&serde_json::json!({
        "op": "qos", "target": ["/alice/sub"], "set": {"sched": "fifo:99"}
    }));
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::PermissionDenied),
        "{denied:?}"
    );
    assert!(message(&denied).contains("admin right"), "{denied:?}");
    // Its other QoS still changes (its own channel's priority).
    assert!(matches!(
        alice.try_admin(&serde_json::json!({
            "op": "qos", "target": ["/alice/sub"], "set": {"priority": "high"}
        })),
        Frame::AdminReply { .. }
    ));
    // No lane was asked to change: every lane keeps its configured policy.
    let mut owner = Raw::welcomed_as(&h, &owner_token(&h), [1; 16]);
    let lanes = owner.list().lanes;
    assert!(!lanes.is_empty());
    for lane in &lanes {
        assert_ne!(lane.sched, "fifo:99", "{lane:?}");
    }
}

/// A subscription QoS of one property.
fn one(name: &str, value: &str) -> Vec<(String, String)> {
    vec![(name.to_owned(), value.to_owned())]
}

/// Issue 24 item 3: a connection's socket carries one DSCP. Two channels of
/// one connection asking for different values were both accepted and the
/// last one marked the socket for both; the second is now refused naming
/// why, the same value agrees, and once the marking channel is gone another
/// value may mark the socket.
#[test]
fn two_channels_of_one_connection_cannot_ask_for_different_dscp() {
    let h = Router::start(config()).expect("start");
    let mut alice = Raw::welcomed_as(&h, ALICE, [0; 16]);
    alice.declare(1, EndpointKind::Subscriber, "/alice/a");
    alice.declare(2, EndpointKind::Subscriber, "/alice/b");
    let first = alice.try_subscribe(1, 1, "/alice/a/**", &one("dscp", "af42"));
    assert!(matches!(first, Frame::Ok { .. }), "{first:?}");
    let denied = alice.try_subscribe(2, 2, "/alice/b/**", &one("dscp", "ef"));
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::BadRequest),
        "{denied:?}"
    );
    let why = message(&denied);
    assert!(
        why.contains("a socket carries one DSCP") && why.contains("subscription 1 of \"/alice/a\""),
        "{why}"
    );
    // The same value agrees; no value leaves the marking alone.
    let same = alice.try_subscribe(3, 2, "/alice/b/x", &one("dscp", "36"));
    assert!(matches!(same, Frame::Ok { .. }), "{same:?}");
    let unmarked = alice.try_subscribe(4, 2, "/alice/b/y", &[]);
    assert!(matches!(unmarked, Frame::Ok { .. }), "{unmarked:?}");
    // Through `admin qos` on its own endpoint: refused as well, nothing changed.
    let denied = alice.try_admin(&serde_json::json!({
        "op": "qos", "target": ["/alice/b"], "set": {"dscp": "ef"}
    }));
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::BadRequest),
        "{denied:?}"
    );
    assert!(
        message(&denied).contains("a socket carries one DSCP"),
        "{denied:?}"
    );
    // Once only the unmarked channel is left, another value may mark it.
    for sub in [1, 3] {
        let gone = alice.request(|req| Frame::Unsubscribe { req, sub });
        assert!(matches!(gone, Frame::Ok { .. }), "{gone:?}");
    }
    let r = alice.try_admin(&serde_json::json!({
        "op": "qos", "target": ["/alice/b"], "set": {"dscp": "ef"}
    }));
    assert!(matches!(r, Frame::AdminReply { .. }), "{r:?}");
}

/// The router's listing entry of connection `name` (seen by the owner).
fn connection_named(
    h: &tagwire_router::RouterHandle,
    name: &str,
) -> tagwire_proto::admin::ConnectionInfo {
    let mut owner = Raw::welcomed_as(h, &owner_token(h), [2; 16]);
    owner
        .list()
        .connections
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no connection named {name}"))
}

/// A TCP connection of the owner turned into a link from daemon `raw9`.
fn raw_link(h: &tagwire_router::RouterHandle) -> Raw {
    use tagwire_proto::{LinkFrame, LINK_VERSION};
    let mut raw = Raw::welcomed_as(h, &owner_token(h), [3; 16]);
    let mut peer = bytes::BytesMut::new();
    LinkFrame::Peer {
        version: LINK_VERSION,
        node: 9,
        name: "raw9".into(),
        cluster: "tagwire".into(),
        band: "normal".into(),
        bands: vec![],
        udp_bands: vec![],
    }
    .encode(&mut peer)
    .expect("encodable");
    raw.send_bytes(&peer);
    loop {
        match raw.recv_raw() {
            Some((k, _)) if k == tagwire_proto::link_kind::PEER => return raw,
            Some(_) => continue,
            None => panic!("the router closed the link before its Peer"),
        }
    }
}

/// Issue 24 item 3: a link between daemons carries the events of every
/// identity whose channels cross it. Changing its QoS (its DSCP) needs the
/// admin right, and the refusal says so (it said only "needs the admin
/// right", as for any other identity's connection).
#[test]
fn a_links_dscp_is_refused_to_a_non_admin_naming_the_link() {
    let h = Router::start(config()).expect("start");
    let _link = raw_link(&h);
    let id = connection_named(&h, "link:raw9").id;
    let mut alice = Raw::welcomed_as(&h, ALICE, [0; 16]);
    let denied = alice.try_admin(&serde_json::json!({
        "op": "qos", "target": [format!("connection:{id}")], "set": {"dscp": "ef"}
    }));
    assert_eq!(
        error_code(&denied),
        Some(ErrorCode::PermissionDenied),
        "{denied:?}"
    );
    let why = message(&denied);
    assert!(
        why.contains("link to daemon \"raw9\"") && why.contains("every identity"),
        "{why}"
    );
}

/// Issue 24 item 3: an admin's DSCP for a link, or for any connection
/// without a channel (a publisher's), was accepted and put on no socket
/// (only channels applied it). It marks the socket now, and the listing
/// says what each socket carries; a non-admin marks its own connection.
#[test]
fn a_session_dscp_marks_its_socket_even_without_a_channel() {
    let h = Router::start(config()).expect("start");
    let _link = raw_link(&h);
    let link = connection_named(&h, "link:raw9");
    assert_eq!(link.dscp, Some(0), "the normal band's CS0 at first");
    let mut owner = Raw::welcomed_as(&h, &owner_token(&h), [4; 16]);
    let r = owner.try_admin(&serde_json::json!({
        "op": "qos", "target": [format!("connection:{}", link.id)], "set": {"dscp": "ef"}
    }));
    assert!(matches!(r, Frame::AdminReply { .. }), "{r:?}");
    assert_eq!(connection_named(&h, "link:raw9").dscp, Some(46), "EF");
    // Bob marks his own publisher's connection (his own traffic).
    let mut bob = Raw::welcomed_as(&h, BOB, [5; 16]).publisher("/bob/pub");
    let own = bob.list().connections;
    let [mine] = &own[..] else {
        panic!("bob sees only his own connection: {own:?}");
    };
    assert_eq!(mine.dscp, Some(0));
    let r = bob.try_admin(&serde_json::json!({
        "op": "qos", "target": [format!("connection:{}", mine.id)], "set": {"dscp": "af11"}
    }));
    assert!(matches!(r, Frame::AdminReply { .. }), "{r:?}");
    let own = bob.list().connections;
    assert_eq!(own[0].dscp, Some(10), "AF11: {own:?}");
}
