//! Property tests of the admin codec: `parse(to_json(request)) == request`
//! for any request, and no JSON (or text) ever panics the parsers.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::Value;
use tagwire_proto::admin::{AdminOp, AdminReply, AdminRequest, FilterLevel};

/// Text with the characters that need escaping in JSON.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z/*_:.]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(24).collect()),
        Just("\"\\\n\u{0}é€𝄞".to_owned()),
    ]
}

fn level() -> impl Strategy<Value = FilterLevel> {
    prop_oneof![
        Just(FilterLevel::Session),
        Just(FilterLevel::Channel),
        Just(FilterLevel::Publisher),
    ]
}

fn request() -> impl Strategy<Value = AdminRequest> {
    prop_oneof![
        Just(AdminRequest::Time),
        (
            proptest::option::of(text()),
            proptest::option::of(any::<usize>())
        )
            .prop_map(|(after, limit)| AdminRequest::List { after, limit }),
        (
            text(),
            level(),
            proptest::option::of(text()),
            proptest::option::of(text())
        )
            .prop_map(|(endpoint, level, filter, map)| AdminRequest::FilterAdd {
                endpoint,
                level,
                filter,
                map,
            }),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<usize>())
        )
            .prop_map(|(after, limit)| AdminRequest::FilterList { after, limit }),
        any::<u64>().prop_map(|id| AdminRequest::FilterRemove { id }),
        (
            proptest::collection::vec(text(), 0..3),
            proptest::collection::btree_map(text(), text(), 0..4),
            proptest::collection::vec(text(), 0..3)
        )
            .prop_map(|(target, set, unset)| AdminRequest::Qos { target, set, unset }),
        text().prop_map(|target| AdminRequest::Show { target }),
        (text(), text()).prop_map(|(endpoint, interfilter)| AdminRequest::FilterOp {
            endpoint,
            interfilter
        }),
        (
            text(),
            any::<u32>(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u32>())
        )
            .prop_map(|(endpoint, id, max_packet, pid)| AdminRequest::ShmOpen {
                endpoint,
                id,
                max_packet,
                pid,
            }),
    ]
}

/// Any JSON value, a few levels deep, with admin-looking keys among others.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        text().prop_map(Value::String),
        prop_oneof![
            Just("list"),
            Just("time"),
            Just("filter_add"),
            Just("qos"),
            Just("show"),
            Just("shm_open"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("op".to_owned()),
            Just("after".to_owned()),
            Just("limit".to_owned()),
            Just("id".to_owned()),
            Just("target".to_owned()),
            Just("set".to_owned()),
            Just("endpoint".to_owned()),
            Just("level".to_owned()),
            text(),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..6)
                .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect())),
        ]
    })
}

const OPS: [AdminOp; 9] = [
    AdminOp::Time,
    AdminOp::List,
    AdminOp::FilterAdd,
    AdminOp::FilterList,
    AdminOp::FilterRemove,
    AdminOp::Qos,
    AdminOp::Show,
    AdminOp::FilterOp,
    AdminOp::ShmOpen,
];

proptest! {
    #[test]
    fn parse_of_to_json_is_the_request(req in request()) {
        let json = req.to_json();
        let back = AdminRequest::parse(&json);
        prop_assert_eq!(back, Ok(req), "{}", json);
    }

    #[test]
    fn arbitrary_json_never_panics_the_parsers(v in json()) {
        let text = v.to_string();
        // A request that parses re-encodes to one that parses the same.
        if let Ok(req) = AdminRequest::parse(&text) {
            prop_assert_eq!(AdminRequest::parse(&req.to_json()), Ok(req));
        }
        for op in OPS {
            if let Ok(reply) = AdminReply::parse(op, &text) {
                prop_assert_eq!(reply.op(), op);
                let _ = reply.to_json();
            }
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_parsers(text in any::<String>()) {
        let _ = AdminRequest::parse(&text);
        for op in OPS {
            let _ = AdminReply::parse(op, &text);
        }
    }
}
