//! Compression on links between two real daemons (in this process, on
//! loopback): with `compression=lz4` on the publishing daemon, a 64 KiB
//! telemetry event reaches the subscriber on the other daemon byte for byte,
//! crosses the link compressed (the publishing daemon counts it compressed,
//! the other decompressed, and the link's bytes are a fraction of the
//! event's); small events cross as they are (docs/reliability.md,
//! "Compression on links").

use std::time::{Duration, Instant};

use tagwire::router::{FederationConfig, Router, RouterConfig, RouterHandle};
use tagwire::Session;

const WAIT: Duration = Duration::from_secs(10);

fn daemon(name: &str, peers: Vec<String>, qos: &[(&str, &str)]) -> RouterHandle {
    Router::start(RouterConfig {
        name: name.into(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        federation: FederationConfig {
            peers,
            ..FederationConfig::default()
        },
        qos: qos
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..RouterConfig::default()
    })
    .expect("start")
}

fn session(h: &RouterHandle) -> Session {
    Session::connect(&format!("tcp://{}", h.tcp_addr().expect("tcp"))).expect("connect")
}

fn telemetry(len: usize) -> Vec<u8> {
    let mut s = String::new();
    let mut i = 0u64;
    while s.len() < len {
        s.push_str(&format!(
            "{{\"sensor\":\"line{}/temp\",\"value\":{}.{}}}\n",
            i % 8,
            20 + i % 5,
            i % 10
        ));
        i += 1;
    }
    s.truncate(len);
    s.into_bytes()
}

#[test]
fn a_telemetry_event_crosses_a_link_between_two_daemons_compressed_and_arrives_whole() {
    let b = daemon("zb", vec![], &[]);
    let a = daemon(
        "za",
        vec![format!("tcp://{}", b.tcp_addr().expect("tcp"))],
        &[("compression", "lz4")],
    );
    let sb = session(&b);
    let sub = sb.subscribe("/z/**").receiver().expect("subscribe");
    let sa = session(&a);
    let p = sa.declare_publisher("/z/pub").expect("publisher");
    // Small probes (under 1 KiB: not compressed) until the interest is there.
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < WAIT, "nothing crossed the link");
        p.publish("/z/probe", "probe").expect("publish");
        if sub
            .recv_timeout(Duration::from_millis(50))
            .expect("recv")
            .is_some()
        {
            break;
        }
    }
    while sub
        .recv_timeout(Duration::from_millis(300))
        .expect("recv")
        .is_some()
    {}
    let payload = telemetry(64 << 10);
    p.publish("/z/x", payload.clone()).expect("publish");
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("the large event arrives");
    assert_eq!(&got.payload()[..], &payload[..], "byte for byte");
    let fa = sa.list().expect("list").federation.expect("a has a link");
    assert_eq!(fa.compression.compressed, 1, "{:?}", fa.compression);
    assert!(
        fa.compression.wire_bytes * 3 < fa.compression.raw_bytes,
        "{:?}",
        fa.compression
    );
    let fb = sb.list().expect("list").federation.expect("b has a link");
    assert_eq!(fb.compression.decompressed, 1, "{:?}", fb.compression);
    assert_eq!(fb.compression.failed, 0, "{:?}", fb.compression);
}
