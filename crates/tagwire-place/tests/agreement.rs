//! Property tests: on small random topologies (with latencies and
//! capacities, some of them exactly at a placement's load) the exhaustive
//! search, a naive enumeration of every combination, the branch and bound
//! and the MIP find the same optimum — and, thanks to the shared tolerance
//! and tie-break, the same placement (or all find none).

use proptest::prelude::*;
use tagwire_place::{
    model::{LinkSpec, NodeSpec, ProxySharing, SubscriberSpec, TagSpec, TopologySpec},
    solve_branch_and_bound, solve_exhaustive, Assignment, BranchAndBoundOptions, ExhaustiveOptions,
    Objective, PlaceError, PlacementProblem,
};

fn topology() -> impl Strategy<Value = TopologySpec> {
    (2usize..=7).prop_flat_map(|n| {
        let parents = proptest::collection::vec(any::<prop::sample::Index>(), n - 1);
        let extra = proptest::collection::vec((0..n, 0..n), 0..=3);
        let node_cpu = proptest::collection::vec(prop::option::weighted(0.4, 200u32..3000), n);
        let link_bw = proptest::collection::vec(prop::option::weighted(0.5, 2000u32..40000), n + 3);
        let link_lat = proptest::collection::vec(prop::option::weighted(0.3, 1u32..=5), n + 3);
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
        (Just(n), parents, extra, node_cpu, link_bw, link_lat, tags).prop_map(
            |(n, parents, extra, node_cpu, link_bw, link_lat, tags)| {
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
                        latency_ms: link_lat[k].map(f64::from),
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
        .all(|(l, r)| *l <= r.capacity * (1.0 + tagwire_place::problem::CAPACITY_TOLERANCE))
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

/// Every algorithm on one problem: `Ok(choice)` or the error's name.
fn outcomes(
    problem: &PlacementProblem<'_>,
    objective: Objective,
) -> Vec<(&'static str, Result<Assignment, PlaceError>)> {
    let mut v = vec![
        (
            "exhaustive",
            solve_exhaustive(
                problem,
                objective,
                ExhaustiveOptions::default(),
                &mut |_, _| {},
            ),
        ),
        (
            "branch_and_bound",
            solve_branch_and_bound(
                problem,
                objective,
                BranchAndBoundOptions::default(),
                &mut || std::time::Duration::ZERO,
            ),
        ),
    ];
    #[cfg(any(feature = "highs", feature = "microlp"))]
    v.push(("mip", tagwire_place::solve_mip(problem, objective)));
    v
}

/// Checks every algorithm against the naive oracle, and that all return
/// the same placement. The oracle enumerates `unpruned` (the same problem
/// built without capacity pruning), so a pruning that removed a candidate
/// of a feasible placement would show as a different optimum.
fn agree(
    problem: &PlacementProblem<'_>,
    unpruned: &PlacementProblem<'_>,
    objective: Objective,
) -> Result<(), TestCaseError> {
    let oracle = naive(unpruned, objective);
    let all = outcomes(problem, objective);
    for (name, r) in &all {
        match (&oracle, r) {
            (Some(o), Ok(a)) => {
                check(problem, a);
                prop_assert!(a.optimal, "{name} proves optimality");
                prop_assert!(
                    close(*o, a.objective),
                    "naive {o} vs {name} {}",
                    a.objective
                );
            }
            (None, Err(PlaceError::CapacityInfeasible { .. })) => {}
            _ => prop_assert!(false, "naive {oracle:?} vs {name} {r:?}"),
        }
    }
    let choices: Vec<Option<&Vec<usize>>> = all
        .iter()
        .map(|(_, r)| r.as_ref().ok().map(|a| &a.choice))
        .collect();
    prop_assert!(
        choices.windows(2).all(|w| w[0] == w[1]),
        "same placement from every algorithm: {:?}",
        all.iter()
            .map(|(n, r)| (n, r.as_ref().map(|a| a.choice.clone()).ok()))
            .collect::<Vec<_>>()
    );
    Ok(())
}

fn build(topo: &tagwire_place::Topology) -> Option<PlacementProblem<'_>> {
    build_with(topo, true)
}

fn build_with(topo: &tagwire_place::Topology, prune: bool) -> Option<PlacementProblem<'_>> {
    let options = tagwire_place::BuildOptions {
        prune,
        ..tagwire_place::BuildOptions::default()
    };
    match PlacementProblem::build(topo, options) {
        Ok(p) => Some(p),
        // Delay-infeasible instances have no optimum to compare.
        Err(PlaceError::DelayBoundUnsatisfiable { .. } | PlaceError::NoCommonProxyNode { .. }) => {
            None
        }
        Err(e) => panic!("unexpected error {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_algorithm_finds_the_naive_optimum_and_the_same_placement(
        spec in topology(),
        objective in objective(),
    ) {
        let topo = spec.validate().expect("generated topologies are valid");
        if let (Some(problem), Some(unpruned)) = (build(&topo), build_with(&topo, false)) {
            agree(&problem, &unpruned, objective)?;
        }
    }

    /// Capacities set to a placement's own load, times 1 + ε with ε at or
    /// around the shared tolerance: every algorithm must see the same
    /// feasibility and pick the same placement.
    #[test]
    fn capacities_at_a_placements_load_get_the_same_answer_from_every_algorithm(
        spec in topology(),
        objective in objective(),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 8),
        eps in prop_oneof![Just(0.0), Just(1e-10), Just(-1e-10), Just(2e-9), Just(-2e-9)],
    ) {
        let topo = spec.validate().expect("generated topologies are valid");
        let Some(problem) = build(&topo) else { return Ok(()) };
        let choice: Vec<usize> = problem
            .candidates()
            .iter()
            .enumerate()
            .map(|(u, c)| picks[u % picks.len()].index(c.len()))
            .collect();
        let (links, nodes) = problem.total_loads(&choice);
        let mut tight = spec.clone();
        for (l, load) in tight.links.iter_mut().zip(&links) {
            if l.bandwidth.is_some() && *load > 0.0 {
                l.bandwidth = Some(load * (1.0 + eps));
            }
        }
        for (n, load) in tight.nodes.iter_mut().zip(&nodes) {
            if n.cpu.is_some() && *load > 0.0 {
                n.cpu = Some(load * (1.0 + eps));
            }
        }
        let topo = tight.validate().expect("still valid");
        if let (Some(problem), Some(unpruned)) = (build(&topo), build_with(&topo, false)) {
            agree(&problem, &unpruned, objective)?;
        }
    }
}
