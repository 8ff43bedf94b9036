//! `tagwire bench av`: Narada's audio/video conferencing load (Fig. 4–5, and
//! 7–9 over several daemons). One speaker per meeting publishes audio (252 B
//! every 30 ms) or video (H.263-like: 15 frames/s, ~740 B packets, 5,610
//! packets in 2 minutes); N listeners, spread evenly over the daemons given,
//! receive it. Listeners are raw protocol connections (the core engine over
//! tokio), many per thread, so thousands fit in one process. Each packet
//! carries its send time; per listener the tool keeps the mean latency, the
//! RTP jitter estimate (J += (|D(i−1,i)| − J)/16) and the packets later than
//! 100 ms. Sweeping N finds where the mean passes 20 ms or late packets pass
//! 1 % (Narada's capacity criterion). With `--speaker-daemon` the speakers
//! go to one daemon and the listeners to the others, and each point also
//! reports per listener daemon (a "site" of Narada's WAN Fig. 10–11).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use tagwire::admin::{AdminReply, AdminRequest};
use tagwire::Session;
use tagwire_core::connection::{ClientHello, Config, Connection, Input};
use tagwire_proto::{EndpointKind, EventRef};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::CmdResult;
use crate::cli::{AvKind, BenchArgs};

/// Packets later than this count as late (Narada: 100 ms).
const LATE_NS: u64 = 100_000_000;
/// Largest listener count one run accepts.
const MAX_LISTENERS: usize = 20_000;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One listener's counters.
#[derive(Debug, Default, Clone, Copy)]
struct Listener {
    /// Packets left out at the start (`--warmup`), counted as received.
    warm: u64,
    /// How many to leave out.
    warmup: u64,
    /// Packets measured (after the warm-up).
    packets: u64,
    latency_sum_ns: u128,
    late: u64,
    jitter_ns: f64,
    last_transit: Option<i128>,
    /// Sum of squared latencies (ns²), for the standard deviation.
    latency_sq_sum_ns: f64,
}

