//! Issue 24 item 9: a filtered event's cost has a bound per event, not per
//! regex or per subscription. The fields are decoded once per event, not
//! once per filtered subscription, and reading them does not check string
//! UTF-8 again; and the work of all of an event's filter evaluations is
//! bounded by `FilterLimits::max_event_work`, counted in work units (not
//! time, so these tests are deterministic).

use bytes::BytesMut;
use tagwire_core::filter::{Filter, FilterLimits, InterFilterOp};
use tagwire_core::route::Routes;
use tagwire_core::tags::Pattern;
use tagwire_proto::{Event, EventRef, Value};

fn compile(text: &str) -> Filter {
    Filter::compile(text, &FilterLimits::default())
        .unwrap_or_else(|e| panic!("{text:?} should compile: {e}"))
}

fn event(tag: &str, fields: Vec<(&str, Value)>) -> BytesMut {
    let mut ev = Event::new(tag, &b""[..]);
    ev.fields = fields.into_iter().map(|(n, v)| (n.into(), v)).collect();
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf
}

fn pattern(p: &str) -> Pattern {
    Pattern::parse(p).expect("valid pattern")
}

/// Routes `buf`, returning the values delivered, sorted.
fn route(routes: &mut Routes<u64>, buf: &[u8]) -> Vec<u64> {
    let ev = EventRef::parse(buf).expect("valid event");
    let mut got = Vec::new();
    routes.route(&ev, |v, _| got.push(*v));
    got.sort_unstable();
    got
}

/// 64 filtered subscriptions (found by tag, their filters evaluated per
/// event) and an event with a 1 MiB string field that none reads: the
/// event's fields are decoded once for all 64, not once each (each decode
/// checked every string's UTF-8 again: 37.6 ms per subscription for a
/// 15 MiB field). Fails on the code before the fix, which decoded (and
/// checked) the fields once per subscription: 64 decodes.
#[test]
fn a_field_no_filter_reads_is_decoded_once_per_event_not_per_subscription() {
    let mut routes: Routes<u64> = Routes::new(FilterLimits::default());
    for c in 0..64u64 {
        // Session filters joined by OR: the channel is found by tag and
        // both levels are evaluated for every event.
        routes.set_op(c, InterFilterOp::Or);
        routes
            .add_session_filter(c, 1, compile(&format!("$.n == {c}")))
            .expect("session filter");
        routes
            .add_channel(
                c,
                c,
                pattern("/t/**"),
                c,
                vec![(2, compile("$.n < 0"))],
                None,
            )
            .expect("channel");
    }
    assert_eq!(routes.stats().judged, 64, "all 64 are evaluated per event");
    let big = "é".repeat(512 * 1024);
    let buf = event("/t/x", vec![("n", Value::Int(7)), ("big", Value::Str(big))]);
    assert_eq!(route(&mut routes, &buf), vec![7]);
    let stats = routes.budget_stats();
    assert_eq!(
        stats.field_decodes, 1,
        "one decode of the event's fields for its 64 filtered subscriptions"
    );
    assert_eq!(stats.over_budget, 0);
    // And once more per further event.
    assert_eq!(route(&mut routes, &buf), vec![7]);
    assert_eq!(routes.budget_stats().field_decodes, 2);
}

/// 10 channels whose filter matches only when it is evaluated to the end
/// (`not` of a regex that does not match: a budget that made the regex
/// unknown must not make the `not` true), and one channel without filters.
fn budget_routes(max_event_work: u64) -> Routes<u64> {
    let limits = FilterLimits {
        max_event_work,
        ..FilterLimits::default()
    };
    let mut routes = Routes::new(limits);
    for c in 0..10u64 {
        routes
            .add_channel(
                c,
                c,
                pattern("/b/**"),
                c,
                vec![(1, compile("not ($.s =~ 'q[0-9]+z')"))],
                None,
            )
            .expect("channel");
    }
    routes
        .add_channel(100, 100, pattern("/b/**"), 100, Vec::new(), None)
        .expect("plain channel");
    routes
}

/// An event whose evaluations would exceed `max_event_work` stops being
/// evaluated where the budget runs out: the filtered channels left do not
/// get it, the channel without filters does, and the routes count the
/// event, the channels it skipped and name its tag and the channel where
/// the budget ran out. Without the budget (before the fix) all 10 filtered
/// channels got it, whatever it cost.
#[test]
fn an_event_over_the_budget_stops_evaluating_and_is_counted() {
    let subject = "abcdefgh".repeat(128); // 1 KiB, no `q`
    let buf = event("/b/x", vec![("s", Value::Str(subject))]);

    // Unlimited: every channel gets it; the work is the same per channel.
    let mut routes = budget_routes(u64::MAX);
    assert_eq!(routes.stats().judged, 10);
    let all: Vec<u64> = (0..10).chain([100]).collect();
    assert_eq!(route(&mut routes, &buf), all);
    let work = routes.budget_stats().work;
    assert!(
        work > 0 && work.is_multiple_of(10),
        "equal work per channel: {work}"
    );
    let per_channel = work / 10;
    // A regex reads its subject: 1 KiB of the 1 KiB subject, counted.
    assert!(per_channel >= 1024, "{per_channel}");
    assert_eq!(routes.budget_stats().over_budget, 0);

    // Budget for three and a half channels.
    let mut routes = budget_routes(3 * per_channel + per_channel / 2);
    let got = route(&mut routes, &buf);
    assert_eq!(
        got.len(),
        4,
        "three filtered channels and the plain one: {got:?}"
    );
    assert!(
        got.contains(&100),
        "a channel without filters costs no budget"
    );
    let stats = routes.budget_stats().clone();
    assert_eq!(stats.over_budget, 1);
    assert_eq!(
        stats.skipped, 7,
        "the channel cut short and the six after it"
    );
    let budget = 3 * per_channel + per_channel / 2;
    assert!(
        stats.work >= 3 * per_channel && stats.work <= budget,
        "work {} within the budget {budget}",
        stats.work
    );
    let last = stats.last.expect("the event over budget is named");
    assert_eq!(last.tag, "/b/x");
    let stopped = last
        .channel
        .expect("the budget ran out in a channel found by tag");
    assert!(stopped < 10 && !got.contains(&stopped), "{stopped} {got:?}");

    // Each event has its own budget: the next one gets as far.
    assert_eq!(route(&mut routes, &buf).len(), 4);
    assert_eq!(routes.budget_stats().over_budget, 2);

    // An event that no filtered channel sees costs nothing and counts nothing.
    let other = event("/elsewhere", vec![("s", Value::Str("q1z".into()))]);
    assert_eq!(route(&mut routes, &other), Vec::<u64>::new());
    assert_eq!(routes.budget_stats().over_budget, 2);
}

