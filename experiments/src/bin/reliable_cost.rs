//! The cost of `reliability=reliable` against `best_effort` on one running
//! daemon (issue 25, "Cost"): throughput (one publisher floods, one
//! subscriber counts) and round trip time (ping → echo → pong, one in
//! flight), for each payload size, interleaved in rounds (the order of the
//! variants rotates) so that all see the same background load.
//!
//! On one daemon, `reliable` is acknowledged on two hops, and `--ends`
//! picks which ones a run acknowledges (docs/reliability.md):
//!
//! - `publisher`: acknowledged publishing (`Publisher::set_reliability`,
//!   `PublishReliable`/`PublishAck`); the subscription stays best effort.
//!   This is what `tagwire bench throughput --reliability reliable`
//!   measures, and what this program measured alone in session 36
//!   (0.59–0.62x at 64 B).
//! - `subscriber`: acknowledged delivery (the subscription's
//!   `reliability=reliable`, `DeliverReliable`/`DeliverAck`); the publisher
//!   stays best effort. What a tag made `reliable` by `tagwire admin qos`
//!   gives a subscriber (subacks measured 0.78x this way in session 36).
//! - `both`: the two together — the promise `reliable` makes end to end
//!   (no gap and no duplicate while both ends live), and the number issue
//!   25's goal (≥ 0.8x best effort) is about.
//!
//! Run it with `scripts/reliable-cost.sh`, which starts a release `tagwired`
//! on loopback and calls
//!
//! ```sh
//! experiments/target/release/reliable_cost --server tcp://127.0.0.1:7795 \
//!     --sizes 64,65536 --rounds 3 --duration 3
//! ```
//!
//! It measures exactly what `tagwire bench throughput|latency` measures
//! (rate between the first and the last arrival at the subscriber; the
//! first 1,000 round trips are warm-up), but through a publisher whose
//! reliability it sets with `Publisher::set_reliability` (`tagwire bench`
//! has no such switch): with `reliable` every event is held by the client
//! library until the daemon acknowledges it, and the run ends with
//! `Session::wait_acknowledged`. It prints a markdown table (one row per
//! round, size and measure, with the ratio) and the spread of the ratios.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tagwire::{Bytes, Reliability, Session};

/// Round trips left out at the start of each latency run.
const WARMUP_ROUND_TRIPS: usize = 1_000;

/// Acknowledged publishing against best effort, on a running daemon.
#[derive(Debug, Parser)]
#[command(name = "reliable_cost")]
struct Args {
    /// The daemon (tcp://, unix://, udp://).
    #[arg(long)]
    server: String,
    /// Payload sizes, bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [64usize, 65536])]
    sizes: Vec<usize>,
    /// Rounds; best_effort and reliable alternate which goes first.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Seconds per throughput or latency run.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Which hops the reliable runs acknowledge (publisher, subscriber,
    /// both; see the module doc), each against the same round's best effort.
    #[arg(long, value_delimiter = ',', default_values_t = [Ends::Both])]
    ends: Vec<Ends>,
    /// The daemon's process id: its CPU time per event is reported beside
    /// this process's (read from /proc; the scripts pass it).
    #[arg(long)]
    daemon_pid: Option<u32>,
    /// Throughput runs only (no round trips).
    #[arg(long)]
    throughput_only: bool,
    /// For a profiler: one throughput run of this variant (`none` is best
    /// effort) and its cost per event, no ratios.
    #[arg(long)]
    only: Option<String>,
}

/// What a run acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Ends {
    /// Nothing: best effort.
    #[value(skip)]
    None,
    /// The publisher → daemon hop (acknowledged publishing).
    Publisher,
    /// The daemon → subscriber hop (acknowledged delivery).
    Subscriber,
    /// Both hops.
    Both,
}

impl Ends {
    fn name(self) -> &'static str {
        match self {
            Ends::None => "best_effort",
            Ends::Publisher => "reliable (publisher)",
            Ends::Subscriber => "reliable (subscriber)",
            Ends::Both => "reliable (both)",
        }
    }

    /// The publishers' reliability.
    fn publisher(self) -> Reliability {
        match self {
            Ends::Publisher | Ends::Both => Reliability::Reliable,
            Ends::None | Ends::Subscriber => Reliability::BestEffort,
        }
    }

    /// The subscriptions' `reliability` QoS.
    fn subscription(self) -> &'static str {
        match self {
            Ends::Subscriber | Ends::Both => "reliable",
            Ends::None | Ends::Publisher => "best_effort",
        }
    }
}

