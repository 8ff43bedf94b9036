//! Admin work at scale (issue 12 items 5 and 9): removing many filtered
//! subscriptions at once leaves the router's tables empty and other clients
//! served, and a listing larger than one frame arrives complete in pages
//! that each fit the connection's negotiated frame size. (Their cost is
//! measured, not asserted: see `admin_at_scale_timing.rs`.)

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{event, start_tcp, Raw};
use serde_json::{json, Value};
use tagwire_proto::{EndpointKind, Frame};
use tagwire_router::Limits;

/// Subscriptions per bulk test: enough that a per-item scan of every
/// table would show, small enough for a debug build.
const MANY: u32 = 4096;

fn filtered(k: u32) -> Vec<(String, String)> {
    vec![("filter".into(), format!("$.k == {k}"))]
}

/// Every page of `request` (a `list` or `filter_list`), checking that
/// each reply frame fits `c`'s negotiated max frame.
fn all_pages(c: &mut Raw, request: Value) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut req = request.clone();
    for n in 1..10_000u32 {
        c.send(&Frame::Admin {
            req: n,
            body: req.to_string(),
        });
        let (kind, body) = c.recv_raw().expect("an admin reply");
        // The frame's length field counts its type byte and body.
        let len = 1 + body.len();
        assert!(
            len <= c.max_frame as usize,
            "page {n} is {len} bytes, over the negotiated {}",
            c.max_frame
        );
        let Ok(Frame::AdminReply { body, .. }) = Frame::decode(kind, body) else {
            panic!("expected an AdminReply to {req}");
        };
        let page: Value = serde_json::from_str(&body).expect("JSON reply");
        let next = page.get("next").cloned();
        pages.push(page);
        match next {
            Some(next) if !next.is_null() => req["after"] = next,
            _ => return pages,
        }
    }
    panic!("the listing never ended");
}

fn listed(c: &mut Raw, section: &str) -> Vec<Value> {
    all_pages(c, json!({"op": "list"}))
        .iter()
        .flat_map(|p| p[section].as_array().cloned().unwrap_or_default())
        .collect()
}

