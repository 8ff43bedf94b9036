//! One run of the YARP Fig. 5 experiment on a two-host testbed, shared by
//! the `yarp_fig5` example and its smoke test (`tests/yarp_fig5_smoke.rs`,
//! which includes this file with `#[path]`).
//!
//! ```text
//!   host B (h0): pinger ──ping──┐                      ┌─▶ echo ──pong──┐
//!                load pub ──────┼─▶ [congested queue] ─┼─▶ daemon (h1) ─┼─▶ load sink
//!   host B (h0): pinger ◀───────┼──────────────────────┼── daemon ◀─────┘
//! ```
//!
//! The measured channel is a round trip: the pinger on host B publishes a
//! small event on `/fig5/RUN/ping` to the daemon on host A; an echo client
//! on host A (beside the daemon) publishes it back on `/fig5/RUN/pong`; the
//! daemon delivers it to the pinger. Only the first leg crosses the
//! congested queue (host B's egress, or the router's port toward host A);
//! the way back is not shaped. The load channel is bulk events from a
//! publisher on host B to a subscriber on host A through the same queue.
//!
//! The clients are client-library sessions (`tagwire::Session`), opened
//! inside their host's network namespace (`Host::run_in`: their sockets and
//! threads stay there), each on the measured channel's band
//! (`Session::on_band`): a prioritized (`qos`) client's connection goes to
//! the daemon's `high` band port (main + 2), the library marks its socket
//! AF42 and runs its reader thread SCHED_FIFO 10, as the daemon's `high`
//! lane does; the pinger's writer thread takes the same policy with
//! `apply_sched`. The echo and the pinger's receiving side are callback
//! subscriptions, run by their session's reader thread. A ping carries its
//! sequence number in its first 8 payload bytes, which the echo sends back.

// Each includer uses a different part of this file.
#![allow(dead_code)]

use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tagwire::{Bytes, Event, Listing, Sample, Session};
use tagwire_router::priority::{apply_sched, Applied, SchedPolicy};
use tagwire_testbed::{ClassSent, Host, Testbed};

/// Host B: the pinger and the load publisher.
pub const SENDER: usize = 0;
/// Host A: the daemon, the echo client and the load subscriber. It is the
/// testbed's last host, so the router's bottleneck port leads to it.
pub const DAEMON: usize = 1;
/// The daemon's main TCP port (band `normal`); `high` is on `PORT + 2`.
pub const PORT: u16 = 7700;
/// The daemon's UDP listener (band `normal`; the other bands' UDP sockets
/// are on ports the OS picks, which the daemon lists).
pub const UDP_PORT: u16 = 7710;
/// The bands' ports, lowest band first: low, normal, high, critical.
pub const BAND_PORTS: [u16; 4] = [PORT + 1, PORT, PORT + 2, PORT + 3];
/// The name of the token the clients present (identity `token:fig5`).
pub const TOKEN_NAME: &str = "fig5";
/// Scheduling of the prioritized clients' threads: the `high` lane's.
pub const QOS_SCHED: SchedPolicy = SchedPolicy::Fifo(10);

/// How long any socket read or write may block.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the pinger waits for the last pongs after its last ping.
const DRAIN: Duration = Duration::from_secs(2);
/// Bytes on the wire per TCP segment besides its payload: Ethernet (14),
/// IPv4 (20) and TCP with timestamps (32), as htb counts them.
const SEGMENT_OVERHEAD: u64 = 66;
/// TCP payload per segment on a 1500-byte MTU with timestamps.
const MSS: u64 = 1448;
/// Bytes on the wire per datagram besides its frames: Ethernet (14), IPv4
/// (20), UDP (8) and tagwire's datagram header (16, docs/protocol.md).
const DATAGRAM_OVERHEAD: u64 = 58;

/// The transport of a channel's two client sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `tcp://`: one TCP connection per session and band.
    Tcp,
    /// `udp://`: datagrams (`tagwired --udp`), best effort, one event per
    /// datagram at most.
    Udp,
}

impl Transport {
    /// Short name for tables and the command line.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }

    /// Parses `tcp` or `udp`.
    pub fn parse(s: &str) -> Result<Transport, String> {
        match s {
            "tcp" => Ok(Transport::Tcp),
            "udp" => Ok(Transport::Udp),
            other => Err(format!("unknown transport {other:?}: tcp or udp")),
        }
    }

    /// Bits on the wire to carry one frame of `len` bytes.
    fn wire_bits(self, len: u64) -> u64 {
        match self {
            Transport::Tcp => 8 * (len + len.div_ceil(MSS) * SEGMENT_OVERHEAD),
            Transport::Udp => 8 * (len + DATAGRAM_OVERHEAD),
        }
    }
}

