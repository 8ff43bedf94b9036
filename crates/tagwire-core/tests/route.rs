//! Routes: tag patterns + filter levels + the subscription index. The
//! property test drives random changes and checks every event's
//! destinations against evaluating each channel's levels directly.

use std::collections::{BTreeMap, HashMap};

use bytes::BytesMut;
use proptest::prelude::*;
use tagwire_core::filter::{
    levels_pass, Filter, FilterLimits, FilterList, InterFilterOp, MappingFilter, Overrides,
};
use tagwire_core::route::{RouteError, RouteKind, RouteStats, Routes};
use tagwire_core::tags::Pattern;
use tagwire_proto::{Event, EventRef, Value};

fn f(text: &str) -> Filter {
    Filter::compile(text, &FilterLimits::default()).expect("compiles")
}

fn m(text: &str) -> MappingFilter {
    MappingFilter::compile(text, &FilterLimits::default()).expect("compiles")
}

fn p(text: &str) -> Pattern {
    Pattern::parse(text).expect("valid pattern")
}

fn encode(ev: &Event) -> BytesMut {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf
}

fn event(tag: &str, priority: u8, fields: &[(&str, Value)]) -> Event {
    let mut ev = Event::new(tag, &b""[..]);
    ev.header.priority = priority;
    ev.fields = fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    ev
}

/// The channels `ev` goes to, sorted, with their overrides.
fn route(r: &mut Routes<u64>, ev: &Event) -> Vec<(u64, Overrides)> {
    let buf = encode(ev);
    let e = EventRef::parse(&buf).expect("valid");
    let mut out = Vec::new();
    r.route(&e, |id, o| out.push((*id, o)));
    out.sort_by_key(|(id, _)| *id);
    out
}

fn ids(r: &mut Routes<u64>, ev: &Event) -> Vec<u64> {
    route(r, ev).into_iter().map(|(id, _)| id).collect()
}

fn indexed(r: &Routes<u64>, id: u64) -> bool {
    r.kind(id) == Some(RouteKind::Indexed)
}

#[test]
fn channels_with_indexable_filters_go_through_the_index() {
    let mut r = Routes::default();
    for i in 0..1000u64 {
        let filter = f(&format!("$.key == {i}"));
        r.add_channel(i, 1, p("/alarms/**"), i, vec![(i, filter)], None)
            .expect("added");
    }
    r.add_channel(5000, 2, p("/alarms/*"), 5000, vec![], None)
        .expect("added");
    r.add_channel(
        5001,
        2,
        p("/alarms/*"),
        5001,
        vec![(9, f("$priority < 2"))],
        None,
    )
    .expect("added");
    assert_eq!(
        r.stats(),
        RouteStats {
            plain: 1,
            judged: 1,
            indexed: 1000
        }
    );
    let ev = event("/alarms/net", 1, &[("key", Value::Int(417))]);
    assert_eq!(ids(&mut r, &ev), vec![417, 5000, 5001]);
    let ev = event("/alarms/net", 3, &[("key", Value::Int(5))]);
    assert_eq!(ids(&mut r, &ev), vec![5, 5000]);
    // The index finds channel 7's filter, but its pattern does not match.
    let ev = event("/other", 0, &[("key", Value::Int(7))]);
    assert_eq!(ids(&mut r, &ev), Vec::<u64>::new());
}

#[test]
fn removing_some_of_many_channels_that_share_filters_leaves_the_others_routed() {
    // Hundreds of channels per index key (equality, substring, unindexed),
    // removed one by one in no particular order, retired and settled.
    let texts = ["$.k == 1", "$.s ~ 'yy'", "$.k > 0"];
    let mut r = Routes::default();
    for i in 0..600u64 {
        let filter = f(texts[(i % 3) as usize]);
        r.add_channel(i, i % 2, p("/t/**"), i, vec![(i, filter)], None)
            .expect("added");
    }
    let gone = |i: u64| i.is_multiple_of(5) || i.is_multiple_of(7);
    for i in (0..600u64)
        .rev()
        .filter(|i| gone(*i) && i.is_multiple_of(2))
    {
        assert_eq!(r.remove_channel(i), Some(i));
    }
    for i in (0..600u64).filter(|i| gone(*i) && !i.is_multiple_of(2)) {
        assert!(r.retire_channel(i));
    }
    let ev = event(
        "/t/x",
        0,
        &[("k", Value::Int(1)), ("s", Value::Str("ayyb".into()))],
    );
    let want: Vec<u64> = (0..600u64).filter(|i| !gone(*i)).collect();
    assert_eq!(ids(&mut r, &ev), want, "before settling");
    let mut removed = Vec::new();
    while !r.settle(7, &mut removed) {}
    removed.sort_unstable();
    let retired: Vec<(u64, u64)> = (0..600u64)
        .filter(|i| gone(*i) && !i.is_multiple_of(2))
        .map(|i| (i, i))
        .collect();
    assert_eq!(removed, retired);
    assert_eq!(ids(&mut r, &ev), want, "after settling");
    assert_eq!(r.len(), want.len());
}

