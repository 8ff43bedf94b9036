//! Issue 25: acknowledgement on the subscriber's connection (protocol
//! version 4, `DeliverReliable`/`DeliverAck`) and resume after a
//! subscriber's reconnect. A TCP proxy in the test sits between the
//! subscriber and the daemon; twice in the middle of a 2,000-event stream
//! it swallows what the daemon writes to the subscriber (500 events each
//! time: written by the daemon, never read by the subscriber) and then cuts
//! the connection (not the process). A `reliable` subscription gets 1..=2000
//! once, in order (the daemon sends again what was not acknowledged, the
//! library drops what it had already taken); a `best_effort` one through
//! the same faults loses the 1,000 swallowed events.

#[path = "common/proxy.rs"]
mod proxy;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proxy::{router, token, Proxy, DROP_DOWN};
use tagwire::Session;

const WAIT: Duration = Duration::from_secs(20);

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The daemon's one subscription to `/r/x` (none while the subscriber is
/// away): events it wrote, and whether it delivers acknowledged.
fn listed(admin: &Session) -> Option<(u64, bool)> {
    let l = admin.list().expect("list");
    l.subscriptions
        .iter()
        .find(|s| s.pattern == "/r/x")
        .map(|s| (s.delivered, s.acked.is_some()))
}

/// The daemon's one acknowledged subscription to `/r/x`: events it wrote
/// that the subscriber has not acknowledged yet.
fn unacknowledged(admin: &Session) -> Option<usize> {
    let l = admin.list().expect("list");
    l.subscriptions
        .iter()
        .find(|s| s.pattern == "/r/x")
        .and_then(|s| s.acked.as_ref())
        .map(|a| a.unacked)
}

/// Subscribes `s` to `/r/x` with a queue of `queue` and `reliability`;
/// each event's payload is a number, collected in arrival order.
fn numbered_subscriber(
    s: &Session,
    queue: usize,
    reliability: &str,
) -> (tagwire::CallbackSubscription, Arc<Mutex<Vec<u64>>>) {
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let g = got.clone();
    let sub = s
        .subscribe("/r/x")
        .max_queue_length(queue)
        .qos("reliability", reliability)
        .callback(move |sample| {
            let n = std::str::from_utf8(&sample.payload())
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            g.lock().expect("got").push(n);
        })
        .expect("subscribe");
    (sub, got)
}

/// Publishes 1..=2000 to a subscriber behind the proxy: twice, 500 events
/// are written by the daemon and swallowed by the proxy, then the
/// subscriber's connection is cut. Returns what the subscriber got once it
/// went quiet, and its session.
fn run_faults(reliability: &str) -> (Vec<u64>, Session) {
    let (_h, url) = router();
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let s = Session::builder()
        .token(token(&url))
        .reconnect_wait(WAIT)
        .connect(&proxy.url())
        .expect("subscriber session through the proxy");
    let (sub, got) = numbered_subscriber(&s, 100_000, reliability);
    let count = || got.lock().expect("got").len();
    let publisher = Session::connect(&url).expect("publisher session");
    let p = publisher.declare_publisher("/r/pub").expect("publisher");
    p.set_express(true);
    let publish = |range: std::ops::RangeInclusive<u64>| {
        for i in range {
            p.publish("/r/x", i.to_string()).expect("publish");
        }
    };
    let acked = reliability != "best_effort";
    wait_until("the subscription", || listed(&publisher).is_some());
    assert_eq!(
        listed(&publisher).map(|(_, a)| a),
        Some(acked),
        "acknowledged delivery exactly when the subscription is reliable"
    );
    publish(1..=500);
    wait_until("the first 500 delivered", || count() >= 500);

    for (round, range) in [(1, 501..=1000), (2, 1001..=1500)] {
        if acked {
            // What it took is acknowledged (within the library's batching,
            // at most 20 ms), so what the cut makes the daemon send again
            // is what was swallowed.
            wait_until("the events taken acknowledged", || {
                unacknowledged(&publisher) == Some(0)
            });
        }
        let (written, _) = listed(&publisher).expect("listed");
        // The daemon writes these; the subscriber never reads them.
        proxy.set(DROP_DOWN);
        publish(range);
        wait_until("the daemon to write the swallowed events", || {
            listed(&publisher).is_some_and(|(d, _)| d >= written + 500)
        });
        let before = s.reconnects();
        proxy.cut();
        wait_until("the subscriber's reconnect", || s.reconnects() > before);
        // Its subscription is made again (a new channel: its count starts
        // over, with what is sent again).
        wait_until("the subscription made again", || {
            listed(&publisher).is_some_and(|(d, _)| d < written + 500)
        });
        if acked {
            wait_until("what was swallowed, sent again", || {
                count() >= 500 * (round + 1)
            });
        }
    }
    publish(1501..=2000);
    // Quiet for a while: nothing more comes (no late duplicate).
    let mut last = (usize::MAX, Instant::now());
    let deadline = Instant::now() + WAIT;
    loop {
        let n = count();
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(500) && n >= 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "the subscriber never went quiet");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(sub);
    let out = got.lock().expect("got").clone();
    (out, s)
}

