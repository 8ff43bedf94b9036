//! TAO's Real-time Notification Service experiments (Gore, Schmidt et al.,
//! §4, Fig. 9–15) run against tagwire's priority bands, for
//! `scripts/lanes-bench.sh`, which builds this, runs it pinned to core 0 and
//! writes the `lanes` section of BENCHMARKS.md and `docs/lanes-*.svg`:
//!
//!   scripts/lanes-bench.sh [--quick] [--no-write] [--redo]
//!   cargo build --release --manifest-path experiments/Cargo.toml --bin lanes
//!   taskset -c 0 experiments/target/release/lanes [--quick] [--only load,paths,overhead]
//!       [--unit-us 100] [--json FILE] [--svg-dir DIR] [--write BENCHMARKS.md]
//!       [--notes FILE] [--command TEXT] [--date TEXT] [--revision TEXT]
//!   experiments/target/release/lanes --from-json FILE [--svg-dir DIR] [--write FILE] [--notes FILE]
//!       (no measuring: the markdown and plots again from an earlier run's `--json`)
//!
//! It prints one line per run (events/s and latency of every path) and then
//! the markdown section; `--write FILE` replaces that section of FILE (between
//! `<!-- BEGIN lanes -->` and `<!-- END lanes -->`). Method:
//! docs/benchmarks.md, "Lanes".
//!
//! Everything runs in this process: an embedded router with the default
//! bands (low, normal, high, critical: one lane thread each) and client
//! sessions (`tagwire::Session`), each path's publisher and consumer on a
//! session of their own, on their band (`Session::on_band`: a connection
//! served by the band's lane). A publisher runs on its own thread, whose
//! scheduling is set with `tagwire_router::priority::apply_sched`; a
//! consumer is a callback subscription, run by its session's reader thread,
//! which takes the path's scheduling on its first event (the library gives
//! it the band's already).
//! A *path* is a publisher thread sending a 64-byte event every 10 ms
//! (100 Hz) and a consumer that burns `load` units of CPU per event
//! (trial-division prime tests calibrated so that a unit takes `--unit-us`).
//! *Single lane* (TAO's CosNotification): every path on band `normal`, every
//! client thread `other`; *single lane, RT*: every path on band `high`, every
//! client thread `fifo:10`. *Lanes* (RT-Notification): high → `critical`,
//! medium → `normal`, low → `low`, each path's threads with its band's policy.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::{CallbackSubscription, EmbeddedRouter, Event, Publisher, Sample, Session};
// The socket-pair baseline of Fig. 15 (no router) encodes and decodes the
// same frames a client and the router do, and nothing else.
use tagwire_proto::{encode_publish, kind, EventRef, FrameDecoder};
use tagwire_router::priority::{apply_sched, Applied, SchedPolicy};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Each publisher's period: 100 Hz, as in TAO §4.2.
const PERIOD_NS: u64 = 10_000_000;
/// The socket-pair baseline's frame limit.
const MAX_FRAME: u32 = 1 << 20;
/// Payload bytes of every event (TAO §4.4: 64 bytes).
const PAYLOAD: usize = 64;
/// The load at which TAO plots latency (Fig. 11, 12).
const LATENCY_LOAD: u32 = 25;
/// The load of TAO's paths experiment (Fig. 14).
const PATHS_LOAD: u32 = 30;
/// A path "holds" its rate while it delivers at least this many events/s.
const HOLDS_AT: f64 = 95.0;
/// The coordinating thread's policy: above every client and lane, so that
/// windows start and stop on time whatever the clients do.
const COORDINATOR: SchedPolicy = SchedPolicy::Fifo(90);

// ---------------------------------------------------------------- clock, work

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Monotonic ns since the process's epoch, shared by every thread.
fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

fn sleep_until(t_ns: u64) {
    let now = now_ns();
    if t_ns > now {
        std::thread::sleep(Duration::from_nanos(t_ns - now));
    }
}

/// The number each unit of work tests for primality (TAO: "a prime number
/// calculation is performed proportional to the supplied load").
const PRIME: u64 = 100_003;

#[inline(never)]
fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

fn burn(tests: u64) {
    for _ in 0..tests {
        std::hint::black_box(is_prime(std::hint::black_box(PRIME)));
    }
}

/// How many prime tests make one unit of load.
#[derive(Clone, Copy)]
struct Calibration {
    tests_per_unit: u64,
    /// One unit as measured after calibrating, µs.
    unit_us: f64,
}

/// Calibrates on the calling thread (the coordinator, at `fifo:90`, so
/// nothing else runs meanwhile).
fn calibrate(unit_us: f64) -> Calibration {
    burn(2_000);
    let per_test_ns = (0..7)
        .map(|_| {
            let t = Instant::now();
            burn(2_000);
            t.elapsed().as_nanos() as f64 / 2_000.0
        })
        .fold(f64::INFINITY, f64::min);
    let tests_per_unit = ((unit_us * 1e3 / per_test_ns).round() as u64).max(1);
    let t = Instant::now();
    burn(tests_per_unit * 200);
    Calibration {
        tests_per_unit,
        unit_us: t.elapsed().as_secs_f64() * 1e6 / 200.0,
    }
}

/// What `apply_sched` put in force, as text (`fifo:20`, or
/// `other:-4 (fell back from fifo:20)`).
fn take_sched(policy: SchedPolicy) -> String {
    match apply_sched(policy) {
        Ok(Applied::Exactly(p)) => p.to_string(),
        Ok(Applied::FellBack { got, .. }) => format!("{got} (fell back from {policy})"),
        Err(e) => format!("unchanged ({e})"),
    }
}

// ---------------------------------------------------------------- clients

/// Where the clients connect: an embedded router (the default bands), or a
/// router on a Unix socket (every band's lane given one policy).
enum Bench {
    Embedded(EmbeddedRouter),
    Socket {
        router: Box<RouterHandle>,
        url: String,
        _dir: tempfile::TempDir,
    },
}

impl Bench {
    /// A session of its own on `band` (a connection served by the band's lane).
    fn session(&self, band: &str) -> Res<Session> {
        let base = match self {
            Bench::Embedded(r) => r.session()?,
            Bench::Socket { url, .. } => Session::connect(url)?,
        };
        Ok(base.on_band(band)?)
    }

    fn shutdown(self) {
        if let Bench::Socket { router, .. } = self {
            router.shutdown();
        }
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// The router's `lanes` listing: what each lane asked for and got.
fn lanes_listing() -> Res<Vec<Value>> {
    let router = EmbeddedRouter::start()?;
    let listing = router.session()?.list()?;
    Ok(listing
        .lanes
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?)
}

// ---------------------------------------------------------------- paths

/// One supplier → router → consumer path.
#[derive(Clone)]
struct PathSpec {
    /// `high`, `medium`, `low` or `low-3`.
    name: String,
    band: String,
    /// Of both its client threads.
    sched: SchedPolicy,
    /// The event's priority field (TAO's CLIENT_PROPAGATED priority).
    priority: u8,
    load: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    /// Every path on band `normal` (lane `other`), every client thread
    /// `other`: TAO's CosNotification as the daemon's default band runs it.
    SingleLane,
    /// Every path on band `high` (lane `fifo:10`), every client thread
    /// `fifo:10`: CosNotification in the real-time class, as TAO's testbed
    /// ran it, out of reach of other processes on the CPU.
    SingleLaneRt,
    /// Each path on its own band, its threads with that band's policy:
    /// high → `critical` (`fifo:20`), medium → `normal` (`other`), low →
    /// `low` (`other:10`).
    Lanes,
    /// The daemon's lanes as in `Lanes`, but every client thread `other`
    /// (nice 0): what the lanes alone do, since under `Lanes` the
    /// preferential fall-off also follows from the clients' own priorities
    /// (the audit's point, issue 26).
    LanesClientsOther,
}

const CONFIGS: [Config; 4] = [
    Config::SingleLane,
    Config::SingleLaneRt,
    Config::Lanes,
    Config::LanesClientsOther,
];

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::SingleLane => "single lane",
            Config::SingleLaneRt => "single lane, RT",
            Config::Lanes => "lanes",
            Config::LanesClientsOther => "lanes, clients other",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Config::SingleLane => "single",
            Config::SingleLaneRt => "single-rt",
            Config::Lanes => "lanes",
            Config::LanesClientsOther => "lanes-clients-other",
        }
    }

    /// A path of class `class` (`high`, `medium`, `low`) in this config.
    fn path(self, class: &str, name: String, load: u32) -> PathSpec {
        let priority = match class {
            "high" => 200,
            "medium" => 100,
            _ => 10,
        };
        let (band, sched) = match (self, class) {
            (Config::SingleLane, _) => ("normal", SchedPolicy::Other { nice: 0 }),
            (Config::SingleLaneRt, _) => ("high", SchedPolicy::Fifo(10)),
            (Config::Lanes, "high") => ("critical", SchedPolicy::Fifo(20)),
            (Config::Lanes, "medium") => ("normal", SchedPolicy::Other { nice: 0 }),
            (Config::Lanes, _) => ("low", SchedPolicy::Other { nice: 10 }),
            (Config::LanesClientsOther, "high") => ("critical", SchedPolicy::Other { nice: 0 }),
            (Config::LanesClientsOther, "medium") => ("normal", SchedPolicy::Other { nice: 0 }),
            (Config::LanesClientsOther, _) => ("low", SchedPolicy::Other { nice: 0 }),
        };
        PathSpec {
            name,
            band: band.to_owned(),
            sched,
            priority,
            load,
        }
    }
}

/// The measurement window, ns on the shared clock: clients start at
/// `start`; only what happens in `t0..t1` is counted.
#[derive(Clone, Copy)]
struct Window {
    start: u64,
    t0: u64,
    t1: u64,
}

impl Window {
    fn contains(&self, t: u64) -> bool {
        (self.t0..self.t1).contains(&t)
    }

