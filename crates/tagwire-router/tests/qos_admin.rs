//! QoS at run time through admin requests: every level (daemon, tag,
//! session, channel; the event level is the event header), `show` with the
//! level each value came from, and bad input that changes nothing.

mod common;

use common::{start_tcp, Raw};
use serde_json::{json, Value};
use tagwire_proto::{ErrorCode, Frame};
use tagwire_router::Limits;

/// The effective value of `property` on the endpoint's first channel, and
/// the level it came from.
fn effective(admin: &mut Raw, endpoint: &str, property: &str) -> (String, String) {
    let shown = admin.admin(&json!({"op": "show", "target": endpoint}));
    let props = shown["channels"][0]["qos"]
        .as_array()
        .unwrap_or_else(|| panic!("no channel in {shown}"));
    let p = props
        .iter()
        .find(|p| p["property"] == property)
        .unwrap_or_else(|| panic!("{property} not shown: {shown}"));
    (
        p["value"].as_str().expect("value").to_owned(),
        p["from"].as_str().expect("from").to_owned(),
    )
}

fn qos(admin: &mut Raw, target: &[&str], set: Value) -> Value {
    admin.admin(&json!({"op": "qos", "target": target, "set": set}))
}

fn refused(admin: &mut Raw, target: &[&str], set: Value, code: ErrorCode, needle: &str) {
    match admin.try_admin(&json!({"op": "qos", "target": target, "set": set})) {
        Frame::Error {
            code: c, message, ..
        } => {
            assert_eq!(c, code, "{message}");
            assert!(
                message.contains(needle),
                "{message:?} should name {needle:?}"
            );
        }
        other => panic!("expected a refusal naming {needle:?}, got {other:?}"),
    }
}

fn setup() -> (tagwire_router::RouterHandle, Raw, Raw) {
    let h = start_tcp(Limits::default());
    let sub = Raw::hello_tcp(&h).subscriber(
        "/q/viewer",
        "/q/cam/**",
        &[("priority".into(), "high".into())],
    );
    let admin = Raw::hello_tcp(&h);
    (h, sub, admin)
}

#[test]
fn every_level_sets_its_properties_and_show_names_the_level() {
    let (_h, _sub, mut admin) = setup();
    assert_eq!(
        effective(&mut admin, "/q/viewer", "priority"),
        ("high".into(), "channel".into())
    );
    assert_eq!(
        effective(&mut admin, "/q/viewer", "max_queue_length"),
        ("1024".into(), "default".into())
    );
    // Channel level, at run time.
    let r = qos(
        &mut admin,
        &["/q/viewer"],
        json!({"max_queue_length": "100", "discard": "priority"}),
    );
    assert_eq!(r["channels"], 1, "{r}");
    assert_eq!(
        effective(&mut admin, "/q/viewer", "max_queue_length"),
        ("100".into(), "channel".into())
    );
    let shown = admin.admin(&json!({"op": "show", "target": "/q/viewer"}));
    assert_eq!(shown["channels"][0]["queue_bound"], 100, "{shown}");
    // Tag level: a pattern covering the channel's.
    let r = qos(&mut admin, &["/q/**"], json!({"timeout": "2s"}));
    assert_eq!(r["level"], "tag");
    assert_eq!(effective(&mut admin, "/q/viewer", "timeout").1, "tag");
    // Daemon level.
    qos(&mut admin, &["daemon"], json!({"max_batch": "10"}));
    assert_eq!(
        effective(&mut admin, "/q/viewer", "max_batch"),
        ("10".into(), "daemon".into())
    );
    // Session level: the subscriber's connection.
    let conn = admin.admin(&json!({"op": "show", "target": "/q/viewer"}))["connection"]
        .as_u64()
        .expect("connection id");
    qos(
        &mut admin,
        &[&format!("connection:{conn}")],
        json!({"order": "deadline"}),
    );
    assert_eq!(
        effective(&mut admin, "/q/viewer", "order"),
        ("deadline".into(), "session".into())
    );
    // A more specific level still wins over the tag's.
    qos(&mut admin, &["/q/**"], json!({"priority": "low"}));
    assert_eq!(
        effective(&mut admin, "/q/viewer", "priority"),
        ("high".into(), "channel".into())
    );
    // Unset at the channel level: the tag's value shows through.
    admin.admin(&json!({"op": "qos", "target": ["/q/viewer"], "unset": ["priority"]}));
    assert_eq!(
        effective(&mut admin, "/q/viewer", "priority"),
        ("low".into(), "tag".into())
    );
}