#[test]
fn an_unknown_id_retired_in_a_batch_does_not_retire_a_later_channel_with_that_id() {
    let mut r: Routes<u64> = Routes::default();
    r.add_channel(1, 1, p("/a/**"), 1, vec![], None)
        .expect("add");
    r.retire_channels(vec![1, 7]);
    r.add_channel(7, 1, p("/a/**"), 7, vec![], None)
        .expect("add");
    let ev = event("/a/x", 0, &[]);
    assert_eq!(ids(&mut r, &ev), [7], "7 was unknown when retired");
    let mut removed = Vec::new();
    while !r.settle(1, &mut removed) {}
    assert_eq!(removed, [(1, 1)], "the batch removes only channel 1");
    assert_eq!(ids(&mut r, &ev), [7]);
}

#[test]
fn thousands_of_single_channel_batches_route_and_settle() {
    // Each batch used to be searched for every channel looked up while any
    // waited: O(batches) per lookup during a burst of undeclares.
    let mut r: Routes<u64> = Routes::default();
    for id in 0..5_000u64 {
        r.add_channel(id, 1, p(&format!("/b/{id}")), id, vec![], None)
            .expect("add");
    }
    for id in 0..5_000u64 {
        if id % 2 == 0 {
            r.retire_channels(vec![id]);
        }
    }
    assert_eq!(ids(&mut r, &event("/b/10", 0, &[])), Vec::<u64>::new());
    assert_eq!(ids(&mut r, &event("/b/11", 0, &[])), [11]);
    // A retired id used again by a new channel at once.
    r.add_channel(10, 1, p("/b/10"), 10, vec![], None)
        .expect("add");
    assert_eq!(ids(&mut r, &event("/b/10", 0, &[])), [10]);
    let mut removed = Vec::new();
    while !r.settle(256, &mut removed) {}
    assert_eq!(removed.len(), 2_500);
    assert_eq!(r.len(), 2_501);
    assert_eq!(ids(&mut r, &event("/b/10", 0, &[])), [10]);
}

#[test]
fn a_channel_with_several_matching_filters_is_delivered_once() {
    let mut r = Routes::default();
    let filters = vec![(1, f("$.a == 1")), (2, f("$.b == 'x'"))];
    r.add_channel(1, 1, p("/t"), 1, filters, None)
        .expect("added");
    assert!(indexed(&r, 1));
    let ev = event(
        "/t",
        0,
        &[("a", Value::Int(1)), ("b", Value::Str("x".into()))],
    );
    assert_eq!(ids(&mut r, &ev), vec![1]);
}

#[test]
fn session_filters_apply_to_indexed_channels_with_and() {
    let mut r = Routes::default();
    r.add_channel(1, 7, p("/t"), 1, vec![(1, f("$.a == 1"))], None)
        .expect("added");
    r.add_session_filter(7, 2, f("$priority < 2"))
        .expect("added");
    assert!(indexed(&r, 1), "AND keeps the channel in the index");
    assert_eq!(
        ids(&mut r, &event("/t", 1, &[("a", Value::Int(1))])),
        vec![1]
    );
    assert_eq!(
        ids(&mut r, &event("/t", 5, &[("a", Value::Int(1))])),
        Vec::<u64>::new()
    );
}

