//! Every bad input the issue lists, one test each: the error names what was
//! wrong and nothing panics.

use std::io::Write;

use tagwire_place::{
    limits, model::TopologySpec, solve_exhaustive, Assignment, ExhaustiveOptions, Objective,
    PlaceError, PlacementProblem,
};

const GOOD: &str = r#"
nodes = [{ name = "p" }, { name = "m", cpu = 100 }, { name = "s" }]
links = [
  { name = "pm", between = ["p", "m"], bandwidth = 1000 },
  { name = "ms", between = ["m", "s"] },
]
[[tags]]
name = "/t"
publisher = "p"
period_ms = 10
subscribers = [{ name = "viewer", node = "s", period_ms = 20, max_delay_ms = 100 }]
"#;

fn validate(text: &str) -> Result<tagwire_place::Topology, PlaceError> {
    TopologySpec::from_toml_str(text)?.validate()
}

#[test]
fn the_reference_topology_is_valid() {
    validate(GOOD).expect("GOOD is valid, so each test below fails for its own reason");
}

#[test]
fn malformed_toml_is_refused_with_its_position() {
    let err = validate("nodes = [{ name = \"p\" ]\n").expect_err("malformed");
    match err {
        PlaceError::Malformed { format, message } => {
            assert_eq!(format, "TOML");
            assert!(message.contains("line 1"), "position in {message:?}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn malformed_json_is_refused_with_its_position() {
    let err = TopologySpec::from_json_str("{\"nodes\": [}").expect_err("malformed");
    match err {
        PlaceError::Malformed { format, message } => {
            assert_eq!(format, "JSON");
            assert!(message.contains("line 1"), "position in {message:?}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn unknown_field_is_refused() {
    let text = GOOD.replace("period_ms = 10", "period_ms = 10\nperiod = 3");
    let err = validate(&text).expect_err("unknown field");
    assert!(
        matches!(&err, PlaceError::Malformed { message, .. } if message.contains("period")),
        "{err}"
    );
}

#[test]
fn unknown_node_in_a_link_is_named() {
    let text = GOOD.replace(r#"between = ["m", "s"]"#, r#"between = ["m", "x"]"#);
    match validate(&text).expect_err("unknown node") {
        PlaceError::UnknownNode {
            referenced_by,
            node,
        } => {
            assert_eq!(node, "x");
            assert!(referenced_by.contains("\"ms\""), "{referenced_by}");
        }
        other => panic!("expected UnknownNode, got {other:?}"),
    }
}

#[test]
fn unknown_subscriber_node_is_named() {
    let text = GOOD.replace(r#"node = "s""#, r#"node = "nowhere""#);
    match validate(&text).expect_err("unknown node") {
        PlaceError::UnknownNode {
            referenced_by,
            node,
        } => {
            assert_eq!(node, "nowhere");
            assert!(referenced_by.contains("viewer"), "{referenced_by}");
        }
        other => panic!("expected UnknownNode, got {other:?}"),
    }
}

#[test]
fn disconnected_graph_is_refused() {
    let text = GOOD.replace(
        r#"{ name = "s" }]"#,
        r#"{ name = "s" }, { name = "island" }]"#,
    );
    match validate(&text).expect_err("disconnected") {
        PlaceError::DisconnectedGraph { node, from } => {
            assert_eq!(node, "island");
            assert_eq!(from, "p");
        }
        other => panic!("expected DisconnectedGraph, got {other:?}"),
    }
}

#[test]
fn infeasible_delay_bound_names_subscriber_best_node_and_delay() {
    // p -(1)- m -(1)- s, T = 10, T' = 20: the least delay is 2T = 20 ms
    // (proxy on s); a 15 ms bound cannot be met.
    let text = GOOD.replace("max_delay_ms = 100", "max_delay_ms = 15");
    let topo = validate(&text).expect("valid model");
    let err = PlacementProblem::new(&topo).expect_err("infeasible");
    match &err {
        PlaceError::DelayBoundUnsatisfiable {
            tag,
            subscriber,
            bound_ms,
            best_node,
            best_delay_ms,
        } => {
            assert_eq!(tag, "/t");
            assert_eq!(subscriber, "viewer");
            assert_eq!(*bound_ms, 15.0);
            assert_eq!(best_node, "s");
            assert_eq!(*best_delay_ms, 20.0);
        }
        other => panic!("expected DelayBoundUnsatisfiable, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("no placement satisfies subscriber \"viewer\"'s delay bound")
            && msg.contains("best is node \"s\" with delay 20 ms"),
        "{msg}"
    );
}

#[test]
fn zero_link_bandwidth_is_refused() {
    let text = GOOD.replace("bandwidth = 1000", "bandwidth = 0");
    match validate(&text).expect_err("zero bandwidth") {
        PlaceError::NonPositiveBandwidth { link, value } => {
            assert_eq!(link, "pm");
            assert_eq!(value, 0.0);
        }
        other => panic!("expected NonPositiveBandwidth, got {other:?}"),
    }
}

#[test]
fn negative_link_bandwidth_is_refused() {
    let text = GOOD.replace("bandwidth = 1000", "bandwidth = -5");
    assert!(matches!(
        validate(&text),
        Err(PlaceError::NonPositiveBandwidth { value, .. }) if value == -5.0
    ));
}

#[test]
fn zero_node_cpu_is_refused() {
    let text = GOOD.replace("cpu = 100", "cpu = 0");
    match validate(&text).expect_err("zero cpu") {
        PlaceError::NonPositiveCpu { node, value } => {
            assert_eq!(node, "m");
            assert_eq!(value, 0.0);
        }
        other => panic!("expected NonPositiveCpu, got {other:?}"),
    }
}

#[test]
fn negative_node_cpu_is_refused() {
    let text = GOOD.replace("cpu = 100", "cpu = -1.5");
    assert!(matches!(
        validate(&text),
        Err(PlaceError::NonPositiveCpu { value, .. }) if value == -1.5
    ));
}

#[test]
fn nan_capacity_is_refused() {
    let text = GOOD.replace("bandwidth = 1000", "bandwidth = nan");
    assert!(matches!(
        validate(&text),
        Err(PlaceError::NonPositiveBandwidth { .. })
    ));
}

#[test]
fn subscriber_faster_than_publisher_is_refused() {
    let text = GOOD.replace("period_ms = 20", "period_ms = 5");
    assert!(matches!(
        validate(&text),
        Err(PlaceError::SubscriberFasterThanPublisher { period_ms, publisher_period_ms, .. })
            if period_ms == 5.0 && publisher_period_ms == 10.0
    ));
}

#[test]
fn file_of_100_mb_is_refused_before_reading() {
    let dir = std::env::temp_dir().join(format!("tagwire-place-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("huge.toml");
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(b"# huge\n").expect("write");
    // Sparse: 100 MB long without writing 100 MB.
    f.set_len(100 * 1024 * 1024).expect("set_len");
    drop(f);
    let err = TopologySpec::read_file(&path, limits::MAX_FILE_BYTES).expect_err("too large");
    let _ = std::fs::remove_dir_all(&dir);
    match err {
        PlaceError::FileTooLarge { size, max, .. } => {
            assert_eq!(size, 100 * 1024 * 1024);
            assert_eq!(max, limits::MAX_FILE_BYTES);
        }
        other => panic!("expected FileTooLarge, got {other:?}"),
    }
}

#[test]
fn missing_file_is_a_read_error_naming_the_path() {
    let err =
        TopologySpec::read_file("/nonexistent/topology.toml".as_ref(), 1024).expect_err("missing");
    assert!(
        err.to_string().contains("/nonexistent/topology.toml"),
        "{err}"
    );
}

#[test]
fn json_input_is_accepted() {
    let spec = TopologySpec::from_toml_str(GOOD).expect("toml");
    let json = serde_json::to_string(&spec).expect("serialise");
    let back = TopologySpec::from_json_str(&json).expect("json");
    assert_eq!(back, spec);
    back.validate().expect("valid");
}

/// Found by running the `place_model` fuzz target on hand-made inputs with
/// extreme numbers: a rate of 1000 / 1e-300 messages per second of 1e300
/// bytes overflows every cost to infinity (NaN on the publisher's node,
/// 0 hops × ∞). The MIP solver (microlp) panicked on it (`assertion failed:
/// self.dual_edge_sq_norms[r].is_finite()`) and the exhaustive search
/// reported an infinite objective; both now refuse it.
#[test]
fn costs_that_overflow_are_refused_by_both_algorithms() {
    let text = r#"
nodes = [{ name = "p" }, { name = "m", cpu = 100 }, { name = "s" }]
links = [
  { name = "pm", between = ["p", "m"], bandwidth = 1e-300 },
  { name = "ms", between = ["m", "s"] },
]
[[tags]]
name = "/t"
publisher = "p"
period_ms = 1e-300
message_bytes = 1e300
subscribers = [{ name = "viewer", node = "s" }]
"#;
    let topo = validate(text).expect("every number is finite and positive");
    let problem = PlacementProblem::new(&topo).expect("no delay bound");
    let check = |r: Result<Assignment, PlaceError>| match r {
        Err(PlaceError::InvalidValue { what, value, .. }) => {
            assert!(what.contains("cost of tag \"/t\""), "{what}");
            assert!(!value.is_finite());
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    };
    for objective in [Objective::Bandwidth, Objective::Cpu, Objective::Mixed(1.0)] {
        check(solve_exhaustive(
            &problem,
            objective,
            ExhaustiveOptions::default(),
            &mut |_, _| {},
        ));
        #[cfg(any(feature = "highs", feature = "microlp"))]
        check(tagwire_place::solve_mip(&problem, objective));
    }
}

/// Each candidate's cost is finite (1e308 bytes/s), but two of them add up
/// to infinity: refused as well.
#[test]
fn costs_whose_sum_overflows_are_refused() {
    let text = r#"
nodes = [{ name = "p" }, { name = "s" }]
links = [{ between = ["p", "s"] }]
[[tags]]
name = "/a"
publisher = "p"
period_ms = 1000
message_bytes = 1e308
subscribers = [{ name = "x", node = "s" }]
[[tags]]
name = "/b"
publisher = "p"
period_ms = 1000
message_bytes = 1e308
subscribers = [{ name = "y", node = "s" }]
"#;
    let topo = validate(text).expect("valid");
    let problem = PlacementProblem::new(&topo).expect("no delay bound");
    let err = problem
        .objective_values(Objective::Bandwidth)
        .expect_err("the sum overflows");
    assert!(
        err.to_string()
            .starts_with("the total bandwidth cost of the costliest placement is inf"),
        "{err}"
    );
    let ex = solve_exhaustive(
        &problem,
        Objective::Bandwidth,
        ExhaustiveOptions::default(),
        &mut |_, _| {},
    );
    assert!(matches!(ex, Err(PlaceError::InvalidValue { .. })), "{ex:?}");
}

/// Found by running the `place_model` fuzz target on hand-made inputs with
/// extreme numbers: a CPU capacity of 1e-300 units/s against a load of
/// about 1e-297 (rate 1000 / 1e300). The exhaustive search allowed an
/// absolute slack of 1e-9 on every capacity, so it placed the proxy on a
/// node loaded a thousand times over its capacity while the MIP (rightly)
/// found no placement; its slack is now relative.
#[test]
fn a_tiny_capacity_is_not_exceeded_by_an_absolute_slack() {
    let text = r#"
nodes = [{ name = "p" }, { name = "m", cpu = 1e-300 }, { name = "s" }]
links = [{ between = ["p", "m"] }, { between = ["m", "s"] }]
[[tags]]
name = "/t"
publisher = "p"
period_ms = 1e300
subscribers = [{ name = "viewer", node = "s" }]
"#;
    let topo = validate(text).expect("valid");
    let problem = PlacementProblem::new(&topo).expect("no delay bound");
    let ex = solve_exhaustive(
        &problem,
        Objective::Bandwidth,
        ExhaustiveOptions::default(),
        &mut |_, _| {},
    );
    assert!(
        matches!(ex, Err(PlaceError::CapacityInfeasible { .. })),
        "{ex:?}"
    );
    #[cfg(any(feature = "highs", feature = "microlp"))]
    {
        let mip = tagwire_place::solve_mip(&problem, Objective::Bandwidth);
        assert!(
            matches!(mip, Err(PlaceError::CapacityInfeasible { .. })),
            "{mip:?}"
        );
    }
}

/// A zero delay bound is a real bound: a subscriber on the publisher's
/// node, with the proxy there, meets it.
#[test]
fn a_zero_delay_bound_is_met_on_the_publishers_node() {
    let text = r#"
        nodes = [{ name = "p" }, { name = "s" }]
        links = [{ between = ["p", "s"] }]
        [[tags]]
        name = "/t"
        publisher = "p"
        period_ms = 10
        subscribers = [
          { name = "local", node = "p", period_ms = 20, max_delay_ms = 0 },
          { name = "remote", node = "s", period_ms = 20 },
        ]
        proxy = "per_subscriber"
    "#;
    let topo = validate(text).expect("max_delay_ms = 0 is accepted");
    let r = tagwire_place::place(&topo, &Default::default()).expect("feasible");
    let local = &r.proxies[0];
    assert_eq!(local.proxy_node, "p");
    assert_eq!(local.subscribers[0].delay_ms, 0.0);
    assert_eq!(local.subscribers[0].max_delay_ms, Some(0.0));
}

#[test]
fn a_negative_delay_bound_is_refused() {
    let text = GOOD.replace("max_delay_ms = 100", "max_delay_ms = -1");
    match validate(&text).expect_err("negative bound") {
        PlaceError::InvalidValue { what, value, .. } => {
            assert!(what.contains("max_delay_ms"), "{what}");
            assert_eq!(value, -1.0);
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
}

/// Two hops of a 1e308 ms period overflow to infinity: refused with the
/// subscriber, tag and node named, never reported (as `null` in JSON).
#[test]
fn an_overflowing_delay_is_refused_naming_the_subscriber() {
    let text = GOOD
        .replace("period_ms = 10", "period_ms = 1e308")
        .replace("period_ms = 20, max_delay_ms = 100", "period_ms = 1e308");
    let topo = validate(&text).expect("valid numbers");
    match tagwire_place::place(&topo, &Default::default()).expect_err("overflow") {
        PlaceError::InvalidValue { what, value, .. } => {
            assert!(
                what.contains("delay of subscriber \"viewer\" of tag \"/t\""),
                "{what}"
            );
            assert!(value.is_infinite());
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
}
