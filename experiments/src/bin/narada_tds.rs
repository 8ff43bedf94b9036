//! NaradaBrokering Fig. 16–20 (§3.3–3.4): jitter at the input of the
//! buffering service vs the output of the time-differential service (TDS),
//! across a jittery WAN link and on the LAN, and the spacing of events
//! 500 µs apart. One router (the subscriber's daemon, in this process,
//! listening on TCP); the publisher reaches it through the testbed's
//! software delay relay (`tagwire_testbed::DelayRelay`, `delay ± jitter`
//! per chunk, bytes in order: what `netem delay D J` does to one TCP flow)
//! or directly (LAN); two subscribers on the same tag, one plain (the
//! input: what a client sees without the TDS) and one with
//! `--qos playout=tds:D` (the output). Both measure at the client, through
//! the public API: RFC 3550 jitter (J += (|D| − J)/16) and the spacing
//! error (inter-arrival minus inter-source-time) per event, the first
//! `--warmup` events left out (Narada left out the first few, the media
//! player's start-up). CPU: this process's CPU time (utime + stime) during
//! the run with the TDS subscriber, minus the same run with a plain second
//! subscriber: the TDS's own cost per stream. `--client-playout` runs the
//! TDS in the subscribing client instead (the library's `.playout(cfg)`),
//! so the last hop's jitter is removed too; `--spin US` (with
//! `--client-playout`) makes its thread busy-wait the last US µs before
//! each release (`playout_spin`) and takes the events in a callback on
//! that thread, so that no wake-up comes after the release.
//!
//! ```text
//! cargo run --release --manifest-path experiments/Cargo.toml --bin narada_tds -- --seconds 20
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tagwire::router::{Router, RouterConfig};
use tagwire::{Event, Session, Subscriber};
use tagwire_testbed::{DelayRelay, WanLink};

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// This process's CPU time so far (utime + stime), ns.
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name's closing parenthesis: state is 3,
    // utime 14 and stime 15 (1-based over the whole line).
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks * 10_000_000 // USER_HZ = 100
}

/// One stream's shape: events `spacing` apart in source time, `burst` per
/// instant (a video frame's packets), `size` bytes each.
#[derive(Clone, Copy)]
struct Stream {
    spacing: Duration,
    burst: u32,
    size: usize,
}

/// (arrival ns, source ns, seq) per event a subscriber got.
type Seen = Vec<(u64, u64, u64)>;

fn collect(sub: Subscriber, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Vec::with_capacity(1 << 16);
        while !stop.load(Ordering::Relaxed) {
            match sub.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(s)) => {
                    let at = now_ns();
                    let e = s.event();
                    seen.push((at, e.source_time_ns, e.seq));
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("subscriber: {e}");
                    break;
                }
            }
        }
        seen
    })
}

/// RFC 3550 jitter (final estimate, µs), spacing errors (µs, |error|), and
/// events out of source order, past the first `warmup`.
struct Measured {
    jitter_us: f64,
    spacing_p50_us: f64,
    spacing_p99_us: f64,
    spacing_max_us: f64,
    events: usize,
    out_of_order: usize,
}

