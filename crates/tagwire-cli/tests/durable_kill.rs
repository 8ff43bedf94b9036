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

/// The `(publisher, seq)` of each JSON line `tagwire sub --json` printed.
fn published(stdout: &[u8]) -> Vec<(String, u64)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["publisher"].as_str()?.to_owned(), v["seq"].as_u64()?)))
        .collect()
}

/// The token the test's daemons link with.
const LINK_TOKEN: &str = "fed-token-0123456789abcdef";

/// A daemon named `name` with the durable store and a link to `peer`.
fn linked(dir: &Path, name: &str, port: u16, peer: Option<u16>) -> Daemon {
    let peers = peer.map_or(String::new(), |p| format!("\"127.0.0.1:{p}\""));
    let config = format!(
        r#"name = "{name}"
[[auth.tokens]]
name = "fed"
token = "{LINK_TOKEN}"
[[acl]]
identity = "token:fed"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[store]
tags = ["/durable/**"]
[federation]
token = "{LINK_TOKEN}"
peers = [{peers}]
"#
    );
    daemon_with_state(dir, &dir.join("state"), port, &config)
}

/// Waits until daemon b (`dir_b`, `port_b`) gets events published at a over
/// their link: a subscriber at b and a probe published at a, retried.
fn wait_linked(dir_a: &Path, port_a: u16, dir_b: &Path, port_b: u16) {
    let deadline = Instant::now() + WAIT;
    loop {
        let sub = spawn_sub(
            dir_b,
            port_b,
            &dir_b.join("probe"),
            &["sub", "/durable/probe", "-n", "1", "--timeout", "1"],
        );
        std::thread::sleep(Duration::from_millis(300));
        tagwire(dir_a, port_a, &["pub", "/durable/probe", "x"]);
        if wait_output(sub, WAIT).status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "b never got a's events over the link"
        );
    }
}

/// Starts `tagwire ARGS` against the daemon at `port` (token from `dir`),
/// its stdout in `out`, its stderr piped.
fn spawn_sub(dir: &Path, port: u16, out: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["-s", &format!("tcp://127.0.0.1:{port}")])
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .env_remove("TAGWIRE_SERVER")
        .stdout(std::fs::File::create(out).expect("stdout file"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagwire")
}

/// Ports for `n` daemons: a daemon's bands listen on the ports after its
/// own, so the blocks are kept apart.
fn ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < n {
        let p = free_port();
        if ports.iter().all(|q| p.abs_diff(*q) > 8) {
            ports.push(p);
        }
    }
    ports
}

