//! Issue 24 item 10 (a): a shared proxy whose legs have more route
//! combinations than `limits::MAX_ROUTE_COMBOS` used to get only the
//! default combination and single-leg deviations, and when every one of
//! those broke a capacity, `tagwire place` said "no placement fits" although
//! one did. Now a truncated candidate set is never reported as infeasible:
//! the problem is rebuilt with every combination (up to
//! `limits::MAX_ROUTE_COMBOS_RETRY`) and, failing that, the error says the
//! search was incomplete.

use tagwire_place::{
    limits, place, AlgorithmChoice, PlaceError, PlaceOptions, PlacementProblem, TopologySpec,
};

/// A publisher `p` and `n` subscribers `s1…sn`, each two hops away through
/// `ai` (declared first: the default route) or `bi`. Every `p–ai` link is
/// capped below one scaled stream, so every subscriber must go through its
/// `bi`. Delay bound 2T' = 80 ms: only a proxy on `p` meets every bound
/// (on `ai`, subscriber k ≠ i is 3 hops away: T + 3T' > 2T'). At `p` there
/// are 2ⁿ route combinations; the only feasible one deviates on every leg.
fn fan(n: usize) -> String {
    let mut nodes = vec![r#"{ name = "p" }"#.to_owned()];
    let mut links = Vec::new();
    let mut subs = Vec::new();
    for i in 1..=n {
        nodes.push(format!(
            r#"{{ name = "a{i}" }}, {{ name = "b{i}" }}, {{ name = "s{i}" }}"#
        ));
        links.push(format!(
            r#"{{ name = "pa{i}", between = ["p", "a{i}"], bandwidth = 10 }}"#
        ));
        links.push(format!(
            r#"{{ name = "as{i}", between = ["a{i}", "s{i}"] }}"#
        ));
    }
    for i in 1..=n {
        links.push(format!(r#"{{ name = "pb{i}", between = ["p", "b{i}"] }}"#));
        links.push(format!(
            r#"{{ name = "bs{i}", between = ["b{i}", "s{i}"] }}"#
        ));
        subs.push(format!(
            r#"{{ name = "v{i}", node = "s{i}", period_ms = 40, max_delay_ms = 80 }}"#
        ));
    }
    format!(
        "nodes = [{}]\nlinks = [\n{}\n]\n[[tags]]\nname = \"/cam\"\npublisher = \"p\"\nperiod_ms = 10\nsubscribers = [{}]\n",
        nodes.join(", "),
        links.join(",\n"),
        subs.join(", ")
    )
}

fn algorithms() -> Vec<AlgorithmChoice> {
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

/// 5 subscribers: 32 combinations at `p`, more than the first build's 16.
#[test]
fn a_shared_proxy_with_32_route_combinations_is_placed_by_every_algorithm() {
    const {
        assert!(
            32 > limits::MAX_ROUTE_COMBOS,
            "the instance must exceed the cap"
        )
    };
    let topo = TopologySpec::from_toml_str(&fan(5))
        .and_then(|s| s.validate())
        .expect("valid");
    // The first build's candidates do not contain the feasible placement
    // (that is what this test is about).
    let first = PlacementProblem::new(&topo).expect("delay-feasible");
    assert!(
        first.truncated_route_combos() > 0,
        "the first build is truncated"
    );
    for algorithm in algorithms() {
        let r = place(
            &topo,
            &PlaceOptions {
                algorithm,
                ..PlaceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{algorithm:?}: {e}"));
        assert_eq!(r.proxies[0].proxy_node, "p", "{algorithm:?}");
        // Every subscriber is served through its b node: 2 hops of L' = 25.
        assert_eq!(r.objective_value, 5.0 * 2.0 * 25.0, "{algorithm:?}");
        for (i, s) in r.proxies[0].subscribers.iter().enumerate() {
            assert_eq!(
                s.route,
                vec![format!("pb{}", i + 1), format!("bs{}", i + 1)],
                "{algorithm:?}"
            );
        }
        for l in &r.links {
            if let Some(c) = l.capacity {
                assert!(l.load <= c, "{algorithm:?}: {} over capacity", l.link);
            }
        }
    }
}

/// When a placement really does not fit, the answer is still "no placement
/// fits" (the retry enumerated every combination, so the claim is proven).
#[test]
fn a_really_infeasible_fan_is_still_reported_as_capacity_infeasible() {
    // Cap the b links too: nothing fits.
    let text = fan(5).replace(
        r#"between = ["p", "b"#,
        r#"bandwidth = 10, between = ["p", "b"#,
    );
    let topo = TopologySpec::from_toml_str(&text)
        .and_then(|s| s.validate())
        .expect("valid");
    for algorithm in algorithms() {
        match place(
            &topo,
            &PlaceOptions {
                algorithm,
                ..PlaceOptions::default()
            },
        ) {
            Err(PlaceError::CapacityInfeasible { .. }) => {}
            other => panic!("{algorithm:?}: {other:?}"),
        }
    }
}
