//! Push-pull paper §3.3 (Fig. 5–11, Tables 1, 2 and 4) on the netns
//! testbed: round trips of a publisher and an echoing subscriber with no
//! proxy and with a scaling proxy at the subscriber's daemon, the
//! publisher's daemon or an intermediate daemon; over one node, two nodes
//! and chains of one and two intermediate daemons (the paper's Darwin
//! routers); the delay each intermediate daemon adds; the round trip under
//! competing traffic on a rate-limited link without and with a bandwidth
//! reservation; bytes per link and CPU per process per proxy place; a pull
//! of the latest sample against a 64 B round trip. Every round trip is also
//! measured, in the same run, over a chain of raw TCP relays, one where each
//! daemon is (the ratio is the software's cost). Needs root and the release
//! binaries; `scripts/pushpull-fig5-11.sh` runs it (free and pinned).
//!
//! The program is also its own helper: `--role echo|ping|source|sink|reserve`
//! runs one client process inside a host namespace (so that each has its
//! own pid for CPU accounting and every socket it opens is that host's).
//! `--smoke` runs one round trip per proxy place on loopback (no root).
//!
//! ```text
//! cargo build --release -p tagwire-cli --bins
//! cargo build --release --manifest-path experiments/Cargo.toml --bin pushpull_proxies
//! experiments/target/release/pushpull_proxies --bin target/release --pings 300 --svg-dir docs
//! experiments/target/release/pushpull_proxies --smoke
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tagwire::{Bytes, Session};
use tagwire_testbed::{NsChild, Testbed, TestbedConfig};

const TOKEN: &str = "pushpull-proxies-experiment-token-0123";
const PORT: u16 = 7700;
/// Ping and pong tags (the pong on a separate tag, as in the paper).
const PING: &str = "/pp/ping";
const PONG: &str = "/pp/pong";
/// Where the control's fillers go (no subscriber).
const FILLER: &str = "/pp/filler";
/// The control mode's label: no proxy, and a filler nobody wants before
/// each timed ping (the pinger's `--scale 0`).
const CONTROL: &str = "no proxy + filler (control)";
/// The scaling factor of every proxy here: 1 of every 2 events. (A factor
/// of 1 is no proxy at all in tagwire, so the paper's "scaling by one"
/// cannot be asked for; the pinger publishes a filler before each timed
/// ping so that every timed ping is one the proxy keeps.)
const SCALE: u64 = 2;
/// Warm-up round trips dropped before the timed ones.
const WARMUP: usize = 30;
/// Hosts: 0 publisher (pinger), 1 subscriber (echo), 2 and 3 the
/// intermediate daemons ("routers").
const HOSTS: usize = 4;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn args_all(name: &str) -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .filter(|w| w[0] == name)
        .map(|w| w[1].clone())
        .collect()
}

