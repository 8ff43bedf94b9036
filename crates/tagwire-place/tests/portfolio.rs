//! Issue 24 item 10 (c): the default should be the best solver for the
//! instance. On coupled problems it used to be the branch and bound alone:
//! whatever gap it was left with (or no placement at all) was the answer
//! even where the MIP proves the optimum at once. Now the default runs the
//! MIP with the time the branch and bound leaves whenever the branch and
//! bound has not proved its answer.

use tagwire_place::{
    place, Algorithm, AlgorithmChoice, BranchAndBoundOptions, PlaceOptions, PlacementProblem,
    TopologySpec,
};

/// The vBNS chain 0–6 and `k` single-subscriber tags published on node 0
/// and read on node 6, contending for node 0's CPU: a knapsack (which
/// proxies may stay on the publisher's node), with more than 10⁶
/// combinations so that the default does not pick the exhaustive search.
fn contention(k: usize) -> String {
    let periods = [5.0, 10.0, 20.0, 25.0, 40.0];
    let mut tags = String::new();
    let (mut base, mut scaling) = (0.0, 0.0);
    for t in 0..k {
        let period = periods[(t * 3 + 1) % 5];
        let mult = 2 + (t * 7) % 4;
        let bytes = 100 + (t * 389) % 1900;
        base += 1000.0 / period;
        scaling += 10.0 * 1000.0 / period;
        tags.push_str(&format!(
            "[[tags]]\nname = \"/k{t}\"\npublisher = \"0\"\nperiod_ms = {period}\nmessage_bytes = {bytes}\nscale_cpu = 10\nforward_cpu = 1\nsubscribers = [{{ name = \"sd\", node = \"6\", period_ms = {} }}]\n",
            period * mult as f64
        ));
    }
    let cpu = base + 0.5 * scaling;
    format!(
        "nodes = [{{ name = \"0\", cpu = {cpu} }}, {{ name = \"1\" }}, {{ name = \"2\" }}, {{ name = \"3\" }}, {{ name = \"4\" }}, {{ name = \"5\" }}, {{ name = \"6\" }}]\n\
         links = [{{ between = [\"0\", \"1\"] }}, {{ between = [\"1\", \"2\"] }}, {{ between = [\"2\", \"3\"] }}, {{ between = [\"3\", \"4\"] }}, {{ between = [\"4\", \"5\"] }}, {{ between = [\"5\", \"6\"] }}]\n{tags}"
    )
}

/// The branch and bound is cut short (one search node, as a time limit
/// would on a big instance): the default must still return the proven
/// optimum, found by the MIP, equal to the exhaustive search's.
#[test]
fn the_default_runs_the_mip_when_the_branch_and_bound_has_no_proof() {
    if !tagwire_place::MIP_AVAILABLE {
        return;
    }
    let topo = TopologySpec::from_toml_str(&contention(10))
        .and_then(|s| s.validate())
        .expect("valid");
    let problem = PlacementProblem::new(&topo).expect("delay-feasible");
    assert!(problem.combinations() > tagwire_place::AUTO_EXHAUSTIVE_COMBINATIONS);
    assert!(!problem.capacity_rows().is_empty());
    let exact = place(
        &topo,
        &PlaceOptions {
            algorithm: AlgorithmChoice::Exhaustive,
            ..PlaceOptions::default()
        },
    )
    .expect("feasible");
    let cut_short = BranchAndBoundOptions {
        max_visits: 1,
        subgradient_iterations: 1,
        ..BranchAndBoundOptions::default()
    };
    // The branch and bound alone has no proof (the premise of the test).
    let alone = place(
        &topo,
        &PlaceOptions {
            algorithm: AlgorithmChoice::BranchAndBound,
            branch_and_bound: cut_short,
            ..PlaceOptions::default()
        },
    );
    assert!(
        alone.as_ref().map_or(true, |r| r.status != "optimal"),
        "premise: the cut-short branch and bound proves nothing"
    );
    let auto = place(
        &topo,
        &PlaceOptions {
            branch_and_bound: cut_short,
            ..PlaceOptions::default()
        },
    )
    .expect("the MIP finds the optimum");
    assert_eq!(auto.status, "optimal");
    assert_eq!(auto.gap, 0.0);
    assert_eq!(auto.algorithm, Algorithm::Mip);
    assert!(
        (auto.objective_value - exact.objective_value).abs() <= 1e-9 * exact.objective_value,
        "{} vs the exhaustive {}",
        auto.objective_value,
        exact.objective_value
    );
    let nodes = |r: &tagwire_place::PlacementReport| {
        r.proxies
            .iter()
            .map(|p| p.proxy_node.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(nodes(&auto), nodes(&exact), "the shared tie-break");
}
