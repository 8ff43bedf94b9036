//! Issue 24 item 10 (b): `--time-limit` is a wall-clock promise. Building
//! the problem used to be uninterruptible (4.3 s wall at `--time-limit 1`),
//! the exhaustive search and the MIP ignored the limit, and the MIP's
//! fallback ran a branch and bound with its own 10 s. Now one deadline,
//! counted from the start, covers reading, building, every search and the
//! MIP (the backend gets the time left).
//!
//! Timing on a shared machine: the deadlines here are far below what the
//! work takes, and the checks allow 4 s of slack over them (the unchanged
//! code overshot by 10–60 s on these instances in a debug build).

use std::process::Command;
use std::time::{Duration, Instant};

use tagwire_place::generate::{random_instance, InstanceParams};
use tagwire_place::{
    place, AlgorithmChoice, BranchAndBoundOptions, BuildOptions, Deadline, PlaceError,
    PlaceOptions, PlacementProblem,
};

const SLACK: Duration = Duration::from_secs(4);

/// Big enough that building it takes several seconds in a debug build
/// (tens of thousands of candidates), generated without solving anything.
fn big() -> tagwire_place::TopologySpec {
    random_instance(InstanceParams {
        nodes: 3000,
        subscribers: 300,
        binding: false,
        seed: 7,
        ..InstanceParams::default()
    })
}

fn options(algorithm: AlgorithmChoice, limit: Duration) -> PlaceOptions {
    PlaceOptions {
        algorithm,
        branch_and_bound: BranchAndBoundOptions {
            time_limit: limit,
            ..BranchAndBoundOptions::default()
        },
        ..PlaceOptions::default()
    }
}

#[test]
fn an_expired_deadline_stops_the_build_with_a_time_limit_error() {
    let topo = big().validate().expect("valid");
    let t = Instant::now();
    let r = PlacementProblem::build(
        &topo,
        BuildOptions {
            deadline: Deadline::after(Duration::ZERO),
            ..BuildOptions::default()
        },
    );
    match r {
        Err(PlaceError::TimeLimit { stage, .. }) => assert!(!stage.is_empty()),
        other => panic!("expected a time-limit error, got {:?}", other.map(|_| ())),
    }
    assert!(t.elapsed() < SLACK, "took {:?}", t.elapsed());
}

/// Every algorithm, through `place`, answers (a placement or a time-limit
/// error, never anything else) within the limit plus slack.
#[test]
fn place_answers_within_its_time_limit_whatever_the_algorithm() {
    let topo = big().validate().expect("valid");
    let limit = Duration::from_millis(300);
    let mut algorithms = vec![
        AlgorithmChoice::Auto,
        AlgorithmChoice::Exhaustive,
        AlgorithmChoice::BranchAndBound,
    ];
    if tagwire_place::MIP_AVAILABLE {
        algorithms.push(AlgorithmChoice::Mip);
    }
    for algorithm in algorithms {
        let t = Instant::now();
        let r = place(&topo, &options(algorithm, limit));
        let took = t.elapsed();
        match &r {
            Ok(report) => assert!(report.objective_value.is_finite()),
            Err(PlaceError::TimeLimit { .. } | PlaceError::NoPlacementInTime { .. }) => {}
            Err(e) => panic!("{algorithm:?}: {e}"),
        }
        assert!(took < limit + SLACK, "{algorithm:?} took {took:?}");
    }
}

/// The MIP on a coupled instance that microlp needs tens of seconds to
/// prove (100 nodes × 100 subscribers, binding capacities): at the limit it
/// answers with its best placement, or says it has none.
#[test]
fn the_mip_stops_at_the_time_limit() {
    if !tagwire_place::MIP_AVAILABLE {
        return;
    }
    let topo = random_instance(InstanceParams {
        nodes: 100,
        subscribers: 100,
        seed: 1,
        ..InstanceParams::default()
    })
    .validate()
    .expect("valid");
    let limit = Duration::from_secs(1);
    let t = Instant::now();
    let r = place(&topo, &options(AlgorithmChoice::Mip, limit));
    let took = t.elapsed();
    match &r {
        Ok(report) => {
            for l in &report.links {
                if let Some(c) = l.capacity {
                    assert!(l.load <= c * (1.0 + 1e-9), "link {} over capacity", l.link);
                }
            }
        }
        Err(PlaceError::NoPlacementInTime { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    assert!(took < limit + SLACK, "took {took:?}");
}

/// The command line: `--time-limit 1` on a file whose problem takes many
/// seconds to build answers within 1 s plus slack, with exit status 2 and
/// the time-limit message or a placement.
#[test]
fn the_command_answers_within_its_time_limit() {
    let dir = std::env::temp_dir().join(format!("tagwire-place-tl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("big.toml");
    std::fs::write(&file, toml::to_string(&big()).expect("serialises")).expect("written");
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire-place"))
        .arg(&file)
        .args(["--time-limit", "1"])
        .output()
        .expect("binary runs");
    let took = t.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("time limit of 1 s"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(1) + SLACK, "took {took:?}");
}