fn now_rt() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn connect(url: &str) -> Session {
    let start = Instant::now();
    loop {
        match Session::builder().token(TOKEN).connect(url) {
            Ok(s) => return s,
            Err(e) if start.elapsed() > Duration::from_secs(10) => panic!("connect {url}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

// ---------------------------------------------------------------- statistics

/// p50, p99 and mean of a sample (µs in, µs out).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
struct Q {
    p50: f64,
    p99: f64,
    mean: f64,
}

fn q(v: &[f64]) -> Q {
    if v.is_empty() {
        return Q {
            p50: f64::NAN,
            p99: f64::NAN,
            mean: f64::NAN,
        };
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |p: f64| s[((s.len() as f64 * p) as usize).min(s.len() - 1)];
    Q {
        p50: at(0.5),
        p99: at(0.99),
        mean: s.iter().sum::<f64>() / s.len() as f64,
    }
}

/// What one pinger run measured (µs): round trip, publish call, ping one
/// way, echo, pong one way, one value per timed ping.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct RawPings {
    size: usize,
    lost: usize,
    r: [Vec<f64>; 5],
}

impl RawPings {
    fn merge(&mut self, other: RawPings) {
        self.size = other.size;
        self.lost += other.lost;
        for (a, b) in self.r.iter_mut().zip(other.r) {
            a.extend(b);
        }
    }

    fn result(&self) -> PingResult {
        PingResult {
            size: self.size,
            samples: self.r[0].len(),
            lost: self.lost,
            rtt: q(&self.r[0]),
            publish: q(&self.r[1]),
            ping_oneway: q(&self.r[2]),
            echo: q(&self.r[3]),
            pong_oneway: q(&self.r[4]),
        }
    }
}

/// What the pings of one point measured, µs.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
struct PingResult {
    size: usize,
    samples: usize,
    lost: usize,
    /// Round trip at the pinger (monotonic clock).
    rtt: Q,
    /// The pinger's `publish` call: stamp, encode, write.
    publish: Q,
    /// Ping source time → the echo's callback entry (one way).
    ping_oneway: Q,
    /// The echo's callback entry → its pong's source stamp.
    echo: Q,
    /// Pong source time → the pinger's receive.
    pong_oneway: Q,
}

// ---------------------------------------------------------------- roles

/// `--role echo`: republishes each ping on the pong tag with its callback
/// entry time and the ping's source time in bytes 8..24.
fn role_echo(server: &str, qos: &[(String, String)], ping_tag: &str, pong_tag: &str) {
    let s = connect(server);
    let echo = Arc::new(
        s.declare_publisher(&format!("/pp/echo{}", std::process::id()))
            .expect("echo publisher"),
    );
    echo.set_express(true);
    let mut b = s.subscribe(ping_tag);
    for (k, v) in qos {
        b = b.qos(k, v);
    }
    let ep = echo.clone();
    let pong_tag = pong_tag.to_owned();
    let _sub = b
        .callback(move |sample| {
            let t = now_rt();
            let src = sample.event().source_time_ns;
            let mut out = sample.payload().to_vec();
            if out.len() >= 24 {
                out[8..16].copy_from_slice(&t.to_le_bytes());
                out[16..24].copy_from_slice(&src.to_le_bytes());
            }
            let _ = ep.publish(&pong_tag, out);
        })
        .unwrap_or_else(|e| panic!("echo subscription: {e}"));
    eprintln!("echo ready");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `--role ping`: `pings` timed round trips of `size` bytes after a
/// warm-up, one in flight, `gap` apart; with `scale` > 1 a filler (dropped
/// by the proxy) goes before each timed ping, with `scale` 0 a filler on a
/// tag nobody subscribes to (the control). Prints a [`PingResult`].
fn role_ping(
    server: &str,
    (ping_tag, pong_tag): (&str, &str),
    size: usize,
    pings: usize,
    gap: Duration,
    scale: u64,
) {
    let s = connect(server);
    let p = s
        .declare_publisher(&format!("/pp/pinger{}", std::process::id()))
        .expect("pinger publisher");
    p.set_express(true);
    let pongs = s.subscribe(pong_tag).receiver().expect("pong subscription");
    let mut published = 0u64;
    let mut payload = vec![0x5au8; size.max(24)];
    let filler = Bytes::from(payload.clone());
    let mut send = |k: u64, published: &mut u64| {
        payload[..8].copy_from_slice(&k.to_le_bytes());
        *published += 1;
        p.publish(ping_tag, payload.clone())
    };
    // Until the echo's interest (and any proxy) is in place everywhere.
    let start = Instant::now();
    loop {
        send(u64::MAX, &mut published).expect("ping");
        if pongs
            .recv_timeout(Duration::from_millis(100))
            .expect("recv")
            .is_some()
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no pong within 20 s"
        );
    }
    while pongs
        .recv_timeout(Duration::from_millis(50))
        .expect("recv")
        .is_some()
    {}
    let mut r: [Vec<f64>; 5] = Default::default();
    let mut lost = 0;
    for k in 0..(WARMUP + pings) as u64 {
        while scale > 1 && !(published + 1).is_multiple_of(scale) {
            send(u64::MAX - 1, &mut published).expect("filler");
        }
        if scale == 0 {
            // The control: a filler nobody subscribes to (dropped at the
            // publisher's daemon), so the cost of the filler itself shows.
            p.publish(FILLER, filler.clone()).expect("control filler");
        }
        std::thread::sleep(gap);
        let t0 = Instant::now();
        send(k, &mut published).expect("ping");
        let publish = t0.elapsed();
        let deadline = t0 + Duration::from_secs(2);
        let pong = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match pongs.recv_timeout(left).expect("recv") {
                Some(s) if s.payload().get(..8) == Some(&k.to_le_bytes()[..]) => break Some(s),
                Some(_) => continue, // a late pong of an earlier ping
                None => break None,
            }
        };
        let (rtt, recv_rt) = (t0.elapsed(), now_rt());
        let Some(pong) = pong else {
            lost += 1;
            continue;
        };
        if (k as usize) < WARMUP {
            continue;
        }
        let b = pong.payload();
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let (echo_rt, ping_src, pong_src) = (word(8), word(16), pong.event().source_time_ns);
        let us = |a: u64, b: u64| (a as f64 - b as f64) / 1e3;
        r[0].push(rtt.as_secs_f64() * 1e6);
        r[1].push(publish.as_secs_f64() * 1e6);
        r[2].push(us(echo_rt, ping_src));
        r[3].push(us(pong_src, echo_rt));
        r[4].push(us(recv_rt, pong_src));
    }
    let out = RawPings { size, lost, r };
    println!("{}", serde_json::to_string(&out).expect("json"));
}

/// `--role source`: publishes `size`-byte events on `tag` (default
/// `/pp/stream/x`) at `rate` per second for `seconds`; prints how many.
fn role_source(server: &str, tag: &str, size: usize, rate: f64, seconds: f64) {
    let s = connect(server);
    let p = s
        .declare_publisher(&format!("/pp/source{}", std::process::id()))
        .expect("publisher");
    let payload = Bytes::from(vec![0x33u8; size]);
    let period = Duration::from_secs_f64(1.0 / rate);
    let n = (rate * seconds) as u64;
    let start = Instant::now();
    for i in 0..n {
        let due = start + period * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        p.publish(tag, payload.clone()).expect("publish");
    }
    s.flush().expect("flush");
    println!("{}", serde_json::json!({ "sent": n }));
}

/// `--role sink`: one subscription to `pattern` (default `/pp/stream/*`)
/// per `--sub-qos` (`k=v,k=v`); counts events for `seconds` and takes each
/// one's one-way delay (its source stamp → this callback: CLOCK_REALTIME is
/// one clock for every namespace of the machine); prints the counts and the
/// delays' p50 and p99 in µs, per subscription.
fn role_sink(server: &str, pattern: &str, subs: &[Vec<(String, String)>], seconds: f64) {
    let s = connect(server);
    let delays: Vec<Arc<std::sync::Mutex<Vec<f64>>>> = subs
        .iter()
        .map(|_| Arc::new(std::sync::Mutex::new(Vec::with_capacity(65_536))))
        .collect();
    let mut keep = Vec::new();
    for (qos, d) in subs.iter().zip(&delays) {
        let mut b = s.subscribe(pattern).max_queue_length(65_536);
        for (k, v) in qos {
            b = b.qos(k, v);
        }
        let d = d.clone();
        keep.push(
            b.callback(move |sample| {
                let us = now_rt().saturating_sub(sample.event().source_time_ns) as f64 / 1e3;
                if let Ok(mut d) = d.lock() {
                    d.push(us);
                }
            })
            .unwrap_or_else(|e| panic!("sink subscription {qos:?}: {e}")),
        );
    }
    eprintln!("sink ready");
    std::thread::sleep(Duration::from_secs_f64(seconds));
    drop(keep);
    let taken: Vec<Vec<f64>> = delays
        .iter()
        .map(|d| d.lock().map(|d| d.clone()).unwrap_or_default())
        .collect();
    let got: Vec<usize> = taken.iter().map(Vec::len).collect();
    let p50: Vec<f64> = taken.iter().map(|d| q(d).p50).collect();
    let p99: Vec<f64> = taken.iter().map(|d| q(d).p99).collect();
    println!(
        "{}",
        serde_json::json!({ "received": got, "delay_p50_us": p50, "delay_p99_us": p99 })
    );
}

/// `--role reserve`: a subscription on `band` with `reserve=RATE` (the
/// band's sockets at this daemon join the reserved htb class); held until
/// killed.
fn role_reserve(server: &str, band: &str, rate: &str) {
    let s = connect(server);
    let on = s
        .on_band(band)
        .unwrap_or_else(|e| panic!("band {band}: {e}"));
    let _sub = on
        .subscribe("/pp/reserve")
        .qos("reserve", rate)
        .receiver()
        .unwrap_or_else(|e| panic!("reserve={rate} on {band}: {e}"));
    eprintln!("reserve ready");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn parse_qos(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

// ---------------------------------------------------------------- topology

/// Where the daemons are: a chain of host indices, publisher's first,
/// subscriber's last (one entry: both on one node).
#[derive(Debug, Clone, Copy)]
struct Topology {
    name: &'static str,
    figure: &'static str,
    chain: &'static [usize],
}

const TOPOLOGIES: [Topology; 4] = [
    Topology {
        name: "one node",
        figure: "Fig. 6",
        chain: &[0],
    },
    Topology {
        name: "two nodes",
        figure: "Fig. 7",
        chain: &[0, 1],
    },
    Topology {
        name: "one router between",
        figure: "Fig. 8",
        chain: &[0, 2, 1],
    },
    Topology {
        name: "two routers between",
        figure: "Fig. 9",
        chain: &[0, 2, 3, 1],
    },
];

/// A daemon's name: `d0` (publisher's), `d1` (subscriber's), `r2`, `r3`.
fn daemon_name(host: usize) -> String {
    match host {
        0 | 1 => format!("d{host}"),
        h => format!("r{h}"),
    }
}

fn url(tb: &Testbed, host: usize) -> String {
    format!("tcp://{}:{PORT}", tb.host(host).addr())
}

fn write_config(dir: &Path, name: &str, peer: Option<String>, bandwidth: &str) -> PathBuf {
    let peers = peer.map(|p| format!("{p:?}")).unwrap_or_default();
    let text = format!(
        r#"[auth]
local_token = false
[[auth.tokens]]
name = "pp"
token = "{TOKEN}"
[[acl]]
identity = "token:pp"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[federation]
token = "{TOKEN}"
peers = [{peers}]
gossip_enabled = false
{bandwidth}
"#
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// Starts the chain's daemons (each dials the one before it), and waits
/// until every daemon knows all of them.
fn start_chain<'tb>(
    tb: &'tb Testbed,
    bin: &Path,
    dir: &Path,
    chain: &[usize],
    bandwidth: &dyn Fn(usize) -> String,
) -> Vec<NsChild<'tb>> {
    let mut out = Vec::new();
    for (i, &h) in chain.iter().enumerate() {
        let name = daemon_name(h);
        let peer = (i > 0).then(|| url(tb, chain[i - 1]));
        let cfg = write_config(dir, &name, peer, &bandwidth(h));
        let host = tb.host(h);
        let mut c = Command::new(bin.join("tagwired"));
        c.args(["--tcp", &format!("{}:{PORT}", host.addr()), "--no-unix"])
            .args(["--name", &name])
            .arg("--config")
            .arg(&cfg)
            .env("XDG_RUNTIME_DIR", dir)
            .env("RUST_LOG", "warn,tagwire_router=info");
        let mut child = host.spawn(&c).unwrap_or_else(|e| panic!("{e}"));
        child
            .wait_for_stderr("band normal: listening", Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("daemon {name} did not start: {e}"));
        out.push(child);
    }
    let start = Instant::now();
    for &h in chain {
        loop {
            let v = list_links(tb, bin, h);
            let known = v["daemons"].as_u64().unwrap_or(0) as usize;
            let links = v["links"].as_array().map_or(0, Vec::len);
            let want_links = if chain.len() == 1 {
                0
            } else if h == chain[0] || h == chain[chain.len() - 1] {
                1
            } else {
                2
            };
            if (known >= chain.len() || chain.len() == 1) && links >= want_links {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the chain {chain:?} did not form: {v}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    out
}

fn tagwire_cli(bin: &Path, server: &str, args: &[&str]) -> Command {
    let mut c = Command::new(bin.join("tagwire"));
    c.arg("-s")
        .arg(server)
        .args(args)
        .env("TAGWIRE_TOKEN", TOKEN)
        .env_remove("TAGWIRE_SERVER");
    c
}

/// `tagwire list --links --json` at the daemon on `host`.
fn list_links(tb: &Testbed, bin: &Path, host: usize) -> serde_json::Value {
    let out = tb
        .host(host)
        .output(
            &tagwire_cli(bin, &url(tb, host), &["list", "--links", "--json"]),
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// Bytes and events daemon `host` has sent on its link to daemon `to`.
fn link_out(v: &serde_json::Value, to: &str) -> (u64, u64) {
    v["links"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["peer"] == to || l["node"] == to)
        .map_or((0, 0), |l| {
            (
                l["bytes_out"].as_u64().unwrap_or(0),
                l["events_out"].as_u64().unwrap_or(0),
            )
        })
}

fn role_cmd(role: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("own path"));
    c.args(["--role", role]);
    c
}

/// A proxy place: its label and the echo's subscription QoS.
fn modes(t: &Topology) -> Vec<(&'static str, Vec<(String, String)>)> {
    let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let scale = SCALE.to_string();
    let mut m = vec![
        ("no proxy", vec![]),
        (CONTROL, vec![]),
        ("proxy at subscriber", s(&[("scale", &scale)])),
        (
            "proxy at publisher",
            s(&[("scale", &scale), ("proxy", "at_publisher")]),
        ),
    ];
    if t.chain.len() == 3 {
        m.push((
            "proxy on remote node",
            s(&[("scale", &scale), ("proxy", "node:r2")]),
        ));
    }
    m
}

struct Ctx<'a> {
    tb: &'a Testbed,
    bin: &'a Path,
    pings: usize,
    /// Rounds the pings of a point are split into (interleaving the places).
    rounds: usize,
    gap: Duration,
}

/// One pinger run from host 0 against `server`.
fn ping(
    ctx: &Ctx,
    server: &str,
    tags: (&str, &str),
    size: usize,
    pings: usize,
    scale: u64,
) -> RawPings {
    let mut c = role_cmd("ping");
    c.args(["--server", server])
        .args(["--ping-tag", tags.0, "--pong-tag", tags.1])
        .args(["--size", &size.to_string()])
        .args(["--pings", &pings.to_string()])
        .args(["--gap-us", &ctx.gap.as_micros().to_string()])
        .args(["--scale", &scale.to_string()]);
    let out = ctx
        .tb
        .host(0)
        .output(&c, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "pinger failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("pinger output {text:?}: {e}"))
}

fn spawn_echo<'tb>(
    tb: &'tb Testbed,
    host: usize,
    server: &str,
    qos: &[(String, String)],
    tags: (&str, &str),
) -> NsChild<'tb> {
    let q: Vec<String> = qos.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut c = role_cmd("echo");
    c.args(["--server", server, "--qos", &q.join(",")]).args([
        "--ping-tag",
        tags.0,
        "--pong-tag",
        tags.1,
    ]);
    let mut child = tb.host(host).spawn(&c).unwrap_or_else(|e| panic!("{e}"));
    child
        .wait_for_stderr("echo ready", Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("echo did not start: {e}"));
    child
}

// ---------------------------------------------------------------- raw TCP

/// A raw relay chain through `hosts` (a relay on each) to an echo server on
/// the last one, from a client on host 0: one relay where each daemon is.
/// Returns RTTs (µs) of `n` timed round trips of `size` bytes, `gap` apart.
fn raw_rtts(tb: &Testbed, hosts: &[usize], size: usize, n: usize, gap: Duration) -> Vec<f64> {
    let bind = |h: usize, port: u16| {
        let a: SocketAddr = format!("{}:{port}", tb.host(h).addr())
            .parse()
            .expect("addr");
        tb.host(h)
            .run_in(move || TcpListener::bind(a))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("bind {a}: {e}"))
    };
    let last = *hosts.last().expect("a host");
    let echo = bind(last, 0);
    let mut listeners: Vec<(usize, TcpListener)> = hosts.iter().map(|&h| (h, bind(h, 0))).collect();
    let first = listeners[0].1.local_addr().expect("addr");
    let client = tb
        .host(0)
        .run_in(move || TcpStream::connect(first))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("connect to the first relay");
    // Wire the chain: each relay accepts, then dials the next hop from its host.
    let mut nexts: Vec<SocketAddr> = listeners
        .iter()
        .skip(1)
        .map(|(_, l)| l.local_addr().expect("addr"))
        .collect();
    nexts.push(echo.local_addr().expect("addr"));
    for ((h, l), next) in listeners.drain(..).zip(nexts) {
        let (a, _) = l.accept().expect("accept");
        let b = tb
            .host(h)
            .run_in(move || TcpStream::connect(next))
            .unwrap_or_else(|e| panic!("{e}"))
            .expect("relay connect");
        let _ = a.set_nodelay(true);
        let _ = b.set_nodelay(true);
        let (a2, b2) = (a.try_clone().expect("clone"), b.try_clone().expect("clone"));
        std::thread::spawn(move || copy(a, b));
        std::thread::spawn(move || copy(b2, a2));
    }
    let (mut e, _) = echo.accept().expect("accept echo");
    std::thread::spawn(move || {
        let _ = e.set_nodelay(true);
        let mut buf = vec![0u8; size];
        while e.read_exact(&mut buf).is_ok() {
            if e.write_all(&buf).is_err() {
                return;
            }
        }
    });
    let mut c = client;
    let _ = c.set_nodelay(true);
    let msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut out = Vec::with_capacity(n);
    for k in 0..WARMUP + n {
        std::thread::sleep(gap);
        let t = Instant::now();
        c.write_all(&msg).expect("write");
        c.read_exact(&mut back).expect("read");
        if k >= WARMUP {
            out.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    out
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 256 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

// ---------------------------------------------------------------- CPU

/// utime + stime of `pid`, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = text.rsplit_once(')') else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    // USER_HZ: 100 on every Linux architecture this runs on.
    let hz = 100.0;
    match (ticks(14), ticks(15)) {
        (Some(u), Some(s)) => (u + s) / hz,
        _ => f64::NAN,
    }
}

// ---------------------------------------------------------------- experiments

/// One round-trip point.
#[derive(Debug, Clone)]
struct Point {
    topo: usize,
    mode: &'static str,
    r: PingResult,
}

fn round_trips(ctx: &Ctx, dir: &Path, sizes: &[usize]) -> (Vec<Point>, Vec<(usize, usize, Q)>) {
    let mut points = Vec::new();
    let mut raw = Vec::new();
    let topos: Vec<usize> = arg("--topos")
        .unwrap_or_else(|| "0,1,2,3".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    for (ti, t) in TOPOLOGIES.iter().enumerate() {
        if !topos.contains(&ti) {
            continue;
        }
        eprintln!(
            "== {} ({}): daemons on hosts {:?}",
            t.name, t.figure, t.chain
        );
        let daemons = start_chain(ctx.tb, ctx.bin, dir, t.chain, &|_| String::new());
        let sub_host = *t.chain.last().expect("chain");
        // One echo per proxy place, each on its own tags, all at once, so
        // that the places are measured interleaved (round by round) and a
        // change in the machine's load falls on all of them alike.
        let ms = modes(t);
        let tags: Vec<(String, String)> = (0..ms.len())
            .map(|i| (format!("{PING}/{i}"), format!("{PONG}/{i}")))
            .collect();
        let _echoes: Vec<NsChild> = ms
            .iter()
            .zip(&tags)
            .map(|((_, qos), (pi, po))| {
                spawn_echo(ctx.tb, sub_host, &url(ctx.tb, sub_host), qos, (pi, po))
            })
            .collect();
        let mut acc: Vec<RawPings> = vec![RawPings::default(); ms.len() * sizes.len()];
        let per_round = ctx.pings.div_ceil(ctx.rounds);
        for _ in 0..ctx.rounds {
            for (si, &size) in sizes.iter().enumerate() {
                for (mi, (mode, qos)) in ms.iter().enumerate() {
                    let scale = match (*mode, qos.is_empty()) {
                        (CONTROL, _) => 0,
                        (_, true) => 1,
                        (_, false) => SCALE,
                    };
                    let r = ping(
                        ctx,
                        &url(ctx.tb, 0),
                        (&tags[mi].0, &tags[mi].1),
                        size,
                        per_round,
                        scale,
                    );
                    acc[mi * sizes.len() + si].merge(r);
                }
            }
        }
        for (mi, (mode, _)) in ms.iter().enumerate() {
            for si in 0..sizes.len() {
                let r = acc[mi * sizes.len() + si].result();
                eprintln!(
                    "   {mode:<28} {:>6} B: rtt p50 {:>8.1} µs p99 {:>8.1} µs ({} lost)",
                    r.size, r.rtt.p50, r.rtt.p99, r.lost
                );
                points.push(Point { topo: ti, mode, r });
            }
        }
        drop(daemons);
        for &size in sizes {
            let v = raw_rtts(ctx.tb, t.chain, size, ctx.pings, ctx.gap);
            let qq = q(&v);
            eprintln!(
                "   raw TCP relays         {size:>6} B: rtt p50 {:>8.1} µs p99 {:>8.1} µs",
                qq.p50, qq.p99
            );
            raw.push((ti, size, qq));
        }
    }
    (points, raw)
}

/// `tagwire bench pull` on host 0's daemon (pull of the latest sample and
/// the 64 B round trip, in one run).
fn pull_bench(ctx: &Ctx, dir: &Path) -> serde_json::Value {
    let _d = start_chain(ctx.tb, ctx.bin, dir, &[0], &|_| String::new());
    let out = ctx
        .tb
        .host(0)
        .output(
            &tagwire_cli(
                ctx.bin,
                &url(ctx.tb, 0),
                &["bench", "pull", "--size", "64", "--duration", "2", "--json"],
            ),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or_else(|e| {
        panic!(
            "bench pull: {e}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// One row of Tables 1 and 2.
#[derive(Debug)]
struct Load {
    label: String,
    sent: u64,
    received: Vec<u64>,
    /// Bytes d0→r2 and r2→d1.
    bytes: (u64, u64),
    events: (u64, u64),
    /// CPU seconds: d0, r2, d1, source, sink.
    cpu: [f64; 5],
    seconds: f64,
}

/// Tables 1 and 2: a stream of `rate` events/s of `size` bytes from host 0
/// to subscribers on host 1 across the router daemon on host 2, per proxy
/// place; bytes per link and CPU per process.
fn loads(ctx: &Ctx, dir: &Path, rate: f64, seconds: f64, size: usize) -> Vec<Load> {
    let chain = [0usize, 2, 1];
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("no proxy (all events)", vec![""]),
        ("1 sub, scale=4, proxy at subscriber", vec!["scale=4"]),
        (
            "1 sub, scale=4, proxy at publisher",
            vec!["scale=4,proxy=at_publisher"],
        ),
        (
            "1 sub, scale=4, proxy on remote node r2",
            vec!["scale=4,proxy=node:r2"],
        ),
        (
            "2 subs, scale=2 and 3, at subscriber",
            vec!["scale=2", "scale=3"],
        ),
        (
            "2 subs, scale=2 and 3, at publisher",
            vec!["scale=2,proxy=at_publisher", "scale=3,proxy=at_publisher"],
        ),
    ];
    let mut out = Vec::new();
    for (label, subs) in cases {
        let daemons = start_chain(ctx.tb, ctx.bin, dir, &chain, &|_| String::new());
        let pids: Vec<u32> = daemons.iter().map(NsChild::id).collect();
        let mut c = role_cmd("sink");
        c.args(["--server", &url(ctx.tb, 1)])
            .args(["--seconds", &(seconds + 3.0).to_string()]);
        for s in &subs {
            c.args(["--sub-qos", s]);
        }
        let mut sink = ctx.tb.host(1).spawn(&c).unwrap_or_else(|e| panic!("{e}"));
        sink.wait_for_stderr("sink ready", Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("sink did not start: {e}"));
        // The subscription's interest crosses two links (a LAN: milliseconds).
        std::thread::sleep(Duration::from_millis(500));
        let l0 = (
            list_links(ctx.tb, ctx.bin, 0),
            list_links(ctx.tb, ctx.bin, 2),
        );
        let mut src = role_cmd("source");
        src.args(["--server", &url(ctx.tb, 0)])
            .args(["--size", &size.to_string()])
            .args(["--rate", &rate.to_string()])
            .args(["--seconds", &seconds.to_string()]);
        let cpu0: Vec<f64> = pids.iter().map(|&p| cpu_secs(p)).collect();
        let sink0 = cpu_secs(sink.id());
        let t0 = Instant::now();
        let mut source = ctx.tb.host(0).spawn(&src).unwrap_or_else(|e| panic!("{e}"));
        let src_pid = source.id();
        // Sample the source's CPU just before it exits: poll its stat.
        let mut src_cpu = 0.0;
        while source.try_wait().ok().flatten().is_none() {
            let c = cpu_secs(src_pid);
            if c.is_finite() {
                src_cpu = c;
            }
            std::thread::sleep(Duration::from_millis(20));
            assert!(t0.elapsed() < Duration::from_secs(120), "source hung");
        }
        let sent_out = source
            .finish(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e}"));
        let elapsed = t0.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(300));
        let cpu1: Vec<f64> = pids.iter().map(|&p| cpu_secs(p)).collect();
        let sink1 = cpu_secs(sink.id());
        let l1 = (
            list_links(ctx.tb, ctx.bin, 0),
            list_links(ctx.tb, ctx.bin, 2),
        );
        let sink_out = sink
            .finish(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        let sent: serde_json::Value =
            serde_json::from_slice(&sent_out.stdout).unwrap_or(serde_json::Value::Null);
        let recv: serde_json::Value =
            serde_json::from_slice(&sink_out.stdout).unwrap_or(serde_json::Value::Null);
        let (a0, a1) = (link_out(&l0.0, "r2"), link_out(&l1.0, "r2"));
        let (b0, b1) = (link_out(&l0.1, "d1"), link_out(&l1.1, "d1"));
        let row = Load {
            label: label.to_owned(),
            sent: sent["sent"].as_u64().unwrap_or(0),
            received: recv["received"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_u64)
                .collect(),
            bytes: (a1.0 - a0.0, b1.0 - b0.0),
            events: (a1.1 - a0.1, b1.1 - b0.1),
            cpu: [
                cpu1[0] - cpu0[0],
                cpu1[1] - cpu0[1],
                cpu1[2] - cpu0[2],
                src_cpu,
                sink1 - sink0,
            ],
            seconds: elapsed,
        };
        eprintln!("   {row:?}");
        out.push(row);
        drop(daemons);
    }
    out
}

/// Fig. 11: round trips across the router daemon (host 2) whose egress is
/// a 10 Mbit/s htb link: unloaded, under a UDP flood from host 2 to host 1
/// (competing traffic in the same egress queue), and the same with a
/// reservation for the pings' band. Returns (case, size, result).
fn fig11(
    ctx: &Ctx,
    dir: &Path,
    sizes: &[usize],
    flood_threads: usize,
) -> Vec<(&'static str, PingResult)> {
    let chain = [0usize, 2, 1];
    let bandwidth = |h: usize| {
        if h == 2 {
            "[bandwidth]\ninterface = \"veth0\"\nlink_rate = \"10mbit\"\n".to_owned()
        } else {
            String::new()
        }
    };
    let _daemons = start_chain(ctx.tb, ctx.bin, dir, &chain, &bandwidth);
    let reserve = |band: &str, rate: &str| {
        let mut c = role_cmd("reserve");
        c.args(["--server", &url(ctx.tb, 2), "--band", band, "--rate", rate]);
        let mut child = ctx.tb.host(2).spawn(&c).unwrap_or_else(|e| panic!("{e}"));
        child
            .wait_for_stderr("reserve ready", Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("reservation on {band}: {e}"));
        child
    };
    // The same htb tree in every case: a 1 Mbit/s reservation on band
    // `low` (unused here) makes the daemon install it; the pings' band
    // (`normal`) shares best-effort class 1:2 with the flood until its own
    // reservation.
    let _low = reserve("low", "1mbit");
    let _echo = spawn_echo(ctx.tb, 1, &url(ctx.tb, 1), &[], (PING, PONG));
    let mut out = Vec::new();
    let run = |case: &'static str, pings: usize, out: &mut Vec<(&'static str, PingResult)>| {
        for &size in sizes {
            let r = ping(ctx, &url(ctx.tb, 0), (PING, PONG), size, pings, 1).result();
            eprintln!(
                "   {case:<28} {size:>6} B: rtt p50 {:>9.1} µs p99 {:>9.1} µs ({} lost)",
                r.rtt.p50, r.rtt.p99, r.lost
            );
            out.push((case, r));
        }
    };
    run("unloaded", ctx.pings, &mut out);
    let stop = Arc::new(AtomicBool::new(false));
    let dest: SocketAddr = format!("{}:9", ctx.tb.host(1).addr())
        .parse()
        .expect("addr");
    let flood: Vec<_> = (0..flood_threads)
        .map(|_| {
            let sock = ctx
                .tb
                .host(2)
                .run_in(|| UdpSocket::bind("0.0.0.0:0"))
                .unwrap_or_else(|e| panic!("{e}"))
                .expect("udp bind");
            let stop = stop.clone();
            std::thread::spawn(move || {
                let buf = [0u8; 1400];
                while !stop.load(Ordering::Relaxed) {
                    let _ = sock.send_to(&buf, dest);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    run("loaded, no reservation", ctx.pings.min(60), &mut out);
    let _normal = reserve("normal", "4mbit");
    std::thread::sleep(Duration::from_millis(300));
    run("loaded, reserve=4mbit", ctx.pings, &mut out);
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        let _ = f.join();
    }
    out
}

// ---------------------------------------------------------------- report

fn report(
    points: &[Point],
    raw: &[(usize, usize, Q)],
    sizes: &[usize],
    pull: &serde_json::Value,
    loads: &[Load],
    f11: &[(&'static str, PingResult)],
) {
    let raw_of = |t: usize, s: usize| {
        raw.iter()
            .find(|r| r.0 == t && r.1 == s)
            .map_or(Q::default(), |r| r.2)
    };
    let pt = |t: usize, m: &str, s: usize| {
        points
            .iter()
            .find(|p| p.topo == t && p.mode == m && p.r.size == s)
            .map(|p| p.r)
    };
    println!(
        "\n### Fig. 5: 64 B round trip per proxy place (µs; ratio to raw TCP relays, same run)\n"
    );
    println!("| topology | proxy | RTT p50 | RTT p99 | raw p50 | raw p99 | p50 ratio | p99 ratio | vs no proxy (p50) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (ti, t) in TOPOLOGIES.iter().enumerate().skip(1).take(2) {
        let none = pt(ti, "no proxy", 64).map_or(f64::NAN, |r| r.rtt.p50);
        for (m, _) in modes(t) {
            let Some(r) = pt(ti, m, 64) else { continue };
            let b = raw_of(ti, 64);
            println!(
                "| {} | {m} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:+.1} % |",
                t.name,
                r.rtt.p50,
                r.rtt.p99,
                b.p50,
                b.p99,
                r.rtt.p50 / b.p50,
                r.rtt.p99 / b.p99,
                (r.rtt.p50 / none - 1.0) * 100.0
            );
        }
    }
    println!("\n### Table 4: one-way components, 64 B, p50 (µs)\n");
    println!("| topology | proxy | publish call (Δpubcpu) | ping one way (source stamp → echo callback) | echo callback → pong stamp (Δsubcpu) | pong one way | RTT |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (ti, t) in TOPOLOGIES.iter().enumerate() {
        for (m, _) in modes(t) {
            let Some(r) = pt(ti, m, 64) else { continue };
            println!(
                "| {} | {m} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                t.name, r.publish.p50, r.ping_oneway.p50, r.echo.p50, r.pong_oneway.p50, r.rtt.p50
            );
        }
    }
    println!("\n### Fig. 6–9: round trip vs message size (µs, p50 / p99; ratio = p50 / raw relays' p50)\n");
    for (ti, t) in TOPOLOGIES.iter().enumerate() {
        println!("{} — {}:\n", t.figure, t.name);
        let ms = modes(t);
        let mut head = "| size | raw TCP relays |".to_owned();
        let mut line = "|---:|---:|".to_owned();
        for (m, _) in &ms {
            head.push_str(&format!(" {m} | ratio |"));
            line.push_str("---:|---:|");
        }
        println!("{head}\n{line}");
        for &s in sizes {
            let b = raw_of(ti, s);
            let mut row = format!("| {s} | {:.1} / {:.1} |", b.p50, b.p99);
            for (m, _) in &ms {
                match pt(ti, m, s) {
                    Some(r) => row.push_str(&format!(
                        " {:.1} / {:.1} | {:.2} |",
                        r.rtt.p50,
                        r.rtt.p99,
                        r.rtt.p50 / b.p50
                    )),
                    None => row.push_str(" – | – |"),
                }
            }
            println!("{row}");
        }
        println!();
    }
    println!("### Fig. 10: one-way delay added per router daemon (µs, p50; no proxy)\n");
    println!("| size | 1 router: tagwire | 1 router: raw relay | ratio | 2 routers: tagwire per router | raw per relay | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &s in sizes {
        let base = pt(1, "no proxy", s).map_or(f64::NAN, |r| r.rtt.p50);
        let (r1, r2) = (
            pt(2, "no proxy", s).map_or(f64::NAN, |r| r.rtt.p50),
            pt(3, "no proxy", s).map_or(f64::NAN, |r| r.rtt.p50),
        );
        let rb = raw_of(1, s).p50;
        let (h1, h2) = ((r1 - base) / 2.0, (r2 - base) / 4.0);
        let (g1, g2) = ((raw_of(2, s).p50 - rb) / 2.0, (raw_of(3, s).p50 - rb) / 4.0);
        println!(
            "| {s} | {h1:.1} | {g1:.1} | {:.2} | {h2:.1} | {g2:.1} | {:.2} |",
            h1 / g1,
            h2 / g2
        );
    }
    println!("\n### Fig. 11: round trip across a 10 Mbit/s router egress under a UDP flood (µs)\n");
    println!("| case | size | RTT p50 | RTT p99 | p99 / unloaded p99 | lost |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (case, r) in f11 {
        let un = f11
            .iter()
            .find(|(c, u)| *c == "unloaded" && u.size == r.size)
            .map_or(f64::NAN, |(_, u)| u.rtt.p99);
        println!(
            "| {case} | {} | {:.1} | {:.1} | {:.2} | {} |",
            r.size,
            r.rtt.p50,
            r.rtt.p99,
            r.rtt.p99 / un,
            r.lost
        );
    }
    println!("\n### Pull of the latest sample vs a 64 B round trip (one daemon, same run)\n");
    println!(
        "pull p50 {:.1} µs, p99 {:.1} µs; round trip p50 {:.1} µs, p99 {:.1} µs; ratio p50 {:.2}, p99 {:.2}",
        pull["pull_p50_us"].as_f64().unwrap_or(f64::NAN),
        pull["pull_p99_us"].as_f64().unwrap_or(f64::NAN),
        pull["rtt_p50_us"].as_f64().unwrap_or(f64::NAN),
        pull["rtt_p99_us"].as_f64().unwrap_or(f64::NAN),
        pull["ratio_p50"].as_f64().unwrap_or(f64::NAN),
        pull["ratio_p99"].as_f64().unwrap_or(f64::NAN),
    );
    println!("\n### Tables 1 and 2: bytes per link and CPU per process per proxy place\n");
    println!("| case | sent | received | d0→r2 events / KB | r2→d1 events / KB | CPU d0 (pub node) | CPU r2 (proxy node) | CPU d1 (sub node) | CPU publisher | CPU subscriber |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for l in loads {
        let pct = |c: f64| c / l.seconds * 100.0;
        println!(
            "| {} | {} | {:?} | {} / {:.0} | {} / {:.0} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            l.label,
            l.sent,
            l.received,
            l.events.0,
            l.bytes.0 as f64 / 1e3,
            l.events.1,
            l.bytes.1 as f64 / 1e3,
            pct(l.cpu[0]),
            pct(l.cpu[1]),
            pct(l.cpu[2]),
            pct(l.cpu[3]),
            pct(l.cpu[4]),
        );
    }
}

// ---------------------------------------------------------------- SVG

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#7f7f7f", "#9467bd",
];

/// One line chart panel: x = size index (log spaced), y linear from 0.
fn panel(
    out: &mut String,
    y0: f64,
    title: &str,
    ylabel: &str,
    sizes: &[usize],
    series: &[(String, Vec<f64>, bool)],
) {
    let (w, h, pad) = (760.0, 260.0, 60.0);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter())
        .copied()
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.1;
    let n = sizes.len().max(2) as f64 - 1.0;
    let x = |i: usize| pad + i as f64 / n * (w - 2.5 * pad);
    let y = |v: f64| y0 + h - pad + 10.0 - v / ymax * (h - 1.5 * pad);
    out.push_str(&format!(
        "<text x='{pad}' y='{}' font-weight='bold'>{title}</text>\n",
        y0 + 18.0
    ));
    out.push_str(&format!(
        "<line x1='{pad}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{pad}' y1='{}' x2='{pad}' y2='{}' stroke='black'/>\n",
        y(0.0), w - 1.5 * pad, y(0.0), y(0.0), y(ymax)
    ));
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='end'>{v:.0}</text>\n",
            pad - 5.0,
            y(v) + 4.0
        ));
    }
    out.push_str(&format!(
        "<text x='12' y='{}' transform='rotate(-90 12 {})' text-anchor='middle'>{ylabel}</text>\n",
        y(ymax / 2.0),
        y(ymax / 2.0)
    ));
    for (i, s) in sizes.iter().enumerate() {
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='middle'>{s}</text>\n",
            x(i),
            y(0.0) + 15.0
        ));
    }
    out.push_str(&format!(
        "<text x='{}' y='{}' text-anchor='middle'>message size (bytes)</text>\n",
        (w - pad) / 2.0,
        y(0.0) + 30.0
    ));
    for (k, (name, vals, dashed)) in series.iter().enumerate() {
        let pts: Vec<String> = vals
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let dash = if *dashed {
            " stroke-dasharray='4 3'"
        } else {
            ""
        };
        let c = COLORS[k % COLORS.len()];
        out.push_str(&format!(
            "<polyline points='{}' fill='none' stroke='{c}' stroke-width='2'{dash}/>\n",
            pts.join(" ")
        ));
        out.push_str(&format!(
            "<text x='{}' y='{}' fill='{c}'>{name}</text>\n",
            w - 1.4 * pad - 150.0,
            y0 + 40.0 + 15.0 * k as f64
        ));
    }
}

fn svg_doc(panels: usize) -> String {
    format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='760' height='{}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n",
        panels as f64 * 275.0
    )
}

fn svgs(
    dir: &Path,
    points: &[Point],
    raw: &[(usize, usize, Q)],
    sizes: &[usize],
    f11: &[(&'static str, PingResult)],
) {
    let pt = |t: usize, m: &str, s: usize| {
        points
            .iter()
            .find(|p| p.topo == t && p.mode == m && p.r.size == s)
            .map_or(f64::NAN, |p| p.r.rtt.p50)
    };
    let raw_of = |t: usize, s: usize| {
        raw.iter()
            .find(|r| r.0 == t && r.1 == s)
            .map_or(f64::NAN, |r| r.2.p50)
    };
    // Fig. 6–9: one panel per topology.
    let mut out = svg_doc(TOPOLOGIES.len());
    for (ti, t) in TOPOLOGIES.iter().enumerate() {
        let mut series: Vec<(String, Vec<f64>, bool)> = modes(t)
            .iter()
            .map(|(m, _)| {
                (
                    (*m).to_owned(),
                    sizes.iter().map(|&s| pt(ti, m, s)).collect(),
                    false,
                )
            })
            .collect();
        series.push((
            "raw TCP relays".into(),
            sizes.iter().map(|&s| raw_of(ti, s)).collect(),
            true,
        ));
        panel(
            &mut out,
            ti as f64 * 275.0,
            &format!("{}: round trip p50, {}", t.figure, t.name),
            "µs",
            sizes,
            &series,
        );
    }
    out.push_str("</svg>\n");
    write(dir, "pushpull-fig6-9.svg", &out);
    // Fig. 10: per router daemon, one way.
    let per_hop = |t: usize, div: f64, f: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
        sizes.iter().map(|&s| (f(t, s) - f(1, s)) / div).collect()
    };
    let tw = |t: usize, s: usize| pt(t, "no proxy", s);
    let series = vec![
        ("1 router (tagwire)".to_owned(), per_hop(2, 2.0, &tw), false),
        (
            "2 routers, per router (tagwire)".to_owned(),
            per_hop(3, 4.0, &tw),
            false,
        ),
        ("1 raw relay".to_owned(), per_hop(2, 2.0, &raw_of), true),
        (
            "2 raw relays, per relay".to_owned(),
            per_hop(3, 4.0, &raw_of),
            true,
        ),
    ];
    let mut out = svg_doc(1);
    panel(
        &mut out,
        0.0,
        "Fig. 10: one-way delay added per router daemon, p50",
        "µs",
        sizes,
        &series,
    );
    out.push_str("</svg>\n");
    write(dir, "pushpull-fig10.svg", &out);
    // Fig. 11.
    let sizes11: Vec<usize> = {
        let mut v: Vec<usize> = f11.iter().map(|(_, r)| r.size).collect();
        v.dedup();
        v.sort_unstable();
        v.dedup();
        v
    };
    let mut series = Vec::new();
    for case in [
        "unloaded",
        "loaded, no reservation",
        "loaded, reserve=4mbit",
    ] {
        for (pick, dashed, what) in [
            (
                (|r: &PingResult| r.rtt.p50) as fn(&PingResult) -> f64,
                false,
                "p50",
            ),
            (|r: &PingResult| r.rtt.p99, true, "p99"),
        ] {
            series.push((
                format!("{case} {what}"),
                sizes11
                    .iter()
                    .map(|&s| {
                        f11.iter()
                            .find(|(c, r)| *c == case && r.size == s)
                            .map_or(f64::NAN, |(_, r)| pick(r) / 1e3)
                    })
                    .collect(),
                dashed,
            ));
        }
    }
    let mut out = svg_doc(1);
    panel(
        &mut out,
        0.0,
        "Fig. 11: round trip across a 10 Mbit/s router egress under a UDP flood",
        "ms",
        &sizes11,
        &series,
    );
    out.push_str("</svg>\n");
    write(dir, "pushpull-fig11.svg", &out);
}

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    eprintln!("wrote {}", p.display());
}

// ---------------------------------------------------------------- smoke

/// `--smoke`: on loopback, in this process: a chain of three routers, an
/// echo on the last with each proxy place, a few round trips each; fails
/// if any place delivers nothing. No root, a few seconds.
fn smoke() {
    use tagwire::router::{FederationConfig, Router, RouterConfig};
    let mut handles = Vec::new();
    let mut urls: Vec<String> = Vec::new();
    for name in ["d0", "r2", "d1"] {
        let h = Router::start(RouterConfig {
            name: name.into(),
            tcp: "127.0.0.1:0".parse().ok(),
            unix: None,
            federation: FederationConfig {
                peers: urls.last().cloned().into_iter().collect(),
                gossip_enabled: false,
                ..FederationConfig::default()
            },
            ..RouterConfig::default()
        })
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
        urls.push(format!("tcp://{}", h.tcp_addr().expect("tcp")));
        handles.push(h);
    }
    let t = TOPOLOGIES[2];
    for (k, (mode, qos)) in modes(&t).into_iter().enumerate() {
        let echo = Session::connect(&urls[2]).expect("echo session");
        let ep = echo
            .declare_publisher(&format!("/pp/echo{k}"))
            .expect("echo publisher");
        let mut b = echo.subscribe(PING);
        for (k, v) in &qos {
            b = b.qos(k, v);
        }
        let _sub = b
            .callback(move |s| {
                let _ = ep.publish(PONG, s.payload());
            })
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let pinger = Session::connect(&urls[0]).expect("ping session");
        let p = pinger
            .declare_publisher(&format!("/pp/pinger{k}"))
            .expect("publisher");
        let pongs = pinger.subscribe(PONG).receiver().expect("pongs");
        let start = Instant::now();
        let mut got = 0;
        while got < 3 {
            p.publish(PING, "ping").expect("publish");
            if pongs
                .recv_timeout(Duration::from_millis(100))
                .expect("recv")
                .is_some()
            {
                got += 1;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{mode}: no pong in 20 s"
            );
        }
        println!("smoke: {mode}: round trips through d0 → r2 → d1 and back");
    }
}

// ---------------------------------------------------------------- main

fn main() {
    if std::env::args().any(|a| a == "--smoke") {
        smoke();
        return;
    }
    let server = arg("--server").unwrap_or_default();
    let size: usize = arg("--size").and_then(|s| s.parse().ok()).unwrap_or(64);
    let pings: usize = arg("--pings").and_then(|s| s.parse().ok()).unwrap_or(300);
    let gap = Duration::from_micros(arg("--gap-us").and_then(|s| s.parse().ok()).unwrap_or(300));
    let ping_tag = arg("--ping-tag").unwrap_or_else(|| PING.into());
    let pong_tag = arg("--pong-tag").unwrap_or_else(|| PONG.into());
    match arg("--role").as_deref() {
        Some("echo") => {
            return role_echo(
                &server,
                &parse_qos(&arg("--qos").unwrap_or_default()),
                &ping_tag,
                &pong_tag,
            )
        }
        Some("ping") => {
            let scale = arg("--scale").and_then(|s| s.parse().ok()).unwrap_or(1);
            return role_ping(&server, (&ping_tag, &pong_tag), size, pings, gap, scale);
        }
        Some("source") => {
            let rate = arg("--rate").and_then(|s| s.parse().ok()).unwrap_or(2000.0);
            let secs = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(3.0);
            let tag = arg("--tag").unwrap_or_else(|| "/pp/stream/x".into());
            return role_source(&server, &tag, size, rate, secs);
        }
        Some("sink") => {
            let subs: Vec<_> = args_all("--sub-qos").iter().map(|s| parse_qos(s)).collect();
            let secs = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(5.0);
            let pattern = arg("--pattern").unwrap_or_else(|| "/pp/stream/*".into());
            return role_sink(&server, &pattern, &subs, secs);
        }
        Some("reserve") => {
            return role_reserve(
                &server,
                &arg("--band").unwrap_or_else(|| "normal".into()),
                &arg("--rate").unwrap_or_else(|| "1mbit".into()),
            )
        }
        Some(other) => panic!("unknown --role {other}"),
        None => {}
    }
    let bin = PathBuf::from(arg("--bin").unwrap_or_else(|| "target/release".into()));
    for b in ["tagwired", "tagwire"] {
        assert!(
            bin.join(b).is_file(),
            "{} is missing: build with `cargo build --release -p tagwire-cli`",
            bin.join(b).display()
        );
    }
    // `--only lan`: Tables 1 and 2 on a LAN segment, unicast links against
    // `[[multicast]]` (its own namespaces, not the routed testbed).
    if arg("--only").as_deref() == Some("lan") {
        let rate: f64 = arg("--rate").and_then(|s| s.parse().ok()).unwrap_or(4000.0);
        let secs: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(3.0);
        let size: usize = arg("--size").and_then(|s| s.parse().ok()).unwrap_or(1024);
        let rounds: usize = arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(3);
        let started = Instant::now();
        let rows = lan_tables(&bin, rate, secs, size, rounds);
        lan_report(&rows, rate, secs, size);
        println!(
            "\nload average {}; {:.0} s in all",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim(),
            started.elapsed().as_secs_f64()
        );
        return;
    }
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "64,256,1024,4096,16384,65536".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let sizes11: Vec<usize> = arg("--sizes11")
        .unwrap_or_else(|| "64,1024".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let tb = Testbed::new(TestbedConfig {
        hosts: HOSTS,
        bottleneck: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let ctx = Ctx {
        tb: &tb,
        bin: &bin,
        pings,
        rounds: arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(3),
        gap,
    };
    let started = Instant::now();
    // `--only fig11` (or rtt, pull, tables): one part alone, for a quick look.
    let only = arg("--only");
    let part = |p: &str| only.as_deref().is_none_or(|o| o == p);
    let (points, raw) = if part("rtt") {
        round_trips(&ctx, dir.path(), &sizes)
    } else {
        Default::default()
    };
    let pull = if part("pull") {
        eprintln!("== pull vs round trip");
        pull_bench(&ctx, dir.path())
    } else {
        serde_json::Value::Null
    };
    let loads = if part("tables") {
        eprintln!("== Tables 1 and 2");
        loads(&ctx, dir.path(), 4000.0, 4.0, 1024)
    } else {
        Vec::new()
    };
    let f11 = if part("fig11") {
        eprintln!("== Fig. 11");
        let threads = arg("--flood-threads")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        fig11(&ctx, dir.path(), &sizes11, threads)
    } else {
        Vec::new()
    };
    report(&points, &raw, &sizes, &pull, &loads, &f11);
    println!(
        "\n{} pings per point, {} µs apart; load average {}; {:.0} s in all",
        pings,
        gap.as_micros(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
        started.elapsed().as_secs_f64()
    );
    if let Some(d) = arg("--svg-dir") {
        svgs(Path::new(&d), &points, &raw, &sizes, &f11);
    }
}

#[cfg(test)]
mod tests {
    /// `cargo test --manifest-path experiments/Cargo.toml --bin
    /// pushpull_proxies`: the experiment's ping/echo path and proxy QoS work
    /// end to end, on loopback, without root.
    #[test]
    fn every_proxy_place_round_trips_through_a_chain_of_three_daemons() {
        super::smoke();
    }
}

// ------------------------------------------- Table 2 under multicast, on a LAN

/// One Ethernet segment of network namespaces for `--only lan`: a bridge in
/// its own namespace and hosts joined to it by veth pairs (`eth0`, address
/// `10.205.0.(i+1)/24`, multicast on). The routed testbed has one subnet
/// per host, and IP multicast needs a segment. Names start `twtb-` so that
/// `scripts/netns.sh down --all` removes what a killed run left; removed on
/// drop (processes still in its namespaces are killed first).
struct Lan {
    bridge: String,
    hosts: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run ip (apt-get install -y iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {} (needs root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    fn new(n: usize) -> Lan {
        let tag = std::process::id();
        let lan = Lan {
            bridge: format!("twtb-pp{tag}-br"),
            hosts: (0..n).map(|i| format!("twtb-pp{tag}-h{i}")).collect(),
        };
        ip(&["netns", "add", &lan.bridge]);
        ip(&["-n", &lan.bridge, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &lan.bridge, "link", "set", "br0", "up"]);
        for (i, h) in lan.hosts.iter().enumerate() {
            ip(&["netns", "add", h]);
            let port = format!("p{i}");
            ip(&[
                "link",
                "add",
                "eth0",
                "netns",
                h,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &lan.bridge,
            ]);
            ip(&["-n", &lan.bridge, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &lan.bridge, "link", "set", &port, "up"]);
            let a = format!("{}/24", Lan::addr(i));
            ip(&["-n", h, "addr", "add", &a, "dev", "eth0"]);
            ip(&["-n", h, "link", "set", "eth0", "up", "multicast", "on"]);
            ip(&["-n", h, "link", "set", "lo", "up"]);
            ip(&["-n", h, "route", "add", "224.0.0.0/4", "dev", "eth0"]);
        }
        lan
    }

    fn addr(i: usize) -> String {
        format!("10.205.0.{}", i + 1)
    }

    fn url(i: usize) -> String {
        format!("tcp://{}:{PORT}", Lan::addr(i))
    }

    /// `cmd` (program, arguments, environment) to run in host `i`.
    fn cmd(&self, i: usize, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.hosts[i]])
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

    /// Host `i`'s `eth0` counters: bytes received and sent.
    fn link(&self, i: usize) -> LinkCount {
        let out = Command::new("ip")
            .args([
                "-n",
                &self.hosts[i],
                "-s",
                "-j",
                "link",
                "show",
                "dev",
                "eth0",
            ])
            .output()
            .expect("ip -s link");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let s = &v[0]["stats64"];
        let n = |d: &str, k: &str| s[d][k].as_u64().unwrap_or(0);
        LinkCount {
            rx_bytes: n("rx", "bytes"),
            tx_bytes: n("tx", "bytes"),
        }
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for n in self.hosts.iter().chain(std::iter::once(&self.bridge)) {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", n]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).output();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// A host link's counters (`ip -s link`, the veth's own: what crossed the
/// host's wire to the switch, every protocol included).
#[derive(Debug, Clone, Copy, Default)]
struct LinkCount {
    rx_bytes: u64,
    tx_bytes: u64,
}

impl LinkCount {
    fn since(self, b: LinkCount) -> LinkCount {
        LinkCount {
            rx_bytes: self.rx_bytes - b.rx_bytes,
            tx_bytes: self.tx_bytes - b.tx_bytes,
        }
    }
}

/// A child process killed (and reaped) on drop; stdout and stderr go to
/// files.
struct Kid {
    child: std::process::Child,
    out: PathBuf,
    err: PathBuf,
}

impl Kid {
    fn spawn(lan: &Lan, host: usize, cmd: &Command, dir: &Path, name: &str) -> Kid {
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        let child = lan
            .cmd(host, cmd)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Kid { child, out, err }
    }

    fn id(&self) -> u32 {
        self.child.id()
    }

    fn wait_stderr(&self, needle: &str, what: &str) {
        let start = Instant::now();
        loop {
            let t = std::fs::read_to_string(&self.err).unwrap_or_default();
            if t.contains(needle) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{what} not ready: {t}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit (at most `limit`), returns stdout as JSON.
    fn finish(mut self, limit: Duration) -> serde_json::Value {
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            assert!(start.elapsed() < limit, "child did not exit in {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_default()
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The LAN's daemons: host 0 the publisher's `d0`, host 2 the intermediate
/// `r2` (dials d0), hosts 1 and 3 the subscribers' `d1`, `d3` (dial r2).
const LAN_DAEMONS: [(usize, &str, Option<usize>); 4] = [
    (0, "d0", None),
    (2, "r2", Some(0)),
    (1, "d1", Some(2)),
    (3, "d3", Some(2)),
];
/// The group of `--only lan`'s multicast runs.
const LAN_GROUP: &str = "239.78.0.1:7800";

fn lan_list(lan: &Lan, bin: &Path, host: usize, links: bool) -> serde_json::Value {
    let args: &[&str] = if links {
        &["list", "--links", "--json"]
    } else {
        &["list", "--json"]
    };
    let mut c = lan.cmd(host, &tagwire_cli(bin, &Lan::url(host), args));
    match c.output() {
        Ok(out) => serde_json::from_slice(&out.stdout).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    }
}

/// Starts the four daemons (with `[[multicast]]` for `/pp/stream/**` when
/// `mcast`), waits until each knows all four and its links are up, and,
/// with multicast, until each lists the other three as live members.
fn lan_start(lan: &Lan, bin: &Path, dir: &Path, mcast: bool) -> Vec<Kid> {
    let mut out = Vec::new();
    for (h, name, peer) in LAN_DAEMONS {
        let extra = if mcast {
            format!(
                "[[multicast]]\ngroup = \"{LAN_GROUP}\"\ntags = [\"/pp/stream/**\"]\ninterface = \"{}\"\n",
                Lan::addr(h)
            )
        } else {
            String::new()
        };
        let cfg = write_config(dir, name, peer.map(Lan::url), &extra);
        let mut c = Command::new(bin.join("tagwired"));
        c.args(["--tcp", &format!("{}:{PORT}", Lan::addr(h)), "--no-unix"])
            .args(["--name", name])
            .arg("--config")
            .arg(&cfg)
            .env("XDG_RUNTIME_DIR", dir)
            .env("RUST_LOG", "warn,tagwire_router=info");
        let kid = Kid::spawn(lan, h, &c, dir, name);
        kid.wait_stderr("band normal: listening", name);
        out.push(kid);
    }
    let start = Instant::now();
    for (h, name, _) in LAN_DAEMONS {
        let want_links = if h == 2 { 3 } else { 1 };
        loop {
            let v = lan_list(lan, bin, h, true);
            let known = v["daemons"].as_u64().unwrap_or(0);
            let links = v["links"].as_array().map_or(0, Vec::len);
            let members = if mcast {
                lan_list(lan, bin, h, false)["multicast"][0]["members"]
                    .as_array()
                    .map_or(0, Vec::len)
            } else {
                3
            };
            if known >= 4 && links >= want_links && members >= 3 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(40),
                "{name} not ready (daemons {known}, links {links}, members {members}): {v}"
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    out
}

/// One measured case of `--only lan`.
#[derive(Debug, Clone)]
struct LanRow {
    mcast: bool,
    place: &'static str,
    round: usize,
    sent: u64,
    /// Received, delay p50, delay p99 (µs) at d1's and d3's subscriber.
    sub: [(u64, f64, f64); 2],
    /// eth0 of hosts 0..4 (d0, d1, r2, d3).
    links: [LinkCount; 4],
    /// CPU seconds: d0, r2, d1, d3, source, the two sinks together.
    cpu: [f64; 6],
    /// Group datagrams: d0 sent; lost at r2, d1, d3.
    group_sent: u64,
    group_lost: u64,
    seconds: f64,
}

/// The proxy places of `--only lan`: d1's subscriber scales by 2 and d3's
/// by 3 (the paper's Table 2: subscribers with different factors), or both
/// take every event.
const LAN_PLACES: [(&str, &str, &str); 4] = [
    ("no proxy (every event)", "", ""),
    ("at subscriber", "scale=2", "scale=3"),
    (
        "at publisher",
        "scale=2,proxy=at_publisher",
        "scale=3,proxy=at_publisher",
    ),
    (
        "on intermediate node r2",
        "scale=2,proxy=node:r2",
        "scale=3,proxy=node:r2",
    ),
];

fn group_count(v: &serde_json::Value, what: &str) -> u64 {
    v["multicast"][0][what].as_u64().unwrap_or(0)
}

/// Tables 1 and 2 on a LAN: every proxy place over unicast links and with
/// `[[multicast]]` on all four daemons, `rounds` times (transports
/// interleaved per round); a stream of `rate` events/s of `size` bytes for
/// `seconds` from host 0.
fn lan_tables(bin: &Path, rate: f64, seconds: f64, size: usize, rounds: usize) -> Vec<LanRow> {
    let lan = Lan::new(4);
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let mut rows = Vec::new();
    let mut case = 0usize;
    for round in 1..=rounds {
        for mcast in [false, true] {
            eprintln!(
                "== round {round}: {}",
                if mcast { "multicast" } else { "unicast" }
            );
            let daemons = lan_start(&lan, bin, dir, mcast);
            let pids: Vec<u32> = daemons.iter().map(Kid::id).collect();
            for (place, q1, q3) in LAN_PLACES {
                case += 1;
                let tag = format!("/pp/stream/c{case}");
                let sink = |host: usize, qos: &str| {
                    let mut c = role_cmd("sink");
                    c.args(["--server", &Lan::url(host)])
                        .args(["--pattern", &format!("{tag}/*")])
                        .args(["--seconds", &(seconds + 4.0).to_string()])
                        .args(["--sub-qos", qos]);
                    let k = Kid::spawn(&lan, host, &c, dir, &format!("sink{case}-{host}"));
                    k.wait_stderr("sink ready", "sink");
                    k
                };
                let s1 = sink(1, q1);
                let s3 = sink(3, q3);
                // The interest crosses two links (a LAN: milliseconds).
                std::thread::sleep(Duration::from_millis(800));
                let g0 = [0, 2, 1, 3].map(|h| lan_list(&lan, bin, h, false));
                let l0 = [0, 1, 2, 3].map(|h| lan.link(h));
                let c0: Vec<f64> = pids.iter().map(|&p| cpu_secs(p)).collect();
                let k0 = cpu_secs(s1.id()) + cpu_secs(s3.id());
                let mut c = role_cmd("source");
                c.args(["--server", &Lan::url(0)])
                    .args(["--tag", &format!("{tag}/x")])
                    .args(["--size", &size.to_string()])
                    .args(["--rate", &rate.to_string()])
                    .args(["--seconds", &seconds.to_string()]);
                let t0 = Instant::now();
                let mut src = Kid::spawn(&lan, 0, &c, dir, &format!("source{case}"));
                let mut src_cpu = 0.0;
                while src.child.try_wait().ok().flatten().is_none() {
                    let c = cpu_secs(src.id());
                    if c.is_finite() {
                        src_cpu = c;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    assert!(t0.elapsed() < Duration::from_secs(120), "source hung");
                }
                let elapsed = t0.elapsed().as_secs_f64();
                std::thread::sleep(Duration::from_millis(300));
                let l1 = [0, 1, 2, 3].map(|h| lan.link(h));
                let c1: Vec<f64> = pids.iter().map(|&p| cpu_secs(p)).collect();
                let k1 = cpu_secs(s1.id()) + cpu_secs(s3.id());
                let g1 = [0, 2, 1, 3].map(|h| lan_list(&lan, bin, h, false));
                let sent = src.finish(Duration::from_secs(5))["sent"]
                    .as_u64()
                    .unwrap_or(0);
                let r = |k: Kid| {
                    let v = k.finish(Duration::from_secs(30));
                    (
                        v["received"][0].as_u64().unwrap_or(0),
                        v["delay_p50_us"][0].as_f64().unwrap_or(f64::NAN),
                        v["delay_p99_us"][0].as_f64().unwrap_or(f64::NAN),
                    )
                };
                let sub = [r(s1), r(s3)];
                let lost: u64 = (1..4)
                    .map(|i| group_count(&g1[i], "lost") - group_count(&g0[i], "lost"))
                    .sum();
                let row = LanRow {
                    mcast,
                    place,
                    round,
                    sent,
                    sub,
                    links: [0, 1, 2, 3].map(|h| l1[h].since(l0[h])),
                    cpu: [
                        c1[0] - c0[0],
                        c1[1] - c0[1],
                        c1[2] - c0[2],
                        c1[3] - c0[3],
                        src_cpu,
                        k1 - k0,
                    ],
                    group_sent: group_count(&g1[0], "sent") - group_count(&g0[0], "sent"),
                    group_lost: lost,
                    seconds: elapsed,
                };
                eprintln!("   {row:?}");
                rows.push(row);
            }
            drop(daemons);
        }
    }
    rows
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// "median (min–max)" of `f` over the rows of one transport and place.
fn spread(rows: &[&LanRow], f: impl Fn(&LanRow) -> f64, digits: usize) -> String {
    let v: Vec<f64> = rows.iter().map(|r| f(r)).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() < 2 {
        return format!("{:.*}", digits, median(v));
    }
    format!(
        "{:.*} ({:.*}–{:.*})",
        digits,
        median(v),
        digits,
        lo,
        digits,
        hi
    )
}

/// The paper's Table 1 (unicast) and Table 2 (multicast) entries, CPU load
/// / network bandwidth, for (node, place).
fn paper_entry(node: usize, place: &str, mcast: bool) -> &'static str {
    match (node, place, mcast) {
        (_, p, _) if p.starts_with("no proxy") => "—",
        (0, "on intermediate node r2", false) => "High / High",
        (0, "on intermediate node r2", true) => "Low / Low",
        (0, "at publisher", false) => "Low / Low",
        (0, "at publisher", true) => "High / High",
        (0, "at subscriber", false) => "High / High",
        (0, "at subscriber", true) => "Low / Low",
        (1, "on intermediate node r2", _) => "Low / Low (delay Medium)",
        (1, "at publisher", _) => "Low / Low (delay High)",
        (1, "at subscriber", _) => "High / High (delay Low)",
        (2, "on intermediate node r2", _) => "High / Medium",
        _ => "—",
    }
}

fn lan_report(rows: &[LanRow], rate: f64, seconds: f64, size: usize) {
    println!(
        "\n### Tables 1 and 2 on a LAN: unicast links against `[[multicast]]`, per proxy place\n"
    );
    println!(
        "{} events/s of {size} B for {seconds} s from host 0; d1's subscriber `scale=2`, d3's `scale=3` \
         (both every event without a proxy). Bytes: the host's `eth0` (`ip -s link`), received + sent, MB. \
         CPU: % of one CPU over the stream. Delay: source stamp → subscriber callback, µs. \
         Each cell: median (min–max) over {} rounds.\n",
        rate,
        rows.iter().map(|r| r.round).max().unwrap_or(0)
    );
    println!("| transport | proxy place | host 0 (d0, pub) tx / rx MB | host 2 (r2) rx / tx MB | host 1 (d1) rx MB | host 3 (d3) rx MB | CPU d0 | CPU r2 | CPU d1 | CPU d3 | CPU publisher | CPU 2 subscribers | received d1 / d3 of sent | delay p50 d1 / d3 | delay p99 d1 / d3 | group datagrams sent / lost |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|");
    for mcast in [false, true] {
        for (place, _, _) in LAN_PLACES {
            let rs: Vec<&LanRow> = rows
                .iter()
                .filter(|r| r.mcast == mcast && r.place == place)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let mb = |b: u64| b as f64 / 1e6;
            let pct = |i: usize| move |r: &LanRow| r.cpu[i] / r.seconds * 100.0;
            let recv: Vec<String> = rs
                .iter()
                .map(|r| format!("{} / {} of {}", r.sub[0].0, r.sub[1].0, r.sent))
                .collect();
            println!(
                "| {} | {} | {} / {} | {} / {} | {} | {} | {} % | {} % | {} % | {} % | {} % | {} % | {} | {} / {} | {} / {} | {} / {} |",
                if mcast { "multicast" } else { "unicast" },
                place,
                spread(&rs, |r| mb(r.links[0].tx_bytes), 1),
                spread(&rs, |r| mb(r.links[0].rx_bytes), 1),
                spread(&rs, |r| mb(r.links[2].rx_bytes), 1),
                spread(&rs, |r| mb(r.links[2].tx_bytes), 1),
                spread(&rs, |r| mb(r.links[1].rx_bytes), 1),
                spread(&rs, |r| mb(r.links[3].rx_bytes), 1),
                spread(&rs, pct(0), 1),
                spread(&rs, pct(1), 1),
                spread(&rs, pct(2), 1),
                spread(&rs, pct(3), 1),
                spread(&rs, pct(4), 1),
                spread(&rs, pct(5), 1),
                recv.join("; "),
                spread(&rs, |r| r.sub[0].1, 0),
                spread(&rs, |r| r.sub[1].1, 0),
                spread(&rs, |r| r.sub[0].2, 0),
                spread(&rs, |r| r.sub[1].2, 0),
                spread(&rs, |r| r.group_sent as f64, 0),
                spread(&rs, |r| r.group_lost as f64, 0),
            );
        }
    }
    println!("\n### Beside the paper's Tables 1 and 2 (CPU load / network bandwidth)\n");
    println!("Ours: the node's daemon's CPU (% of one CPU) / the bytes on the node's link (received + sent, MB); medians.\n");
    println!("| node | proxy place | paper, unicast (Table 1) | ours, unicast | paper, multicast (Table 2) | ours, multicast |");
    println!("|---|---|---|---:|---|---:|");
    // node index in the paper's rows → (daemon's cpu index, link index)
    let nodes = [
        ("publisher node (d0)", 0usize, 0usize),
        ("subscriber node (d1, scale 2)", 2, 1),
        ("proxy node (r2)", 1, 2),
    ];
    for (ni, (node, cpu_i, link_i)) in nodes.iter().enumerate() {
        for (place, _, _) in LAN_PLACES.iter().skip(1) {
            let cell = |mcast: bool| {
                let rs: Vec<&LanRow> = rows
                    .iter()
                    .filter(|r| r.mcast == mcast && r.place == *place)
                    .collect();
                if rs.is_empty() {
                    return "—".to_owned();
                }
                let cpu = median(
                    rs.iter()
                        .map(|r| r.cpu[*cpu_i] / r.seconds * 100.0)
                        .collect(),
                );
                let mb = median(
                    rs.iter()
                        .map(|r| {
                            (r.links[*link_i].rx_bytes + r.links[*link_i].tx_bytes) as f64 / 1e6
                        })
                        .collect(),
                );
                format!("{cpu:.1} % / {mb:.1} MB")
            };
            println!(
                "| {node} | {place} | {} | {} | {} | {} |",
                paper_entry(ni, place, false),
                cell(false),
                paper_entry(ni, place, true),
                cell(true)
            );
        }
    }
}