/// `tagwire pub /durable/x` of `n` durable events as publisher `endpoint`
/// at the daemon on `port`.
fn publish_at(dir: &Path, port: u16, endpoint: &str, n: &str) {
    let out = tagwire(
        dir,
        port,
        &[
            "pub",
            "/durable/x",
            "hello",
            "-n",
            n,
            "--endpoint",
            endpoint,
            "--qos",
            "reliability=durable",
        ],
    );
    assert!(
        out.status.success(),
        "pub at port {port}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `tagwire sub /durable/x --qos reliability=durable --json -n 300` at the
/// daemon on `port`, its output in `dir/durable-sub`, once it has printed
/// what `publish` makes it get first (`first` events).
fn durable_sub_after(
    dir: &Path,
    port: u16,
    first: usize,
    publish: impl FnOnce(),
) -> (std::process::Child, std::path::PathBuf) {
    let out_path = dir.join("durable-sub");
    let sub = spawn_sub(
        dir,
        port,
        &out_path,
        &[
            "sub",
            "/durable/x",
            "--qos",
            "reliability=durable",
            "--json",
            "-n",
            "300",
            "--timeout",
            "30",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    publish();
    let deadline = Instant::now() + WAIT;
    while published(&std::fs::read(&out_path).unwrap_or_default()).len() < first {
        assert!(
            Instant::now() < deadline,
            "the subscriber never printed the first {first} events"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (sub, out_path)
}

/// Kills `victim` with SIGKILL, runs `publish` while it is down, and
/// starts it again with `restart`.
fn kill_publish_restart(
    mut victim: Daemon,
    publish: impl FnOnce(),
    restart: impl FnOnce() -> Daemon,
) -> Daemon {
    victim.0.kill().expect("kill -9");
    victim.0.wait().expect("reap");
    drop(victim);
    publish();
    restart()
}

/// Publisher one's 1..=100 and two's 1..=200, each once and in order, and
/// nothing else, in `stdout` (`what` and `stderr` name the failing case).
fn assert_one_and_two(stdout: &[u8], what: &str, stderr: &[u8]) {
    let got = published(stdout);
    let of = |p: &str| -> Vec<u64> {
        got.iter()
            .filter(|(publisher, _)| publisher == p)
            .map(|(_, s)| *s)
            .collect()
    };
    assert_eq!(
        (of("/one"), of("/two")),
        ((1..=100).collect::<Vec<_>>(), (1..=200).collect::<Vec<_>>()),
        "{what} (stderr: {})",
        String::from_utf8_lossy(stderr)
    );
    assert_eq!(got.len(), 300, "{what}: nothing but the 300 events");
}

/// Issue 25, "durable across daemons": daemon `b` links to `a`; a live
/// subscriber at `b` gets publisher one's 100 events (so `b`'s store holds
/// copies of them), then `b` is killed with SIGKILL and publisher two
/// publishes 200 at `a` while `b` is down. After `b` restarts, a replay from
/// the start at `b` gets all 300 — the 200 that never reached `b` from
/// `a`'s store — each once, in order per publisher (one's events come from
/// `a`'s store only, not also from `b`'s copies).
#[test]
fn a_replay_at_a_restarted_daemon_reads_what_was_published_at_another_while_it_was_down() {
    let dir = temp_dir("durable", "across");
    let (dir_a, dir_b) = (dir.join("a"), dir.join("b"));
    let p = ports(2);
    let (port_a, port_b) = (p[0], p[1]);
    let _a = linked(&dir_a, "a", port_a, None);
    let b = linked(&dir_b, "b", port_b, Some(port_a));
    wait_linked(&dir_a, port_a, &dir_b, port_b);
    let live_path = dir_b.join("live");
    let live = spawn_sub(
        &dir_b,
        port_b,
        &live_path,
        &[
            "sub",
            "/durable/x",
            "--json",
            "-n",
            "100",
            "--timeout",
            "20",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    publish_at(&dir_a, port_a, "/one", "100");
    let out = wait_output(live, WAIT);
    let got = published(&std::fs::read(&live_path).expect("live output"));
    assert_eq!(
        got.len(),
        100,
        "the live subscriber at b: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // b's store holds its copies once the store thread wrote them.
    let deadline = Instant::now() + WAIT;
    while seqs(&replay(&dir_b, port_b, "start", "100", "2").stdout).len() < 100 {
        assert!(
            Instant::now() < deadline,
            "b's store never held the 100 events it delivered"
        );
    }
    let _b = kill_publish_restart(
        b,
        || publish_at(&dir_a, port_a, "/two", "200"),
        || linked(&dir_b, "b", port_b, Some(port_a)),
    );
    let out = replay(&dir_b, port_b, "start", "300", "15");
    assert_one_and_two(
        &out.stdout,
        "the replay at b after its restart",
        &out.stderr,
    );
}

/// Issue 25, "for subscribers that were away" across daemons: a durable
/// subscriber at `b` (`--qos reliability=durable`: resumed after every
/// reconnect) gets publisher one's 100 events from `a`; `b` is killed with
/// SIGKILL, publisher two publishes 200 at `a`, `b` restarts: the same
/// subscriber process reconnects, resumes from what it printed, and gets
/// two's 200 — from `a`'s store, since they never reached `b` — each once, in
/// order, with none of one's again.
#[test]
fn a_durable_subscriber_whose_daemon_was_killed_resumes_what_another_daemon_published_meanwhile() {
    let dir = temp_dir("durable", "resume-across");
    let (dir_a, dir_b) = (dir.join("a"), dir.join("b"));
    let p = ports(2);
    let (port_a, port_b) = (p[0], p[1]);
    let _a = linked(&dir_a, "a", port_a, None);
    let b = linked(&dir_b, "b", port_b, Some(port_a));
    wait_linked(&dir_a, port_a, &dir_b, port_b);
    let (sub, out_path) = durable_sub_after(&dir_b, port_b, 100, || {
        publish_at(&dir_a, port_a, "/one", "100")
    });
    let _b = kill_publish_restart(
        b,
        || publish_at(&dir_a, port_a, "/two", "200"),
        || linked(&dir_b, "b", port_b, Some(port_a)),
    );
    let out = wait_output(sub, WAIT + WAIT);
    let printed = std::fs::read(&out_path).expect("subscriber output");
    assert_one_and_two(
        &printed,
        "the durable subscriber at b across its daemon's kill",
        &out.stderr,
    );
}

/// Issue 25, the partition that heals, for a subscriber that stays
/// connected: daemons a - m - b in a line, a durable subscriber at b.
/// m is killed with SIGKILL (a and b cannot reach each other), publisher two
/// publishes 200 at a, m restarts: b reaches a again and tells its clients
/// (`Healed`, protocol version 7), and the subscriber — connected to b all
/// along — resumes from a's store: one's 100 and two's 200, each once, in
/// order (before: two's never came).
#[test]
fn a_durable_subscriber_that_stays_connected_gets_what_a_partition_kept_from_it_once_it_heals() {
    let dir = temp_dir("durable", "healed");
    let (dir_a, dir_m, dir_b) = (dir.join("a"), dir.join("m"), dir.join("b"));
    let p = ports(3);
    let (port_a, port_m, port_b) = (p[0], p[1], p[2]);
    let _a = linked(&dir_a, "a", port_a, None);
    let m = linked(&dir_m, "m", port_m, Some(port_a));
    let _b = linked(&dir_b, "b", port_b, Some(port_m));
    wait_linked(&dir_a, port_a, &dir_b, port_b);
    let (sub, out_path) = durable_sub_after(&dir_b, port_b, 100, || {
        publish_at(&dir_a, port_a, "/one", "100")
    });
    let _m = kill_publish_restart(
        m,
        || publish_at(&dir_a, port_a, "/two", "200"),
        || linked(&dir_m, "m", port_m, Some(port_a)),
    );
    let out = wait_output(sub, WAIT + WAIT);
    let printed = std::fs::read(&out_path).expect("subscriber output");
    assert_one_and_two(
        &printed,
        "the durable subscriber at b across the partition",
        &out.stderr,
    );
}
