//! Narada Fig. 2 (transit delay and its standard deviation vs message size
//! over 1–4 broker hops) and the routing-efficiency count, on loopback.
//!
//! Transit delay: a pinger on the first daemon of a chain publishes a
//! message, an echo client on the last daemon republishes it, and the
//! one-way delay is half the round trip (both clients are in this process,
//! so no clock offset enters). Each ping carries a sequence number and is
//! matched with its own pong (older pongs are skipped and counted `stale`);
//! a ping with no pong within 2 s is counted `lost`, never a sample. The baseline, measured in the same run, is a
//! chain of raw TCP relays (a thread per direction copying bytes): the
//! least a hop can cost. Per-hop added delay = (p50(h) − p50(0)) / h.
//!
//! Routing efficiency: 8 daemons in a tree, subscribers on 2, events
//! published on a third; counts the events on links toward daemons without
//! interest (must be 0).
//!
//! ```text
//! cargo run --release --manifest-path experiments/Cargo.toml --bin narada_hops -- [--pings N] [--sizes 64,1024,...] [--max-hops 4]
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tagwire::router::{FederationConfig, Router, RouterConfig, RouterHandle};
use tagwire::{Bytes, Session};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn router(name: &str, peers: Vec<String>) -> (RouterHandle, String) {
    let h = Router::start(RouterConfig {
        name: name.into(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        federation: FederationConfig {
            peers,
            gossip_enabled: false,
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    })
    .unwrap_or_else(|e| panic!("start: {e}"));
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp"));
    (h, url)
}

/// A chain of `hops + 1` daemons, each linked to the previous.
fn chain(hops: usize) -> (Vec<RouterHandle>, Vec<String>) {
    let mut hs = Vec::new();
    let mut urls: Vec<String> = Vec::new();
    for i in 0..=hops {
        let peers = urls.last().cloned().into_iter().collect();
        let (h, u) = router(&format!("d{i}"), peers);
        hs.push(h);
        urls.push(u);
    }
    (hs, urls)
}

/// What a point's pings gave: one-way delays (RTT/2, µs) of the pings whose
/// own pong came back, and the pings that got none within 2 s (lost:
/// best-effort events may be dropped; counted, never a sample).
struct Pings {
    delays: Vec<f64>,
    lost: usize,
    /// Pongs of earlier pings (late or duplicated) that arrived while the
    /// harness waited for another ping's: skipped, never a sample.
    stale: usize,
}

/// The sequence number a ping carries in its first 8 bytes (the echo
/// returns the payload as it is).
fn seq_of(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?))
}

/// Waits (up to `wait`) for the pong of ping `k`, skipping older pongs;
/// true if it came.
fn await_pong(pongs: &tagwire::Subscriber, k: u64, wait: Duration, stale: &mut usize) -> bool {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match pongs.recv_timeout(left).expect("recv") {
            Some(s) if seq_of(&s.payload()) == Some(k) => return true,
            Some(_) => *stale += 1,
            None => return false,
        }
    }
}

