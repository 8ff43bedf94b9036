//! Property test: on small random topologies the exhaustive search, a naive
//! enumeration of every combination and the MIP find the same optimum (or
//! all find none).

use proptest::prelude::*;
use tagwire_place::{
    model::{LinkSpec, NodeSpec, ProxySharing, SubscriberSpec, TagSpec, TopologySpec},
    solve_exhaustive, Assignment, ExhaustiveOptions, Objective, PlaceError, PlacementProblem,
};

fn topology() -> impl Strategy<Value = TopologySpec> {
    (2usize..=7).prop_flat_map(|n| {
        let parents = proptest::collection::vec(any::<prop::sample::Index>(), n - 1);
        let extra = proptest::collection::vec((0..n, 0..n), 0..=3);
        let node_cpu = proptest::collection::vec(prop::option::weighted(0.4, 200u32..3000), n);
        let link_bw = proptest::collection::vec(prop::option::weighted(0.5, 2000u32..40000), n + 3);
        let sub = (
            0..n,
            prop_oneof![Just(1u32), Just(2), Just(4)],
            prop::option::weighted(0.7, 1u32..=12),
        );
        let tag = (
            0..n,
            prop_oneof![Just(10u32), Just(20)],
            prop_oneof![Just(1u32), Just(100)],
            any::<bool>(),
            proptest::collection::vec(sub, 1..=3),
        );
        let tags = proptest::collection::vec(tag, 1..=2);
        (Just(n), parents, extra, node_cpu, link_bw, tags).prop_map(
            |(n, parents, extra, node_cpu, link_bw, tags)| {
                let name = |i: usize| format!("n{i}");
                let nodes = (0..n)
                    .map(|i| NodeSpec {
                        name: name(i),
                        cpu: node_cpu[i].map(f64::from),
                        label: None,
                    })
                    .collect();
                let mut pairs: Vec<(usize, usize)> =
                    (1..n).map(|i| (parents[i - 1].index(i), i)).collect();
                for (a, b) in extra {
                    let (a, b) = (a.min(b), a.max(b));
                    if a != b && !pairs.iter().any(|&(x, y)| (x.min(y), x.max(y)) == (a, b)) {
                        pairs.push((a, b));
                    }
                }
                let links = pairs
                    .iter()
                    .enumerate()
                    .map(|(k, &(a, b))| LinkSpec {
                        name: Some(format!("l{k}")),
                        between: [name(a), name(b)],
                        bandwidth: link_bw[k].map(f64::from),
                        latency_ms: None,
                    })
                    .collect();
                let tags = tags
                    .into_iter()
                    .enumerate()
                    .map(|(t, (publisher, period, bytes, per_sub, subs))| TagSpec {
                        name: format!("/t{t}"),
                        publisher: name(publisher),
                        period_ms: f64::from(period),
                        message_bytes: Some(f64::from(bytes)),
                        proxy: if per_sub {
                            ProxySharing::PerSubscriber
                        } else {
                            ProxySharing::Shared
                        },
                        scale_cpu: None,
                        forward_cpu: None,
                        subscribers: subs
                            .into_iter()
                            .enumerate()
                            .map(|(s, (node, mult, bound))| SubscriberSpec {
                                name: format!("s{s}"),
                                node: name(node),
                                period_ms: Some(f64::from(period * mult)),
                                message_bytes: None,
                                max_delay_ms: bound.map(|b| f64::from(b * 10)),
                            })
                            .collect(),
                    })
                    .collect();
                TopologySpec { nodes, links, tags }
            },
        )
    })
}

fn objective() -> impl Strategy<Value = Objective> {
    prop_oneof![
        Just(Objective::Bandwidth),
        Just(Objective::Cpu),
        (0u32..=20).prop_map(|w| Objective::Mixed(f64::from(w) / 2.0)),
    ]
}

/// Every combination, no pruning: the oracle.
fn naive(problem: &PlacementProblem<'_>, objective: Objective) -> Option<f64> {
    let cands = problem.candidates();
    let mut idx = vec![0usize; cands.len()];
    let mut best: Option<f64> = None;
    loop {
        if fits(problem, &idx) {
            let v: f64 = idx
                .iter()
                .enumerate()
                .map(|(u, &k)| objective.value(cands[u][k].bandwidth, cands[u][k].cpu))
                .sum();
            if best.map_or(true, |b| v < b) {
                best = Some(v);
            }
        }
        let mut u = 0;
        loop {
            if u == idx.len() {
                return best;
            }
            idx[u] += 1;
            if idx[u] < cands[u].len() {
                break;
            }
            idx[u] = 0;
            u += 1;
        }
    }
}

fn fits(problem: &PlacementProblem<'_>, choice: &[usize]) -> bool {
    let rows = problem.capacity_rows();
    let mut load = vec![0.0; rows.len()];
    for (u, &k) in choice.iter().enumerate() {
        for &(r, x) in problem.candidate_loads(u, k) {
            load[r as usize] += x;
        }
    }
    load.iter()
        .zip(rows)
        .all(|(l, r)| *l <= r.capacity * (1.0 + 1e-7))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

fn check(problem: &PlacementProblem<'_>, a: &Assignment) {
    assert!(
        fits(problem, &a.choice),
        "assignment respects every capacity"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn exhaustive_equals_naive_enumeration_and_mip(spec in topology(), objective in objective()) {
        let topo = spec.validate().expect("generated topologies are valid");
        let problem = match PlacementProblem::new(&topo) {
            Ok(p) => p,
            // Delay-infeasible instances have no optimum to compare.
            Err(PlaceError::DelayBoundUnsatisfiable { .. } | PlaceError::NoCommonProxyNode { .. }) => return Ok(()),
            Err(e) => panic!("unexpected error {e}"),
        };
        let oracle = naive(&problem, objective);
        let ex = solve_exhaustive(&problem, objective, ExhaustiveOptions::default(), &mut |_, _| {});
        match (&oracle, &ex) {
            (Some(o), Ok(a)) => {
                check(&problem, a);
                prop_assert!(close(*o, a.objective), "naive {o} vs exhaustive {}", a.objective);
            }
            (None, Err(PlaceError::CapacityInfeasible { .. })) => {}
            _ => prop_assert!(false, "naive {oracle:?} vs exhaustive {ex:?}"),
        }
        #[cfg(any(feature = "highs", feature = "microlp"))]
        {
            let mip = tagwire_place::solve_mip(&problem, objective);
            match (&oracle, &mip) {
                (Some(o), Ok(m)) => {
                    check(&problem, m);
                    prop_assert!(close(*o, m.objective), "naive {o} vs mip {}", m.objective);
                }
                (None, Err(PlaceError::CapacityInfeasible { .. })) => {}
                _ => prop_assert!(false, "naive {oracle:?} vs mip {mip:?}"),
            }
        }
    }
}
