//! Attacks on a running `tagwired`, for `scripts/abuse.sh` (issue 12): each
//! subcommand plays one hostile or careless client against `--server
//! HOST:PORT` and prints a last line saying what it did.
//!
//!   cargo run --release --manifest-path experiments/Cargo.toml --bin abuse -- ATTACK --server 127.0.0.1:7782 [OPTIONS]
//!
//! Attacks (options with defaults):
//!   stalled-killed  --rounds 10 --events 1200   a subscriber that never reads
//!                   gets 64 KiB events, then dies (its socket closes); repeat
//!   small-queued    --events 16384 --hold 3     a subscriber that never reads
//!                   gets small events, each sharing its read buffer with a
//!                   60 KiB event nobody wants; hold, then leave
//!   big-frames      --conns 64 --hold 3         connections announce a 16 MiB
//!                   frame and send all but its last byte; hold, then leave
//!   idle            --conns 4096 --hold 6       sockets that never say Hello
//!   malformed       --frames 1000000            one connection sends frames
//!                   of an unknown type until the router closes it
//!   regex           --secs 3 --rate 200 --size 44000  one subscription of
//!                   16 filters × 4 regexes `[a-z]{N}`, N the largest the
//!                   daemon accepts (probed), then events with a 44 KB and a
//!                   1 KiB string field at a steady rate
//!   admin-scale     --subs 65536 --hold 2       one connection makes that
//!                   many filtered subscriptions, lists them page by page,
//!                   undeclares the endpoint; again with pipelined
//!                   unsubscribes; again, then closes the connection
//!                   (`--plain 1`: subscriptions without filters)
//!   endpoint-fill   --token T --expect-connections 1024 --expect-endpoints
//!                   25000 --hold 2              identity token:mallory opens
//!                   connections and declares endpoints until LimitReached;
//!                   the owner must still connect, declare and get events
//!                   (`--declare 0`: connections only, no endpoints)
//!   trespass        --token T                   mallory tries to change,
//!                   remove and see the owner's subscriber's filters
//!   shm-trespass    --unix PATH --token T --events 3000  over the Unix
//!                   socket, mallory subscribes to the owner's shared-memory
//!                   publisher beside the owner's own reader: mallory must
//!                   get copies, never a reference into the owner's region
//!                   (nor its read-write fd); the owner's reader gets every
//!                   payload intact, in place (issue 24, item 1)
//!   shm-hog         --unix PATH --token T --regions 64 --expect-regions 16
//!                   mallory declares that many publishers over the Unix
//!                   socket; at most its quota get a region, and the
//!                   owner's publisher still gets one (issue 24, item 4)
//!   dscp-clash      --token T                   mallory (no admin right)
//!                   asks for two DSCP markings on one connection and for
//!                   a daemon-wide one: the second channel's and the
//!                   daemon's are refused, the first stands (issue 24,
//!                   item 3)
//!   distinct        --token T --subs 8000 --chunk 2000 --burst 65536
//!                   identity token:mallory makes `subs` subscriptions, each
//!                   on its own pattern, in pipelined chunks; then a fresh
//!                   client's handshake and ping; then fills its connection
//!                   to `burst` distinct subscriptions and sends that many
//!                   Unsubscribe frames in one burst (issue 24, item 11)
//!   time-skew       --events 100000 --hold 2     a publisher floods a tag
//!                   that a playout (tds:60s) and a buffered (count:1000,
//!                   max_delay:60s) subscriber take, with source times that
//!                   lie (0, 1, u64::MAX − 1, an hour back, an hour ahead,
//!                   now); their time services must stay within their bounds
//!                   (issue 26)
//!   ping            --count 200 --interval-ms 10 [--until FILE]  a healthy
//!                   client: round trips (at least `count`, and on until FILE
//!                   exists), prints `p50_us p99_us max_us` (nothing else)
//!
//! regex, admin-scale and endpoint-fill also print, before their line, one
//! line per phase: a second healthy client's round trips (its own
//! connection, every 5 ms) and, given `--pid PID`, the daemon's RSS.
//! An attack whose checks fail says FAIL in its line (the script looks for it).
//!
//! Adding an attack: one function here and one line in scripts/abuse.sh.
//!
//! Well-behaved clients — the healthy watcher and `ping`, the victim, the
//! publishers and the subscribers of `regex` and `trespass` — are client
//! library sessions (`tagwire::Session`). The attackers that must do what
//! the library never does keep a minimal raw client ([`Raw`]): a
//! subscriber that never reads its socket (`stalled-killed`,
//! `small-queued`: the library's reader thread always reads), publishes
//! written in one chosen `write` so that a small event shares the router's
//! read buffer with a large one (`small-queued`), a frame announced and
//! never finished (`big-frames`), frames of an unknown type
//! (`malformed`), thousands of pipelined subscribes and unsubscribes on one
//! endpoint (`admin-scale`: the library waits for each subscribe and gives
//! each subscription an endpoint of its own), and connections without a
//! reader thread each (`endpoint-fill`: a thousand sessions would be two
//! thousand threads), and `regex`'s probe of the largest regex the daemon
//! compiles and its subscription of 64 such regexes (refusing or compiling
//! them can take longer than the library's 5 s request timeout). `idle` opens bare TCP sockets. The behaviour each
//! attack provokes is also checked, at small scale, by the product's tests
//! (crates/tagwire-router/tests/{bad_input,budgets,auth,admin_at_scale,
//! pinned_memory}.rs); this run measures what the tests cannot: the release
//! daemon's memory and a healthy client's latency at full scale.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use serde_json::json;
use tagwire::{Session, ShmMode};
use tagwire_proto::{EndpointKind, ErrorCode, Event, Frame, FrameDecoder, Value};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Opts {
    server: String,
    args: Vec<(String, String)>,
}

impl Opts {
    fn num(&self, name: &str, default: u64) -> u64 {
        self.args
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(default)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the router answered instead of success: its error code and message.
type Refusal = (ErrorCode, String);

/// Replies to pipelined requests.
struct Pipelined {
    ok: usize,
    /// Refused requests, and the first refusal.
    refused: usize,
    first_refusal: Option<Refusal>,
    took: Duration,
}

/// `Ok` if every pipelined request of `what` succeeded, else an error
/// naming how many were refused and the first refusal.
fn check(what: &str, p: &Pipelined) -> Res<()> {
    match &p.first_refusal {
        None => Ok(()),
        Some((code, m)) => {
            Err(format!("{what}: {} refused, the first: {code:?}: {m}", p.refused).into())
        }
    }
}

/// The daemon owner's local token for `server`'s port.
fn owner_token(server: &str) -> Res<String> {
    let port: u16 = server
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| format!("no port in {server}"))?;
    Ok(tagwire_router::local::read_token(
        &tagwire_router::local::token_path(port),
    )?)
}

/// A session to `server` (`HOST:PORT`) as the daemon's owner.
fn owner_session(server: &str) -> Res<Session> {
    Ok(Session::builder()
        .token(owner_token(server)?)
        .connect(&format!("tcp://{server}"))?)
}

/// A session's answer: the value, or what the router answered instead of
/// success; any other failure is an error.
fn answered<T>(r: tagwire::Result<T>) -> Res<Result<T, Refusal>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(tagwire::Error::Refused { code, message }) => Ok(Err((code, message))),
        Err(e) => Err(e.into()),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A raw protocol client over TCP, for the attackers that must misbehave
/// (see the comment at the top).
struct Raw {
    s: TcpStream,
    buf: BytesMut,
    dec: FrameDecoder,
}

impl Raw {
    fn connect(server: &str) -> Res<Raw> {
        let s = TcpStream::connect(server)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Raw {
            s,
            buf: BytesMut::new(),
            dec: FrameDecoder::new(1 << 24),
        })
    }

