//! Timings of admin work at scale (issue 12 items 5 and 9), not a pass/fail
//! test: `#[ignore]`d, run by hand and recorded in BENCHMARKS.md:
//!
//! ```text
//! TAGWIRE_SCALE_N=65536 cargo test --release -p tagwire-router \
//!     --test admin_at_scale_timing -- --ignored --nocapture
//! ```
//!
//! With `N` filtered subscriptions (one endpoint, one pattern, the same
//! indexed filter) it times, from the client: `filter_add` and `filter_list`
//! and a `list` (its first page and every page) with the tables full; `N`
//! unsubscribes; removing an endpoint with `N` subscriptions; closing a
//! connection with `N` subscriptions until the router's tables are empty.
//! Meanwhile another client pings the router every millisecond; the longest
//! round trip during each step is how long the lane stalled.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{start_tcp, Raw};
use serde_json::json;
use tagwire_proto::{EndpointKind, Frame};
use tagwire_router::Limits;

/// The longest ping round trip (µs) since the last `take`, counting a
/// ping still unanswered at `take` for as long as it has waited.
struct Stall {
    base: Instant,
    worst_us: AtomicU64,
    /// When the unanswered ping was sent (µs since `base`), or 0.
    pending_since_us: AtomicU64,
    /// When the current step began: a ping sent before counts from here.
    step_since_us: AtomicU64,
    stop: AtomicBool,
}

impl Stall {
    fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64 + 1
    }

    fn take(&self) -> Duration {
        let now = self.now_us();
        let since = self.pending_since_us.load(Ordering::Relaxed);
        let step = self.step_since_us.swap(now, Ordering::Relaxed);
        let since = if since == 0 { 0 } else { since.max(step) };
        let waiting = if since == 0 { 0 } else { now - since };
        let worst = self.worst_us.swap(0, Ordering::Relaxed).max(waiting);
        Duration::from_micros(worst)
    }
}

fn filtered() -> Vec<(String, String)> {
    vec![("filter".into(), "$.k == 1".into())]
}

/// Subscriptions the router lists (following `next` if it pages).
fn listed_subscriptions(c: &mut Raw) -> usize {
    let mut n = 0;
    let mut after = serde_json::Value::Null;
    loop {
        let req = if after.is_null() {
            json!({"op": "list"})
        } else {
            json!({"op": "list", "after": after})
        };
        let page = c.admin(&req);
        n += page["subscriptions"].as_array().map_or(0, Vec::len);
        match page.get("next") {
            Some(next) if !next.is_null() => after = next.clone(),
            _ => return n,
        }
    }
}

fn step(name: &str, stall: &Stall, f: impl FnOnce()) {
    stall.take();
    let t = Instant::now();
    f();
    let took = t.elapsed();
    println!(
        "{name:<58} {:>10.1} ms   longest ping {:>8.1} ms",
        took.as_secs_f64() * 1e3,
        stall.take().as_secs_f64() * 1e3
    );
}

