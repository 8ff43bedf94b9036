//! Reproduces NaradaBrokering's Figure 3: the time to compute the
//! destinations of one event against 20,000 … 100,000 subscriptions of one
//! kind (integer keys, string keys, 25 `<tag,value>` pairs, regular
//! expressions, and TAO-example constraints), through one
//! `SubscriptionIndex`.
//!
//! Run: `cargo bench -p tagwire-core --bench filter_match`
//! (`-- regex` to run one kind). Workloads are described in BENCHMARKS.md.
//! With `FIGURE3_SVG=path`, it then plots criterion's medians beside
//! Narada's numbers as an SVG in the style of the paper's figure.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use criterion::{criterion_group, BenchmarkId, Criterion};
use tagwire_core::filter::{
    Filter, FilterLimits, MatchScratch, RegexTarget, SubscriptionIndex, SubscriptionSpec,
};
use tagwire_core::route::Routes;
use tagwire_core::tags::Pattern;
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
        // `routes/evaluated` measures evaluating every channel's filter,
        // more than the default per-event budget allows (issue 24 item 9).
        max_event_work: u64::MAX,
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

/// The daemon's view: `n` channels on one pattern, channel *i* filtered by
/// `$.key == i`, routed by [`Routes`] (through the index), against the same
/// channels with the equivalent unindexable `$.key >= i and $.key <= i`
/// (every channel's filter evaluated, as a router without an index would).
fn bench_routes(c: &mut Criterion) {
    let mut group = c.benchmark_group("routes");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (name, text) in [
        ("indexed", "$.key == {i}"),
        ("evaluated", "$.key >= {i} and $.key <= {i}"),
    ] {
        for n in [20_000usize, 100_000] {
            let mut routes: Routes<u64> = Routes::new(limits());
            let pattern = Pattern::parse("/bench/**").expect("pattern");
            for i in 0..n as u64 {
                let f = Filter::compile(&text.replace("{i}", &i.to_string()), &limits())
                    .expect("bench filter compiles");
                routes
                    .add_channel(i, i % 100, pattern.clone(), i, vec![(i, f)], None)
                    .expect("channel added");
            }
            let mut ev = Event::new("/bench/topic", &b"payload"[..]);
            ev.fields.push(("key".into(), Value::Int((n / 2) as i64)));
            let buf = encode(&ev);
            let event = EventRef::parse(&buf).expect("bench event parses");
            let mut hits = 0usize;
            routes.route(&event, |_, _| hits += 1);
            eprintln!(
                "routes/{name} n={n}: {hits} destinations, {:?}",
                routes.stats()
            );
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    let mut hits = 0usize;
                    routes.route(black_box(&event), |_, _| hits += 1);
                    black_box(hits)
                })
            });
        }
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

criterion_group!(benches, figure3, bench_routes);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if let Ok(path) = std::env::var("FIGURE3_SVG") {
        match plot(&path) {
            Ok(()) => eprintln!("wrote {path}"),
            Err(e) => eprintln!("plot not written: {e}"),
        }
    }
}

/// Criterion's median for one benchmark, in ns, from its estimates.json.
fn median_ns(kind: &str, n: usize) -> Option<f64> {
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| format!("{}/../../target", env!("CARGO_MANIFEST_DIR")));
    let path = format!("{target}/criterion/figure3_{kind}/{n}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

/// Log-scale plot of time per event against subscriptions, one line per
/// kind, Narada's reported numbers dashed.
fn plot(path: &str) -> std::io::Result<()> {
    let (w, h, l, r, t, b) = (760.0, 460.0, 80.0, 210.0, 30.0, 50.0);
    let (lo, hi) = (1e2f64.log10(), 1e10f64.log10()); // 100 ns .. 10 s
    let x = |n: f64| l + (n - 20_000.0) / 80_000.0 * (w - l - r);
    let y = |ns: f64| t + (hi - ns.max(1e2).log10()) / (hi - lo) * (h - t - b);
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n\
         <rect width='100%' height='100%' fill='white'/>\n\
         <text x='{}' y='18' text-anchor='middle' font-size='14'>Time to compute the destinations of one event (Narada Figure 3)</text>\n",
        w / 2.0
    );
    for e in 2..=10 {
        let yy = y(10f64.powi(e));
        let label = [
            "100 ns", "1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s",
        ][e as usize - 2];
        svg += &format!(
            "<line x1='{l}' x2='{}' y1='{yy}' y2='{yy}' stroke='#ddd'/><text x='{}' y='{}' text-anchor='end'>{label}</text>\n",
            w - r,
            l - 6.0,
            yy + 4.0
        );
    }
    for &n in &SIZES {
        let xx = x(n as f64);
        svg += &format!(
            "<line x1='{xx}' x2='{xx}' y1='{t}' y2='{}' stroke='#eee'/><text x='{xx}' y='{}' text-anchor='middle'>{}k</text>\n",
            h - b,
            h - b + 16.0,
            n / 1000
        );
    }
    svg += &format!(
        "<text x='{}' y='{}' text-anchor='middle'>subscriptions</text>\n",
        (l + w - r) / 2.0,
        h - 10.0
    );
    let kinds = [
        ("integer", "#1f77b4"),
        ("string", "#ff7f0e"),
        ("tag-value", "#2ca02c"),
        ("regex", "#d62728"),
        ("constraint", "#9467bd"),
        ("regex-scan", "#8c564b"),
    ];
    let mut legend_y = t + 10.0;
    let mut legend = |svg: &mut String, name: &str, colour: &str, dash: &str| {
        *svg += &format!(
            "<line x1='{}' x2='{}' y1='{legend_y}' y2='{legend_y}' stroke='{colour}' stroke-width='2' stroke-dasharray='{dash}'/><text x='{}' y='{}'>{name}</text>\n",
            w - r + 10.0,
            w - r + 40.0,
            w - r + 46.0,
            legend_y + 4.0
        );
        legend_y += 18.0;
    };
    for (kind, colour) in kinds {
        let pts: Vec<(f64, f64)> = SIZES
            .iter()
            .filter_map(|&n| median_ns(kind, n).map(|ns| (x(n as f64), y(ns))))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let line: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        svg += &format!(
            "<polyline points='{}' fill='none' stroke='{colour}' stroke-width='2'/>\n",
            line.join(" ")
        );
        for (a, b) in &pts {
            svg += &format!("<circle cx='{a:.1}' cy='{b:.1}' r='3' fill='{colour}'/>\n");
        }
        legend(&mut svg, &format!("tagwire {kind}"), colour, "");
    }
    // Narada, as reported in the paper's text (1 GHz, Java 1.4).
    let narada = [
        ("integer", "#1f77b4", 6e3, 6e3),
        ("string", "#ff7f0e", 7e3, 7e3),
        ("tag-value", "#2ca02c", 18e3, 18e3),
        ("regex", "#d62728", 242e6, 1178e6),
    ];
    for (kind, colour, a, z) in narada {
        svg += &format!(
            "<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='{colour}' stroke-width='1.5' stroke-dasharray='6 4'/>\n",
            x(20_000.0),
            x(100_000.0),
            y(a),
            y(z)
        );
        legend(&mut svg, &format!("Narada {kind}"), colour, "6 4");
    }
    svg += "</svg>\n";
    std::fs::write(path, svg)
}
