//! Worst-case cost of one event against one subscription's filters at the
//! default `FilterLimits` (issue 12 item 4): 16 session and 16 channel
//! filters combined with `Or`, none matching, so every filter is evaluated.
//!
//! Run: `cargo bench -p tagwire-core --bench filter_worst` (`-- old` for the
//! regex crate as the filters used it before, `-- compile` for compile cost).
//! Results are in BENCHMARKS.md ("Worst-case filter cost per event").
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use criterion::{criterion_group, Criterion};
use tagwire_core::filter::{Filter, FilterLimits, FilterSet, InterFilterOp};
use tagwire_proto::{Event, EventRef, Value};

/// The issue's attack filter: four `[a-z]{N}` regexes, N in the hundreds.
const ATTACK: &str =
    "$.s =~ '[a-z]{300}' or $.s =~ '[a-z]{500}' or $.s =~ '[a-z]{700}' or $.s =~ '[a-z]{900}'";

/// `n - 1` letters then a space, up to `len` bytes: `[a-z]{n}` never
/// matches, and an unanchored lazy DFA meets a new state on most bytes.
fn runs(n: usize, len: usize) -> String {
    let mut s = String::with_capacity(len);
    while s.len() < len {
        for i in 0..n - 1 {
            s.push((b'a' + (i % 26) as u8) as char);
        }
        s.push(' ');
    }
    s.truncate(len);
    s
}

/// Runs of `n - 1` decimal digits from four scripts (1–3 UTF-8 bytes
/// each), then a space, up to at most `len` bytes: `\d{n}` never matches and
/// the walk crosses many rows of a large Unicode DFA.
fn digit_runs(n: usize, len: usize) -> String {
    let digits = ['7', '٣', '७', '໕'];
    let mut s = String::with_capacity(len);
    let mut k = 0;
    'fill: loop {
        for _ in 0..n - 1 {
            let c = digits[k % digits.len()];
            k += 1;
            if s.len() + c.len_utf8() > len {
                break 'fill;
            }
            s.push(c);
        }
        if s.len() + 1 > len {
            break;
        }
        s.push(' ');
    }
    s
}

fn encode(fields: Vec<(&str, Value)>) -> BytesMut {
    let mut ev = Event::new("/bench/worst", &b""[..]);
    ev.fields = fields.into_iter().map(|(n, v)| (n.into(), v)).collect();
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("bench event encodes");
    buf
}

/// One subscription: `filters(i)` on each level, 16 each, joined by `Or`.
fn subscription(limits: &FilterLimits, filter: impl Fn(usize) -> String) -> FilterSet {
    let mut set = FilterSet::new(InterFilterOp::Or, limits);
    for i in 0..limits.max_filters_per_channel {
        let f = |j: usize| {
            let text = filter(j);
            Filter::compile(&text, limits)
                .unwrap_or_else(|e| panic!("bench filter {text:?} compiles: {e}"))
        };
        set.admin.add(i as u64, f(i)).expect("admin filter fits");
        set.proxy
            .add(i as u64, f(i + limits.max_filters_per_channel))
            .expect("proxy filter fits");
    }
    set
}

fn run(c: &mut Criterion, name: &str, set: &FilterSet, buf: &[u8]) {
    let ev = EventRef::parse(buf).expect("bench event parses");
    assert!(!set.matches(&ev), "{name}: the worst case matches nothing");
    let bytes: usize = set
        .admin
        .iter()
        .chain(set.proxy.iter())
        .map(|(_, f)| f.memory_estimate())
        .sum();
    eprintln!(
        "{name}: event {} bytes, filters hold ~{bytes} bytes",
        buf.len()
    );
    c.bench_function(name, |b| b.iter(|| black_box(set.matches(black_box(&ev)))));
}