/// `n` pings of `size` bytes (at least 8: the sequence number) from a
/// client of `first` to an echo client of `last`, each matched with its own
/// pong by sequence number.
fn tagwire_delays(first: &str, last: &str, size: usize, n: usize) -> Pings {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let echo = Session::connect(last).expect("echo session");
    let echo_pub = echo
        .declare_publisher(&format!("/fig2/echo{run}"))
        .expect("echo publisher");
    echo_pub.set_express(true);
    let _echo_sub = echo
        .subscribe("/fig2/ping")
        .callback(move |s| {
            let _ = echo_pub.publish("/fig2/pong", s.payload());
        })
        .expect("echo subscription");
    let pinger = Session::connect(first).expect("ping session");
    let p = pinger
        .declare_publisher(&format!("/fig2/pinger{run}"))
        .expect("publisher");
    p.set_express(true);
    let pongs = pinger.subscribe("/fig2/pong").receiver().expect("pongs");
    let mut payload = vec![0x5a; size.max(8)];
    let mut ping = |k: u64| {
        payload[..8].copy_from_slice(&k.to_le_bytes());
        p.publish("/fig2/ping", Bytes::copy_from_slice(&payload))
            .expect("ping");
    };
    // Until the echo's interest has crossed the chain.
    let start = Instant::now();
    loop {
        ping(u64::MAX);
        if pongs
            .recv_timeout(Duration::from_millis(100))
            .expect("recv")
            .is_some()
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no route");
    }
    while pongs
        .recv_timeout(Duration::from_millis(50))
        .expect("recv")
        .is_some()
    {}
    let mut out = Pings {
        delays: Vec::with_capacity(n),
        lost: 0,
        stale: 0,
    };
    for k in 0..(n + 50) as u64 {
        let t = Instant::now();
        ping(k);
        let came = await_pong(&pongs, k, Duration::from_secs(2), &mut out.stale);
        let elapsed = t.elapsed().as_secs_f64() * 1e6 / 2.0;
        match (came, k >= 50) {
            (true, true) => out.delays.push(elapsed),
            (false, true) => out.lost += 1,
            _ => {} // warm-up
        }
    }
    out
}

/// A raw TCP relay: accepts one connection, connects to `next`, and copies
/// bytes both ways (a thread each). Returns its address.
fn relay(next: std::net::SocketAddr) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        let (a, _) = l.accept().expect("accept");
        let b = TcpStream::connect(next).expect("connect");
        let _ = a.set_nodelay(true);
        let _ = b.set_nodelay(true);
        let (a2, b2) = (a.try_clone().expect("clone"), b.try_clone().expect("clone"));
        std::thread::spawn(move || copy(a, b));
        copy(b2, a2);
    });
    addr
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 256 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// One-way delays over a chain of `hops` raw relays to an echo server.
fn raw_delays(hops: usize, size: usize, n: usize) -> Vec<f64> {
    let echo = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut next = echo.local_addr().expect("addr");
    std::thread::spawn(move || {
        let (mut s, _) = echo.accept().expect("accept");
        let _ = s.set_nodelay(true);
        let mut buf = vec![0u8; size];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                return;
            }
        }
    });
    for _ in 0..hops {
        next = relay(next);
    }
    let mut c = TcpStream::connect(next).expect("connect");
    let _ = c.set_nodelay(true);
    let msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut out = Vec::with_capacity(n);
    for k in 0..n + 50 {
        let t = Instant::now();
        c.write_all(&msg).expect("write");
        c.read_exact(&mut back).expect("read");
        if k >= 50 {
            out.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    out
}

fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let p50 = v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len().max(1) as f64;
    (p50, var.sqrt())
}