#[test]
fn reliable_subscriber_gets_every_event_once_in_order_when_its_connection_is_cut_twice() {
    let (got, s) = run_faults("reliable");
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
    assert!(s.reconnects() >= 2);
}

#[test]
fn best_effort_subscriber_loses_what_its_cut_connection_swallowed() {
    let (got, _s) = run_faults("best_effort");
    let lost = (1..=2000).filter(|n| !got.contains(n)).count();
    assert_eq!(
        lost,
        1000,
        "best effort: the 2 x 500 events the cut connections swallowed are lost (got {})",
        got.len()
    );
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "no duplicate, in order"
    );
}

/// A reliable subscriber that is **away** (its connection cut and its
/// reconnects refused) while `away` events are published, with a queue of
/// `queue` events: returns what it got once back and quiet, and the
/// daemon's parking counters while it was away and after.
fn run_away(
    queue: usize,
    away: u64,
) -> (
    Vec<u64>,
    tagwire::admin::ParkedInfo,
    tagwire::admin::ParkedInfo,
) {
    let (_h, url) = router();
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let s = Session::builder()
        .token(token(&url))
        .reconnect_wait(WAIT)
        .connect(&proxy.url())
        .expect("subscriber session through the proxy");
    let (_sub, got) = numbered_subscriber(&s, queue, "reliable");
    let count = || got.lock().expect("got").len();
    let publisher = Session::connect(&url).expect("publisher session");
    let p = publisher.declare_publisher("/r/pub").expect("publisher");
    wait_until("the subscription", || listed(&publisher).is_some());
    for i in 1..=100u64 {
        p.publish("/r/x", i.to_string()).expect("publish");
    }
    wait_until("the first 100 delivered", || count() >= 100);
    // … and acknowledged (the client acks every 64 events or 20 ms), so
    // what is parked below is only what is published while away.
    wait_until("the first 100 acknowledged", || {
        publisher
            .list()
            .expect("list")
            .subscriptions
            .iter()
            .any(|x| x.pattern == "/r/x" && x.acked.as_ref().is_some_and(|a| a.unacked == 0))
    });
    // Away: cut, and every reconnect refused until the events are in.
    proxy.refuse(true);
    let before = s.reconnects();
    proxy.cut();
    wait_until("the subscription parked", || {
        listed(&publisher).is_none()
            && publisher
                .list()
                .expect("list")
                .parked
                .is_some_and(|p| p.subscriptions == 1)
    });
    for i in 101..=100 + away {
        p.publish("/r/x", i.to_string()).expect("publish");
    }
    // Published (the publisher's connection is in order): what the daemon
    // holds for the subscriber that is away, once its lane has queued them
    // (a listing can overtake the last batch's queueing under load).
    publisher.ping().expect("ping");
    wait_until(
        "the events held (or dropped at the bound) while away",
        || {
            publisher
                .list()
                .expect("list")
                .parked
                .is_some_and(|p| p.events + p.held_dropped >= away)
        },
    );
    let while_away = publisher
        .list()
        .expect("list")
        .parked
        .expect("parked counters");
    proxy.refuse(false);
    wait_until("the subscriber's reconnect", || s.reconnects() > before);
    let mut last = (usize::MAX, Instant::now());
    let deadline = Instant::now() + WAIT;
    loop {
        let n = count();
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(500) && n > 100 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "back, the subscriber got nothing of what was published while it was away (it has {n} events)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = publisher
        .list()
        .expect("list")
        .parked
        .expect("parked counters");
    let out = got.lock().expect("got").clone();
    (out, while_away, after)
}

#[test]
fn reliable_subscriber_away_gets_what_was_published_meanwhile_once_in_order() {
    let (got, away, after) = run_away(10_000, 500);
    let expected: Vec<u64> = (1..=600).collect();
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
    assert_eq!(away.subscriptions, 1, "{away:?}");
    assert_eq!(away.events, 500, "held while away: {away:?}");
    assert!(away.bytes > 0, "{away:?}");
    assert_eq!(after.subscriptions, 0, "{after:?}");
    assert_eq!(after.resumed, 1, "{after:?}");
    assert_eq!(after.held_total, 500, "{after:?}");
    assert_eq!(after.held_dropped, 0, "{after:?}");
}

#[test]
fn events_held_for_a_subscriber_away_are_bounded_by_its_queue_and_the_drops_counted() {
    // A queue of 100 (discard fifo: the oldest go): 500 published while
    // away, the newest 100 held, 400 dropped and counted.
    let (got, away, after) = run_away(100, 500);
    let expected: Vec<u64> = (1..=100).chain(501..=600).collect();
    assert_eq!(got, expected, "the first 100, then the newest 100 held");
    assert_eq!(away.events, 100, "held while away: {away:?}");
    assert_eq!(away.held_dropped, 400, "dropped at the bound: {away:?}");
    assert_eq!(after.held_total, 100, "{after:?}");
    assert_eq!(after.held_dropped, 400, "{after:?}");
}

/// A receiver that reads slower than the events come (5 ms each): the library
/// acknowledges an event only once the application read it, so a
/// `reliable` subscription's own queue (16 here) never overflows in this
/// process — the daemon's window for it (its queue length) holds the
/// rest back at the daemon, whose queue's `discard` policy drops what
/// does not fit and counts it there (`tagwire list`). Before, the library
/// acknowledged what it queued, the daemon sent on, and this process's
/// queue dropped events that nothing outside it counted.
#[test]
fn a_slow_reader_of_a_reliable_subscription_drops_nothing_in_its_own_queue() {
    const EVENTS: u64 = 400;
    let (_h, url) = router();
    let s = Session::connect(&url).expect("subscriber session");
    let rx = s
        .subscribe("/r/x")
        .max_queue_length(16)
        .qos("reliability", "reliable")
        .receiver()
        .expect("subscribe");
    let publisher = Session::connect(&url).expect("publisher session");
    let p = publisher.declare_publisher("/r/pub").expect("publisher");
    wait_until("the subscription", || listed(&publisher).is_some());
    for i in 1..=EVENTS {
        p.publish("/r/x", i.to_string()).expect("publish");
    }
    let got = read_slowly(&rx, EVENTS, Duration::from_millis(5));
    assert_eq!(
        rx.dropped(),
        0,
        "nothing dropped in the subscriber's own queue"
    );
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order: {got:?}");
    let daemon_dropped = publisher
        .list()
        .expect("list")
        .subscriptions
        .iter()
        .find(|x| x.pattern == "/r/x")
        .map(|x| x.dropped)
        .expect("the subscription is listed");
    assert_eq!(
        got.len() as u64 + daemon_dropped,
        EVENTS,
        "every event read or counted dropped at the daemon (read {}, dropped there {daemon_dropped})",
        got.len()
    );
}

/// A reliable publisher faster than a reliable subscriber is held back by
/// the daemon (DDS's `KEEP_ALL`), not dropped at the subscription's queue:
/// the subscriber reads 1 ms per event behind a queue of 64 while the
/// publisher publishes 300 at once; every event arrives, in order, and the
/// daemon dropped none (without the hold the queue of 64 overflows within
/// the first read of publishes).
#[test]
fn a_reliable_publisher_is_held_back_by_a_slow_reliable_subscriber_and_nothing_is_dropped() {
    const EVENTS: u64 = 300;
    let (_h, url) = router();
    let s = Session::connect(&url).expect("subscriber session");
    let rx = s
        .subscribe("/r/x")
        .max_queue_length(64)
        .qos("reliability", "reliable")
        .receiver()
        .expect("subscribe");
    let publisher = Session::connect(&url).expect("publisher session");
    let p = publisher.declare_publisher("/r/pub").expect("publisher");
    p.set_reliability(tagwire::Reliability::Reliable);
    wait_until("the subscription", || listed(&publisher).is_some());
    for i in 1..=EVENTS {
        p.publish("/r/x", i.to_string()).expect("publish");
    }
    let got = read_slowly(&rx, EVENTS, Duration::from_millis(1));
    let sub = publisher
        .list()
        .expect("list")
        .subscriptions
        .into_iter()
        .find(|x| x.pattern == "/r/x")
        .expect("the subscription is listed");
    assert_eq!(
        sub.dropped, 0,
        "the daemon dropped none of the subscription's events"
    );
    assert_eq!(
        got,
        (1..=EVENTS).collect::<Vec<_>>(),
        "every event, once, in order"
    );
}

/// Reads numbered events from `rx`, pausing `pause` after each, until
/// `events` came or none came for 2 s (bounded: at most `events` reads).
fn read_slowly(rx: &tagwire::Subscriber, events: u64, pause: Duration) -> Vec<u64> {
    let mut got = Vec::new();
    while let Ok(Some(sample)) = rx.recv_timeout(Duration::from_secs(2)) {
        let n: u64 = std::str::from_utf8(&sample.payload())
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        got.push(n);
        std::thread::sleep(pause);
        if got.len() as u64 == events {
            break;
        }
    }
    got
}
