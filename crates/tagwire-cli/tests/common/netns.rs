//! What the netns tests of real daemons share (`federation_netns.rs`,
//! `swim_netns.rs`): one `tagwired` per testbed host, linked by `--peer`
//! and admitting one token with every right; the `tagwire` CLI run on a
//! host; `tagwire list --links --json` read back and waited on with a bound.
//!
//! `NETNS_BIN_DIR=DIR` (or the older `SWIM_NETNS_BIN_DIR`) runs the
//! `tagwired` and `tagwire` found in DIR instead of this build's (to check
//! that a test fails on an older build). A daemon's log is printed when a
//! test fails while its [`Network`] is alive, or always with
//! `NETNS_SHOW_LOGS` (or `SWIM_NETNS_SHOW_LOGS`) set.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tagwire_testbed::{Host, NsChild, Testbed, TestbedConfig, TestbedError};

/// The port every daemon listens on (TCP for clients and links, UDP for
/// gossip), on its host's own address.
pub const PORT: u16 = 7700;

/// The bound of every wait that has no reason for another.
pub const WAIT: Duration = Duration::from_secs(20);

/// The testbeds share interface names; one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the one-test-at-a-time lock (a test that panicked poisons it; the
/// next one runs anyway).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A testbed of `hosts` hosts, no shaping; panics naming what is missing
/// (root, iproute2) if it cannot be made.
pub fn testbed(hosts: usize) -> Testbed {
    Testbed::new(TestbedConfig {
        hosts,
        bottleneck: None,
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The URL of the daemon on `h`.
pub fn url(h: &Host) -> String {
    format!("tcp://{}:{PORT}", h.addr())
}

/// `NAME:PORT` of every host but `i`, sorted: the gossip addresses that
/// host `i`'s daemon should have as members.
pub fn others(tb: &Testbed, i: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..tb.hosts().len())
        .filter(|&j| j != i)
        .map(|j| format!("{}:{PORT}", tb.host(j).addr()))
        .collect();
    v.sort();
    v
}

/// The binary `name`: this build's (`built`), or the one in `NETNS_BIN_DIR`.
pub fn bin(name: &str, built: &str) -> PathBuf {
    match std::env::var_os("NETNS_BIN_DIR").or_else(|| std::env::var_os("SWIM_NETNS_BIN_DIR")) {
        Some(d) => PathBuf::from(d).join(name),
        None => built.into(),
    }
}

/// `tagwire -s URL-of-h ARGS…` presenting `token`, run on host `h`.
pub fn tagwire(h: &Host, token: &str, args: &[&str]) -> Command {
    let mut c = Command::new(bin("tagwire", env!("CARGO_BIN_EXE_tagwire")));
    c.arg("-s")
        .arg(url(h))
        .args(args)
        .env("TAGWIRE_TOKEN", token)
        .env_remove("TAGWIRE_SERVER");
    c
}

/// What a child printed on stdout, whether it finished within `within` or
/// was stopped at the bound.
pub fn printed(child: NsChild<'_>, within: Duration) -> String {
    match child.finish(within) {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(TestbedError::TimedOut { output, .. }) => output,
        Err(e) => panic!("{e}"),
    }
}

/// How many links a `tagwire list --links --json` listing shows.
pub fn link_count(f: &serde_json::Value) -> usize {
    f["links"].as_array().map_or(0, Vec::len)
}

/// The connection id of the link to `peer` in a listing, if there is one.
pub fn link_to(f: &serde_json::Value, peer: &str) -> Option<serde_json::Value> {
    f["links"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["peer"] == peer)
        .map(|l| l["connection"].clone())
}

/// Whether a listing says that daemon `name` has interest.
pub fn knows_interest_of(f: &serde_json::Value, name: &str) -> bool {
    f["known"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|d| d["name"] == name && d["interest"].as_u64().unwrap_or(0) > 0)
}

/// How the daemons of a [`Network`] are set up.
#[derive(Clone, Copy)]
pub struct Daemons {
    /// The token of identity `token:fed` (publish, subscribe, admin), which
    /// the daemons' links and the tests' clients present.
    pub token: &'static str,
    /// TOML added to each daemon's config (e.g. a `[limits]` table).
    pub extra_config: &'static str,
    /// The TCP listen address (`None`: the host's own address and [`PORT`]).
    pub listen: Option<&'static str>,
}

/// A daemon's private runtime directory and config file: links and
/// clients by token, no local token.
pub struct DaemonDir(tempfile::TempDir);

impl DaemonDir {
    /// A config that dials `peers` (URLs).
    pub fn new(setup: &Daemons, peers: &[String]) -> DaemonDir {
        let d = tempfile::tempdir().expect("tempdir");
        let peers: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
        let token = setup.token;
        let cfg = format!(
            r#"
[auth]
local_token = false
[[auth.tokens]]
name = "fed"
token = "{token}"
[[acl]]
identity = "token:fed"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[federation]
token = "{token}"
peers = [{}]
{}
"#,
            peers.join(", "),
            setup.extra_config,
        );
        std::fs::write(d.path().join("tagwired.toml"), cfg).expect("write config");
        DaemonDir(d)
    }

    /// The directory (the daemon's `XDG_RUNTIME_DIR`).
    pub fn path(&self) -> PathBuf {
        self.0.path().to_owned()
    }

    /// The config file.
    pub fn config(&self) -> PathBuf {
        self.0.path().join("tagwired.toml")
    }
}

/// One daemon per host: host `i` runs `d{i}`, dialing the hosts the
/// edges give it. Dropping it kills them (and prints their logs if the
/// test is failing).
pub struct Network<'tb> {
    pub tb: &'tb Testbed,
    /// `None` once killed.
    pub daemons: Vec<Option<NsChild<'tb>>>,
    dirs: Vec<DaemonDir>,
    setup: Daemons,
}

impl<'tb> Network<'tb> {
    /// Starts `d0`, `d1`, … in that order; `edges` (i, j): daemon i dials
    /// j (a daemon dialing one not yet listening: its first announce is
    /// lost).
    pub fn start(tb: &'tb Testbed, setup: Daemons, edges: &[(usize, usize)]) -> Network<'tb> {
        Self::start_in_order(tb, setup, edges, (0..tb.hosts().len()).collect())
    }

    /// As [`Network::start`], starting the daemons in `order`.
    pub fn start_in_order(
        tb: &'tb Testbed,
        setup: Daemons,
        edges: &[(usize, usize)],
        order: Vec<usize>,
    ) -> Network<'tb> {
        let n = tb.hosts().len();
        let mut peers = vec![Vec::new(); n];
        for &(i, j) in edges {
            peers[i].push(url(tb.host(j)));
        }
        let mut net = Network {
            tb,
            daemons: (0..n).map(|_| None).collect(),
            dirs: peers.iter().map(|p| DaemonDir::new(&setup, p)).collect(),
            setup,
        };
        for i in order {
            net.start_one(i);
        }
        net
    }

    /// Starts (or restarts) `d{i}` and waits until it listens.
    pub fn start_one(&mut self, i: usize) {
        let h = self.tb.host(i);
        let dir = &self.dirs[i];
        let listen = self
            .setup
            .listen
            .map_or_else(|| format!("{}:{PORT}", h.addr()), str::to_owned);
        let mut c = Command::new(bin("tagwired", env!("CARGO_BIN_EXE_tagwired")));
        c.args(["--tcp", &listen, "--no-unix"])
            .args(["--name", &format!("d{i}")])
            .arg("--config")
            .arg(dir.config())
            .env("XDG_RUNTIME_DIR", dir.path())
            .env("RUST_LOG", "info");
        let mut child = h.spawn(&c).unwrap_or_else(|e| panic!("{e}"));
        child
            .wait_for_stderr("band normal: listening", WAIT)
            .unwrap_or_else(|e| panic!("daemon d{i} did not start: {e}"));
        self.daemons[i] = Some(child);
    }

    /// kill -9 (dropping the child kills it).
    pub fn kill(&mut self, i: usize) {
        self.daemons[i] = None;
    }

    /// `tagwire ARGS…` run on host `i` against its daemon.
    pub fn tagwire(&self, i: usize, args: &[&str]) -> Command {
        tagwire(self.tb.host(i), self.setup.token, args)
    }

    /// `d{i}`'s `tagwire list --links --json` (`Null` if it printed no JSON).
    pub fn federation(&self, i: usize) -> serde_json::Value {
        self.json(i, &["list", "--links", "--json"])
    }

    /// `d{i}`'s `tagwire list --json`.
    pub fn listing(&self, i: usize) -> serde_json::Value {
        self.json(i, &["list", "--json"])
    }

    fn json(&self, i: usize, args: &[&str]) -> serde_json::Value {
        let out = self
            .tb
            .host(i)
            .output(&self.tagwire(i, args), WAIT)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "tagwire {} on d{i}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// Waits until `done(i, listing of d{i})` holds for every daemon in
    /// `who`, at most `within`; on timeout panics saying `what` and what
    /// each daemon listed. Returns how long it took.
    pub fn wait_until(
        &self,
        who: &[usize],
        within: Duration,
        what: &str,
        done: impl Fn(usize, &serde_json::Value) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let listings: Vec<serde_json::Value> =
                who.iter().map(|&i| self.federation(i)).collect();
            if who.iter().zip(&listings).all(|(&i, f)| done(i, f)) {
                return start.elapsed();
            }
            if start.elapsed() > within {
                let shown: Vec<String> = who
                    .iter()
                    .zip(&listings)
                    .map(|(i, f)| {
                        format!(
                            "d{i}: members {} known {} links {}",
                            f["members"],
                            names(f),
                            f["links"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|l| format!("{}/{}", l["peer"], l["connection"]))
                                .collect::<Vec<_>>()
                                .join(",")
                        )
                    })
                    .collect();
                panic!("{what}: not within {within:?}:\n{}", shown.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every daemon in `among` knows that each daemon in
    /// `wanting` has interest.
    pub fn wait_for_interest(&self, among: &[usize], wanting: &[usize]) {
        self.wait_until(
            among,
            WAIT,
            &format!("the interest of {wanting:?} reaches {among:?}"),
            |_, f| {
                wanting
                    .iter()
                    .all(|w| knows_interest_of(f, &format!("d{w}")))
            },
        );
    }
}

impl Drop for Network<'_> {
    /// Kills the daemons; on failure (or with `NETNS_SHOW_LOGS` set),
    /// prints what each logged.
    fn drop(&mut self) {
        let show = std::thread::panicking()
            || std::env::var_os("NETNS_SHOW_LOGS").is_some()
            || std::env::var_os("SWIM_NETNS_SHOW_LOGS").is_some();
        for (i, d) in self.daemons.iter_mut().enumerate() {
            let Some(d) = d.take() else { continue };
            if !show {
                continue;
            }
            let log = match d.finish(Duration::ZERO) {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(TestbedError::TimedOut { output, .. }) => output,
                Err(e) => e.to_string(),
            };
            eprintln!("--- d{i} log ---\n{log}");
        }
    }
}

/// "name@node" of every daemon whose advert a listing shows.
pub fn names(f: &serde_json::Value) -> String {
    f["known"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| format!("{}@{}", d["name"].as_str().unwrap_or("?"), d["node"]))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Blackhole routes between pairs of hosts (both ways): a link cut that the
/// daemons see only as silence. Heals what is still cut when dropped, so a
/// failing test leaves no route behind.
pub struct Cuts<'a>(&'a Testbed, Vec<(usize, usize)>);

impl<'a> Cuts<'a> {
    /// No cut yet.
    pub fn new(tb: &'a Testbed) -> Self {
        Cuts(tb, Vec::new())
    }

    /// Cuts hosts `a` and `b` apart (fails the test if a route cannot be
    /// added).
    pub fn add(&mut self, a: usize, b: usize) {
        blackhole(self.0, a, b, "add");
        self.1.push((a, b));
    }

    /// Heals every cut.
    pub fn heal(&mut self) {
        for (a, b) in std::mem::take(&mut self.1) {
            blackhole(self.0, a, b, "del");
        }
    }
}

impl Drop for Cuts<'_> {
    fn drop(&mut self) {
        self.heal();
    }
}

/// Adds or deletes blackhole routes between hosts `a` and `b` (both ways);
/// a failed add fails the test, a failed delete is left (the route is gone).
fn blackhole(tb: &Testbed, a: usize, b: usize, op: &str) {
    for (h, other) in [(a, b), (b, a)] {
        let mut c = Command::new("ip");
        c.args([
            "route",
            op,
            "blackhole",
            &format!("{}/32", tb.host(other).addr()),
        ]);
        let out = tb
            .host(h)
            .output(&c, WAIT)
            .unwrap_or_else(|e| panic!("{e}"));
        if op == "add" {
            assert!(
                out.status.success(),
                "ip route add blackhole on host {h}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The events of a subscriber's output stamped per line as `SECONDS JSON`
/// (`tagwire sub --json` through perl): their sequence numbers and arrival
/// times (ns since the epoch), in arrival order; other lines are skipped.
pub fn stamped_arrivals(printed: &str) -> (Vec<u64>, Vec<u64>) {
    let mut seqs = Vec::new();
    let mut times = Vec::new();
    for line in printed.lines() {
        let Some((at, json)) = line.split_once(' ') else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            continue;
        };
        if let (Some(s), Ok(at)) = (v["seq"].as_u64(), at.parse::<f64>()) {
            seqs.push(s);
            times.push((at * 1e9) as u64);
        }
    }
    (seqs, times)
}