impl std::fmt::Display for Ends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ends::None => "none",
            Ends::Publisher => "publisher",
            Ends::Subscriber => "subscriber",
            Ends::Both => "both",
        })
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reliable_cost: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One throughput run.
struct Stream {
    sent: u64,
    received: u64,
    rate: f64,
    /// CPU and context switches of this process (publisher and subscriber)
    /// and of the daemon, over the run.
    cost: Cost,
}

/// What a process spent over a run: CPU time (user + system, ns) and
/// context switches (voluntary + involuntary), from /proc.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu_ns: u64,
    switches: u64,
}

impl Usage {
    /// `pid` ("self" or a number): `None` if /proc does not have it.
    fn of(pid: &str) -> Option<Usage> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command (which may hold spaces) end with ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat(5), in clock ticks
        // (100 per second on Linux).
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // A process's status counts its main thread's switches only: sum
        // its threads' (a thread that ended during the run is not counted).
        let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
            .flat_map(|status| {
                status
                    .lines()
                    .filter(|l| l.contains("ctxt_switches:"))
                    .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum();
        Some(Usage {
            cpu_ns: ticks * 10_000_000,
            switches,
        })
    }

    fn since(self, before: Usage) -> Usage {
        Usage {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            switches: self.switches.saturating_sub(before.switches),
        }
    }
}

/// The client's and the daemon's usage over a run.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    client: Usage,
    daemon: Option<Usage>,
}

/// Measures `Cost` from its creation to [`CostMeter::stop`].
struct CostMeter {
    daemon_pid: Option<String>,
    client: Usage,
    daemon: Option<Usage>,
}

impl CostMeter {
    fn start(daemon_pid: Option<u32>) -> CostMeter {
        let daemon_pid = daemon_pid.map(|p| p.to_string());
        CostMeter {
            client: Usage::of("self").unwrap_or_default(),
            daemon: daemon_pid.as_deref().and_then(Usage::of),
            daemon_pid,
        }
    }

    fn stop(self) -> Cost {
        Cost {
            client: Usage::of("self").unwrap_or_default().since(self.client),
            daemon: self
                .daemon_pid
                .as_deref()
                .and_then(Usage::of)
                .zip(self.daemon)
                .map(|(now, before)| now.since(before)),
        }
    }
}

/// One latency run: p50 and p99 in µs, round trips measured.
struct Rtt {
    p50: f64,
    p99: f64,
    n: usize,
}

