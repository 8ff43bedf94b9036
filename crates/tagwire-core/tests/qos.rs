//! QoS resolution, checked against a model of the rule on random layers:
//! the most specific level that sets a property wins, unsetting falls back to
//! the next level, the event level follows its own rule, `for_event` equals
//! resolving with the event's layer, and every shown value parses back.

use proptest::prelude::*;
use tagwire_core::qos::{
    change, resolve, EventQos, Level, PriorityModel, Property, QosLayer, QosSet, Resolved, Source,
};

fn bands() -> Vec<String> {
    vec!["video".to_owned(), "control".to_owned()]
}

/// Valid values of `p`, as users type them. Start times are below 1000 and
/// stop times at or above it, so that no layer is refused for start > stop.
fn value(p: Property) -> BoxedStrategy<String> {
    let n = |r: std::ops::RangeInclusive<u64>| r.prop_map(|v| v.to_string()).boxed();
    let pick = |v: &[&'static str]| {
        prop::sample::select(v.to_vec())
            .prop_map(str::to_owned)
            .boxed()
    };
    match p {
        Property::Priority => {
            prop_oneof![n(0..=255), pick(&["low", "normal", "high", "critical"])].boxed()
        }
        Property::PriorityModel => pick(&["client_propagated", "server_declared"]),
        Property::Sched => prop_oneof![
            Just("other".to_owned()),
            (-20i8..=19).prop_map(|v| format!("other:{v}")),
            (1u8..=99).prop_map(|v| format!("fifo:{v}")),
            (1u8..=99).prop_map(|v| format!("rr:{v}")),
        ]
        .boxed(),
        Property::Dscp => prop_oneof![
            n(0..=63),
            pick(&["auto", "low", "normal", "high", "critical", "EF", "va", "AF23", "cs5"]),
        ]
        .boxed(),
        Property::Timeout => prop_oneof![
            Just("none".to_owned()),
            (1u64..5000, pick(&["ns", "us", "ms", "s", "m", "h"]))
                .prop_map(|(v, u)| format!("{v}{u}")),
        ]
        .boxed(),
        Property::StopTime => prop_oneof![Just("none".to_owned()), n(1000..=u64::MAX - 1)].boxed(),
        Property::StartTime => prop_oneof![Just("none".to_owned()), n(0..=999)].boxed(),
        Property::Order => pick(&["fifo", "any", "lifo", "priority", "deadline"]),
        Property::Discard => pick(&[
            "drop_oldest",
            "fifo",
            "drop_newest",
            "lifo",
            "priority",
            "deadline",
            "reject",
            "reject_new",
        ]),
        Property::MaxQueueLength => n(1..=1 << 20),
        Property::MaxEventsPerConsumer => {
            prop_oneof![Just("unlimited".to_owned()), n(1..=1 << 24)].boxed()
        }
        Property::MaxBatch => n(1..=4096),
        Property::PacingInterval => prop_oneof![
            Just("0".to_owned()),
            (0u64..=60).prop_map(|v| format!("{v}s")),
            (0u64..=60_000).prop_map(|v| format!("{v}ms")),
        ]
        .boxed(),
        Property::MaxConsumers | Property::MaxSuppliers => {
            prop_oneof![Just("unlimited".to_owned()), n(1..=1_000_000)].boxed()
        }
        Property::Band => pick(&["auto", "video", "control"]),
        Property::History => n(0..=1_000_000),
        Property::Scale => n(1..=1_000_000),
        Property::MinInterval => prop_oneof![
            Just("0".to_owned()),
            (1u64..=3600).prop_map(|v| format!("{v}s")),
            (1u64..=60_000).prop_map(|v| format!("{v}ms")),
        ]
        .boxed(),
        Property::Proxy => prop_oneof![
            pick(&["at_subscriber", "at_publisher", "auto"]),
            "[a-z][a-z0-9-]{0,10}".prop_map(|n| format!("node:{n}")),
        ]
        .boxed(),
        Property::MaxDelay => prop_oneof![
            Just("none".to_owned()),
            Just("0".to_owned()),
            (1u64..=3600).prop_map(|v| format!("{v}s")),
            (1u64..=60_000).prop_map(|v| format!("{v}ms")),
        ]
        .boxed(),
        Property::Shm => pick(&["off", "auto", "require"]),
        Property::Reliability => pick(&["best_effort", "reliable", "exactly_once", "durable"]),
        Property::Buffer => prop_oneof![
            pick(&["none", "on"]),
            (
                1usize..=1 << 20,
                1usize..=1 << 30,
                1u64..=60_000,
                500u16..=1000
            )
                .prop_map(|(c, b, d, r)| format!(
                    "count:{c},bytes:{b},max_delay:{d}ms,release:{}",
                    r as f64 / 1000.0
                )),
        ]
        .boxed(),
        Property::Playout => prop_oneof![
            Just("none".to_owned()),
            (1u64..=60_000, pick(&["", ":drop", ":deliver"]))
                .prop_map(|(d, l)| format!("tds:{d}ms{l}")),
        ]
        .boxed(),
        Property::Compression => prop_oneof![
            Just("none".to_owned()),
            (
                pick(&["lz4", "zstd"]),
                0u32..=1 << 20,
                pick(&["", "B", "KiB"])
            )
                .prop_map(|(c, m, u)| match u.as_str() {
                    "KiB" => format!("{c}:{}KiB", m >> 10),
                    "" if m % 2 == 0 => c,
                    _ => format!("{c}:{m}{u}"),
                }),
        ]
        .boxed(),
        _ => unreachable!("the test knows every property"),
    }
}