    /// A connection as the daemon's owner (its local token).
    fn hello(server: &str, name: &str) -> Res<Raw> {
        Raw::hello_as(server, name, owner_token(server)?)?
            .map_err(|(code, m)| format!("Hello refused: {code:?}: {m}").into())
    }

    /// A connection presenting `token`, or the router's refusal of it.
    fn hello_as(server: &str, name: &str, token: String) -> Res<Result<Raw, Refusal>> {
        let mut r = Raw::connect(server)?;
        r.send(&Frame::Hello {
            // Version 2: a bearer token (the attacks need no proof exchange).
            version: 2,
            max_frame: 1 << 24,
            name: name.into(),
            token,
            proof: None,
            session: [0; 16],
        })?;
        match r.recv()? {
            Some(Frame::Welcome { .. }) => Ok(Ok(r)),
            Some(Frame::Error { code, message, .. }) => Ok(Err((code, message))),
            other => Err(format!("expected Welcome, got {other:?}").into()),
        }
    }

    fn send(&mut self, f: &Frame) -> Res<()> {
        let mut b = BytesMut::new();
        f.encode(&mut b)?;
        self.s.write_all(&b)?;
        Ok(())
    }

    fn recv(&mut self) -> Res<Option<Frame>> {
        loop {
            if let Some((k, body)) = self.dec.next_raw(&mut self.buf)? {
                return Ok(Some(Frame::decode(k, body)?));
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The next frame that is not a `Deliver` (answering the router's Pings).
    fn recv_control(&mut self) -> Res<Option<Frame>> {
        loop {
            match self.recv()? {
                Some(Frame::Deliver { .. }) => continue,
                Some(Frame::Ping { nonce }) => self.send(&Frame::Pong { nonce })?,
                other => return Ok(other),
            }
        }
    }

    fn request(&mut self, f: &Frame) -> Res<()> {
        self.ask(f)?
            .map_err(|(code, m)| format!("{code:?}: {m}").into())
    }

    /// Sends request `f`: `Ok`, or the router's refusal.
    fn ask(&mut self, f: &Frame) -> Res<Result<(), Refusal>> {
        self.send(f)?;
        match self.recv_control()? {
            Some(Frame::Ok { .. }) => Ok(Ok(())),
            Some(Frame::Error { code, message, .. }) => Ok(Err((code, message))),
            other => Err(format!("expected Ok, got {other:?}").into()),
        }
    }

    /// An admin request: its reply, or the router's refusal.
    fn admin(&mut self, body: &serde_json::Value) -> Res<Result<serde_json::Value, Refusal>> {
        self.send(&Frame::Admin {
            req: 7,
            body: body.to_string(),
        })?;
        match self.recv_control()? {
            Some(Frame::AdminReply { body, .. }) => Ok(Ok(serde_json::from_str(&body)?)),
            Some(Frame::Error { code, message, .. }) => Ok(Err((code, message))),
            other => Err(format!("expected AdminReply, got {other:?}").into()),
        }
    }

    /// Writes `frames` (`n` requests) from another thread while this one
    /// reads their `n` replies.
    fn pipeline(&mut self, frames: BytesMut, n: usize) -> Res<Pipelined> {
        let mut w = self.s.try_clone()?;
        let t = Instant::now();
        let writer = std::thread::spawn(move || w.write_all(&frames));
        let mut p = Pipelined {
            ok: 0,
            refused: 0,
            first_refusal: None,
            took: Duration::ZERO,
        };
        while p.ok + p.refused < n {
            match self.recv_control()? {
                Some(Frame::Ok { .. }) => p.ok += 1,
                Some(Frame::Error { code, message, .. }) => {
                    p.refused += 1;
                    p.first_refusal.get_or_insert((code, message));
                }
                other => return Err(format!("expected Ok or Error, got {other:?}").into()),
            }
        }
        p.took = t.elapsed();
        writer.join().map_err(|_| "the writer thread panicked")??;
        Ok(p)
    }

    /// One Ping/Pong round trip.
    fn round_trip(&mut self, nonce: u64) -> Res<Duration> {
        let t = Instant::now();
        self.send(&Frame::Ping { nonce })?;
        while !matches!(self.recv_control()?, Some(Frame::Pong { .. })) {}
        Ok(t.elapsed())
    }

    fn declare(&mut self, id: u32, kind: EndpointKind, name: &str) -> Res<()> {
        self.request(&Frame::DeclareEndpoint {
            req: id,
            id,
            kind,
            name: name.into(),
        })
    }

    fn subscribe(&mut self, endpoint: u32, pattern: &str) -> Res<()> {
        self.request(&Frame::Subscribe {
            req: 1000 + endpoint,
            sub: endpoint,
            endpoint,
            pattern: pattern.into(),
            qos: vec![],
        })
    }
}

/// Encoded `Publish` frames of one event, `n` times.
fn publishes(endpoint: u32, publisher: &str, tag: &str, size: usize, n: usize) -> Res<Vec<u8>> {
    let mut ev = Event::new(tag, vec![0u8; size]);
    ev.header.publisher = publisher.into();
    let mut one = BytesMut::new();
    tagwire_proto::encode_publish(endpoint, &ev, &mut one)?;
    Ok(one.repeat(n))
}

/// A tag prefix no other run uses.
fn unique() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{t}", std::process::id())
}

fn stalled_subscriber(server: &str, name: &str, pattern: &str) -> Res<Raw> {
    let mut s = Raw::hello(server, "abuse-stalled")?;
    s.declare(1, EndpointKind::Subscriber, name)?;
    s.subscribe(1, pattern)?;
    Ok(s)
}

/// Subscribers that never read get 64 KiB events, then die; repeated.
fn stalled_killed(o: &Opts) -> Res<()> {
    let rounds = o.num("rounds", 10);
    let events = o.num("events", 1200) as usize;
    let tag = format!("/abuse/stall{}", unique());
    let mut publisher = Raw::hello(&o.server, "abuse-publisher")?;
    let pub_name = format!("{tag}/pub");
    publisher.declare(1, EndpointKind::Publisher, &pub_name)?;
    let batch = publishes(1, &pub_name, &format!("{tag}/x"), 64 * 1024, 100)?;
    for r in 0..rounds {
        let sub = stalled_subscriber(&o.server, &format!("{tag}/sub{r}"), &format!("{tag}/**"))?;
        for _ in 0..events / 100 {
            publisher.s.write_all(&batch)?;
        }
        // Everything published was handled before this reply.
        publisher.send(&Frame::Ping { nonce: r })?;
        while !matches!(publisher.recv_control()?, Some(Frame::Pong { .. })) {}
        drop(sub);
    }
    println!(
        "stalled-killed: {rounds} subscribers stalled with {events} 64 KiB events each, then died"
    );
    Ok(())
}

/// Small events to a subscriber that never reads, each sharing its read
/// buffer with a large event nobody wants.
fn small_queued(o: &Opts) -> Res<()> {
    let events = o.num("events", 16384) as usize;
    let hold = o.num("hold", 3);
    let tag = format!("/abuse/small{}", unique());
    let _sub = stalled_subscriber(&o.server, &format!("{tag}/sub"), &format!("{tag}/small"))?;
    let mut publisher = Raw::hello(&o.server, "abuse-publisher")?;
    let pub_name = format!("{tag}/pub");
    publisher.declare(1, EndpointKind::Publisher, &pub_name)?;
    let mut pair = publishes(1, &pub_name, &format!("{tag}/small"), 4, 1)?;
    pair.extend(publishes(
        1,
        &pub_name,
        &format!("{tag}/other"),
        60 * 1024,
        1,
    )?);
    for _ in 0..events {
        publisher.s.write_all(&pair)?;
    }
    publisher.send(&Frame::Ping { nonce: 1 })?;
    while !matches!(publisher.recv_control()?, Some(Frame::Pong { .. })) {}
    std::thread::sleep(Duration::from_secs(hold));
    println!("small-queued: {events} small events queued to a stalled subscriber, held {hold}s");
    Ok(())
}

/// Connections that announce a 16 MiB frame and send all but its last byte.
fn big_frames(o: &Opts) -> Res<()> {
    let conns = o.num("conns", 64);
    let hold = o.num("hold", 3);
    let frame: u32 = 16 * 1024 * 1024;
    let body = vec![0u8; frame as usize - 1];
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..conns {
        let mut c = Raw::hello(&o.server, "abuse-big")?;
        c.s.write_all(&frame.to_le_bytes())?;
        // A refused connection is closed while we write: count it.
        if c.s.write_all(&body).is_err() {
            refused += 1;
            continue;
        }
        c.s.set_read_timeout(Some(Duration::from_millis(200)))?;
        match c.recv() {
            Ok(Some(Frame::Error { .. })) | Ok(None) => refused += 1,
            _ => held.push(c),
        }
    }
    std::thread::sleep(Duration::from_secs(hold));
    println!(
        "big-frames: {conns} connections announced 16 MiB frames: {} held, {refused} refused",
        held.len()
    );
    Ok(())
}

/// Sockets that never say Hello.
fn idle(o: &Opts) -> Res<()> {
    let conns = o.num("conns", 4096);
    let hold = o.num("hold", 6);
    let mut socks = Vec::new();
    let mut failed = 0;
    for _ in 0..conns {
        match TcpStream::connect(&o.server) {
            Ok(s) => socks.push(s),
            Err(_) => failed += 1,
        }
    }
    std::thread::sleep(Duration::from_secs(hold));
    let mut closed = 0;
    for s in &mut socks {
        s.set_nonblocking(true)?;
        let mut b = [0u8; 4096];
        // Closed by the router: EOF after its Error frame.
        loop {
            match s.read(&mut b) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(_) => break,
            }
        }
    }
    println!(
        "idle: {} sockets never said Hello ({failed} could not connect); {closed} were closed by the router within {hold}s",
        socks.len()
    );
    Ok(())
}

/// Frames of an unknown type until the router closes the connection.
fn malformed(o: &Opts) -> Res<()> {
    let frames = o.num("frames", 1_000_000);
    let mut c = Raw::hello(&o.server, "abuse-malformed")?;
    let junk = [2u8, 0, 0, 0, 0x7f, 0].repeat(4096);
    let mut sent = 0u64;
    while sent < frames {
        if c.s.write_all(&junk).is_err() {
            break;
        }
        sent += 4096;
    }
    let (mut errors, mut last) = (0, String::new());
    while let Ok(Some(f)) = c.recv() {
        if let Frame::Error { message, .. } = f {
            errors += 1;
            last = message;
        }
    }
    println!("malformed: sent {sent} bad frames; got {errors} errors, then the router closed the connection (last: {last})");
    Ok(())
}

/// Encoded `Publish` frame of an event with these body fields.
fn publish_with_fields(
    endpoint: u32,
    publisher: &str,
    tag: &str,
    fields: Vec<(String, Value)>,
) -> Res<BytesMut> {
    let mut ev = Event::new(tag, Vec::new());
    ev.header.publisher = publisher.into();
    ev.fields = fields;
    let mut out = BytesMut::new();
    tagwire_proto::encode_publish(endpoint, &ev, &mut out)?;
    Ok(out)
}

/// `p50 p99 max` of samples in µs.
fn percentiles(mut us: Vec<f64>) -> (f64, f64, f64) {
    if us.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), us[us.len() - 1])
}

