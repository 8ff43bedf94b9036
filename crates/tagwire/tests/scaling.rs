//! Temporal scaling proxies (issue 15 item 2): several subscribers on one
//! tag with different factors or minimum intervals get deterministic,
//! nested samples; bad values are refused by name.

use std::time::Duration;

use tagwire::router::{Router, RouterConfig};
use tagwire::{Error, Session, Subscriber};

fn seqs(sub: &Subscriber) -> Vec<u64> {
    let mut out = Vec::new();
    while let Some(s) = sub
        .recv_timeout(Duration::from_millis(300))
        .expect("receive")
    {
        out.push(s.event().seq);
    }
    out
}

#[test]
fn subscribers_with_different_factors_get_nested_deterministic_samples() {
    let r = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    })
    .expect("start");
    let url = format!("tcp://{}", r.tcp_addr().expect("tcp"));
    let s = Session::connect(&url).expect("connect");
    let all = s.subscribe("/cam/**").receiver().expect("subscribe");
    let half = s
        .subscribe("/cam/**")
        .qos("scale", "2")
        .receiver()
        .expect("scale 2");
    let quarter = s
        .subscribe("/cam/**")
        .qos("scale", "4")
        .receiver()
        .expect("scale 4");
    let p = s.declare_publisher("/cam/left").expect("publisher");
    for i in 0..20 {
        p.publish("/cam/frame", format!("{i}")).expect("publish");
    }
    let (all, half, quarter) = (seqs(&all), seqs(&half), seqs(&quarter));
    assert_eq!(all.len(), 20);
    assert!(
        half.iter().all(|q| q % 2 == 0) && half.len() == 10,
        "{half:?}"
    );
    assert!(
        quarter.iter().all(|q| q % 4 == 0) && quarter.len() == 5,
        "{quarter:?}"
    );
    assert!(quarter.iter().all(|q| half.contains(q)), "nested");
    // The listing counts what each left out.
    let listing = s.list().expect("list");
    let mut out: Vec<u64> = listing.subscriptions.iter().map(|x| x.scaled_out).collect();
    out.sort();
    assert_eq!(out, vec![0, 10, 15]);
}

#[test]
fn a_minimum_interval_thins_a_stream_by_source_time() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let slow = s
        .subscribe("/t/**")
        .qos("min_interval", "50ms")
        .receiver()
        .expect("subscribe");
    let p = s.declare_publisher("/t/pub").expect("publisher");
    // Source times 0, 10, …, 190 ms: one in five passes.
    let base = 1_700_000_000_000_000_000u64;
    for i in 0..20u64 {
        let mut e = tagwire::Event::new("/t/x", format!("{i}"));
        e.header.source_time_ns = base + i * 10_000_000;
        p.send(e).expect("send");
    }
    let got = seqs(&slow);
    assert_eq!(got.len(), 4, "{got:?}");
}

#[test]
fn absurd_scaling_values_are_refused_by_name() {
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    for (k, v, needle) in [
        ("scale", "0", "must be 1..=1000000"),
        ("scale", "1000001", "must be 1..=1000000"),
        ("scale", "half", "must be 1..=1000000"),
        ("min_interval", "2h", "0..=1h"),
        ("min_interval", "fast", "duration"),
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
fn a_transform_plug_in_scales_frames_for_the_subscribers_that_ask_and_only_them() {
    use tagwire::router::transform::{parse_raw, raw_frame, RAW_HEADER_LEN};
    let er = tagwire::EmbeddedRouter::start().expect("embedded");
    let s = er.session().expect("session");
    let plain = s.subscribe("/video/**").receiver().expect("subscribe");
    let small_a = s
        .subscribe("/video/**")
        .qos("transform", "downscale:2")
        .receiver()
        .expect("downscale");
    let small_b = s
        .subscribe("/video/**")
        .qos("transform", "downscale:2")
        .receiver()
        .expect("downscale");
    let p = s.declare_publisher("/video/cam").expect("publisher");
    let frame = raw_frame(4, 2, 1, &[10, 10, 30, 30, 10, 10, 30, 30]);
    p.publish("/video/f", frame.clone()).expect("publish");
    p.publish("/video/f", &b"not a frame"[..]).expect("publish");
    let got = |sub: &Subscriber| {
        let mut v = Vec::new();
        while let Some(x) = sub.recv_timeout(Duration::from_millis(300)).expect("recv") {
            v.push(x.payload().to_vec());
        }
        v
    };
    let plain = got(&plain);
    assert_eq!(plain.len(), 2, "the plain subscriber gets both, untouched");
    assert_eq!(plain[0], frame);
    for sub in [&small_a, &small_b] {
        let v = got(sub);
        assert_eq!(v.len(), 1, "the bad payload is skipped for it alone");
        assert_eq!(parse_raw(&v[0]), Ok((2, 1, 1)));
        assert_eq!(&v[0][RAW_HEADER_LEN..], &[10, 30]);
    }
    let listing = s.list().expect("list");
    let errors: Vec<u64> = listing
        .subscriptions
        .iter()
        .filter(|x| x.transform.is_some())
        .map(|x| x.transform_errors)
        .collect();
    assert_eq!(errors, vec![1, 1]);
    for (spec, needle) in [("blur:3", "unknown plug-in"), ("downscale:1", "2..=16")] {
        match s.subscribe("/x").qos("transform", spec).receiver() {
            Err(Error::Refused { message, .. }) => assert!(message.contains(needle), "{message}"),
            other => panic!("{spec} should be refused, got {:?}", other.map(|_| ())),
        }
    }
}