#[test]
fn or_with_session_filters_moves_channels_to_the_tag_path_and_back() {
    let mut r = Routes::default();
    r.add_channel(1, 7, p("/t"), 1, vec![(1, f("$.a == 1"))], None)
        .expect("added");
    r.add_session_filter(7, 2, f("$priority < 2"))
        .expect("added");
    r.set_op(7, InterFilterOp::Or);
    assert!(
        !indexed(&r, 1),
        "OR with session filters cannot use the index"
    );
    // Either level suffices under OR.
    assert_eq!(
        ids(&mut r, &event("/t", 1, &[("a", Value::Int(0))])),
        vec![1]
    );
    assert_eq!(
        ids(&mut r, &event("/t", 5, &[("a", Value::Int(1))])),
        vec![1]
    );
    assert_eq!(
        ids(&mut r, &event("/t", 5, &[("a", Value::Int(0))])),
        Vec::<u64>::new()
    );
    assert!(r.remove_session_filter(7, 2));
    assert!(
        indexed(&r, 1),
        "OR without session filters uses the index again"
    );
    assert_eq!(
        ids(&mut r, &event("/t", 1, &[("a", Value::Int(0))])),
        Vec::<u64>::new()
    );
}

#[test]
fn mapping_filters_apply_on_both_paths() {
    let mut r = Routes::default();
    let map = m("map priority=high when $.a == 1");
    r.add_channel(
        1,
        1,
        p("/t"),
        1,
        vec![(1, f("$.a >= 0 and $.b == 2"))],
        Some((2, map.clone())),
    )
    .expect("added");
    r.add_channel(2, 1, p("/t"), 2, vec![], Some((3, map)))
        .expect("added");
    assert!(indexed(&r, 1));
    let got = route(
        &mut r,
        &event("/t", 0, &[("a", Value::Int(1)), ("b", Value::Int(2))]),
    );
    let high = Overrides {
        priority: Some(128),
        timeout_ns: None,
    };
    assert_eq!(got, vec![(1, high), (2, high)]);
    assert!(r.remove_mapping(1, 2));
    assert!(!r.remove_mapping(1, 2), "already gone");
    let got = route(
        &mut r,
        &event("/t", 0, &[("a", Value::Int(1)), ("b", Value::Int(2))]),
    );
    assert_eq!(got, vec![(1, Overrides::default()), (2, high)]);
}

#[test]
fn unindexable_filters_are_evaluated_by_tag() {
    let mut r = Routes::default();
    r.add_channel(
        1,
        1,
        p("/t"),
        1,
        vec![(1, f("$.a == 1")), (2, f("$priority > 3"))],
        None,
    )
    .expect("added");
    assert!(
        !indexed(&r, 1),
        "one unindexable filter keeps the channel on the tag path"
    );
    assert_eq!(ids(&mut r, &event("/t", 5, &[])), vec![1]);
    assert!(r.remove_channel_filter(1, 2));
    assert!(indexed(&r, 1));
    assert_eq!(ids(&mut r, &event("/t", 5, &[])), Vec::<u64>::new());
}

#[test]
fn adding_a_filter_to_many_channels_is_all_or_nothing() {
    let limits = FilterLimits {
        max_filters_per_channel: 1,
        ..FilterLimits::default()
    };
    let mut r = Routes::new(limits);
    r.add_channel(1, 1, p("/t"), 1, vec![], None)
        .expect("added");
    r.add_channel(2, 1, p("/t"), 2, vec![(1, f("$.a == 1"))], None)
        .expect("added");
    let err = r.add_channel_filter(&[1, 2], 5, &f("$.b == 1"));
    assert!(matches!(err, Err(RouteError::Filter(_))), "{err:?}");
    // Channel 1 did not keep the filter: it still gets everything.
    assert_eq!(ids(&mut r, &event("/t", 0, &[])), vec![1]);
    assert_eq!(
        r.add_channel_filter(&[1, 99], 5, &f("$.b == 1")),
        Err(RouteError::UnknownChannel(99))
    );
}

#[test]
fn removing_a_session_removes_its_channels() {
    let mut r = Routes::default();
    r.add_channel(1, 1, p("/t"), 1, vec![(1, f("$.a == 1"))], None)
        .expect("added");
    r.add_channel(2, 1, p("/t"), 2, vec![], None)
        .expect("added");
    r.add_channel(3, 2, p("/t"), 3, vec![], None)
        .expect("added");
    assert_eq!(
        r.add_channel(3, 2, p("/t"), 3, vec![], None),
        Err(RouteError::DuplicateChannel(3))
    );
    let mut gone = r.remove_session(1);
    gone.sort_unstable();
    assert_eq!(gone, vec![1, 2]);
    assert_eq!(r.len(), 1);
    assert_eq!(
        ids(&mut r, &event("/t", 0, &[("a", Value::Int(1))])),
        vec![3]
    );
}

