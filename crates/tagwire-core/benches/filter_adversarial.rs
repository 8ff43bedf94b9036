//! Filter cost per event under adversarial filters (issue 24, item 9):
//! what `Routes::route` costs for one event whose filtered subscriptions
//! were built to be as slow as the default `FilterLimits` allow.
//!
//! Run: `cargo bench -p tagwire-core --bench filter_adversarial`
//! (`-- NAME` runs the cases whose name contains NAME). Each case prints
//! the time per routed event (p50, p90, max over its iterations; the max
//! includes any preemption of the thread), the
//! events' work as the per-event budget counts it, and how many events ran
//! over the budget. Results are in BENCHMARKS.md ("Filter cost under
//! adversarial filters (issue 24, item 9)").
//!
//! Cases:
//! - `hostile_dfas`: each subscription has 16 session and 16 channel filters
//!   (joined by OR, so all run) of 4 distinct `[ab]*a[ab]{11}XY`-style
//!   regexes: 128 DFAs of ~4,000 states per subscription, a 1 KiB subject of
//!   pseudo-random `a`/`b` that none matches, so each DFA step lands on a
//!   cold table row.
//! - `near_needles`: 128 `~` per filter (as many as `max_nodes` allows),
//!   18-byte needles (the longest that fit `max_text_len`) that match the 1 KiB subject up to their last byte.
//! - `big_unread_field`: a 15 MiB string field that no filter reads, and
//!   filters on a small field.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_core::filter::{Filter, FilterLimits, InterFilterOp};
use tagwire_core::route::Routes;
use tagwire_core::tags::Pattern;
use tagwire_proto::{Event, EventRef, Value};

fn encode(fields: Vec<(&str, Value)>) -> BytesMut {
    let mut ev = Event::new("/bench/adversarial", &b""[..]);
    ev.fields = fields.into_iter().map(|(n, v)| (n.into(), v)).collect();
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("bench event encodes");
    buf
}

/// A deterministic pseudo-random `a`/`b` string (xorshift).
fn ab(len: usize, mut seed: u64) -> String {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed & 1 == 0 {
                'a'
            } else {
                'b'
            }
        })
        .collect()
}

/// `subs` subscriptions on one pattern, each in its own session with the
/// operator OR, `filter(sub, i)` for its 16 session and 16 channel filters.
fn routes(limits: &FilterLimits, subs: u64, filter: impl Fn(u64, usize) -> String) -> Routes<u64> {
    let mut routes = Routes::new(limits.clone());
    let pattern = Pattern::parse("/bench/**").expect("pattern");
    let per = limits.max_filters_per_channel;
    for s in 0..subs {
        let compile = |i: usize| {
            let text = filter(s, i);
            Filter::compile(&text, limits)
                .unwrap_or_else(|e| panic!("bench filter {text:?} compiles: {e}"))
        };
        routes.set_op(s, InterFilterOp::Or);
        for i in 0..per {
            routes
                .add_session_filter(s, i as u64, compile(i))
                .expect("session filter fits");
        }
        let own = (per..2 * per).map(|i| (i as u64, compile(i))).collect();
        routes
            .add_channel(s, s, pattern.clone(), s, own, None)
            .expect("channel added");
    }
    routes
}

/// Evicts the caches (and much of the TLB): reads and writes `junk`.
fn evict(junk: &mut [u8]) {
    for i in (0..junk.len()).step_by(64) {
        junk[i] = junk[i].wrapping_add(1);
    }
    black_box(&junk);
}

