//! One tolerance and one tie-break for every algorithm (issue 15 item 5):
//! the exhaustive search and the MIP used to disagree on feasibility within
//! 1e-9 of a capacity and to pick different placements among ties.

use tagwire_place::{
    place, AlgorithmChoice, PlaceError, PlaceOptions, PlacementReport, TopologySpec,
};

fn algorithms() -> Vec<AlgorithmChoice> {
    let mut v = vec![AlgorithmChoice::Exhaustive, AlgorithmChoice::BranchAndBound];
    if tagwire_place::MIP_AVAILABLE {
        v.push(AlgorithmChoice::Mip);
    }
    v
}

fn run_all(text: &str) -> Vec<Result<PlacementReport, PlaceError>> {
    let topo = TopologySpec::from_toml_str(text)
        .and_then(|s| s.validate())
        .expect("valid");
    algorithms()
        .into_iter()
        .map(|algorithm| {
            place(
                &topo,
                &PlaceOptions {
                    algorithm,
                    ..PlaceOptions::default()
                },
            )
        })
        .collect()
}

fn nodes(r: &PlacementReport) -> Vec<String> {
    r.proxies.iter().map(|p| p.proxy_node.clone()).collect()
}

/// A ring of six nodes, publisher on 0, subscribers on 3 (two equal-hop
/// ways round) with their own proxies, and a capacity on link 0-1 that
/// couples them: many placements tie.
fn ring(cap01: f64) -> String {
    format!(
        r#"
        nodes = [{{ name = "0" }}, {{ name = "1" }}, {{ name = "2" }}, {{ name = "3" }}, {{ name = "4" }}, {{ name = "5" }}]
        links = [
          {{ between = ["0", "1"], bandwidth = {cap01} }},
          {{ between = ["1", "2"] }},
          {{ between = ["2", "3"] }},
          {{ between = ["3", "4"] }},
          {{ between = ["4", "5"] }},
          {{ between = ["5", "0"] }},
        ]
        [[tags]]
        name = "/t"
        publisher = "0"
        period_ms = 10
        proxy = "per_subscriber"
        subscribers = [
          {{ name = "x", node = "3", period_ms = 10 }},
          {{ name = "y", node = "3", period_ms = 10 }},
          {{ name = "z", node = "2", period_ms = 10 }},
        ]
        "#
    )
}

#[test]
fn ties_give_the_same_placement_from_every_algorithm() {
    for cap in [150.0, 250.0, 1000.0] {
        let all = run_all(&ring(cap));
        let first = all[0].as_ref().expect("feasible");
        for r in &all[1..] {
            let r = r.as_ref().expect("feasible");
            assert_eq!(r.objective_value, first.objective_value, "cap {cap}");
            assert_eq!(nodes(r), nodes(first), "cap {cap}: {:?}", r.algorithm);
            let routes = |r: &PlacementReport| -> Vec<Vec<String>> {
                r.proxies
                    .iter()
                    .map(|p| p.subscribers[0].route.clone())
                    .collect()
            };
            assert_eq!(routes(r), routes(first), "cap {cap}: {:?}", r.algorithm);
        }
    }
}

/// Two subscribers need 100 msg/s each over link 0-1 (capacity 200 give or
/// take a relative 1e-10, inside the shared 1e-9 tolerance; 200·(1 − 1e-8)
/// is outside it): every algorithm agrees on whether they both fit.
#[test]
fn feasibility_at_a_capacity_is_the_same_for_every_algorithm() {
    let chain = |cap: f64| {
        format!(
            r#"
            nodes = [{{ name = "0" }}, {{ name = "1" }}]
            links = [{{ between = ["0", "1"], bandwidth = {cap:e} }}]
            [[tags]]
            name = "/t"
            publisher = "0"
            period_ms = 10
            proxy = "per_subscriber"
            subscribers = [{{ name = "x", node = "1" }}, {{ name = "y", node = "1" }}]
            "#
        )
    };
    for (cap, fits) in [
        (200.0, true),
        (200.0 * (1.0 - 1e-10), true),
        (200.0 * (1.0 - 5e-10), true),
        (200.0 * (1.0 - 1e-8), false),
    ] {
        for r in run_all(&chain(cap)) {
            match (fits, r) {
                (true, Ok(r)) => assert_eq!(r.objective_value, 200.0, "cap {cap}"),
                (false, Err(PlaceError::CapacityInfeasible { .. })) => {}
                (f, r) => panic!("cap {cap}: expected fits = {f}, got {r:?}"),
            }
        }
    }
}
