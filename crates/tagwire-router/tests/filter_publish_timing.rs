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
//! subscribe get slower as filters accumulate?), then `M` publishes
//! (`TAGWIRE_SCALE_M`, 20,000 by default), each with `k` set so that exactly
//! one subscription matches, pipelined by a writer thread while the test
//! reads the deliveries, until the matching subscribers have received them
//! all: the time per publish. Before that, one untimed event to each channel
//! the timed publishes reach (a channel's first event allocates its queue). `TAGWIRE_SCALE_M=2000 TAGWIRE_SCALE_SEPARATE=1`
//! reproduces the earlier method (all frames written, then all read).

mod common;

use std::time::{Duration, Instant};

use common::{event, publish_frame, start_tcp, Raw};
use tagwire_proto::{kind, EndpointKind, Value};
use tagwire_router::Limits;

const PER_CONNECTION: u32 = 50_000;

#[test]
#[ignore = "timing run; see the module docs"]
fn publish_cost_with_many_indexed_filters() {
    let n: u32 = std::env::var("TAGWIRE_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let m: u32 = std::env::var("TAGWIRE_SCALE_M")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let separate = std::env::var_os("TAGWIRE_SCALE_SEPARATE").is_some();
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

    let publisher = Raw::hello_tcp(&h).publisher("/fpub");
    // Every event matches subscription k, on the first connection.
    let keys = PER_CONNECTION.min(n);
    let frame = |k: u32| {
        let mut ev = event("/fpub", "/f/x", vec![0u8; 16]);
        ev.fields.push(("k".into(), Value::Int(i64::from(k))));
        publish_frame(1, &ev)
    };
    // First, one event to each channel the timed publishes reach, so that
    // every run times warm channels: a channel's first event allocates its
    // queue, which would otherwise be timed at 100,000 subscriptions (each
    // publish a new channel) and not at 2,000 (the same channels again).
    let warm = m.min(keys);
    let bytes: Vec<u8> = (0..warm).flat_map(|k| frame(k).to_vec()).collect();
    let (publisher, got, took) = pipeline(publisher, bytes, &mut subs[0], warm, false);
    assert_eq!(got, warm, "the warm-up reaches every channel");
    println!(
        "first event to each of {warm} channels: {:.2} µs per publish",
        took.as_secs_f64() * 1e6 / f64::from(warm)
    );

    let bytes: Vec<u8> = (0..m).flat_map(|j| frame(j % keys).to_vec()).collect();
    println!("publishing {m} events");
    let (_publisher, got, took) = pipeline(publisher, bytes, &mut subs[0], m, separate);
    println!(
        "{got} of {m} publishes delivered: {:.2} µs per publish",
        took.as_secs_f64() * 1e6 / f64::from(m)
    );
    assert_eq!(got, m, "every publish reaches its one subscriber");
}

/// Writes `bytes` (publish frames) on `publisher` and reads until `sub` has
/// received `m` deliveries (or nothing more comes); returns the publisher,
/// the deliveries read and the time taken. The frames are written by a
/// thread while the deliveries are read, so that neither side's socket
/// buffers bound how many publishes are in flight; `separate` writes them
/// all first instead.
fn pipeline(
    mut publisher: Raw,
    bytes: Vec<u8>,
    sub: &mut Raw,
    m: u32,
    separate: bool,
) -> (Raw, u32, Duration) {
    let t = Instant::now();
    let writer = if separate {
        publisher.send_bytes(&bytes);
        Err(publisher)
    } else {
        Ok(std::thread::spawn(move || {
            for chunk in bytes.chunks(64 * 1024) {
                publisher.send_bytes(chunk);
            }
            publisher
        }))
    };
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < m && Instant::now() < deadline {
        match sub.recv_raw() {
            Some((k, _)) if k == kind::DELIVER => got += 1,
            Some(_) => {}
            None => break,
        }
    }
    let took = t.elapsed();
    let publisher = match writer {
        Ok(w) => w.join().expect("the writer thread ends"),
        Err(p) => p,
    };
    (publisher, got, took)
}
