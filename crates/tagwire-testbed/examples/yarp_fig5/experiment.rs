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
//! The clients are raw protocol clients (frames in, frames out), written
//! before `Session::on_band` existed; they do what it does. A prioritized
//! (`qos`) client connects to the daemon's `high` band port (main + 2),
//! marks its own socket AF42 with `tagwire_router::priority::set_dscp`
//! before connecting, and runs its threads SCHED_FIFO 10 with
//! `apply_sched`, as the daemon's `high` lane does.

// Each includer uses a different part of this file.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tagwire_proto::{EndpointKind, Event, EventRef, Frame, FrameDecoder, PROTOCOL_VERSION};
use tagwire_router::priority::{apply_sched, set_dscp, Applied, SchedPolicy, DSCP_AF42, DSCP_CS0};
use tagwire_router::Listing;
use tagwire_testbed::{ClassSent, Host, Testbed};

/// Host B: the pinger and the load publisher.
pub const SENDER: usize = 0;
/// Host A: the daemon, the echo client and the load subscriber. It is the
/// testbed's last host, so the router's bottleneck port leads to it.
pub const DAEMON: usize = 1;
/// The daemon's main TCP port (band `normal`); `high` is on `PORT + 2`.
pub const PORT: u16 = 7700;
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

    fn port(self) -> u16 {
        match self {
            Mode::Normal => PORT,
            Mode::Qos => PORT + 2,
        }
    }

    fn dscp(self) -> u8 {
        match self {
            Mode::Normal => DSCP_CS0,
            Mode::Qos => DSCP_AF42,
        }
    }
}

