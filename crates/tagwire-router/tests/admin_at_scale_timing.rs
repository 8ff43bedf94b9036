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

#[test]
#[ignore = "a timing run for BENCHMARKS.md, not a test"]
fn admin_work_at_scale() {
    let n: u32 = std::env::var("TAGWIRE_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(65_536);
    let h = start_tcp(Limits::default());
    let stall = Arc::new(Stall {
        base: Instant::now(),
        worst_us: AtomicU64::new(0),
        pending_since_us: AtomicU64::new(0),
        step_since_us: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let mut pinger = Raw::hello_tcp(&h);
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
