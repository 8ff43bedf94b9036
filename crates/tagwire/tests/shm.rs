//! Shared memory negotiated by the daemon, end to end through a real router
//! over its Unix socket (and TCP for the socket-path clients): fan-out,
//! fallback, refusals, expiry, reclaim, crashes. See `docs/shm.md`.

mod common;

use std::time::{Duration, Instant};

use common::tempdir::Dir;
use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::{Session, ShmMode};

const WAIT: Duration = Duration::from_secs(10);

/// A router listening on a Unix socket and on loopback TCP.
struct Both {
    router: RouterHandle,
    unix: String,
    tcp: String,
    _dir: Dir,
}

fn router() -> Both {
    let dir = Dir::new("shm");
    let path = dir.0.join("tagwired.sock");
    let router = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: Some(path.clone()),
        ..RouterConfig::default()
    })
    .expect("start router");
    let tcp = format!("tcp://{}", router.tcp_addr().expect("tcp addr"));
    Both {
        router,
        unix: format!("unix://{}", path.display()),
        tcp,
        _dir: dir,
    }
}

/// A session that uses shared memory where it can (the default, said here
/// so that these tests keep meaning it).
fn shm_session(url: &str) -> tagwire::Result<Session> {
    Session::builder().shm(ShmMode::Auto).connect(url)
}

fn payload(i: usize) -> Vec<u8> {
    // 64 B and 1 MiB, alternating, each with its index in every byte.
    let len = if i.is_multiple_of(2) { 64 } else { 1 << 20 };
    vec![i as u8; len]
}

fn listing_shm(s: &Session) -> tagwire::router::ShmCounters {
    s.list().expect("list").shm
}

