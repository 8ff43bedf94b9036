//! `tagwire bench throughput|latency|fanout`: the system benchmark behind
//! BENCHMARKS.md. Every run uses fresh sessions (one connection each) on the
//! same router; `bench/compare.sh` runs the same experiments against a raw
//! TCP relay, nats-server and Zenoh (method: docs/benchmarks.md).
//!
//! - throughput: one publisher sends back-to-back for `--duration`; the rate
//!   is measured at the subscriber from its first to its last event.
//! - latency: ping on /bench/ping, an echo client republishes on
//!   /bench/pong; one event in flight; 1,000 warm-up round trips dropped.
//! - fanout: one publisher, N subscribers; per-subscriber rate.
//! - pull: `Session::pull(tag, Pull::Latest)` in a loop (one pull in
//!   flight) on a tag with `history=1`, for `--duration`, then the latency
//!   round trip above for as long; the ratio of their p50s and p99s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tagwire::{EmbeddedRouter, Session, TlsOptions};

use super::CmdResult;
use crate::cli::{BenchArgs, BenchMode};

const WARMUP_ROUND_TRIPS: u64 = 1000;
const MAX_SIZE: usize = 8 * 1024 * 1024;

/// Makes sessions on the router under test.
struct Target {
    router: Router,
    /// The global `--band`: every session of the run goes to that band's
    /// listener (`None`: the listener's default band; `auto`: each event
    /// on the band of its priority, as for the other commands).
    band: Option<String>,
}

/// The router under test.
enum Router {
    /// A daemon: its URL, TLS settings, and the sessions' `shm` mode.
    Url(String, TlsOptions, tagwire::ShmMode),
    Embedded(EmbeddedRouter),
}

impl Target {
    fn session(&self) -> Result<Session, tagwire::Error> {
        let auto = self.band.as_deref() == Some("auto");
        let s = match &self.router {
            Router::Url(u, tls, shm) => Session::builder()
                .tls(tls.clone())
                .shm(*shm)
                .follow_priority(auto)
                .connect(u)?,
            Router::Embedded(r) => r.session()?,
        };
        self.on_band(s)
    }

    /// `s`, or its session on the run's band.
    fn on_band(&self, s: Session) -> Result<Session, tagwire::Error> {
        match self.band.as_deref() {
            Some(b) if b != "auto" => s.on_band(b),
            _ => Ok(s),
        }
    }

    /// The band the run's sessions use, as reported: the band asked for,
    /// or the daemon's default band.
    fn band_used(&self) -> Result<String, tagwire::Error> {
        match self.band.as_deref() {
            Some(b) => Ok(b.to_owned()),
            None => self.session()?.band_in_use(),
        }
    }
}