fn case(name: &str, routes: &mut Routes<u64>, buf: &[u8], iters: usize, cold: bool) {
    let ev = EventRef::parse(buf).expect("bench event parses");
    let mut times = Vec::with_capacity(iters);
    let mut hits = 0usize;
    // BENCH_EVICT_MIB: how much memory to touch between events (default
    // 64 MiB, past L2; L3 may be larger, `lscpu`).
    let evict_mib: usize = std::env::var("BENCH_EVICT_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut junk = vec![0u8; if cold { evict_mib << 20 } else { 0 }];
    // Warm-up (first touches of the DFAs' tables).
    routes.route(&ev, |_, _| hits += 1);
    let before = routes.budget_stats().clone();
    for _ in 0..iters {
        if cold {
            evict(&mut junk);
        }
        let t = Instant::now();
        routes.route(black_box(&ev), |_, _| hits += 1);
        times.push(t.elapsed());
    }
    let after = routes.budget_stats().clone();
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let work = (after.work - before.work) / iters as u64;
    println!(
        "{name}{}: event {} bytes, {} routes: p50 {:.3} ms, p90 {:.3} ms, max {:.3} ms; \
         work per event {} units ({:.3} ns per unit at p50; budget {}), over budget {} of {}, {hits} deliveries",
        if cold { format!(" ({evict_mib} MiB touched before each event)") } else { String::new() },
        buf.len(),
        iters,
        ms(at(0.5)),
        ms(at(0.9)),
        ms(times[times.len() - 1]),
        work,
        at(0.5).as_secs_f64() * 1e9 / work.max(1) as f64,
        routes.limits().max_event_work,
        after.over_budget - before.over_budget,
        iters,
    );
}

fn main() {
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let run = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    // BENCH_MAX_EVENT_WORK overrides the budget (e.g. 18446744073709551615
    // to measure what the whole evaluation would cost).
    let mut limits = FilterLimits::default();
    if let Some(w) = std::env::var("BENCH_MAX_EVENT_WORK")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        limits.max_event_work = w;
    }
    let cap = limits.max_match_input;

    // 128 distinct `[ab]*a[ab]{11}` + two-letter suffix DFAs per subscription.
    let letters: Vec<char> = ('A'..='Z').chain('c'..='z').collect();
    let hostile = |s: u64, i: usize| {
        (0..limits.max_regexes)
            .map(|j| {
                let k = (s as usize * 32 + i) * limits.max_regexes + j;
                format!(
                    "$.s =~ '[ab]*a[ab]{{11}}{}{}'",
                    letters[k % letters.len()],
                    letters[(k / letters.len()) % letters.len()]
                )
            })
            .collect::<Vec<_>>()
            .join(" or ")
    };
    let subject = ab(cap, 0x9e37_79b9_7f4a_7c15);
    for (subs, cold) in [(1u64, false), (4, false), (1, true), (4, true)] {
        let name = format!("hostile_dfas/{subs}_subscriptions");
        if run(&name) {
            let mut r = routes(&limits, subs, hostile);
            let buf = encode(vec![("s", Value::Str(subject.clone()))]);
            case(&name, &mut r, &buf, 60, cold);
        }
    }

    // 128 `~` per filter, needles of 17 `a` and one distinct last byte.
    let per_filter = limits.max_nodes / 2;
    let near = |s: u64, i: usize| {
        (0..per_filter)
            .map(|j| {
                let k = (s as usize * 32 + i) * per_filter + j;
                format!(
                    "$.s ~ '{}{}'",
                    "a".repeat(17),
                    (b'b' + (k % 24) as u8) as char
                )
            })
            .collect::<Vec<_>>()
            .join(" or ")
    };
    for subs in [1u64, 16] {
        let name = format!("near_needles/{subs}_subscriptions");
        if run(&name) {
            let mut r = routes(&limits, subs, near);
            let buf = encode(vec![("s", Value::Str("a".repeat(cap)))]);
            case(&name, &mut r, &buf, 100, false);
        }
    }

    // 128 `$.s ~ $.t` per filter: a needle from the event, as long as the
    // subject, that matches it up to its last byte.
    for subs in [1u64, 16] {
        let name = format!("field_needles/{subs}_subscriptions");
        if run(&name) {
            let mut r = routes(&limits, subs, |_, _| {
                vec!["$.s ~ $.t"; per_filter].join(" or ")
            });
            let mut t = "a".repeat(cap - 1);
            t.push('b');
            let buf = encode(vec![
                ("s", Value::Str("a".repeat(cap))),
                ("t", Value::Str(t)),
            ]);
            case(&name, &mut r, &buf, 100, false);
        }
    }

    // Node-heavy filters whose trees no cache holds: 500 subscriptions ×
    // 32 filters × 60 distinct `$.n == K` (≈ 2 M nodes).
    for cold in [false, true] {
        let name = "node_heavy/500_subscriptions";
        if run(name) {
            let mut r = routes(&limits, 500, |s, i| {
                (0..60u64)
                    .map(|j| format!("$.n == {}", ((s * 32 + i as u64) * 60 + j) * 2 + 1))
                    .collect::<Vec<_>>()
                    .join(" or ")
            });
            let buf = encode(vec![("n", Value::Int(0))]);
            case(name, &mut r, &buf, 60, cold);
        }
    }

    // What ordinary filters cost: 200 subscriptions with a small regex and
    // a comparison on a 100-byte field, and 31 equalities (all evaluated:
    // OR sessions, nothing indexed).
    let name = "ordinary/200_subscriptions";
    if run(name) {
        let mut r = routes(&limits, 200, |s, i| {
            if i == 0 {
                format!("$.s =~ 'temp[0-9]+x{s}' and $.n > 3")
            } else {
                format!("$.n == {}", 1_000_000 + s * 100 + i as u64)
            }
        });
        let s = "room1/temp42/".repeat(8);
        let buf = encode(vec![("s", Value::Str(s)), ("n", Value::Int(5))]);
        case(name, &mut r, &buf, 100, false);
    }

    // A 15 MiB string field no filter reads; one small filter per level.
    for subs in [1u64, 64] {
        let name = format!("big_unread_field/{subs}_subscriptions");
        if run(&name) {
            let mut r = routes(&limits, subs, |s, i| {
                format!("$.n == {}", s * 100 + i as u64 + 1)
            });
            // Multi-byte characters: UTF-8 validation's slow path.
            let big: String = "é€😀".chars().cycle().take(15 * 1024 * 1024 / 3).collect();
            let buf = encode(vec![("n", Value::Int(0)), ("big", Value::Str(big))]);
            case(&name, &mut r, &buf, 20, false);
        }
    }

    // A 15 MiB string field that an indexed filter reads (`~` with a
    // literal: the index looks for its grams in the field).
    let name = "big_indexed_field/1_subscription";
    if run(name) {
        let mut r = Routes::new(limits.clone());
        let f = Filter::compile("$.big ~ 'needle'", &limits).expect("compiles");
        r.add_channel(
            1,
            1,
            Pattern::parse("/bench/**").expect("pattern"),
            1,
            vec![(1, f)],
            None,
        )
        .expect("channel added");
        let big: String = "abcdefghijklmnopqrstuvwxyz"
            .chars()
            .cycle()
            .take(15 << 20)
            .collect();
        let buf = encode(vec![("big", Value::Str(big))]);
        case(name, &mut r, &buf, 10, false);
    }
}