fn measure(seen: &Seen, warmup: usize) -> Measured {
    let s = &seen[warmup.min(seen.len())..];
    let mut j = 0f64;
    let mut errs: Vec<f64> = Vec::with_capacity(s.len());
    let mut out_of_order = 0;
    for w in s.windows(2) {
        let d = (w[1].0 as f64 - w[0].0 as f64) - (w[1].1 as f64 - w[0].1 as f64);
        j += (d.abs() - j) / 16.0;
        errs.push(d.abs() / 1e3);
        if w[1].1 < w[0].1 {
            out_of_order += 1;
        }
    }
    errs.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        errs.get(((errs.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Measured {
        jitter_us: j / 1e3,
        spacing_p50_us: pct(0.5),
        spacing_p99_us: pct(0.99),
        spacing_max_us: pct(1.0),
        events: s.len(),
        out_of_order,
    }
}

/// One run: the publisher through `link` (None: direct) for `seconds`;
/// the second subscriber with `playout` (None: plain). Returns (input,
/// output, CPU ns of the process, wall ns).
fn run(
    stream: Stream,
    link: Option<WanLink>,
    playout: Option<&str>,
    seconds: f64,
    warmup: usize,
) -> (Measured, Measured, u64, u64, Option<(f64, f64, u64)>) {
    let router = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    })
    .unwrap_or_else(|e| panic!("router: {e}"));
    let addr: SocketAddr = router
        .tcp_addr()
        .unwrap_or_else(|| panic!("no tcp address"));
    let direct = format!("tcp://{addr}");
    let relay = link.map(|l| {
        DelayRelay::start("127.0.0.1:0".parse().expect("address"), addr, l)
            .unwrap_or_else(|e| panic!("relay: {e}"))
    });
    let pub_url = match &relay {
        Some(r) => format!("tcp://{}", r.local_addr()),
        None => direct.clone(),
    };
    let subs = Session::connect(&direct).unwrap_or_else(|e| panic!("connect: {e}"));
    let plain = subs
        .subscribe("/tds/**")
        .receiver()
        .unwrap_or_else(|e| panic!("subscribe: {e}"));
    let mut second = subs.subscribe("/tds/**");
    if let Some(p) = playout {
        if std::env::args().any(|a| a == "--client-playout") {
            // The TDS runs in this client (the library's `.playout(cfg)`),
            // after the last hop, instead of in the daemon.
            let cfg: tagwire::PlayoutConfig = p.parse().unwrap_or_else(|e| panic!("{p}: {e}"));
            second = second.playout(cfg);
        } else {
            second = second.qos("playout", p);
        }
        // `--sched fifo:N`: the lane that serves the TDS subscription's
        // connection (the writer that releases) runs real-time.
        if let Some(sched) = arg("--sched") {
            second = second.qos("sched", &sched);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let a = collect(plain, stop.clone());
    // `--spin US`: a callback on the spinning playout thread records each
    // event as it is handed over; else a thread receives from a queue.
    let spin = arg("--spin").map(|us| {
        Duration::from_micros(us.parse().unwrap_or_else(|e| panic!("--spin {us}: {e}")))
    });
    let b = match spin.filter(|_| playout.is_some()) {
        Some(spin) => {
            let seen: Arc<std::sync::Mutex<Seen>> = Arc::default();
            let s2 = seen.clone();
            let sub = second
                .playout_spin(spin)
                .callback(move |s| {
                    let at = now_ns();
                    let e = s.event();
                    let mut v = s2.lock().unwrap_or_else(|p| p.into_inner());
                    v.push((at, e.source_time_ns, e.seq));
                })
                .unwrap_or_else(|e| panic!("subscribe {playout:?}: {e}"));
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                drop(sub);
                std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()))
            })
        }
        None => collect(
            second
                .receiver()
                .unwrap_or_else(|e| panic!("subscribe {playout:?}: {e}")),
            stop.clone(),
        ),
    };
    // Through the relay the client is not on the daemon's port: it
    // presents the owner's token for that port itself.
    let token = tagwire_router::local::read_token(&tagwire_router::local::token_path(addr.port()))
        .unwrap_or_else(|e| panic!("token: {e}"));
    let publisher = Session::builder()
        .token(token)
        .connect(&pub_url)
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let p = publisher
        .declare_publisher("/tds/src")
        .unwrap_or_else(|e| panic!("publisher: {e}"));
    let payload = vec![0x5au8; stream.size];
    let (cpu0, t0) = (cpu_ns(), Instant::now());
    let total = (seconds * 1e9 / stream.spacing.as_nanos() as f64) as u64;
    for k in 0..total {
        let due = stream.spacing * k as u32;
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
        let src = now_ns();
        for _ in 0..stream.burst {
            let mut e = Event::new("/tds/x", payload.clone());
            e.header.source_time_ns = src;
            p.send(e).unwrap_or_else(|e| panic!("send: {e}"));
        }
    }
    // The playout delay plus the link's, then stop.
    std::thread::sleep(Duration::from_millis(500));
    let (cpu, wall) = (cpu_ns() - cpu0, t0.elapsed().as_nanos() as u64);
    // The daemon's own RFC 3550 estimates at the services' input (arrival)
    // and output (release), before the socket and the client.
    let daemon = subs
        .list()
        .ok()
        .and_then(|l| l.subscriptions.iter().find_map(|x| x.time))
        .map(|t| {
            (
                t.input_jitter_ns as f64 / 1e3,
                t.output_jitter_ns as f64 / 1e3,
                t.late,
            )
        });
    stop.store(true, Ordering::Relaxed);
    let (a, b) = (a.join().unwrap_or_default(), b.join().unwrap_or_default());
    drop(relay);
    (measure(&a, warmup), measure(&b, warmup), cpu, wall, daemon)
}

/// This thread's CPU time so far (utime + stime), ns.
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) * 10_000_000
}

