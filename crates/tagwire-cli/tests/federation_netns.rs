//! Federation on the netns testbed (docs/testbed.md): one `tagwired` per
//! host namespace, linked by `--peer` into a chain, a ring or a mesh; the
//! real `tagwire` CLI publishes and subscribes from the hosts. Needs root and
//! iproute2; without them these tests FAIL with a message saying how to get
//! them. `.ci/run` runs them.
//!
//! Each test waits until every daemon has seen every subscriber daemon's
//! interest (from `tagwire list --links --json`), then counts deliveries:
//! each event once at each subscriber, none lost, none duplicated.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::{link_count, serial, testbed, DaemonDir, Daemons, Network, PORT, WAIT};
use tagwire_testbed::{Host, NsChild, Shaping, Testbed, TestbedConfig, TestbedError};

const TOKEN: &str = "federation-netns-test-token-0123456789";

/// Links by token; idle links are closed after 1 s (a cut link is noticed).
const DAEMONS: Daemons = Daemons {
    token: TOKEN,
    extra_config: "[limits]\nidle_timeout = 1\n",
    listen: None,
};

fn tagwire(h: &Host, args: &[&str]) -> Command {
    common::netns::tagwire(h, TOKEN, args)
}

/// Subscribes on host `i` for `count` events of `/t/**`.
fn subscriber<'tb>(tb: &'tb Testbed, i: usize, count: usize) -> NsChild<'tb> {
    let h = tb.host(i);
    h.spawn(&tagwire(h, &["sub", "/t/**", "-n", &count.to_string()]))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn publish(tb: &Testbed, i: usize, payloads: impl IntoIterator<Item = String>) {
    let h = tb.host(i);
    for p in payloads {
        let out = h
            .output(&tagwire(h, &["pub", "/t/x", &p]), WAIT)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "tagwire pub on d{i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The payloads a subscriber printed.
fn received(sub: NsChild<'_>) -> Vec<String> {
    let out = sub.finish(WAIT).unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, p)| p.to_owned()))
        .collect()
}

