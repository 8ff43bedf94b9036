//! Issue 24 item 9 in the daemon: `[limits] max_filter_work_per_event`
//! bounds the filter work of one routed event. With a budget too small for
//! any evaluation, a subscription whose filter must be evaluated does not
//! get the event, while one without filters does; with the default budget
//! both get it. The counts show in `list` (`filter_budget`, and so in the
//! metrics built from it).

mod common;

use common::{event, start_tcp, Raw};
use tagwire_proto::admin::FilterBudgetInfo;
use tagwire_proto::{EndpointKind, Frame, Value};
use tagwire_router::Limits;

/// A regex: the subscription index decides it (filters.md, "How the index
/// finds candidates").
const INDEXED: &str = "$.s =~ '[ab]+'";
/// An inequality (no equality, no literal): found by tag and evaluated per
/// event, so a skipped delivery is known by channel and counted.
const BY_TAG: &str = "$.s != 'zz'";

/// One event published to a subscription with `filter` and an unfiltered
/// one (each on its own connection); returns whether the filtered one got
/// it, and the listing's `filter_budget` afterwards.
fn filtered_gets_it(limits: Limits, filter: &str) -> (bool, FilterBudgetInfo) {
    let h = start_tcp(limits);
    let mut f = Raw::hello_tcp(&h);
    f.declare(1, EndpointKind::Subscriber, "/filtered");
    f.subscribe_many(1, 1, 1, "/b/**", &[("filter".into(), filter.into())]);
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
    (routed > 0, listing.filter_budget)
}

#[test]
fn an_event_over_max_filter_work_per_event_skips_the_filtered_subscription_only() {
    let (got, budget) = filtered_gets_it(Limits::default(), INDEXED);
    assert!(got, "within the default budget");
    assert_eq!(
        (budget.events_over_budget, budget.skipped_deliveries),
        (0, 0),
        "{budget:?}"
    );
    let tight = Limits {
        max_filter_work_per_event: 1,
        ..Limits::default()
    };
    for filter in [INDEXED, BY_TAG] {
        let (got, _) = filtered_gets_it(tight.clone(), filter);
        assert!(
            !got,
            "{filter}: over the budget, only the plain subscription"
        );
    }
}

/// `list` shows what the budget did (issue 24 leftovers): the budget, the
/// work spent, one event over it, the filtered subscription it skipped, the
/// event's tag.
#[test]
fn list_counts_events_over_the_filter_budget_and_skipped_subscriptions() {
    let (got, within) = filtered_gets_it(Limits::default(), BY_TAG);
    assert!(got, "within the default budget");
    assert_eq!(
        within.max_work_per_event,
        Limits::default().max_filter_work_per_event
    );
    assert!(
        within.work > 0,
        "the filter's evaluation is counted: {within:?}"
    );
    assert_eq!(
        (within.events_over_budget, within.skipped_deliveries),
        (0, 0)
    );
    assert_eq!(within.last_tag, None);
    let (_, over) = filtered_gets_it(
        Limits {
            max_filter_work_per_event: 1,
            ..Limits::default()
        },
        BY_TAG,
    );
    assert_eq!(over.max_work_per_event, 1);
    assert_eq!(over.events_over_budget, 1, "{over:?}");
    assert_eq!(over.skipped_deliveries, 1, "{over:?}");
    assert_eq!(over.last_tag.as_deref(), Some("/b/x"));
}