#[test]
fn fan_out_to_two_shm_subscribers_and_a_socket_subscriber_gives_everyone_the_same_payloads() {
    let r = router();
    let publisher_session = shm_session(&r.unix).expect("unix session");
    let shm_a = shm_session(&r.unix).expect("unix session");
    let shm_b = shm_session(&r.unix).expect("unix session");
    let socket = Session::connect(&r.tcp).expect("tcp session");
    let subs: Vec<_> = [&shm_a, &shm_b, &socket]
        .iter()
        .map(|s| {
            s.subscribe("/shm/fan")
                .max_queue_length(64)
                .receiver()
                .expect("subscribe")
        })
        .collect();
    let publisher = publisher_session
        .declare_publisher("/shm/fan/pub")
        .expect("declare");
    assert!(
        publisher.uses_shm(),
        "a Unix-socket publisher gets a region"
    );
    const N: usize = 10;
    for i in 0..N {
        publisher.publish("/shm/fan", payload(i)).expect("publish");
        for (k, sub) in subs.iter().enumerate() {
            let s = sub.recv_timeout(WAIT).expect("recv").expect("an event");
            assert_eq!(s.payload(), payload(i), "subscriber {k}, event {i}");
            assert_eq!(s.is_in_place(), k < 2, "subscriber {k}, event {i}");
            assert_eq!(s.to_event().payload, payload(i));
        }
    }
    assert_eq!(publisher_session.shm_stats().published, N as u64);
    for s in [&shm_a, &shm_b] {
        let st = s.shm_stats();
        assert_eq!((st.in_place, st.expired, st.unreadable), (N as u64, 0, 0));
    }
    assert_eq!(socket.shm_stats().in_place, 0);
    let d = listing_shm(&publisher_session);
    assert_eq!(
        d.by_reference,
        2 * N as u64,
        "two shm subscribers got references"
    );
    assert_eq!(
        d.copied_out, N as u64,
        "one copy per event for the socket subscriber"
    );
    assert_eq!(d.regions_open, 1);
    drop(publisher);
    let deadline = Instant::now() + WAIT;
    while listing_shm(&publisher_session).regions_open != 0 {
        assert!(
            Instant::now() < deadline,
            "the region closes with its publisher"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(r.router);
}

#[test]
fn shm_off_keeps_payloads_on_the_socket() {
    let r = router();
    let off = Session::builder()
        .shm(ShmMode::Off)
        .connect(&r.unix)
        .expect("session");
    let sub_session = shm_session(&r.unix).expect("session");
    let sub = sub_session
        .subscribe("/shm/off")
        .qos("shm", "off")
        .receiver()
        .expect("subscribe");
    let publisher = off.declare_publisher("/shm/off/pub").expect("declare");
    assert!(!publisher.uses_shm());
    publisher.publish("/shm/off", payload(1)).expect("publish");
    let s = sub.recv_timeout(WAIT).expect("recv").expect("event");
    assert_eq!(s.payload(), payload(1));
    assert!(!s.is_in_place());
    // A shm publisher to a subscriber that said off: the daemon copies.
    let on = sub_session
        .declare_publisher("/shm/off/pub2")
        .expect("declare");
    assert!(on.uses_shm());
    on.publish("/shm/off", payload(3)).expect("publish");
    let s = sub.recv_timeout(WAIT).expect("recv").expect("event");
    assert_eq!(s.payload(), payload(3));
    assert!(!s.is_in_place());
    assert_eq!(listing_shm(&off).copied_out, 1);
}

#[test]
fn shm_require_over_tcp_is_refused_with_a_reason() {
    let r = router();
    let tcp = Session::connect(&r.tcp).expect("tcp session");
    let err = tcp
        .declare_publisher_with("/shm/req/pub", ShmMode::Require)
        .expect_err("require over TCP");
    assert!(err.to_string().contains("shm=require"), "{err}");
    let err = tcp
        .subscribe("/shm/req")
        .qos("shm", "require")
        .receiver()
        .expect_err("require over TCP");
    assert!(err.to_string().contains("shm=require"), "{err}");
    // Over the Unix socket the same requests succeed.
    let unix = shm_session(&r.unix).expect("unix session");
    let p = unix
        .declare_publisher_with("/shm/req/pub", ShmMode::Require)
        .expect("require over the Unix socket");
    assert!(p.uses_shm());
    unix.subscribe("/shm/req")
        .qos("shm", "require")
        .receiver()
        .expect("require over the Unix socket");
    let err = unix
        .subscribe("/shm/req")
        .qos("shm", "sometimes")
        .receiver()
        .expect_err("bad value");
    assert!(err.to_string().contains("shm"), "{err}");
}

#[test]
fn a_subscriber_far_behind_loses_nothing_it_gets_copies_past_its_pins() {
    // limits.shm_pins = 8 (default): a subscriber that does not read while 40
    // events go out holds the first 8 by reference (pinned: the publisher
    // laps its 16-slot ring meanwhile without touching them) and gets the
    // other 32 as copies; once it has read them, references flow again.
    let r = router();
    let s = shm_session(&r.unix).expect("session");
    let slow = shm_session(&r.unix).expect("session");
    let sub = slow
        .subscribe("/shm/slow")
        .max_queue_length(1000)
        .receiver()
        .expect("subscribe");
    let publisher = s.declare_publisher("/shm/slow/pub").expect("declare");
    assert!(publisher.uses_shm());
    for i in 0..40usize {
        publisher
            .publish("/shm/slow", vec![i as u8; 64])
            .expect("publish");
    }
    // Nothing is read until the daemon has routed every event published
    // in shared memory (at least the ring's 16; the rest, published while
    // the daemon had not read that far, went over the socket).
    let in_shm = s.shm_stats().published;
    assert!(in_shm >= 16, "{in_shm}");
    let deadline = Instant::now() + WAIT;
    while {
        let d = listing_shm(&s);
        d.by_reference + d.copied_out < in_shm
    } {
        assert!(Instant::now() < deadline, "the daemon routes the 40 events");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut got = Vec::new();
    let mut in_place = 0;
    while got.len() < 40 {
        let sample = sub.recv_timeout(WAIT).expect("recv").expect("an event");
        assert!(sample.payload().iter().all(|b| *b == sample.payload()[0]));
        in_place += usize::from(sample.is_in_place());
        got.push(sample.payload()[0] as usize);
    }
    assert_eq!(got, (0..40).collect::<Vec<_>>(), "every event, in order");
    assert_eq!(in_place, 8, "the first shm_pins by reference");
    let d = listing_shm(&s);
    assert_eq!((d.by_reference, d.copied_out), (8, in_shm - 8));
    assert_eq!(slow.shm_stats().unreadable, 0);
    // Read (and dropped): the pins are back, the next event is a reference.
    publisher
        .publish("/shm/slow", vec![99u8; 64])
        .expect("publish");
    let next = sub.recv_timeout(WAIT).expect("recv").expect("an event");
    assert_eq!(next.payload()[0], 99);
    assert!(next.is_in_place());
}

#[test]
fn a_publisher_flooding_shared_memory_loses_nothing_the_socket_path_would_keep() {
    // The publisher never reuses a slot the daemon has not read: when it is
    // that far ahead the event goes over the socket (whose backpressure
    // holds it back), so a subscriber that keeps up gets every event.
    const N: usize = 20_000;
    let r = router();
    let s = shm_session(&r.unix).expect("session");
    let reader = shm_session(&r.unix).expect("session");
    let sub = reader
        .subscribe("/shm/flood")
        .max_queue_length(N)
        .receiver()
        .expect("subscribe");
    let publisher = s.declare_publisher("/shm/flood/pub").expect("declare");
    assert!(publisher.uses_shm());
    let reading = std::thread::spawn(move || {
        let mut next = 0u64;
        let mut in_place = 0u64;
        while next < N as u64 {
            let Some(sample) = sub.recv_timeout(WAIT).expect("recv") else {
                break;
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(&sample.payload()[..8]);
            assert_eq!(u64::from_le_bytes(b), next, "in order, none missing");
            in_place += u64::from(sample.is_in_place());
            next += 1;
        }
        (next, in_place)
    });
    for i in 0..N as u64 {
        let mut payload = vec![0u8; 64];
        payload[..8].copy_from_slice(&i.to_le_bytes());
        publisher.publish("/shm/flood", payload).expect("publish");
    }
    let (got, in_place) = reading.join().expect("reader");
    assert_eq!(got, N as u64, "every event arrived");
    let st = s.shm_stats();
    assert_eq!(st.published + st.published_socket, N as u64);
    assert!(in_place > 0, "some went through shared memory");
    assert_eq!(reader.shm_stats().unreadable, 0);
}

/// Set in a child process of the tests below: the daemon's Unix URL.
const CHILD_URL: &str = "TAGWIRE_SHM_TEST_CHILD_URL";

/// Runs test `name` of this binary as a child process playing its client
/// part against the daemon at `url` (the test sees [`CHILD_URL`]).
fn child(name: &str, url: &str, stdout: std::process::Stdio) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture"])
        .env(CHILD_URL, url)
        .stdout(stdout)
        .spawn()
        .expect("spawn the child process")
}

#[test]
fn a_publisher_process_killed_mid_stream_leaves_no_region_and_others_go_on() {
    if let Ok(url) = std::env::var(CHILD_URL) {
        // The child: publish through shared memory until killed.
        let s = shm_session(&url).expect("child session");
        let p = s.declare_publisher("/shm/killed/pub").expect("declare");
        assert!(p.uses_shm());
        println!("CHILD-READY");
        for i in 0u64.. {
            let _ = p.publish("/shm/killed", vec![i as u8; 4096]);
            std::thread::sleep(Duration::from_millis(1));
        }
        return;
    }
    let r = router();
    let watcher = shm_session(&r.unix).expect("session");
    let sub = watcher
        .subscribe("/shm/killed")
        .receiver()
        .expect("subscribe");
    let mut child = child(
        "a_publisher_process_killed_mid_stream_leaves_no_region_and_others_go_on",
        &r.unix,
        std::process::Stdio::null(),
    );
    // Its events arrive, read in place.
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("an event from the child");
    assert_eq!(got.payload().len(), 4096);
    assert_eq!(listing_shm(&watcher).regions_open, 1);
    // kill -9 mid-stream: the daemon sees the connection go and closes the region.
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let deadline = Instant::now() + WAIT;
    while listing_shm(&watcher).regions_open != 0 {
        assert!(
            Instant::now() < deadline,
            "the dead publisher's region stays open"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Whatever was queued for the subscriber is either intact or skipped.
    while let Some(s) = sub.recv_timeout(Duration::from_millis(100)).expect("recv") {
        assert!(
            s.payload().iter().all(|b| *b == s.payload()[0]),
            "a torn payload"
        );
    }
    // Others go on: a new publisher gets a region and reaches the subscriber.
    let p = watcher
        .declare_publisher("/shm/killed/next")
        .expect("declare");
    assert!(p.uses_shm());
    p.publish("/shm/killed", vec![7u8; 64]).expect("publish");
    let s = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("the new publisher's event");
    assert_eq!(&s.payload()[..], &[7u8; 64][..]);
    assert_eq!(listing_shm(&watcher).regions_open, 1);
}

#[test]
fn a_publisher_asks_for_a_region_again_after_its_daemon_restarts() {
    let dir = Dir::new("shm-restart");
    let path = dir.0.join("tagwired.sock");
    let start = || {
        Router::start(RouterConfig {
            tcp: None,
            unix: Some(path.clone()),
            ..RouterConfig::default()
        })
        .expect("start router")
    };
    let url = format!("unix://{}", path.display());
    let first = start();
    let s = Session::builder()
        .shm(ShmMode::Auto)
        .reconnect_wait(Duration::from_millis(50))
        .connect(&url)
        .expect("session");
    let p = s.declare_publisher("/shm/restart/pub").expect("declare");
    assert!(p.uses_shm());
    p.publish("/shm/restart", vec![1u8; 64]).expect("publish");
    first.shutdown();
    let second = start();
    let watcher = shm_session(&url).expect("session");
    let sub = watcher
        .subscribe("/shm/restart")
        .receiver()
        .expect("subscribe");
    // Publishing rides through the reconnect; the new daemon grants a region.
    let deadline = Instant::now() + WAIT;
    let got = loop {
        assert!(
            Instant::now() < deadline,
            "nothing arrived after the restart"
        );
        let _ = p.publish("/shm/restart", vec![2u8; 64]);
        if let Some(s) = sub.recv_timeout(Duration::from_millis(50)).expect("recv") {
            break s;
        }
    };
    assert_eq!(&got.payload()[..], &[2u8; 64][..]);
    assert!(
        p.uses_shm(),
        "the publisher has a region from the new daemon"
    );
    assert_eq!(listing_shm(&watcher).regions_open, 1);
    drop(second);
}

#[test]
fn a_loaned_payload_is_written_in_the_region_and_read_in_place() {
    let r = router();
    let s = shm_session(&r.unix).expect("session");
    let sub = s.subscribe("/shm/loan").receiver().expect("subscribe");
    let p = s.declare_publisher("/shm/loan/pub").expect("declare");
    assert!(p.uses_shm());
    let before = listing_shm(&s).by_reference;
    p.loan("/shm/loan", 1 << 20, |buf| {
        assert_eq!(buf.len(), 1 << 20);
        buf.fill(0x5a);
    })
    .expect("loan");
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("the loaned event");
    assert_eq!(got.payload().len(), 1 << 20);
    assert!(got.payload().iter().all(|b| *b == 0x5a));
    assert!(got.is_in_place(), "read where the publisher wrote it");
    assert_eq!(listing_shm(&s).by_reference, before + 1);
    // Without a region the same call fills a buffer sent over the socket.
    let tcp = Session::connect(&r.tcp).expect("tcp session");
    let q = tcp.declare_publisher("/shm/loan/tcp").expect("declare");
    assert!(!q.uses_shm());
    q.loan("/shm/loan", 9, |buf| buf.copy_from_slice(b"by-socket"))
        .expect("loan");
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("the socket event");
    assert_eq!(&got.payload()[..], b"by-socket");
    assert!(!got.is_in_place());
}

#[test]
fn an_expired_shared_memory_event_is_never_handed_over() {
    let r = router();
    let s = shm_session(&r.unix).expect("session");
    let reader = shm_session(&r.unix).expect("session");
    let sub = reader.subscribe("/shm/exp").receiver().expect("subscribe");
    let p = s.declare_publisher("/shm/exp/pub").expect("declare");
    assert!(p.uses_shm());
    // Valid for 20 ms; the subscriber takes it 200 ms later.
    p.event("/shm/exp", vec![1u8; 256])
        .timeout(Duration::from_millis(20))
        .send()
        .expect("publish");
    p.event("/shm/exp", vec![2u8; 256]).send().expect("publish");
    std::thread::sleep(Duration::from_millis(200));
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("the lasting event");
    assert_eq!(got.payload()[0], 2, "the expired one was skipped");
    assert_eq!(reader.shm_stats().expired, 1, "and counted");
}

#[test]
fn a_subscriber_process_killed_while_reading_in_place_harms_nobody() {
    if let Ok(url) = std::env::var(CHILD_URL) {
        // The child: hold in-place samples and read until killed.
        let s = shm_session(&url).expect("child session");
        let sub = s.subscribe("/shm/subkill").receiver().expect("subscribe");
        let mut held = Vec::new();
        while let Ok(Some(x)) = sub.recv_timeout(Duration::from_secs(30)) {
            held.push(x);
            if held.len() == 1 {
                println!("CHILD-READING");
            }
            held.truncate(3);
        }
        return;
    }
    let r = router();
    let s = shm_session(&r.unix).expect("session");
    let other = s.subscribe("/shm/subkill").receiver().expect("subscribe");
    let p = s.declare_publisher("/shm/subkill/pub").expect("declare");
    let mut child = child(
        "a_subscriber_process_killed_while_reading_in_place_harms_nobody",
        &r.unix,
        std::process::Stdio::piped(),
    );
    // Publish until the child reads (its subscription takes a moment).
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let reading = std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut out, &mut line).unwrap_or(0) > 0 {
            if line.contains("CHILD-READING") {
                return true;
            }
            line.clear();
        }
        false
    });
    let deadline = Instant::now() + WAIT;
    while !reading.is_finished() {
        assert!(Instant::now() < deadline, "the child never read");
        p.publish("/shm/subkill", vec![3u8; 1024]).expect("publish");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        reading.join().expect("reader thread"),
        "the child read in place"
    );
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    while other
        .recv_timeout(Duration::from_millis(50))
        .expect("recv")
        .is_some()
    {}
    // The publisher and the other subscriber go on, in place.
    for i in 0..50u8 {
        p.publish("/shm/subkill", vec![i; 1024])
            .expect("publish after the kill");
        let x = other.recv_timeout(WAIT).expect("recv").expect("the event");
        assert!(x.payload().iter().all(|b| *b == i), "event {i} intact");
    }
    assert_eq!(
        listing_shm(&s).regions_open,
        1,
        "the publisher's region stays"
    );
}