    fn secs(&self) -> f64 {
        (self.t1 - self.t0) as f64 / 1e9
    }
}

struct PublisherStats {
    sched: String,
    sent: u64,
    /// Periods in the window whose event left a whole period late or not at
    /// all.
    late: u64,
}

#[derive(Default)]
struct ConsumerStats {
    sched: String,
    /// Events whose work finished in the window.
    done: u64,
    /// Latency (publish → receive) of the events received in the window, ns.
    latencies: Vec<u64>,
    /// Events received in the window whose work finished more than a period
    /// after they were published (the next one was already due).
    missed: u64,
    /// Sequence gaps (events the router discarded) in the window.
    lost: u64,
    /// The longest wall time one event's work took in the window, ns.
    max_work: u64,
}

/// Sends one event every period from `w.start` until `stop`; payload: the
/// publish time (ns, shared clock) and the load.
fn publish_periodically(
    publisher: Publisher,
    i: usize,
    spec: &PathSpec,
    w: Window,
    stop: &AtomicBool,
) -> Res<PublisherStats> {
    let sched = take_sched(spec.sched);
    let tag = format!("/lanes/{i}/data");
    let (mut due, mut sent, mut late) = (w.start, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        sleep_until(due);
        let now = now_ns();
        let mut payload = [0u8; PAYLOAD];
        payload[..8].copy_from_slice(&now.to_le_bytes());
        payload[8..12].copy_from_slice(&spec.load.to_le_bytes());
        // The publisher numbers its events (the consumer counts gaps).
        publisher
            .event(&tag, Bytes::copy_from_slice(&payload))
            .priority(spec.priority)
            .send()?;
        if w.contains(now) {
            sent += 1;
            if now >= due + PERIOD_NS {
                late += 1;
            }
        }
        due += PERIOD_NS;
        // Far behind (starved): skip the periods already gone, as a periodic
        // task does, rather than bursting to catch up.
        let after = now_ns();
        while due + PERIOD_NS <= after {
            if w.contains(due) {
                late += 1;
            }
            due += PERIOD_NS;
        }
    }
    Ok(PublisherStats { sched, sent, late })
}

/// A consumer: a callback subscription that burns each event's load on
/// its session's reader thread and keeps the statistics.
struct Consumer {
    _subscription: CallbackSubscription,
    stats: Arc<Mutex<ConsumerStats>>,
}

impl Consumer {
    /// The statistics so far.
    fn stats(&self) -> ConsumerStats {
        let mut st = std::mem::take(&mut *self.stats.lock().unwrap_or_else(|e| e.into_inner()));
        if st.sched.is_empty() {
            st.sched = "unknown (no event arrived)".into();
        }
        st
    }
}

/// Subscribes `session` to `pattern`; each event's load is burnt in the
/// callback, on the reader thread, which takes `spec.sched` first.
fn consume(
    session: &Session,
    pattern: &str,
    spec: &PathSpec,
    w: Window,
    cal: Calibration,
) -> Res<Consumer> {
    let stats = Arc::new(Mutex::new(ConsumerStats {
        sched: String::new(),
        done: 0,
        latencies: Vec::with_capacity(1024),
        missed: 0,
        lost: 0,
        max_work: 0,
    }));
    let (st, policy) = (stats.clone(), spec.sched);
    let next_seq: Mutex<Option<u64>> = Mutex::new(None);
    let subscription = session.subscribe(pattern).callback(move |sample: Sample| {
        let recv = now_ns();
        let mut st = st.lock().unwrap_or_else(|e| e.into_inner());
        if st.sched.is_empty() {
            st.sched = take_sched(policy);
        }
        let ev = sample.event();
        let Some((sent, load)) = ev.payload.get(..12).map(|p| {
            let (s, l) = p.split_at(8);
            (
                u64::from_le_bytes(s.try_into().unwrap_or_default()),
                u32::from_le_bytes(l.try_into().unwrap_or_default()),
            )
        }) else {
            return;
        };
        let in_window = w.contains(recv);
        let mut next = next_seq.lock().unwrap_or_else(|e| e.into_inner());
        if in_window {
            st.latencies.push(recv.saturating_sub(sent));
            if let Some(n) = *next {
                st.lost += ev.seq.saturating_sub(n);
            }
        }
        *next = Some(ev.seq + 1);
        burn(u64::from(load) * cal.tests_per_unit);
        let done = now_ns();
        if w.contains(done) {
            st.done += 1;
        }
        if in_window {
            st.max_work = st.max_work.max(done - recv);
            if done > sent + PERIOD_NS {
                st.missed += 1;
            }
        }
    })?;
    Ok(Consumer {
        _subscription: subscription,
        stats,
    })
}

/// Latency statistics, µs.
#[derive(Clone, Copy, Default)]
struct Lat {
    n: usize,
    mean: f64,
    sd: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

fn lat_stats(ns: &[u64]) -> Lat {
    if ns.is_empty() {
        return Lat::default();
    }
    let mut v: Vec<f64> = ns.iter().map(|&x| x as f64 / 1e3).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    let q = |q: f64| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    Lat {
        n,
        mean,
        sd: var.sqrt(),
        p50: q(0.5),
        p99: q(0.99),
        max: v[n - 1],
    }
}

struct PathResult {
    spec: PathSpec,
    pub_sched: String,
    cons_sched: String,
    sent_per_s: f64,
    done_per_s: f64,
    lat: Lat,
    /// Latencies of the window in arrival order, ns (for Fig. 11/12).
    samples: Vec<u64>,
    late: u64,
    missed: u64,
    lost: u64,
    /// The longest wall time one event's work took, µs.
    max_work_us: f64,
    /// CPU time stolen from CPU 0 by the hypervisor during the run, ms.
    steal_ms: f64,
}

impl PathResult {
    /// As a JSON object; with `samples`, every latency sample too (ns).
    fn json(&self, samples: bool) -> Value {
        let mut v = json!({
            "path": self.spec.name, "band": self.spec.band, "load": self.spec.load,
            "priority": self.spec.priority, "sched_wanted": self.spec.sched.to_string(),
            "publisher_sched": self.pub_sched, "consumer_sched": self.cons_sched,
            "sent_per_s": self.sent_per_s, "delivered_per_s": self.done_per_s,
            "latency_us": {"n": self.lat.n, "mean": self.lat.mean, "sd": self.lat.sd,
                "p50": self.lat.p50, "p99": self.lat.p99, "max": self.lat.max},
            "late_periods": self.late, "missed_periods": self.missed, "lost": self.lost,
            "max_work_us": self.max_work_us, "steal_ms": self.steal_ms,
        });
        if samples {
            v["samples_ns"] = json!(self.samples);
        }
        v
    }