pub fn run(server: Option<&str>, band: Option<&str>, tls: &TlsOptions, a: BenchArgs) -> CmdResult {
    if a.mode == crate::cli::BenchMode::Av {
        let daemons = if a.daemons.is_empty() {
            vec![server.unwrap_or("tcp://127.0.0.1:7700").to_owned()]
        } else {
            a.daemons.clone()
        };
        return super::bench_av::run(&daemons, band, &a);
    }
    if a.size > MAX_SIZE {
        return Err(format!(
            "--size {} is over the benchmark's limit of {MAX_SIZE} bytes",
            a.size
        )
        .into());
    }
    if !(a.duration > 0.0 && a.duration <= 3600.0) {
        return Err(format!(
            "--duration {} must be between 0 and 3600 seconds",
            a.duration
        )
        .into());
    }
    if a.subscribers == 0 || a.subscribers > 1000 {
        return Err(format!("--subscribers {} must be 1..=1000", a.subscribers).into());
    }
    let (router, system) = if a.embedded {
        (
            Router::Embedded(EmbeddedRouter::start()?),
            "tagwire-embedded".to_owned(),
        )
    } else {
        let url = match server {
            Some(u) => u.to_owned(),
            None => tagwire::ServerUrl::local_default().to_string(),
        };
        let system = if url.starts_with("unix:") && a.shm {
            "tagwire-shm"
        } else if url.starts_with("unix:") {
            "tagwire-unix"
        } else if url.starts_with("tls:") {
            "tagwire-tls"
        } else if url.starts_with("udp:") {
            "tagwire-udp"
        } else {
            "tagwire-tcp"
        };
        if a.shm && !url.starts_with("unix:") {
            return Err(format!(
                "--shm needs the daemon's Unix socket (unix:///PATH), not {url}: shared memory is for a daemon on this host"
            )
            .into());
        }
        let shm = if a.shm {
            tagwire::ShmMode::Require
        } else {
            tagwire::ShmMode::Off
        };
        (Router::Url(url, tls.clone(), shm), system.to_owned())
    };
    let target = Target {
        router,
        band: band.map(str::to_owned),
    };
    // What the run measures: the band and the transport (the system's
    // suffix: unix, tcp, tls, udp, shm or embedded).
    let band_used = target.band_used()?;
    let transport = system.trim_start_matches("tagwire-").to_owned();
    let reliability: tagwire::Reliability = a.reliability.parse().map_err(|e| {
        format!(
            "--reliability {:?}: {e} (best_effort, reliable, exactly_once, durable)",
            a.reliability
        )
    })?;
    if a.histogram.is_some() && a.mode != BenchMode::Latency {
        return Err(
            "--histogram is for `tagwire bench latency` (the round trips' histogram)".into(),
        );
    }
    let duration = Duration::from_secs_f64(a.duration);
    let result = match a.mode {
        BenchMode::Av => unreachable!("handled above"),
        BenchMode::Throughput => {
            let r = fan_out(&target, a.size, duration, 1, reliability)?;
            let rate = r.per_sub[0];
            serde_json::json!({
                "system": system, "band": band_used, "transport": transport, "mode": "throughput", "size": a.size,
                "msgs_per_sec": rate, "mb_per_sec": rate * a.size as f64 / 1e6,
                "received": r.received[0], "sent": r.sent,
                "reliability": a.reliability, "acknowledged": r.acks.acknowledged, "failed": r.acks.failed,
                "acked_per_sec": r.acks.acknowledged as f64 / r.acked_secs.max(1e-9),
            })
        }
        BenchMode::Fanout => {
            let r = fan_out(&target, a.size, duration, a.subscribers, reliability)?;
            let per_sub = r.per_sub.iter().sum::<f64>() / r.per_sub.len() as f64;
            serde_json::json!({
                "system": system, "band": band_used, "transport": transport, "mode": "fanout", "size": a.size, "subscribers": a.subscribers,
                "per_sub_msgs_per_sec": per_sub, "total_msgs_per_sec": per_sub * a.subscribers as f64,
                "sent": r.sent, "received": r.received,
            })
        }
        BenchMode::Pull => {
            let p = pull_latest(&target, a.size, duration)?;
            let h = latency(&target, None, a.size, duration)?;
            let q = |h: &Histogram<u64>, x: f64| h.value_at_quantile(x) as f64 / 1e3;
            serde_json::json!({
                "system": system, "band": band_used, "transport": transport, "mode": "pull", "size": a.size,
                "pull_p50_us": q(&p, 0.5), "pull_p99_us": q(&p, 0.99), "pulls": p.len(),
                "rtt_p50_us": q(&h, 0.5), "rtt_p99_us": q(&h, 0.99), "samples": h.len(),
                "ratio_p50": q(&p, 0.5) / q(&h, 0.5), "ratio_p99": q(&p, 0.99) / q(&h, 0.99),
            })
        }
        BenchMode::Latency => {
            let h = latency(&target, a.echo_server.as_deref(), a.size, duration)?;
            if let Some(path) = &a.histogram {
                write_histogram(path, &h)?;
            }
            serde_json::json!({
                "system": system, "band": band_used, "transport": transport, "mode": "latency", "size": a.size,
                "rtt_p50_us": h.value_at_quantile(0.5) as f64 / 1e3,
                "rtt_p99_us": h.value_at_quantile(0.99) as f64 / 1e3,
                "samples": h.len(),
            })
        }
    };
    if a.json {
        outln!("{result}");
    } else {
        print_text(&result)?;
    }
    Ok(())
}

/// Writes `h` to `path` as `NANOSECONDS COUNT` lines, one per recorded
/// value, so that runs can be pooled by adding their counts.
fn write_histogram(path: &std::path::Path, h: &Histogram<u64>) -> CmdResult {
    use std::io::Write;
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for v in h.iter_recorded() {
            writeln!(out, "{} {}", v.value_iterated_to(), v.count_at_value())?;
        }
        out.flush()
    };
    write().map_err(|e| format!("--histogram {}: {e}", path.display()).into())
}

