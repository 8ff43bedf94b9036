//! The cost of one publish routed through many indexed filters (issue 23:
//! "an indexed filter (`$.k == i`, 100,000 subscriptions) costs 1.4 ms per
//! publish"), not a pass/fail test: `#[ignore]`d, run by hand and recorded
//! in BENCHMARKS.md:
//!
//! ```text
//! TAGWIRE_SCALE_N=100000 cargo test --release -p tagwire-router \
//!     --test filter_publish_timing -- --ignored --nocapture
//! ```
//!
//! `N` subscriptions on `/f/**`, subscription `i` filtered by `$.k == i`
//! (a distinct filter each, all indexed), spread over connections of at
//! most 50,000 subscriptions. It times the subscribes in tenths (does a
//! subscribe get slower as filters accumulate?), then `M` publishes, each
//! with `k` set so that exactly one subscription matches, pipelined, until
//! the matching subscribers have received them all: the time per publish.

mod common;

use std::time::{Duration, Instant};

use common::{event, publish_frame, start_tcp, Raw};
use tagwire_proto::{EndpointKind, Frame, Value};
use tagwire_router::Limits;

const PER_CONNECTION: u32 = 50_000;

#[test]
#[ignore = "timing run; see the module docs"]
fn publish_cost_with_many_indexed_filters() {
    let n: u32 = std::env::var("TAGWIRE_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let m: u32 = 2_000;
    let h = start_tcp(Limits {
        max_subscriptions_per_connection: PER_CONNECTION as usize,
        max_subscriptions_per_identity: 2 * n as usize + 16,
        max_filters_per_identity: 2 * n as usize + 16,
        max_filter_bytes_per_identity: 1024 * n as usize + 4096,
        ..Limits::default()
    });
    println!("N = {n} subscriptions, each with its own indexed filter");

    let mut subs = Vec::new();
    let tenth = (n / 10).max(1);
    let mut done = 0;
    let mut took_tenths = Vec::new();
    while done < n {
        let conn = done / PER_CONNECTION;
        if subs.len() <= conn as usize {
            let mut s = Raw::hello_tcp(&h);
            s.declare(1, EndpointKind::Subscriber, &format!("/fsub{conn}"));
            subs.push(s);
        }
        let upto = (done + tenth)
            .min(n)
            .min((conn + 1) * PER_CONNECTION)
            .max(done + 1);
        let t = Instant::now();
        for i in done..upto {
            let qos = vec![("filter".to_string(), format!("$.k == {i}"))];
            let sub = i - conn * PER_CONNECTION + 1;
            subs[conn as usize].subscribe(sub, 1, "/f/**", &qos);
        }
        took_tenths.push((upto - done, t.elapsed()));
        done = upto;
    }
    for (count, took) in &took_tenths {
        println!(
            "subscribe {count}: {:.1} µs each",
            took.as_secs_f64() * 1e6 / *count as f64
        );
    }

    let mut publisher = Raw::hello_tcp(&h).publisher("/fpub");
    // Every event matches subscription k, on the first connection.
    let mut bytes = Vec::new();
    for j in 0..m {
        let mut ev = event("/fpub", "/f/x", vec![0u8; 16]);
        ev.fields
            .push(("k".into(), Value::Int(i64::from(j % PER_CONNECTION.min(n)))));
        bytes.extend_from_slice(&publish_frame(1, &ev));
    }
    let t = Instant::now();
    publisher.send_bytes(&bytes);
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < m && Instant::now() < deadline {
        match subs[0].recv() {
            Some(Frame::Deliver { .. }) => got += 1,
            Some(_) => {}
            None => break,
        }
    }
    let took = t.elapsed();
    println!(
        "{got} of {m} publishes delivered: {:.2} µs per publish",
        took.as_secs_f64() * 1e6 / f64::from(m)
    );
    assert_eq!(got, m, "every publish reaches its one subscriber");
}
