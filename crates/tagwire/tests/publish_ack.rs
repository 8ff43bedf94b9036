//! Issue 25: acknowledgement on the publisher's connection (protocol
//! version 4, `PublishReliable`/`PublishAck`) and `exactly_once` across a
//! publisher's reconnect. A TCP proxy in the test sits between the
//! publisher and the daemon and cuts the connection (not the process) in
//! the middle of the stream, after swallowing either the daemon's
//! acknowledgements (the daemon routed the events, the publisher does not
//! know it: a resend must not be delivered twice) or the publisher's
//! events (the publisher wrote them, the daemon never saw them: they must
//! be sent again). A best-effort publisher through the same faults shows
//! the loss.

#[path = "common/proxy.rs"]
mod proxy;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proxy::{router, token, Proxy, DROP_DOWN, DROP_UP};
use tagwire::{Error, Reliability, Session};

const WAIT: Duration = Duration::from_secs(20);

/// Reads the client's `Hello`: version 4 gets `UnsupportedVersion` and
/// the connection closes (false); another is passed on to a new upstream
/// connection, which the caller opens next, with these bytes first.
fn passes_as_version_3(client: &mut TcpStream) -> bool {
    let mut hello = [0u8; 11];
    if client.peek(&mut hello).map_or(true, |n| n < 11) {
        // Wait for the whole prefix (a client writes its Hello at once).
        std::thread::sleep(Duration::from_millis(50));
        if client.peek(&mut hello).map_or(true, |n| n < 11) {
            return false;
        }
    }
    let version = u16::from_le_bytes([hello[9], hello[10]]);
    if hello[4] == 0x01 && version > 3 {
        let mut b = bytes::BytesMut::new();
        tagwire_proto::Frame::Error {
            req: 0,
            code: tagwire::ErrorCode::UnsupportedVersion,
            message: format!(
                "protocol version {version} is not supported (this server speaks 1 to 3)"
            ),
        }
        .encode(&mut b)
        .expect("encode");
        let _ = client.write_all(&b);
        let _ = client.shutdown(Shutdown::Both);
        return false;
    }
    true
}