/// The daemon's configuration: TCP on host A's address (bands on the next
/// ports), no Unix socket, one named token with every right, files in
/// `dir`. The same text serves `tagwired --config` and the smoke test's
/// in-process router.
pub fn daemon_config(addr: Ipv4Addr, token: &str, dir: &Path) -> String {
    format!(
        r#"name = "fig5"
tcp = "{addr}:{PORT}"
reservations_file = "{dir}/reservations.json"

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
    let mut admin = Client::connect(host, host.addr(), PORT, DSCP_CS0, "fig5-admin", token)?;
    admin.listing()
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
    /// Pings per second (the interval is jittered ±50 %).
    pub ping_hz: f64,
    /// Payload bytes of each ping (and pong).
    pub ping_size: usize,
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

/// A raw protocol client over blocking TCP.
struct Client {
    stream: TcpStream,
    buf: BytesMut,
    dec: FrameDecoder,
    req: u32,
}

/// The max frame the clients offer.
const MAX_FRAME: u32 = 1 << 20;

impl Client {
    /// Connects from `host` to `addr:port` with its socket marked `dscp`
    /// (before `connect`, so the SYN carries it too) and says `Hello`.
    fn connect(
        host: &Host,
        addr: Ipv4Addr,
        port: u16,
        dscp: u8,
        name: &str,
        token: &str,
    ) -> Result<Client, String> {
        let to = SocketAddrV4::new(addr, port);
        let stream = host
            .run_in(|| -> io::Result<TcpStream> {
                use rustix::net::{AddressFamily, SocketType};
                let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None)?;
                set_dscp(&fd, dscp)?;
                rustix::net::connect(&fd, &to)?;
                Ok(TcpStream::from(fd))
            })
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{name}: connect to {to}: {e}"))?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(IO_TIMEOUT)))
            .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
            .map_err(|e| format!("{name}: socket options: {e}"))?;
        let mut c = Client {
            stream,
            buf: BytesMut::with_capacity(1 << 16),
            dec: FrameDecoder::new(MAX_FRAME),
            req: 0,
        };
        c.send(&Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame: MAX_FRAME,
            name: name.into(),
            token: token.into(),
            session: [0; 16],
        })?;
        match c.recv()? {
            Frame::Welcome { .. } => Ok(c),
            other => Err(format!("{name}: expected Welcome, got {other:?}")),
        }
    }

    fn send(&mut self, f: &Frame) -> Result<(), String> {
        let mut b = BytesMut::new();
        f.encode(&mut b).map_err(|e| format!("encode {f:?}: {e}"))?;
        self.stream
            .write_all(&b)
            .map_err(|e| format!("send {}: {e}", tagwire_proto::frame_name(f.kind())))
    }

    /// The next frame; end of stream, a timeout or a bad frame is an error.
    fn recv(&mut self) -> Result<Frame, String> {
        self.poll()?
            .ok_or_else(|| format!("no answer from the daemon in {IO_TIMEOUT:?}"))
    }

    /// The next frame, or `None` if the socket's read timeout passed first;
    /// end of stream or a bad frame is an error.
    fn poll(&mut self) -> Result<Option<Frame>, String> {
        loop {
            if let Some((kind, body)) = self
                .dec
                .next_raw(&mut self.buf)
                .map_err(|e| format!("bad stream from the daemon: {e}"))?
            {
                return Frame::decode(kind, body)
                    .map(Some)
                    .map_err(|e| format!("bad frame from the daemon: {e}"));
            }
            let mut chunk = [0u8; 1 << 16];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the daemon closed the connection".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// Sends a request with a fresh id and waits for its `Ok`.
    fn request_ok(&mut self, what: &str, make: impl FnOnce(u32) -> Frame) -> Result<(), String> {
        self.req += 1;
        let req = self.req;
        self.send(&make(req))?;
        match self.recv()? {
            Frame::Ok { req: r } if r == req => Ok(()),
            other => Err(format!("{what}: expected Ok, got {other:?}")),
        }
    }

    fn declare(&mut self, id: u32, kind: EndpointKind, name: &str) -> Result<(), String> {
        self.request_ok(&format!("declare {name}"), |req| Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.into(),
        })
    }

    fn subscribe(&mut self, sub: u32, endpoint: u32, pattern: &str) -> Result<(), String> {
        self.request_ok(&format!("subscribe {pattern}"), |req| Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.into(),
            qos: Vec::new(),
        })
    }

    fn listing(&mut self) -> Result<Listing, String> {
        self.req += 1;
        let req = self.req;
        self.send(&Frame::Admin {
            req,
            body: r#"{"op":"list"}"#.into(),
        })?;
        match self.recv()? {
            Frame::AdminReply { body, .. } => {
                serde_json::from_str(&body).map_err(|e| format!("listing: {e}: {body}"))
            }
            other => Err(format!("list: expected AdminReply, got {other:?}")),
        }
    }

    /// A second handle on the socket, to shut it down from another thread.
    fn handle(&self) -> Result<TcpStream, String> {
        self.stream
            .try_clone()
            .map_err(|e| format!("clone socket: {e}"))
    }
}

