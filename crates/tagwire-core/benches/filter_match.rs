//! Reproduces NaradaBrokering's Figure 3: the time to compute the
//! destinations of one event against 20,000 … 100,000 subscriptions of one
//! kind (integer keys, string keys, 25 `<tag,value>` pairs, regular
//! expressions, and TAO-example constraints), through one
//! `SubscriptionIndex`.
//!
//! Run: `cargo bench -p tagwire-core --bench filter_match`
//! (`-- regex` to run one kind). Workloads are described in BENCHMARKS.md.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tagwire_core::filter::{
    FilterLimits, MatchScratch, RegexTarget, SubscriptionIndex, SubscriptionSpec,
};
use tagwire_proto::{Event, EventRef, Value};

const SIZES: [usize; 5] = [20_000, 40_000, 60_000, 80_000, 100_000];
const PAIRS: usize = 25;
const PAIR_VALUES: u64 = 1000;

/// Deterministic pseudo-random numbers (splitmix64), so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn limits() -> FilterLimits {
    FilterLimits {
        max_subscriptions: 1_000_000,
        max_unindexed: 1_000_000,
        ..FilterLimits::default()
    }
}

fn encode(ev: &Event) -> BytesMut {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("bench event encodes");
    buf
}

/// One workload: its subscriptions and the event to route.
fn workload(kind: &str, n: usize) -> (Vec<SubscriptionSpec>, Event) {
    let mut rng = Rng(42);
    let mut ev = Event::new("/bench/topic", &b"payload"[..]);
    let specs: Vec<SubscriptionSpec> = match kind {
        "integer" => {
            ev.fields.push(("key".into(), Value::Int((n / 2) as i64)));
            (0..n)
                .map(|i| SubscriptionSpec::IntKey {
                    field: "key".into(),
                    key: i as i64,
                })
                .collect()
        }
        "string" => {
            ev.fields
                .push(("topic".into(), Value::Str(format!("topic-{}", n / 2))));
            (0..n)
                .map(|i| SubscriptionSpec::StrKey {
                    field: "topic".into(),
                    key: format!("topic-{i}"),
                })
                .collect()
        }
        "tag-value" => {
            let specs: Vec<Vec<(String, Value)>> = (0..n)
                .map(|_| {
                    (0..PAIRS)
                        .map(|t| (format!("t{t}"), Value::Int(rng.below(PAIR_VALUES) as i64)))
                        .collect()
                })
                .collect();
            // The event carries the 25 pairs of one subscription.
            ev.fields = specs[n / 2].clone();
            specs.into_iter().map(SubscriptionSpec::TagValues).collect()
        }
        "regex" => {
            // Three shapes over a tag like /sensors/b12/room345/temp7:
            // anchored path with classes, alternation, unanchored suffix.
            let pats: Vec<String> = (0..n)
                .map(|i| {
                    let (b, r) = (i / 1000, i % 1000);
                    match i % 3 {
                        0 => format!("^/sensors/b{b}/room{r}/temp[0-9]+$"),
                        1 => format!("^/sensors/b{b}/room{r}/(temp|humidity)[0-9]*$"),
                        _ => format!("b{b}/room{r}/.*[0-9]$"),
                    }
                })
                .collect();
            let i = n / 2;
            ev.header.tag = format!("/sensors/b{}/room{}/temp7", i / 1000, i % 1000);
            pats.into_iter()
                .map(|pattern| SubscriptionSpec::Regex {
                    target: RegexTarget::Tag,
                    pattern,
                })
                .collect()
        }
        "regex-scan" => {
            // No literal to index: every regex is evaluated (Narada's case).
            let pats: Vec<String> = (0..n)
                .map(|i| format!("^/[a-z]+/[a-z]{}[0-9]+/.*{}$", 1 + i % 7, i % 10))
                .collect();
            ev.header.tag = "/sensors/b12/room345/temp7".into();
            pats.into_iter()
                .map(|pattern| SubscriptionSpec::Regex {
                    target: RegexTarget::Tag,
                    pattern,
                })
                .collect()
        }
        _ => {
            // TAO example shape: 20 type names, 5,000 event names, priority bound.
            ev.header.type_name = Some("Alarm7".into());
            ev.header.event_name = Some("event42".into());
            ev.header.priority = 1;
            (0..n)
                .map(|_| {
                    SubscriptionSpec::Constraint(format!(
                        "$type_name == 'Alarm{}' and $event_name == 'event{}' and $priority < {}",
                        rng.below(20),
                        rng.below(5000),
                        rng.below(8)
                    ))
                })
                .collect()
        }
    };
    (specs, ev)
}

fn bench_kind(c: &mut Criterion, kind: &str, sizes: &[usize]) {
    let mut group = c.benchmark_group(format!("figure3/{kind}"));
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for &n in sizes {
        let (specs, ev) = workload(kind, n);
        let mut idx = SubscriptionIndex::new(limits());
        for (i, s) in specs.into_iter().enumerate() {
            idx.insert(i as u64, s, i as u32)
                .expect("bench subscription compiles");
        }
        let buf = encode(&ev);
        let event = EventRef::parse(&buf).expect("bench event parses");
        let mut scratch = MatchScratch::new();
        let mut out = Vec::new();
        idx.matching_ids(&event, &mut scratch, &mut out);
        eprintln!("{kind} n={n}: {} matches, {:?}", out.len(), idx.stats());
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                out.clear();
                idx.matching_ids(black_box(&event), &mut scratch, &mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();
}

fn figure3(c: &mut Criterion) {
    for kind in ["integer", "string", "tag-value", "regex", "constraint"] {
        bench_kind(c, kind, &SIZES);
    }
    // The unindexable case only at the ends of the range: it is slow by design.
    bench_kind(c, "regex-scan", &[20_000, 100_000]);
}

criterion_group!(benches, figure3);
criterion_main!(benches);
