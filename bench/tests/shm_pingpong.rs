//! `baseline shm-pingpong` end to end: for every system and wait mode that
//! shares a core, the ping process starts its pong process, completes every
//! round trip (each checked for its sequence number and length) and prints
//! one JSON line with the samples it measured.

use std::process::Command;

fn run(system: &str, wait: &str, size: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_baseline"))
        .args(["shm-pingpong", system, "--wait", wait, "--size", size])
        .args(["--iterations", "200"])
        .output()
        .expect("run the baseline binary");
    assert!(
        out.status.success(),
        "{system} {wait}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).expect("utf-8 output");
    serde_json::from_str(line.trim()).expect("one JSON line")
}

#[test]
fn every_system_completes_its_round_trips_in_both_wait_modes() {
    for system in ["tagwire-shm", "iceoryx2", "unix"] {
        for wait in ["yield", "blocking"] {
            for size in ["64", "1048576"] {
                let v = run(system, wait, size);
                assert_eq!(v["samples"], 200, "{system} {wait} {size}: {v}");
                assert_eq!(v["wait"], wait);
                assert_eq!(v["size"].to_string(), size);
            }
        }
    }
}

#[test]
fn a_payload_too_small_for_the_sequence_tags_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_baseline"))
        .args(["shm-pingpong", "tagwire-shm", "--size", "8"])
        .output()
        .expect("run the baseline binary");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));
}
