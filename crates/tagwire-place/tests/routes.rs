//! Routes are part of the decision (issue 15 item 5): regression tests for
//! the two placements that breadth-first trees with a declaration-order
//! tie-break missed. Both use a diamond p–a–s / p–b–s whose declared-first
//! route (through a) is slow or full while the other equal-hop route
//! (through b) is fine.

use tagwire_place::{place, AlgorithmChoice, Objective, PlaceOptions, TopologySpec};

fn diamond(pa_extra: &str, bound: &str) -> String {
    format!(
        r#"
        nodes = [{{ name = "p" }}, {{ name = "a" }}, {{ name = "b" }}, {{ name = "s" }}]
        links = [
          {{ name = "pa", between = ["p", "a"]{pa_extra} }},
          {{ name = "pb", between = ["p", "b"] }},
          {{ name = "as", between = ["a", "s"] }},
          {{ name = "bs", between = ["b", "s"] }},
        ]
        [[tags]]
        name = "/cam"
        publisher = "p"
        period_ms = 10
        subscribers = [{{ name = "viewer", node = "s", period_ms = 40{bound} }}]
        "#
    )
}

fn all_algorithms() -> Vec<AlgorithmChoice> {
    let mut v = vec![
        AlgorithmChoice::Auto,
        AlgorithmChoice::Exhaustive,
        AlgorithmChoice::BranchAndBound,
    ];
    if tagwire_place::MIP_AVAILABLE {
        v.push(AlgorithmChoice::Mip);
    }
    v
}

/// L = 100 msg/s, L' = 25: a proxy on p costs 2·25 = 50, on a or b
/// 100 + 25 = 125, on s 200. Through a the path has 30 ms more latency, so
/// the cheapest placement (p, 2T' = 80 ms) only meets the 90 ms bound via b.
#[test]
fn a_slow_declared_first_route_does_not_hide_the_cheaper_placement() {
    let text = diamond(", latency_ms = 30", ", max_delay_ms = 90");
    let topo = TopologySpec::from_toml_str(&text)
        .and_then(|s| s.validate())
        .expect("valid");
    for algorithm in all_algorithms() {
        let r = place(
            &topo,
            &PlaceOptions {
                algorithm,
                objective: Objective::Bandwidth,
                ..PlaceOptions::default()
            },
        )
        .expect("feasible");
        assert_eq!(r.objective_value, 50.0, "{algorithm:?}");
        assert_eq!(r.proxies[0].proxy_node, "p", "{algorithm:?}");
        let s = &r.proxies[0].subscribers[0];
        assert_eq!(s.route, vec!["pb", "bs"], "{algorithm:?}");
        assert_eq!(s.delay_ms, 80.0);
    }
}

/// Link pa carries at most 10 msg/s: every placement whose route uses it
/// breaks the capacity. Through b, the proxy on p fits and costs 50.
#[test]
fn a_full_declared_first_route_does_not_hide_the_cheaper_placement() {
    let text = diamond(", bandwidth = 10", "");
    let topo = TopologySpec::from_toml_str(&text)
        .and_then(|s| s.validate())
        .expect("valid");
    for algorithm in all_algorithms() {
        let r = place(
            &topo,
            &PlaceOptions {
                algorithm,
                ..PlaceOptions::default()
            },
        )
        .expect("feasible");
        assert_eq!(r.objective_value, 50.0, "{algorithm:?}");
        assert_eq!(r.proxies[0].proxy_node, "p", "{algorithm:?}");
        assert_eq!(r.proxies[0].subscribers[0].route, vec!["pb", "bs"]);
        let pa = r.links.iter().find(|l| l.link == "pa");
        assert!(pa.is_none(), "nothing crosses the full link: {pa:?}");
    }
}

/// A path with more hops but less latency is a candidate route: p–s
/// directly has 100 ms of latency, p–a–b–s 3 ms. Only the longer route
/// meets the bound.
#[test]
fn a_longer_route_with_less_latency_meets_a_bound_the_shortest_cannot() {
    let text = r#"
        nodes = [{ name = "p" }, { name = "a" }, { name = "b" }, { name = "s" }]
        links = [
          { name = "ps", between = ["p", "s"], latency_ms = 100 },
          { name = "pa", between = ["p", "a"], latency_ms = 1 },
          { name = "ab", between = ["a", "b"], latency_ms = 1 },
          { name = "bs", between = ["b", "s"], latency_ms = 1 },
        ]
        [[tags]]
        name = "/cam"
        publisher = "p"
        period_ms = 10
        subscribers = [{ name = "viewer", node = "s", period_ms = 10, max_delay_ms = 40 }]
    "#;
    let topo = TopologySpec::from_toml_str(text)
        .and_then(|s| s.validate())
        .expect("valid");
    let r = place(&topo, &PlaceOptions::default()).expect("feasible over the long route");
    let p = &r.proxies[0];
    let s = &p.subscribers[0];
    assert_eq!(s.delay_ms, 33.0);
    let mut route = p.route_from_publisher.clone();
    route.extend(s.route.iter().cloned());
    assert_eq!(route, vec!["pa", "ab", "bs"]);
}