/// "PASS" or "FAIL".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

fn subscribe_frame(sub: u32, endpoint: u32, pattern: &str, filters: &[String]) -> Frame {
    Frame::Subscribe {
        req: sub,
        sub,
        endpoint,
        pattern: pattern.into(),
        qos: filters
            .iter()
            .map(|f| ("filter".to_owned(), f.clone()))
            .collect(),
    }
}

/// A second healthy client that pings every 5 ms on its own connection while
/// an attack runs, so that stalls can be put down to the attack's phases;
/// with `--pid`, it also reads the daemon's RSS at the end of each phase.
struct Watch {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<(Instant, f64)>>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
    pid: Option<u64>,
    /// Each phase: its name, start, end and the daemon's RSS (KiB) at its end.
    phases: Vec<(String, Instant, Instant, Option<u64>)>,
    last: Instant,
}

impl Watch {
    fn start(o: &Opts) -> Res<Watch> {
        let c = owner_session(&o.server)?;
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (stop2, samples2) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || -> Result<(), String> {
            while !stop2.load(Ordering::Relaxed) {
                let t = Instant::now();
                let rtt = c.ping().map_err(|e| e.to_string())?;
                if let Ok(mut s) = samples2.lock() {
                    s.push((t, rtt.as_secs_f64() * 1e6));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        });
        let pid = o
            .args
            .iter()
            .find(|(k, _)| k == "pid")
            .map(|_| o.num("pid", 0));
        Ok(Watch {
            stop,
            samples,
            thread: Some(thread),
            pid,
            phases: Vec::new(),
            last: Instant::now(),
        })
    }

    /// Ends the current phase, named `name`.
    fn phase(&mut self, name: &str) {
        let now = Instant::now();
        let rss = self.pid.and_then(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        });
        self.phases.push((name.to_owned(), self.last, now, rss));
        self.last = now;
    }

    /// One line per phase: its length, the watcher's round trips during
    /// it (p99 and max), and the daemon's RSS at its end.
    fn finish(mut self) -> Res<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| "the watch thread panicked")??;
        }
        let samples = self.samples.lock().map_err(|_| "poisoned")?.clone();
        let mut out = String::new();
        for (name, from, to, rss) in &self.phases {
            let during: Vec<f64> = samples
                .iter()
                .filter(|(t, _)| t >= from && t < to)
                .map(|(_, us)| *us)
                .collect();
            let count = during.len();
            let (p50, p99, max) = percentiles(during);
            out += &format!(
                "  phase {name}: {:.0} ms; watcher round trips: {count}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms{}\n",
                ms(*to - *from),
                p50 / 1e3,
                p99 / 1e3,
                max / 1e3,
                rss.map_or(String::new(), |r| format!("; daemon RSS at its end {} MiB", r / 1024)),
            );
        }
        Ok(out)
    }
}

