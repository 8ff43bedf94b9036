//! Helpers shared by the CLI's process-level tests: a free loopback port,
//! a fresh scratch directory, and a bounded wait for a child's output;
//! [`netns`]: networks of real daemons on the netns testbed.
#![allow(dead_code)]

pub mod netns;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// A TCP port free on loopback right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
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
