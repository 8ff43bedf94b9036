//! Issue 25, first slice on one daemon: the `reliability` QoS property and
//! the durable store's replay with no gap and no duplicate at the seam with
//! live events published during the replay.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::tempdir::Dir;
use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::{ReplayFrom, Session, Spacing};

const WAIT: Duration = Duration::from_secs(10);

fn durable_router(dir: &Dir) -> (RouterHandle, String) {
    let mut cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    cfg.store.path = Some(dir.0.join("store.redb"));
    let h = Router::start(cfg).expect("start router with a store");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp addr"));
    (h, url)
}

/// The sequence numbers of the next `total` events of `sub`, pausing
/// `pause` after each (a slow consumer); panics naming how many came and
/// how many the queue dropped if one does not come within [`WAIT`].
fn seqs_of(sub: &tagwire::Subscriber, total: u64, pause: Duration) -> Vec<u64> {
    let mut got = Vec::new();
    while (got.len() as u64) < total {
        match sub.recv_timeout(WAIT).expect("recv") {
            Some(e) => got.push(e.event().seq),
            None => panic!(
                "only {} of {total} events arrived ({} dropped): last {:?}",
                got.len(),
                sub.dropped(),
                &got[got.len().saturating_sub(5)..]
            ),
        }
        std::thread::sleep(pause);
    }
    got
}

#[test]
fn replay_then_live_has_no_gap_and_no_duplicate_with_events_published_during_the_replay() {
    let dir = Dir::new("replay-seam");
    let (_h, url) = durable_router(&dir);
    let admin = Session::connect(&url).expect("connect");
    admin
        .set_qos(&["/d/**"], &[("reliability", "durable")], &[])
        .expect("make /d/** durable");
    const TOTAL: u64 = 3000;
    let publisher_session = Session::connect(&url).expect("connect");
    let publisher = publisher_session
        .declare_publisher("/pub")
        .expect("publisher");
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let t = std::thread::spawn(move || {
        for i in 1..=TOTAL {
            publisher.publish("/d/x", i.to_string()).expect("publish");
            if i == TOTAL / 2 {
                flag.store(true, Ordering::Release);
            }
            if i % 100 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        publisher_session.ping().expect("ping after the last event");
    });
    // Subscribe mid-stream: the first half is in the store, the rest
    // arrives during the replay and after it.
    let deadline = Instant::now() + WAIT;
    while !started.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "publisher stuck");
        std::thread::sleep(Duration::from_millis(1));
    }
    let sub_session = Session::connect(&url).expect("connect");
    let sub = sub_session
        .subscribe("/d/x")
        .local_queue_length(100_000)
        .replay_from(ReplayFrom::Start, Spacing::Fast)
        .receiver()
        .expect("subscribe with replay");
    let got = seqs_of(&sub, TOTAL, Duration::ZERO);
    t.join().expect("publisher thread");
    assert_eq!(
        got,
        (1..=TOTAL).collect::<Vec<_>>(),
        "gap, duplicate or disorder"
    );
    // Nothing more (no duplicate after the last one).
    assert!(sub
        .recv_timeout(Duration::from_millis(300))
        .expect("recv")
        .is_none());
    let store = admin
        .list()
        .expect("list")
        .store
        .expect("the daemon has a store");
    assert_eq!((store.stored, store.not_stored), (TOTAL, 0), "{store:?}");
}

/// A replay is paced by the application: with a local queue of 8 events
/// and a consumer slower than the store, every stored event arrives, none
/// dropped at the queue's bound (the replay waits for room; before, it
/// handed the store's pages over as fast as it read them and the queue's
/// discard policy dropped most of them).
#[test]
fn a_replay_into_a_small_queue_with_a_slow_consumer_drops_nothing() {
    let dir = Dir::new("replay-paced");
    let (_h, url) = durable_router(&dir);
    let s = Session::connect(&url).expect("connect");
    s.set_qos(&["/p/**"], &[("reliability", "durable")], &[])
        .expect("make /p/** durable");
    const TOTAL: u64 = 2000;
    let publisher = s.declare_publisher("/pub").expect("publisher");
    for i in 1..=TOTAL {
        publisher.publish("/p/x", i.to_string()).expect("publish");
    }
    let deadline = Instant::now() + WAIT;
    while s.stored("/p/x").expect("stored").held < TOTAL as u32 {
        assert!(Instant::now() < deadline, "the store never held them all");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sub = s
        .subscribe("/p/x")
        .local_queue_length(8)
        .replay_from(ReplayFrom::Start, Spacing::Fast)
        .receiver()
        .expect("subscribe with replay");
    let got = seqs_of(&sub, TOTAL, Duration::from_micros(100));
    assert_eq!(got, (1..=TOTAL).collect::<Vec<_>>());
    assert_eq!(sub.dropped(), 0);
}

#[test]
fn reliability_is_accepted_at_each_level_and_durable_needs_a_store() {
    let dir = Dir::new("reliability-prop");
    let (_h, url) = durable_router(&dir);
    let s = Session::connect(&url).expect("connect");
    s.set_qos(&["/r/**"], &[("reliability", "reliable")], &[])
        .expect("tag level");
    let e = s
        .set_qos(&["/r/**"], &[("reliability", "always")], &[])
        .expect_err("a bad value");
    assert!(
        e.to_string()
            .contains("best_effort, reliable, exactly_once or durable"),
        "{e}"
    );
    let _sub = s
        .subscribe("/r/x")
        .qos("reliability", "exactly_once")
        .receiver()
        .expect("channel level");
    // A daemon without a store refuses to make a tag durable.
    let plain = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    })
    .expect("router without a store");
    let p =
        Session::connect(&format!("tcp://{}", plain.tcp_addr().expect("addr"))).expect("connect");
    let e = p
        .set_qos(&["/d/**"], &[("reliability", "durable")], &[])
        .expect_err("no store");
    assert!(e.to_string().contains("--state-dir"), "{e}");
}