/// Publishes one event with string fields `s` and `t` on `{tag}/x` at
/// `rate` per second for `secs` seconds, each followed by a ping (answered
/// after the router routed the event); returns each publish+ping round
/// trip in µs.
fn paced_field_pings(
    session: &Session,
    publisher: &tagwire::Publisher,
    tag: &str,
    s: &str,
    t: &str,
    rate: u64,
    secs: u64,
) -> Res<Vec<f64>> {
    let interval = Duration::from_secs(1) / rate as u32;
    let until = Instant::now() + Duration::from_secs(secs);
    let mut rtts = Vec::new();
    let mut next = Instant::now();
    while Instant::now() < until {
        let at = Instant::now();
        publisher
            .event(&format!("{tag}/x"), Vec::new())
            .field("s", s)
            .field("t", t)
            .send()?;
        session.ping()?;
        rtts.push(at.elapsed().as_secs_f64() * 1e6);
        next += interval;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(rtts)
}

/// One subscription of 16 filters × 4 regexes `[a-z]{N}` (N as large as the
/// daemon accepts), then events with long string fields at a steady rate.
fn regex(o: &Opts) -> Res<()> {
    let secs = o.num("secs", 3);
    let rate = o.num("rate", 200).max(1);
    let size = o.num("size", 44_000) as usize;
    let start = Instant::now();
    let mut watch = Watch::start(o)?;
    let tag = format!("/abuse/regex{}", unique());
    // The largest N whose `[a-z]{N}` the daemon accepts in a filter.
    let t = Instant::now();
    // Raw: the daemon may take longer to refuse a huge regex than the
    // library's 5 s request timeout (a debug build does).
    let mut probe = Raw::hello(&o.server, "abuse-regex-probe")?;
    probe.declare(1, EndpointKind::Subscriber, &format!("{tag}/probe"))?;
    let (mut lo, mut hi, mut refusal) = (1u32, 1u32 << 16, String::new());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let filter = format!("$.t =~ '[a-z]{{{mid}}}'");
        match probe.ask(&subscribe_frame(mid, 1, &format!("{tag}/x"), &[filter]))? {
            Ok(()) => {
                lo = mid;
                probe.request(&Frame::Unsubscribe { req: 1, sub: mid })?;
            }
            Err((ErrorCode::InvalidFilter, m)) => {
                hi = mid;
                refusal = m;
            }
            Err((code, m)) => return Err(format!("probing N = {mid}: {code:?}: {m}").into()),
        }
    }
    drop(probe);
    let probing = t.elapsed();
    let session = owner_session(&o.server)?;
    watch.phase("probe N (16 or 17 subscribes, one regex each)");
    let n = lo;
    // 64 distinct regexes, N down to N - 63, half on the 44 KB field `s`
    // (over max_match_input), half on the 1 KiB field `t` (at it).
    let filters: Vec<String> = (0..16u32)
        .map(|f| {
            (0..4u32)
                .map(|r| {
                    let k = n.saturating_sub(f * 4 + r).max(1);
                    let field = if r % 2 == 0 { "s" } else { "t" };
                    format!("$.{field} =~ '[a-z]{{{k}}}'")
                })
                .collect::<Vec<_>>()
                .join(" or ")
        })
        .collect();
    // Subscribe once the healthy client is measuring: compiling is lane work.
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(start.elapsed()));
    watch.phase("wait");
    let t = Instant::now();
    // Raw, like the probe: compiling 64 such regexes can take longer than
    // the library's request timeout.
    let mut sub = Raw::hello(&o.server, "abuse-regex-sub")?;
    sub.declare(1, EndpointKind::Subscriber, &format!("{tag}/sub"))?;
    sub.request(&subscribe_frame(1, 1, &format!("{tag}/x"), &filters))?;
    let subscribing = t.elapsed();
    watch.phase("subscribe with 16 filters x 4 regexes");
    // Subjects of letter runs one shorter than the shortest N: no regex
    // matches, so every one is evaluated on every event.
    let run = n.saturating_sub(64).max(1) as usize;
    let subject = |len: usize| -> String {
        (0..len)
            .map(|i| {
                if i % (run + 1) == run {
                    '0'
                } else {
                    char::from(b'a' + (i % 26) as u8)
                }
            })
            .collect()
    };
    let publisher = session.declare_publisher(&format!("{tag}/pub"))?;
    let (s, t) = (subject(size), subject(1024));
    let rtts = paced_field_pings(&session, &publisher, &tag, &s, &t, rate, secs)?;
    let events = rtts.len();
    watch.phase("events");
    print!("{}", watch.finish()?);
    let (p50, p99, max) = percentiles(rtts);
    println!(
        "regex: N = {n} (N = {hi} refused: {}; probing took {:.0} ms); subscribing with 16 filters × 4 regexes [a-z]{{{}..{n}}} took {:.1} ms; \
         {events} events with a {size}-byte and a 1024-byte string field at {rate}/s: publish+ping round trip p50 {p50:.0} p99 {p99:.0} max {max:.0} µs",
        tagwire_proto::excerpt(&refusal),
        ms(probing),
        n.saturating_sub(63).max(1),
        ms(subscribing),
    );
    Ok(())
}

/// Issue 24 item 9: subscriptions whose filters are as costly as the
/// default limits allow — `--subs` with 16 filters × 4 distinct
/// cache-hostile regexes (`[ab]*a[ab]{11}XY`-style, 131 KB DFAs) and one
/// with 16 filters × 128 `$.s ~ $.t` — then events whose 1 KiB fields none
/// matches, at a steady rate. Before the per-event budget an event cost
/// ~60 ms per regex subscription (plus ~30 ms for the `~` one); now the
/// daemon stops at `limits.max_filter_work_per_event` and logs it.
fn filter_cost(o: &Opts) -> Res<()> {
    let secs = o.num("secs", 3);
    let rate = o.num("rate", 50).max(1);
    let subs = o.num("subs", 4) as usize;
    let start = Instant::now();
    let mut watch = Watch::start(o)?;
    let tag = format!("/abuse/filtercost{}", unique());
    let session = owner_session(&o.server)?;
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(start.elapsed()));
    watch.phase("wait");
    let letters: Vec<char> = ('A'..='Z').chain('c'..='z').collect();
    let t = Instant::now();
    // Raw: compiling 64 such regexes can take longer than the library's
    // request timeout.
    let mut conns = Vec::new();
    for c in 0..subs {
        let filters: Vec<String> = (0..16usize)
            .map(|f| {
                (0..4usize)
                    .map(|r| {
                        let k = (c * 16 + f) * 4 + r;
                        format!(
                            "$.s =~ '[ab]*a[ab]{{11}}{}{}'",
                            letters[k % letters.len()],
                            letters[(k / letters.len()) % letters.len()]
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" or ")
            })
            .collect();
        let mut sub = Raw::hello(&o.server, &format!("abuse-filtercost-{c}"))?;
        sub.declare(1, EndpointKind::Subscriber, &format!("{tag}/sub{c}"))?;
        sub.request(&subscribe_frame(1, 1, &format!("{tag}/x"), &filters))?;
        conns.push(sub);
    }
    let needles = vec![vec!["$.s ~ $.t"; 128].join(" or "); 16];
    let mut sub = Raw::hello(&o.server, "abuse-filtercost-needles")?;
    sub.declare(1, EndpointKind::Subscriber, &format!("{tag}/needles"))?;
    sub.request(&subscribe_frame(1, 1, &format!("{tag}/x"), &needles))?;
    conns.push(sub);
    let subscribing = t.elapsed();
    watch.phase("subscribe");
    // `a`/`b` with no `X`..`z` suffix: no regex matches; `t` is `s` with its
    // last byte changed: `~` reads all of both and does not match.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let s: String = (0..1024)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed & 1 == 0 {
                'a'
            } else {
                'b'
            }
        })
        .collect();
    let mut t_field = s.clone();
    t_field.pop();
    t_field.push('Z');
    let publisher = session.declare_publisher(&format!("{tag}/pub"))?;
    let rtts = paced_field_pings(&session, &publisher, &tag, &s, &t_field, rate, secs)?;
    let events = rtts.len();
    watch.phase("events");
    drop(conns);
    print!("{}", watch.finish()?);
    let (p50, p99, max) = percentiles(rtts);
    println!(
        "filter-cost: {subs} subscriptions of 16 filters × 4 cache-hostile regexes and one of 16 × 128 `$.s ~ $.t` \
         (subscribing took {:.0} ms); {events} events with two 1 KiB fields at {rate}/s: \
         publish+ping round trip p50 {p50:.0} p99 {p99:.0} max {max:.0} µs",
        ms(subscribing),
    );
    Ok(())
}

