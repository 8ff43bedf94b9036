//! The subscription index: every format, insert/remove, limits, and the
//! property that indexed matching equals evaluating every filter.

use bytes::BytesMut;
use proptest::prelude::*;
use tagwire_core::filter::{
    FilterError, FilterLimits, MatchScratch, RegexTarget, SubscriptionIndex, SubscriptionSpec,
};
use tagwire_proto::{Event, EventRef, Value};

fn encode(ev: &Event) -> BytesMut {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf
}

fn matching_ids(idx: &SubscriptionIndex<u64>, ev: &Event) -> Vec<u64> {
    let buf = encode(ev);
    let r = EventRef::parse(&buf).expect("valid");
    let mut out = Vec::new();
    idx.matching_ids(&r, &mut MatchScratch::new(), &mut out);
    out.sort_unstable();
    out
}

fn event(tag: &str, fields: &[(&str, Value)]) -> Event {
    let mut ev = Event::new(tag, &b""[..]);
    ev.fields = fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    ev
}

#[test]
fn every_format_in_one_index() {
    let mut idx = SubscriptionIndex::new(FilterLimits::default());
    let s = |x: &str| x.to_string();
    idx.insert(
        1,
        SubscriptionSpec::IntKey {
            field: s("key"),
            key: 7,
        },
        1,
    )
    .unwrap();
    idx.insert(
        2,
        SubscriptionSpec::StrKey {
            field: s("room"),
            key: s("r1"),
        },
        2,
    )
    .unwrap();
    idx.insert(
        3,
        SubscriptionSpec::TagValues(vec![
            (s("room"), Value::Str(s("r1"))),
            (s("floor"), Value::Int(2)),
        ]),
        3,
    )
    .unwrap();
    idx.insert(
        4,
        SubscriptionSpec::Regex {
            target: RegexTarget::Tag,
            pattern: s("^/conf/room[0-9]+/audio$"),
        },
        4,
    )
    .unwrap();
    idx.insert(
        5,
        SubscriptionSpec::Constraint(s("$.key > 5 and $priority < 2")),
        5,
    )
    .unwrap();
    idx.insert(6, SubscriptionSpec::All, 6).unwrap();
    idx.insert(
        7,
        SubscriptionSpec::Regex {
            target: RegexTarget::Field(s("room")),
            pattern: s("^r[0-9]$"),
        },
        7,
    )
    .unwrap();

    let ev = event(
        "/conf/room1/audio",
        &[
            ("key", Value::Int(7)),
            ("room", Value::Str(s("r1"))),
            ("floor", Value::Float(2.0)),
        ],
    );
    assert_eq!(matching_ids(&idx, &ev), vec![1, 2, 3, 4, 5, 6, 7]);
    let ev = event(
        "/conf/room1/video",
        &[("key", Value::Int(8)), ("room", Value::Str(s("r22")))],
    );
    assert_eq!(matching_ids(&idx, &ev), vec![5, 6]);

    let st = idx.stats();
    assert_eq!(st.subscriptions, 7);
    assert_eq!(st.all, 1);
    assert_eq!(st.equality_indexed, 3);
    assert_eq!(st.literal_indexed, 2);
    assert_eq!(st.unindexed, 1);
}

#[test]
fn matching_returns_handles() {
    let mut idx = SubscriptionIndex::new(FilterLimits::default());
    idx.insert(1, SubscriptionSpec::Constraint("$.k == 1".into()), "viewer")
        .unwrap();
    let buf = encode(&event("/a", &[("k", Value::Int(1))]));
    let mut out = Vec::new();
    idx.matching(
        &EventRef::parse(&buf).unwrap(),
        &mut MatchScratch::new(),
        &mut out,
    );
    assert_eq!(out, vec!["viewer"]);
}