fn efficiency(events: usize) {
    // A tree: 0 is the root; 1, 2 under it; 3, 4 under 1; 5, 6 under 2; 7 under 6.
    let parent = [
        None,
        Some(0),
        Some(0),
        Some(1),
        Some(1),
        Some(2),
        Some(2),
        Some(6),
    ];
    let mut hs: Vec<(RouterHandle, String)> = Vec::new();
    for (i, p) in parent.iter().enumerate() {
        let peers = p.map(|p: usize| hs[p].1.clone()).into_iter().collect();
        hs.push(router(&format!("e{i}"), peers));
    }
    let wanting = [4usize, 5];
    let subs: Vec<(Session, tagwire::Subscriber)> = wanting
        .iter()
        .map(|&i| {
            let s = Session::connect(&hs[i].1).expect("session");
            let r = s.subscribe("/eff/**").receiver().expect("subscribe");
            (s, r)
        })
        .collect();
    let publisher = Session::connect(&hs[3].1).expect("session");
    let p = publisher.declare_publisher("/eff/pub").expect("publisher");
    // Wait until both subscribers get a probe, then drain.
    let start = Instant::now();
    for (_, r) in &subs {
        loop {
            p.publish("/eff/probe", "p").expect("publish");
            if r.recv_timeout(Duration::from_millis(100))
                .expect("recv")
                .is_some()
            {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no route");
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    for (_, r) in &subs {
        while r
            .recv_timeout(Duration::from_millis(50))
            .expect("recv")
            .is_some()
        {}
    }
    let before: Vec<Vec<tagwire::router::LinkInfo>> = hs.iter().map(|(_, u)| links(u)).collect();
    for k in 0..events {
        p.publish("/eff/x", format!("{k}")).expect("publish");
    }
    let mut got = vec![0usize; subs.len()];
    for (j, (_, r)) in subs.iter().enumerate() {
        while got[j] < events
            && r.recv_timeout(Duration::from_secs(2))
                .expect("recv")
                .is_some()
        {
            got[j] += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    // Which daemons are on the path from 3 to 4 and 5: 3→1→{4, 0→2→5}.
    let useful = [3usize, 1, 4, 0, 2, 5];
    let mut wasted = 0u64;
    let mut total = 0u64;
    for (i, (_, u)) in hs.iter().enumerate() {
        for l in links(u) {
            let before = before[i]
                .iter()
                .find(|b| b.peer == l.peer)
                .map_or(0, |b| b.events_out);
            let crossed = l.events_out - before;
            total += crossed;
            let to: usize = l.peer.trim_start_matches('e').parse().unwrap_or(99);
            if !useful.contains(&to) || !useful.contains(&i) {
                wasted += crossed;
            }
        }
    }
    println!("\nrouting efficiency: 8 daemons (a tree), subscribers on e4 and e5, {events} events published on e3");
    println!(
        "  received: e4 {} / {events}, e5 {} / {events}",
        got[0], got[1]
    );
    println!("  events on links toward daemons with no interest on the path: {wasted}");
    println!("  events on all links: {total} (the minimum, one per link of the paths 3→1→4 and 3→1→0→2→5: {})", events * 5);
}

fn links(url: &str) -> Vec<tagwire::router::LinkInfo> {
    Session::connect(url)
        .expect("session")
        .list()
        .expect("list")
        .federation
        .map(|f| f.links)
        .unwrap_or_default()
}

fn main() {
    let n: usize = arg("--pings").and_then(|s| s.parse().ok()).unwrap_or(1000);
    let max_hops: usize = arg("--max-hops").and_then(|s| s.parse().ok()).unwrap_or(4);
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "64,256,1024,4096,16384,65536".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    println!("Narada Fig. 2: one-way transit delay (RTT/2), {n} pings per point, µs\n");
    println!(
        "| size, B | hops | tagwire p50 | tagwire sd | raw p50 | raw sd | tagwire per hop | raw per hop | ratio | lost | stale |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let chains: Vec<(Vec<RouterHandle>, Vec<String>)> = (0..=max_hops).map(chain).collect();
    for &size in &sizes {
        let mut base = (0.0, 0.0);
        for (h, (_, urls)) in chains.iter().enumerate() {
            let mut t = tagwire_delays(&urls[0], &urls[h], size, n);
            let mut r = raw_delays(h, size, n);
            let ((tp, tsd), (rp, rsd)) = (stats(&mut t.delays), stats(&mut r));
            let (lost, stale) = (t.lost, t.stale);
            if h == 0 {
                base = (tp, rp);
                println!("| {size} | {h} | {tp:.1} | {tsd:.1} | {rp:.1} | {rsd:.1} | | | | {lost} | {stale} |");
            } else {
                let (th, rh) = ((tp - base.0) / h as f64, (rp - base.1) / h as f64);
                println!(
                    "| {size} | {h} | {tp:.1} | {tsd:.1} | {rp:.1} | {rsd:.1} | {th:.1} | {rh:.1} | {:.2} | {lost} | {stale} |",
                    th / rh
                );
            }
        }
    }
    efficiency(arg("--events").and_then(|s| s.parse().ok()).unwrap_or(1000));
}
