//! The cost of removing channels from [`Routes`] at the documented limit of
//! 65,536 subscriptions per connection, all on one pattern with the same
//! indexed filter (the worst case for per-key lists), issue 12 item 5:
//!
//! - `remove_each`: `remove_channel` on all 65,536, one by one;
//! - `retire_and_settle`: `retire_session` (O(1)) then `settle` to the end;
//! - `settle_slice_256`: one `settle(256)` slice of that removal, the most
//!   work the router's housekeeping does between two yields to the lane;
//! - `replace_slice_256`: one slice of re-placing the session's channels
//!   after a session-level change (`queue_set_op`).
//!
//! Run: `cargo bench -p tagwire-core --bench route_removal`. Results are in
//! BENCHMARKS.md ("Admin work at scale").
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tagwire_core::filter::{Filter, FilterLimits, InterFilterOp};
use tagwire_core::route::Routes;
use tagwire_core::tags::Pattern;

const CHANNELS: u64 = 65_536;
const SLICE: usize = 256;

fn routes() -> Routes<u64> {
    let limits = FilterLimits::default();
    let mut r = Routes::new(limits.clone());
    let pattern = Pattern::parse("/big/**").expect("valid pattern");
    let filter = Filter::compile("$.k == 1", &limits).expect("valid filter");
    for id in 0..CHANNELS {
        r.add_channel(id, 1, pattern.clone(), id, vec![(id, filter.clone())], None)
            .expect("added");
    }
    r
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("route_removal_65536");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("remove_each", |b| {
        b.iter_batched(
            routes,
            |mut r| {
                for id in 0..CHANNELS {
                    black_box(r.remove_channel(id));
                }
                r
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("retire_and_settle", |b| {
        b.iter_batched(
            routes,
            |mut r| {
                r.retire_session(1);
                let mut removed = Vec::with_capacity(SLICE);
                while !r.settle(SLICE, &mut removed) {
                    removed.clear();
                }
                r
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("settle_slice_256", |b| {
        b.iter_batched(
            || {
                let mut r = routes();
                r.retire_session(1);
                (r, Vec::with_capacity(SLICE))
            },
            |(mut r, mut removed)| {
                r.settle(SLICE, &mut removed);
                (r, removed)
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("replace_slice_256", |b| {
        b.iter_batched(
            || {
                let mut r = routes();
                r.queue_set_op(1, InterFilterOp::Or);
                (r, Vec::new())
            },
            |(mut r, mut removed)| {
                r.settle(SLICE, &mut removed);
                (r, removed)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