/// Collects the payloads (as numbers) a subscription on `tag` gets.
fn collector(url: &str, tag: &str) -> (Session, Arc<Mutex<Vec<u64>>>) {
    let s = Session::connect(url).expect("subscriber session");
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let g = got.clone();
    let sub = s
        .subscribe(tag)
        .max_queue_length(100_000)
        .callback(move |sample| {
            let n = std::str::from_utf8(&sample.payload())
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            g.lock().expect("got").push(n);
        })
        .expect("subscribe");
    std::mem::forget(sub);
    (s, got)
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_reconnected(s: &Session, before: u64) {
    wait_until("the publisher's reconnect", || s.reconnects() > before);
}

/// Publishes 1..=2000 through the proxy: 501..=1000 while the daemon's
/// acknowledgements are swallowed, then a cut; 1001..=1500 while the
/// publisher's bytes are swallowed, then a cut. Returns what the
/// subscriber got once it went quiet.
fn run_faults(reliability: Reliability) -> (Vec<u64>, Session) {
    let (_h, url) = router();
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let (_sub, got) = collector(&url, "/r/x");
    let s = Session::builder()
        .token(token(&url))
        .reconnect_wait(WAIT)
        .connect(&proxy.url())
        .expect("publisher session through the proxy");
    let p = s.declare_publisher("/r/pub").expect("publisher");
    p.set_reliability(reliability);
    p.set_express(true);
    let acked = reliability != Reliability::BestEffort;
    let publish = |range: std::ops::RangeInclusive<u64>| {
        for i in range {
            p.publish("/r/x", i.to_string()).expect("publish");
        }
    };
    publish(1..=500);
    if acked {
        s.wait_acknowledged(WAIT).expect("first 500 acknowledged");
    }
    wait_until("the first 500 delivered", || {
        got.lock().expect("got").len() >= 500
    });

    // The daemon routes 501..=1000; its acknowledgements are lost.
    proxy.set(DROP_DOWN);
    publish(501..=1000);
    wait_until("501..=1000 delivered", || {
        got.lock().expect("got").len() >= 1000
    });
    let before = s.reconnects();
    proxy.cut();
    wait_reconnected(&s, before);

    // 1001..=1500 never reach the daemon on this connection.
    proxy.set(DROP_UP);
    publish(1001..=1500);
    // Let them be written (and swallowed) before the cut.
    std::thread::sleep(Duration::from_millis(300));
    let before = s.reconnects();
    proxy.cut();
    wait_reconnected(&s, before);

    publish(1501..=2000);
    if acked {
        s.wait_acknowledged(WAIT).expect("everything acknowledged");
    }
    s.ping().expect("ping");
    // Quiet for a while: nothing more comes (no late duplicate).
    let mut last = (usize::MAX, Instant::now());
    let deadline = Instant::now() + WAIT;
    loop {
        let n = got.lock().expect("got").len();
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(500) {
            break;
        }
        assert!(Instant::now() < deadline, "the subscriber never went quiet");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = got.lock().expect("got").clone();
    (out, s)
}

#[test]
fn exactly_once_publisher_loses_and_duplicates_nothing_when_its_connection_is_cut_mid_stream() {
    let (got, s) = run_faults(Reliability::ExactlyOnce);
    let expected: Vec<u64> = (1..=2000).collect();
    if got != expected {
        let mut seen = std::collections::HashSet::new();
        let dups = got.iter().filter(|n| !seen.insert(**n)).count();
        let lost = expected.iter().filter(|n| !seen.contains(n)).count();
        panic!(
            "got {} events: {lost} lost, {dups} duplicated, in order: {}",
            got.len(),
            got.windows(2).all(|w| w[0] < w[1])
        );
    }
    let stats = s.ack_stats();
    assert_eq!(stats.unacknowledged, 0);
    assert!(
        stats.resent >= 1000,
        "501..=1500 were sent again after the cuts: {stats:?}"
    );
    assert_eq!(stats.best_effort, 0, "{stats:?}");
}

#[test]
fn reliable_publisher_gets_every_event_once_in_order_across_the_same_cuts() {
    let (got, _s) = run_faults(Reliability::Reliable);
    assert_eq!(got, (1..=2000).collect::<Vec<u64>>());
}

#[test]
fn best_effort_publisher_loses_the_events_its_cut_connection_swallowed() {
    let (got, s) = run_faults(Reliability::BestEffort);
    let lost: Vec<u64> = (1001..=1500).filter(|n| !got.contains(n)).collect();
    assert_eq!(
        lost.len(),
        500,
        "best effort: what the connection swallowed is lost (got {} events)",
        got.len()
    );
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "no duplicate, in order"
    );
    assert_eq!(s.ack_stats(), tagwire::AckStats::default());
}

#[test]
fn a_full_window_makes_the_publish_wait_then_fail_naming_the_bound() {
    let (_h, url) = router();
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let s = Session::builder()
        .token(token(&url))
        .ack_window(4, 1 << 20)
        .ack_timeout(Duration::from_millis(300))
        .connect(&proxy.url())
        .expect("session");
    let p = s.declare_publisher("/w/pub").expect("publisher");
    p.set_reliability(Reliability::Reliable);
    proxy.set(DROP_DOWN);
    for i in 0..4 {
        p.publish("/w/x", format!("{i}"))
            .expect("within the window");
    }
    let err = p.publish("/w/x", "5th").expect_err("the window is full");
    assert_eq!(
        s.ack_stats().waited,
        1,
        "it waited for acknowledgements first"
    );
    match &err {
        Error::AckWindowFull { held, .. } => assert_eq!(*held, 4),
        other => panic!("expected AckWindowFull, got {other:?}"),
    }
    assert!(err.to_string().contains("ack_window"), "{err}");
    assert_eq!(s.ack_stats().unacknowledged, 4);
    // Acknowledgements flow again after a reconnect: the held events are
    // sent again and acknowledged, and the window has room.
    let before = s.reconnects();
    proxy.cut();
    wait_reconnected(&s, before);
    s.wait_acknowledged(WAIT)
        .expect("acknowledged after the reconnect");
    p.publish("/w/x", "again").expect("room again");
}

/// A daemon from before acknowledged publishing (protocol version 3)
/// refuses the version-4 `Hello`: the library connects again with version
/// 3, and a reliable publisher's events go best effort (counted), not
/// refused and not held for ever.
#[test]
fn a_daemon_of_version_3_gets_a_reliable_publishers_events_best_effort() {
    let (_h, url) = router();
    let proxy = Proxy::start_gated(
        url.trim_start_matches("tcp://").to_owned(),
        passes_as_version_3,
    );
    let (_sub, got) = collector(&url, "/v3/x");
    let s = Session::builder()
        .token(token(&url))
        .connect(&proxy.url())
        .expect("a version-3 daemon still takes the session");
    let p = s.declare_publisher("/v3/pub").expect("publisher");
    p.set_reliability(Reliability::ExactlyOnce);
    for i in 1..=10u64 {
        p.publish("/v3/x", i.to_string()).expect("publish");
    }
    s.wait_acknowledged(WAIT)
        .expect("nothing is held for a daemon that cannot acknowledge");
    wait_until("10 delivered", || got.lock().expect("got").len() >= 10);
    assert_eq!(*got.lock().expect("got"), (1..=10).collect::<Vec<u64>>());
    let stats = s.ack_stats();
    assert_eq!(
        (stats.best_effort, stats.acknowledged),
        (10, 0),
        "{stats:?}"
    );
}