/// Admin work at scale: 65,536 filtered subscriptions on one connection,
/// listed page by page, then removed three ways.
fn admin_scale(o: &Opts) -> Res<()> {
    let n = o.num("subs", 65536) as u32;
    let hold = o.num("hold", 2);
    let plain = o.num("plain", 0) != 0;
    let tag = format!("/abuse/admin{}", unique());
    let pattern = format!("{tag}/x");
    let subscribe_all = |endpoint: u32| -> Res<BytesMut> {
        let mut b = BytesMut::new();
        for i in 1..=n {
            let filters = if plain {
                vec![]
            } else {
                vec![format!("$.x == {i}")]
            };
            subscribe_frame(i, endpoint, &pattern, &filters).encode(&mut b)?;
        }
        Ok(b)
    };
    let mut watch = Watch::start(o)?;
    let mut a = Raw::hello(&o.server, "abuse-admin")?;
    std::thread::sleep(Duration::from_millis(200));
    watch.phase("connect");
    // 1. Subscribe, then list everything page by page from another connection.
    let name1 = format!("{tag}/sub1");
    a.declare(1, EndpointKind::Subscriber, &name1)?;
    let subscribed = a.pipeline(subscribe_all(1)?, n as usize)?;
    check("subscribe", &subscribed)?;
    watch.phase("subscribe 65,536, pipelined");
    let mut l = Raw::hello(&o.server, "abuse-admin-list")?;
    let (mut pages, mut listed, mut worst_page) = (0, 0, Duration::ZERO);
    let mut after: Option<String> = None;
    let t = Instant::now();
    loop {
        let mut req = json!({"op": "list", "limit": 1000});
        if let Some(a) = &after {
            req["after"] = json!(a);
        }
        let tp = Instant::now();
        let page = l
            .admin(&req)?
            .map_err(|(code, m)| format!("list: {code:?}: {m}"))?;
        worst_page = worst_page.max(tp.elapsed());
        pages += 1;
        listed += page["subscriptions"].as_array().map_or(0, |s| {
            s.iter()
                .filter(|s| s["endpoint"].as_str() == Some(name1.as_str()))
                .count()
        });
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    let listing = t.elapsed();
    watch.phase("list, 1,000 per page");
    // 2. Undeclare the endpoint; housekeeping removes its subscriptions.
    let t = Instant::now();
    a.request(&Frame::UndeclareEndpoint { req: 1, id: 1 })?;
    let undeclare = t.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    watch.phase("undeclare, then 1 s of housekeeping");
    // 3. Subscribe again, then unsubscribe all, pipelined.
    a.declare(2, EndpointKind::Subscriber, &format!("{tag}/sub2"))?;
    check(
        "subscribe again",
        &a.pipeline(subscribe_all(2)?, n as usize)?,
    )?;
    watch.phase("subscribe 65,536 again");
    let mut unsubs = BytesMut::new();
    for i in 1..=n {
        Frame::Unsubscribe { req: i, sub: i }.encode(&mut unsubs)?;
    }
    let unsubscribed = a.pipeline(unsubs, n as usize)?;
    check("unsubscribe", &unsubscribed)?;
    watch.phase("unsubscribe 65,536, pipelined");
    // 4. Subscribe again, then close the connection.
    a.declare(3, EndpointKind::Subscriber, &format!("{tag}/sub3"))?;
    check(
        "subscribe a third time",
        &a.pipeline(subscribe_all(3)?, n as usize)?,
    )?;
    watch.phase("subscribe 65,536 a third time");
    let t = Instant::now();
    a.send(&Frame::Close {
        code: 0,
        reason: "abuse: done".into(),
    })?;
    while a.recv()?.is_some() {}
    let close = t.elapsed();
    drop(a);
    std::thread::sleep(Duration::from_secs(hold));
    watch.phase("close, then housekeeping (hold)");
    print!("{}", watch.finish()?);
    let ok = listed == n as usize;
    println!(
        "admin-scale: {n} subscriptions with filters `$.x == N`, pipelined: {:.0} ms; list: {pages} pages in {:.0} ms (slowest page {:.1} ms), \
         {listed} of ours listed: {}; undeclaring the endpoint answered in {:.1} ms; {n} pipelined unsubscribes: {:.0} ms; \
         Close to EOF: {:.1} ms; held {hold}s",
        ms(subscribed.took),
        ms(listing),
        ms(worst_page),
        verdict(ok),
        ms(undeclare),
        ms(unsubscribed.took),
        ms(close),
    );
    Ok(())
}

/// Issue 24, item 11: one identity's subscriptions, each on its own
/// pattern. The issue measured chunks of 2,000 that took 4.6, 12.0 and
/// 20.8 s (each subscribe cost O(subscriptions held)), a fresh handshake of
/// 9.1 s and a bystander's ping of 11.2 s after 8,000; and a bystander's
/// ping at p50 204 ms for 29 s while 65,536 Unsubscribe frames were read.
fn distinct(o: &Opts) -> Res<()> {
    let token = o.text("token").ok_or("distinct needs --token T")?;
    let n = o.num("subs", 8000) as u32;
    let chunk = o.num("chunk", 2000).max(1) as u32;
    let burst = (o.num("burst", 65536) as u32).max(n);
    let tag = format!("/abuse/distinct{}", unique());
    let subscribe_range = |first: u32, last: u32| -> Res<BytesMut> {
        let mut b = BytesMut::new();
        for i in first..=last {
            subscribe_frame(i, 1, &format!("{tag}/{i}/**"), &[]).encode(&mut b)?;
        }
        Ok(b)
    };
    let mut watch = Watch::start(o)?;
    let mut m = Raw::hello_as(&o.server, "abuse-distinct", token.to_owned())?
        .map_err(|(code, msg)| format!("mallory's Hello refused: {code:?}: {msg}"))?;
    m.declare(1, EndpointKind::Subscriber, &format!("{tag}/sub"))?;
    std::thread::sleep(Duration::from_millis(200));
    watch.phase("connect");
    let mut chunks = Vec::new();
    let mut first = 1;
    while first <= n {
        let last = (first + chunk - 1).min(n);
        let p = m.pipeline(subscribe_range(first, last)?, (last + 1 - first) as usize)?;
        check("subscribe", &p)?;
        chunks.push(format!("{:.0}", ms(p.took)));
        watch.phase(&format!("subscribe {}..{last} distinct, pipelined", first));
        first = last + 1;
    }
    // A fresh client: its handshake, then one ping on it.
    let t = Instant::now();
    let mut fresh = Raw::hello(&o.server, "abuse-distinct-fresh")?;
    let handshake = t.elapsed();
    let fresh_ping = fresh.round_trip(1)?;
    drop(fresh);
    watch.phase("a fresh client's handshake and ping");
    // Fill the connection to `burst` distinct subscriptions, then remove
    // them all with one burst of Unsubscribe frames.
    let mut first = n + 1;
    while first <= burst {
        let last = (first + 8191).min(burst);
        let p = m.pipeline(subscribe_range(first, last)?, (last + 1 - first) as usize)?;
        check("subscribe up to the burst", &p)?;
        first = last + 1;
    }
    watch.phase(&format!("subscribe {}..{burst} distinct, pipelined", n + 1));
    let mut unsubs = BytesMut::new();
    for i in 1..=burst {
        Frame::Unsubscribe { req: i, sub: i }.encode(&mut unsubs)?;
    }
    let unsubscribed = m.pipeline(unsubs, burst as usize)?;
    check("unsubscribe", &unsubscribed)?;
    watch.phase(&format!("{burst} Unsubscribe frames in one burst"));
    m.send(&Frame::Close {
        code: 0,
        reason: "abuse: done".into(),
    })?;
    while m.recv()?.is_some() {}
    drop(m);
    watch.phase("close");
    print!("{}", watch.finish()?);
    println!(
        "distinct: token:mallory subscribed {n} distinct patterns in chunks of {chunk}, pipelined: {} ms per chunk; \
         then a fresh client's handshake {:.1} ms and its ping {:.0} µs; {burst} Unsubscribe frames in one burst: answered in {:.0} ms",
        chunks.join(", "),
        ms(handshake),
        fresh_ping.as_secs_f64() * 1e6,
        ms(unsubscribed.took),
    );
    Ok(())
}

/// Identity token:mallory takes all the connections and endpoints her quotas
/// allow; the owner must still get in and be served.
fn endpoint_fill(o: &Opts) -> Res<()> {
    let token = o.text("token").ok_or("--token is required")?.to_owned();
    let want_conns = o.num("expect-connections", 1024) as usize;
    let want_endpoints = o.num("expect-endpoints", 25000) as usize;
    let hold = o.num("hold", 2);
    let tag = format!("/abuse/fill{}", unique());
    let mut watch = Watch::start(o)?;
    let t = Instant::now();
    let mut conns = Vec::new();
    let refused_hello = loop {
        if conns.len() > 4 * want_conns + 16 {
            break None;
        }
        match Raw::hello_as(&o.server, "abuse-mallory", token.clone())? {
            Ok(c) => conns.push(c),
            Err(r) => break Some(r),
        }
    };
    watch.phase("open connections until refused");
    let mut endpoints = 0;
    let mut identity_refusal = None;
    let declare = o.num("declare", 1) != 0;
    'fill: for (c, conn) in conns.iter_mut().enumerate().filter(|_| declare) {
        let mut declares = BytesMut::new();
        for id in 1..=4096u32 {
            Frame::DeclareEndpoint {
                req: id,
                id,
                kind: EndpointKind::Publisher,
                name: format!("{tag}/m{c}-{id}"),
            }
            .encode(&mut declares)?;
        }
        let p = conn.pipeline(declares, 4096)?;
        endpoints += p.ok;
        if let Some((code, m)) = p.first_refusal {
            if code != ErrorCode::LimitReached {
                return Err(format!("declaring: {code:?}: {m}").into());
            }
            if m.contains("per_identity") {
                identity_refusal = Some(m);
                break 'fill;
            }
        }
    }
    let filling = t.elapsed();
    watch.phase("declare endpoints, 4,096 pipelined per connection, until refused");
    // The owner, meanwhile: connects, declares, subscribes, gets an event.
    let t = Instant::now();
    let owner_ok = (|| -> Res<Duration> {
        let mut h = Raw::hello(&o.server, "abuse-owner")?;
        for id in 1..=100u32 {
            h.declare(id, EndpointKind::Publisher, &format!("{tag}/owner{id}"))?;
        }
        h.declare(101, EndpointKind::Subscriber, &format!("{tag}/owner-sub"))?;
        h.subscribe(101, &format!("{tag}/owner/x"))?;
        h.s.write_all(&publish_with_fields(
            1,
            &format!("{tag}/owner1"),
            &format!("{tag}/owner/x"),
            vec![],
        )?)?;
        loop {
            match h.recv()? {
                Some(Frame::Deliver { .. }) => break,
                Some(Frame::Error { code, message, .. }) => {
                    return Err(format!("{code:?}: {message}").into())
                }
                None => return Err("connection closed".into()),
                _ => {}
            }
        }
        let mut worst = Duration::ZERO;
        for n in 0..20 {
            worst = worst.max(h.round_trip(n)?);
        }
        Ok(worst)
    })();
    let owner_took = t.elapsed();
    let again = Raw::hello_as(&o.server, "abuse-mallory", token.clone())?;
    let opened = conns.len();
    watch.phase("the owner connects, declares, receives");
    std::thread::sleep(Duration::from_secs(hold));
    watch.phase("hold");
    // She leaves with `Close`, which frees her endpoint names at once (a
    // dropped connection would keep them reserved for
    // `endpoint_reservation_secs`, within `max_reservations`).
    for c in &mut conns {
        c.send(&Frame::Close {
            code: 0,
            reason: "abuse: done".into(),
        })?;
    }
    drop(conns);
    std::thread::sleep(Duration::from_secs(1));
    watch.phase("leave with Close, then 1 s");
    print!("{}", watch.finish()?);
    let describe = |r: Option<&Refusal>| match r {
        Some((code, m)) => format!("{code:?}: {}", tagwire_proto::excerpt(m)),
        None => "not refused".to_owned(),
    };
    let ok_conns = opened == want_conns
        && matches!(refused_hello, Some((ErrorCode::LimitReached, _)))
        && matches!(again, Err((ErrorCode::LimitReached, _)));
    let ok_endpoints = endpoints == want_endpoints && identity_refusal.is_some();
    let (owner_verdict, owner_what) = match &owner_ok {
        Ok(worst) => (
            true,
            format!("worst round trip {:.0} µs", worst.as_secs_f64() * 1e6),
        ),
        Err(e) => (false, format!("error: {e}")),
    };
    println!(
        "endpoint-fill: mallory opened {opened} connections (expected {want_conns}; the next Hello got {}): {}; \
         declared {endpoints} endpoints (expected {want_endpoints}; then {}): {}; in {:.0} ms; \
         the owner then connected, declared 101 endpoints, got an event and 20 round trips in {:.0} ms ({owner_what}): {}",
        describe(refused_hello.as_ref()),
        verdict(ok_conns),
        describe(identity_refusal.map(|m| (ErrorCode::LimitReached, m)).as_ref()),
        verdict(ok_endpoints),
        ms(filling),
        ms(owner_took),
        verdict(owner_verdict),
    );
    Ok(())
}