fn print_text(r: &serde_json::Value) -> std::io::Result<()> {
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    outln!(
        "band {}, transport {}",
        r["band"].as_str().unwrap_or_default(),
        r["transport"].as_str().unwrap_or_default()
    );
    match r["mode"].as_str() {
        Some("latency") => outln!(
            "{} latency, {} B: RTT p50 {:.1} µs, p99 {:.1} µs ({} round trips)",
            r["system"],
            r["size"],
            f("rtt_p50_us"),
            f("rtt_p99_us"),
            r["samples"]
        ),
        Some("pull") => outln!(
            "{} pull latest, {} B: p50 {:.1} µs, p99 {:.1} µs ({} pulls); round trip p50 {:.1} µs, p99 {:.1} µs; ratio p50 {:.2}, p99 {:.2}",
            r["system"],
            r["size"],
            f("pull_p50_us"),
            f("pull_p99_us"),
            r["pulls"],
            f("rtt_p50_us"),
            f("rtt_p99_us"),
            f("ratio_p50"),
            f("ratio_p99")
        ),
        Some("fanout") => outln!(
            "{} fan-out to {}, {} B: {:.0} msgs/s per subscriber, {:.0} msgs/s in all",
            r["system"],
            r["subscribers"],
            r["size"],
            f("per_sub_msgs_per_sec"),
            f("total_msgs_per_sec")
        ),
        _ => outln!(
            "{} throughput, {} B: {:.0} msgs/s, {:.1} MB/s ({} received of {} sent)",
            r["system"],
            r["size"],
            f("msgs_per_sec"),
            f("mb_per_sec"),
            r["received"],
            r["sent"]
        ),
    }
    Ok(())
}

/// Counts events and the first/last arrival, from a callback.
///
/// Only the subscription's callback writes it, and a callback runs on its
/// session's reader thread, one event at a time: so a count is a load and a
/// store (no locked add per event), and the clock is read for each of the
/// first [`STAMP_ALL`] events and then for every [`STAMP_EVERY`]th. The rate
/// is the events between the first and the last stamped one over the time
/// between them (events after the last stamp count as received, not in the
/// rate): exact, without a clock read per event.
struct Counter {
    base: Instant,
    count: AtomicU64,
    first_ns: AtomicU64,
    /// The arrival of the last stamped event, and its number.
    last_ns: AtomicU64,
    last_count: AtomicU64,
}

/// Events whose arrival is read at every event (a slow run's few events).
const STAMP_ALL: u64 = 4096;
/// After [`STAMP_ALL`], the arrival is read at every this many events.
const STAMP_EVERY: u64 = 64;

impl Counter {
    fn hit(&self) {
        let n = self.count.load(Ordering::Relaxed) + 1;
        self.count.store(n, Ordering::Relaxed);
        if n > STAMP_ALL && !n.is_multiple_of(STAMP_EVERY) {
            return;
        }
        let t = self.base.elapsed().as_nanos() as u64;
        if n == 1 {
            self.first_ns.store(t, Ordering::Relaxed);
        }
        self.last_ns.store(t, Ordering::Relaxed);
        self.last_count.store(n, Ordering::Relaxed);
    }

    fn rate(&self) -> f64 {
        let n = self.last_count.load(Ordering::Relaxed);
        let span = self
            .last_ns
            .load(Ordering::Relaxed)
            .saturating_sub(self.first_ns.load(Ordering::Relaxed));
        if n < 2 || span == 0 {
            return 0.0;
        }
        (n - 1) as f64 / (span as f64 / 1e9)
    }
}

struct FanResult {
    sent: u64,
    /// The publisher's acknowledgements (acknowledged publishing).
    acks: tagwire::AckStats,
    /// From the first publish until every event was answered.
    acked_secs: f64,
    received: Vec<u64>,
    per_sub: Vec<f64>,
}