impl Listener {
    fn take(&mut self, sent: u64, received: u64) {
        if self.warm < self.warmup {
            self.warm += 1;
            return;
        }
        let transit = received as i128 - sent as i128;
        self.packets += 1;
        self.latency_sum_ns += transit.max(0) as u128;
        self.latency_sq_sum_ns += (transit.max(0) as f64).powi(2);
        if transit > LATE_NS as i128 {
            self.late += 1;
        }
        if let Some(prev) = self.last_transit {
            let d = (transit - prev).abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit = Some(transit);
    }
}

/// One sweep point's result.
#[derive(Debug, serde::Serialize)]
struct Point {
    /// The band every connection of the run went to (`--band`, else the
    /// daemons' default band).
    band: String,
    /// The transport: TCP (listeners are raw TCP connections).
    transport: &'static str,
    listeners: usize,
    meetings: usize,
    daemons: usize,
    kind: &'static str,
    seconds: f64,
    /// The run's number (1..=`--runs`).
    run: usize,
    packets_sent: u64,
    packets_expected: u64,
    packets_received: u64,
    /// Packets per listener left out at the start (`--warmup`).
    warmup_per_listener: u64,
    /// Packets in the latency, jitter and late figures (received less the
    /// warm-up).
    packets_measured: u64,
    mean_latency_ms: f64,
    mean_jitter_ms: f64,
    late_percent: f64,
    lost_percent: f64,
    /// Narada's criterion: the mean under 20 ms and late packets under 1 %.
    within_capacity: bool,
    /// The same per listener daemon, in the order given.
    by_daemon: Vec<Site>,
}

/// One listener daemon's share of a point.
#[derive(Debug, serde::Serialize)]
struct Site {
    daemon: String,
    listeners: usize,
    packets_received: u64,
    mean_latency_ms: f64,
    /// Standard deviation of all its packets' latencies.
    sd_latency_ms: f64,
    mean_jitter_ms: f64,
    late_percent: f64,
    lost_percent: f64,
}

/// Sums `listeners`' counters into one site (or the whole point).
fn site(daemon: String, listeners: &[Listener], sent: u64) -> Site {
    let measured: u64 = listeners.iter().map(|l| l.packets).sum();
    let received: u64 = measured + listeners.iter().map(|l| l.warm).sum::<u64>();
    let latency: u128 = listeners.iter().map(|l| l.latency_sum_ns).sum();
    let sq: f64 = listeners.iter().map(|l| l.latency_sq_sum_ns).sum();
    let late: u64 = listeners.iter().map(|l| l.late).sum();
    let n = measured.max(1) as f64;
    let mean = latency as f64 / n;
    let expected = sent * listeners.len() as u64;
    Site {
        daemon,
        listeners: listeners.len(),
        packets_received: received,
        mean_latency_ms: mean / 1e6,
        sd_latency_ms: (sq / n - mean * mean).max(0.0).sqrt() / 1e6,
        mean_jitter_ms: listeners.iter().map(|l| l.jitter_ns).sum::<f64>()
            / listeners.len().max(1) as f64
            / 1e6,
        late_percent: 100.0 * late as f64 / n,
        lost_percent: 100.0 * expected.saturating_sub(received) as f64 / expected.max(1) as f64,
    }
}

/// The token for a daemon at `addr`: TAGWIRE_TOKEN, else (loopback) the
/// owner's token file.
fn token_for(addr: &SocketAddr) -> String {
    if let Ok(t) = std::env::var("TAGWIRE_TOKEN") {
        return t;
    }
    if addr.ip().is_loopback() {
        let p = tagwire::router::local::token_path(addr.port());
        return tagwire::router::local::read_token(&p).unwrap_or_default();
    }
    String::new()
}

/// Runs `tagwire bench av`; `band` is the global `--band`.
pub fn run(daemons: &[String], band: Option<&str>, a: &BenchArgs) -> CmdResult {
    if band == Some("auto") {
        return Err(
            "bench av: --band auto is not supported (its listeners are raw connections, not sessions that follow priority); name a band"
                .into(),
        );
    }
    let points: Vec<usize> = a
        .listeners
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--listeners {:?}: {e} (e.g. 100,500,1000)", a.listeners))?;
    if points.iter().any(|&n| n == 0 || n > MAX_LISTENERS) {
        return Err(format!("--listeners: each count must be 1..={MAX_LISTENERS}").into());
    }
    if a.runs == 0 || a.runs > 100 {
        return Err(format!("--runs {} must be 1..=100", a.runs).into());
    }
    if a.meetings == 0 || a.meetings > 1000 {
        return Err(format!("--meetings {} must be 1..=1000", a.meetings).into());
    }
    if !(a.duration > 0.0 && a.duration <= 3600.0) {
        return Err(format!(
            "--duration {} must be between 0 and 3600 seconds",
            a.duration
        )
        .into());
    }
    let addrs: Vec<SocketAddr> = daemons
        .iter()
        .map(|u| parse_daemon(u))
        .collect::<Result<_, _>>()?;
    let speaker = match &a.speaker_daemon {
        Some(u) => Some(parse_daemon(u)?),
        None => None,
    };
    raise_fd_limit(points.iter().max().copied().unwrap_or(0) + 64)?;
    // The listeners connect to the band's listener of each daemon, with
    // the token of its main port; the speakers' sessions move to the band.
    let tokens: Vec<String> = addrs.iter().map(token_for).collect();
    let (listen_at, band_used) = match band {
        Some(b) => (
            addrs
                .iter()
                .zip(&tokens)
                .map(|(addr, token)| Ok((band_addr(*addr, b)?, token.clone())))
                .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?,
            b.to_owned(),
        ),
        None => (
            addrs.iter().copied().zip(tokens.iter().cloned()).collect(),
            Session::connect(&format!("tcp://{}", addrs[0]))?.band_in_use()?,
        ),
    };
    let per_second = match a.kind {
        AvKind::Audio => 1000.0 / 30.0,
        AvKind::Video => 5610.0 / 120.0,
    };
    let nominal = (a.duration * per_second) as u64;
    if nominal < a.warmup + 100 && !a.json {
        eprintln!(
            "tagwire: --duration {} s sends ~{nominal} packets per listener; after --warmup {} fewer than 100 are measured (raise --duration)",
            a.duration, a.warmup
        );
    }
    let mut results = Vec::new();
    for &n in &points {
        let mut runs = Vec::new();
        for run in 1..=a.runs {
            let mut p = point(&addrs, &listen_at, speaker, band, &band_used, n, a)?;
            p.run = run;
            if !a.json {
                outln!(
                "{:>6} listeners {} meeting(s) on {} daemon(s), band {}, transport {}{}: mean {:.2} ms, jitter {:.2} ms, late {:.2} %, lost {:.2} % ({} of {} packets, {} measured after {} per listener of warm-up){}",
                p.listeners,
                p.meetings,
                p.daemons,
                p.band,
                p.transport,
                if a.runs > 1 { format!(", run {run}/{}", a.runs) } else { String::new() },
                p.mean_latency_ms,
                p.mean_jitter_ms,
                p.late_percent,
                p.lost_percent,
                p.packets_received,
                p.packets_expected,
                p.packets_measured,
                p.warmup_per_listener,
                if p.within_capacity { "" } else { "  ← over capacity (mean > 20 ms or late > 1 %)" }
            );
                if speaker.is_some() {
                    for s in &p.by_daemon {
                        outln!(
                        "         at {}: {} listeners, mean {:.2} ms (sd {:.2}), jitter {:.2} ms, late {:.2} %, lost {:.2} %",
                        s.daemon, s.listeners, s.mean_latency_ms, s.sd_latency_ms, s.mean_jitter_ms, s.late_percent, s.lost_percent
                    );
                    }
                }
            }
            runs.push((p.mean_latency_ms, p.late_percent));
            results.push(p);
        }
        if a.runs > 1 && !a.json {
            let spread = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                (v[0], v[v.len() / 2], v[v.len() - 1])
            };
            let (m0, m1, m2) = spread(runs.iter().map(|r| r.0).collect());
            let (l0, l1, l2) = spread(runs.iter().map(|r| r.1).collect());
            outln!(
                "{n:>6} listeners, {} runs: mean latency min {m0:.2} / median {m1:.2} / max {m2:.2} ms; late min {l0:.2} / median {l1:.2} / max {l2:.2} %",
                a.runs
            );
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string(&results)?);
    }
    Ok(())
}

