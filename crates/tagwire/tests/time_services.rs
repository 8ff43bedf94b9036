//! Time services on a subscription (issue 26; docs/time.md): `playout=tds:D`
//! delivers in source-time order, keeping the publisher's spacing, and
//! shows its counters and RFC 3550 jitter in `list` and `admin show`;
//! `buffer=…` time-orders; bad values are refused by name. Timing is
//! measured and printed here, never asserted (the order is; the spacing is
//! asserted in simulated time in tagwire-core's tds tests).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tagwire::{Error, Event, Subscriber};

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// (payload, arrival ns) of up to `n` events, each within 2 s.
fn receive(sub: &Subscriber, n: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    while out.len() < n {
        match sub.recv_timeout(Duration::from_secs(2)).expect("receive") {
            Some(s) => out.push((String::from_utf8_lossy(&s.payload()).into_owned(), now_ns())),
            None => break,
        }
    }
    out
}

#[test]
fn a_playout_subscription_gets_events_in_source_order_with_their_spacing() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let sub = s
        .subscribe("/media/**")
        .qos("playout", "tds:30ms")
        .receiver()
        .expect("subscribe with playout");
    let p = s.declare_publisher("/media/cam").expect("publisher");
    // 20 events 5 ms apart in source time, published in bursts of two
    // with each pair swapped: arrival order 1, 0, 3, 2, …
    let base = now_ns();
    let started = Instant::now();
    let got = std::thread::scope(|scope| {
        // Arrival times are taken as events arrive, on their own thread.
        let rx = scope.spawn(|| receive(&sub, 20));
        for pair in 0..10u64 {
            let due = Duration::from_millis(pair * 10 + 5);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
            for i in [2 * pair + 1, 2 * pair] {
                let mut e = Event::new("/media/x", format!("{i}"));
                e.header.source_time_ns = base + i * 5_000_000;
                p.send(e).expect("send");
            }
        }
        rx.join().expect("the receiving thread")
    });
    let order: Vec<String> = got.iter().map(|g| g.0.clone()).collect();
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    eprintln!(
        "arrivals after the first source time, ms: {:?}",
        got.iter()
            .map(|g| (g.1 - base) / 1_000_000)
            .collect::<Vec<_>>()
    );
    assert_eq!(order, want, "source-time order");
    let errors: Vec<i64> = got
        .windows(2)
        .map(|w| (w[1].1 as i64 - w[0].1 as i64) - 5_000_000)
        .collect();
    eprintln!("spacing error at the subscriber, ns (measured, not asserted): {errors:?}");
    let listing = s.list().expect("list");
    let t = listing.subscriptions[0]
        .time
        .expect("the subscription lists its time services");
    assert_eq!(t.released, 20);
    assert_eq!(t.held, 0);
    eprintln!(
        "jitter in {} ns, out {} ns (RFC 3550, measured, not asserted)",
        t.input_jitter_ns, t.output_jitter_ns
    );
}

#[test]
fn a_buffer_subscription_time_orders_by_count() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let sub = s
        .subscribe("/b/**")
        .qos("buffer", "count:4,max_delay:10s")
        .receiver()
        .expect("subscribe with a buffer");
    let p = s.declare_publisher("/b/p").expect("publisher");
    let base = now_ns();
    for i in [3u64, 1, 2, 0] {
        let mut e = Event::new("/b/x", format!("{i}"));
        e.header.source_time_ns = base + i;
        p.send(e).expect("send");
    }
    let got: Vec<String> = receive(&sub, 4).into_iter().map(|g| g.0).collect();
    assert_eq!(got, ["0", "1", "2", "3"]);
}