// ---- model-based property test ----

const PATTERNS: &[&str] = &["/a/**", "/a/*", "/a/b", "/**", "/c/*"];
const TAGS: &[&str] = &["/a/b", "/a/c", "/a/b/c", "/c/d", "/x"];
const FILTERS: &[&str] = &[
    "$.k == 1",
    "$.k == 2",
    "$.s == 'x'",
    "$.s ~ 'yy'",
    "$type_name == 'T' and $priority < 3",
    "$.k in (1, 3)",
    "$priority < 2",
    "$.k > 1",
    "true",
    "not ($.k == 1)",
];
const MAPS: &[&str] = &["map priority=high when $.k == 1", "map timeout=5ms"];

#[derive(Debug, Clone)]
enum Op {
    AddChannel {
        session: u64,
        pattern: usize,
        filters: Vec<usize>,
        map: Option<usize>,
    },
    RemoveChannel(usize),
    AddChannelFilter(Vec<usize>, usize),
    RemoveChannelFilter(usize, usize),
    AddSessionFilter(u64, usize),
    RemoveSessionFilter(u64, usize),
    Operator(u64, bool),
    SetMapping(usize, usize),
    RemoveMapping(usize),
    RemoveSession(u64),
    /// Retire (not remove) a session's channels.
    RetireSession(u64),
    RetireChannel(usize),
    /// `settle` with this budget.
    Settle(usize),
    /// A session-level change whose re-placement waits for `settle`.
    QueuedSessionFilter(u64, usize),
    QueuedOperator(u64, bool),
    QueuedChannelFilter(Vec<usize>, usize),
    QueuedRemoveChannelFilter(usize, usize),
    QueuedMapping(usize, usize),
    RetireBatch(Vec<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    let idx = 0usize..64;
    prop_oneof![
        4 => (0u64..3, 0..PATTERNS.len(), prop::collection::vec(0..FILTERS.len(), 0..3), prop::option::of(0..MAPS.len()))
            .prop_map(|(session, pattern, filters, map)| Op::AddChannel { session, pattern, filters, map }),
        1 => idx.clone().prop_map(Op::RemoveChannel),
        2 => (prop::collection::vec(idx.clone(), 1..3), 0..FILTERS.len()).prop_map(|(c, f)| Op::AddChannelFilter(c, f)),
        1 => (idx.clone(), 0usize..4).prop_map(|(c, k)| Op::RemoveChannelFilter(c, k)),
        2 => (0u64..3, 0..FILTERS.len()).prop_map(|(s, f)| Op::AddSessionFilter(s, f)),
        1 => (0u64..3, 0usize..4).prop_map(|(s, k)| Op::RemoveSessionFilter(s, k)),
        2 => (0u64..3, any::<bool>()).prop_map(|(s, or)| Op::Operator(s, or)),
        1 => (idx.clone(), 0..MAPS.len()).prop_map(|(c, m)| Op::SetMapping(c, m)),
        1 => idx.clone().prop_map(Op::RemoveMapping),
        1 => (0u64..3).prop_map(Op::RemoveSession),
        1 => (0u64..3).prop_map(Op::RetireSession),
        1 => idx.prop_map(Op::RetireChannel),
        2 => (0usize..4).prop_map(Op::Settle),
        1 => (0u64..3, 0..FILTERS.len()).prop_map(|(s, f)| Op::QueuedSessionFilter(s, f)),
        1 => (0u64..3, any::<bool>()).prop_map(|(s, or)| Op::QueuedOperator(s, or)),
        1 => (prop::collection::vec(0usize..64, 1..3), 0..FILTERS.len()).prop_map(|(c, f)| Op::QueuedChannelFilter(c, f)),
        1 => (0usize..64, 0usize..4).prop_map(|(c, k)| Op::QueuedRemoveChannelFilter(c, k)),
        1 => (0usize..64, 0..MAPS.len()).prop_map(|(c, m)| Op::QueuedMapping(c, m)),
        1 => prop::collection::vec(0usize..64, 0..4).prop_map(Op::RetireBatch),
    ]
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        prop::sample::select(TAGS),
        0u8..5,
        prop::option::of(Just("T")),
        prop::option::of(0i64..4),
        prop::option::of(prop::sample::select(vec!["x", "ayyb", "z"])),
    )
        .prop_map(|(tag, prio, ty, k, s)| {
            let mut ev = Event::new(tag, &b""[..]);
            ev.header.priority = prio;
            ev.header.type_name = ty.map(String::from);
            if let Some(k) = k {
                ev.fields.push(("k".into(), Value::Int(k)));
            }
            if let Some(s) = s {
                ev.fields.push(("s".into(), Value::Str(s.into())));
            }
            ev
        })
}

