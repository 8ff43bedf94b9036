//! Property tests of the configuration file parser (the `router_config`
//! fuzz target does the same with arbitrary bytes): TOML-ish text built from
//! the config's keys and odd values, and arbitrary text, never panics; an
//! accepted config validates, has a listener, and reads back equal after
//! being written as TOML.

use std::path::Path;

use proptest::prelude::*;
use tagwire_router::RouterConfig;

const TOP_KEYS: &[&str] = &["name", "tcp", "unix"];

const LIMIT_KEYS: &[&str] = &[
    "max_frame",
    "max_connections",
    "max_endpoints",
    "max_subscriptions",
    "max_endpoints_per_connection",
    "max_subscriptions_per_connection",
    "max_queue_bytes",
    "max_control_bytes",
    "max_tracked_tags",
    "max_deferred_events",
    "max_deferred_bytes",
];

const STRINGS: &[&str] = &[
    "\"tagwired\"",
    "\"\"",
    "\"127.0.0.1:0\"",
    "\"[::1]:7700\"",
    "\"[fe80::1%2]:1\"",
    "\"localhost:7700\"",
    "\"/tmp/x.sock\"",
    "\"caf\\u00e9 \\n\"",
    "'single'",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "4095",
    "4096",
    "16777216",
    "268435456",
    "268435457",
    "4294967296",
    "9223372036854775807",
    "1_000",
    "0x10",
];

const TLS_KEYS: &[&str] = &["cert", "key", "client_ca"];

/// Values of the wrong type or shape, keys that do not exist.
const ODD: &[&str] = &[
    "1.5",
    "true",
    "[]",
    "{}",
    "1979-05-27",
    "tcpp = 1",
    "[other]",
    "[limits]",
    "[tls]",
];

/// `key = value` lines, mostly of the right type for the key.
fn lines(
    keys: &'static [&'static str],
    values: &'static [&'static str],
) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        (
            prop::sample::select(keys),
            prop_oneof![
                8 => prop::sample::select(values),
                1 => prop::sample::select(STRINGS),
                1 => prop::sample::select(NUMBERS),
            ],
        )
            .prop_map(|(k, v)| format!("{k} = {v}")),
        0..4,
    )
}

fn config_text() -> impl Strategy<Value = String> {
    (
        lines(TOP_KEYS, STRINGS),
        prop::option::of(lines(LIMIT_KEYS, NUMBERS)),
        prop::option::of(lines(TLS_KEYS, STRINGS)),
        prop::option::weighted(
            0.2,
            (
                any::<prop::sample::Index>(),
                prop_oneof![
                    prop::sample::select(ODD).prop_map(str::to_owned),
                    "\\PC{0,8}"
                ],
            ),
        ),
    )
        .prop_map(|(top, limits, tls, odd)| {
            let mut all = top;
            if let Some(limits) = limits {
                all.push("[limits]".to_owned());
                all.extend(limits);
            }
            if let Some(tls) = tls {
                all.push("[tls]".to_owned());
                all.extend(tls);
            }
            if let Some((at, line)) = odd {
                all.insert(at.index(all.len() + 1), line);
            }
            all.join("\n")
        })
}

fn check(text: &str) {
    let path = Path::new("props.toml");
    let first = RouterConfig::from_toml(text, path);
    let second = RouterConfig::from_toml(text, path);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("not deterministic: {first:?} vs {second:?}"),
    }
    let Ok(cfg) = first else {
        return;
    };
    cfg.validate().expect("an accepted config validates");
    assert!(cfg.tcp.is_some() || cfg.unix.is_some());
    let written = toml::to_string(&cfg).expect("serialises");
    let again = RouterConfig::from_toml(&written, path).expect("re-serialised config parses");
    assert_eq!(cfg, again, "{written}");
}

#[test]
fn the_documented_example_round_trips() {
    let text = "name = \"x\"\ntcp = \"[::1]:7700\"\n[limits]\nmax_frame = 4096\n";
    check(text);
    let cfg = RouterConfig::from_toml(text, Path::new("x.toml")).expect("valid");
    assert_eq!(cfg.limits.max_frame, 4096);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn config_like_text_never_panics_and_accepted_configs_round_trip(text in config_text()) {
        check(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,48}") {
        check(&text);
    }
}
