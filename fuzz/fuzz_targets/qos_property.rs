//! Fuzz target: arbitrary bytes as QoS properties at levels, through
//! `QosLayer::set`, `resolve`, `change` and `Resolved::for_event`. Input
//! layout: the first line is the configured band names, separated by `,` (at
//! most 8); each further line (at most 32) is `LEVEL NAME=VALUE`, LEVEL one of
//! daemon, tag, session, channel, endpoint, event (else channel). Errors are
//! expected; a panic is a bug. Properties checked:
//! - a refused property leaves the layer unchanged, and the error names the
//!   property as given;
//! - an accepted value shows as text that parses back to the same value;
//! - resolving the layers never panics, every effective value parses back,
//!   and every source is a level that set the property (or the default);
//! - `for_event` on an event QoS made from the input equals resolving with
//!   that event's layer;
//! - `change` of the last line's level with the last line's property either
//!   fails and changes nothing, or equals resolving the changed layers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_core::qos::{change, resolve, EventQos, Level, QosError, QosLayer, Source};

const MAX_LINES: usize = 32;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let bands: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|b| !b.is_empty())
        .take(8)
        .map(str::to_owned)
        .collect();
    let mut layers: Vec<QosLayer> = Level::ALL.iter().map(|l| QosLayer::new(*l)).collect();
    let mut last: Option<(Level, &str, &str)> = None;
    for line in lines.take(MAX_LINES) {
        let (level, prop) = line.split_once(' ').unwrap_or(("channel", line));
        let level = Level::from_name(level).unwrap_or(Level::Channel);
        let (name, value) = prop.split_once('=').unwrap_or((prop, ""));
        last = Some((level, name, value));
        let layer = &mut layers[level as usize];
        let before = layer.clone();
        match layer.set(name, value, &bands) {
            Ok(p) => {
                let shown = layer.show(p).expect("just set").to_string();
                let mut again = QosLayer::new(level);
                again
                    .set(p.name(), &shown, &bands)
                    .unwrap_or_else(|e| panic!("{p}={value:?} shows as {shown:?}, refused: {e}"));
                assert_eq!(
                    again.show(p).expect("just set").to_string(),
                    shown,
                    "{p}={value:?}"
                );
            }
            Err(e) => {
                assert_eq!(*layer, before, "a refused {name}={value} changed the layer");
                let message = e.to_string();
                match &e {
                    QosError::UnknownProperty { .. } | QosError::InvalidValue { .. }
                        if name.chars().count() < 100 =>
                    {
                        let quoted = format!("{name:?}");
                        assert!(
                            message.contains(&quoted),
                            "{message:?} does not name {quoted}"
                        )
                    }
                    QosError::NotSettableAt { property, .. } => {
                        assert!(message.contains(property.name()), "{message:?}")
                    }
                    _ => {}
                }
            }
        }
    }

    let refs: Vec<&QosLayer> = layers.iter().collect();
    let r = resolve(&refs);
    for (p, shown, source) in r.iter() {
        let shown = shown.to_string();
        let mut again = QosLayer::new(p.levels()[0]);
        again
            .set(p.name(), &shown, &bands)
            .unwrap_or_else(|e| panic!("effective {p}={shown:?} does not parse back: {e}"));
        if let Source::Level(l) = source {
            assert!(
                layers[l as usize].is_set(p),
                "{p} from {l}, which does not set it"
            );
        }
    }

    // An event QoS from the input's bytes.
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let num = |i: usize| u64::from(byte(i)) * 1_000_003;
    let ev = EventQos {
        priority: (byte(0) & 1 == 1).then(|| byte(1)),
        timeout: (byte(2) & 1 == 1).then(|| num(3) + 1),
        stop_time: (byte(4) & 1 == 1).then(|| num(5)),
        start_time: (byte(6) & 1 == 1).then(|| num(7)),
    };
    let without_event: Vec<&QosLayer> = layers[..4].iter().collect();
    let base = resolve(&without_event);
    let event_layer = QosLayer::from_event(&ev);
    let mut with_event = without_event.clone();
    with_event.push(&event_layer);
    let full = resolve(&with_event);
    let fast = base.for_event(&ev);
    let v = full.values();
    assert_eq!(
        (
            fast.priority,
            fast.timeout,
            fast.stop_time,
            fast.start_time,
            fast.dscp
        ),
        (
            v.priority,
            v.timeout,
            v.stop_time,
            v.start_time,
            v.dscp_code()
        ),
        "for_event differs from resolving with the event layer"
    );

    if let Some((level, name, value)) = last {
        match change(&refs, level, [(name, value)], &bands) {
            Ok((layer, changed)) => {
                let mut all = layers.clone();
                all[level as usize] = layer;
                let all: Vec<&QosLayer> = all.iter().collect();
                assert_eq!(changed, resolve(&all));
            }
            Err(_) => assert_eq!(resolve(&refs), r, "a failed change changed something"),
        }
    }
});
