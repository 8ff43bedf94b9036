//! Reproduces the worked example of the push-pull paper's Appendix A:
//! the five δ(i,j), the five TotalCost_j and the choice of node 1 at 4Kf',
//! and shows what the literal "2T" bound does.

use tagwire_place::{
    model::TopologySpec, place, AlgorithmChoice, PlaceError, PlaceOptions, PlacementProblem,
};

const T: f64 = 10.0; // ms, publisher period
const T2: f64 = 20.0; // ms, T'
const F: f64 = 100.0; // 1/s
const F2: f64 = 50.0; // 1/s, f'

fn spec() -> TopologySpec {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/appendix-a.toml"
    );
    TopologySpec::read_file(path.as_ref(), 1 << 20).expect("examples/appendix-a.toml loads")
}

/// The paper's table, transcribed: node, (d_pub, d_sub1, d_sub2) and
/// δ(1,j), δ(2,j), TotalCost_j as (coef T, coef T'), (coef T, coef T'),
/// (coef f, coef f') with K = 1.
#[allow(clippy::type_complexity)]
const PAPER: [(&str, [u32; 3], (f64, f64), (f64, f64), (f64, f64)); 5] = [
    ("1", [0, 2, 2], (0.0, 2.0), (0.0, 2.0), (0.0, 4.0)),
    ("2", [2, 2, 2], (2.0, 2.0), (2.0, 2.0), (4.0, 4.0)),
    ("3", [2, 2, 0], (2.0, 2.0), (2.0, 0.0), (4.0, 2.0)),
    ("4", [2, 0, 2], (2.0, 0.0), (2.0, 2.0), (4.0, 2.0)),
    ("5", [1, 1, 1], (1.0, 1.0), (1.0, 1.0), (2.0, 2.0)),
];

#[test]
fn all_five_delays_and_total_costs_match_the_paper() {
    let topo = spec().validate().expect("valid");
    let problem = PlacementProblem::new(&topo).expect("feasible");
    assert_eq!(problem.units().len(), 1, "one shared proxy");
    for (name, hops, d1, d2, cost) in PAPER {
        let j = topo.node_index(name).expect("node exists");
        let e = problem.evaluate(0, j);
        assert_eq!(e.hops_from_publisher, hops[0], "d_pub of node {name}");
        assert_eq!(
            e.hops_to_subscriber,
            vec![hops[1], hops[2]],
            "d_sub of node {name}"
        );
        assert_eq!(e.delays_ms[0], d1.0 * T + d1.1 * T2, "δ(1,{name})");
        assert_eq!(e.delays_ms[1], d2.0 * T + d2.1 * T2, "δ(2,{name})");
        assert_eq!(e.bandwidth, cost.0 * F + cost.1 * F2, "TotalCost_{name}");
    }
}

#[test]
fn exhaustive_picks_node_1_with_cost_4kf_prime() {
    let topo = spec().validate().expect("valid");
    let opts = PlaceOptions {
        algorithm: AlgorithmChoice::Exhaustive,
        ..Default::default()
    };
    let report = place(&topo, &opts).expect("solvable");
    assert_eq!(report.proxies.len(), 1);
    assert_eq!(report.proxies[0].proxy_node, "1");
    assert_eq!(report.objective_value, 4.0 * F2);
    let delays: Vec<f64> = report.proxies[0]
        .subscribers
        .iter()
        .map(|s| s.delay_ms)
        .collect();
    assert_eq!(delays, vec![2.0 * T2, 2.0 * T2], "both get 2T'");
}

#[cfg(any(feature = "highs", feature = "microlp"))]
#[test]
fn mip_picks_node_1_with_cost_4kf_prime() {
    let topo = spec().validate().expect("valid");
    let opts = PlaceOptions {
        algorithm: AlgorithmChoice::Mip,
        ..Default::default()
    };
    let report = place(&topo, &opts).expect("solvable");
    assert_eq!(report.proxies[0].proxy_node, "1");
    assert!((report.objective_value - 4.0 * F2).abs() < 1e-6);
}

#[test]
fn only_nodes_1_and_5_meet_the_2t_prime_bound() {
    let topo = spec().validate().expect("valid");
    let problem = PlacementProblem::new(&topo).expect("feasible");
    let feasible: Vec<&str> = problem.candidates()[0]
        .iter()
        .map(|c| topo.nodes[c.node].name.as_str())
        .collect();
    assert_eq!(feasible, vec!["1", "5"]);
}

#[test]
fn literal_2t_bound_admits_no_node_when_t_prime_exceeds_t() {
    let mut spec = spec();
    for s in &mut spec.tags[0].subscribers {
        s.max_delay_ms = Some(2.0 * T);
    }
    let topo = spec.validate().expect("valid");
    match PlacementProblem::new(&topo) {
        Err(PlaceError::NoCommonProxyNode {
            best_node,
            delay_ms,
            bound_ms,
            ..
        }) => {
            // Node 5 comes closest: T + T' = 30 ms against 2T = 20 ms.
            assert_eq!(best_node, "5");
            assert_eq!(delay_ms, T + T2);
            assert_eq!(bound_ms, 2.0 * T);
        }
        other => panic!("expected NoCommonProxyNode, got {other:?}"),
    }
}

#[test]
fn literal_2t_bound_with_t_prime_equal_t_ties_nodes_1_and_5_and_picks_1() {
    let mut spec = spec();
    for s in &mut spec.tags[0].subscribers {
        s.max_delay_ms = Some(2.0 * T);
        s.period_ms = Some(T);
    }
    let topo = spec.validate().expect("valid");
    let problem = PlacementProblem::new(&topo).expect("feasible");
    let feasible: Vec<(&str, f64)> = problem.candidates()[0]
        .iter()
        .map(|c| (topo.nodes[c.node].name.as_str(), c.bandwidth))
        .collect();
    assert_eq!(feasible, vec![("1", 4.0 * F), ("5", 4.0 * F)]);
    let report = place(&topo, &PlaceOptions::default()).expect("solvable");
    assert_eq!(report.proxies[0].proxy_node, "1");
}