/// Where the link is congested (the paper's Fig. 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// (a) In host B's own network driver: htb on its `veth0` egress.
    Sender,
    /// (b) In the switch: htb on the router's port toward host A.
    Router,
}

impl Place {
    /// Short name for tables and the command line.
    pub fn name(self) -> &'static str {
        match self {
            Place::Sender => "sender",
            Place::Router => "router",
        }
    }
}

/// Whether the measured channel is prioritized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Band `normal` (main port, CS0, the lane and client threads
    /// SCHED_OTHER): the paper's "normal" bars.
    Normal,
    /// Band `high` (main port + 2, AF42 both ways, the lane and client
    /// threads SCHED_FIFO 10): the paper's "qos" bars.
    Qos,
}

impl Mode {
    /// The paper's label.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Qos => "qos",
        }
    }

    /// The daemon band the measured channel uses.
    pub fn band(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Qos => "high",
        }
    }
}

/// The daemon's configuration: TCP on host A's address (bands on the next
/// ports), UDP on `UDP_PORT` (bands on ports the OS picks), no Unix socket, one named token with every right, files in
/// `dir`. The same text serves `tagwired --config` and the smoke test's
/// in-process router.
pub fn daemon_config(addr: Ipv4Addr, token: &str, dir: &Path) -> String {
    format!(
        r#"name = "fig5"
tcp = "{addr}:{PORT}"
reservations_file = "{dir}/reservations.json"

[udp]
listen = "{addr}:{UDP_PORT}"

[auth]
enabled = true
local_token = false

[[auth.tokens]]
name = "{TOKEN_NAME}"
token = "{token}"

[[acl]]
identity = "token:{TOKEN_NAME}"
publish = ["/**"]
subscribe = ["/**"]
admin = true
"#,
        dir = dir.display()
    )
}

