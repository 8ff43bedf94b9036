//! The client under trouble: a server that never answers (connect timeout),
//! a daemon restart under a running publisher (reconnect wait and replay),
//! and a subscriber too slow for a flood (drops counted in the client).

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{tempdir, WAIT};
use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::{DiscardPolicy, Error, Session};

/// A connect timeout far below the tests' own `WAIT`.
const SHORT: Duration = Duration::from_millis(300);

fn tcp_router(addr: SocketAddr) -> RouterHandle {
    let cfg = RouterConfig {
        tcp: Some(addr),
        unix: None,
        ..RouterConfig::default()
    };
    // The old router's port may take a moment to be free again.
    let deadline = Instant::now() + WAIT;
    loop {
        match Router::start(cfg.clone()) {
            Ok(h) => return h,
            Err(e) => assert!(Instant::now() < deadline, "cannot start router: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_connect_timeout(r: Result<Session, Error>, url: &str) {
    match r {
        Err(e @ Error::ConnectTimeout { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(url) && msg.contains("no answer"), "{msg}");
        }
        other => panic!("expected ConnectTimeout from {url}, got {other:?}"),
    }
}

#[test]
fn connect_to_a_listener_that_never_answers_fails_with_connect_timeout() {
    // The kernel completes the TCP handshake into the backlog, but no one
    // accepts: the Welcome never comes.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("tcp://{}", silent.local_addr().expect("addr"));
    assert_connect_timeout(
        Session::builder().connect_timeout(SHORT).connect(&url),
        &url,
    );

    let dir = tempdir::Dir::new("silent-unix");
    let path = dir.0.join("silent.sock");
    let _silent_unix = std::os::unix::net::UnixListener::bind(&path).expect("bind unix");
    let url = format!("unix://{}", path.display());
    assert_connect_timeout(
        Session::builder().connect_timeout(SHORT).connect(&url),
        &url,
    );
}

#[test]
fn connect_to_a_full_listen_backlog_fails_with_connect_timeout() {
    use socket2::{Domain, SockAddr, Socket, Type};
    // TCP: backlog 0, filled until the kernel drops further SYNs.
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    listener.bind(&any.into()).expect("bind");
    listener.listen(0).expect("listen");
    let addr = listener
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet");
    let mut queued = Vec::new();
    while queued.len() < 16 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => queued.push(s),
            Err(_) => break,
        }
    }
    let url = format!("tcp://{addr}");
    assert_connect_timeout(
        Session::builder().connect_timeout(SHORT).connect(&url),
        &url,
    );

    // Unix: backlog 0, filled until a connect would wait.
    let dir = tempdir::Dir::new("full-unix");
    let path = dir.0.join("full.sock");
    let listener = Socket::new(Domain::UNIX, Type::STREAM, None).expect("socket");
    listener
        .bind(&SockAddr::unix(&path).expect("path"))
        .expect("bind");
    listener.listen(0).expect("listen");
    let mut queued_unix = Vec::new();
    while queued_unix.len() < 16 {
        let s = Socket::new(Domain::UNIX, Type::STREAM, None).expect("socket");
        s.set_write_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        match s.connect(&SockAddr::unix(&path).expect("path")) {
            Ok(()) => queued_unix.push(s),
            Err(_) => break,
        }
    }
    let url = format!("unix://{}", path.display());
    assert_connect_timeout(
        Session::builder().connect_timeout(SHORT).connect(&url),
        &url,
    );
}

#[test]
fn publisher_rides_through_a_router_restart_and_a_new_subscriber_gets_later_events() {
    let first = tcp_router("127.0.0.1:0".parse().expect("addr"));
    let addr = first.tcp_addr().expect("tcp addr");
    let url = format!("tcp://{addr}");
    let session = Session::builder()
        .reconnect_wait(WAIT)
        .connect(&url)
        .expect("connect");
    let publisher = session.declare_publisher("/ride/pub").expect("declare");
    let before = Session::connect(&url).expect("connect");
    let sub = before.subscribe("/ride/**").receiver().expect("subscribe");
    publisher
        .publish("/ride/x", "before")
        .expect("publish before");
    let got = sub.recv_timeout(WAIT).expect("recv").expect("event before");
    assert_eq!(&got.payload()[..], b"before");

    first.shutdown();
    wait_until("the publisher's session sees the router gone", || {
        !session.is_connected()
    });
    std::thread::scope(|scope| {
        // A publish made while the router is down waits for the reconnect.
        let during = scope.spawn(|| publisher.publish("/ride/x", "during"));
        let second = tcp_router(addr);
        let after = Session::connect(&url).expect("connect to the new router");
        let sub = after.subscribe("/ride/**").receiver().expect("subscribe");
        let deadline = Instant::now() + WAIT;
        let mut n = 0u64;
        let got = loop {
            n += 1;
            publisher
                .publish("/ride/x", format!("after {n}"))
                .expect("publish after the restart");
            if let Some(s) = sub.recv_timeout(Duration::from_millis(50)).expect("recv") {
                break s;
            }
            assert!(Instant::now() < deadline, "no event on the new router");
        };
        let payload = String::from_utf8_lossy(&got.payload()).into_owned();
        assert!(
            payload.starts_with("after") || payload == "during",
            "{payload}"
        );
        let during = during.join().expect("publishing thread");
        assert!(
            during.is_ok(),
            "the publish made while the router was down: {during:?}"
        );
        drop(second);
    });
    assert!(session.reconnects() >= 1);
}

#[test]
fn publish_fails_with_not_reconnected_when_the_router_stays_down_past_the_wait() {
    let router = tcp_router("127.0.0.1:0".parse().expect("addr"));
    let url = format!("tcp://{}", router.tcp_addr().expect("addr"));
    let session = Session::builder()
        .reconnect_wait(SHORT)
        .connect(&url)
        .expect("connect");
    let publisher = session.declare_publisher("/down/pub").expect("declare");
    router.shutdown();
    wait_until("the session sees the router gone", || {
        !session.is_connected()
    });
    match publisher.publish("/down/x", "lost") {
        Err(e @ Error::NotReconnected { .. }) => {
            assert!(e.to_string().contains(&url), "{e}");
        }
        other => panic!("expected NotReconnected, got {other:?}"),
    }
    assert!(matches!(session.ping(), Err(Error::NotReconnected { .. })));
}

#[test]
fn a_subscriber_that_does_not_read_during_a_flood_counts_what_its_queue_dropped() {
    for (name, server) in common::all_servers() {
        let s = server.session();
        let local = 16;
        let sub = s
            .subscribe("/flood/**")
            .endpoint("/flood/stalled")
            .max_queue_length(100_000)
            .local_queue_length(local)
            .discard(DiscardPolicy::DropOldest)
            .receiver()
            .expect("subscribe");
        let p = server
            .session()
            .declare_publisher("/flood/pub")
            .expect("declare");
        let published = 2_000u64;
        for i in 1..=published {
            p.publish("/flood/x", i.to_string()).expect("publish");
        }
        p.session().flush().expect("flush");
        // Every event has reached this process once the queue is full and
        // the rest are counted as dropped (here or in the router).
        let router_dropped = || {
            s.list()
                .expect("list")
                .subscriptions
                .iter()
                .filter(|x| x.endpoint == "/flood/stalled")
                .map(|x| x.dropped)
                .sum::<u64>()
        };
        wait_until("the flood has arrived", || {
            sub.dropped() + router_dropped() + local as u64 >= published
        });
        let mut received = Vec::new();
        while let Some(sample) = sub.try_recv().expect("try_recv") {
            received.push(String::from_utf8_lossy(&sample.payload()).into_owned());
        }
        assert!(
            sub.dropped() > 0,
            "{name}: the client queue dropped nothing"
        );
        assert_eq!(
            received.len() as u64 + sub.dropped() + router_dropped(),
            published,
            "{name}: received + dropped == published"
        );
        // Drop-oldest keeps the newest.
        assert_eq!(received.last().map(String::as_str), Some("2000"), "{name}");
    }
}
