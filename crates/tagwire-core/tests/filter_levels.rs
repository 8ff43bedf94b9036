//! TAO filter levels (admin AND/OR proxy) and mapping filters.

mod common;

use bytes::BytesMut;
use tagwire_core::filter::{
    levels_pass, priority_by_name, Filter, FilterError, FilterLimits, FilterList, FilterSet,
    InterFilterOp, MappingFilter, Overrides,
};
use tagwire_proto::{Event, EventRef, Value};

fn encode(ev: &Event) -> BytesMut {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf
}

fn f(text: &str) -> Filter {
    Filter::compile(text, &FilterLimits::default()).expect("compiles")
}

fn ev(priority: u8, severity: i64) -> BytesMut {
    let mut e = Event::new("/alarms/x", &b""[..]);
    e.header.priority = priority;
    e.fields.push(("severity".into(), Value::Int(severity)));
    encode(&e)
}

fn list(texts: &[&str]) -> FilterList {
    let mut l = FilterList::new(&FilterLimits::default());
    for (i, t) in texts.iter().enumerate() {
        l.add(i as u64, f(t)).expect("room");
    }
    l
}

#[test]
fn filters_on_one_level_are_alternatives() {
    let l = list(&["$priority == 1", "$.severity > 3"]);
    let buf = ev(0, 5);
    assert!(l.passes(&EventRef::parse(&buf).unwrap()));
    let buf = ev(0, 1);
    assert!(!l.passes(&EventRef::parse(&buf).unwrap()));
}

#[test]
fn and_op_needs_both_levels() {
    let admin = list(&["$priority < 2"]);
    let proxy = list(&["$.severity > 3"]);
    let pass = |p, s| {
        levels_pass(
            InterFilterOp::And,
            &admin,
            &proxy,
            &EventRef::parse(&ev(p, s)).unwrap(),
        )
    };
    assert!(pass(1, 5));
    assert!(!pass(3, 5));
    assert!(!pass(1, 1));
}

#[test]
fn or_op_needs_either_level() {
    let admin = list(&["$priority < 2"]);
    let proxy = list(&["$.severity > 3"]);
    let pass = |p, s| {
        levels_pass(
            InterFilterOp::Or,
            &admin,
            &proxy,
            &EventRef::parse(&ev(p, s)).unwrap(),
        )
    };
    assert!(pass(1, 1));
    assert!(pass(3, 5));
    assert!(!pass(3, 1));
}

#[test]
fn empty_level_passes_with_and_but_does_not_open_or() {
    let empty = FilterList::new(&FilterLimits::default());
    let proxy = list(&["$.severity > 3"]);
    let buf = ev(0, 1);
    let r = EventRef::parse(&buf).unwrap();
    assert!(!levels_pass(InterFilterOp::And, &empty, &proxy, &r));
    assert!(
        !levels_pass(InterFilterOp::Or, &empty, &proxy, &r),
        "an empty admin level must not open OR"
    );
    assert!(levels_pass(InterFilterOp::Or, &empty, &empty, &r));
    assert!(levels_pass(InterFilterOp::And, &empty, &empty, &r));
}

#[test]
fn filter_set_matches_like_levels_pass() {
    let mut set = FilterSet::new(InterFilterOp::And, &FilterLimits::default());
    set.admin.add(1, f("$priority < 2")).unwrap();
    set.proxy.add(7, f("$.severity > 3")).unwrap();
    assert!(set.matches(&EventRef::parse(&ev(1, 5)).unwrap()));
    assert!(!set.matches(&EventRef::parse(&ev(1, 2)).unwrap()));
    assert!(set.proxy.remove(7).is_some());
    assert!(set.matches(&EventRef::parse(&ev(1, 2)).unwrap()));
}

#[test]
fn filters_per_channel_limit_and_duplicate_ids() {
    let limits = FilterLimits {
        max_filters_per_channel: 2,
        ..FilterLimits::default()
    };
    let mut l = FilterList::new(&limits);
    l.add(1, f("true")).unwrap();
    assert_eq!(l.add(1, f("true")), Err(FilterError::DuplicateId { id: 1 }));
    l.add(2, f("true")).unwrap();
    let e = l.add(3, f("true")).unwrap_err();
    assert_eq!(
        e,
        FilterError::LimitExceeded {
            limit: "max_filters_per_channel",
            value: 3,
            max: 2,
            at: None
        }
    );
}

#[test]
fn mapping_sets_priority_when_condition_holds() {
    let m = MappingFilter::compile(
        "map priority=high when $.severity > 3",
        &FilterLimits::default(),
    )
    .unwrap();
    let hit = m.apply(&EventRef::parse(&ev(0, 5)).unwrap());
    assert_eq!(
        hit,
        Overrides {
            priority: Some(128),
            timeout_ns: None
        }
    );
    let miss = m.apply(&EventRef::parse(&ev(0, 1)).unwrap());
    assert!(miss.is_empty());
}

#[test]
fn priority_names_are_the_ones_the_protocol_document_lists() {
    let names: Vec<(String, u8)> = common::table_rows("### Mapping filters")
        .into_iter()
        .map(|row| match &row[..] {
            [name, number] => (name.clone(), number.parse().expect("a priority 0..=255")),
            other => panic!("a priority row is `| name | number |`, not {other:?}"),
        })
        .collect();
    assert!(
        !names.is_empty(),
        "docs/protocol.md lists no priority names"
    );
    for (name, number) in &names {
        assert_eq!(priority_by_name(name), Some(*number), "{name}");
        let m = MappingFilter::compile(&format!("map priority={name}"), &FilterLimits::default())
            .unwrap_or_else(|e| panic!("map priority={name}: {e}"));
        assert_eq!(
            m.apply(&EventRef::parse(&ev(3, 0)).unwrap()).priority,
            Some(*number),
            "{name}"
        );
    }
    // Every name the code knows is in the document: the refusal of an
    // unknown name lists them all.
    let listed: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    let (last, rest) = listed.split_last().expect("names");
    let want = format!("0..=255, {} or {last}", rest.join(", "));
    match MappingFilter::compile("map priority=highest", &FilterLimits::default()) {
        Err(FilterError::BadMappingValue { expected, .. }) => assert_eq!(expected, want),
        other => panic!("an unknown priority name should be refused, got {other:?}"),
    }
}

#[test]
fn mapping_first_matching_rule_wins_per_property() {
    let m = MappingFilter::compile(
        "map priority=critical, timeout=100ms when $.severity > 8; map priority=7 when $.severity > 3; map lifetime=2s",
        &FilterLimits::default(),
    )
    .unwrap();
    let apply = |s| m.apply(&EventRef::parse(&ev(0, s)).unwrap());
    assert_eq!(
        apply(9),
        Overrides {
            priority: Some(192),
            timeout_ns: Some(100_000_000)
        }
    );
    assert_eq!(
        apply(5),
        Overrides {
            priority: Some(7),
            timeout_ns: Some(2_000_000_000)
        }
    );
    assert_eq!(
        apply(1),
        Overrides {
            priority: None,
            timeout_ns: Some(2_000_000_000)
        }
    );
}

#[test]
fn mapping_on_absent_field_does_not_apply() {
    let m = MappingFilter::compile(
        "map priority=high when $.nope > 3",
        &FilterLimits::default(),
    )
    .unwrap();
    assert!(m.apply(&EventRef::parse(&ev(0, 5)).unwrap()).is_empty());
}