/// Fig. 18: how a release thread wakes, alone: releases due `spacing`
/// apart for `seconds`, by a thread that sleeps in slices of `slice` and
/// releases what is due when it wakes (the paper's TDS threads), or (slice
/// None) that sleeps until each release time (what the daemon's writer
/// does with its timerfd). Returns (release error p50, p99 µs, CPU % of one
/// core).
fn wake_mechanism(slice: Option<Duration>, spacing: Duration, seconds: f64) -> (f64, f64, f64) {
    let n = (seconds * 1e9 / spacing.as_nanos() as f64) as u64;
    let mut errs = Vec::with_capacity(n as usize);
    let (cpu0, t0) = (thread_cpu_ns(), Instant::now());
    let mut k = 0u64;
    while k < n {
        let due = spacing * k as u32;
        match slice {
            Some(s) => std::thread::sleep(s),
            None => {
                if let Some(w) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(w);
                }
            }
        }
        let now = t0.elapsed();
        while k < n && spacing * k as u32 <= now {
            errs.push((now - spacing * k as u32).as_nanos() as f64 / 1e3);
            k += 1;
        }
    }
    let cpu = (thread_cpu_ns() - cpu0) as f64 / t0.elapsed().as_nanos() as f64 * 100.0;
    errs.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| errs[((errs.len() as f64 - 1.0) * p).round() as usize];
    (pct(0.5), pct(0.99), cpu)
}

fn main() {
    let seconds: f64 = arg("--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    let warmup: usize = arg("--warmup").and_then(|s| s.parse().ok()).unwrap_or(100);
    let only = arg("--fig").unwrap_or_else(|| "all".into());
    // The paper's video (tagwire bench av --kind video): 15 frames/s,
    // ~740 B packets, 3–4 per frame (4 here).
    let video = Stream {
        spacing: Duration::from_nanos(1_000_000_000 / 15),
        burst: 4,
        size: 740,
    };
    let wan = WanLink::new(Duration::from_millis(50), Duration::from_millis(20));
    println!(
        "| figure | link | stream | playout | input jitter µs | output jitter µs | ratio | in the daemon: TDS input / output jitter µs | spacing error p50 / p99 / max µs | out of order | TDS CPU % of one core |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let row = |fig: &str, link: Option<WanLink>, stream: Stream, name: &str, playout: &str| {
        let (i, o, cpu, wall, daemon) = run(stream, link, Some(playout), seconds, warmup);
        let (_, _, cpu_plain, wall_plain, _) = run(stream, link, None, seconds, warmup);
        let daemon = daemon.map_or("-".to_owned(), |(i, o, late)| {
            format!("{i:.0} / {o:.0} ({late} late)")
        });
        let tds_cpu = (cpu as f64 / wall as f64 - cpu_plain as f64 / wall_plain as f64) * 100.0;
        let link_s = link.map_or("LAN (loopback)".to_owned(), |l| {
            format!(
                "relay {} ± {} ms",
                l.delay.as_millis(),
                l.jitter.as_millis()
            )
        });
        println!(
            "| {fig} | {link_s} | {name} | {playout} | {:.0} | {:.0} | {:.3} | {daemon} | {:.0} / {:.0} / {:.0} | {} of {} | {:.2} |",
            i.jitter_us,
            o.jitter_us,
            o.jitter_us / i.jitter_us,
            o.spacing_p50_us,
            o.spacing_p99_us,
            o.spacing_max_us,
            o.out_of_order,
            o.events,
            tds_cpu
        );
    };
    if only == "all" || only == "16" {
        row(
            "16–17",
            Some(wan),
            video,
            "video 15 fps × 4 × 740 B",
            "tds:100ms",
        );
    }
    if only == "all" || only == "19" {
        row("19", None, video, "video 15 fps × 4 × 740 B", "tds:20ms");
    }
    if only == "all" || only == "20" {
        let fine = Stream {
            spacing: Duration::from_micros(500),
            burst: 1,
            size: 64,
        };
        row("20", None, fine, "64 B every 500 µs", "tds:20ms");
        row(
            "20 (WAN)",
            Some(WanLink::new(
                Duration::from_millis(10),
                Duration::from_millis(2),
            )),
            fine,
            "64 B every 500 µs",
            "tds:30ms",
        );
    }
    if only == "all" || only == "18" {
        println!("\n| Fig. 18: wake mechanism, releases 500 µs apart | release error p50 µs | p99 µs | CPU % of one core |");
        println!("|---|---|---|---|");
        for (name, slice) in [
            ("slices of 1 ms (paper)", Some(Duration::from_millis(1))),
            ("slices of 100 µs (paper)", Some(Duration::from_micros(100))),
            (
                "slices of 10 µs (paper's 20–25 % CPU point)",
                Some(Duration::from_micros(10)),
            ),
            ("sleep until each release (our writer's timerfd)", None),
        ] {
            let (p50, p99, cpu) =
                wake_mechanism(slice, Duration::from_micros(500), seconds.min(10.0));
            println!("| {name} | {p50:.0} | {p99:.0} | {cpu:.1} |");
        }
    }
    println!(
        "\n{seconds} s per run, first {warmup} events left out; jitter RFC 3550 at the subscribers; TDS CPU: process CPU with the TDS subscriber minus with a plain one, as % of one core"
    );
}