#[test]
fn the_store_keeps_the_newest_events_of_a_tag_at_its_count_bound_with_fsync_interval() {
    let dir = Dir::new("retention");
    let mut cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    cfg.store.path = Some(dir.0.join("store.redb"));
    cfg.store.tags = vec!["/kept/**".into()];
    cfg.store.max_events_per_tag = 10;
    // The cheaper sync policy: commits in between are not synced.
    cfg.store.fsync = tagwire::router::config::Fsync::Interval;
    cfg.store.fsync_interval_ms = 50;
    let h = Router::start(cfg).expect("router");
    let s = Session::connect(&format!("tcp://{}", h.tcp_addr().expect("addr"))).expect("connect");
    let p = s.declare_publisher("/p").expect("publisher");
    for i in 1..=30u64 {
        p.publish("/kept/x", i.to_string()).expect("publish");
    }
    s.ping().expect("ping");
    let deadline = Instant::now() + WAIT;
    while s.stored("/kept/x").expect("stored").held < 10 {
        assert!(Instant::now() < deadline, "the store never held 10 events");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sub = s
        .subscribe("/kept/x")
        .replay_from(ReplayFrom::Start, Spacing::Fast)
        .receiver()
        .expect("subscribe");
    let mut got = Vec::new();
    while got.len() < 10 {
        let sample = sub.recv_timeout(WAIT).expect("recv").expect("an event");
        got.push(sample.event().seq);
    }
    assert_eq!(got, (21..=30).collect::<Vec<_>>());
    let store = s.list().expect("list").store.expect("a store");
    assert_eq!((store.stored, store.evicted), (30, 20), "{store:?}");
}

/// Issue 25, store custody: a `durable` publisher floods a store whose
/// queue holds 2 events. Each event is acknowledged only once the store
/// committed it; what the full queue cannot take is refused (failed in the
/// acknowledgement), never acknowledged unstored. So the store holds
/// exactly the acknowledged events, each once.
#[test]
fn every_acknowledged_durable_event_is_in_the_store_when_its_queue_overflows() {
    let dir = Dir::new("custody");
    let mut cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    cfg.store.path = Some(dir.0.join("store.redb"));
    cfg.store.tags = vec!["/c/**".into()];
    cfg.store.queue_length = 2;
    let h = Router::start(cfg).expect("router");
    let s = Session::connect(&format!("tcp://{}", h.tcp_addr().expect("addr"))).expect("connect");
    let p = s.declare_publisher("/c/pub").expect("publisher");
    p.set_reliability(tagwire::Reliability::Durable);
    const N: u64 = 3000;
    for i in 1..=N {
        p.publish("/c/x", i.to_string()).expect("publish");
    }
    s.wait_acknowledged(WAIT).expect("every event answered");
    let acks = s.ack_stats();
    assert_eq!(
        acks.acknowledged + acks.failed,
        N,
        "each event is acknowledged or failed: {acks:?}"
    );
    let sub = s
        .subscribe("/c/x")
        .local_queue_length(100_000)
        .replay_from(ReplayFrom::Start, Spacing::Fast)
        .receiver()
        .expect("subscribe with replay");
    let mut got = Vec::new();
    while (got.len() as u64) < acks.acknowledged {
        match sub.recv_timeout(WAIT).expect("recv") {
            Some(sample) => got.push(
                std::str::from_utf8(&sample.payload())
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                    .expect("a number"),
            ),
            None => panic!(
                "only {} of the {} acknowledged events are in the store ({acks:?})",
                got.len(),
                acks.acknowledged
            ),
        }
    }
    // Nothing more: none stored that was not acknowledged.
    assert!(sub
        .recv_timeout(Duration::from_millis(300))
        .expect("recv")
        .is_none());
    let mut unique = got.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), got.len(), "an event stored twice");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "stored out of order");
    let store = s.list().expect("list").store.expect("a store");
    assert_eq!(
        (store.stored, store.refused),
        (acks.acknowledged, acks.failed),
        "{store:?} {acks:?}"
    );
}