#[test]
fn priority_dscp_and_sched_change_on_a_live_channel() {
    let (_h, _sub, mut admin) = setup();
    let mut publisher = Raw::hello_tcp(&_h).publisher("/q/pub");
    publisher.expect_alive();
    let r = qos(
        &mut admin,
        &["/q/pub", "/q/viewer"],
        json!({"priority": "critical", "dscp": "af42", "sched": "fifo:30"}),
    );
    assert_eq!(r["channels"], 1, "{r}");
    let shown = admin.admin(&json!({"op": "show", "target": "/q/viewer"}));
    assert_eq!(shown["dscp"], 36, "AF42 on the connection: {shown}");
    assert_eq!(shown["lane"]["sched"], "fifo:30", "{shown}");
    assert_eq!(
        effective(&mut admin, "/q/viewer", "priority"),
        ("critical".into(), "channel".into())
    );
    // The lane takes the policy on its own thread (or says why not).
    let lanes = common::wait_for(&mut admin, "the lane to take fifo:30", |l| {
        l.lanes
            .iter()
            .any(|lane| lane.band == "normal" && lane.sched == "fifo:30")
    });
    let normal = lanes
        .lanes
        .iter()
        .find(|l| l.band == "normal")
        .expect("normal lane");
    assert!(
        normal.sched_applied == "fifo:30" || normal.fell_back.is_some(),
        "{normal:?}"
    );
    assert!(
        normal.tcp.is_some(),
        "the lane keeps its listener: {normal:?}"
    );
}