/// Starts a client that pings the router every millisecond, recording the
/// longest round trip in the returned [`Stall`] until its `stop` is set.
fn pinger(h: &tagwire_router::RouterHandle) -> (Arc<Stall>, std::thread::JoinHandle<()>) {
    let stall = Arc::new(Stall {
        base: Instant::now(),
        worst_us: AtomicU64::new(0),
        pending_since_us: AtomicU64::new(0),
        step_since_us: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let mut pinger = Raw::hello_tcp(h);
    let s2 = stall.clone();
    let pings = std::thread::spawn(move || {
        let mut nonce = 0;
        while !s2.stop.load(Ordering::Relaxed) {
            nonce += 1;
            let sent = s2.now_us();
            s2.pending_since_us.store(sent, Ordering::Relaxed);
            pinger.ping(nonce);
            s2.pending_since_us.store(0, Ordering::Relaxed);
            let from = sent.max(s2.step_since_us.load(Ordering::Relaxed));
            s2.worst_us
                .fetch_max(s2.now_us().saturating_sub(from), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    (stall, pings)
}

#[test]
#[ignore = "a timing run for BENCHMARKS.md, not a test"]
fn admin_work_at_scale() {
    let n: u32 = std::env::var("TAGWIRE_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(65_536);
    let h = start_tcp(Limits::default());
    let (stall, pings) = pinger(&h);
    println!("N = {n} filtered subscriptions");

    let mut small = Raw::hello_tcp(&h);
    small.declare(1, EndpointKind::Subscriber, "/small");
    small.subscribe_many(1, 1, 1, "/small/**", &[]);
    let mut big = Raw::hello_tcp(&h);
    big.declare(1, EndpointKind::Subscriber, "/big");
    step(&format!("subscribe {n} (pipelined)"), &stall, || {
        big.subscribe_many(1, 1, n, "/big/**", &filtered())
    });
    let mut admin = Raw::hello_tcp(&h);
    step("filter_add on a 1-subscription endpoint", &stall, || {
        admin.admin(&json!({"op":"filter_add","endpoint":"/small","filter":"$.k == 2"}));
    });
    let mut big_filter = 0;
    step(
        &format!("filter_add on the {n}-subscription endpoint"),
        &stall,
        || {
            let reply =
                admin.admin(&json!({"op":"filter_add","endpoint":"/big","filter":"$.k == 3"}));
            big_filter = reply["id"].as_u64().expect("filter id");
        },
    );
    step(
        &format!("session-level filter_add, {n} re-placed"),
        &stall,
        || {
            admin.admin(&json!({"op":"filter_add","endpoint":"/big","level":"session","filter":"$priority < 9"}),
        );
        },
    );
    step(&format!("filter_op or, {n} re-placed"), &stall, || {
        admin.admin(&json!({"op":"filter_op","endpoint":"/big","interfilter":"or"}));
    });
    step(&format!("filter_remove of a filter on {n}"), &stall, || {
        admin.admin(&json!({"op":"filter_remove","id":big_filter}));
    });
    step("filter_list (first reply)", &stall, || {
        admin.admin(&json!({"op":"filter_list"}));
    });
    step("list (first reply)", &stall, || {
        admin.admin(&json!({"op":"list"}));
    });
    step("list (every page)", &stall, || {
        assert!(listed_subscriptions(&mut admin) > n as usize);
    });
    step(&format!("unsubscribe {n} (pipelined)"), &stall, || {
        big.unsubscribe_many(1, n)
    });
    big.subscribe_many(1, 1, n, "/big/**", &filtered());
    step(
        &format!("undeclare an endpoint with {n} subscriptions"),
        &stall,
        || {
            big.send(&Frame::UndeclareEndpoint { req: 9, id: 1 });
            assert_eq!(big.recv(), Some(Frame::Ok { req: 9 }));
        },
    );
    big.declare(2, EndpointKind::Subscriber, "/big2");
    big.subscribe_many(2, 1, n, "/big/**", &filtered());
    step(
        &format!("close a connection with {n} subscriptions"),
        &stall,
        || {
            drop(big);
            while listed_subscriptions(&mut admin) > 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        },
    );
    stall.stop.store(true, Ordering::Relaxed);
    pings.join().expect("pinger");
}

/// Issue 24 item 11: subscriptions each on its own pattern, from one
/// identity, in chunks (`TAGWIRE_DISTINCT_N`, default 8,000, in chunks of
/// 2,000), then a fresh client's handshake, then every unsubscribe in one
/// burst. With a per-subscribe cost proportional to the subscriptions held,
/// each chunk took longer than the one before. `TAGWIRE_DISTINCT_PEER=1`
/// links a second router (the interest is then aggregated and advertised
/// at every change); `TAGWIRE_DISTINCT_ENDPOINTS=1` puts each subscription
/// on its own endpoint (as the client library's subscribers are).
#[test]
#[ignore = "a timing run for BENCHMARKS.md, not a test"]
fn distinct_subscriptions_at_scale() {
    let n: u32 = std::env::var("TAGWIRE_DISTINCT_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8_000);
    const CHUNK: u32 = 2_000;
    let h = start_tcp(Limits::default());
    let (stall, pings) = pinger(&h);
    // A second router linked to this one (it dials).
    let linked = std::env::var("TAGWIRE_DISTINCT_PEER").is_ok();
    let _peer = linked.then(|| {
        let addr = h.tcp_addr().expect("tcp");
        tagwire_router::Router::start(tagwire_router::RouterConfig {
            federation: tagwire_router::FederationConfig {
                peers: vec![format!("tcp://{addr}")],
                ..Default::default()
            },
            ..common::tcp_config()
        })
        .expect("start the peer")
    });
    if linked {
        let mut admin = Raw::hello_tcp(&h);
        let deadline = Instant::now() + Duration::from_secs(10);
        while admin.list().federation.unwrap_or_default().links.is_empty() {
            assert!(Instant::now() < deadline, "the peer never linked");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    println!("N = {n} subscriptions, each on its own pattern (linked: {linked})");
    let mut big = Raw::hello_tcp(&h);
    big.declare(1, EndpointKind::Subscriber, "/s");
    let per_endpoint = std::env::var("TAGWIRE_DISTINCT_ENDPOINTS").is_ok();
    let mut first = 1;
    while first <= n {
        let k = CHUNK.min(n + 1 - first);
        step(
            &format!("subscribe {k} distinct /s/{{i}}/** ({} held)", first - 1),
            &stall,
            || {
                if per_endpoint {
                    big.declare_each(first + 1, k, |i| format!("/s{i}"));
                }
                big.subscribe_each(first, k, |i| {
                    (if per_endpoint { i + 1 } else { 1 }, format!("/s/{i}/**"))
                })
            },
        );
        first += k;
    }
    step("a fresh client's handshake and ping", &stall, || {
        let mut fresh = Raw::hello_tcp(&h);
        fresh.ping(1);
    });
    step(&format!("unsubscribe {n} (one burst)"), &stall, || {
        let mut burst = bytes::BytesMut::new();
        for sub in 1..=n {
            Frame::Unsubscribe { req: sub, sub }
                .encode(&mut burst)
                .expect("encode");
        }
        big.send_bytes(&burst);
        for sub in 1..=n {
            assert_eq!(
                big.recv(),
                Some(Frame::Ok { req: sub }),
                "unsubscribe {sub}"
            );
        }
    });
    stall.stop.store(true, Ordering::Relaxed);
    pings.join().expect("pinger");
}