fn filters(c: &mut Raw) -> Vec<Value> {
    all_pages(c, json!({"op": "filter_list"}))
        .iter()
        .flat_map(|p| p["filters"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// Waits (bounded) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A subscriber and a publisher on one connection: each `publish` must be
/// delivered.
struct Healthy {
    c: Raw,
    n: u32,
}

impl Healthy {
    fn new(h: &tagwire_router::RouterHandle) -> Healthy {
        let mut c = Raw::hello_tcp(h);
        c.declare(1, EndpointKind::Subscriber, "/ok/sub");
        c.subscribe_many(1, 7, 1, "/ok/**", &[]);
        c.declare(2, EndpointKind::Publisher, "/ok/pub");
        Healthy { c, n: 0 }
    }

    fn assert_served(&mut self) {
        self.n += 1;
        self.c.publish(2, "/ok/pub", "/ok/x", "fine");
        match self.c.recv() {
            Some(Frame::Deliver { sub: 7, .. }) => {}
            other => panic!("delivery {} did not arrive: {other:?}", self.n),
        }
    }
}

#[test]
fn closing_a_connection_with_many_filtered_subscriptions_empties_the_tables_and_others_are_served()
{
    let h = start_tcp(Limits::default());
    let mut healthy = Healthy::new(&h);
    let mut admin = Raw::hello_tcp(&h);
    let mut big = Raw::hello_tcp(&h);
    big.declare(1, EndpointKind::Subscriber, "/big");
    big.subscribe_many(1, 1, MANY, "/big/**", &filtered(1));
    // A channel-level filter on every one of them and a session filter.
    admin.admin(&json!({"op":"filter_add","endpoint":"/big","filter":"$.k < 5"}));
    admin.admin(
        &json!({"op":"filter_add","endpoint":"/big","level":"session","filter":"$priority < 9"}),
    );
    assert_eq!(filters(&mut admin).len(), MANY as usize + 2);
    healthy.assert_served();

    drop(big);
    // The healthy client is served while the router cleans up.
    healthy.assert_served();
    eventually("the closed connection's subscriptions are gone", || {
        listed(&mut admin, "subscriptions").len() == 1
    });
    eventually("the closed connection's filters are gone", || {
        filters(&mut admin).is_empty()
    });
    let endpoints: Vec<String> = listed(&mut admin, "endpoints")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(endpoints, ["/ok/pub", "/ok/sub"]);
    healthy.assert_served();
}

#[test]
fn unsubscribing_thousands_keeps_another_clients_deliveries_flowing() {
    let h = start_tcp(Limits::default());
    let mut healthy = Healthy::new(&h);
    let mut big = Raw::hello_tcp(&h);
    big.declare(1, EndpointKind::Subscriber, "/big");
    big.subscribe_many(1, 1, MANY, "/big/**", &filtered(1));
    // Every unsubscribe in flight at once; the healthy client publishes and
    // receives meanwhile.
    let mut burst = bytes::BytesMut::new();
    for sub in 1..=MANY {
        Frame::Unsubscribe { req: sub, sub }
            .encode(&mut burst)
            .expect("encode");
    }
    big.send_bytes(&burst);
    for _ in 0..100 {
        healthy.assert_served();
    }
    for sub in 1..=MANY {
        assert_eq!(
            big.recv(),
            Some(Frame::Ok { req: sub }),
            "unsubscribe {sub}"
        );
    }
    let mut admin = Raw::hello_tcp(&h);
    assert_eq!(listed(&mut admin, "subscriptions").len(), 1);
    eventually("their filters are gone", || filters(&mut admin).is_empty());
}

#[test]
fn an_undeclared_endpoints_subscriptions_get_nothing_more_and_leave_the_tables() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    c.declare(1, EndpointKind::Subscriber, "/gone");
    c.declare(2, EndpointKind::Subscriber, "/stays");
    c.subscribe_many(1, 1, MANY, "/t/**", &filtered(1));
    c.subscribe_many(2, MANY + 1, 1, "/t/**", &[]);
    c.send(&Frame::UndeclareEndpoint { req: 99, id: 1 });
    assert_eq!(c.recv(), Some(Frame::Ok { req: 99 }));
    let mut p = Raw::hello_tcp(&h).publisher("/pub");
    let mut ev = event("/pub", "/t/x", "x");
    ev.fields.push(("k".into(), tagwire_proto::Value::Int(1)));
    p.publish_event(1, &ev);
    match c.recv() {
        Some(Frame::Deliver { sub, .. }) => assert_eq!(sub, MANY + 1, "only /stays receives"),
        other => panic!("expected a delivery to /stays, got {other:?}"),
    }
    c.ping(5);
    let mut admin = Raw::hello_tcp(&h);
    eventually("the undeclared endpoint's subscriptions are gone", || {
        listed(&mut admin, "subscriptions").len() == 1
    });
    eventually("their filters are gone", || filters(&mut admin).is_empty());
}

#[test]
fn an_undeclared_endpoints_subscription_ids_can_be_used_again_at_once() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    c.declare(1, EndpointKind::Subscriber, "/gone");
    c.subscribe_many(1, 1, MANY, "/t/**", &filtered(1));
    c.send(&Frame::UndeclareEndpoint { req: 99, id: 1 });
    assert_eq!(c.recv(), Some(Frame::Ok { req: 99 }));
    c.declare(2, EndpointKind::Subscriber, "/again");
    c.subscribe_many(2, 1, MANY, "/t/**", &[]);
    let mut admin = Raw::hello_tcp(&h);
    eventually("only the new subscriptions are listed", || {
        let subs = listed(&mut admin, "subscriptions");
        subs.len() == MANY as usize && subs.iter().all(|s| s["endpoint"] == "/again")
    });
}

#[test]
fn a_listing_larger_than_one_frame_arrives_complete_in_pages_within_max_frame() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    c.declare(1, EndpointKind::Subscriber, "/many");
    // Distinct patterns, each with its own filter: about 200 bytes of JSON
    // per subscription; more items than one default page holds.
    let n = tagwire_router::DEFAULT_PAGE_ITEMS as u32 + 100;
    for sub in 1..=n {
        c.subscribe_many(1, sub, 1, &format!("/many/{sub:04}/**"), &filtered(sub));
    }
    for id in 2..40u32 {
        c.declare(id, EndpointKind::Publisher, &format!("/pub/{id:03}"));
    }
    // A client that accepts only the smallest frames (4 KiB).
    let mut small = Raw::hello_tcp_with(&h, 4096);
    assert_eq!(small.max_frame, 4096);
    let pages = all_pages(&mut small, json!({"op": "list"}));
    assert!(pages.len() > 10, "{} pages", pages.len());
    assert!(pages.last().is_some_and(|p| p.get("next").is_none()));
    let patterns: BTreeSet<String> = pages
        .iter()
        .flat_map(|p| p["subscriptions"].as_array().cloned().unwrap_or_default())
        .map(|s| s["pattern"].as_str().unwrap_or_default().to_owned())
        .collect();
    let want: BTreeSet<String> = (1..=n).map(|s| format!("/many/{s:04}/**")).collect();
    assert_eq!(patterns, want, "every subscription once");
    let endpoints = listed(&mut small, "endpoints");
    assert_eq!(endpoints.len(), 39, "every endpoint once");
    let connections = listed(&mut small, "connections");
    assert_eq!(connections.len(), 2);

    let ids: Vec<u64> = filters(&mut small)
        .iter()
        .map(|f| f["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids.len(), n as usize, "every filter once");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order");

    // A small `limit` pages too; the old single-shot request answers the
    // first page and says where to go on.
    let pages = all_pages(&mut c, json!({"op": "list", "limit": 50}));
    assert!(pages.iter().all(|p| {
        let items: usize = ["connections", "endpoints", "subscriptions", "tags"]
            .iter()
            .map(|s| p[s].as_array().map_or(0, Vec::len))
            .sum();
        items <= 50
    }));
    let first = c.admin(&json!({"op": "list"}));
    assert!(
        first["next"].is_string(),
        "a first page says where to go on"
    );
}

#[test]
fn a_bad_list_cursor_is_refused_naming_it() {
    let h = start_tcp(Limits::default());
    let mut c = Raw::hello_tcp(&h);
    c.send(&Frame::Admin {
        req: 1,
        body: json!({"op": "list", "after": "nowhere:3"}).to_string(),
    });
    match c.recv() {
        Some(Frame::Error { message, .. }) => assert!(message.contains("nowhere:3"), "{message}"),
        other => panic!("expected an error, got {other:?}"),
    }
    c.send(&Frame::Admin {
        req: 2,
        body: json!({"op": "list", "limit": 0}).to_string(),
    });
    match c.recv() {
        Some(Frame::Error { message, .. }) => assert!(message.contains("limit"), "{message}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Issue 24 item 11: thousands of subscriptions, each on its own pattern,
/// from one identity. Others connect and are served meanwhile, every
/// pattern still routes, and unsubscribing them all (in one burst) empties
/// the tables. (The cost per subscribe is measured, not asserted: see
/// `admin_at_scale_timing.rs`; the property that makes it O(pattern) is
/// checked by unit tests in `tagwire-core`'s `tags` and `route`.)
#[test]
fn thousands_of_distinct_patterns_route_and_leave_and_others_are_served() {
    let h = start_tcp(Limits::default());
    let mut healthy = Healthy::new(&h);
    let mut big = Raw::hello_tcp(&h);
    big.declare(1, EndpointKind::Subscriber, "/s");
    // Half `**` patterns, half literal tags, every one distinct.
    big.subscribe_each(1, MANY, |i| (1, format!("/s/{i}/**")));
    big.subscribe_each(MANY + 1, MANY, |i| (1, format!("/t/{i}")));
    healthy.assert_served();
    let mut fresh = Raw::hello_tcp(&h);
    fresh.ping(1);
    let mut p = Raw::hello_tcp(&h).publisher("/pub");
    for (tag, sub) in [("/s/17/x", 17), ("/t/4100", 4100), ("/s/4096", 4096)] {
        p.publish(1, "/pub", tag, "x");
        match big.recv() {
            Some(Frame::Deliver { sub: got, .. }) => assert_eq!(got, sub, "{tag}"),
            other => panic!("expected {tag} delivered to {sub}, got {other:?}"),
        }
    }
    let mut burst = bytes::BytesMut::new();
    for sub in 1..=2 * MANY {
        Frame::Unsubscribe { req: sub, sub }
            .encode(&mut burst)
            .expect("encode");
    }
    big.send_bytes(&burst);
    healthy.assert_served();
    for sub in 1..=2 * MANY {
        assert_eq!(
            big.recv(),
            Some(Frame::Ok { req: sub }),
            "unsubscribe {sub}"
        );
    }
    // Nothing routes to the unsubscribed patterns any more: the first
    // delivery after them is on a pattern subscribed since.
    big.subscribe(3 * MANY, 1, "/end", &[]);
    p.publish(1, "/pub", "/s/17/x", "x");
    p.publish(1, "/pub", "/t/4100", "x");
    p.publish(1, "/pub", "/end", "x");
    match big.recv() {
        Some(Frame::Deliver { sub, .. }) => assert_eq!(sub, 3 * MANY, "only /end is left"),
        other => panic!("expected the delivery on /end, got {other:?}"),
    }
    let mut admin = Raw::hello_tcp(&h);
    // The healthy client's and `/end`.
    assert_eq!(listed(&mut admin, "subscriptions").len(), 2);
    healthy.assert_served();
}
