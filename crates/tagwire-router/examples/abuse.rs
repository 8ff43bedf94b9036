//! Attacks on a running `tagwired`, for `scripts/abuse.sh` (issue 12): each
//! subcommand plays one hostile or careless client against `--server
//! HOST:PORT` and prints one line saying what it did.
//!
//!   cargo run --release -p tagwire-router --example abuse -- ATTACK --server 127.0.0.1:7782 [OPTIONS]
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
//!   ping            --count 200 --interval-ms 10  a healthy client: round
//!                   trips, prints `p50_us P99_us` (nothing else)
//!
//! Adding an attack: one function here and one line in scripts/abuse.sh.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_proto::{EndpointKind, Event, Frame, FrameDecoder, PROTOCOL_VERSION};

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
}

/// A raw protocol client over TCP.
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

    fn hello(server: &str, name: &str) -> Res<Raw> {
        let mut r = Raw::connect(server)?;
        // The daemon's owner token for this port, from our runtime directory.
        let port: u16 = server
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .ok_or_else(|| format!("no port in {server}"))?;
        let token = tagwire_router::local::read_token(&tagwire_router::local::token_path(port))?;
        r.send(&Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame: 1 << 24,
            name: name.into(),
            token,
            session: [0; 16],
        })?;
        match r.recv()? {
            Some(Frame::Welcome { .. }) => Ok(r),
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
        self.send(f)?;
        match self.recv_control()? {
            Some(Frame::Ok { .. }) => Ok(()),
            other => Err(format!("expected Ok, got {other:?}").into()),
        }
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

/// A healthy client's round trips: prints `p50_us p99_us`.
fn ping(o: &Opts) -> Res<()> {
    let count = o.num("count", 200).max(1);
    let interval = Duration::from_millis(o.num("interval-ms", 10));
    let mut c = Raw::hello(&o.server, "abuse-ping")?;
    let mut rtts = Vec::new();
    for n in 0..count {
        let t = Instant::now();
        c.send(&Frame::Ping { nonce: n })?;
        match c.recv_control()? {
            Some(Frame::Pong { .. }) => rtts.push(t.elapsed().as_secs_f64() * 1e6),
            other => return Err(format!("expected Pong, got {other:?}").into()),
        }
        std::thread::sleep(interval);
    }
    rtts.sort_by(f64::total_cmp);
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
    println!("{:.0} {:.0}", at(0.5), at(0.99));
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
        "ping" => ping(&o),
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