    /// Back from [`PathResult::json`].
    fn from_json(v: &Value) -> Res<PathResult> {
        let text = |k: &str| {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or(format!("no {k} in {v}"))
        };
        let num = |k: &str| v[k].as_f64().ok_or(format!("no {k} in {v}"));
        let int = |k: &str| v[k].as_u64().ok_or(format!("no {k} in {v}"));
        let l = &v["latency_us"];
        let lf = |k: &str| l[k].as_f64().unwrap_or(0.0);
        Ok(PathResult {
            spec: PathSpec {
                name: text("path")?,
                band: text("band")?,
                sched: text("sched_wanted")?.parse()?,
                priority: u8::try_from(int("priority")?)?,
                load: u32::try_from(int("load")?)?,
            },
            pub_sched: text("publisher_sched")?,
            cons_sched: text("consumer_sched")?,
            sent_per_s: num("sent_per_s")?,
            done_per_s: num("delivered_per_s")?,
            lat: Lat {
                n: l["n"].as_u64().unwrap_or(0) as usize,
                mean: lf("mean"),
                sd: lf("sd"),
                p50: lf("p50"),
                p99: lf("p99"),
                max: lf("max"),
            },
            samples: v["samples_ns"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default(),
            late: int("late_periods")?,
            missed: int("missed_periods")?,
            lost: int("lost")?,
            max_work_us: v["max_work_us"].as_f64().unwrap_or(0.0),
            steal_ms: v["steal_ms"].as_f64().unwrap_or(0.0),
        })
    }
}

/// A path's publisher thread and consumer.
type PathThreads = (JoinHandle<Res<PublisherStats>>, Consumer);

fn joined<T>(t: JoinHandle<T>) -> Res<T> {
    t.join().map_err(|_| "a client thread panicked".into())
}

/// Keeps the CPU out of its idle state until `stop`, taking CPU time only
/// when nothing else wants it (`SCHED_IDLE`): waking a thread on an idle
/// virtual CPU costs tens of µs more than on a busy one.
fn spin_idle(stop: &AtomicBool) -> Res<()> {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    )
    .map_err(|e| format!("SCHED_IDLE: {e:?}"))?;
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
    Ok(())
}

/// Runs `specs` together on a fresh embedded router: warm-up, then a window
/// of `measure`; with `spinner`, an idle-class thread keeps the CPU busy.
fn run_paths(
    cal: Calibration,
    specs: &[PathSpec],
    warmup: Duration,
    measure: Duration,
    spinner: bool,
) -> Res<Vec<PathResult>> {
    let steal_before = steal_ms();
    let router = Bench::Embedded(EmbeddedRouter::start()?);
    let mut sessions = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let p = router
            .session(&s.band)?
            .declare_publisher(&format!("/lanes/{i}/pub"))?;
        sessions.push((p, router.session(&s.band)?));
    }
    let start = now_ns() + 50_000_000;
    let t0 = start + warmup.as_nanos() as u64;
    let w = Window {
        start,
        t0,
        t1: t0 + measure.as_nanos() as u64,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let spin = if spinner {
        let stop = stop.clone();
        Some(std::thread::spawn(move || spin_idle(&stop)))
    } else {
        None
    };
    let mut threads: Vec<PathThreads> = Vec::new();
    for (i, (s, (p, c))) in specs.iter().zip(sessions).enumerate() {
        let consumer = consume(&c, &format!("/lanes/{i}/data"), s, w, cal)?;
        let sp = s.clone();
        let stop_p = stop.clone();
        let publisher = std::thread::Builder::new()
            .name(format!("pub-{}", s.name))
            .spawn(move || publish_periodically(p, i, &sp, w, &stop_p))?;
        threads.push((publisher, consumer));
    }
    sleep_until(w.t1 + 20_000_000);
    stop.store(true, Ordering::Relaxed);
    let mut out = Vec::new();
    let mut failure = None;
    for (s, (p, c)) in specs.iter().zip(threads) {
        let c = c.stats();
        let p = match joined(p)? {
            Ok(p) => p,
            Err(e) => {
                failure.get_or_insert(format!("path {}: {e}", s.name));
                continue;
            }
        };
        out.push(PathResult {
            spec: s.clone(),
            pub_sched: p.sched,
            cons_sched: c.sched,
            sent_per_s: p.sent as f64 / w.secs(),
            done_per_s: c.done as f64 / w.secs(),
            lat: lat_stats(&c.latencies),
            samples: c.latencies,
            late: p.late,
            missed: c.missed,
            lost: c.lost,
            max_work_us: c.max_work as f64 / 1e3,
            steal_ms: 0.0,
        });
    }
    if let Some(t) = spin {
        joined(t)??;
    }
    let stolen = steal_ms() - steal_before;
    for p in &mut out {
        p.steal_ms = stolen;
    }
    router.shutdown();
    match failure {
        Some(f) => Err(f.into()),
        None => Ok(out),
    }
}

// ---------------------------------------------------------------- overhead

/// A Fig. 15 configuration.
#[derive(Clone)]
struct Flood {
    key: &'static str,
    label: &'static str,
    /// `None`: a socket pair, no router. Else one publisher/consumer pair
    /// per entry: its band and its threads' policy.
    pairs: Option<Vec<(&'static str, SchedPolicy)>>,
    /// Every band's lane policy, instead of the defaults.
    all_bands: Option<&'static str>,
    /// With no router (`pairs: None`): the threads' policy, and whether a
    /// relay thread copies the bytes between two socket pairs (TAO's
    /// 3-Hops: supplier → a process that only forwards → consumer).
    baseline: (SchedPolicy, bool),
}

fn floods() -> Vec<Flood> {
    let other = SchedPolicy::Other { nice: 0 };
    let fifo = SchedPolicy::Fifo(10);
    let flood = |key, label, pairs, all_bands| Flood {
        key,
        label,
        pairs,
        all_bands,
        baseline: (other, false),
    };
    let baseline = |key, label, sched, relay| Flood {
        key,
        label,
        pairs: None,
        all_bands: None,
        baseline: (sched, relay),
    };
    vec![
        flood(
            "direct",
            "(a) direct: client → client over a socket pair, no router; threads `other`",
            None,
            None,
        ),
        baseline(
            "direct-rt",
            "(a-RT) direct, threads `fifo:20`",
            SchedPolicy::Fifo(20),
            false,
        ),
        baseline(
            "relay",
            "(a3) client → relay thread → client over two socket pairs (copies bytes, no routing); threads `other`",
            other,
            true,
        ),
        baseline(
            "relay-rt",
            "(a3-RT) the same, threads `fifo:20`",
            SchedPolicy::Fifo(20),
            true,
        ),
        flood(
            "single-1",
            "(b) one router hop, single lane: 1 path on `normal` (lane and clients `other`)",
            Some(vec![("normal", other)]),
            None,
        ),
        flood(
            "lanes-1",
            "(c) one router hop, lanes: 1 path on `critical` (lane and clients `fifo:20`)",
            Some(vec![("critical", SchedPolicy::Fifo(20))]),
            None,
        ),
        flood(
            "single-3",
            "(b′) single lane: 3 paths on `normal` (`other`)",
            Some(vec![("normal", other); 3]),
            None,
        ),
        flood(
            "lanes-3",
            "(c′) lanes: 3 paths on `low`, `normal`, `critical` (default policies)",
            Some(vec![
                ("low", SchedPolicy::Other { nice: 10 }),
                ("normal", other),
                ("critical", SchedPolicy::Fifo(20)),
            ]),
            None,
        ),
        flood(
            "single-3-fifo",
            "(b″) single lane, every lane and client `fifo:10`: 3 paths on `normal`",
            Some(vec![("normal", fifo); 3]),
            Some("fifo:10"),
        ),
        flood(
            "lanes-3-fifo",
            "(c″) lanes, every lane and client `fifo:10`: 3 paths on `low`, `normal`, `critical`",
            Some(vec![("low", fifo), ("normal", fifo), ("critical", fifo)]),
            Some("fifo:10"),
        ),
    ]
}

/// A router with the default bands, embedded, or with every band's lane at
/// `all_bands` (then it needs a listener: a Unix socket in a temporary
/// directory, kept until the router stops).
fn start_router(all_bands: Option<&str>) -> Res<Bench> {
    let Some(sched) = all_bands else {
        return Ok(Bench::Embedded(EmbeddedRouter::start()?));
    };
    let dir = tempfile::tempdir()?;
    let mut bands = tagwire_router::band::default_bands();
    for b in &mut bands {
        b.sched = sched.to_owned();
    }
    let socket = dir.path().join("tagwire.sock");
    let config = RouterConfig {
        name: "lanes-bench".into(),
        tcp: None,
        unix: Some(socket.clone()),
        auth: tagwire_router::auth::AuthConfig {
            local_token: false,
            ..Default::default()
        },
        bands,
        ..RouterConfig::default()
    };
    Ok(Bench::Socket {
        router: Box::new(Router::start(config)?),
        url: format!("unix://{}", socket.display()),
        _dir: dir,
    })
}

/// Events in one write of the socket-pair baseline.
const FLOOD_BATCH: usize = 64;

/// Publishes back to back through `publisher` until `stop` (the session
/// batches publishes that come faster than `tagwire::HOT_INTERVAL` apart
/// into one write). The payload is 64 fixed bytes, shared, as in TAO §4.4.
fn flood_publish(publisher: Publisher, sched: SchedPolicy, stop: &AtomicBool) -> Res<u64> {
    take_sched(sched);
    let payload = Bytes::from(vec![0xa5u8; PAYLOAD]);
    let tag = format!("{}/data", publisher.name());
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = publisher.publish(&tag, payload.clone()) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            return Err(e.into());
        }
        sent += 1;
    }
    Ok(sent)
}

/// The socket-pair baseline's writer: the frames a publisher writes,
/// [`FLOOD_BATCH`] events a write, until `stop`.
fn flood_write_frames(
    mut out: impl Write,
    endpoint_name: &str,
    sched: SchedPolicy,
    stop: &AtomicBool,
) -> Res<u64> {
    take_sched(sched);
    let mut ev = Event::new(format!("{endpoint_name}/data"), vec![0xa5u8; PAYLOAD]);
    ev.header.publisher = endpoint_name.to_owned();
    let mut buf = BytesMut::with_capacity(FLOOD_BATCH * 128);
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        for _ in 0..FLOOD_BATCH {
            ev.header.seq = seq;
            ev.header.source_time_ns = now;
            encode_publish(1, &ev, &mut buf)?;
            seq += 1;
        }
        if let Err(e) = out.write_all(&buf) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            return Err(e.into());
        }
        buf.clear();
    }
    Ok(seq)
}

/// A flood's consumer: a callback subscription counting the events that
/// arrive in the window (parsing each), on its session's reader thread,
/// which takes `sched` on the first event.
fn flood_subscribe(
    session: &Session,
    pattern: &str,
    sched: SchedPolicy,
    w: Window,
    counted: Arc<AtomicU64>,
) -> Res<CallbackSubscription> {
    let scheduled = AtomicBool::new(false);
    Ok(session
        .subscribe(pattern)
        .max_queue_length(65536)
        .callback(move |sample: Sample| {
            if !scheduled.swap(true, Ordering::Relaxed) {
                take_sched(sched);
            }
            std::hint::black_box(sample.event().seq);
            if w.contains(now_ns()) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        })?)
}

/// The socket-pair baseline's reader: parses every event until `stop`;
/// counts the events read in the window (by the time of the read that
/// brought them).
fn flood_read_frames(
    mut input: UnixStream,
    sched: SchedPolicy,
    w: Window,
    stop: &AtomicBool,
) -> Res<u64> {
    take_sched(sched);
    input.set_read_timeout(Some(Duration::from_millis(20)))?;
    let dec = FrameDecoder::new(MAX_FRAME);
    let mut buf = BytesMut::with_capacity(1 << 17);
    let mut chunk = vec![0u8; 1 << 16];
    let mut counted = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if timed_out(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        let in_window = w.contains(now_ns());
        buf.extend_from_slice(&chunk[..n]);
        while let Some((k, body)) = dec.next_raw(&mut buf)? {
            if k == kind::DELIVER || k == kind::PUBLISH {
                let ev = EventRef::parse(body.get(4..).ok_or("short frame")?)?;
                std::hint::black_box(ev.seq);
                if in_window {
                    counted += 1;
                }
            }
        }
    }
    Ok(counted)
}