/// Identity token:mallory tries to silence the owner's subscriber through
/// its filters, and to see them.
fn trespass(o: &Opts) -> Res<()> {
    let token = o.text("token").ok_or("--token is required")?.to_owned();
    let tag = format!("/abuse/trespass{}", unique());
    let victim_name = format!("{tag}/victim");
    let owner = owner_session(&o.server)?;
    let victim = owner
        .subscribe(&format!("{tag}/x"))
        .endpoint(&victim_name)
        .receiver()?;
    let id = owner
        .admin_json(&json!({"op": "filter_add", "endpoint": victim_name, "level": "channel", "filter": "$.x == 1"}))
        .map_err(|e| format!("the owner's filter_add: {e}"))?["id"]
        .as_u64()
        .ok_or("filter_add answered no id")?;
    let m = Session::builder()
        .token(token)
        .connect(&format!("tcp://{}", o.server))
        .map_err(|e| format!("mallory's session: {e}"))?;
    let attempts = [
        (
            "filter_add channel `false`",
            json!({"op": "filter_add", "endpoint": victim_name, "level": "channel", "filter": "false"}),
        ),
        (
            "filter_add session `false`",
            json!({"op": "filter_add", "endpoint": victim_name, "level": "session", "filter": "false"}),
        ),
        (
            "filter_add `map lifetime=1ns`",
            json!({"op": "filter_add", "endpoint": victim_name, "map": "map lifetime=1ns"}),
        ),
        (
            "filter_op `or`",
            json!({"op": "filter_op", "endpoint": victim_name, "interfilter": "or"}),
        ),
        (
            "filter_remove of its filter",
            json!({"op": "filter_remove", "id": id}),
        ),
    ];
    let mut all_ok = true;
    let mut results = Vec::new();
    for (what, req) in &attempts {
        let r = answered(m.admin_json(req))?;
        let ok = matches!(r, Err((ErrorCode::PermissionDenied, _)));
        all_ok &= ok;
        results.push(match r {
            Ok(reply) => format!("{what}: accepted {reply} FAIL"),
            Err((code, _)) => format!("{what}: {code:?} ({})", code.code()),
        });
    }
    // What mallory may see: nothing of the victim's.
    let list = answered(m.admin_json(&json!({"op": "list"})))?;
    let filters = answered(m.admin_json(&json!({"op": "filter_list"})))?;
    let hidden = matches!(&list, Ok(l) if !l.to_string().contains(&victim_name))
        && matches!(&filters, Ok(f) if !f.to_string().contains(&victim_name));
    // The victim still has its filter and still receives.
    let publisher = owner.declare_publisher(&format!("{tag}/pub"))?;
    for x in [2i64, 1] {
        publisher
            .event(&format!("{tag}/x"), Vec::new())
            .field("x", x)
            .send()?;
    }
    let received = victim
        .recv_timeout(Duration::from_secs(5))?
        .and_then(|s| s.event().field("x").map(|v| format!("{v:?}")));
    let receives = received.as_deref() == Some("Int(1)");
    println!(
        "trespass: mallory on the owner's subscriber: {}: {}; mallory's list and filter_list hide it: {}; \
         the victim then received only x = 1 (its filter held): {} ({})",
        results.join(", "),
        verdict(all_ok),
        verdict(hidden),
        verdict(receives),
        received.as_deref().unwrap_or("nothing"),
    );
    Ok(())
}

