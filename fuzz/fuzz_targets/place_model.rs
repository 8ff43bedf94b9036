//! Fuzz target: arbitrary bytes as a placement topology file, read both as
//! TOML and as JSON (`TopologySpec::parse`), then validated. Errors are
//! expected; a panic is a bug. Properties checked on what parses:
//! - validation is deterministic;
//! - the spec written back as TOML parses to the same spec, which validates
//!   the same way;
//! - for a valid topology, `PlacementProblem::new` does not panic, and on a
//!   small instance (few nodes, units and combinations, so each input runs
//!   in well under 10 ms) the exhaustive search, a naive enumeration of
//!   every combination and the MIP find the same optimum or all find none
//!   (as `crates/tagwire-place/tests/agreement.rs` checks), every assignment
//!   respects every capacity (within a relative 1e-7), and its report and
//!   explanation render; costs that overflow are refused by both algorithms
//!   with the same error.
//!
//! Seed corpus: examples/*.toml and a JSON topology (scripts/fuzz.sh).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_place::{
    explain,
    model::{InputFormat, TopologySpec},
    solve_branch_and_bound, solve_exhaustive, solve_mip, Algorithm, Assignment,
    BranchAndBoundOptions, BuildOptions, ExhaustiveOptions, Objective, PlaceError,
    PlacementProblem, PlacementReport,
};

/// Largest instance the algorithms are run on.
const MAX_NODES: usize = 12;
const MAX_UNITS: usize = 6;
const MAX_COMBINATIONS: f64 = 2048.0;
const MAX_BINARIES: usize = 40;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Which objective the algorithms minimise: any input byte would do; the
    // length keeps the choice stable under most mutations of the content.
    let objective = match data.len() % 3 {
        0 => Objective::Bandwidth,
        1 => Objective::Cpu,
        _ => Objective::Mixed(0.5),
    };
    for format in [InputFormat::Toml, InputFormat::Json] {
        if let Ok(spec) = TopologySpec::parse(text, format) {
            check_spec(&spec, objective);
        }
    }
});

fn describe(r: &Result<tagwire_place::Topology, PlaceError>) -> String {
    match r {
        Ok(t) => format!("Ok({t:?})"),
        Err(e) => format!("Err({e})"),
    }
}