fn fan_out(
    target: &Target,
    size: usize,
    duration: Duration,
    subscribers: usize,
    reliability: tagwire::Reliability,
) -> Result<FanResult, tagwire::Error> {
    let tag = format!("/bench/{}/data", std::process::id());
    let base = Instant::now();
    let mut keep = Vec::new();
    let mut counters = Vec::new();
    for _ in 0..subscribers {
        let s = target.session()?;
        let c = Arc::new(Counter {
            base,
            count: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            last_count: AtomicU64::new(0),
        });
        let c2 = c.clone();
        let sub = s
            .subscribe(&tag)
            .max_queue_length(65_536)
            .callback(move |_| c2.hit())?;
        keep.push((s, sub));
        counters.push(c);
    }
    let ps = target.session()?;
    let publisher = ps.declare_publisher(&format!("/bench/{}/pub", std::process::id()))?;
    publisher.set_reliability(reliability);
    let payload = tagwire::Bytes::from(vec![0xabu8; size]);
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        if sent.is_multiple_of(256) && start.elapsed() >= duration {
            break;
        }
        publisher.publish(&tag, payload.clone())?;
        sent += 1;
    }
    ps.flush()?;
    if reliability != tagwire::Reliability::BestEffort {
        ps.wait_acknowledged(Duration::from_secs(60))?;
    }
    let acked_secs = start.elapsed().as_secs_f64();
    let acks = ps.ack_stats();
    // Wait for the tail: until everything arrived or counts stop moving.
    let total = |cs: &[Arc<Counter>]| {
        cs.iter()
            .map(|c| c.count.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = total(&counters);
    let mut idle = 0;
    while Instant::now() < deadline && last < sent * subscribers as u64 && idle < 5 {
        std::thread::sleep(Duration::from_millis(100));
        let now = total(&counters);
        idle = if now == last { idle + 1 } else { 0 };
        last = now;
    }
    Ok(FanResult {
        sent,
        acks,
        acked_secs,
        received: counters
            .iter()
            .map(|c| c.count.load(Ordering::Relaxed))
            .collect(),
        per_sub: counters.iter().map(|c| c.rate()).collect(),
    })
}

/// Pulls of the latest event: a tag with `history=1` (set through an admin
/// request, so the session needs the admin right: the daemon's owner), one
/// event of `size` bytes, then one pull in flight for `duration`; the first
/// 1,000 pulls are warm-up.
fn pull_latest(
    target: &Target,
    size: usize,
    duration: Duration,
) -> Result<Histogram<u64>, Box<dyn std::error::Error>> {
    let id = std::process::id();
    let tag = format!("/bench/{id}/pull");
    let s = target.session()?;
    s.set_qos(&[&tag], &[("history", "1")], &[])?;
    let p = s.declare_publisher(&format!("/bench/{id}/puller"))?;
    p.publish(&tag, vec![0x5au8; size])?;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        let t = Instant::now();
        let got = s.pull(&tag, tagwire::Pull::Latest)?;
        let ns = (t.elapsed().as_nanos() as u64).max(1);
        if got.len() != 1 {
            return Err(format!("pull latest answered {} events", got.len()).into());
        }
        n += 1;
        if n > WARMUP_ROUND_TRIPS {
            h.record(ns)?;
        }
    }
    s.set_qos(&[&tag], &[], &["history"])?;
    if h.is_empty() {
        return Err("no pull completed after warm-up; try a longer --duration".into());
    }
    Ok(h)
}

fn latency(
    target: &Target,
    echo: Option<&str>,
    size: usize,
    duration: Duration,
) -> Result<Histogram<u64>, Box<dyn std::error::Error>> {
    let id = std::process::id();
    let (ping_tag, pong_tag) = (format!("/bench/{id}/ping"), format!("/bench/{id}/pong"));
    // Echo client: republishes every ping as a pong, from its callback; on
    // another (linked) daemon with --echo-server, so pings cross the link.
    let echo_session = match echo {
        Some(url) => target.on_band(Session::connect(url)?)?,
        None => target.session()?,
    };
    let echo_pub = Arc::new(echo_session.declare_publisher(&format!("/bench/{id}/echo"))?);
    echo_pub.set_express(true);
    let ep = echo_pub.clone();
    let pong = pong_tag.clone();
    let _echo = echo_session.subscribe(&ping_tag).callback(move |s| {
        let _ = ep.publish(&pong, s.payload());
    })?;
    // Pinger: each pong records a round trip and sends the next ping.
    let ping_session = target.session()?;
    let pinger = Arc::new(ping_session.declare_publisher(&format!("/bench/{id}/pinger"))?);
    pinger.set_express(true);
    let base = Instant::now();
    let sent_at = Arc::new(AtomicU64::new(0));
    let rounds = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(
        1,
        60_000_000_000,
        3,
    )?));
    let payload = tagwire::Bytes::from(vec![0x5au8; size]);
    let (p2, s2, r2, st2, h2, pl2, tag2) = (
        pinger.clone(),
        sent_at.clone(),
        rounds.clone(),
        stop.clone(),
        hist.clone(),
        payload.clone(),
        ping_tag.clone(),
    );
    let _pong_sub = ping_session.subscribe(&pong_tag).callback(move |_| {
        let now = base.elapsed().as_nanos() as u64;
        let rtt = now.saturating_sub(s2.load(Ordering::Relaxed)).max(1);
        if r2.fetch_add(1, Ordering::Relaxed) >= WARMUP_ROUND_TRIPS {
            if let Ok(mut h) = h2.lock() {
                let _ = h.record(rtt);
            }
        }
        if !st2.load(Ordering::Relaxed) {
            s2.store(base.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let _ = p2.publish(&tag2, pl2.clone());
        }
    })?;
    let send_ping = || {
        sent_at.store(base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        pinger.publish(&ping_tag, payload.clone())
    };
    send_ping()?;
    let start = Instant::now();
    let mut seen = 0;
    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(200));
        let r = rounds.load(Ordering::Relaxed);
        if r == seen {
            // A lost ping (e.g. the echo was not subscribed yet): send another.
            send_ping()?;
        }
        seen = r;
    }
    stop.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(50));
    let h = hist.lock().map_err(|_| "histogram lock poisoned")?.clone();
    if h.is_empty() {
        return Err("no round trip completed after warm-up; try a longer --duration".into());
    }
    Ok(h)
}