#[test]
fn remove_returns_the_handle_and_stops_matching() {
    let mut idx = SubscriptionIndex::new(FilterLimits::default());
    idx.insert(
        1,
        SubscriptionSpec::IntKey {
            field: "k".into(),
            key: 1,
        },
        10,
    )
    .unwrap();
    idx.insert(
        2,
        SubscriptionSpec::IntKey {
            field: "k".into(),
            key: 1,
        },
        20,
    )
    .unwrap();
    let ev = event("/a", &[("k", Value::Int(1))]);
    assert_eq!(matching_ids(&idx, &ev), vec![1, 2]);
    assert_eq!(idx.remove(1), Some(10));
    assert_eq!(idx.remove(1), None);
    assert_eq!(matching_ids(&idx, &ev), vec![2]);
    assert_eq!(idx.remove(2), Some(20));
    assert!(idx.is_empty());
    assert_eq!(
        idx.stats().field_names,
        0,
        "field names are released with their last user"
    );
}

#[test]
fn duplicate_id_is_refused() {
    let mut idx = SubscriptionIndex::new(FilterLimits::default());
    idx.insert(1, SubscriptionSpec::All, ()).unwrap();
    assert_eq!(
        idx.insert(1, SubscriptionSpec::All, ()),
        Err(FilterError::DuplicateId { id: 1 })
    );
}

#[test]
fn bad_constraint_is_refused_at_insert() {
    let mut idx = SubscriptionIndex::new(FilterLimits::default());
    let e = idx
        .insert(
            1,
            SubscriptionSpec::Constraint("$priority == 'x'".into()),
            (),
        )
        .unwrap_err();
    assert!(matches!(e, FilterError::TypeMismatch { .. }));
    assert!(idx.is_empty());
}

#[test]
fn subscription_limit_is_enforced() {
    let limits = FilterLimits {
        max_subscriptions: 2,
        ..FilterLimits::default()
    };
    let mut idx = SubscriptionIndex::new(limits);
    idx.insert(1, SubscriptionSpec::All, ()).unwrap();
    idx.insert(2, SubscriptionSpec::All, ()).unwrap();
    let e = idx.insert(3, SubscriptionSpec::All, ()).unwrap_err();
    assert!(matches!(
        e,
        FilterError::LimitExceeded {
            limit: "max_subscriptions",
            value: 3,
            max: 2,
            ..
        }
    ));
}

#[test]
fn unindexed_limit_is_enforced_and_indexed_ones_still_fit() {
    let limits = FilterLimits {
        max_unindexed: 1,
        ..FilterLimits::default()
    };
    let mut idx = SubscriptionIndex::new(limits);
    idx.insert(1, SubscriptionSpec::Constraint("$priority < 3".into()), ())
        .unwrap();
    let e = idx
        .insert(2, SubscriptionSpec::Constraint("$.x > 3".into()), ())
        .unwrap_err();
    assert!(matches!(
        e,
        FilterError::LimitExceeded {
            limit: "max_unindexed",
            ..
        }
    ));
    assert_eq!(
        idx.stats().field_names,
        0,
        "a refused insert leaves no field names behind"
    );
    idx.insert(
        3,
        SubscriptionSpec::Constraint("$.x == 3 and $priority < 3".into()),
        (),
    )
    .unwrap();
}

#[test]
fn empty_tag_value_set_is_refused() {
    let mut idx = SubscriptionIndex::<()>::new(FilterLimits::default());
    assert!(matches!(
        idx.insert(1, SubscriptionSpec::TagValues(vec![]), ()),
        Err(FilterError::EmptySubscription { .. })
    ));
}

// ---- property: indexed == naive --------------------------------------------

const NAMES: &[&str] = &["a", "b", "key", "priority"];
const TAGS: &[&str] = &["/a", "/t/1", "/t/12x", "/b/ab", "/x/AB/y"];
const ATOMS: &[&str] = &[
    "$.a == 1",
    "$.a == 1.0",
    "$.b in (1, 2.0, 'x')",
    "$.key == 'x'",
    "$tag ~ '/t'",
    "$.b ~^ 'x'",
    "$priority < 3",
    "exist $.a",
    "not $.a == 2",
    "$.a + 1 == 2",
    "$type_name == 'T1'",
    "$.priority == true",
    "$tag =~ '^/t/[0-9]+$'",
    "$.b =~ '(?i)XA'",
    "$.a != 'x'",
    "$.missing == 1",
];
const PATTERNS: &[&str] = &[
    "^/a",
    "b+",
    "x|y",
    "^/t/[0-9]+$",
    ".*",
    "(?i)ab",
    "1",
    "/t/12",
];

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..4).prop_map(Value::Int),
        prop::sample::select(vec![1.0f64, 2.0, 0.5]).prop_map(Value::Float),
        prop::sample::select(vec!["x", "y", "xa", "XA"]).prop_map(|s| Value::Str(s.into())),
        any::<bool>().prop_map(Value::Bool),
    ]
}