fn worst(c: &mut Criterion) {
    let limits = FilterLimits::default();
    let cap = limits.max_match_input;

    // The issue's attack: 4 x `[a-z]{N}` per filter, a 44 KB string field.
    let set = subscription(&limits, |_| ATTACK.to_owned());
    let buf = encode(vec![("s", Value::Str(runs(300, 44_000)))]);
    run(c, "worst/attack_44KB", &set, &buf);
    // The same filters on a subject of exactly max_match_input bytes, so
    // every regex runs to the end.
    let buf = encode(vec![("s", Value::Str(runs(300, cap)))]);
    run(c, "worst/attack_at_max_match_input", &set, &buf);

    // 32 x 4 distinct large Unicode DFAs (`\d{24}` and a two-letter suffix,
    // ~300 KB each, ~38 MB in all: more than the caches hold), a subject of
    // max_match_input bytes of digits from four scripts that never matches.
    let letters: Vec<char> = ('a'..='z').chain('A'..='Z').collect();
    let set = subscription(&limits, |i| {
        (0..limits.max_regexes)
            .map(|j| {
                let k = i * limits.max_regexes + j;
                format!(
                    "$.s =~ '\\d{{24}}{}{}'",
                    letters[k % letters.len()],
                    letters[k / letters.len()]
                )
            })
            .collect::<Vec<_>>()
            .join(" or ")
    });
    let buf = encode(vec![("s", Value::Str(digit_runs(24, cap)))]);
    run(c, "worst/large_dfas_at_max_match_input", &set, &buf);

    // As many `~` as max_nodes allows (two nodes each) on a subject of
    // max_match_input bytes, needles that almost match everywhere.
    let per_filter = limits.max_nodes / 2;
    let set = subscription(&limits, |i| {
        (0..per_filter)
            .map(|j| format!("$.s ~ '{}b{i}_{j}'", "a".repeat(8)))
            .collect::<Vec<_>>()
            .join(" or ")
    });
    let buf = encode(vec![("s", Value::Str("a".repeat(cap)))]);
    run(c, "worst/contains_at_max_match_input", &set, &buf);

    // As many string comparisons of two fields as max_nodes allows, on two
    // equal strings of max_match_input bytes that are the last of 256 fields
    // (each field read scans the event's fields).
    let s = "a".repeat(cap);
    let mut fields: Vec<(String, Value)> = (0..254)
        .map(|i| (format!("f{i:03}"), Value::Int(i)))
        .collect();
    fields.push(("x".into(), Value::Str(s.clone())));
    fields.push(("y".into(), Value::Str(s)));
    let set = subscription(&limits, |_| {
        (0..per_filter)
            .map(|_| "$.x < $.y")
            .collect::<Vec<_>>()
            .join(" or ")
    });
    let buf = encode(
        fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect(),
    );
    run(c, "worst/compare_256_fields", &set, &buf);
}

/// One regex as the filters compiled it before issue 12 (the regex crate,
/// size limit 64 KiB, lazy DFA cache 256 KiB) on the attack's 44 KB string:
/// the lazy DFA's cache thrashes and the search falls back to an NFA
/// simulation. Multiply by 64 for the 16 filters of the attack.
fn old_engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("old");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(3));
    let re = regex::RegexBuilder::new("[a-z]{700}")
        .size_limit(64 * 1024)
        .dfa_size_limit(256 * 1024)
        .build()
        .expect("within the old limit");
    let s = runs(700, 44_000);
    group.bench_function("one_regex_700_44KB", |b| {
        b.iter(|| black_box(re.is_match(black_box(&s))))
    });
    group.finish();
}

/// Cost of compiling (installing) a filter: the attack filter, four large
/// Unicode regexes, and a refused one (which is compiled again under a 2x
/// larger limit to report its size).
fn compile(c: &mut Criterion) {
    let limits = FilterLimits::default();
    let mut group = c.benchmark_group("compile");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(3));
    for (name, text) in [
        ("attack_filter", ATTACK),
        (
            "four_unicode",
            r"$.s =~ '\w\w' or $.s =~ '^\w+-\w+$' or $.s =~ '\d{20}' or $.s =~ '\d{24}ab'",
        ),
        ("refused_exponential", "$.s =~ '(a|b)*a(a|b){20}'"),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(Filter::compile(black_box(text), &limits).is_ok()))
        });
    }
    group.finish();
}

criterion_group!(benches, worst, old_engine, compile);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
