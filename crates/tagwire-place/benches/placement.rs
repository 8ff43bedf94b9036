//! Criterion benchmarks of proxy placement: the vBNS cases of the paper's
//! Table 3 (CPLEX: 10–40 ms) and a random 1,000-node topology with 100
//! subscribers. Each iteration builds the problem (routes, candidates,
//! capacity rows) and solves it; parsing the file is not timed.
//!
//! Run: `cargo bench -p tagwire-place --bench placement`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::time::Duration;
use tagwire_place::{
    model::TopologySpec, solve_exhaustive, ExhaustiveOptions, Objective, PlacementProblem, Topology,
};

#[path = "random_topology.rs"]
mod random_topology;
use random_topology::{random_topology, RandomParams};

fn vbns_case(tag: &str) -> Topology {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vbns.toml");
    let mut spec = TopologySpec::read_file(path.as_ref(), 1 << 20).expect("vbns.toml");
    spec.tags.retain(|t| t.name == tag);
    spec.validate().expect("valid")
}

/// The first seed from `seed` whose random problem is feasible.
pub fn feasible_random(mut params: RandomParams) -> Topology {
    loop {
        let topo = random_topology(params).validate().expect("valid");
        let ok = PlacementProblem::new(&topo).is_ok_and(|p| {
            solve_exhaustive(
                &p,
                Objective::Bandwidth,
                ExhaustiveOptions::default(),
                &mut |_, _| {},
            )
            .is_ok()
        });
        if ok {
            return topo;
        }
        params.seed += 1;
    }
}

fn exhaustive(topo: &Topology) -> f64 {
    let p = PlacementProblem::new(topo).expect("feasible");
    solve_exhaustive(
        &p,
        Objective::Bandwidth,
        ExhaustiveOptions::default(),
        &mut |_, _| {},
    )
    .expect("solved")
    .objective
}

#[cfg(any(feature = "highs", feature = "microlp"))]
fn mip(topo: &Topology) -> f64 {
    let p = PlacementProblem::new(topo).expect("feasible");
    tagwire_place::solve_mip(&p, Objective::Bandwidth)
        .expect("solved")
        .objective
}

fn bench_vbns(c: &mut Criterion) {
    let mut g = c.benchmark_group("vbns");
    for (label, tag) in [
        ("1x1", "/vbns/1x1"),
        ("1x2", "/vbns/1x2"),
        ("1x5", "/vbns/1x5"),
        ("1x10", "/vbns/1x10"),
    ] {
        let topo = vbns_case(tag);
        g.bench_with_input(BenchmarkId::new("exhaustive", label), &topo, |b, t| {
            b.iter(|| exhaustive(t))
        });
        #[cfg(any(feature = "highs", feature = "microlp"))]
        g.bench_with_input(BenchmarkId::new("mip", label), &topo, |b, t| {
            b.iter(|| mip(t))
        });
    }
    // (1,10) with node 0's CPU capped so that one proxy must move: the
    // capacity row couples the ten proxies (see tests/vbns.rs).
    let mut capped = vbns_case("/vbns/1x10");
    capped.nodes[0].cpu = Some(1105.0);
    g.bench_with_input(
        BenchmarkId::new("exhaustive", "1x10-cpu-capped"),
        &capped,
        |b, t| b.iter(|| exhaustive(t)),
    );
    #[cfg(any(feature = "highs", feature = "microlp"))]
    g.bench_with_input(
        BenchmarkId::new("mip", "1x10-cpu-capped"),
        &capped,
        |b, t| b.iter(|| mip(t)),
    );
    g.finish();
}

fn bench_random(c: &mut Criterion) {
    let mut g = c.benchmark_group("random_1000n_100s");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let topo = feasible_random(RandomParams {
        nodes: 1000,
        subscribers: 100,
        per_tag: 10,
        capped_links: 0.3,
        capped_nodes: 0.2,
        seed: 1,
    });
    g.bench_function("build_problem", |b| {
        b.iter(|| {
            PlacementProblem::new(&topo)
                .expect("feasible")
                .capacity_rows()
                .len()
        })
    });
    g.bench_function("exhaustive", |b| b.iter(|| exhaustive(&topo)));
    #[cfg(any(feature = "highs", feature = "microlp"))]
    g.bench_function("mip", |b| b.iter(|| mip(&topo)));
    g.finish();
}

criterion_group!(benches, bench_vbns, bench_random);
criterion_main!(benches);
