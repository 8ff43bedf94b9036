//! Shared set-up for the client integration tests: each test runs against
//! every transport — a daemon-style router over TCP, over a Unix socket, and
//! an embedded router — so embedded mode passes the same tests as the daemon.

#![allow(dead_code)]

use std::time::Duration;

use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::{EmbeddedRouter, Session};

/// How long a test waits for something that should happen at once.
pub const WAIT: Duration = Duration::from_secs(5);

/// A router reachable by new sessions.
pub enum Server {
    /// A listener-backed router (what `tagwired` runs) and its URL.
    Daemon(Box<RouterHandle>, String, tempdir::Dir),
    /// An in-process router.
    Embedded(EmbeddedRouter),
}

impl Server {
    pub fn session(&self) -> Session {
        match self {
            Server::Daemon(_, url, _) => Session::connect(url).expect("connect to test router"),
            Server::Embedded(r) => r.session().expect("embedded session"),
        }
    }
}

pub mod tempdir {
    /// A temporary directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "tagwire-test-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("create temp dir");
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A TCP router on an ephemeral loopback port.
pub fn tcp_server() -> Server {
    let dir = tempdir::Dir::new("tcp");
    let cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    let h = Router::start(cfg).expect("start tcp router");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp addr"));
    Server::Daemon(Box::new(h), url, dir)
}

/// A Unix-socket router in a temporary directory.
pub fn unix_server() -> Server {
    let dir = tempdir::Dir::new("unix");
    let path = dir.0.join("t.sock");
    let cfg = RouterConfig {
        tcp: None,
        unix: Some(path.clone()),
        ..RouterConfig::default()
    };
    let h = Router::start(cfg).expect("start unix router");
    Server::Daemon(Box::new(h), format!("unix://{}", path.display()), dir)
}

/// Every transport, named.
pub fn all_servers() -> Vec<(&'static str, Server)> {
    vec![
        ("tcp", tcp_server()),
        ("unix", unix_server()),
        (
            "embedded",
            Server::Embedded(EmbeddedRouter::start().expect("embedded router")),
        ),
    ]
}

/// Sets `history` (events kept per publisher) on tags under `pattern` at
/// the daemon of `s`.
pub fn history(s: &Session, pattern: &str, n: &str) {
    s.set_qos(&[pattern], &[("history", n)], &[])
        .expect("admin qos history");
}

/// The samples' payloads as text.
pub fn payloads(samples: &[tagwire::Sample]) -> Vec<String> {
    samples
        .iter()
        .map(|s| String::from_utf8_lossy(&s.payload()).into_owned())
        .collect()
}
