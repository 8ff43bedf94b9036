//! The software WAN relay (`DelayRelay`) on loopback: no root needed.
//! Timing is asserted only as a lower bound (the configured delay), which
//! a slow machine cannot break; every wait is bounded.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tagwire_testbed::{DelayRelay, WanLink};

const WAIT: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// An echo server on loopback: echoes every connection until EOF, then
/// closes. Serves `conns` connections and ends.
fn echo_server(conns: usize) -> (SocketAddr, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let t = std::thread::spawn(move || {
        for _ in 0..conns {
            let Ok((mut s, _)) = l.accept() else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, t)
}

fn relay(upstream: SocketAddr, link: WanLink) -> DelayRelay {
    DelayRelay::start("127.0.0.1:0".parse().expect("addr"), upstream, link)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn connect(r: &DelayRelay) -> TcpStream {
    let s = TcpStream::connect(r.local_addr()).expect("connect to relay");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(ms(5));
    }
}

#[test]
fn a_round_trip_through_the_relay_takes_at_least_twice_the_one_way_delay() {
    let (echo, _t) = echo_server(1);
    let d = ms(20);
    let r = relay(echo, WanLink::new(d, Duration::ZERO));
    let mut s = connect(&r);
    for i in 0..5u8 {
        let start = Instant::now();
        s.write_all(&[i]).expect("write");
        let mut b = [0u8; 1];
        s.read_exact(&mut b).expect("echo");
        let rtt = start.elapsed();
        assert_eq!(b[0], i);
        assert!(rtt >= 2 * d, "round trip {rtt:?} is shorter than 2 × {d:?}");
    }
}

#[test]
fn jitter_never_reorders_bytes() {
    let (echo, _t) = echo_server(1);
    let r = relay(
        echo,
        WanLink {
            seed: 7,
            ..WanLink::new(ms(5), ms(5))
        },
    );
    let s = connect(&r);
    let mut w = s.try_clone().expect("clone");
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        for chunk in sent.chunks(1000) {
            w.write_all(chunk).expect("write");
        }
        w.shutdown(Shutdown::Write).expect("shutdown");
    });
    let mut got = Vec::new();
    let mut r2 = s;
    r2.read_to_end(&mut got).expect("read all");
    writer.join().expect("writer");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes came back out of order");
    assert_eq!(r.bytes_forwarded(), 2 * data.len() as u64);
}

#[test]
fn a_close_from_the_client_reaches_the_server_and_ends_the_connection() {
    let (echo, _t) = echo_server(1);
    let r = relay(echo, WanLink::new(ms(5), Duration::ZERO));
    let mut s = connect(&r);
    s.write_all(b"last words").expect("write");
    s.shutdown(Shutdown::Write).expect("shutdown");
    // The echo server echoes, sees EOF and closes; the close comes back.
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read to EOF");
    assert_eq!(got, b"last words");
    wait_until("the relay's connection to end", || {
        r.live_connections() == 0
    });
    assert_eq!(r.accepted(), 1);
}

#[test]
fn a_close_from_the_server_reaches_the_client() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.write_all(b"bye").expect("write");
        // Dropped: closed from the server's side.
    });
    let r = relay(addr, WanLink::new(ms(5), ms(2)));
    let mut s = connect(&r);
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read to EOF");
    assert_eq!(got, b"bye");
    server.join().expect("server");
    drop(s);
    wait_until("the relay's connection to end", || {
        r.live_connections() == 0
    });
}

#[test]
fn an_unreachable_upstream_closes_the_client_connection() {
    // A port nobody listens on: bind, note it, close.
    let gone = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("addr");
    let r = relay(gone, WanLink::new(ms(1), Duration::ZERO));
    let mut s = connect(&r);
    let mut buf = [0u8; 1];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "expected the relay to close the connection");
    assert_eq!(r.live_connections(), 0);
}

#[test]
fn dropping_the_relay_closes_its_connections_and_its_port() {
    let (echo, _t) = echo_server(1);
    let r = relay(echo, WanLink::new(ms(50), Duration::ZERO));
    let addr = r.local_addr();
    let mut s = connect(&r);
    s.write_all(b"x").expect("write");
    let started = Instant::now();
    drop(r);
    // Bounded: dropping joins every thread; a sleeping writer wakes at its
    // release time (50 ms) at the latest.
    assert!(started.elapsed() < WAIT);
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(n <= 1, "read {n} bytes after the relay was dropped");
    if n == 1 {
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "expected EOF");
    }
    assert!(
        TcpStream::connect_timeout(&addr, ms(500)).is_err(),
        "the relay's port still accepts connections"
    );
}

#[test]
fn bad_links_are_refused_naming_the_value() {
    let e = DelayRelay::start(
        "127.0.0.1:0".parse().expect("addr"),
        "127.0.0.1:9".parse().expect("addr"),
        WanLink::new(ms(1), ms(2)),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("jitter"), "{e}");
}