#[test]
fn bad_changes_are_refused_by_name_and_leave_the_old_qos() {
    let (_h, _sub, mut admin) = setup();
    qos(
        &mut admin,
        &["/q/viewer"],
        json!({"max_queue_length": "50"}),
    );
    let cases: [(Value, ErrorCode, &str); 6] = [
        (json!({"colour": "red"}), ErrorCode::BadRequest, "colour"),
        (
            json!({"max_queue_length": "0"}),
            ErrorCode::BadRequest,
            "max_queue_length",
        ),
        (json!({"dscp": "gold"}), ErrorCode::BadRequest, "gold"),
        (
            json!({"sched": "fifo:200"}),
            ErrorCode::BadRequest,
            "fifo:200",
        ),
        (json!({"band": "express"}), ErrorCode::BadRequest, "express"),
        // A configured band that is not the connection's.
        (
            json!({"band": "high"}),
            ErrorCode::BadRequest,
            "cannot change lanes",
        ),
    ];
    for (set, code, needle) in cases {
        refused(&mut admin, &["/q/viewer"], set, code, needle);
    }
    // Two properties, the second bad: neither applies.
    refused(
        &mut admin,
        &["/q/viewer"],
        json!({"max_queue_length": "7", "order": "sideways"}),
        ErrorCode::BadRequest,
        "sideways",
    );
    assert_eq!(
        effective(&mut admin, "/q/viewer", "max_queue_length"),
        ("50".into(), "channel".into())
    );
    refused(
        &mut admin,
        &["/q/pub", "/q/viewer"],
        json!({"priority": "high"}),
        ErrorCode::UnknownEndpoint,
        "/q/pub",
    );
    // A new tag layer refused by a channel it reaches (installed, then
    // undone) leaves no layer behind.
    refused(
        &mut admin,
        &["/q/**"],
        json!({"band": "high"}),
        ErrorCode::BadRequest,
        "cannot change lanes",
    );
    match admin.try_admin(&json!({"op": "show", "target": "/q/**"})) {
        Frame::Error { code, .. } => assert_eq!(code, ErrorCode::UnknownEndpoint),
        other => panic!("a refused tag change left a layer: {other:?}"),
    }
    refused(
        &mut admin,
        &["nosuch"],
        json!({"priority": "high"}),
        ErrorCode::UnknownEndpoint,
        "nosuch",
    );
    // A subscription with a bad property is refused the same way.
    let mut c = Raw::hello_tcp(&_h);
    c.declare(1, tagwire_proto::EndpointKind::Subscriber, "/q/other");
    match c.try_subscribe(1, 1, "/q/**", &[("sched".into(), "fifo:200".into())]) {
        Frame::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::BadRequest);
            assert!(message.contains("fifo:200"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn max_consumers_on_a_tag_refuses_a_new_subscriber_endpoint() {
    let (h, _sub, mut admin) = setup();
    qos(&mut admin, &["/q/**"], json!({"max_consumers": "1"}));
    let mut second = Raw::hello_tcp(&h);
    second.declare(1, tagwire_proto::EndpointKind::Subscriber, "/q/second");
    match second.try_subscribe(1, 1, "/q/cam/left", &[]) {
        Frame::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::LimitReached);
            assert!(message.contains("max_consumers=1"), "{message}");
        }
        other => panic!("expected LimitReached, got {other:?}"),
    }
    // Outside the tag's pattern there is no limit.
    second.subscribe(2, 1, "/elsewhere/**", &[]);
    // The existing consumer may add another channel under the pattern.
    let mut more = Raw::hello_tcp(&h);
    more.declare(1, tagwire_proto::EndpointKind::Subscriber, "/q/third");
    qos(
        &mut admin,
        &["/q/**"],
        json!({"max_consumers": "unlimited"}),
    );
    more.subscribe(1, 1, "/q/cam/right", &[]);
}

#[test]
fn max_suppliers_on_a_tag_refuses_a_new_publisher_until_one_leaves() {
    let (h, mut sub, mut admin) = setup();
    qos(&mut admin, &["/q/**"], json!({"max_suppliers": "1"}));
    let mut first = Raw::hello_tcp(&h).publisher("/q/pub1");
    first.publish_event(1, &common::event("/q/pub1", "/q/cam/a", b"one".to_vec()));
    let mut second = Raw::hello_tcp(&h).publisher("/q/pub2");
    second.publish_event(1, &common::event("/q/pub2", "/q/cam/b", b"two".to_vec()));
    second.expect_error(ErrorCode::LimitReached, "max_suppliers=1");
    // The first keeps publishing; outside the pattern the second may.
    first.publish_event(1, &common::event("/q/pub1", "/q/cam/a", b"again".to_vec()));
    second.publish_event(1, &common::event("/q/pub2", "/elsewhere", b"free".to_vec()));
    second.expect_alive();
    let mut payloads = Vec::new();
    for _ in 0..2 {
        match sub.recv() {
            Some(Frame::Deliver { event, .. }) => payloads.push(
                tagwire_proto::EventRef::parse(&event)
                    .expect("event")
                    .payload
                    .to_vec(),
            ),
            other => panic!("expected a delivery, got {other:?}"),
        }
    }
    assert_eq!(payloads, [b"one".to_vec(), b"again".to_vec()]);
    // When the first publisher goes, the second takes its place.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        second.publish_event(1, &common::event("/q/pub2", "/q/cam/b", b"now".to_vec()));
        match second.try_admin(&json!({"op": "show", "target": "/q/viewer"})) {
            Frame::AdminReply { .. } => break,
            Frame::Error {
                code: ErrorCode::LimitReached,
                ..
            } => {
                assert!(std::time::Instant::now() < deadline, "the first never left");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