fn run(args: &Args) -> Res<()> {
    let duration = Duration::from_secs_f64(args.duration);
    if let Some(only) = &args.only {
        let e = match only.as_str() {
            "none" => Ends::None,
            "publisher" => Ends::Publisher,
            "subscriber" => Ends::Subscriber,
            "both" => Ends::Both,
            other => {
                return Err(format!("--only {other}: none, publisher, subscriber or both").into())
            }
        };
        for &size in &args.sizes {
            let out = throughput(&args.server, e, size, duration, 1, args.daemon_pid)?;
            println!(
                "{size} B {}: {:.0} msgs/s, {} of {} received; {}",
                e.name(),
                out.rate,
                out.received,
                out.sent,
                per_event(&out)
            );
        }
        return Ok(());
    }
    let mut variants = vec![Ends::None];
    for &e in &args.ends {
        if !variants.contains(&e) {
            variants.push(e);
        }
    }
    // (round, size, [(variant, result)] with best effort first)
    let mut stream_rows = Vec::new();
    let mut rtt_rows = Vec::new();
    let mut run_id = 0u32;
    for round in 1..=args.rounds {
        // Rotate the order, so no variant always runs first.
        let mut order = variants.clone();
        order.rotate_left((round as usize - 1) % variants.len());
        for &size in &args.sizes {
            let mut s = Vec::new();
            for &e in &order {
                run_id += 1;
                let out = throughput(&args.server, e, size, duration, run_id, args.daemon_pid)?;
                eprintln!(
                    "round {round} {size} B {}: {:.0} msgs/s, {} of {} received; {}",
                    e.name(),
                    out.rate,
                    out.received,
                    out.sent,
                    per_event(&out)
                );
                s.push((e, out));
            }
            s.sort_by_key(|(e, _)| variants.iter().position(|v| v == e));
            stream_rows.push((round, size, s));
            if args.throughput_only {
                continue;
            }
            let mut l = Vec::new();
            for &e in &order {
                run_id += 1;
                let out = latency(&args.server, e, size, duration, run_id)?;
                eprintln!(
                    "round {round} {size} B {}: RTT p50 {:.0} µs p99 {:.0} µs ({} round trips)",
                    e.name(),
                    out.p50,
                    out.p99,
                    out.n
                );
                l.push((e, out));
            }
            l.sort_by_key(|(e, _)| variants.iter().position(|v| v == e));
            rtt_rows.push((round, size, l));
        }
    }

    println!(
        "Throughput, 1 publisher → 1 subscriber (rate between the first and the last arrival):\n"
    );
    println!("| round | size | acknowledged | best_effort msgs/s | reliable msgs/s | reliable ÷ best_effort | received best_effort | received reliable |");
    println!("|---:|---:|---|---:|---:|---:|---|---|");
    for (round, size, s) in &stream_rows {
        let b = &s[0].1;
        for (e, r) in &s[1..] {
            println!(
                "| {round} | {size} B | {e} | {:.0} | {:.0} | {:.2} | {} of {} | {} of {} |",
                b.rate,
                r.rate,
                r.rate / b.rate,
                b.received,
                b.sent,
                r.received,
                r.sent
            );
        }
    }
    println!("\nWhat each event cost (per event received; CPU from /proc, 10 ms ticks: read the spread, not a digit):\n");
    println!("| round | size | acknowledged | client CPU ns/event | daemon CPU ns/event | client switches / 1000 events | daemon switches / 1000 events |");
    println!("|---:|---:|---|---:|---:|---:|---:|");
    for (round, size, s) in &stream_rows {
        for (e, r) in s {
            let [c, d, cs, ds] = costs(r);
            println!("| {round} | {size} B | {e} | {c} | {d} | {cs} | {ds} |");
        }
    }
    println!("\nRound trip, ping → echo → pong, one in flight (both publishers and both subscriptions acknowledged as the row says):\n");
    println!("| round | size | acknowledged | best_effort p50 µs | reliable p50 µs | p50 ratio | best_effort p99 µs | reliable p99 µs | round trips (b / r) |");
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---|");
    for (round, size, l) in &rtt_rows {
        let b = &l[0].1;
        for (e, r) in &l[1..] {
            println!(
                "| {round} | {size} B | {e} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {} / {} |",
                b.p50,
                r.p50,
                r.p50 / b.p50,
                b.p99,
                r.p99,
                b.n,
                r.n
            );
        }
    }
    println!("\nSpread over the rounds (min / median / max):\n");
    println!("| size | acknowledged | throughput: reliable ÷ best_effort | RTT p50: reliable ÷ best_effort |");
    println!("|---:|---|---|---|");
    for &size in &args.sizes {
        for &e in &variants[1..] {
            let t: Vec<f64> = stream_rows
                .iter()
                .filter(|(_, s, _)| *s == size)
                .filter_map(|(_, _, s)| {
                    let r = s.iter().find(|(v, _)| *v == e)?;
                    Some(r.1.rate / s[0].1.rate)
                })
                .collect();
            let l: Vec<f64> = rtt_rows
                .iter()
                .filter(|(_, s, _)| *s == size)
                .filter_map(|(_, _, l)| {
                    let r = l.iter().find(|(v, _)| *v == e)?;
                    Some(r.1.p50 / l[0].1.p50)
                })
                .collect();
            println!("| {size} B | {e} | {} | {} |", spread(t), spread(l));
        }
    }
    Ok(())
}

/// A run's client CPU, daemon CPU (ns per event received) and switches
/// per 1,000 events, formatted ("—" where unknown).
fn costs(r: &Stream) -> [String; 4] {
    let n = r.received.max(1) as f64;
    let d = r.cost.daemon;
    [
        format!("{:.0}", r.cost.client.cpu_ns as f64 / n),
        d.map_or("—".into(), |d| format!("{:.0}", d.cpu_ns as f64 / n)),
        format!("{:.1}", r.cost.client.switches as f64 * 1000.0 / n),
        d.map_or("—".into(), |d| {
            format!("{:.1}", d.switches as f64 * 1000.0 / n)
        }),
    ]
}

/// [`costs`] in one line, for the progress output.
fn per_event(r: &Stream) -> String {
    let [c, d, cs, ds] = costs(r);
    format!("CPU ns/event client {c} daemon {d}; switches/1000 client {cs} daemon {ds}")
}

fn spread(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "—".into();
    }
    v.sort_by(f64::total_cmp);
    format!(
        "{:.2} / {:.2} / {:.2}",
        v[0],
        v[v.len() / 2],
        v[v.len() - 1]
    )
}

/// Counts arrivals and the first and last arrival time.
struct Counter {
    base: Instant,
    count: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
}