/// The reference: every channel evaluated with [`levels_pass`].
/// A channel in the model: session, pattern, own filters, mapping filter.
type ModelChannel = (u64, Pattern, FilterList, Option<(u64, MappingFilter)>);

#[derive(Default)]
struct Model {
    channels: BTreeMap<u64, ModelChannel>,
    sessions: HashMap<u64, (FilterList, InterFilterOp)>,
}

impl Model {
    fn session(&mut self, s: u64) -> &mut (FilterList, InterFilterOp) {
        self.sessions
            .entry(s)
            .or_insert_with(|| (FilterList::default(), InterFilterOp::And))
    }

    fn route(&mut self, ev: &EventRef<'_>) -> Vec<(u64, Overrides)> {
        let mut out = Vec::new();
        let channels: Vec<u64> = self.channels.keys().copied().collect();
        for id in channels {
            let (s, pattern, proxy, map) = &self.channels[&id];
            let s = *s;
            if !pattern.matches(ev.tag) {
                continue;
            }
            let (proxy, map) = (proxy.clone(), map.clone());
            let (admin, op) = self.session(s).clone();
            if levels_pass(op, &admin, &proxy, ev) {
                out.push((
                    id,
                    map.map_or_else(Overrides::default, |(_, m)| m.apply(ev)),
                ));
            }
        }
        out
    }
}

