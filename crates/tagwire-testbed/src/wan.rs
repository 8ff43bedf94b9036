//! A software WAN link: a TCP relay that delays the bytes of each direction
//! by `delay ± jitter`, for kernels without `netem` (this project's CI
//! kernel has none). [`DelayLine`] is the pure schedule (time in, release
//! time out, seeded); [`DelayRelay`] is the relay around it (threads, in a
//! namespace of the testbed or in the caller's); [`Testbed::wan_link`]
//! picks netem where the kernel has it and the relay where it does not.
//!
//! Which to use: a daemon that should see a WAN toward another dials the
//! address [`WanPath::peer`] gives (`--peer tcp://ADDR`); everything else
//! on the hosts stays on the plain, undelayed network.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{io_err, run, Testbed, TestbedError, NETNS_DIR};

/// Largest delay a link may have.
pub const MAX_DELAY: Duration = Duration::from_secs(10);
/// Bytes read from a socket at once: one chunk of the delay line.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks held per direction of a relayed connection. At the bound the
/// relay stops reading that direction (TCP flow control then holds the
/// sender back); nothing is dropped. At most `CHUNKS_HELD × CHUNK_BYTES`
/// (16 MiB) per direction, enough for ~160 MB/s at 100 ms.
pub const CHUNKS_HELD: usize = 256;

/// One direction of a WAN link: every chunk is released `delay ± jitter`
/// after it arrived (uniform in `[delay − jitter, delay + jitter]`), never
/// before the chunk ahead of it (bytes stay in order), as
/// `netem delay D J` would delay packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WanLink {
    /// Mean one-way delay, `0..=MAX_DELAY`.
    pub delay: Duration,
    /// Spread around the delay, at most `delay` (a chunk never leaves
    /// before it arrived).
    pub jitter: Duration,
    /// Seed of the jitter samples: the same seed gives the same sequence.
    pub seed: u64,
}

impl WanLink {
    /// A link of `delay ± jitter`, seed 1.
    pub fn new(delay: Duration, jitter: Duration) -> WanLink {
        WanLink {
            delay,
            jitter,
            seed: 1,
        }
    }

    /// Checks the bounds; the message names the bad value.
    pub fn validate(&self) -> Result<(), TestbedError> {
        if self.delay > MAX_DELAY {
            return Err(TestbedError::BadConfig {
                reason: format!("WAN delay {:?} is over {MAX_DELAY:?}", self.delay),
            });
        }
        if self.jitter > self.delay {
            return Err(TestbedError::BadConfig {
                reason: format!(
                    "WAN jitter {:?} is larger than the delay {:?} (a chunk would leave before it arrived)",
                    self.jitter, self.delay
                ),
            });
        }
        Ok(())
    }
}

/// The schedule of one direction, sans I/O: give it each chunk's arrival
/// time (ns on any monotonic clock), get the time to release it.
/// `release = max(previous release, arrival + delay + U(−jitter, +jitter))`.
#[derive(Debug, Clone)]
pub struct DelayLine {
    delay_ns: u64,
    jitter_ns: u64,
    rng: u64,
    last_release_ns: u64,
}

impl DelayLine {
    /// A delay line for `link` (validate the link first; a jitter above the
    /// delay is clamped to it here).
    pub fn new(link: &WanLink) -> DelayLine {
        let delay_ns = link.delay.as_nanos() as u64;
        DelayLine {
            delay_ns,
            jitter_ns: (link.jitter.as_nanos() as u64).min(delay_ns),
            rng: link.seed,
            last_release_ns: 0,
        }
    }

    /// When to release a chunk that arrived at `arrival_ns`.
    pub fn release_ns(&mut self, arrival_ns: u64) -> u64 {
        let mut at = arrival_ns.saturating_add(self.delay_ns);
        if self.jitter_ns > 0 {
            // U(0, 2J] − J, from splitmix64.
            let span = 2 * self.jitter_ns + 1;
            let r = splitmix64(&mut self.rng) % span;
            at = (at + r).saturating_sub(self.jitter_ns);
        }
        self.last_release_ns = self.last_release_ns.max(at);
        self.last_release_ns
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Counters of a relay.
#[derive(Debug, Default)]
struct RelayStats {
    live: AtomicUsize,
    accepted: AtomicU64,
    bytes: AtomicU64,
}

/// A TCP relay that listens on one address and forwards every connection
/// to `upstream`, each direction through its own [`DelayLine`]. A close
/// (FIN) is delayed like data and passed on; a reset or failed write on one
/// side closes both. Dropping the relay closes its listener and every
/// connection and joins its threads (four per connection, one to accept).
#[derive(Debug)]
pub struct DelayRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    listener: TcpListener,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<Open>>>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    stats: Arc<RelayStats>,
}

impl DelayRelay {
    /// Starts a relay in the caller's network namespace.
    pub fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        link: WanLink,
    ) -> Result<DelayRelay, TestbedError> {
        Self::start_in(None, listen, upstream, link)
    }