#[test]
fn bad_time_service_values_are_refused_by_name() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    for (k, v, needle) in [
        ("playout", "tds:0", "tds:DELAY"),
        ("playout", "jitter:5ms", "tds:DELAY"),
        ("buffer", "count:0", "count must be 1..=1048576"),
        (
            "buffer",
            "release:0.2",
            "release must be a factor 0.5..=1.0",
        ),
    ] {
        match s.subscribe("/x").qos(k, v).receiver() {
            Err(Error::Refused { message, .. }) => {
                assert!(
                    message.contains(k) && message.contains(needle),
                    "{k}={v}: {message}"
                )
            }
            other => panic!("{k}={v} should be refused, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn an_admin_qos_change_turns_a_live_subscriptions_playout_on_and_off() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let sub = s
        .subscribe("/live/**")
        .endpoint("/viewer")
        .receiver()
        .expect("subscribe");
    let timed = |s: &tagwire::Session| s.list().expect("list").subscriptions[0].time;
    assert!(timed(&s).is_none(), "no time services by default");
    s.set_qos(&["/viewer"], &[("playout", "tds:60s")], &[])
        .expect("admin qos playout");
    let p = s.declare_publisher("/live/p").expect("publisher");
    p.publish("/live/x", "held").expect("publish");
    let start = Instant::now();
    while timed(&s).is_none_or(|t| t.held == 0) {
        assert!(start.elapsed() < Duration::from_secs(5), "never held");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        sub.recv_timeout(Duration::from_millis(200))
            .expect("receive")
            .is_none(),
        "held for the playout delay"
    );
    // Off: the held event is handed over at once.
    s.set_qos(&["/viewer"], &[("playout", "none")], &[])
        .expect("admin qos none");
    let got = receive(&sub, 1);
    assert_eq!(got.len(), 1);
    assert!(timed(&s).is_none());
}

#[test]
fn a_subscription_without_time_services_lists_the_jitter_of_its_input_and_output() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let sub = s
        .subscribe("/plain/**")
        .endpoint("/plain-viewer")
        .receiver()
        .expect("subscribe");
    let p = s.declare_publisher("/plain/cam").expect("publisher");
    // Source times 10 ms apart, sent at once, every other one stamped
    // 20 ms earlier: the transit alternates by ~20 ms, so both sides'
    // jitter is some ms. Each event may expire (in an hour), so the writer
    // reads the clock for every batch and the output is measured too.
    let base = now_ns();
    for i in 0..40u64 {
        let mut e = Event::new("/plain/x", format!("{i}"));
        e.header.source_time_ns = base - (i % 2) * 20_000_000 + i * 10_000_000;
        e.header.expiry = tagwire::Expiry::AfterNs(3_600_000_000_000);
        p.send(e).expect("send");
    }
    assert_eq!(receive(&sub, 40).len(), 40);
    let listing = s.list().expect("list");
    let sub_info = &listing.subscriptions[0];
    assert!(sub_info.time.is_none(), "no time services");
    let j = sub_info
        .jitter
        .expect("every subscription lists its jitter once it saw source times");
    let (input, output) = (
        j.input_ns.expect("input measured"),
        j.output_ns.expect("output measured"),
    );
    eprintln!("jitter in {input} ns, out {output} ns");
    // ~20 ms swings of transit: far above any scheduling noise.
    assert!(input > 1_000_000, "input jitter {input} ns");
    assert!(output > 1_000_000, "output jitter {output} ns");
    let Ok(tagwire::admin::Show::Endpoint(e)) = s.show("/plain-viewer") else {
        panic!("show /plain-viewer is an endpoint");
    };
    assert_eq!(e.channels[0].jitter, Some(j), "admin show says the same");
}

#[test]
fn a_client_side_playout_delivers_in_source_order_without_the_daemons_service() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let cfg: tagwire::PlayoutConfig = "tds:40ms".parse().expect("a playout");
    let sub = s
        .subscribe("/lib/**")
        .playout(cfg)
        .receiver()
        .expect("subscribe with a client playout");
    let p = s.declare_publisher("/lib/cam").expect("publisher");
    // 20 events 4 ms apart in source time, sent in swapped pairs when the
    // second of each is due: arrival order 1, 0, 3, 2, … (the daemon
    // passes them on as they come).
    let base = now_ns();
    let started = Instant::now();
    let got = std::thread::scope(|scope| {
        let rx = scope.spawn(|| receive(&sub, 20));
        for pair in 0..10u64 {
            let due = Duration::from_millis(pair * 8 + 4);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
            for i in [2 * pair + 1, 2 * pair] {
                let mut e = Event::new("/lib/x", format!("{i}"));
                e.header.source_time_ns = base + i * 4_000_000;
                p.send(e).expect("send");
            }
        }
        rx.join().expect("the receiving thread")
    });
    let order: Vec<String> = got.iter().map(|g| g.0.clone()).collect();
    // Event 1 arrives first and anchors the stream; 0 arrives after it, 4 ms
    // earlier in source time, so it is released 4 ms before 1: order kept.
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(order, want, "source-time order, restored in the client");
    let errors: Vec<i64> = got
        .windows(2)
        .map(|w| (w[1].1 as i64 - w[0].1 as i64) - 4_000_000)
        .collect();
    let stats = sub.playout_stats().expect("a client playout");
    eprintln!("spacing error in the client, ns (measured, not asserted): {errors:?}; {stats:?}");
    assert_eq!((stats.counters.released, stats.held), (20, 0));
    let listing = s.list().expect("list");
    assert!(
        listing.subscriptions[0].time.is_none(),
        "the daemon runs no time service for it"
    );
    assert!(
        "tds:0ms".parse::<tagwire::PlayoutConfig>().is_err()
            && "none".parse::<tagwire::PlayoutConfig>().is_err(),
        "a zero delay and none are refused"
    );
    // Dropping the subscription ends its playout thread (within its
    // 200 ms check; bounded wait). Only this test makes a client playout.
    drop(sub);
    let playout_threads = || {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|t| t.ok())
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "tagwire-playout")
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while playout_threads() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        playout_threads(),
        0,
        "the playout thread ended with its subscription"
    );
}

/// `playout_spin`: the playout thread busy-waits the last stretch before
/// each release (here every release, 1 ms apart, is within the spin, cut
/// to its 1 ms bound) and its callback gets every event, once, in source
/// order. The precision it buys is measured in BENCHMARKS.md (Fig. 20),
/// not asserted here.
#[test]
fn a_spinning_client_playout_hands_every_event_to_its_callback_in_source_order() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let cfg: tagwire::PlayoutConfig = "tds:20ms".parse().expect("a playout");
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let _sub = s
        .subscribe("/spin/**")
        .playout(cfg)
        .playout_spin(Duration::from_secs(1))
        .callback(move |sample| {
            let text = String::from_utf8_lossy(&sample.payload()).into_owned();
            g.lock().expect("got").push(text);
        })
        .expect("subscribe with a spinning client playout");
    let p = s.declare_publisher("/spin/cam").expect("publisher");
    let base = now_ns();
    for i in 0..20u64 {
        let mut e = Event::new("/spin/x", format!("{i}"));
        e.header.source_time_ns = base + i * 1_000_000;
        p.send(e).expect("send");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.lock().expect("got").len() < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(
        *got.lock().expect("got"),
        want,
        "every event once, in source order"
    );
}
