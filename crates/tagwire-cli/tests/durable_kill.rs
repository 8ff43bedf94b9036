//! Issue 25: the durable store survives `kill -9`. A real `tagwired` with
//! `--state-dir` and `[store] tags = ["/durable/**"]` gets events from
//! `tagwire pub`, is killed with SIGKILL, and a new `tagwired` on the same
//! state directory replays all of them, exactly once and in order, to
//! `tagwire sub --replay-from start`; a replay of a tag that is not durable,
//! and `tagwire pub --qos reliability=durable` on one, exit non-zero naming
//! why.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{daemon_with_state, free_port, temp_dir, wait_output, Killed as Daemon};

const WAIT: Duration = Duration::from_secs(20);
const EVENTS: u64 = 500;

fn daemon(dir: &Path, state: &Path, port: u16) -> Daemon {
    daemon_with_state(dir, state, port, "[store]\ntags = [\"/durable/**\"]\n")
}

/// Runs `tagwire`; its stdout goes through a file (a pipe's buffer would
/// fill with 500 JSON lines before the child exits).
fn tagwire(dir: &Path, port: u16, args: &[&str]) -> std::process::Output {
    let path = dir.join("stdout");
    let file = std::fs::File::create(&path).expect("stdout file");
    let child = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .arg("-s")
        .arg(format!("tcp://127.0.0.1:{port}"))
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .env_remove("TAGWIRE_SERVER")
        .stdout(file)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagwire");
    let mut out = wait_output(child, WAIT);
    out.stdout = std::fs::read(&path).expect("read stdout file");
    out
}

/// The `seq` of each JSON line `tagwire sub --json` printed.
/// `tagwire sub /durable/x --replay-from FROM --json -n N --timeout SECS`.
fn replay(dir: &Path, port: u16, from: &str, n: &str, timeout: &str) -> std::process::Output {
    tagwire(
        dir,
        port,
        &[
            "sub",
            "/durable/x",
            "--replay-from",
            from,
            "--json",
            "-n",
            n,
            "--timeout",
            timeout,
        ],
    )
}

fn seqs(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["seq"].as_u64())
        .collect()
}

#[test]
fn durable_events_survive_kill_9_and_replay_exactly_once_in_order() {
    let dir = temp_dir("durable", "kill9");
    let state = dir.join("state");
    let port = free_port();
    let mut d = daemon(&dir, &state, port);
    let n = EVENTS.to_string();
    let out = tagwire(
        &dir,
        port,
        &[
            "pub",
            "/durable/x",
            "hello",
            "-n",
            &n,
            "--qos",
            "reliability=durable",
        ],
    );
    assert!(
        out.status.success(),
        "pub: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The store commits a batch within its fsync policy ("batch": at once);
    // wait until a replay sees every event, bounded, before the kill.
    let deadline = Instant::now() + WAIT;
    loop {
        let out = replay(&dir, port, "start", &n, "2");
        let got = seqs(&out.stdout).len() as u64;
        if got == EVENTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the store never held all {EVENTS} events: a replay got {got}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // SIGKILL: no shutdown path runs.
    d.0.kill().expect("kill -9 tagwired");
    d.0.wait().expect("reap tagwired");
    drop(d);
    let _d = daemon(&dir, &state, port);
    let out = replay(&dir, port, "start", &n, "10");
    assert!(
        out.status.success(),
        "sub after restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(seqs(&out.stdout), (1..=EVENTS).collect::<Vec<_>>());
    // A replay from sequence number 490 gets 490..=500.
    let out = replay(&dir, port, "490", "11", "10");
    assert_eq!(seqs(&out.stdout), (490..=EVENTS).collect::<Vec<_>>());
}

#[test]
fn a_replay_of_a_tag_that_is_not_durable_exits_non_zero_naming_why() {
    let dir = temp_dir("durable", "not-durable");
    let state = dir.join("state");
    let port = free_port();
    let _d = daemon(&dir, &state, port);
    let out = tagwire(
        &dir,
        port,
        &[
            "sub",
            "/other/x",
            "--replay-from",
            "start",
            "--timeout",
            "5",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("replay of /other/x") && err.contains("durable"),
        "{err}"
    );
}

/// Store custody: a `durable` publisher's `wait_acknowledged` returns only
/// once the store committed (synced, `fsync = "batch"`) every event, so a
/// `kill -9` of the daemon right after it loses none of them.
#[test]
fn every_acknowledged_durable_event_survives_a_kill_9_right_after_wait_acknowledged() {
    const N: u64 = 3000;
    let dir = temp_dir("durable", "ack-kill9");
    let state = dir.join("state");
    let port = free_port();
    let mut d = daemon(&dir, &state, port);
    let token =
        tagwire::router::local::read_token(&dir.join("tagwire").join(format!("token-{port}")))
            .expect("the daemon's token");
    let s = tagwire::Session::builder()
        .token(token)
        .connect(&format!("tcp://127.0.0.1:{port}"))
        .expect("connect");
    let p = s.declare_publisher("/durable/pub").expect("publisher");
    p.set_reliability(tagwire::Reliability::Durable);
    for i in 1..=N {
        p.publish("/durable/x", i.to_string()).expect("publish");
    }
    s.wait_acknowledged(WAIT).expect("every event answered");
    // SIGKILL at once: no shutdown path, no late commit.
    d.0.kill().expect("kill -9 tagwired");
    d.0.wait().expect("reap tagwired");
    let acks = s.ack_stats();
    drop(s);
    drop(d);
    // The default queue (65,536 events) takes them all: none refused.
    assert_eq!((acks.acknowledged, acks.failed), (N, 0), "{acks:?}");
    let _d = daemon(&dir, &state, port);
    let n = acks.acknowledged.to_string();
    let out = replay(&dir, port, "start", &n, "10");
    let got = seqs(&out.stdout);
    assert_eq!(
        got.len() as u64,
        acks.acknowledged,
        "a replay after the kill has {} of the {} acknowledged events ({acks:?}): {}",
        got.len(),
        acks.acknowledged,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(unique.len(), got.len(), "an event stored twice");
}
