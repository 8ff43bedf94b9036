//! Property test of the admin `list` request's paging parameters, parsed
//! from client JSON: any `after` cursor (`"<section>:<key>"` or anything
//! else, of any JSON type) and any `limit` get either a page — at most
//! `limit` (clamped to `MAX_PAGE_ITEMS`) items, whose `next`, if any, is
//! itself a cursor the router accepts — or a `BadRequest` error naming the
//! problem; never another code, a panic or a closed connection. Runs
//! against one embedded router with a few items in every section, through
//! raw frames.

mod common;

use std::cell::RefCell;

use common::Raw;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tagwire_proto::{EndpointKind, ErrorCode, Frame};
use tagwire_router::{Limits, Listing, MAX_PAGE_ITEMS};

/// A JSON value for `after`: cursors of every section with odd keys, no
/// section, unknown sections, and values that are not strings at all.
fn after() -> impl Strategy<Value = Option<String>> {
    let section = prop::sample::select(vec![
        "connections",
        "endpoints",
        "subscriptions",
        "tags",
        "",
        "Connections",
        "filters",
        "tags:tags",
    ]);
    let key = prop_oneof![
        Just(String::new()),
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("4294967297".to_owned()),
        Just(u64::MAX.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        Just("+1".to_owned()),
        Just(" 1".to_owned()),
        Just("/t/b".to_owned()),
        Just("/p".to_owned()),
        Just("x".repeat(5000)),
        "\\PC{0,12}",
        any::<u64>().prop_map(|n| n.to_string()),
    ];
    let cursor = (section, prop::sample::select(vec![":", "", "::"]), key)
        .prop_map(|(s, sep, k)| serde_json::Value::from(format!("{s}{sep}{k}")).to_string());
    prop::option::of(prop_oneof![
        8 => cursor,
        1 => prop::sample::select(vec!["null", "1", "true", "[]", "{}", "\"\""])
            .prop_map(str::to_owned),
    ])
}

/// A JSON value for `limit`, in range or not, of any type.
fn limit() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        4 => (0u64..=2 * MAX_PAGE_ITEMS as u64).prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "0", "1", "18446744073709551615", "18446744073709551616", "-1", "1.5", "1e3", "\"5\"",
            "null", "[]",
        ])
        .prop_map(str::to_owned),
    ])
}

fn list_body(after: Option<&str>, limit: Option<&str>) -> String {
    let mut body = String::from(r#"{"op":"list""#);
    if let Some(a) = after {
        body.push_str(&format!(r#","after":{a}"#));
    }
    if let Some(l) = limit {
        body.push_str(&format!(r#","limit":{l}"#));
    }
    body.push('}');
    body
}

/// Sends a `list` with this body; the page, or the `BadRequest` message.
fn list(admin: &mut Raw, req: u32, body: String) -> Result<Listing, String> {
    admin.send(&Frame::Admin {
        req,
        body: body.clone(),
    });
    loop {
        match admin.recv_control() {
            // The router's idle Ping: answer it.
            Some(Frame::Ping { nonce }) => admin.send(&Frame::Pong { nonce }),
            Some(Frame::AdminReply {
                req: r,
                body: reply,
            }) if r == req => {
                return Ok(serde_json::from_str(&reply)
                    .unwrap_or_else(|e| panic!("{body}: the page does not parse: {e}: {reply}")));
            }
            Some(Frame::Error {
                req: r,
                code,
                message,
            }) if r == req => {
                assert_eq!(code, ErrorCode::BadRequest, "{body}: {message}");
                assert!(!message.is_empty());
                return Err(message);
            }
            other => panic!("{body}: expected a page or BadRequest, got {other:?}"),
        }
    }
}

fn items(l: &Listing) -> usize {
    l.connections.len() + l.endpoints.len() + l.subscriptions.len() + l.tags.len()
}

#[test]
fn any_after_and_limit_give_a_page_or_bad_request_and_the_connection_stays_open() {
    let limits = Limits {
        // Every BadRequest counts as a protocol error; this test makes
        // thousands on one connection on purpose.
        max_protocol_errors: u32::MAX,
        ..Limits::default()
    };
    let h = common::start(limits);
    // A few items in every section: connections, endpoints, subscriptions
    // (ids above 2^32: connection << 32 | sub) and tags.
    let mut peers = Vec::new();
    for i in 0..3u32 {
        let mut p = Raw::hello(&h);
        p.declare(1, EndpointKind::Subscriber, &format!("/s{i}"));
        p.subscribe(1, 1, "/t/**", &[]);
        p.subscribe(2, 1, "/u/*", &[]);
        p.declare(2, EndpointKind::Publisher, &format!("/p{i}"));
        p.publish_many(2, &format!("/p{i}"), &format!("/t/{i}"), 4, 1);
        p.expect_alive();
        peers.push(p);
    }
    let admin = RefCell::new((Raw::hello(&h), 1u32));
    let first =
        list(&mut admin.borrow_mut().0, 1, list_body(None, Some("1"))).expect("the first page");
    assert_eq!(items(&first), 1);
    assert!(first.next.is_some(), "more than one item: a next cursor");

    let mut runner = TestRunner::new(Config::with_cases(1024));
    runner
        .run(&(after(), limit()), |(after, limit)| {
            let mut guard = admin.borrow_mut();
            let (admin, req) = &mut *guard;
            *req += 1;
            let body = list_body(after.as_deref(), limit.as_deref());
            let Ok(page) = list(admin, *req, body.clone()) else {
                return Ok(());
            };
            let max = limit
                .as_deref()
                .and_then(|l| l.parse::<usize>().ok())
                .map_or(tagwire_router::DEFAULT_PAGE_ITEMS, |l| {
                    l.min(MAX_PAGE_ITEMS)
                });
            prop_assert!(items(&page) <= max, "{body}: {} items", items(&page));
            if let Some(next) = page.next {
                // A page's cursor is always accepted.
                *req += 1;
                let again = list_body(Some(&serde_json::Value::from(next).to_string()), None);
                prop_assert!(list(admin, *req, again.clone()).is_ok(), "{again}");
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let (mut admin, _) = admin.into_inner();
    admin.expect_alive();
    for p in &mut peers {
        p.expect_alive();
    }
}