/// The TCP listener of band `band` on the daemon at `addr`, from the
/// lanes of its listing.
fn band_addr(addr: SocketAddr, band: &str) -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let s = Session::connect(&format!("tcp://{addr}"))?;
    let reply = s.admin(AdminRequest::List {
        after: None,
        limit: Some(1),
    })?;
    let AdminReply::List(page) = reply else {
        return Err(format!("daemon {addr}: unexpected reply {}", reply.to_json()).into());
    };
    let lane = page.lanes.iter().find(|l| l.band == band).ok_or_else(|| {
        let known: Vec<&str> = page.lanes.iter().map(|l| l.band.as_str()).collect();
        format!(
            "daemon {addr} has no band {band:?} (its bands: {})",
            known.join(", ")
        )
    })?;
    let port = lane
        .tcp
        .as_deref()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .ok_or_else(|| format!("daemon {addr}: band {band} has no TCP listener"))?;
    Ok(SocketAddr::new(addr.ip(), port))
}

fn parse_daemon(u: &str) -> Result<SocketAddr, String> {
    let hp = u.trim().trim_start_matches("tcp://");
    std::net::ToSocketAddrs::to_socket_addrs(hp)
        .ok()
        .and_then(|mut i| i.next())
        .ok_or_else(|| format!("daemon {u:?}: expected tcp://HOST:PORT"))
}

fn raise_fd_limit(want: usize) -> Result<(), String> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    let need = want as u64;
    if cur.current.is_some_and(|c| c >= need) {
        return Ok(());
    }
    let max = cur.maximum.unwrap_or(u64::MAX);
    if max < need {
        return Err(format!(
            "{want} listeners need {want} file descriptors; the hard limit is {max} (raise it: ulimit -Hn)"
        ));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(need),
            maximum: cur.maximum,
        },
    )
    .map_err(|e| format!("cannot raise the open-file limit to {need}: {e}"))
}

/// The packets of one frame `k` of the video pattern (5,610 in 1,800 frames).
fn video_packets(k: u64) -> u64 {
    (k + 1) * 5610 / 1800 - k * 5610 / 1800
}