/// The bytes of a `Publish` of `payload` on `tag` from endpoint
/// `endpoint` named `publisher`, with sequence number `seq`.
fn publish_bytes(
    endpoint: u32,
    publisher: &str,
    tag: &str,
    seq: u64,
    payload: Bytes,
) -> Result<BytesMut, String> {
    let mut ev = Event::new(tag, payload);
    ev.header.publisher = publisher.into();
    ev.header.seq = seq;
    let mut b = BytesMut::new();
    tagwire_proto::encode_publish(endpoint, &ev, &mut b).map_err(|e| format!("encode: {e}"))?;
    Ok(b)
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

fn join<T>(h: JoinHandle<Result<T, String>>, what: &str) -> Result<T, String> {
    h.join()
        .map_err(|_| format!("the {what} thread panicked"))?
}

/// Runs one measurement: sets up the echo, the pinger and (if loaded) the
/// load channel, lets them run for `warmup + duration`, and reads the
/// congested link's counters around the measured window.
pub fn run(tb: &Testbed, token: &str, spec: &Spec) -> Result<Outcome, String> {
    let (b, a) = (tb.host(SENDER), tb.host(DAEMON));
    let daemon = a.addr();
    let run = spec.run;
    let (ping_tag, pong_tag, load_tag) = (
        format!("/fig5/{run}/ping"),
        format!("/fig5/{run}/pong"),
        format!("/fig5/{run}/load"),
    );
    let (port, dscp) = (spec.mode.port(), spec.mode.dscp());

    // The echo on host A: pings in, pongs out, on the measured band.
    let echo_name = format!("fig5-echo-{run}");
    let mut echo = Client::connect(a, daemon, port, dscp, &echo_name, token)?;
    echo.declare(1, EndpointKind::Subscriber, &format!("{echo_name}-in"))?;
    echo.declare(2, EndpointKind::Publisher, &echo_name)?;
    echo.subscribe(1, 1, &ping_tag)?;
    // The pinger on host B.
    let pinger_name = format!("fig5-pinger-{run}");
    let mut pinger = Client::connect(b, daemon, port, dscp, &pinger_name, token)?;
    pinger.declare(1, EndpointKind::Publisher, &pinger_name)?;
    pinger.declare(2, EndpointKind::Subscriber, &format!("{pinger_name}-in"))?;
    pinger.subscribe(1, 2, &pong_tag)?;
    // The load channel: band normal, CS0, on both ends.
    let load = if spec.load_percent > 0 {
        let sink_name = format!("fig5-load-sink-{run}");
        let mut sink = Client::connect(a, daemon, PORT, DSCP_CS0, &sink_name, token)?;
        sink.declare(1, EndpointKind::Subscriber, &sink_name)?;
        sink.subscribe(1, 1, &load_tag)?;
        let source_name = format!("fig5-load-{run}");
        let mut source = Client::connect(b, daemon, PORT, DSCP_CS0, &source_name, token)?;
        source.declare(1, EndpointKind::Publisher, &source_name)?;
        Some((sink, source, source_name))
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
    let bands = (band_of(&pinger_name), band_of(&echo_name));

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let end = start + spec.warmup + spec.duration;

    // Load: a steady rate of events, on the wire `load_percent` of the link.
    let mut load_threads = None;
    if let Some((mut sink, mut source, source_name)) = load {
        let frame = publish_bytes(
            1,
            &source_name,
            &load_tag,
            0,
            Bytes::from(vec![0u8; spec.load_size]),
        )?
        .freeze();
        let len = frame.len() as u64;
        let wire_bits = 8 * (len + len.div_ceil(MSS) * SEGMENT_OVERHEAD);
        let bps = f64::from(spec.link_kbit) * 1000.0 * f64::from(spec.load_percent) / 100.0;
        let interval = Duration::from_secs_f64(wire_bits as f64 / bps);
        let sink_handle = sink.handle()?;
        let sink_thread = std::thread::spawn(move || -> Result<u64, String> {
            // Count the bytes; the frames need no decoding.
            let mut total = sink.buf.len() as u64;
            let mut chunk = vec![0u8; 1 << 16];
            loop {
                match sink.stream.read(&mut chunk) {
                    Ok(0) => return Ok(total),
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => continue,
                    Err(_) => return Ok(total),
                }
            }
        });
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
                source
                    .stream
                    .write_all(&frame)
                    .map_err(|e| format!("load publisher: {e}"))?;
                next += interval;
            }
            Ok(())
        });
        load_threads = Some((sink_handle, sink_thread, source_thread));
    }

    // The echo thread.
    let echo_handle = echo.handle()?;
    let echo_mode = spec.mode;
    let echo_tag = pong_tag.clone();
    let echo_thread = std::thread::spawn(move || -> Result<String, String> {
        let sched = take_sched(echo_mode);
        let mut out = echo.handle()?;
        loop {
            let frame = match echo.poll() {
                Ok(Some(f)) => f,
                Ok(None) => continue,
                Err(_) => return Ok(sched), // shut down at the end of the run
            };
            match frame {
                Frame::Deliver { event, .. } => {
                    let ping = EventRef::parse(&event).map_err(|e| format!("echo: {e}"))?;
                    let pong = publish_bytes(
                        2,
                        &echo_name,
                        &echo_tag,
                        ping.seq,
                        Bytes::copy_from_slice(ping.payload),
                    )?;
                    out.write_all(&pong).map_err(|e| format!("echo: {e}"))?;
                }
                Frame::Ping { nonce } => echo.send(&Frame::Pong { nonce })?,
                Frame::Error { message, .. } => return Err(format!("echo: {message}")),
                _ => {}
            }
        }
    });

    // The pinger: a writer on a jittered schedule, a reader timing pongs.
    let period = 1.0 / spec.ping_hz;
    let capacity = ((spec.warmup + spec.duration).as_secs_f64() * spec.ping_hz * 1.6) as usize + 16;
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..capacity).map(|_| AtomicU64::new(0)).collect());
    let pings_sent = Arc::new(AtomicU64::new(0));
    let writer_done = Arc::new(AtomicBool::new(false));
    let mut writer = pinger.handle()?;
    let (w_sent_at, w_count, w_done) = (sent_at.clone(), pings_sent.clone(), writer_done.clone());
    let (w_mode, w_tag, w_name) = (spec.mode, ping_tag.clone(), pinger_name.clone());
    let payload = Bytes::from(vec![0u8; spec.ping_size]);
    let seed = 0x9e37_79b9_7f4a_7c15 ^ u64::from(run).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let writer_thread = std::thread::spawn(move || -> Result<String, String> {
        let sched = take_sched(w_mode);
        let mut jitter = Jitter(seed | 1);
        let mut next = start;
        let result = (|| {
            for seq in 0..w_sent_at.len() as u64 {
                if next >= end {
                    break;
                }
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
                let frame = publish_bytes(1, &w_name, &w_tag, seq, payload.clone())?;
                let t = start.elapsed().as_nanos() as u64 + 1;
                w_sent_at[seq as usize].store(t, Ordering::Release);
                writer
                    .write_all(&frame)
                    .map_err(|e| format!("pinger: {e}"))?;
                w_count.store(seq + 1, Ordering::Release);
                next += Duration::from_secs_f64(period * jitter.factor());
            }
            Ok(())
        })();
        w_done.store(true, Ordering::Release);
        result.map(|()| sched)
    });
    let (r_sent_at, r_count, r_done) = (sent_at.clone(), pings_sent.clone(), writer_done.clone());
    let r_mode = spec.mode;
    let reader_thread = std::thread::spawn(move || -> Result<(Vec<(u64, u64)>, String), String> {
        let sched = take_sched(r_mode);
        let _ = pinger
            .stream
            .set_read_timeout(Some(Duration::from_millis(100)));
        let mut rtts: Vec<(u64, u64)> = Vec::with_capacity(r_sent_at.len());
        let mut drain_until: Option<Instant> = None;
        loop {
            if r_done.load(Ordering::Acquire) {
                let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN);
                if rtts.len() as u64 >= r_count.load(Ordering::Acquire) || Instant::now() >= until {
                    return Ok((rtts, sched));
                }
            }
            let frame = match pinger.poll() {
                Ok(Some(f)) => f,
                Ok(None) => continue,
                Err(e) => return Err(format!("pinger: {e}")),
            };
            let now = start.elapsed().as_nanos() as u64 + 1;
            match frame {
                Frame::Deliver { event, .. } => {
                    let pong = EventRef::parse(&event).map_err(|e| format!("pinger: {e}"))?;
                    let sent = r_sent_at
                        .get(pong.seq as usize)
                        .map_or(0, |t| t.load(Ordering::Acquire));
                    if sent == 0 {
                        return Err(format!("pinger: pong {} for no ping", pong.seq));
                    }
                    rtts.push((sent - 1, now - sent));
                }
                Frame::Ping { nonce } => pinger.send(&Frame::Pong { nonce })?,
                Frame::Error { message, .. } => return Err(format!("pinger: {message}")),
                _ => {}
            }
        }
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
    let reader = join(reader_thread, "pinger reader");
    stop.store(true, Ordering::Relaxed);
    let _ = echo_handle.shutdown(Shutdown::Both);
    let echo_sched = join(echo_thread, "echo");
    let mut load_bytes = 0;
    if let Some((sink_handle, sink_thread, source_thread)) = load_threads {
        let source = join(source_thread, "load publisher");
        let _ = sink_handle.shutdown(Shutdown::Both);
        load_bytes = join(sink_thread, "load subscriber")?;
        source?;
    }
    let (rtts, reader_sched) = reader?;
    let writer_sched = writer_sched?;
    let echo_sched = echo_sched?;

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
    };
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