/// Some properties settable at `level` with valid values.
fn props(level: Level) -> BoxedStrategy<Vec<(Property, String)>> {
    let settable: Vec<Property> = Property::ALL
        .into_iter()
        .filter(|p| p.settable_at(level))
        .collect();
    prop::collection::vec(
        prop::sample::select(settable).prop_flat_map(|p| (Just(p), value(p))),
        0..6,
    )
    .boxed()
}

/// One layer per level below the event (some empty), as (level, props).
fn layers() -> impl Strategy<Value = Vec<(Level, Vec<(Property, String)>)>> {
    (
        props(Level::Daemon),
        props(Level::Tag),
        props(Level::Session),
        props(Level::Channel),
    )
        .prop_map(|(d, t, s, c)| {
            vec![
                (Level::Daemon, d),
                (Level::Tag, t),
                (Level::Session, s),
                (Level::Channel, c),
            ]
        })
}

fn event() -> impl Strategy<Value = EventQos> {
    (
        prop::option::of(any::<u8>()),
        prop::option::of(1u64..1_000_000),
        prop::option::of(0u64..3000),
        prop::option::of(0u64..3000),
    )
        .prop_map(|(priority, timeout, stop_time, start_time)| EventQos {
            priority,
            timeout,
            stop_time,
            start_time,
        })
}

fn build(spec: &[(Level, Vec<(Property, String)>)]) -> Vec<QosLayer> {
    spec.iter()
        .map(|(level, props)| {
            QosLayer::parse(
                *level,
                props.iter().map(|(p, v)| (p.name(), v.as_str())),
                &bands(),
            )
            .unwrap_or_else(|e| panic!("valid layer {props:?} refused: {e}"))
        })
        .collect()
}

/// `value` as it shows once parsed (its canonical form).
fn canonical(p: Property, value: &str) -> String {
    let mut l = QosLayer::new(p.levels()[0]);
    l.set(p.name(), value, &bands()).expect("valid value");
    l.show(p).expect("just set").to_string()
}

