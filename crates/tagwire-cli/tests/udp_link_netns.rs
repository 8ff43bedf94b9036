//! Per-band links over UDP on a namespace LAN (issue 27, link version 6):
//! a daemon that dials another as `udp://HOST:PORT` opens one UDP session
//! per band, each from a socket of that band's lane marked with the band's
//! DSCP, to the UDP port the peer listed for the band (`Peer.udp_bands`).
//! A high-band and a low-band event cross the link on their own bands'
//! sockets both ways: nftables counters on each receiving host count the
//! datagrams to (or from) each band's UDP port by DSCP, and `tagwire list
//! --links --json` counts the events per band. A daemon speaking link
//! version 5 (`[federation] link_version = 5`, as a daemon before this
//! change) still links over UDP both ways, on the default band only.
//! Needs root, iproute2 and nft; without them it FAILS saying so.
//! `.ci/run` runs it. `NETNS_BIN_DIR=DIR` runs an older build's binaries
//! (the first test fails there: no band sessions); `UDP_LINK_V5_BIN_DIR=DIR`
//! runs the version-5 daemon of the second test from a build of link
//! version 5 (without `link_version` in its config).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::lan::Lan;
use common::netns::{bin, serial, WAIT};

const TOKEN: &str = "udp-link-netns-token-0123456789";
/// Events per band and direction.
const N: usize = 40;

fn tagwire(host: usize, args: &[&str]) -> Command {
    let mut c = Command::new(bin("tagwire", env!("CARGO_BIN_EXE_tagwire")));
    c.arg("-s")
        .arg(format!("tcp://{}:7700", Lan::addr(host)))
        .args(args)
        .env("TAGWIRE_TOKEN", TOKEN)
        .env_remove("TAGWIRE_SERVER");
    c
}

/// A daemon on host `i` of `lan`, named `name`: TCP on 7700 (bands on
/// 7701..7703), UDP on 7710 if `udp`, linking to `peers`, speaking link
/// versions up to `link_version` (`None`: the build's newest). Killed and
/// its log checked by [`Daemons`].
struct Daemon {
    child: Child,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn start(
    lan: &Lan,
    i: usize,
    name: &str,
    udp: bool,
    peers: &[String],
    link_version: Option<u16>,
) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("tagwired.toml");
    // A version-5 daemon from a build of that version, if given one.
    let old = link_version
        .filter(|v| *v == 5)
        .and(std::env::var_os("UDP_LINK_V5_BIN_DIR"))
        .map(|d| Path::new(&d).join("tagwired"));
    let version = match link_version {
        Some(v) if old.is_none() => format!("link_version = {v}\n"),
        _ => String::new(),
    };
    std::fs::write(
        &cfg,
        format!(
            r#"
[auth]
local_token = false
[[auth.tokens]]
name = "lan"
token = "{TOKEN}"
[[acl]]
identity = "token:lan"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[federation]
token = "{TOKEN}"
gossip_enabled = false
{version}"#
        ),
    )
    .expect("write config");
    let log = dir.path().join("tagwired.log");
    let mut d =
        Command::new(old.unwrap_or_else(|| bin("tagwired", env!("CARGO_BIN_EXE_tagwired"))));
    d.arg("--config")
        .arg(&cfg)
        .args(["--tcp", &format!("{}:7700", Lan::addr(i))])
        .args(["--no-unix", "--name", name])
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("RUST_LOG", "info");
    if udp {
        d.args(["--udp", &format!("{}:7710", Lan::addr(i))]);
    }
    for p in peers {
        d.args(["--peer", p]);
    }
    let child = lan
        .exec(i, &d)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn tagwired");
    Daemon {
        child,
        log,
        _dir: dir,
    }
}

/// The daemons of a test: killed on drop; their logs printed if the test
/// failed or one panicked.
struct Daemons(Vec<Daemon>);

impl Daemons {
    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.0[i].log).unwrap_or_default()
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for d in &mut self.0 {
            let _ = d.child.kill();
            let _ = d.child.wait();
        }
        for (i, d) in self.0.iter().enumerate() {
            let text = std::fs::read_to_string(&d.log).unwrap_or_default();
            if std::thread::panicking() || std::env::var_os("NETNS_SHOW_LOGS").is_some() {
                eprintln!("--- daemon {i} log ---\n{text}");
            }
            if !std::thread::panicking() {
                assert!(!text.contains("panicked"), "daemon {i} panicked: {text}");
            }
        }
    }
}