fn nth_channel(model: &Model, i: usize) -> Option<u64> {
    let n = model.channels.len();
    (n > 0).then(|| *model.channels.keys().nth(i % n).expect("in range"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn routes_equal_evaluating_every_channel(
        ops in prop::collection::vec(op(), 1..40),
        events in prop::collection::vec(arb_event(), 1..10),
    ) {
        let mut r: Routes<u64> = Routes::default();
        let mut model = Model::default();
        // Retired channels not yet handed back by `settle`, and whether a
        // queued re-placement may still be pending.
        let mut retired: std::collections::BTreeSet<u64> = Default::default();
        // Sessions of channels retired in batches (still in their session
        // until removed).
        let mut batch_sessions: HashMap<u64, u64> = HashMap::new();
        let mut replacing = false;
        let settle = |r: &mut Routes<u64>, budget: usize, retired: &mut std::collections::BTreeSet<u64>| -> Result<bool, TestCaseError> {
            let mut removed = Vec::new();
            let done = r.settle(budget, &mut removed);
            prop_assert!(removed.len() <= budget, "settle({}) removed {}", budget, removed.len());
            for (id, value) in removed {
                prop_assert_eq!(id, value);
                prop_assert!(retired.remove(&id), "channel {} removed but not retired", id);
            }
            Ok(done)
        };
        for (step, op) in ops.into_iter().enumerate() {
            // Ids of filters added alone; a new channel's own filters take
            // ids from a separate range (1000 + 10 * fid + i).
            let fid = step as u64 + 1;
            match op {
                Op::AddChannel { session, pattern, filters, map } => {
                    let fl: Vec<(u64, Filter)> = filters.iter().enumerate().map(|(i, x)| (1000 + fid * 10 + i as u64, f(FILTERS[*x]))).collect();
                    let map = map.map(|x| (1000 + fid * 10 + 9, m(MAPS[x])));
                    r.add_channel(fid, session, p(PATTERNS[pattern]), fid, fl.clone(), map.clone()).expect("added");
                    let mut list = FilterList::default();
                    for (i, x) in fl { list.add(i, x).expect("room"); }
                    model.session(session);
                    model.channels.insert(fid, (session, p(PATTERNS[pattern]), list, map));
                }
                Op::RemoveChannel(i) => {
                    if let Some(c) = nth_channel(&model, i) {
                        prop_assert_eq!(r.remove_channel(c), Some(c));
                        model.channels.remove(&c);
                    }
                }
                Op::AddChannelFilter(cs, x) => {
                    let mut cs: Vec<u64> = cs.iter().filter_map(|i| nth_channel(&model, *i)).collect();
                    cs.dedup();
                    let ok = r.add_channel_filter(&cs, fid, &f(FILTERS[x])).is_ok();
                    let fits = cs.iter().all(|c| model.channels[c].2.len() < FilterLimits::default().max_filters_per_channel);
                    prop_assert_eq!(ok, fits);
                    if ok {
                        for c in cs { model.channels.get_mut(&c).expect("present").2.add(fid, f(FILTERS[x])).expect("room"); }
                    }
                }
                Op::RemoveChannelFilter(i, k) => {
                    if let Some(c) = nth_channel(&model, i) {
                        let ids: Vec<u64> = model.channels[&c].2.iter().map(|(id, _)| id).collect();
                        if let Some(&id) = ids.get(k % ids.len().max(1)) {
                            prop_assert!(r.remove_channel_filter(c, id));
                            model.channels.get_mut(&c).expect("present").2.remove(id);
                        }
                    }
                }
                Op::AddSessionFilter(s, x) => {
                    if r.add_session_filter(s, fid, f(FILTERS[x])).is_ok() {
                        model.session(s).0.add(fid, f(FILTERS[x])).expect("same limits");
                    }
                }
                Op::RemoveSessionFilter(s, k) => {
                    let ids: Vec<u64> = model.session(s).0.iter().map(|(id, _)| id).collect();
                    if let Some(&id) = ids.get(k % ids.len().max(1)) {
                        prop_assert!(r.remove_session_filter(s, id));
                        model.session(s).0.remove(id);
                    }
                }
                Op::Operator(s, or) => {
                    let op = if or { InterFilterOp::Or } else { InterFilterOp::And };
                    r.set_op(s, op);
                    model.session(s).1 = op;
                }
                Op::SetMapping(i, x) => {
                    if let Some(c) = nth_channel(&model, i) {
                        r.set_mapping(&[c], fid, &m(MAPS[x]));
                        model.channels.get_mut(&c).expect("present").3 = Some((fid, m(MAPS[x])));
                    }
                }
                Op::RemoveMapping(i) => {
                    if let Some(c) = nth_channel(&model, i) {
                        let id = model.channels[&c].3.as_ref().map(|(id, _)| *id);
                        if let Some(id) = id {
                            prop_assert!(r.remove_mapping(c, id));
                            model.channels.get_mut(&c).expect("present").3 = None;
                        }
                    }
                }
                Op::RemoveSession(s) => {
                    // Its batch-retired channels leave the session too.
                    batch_sessions.retain(|c, cs| retired.contains(c) && *cs != s);
                    let mut got = r.remove_session(s);
                    got.sort_unstable();
                    let want: Vec<u64> = model.channels.iter().filter(|(_, c)| c.0 == s).map(|(id, _)| *id).collect();
                    prop_assert_eq!(got, want);
                    model.channels.retain(|_, c| c.0 != s);
                    model.sessions.remove(&s);
                }
                Op::RetireSession(s) => {
                    let want: Vec<u64> = model.channels.iter().filter(|(_, c)| c.0 == s).map(|(id, _)| *id).collect();
                    let batched = retired.iter().filter(|c| batch_sessions.get(c) == Some(&s)).count();
                    prop_assert_eq!(r.retire_session(s), want.len() + batched);
                    batch_sessions.retain(|_, cs| *cs != s);
                    retired.extend(want);
                    model.channels.retain(|_, c| c.0 != s);
                    model.sessions.remove(&s);
                }
                Op::RetireChannel(i) => {
                    if let Some(c) = nth_channel(&model, i) {
                        prop_assert!(r.retire_channel(c));
                        prop_assert!(!r.retire_channel(c), "retired twice");
                        prop_assert_eq!(r.remove_channel(c), None);
                        prop_assert_eq!(r.kind(c), None);
                        retired.insert(c);
                        model.channels.remove(&c);
                    }
                }
                Op::Settle(budget) => {
                    if settle(&mut r, budget, &mut retired)? {
                        replacing = false;
                        prop_assert!(retired.is_empty(), "settled with {:?} retired", retired);
                    }
                }
                Op::QueuedSessionFilter(s, x) => {
                    if r.queue_add_session_filter(s, fid, f(FILTERS[x])).is_ok() {
                        model.session(s).0.add(fid, f(FILTERS[x])).expect("same limits");
                        replacing = true;
                    }
                }
                Op::QueuedChannelFilter(cs, x) => {
                    let mut cs: Vec<u64> = cs.iter().filter_map(|i| nth_channel(&model, *i)).collect();
                    cs.dedup();
                    let ok = r.queue_add_channel_filter(&cs, fid, &f(FILTERS[x])).is_ok();
                    let fits = cs.iter().all(|c| model.channels[c].2.len() < FilterLimits::default().max_filters_per_channel);
                    prop_assert_eq!(ok, fits);
                    if ok {
                        for c in cs { model.channels.get_mut(&c).expect("present").2.add(fid, f(FILTERS[x])).expect("room"); }
                        replacing = true;
                    }
                }
                Op::QueuedRemoveChannelFilter(i, k) => {
                    // As `filter_remove` does: from every channel holding it.
                    if let Some(c) = nth_channel(&model, i) {
                        let ids: Vec<u64> = model.channels[&c].2.iter().map(|(id, _)| id).collect();
                        if let Some(&id) = ids.get(k % ids.len().max(1)) {
                            let holders: Vec<u64> = model.channels.iter().filter(|(_, ch)| ch.2.iter().any(|(f, _)| f == id)).map(|(c, _)| *c).collect();
                            r.queue_remove_channel_filter(&holders, id);
                            for h in holders {
                                model.channels.get_mut(&h).expect("present").2.remove(id);
                            }
                            replacing = true;
                        }
                    }
                }
                Op::RetireBatch(is) => {
                    let mut cs: Vec<u64> = is.iter().filter_map(|i| nth_channel(&model, *i)).collect();
                    cs.sort_unstable();
                    cs.dedup();
                    for c in &cs {
                        batch_sessions.insert(*c, model.channels[c].0);
                        model.channels.remove(c);
                        retired.insert(*c);
                    }
                    // An unknown id in a batch is ignored.
                    cs.push(u64::MAX);
                    r.retire_channels(cs);
                }
                Op::QueuedMapping(i, x) => {
                    if let Some(c) = nth_channel(&model, i) {
                        r.queue_set_mapping(&[c], fid, &m(MAPS[x]));
                        model.channels.get_mut(&c).expect("present").3 = Some((fid, m(MAPS[x])));
                        replacing = true;
                    }
                }
                Op::QueuedOperator(s, or) => {
                    let op = if or { InterFilterOp::Or } else { InterFilterOp::And };
                    r.queue_set_op(s, op);
                    model.session(s).1 = op;
                    replacing = true;
                }
            }
            prop_assert_eq!(r.len(), model.channels.len() + retired.len());
        }
        // Retired channels route nowhere before `settle` removes them (a
        // queued re-placement may still route by the old placement).
        if !replacing {
            for ev in &events {
                let buf = encode(ev);
                let e = EventRef::parse(&buf).expect("valid");
                let mut got = Vec::new();
                r.route(&e, |id, o| got.push((*id, o)));
                got.sort_by_key(|(id, _)| *id);
                prop_assert_eq!(got, model.route(&e), "before settling, event {:?}", ev);
            }
        }
        while !settle(&mut r, 3, &mut retired)? {}
        prop_assert!(retired.is_empty(), "never removed: {:?}", retired);
        prop_assert!(r.is_settled());
        prop_assert_eq!(r.len(), model.channels.len());
        for ev in &events {
            let buf = encode(ev);
            let e = EventRef::parse(&buf).expect("valid");
            let mut got = Vec::new();
            r.route(&e, |id, o| got.push((*id, o)));
            got.sort_by_key(|(id, _)| *id);
            prop_assert_eq!(got, model.route(&e), "event {:?}", ev);
        }
    }
}