/// Publishes `n` numbered events from `from`; every subscriber gets each once.
fn each_once(tb: &Testbed, from: usize, subs: Vec<(usize, NsChild<'_>)>, n: usize) {
    publish(tb, from, (0..n).map(|k| format!("e{k}")));
    let want: BTreeSet<String> = (0..n).map(|k| format!("e{k}")).collect();
    for (i, s) in subs {
        let got = received(s);
        let set: BTreeSet<String> = got.iter().cloned().collect();
        assert_eq!(got.len(), set.len(), "d{i} got duplicates: {got:?}");
        assert_eq!(set, want, "d{i} did not get each event once");
    }
}

#[test]
fn a_chain_of_three_routes_from_end_to_end() {
    let _g = serial();
    let tb = testbed(3);
    let net = Network::start(&tb, DAEMONS, &[(0, 1), (1, 2)]);
    let sub = subscriber(&tb, 2, 5);
    net.wait_for_interest(&[0, 1], &[2]);
    each_once(&tb, 0, vec![(2, sub)], 5);
    assert_eq!(
        link_count(&net.federation(1)),
        2,
        "the middle daemon links both ends"
    );
    net.wait_until(&[1], WAIT, "link RTT and clock offset measured", |_, f| {
        f["links"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|l| l["rtt_us"].as_u64().is_some() && l["clock_offset_us"].as_i64().is_some())
    });
}

#[test]
fn a_ring_of_five_delivers_once_without_loops() {
    let _g = serial();
    let tb = testbed(5);
    let ring: Vec<(usize, usize)> = (0..5).map(|i| (i, (i + 1) % 5)).collect();
    let net = Network::start(&tb, DAEMONS, &ring);
    let subs: Vec<(usize, NsChild<'_>)> = (1..5).map(|i| (i, subscriber(&tb, i, 10))).collect();
    net.wait_for_interest(&[0, 1, 2, 3, 4], &[1, 2, 3, 4]);
    each_once(&tb, 0, subs, 10);
    for i in 0..5 {
        assert_eq!(net.federation(i)["hop_limited"], 0, "d{i} saw a loop");
    }
}

#[test]
fn a_mesh_of_ten_delivers_once() {
    let _g = serial();
    let tb = testbed(10);
    // A ring plus chords: every daemon has 3–4 links, many cycles.
    let mut edges: Vec<(usize, usize)> = (0..10).map(|i| (i, (i + 1) % 10)).collect();
    edges.extend((0..5).map(|i| (i, i + 5)));
    let net = Network::start(&tb, DAEMONS, &edges);
    let wanting = [2, 5, 7, 9];
    let subs: Vec<(usize, NsChild<'_>)> = wanting
        .iter()
        .map(|&i| (i, subscriber(&tb, i, 8)))
        .collect();
    let all: Vec<usize> = (0..10).collect();
    net.wait_for_interest(&all, &wanting);
    each_once(&tb, 3, subs, 8);
}

#[test]
fn a_cut_link_is_routed_around_and_comes_back_when_healed() {
    let _g = serial();
    let tb = testbed(4);
    let ring: Vec<(usize, usize)> = (0..4).map(|i| (i, (i + 1) % 4)).collect();
    let net = Network::start(&tb, DAEMONS, &ring);
    net.wait_until(&[0], WAIT, "d0 links d1 and d3", |_, f| link_count(f) == 2);
    // Cut 0–1 both ways (a blackhole route on each end).
    let route = |h: usize, other: usize, op: &str| {
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
        assert!(
            out.status.success(),
            "ip route {op}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    route(0, 1, "add");
    route(1, 0, "add");
    net.wait_until(&[0], WAIT, "the cut link is noticed", |_, f| {
        link_count(f) == 1
    });
    let sub = subscriber(&tb, 1, 3);
    net.wait_for_interest(&[0, 3, 2], &[1]);
    each_once(&tb, 0, vec![(1, sub)], 3); // 0 → 3 → 2 → 1
    route(0, 1, "del");
    route(1, 0, "del");
    let back = net.wait_until(&[0], WAIT, "the link comes back", |_, f| link_count(f) == 2);
    eprintln!("link back {back:?} after the heal");
}

#[test]
fn a_killed_daemon_leaves_the_others_working_and_rejoins() {
    let _g = serial();
    let tb = testbed(3);
    let mut net = Network::start(&tb, DAEMONS, &[(0, 1), (1, 2)]);
    let sub = subscriber(&tb, 2, 2);
    net.wait_for_interest(&[0, 1], &[2]);
    each_once(&tb, 0, vec![(2, sub)], 2);
    net.kill(1);
    // The ends still serve their own clients.
    let local = subscriber(&tb, 0, 1);
    let start = Instant::now();
    while !net.listing(0)["subscriptions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["pattern"] == "/t/**")
    {
        assert!(
            start.elapsed() < WAIT,
            "the local subscriber never subscribed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    each_once(&tb, 0, vec![(0, local)], 1);
    net.start_one(1);
    let sub = subscriber(&tb, 2, 2);
    net.wait_for_interest(&[0, 1], &[2]);
    each_once(&tb, 0, vec![(2, sub)], 2);
}

#[test]
fn a_link_losing_ten_percent_of_its_packets_keeps_delivering() {
    let _g = serial();
    // 10 % loss toward host 1: TCP retransmits; nothing crashes and every
    // event still arrives, later. netem where the kernel has it, else an
    // nftables rule dropping a random 1 in 10 packets host 1 receives.
    let tb = match Testbed::new(TestbedConfig {
        hosts: 2,
        bottleneck: Some(Shaping {
            loss_percent: Some(10),
            ..Shaping::default()
        }),
    }) {
        Ok(tb) => tb,
        Err(TestbedError::QdiscUnavailable { .. }) => {
            let nft =
                tagwire_testbed::require_tool("nft", "nftables").unwrap_or_else(|e| panic!("{e}"));
            let tb = testbed(2);
            for rule in [
                "add table inet loss",
                "add chain inet loss in { type filter hook input priority 0 ; }",
                "add rule inet loss in numgen random mod 10 0 counter drop",
            ] {
                let mut c = Command::new(&nft);
                c.args(rule.split(' '));
                let out = tb
                    .host(1)
                    .output(&c, WAIT)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    out.status.success(),
                    "nft {rule}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            eprintln!("loss: nftables (this kernel has no netem)");
            tb
        }
        Err(e) => panic!("{e}"),
    };
    let net = Network::start(&tb, DAEMONS, &[(0, 1)]);
    let sub = subscriber(&tb, 1, 20);
    net.wait_for_interest(&[0], &[1]);
    each_once(&tb, 0, vec![(1, sub)], 20);
    if let Ok(nft) = tagwire_testbed::require_tool("nft", "nftables") {
        let mut c = Command::new(nft);
        c.args(["list", "table", "inet", "loss"]);
        if let Ok(out) = tb.host(1).output(&c, WAIT) {
            let text = String::from_utf8_lossy(&out.stdout);
            if let Some(n) = text.split("packets ").nth(1) {
                let dropped: u64 = n
                    .split(' ')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                eprintln!("nftables dropped {dropped} packets");
                assert!(dropped > 0, "the loss rule dropped nothing: {text}");
            }
        }
    }
}

/// Two namespaces on one Ethernet segment (a veth pair, 10.201.0.1 and
/// .2/24, multicast on): what discovery needs, which the routed testbed
/// (one subnet per host) does not give. Removed on drop.
struct Segment {
    names: [String; 2],
}

impl Segment {
    fn new() -> Segment {
        let tag = std::process::id();
        let names = [format!("twtb-seg{tag}-a"), format!("twtb-seg{tag}-b")];
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("run ip");
            assert!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let seg = Segment {
            names: names.clone(),
        };
        for n in &names {
            ip(&["netns", "add", n]);
        }
        ip(&[
            "link", "add", "twseg0", "netns", &names[0], "type", "veth", "peer", "name", "twseg1",
            "netns", &names[1],
        ]);
        for (i, n) in names.iter().enumerate() {
            let dev = format!("twseg{i}");
            ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("10.201.0.{}/24", i + 1),
                "dev",
                &dev,
            ]);
            ip(&["-n", n, "link", "set", &dev, "up", "multicast", "on"]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
            ip(&["-n", n, "route", "add", "224.0.0.0/4", "dev", &dev]);
        }
        seg
    }

    fn exec(&self, i: usize, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i]])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        for n in &self.names {
            // Kill what runs there, then remove it.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", n]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

#[test]
fn daemons_on_one_segment_discover_each_other_and_link() {
    let _g = serial();
    tagwire_testbed::check_environment().unwrap_or_else(|e| panic!("{e}"));
    let seg = Segment::new();
    let dirs = [DaemonDir::new(&DAEMONS, &[]), DaemonDir::new(&DAEMONS, &[])];
    let mut children = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let addr = format!("10.201.0.{}:{PORT}", i + 1);
        let mut c = Command::new(env!("CARGO_BIN_EXE_tagwired"));
        c.args([
            "--tcp",
            &addr,
            "--no-unix",
            "--discovery",
            "--name",
            &format!("s{i}"),
        ])
        .arg("--config")
        .arg(dir.config())
        .env("XDG_RUNTIME_DIR", dir.path());
        // (`exec` copies the program, arguments and environment, not stdio.)
        let mut c = seg.exec(i, &c);
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        children.push(c.spawn().expect("spawn tagwired"));
    }
    let list = |i: usize| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tagwire"));
        c.args([
            "-s",
            &format!("tcp://10.201.0.{}:{PORT}", i + 1),
            "list",
            "--links",
            "--json",
        ])
        .env("TAGWIRE_TOKEN", TOKEN);
        let out = seg.exec(i, &c).output().expect("tagwire list");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or(serde_json::Value::Null)
    };
    let start = Instant::now();
    loop {
        let f = list(0);
        if f["links"].as_array().is_some_and(|l| l.len() == 1) {
            assert_eq!(f["links"][0]["peer"], "s1", "{f}");
            break;
        }
        assert!(start.elapsed() < WAIT, "no link from discovery: {f}");
        std::thread::sleep(Duration::from_millis(200));
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn auto_placement_moves_the_proxy_to_the_publishers_daemon_and_the_links_carry_the_scaled_stream() {
    let _g = serial();
    let tb = testbed(3);
    let net = Network::start(&tb, DAEMONS, &[(0, 1), (1, 2)]);
    let h2 = tb.host(2);
    let _sub = h2
        .spawn(&tagwire(
            h2,
            &["sub", "/t/**", "--scale", "4", "--qos", "proxy=auto"],
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    net.wait_for_interest(&[0, 1], &[2]);
    // 100 events/s for up to 60 s: placement needs a measured period.
    let h0 = tb.host(0);
    let _publisher = h0
        .spawn(&tagwire(
            h0,
            &["pub", "/t/x", "e", "-n", "6000", "--rate", "100"],
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let proxy = loop {
        let l = net.listing(2);
        let proxy = l["subscriptions"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|s| s.get("proxy").cloned());
        if let Some(p) = &proxy {
            if p["runs_at"] == "d0"
                && p["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("tagwire place"))
            {
                break p.clone();
            }
        }
        assert!(
            start.elapsed() < WAIT,
            "the proxy was never placed at d0: {proxy:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("placed: {proxy}");
    // From now on d0 sends 1 of every 4 events toward d1.
    std::thread::sleep(Duration::from_millis(500));
    let sample = || {
        let l = net.listing(0);
        let published = l["tags"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["tag"] == "/t/x")
            .and_then(|t| t["published"].as_u64())
            .unwrap_or(0);
        let out = net.federation(0)["links"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["peer"] == "d1")
            .and_then(|l| l["events_out"].as_u64())
            .unwrap_or(0);
        (published, out)
    };
    let (p0, o0) = sample();
    std::thread::sleep(Duration::from_secs(3));
    let (p1, o1) = sample();
    let (published, crossed) = (p1 - p0, o1 - o0);
    assert!(published >= 100, "the publisher runs: {published} in 3 s");
    let ratio = published as f64 / crossed.max(1) as f64;
    assert!(
        (3.5..=4.5).contains(&ratio),
        "{published} published, {crossed} crossed d0→d1: not 1 of every 4"
    );
}