fn spec() -> impl Strategy<Value = SubscriptionSpec> {
    let name = prop::sample::select(NAMES).prop_map(String::from);
    prop_oneof![
        Just(SubscriptionSpec::All),
        (name.clone(), 0i64..4).prop_map(|(field, key)| SubscriptionSpec::IntKey { field, key }),
        (name.clone(), prop::sample::select(vec!["x", "y", "xa"])).prop_map(|(field, k)| {
            SubscriptionSpec::StrKey {
                field,
                key: k.into(),
            }
        }),
        prop::collection::vec((name.clone(), value()), 1..4).prop_map(SubscriptionSpec::TagValues),
        (prop::option::of(name), prop::sample::select(PATTERNS)).prop_map(|(f, p)| {
            SubscriptionSpec::Regex {
                target: f.map_or(RegexTarget::Tag, RegexTarget::Field),
                pattern: p.into(),
            }
        }),
        (
            prop::collection::vec(prop::sample::select(ATOMS), 1..4),
            prop::collection::vec(any::<bool>(), 3)
        )
            .prop_map(|(atoms, ors)| {
                let mut text = String::new();
                for (i, a) in atoms.iter().enumerate() {
                    if i > 0 {
                        text.push_str(if ors[i - 1] { " or " } else { " and " });
                    }
                    text.push_str(a);
                }
                SubscriptionSpec::Constraint(text)
            }),
    ]
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        prop::sample::select(TAGS),
        0u8..5,
        prop::option::of(prop::sample::select(vec!["T1", "T2"])),
        prop::sample::subsequence(NAMES, 0..=NAMES.len()),
        prop::collection::vec(value(), NAMES.len()),
    )
        .prop_map(|(tag, prio, ty, names, vals)| {
            let mut ev = Event::new(tag, &b""[..]);
            ev.header.priority = prio;
            ev.header.type_name = ty.map(String::from);
            ev.fields = names
                .iter()
                .zip(vals)
                .map(|(n, v)| (n.to_string(), v))
                .collect();
            ev
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn indexed_matching_equals_naive_evaluation(
        specs in prop::collection::vec(spec(), 1..60),
        removed in prop::collection::vec(any::<bool>(), 60),
        events in prop::collection::vec(arb_event(), 1..8),
    ) {
        let limits = FilterLimits::default();
        let mut idx = SubscriptionIndex::new(limits.clone());
        let mut naive = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let f = s.compile(&limits).expect("generated specs compile");
            idx.insert(i as u64, s.clone(), i as u64).expect("insert");
            naive.push((i as u64, f));
        }
        for (i, r) in removed.iter().enumerate().take(specs.len()) {
            if *r && i % 3 == 0 {
                prop_assert_eq!(idx.remove(i as u64), Some(i as u64));
                naive.retain(|(id, _)| *id != i as u64);
            }
        }
        let mut scratch = MatchScratch::new();
        for ev in &events {
            let buf = encode(ev);
            let r = EventRef::parse(&buf).expect("valid");
            let mut got = Vec::new();
            // One scratch reused across events, as a lane would.
            idx.matching_ids(&r, &mut scratch, &mut got);
            got.sort_unstable();
            let want: Vec<u64> = naive.iter().filter(|(_, f)| f.matches(&r)).map(|(id, _)| *id).collect();
            prop_assert_eq!(got, want, "event {:?}", ev);
        }
    }
}

// ---- property: equality-only filters, matched without evaluation ----------
//
// A filter that is nothing but `$x == lit` or `$x in (lits)` is reported on
// an index hit without being evaluated; these values are where equal keys
// and equal values could part: integral floats against integers, -0.0, NaN,
// integers past 2^53, and strings and bytes longer than `max_match_input`
// (compared as unknown by evaluation).

