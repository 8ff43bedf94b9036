//! Property tests of topology loading (the `place_model` fuzz target does
//! the same with arbitrary bytes): arbitrary text, and small TOML and JSON
//! files with random node references and numbers (now and then of the wrong
//! type, and sometimes spliced), read as TOML and as JSON, never panic
//! through parsing, validation and building the problem; what parses reads
//! back the same after being written as TOML.

use proptest::prelude::*;
use tagwire_place::model::{InputFormat, TopologySpec};
use tagwire_place::PlacementProblem;

const GOOD_TOML: &str = r#"
nodes = [{ name = "p" }, { name = "m", cpu = 100 }, { name = "s" }]
links = [
  { name = "pm", between = ["p", "m"], bandwidth = 1000, latency_ms = 1 },
  { name = "ms", between = ["m", "s"] },
]
[[tags]]
name = "/t"
publisher = "p"
period_ms = 10
proxy = "per_subscriber"
subscribers = [{ name = "viewer", node = "s", period_ms = 20, max_delay_ms = 100 }]
"#;

const GOOD_JSON: &str = r#"{"nodes": [{"name": "p"}, {"name": "s", "cpu": 5}],
 "links": [{"between": ["p", "s"], "bandwidth": 10}],
 "tags": [{"name": "/t", "publisher": "p", "period_ms": 10,
           "subscribers": [{"name": "v", "node": "s", "period_ms": 20}]}]}"#;

/// The files above with every reference to a node and every number a slot:
/// `@n` a node name, `@v` a number, `@p` a proxy sharing.
const TOML_TEMPLATE: &str = r#"
nodes = [{ name = "p" }, { name = "m", cpu = @v }, { name = "s" }]
links = [
  { name = "pm", between = [@n, @n], bandwidth = @v, latency_ms = @v },
  { name = @n, between = [@n, @n] },
]
[[tags]]
name = "/t"
publisher = @n
period_ms = @v
message_bytes = @v
proxy = @p
subscribers = [{ name = "viewer", node = @n, period_ms = @v, max_delay_ms = @v }]
"#;

const JSON_TEMPLATE: &str = r#"{"nodes": [{"name": "p"}, {"name": "m"}, {"name": "s", "cpu": @v}],
 "links": [{"between": [@n, @n], "bandwidth": @v, "latency_ms": @v}, {"between": [@n, @n]}],
 "tags": [{"name": "/t", "publisher": @n, "period_ms": @v, "proxy": @p,
           "subscribers": [{"name": "v", "node": @n, "period_ms": @v, "message_bytes": @v}]}]}"#;

/// Slot values: well-typed ones first, then `ODD_*` ones of the wrong type
/// or out of range (picked one time in ten).
const NAMES: &[&str] = &["\"p\"", "\"m\"", "\"s\"", "\"x\"", "\"\"", "\" \"", "1"];
const ODD_NAMES: usize = 4;
const NUMBERS: &[&str] = &[
    "1", "10", "20", "100", "1000", "1.5", "1e308", "5e-324", "0", "-1", "-0.0", "1e400", "nan",
    "inf", "\"1\"",
];
const ODD_NUMBERS: usize = 7;
const PROXIES: &[&str] = &["\"shared\"", "\"per_subscriber\"", "\"other\"", "0"];
const ODD_PROXIES: usize = 2;

/// A template with its slots filled from `picks`.
fn fill(template: &str, picks: &[(bool, prop::sample::Index)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut picks = picks.iter().cycle();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '@' {
            out.push(c);
            continue;
        }
        let (values, odd) = match chars.next() {
            Some('n') => (NAMES, ODD_NAMES),
            Some('v') => (NUMBERS, ODD_NUMBERS),
            _ => (PROXIES, ODD_PROXIES),
        };
        let (any, pick) = picks.next().expect("cycle of a non-empty vec");
        let values = if *any {
            values
        } else {
            &values[..values.len() - odd]
        };
        out.push_str(pick.get::<&str>(values));
    }
    out
}

/// Fragments that keep a spliced file close to the syntax.
const FRAGMENTS: &[&str] = &[
    "", "0", "\"p\"", "[", "]", "{", "}", ",", "=", "\n", "name", "cpu", "tags", "shared",
];

/// `text` with the byte range `[a, a + len)` (clamped to char boundaries)
/// replaced by `with`.
fn splice(text: &str, a: usize, len: usize, with: &str) -> String {
    let mut a = a % (text.len() + 1);
    let mut b = (a + len).min(text.len());
    while !text.is_char_boundary(a) {
        a -= 1;
    }
    while !text.is_char_boundary(b) {
        b -= 1;
    }
    format!("{}{}{}", &text[..a], with, &text[b..])
}

fn mutated() -> impl Strategy<Value = String> {
    (
        prop::bool::ANY,
        prop::collection::vec(
            (prop::bool::weighted(0.1), any::<prop::sample::Index>()),
            16,
        ),
        prop::option::weighted(
            0.25,
            (
                any::<usize>(),
                0usize..8,
                prop_oneof![
                    prop::sample::select(FRAGMENTS).prop_map(str::to_owned),
                    "\\PC{0,4}"
                ],
            ),
        ),
    )
        .prop_map(|(json, picks, edit)| {
            let text = fill(if json { JSON_TEMPLATE } else { TOML_TEMPLATE }, &picks);
            match edit {
                Some((at, len, with)) => splice(&text, at, len, &with),
                None => text,
            }
        })
}

fn check(text: &str) {
    for format in [InputFormat::Toml, InputFormat::Json] {
        let Ok(spec) = TopologySpec::parse(text, format) else {
            continue;
        };
        let written = toml::to_string(&spec).expect("a parsed spec serialises");
        let again = TopologySpec::from_toml_str(&written).expect("and parses again");
        // Debug, not ==: NaN (refused by validation) is not equal to itself.
        assert_eq!(format!("{spec:?}"), format!("{again:?}"), "{written}");
        if let Ok(topo) = spec.validate() {
            let _ = PlacementProblem::new(&topo);
        }
    }
}

#[test]
fn the_unmutated_files_are_valid() {
    for (text, format) in [
        (GOOD_TOML, InputFormat::Toml),
        (GOOD_JSON, InputFormat::Json),
    ] {
        let spec = TopologySpec::parse(text, format).expect("parses");
        PlacementProblem::new(&spec.validate().expect("valid")).expect("feasible");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,64}") {
        check(&text);
    }

    #[test]
    fn mutated_files_never_panic_and_round_trip(text in mutated()) {
        check(&text);
    }
}