    /// Starts a relay whose sockets (listener and upstream connections)
    /// live in the named network namespace (`None`: the caller's).
    pub fn start_in(
        netns: Option<&str>,
        listen: SocketAddr,
        upstream: SocketAddr,
        link: WanLink,
    ) -> Result<DelayRelay, TestbedError> {
        link.validate()?;
        let ns_file = match netns {
            Some(name) => {
                let path = Path::new(NETNS_DIR).join(name);
                Some(
                    std::fs::File::open(&path)
                        .map_err(io_err(format!("cannot open {}", path.display())))?,
                )
            }
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<Open>>> = Arc::default();
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let stats = Arc::new(RelayStats::default());
        let (ready_tx, ready_rx) = sync_channel::<Result<TcpListener, TestbedError>>(1);
        let (s, c, t, st) = (stop.clone(), conns.clone(), threads.clone(), stats.clone());
        let accept = std::thread::Builder::new()
            .name("wan-relay-accept".into())
            .spawn(move || {
                // Threads this one starts inherit its namespace; the
                // sockets it makes belong to it for good.
                if let Some(ns) = ns_file {
                    if let Err(e) = rustix::thread::move_into_link_name_space(
                        ns.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    ) {
                        let _ = ready_tx.send(Err(TestbedError::Io {
                            what: "cannot enter the relay's network namespace".into(),
                            source: e.into(),
                        }));
                        return;
                    }
                }
                let listener = match TcpListener::bind(listen) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx
                            .send(Err(io_err(format!("relay cannot listen on {listen}"))(e)));
                        return;
                    }
                };
                let clone = listener.try_clone();
                let _ = ready_tx.send(clone.map_err(io_err("cannot clone the relay's listener")));
                accept_loop(listener, upstream, link, s, c, t, st);
            })
            .map_err(io_err("cannot start the relay thread"))?;
        let listener = match ready_rx.recv() {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                let _ = accept.join();
                return Err(e);
            }
            Err(_) => {
                let _ = accept.join();
                return Err(TestbedError::BadConfig {
                    reason: "the relay thread ended before listening".into(),
                });
            }
        };
        let addr = listener
            .local_addr()
            .map_err(io_err("relay listener address"))?;
        Ok(DelayRelay {
            addr,
            stop,
            listener,
            accept: Some(accept),
            conns,
            threads,
            stats,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open now (a connection ends when both directions have
    /// been closed and drained).
    pub fn live_connections(&self) -> usize {
        self.stats.live.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.stats.accepted.load(Ordering::Relaxed)
    }

    /// Bytes forwarded so far, both directions.
    pub fn bytes_forwarded(&self) -> u64 {
        self.stats.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // shutdown(2) on a listening socket wakes a blocked accept(2).
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Read);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for (a, b, _) in self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
        let threads: Vec<JoinHandle<()>> = self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// An open connection's two sockets (to shut them down when the relay is
/// dropped) and whether it still runs.
type Open = (TcpStream, TcpStream, Weak<LiveGuard>);

/// Decrements the live count when the last thread of a connection ends.
struct LiveGuard(Arc<RelayStats>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    link: WanLink,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<Open>>>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    stats: Arc<RelayStats>,
) {
    let mut seed = link.seed;
    while !stop.load(Ordering::SeqCst) {
        let Ok((down, _)) = listener.accept() else {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(up) = TcpStream::connect_timeout(&upstream, Duration::from_secs(3)) else {
            // Upstream unreachable: the client sees its connection closed.
            continue;
        };
        let _ = down.set_nodelay(true);
        let _ = up.set_nodelay(true);
        let (Ok(d2), Ok(u2)) = (down.try_clone(), up.try_clone()) else {
            continue;
        };
        let (Ok(d3), Ok(u3)) = (down.try_clone(), up.try_clone()) else {
            continue;
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.live.fetch_add(1, Ordering::Relaxed);
        let guard = Arc::new(LiveGuard(stats.clone()));
        {
            let mut c = conns.lock().unwrap_or_else(|p| p.into_inner());
            // Forget connections that ended, so the list is as long as
            // the live connections.
            c.retain(|(_, _, g)| g.strong_count() > 0);
            c.push((d3, u3, Arc::downgrade(&guard)));
        }
        // Each direction gets its own seed, so two links with one seed
        // still differ per connection and direction, yet repeat per run.
        let l1 = WanLink {
            seed: splitmix64(&mut seed),
            ..link
        };
        let l2 = WanLink {
            seed: splitmix64(&mut seed),
            ..link
        };
        let mut t = threads.lock().unwrap_or_else(|p| p.into_inner());
        t.retain(|h| !h.is_finished());
        t.extend(pump(down, u2, l1, guard.clone(), stats.clone()));
        t.extend(pump(up, d2, l2, guard, stats.clone()));
    }
}

/// A chunk of one direction and when it may go; `data: None` is the
/// sender's close (FIN).
struct Chunk {
    release: Instant,
    data: Option<Vec<u8>>,
}

/// Starts the reader and writer threads of one direction, `src` → `dst`.
fn pump(
    src: TcpStream,
    dst: TcpStream,
    link: WanLink,
    guard: Arc<LiveGuard>,
    stats: Arc<RelayStats>,
) -> Vec<JoinHandle<()>> {
    let (tx, rx) = sync_channel::<Chunk>(CHUNKS_HELD);
    let src_for_writer = src.try_clone().ok();
    let g2 = guard.clone();
    let mut out = Vec::new();
    if let Ok(h) = std::thread::Builder::new()
        .name("wan-relay-read".into())
        .spawn(move || read_side(src, link, tx, guard))
    {
        out.push(h);
    }
    if let Ok(h) = std::thread::Builder::new()
        .name("wan-relay-write".into())
        .spawn(move || write_side(rx, dst, src_for_writer, g2, stats))
    {
        out.push(h);
    }
    out
}

fn read_side(mut src: TcpStream, link: WanLink, tx: SyncSender<Chunk>, _guard: Arc<LiveGuard>) {
    let epoch = Instant::now();
    let mut line = DelayLine::new(&link);
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = src.read(&mut buf);
        let now = Instant::now();
        let release =
            epoch + Duration::from_nanos(line.release_ns((now - epoch).as_nanos() as u64));
        let data = match n {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(buf[..n].to_vec()),
        };
        let end = data.is_none();
        // Blocks while CHUNKS_HELD chunks wait: the bound of the line.
        if tx.send(Chunk { release, data }).is_err() || end {
            return;
        }
    }
}

fn write_side(
    rx: Receiver<Chunk>,
    mut dst: TcpStream,
    src: Option<TcpStream>,
    _guard: Arc<LiveGuard>,
    stats: Arc<RelayStats>,
) {
    while let Ok(chunk) = rx.recv() {
        loop {
            let now = Instant::now();
            if now >= chunk.release {
                break;
            }
            std::thread::sleep(chunk.release - now);
        }
        match chunk.data {
            Some(data) => {
                if dst.write_all(&data).is_err() {
                    // The receiving side is gone: close the sending side
                    // too, which ends the reader.
                    if let Some(s) = &src {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                    let _ = dst.shutdown(Shutdown::Both);
                    return;
                }
                stats.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            None => {
                let _ = dst.shutdown(Shutdown::Write);
                return;
            }
        }
    }
}

/// How a [`WanPath`] delays its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WanMechanism {
    /// `netem` qdiscs on both ends of the site's link, with u32 filters
    /// that pick only the path's ports.
    Netem,
    /// [`DelayRelay`]s in the router namespace (the kernel has no netem).
    SoftwareRelay,
}

impl std::fmt::Display for WanMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WanMechanism::Netem => "delay: netem",
            WanMechanism::SoftwareRelay => "delay: software relay (no netem)",
        })
    }
}

/// A delayed path from one host to ports of another, made by
/// [`Testbed::wan_link`]; undone when dropped (relays) or with the testbed
/// (qdiscs).
#[derive(Debug)]
pub struct WanPath {
    peer: Ipv4Addr,
    ports: Vec<u16>,
    mechanism: WanMechanism,
    relays: Vec<DelayRelay>,
}

impl WanPath {
    /// The address to dial for `port` (one of the ports the path was made
    /// for): through the relay, or the far host itself under netem.
    pub fn peer(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.peer, port)
    }

    /// How the delay is made; its `Display` is the line to print
    /// ("delay: software relay (no netem)").
    pub fn mechanism(&self) -> WanMechanism {
        self.mechanism
    }

    /// The ports the path carries.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The relays (empty under netem).
    pub fn relays(&self) -> &[DelayRelay] {
        &self.relays
    }
}