fn check_spec(spec: &TopologySpec, objective: Objective) {
    let first = spec.validate();
    let second = spec.validate();
    assert_eq!(
        describe(&first),
        describe(&second),
        "validation is not deterministic"
    );

    // Written back as TOML, the spec reads the same and validates the same.
    let toml_text = toml::to_string(spec).expect("a parsed spec serialises as TOML");
    let again = TopologySpec::from_toml_str(&toml_text)
        .unwrap_or_else(|e| panic!("re-serialised spec does not parse: {e}\n{toml_text}"));
    // Debug, not ==: NaN fields (refused by validation) compare unequal.
    assert_eq!(
        format!("{spec:?}"),
        format!("{again:?}"),
        "TOML round trip changed the spec:\n{toml_text}"
    );
    assert_eq!(
        describe(&first),
        describe(&again.validate()),
        "round trip changed validation"
    );

    let Ok(topo) = first else {
        return;
    };
    let problem = match PlacementProblem::new(&topo) {
        Ok(p) => p,
        Err(
            PlaceError::DelayBoundUnsatisfiable { .. }
            | PlaceError::NoCommonProxyNode { .. }
            | PlaceError::LimitExceeded { .. }
            // A delay that overflows (periods or latencies near f64::MAX).
            | PlaceError::InvalidValue { .. },
        ) => return,
        Err(e) => panic!("unexpected error building the problem: {e}"),
    };
    let binaries: usize = problem.candidates().iter().map(Vec::len).sum();
    if topo.nodes.len() > MAX_NODES
        || problem.units().len() > MAX_UNITS
        || problem.combinations() > MAX_COMBINATIONS
        || binaries > MAX_BINARIES
    {
        return;
    }
    if let Err(e) = problem.objective_values(objective) {
        // Costs that overflow: both algorithms refuse them with this error.
        let ex = solve_exhaustive(
            &problem,
            objective,
            ExhaustiveOptions::default(),
            &mut |_, _| {},
        );
        let mip = solve_mip(&problem, objective);
        for got in [ex, mip] {
            match got {
                Err(PlaceError::InvalidValue { .. }) => {
                    assert_eq!(got.err().map(|g| g.to_string()), Some(e.to_string()));
                }
                other => panic!("expected {e}, got {other:?}"),
            }
        }
        return;
    }
    // The oracle enumerates the problem built without capacity pruning, so
    // a pruning that dropped a candidate of a fitting placement shows.
    let Ok(unpruned) = PlacementProblem::build(
        &topo,
        BuildOptions {
            prune: false,
            ..BuildOptions::default()
        },
    ) else {
        panic!("the same build without pruning failed");
    };
    if unpruned.combinations() > MAX_COMBINATIONS {
        return;
    }
    let oracle = naive(&unpruned, objective);
    let ex = solve_exhaustive(
        &problem,
        objective,
        ExhaustiveOptions::default(),
        &mut |_, _| {},
    );
    agree(&problem, objective, oracle, &ex, Algorithm::Exhaustive);
    let mip = solve_mip(&problem, objective);
    agree(&problem, objective, oracle, &mip, Algorithm::Mip);
    let bnb = solve_branch_and_bound(
        &problem,
        objective,
        BranchAndBoundOptions::default(),
        &mut || std::time::Duration::ZERO,
    );
    agree(&problem, objective, oracle, &bnb, Algorithm::BranchAndBound);
    // One tolerance and one tie-break: the same placement from all three.
    let choices: Vec<Option<Vec<usize>>> = [&ex, &mip, &bnb]
        .iter()
        .map(|r| r.as_ref().ok().map(|a| a.choice.clone()))
        .collect();
    assert!(
        choices.windows(2).all(|w| w[0] == w[1]),
        "algorithms chose different placements: {choices:?}"
    );
}

/// Every combination, no pruning: the oracle (as in tests/agreement.rs).
fn naive(problem: &PlacementProblem<'_>, objective: Objective) -> Option<f64> {
    let cands = problem.candidates();
    let mut idx = vec![0usize; cands.len()];
    let mut best: Option<f64> = None;
    loop {
        if fits(problem, &idx) {
            let v = value(problem, objective, &idx);
            if best.is_none_or(|b| v < b) {
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

fn value(problem: &PlacementProblem<'_>, objective: Objective, choice: &[usize]) -> f64 {
    let cands = problem.candidates();
    choice
        .iter()
        .enumerate()
        .map(|(u, &k)| objective.value(cands[u][k].bandwidth, cands[u][k].cpu))
        .sum()
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

fn agree(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    oracle: Option<f64>,
    got: &Result<Assignment, PlaceError>,
    algorithm: Algorithm,
) {
    match (oracle, got) {
        (Some(o), Ok(a)) => {
            assert_eq!(a.choice.len(), problem.units().len(), "{algorithm:?}");
            for (u, &k) in a.choice.iter().enumerate() {
                assert!(
                    k < problem.candidates()[u].len(),
                    "{algorithm:?}: bad index"
                );
            }
            assert!(
                fits(problem, &a.choice),
                "{algorithm:?}: assignment breaks a capacity"
            );
            assert!(
                close(o, a.objective),
                "naive {o} vs {algorithm:?} {}",
                a.objective
            );
            assert!(
                close(value(problem, objective, &a.choice), a.objective),
                "{algorithm:?}: objective {} is not its assignment's value",
                a.objective
            );
            let report = PlacementReport::new(problem, objective, algorithm, a);
            let _ = report.to_text();
            let _ = explain(problem, Some(a));
        }
        (None, Err(PlaceError::CapacityInfeasible { .. })) => {
            let _ = explain(problem, None);
        }
        _ => panic!("naive {oracle:?} vs {algorithm:?} {got:?}"),
    }
}