/// The model of the rule without an event: the last value set at the most
/// specific level that sets `p`.
fn expected(spec: &[(Level, Vec<(Property, String)>)], p: Property) -> (String, Source) {
    let mut out = (QosSet::default().show(p).to_string(), Source::Default);
    let mut ordered: Vec<&(Level, Vec<(Property, String)>)> = spec.iter().collect();
    ordered.sort_by_key(|(l, _)| *l);
    for (level, props) in ordered {
        for (q, v) in props {
            if *q == p {
                out = (canonical(p, v), Source::Level(*level));
            }
        }
    }
    out
}

fn refs(layers: &[QosLayer]) -> Vec<&QosLayer> {
    layers.iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every property: the most specific level that sets it wins (the last
    /// value given there), whatever order the layers are passed in.
    #[test]
    fn the_most_specific_setting_wins(spec in layers(), rotate in 0usize..4) {
        let layers = build(&spec);
        let mut given = refs(&layers);
        given.rotate_left(rotate);
        let r = resolve(&given);
        for p in Property::ALL {
            let (value, source) = expected(&spec, p);
            prop_assert_eq!(r.values().show(p).to_string(), value, "{}", p);
            prop_assert_eq!(r.source(p), source, "{}", p);
        }
    }

    /// Setting a property at a level wins over every less specific level,
    /// unless a more specific level sets it too.
    #[test]
    fn setting_at_a_more_specific_level_wins(
        (spec, at, (p, value)) in (layers(), 0usize..4).prop_flat_map(|(spec, at)| {
            let settable: Vec<Property> =
                Property::ALL.into_iter().filter(|p| p.settable_at(Level::ALL[at])).collect();
            (Just(spec), Just(at), prop::sample::select(settable).prop_flat_map(|p| (Just(p), value(p))))
        }),
    ) {
        let mut layers = build(&spec);
        let level = Level::ALL[at];
        let value = &value;
        layers[at].set(p.name(), value, &bands()).expect("valid value");
        let r = resolve(&refs(&layers));
        let more_specific = layers[at + 1..].iter().any(|l| l.is_set(p));
        if !more_specific {
            prop_assert_eq!(r.source(p), Source::Level(level));
            prop_assert_eq!(r.values().show(p).to_string(), canonical(p, value));
        } else {
            prop_assert!(matches!(r.source(p), Source::Level(l) if l > level));
        }
    }

    /// Unsetting a property at the level it came from falls back to the next
    /// less specific level that sets it, or to the default.
    #[test]
    fn unsetting_falls_back_to_the_next_level(spec in layers(), pick in any::<prop::sample::Index>()) {
        let mut layers = build(&spec);
        let p = *pick.get(&Property::ALL);
        let r = resolve(&refs(&layers));
        let Source::Level(level) = r.source(p) else {
            prop_assert_eq!(r.values().show(p).to_string(), QosSet::default().show(p).to_string());
            return Ok(());
        };
        let i = layers.iter().position(|l| l.level() == level).expect("its layer");
        layers[i].unset(p);
        let fallback = layers[..i].iter().rev().find(|l| l.is_set(p));
        let after = resolve(&refs(&layers));
        match fallback {
            Some(l) => {
                prop_assert_eq!(after.source(p), Source::Level(l.level()));
                prop_assert_eq!(after.values().show(p).to_string(), l.show(p).expect("set").to_string());
            }
            None => {
                prop_assert_eq!(after.source(p), Source::Default);
                prop_assert_eq!(after.values().show(p).to_string(), QosSet::default().show(p).to_string());
            }
        }
        // Every other property is unaffected.
        for q in Property::ALL.into_iter().filter(|q| *q != p) {
            prop_assert_eq!(after.source(q), r.source(q));
        }
    }

    /// The event level: priority only under client_propagated, timing only
    /// tighter; `for_event` equals resolving with the event's layer.
    #[test]
    fn the_event_level_follows_its_rule(spec in layers(), ev in event()) {
        let layers = build(&spec);
        let base = resolve(&refs(&layers));
        let event_layer = QosLayer::from_event(&ev);
        let mut with_event = refs(&layers);
        with_event.push(&event_layer);
        let r = resolve(&with_event);
        let b = base.values();
        let client = b.priority_model == PriorityModel::ClientPropagated;
        let want_priority = match ev.priority { Some(p) if client => p, _ => b.priority };
        prop_assert_eq!(r.values().priority, want_priority);
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) { (Some(x), Some(y)) => Some(x.min(y)), (x, y) => x.or(y) };
        let max = |a: Option<u64>, b: Option<u64>| match (a, b) { (Some(x), Some(y)) => Some(x.max(y)), (x, y) => x.or(y) };
        prop_assert_eq!(r.values().timeout, min(ev.timeout, b.timeout));
        prop_assert_eq!(r.values().stop_time, min(ev.stop_time, b.stop_time));
        prop_assert_eq!(r.values().start_time, max(ev.start_time, b.start_time));
        // Provenance: the event only where it changed something.
        for (p, changed) in [
            (Property::Priority, ev.priority.is_some() && client),
            (Property::Timeout, r.values().timeout != b.timeout),
            (Property::StopTime, r.values().stop_time != b.stop_time),
            (Property::StartTime, r.values().start_time != b.start_time || (ev.start_time.is_some() && b.start_time.is_none())),
        ] {
            let want = if changed { Source::Level(Level::Event) } else { base.source(p) };
            prop_assert_eq!(r.source(p), want, "{}", p);
        }
        // Everything else is the channel's.
        for p in Property::ALL {
            if !matches!(p, Property::Priority | Property::Timeout | Property::StopTime | Property::StartTime) {
                prop_assert_eq!(r.source(p), base.source(p));
                prop_assert_eq!(r.values().show(p).to_string(), b.show(p).to_string());
            }
        }
        let fast = base.for_event(&ev);
        prop_assert_eq!(fast.priority, r.values().priority);
        prop_assert_eq!(fast.timeout, r.values().timeout);
        prop_assert_eq!(fast.stop_time, r.values().stop_time);
        prop_assert_eq!(fast.start_time, r.values().start_time);
        prop_assert_eq!(fast.dscp, r.values().dscp_code());
    }

    /// `change` with valid properties succeeds, equals resolving the changed
    /// layers, and leaves its inputs alone; with a bad one it fails.
    #[test]
    fn change_is_resolve_of_the_changed_layers(
        spec in layers(),
        at in 0usize..4,
        extra in props(Level::Daemon),
    ) {
        let layers = build(&spec);
        let before = resolve(&refs(&layers));
        let level = Level::ALL[at];
        let extra: Vec<(Property, String)> = extra
            .into_iter()
            .filter(|(p, _)| p.settable_at(level) && !matches!(p, Property::StartTime | Property::StopTime))
            .collect();
        let (layer, r) = change(&refs(&layers), level, extra.iter().map(|(p, v)| (p.name(), v.as_str())), &bands())
            .expect("valid change");
        let mut changed = layers.clone();
        changed[at] = layer;
        prop_assert_eq!(&r, &resolve(&refs(&changed)));
        prop_assert_eq!(resolve(&refs(&layers)), before.clone());
        let bad = change(&refs(&layers), level, [("max_batch", "0")], &bands());
        prop_assert!(bad.is_err());
        prop_assert_eq!(resolve(&refs(&layers)), before);
    }

    /// Every value shown parses back to itself.
    #[test]
    fn shown_values_parse_back(spec in layers()) {
        let layers = build(&spec);
        let r = resolve(&refs(&layers));
        for (p, shown, _) in r.iter() {
            let shown = shown.to_string();
            prop_assert_eq!(canonical(p, &shown), shown.clone(), "{}", p);
        }
    }
}

#[test]
fn resolving_nothing_gives_the_defaults() {
    let r = resolve(&[]);
    assert_eq!(r, Resolved::default());
    assert!(Property::ALL
        .iter()
        .all(|p| r.source(*p) == Source::Default));
    assert_eq!(r.values().priority, 64);
    assert_eq!(r.values().dscp_code(), 0, "normal class: CS0");
}