/// The 3-Hops baseline's middle: copies bytes from `input` to `output`
/// until `stop` (no parsing, no routing: what the least a forwarding
/// process costs). Returns 0 (it delivers nothing itself).
fn flood_relay(
    mut input: UnixStream,
    mut output: UnixStream,
    sched: SchedPolicy,
    stop: &AtomicBool,
) -> Res<u64> {
    take_sched(sched);
    input.set_read_timeout(Some(Duration::from_millis(20)))?;
    output.set_write_timeout(Some(Duration::from_millis(20)))?;
    let mut chunk = vec![0u8; 1 << 16];
    while !stop.load(Ordering::Relaxed) {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if timed_out(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() && !stop.load(Ordering::Relaxed) {
            match output.write(rest) {
                Ok(0) => return Ok(0),
                Ok(k) => rest = &rest[k..],
                Err(e) if timed_out(&e) => continue,
                Err(_) => return Ok(0),
            }
        }
    }
    Ok(0)
}

/// One run of `f`: total events/s delivered over the window.
fn run_flood(f: &Flood, warmup: Duration, measure: Duration) -> Res<f64> {
    let start = now_ns() + 20_000_000;
    let t0 = start + warmup.as_nanos() as u64;
    let w = Window {
        start,
        t0,
        t1: t0 + measure.as_nanos() as u64,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut pubs: Vec<JoinHandle<Res<u64>>> = Vec::new();
    let mut subs: Vec<JoinHandle<Res<u64>>> = Vec::new();
    let counted = Arc::new(AtomicU64::new(0));
    let mut consumers = Vec::new();
    let router = match &f.pairs {
        None => {
            let (a, mut b) = UnixStream::pair()?;
            let (sched, relay) = f.baseline;
            let (s1, s2) = (stop.clone(), stop.clone());
            pubs.push(std::thread::spawn(move || {
                flood_write_frames(a, "/flood/0/pub", sched, &s1)
            }));
            if relay {
                let (c, d) = UnixStream::pair()?;
                let s3 = stop.clone();
                pubs.push(std::thread::spawn(move || flood_relay(b, c, sched, &s3)));
                b = d;
            }
            subs.push(std::thread::spawn(move || {
                flood_read_frames(b, sched, w, &s2)
            }));
            None
        }
        Some(pairs) => {
            let router = start_router(f.all_bands)?;
            for (i, &(band, sched)) in pairs.iter().enumerate() {
                let p = router
                    .session(band)?
                    .declare_publisher(&format!("/flood/{i}/pub"))?;
                let c = router.session(band)?;
                consumers.push(flood_subscribe(
                    &c,
                    &format!("/flood/{i}/pub/data"),
                    sched,
                    w,
                    counted.clone(),
                )?);
                let s1 = stop.clone();
                pubs.push(std::thread::spawn(move || {
                    sleep_until(w.start);
                    flood_publish(p, sched, &s1)
                }));
            }
            Some(router)
        }
    };
    sleep_until(w.t1 + 10_000_000);
    stop.store(true, Ordering::Relaxed);
    // The baseline's reader first: its writer, blocked on a full socket, is
    // released when the pair closes.
    let mut total = counted.load(Ordering::Relaxed);
    for s in subs {
        total += s.join().map_err(|_| "a consumer panicked")??;
    }
    drop(consumers);
    for p in pubs {
        p.join().map_err(|_| "a publisher panicked")??;
    }
    if let Some(r) = router {
        r.shutdown();
    }
    Ok(total as f64 / w.secs())
}

// ---------------------------------------------------------------- options

struct Opts {
    quick: bool,
    only: Vec<String>,
    unit_us: f64,
    json: Option<String>,
    svg_dir: Option<String>,
    write: Option<String>,
    notes: Option<String>,
    command: String,
    date: String,
    revision: String,
    from_json: Option<String>,
}

fn parse_opts() -> Res<Opts> {
    let mut o = Opts {
        quick: false,
        only: vec!["load".into(), "paths".into(), "overhead".into()],
        unit_us: 100.0,
        json: None,
        svg_dir: None,
        write: None,
        notes: None,
        command: "taskset -c 0 experiments/target/release/lanes".into(),
        date: String::new(),
        revision: String::new(),
        from_json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => o.quick = true,
            "--only" => o.only = value()?.split(',').map(str::to_owned).collect(),
            "--unit-us" => o.unit_us = value()?.parse()?,
            "--json" => o.json = Some(value()?),
            "--svg-dir" => o.svg_dir = Some(value()?),
            "--write" => o.write = Some(value()?),
            "--notes" => o.notes = Some(value()?),
            "--command" => o.command = value()?,
            "--date" => o.date = value()?,
            "--revision" => o.revision = value()?,
            "--from-json" => o.from_json = Some(value()?),
            "-h" | "--help" => {
                println!("see the comment at the top of experiments/src/bin/lanes.rs");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    if !(1.0..=10_000.0).contains(&o.unit_us) {
        return Err(format!("--unit-us {} must be 1..=10000", o.unit_us).into());
    }
    Ok(o)
}

// ---------------------------------------------------------------- experiments

struct LoadPoint {
    config: Config,
    load: u32,
    paths: Vec<PathResult>,
}

struct PathsPoint {
    config: Config,
    lows: usize,
    /// The CPU was kept out of idle (see [`spin_idle`]).
    busy_idle: bool,
    high: PathResult,
    low_per_s: Vec<f64>,
}

struct FloodResult {
    flood: Flood,
    runs: Vec<f64>,
}

impl FloodResult {
    fn median(&self) -> f64 {
        median(self.runs.clone())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `lanes ÷ single` run by run (the two ran minutes apart at most, in the
/// same round): median, smallest, largest.
fn paired_ratio(overhead: &[FloodResult], lanes: &str, single: &str) -> (f64, f64, f64) {
    let runs = |k: &str| {
        overhead
            .iter()
            .find(|f| f.flood.key == k)
            .map(|f| f.runs.clone())
            .unwrap_or_default()
    };
    let ratios: Vec<f64> = runs(lanes)
        .iter()
        .zip(runs(single))
        .map(|(l, s)| l / s.max(1e-9))
        .collect();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    (median(ratios), min, max)
}

struct Results {
    cal: Calibration,
    lanes: Vec<Value>,
    load: Vec<LoadPoint>,
    paths: Vec<PathsPoint>,
    overhead: Vec<FloodResult>,
    cpus: String,
    loadavg_before: String,
    loadavg_after: String,
    secs: f64,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// CPU time the hypervisor has taken from CPU 0 so far (`steal` in
/// /proc/stat), ms; 0 if unknown.
fn steal_ms() -> f64 {
    let ticks = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("cpu0 "))
            .and_then(|l| l.split_whitespace().nth(8))
            .and_then(|v| v.parse::<f64>().ok())
    });
    // USER_HZ is 100 on Linux.
    ticks.map_or(0.0, |t| t * 10.0)
}

/// The machine's CPUs (not the ones this process may use: it is pinned).
fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map_or(0, |s| {
            s.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => {
                        b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0)
                    }
                    None => 1,
                })
                .sum()
        })
}

fn cpus_allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

struct Progress {
    done: usize,
    total: usize,
    began: Instant,
}

impl Progress {
    fn tick(&mut self, line: &str) {
        self.done += 1;
        let el = self.began.elapsed().as_secs_f64();
        let eta = el / self.done as f64 * (self.total - self.done) as f64;
        eprintln!(
            "[{}/{} {:>4.0} s, ~{:.0} s left] {line}",
            self.done, self.total, el, eta
        );
    }
}

fn summary(paths: &[PathResult]) -> String {
    paths
        .iter()
        .map(|p| {
            format!(
                "{} {:.0}/s p50 {:.0} p99 {:.0} sd {:.0} µs",
                p.spec.name, p.done_per_s, p.lat.p50, p.lat.p99, p.lat.sd
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

fn main() {
    if let Err(e) = run() {
        eprintln!("lanes: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let mut o = parse_opts()?;
    let results = match o.from_json.clone() {
        Some(path) => load_json(&path, &mut o)?,
        None => {
            let (results, mut json_lines) = measure_all(&o)?;
            json_lines.push(json!({"experiment": "meta", "unit_us": results.cal.unit_us,
                "tests_per_unit": results.cal.tests_per_unit, "lanes": results.lanes,
                "cpus": results.cpus, "loadavg_before": results.loadavg_before,
                "loadavg_after": results.loadavg_after, "secs": results.secs,
                "command": o.command, "date": o.date, "revision": o.revision}));
            if let Some(path) = &o.json {
                let text: String = json_lines.iter().map(|v| format!("{v}\n")).collect();
                std::fs::write(path, text)?;
            }
            results
        }
    };
    if let Some(dir) = &o.svg_dir {
        plot::all(&results, dir)?;
    }
    let notes = match &o.notes {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| format!("--notes {p}: {e}"))?),
        None => None,
    };
    let md = report::markdown(&results, &o, notes.as_deref());
    match &o.write {
        Some(path) => {
            report::splice(path, &md)?;
            eprintln!("lanes: wrote the lanes section of {path}");
        }
        None => print!("{md}"),
    }
    Ok(())
}

/// Reads the results of an earlier run back from its `--json` file (to
/// redo the markdown and plots, e.g. after editing the notes).
fn load_json(path: &str, o: &mut Opts) -> Res<Results> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--from-json {path}: {e}"))?;
    let mut r = Results {
        cal: Calibration {
            tests_per_unit: 0,
            unit_us: 0.0,
        },
        lanes: Vec::new(),
        load: Vec::new(),
        paths: Vec::new(),
        overhead: floods()
            .into_iter()
            .map(|flood| FloodResult {
                flood,
                runs: Vec::new(),
            })
            .collect(),
        cpus: String::new(),
        loadavg_before: String::new(),
        loadavg_after: String::new(),
        secs: 0.0,
    };
    let config_of = |v: &Value| -> Res<Config> {
        let key = v["config"].as_str().unwrap_or("");
        CONFIGS
            .into_iter()
            .find(|c| c.key() == key)
            .ok_or_else(|| format!("unknown config {key:?}").into())
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)?;
        let s = |k: &str| v[k].as_str().unwrap_or("").to_owned();
        match v["experiment"].as_str() {
            Some("meta") => {
                r.cal = Calibration {
                    tests_per_unit: v["tests_per_unit"].as_u64().unwrap_or(0),
                    unit_us: v["unit_us"].as_f64().unwrap_or(0.0),
                };
                r.lanes = v["lanes"].as_array().cloned().unwrap_or_default();
                r.cpus = s("cpus");
                r.loadavg_before = s("loadavg_before");
                r.loadavg_after = s("loadavg_after");
                r.secs = v["secs"].as_f64().unwrap_or(0.0);
                for (field, key) in [
                    (&mut o.command, "command"),
                    (&mut o.date, "date"),
                    (&mut o.revision, "revision"),
                ] {
                    *field = s(key);
                }
            }
            Some("load") => r.load.push(LoadPoint {
                config: config_of(&v)?,
                load: u32::try_from(v["load"].as_u64().unwrap_or(0))?,
                paths: v["paths"]
                    .as_array()
                    .map(|a| a.iter().map(PathResult::from_json).collect())
                    .unwrap_or(Ok(Vec::new()))?,
            }),
            Some("paths") => r.paths.push(PathsPoint {
                config: config_of(&v)?,
                lows: v["low_paths"].as_u64().unwrap_or(0) as usize,
                busy_idle: v["busy_idle"].as_bool().unwrap_or(false),
                high: PathResult::from_json(&v["high"])?,
                low_per_s: v["low_delivered_per_s"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default(),
            }),
            Some("overhead") => {
                let key = s("config");
                let f = r
                    .overhead
                    .iter_mut()
                    .find(|f| f.flood.key == key)
                    .ok_or(format!("unknown overhead config {key:?}"))?;
                f.runs.push(v["events_per_s"].as_f64().unwrap_or(0.0));
            }
            _ => {}
        }
    }
    r.overhead.retain(|f| !f.runs.is_empty());
    Ok(r)
}

/// Runs the experiments `o` asks for; returns the results and one JSON
/// value per run.
fn measure_all(o: &Opts) -> Res<(Results, Vec<Value>)> {
    let began = Instant::now();
    epoch();
    let loadavg_before = loadavg();
    let coordinator = take_sched(COORDINATOR);
    eprintln!(
        "lanes: CPUs allowed {}, coordinator thread {coordinator}",
        cpus_allowed()
    );
    let cal = calibrate(o.unit_us);
    eprintln!(
        "lanes: 1 unit of load = {} prime tests of {PRIME} = {:.1} µs",
        cal.tests_per_unit, cal.unit_us
    );
    let lanes = lanes_listing()?;
    for l in &lanes {
        eprintln!("lanes: lane {l}");
    }
    let want = |what: &str| o.only.iter().any(|x| x == what);
    let loads: Vec<u32> = if o.quick {
        vec![0, 10, 20, 25, 30, 40, 60, 80, 100, 120]
    } else {
        vec![0, 5, 10, 15, 20, 25, 30, 35, 40, 50, 60, 80, 100, 120]
    };
    let lows = [0usize, 1, 5, 10, 20];
    let rounds = if o.quick { 2 } else { 5 };
    let measure = Duration::from_millis(if o.quick { 1000 } else { 2000 });
    let warmup = Duration::from_millis(500);
    let mut progress = Progress {
        done: 0,
        total: usize::from(want("load")) * loads.len() * CONFIGS.len()
            + usize::from(want("paths")) * (lows.len() + 1) * CONFIGS.len()
            + usize::from(want("overhead")) * floods().len() * rounds,
        began: Instant::now(),
    };
    let mut json_lines: Vec<Value> = Vec::new();

    let mut load_points = Vec::new();
    if want("load") {
        for &load in &loads {
            for config in CONFIGS {
                let specs: Vec<PathSpec> = ["high", "medium", "low"]
                    .iter()
                    .map(|c| config.path(c, (*c).to_owned(), load))
                    .collect();
                // Twice the samples where the latency figure is drawn.
                let m = if load == LATENCY_LOAD {
                    measure * 2
                } else {
                    measure
                };
                let paths = run_paths(cal, &specs, warmup, m, false)?;
                progress.tick(&format!(
                    "load {load:>3} {:<15}: {}",
                    config.label(),
                    summary(&paths)
                ));
                json_lines.push(json!({"experiment": "load", "config": config.key(), "load": load,
                    "window_s": m.as_secs_f64(), "paths": paths.iter().map(|p| p.json(load == LATENCY_LOAD)).collect::<Vec<_>>()}));
                load_points.push(LoadPoint {
                    config,
                    load,
                    paths,
                });
            }
        }
    }

    let mut paths_points = Vec::new();
    if want("paths") {
        let m = if o.quick {
            measure
        } else {
            measure + measure / 4
        };
        // N = 0 twice: as it is, and with the CPU kept out of idle.
        let cases = std::iter::once((0, true)).chain(lows.iter().map(|&n| (n, false)));
        for (n, busy_idle) in cases {
            for config in CONFIGS {
                let mut specs = vec![config.path("high", "high".into(), PATHS_LOAD)];
                specs.extend((1..=n).map(|k| config.path("low", format!("low-{k}"), PATHS_LOAD)));
                let mut paths = run_paths(cal, &specs, warmup, m, busy_idle)?;
                let high = paths.remove(0);
                let low_per_s: Vec<f64> = paths.iter().map(|p| p.done_per_s).collect();
                progress.tick(&format!(
                    "paths: high + {n:>2} low{}, {:<15}: high {:.0}/s p50 {:.0} p99 {:.0} µs, missed {}+{}+{}, slowest work {:.1} ms, steal {:.0} ms; low {:.0}/s per path",
                    if busy_idle { " (CPU kept busy)" } else { "" },
                    config.label(),
                    high.done_per_s,
                    high.lat.p50,
                    high.lat.p99,
                    high.late,
                    high.missed,
                    high.lost,
                    high.max_work_us / 1e3,
                    high.steal_ms,
                    mean(&low_per_s)
                ));
                json_lines.push(
                    json!({"experiment": "paths", "config": config.key(), "low_paths": n,
                    "busy_idle": busy_idle, "load": PATHS_LOAD, "window_s": m.as_secs_f64(),
                    "high": high.json(false), "low_delivered_per_s": low_per_s}),
                );
                paths_points.push(PathsPoint {
                    config,
                    lows: n,
                    busy_idle,
                    high,
                    low_per_s,
                });
            }
        }
    }

    let mut overhead: Vec<FloodResult> = floods()
        .into_iter()
        .map(|flood| FloodResult {
            flood,
            runs: Vec::new(),
        })
        .collect();
    if want("overhead") {
        let m = Duration::from_millis(if o.quick { 600 } else { 1000 });
        for round in 0..rounds {
            // Alternate the order, so that a drift in the machine's load
            // does not always favour the same configuration.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..overhead.len()).collect()
            } else {
                (0..overhead.len()).rev().collect()
            };
            for i in order {
                let f = &mut overhead[i];
                let rate = run_flood(&f.flood, Duration::from_millis(300), m)?;
                progress.tick(&format!(
                    "overhead round {}: {:<13} {:>10.0} events/s",
                    round + 1,
                    f.flood.key,
                    rate
                ));
                json_lines.push(json!({"experiment": "overhead", "config": f.flood.key,
                    "round": round + 1, "window_s": m.as_secs_f64(), "events_per_s": rate}));
                f.runs.push(rate);
            }
        }
    } else {
        overhead.clear();
    }

    let results = Results {
        cal,
        lanes,
        load: load_points,
        paths: paths_points,
        overhead,
        cpus: cpus_allowed(),
        loadavg_before,
        loadavg_after: loadavg(),
        secs: began.elapsed().as_secs_f64(),
    };
    Ok((results, json_lines))
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The first load at which `path` delivers under [`HOLDS_AT`] events/s in
/// `config`, if any.
fn falls_off(points: &[LoadPoint], config: Config, path: &str) -> Option<u32> {
    points
        .iter()
        .filter(|p| p.config == config)
        .find(|p| {
            p.paths
                .iter()
                .any(|r| r.spec.name == path && r.done_per_s < HOLDS_AT)
        })
        .map(|p| p.load)
}

fn path_at<'a>(
    points: &'a [LoadPoint],
    config: Config,
    load: u32,
    path: &str,
) -> Option<&'a PathResult> {
    points
        .iter()
        .find(|p| p.config == config && p.load == load)
        .and_then(|p| p.paths.iter().find(|r| r.spec.name == path))
}

// ---------------------------------------------------------------- report

mod report {
    use super::*;

    pub const BEGIN: &str = "<!-- BEGIN lanes -->";
    pub const END: &str = "<!-- END lanes -->";

    /// `x` rounded, with thousands separators: 1234567.8 → `1,234,568`.
    fn n(x: f64) -> String {
        let digits = format!("{:.0}", x.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if x < -0.5 {
            out.insert(0, '-');
        }
        out
    }

    fn lane_table(out: &mut String, lanes: &[Value]) {
        out.push_str(
            "| band | lane asked for | lane got | fell back because |\n|---|---|---|---|\n",
        );
        for l in lanes {
            let s = |k: &str| l[k].as_str().unwrap_or("").to_owned();
            let fell = match s("fell_back") {
                f if f.is_empty() => "—".to_owned(),
                f => f,
            };
            let _ = writeln!(
                out,
                "| `{}` | `{}` | `{}` | {fell} |",
                s("band"),
                s("sched"),
                s("sched_applied"),
            );
        }
    }

    fn flood_median(r: &Results, key: &str) -> f64 {
        r.overhead
            .iter()
            .find(|f| f.flood.key == key)
            .map_or(0.0, FloodResult::median)
    }

    /// 1 − lanes ÷ single, in % (the median of the rounds' ratios).
    fn cost(r: &Results, lanes: &str, single: &str) -> f64 {
        100.0 * (1.0 - paired_ratio(&r.overhead, lanes, single).0)
    }

    /// The cost and its range over the rounds, as text.
    fn cost_range(r: &Results, lanes: &str, single: &str) -> String {
        let (m, lo, hi) = paired_ratio(&r.overhead, lanes, single);
        format!(
            "{:+.1} % (rounds: {:+.1} … {:+.1} %)",
            100.0 * (1.0 - m),
            100.0 * (1.0 - hi),
            100.0 * (1.0 - lo)
        )
    }

    /// The high path's p99 alone (N = 0): as it is, and with the CPU kept
    /// out of idle.
    fn idle_p99(r: &Results, c: Config) -> (f64, f64) {
        let get = |busy: bool| {
            r.paths
                .iter()
                .find(|p| p.config == c && p.lows == 0 && p.busy_idle == busy)
                .map_or(0.0, |p| p.high.lat.p99)
        };
        (get(false), get(true))
    }

    fn high_sd(r: &Results, c: Config) -> Vec<(u32, f64)> {
        r.load
            .iter()
            .filter(|p| p.config == c)
            .filter_map(|p| {
                p.paths
                    .iter()
                    .find(|x| x.spec.name == "high")
                    .map(|x| (p.load, x.lat.sd))
            })
            .collect()
    }

    pub fn markdown(r: &Results, o: &Opts, notes: Option<&str>) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{BEGIN}");
        out.push_str("## Lanes: TAO RT-Notification §4, Fig. 9–15 (priority bands)\n\n");
        out.push_str(
            "Reproduces the experiments of Gore, Schmidt et al., *TAO's Real-time \
Notification Service*, §4 (Fig. 9–15) with tagwire's priority bands: one lane \
thread per band, each with its band's scheduling policy. Method and \
definitions: [docs/benchmarks.md](docs/benchmarks.md#lanes-tao-rt-notification-fig-915).\n\n",
        );
        let _ = writeln!(out, "```sh\n{}\n```\n", o.command);
        let _ = writeln!(
            out,
            "Run {}: `nproc` = {}, the whole run pinned to CPU {} (`taskset -c 0`, \
like TAO's single-CPU testbed); {:.0} s of runs{}; load average (1/5/15 min) {} \
before, {} after. The machine is shared with other sessions' builds, which \
compete for CPU 0 with every `other` thread of the run (but not with `fifo` \
ones): compare configurations of one run only. 1 unit of load = {} trial-division \
prime tests of {PRIME} = **{:.1} µs** of CPU (calibrated at the start of the run \
by the `fifo:90` coordinator; TAO does not give its unit in time). Every path: \
100 Hz, 64-byte payload carrying the send time and the load; all publishers \
start in phase (every period releases all paths at once, the worst case).\n",
            if o.date.is_empty() {
                "of this benchmark".to_owned()
            } else {
                format!("of {}", o.date)
            },
            online_cpus(),
            r.cpus,
            r.secs,
            if o.revision.is_empty() {
                String::new()
            } else {
                format!(", tagwire revision {}", o.revision)
            },
            r.loadavg_before,
            r.loadavg_after,
            r.cal.tests_per_unit,
            r.cal.unit_us,
        );
        out.push_str("Lanes as the router reported them (`list` → `lanes`) in this run:\n\n");
        lane_table(&mut out, &r.lanes);
        let rt = r
            .lanes
            .iter()
            .filter(|l| {
                l["sched_applied"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("fifo") || s.starts_with("rr"))
            })
            .count();
        let _ = writeln!(
            out,
            "\n{rt} of {} lanes got a real-time policy. The run was made as root \
(real-time policies need `CAP_SYS_NICE` or `RLIMIT_RTPRIO`); without it the \
`fifo` lanes and client threads fall back to nice levels and the table above \
says so. Client threads take their path's policy with `apply_sched`:\n\n\
- **single lane** (TAO's CosNotification): every path on band `normal`; lane and \
client threads `other`.\n\
- **single lane, RT** (CosNotification in the real-time class, as TAO's testbed \
ran everything): every path on band `high`; lane and client threads `fifo:10`. \
Other processes cannot take CPU 0 from it.\n\
- **lanes** (RT-Notification): high → `critical` (`fifo:20`), medium → `normal` \
(`other`), low → `low` (`other:10`); each path's publisher and consumer with \
its band's policy.\n\n\
The thread that starts and stops the windows runs `fifo:90`.\n",
            r.lanes.len()
        );
        summary_table(&mut out, r);
        if !r.load.is_empty() {
            load_tables(&mut out, r);
        }
        if !r.paths.is_empty() {
            paths_table(&mut out, r);
        }
        if !r.overhead.is_empty() {
            overhead_table(&mut out, r);
        }
        if let Some(n) = notes {
            out.push('\n');
            out.push_str(n.trim_end());
            out.push('\n');
        }
        let _ = writeln!(out, "{END}");
        out
    }

    fn summary_table(out: &mut String, r: &Results) {
        out.push_str("\n### Ours beside the paper's\n\n");
        out.push_str(
            "The paper (800 MHz Pentium III, one CPU, RedHat 7.1 in the real-time \
class, TAO 1.3.4) gives its results as plots; its text states the numbers and \
shapes quoted here. Ours: this run.\n\n",
        );
        out.push_str("| figure | paper: CosNotification → RT-Notification |");
        for c in CONFIGS {
            let _ = write!(out, " tagwire {} |", c.label());
        }
        out.push_str(" target |\n|---|---|---|---|---|---|\n");
        if !r.load.is_empty() {
            let _ = write!(
                out,
                "| 9, 10: first load where a path delivers < {HOLDS_AT:.0} events/s | Cos: \
all three fall together, \"proportionally\"; RT: \"low falls off first, followed \
by medium, and then high\"; high \"maintained while there is available capacity\" |"
            );
            for c in CONFIGS {
                let f = |p| falls_off(&r.load, c, p).map_or("none".to_owned(), |x| x.to_string());
                let _ = write!(
                    out,
                    " high {}, medium {}, low {} |",
                    f("high"),
                    f("medium"),
                    f("low")
                );
            }
            out.push_str(" lanes: low < medium < high |\n");
            let _ = write!(
                out,
                "| 11, 12: high path's latency at load {LATENCY_LOAD} | RT ≈ 1/8 of Cos |"
            );
            let lanes = path_at(&r.load, Config::Lanes, LATENCY_LOAD, "high");
            for c in CONFIGS {
                match path_at(&r.load, c, LATENCY_LOAD, "high") {
                    Some(x) if c != Config::Lanes => {
                        let ratio = lanes.map_or(String::new(), |l| {
                            format!("; lanes = 1/{:.0} of it", x.lat.mean / l.lat.mean.max(1e-9))
                        });
                        let _ = write!(
                            out,
                            " mean {} µs, p99 {} µs{ratio} |",
                            n(x.lat.mean),
                            n(x.lat.p99)
                        );
                    }
                    Some(x) => {
                        let _ =
                            write!(out, " mean {} µs, p99 {} µs |", n(x.lat.mean), n(x.lat.p99));
                    }
                    None => out.push_str(" — |"),
                }
            }
            out.push_str(" lanes ≤ 1/8 of single lane |\n");
            out.push_str(
                "| 13: high path's jitter (σ of latency) against load | Cos: grows \
linearly with load; RT: \"remains low and fairly constant\" |",
            );
            for c in CONFIGS {
                let v = high_sd(r, c);
                let first = v.first().map_or(0.0, |x| x.1);
                let (at, max) = v
                    .iter()
                    .fold((0, 0.0), |m, x| if x.1 > m.1 { (x.0, x.1) } else { m });
                let _ = write!(
                    out,
                    " {} µs at load 0; largest {} µs (load {at}) |",
                    n(first),
                    n(max)
                );
            }
            out.push_str(" lanes: flat |\n");
        }
        if !r.paths.is_empty() {
            let _ = write!(
                out,
                "| 14: high path with 1, 5, 10, 20 low paths, load {PATHS_LOAD} | RT: high \
\"maintained consistently at 100 events/sec\" |"
            );
            for c in CONFIGS {
                let (idle, busy) = idle_p99(r, c);
                let with: Vec<&PathsPoint> = r
                    .paths
                    .iter()
                    .filter(|p| p.config == c && p.lows > 0)
                    .collect();
                let min_rate = with
                    .iter()
                    .map(|p| p.high.done_per_s)
                    .fold(f64::INFINITY, f64::min);
                let worst = with.iter().map(|p| p.high.lat.p99).fold(0.0, f64::max);
                let missed: u64 = with
                    .iter()
                    .map(|p| p.high.late + p.high.missed + p.high.lost)
                    .sum();
                let _ = write!(
                    out,
                    " high ≥ {min_rate:.0} events/s; worst p99 {} µs = {:.2}× idle \
({} µs), {:.2}× idle with the CPU kept busy ({} µs); {missed} missed periods |",
                    n(worst),
                    worst / idle.max(1e-9),
                    n(idle),
                    worst / busy.max(1e-9),
                    n(busy),
                );
            }
            out.push_str(" lanes: 100 events/s, p99 ≤ 1.2× idle, no missed period |\n");
        }
        if !r.overhead.is_empty() {
            let m = |k| n(flood_median(r, k));
            let _ = writeln!(
                out,
                "| 15: maximum throughput, 64-byte events | RT-Notify \"does not add \
significant overhead\" to CosNotify | 1 path {}/s; 3 paths {}/s (direct, no \
router: {}/s) | 3 paths, every lane and client `fifo:10`: {}/s | 1 path on \
`critical`: {}/s ({:+.1} % cost); 3 paths spread, default policies: {}/s \
({:+.1} %); 3 paths spread, every lane `fifo:10`: {}/s (**{:+.1} %**) | cost of \
lanes ≤ 5 % |",
                m("single-1"),
                m("single-3"),
                m("direct"),
                m("single-3-fifo"),
                m("lanes-1"),
                cost(r, "lanes-1", "single-1"),
                m("lanes-3"),
                cost(r, "lanes-3", "single-3"),
                m("lanes-3-fifo"),
                cost(r, "lanes-3-fifo", "single-3-fifo"),
            );
        }
    }

    fn load_tables(out: &mut String, r: &Results) {
        let mut loads: Vec<u32> = r.load.iter().map(|p| p.load).collect();
        loads.dedup();
        out.push_str("\n### Fig. 9, 10: load against delivered events/s\n\n");
        out.push_str(
            "Three paths (high, medium, low), each a publisher at 100 Hz → router → \
a consumer that burns *load* units per event. Delivered: events whose work \
finished in the window (2 s after 0.5 s of warm-up; 4 s at load 25), a fresh \
router per row.\n\n| load |",
        );
        for c in CONFIGS {
            let _ = write!(out, " {}: high | medium | low |", c.label());
        }
        out.push_str("\n|---:|");
        out.push_str(&"---:|".repeat(3 * CONFIGS.len()));
        out.push('\n');
        for &load in &loads {
            let _ = write!(out, "| {load} |");
            for c in CONFIGS {
                for p in ["high", "medium", "low"] {
                    let v = path_at(&r.load, c, load, p)
                        .map_or("—".into(), |x| format!("{:.0}", x.done_per_s));
                    let _ = write!(out, " {v} |");
                }
            }
            out.push('\n');
        }
        out.push_str("\n![Fig. 9 and 10: delivered events/s against load, per configuration](docs/lanes-fig09-10.svg)\n");

        let _ = writeln!(
            out,
            "\n### Fig. 11, 12: latency at load {LATENCY_LOAD}\n\n\
Latency: from the publisher's send time (in the payload) to the moment the \
consumer reads the event, which includes waiting for its own previous event's \
work and for the CPU.\n\n\
| configuration | path (band) | events | mean µs | p50 µs | p99 µs | max µs | σ µs | consumer thread |\n|---|---|---:|---:|---:|---:|---:|---:|---|"
        );
        for c in CONFIGS {
            for p in ["high", "medium", "low"] {
                if let Some(x) = path_at(&r.load, c, LATENCY_LOAD, p) {
                    let _ = writeln!(
                        out,
                        "| {} | {p} (`{}`) | {} | {} | {} | {} | {} | {} | `{}` |",
                        c.label(),
                        x.spec.band,
                        x.lat.n,
                        n(x.lat.mean),
                        n(x.lat.p50),
                        n(x.lat.p99),
                        n(x.lat.max),
                        n(x.lat.sd),
                        x.cons_sched
                    );
                }
            }
        }
        out.push_str("\n![Fig. 11 and 12: latency of every event at load 25, per configuration](docs/lanes-fig11-12.svg)\n");

        out.push_str("\n### Fig. 13: load against the high path's jitter\n\n| load |");
        for c in CONFIGS {
            let _ = write!(out, " σ µs, {} |", c.label());
        }
        for c in CONFIGS {
            let _ = write!(out, " p99 µs, {} |", c.label());
        }
        out.push_str("\n|---:|");
        out.push_str(&"---:|".repeat(2 * CONFIGS.len()));
        out.push('\n');
        for &load in &loads {
            let _ = write!(out, "| {load} |");
            for c in CONFIGS {
                let v = path_at(&r.load, c, load, "high").map_or("—".into(), |x| n(x.lat.sd));
                let _ = write!(out, " {v} |");
            }
            for c in CONFIGS {
                let v = path_at(&r.load, c, load, "high").map_or("—".into(), |x| n(x.lat.p99));
                let _ = write!(out, " {v} |");
            }
            out.push('\n');
        }
        out.push_str(
            "\n![Fig. 13: σ of the high path's latency against load](docs/lanes-fig13.svg)\n",
        );
    }

    fn paths_table(out: &mut String, r: &Results) {
        let _ = writeln!(
            out,
            "\n### Fig. 14: one high path and more low paths (load {PATHS_LOAD})\n\n\
One high path plus N low paths, all at load {PATHS_LOAD} and 100 Hz (in *lanes* \
every low path is on band `low`); N = 0 is the high path's idle reference, \
measured twice: as it is, and with the CPU kept out of its idle state by a \
`SCHED_IDLE` spinning thread (*busy idle*; it takes CPU time only when no other \
thread wants it), because waking threads on an idle virtual CPU costs tens of \
µs more. *Missed*: periods of the high path whose event left a whole period late, \
finished its work more than a period after it was sent, or was lost (a \
sequence gap). *Slowest work*: the longest wall time the high consumer took \
for one event's {PATHS_LOAD} units (≈ {PATHS_LOAD} × the unit when nothing interrupts it). *CPU 0 \
stolen*: the hypervisor's `steal` time on CPU 0 during the run (/proc/stat, \
10 ms ticks): time no thread of this machine ran. Window 2.5 s after 0.5 s of \
warm-up.\n\n\
| configuration | low paths | high events/s | high p50 µs | high p99 µs | p99 ÷ idle p99 | p99 ÷ busy-idle p99 | high max µs | missed | high's slowest work, ms | CPU 0 stolen, ms | each low path, events/s (mean) | all low paths, events/s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for c in CONFIGS {
            let (idle, busy) = idle_p99(r, c);
            let mut rows: Vec<&PathsPoint> = r.paths.iter().filter(|p| p.config == c).collect();
            rows.sort_by_key(|p| (p.lows, !p.busy_idle));
            for p in rows {
                let lows = |v: f64| {
                    if p.lows == 0 {
                        "—".to_owned()
                    } else {
                        format!("{v:.0}")
                    }
                };
                let _ = writeln!(
                    out,
                    "| {} | {}{} | {:.0} | {} | {} | {:.2}× | {:.2}× | {} | {} | {:.1} | {:.0} | {} | {} |",
                    c.label(),
                    p.lows,
                    if p.busy_idle { " (busy idle)" } else { "" },
                    p.high.done_per_s,
                    n(p.high.lat.p50),
                    n(p.high.lat.p99),
                    p.high.lat.p99 / idle.max(1e-9),
                    p.high.lat.p99 / busy.max(1e-9),
                    n(p.high.lat.max),
                    p.high.late + p.high.missed + p.high.lost,
                    p.high.max_work_us / 1e3,
                    p.high.steal_ms,
                    lows(mean(&p.low_per_s)),
                    lows(p.low_per_s.iter().sum::<f64>()),
                );
            }
        }
        out.push_str("\n![Fig. 14: the high path's events/s and p99 latency against the number of low paths](docs/lanes-fig14.svg)\n");
    }

    fn overhead_table(out: &mut String, r: &Results) {
        let direct = flood_median(r, "direct");
        out.push_str("\n### Fig. 15: overhead, maximum throughput\n\n");
        out.push_str(
            "Publishers send 64-byte events back to back (64 events per write); \
consumers read 64 KiB at a time and parse every event; events/s counted at the \
consumers over 1 s after 0.3 s of warm-up, summed over paths. Five rounds, \
each running every configuration once (in reverse order every other round); \
the median is shown. The router rows \
subscribe with `max_queue_length = 65536`. (b″) and (c″) give every band's \
lane the same policy (`fifo:10`, a router configured with `[[bands]]`) so that \
only the lane mechanism differs: three lane threads sharing the routing \
tables instead of one.\n\n",
        );
        out.push_str("| configuration | events/s (median) | runs | ÷ direct | TAO's counterpart |\n|---|---:|---|---:|---|\n");
        for f in &r.overhead {
            let counterpart = match f.flood.key {
                "direct" => "2-Hops (supplier → consumer, no channel)",
                "direct-rt" => "2-Hops-RT",
                "relay" => "3-Hops (supplier → forwarder → consumer)",
                "relay-rt" => "3-Hops-RT",
                k if k.starts_with("single") => "CosNotify",
                _ => "RT-Notify",
            };
            let runs: Vec<String> = f.runs.iter().map(|&x| n(x)).collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {counterpart} |",
                f.flood.label,
                n(f.median()),
                runs.join(", "),
                f.median() / direct.max(1e-9)
            );
        }
        let rounds = r.overhead.first().map_or(0, |f| f.runs.len());
        let _ = writeln!(
            out,
            "\nCost of lanes, 1 − lanes ÷ single lane, from the {rounds} rounds' ratios \
(each round runs every configuration once; negative: lanes were faster):\n\n\
| comparison | cost of lanes: median (range) |\n|---|---|\n\
| one path: (c) `critical` ÷ (b) `normal` | {} |\n\
| three paths, default policies: (c′) ÷ (b′) | {} |\n\
| three paths, the same policy everywhere: (c″) ÷ (b″) | **{}** |\n\n\
Target ≤ 5 %.\n\n\
![Fig. 15: maximum throughput per configuration](docs/lanes-fig15.svg)",
            cost_range(r, "lanes-1", "single-1"),
            cost_range(r, "lanes-3", "single-3"),
            cost_range(r, "lanes-3-fifo", "single-3-fifo"),
        );
    }

    /// Replaces the lanes section of `path` (or appends it).
    pub fn splice(path: &str, md: &str) -> Res<()> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let new = match (text.find(BEGIN), text.find(END)) {
            (Some(b), Some(e)) if e > b => {
                format!("{}{}{}", &text[..b], md.trim_end(), &text[e + END.len()..])
            }
            _ => format!("{}\n\n{}", text.trim_end(), md),
        };
        std::fs::write(path, new)?;
        Ok(())
    }
}