/// The `tc` argument lists (without `tc -n NS`) that delay, on `dev`, only
/// IPv4 packets to or from `peer` on `ports`: an htb root whose default
/// class is undelayed and a second class with a netem leaf, chosen by u32
/// filters (`match ip src|dst PEER/32 match ip sport|dport PORT`).
/// `toward_peer`: the packets go to the peer (match dst/dport), else they
/// come from it (src/sport).
pub(crate) fn netem_path_commands(
    dev: &str,
    peer: Ipv4Addr,
    ports: &[u16],
    toward_peer: bool,
    link: &WanLink,
) -> Vec<Vec<String>> {
    let rate = crate::shaping::UNLIMITED_KBIT;
    let mut lines = vec![
        format!("qdisc add dev {dev} root handle 1: htb default 1"),
        format!("class add dev {dev} parent 1: classid 1:1 htb rate {rate}kbit"),
        format!("class add dev {dev} parent 1: classid 1:2 htb rate {rate}kbit"),
        format!(
            "qdisc add dev {dev} parent 1:2 handle 2: netem delay {}us {}us limit 10000",
            link.delay.as_micros(),
            link.jitter.as_micros()
        ),
    ];
    let (addr, port) = if toward_peer {
        ("dst", "dport")
    } else {
        ("src", "sport")
    };
    for (i, p) in ports.iter().enumerate() {
        lines.push(format!(
            "filter add dev {dev} parent 1: protocol ip prio {} u32 match ip {addr} {peer}/32 match ip {port} {p} 0xffff flowid 1:2",
            i + 1
        ));
    }
    lines
        .into_iter()
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect()
}

