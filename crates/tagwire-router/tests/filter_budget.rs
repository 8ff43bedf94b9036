//! Issue 24 item 9 in the daemon: `[limits] max_filter_work_per_event`
//! bounds the filter work of one routed event. With a budget too small for
//! any evaluation, a subscription whose filter must be evaluated does not
//! get the event, while one without filters does; with the default budget
//! both get it.

mod common;

use common::{event, start_tcp, Raw};
use tagwire_proto::{EndpointKind, Frame, Value};
use tagwire_router::Limits;

/// One event published to a filtered and an unfiltered subscription (each
/// on its own connection); returns whether the filtered one got it.
fn filtered_gets_it(limits: Limits) -> bool {
    let h = start_tcp(limits);
    let mut f = Raw::hello_tcp(&h);
    f.declare(1, EndpointKind::Subscriber, "/filtered");
    // A regex with no literal: found by tag and evaluated per event.
    f.subscribe_many(
        1,
        1,
        1,
        "/b/**",
        &[("filter".into(), "$.s =~ '[ab]+'".into())],
    );
    let mut q = Raw::hello_tcp(&h);
    q.declare(1, EndpointKind::Subscriber, "/plain");
    q.subscribe_many(1, 1, 1, "/b/**", &[]);
    let mut p = Raw::hello_tcp(&h).publisher("/pub");
    let mut ev = event("/pub", "/b/x", "x");
    ev.fields.push(("s".into(), Value::Str("abab".into())));
    p.publish_event(1, &ev);
    // Answered once the event is routed: whatever it went to is queued.
    p.ping(1);
    match q.recv() {
        Some(Frame::Deliver { .. }) => {}
        other => panic!("the unfiltered subscription gets every event, got {other:?}"),
    }
    let listing = p.list();
    let s = listing
        .subscriptions
        .iter()
        .find(|s| s.endpoint == "/filtered")
        .expect("the filtered subscription is listed");
    let routed = s.queue_depth as u64 + s.delivered + s.dropped;
    if routed > 0 {
        assert!(matches!(f.recv(), Some(Frame::Deliver { .. })));
    }
    routed > 0
}

#[test]
fn an_event_over_max_filter_work_per_event_skips_the_filtered_subscription_only() {
    assert!(
        filtered_gets_it(Limits::default()),
        "within the default budget"
    );
    let tight = Limits {
        max_filter_work_per_event: 1,
        ..Limits::default()
    };
    assert!(
        !filtered_gets_it(tight),
        "over the budget: only the plain subscription"
    );
}