// ---------------------------------------------------------------- plots

mod plot {
    use super::*;
    use plotters::coord::types::RangedCoordf64;
    use plotters::coord::Shift;
    use plotters::prelude::*;

    const PATH_COLORS: [RGBColor; 3] = [
        RGBColor(200, 30, 30),
        RGBColor(30, 110, 200),
        RGBColor(40, 150, 60),
    ];
    const CLASSES: [&str; 3] = ["high", "medium", "low"];
    /// Events per path drawn in Fig. 11/12 (the first 2 s of the window),
    /// which keeps the SVG near 200 KB.
    const LATENCY_PLOT_EVENTS: usize = 200;

    fn config_color(c: Config) -> RGBColor {
        match c {
            Config::SingleLane => RGBColor(30, 110, 200),
            Config::SingleLaneRt => RGBColor(140, 60, 170),
            Config::Lanes => RGBColor(200, 30, 30),
            Config::LanesClientsOther => RGBColor(230, 140, 20),
        }
    }

    type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

    pub fn all(r: &Results, dir: &str) -> Res<()> {
        std::fs::create_dir_all(dir)?;
        if !r.load.is_empty() {
            throughput(r, &format!("{dir}/lanes-fig09-10.svg"))?;
            latency(r, &format!("{dir}/lanes-fig11-12.svg"))?;
            jitter(r, &format!("{dir}/lanes-fig13.svg"))?;
        }
        if !r.paths.is_empty() {
            paths(r, &format!("{dir}/lanes-fig14.svg"))?;
        }
        if !r.overhead.is_empty() {
            overhead(r, &format!("{dir}/lanes-fig15.svg"))?;
        }
        Ok(())
    }