const LONG: &str = "abcdefgh"; // longer than the limit below
const EXACT_FIELDS: &[&str] = &["a", "b"];

fn tricky_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            0i64,
            1,
            -1,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX,
            i64::MIN
        ])
        .prop_map(Value::Int),
        prop::sample::select(vec![
            0.0f64,
            -0.0,
            1.0,
            -1.0,
            1.5,
            9007199254740992.0,   // 2^53
            9.223372036854776e18, // 2^63
            f64::NAN,
            f64::INFINITY,
        ])
        .prop_map(Value::Float),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec!["ab", "abc", LONG, "abcdefgh2"])
            .prop_map(|s| Value::Str(s.into())),
        prop::sample::select(vec![&b"ab"[..], b"abcdefgh"])
            .prop_map(|b| Value::Bytes(b.to_vec().into())),
    ]
}

fn literal(v: &Value) -> Option<String> {
    Some(match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) if f.is_finite() => format!("{f:?}"),
        Value::Float(_) => return None,
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => format!("'{}'", s.as_str()),
        Value::Bytes(_) => return None,
    })
}

fn exact_spec() -> impl Strategy<Value = SubscriptionSpec> {
    let name = prop::sample::select(EXACT_FIELDS).prop_map(String::from);
    prop_oneof![
        // One `<tag,value>` pair: `$.name == value`, NaN and bytes included.
        (name.clone(), tricky_value()).prop_map(|(n, v)| SubscriptionSpec::TagValues(vec![(n, v)])),
        (name.clone(), tricky_value()).prop_filter_map("no literal", |(n, v)| {
            literal(&v).map(|l| SubscriptionSpec::Constraint(format!("$.{n} == {l}")))
        }),
        (name, prop::collection::vec(tricky_value(), 1..4)).prop_filter_map(
            "no literal",
            |(n, vs)| {
                let lits: Option<Vec<String>> = vs.iter().map(literal).collect();
                lits.map(|l| SubscriptionSpec::Constraint(format!("$.{n} in ({})", l.join(", "))))
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn equality_only_filters_match_exactly_what_evaluation_matches(
        specs in prop::collection::vec(exact_spec(), 1..24),
        events in prop::collection::vec(
            prop::collection::vec((prop::sample::select(EXACT_FIELDS), tricky_value()), 0..3),
            1..8,
        ),
    ) {
        let limits = FilterLimits { max_match_input: 4, ..FilterLimits::default() };
        let mut idx = SubscriptionIndex::new(limits.clone());
        let mut naive = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let f = s.compile(&limits).expect("generated specs compile");
            idx.insert(i as u64, s.clone(), i as u64).expect("insert");
            naive.push((i as u64, f));
        }
        prop_assert_eq!(idx.stats().unindexed, 0, "every one is indexed");
        let mut scratch = MatchScratch::new();
        for fields in &events {
            let mut ev = Event::new("/e", &b""[..]);
            for (n, v) in fields {
                if !ev.fields.iter().any(|(m, _)| m == n) {
                    ev.fields.push((n.to_string(), v.clone()));
                }
            }
            let buf = encode(&ev);
            let r = EventRef::parse(&buf).expect("valid");
            let mut got = Vec::new();
            idx.matching_ids(&r, &mut scratch, &mut got);
            got.sort_unstable();
            let want: Vec<u64> = naive.iter().filter(|(_, f)| f.matches(&r)).map(|(id, _)| *id).collect();
            prop_assert_eq!(got, want, "event {:?}", ev);
        }
    }
}

#[test]
fn engine_types_are_send_and_sync() {
    fn assert_send_sync<X: Send + Sync>() {}
    assert_send_sync::<SubscriptionIndex<u64>>();
    assert_send_sync::<tagwire_core::filter::Filter>();
    assert_send_sync::<tagwire_core::filter::MappingFilter>();
    assert_send_sync::<tagwire_core::filter::FilterSet>();
    assert_send_sync::<MatchScratch>();
}
