//! Issue 25, item 4: a subscription of a durable tag replays from the store
//! after each reconnect (from a little before the last event it handed
//! over). When the daemon did *not* restart, it also resumes the parked
//! subscription and sends again what was not acknowledged: the same events
//! come from the store and from the daemon, and the library must deliver
//! each once, in order. (The restart itself: crates/tagwire-cli/tests/
//! resume_kill.rs.)

mod common;
#[path = "common/proxy.rs"]
mod proxy;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::tempdir::Dir;
use proxy::{token, Proxy, DROP_DOWN};
use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::Session;

const WAIT: Duration = Duration::from_secs(20);

fn durable_router(dir: &Dir) -> (RouterHandle, String) {
    let mut cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    cfg.store.path = Some(dir.0.join("store.redb"));
    cfg.store.tags = vec!["/d/**".into()];
    let h = Router::start(cfg).expect("start router with a store");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp addr"));
    (h, url)
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Events the daemon wrote to the subscription of `/d/x` (none while it is away).
fn written(admin: &Session) -> Option<u64> {
    let l = admin.list().expect("list");
    l.subscriptions
        .iter()
        .find(|s| s.pattern == "/d/x")
        .map(|s| s.delivered)
}

#[test]
fn a_durable_subscriber_whose_connection_is_cut_twice_gets_every_event_once_in_order() {
    let dir = Dir::new("resume-cut");
    let (_h, url) = durable_router(&dir);
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let s = Session::builder()
        .token(token(&url))
        .reconnect_wait(WAIT)
        .connect(&proxy.url())
        .expect("subscriber session through the proxy");
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let g = got.clone();
    let _sub = s
        .subscribe("/d/x")
        .max_queue_length(100_000)
        .qos("reliability", "durable")
        .callback(move |sample| g.lock().expect("got").push(sample.event().seq))
        .expect("subscribe");
    let count = || got.lock().expect("got").len();
    let publisher = Session::connect(&url).expect("publisher session");
    let p = publisher.declare_publisher("/d/pub").expect("publisher");
    let publish = |range: std::ops::RangeInclusive<u64>| {
        for i in range {
            p.publish("/d/x", i.to_string()).expect("publish");
        }
    };
    wait_until("the subscription", || written(&publisher).is_some());
    publish(1..=500);
    wait_until("the first 500 delivered", || count() >= 500);
    for (round, range) in [(1, 501..=1000), (2, 1001..=1500)] {
        let before = written(&publisher).expect("listed");
        // The daemon writes these; the subscriber never reads them.
        proxy.set(DROP_DOWN);
        publish(range);
        wait_until("the daemon to write the swallowed events", || {
            written(&publisher).is_some_and(|d| d >= before + 500)
        });
        let reconnects = s.reconnects();
        proxy.cut();
        wait_until("the subscriber's reconnect", || s.reconnects() > reconnects);
        wait_until("what was swallowed, delivered", || {
            count() >= 500 * (round + 1)
        });
    }
    publish(1501..=2000);
    let mut last = (usize::MAX, Instant::now());
    let deadline = Instant::now() + WAIT;
    loop {
        let n = count();
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(500) && n >= 2000 {
            break;
        }
        assert!(Instant::now() < deadline, "the subscriber has {n} events");
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = got.lock().expect("got").clone();
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
}
