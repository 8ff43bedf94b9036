//! End to end through the `tagwire-place` binary (the same `cli::run` that
//! `tagwire place` calls).

use std::process::Command;

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire-place"))
        .args(args)
        .output()
        .expect("binary runs");
    // docs/placement.md: 0 on success, 2 on any error.
    assert_eq!(
        out.status.code(),
        Some(if out.status.success() { 0 } else { 2 }),
        "{args:?}"
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn explain_prints_the_appendix_a_table_and_picks_node_1() {
    let (ok, out, err) = run(&[&example("appendix-a.toml"), "--explain"]);
    assert!(ok, "stderr: {err}");
    let row = |node: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{node} ")))
            .unwrap_or_else(|| panic!("row for node {node} in\n{out}"))
            .to_owned()
    };
    let r1 = row("1");
    assert!(
        r1.contains("2T' = 40 ms") && r1.contains("K·4f' = 200") && r1.contains("<= chosen"),
        "{r1}"
    );
    assert!(row("2").contains("K·(4f + 4f') = 600"));
    assert!(row("3").contains("2T = 20 ms") && row("3").contains("K·(4f + 2f') = 500"));
    assert!(row("4").contains("K·(4f + 2f') = 500"));
    let r5 = row("5");
    assert!(
        r5.contains("T + T' = 30 ms") && r5.contains("K·(2f + 2f') = 300") && r5.contains("yes"),
        "{r5}"
    );
    assert!(out.contains("proxy on node \"1\""), "{out}");
}

#[test]
fn json_output_is_the_documented_format() {
    let (ok, out, err) = run(&[&example("vbns.toml"), "--json"]);
    assert!(ok, "stderr: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["format"], "tagwire-placement/1");
    assert_eq!(v["objective"], "bandwidth");
    let proxies = v["proxies"].as_array().expect("proxies array");
    assert_eq!(
        proxies.len(),
        1 + 2 + 5 + 10,
        "one per subscriber of the four cases"
    );
    assert_eq!(proxies[0]["tag"], "/vbns/1x1");
    assert_eq!(proxies[0]["proxy_node"], "3");
}

#[test]
fn exhaustive_and_mip_flags_give_the_same_answer() {
    let (ok1, ex, e1) = run(&[&example("vbns.toml"), "--exhaustive", "--json"]);
    assert!(ok1, "{e1}");
    let (ok2, mip, e2) = run(&[
        &example("vbns.toml"),
        "--mip",
        "--json",
        "--objective",
        "mixed:0.5",
    ]);
    if !tagwire_place::MIP_AVAILABLE {
        assert!(!ok2 && e2.contains("--mip needs a solver backend"));
        return;
    }
    assert!(ok2, "{e2}");
    let ex: serde_json::Value = serde_json::from_str(&ex).expect("json");
    let mip: serde_json::Value = serde_json::from_str(&mip).expect("json");
    assert_eq!(ex["algorithm"], "exhaustive");
    assert_eq!(mip["algorithm"], "mip");
    assert_eq!(mip["objective"], "mixed:0.5");
}

#[test]
fn bad_objective_is_refused_by_the_parser() {
    let (ok, _, err) = run(&[&example("vbns.toml"), "--objective", "mixed:-1"]);
    assert!(!ok);
    assert!(err.contains("invalid objective \"mixed:-1\""), "{err}");
}

#[test]
fn exhaustive_and_mip_flags_conflict() {
    let (ok, _, err) = run(&[&example("vbns.toml"), "--exhaustive", "--mip"]);
    assert!(!ok);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn a_bad_file_exits_non_zero_with_the_error() {
    let (ok, out, err) = run(&["/nonexistent/topology.toml"]);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(
        err.starts_with("error: cannot read topology file /nonexistent/topology.toml"),
        "{err}"
    );
}

#[test]
fn json_topology_files_are_read_by_extension() {
    let text = std::fs::read_to_string(example("appendix-a.toml")).expect("example");
    let spec = tagwire_place::TopologySpec::from_toml_str(&text).expect("toml");
    let dir = std::env::temp_dir().join(format!("tagwire-place-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("appendix-a.json");
    std::fs::write(&path, serde_json::to_string(&spec).expect("json")).expect("write");
    let (ok, out, err) = run(&[path.to_str().expect("utf-8 path"), "--json", "--explain"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is pure JSON");
    assert_eq!(v["proxies"][0]["proxy_node"], "1");
    assert!(
        err.contains("K·4f' = 200"),
        "explain table on stderr: {err}"
    );
}

#[test]
fn json_says_optimal_with_no_gap_and_names_the_routes() {
    let (ok, out, err) = run(&[&example("appendix-a.toml"), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["status"], "optimal");
    assert_eq!(v["gap"], 0.0);
    assert_eq!(v["lower_bound"], v["objective_value"]);
    assert_eq!(
        v["proxies"][0]["route_from_publisher"],
        serde_json::json!([])
    );
    assert_eq!(
        v["proxies"][0]["subscribers"][0]["route"],
        serde_json::json!(["1-5", "4-5"])
    );
}

#[test]
fn a_bad_time_limit_is_refused() {
    for bad in ["0", "-1", "nan", "inf", "x"] {
        let arg = format!("--time-limit={bad}");
        let (ok, _, err) = run(&[&example("vbns.toml"), &arg]);
        assert!(!ok, "{bad}");
        assert!(err.contains("invalid time limit"), "{bad}: {err}");
    }
}

#[test]
fn branch_and_bound_flag_solves_and_says_so() {
    let (ok, out, err) = run(&[
        &example("vbns.toml"),
        "--branch-and-bound",
        "--time-limit",
        "5",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("algorithm branch_and_bound"), "{out}");
    assert!(out.contains("(optimal;"), "{out}");
}