/// Through the index: with no budget at all, a channel whose indexed
/// filter is decided by the index alone (an equality) still gets the event,
/// one whose filter must be evaluated (a regex the index only pre-filters)
/// does not, and the event is counted.
#[test]
fn indexed_channels_that_need_an_evaluation_are_stopped_by_the_budget() {
    for (budget, want) in [(u64::MAX, vec![1, 2, 3]), (0, vec![1, 3])] {
        let limits = FilterLimits {
            max_event_work: budget,
            ..FilterLimits::default()
        };
        let mut routes: Routes<u64> = Routes::new(limits);
        routes
            .add_channel(
                1,
                1,
                pattern("/i/**"),
                1,
                vec![(1, compile("$.n == 7"))],
                None,
            )
            .expect("equality channel");
        routes
            .add_channel(
                2,
                2,
                pattern("/i/**"),
                2,
                vec![(1, compile("$.s =~ 'ab+c'"))],
                None,
            )
            .expect("regex channel");
        routes
            .add_channel(3, 3, pattern("/i/**"), 3, Vec::new(), None)
            .expect("plain channel");
        assert_eq!(routes.stats().indexed, 2);
        let buf = event(
            "/i/x",
            vec![("n", Value::Int(7)), ("s", Value::Str("xxabbbc".into()))],
        );
        assert_eq!(route(&mut routes, &buf), want, "budget {budget}");
        let over = routes.budget_stats().over_budget;
        assert_eq!(over, u64::from(budget == 0), "budget {budget}");
    }
}

/// A long string field that an indexed filter reads: the literal index
/// looks for its grams only as far as a match could lie (`max_match_input`
/// bytes: `~` and `=~` are unknown on longer subjects, and so is `~^` when
/// its literal is longer too), not through the whole field (a 15 MiB field cost ~300 ms per
/// event), and still finds every match. Fails before the fix: the index
/// probed every window of the 1 MiB field, 16 work units each, and the
/// event ran over the budget.
#[test]
fn the_literal_index_looks_into_a_long_field_only_as_far_as_a_match_can_lie() {
    let mut routes: Routes<u64> = Routes::new(FilterLimits::default());
    let prefix = "p".repeat(1000) + "q";
    routes
        .add_channel(
            1,
            1,
            pattern("/l/**"),
            1,
            vec![(1, compile("$.big ~ 'needle'"))],
            None,
        )
        .expect("contains channel");
    routes
        .add_channel(
            2,
            2,
            pattern("/l/**"),
            2,
            vec![(1, compile(&format!("$.big ~^ '{prefix}'")))],
            None,
        )
        .expect("prefix channel");
    assert_eq!(routes.stats().indexed, 2);

    // 1 MiB: `~` is unknown (longer than max_match_input); the 1001-byte
    // prefix matches.
    let mut big = prefix.clone();
    big.push_str(
        &"needle"
            .repeat(1 << 20)
            .chars()
            .take((1 << 20) - big.len())
            .collect::<String>(),
    );
    let buf = event("/l/x", vec![("big", Value::Str(big))]);
    assert_eq!(route(&mut routes, &buf), vec![2]);
    let stats = routes.budget_stats();
    assert_eq!(stats.over_budget, 0, "{stats:?}");
    assert!(
        stats.work < 200_000,
        "the index read only the start of the field: {stats:?}"
    );

    // Within max_match_input the needle is found wherever it lies.
    let mut s = "x".repeat(1000);
    s.replace_range(994..1000, "needle");
    let buf = event("/l/x", vec![("big", Value::Str(s))]);
    assert_eq!(route(&mut routes, &buf), vec![1]);
}

/// A publisher's filters (one list per event, evaluated outside `Routes`)
/// have the same budget: within it the list answers as before; past it a
/// filter cut short does not match, so the event does not pass. Without a
/// budget (before the fix) the list passed whatever it cost.
#[test]
fn a_filter_list_over_its_budget_does_not_pass() {
    let mut list = tagwire_core::filter::FilterList::new(&FilterLimits::default());
    for id in 0..16 {
        list.add(
            id,
            compile(&format!("$.n == {id} or not ($.s =~ 'q[0-9]+z')")),
        )
        .expect("fits");
    }
    let buf = event(
        "/p",
        vec![("n", Value::Int(99)), ("s", Value::Str("ab".repeat(512)))],
    );
    let ev = EventRef::parse(&buf).expect("valid");
    assert!(list.passes(&ev), "unbudgeted: the first filter matches");
    assert!(list.passes_within(&ev, u64::MAX));
    assert!(list.passes_within(&ev, FilterLimits::default().max_event_work));
    assert!(
        !list.passes_within(&ev, 1000),
        "1 KiB regex subject, 1000 units: cut short"
    );
}