/// A fresh random token (32 hex digits from /dev/urandom).
pub fn random_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Waits until every band port of the daemon on `host` accepts a
/// connection, at most `timeout`.
pub fn wait_for_daemon(host: &Host, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    for port in BAND_PORTS {
        let addr = SocketAddrV4::new(host.addr(), port);
        loop {
            let ok = host
                .run_in(|| TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200)))
                .map_err(|e| e.to_string())?
                .is_ok();
            if ok {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the daemon does not accept on {addr} after {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// What the daemon lists about itself (first page), asked as `token`.
pub fn daemon_listing(host: &Host, token: &str) -> Result<Listing, String> {
    session(host, host.addr(), None, token, Transport::Tcp)?
        .list()
        .map_err(|e| format!("listing: {e}"))
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct Spec {
    /// A number unique within the daemon's life (names, tags).
    pub run: u32,
    /// Where the link is congested (which counters to read).
    pub place: Place,
    /// Measured channel on band normal or high.
    pub mode: Mode,
    /// Load on the congested link, percent of `link_kbit` (0: none).
    pub load_percent: u32,
    /// The congested link's rate, kbit/s.
    pub link_kbit: u32,
    /// Payload bytes of each load event.
    pub load_size: usize,
    /// Load events published back to back at each tick (the tick's period
    /// grows with it, so the average rate is the same): a burst of 7
    /// events of 1,200 B puts about what one 8 KiB event puts into the
    /// queue at once.
    pub load_burst: u32,
    /// Pings per second (the interval is jittered ±50 %).
    pub ping_hz: f64,
    /// Payload bytes of each ping (and pong).
    pub ping_size: usize,
    /// Transport of the measured channel (pinger and echo).
    pub measured: Transport,
    /// Transport of the load channel (publisher and subscriber).
    pub load_transport: Transport,
    /// The host of the load publisher: `SENDER` (Fig. 5a, and the
    /// existing 5b runs) or a host of its own (Fig. 5b as the paper ran it:
    /// Pub.1 and Pub.2 on separate machines). The daemon is always on the
    /// testbed's last host.
    pub load_host: usize,
    /// With `qos` over UDP: also run the client library's UDP pump threads
    /// of the measured channel's sessions (`tagwire-udp-up`/`-down`, which
    /// the library leaves at SCHED_OTHER) at `QOS_SCHED`, set from outside
    /// with `chrt`: an experiment of what those threads cost, not a
    /// library setting.
    pub pumps_fifo: bool,
    /// Before measuring: the load runs, pings are sent and not counted.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Round trip times of the pings sent in the measured window, µs.
    pub rtts_us: Vec<f64>,
    /// Pings sent in the whole run (warm-up included).
    pub pings: u64,
    /// Pongs received for them.
    pub pongs: u64,
    /// Bytes the load subscriber received.
    pub load_bytes: u64,
    /// What the congested link sent in the measured window.
    pub sent: ClassSent,
    /// The measured window as it was (between the counter readings).
    pub window: Duration,
    /// The bands that served the pinger's and the echo's connections, as
    /// the daemon lists them.
    pub bands: (String, String),
    /// The scheduling the pinger's and the echo's threads got.
    pub client_sched: String,
}

impl Outcome {
    /// Load on the congested link in the window: bytes it sent (headers
    /// included) over what its rate allows.
    pub fn utilization(&self, link_kbit: u32) -> f64 {
        let capacity = f64::from(link_kbit) * 1000.0 / 8.0 * self.window.as_secs_f64();
        self.sent.link.bytes as f64 / capacity
    }
}

/// A session from `host` to the daemon at `addr`, presenting `token`, on
/// `band` (`None`: the main port, band `normal`, unmarked). Opened inside
/// the host's network namespace: its sockets are that host's, and its
/// threads (made there) stay in it, reconnects included.
fn session(
    host: &Host,
    addr: Ipv4Addr,
    band: Option<&str>,
    token: &str,
    transport: Transport,
) -> Result<Session, String> {
    let url = match transport {
        Transport::Tcp => format!("tcp://{addr}:{PORT}"),
        Transport::Udp => format!("udp://{addr}:{UDP_PORT}"),
    };
    host.run_in(|| -> tagwire::Result<Session> {
        let s = Session::builder().token(token).connect(&url)?;
        match band {
            Some(b) => s.on_band(b),
            None => Ok(s),
        }
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("session to {url} (band {band:?}): {e}"))
}

/// Bytes of a `Deliver` or `Publish` frame besides its event: length (4),
/// kind (1), subscription or endpoint id (4).
const FRAME_OVERHEAD: u64 = 9;

/// Records the first error of a callback (it cannot return one).
fn first_error(slot: &Mutex<Option<String>>, e: String) {
    slot.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert(e);
}

/// Applies the mode's scheduling to the calling thread; what it got.
fn take_sched(mode: Mode) -> String {
    match mode {
        Mode::Normal => "other".into(),
        Mode::Qos => match apply_sched(QOS_SCHED) {
            Ok(Applied::Exactly(p)) => p.to_string(),
            Ok(Applied::FellBack { got, reason, .. }) => format!("{got} (fell back: {reason})"),
            Err(e) => format!("other ({QOS_SCHED} failed: {e})"),
        },
    }
}

/// A small xorshift generator for the pings' jitter (deterministic per run).
struct Jitter(u64);

impl Jitter {
    /// Uniform in [0.5, 1.5).
    fn factor(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        0.5 + (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The ids of this process's threads named like the client library's UDP
/// pumps (`tagwire-udp-up`, `tagwire-udp-down`).
fn udp_pump_threads() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim_start().starts_with("tagwire-udp-"))
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Locks a mutex, whether or not a callback panicked holding it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn join<T>(h: JoinHandle<Result<T, String>>, what: &str) -> Result<T, String> {
    h.join()
        .map_err(|_| format!("the {what} thread panicked"))?
}

/// Runs one measurement: sets up the echo, the pinger and (if loaded) the
/// load channel, lets them run for `warmup + duration`, and reads the
/// congested link's counters around the measured window.
pub fn run(tb: &Testbed, token: &str, spec: &Spec) -> Result<Outcome, String> {
    let daemon_host = tb.hosts().len() - 1;
    let (b, a) = (tb.host(SENDER), tb.host(daemon_host));
    let loader = tb.host(spec.load_host);
    let daemon = a.addr();
    let run = spec.run;
    let (ping_tag, pong_tag, load_tag) = (
        format!("/fig5/{run}/ping"),
        format!("/fig5/{run}/pong"),
        format!("/fig5/{run}/load"),
    );

    let band = Some(spec.mode.band());
    let failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));

    // The echo on host A: pings in, pongs out, on the measured band.
    let pumps_before = udp_pump_threads();
    let echo = session(a, daemon, band, token, spec.measured)?;
    let echo_pub = echo
        .declare_publisher(&format!("fig5-echo-{run}"))
        .map_err(|e| format!("echo: {e}"))?;
    echo_pub.set_express(true);
    let echo_sched: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let (e_sched, e_failed, echo_mode) = (echo_sched.clone(), failed.clone(), spec.mode);
    let echo_tag = pong_tag.clone();
    let echo_sub = echo
        .subscribe(&ping_tag)
        .callback(move |ping: Sample| {
            e_sched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| take_sched(echo_mode));
            if let Err(e) = echo_pub.publish(&echo_tag, ping.payload()) {
                first_error(&e_failed, format!("echo: {e}"));
            }
        })
        .map_err(|e| format!("echo: {e}"))?;
    // The pinger on host B.
    let pinger = session(b, daemon, band, token, spec.measured)?;
    let ping_pub = pinger
        .declare_publisher(&format!("fig5-pinger-{run}"))
        .map_err(|e| format!("pinger: {e}"))?;
    ping_pub.set_express(true);
    let mut pumps = String::new();
    if spec.pumps_fifo && spec.mode == Mode::Qos && spec.measured == Transport::Udp {
        let new: Vec<u32> = udp_pump_threads()
            .into_iter()
            .filter(|t| !pumps_before.contains(t))
            .collect();
        for tid in &new {
            // QOS_SCHED's priority.
            let ok = std::process::Command::new("chrt")
                .args(["-f", "-p", "10", &tid.to_string()])
                .status()
                .map_err(|e| format!("chrt: {e}"))?
                .success();
            if !ok {
                return Err(format!("chrt -f -p 10 {tid} failed"));
            }
        }
        pumps = format!(", {} UDP pump threads fifo:10", new.len());
    }
    // The load channel: band normal, CS0, on both ends.
    let load_bytes = Arc::new(AtomicU64::new(0));
    let load = if spec.load_percent > 0 {
        let sink = session(a, daemon, None, token, spec.load_transport)?;
        let counted = load_bytes.clone();
        let sink_sub = sink
            .subscribe(&load_tag)
            .callback(move |s: Sample| {
                // The bytes the frame took on the stream.
                counted.fetch_add(s.raw().len() as u64 + FRAME_OVERHEAD, Ordering::Relaxed);
            })
            .map_err(|e| format!("load subscriber: {e}"))?;
        let source = session(loader, daemon, None, token, spec.load_transport)?;
        let source_pub = source
            .declare_publisher(&format!("fig5-load-{run}"))
            .map_err(|e| format!("load publisher: {e}"))?;
        source_pub.set_express(true);
        Some((sink, sink_sub, source, source_pub))
    } else {
        None
    };
    // Where the daemon put the measured channel's connections.
    let listing = daemon_listing(a, token)?;
    let band_of = |name: &str| {
        listing
            .connections
            .iter()
            .find(|c| c.name == name)
            .map_or_else(|| "?".to_owned(), |c| c.band.clone())
    };
    let bands = (band_of(pinger.name()), band_of(echo.name()));

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let end = start + spec.warmup + spec.duration;

    // Load: a steady rate of events, on the wire `load_percent` of the link.
    let mut load_threads = None;
    if let Some((sink, sink_sub, source, source_pub)) = load {
        let payload = Bytes::from(vec![0u8; spec.load_size]);
        let mut ev = Event::new(load_tag.as_str(), payload.clone());
        ev.header.publisher = source_pub.name().to_owned();
        let len = FRAME_OVERHEAD + ev.encoded_len() as u64;
        let wire_bits = spec.load_transport.wire_bits(len);
        let bps = f64::from(spec.link_kbit) * 1000.0 * f64::from(spec.load_percent) / 100.0;
        let burst = spec.load_burst.max(1);
        let interval = Duration::from_secs_f64(wire_bits as f64 * f64::from(burst) / bps);
        let stop_source = stop.clone();
        let source_thread = std::thread::spawn(move || -> Result<(), String> {
            let mut next = start;
            while !stop_source.load(Ordering::Relaxed) && next < end {
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else if now - next > 10 * interval {
                    next = now; // far behind (a stall): do not burst to catch up
                }
                for _ in 0..burst {
                    source_pub
                        .publish(&load_tag, payload.clone())
                        .map_err(|e| format!("load publisher: {e}"))?;
                }
                next += interval;
            }
            Ok(())
        });
        load_threads = Some((sink, sink_sub, source, source_thread));
    }

    // The pinger: a writer on a jittered schedule, a callback timing pongs.
    let period = 1.0 / spec.ping_hz;
    let capacity = ((spec.warmup + spec.duration).as_secs_f64() * spec.ping_hz * 1.6) as usize + 16;
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..capacity).map(|_| AtomicU64::new(0)).collect());
    let pings_sent = Arc::new(AtomicU64::new(0));
    let rtts: Arc<Mutex<Vec<(u64, u64)>>> = Arc::new(Mutex::new(Vec::with_capacity(capacity)));
    let reader_sched: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let (r_sent_at, r_rtts, r_sched, r_failed) = (
        sent_at.clone(),
        rtts.clone(),
        reader_sched.clone(),
        failed.clone(),
    );
    let r_mode = spec.mode;
    let pong_sub = pinger
        .subscribe(&pong_tag)
        .callback(move |pong: Sample| {
            let now = start.elapsed().as_nanos() as u64 + 1;
            r_sched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| take_sched(r_mode));
            let payload = pong.payload();
            let Some(seq) = payload
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
            else {
                return first_error(&r_failed, "pinger: a pong without a sequence number".into());
            };
            let sent = r_sent_at
                .get(seq as usize)
                .map_or(0, |t| t.load(Ordering::Acquire));
            if sent == 0 {
                return first_error(&r_failed, format!("pinger: pong {seq} for no ping"));
            }
            r_rtts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((sent - 1, now - sent));
        })
        .map_err(|e| format!("pinger: {e}"))?;
    let (w_sent_at, w_count) = (sent_at.clone(), pings_sent.clone());
    let (w_mode, w_tag) = (spec.mode, ping_tag.clone());
    let ping_size = spec.ping_size.max(8);
    let seed = 0x9e37_79b9_7f4a_7c15 ^ u64::from(run).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let writer_thread = std::thread::spawn(move || -> Result<String, String> {
        let sched = take_sched(w_mode);
        let mut jitter = Jitter(seed | 1);
        let mut next = start;
        let mut payload = vec![0u8; ping_size];
        for seq in 0..w_sent_at.len() as u64 {
            if next >= end {
                break;
            }
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            payload[..8].copy_from_slice(&seq.to_le_bytes());
            let t = start.elapsed().as_nanos() as u64 + 1;
            w_sent_at[seq as usize].store(t, Ordering::Release);
            ping_pub
                .publish(&w_tag, Bytes::copy_from_slice(&payload))
                .map_err(|e| format!("pinger: {e}"))?;
            w_count.store(seq + 1, Ordering::Release);
            next += Duration::from_secs_f64(period * jitter.factor());
        }
        Ok(sched)
    });

    // The measured window, between two readings of the link's counters.
    let counters = || match spec.place {
        Place::Sender => tb.egress_class_sent(SENDER),
        Place::Router => tb.bottleneck_class_sent(),
    };
    std::thread::sleep((start + spec.warmup).saturating_duration_since(Instant::now()));
    let (before, t0) = (counters().map_err(|e| e.to_string())?, Instant::now());
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let (after, t1) = (counters().map_err(|e| e.to_string())?, Instant::now());

    let writer_sched = join(writer_thread, "pinger writer");
    // The last pongs, at most `DRAIN`.
    let drain_until = Instant::now() + DRAIN;
    while (lock(&rtts).len() as u64) < pings_sent.load(Ordering::Acquire)
        && Instant::now() < drain_until
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    drop((pong_sub, echo_sub));
    if let Some((sink, sink_sub, source, source_thread)) = load_threads {
        join(source_thread, "load publisher")?;
        drop((sink_sub, sink, source));
    }
    drop((pinger, echo));
    let load_bytes = load_bytes.load(Ordering::Relaxed);
    if let Some(e) = lock(&failed).take() {
        return Err(e);
    }
    let rtts = std::mem::take(&mut *lock(&rtts));
    let writer_sched = writer_sched?;
    let unknown = || "unknown (no event arrived)".to_owned();
    let reader_sched = lock(&reader_sched).take().unwrap_or_else(unknown);
    let echo_sched = lock(&echo_sched).take().unwrap_or_else(unknown);

    let warmup_ns = spec.warmup.as_nanos() as u64;
    let rtts_us = rtts
        .iter()
        .filter(|(sent, _)| *sent >= warmup_ns)
        .map(|(_, rtt)| *rtt as f64 / 1000.0)
        .collect();
    let client_sched = if writer_sched == reader_sched && reader_sched == echo_sched {
        writer_sched
    } else {
        format!("pinger {writer_sched}/{reader_sched}, echo {echo_sched}")
    } + &pumps;
    Ok(Outcome {
        rtts_us,
        pings: pings_sent.load(Ordering::Acquire),
        pongs: rtts.len() as u64,
        load_bytes,
        sent: after.since(&before),
        window: t1 - t0,
        bands,
        client_sched,
    })
}