/// Identity token:mallory (no admin right) asks for two DSCP markings on
/// one connection, then for a daemon-wide DSCP (issue 24, item 3): a socket
/// carries one marking, so the second channel is refused (`BadRequest`),
/// and a daemon layer marks everyone's sockets (`PermissionDenied`); its
/// first channel keeps its own marking.
fn dscp_clash(o: &Opts) -> Res<()> {
    let token = o.text("token").ok_or("--token is required")?.to_owned();
    let tag = format!("/abuse/dscp{}", unique());
    let m = Session::builder()
        .token(token)
        .connect(&format!("tcp://{}", o.server))
        .map_err(|e| format!("mallory's session: {e}"))?;
    let first = answered(
        m.subscribe(&format!("{tag}/a"))
            .qos("dscp", "ef")
            .receiver(),
    )?;
    let second = answered(
        m.subscribe(&format!("{tag}/b"))
            .qos("dscp", "af11")
            .receiver(),
    )?;
    let daemon =
        answered(m.admin_json(&json!({"op": "qos", "target": ["daemon"], "set": {"dscp": "ef"}})))?;
    let describe = |r: &Result<(), Refusal>| match r {
        Ok(()) => "accepted".to_owned(),
        Err((code, _)) => format!("{code:?} ({})", code.code()),
    };
    let first = first.map(drop);
    let (second, daemon) = (second.map(drop), daemon.map(drop));
    println!(
        "dscp-clash: mallory's first channel dscp=ef: {} {}; a second on the same connection dscp=af11: {} {}; \
         the daemon's dscp=ef: {} {}",
        describe(&first),
        verdict(first.is_ok()),
        describe(&second),
        verdict(matches!(&second, Err((ErrorCode::BadRequest, _)))),
        describe(&daemon),
        verdict(matches!(&daemon, Err((ErrorCode::PermissionDenied, _)))),
    );
    Ok(())
}

/// A session over the daemon's Unix socket `--unix PATH`, with shared
/// memory, as the owner (its uid) or with `token`.
fn unix_session(o: &Opts, token: Option<&str>) -> Res<Session> {
    let path = o.text("unix").ok_or("this attack needs --unix PATH")?;
    let mut b = Session::builder().shm(ShmMode::Auto).shm_threshold(0);
    if let Some(t) = token {
        b = b.token(t);
    }
    Ok(b.connect(&format!("unix://{path}"))?)
}

/// Issue 24, item 1: a subscriber of another identity must never get the
/// owner's region (it was sent read-write and could corrupt what the
/// owner's readers got).
fn shm_trespass(o: &Opts) -> Res<()> {
    let token = o.text("token").ok_or("shm-trespass needs --token T")?;
    let n = o.num("events", 3000) as usize;
    let tag = "/abuse/shm/stream";
    let owner = unix_session(o, None)?;
    let reader = unix_session(o, None)?;
    let mallory = unix_session(o, Some(token))?;
    let victim = reader.subscribe(tag).max_queue_length(n + 16).receiver()?;
    let theirs = mallory.subscribe(tag).max_queue_length(n + 16).receiver()?;
    let publisher = owner.declare_publisher("/abuse/shm/pub")?;
    let in_shm = publisher.uses_shm();
    let payload = |i: usize| vec![(i % 251) as u8; 1024];
    let (mut v_got, mut v_in_place, mut corrupt) = (0, 0, 0);
    let (mut m_got, mut m_in_place) = (0, 0);
    for i in 0..n {
        publisher.publish(tag, payload(i))?;
        // Read as it comes: the owner's reader holds at most a few pins.
        if let Some(s) = victim.recv_timeout(Duration::from_secs(5))? {
            v_got += 1;
            v_in_place += usize::from(s.is_in_place());
            corrupt += usize::from(s.payload()[..] != payload(i)[..]);
        }
        if let Some(s) = theirs.recv_timeout(Duration::from_secs(5))? {
            m_got += 1;
            m_in_place += usize::from(s.is_in_place());
        }
    }
    let m = mallory.shm_stats();
    let no_reference = m_in_place == 0 && m.in_place == 0 && m.unreadable == 0;
    println!(
        "shm-trespass: the owner's publisher in shared memory: {}; mallory got {m_got}/{n} events, \
         {m_in_place} by reference into the owner's region: {}; the owner's reader got {v_got}/{n}, \
         {v_in_place} in place, {corrupt} corrupted: {}",
        verdict(in_shm),
        verdict(no_reference && m_got == n),
        verdict(v_got == n && corrupt == 0 && v_in_place > 0),
    );
    Ok(())
}

/// Issue 24, item 4: one identity takes at most its quota of regions.
fn shm_hog(o: &Opts) -> Res<()> {
    let token = o.text("token").ok_or("shm-hog needs --token T")?;
    let n = o.num("regions", 64);
    let quota = o.num("expect-regions", 16);
    let mallory = unix_session(o, Some(token))?;
    let mut publishers = Vec::new();
    let mut granted = 0u64;
    for i in 0..n {
        let p = mallory.declare_publisher(&format!("/abuse/hog/{i}"))?;
        granted += u64::from(p.uses_shm());
        publishers.push(p);
    }
    let owner = unix_session(o, None)?;
    let own = owner.declare_publisher("/abuse/hog/owner")?;
    println!(
        "shm-hog: mallory declared {n} publishers over the Unix socket, {granted} got a region \
         (quota {quota}): {}; the owner's publisher then got one: {}",
        verdict(granted <= quota),
        verdict(own.uses_shm()),
    );
    Ok(())
}

/// Source times that lie, against a subscriber's time services (issue 26):
/// they must hold no more than their bounds and count what they forced.
fn time_skew(o: &Opts) -> Res<()> {
    let events = o.num("events", 100_000);
    let hold = Duration::from_secs(o.num("hold", 2));
    let s = owner_session(&o.server)?;
    let tds = s
        .subscribe("/abuse/time/**")
        .qos("playout", "tds:60s")
        .receiver()?;
    let buffered = s
        .subscribe("/abuse/time/**")
        .qos("buffer", "count:1000,max_delay:60s")
        .receiver()?;
    let p = s.declare_publisher("/abuse/time/p")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let hour = 3_600_000_000_000u64;
    let stamps = [0, 1, u64::MAX - 1, now - hour, now + hour, now];
    for i in 0..events {
        let mut e = tagwire::Event::new("/abuse/time/x", vec![0u8; 64]);
        e.header.source_time_ns = stamps[(i % 6) as usize].wrapping_add(i);
        p.send(e)?;
    }
    std::thread::sleep(hold);
    let listing = s.list()?;
    let times: Vec<_> = listing
        .subscriptions
        .iter()
        .filter(|x| x.pattern == "/abuse/time/**")
        .filter_map(|x| x.time)
        .collect();
    let held: Vec<usize> = times.iter().map(|t| t.held).collect();
    let ok = times.len() == 2 && held.iter().all(|h| *h <= 1024);
    println!(
        "time-skew: {events} events with lying source times; the two timed subscriptions hold {held:?} (bounds 1024, 1000), forced {:?}, late {:?}, re-anchored {:?}: {}",
        times.iter().map(|t| t.forced).collect::<Vec<_>>(),
        times.iter().map(|t| t.late).collect::<Vec<_>>(),
        times.iter().map(|t| t.reanchored).collect::<Vec<_>>(),
        verdict(ok)
    );
    drop((tds, buffered));
    Ok(())
}