/// `tagwire ARGS --json` on host `i` (`Null` until it answers).
fn json(lan: &Lan, i: usize, args: &[&str]) -> serde_json::Value {
    let out = lan.exec(i, &tagwire(i, args)).output().expect("tagwire");
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

fn links(lan: &Lan, i: usize) -> serde_json::Value {
    json(lan, i, &["list", "--links", "--json"])
}

/// The link to `peer` in host `i`'s `list --links --json`.
fn link(lan: &Lan, i: usize, peer: &str) -> serde_json::Value {
    links(lan, i)["links"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["peer"] == peer)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// Waits until `done` holds, at most [`WAIT`]; panics saying `what` and the
/// last value seen.
fn wait_for(
    what: &str,
    mut probe: impl FnMut() -> serde_json::Value,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let v = probe();
        if done(&v) {
            return v;
        }
        assert!(
            start.elapsed() < WAIT,
            "{what}: not within {WAIT:?}; last seen {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether host `i`'s daemon knows that daemon `name` has interest.
fn knows_interest(lan: &Lan, i: usize, name: &str) -> bool {
    links(lan, i)["known"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|d| d["name"] == name && d["interest"].as_u64().unwrap_or(0) > 0)
}

fn nft(lan: &Lan, i: usize, nft: &Path, rule: &str) {
    let mut c = Command::new(nft);
    c.args(rule.split(' '));
    let out = lan.exec(i, &c).output().expect("nft");
    assert!(
        out.status.success(),
        "nft {rule}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Packets counted by named counter `name` of table `inet dscp` on host `i`.
fn counted(lan: &Lan, i: usize, nft_bin: &Path, name: &str) -> u64 {
    let mut c = Command::new(nft_bin);
    c.args(["-j", "list", "counter", "inet", "dscp", name]);
    let out = lan.exec(i, &c).output().expect("nft list counter");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|e| e["counter"]["packets"].as_u64())
        .unwrap_or_else(|| panic!("no counter {name} on host {i}: {v}"))
}

/// Counts, on host `i`, the UDP datagrams of each band's port (`dport` on
/// the acceptor's host, `sport` from `from` on the dialer's) with the
/// band's DSCP (`BAND_ok`) and with any other (`BAND_bad`).
fn count_by_dscp(lan: &Lan, i: usize, nft_bin: &Path, bands: &[(&str, u16, u8)], side: &str) {
    nft(lan, i, nft_bin, "add table inet dscp");
    nft(
        lan,
        i,
        nft_bin,
        "add chain inet dscp in { type filter hook input priority -5 ; }",
    );
    for (band, port, dscp) in bands {
        for (verdict, op) in [("ok", ""), ("bad", "!= ")] {
            nft(
                lan,
                i,
                nft_bin,
                &format!("add counter inet dscp {band}_{verdict}"),
            );
            nft(
                lan,
                i,
                nft_bin,
                &format!("add rule inet dscp in {side} {port} ip dscp {op}{dscp} counter name {band}_{verdict}"),
            );
        }
    }
}

/// The UDP port of band `band` of host `i`'s daemon (its `list --json`).
fn udp_port(lan: &Lan, i: usize, band: &str) -> u16 {
    let l = json(lan, i, &["list", "--json"]);
    l["lanes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["band"] == band)
        .and_then(|x| x["udp"].as_str())
        .and_then(|a| a.rsplit_once(':')?.1.parse().ok())
        .unwrap_or_else(|| panic!("band {band} has no UDP socket: {l}"))
}

/// A running `tagwire sub`, printing to a file (80 lines of 800-byte
/// payloads would fill a pipe nobody reads until it exits).
struct Sub {
    child: Child,
    out: tempfile::NamedTempFile,
}

/// `tagwire sub PATTERN -n COUNT` on host `i`, until 15 s without an event.
fn subscriber(lan: &Lan, i: usize, pattern: &str, count: usize) -> Sub {
    let out = tempfile::NamedTempFile::new().expect("temp file");
    let child = lan
        .exec(
            i,
            &tagwire(
                i,
                &["sub", pattern, "-n", &count.to_string(), "--timeout", "15"],
            ),
        )
        .stdout(out.reopen().expect("reopen the temp file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tagwire sub");
    Sub { child, out }
}

/// `tagwire --band BAND pub TAG -n N` on host `i`, 200 a second, 800
/// bytes each: no two fit in one datagram (`[udp] max_datagram` 1,400), so
/// each event is a datagram of its own.
fn publish(lan: &Lan, i: usize, band: &str, tag: &str) {
    let out = lan
        .exec(
            i,
            &tagwire(
                i,
                &[
                    "--band",
                    band,
                    "pub",
                    tag,
                    "e",
                    "-n",
                    &N.to_string(),
                    "--rate",
                    "200",
                    "--size",
                    "800",
                ],
            ),
        )
        .output()
        .expect("tagwire pub");
    assert!(
        out.status.success(),
        "tagwire --band {band} pub {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines a subscriber printed, once it exited (or was stopped after
/// twice [`WAIT`]).
fn received(sub: Sub) -> Vec<String> {
    let _ = common::wait_output(sub.child, WAIT * 2);
    std::fs::read_to_string(sub.out.path())
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn by_band(l: &serde_json::Value, band: &str) -> u64 {
    l["events_out_by_band"][band].as_u64().unwrap_or(0)
}

#[test]
fn a_udp_link_carries_each_band_on_the_bands_own_udp_sockets_with_its_dscp() {
    let _g = serial();
    let nft_bin =
        tagwire_testbed::require_tool("nft", "nftables").unwrap_or_else(|e| panic!("{e}"));
    let lan = Lan::new(2);
    let a_udp = format!("udp://{}:7710", Lan::addr(0));
    let a = start(&lan, 0, "a", true, &[], None);
    wait_for(
        "daemon a answers",
        || json(&lan, 0, &["list", "--json"]),
        |v| !v.is_null(),
    );
    let b = start(&lan, 1, "b", false, &[a_udp], None);
    let _daemons = Daemons(vec![a, b]);
    // b dials every band of a over UDP (link version 6 or later), each a
    // session of its own that a accepts on the band's socket.
    let all = serde_json::json!(["critical", "high", "low"]);
    for (i, peer) in [(1, "a"), (0, "b")] {
        wait_for(
            &format!("host {i}'s link to {peer} has a UDP session per band"),
            || link(&lan, i, peer),
            |l| l["bands"] == all && l["version"].as_u64().is_some_and(|v| v >= 6),
        );
    }
    let (low, high) = (udp_port(&lan, 0, "low"), udp_port(&lan, 0, "high"));
    assert_ne!(low, high);
    let bands = [("low", low, 10u8), ("high", high, 36u8)];
    // Datagrams to a's band ports (b → a) counted on a's host, from them
    // (a → b) on b's host, by DSCP.
    count_by_dscp(&lan, 0, &nft_bin, &bands, "udp dport");
    count_by_dscp(
        &lan,
        1,
        &nft_bin,
        &bands,
        &format!("ip saddr {} udp sport", Lan::addr(0)),
    );
    let sub_a = subscriber(&lan, 0, "/ub/**", 2 * N);
    let sub_b = subscriber(&lan, 1, "/ba/**", 2 * N);
    wait_for(
        "each daemon knows the other's interest",
        || serde_json::json!([knows_interest(&lan, 1, "a"), knows_interest(&lan, 0, "b")]),
        |v| v == &serde_json::json!([true, true]),
    );
    let before: Vec<u64> = [0, 1]
        .iter()
        .flat_map(|&i| {
            ["low_ok", "high_ok"]
                .iter()
                .map(|c| counted(&lan, i, &nft_bin, c))
                .collect::<Vec<_>>()
        })
        .collect();
    publish(&lan, 1, "high", "/ub/h");
    publish(&lan, 1, "low", "/ub/l");
    publish(&lan, 0, "high", "/ba/h");
    publish(&lan, 0, "low", "/ba/l");
    let (got_a, got_b) = (received(sub_a), received(sub_b));
    // Best effort: a datagram may be lost on a loaded machine (counted in
    // the sessions' `lost`/`send_dropped`), rarely more than one.
    let udp_counters = |i: usize| -> Vec<String> {
        json(&lan, i, &["list", "--json"])["connections"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["transport"] == "udp")
            .map(|c| format!("{} {}: {}", c["name"], c["band"], c["udp"]))
            .collect()
    };
    let mut got_per = Vec::new();
    for (got, tag, host) in [(&got_b, "/ba/", "b"), (&got_a, "/ub/", "a")] {
        for band in ["l", "h"] {
            let n = got
                .iter()
                .filter(|l| l.contains(&format!("{tag}{band}")))
                .count();
            assert!(
                n >= N - N / 10,
                "{host} got {n} of the {N} {tag}{band} events; a: {:?}, b: {:?}",
                udp_counters(0),
                udp_counters(1)
            );
            if n < N {
                eprintln!(
                    "{host} got {n} of the {N} {tag}{band} events (lost on the way); a: {:?}, b: {:?}",
                    udp_counters(0),
                    udp_counters(1)
                );
            }
            got_per.push(n as u64);
        }
    }
    let after: Vec<u64> = [0, 1]
        .iter()
        .flat_map(|&i| {
            ["low_ok", "high_ok"]
                .iter()
                .map(|c| counted(&lan, i, &nft_bin, c))
                .collect::<Vec<_>>()
        })
        .collect();
    // Each event received came in a datagram of its own band's session
    // (800 bytes: one event per datagram), marked with the band's DSCP.
    let names = ["b→a low", "b→a high", "a→b low", "a→b high"];
    let got_per = [got_per[2], got_per[3], got_per[0], got_per[1]];
    for (((name, b0), a0), got) in names.iter().zip(&before).zip(&after).zip(got_per) {
        assert!(
            a0 - b0 >= got,
            "{name}: {} datagrams with the band's DSCP on the band's UDP port, want at least the {got} events received",
            a0 - b0
        );
    }
    for i in [0, 1] {
        for c in ["low_bad", "high_bad"] {
            assert_eq!(
                counted(&lan, i, &nft_bin, c),
                0,
                "host {i}: {c}: a band port's datagram without the band's DSCP"
            );
        }
    }
    // Each side wrote each band's events on that band's connection.
    for (i, peer) in [(1, "a"), (0, "b")] {
        let l = link(&lan, i, peer);
        assert!(
            by_band(&l, "high") >= N as u64 && by_band(&l, "low") >= N as u64,
            "host {i}: events per band on the link to {peer}: {l}"
        );
    }
    // At a, b's band sessions are UDP connections of the bands' lanes,
    // marked with their DSCP.
    let l = json(&lan, 0, &["list", "--json"]);
    let conns: Vec<&serde_json::Value> = l["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == "link:b")
        .collect();
    for (band, dscp) in [("normal", 0), ("low", 10), ("high", 36), ("critical", 44)] {
        assert!(
            conns.iter().any(|c| c["band"] == band
                && c["transport"] == "udp"
                && c["dscp"] == dscp
                && c["udp"]["received"].as_u64().unwrap_or(0) > 0),
            "a has b's band {band} session over udp with DSCP {dscp}: {conns:?}"
        );
    }
}

#[test]
fn a_version_5_daemon_still_links_over_udp_on_the_default_band_only() {
    let _g = serial();
    // a (newest) ← c (version 5) ← b (newest): c dials a over UDP, b dials c.
    let lan = Lan::new(3);
    let a = start(&lan, 0, "a", true, &[], None);
    wait_for(
        "daemon a answers",
        || json(&lan, 0, &["list", "--json"]),
        |v| !v.is_null(),
    );
    let c = start(
        &lan,
        1,
        "c",
        true,
        &[format!("udp://{}:7710", Lan::addr(0))],
        Some(5),
    );
    wait_for(
        "daemon c answers",
        || json(&lan, 1, &["list", "--json"]),
        |v| !v.is_null(),
    );
    let b = start(
        &lan,
        2,
        "b",
        false,
        &[format!("udp://{}:7710", Lan::addr(1))],
        None,
    );
    let daemons = Daemons(vec![a, c, b]);
    // (A build of version 5 does not list the version: its links are up.)
    let old_c = std::env::var_os("UDP_LINK_V5_BIN_DIR").is_some();
    for (i, peer) in [(0, "c"), (1, "a"), (1, "b"), (2, "c")] {
        wait_for(
            &format!("host {i}'s link to {peer} is up on version 5"),
            || link(&lan, i, peer),
            |l| l["version"] == 5 || (i == 1 && old_c && l["peer"] == peer),
        );
    }
    // A high-band event from b reaches a across both links, on their
    // default band (a version-5 peer lists no UDP band ports).
    let sub = subscriber(&lan, 0, "/v5/**", N);
    wait_for(
        "b knows a's interest",
        || serde_json::json!(knows_interest(&lan, 2, "a")),
        |v| v == true,
    );
    publish(&lan, 2, "high", "/v5/h");
    let got = received(sub);
    assert_eq!(
        got.len(),
        N,
        "a got every event over the version-5 links: {got:?}"
    );
    for (i, peer) in [(2, "c"), (1, "a")] {
        let l = link(&lan, i, peer);
        assert_eq!(
            l["bands"],
            serde_json::json!([]),
            "host {i}: no band sessions: {l}"
        );
        assert!(
            by_band(&l, "normal") >= N as u64 && by_band(&l, "high") == 0,
            "host {i}: every event on the default band's session: {l}"
        );
    }
    // b said version 6 first; c refused it and b dialed again with 5.
    let log = daemons.log(2);
    assert!(
        log.contains("refused link version 6") && log.contains("every band on the default band"),
        "b's log says why the link is on version 5: {log}"
    );
}