    fn err<E: std::fmt::Display>(e: E) -> Box<dyn std::error::Error + Send + Sync> {
        format!("plot: {e}").into()
    }

    /// One line with dots, and its legend entry (linear or log y axis).
    fn line<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
        chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
        pts: &[(f64, f64)],
        color: RGBColor,
        label: &str,
    ) -> Res<()> {
        chart
            .draw_series(LineSeries::new(pts.to_vec(), color.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
        Ok(())
    }

    fn throughput(r: &Results, path: &str) -> Res<()> {
        let root = SVGBackend::new(path, (1500, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let max_load = r.load.iter().map(|p| p.load).max().unwrap_or(1) as f64;
        let panels = root.split_evenly((1, CONFIGS.len()));
        for (area, config) in panels.iter().zip(CONFIGS) {
            let title = match config {
                Config::Lanes | Config::LanesClientsOther => {
                    format!("Fig. 10 (RT-Notification): {}", config.label())
                }
                c => format!("Fig. 9 (CosNotification): {}", c.label()),
            };
            throughput_panel(r, area, config, &title, max_load)?;
        }
        root.present().map_err(err)?;
        Ok(())
    }

    fn throughput_panel(
        r: &Results,
        area: &Area<'_>,
        config: Config,
        title: &str,
        max_load: f64,
    ) -> Res<()> {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..max_load, 0f64..110f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc(format!("load (1 unit = {:.0} µs)", r.cal.unit_us))
            .y_desc("delivered events/s")
            .draw()
            .map_err(err)?;
        for (class, color) in CLASSES.iter().zip(PATH_COLORS) {
            let pts: Vec<(f64, f64)> = r
                .load
                .iter()
                .filter(|p| p.config == config)
                .filter_map(|p| {
                    p.paths
                        .iter()
                        .find(|x| x.spec.name == *class)
                        .map(|x| (f64::from(p.load), x.done_per_s))
                })
                .collect();
            line(&mut chart, &pts, color, class)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    }

    fn latency(r: &Results, path: &str) -> Res<()> {
        let root = SVGBackend::new(path, (1500, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let at = |c| {
            r.load
                .iter()
                .find(|p| p.config == c && p.load == LATENCY_LOAD)
        };
        let ymax = CONFIGS
            .iter()
            .filter_map(|&c| at(c))
            .flat_map(|p| p.paths.iter())
            .flat_map(|x| x.samples.iter())
            .map(|&ns| ns as f64 / 1e3)
            .fold(10.0, f64::max)
            * 1.5;
        let panels = root.split_evenly((1, CONFIGS.len()));
        for (area, config) in panels.iter().zip(CONFIGS) {
            let Some(point) = at(config) else { continue };
            let title = match config {
                Config::Lanes | Config::LanesClientsOther => format!(
                    "Fig. 12 (RT-Notification): {}, load {LATENCY_LOAD}",
                    config.label()
                ),
                c => format!(
                    "Fig. 11 (CosNotification): {}, load {LATENCY_LOAD}",
                    c.label()
                ),
            };
            let n = point
                .paths
                .iter()
                .map(|x| x.samples.len().min(LATENCY_PLOT_EVENTS))
                .max()
                .unwrap_or(1)
                .max(1) as f64;
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 15))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..n, (5f64..ymax).log_scale())
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .x_desc("event (in arrival order; the window's first 2 s)")
                .y_desc("latency µs (log)")
                .draw()
                .map_err(err)?;
            for (class, color) in CLASSES.iter().zip(PATH_COLORS) {
                let Some(x) = point.paths.iter().find(|x| x.spec.name == *class) else {
                    continue;
                };
                let pts: Vec<(f64, f64)> = x
                    .samples
                    .iter()
                    .take(LATENCY_PLOT_EVENTS)
                    .enumerate()
                    .map(|(i, &ns)| (i as f64, (ns as f64 / 1e3).max(5.0)))
                    .collect();
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))
                    .map_err(err)?
                    .label(*class)
                    .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
        Ok(())
    }

    fn jitter(r: &Results, path: &str) -> Res<()> {
        let root = SVGBackend::new(path, (700, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let max_load = r.load.iter().map(|p| p.load).max().unwrap_or(1) as f64;
        let series: Vec<(Config, Vec<(f64, f64)>)> = CONFIGS
            .iter()
            .map(|&c| {
                let pts = report_sd(r, c);
                (c, pts)
            })
            .collect();
        let ymax = series
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| p.1))
            .fold(10.0, f64::max)
            * 3.0;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Fig. 13: load vs jitter of the high path",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max_load, (1f64..ymax).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc(format!("load (1 unit = {:.0} µs)", r.cal.unit_us))
            .y_desc("σ of latency, µs (log)")
            .draw()
            .map_err(err)?;
        for (c, pts) in &series {
            line(&mut chart, pts, config_color(*c), c.label())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }

    fn report_sd(r: &Results, c: Config) -> Vec<(f64, f64)> {
        r.load
            .iter()
            .filter(|p| p.config == c)
            .filter_map(|p| {
                p.paths
                    .iter()
                    .find(|x| x.spec.name == "high")
                    .map(|x| (f64::from(p.load), x.lat.sd.max(1.0)))
            })
            .collect()
    }

    fn paths(r: &Results, path: &str) -> Res<()> {
        let root = SVGBackend::new(path, (1100, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let panels = root.split_evenly((1, 2));
        let max_n = r.paths.iter().map(|p| p.lows).max().unwrap_or(1) as f64;
        {
            let mut chart = ChartBuilder::on(&panels[0])
                .caption(
                    format!("Fig. 14: events/s, load {PATHS_LOAD}"),
                    ("sans-serif", 16),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d(0f64..max_n, 0f64..110f64)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .x_desc("low-priority paths")
                .y_desc("events/s")
                .draw()
                .map_err(err)?;
            for c in CONFIGS {
                let color = config_color(c);
                let pts: Vec<(f64, f64)> = r
                    .paths
                    .iter()
                    .filter(|p| p.config == c && !p.busy_idle)
                    .map(|p| (p.lows as f64, p.high.done_per_s))
                    .collect();
                line(
                    &mut chart,
                    &pts,
                    color,
                    &format!("high path, {}", c.label()),
                )?;
                let lows: Vec<(f64, f64)> = r
                    .paths
                    .iter()
                    .filter(|p| p.config == c && p.lows > 0)
                    .map(|p| (p.lows as f64, mean(&p.low_per_s)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(lows, color.mix(0.6).stroke_width(1)))
                    .map_err(err)?
                    .label(format!("each low path, {}", c.label()))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.6))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }
        let ymax = r.paths.iter().map(|p| p.high.lat.p99).fold(10.0, f64::max) * 3.0;
        let mut chart = ChartBuilder::on(&panels[1])
            .caption("the high path's p99 latency", ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max_n, (5f64..ymax).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("low-priority paths")
            .y_desc("p99 latency µs (log)")
            .draw()
            .map_err(err)?;
        for c in CONFIGS {
            let pts: Vec<(f64, f64)> = r
                .paths
                .iter()
                .filter(|p| p.config == c && !p.busy_idle)
                .map(|p| (p.lows as f64, p.high.lat.p99.max(5.0)))
                .collect();
            line(&mut chart, &pts, config_color(c), c.label())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }

    fn overhead(r: &Results, path: &str) -> Res<()> {
        let root = SVGBackend::new(path, (1000, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = r.overhead.len();
        let ymax = r
            .overhead
            .iter()
            .map(FloodResult::median)
            .fold(1.0, f64::max)
            * 1.15
            / 1e3;
        let keys: Vec<&str> = r.overhead.iter().map(|f| f.flood.key).collect();
        let label = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                keys.get(i as usize)
                    .map_or(String::new(), |k| (*k).to_owned())
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Fig. 15: maximum throughput, 64-byte events (median of {} rounds)",
                    r.overhead.first().map_or(0, |f| f.runs.len())
                ),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&label)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc("thousand events/s")
            .draw()
            .map_err(err)?;
        chart
            .draw_series(r.overhead.iter().enumerate().map(|(i, f)| {
                let color = match f.flood.key {
                    "direct" => PATH_COLORS[2],
                    k if k.starts_with("lanes") => config_color(Config::Lanes),
                    _ => config_color(Config::SingleLane),
                };
                Rectangle::new(
                    [(i as f64 - 0.3, 0.0), (i as f64 + 0.3, f.median() / 1e3)],
                    color.filled(),
                )
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }
}