/// A healthy client's round trips: prints `p50_us p99_us max_us`. With
/// `--udp ADDR` it pings over `udp://ADDR` (the owner's UDP token), as a
/// healthy UDP client beside a UDP flood (udp-flood).
fn ping(o: &Opts) -> Res<()> {
    let count = o.num("count", 200).max(1);
    let interval = Duration::from_millis(o.num("interval-ms", 10));
    let until = o.text("until").map(std::path::Path::new);
    let c = match o.text("udp") {
        Some(udp) => {
            let port: u16 = udp
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .ok_or_else(|| format!("no port in {udp}"))?;
            let token =
                tagwire_router::local::read_token(&tagwire_router::local::udp_token_path(port))?;
            Session::builder()
                .token(token)
                .connect(&format!("udp://{udp}"))?
        }
        None => owner_session(&o.server)?,
    };
    let mut rtts = Vec::new();
    let mut n = 0;
    while n < count || until.is_some_and(|f| !f.exists()) {
        n += 1;
        rtts.push(c.ping()?.as_secs_f64() * 1e6);
        std::thread::sleep(interval);
    }
    let (p50, p99, max) = percentiles(rtts);
    println!("{p50:.0} {p99:.0} {max:.0}");
    Ok(())
}

/// UDP (issue 27): garbage datagrams as fast as one socket sends them
/// (half with a datagram's magic and version, so some name unknown
/// sessions and get the 16-byte `Reset`, which is allowed), short and full
/// `Open`s, forged cookies, then more sessions than `[udp] max_sessions`
/// from as many source ports (the script's healthy client pings over UDP
/// meanwhile). PASS if nothing but cookies answered the unproven
/// datagrams and the answers were never more bytes than what came (no
/// amplification). Sessions that never say Hello are bounded by
/// `limits.max_pending_handshakes` (the oldest is closed for a new one) and
/// `[udp] max_sessions`; the script's RSS lines show the cost.
fn udp_flood(o: &Opts) -> Res<()> {
    use std::net::UdpSocket;
    use tagwire_proto::datagram::{encode_open, Datagram, DatagramKind, COOKIE_LEN, MIN_OPEN_LEN};
    let udp = o
        .text("udp")
        .ok_or("--udp ADDR: the daemon's [udp] listen")?;
    let garbage = o.num("datagrams", 200_000);
    let sessions = o.num("sessions", 2048);
    let max_sessions = o.num("max-sessions", 1024);
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.connect(udp)?;
    s.set_nonblocking(true)?;
    let (mut sent, mut answered, mut answers, mut non_cookie) = (0u64, 0u64, 0u64, 0u64);
    let mut buf = vec![0u8; 65536];
    let mut drain = |s: &UdpSocket, answered: &mut u64, answers: &mut u64, non_cookie: &mut u64| {
        while let Ok(n) = s.recv(&mut buf) {
            *answered += n as u64;
            *answers += 1;
            // A Reset to a datagram naming an unknown session is right (no
            // larger than what came: checked by answered <= sent).
            if !matches!(
                Datagram::parse(&buf[..n]).map(|d| d.header.kind),
                Ok(DatagramKind::Cookie | DatagramKind::Reset)
            ) {
                *non_cookie += 1;
            }
        }
    };
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..garbage {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % 1400) as usize;
        let mut d: Vec<u8> = (0..len).map(|k| (x >> (k % 56)) as u8).collect();
        if i % 2 == 0 && len >= 16 {
            // Half look like datagrams: magic, version, a random kind and id.
            d[..3].copy_from_slice(b"TD\x01");
        }
        if s.send(&d).is_ok() {
            sent += len as u64;
        }
        if i % 1024 == 0 {
            drain(&s, &mut answered, &mut answers, &mut non_cookie);
        }
    }
    let mut open = BytesMut::new();
    encode_open(None, &mut open);
    let mut forged = BytesMut::new();
    encode_open(Some(&[7u8; COOKIE_LEN]), &mut forged);
    for _ in 0..10_000 {
        for d in [&open[..MIN_OPEN_LEN - 1], &open[..], &forged[..]] {
            if s.send(d).is_ok() {
                sent += d.len() as u64;
            }
        }
        drain(&s, &mut answered, &mut answers, &mut non_cookie);
    }
    std::thread::sleep(Duration::from_millis(300));
    drain(&s, &mut answered, &mut answers, &mut non_cookie);
    // Sessions: a cookie each, then an Open with it, from `sessions` ports.
    let mut accepted = 0u64;
    let mut socks = Vec::new();
    for _ in 0..sessions {
        let c = UdpSocket::bind("127.0.0.1:0")?;
        c.connect(udp)?;
        c.set_read_timeout(Some(Duration::from_millis(200)))?;
        c.send(&open)?;
        let Ok(n) = c.recv(&mut buf) else { continue };
        let Ok(d) = Datagram::parse(&buf[..n]) else {
            continue;
        };
        if d.header.kind != DatagramKind::Cookie {
            continue;
        }
        let mut cookie = [0u8; COOKIE_LEN];
        cookie.copy_from_slice(d.body);
        let mut with = BytesMut::new();
        encode_open(Some(&cookie), &mut with);
        c.send(&with)?;
        if let Ok(n) = c.recv(&mut buf) {
            if Datagram::parse(&buf[..n]).is_ok_and(|d| d.header.kind == DatagramKind::Accept) {
                accepted += 1;
            }
        }
        socks.push(c);
    }
    let ok = non_cookie == 0 && answered <= sent;
    println!(
        "udp-flood: {garbage} garbage datagrams and 30,000 Opens ({sent} bytes) got {answers} answers ({answered} bytes, all cookies or resets: {}); {sessions} cookie-proven Opens from as many ports got {accepted} sessions (at most max_sessions {max_sessions} at once, pending handshakes evicted oldest first): {}",
        non_cookie == 0,
        verdict(ok)
    );
    drop(socks);
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let attack = args.next().unwrap_or_default();
    let mut server = "127.0.0.1:7782".to_owned();
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.strip_prefix("--") {
            Some("server") => server = v,
            Some(k) => rest.push((k.to_owned(), v)),
            None => {
                eprintln!("abuse: unexpected argument {a:?}");
                std::process::exit(2);
            }
        }
    }
    let o = Opts { server, args: rest };
    let r = match attack.as_str() {
        "stalled-killed" => stalled_killed(&o),
        "small-queued" => small_queued(&o),
        "big-frames" => big_frames(&o),
        "idle" => idle(&o),
        "malformed" => malformed(&o),
        "regex" => regex(&o),
        "filter-cost" => filter_cost(&o),
        "admin-scale" => admin_scale(&o),
        "endpoint-fill" => endpoint_fill(&o),
        "trespass" => trespass(&o),
        "shm-trespass" => shm_trespass(&o),
        "shm-hog" => shm_hog(&o),
        "dscp-clash" => dscp_clash(&o),
        "distinct" => distinct(&o),
        "time-skew" => time_skew(&o),
        "ping" => ping(&o),
        "udp-flood" => udp_flood(&o),
        other => {
            eprintln!("abuse: unknown attack {other:?} (see the comment at the top of abuse.rs)");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("abuse {attack}: {e}");
        std::process::exit(1);
    }
}