/// One sweep point: `addrs` are the daemons' main addresses (reports,
/// speakers), `listen_at` where each daemon's listeners connect and with
/// which token, `band` the band the speakers move to.
fn point(
    addrs: &[SocketAddr],
    listen_at: &[(SocketAddr, String)],
    speaker: Option<SocketAddr>,
    band: Option<&str>,
    band_used: &str,
    n: usize,
    a: &BenchArgs,
) -> Result<Point, Box<dyn std::error::Error>> {
    let run_id = now_ns() % 1_000_000_007;
    let stop = Arc::new(AtomicBool::new(false));
    let stats: Arc<Vec<Mutex<Listener>>> = Arc::new(
        (0..n)
            .map(|_| {
                Mutex::new(Listener {
                    warmup: a.warmup,
                    ..Listener::default()
                })
            })
            .collect(),
    );
    let connected = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(None::<String>));
    // Listeners: two threads (one per core), each a current-thread runtime.
    let threads = 2usize;
    let mut handles = Vec::new();
    for t in 0..threads {
        let (listen_at, stop, stats, connected, failed) = (
            listen_at.to_vec(),
            stop.clone(),
            stats.clone(),
            connected.clone(),
            failed.clone(),
        );
        let meetings = a.meetings;
        handles.push(std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let mut tasks = Vec::new();
                for i in (t..n).step_by(threads) {
                    let (addr, token) = listen_at[i % listen_at.len()].clone();
                    let tag = format!("/av/{run_id}/m{}", i % meetings);
                    let (stop, stats, connected, failed) = (
                        stop.clone(),
                        stats.clone(),
                        connected.clone(),
                        failed.clone(),
                    );
                    tasks.push(tokio::task::spawn_local(async move {
                        if let Err(e) =
                            listen(addr, token, &tag, i, run_id, &stop, &stats[i], &connected).await
                        {
                            let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
                            if f.is_none() {
                                *f = Some(format!("listener {i} on {addr}: {e}"));
                            }
                        }
                    }));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        }));
    }
    // Wait until every listener is subscribed (or one failed).
    let start = Instant::now();
    while connected.load(Ordering::Relaxed) < n as u64 {
        if let Some(e) = failed.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            stop.store(true, Ordering::Relaxed);
            return Err(e.into());
        }
        if start.elapsed() > Duration::from_secs(120) {
            stop.store(true, Ordering::Relaxed);
            return Err(format!(
                "only {} of {n} listeners subscribed within 120 s",
                connected.load(Ordering::Relaxed)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Interest must reach every daemon before the first packet.
    std::thread::sleep(Duration::from_millis(if addrs.len() > 1 {
        1000
    } else {
        100
    }));
    // Speakers: one publisher per meeting, on the daemons in turn.
    let sessions: Vec<Session> = (0..a.meetings)
        .map(|m| {
            let at = speaker.unwrap_or(addrs[m % addrs.len()]);
            Session::connect(&format!("tcp://{at}")).and_then(|s| match band {
                Some(b) => s.on_band(b),
                None => Ok(s),
            })
        })
        .collect::<Result<_, _>>()?;
    let publishers: Vec<tagwire::Publisher> = sessions
        .iter()
        .enumerate()
        .map(|(m, s)| s.declare_publisher(&format!("/av/{run_id}/speaker{m}")))
        .collect::<Result<_, _>>()?;
    for p in &publishers {
        p.set_express(true);
    }
    let (size, period, kind) = match a.kind {
        AvKind::Audio => (252usize, Duration::from_millis(30), "audio"),
        AvKind::Video => (740usize, Duration::from_nanos(1_000_000_000 / 15), "video"),
    };
    let duration = Duration::from_secs_f64(a.duration);
    let began = Instant::now();
    let mut sent = 0u64;
    let mut k = 0u64;
    let mut payload = vec![0u8; size];
    while began.elapsed() < duration {
        let due = began + period * k as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let packets = match a.kind {
            AvKind::Audio => 1,
            AvKind::Video => video_packets(k),
        };
        for _ in 0..packets {
            for (m, p) in publishers.iter().enumerate() {
                payload[..8].copy_from_slice(&now_ns().to_le_bytes());
                p.publish(&format!("/av/{run_id}/m{m}"), payload.clone())?;
            }
            sent += 1;
        }
        k += 1;
    }
    let seconds = began.elapsed().as_secs_f64();
    // Let the last packets arrive, then stop the listeners.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    drop(publishers);
    drop(sessions);
    for h in handles {
        let _ = h.join();
    }
    let all: Vec<Listener> = stats
        .iter()
        .map(|l| *l.lock().unwrap_or_else(|p| p.into_inner()))
        .collect();
    let whole = site(String::new(), &all, sent);
    let by_daemon = addrs
        .iter()
        .enumerate()
        .map(|(d, addr)| {
            let mine: Vec<Listener> = all.iter().skip(d).step_by(addrs.len()).copied().collect();
            site(format!("tcp://{addr}"), &mine, sent)
        })
        .collect();
    let (received, expected) = (whole.packets_received, sent * n as u64);
    let measured: u64 = all.iter().map(|l| l.packets).sum();
    let (mean_latency_ms, mean_jitter_ms) = (whole.mean_latency_ms, whole.mean_jitter_ms);
    let (late_percent, lost_percent) = (whole.late_percent, whole.lost_percent);
    Ok(Point {
        band: band_used.to_owned(),
        transport: "tcp",
        listeners: n,
        meetings: a.meetings,
        daemons: addrs.len(),
        kind,
        seconds,
        run: 1,
        packets_sent: sent,
        packets_expected: expected,
        packets_received: received,
        warmup_per_listener: a.warmup,
        packets_measured: measured,
        mean_latency_ms,
        mean_jitter_ms,
        late_percent,
        lost_percent,
        within_capacity: mean_latency_ms <= 20.0 && late_percent <= 1.0,
        by_daemon,
    })
}

/// One listener: connects, subscribes to `tag`, and records every packet
/// until `stop`.
#[allow(clippy::too_many_arguments)]
async fn listen(
    addr: SocketAddr,
    token: String,
    tag: &str,
    i: usize,
    run_id: u64,
    stop: &AtomicBool,
    stats: &Mutex<Listener>,
    connected: &AtomicU64,
) -> Result<(), String> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_nodelay(true);
    let hello = ClientHello {
        name: format!("av-listener-{i}"),
        token,
        session: [0; 16],
        nonce: tagwire::router::local::random_nonce(),
        proof: None,
    };
    let mut eng = Connection::client(Config::default(), hello, 0);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut subscribed = false;
    loop {
        if let Some(out) = eng.poll_transmit() {
            s.write_all(&out).await.map_err(|e| format!("write: {e}"))?;
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let read = tokio::time::timeout(Duration::from_millis(200), s.read_buf(&mut buf)).await;
        match read {
            Err(_) => continue,
            Ok(Ok(0)) => return Err("the daemon closed the connection".into()),
            Ok(Err(e)) => return Err(format!("read: {e}")),
            Ok(Ok(_)) => {}
        }
        let received = now_ns();
        while let Some(input) = eng.poll_input(&mut buf) {
            match input {
                Input::Welcome { .. } => {
                    let (id, _) =
                        eng.declare(EndpointKind::Subscriber, &format!("/av/{run_id}/l{i}"));
                    eng.subscribe(id, tag, Vec::new());
                }
                Input::Reply { reply, .. } => {
                    if let tagwire_core::connection::Reply::Err(code, message) = reply {
                        return Err(format!("refused: {code:?}: {message}"));
                    }
                    if !subscribed && !eng.subscriptions().is_empty() {
                        subscribed = true;
                        connected.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Input::Deliver { event, .. } => {
                    if let Ok(ev) = EventRef::parse(&event) {
                        if ev.payload.len() >= 8 {
                            let mut t = [0u8; 8];
                            t.copy_from_slice(&ev.payload[..8]);
                            stats
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .take(u64::from_le_bytes(t), received);
                        }
                    }
                }
                Input::PeerError { code, message, .. } => {
                    return Err(format!("daemon error {code:?}: {message}"))
                }
                Input::Closed => return Err("closed".into()),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_video_pattern_sends_5610_packets_in_1800_frames() {
        let total: u64 = (0..1800).map(video_packets).sum();
        assert_eq!(total, 5610);
        assert!((0..1800).all(|k| (3..=4).contains(&video_packets(k))));
    }

    #[test]
    fn the_warm_up_packets_count_as_received_but_not_in_the_figures() {
        let mut l = Listener {
            warmup: 2,
            ..Listener::default()
        };
        l.take(0, 500_000_000); // 500 ms: late, but warm-up
        l.take(30_000_000, 330_000_000); // the same
        l.take(60_000_000, 70_000_000); // 10 ms
        l.take(90_000_000, 100_000_000); // 10 ms
        assert_eq!((l.warm, l.packets, l.late), (2, 2, 0));
        assert_eq!(l.latency_sum_ns, 20_000_000);
        assert_eq!(l.jitter_ns, 0.0, "the jitter starts after the warm-up");
        let s = site(String::new(), &[l], 4);
        assert_eq!((s.packets_received, s.lost_percent), (4, 0.0));
        assert!((s.mean_latency_ms - 10.0).abs() < 1e-9);
    }

    #[test]
    fn jitter_follows_the_rtp_estimator() {
        let mut l = Listener::default();
        l.take(0, 10_000_000); // transit 10 ms
        l.take(30_000_000, 46_000_000); // transit 16 ms: |D| = 6 ms
        assert!((l.jitter_ns - 6_000_000.0 / 16.0).abs() < 1.0);
        l.take(60_000_000, 200_000_000); // 140 ms: late
        assert_eq!(l.late, 1);
        assert_eq!(l.packets, 3);
    }
}
