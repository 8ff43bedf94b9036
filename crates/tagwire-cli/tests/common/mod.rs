//! Helpers shared by the CLI's process-level tests: a free loopback port,
//! a fresh scratch directory, and a bounded wait for a child's output;
//! [`netns`]: networks of real daemons on the netns testbed.
#![allow(dead_code)]

pub mod lan;
pub mod netns;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A TCP port free on loopback right now, with the three after it: a
/// daemon given `--tcp 127.0.0.1:P` listens on P for band normal and on
/// P+1..P+3 for its other bands. Picked at random below the kernel's
/// ephemeral range, aligned to 4: a port the kernel handed out (bind to
/// port 0, as a daemon does for a band whose port is taken, or a client's
/// connect) can be taken again by the time the daemon binds it, and a test
/// running beside another could be handed a port that the other's daemon
/// was about to take for one of its bands ("Address already in use" under
/// load); below the ephemeral range and in blocks of 4 neither happens.
pub fn free_port() -> u16 {
    use std::hash::BuildHasher;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (lo, hi) = (10_000u16, ephemeral.max(10_008) - 4);
    let blocks = u64::from((hi - lo) / 4);
    let random = std::collections::hash_map::RandomState::new();
    for attempt in 0..1000u64 {
        let base = lo + 4 * (random.hash_one(attempt) % blocks) as u16;
        // Held together for the check, released together.
        let held: Vec<TcpListener> = (base..=base + 3)
            .filter_map(|q| TcpListener::bind(("127.0.0.1", q)).ok())
            .collect();
        if held.len() == 4 {
            return base;
        }
    }
    panic!("no block of 4 free loopback ports found in 1,000 tries")
}

/// An empty scratch directory `tagwire-SUITE-TAG-PID` under the system's
/// temporary directory (removed first if a previous run left it).
pub fn temp_dir(suite: &str, tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tagwire-{suite}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Waits at most `wait` for `child` and returns its output; killed at the
/// bound.
pub fn wait_output(mut child: Child, wait: Duration) -> Output {
    let deadline = Instant::now() + wait;
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tagwired` on 127.0.0.1:`port` (TCP only) with `config` as its
/// configuration file (written to `dir/tagwired.toml`) and `state` as its
/// state directory, `dir` as its runtime directory (where its token is);
/// returns once it accepts connections (at most 20 s), killed on drop.
pub fn daemon_with_state(dir: &Path, state: &Path, port: u16, config: &str) -> Killed {
    std::fs::create_dir_all(dir).expect("dir");
    let path = dir.join("tagwired.toml");
    std::fs::write(&path, config).expect("config");
    let child = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--tcp", &format!("127.0.0.1:{port}"), "--no-unix"])
        .arg("--config")
        .arg(&path)
        .arg("--state-dir")
        .arg(state)
        .env("XDG_RUNTIME_DIR", dir)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tagwired");
    let d = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "tagwired did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}