impl Testbed {
    /// Does this kernel have `netem`? Tries to add one on the router's
    /// loopback (and removes it).
    pub fn has_netem(&self) -> bool {
        let ns = self.router_ns();
        let added = run(
            &self.tools.tc,
            &[
                "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
            ],
        )
        .is_ok();
        if added {
            let _ = run(
                &self.tools.tc,
                &["-n", ns, "qdisc", "del", "dev", "lo", "root"],
            );
        }
        added
    }

    /// A WAN link from host `site` to host `hub`'s `ports` (e.g. a daemon's
    /// main port and its band ports): each direction delayed by
    /// `link.delay ± link.jitter`. With netem in the kernel: netem on the
    /// router's port toward `site` and on `site`'s `veth0`, for those ports
    /// only, and the peer address is the hub's own. Without: one
    /// [`DelayRelay`] per port in the router namespace, listening on the
    /// router's address toward `site` (same port numbers), and the peer
    /// address is that. Either way only connections to the returned
    /// address and ports are delayed. Set `TAGWIRE_TESTBED_SOFTWARE_DELAY=1`
    /// to use the relay even where netem exists. One WAN link per site.
    ///
    /// # Panics
    /// If `site` or `hub` is not below the number of hosts.
    pub fn wan_link(
        &self,
        site: usize,
        hub: usize,
        ports: &[u16],
        link: WanLink,
    ) -> Result<WanPath, TestbedError> {
        link.validate()?;
        if ports.is_empty() || ports.len() > 16 || site == hub {
            return Err(TestbedError::BadConfig {
                reason: format!(
                    "a WAN link needs 1..=16 ports and two different hosts (site {site}, hub {hub}, {} ports)",
                    ports.len()
                ),
            });
        }
        let hub_addr = self.host(hub).addr();
        let forced = std::env::var_os("TAGWIRE_TESTBED_SOFTWARE_DELAY").is_some_and(|v| v == "1");
        if !forced && !link.delay.is_zero() && self.has_netem() {
            let s = self.host(site);
            for (ns, dev, toward) in [
                (self.router_ns().to_owned(), s.router_iface(), false),
                (s.ns_name().to_owned(), s.iface().to_owned(), true),
            ] {
                for args in netem_path_commands(&dev, hub_addr, ports, toward, &link) {
                    let mut full = vec!["-n", ns.as_str()];
                    full.extend(args.iter().map(String::as_str));
                    run(&self.tools.tc, &full)?;
                }
            }
            return Ok(WanPath {
                peer: hub_addr,
                ports: ports.to_vec(),
                mechanism: WanMechanism::Netem,
                relays: Vec::new(),
            });
        }
        let gw = self.host(site).gateway();
        let mut relays = Vec::new();
        for (i, &p) in ports.iter().enumerate() {
            relays.push(DelayRelay::start_in(
                Some(self.router_ns()),
                SocketAddr::from((gw, p)),
                SocketAddr::from((hub_addr, p)),
                WanLink {
                    seed: link.seed.wrapping_add(i as u64 * 1_000_003),
                    ..link
                },
            )?);
        }
        Ok(WanPath {
            peer: gw,
            ports: ports.to_vec(),
            mechanism: WanMechanism::SoftwareRelay,
            relays,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn release_is_arrival_plus_delay_without_jitter() {
        let mut l = DelayLine::new(&WanLink::new(ms(20), Duration::ZERO));
        assert_eq!(l.release_ns(0), 20_000_000);
        assert_eq!(l.release_ns(5_000_000), 25_000_000);
    }

    #[test]
    fn release_stays_within_delay_plus_minus_jitter_and_in_order() {
        let link = WanLink::new(ms(50), ms(10));
        let mut l = DelayLine::new(&link);
        let mut prev = 0;
        let mut spread = (u64::MAX, 0u64);
        for i in 0..10_000u64 {
            let arrival = i * 1_000_000; // one chunk per ms: no reordering pressure
            let r = l.release_ns(arrival);
            assert!(r >= prev, "chunk {i} released before the one ahead of it");
            assert!(r >= arrival + 40_000_000, "chunk {i} left too early");
            prev = r;
            spread = (spread.0.min(r - arrival), spread.1.max(r - arrival));
        }
        // Not a timing assert: the schedule's own bounds, sampled.
        assert!(spread.0 < 42_000_000 && spread.1 > 58_000_000, "{spread:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let link = WanLink {
            seed: 42,
            ..WanLink::new(ms(30), ms(5))
        };
        let (mut a, mut b) = (DelayLine::new(&link), DelayLine::new(&link));
        for i in 0..100 {
            assert_eq!(a.release_ns(i * 7), b.release_ns(i * 7));
        }
        let mut c = DelayLine::new(&WanLink { seed: 43, ..link });
        let differs = (0..100).any(|i| c.release_ns(i * 7) != a.release_ns(i * 7 + 700));
        assert!(differs);
    }

    #[test]
    fn a_jitter_above_the_delay_or_a_delay_over_the_bound_is_refused() {
        let e = WanLink::new(ms(5), ms(6))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("jitter"), "{e}");
        let e = WanLink::new(Duration::from_secs(11), ms(0))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("delay"), "{e}");
    }

    #[test]
    fn netem_path_filters_pick_only_the_paths_ports() {
        let lines: Vec<String> = netem_path_commands(
            "to-h1",
            Ipv4Addr::new(10, 200, 0, 2),
            &[7700, 7701],
            false,
            &WanLink::new(ms(25), ms(3)),
        )
        .iter()
        .map(|c| c.join(" "))
        .collect();
        assert!(lines.contains(
            &"qdisc add dev to-h1 parent 1:2 handle 2: netem delay 25000us 3000us limit 10000"
                .to_owned()
        ));
        assert!(lines.contains(&"filter add dev to-h1 parent 1: protocol ip prio 2 u32 match ip src 10.200.0.2/32 match ip sport 7701 0xffff flowid 1:2".to_owned()));
        assert_eq!(lines[0], "qdisc add dev to-h1 root handle 1: htb default 1");
    }
}