impl Counter {
    fn hit(&self) {
        let t = self.base.elapsed().as_nanos() as u64;
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            self.first_ns.store(t, Ordering::Relaxed);
        }
        self.last_ns.store(t, Ordering::Relaxed);
    }

    fn rate(&self) -> f64 {
        let n = self.count.load(Ordering::Relaxed);
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

fn throughput(
    server: &str,
    ends: Ends,
    size: usize,
    duration: Duration,
    id: u32,
    daemon_pid: Option<u32>,
) -> Res<Stream> {
    let tag = format!("/bench/rc{}/{id}/data", std::process::id());
    let counter = Arc::new(Counter {
        base: Instant::now(),
        count: AtomicU64::new(0),
        first_ns: AtomicU64::new(0),
        last_ns: AtomicU64::new(0),
    });
    let sub_session = Session::connect(server)?;
    let c = counter.clone();
    let _sub = sub_session
        .subscribe(&tag)
        .max_queue_length(65_536)
        .qos("reliability", ends.subscription())
        .callback(move |_| c.hit())?;
    let pub_session = Session::connect(server)?;
    let publisher = pub_session.declare_publisher(&format!("/bench/rc/{id}/pub"))?;
    let reliability = ends.publisher();
    publisher.set_reliability(reliability);
    let payload = Bytes::from(vec![0xabu8; size]);
    let meter = CostMeter::start(daemon_pid);
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        if sent.is_multiple_of(256) && start.elapsed() >= duration {
            break;
        }
        publisher.publish(&tag, payload.clone())?;
        sent += 1;
    }
    pub_session.flush()?;
    if reliability != Reliability::BestEffort {
        pub_session.wait_acknowledged(Duration::from_secs(30))?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = counter.count.load(Ordering::Relaxed);
    let mut idle = 0;
    while Instant::now() < deadline && last < sent && idle < 20 {
        std::thread::sleep(Duration::from_millis(100));
        let now = counter.count.load(Ordering::Relaxed);
        idle = if now == last { idle + 1 } else { 0 };
        last = now;
    }
    let cost = meter.stop();
    let received = counter.count.load(Ordering::Relaxed);
    if received < sent {
        // What the sessions saw, for a reader of a shortfall (a reliable
        // run must have none; best effort drops at the subscriber's queue).
        eprintln!(
            "{}: {} of {sent} not received (a full subscriber queue drops by its discard \
             policy, docs/reliability.md); reconnects: publisher {}, subscriber {}; \
             acknowledgements: {:?}; duplicates dropped {}",
            ends.name(),
            sent - received,
            pub_session.reconnects(),
            sub_session.reconnects(),
            pub_session.ack_stats(),
            sub_session.delivery_duplicates()
        );
    }
    Ok(Stream {
        sent,
        received,
        rate: counter.rate(),
        cost,
    })
}

fn latency(server: &str, ends: Ends, size: usize, duration: Duration, id: u32) -> Res<Rtt> {
    let base = format!("/bench/rc{}/{id}", std::process::id());
    let (ping_tag, pong_tag) = (format!("{base}/ping"), format!("{base}/pong"));
    let echo_session = Session::connect(server)?;
    let echo_pub = echo_session.declare_publisher(&format!("/bench/rc/{id}/echo"))?;
    echo_pub.set_express(true);
    echo_pub.set_reliability(ends.publisher());
    let pong = pong_tag.clone();
    let _echo = echo_session
        .subscribe(&ping_tag)
        .qos("reliability", ends.subscription())
        .callback(move |s| {
            let _ = echo_pub.publish(&pong, s.payload());
        })?;
    let ping_session = Session::connect(server)?;
    let pinger = ping_session.declare_publisher(&format!("/bench/rc/{id}/pinger"))?;
    pinger.set_express(true);
    pinger.set_reliability(ends.publisher());
    let (tx, rx) = mpsc::channel::<()>();
    let _pong_sub = ping_session
        .subscribe(&pong_tag)
        .qos("reliability", ends.subscription())
        .callback(move |_| {
            let _ = tx.send(());
        })?;
    let payload = Bytes::from(vec![0x5au8; size]);
    let mut rtts = Vec::new();
    let start = Instant::now();
    let mut lost = 0;
    while start.elapsed() < duration {
        let t = Instant::now();
        pinger.publish(&ping_tag, payload.clone())?;
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(()) => rtts.push(t.elapsed().as_nanos() as f64 / 1000.0),
            // The echo's subscription was not in place yet: send another.
            Err(mpsc::RecvTimeoutError::Timeout) => lost += 1,
            Err(e) => return Err(e.into()),
        }
        if lost > 10 {
            return Err("10 pings got no pong".into());
        }
    }
    let mut v: Vec<f64> = rtts.into_iter().skip(WARMUP_ROUND_TRIPS).collect();
    if v.is_empty() {
        return Err("no round trip after the warm-up: try a longer --duration".into());
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Ok(Rtt {
        p50: q(0.5),
        p99: q(0.99),
        n: v.len(),
    })
}
