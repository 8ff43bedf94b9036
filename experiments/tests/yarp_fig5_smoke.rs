//! netns smoke test of the YARP Fig. 5 benchmark (`experiments/src/bin/yarp_fig5`,
//! run in full by `scripts/yarp-fig5.sh`): one second of each channel,
//! normal and qos, with the load at 70 % of a 10 Mbit/s bottleneck, through
//! the benchmark's own experiment code. It checks behaviour, not timing:
//! every ping is answered, the measured channel is served by the band it
//! asked for, its packets take the bottleneck's high class only when
//! prioritized, and the load crosses the bottleneck meanwhile. The router
//! runs in this process (in host A's namespace) rather than as `tagwired`,
//! whose binary this crate's tests cannot name.
//!
//! Needs root (namespaces, tc, SCHED_FIFO) and iproute2; without them it
//! FAILS saying how to get them (docs/testbed.md).

#[path = "../src/bin/yarp_fig5/experiment.rs"]
mod experiment;

use std::time::Duration;

use experiment::{Mode, Place, Spec, DAEMON, QOS_SCHED};
use tagwire_router::{Router, RouterConfig};
use tagwire_testbed::{Shaping, Testbed, TestbedConfig};

#[test]
fn under_load_qos_pings_use_band_high_and_the_high_class_normal_pings_neither() {
    let tb = Testbed::new(TestbedConfig {
        hosts: 2,
        bottleneck: Some(Shaping {
            rate_kbit: Some(10_000),
            dscp_priority: true,
            ..Shaping::default()
        }),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    tb.mtu_sized_packets().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let token = experiment::random_token().expect("a token from /dev/urandom");
    let a = tb.host(DAEMON);
    let text = experiment::daemon_config(a.addr(), &token, dir.path());
    let config = RouterConfig::from_toml(&text, &dir.path().join("tagwired.toml"))
        .unwrap_or_else(|e| panic!("the benchmark's daemon configuration: {e}\n{text}"));
    let router = a
        .run_in(|| Router::start(config))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("the router starts on host A: {e}"));
    experiment::wait_for_daemon(a, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
    let lanes = experiment::daemon_listing(a, &token)
        .unwrap_or_else(|e| panic!("{e}"))
        .lanes;
    let high = lanes
        .iter()
        .find(|l| l.band == "high")
        .expect("a high lane");
    assert_eq!(
        high.sched_applied,
        QOS_SCHED.to_string(),
        "as root: {high:?}"
    );

    for (run, mode) in [Mode::Normal, Mode::Qos].into_iter().enumerate() {
        let spec = Spec {
            run: run as u32 + 1,
            place: Place::Router,
            mode,
            load_percent: 70,
            link_kbit: 10_000,
            load_size: 8192,
            ping_hz: 100.0,
            ping_size: 64,
            warmup: Duration::from_millis(200),
            duration: Duration::from_secs(1),
        };
        let out = experiment::run(&tb, &token, &spec).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert!(out.pings >= 50, "{mode:?}: only {} pings sent", out.pings);
        assert_eq!(out.pongs, out.pings, "{mode:?}: every ping is echoed");
        assert_eq!(
            out.bands,
            (mode.band().to_owned(), mode.band().to_owned()),
            "{mode:?}: pinger and echo bands"
        );
        assert!(
            out.load_bytes > 0,
            "{mode:?}: the load subscriber got nothing"
        );
        assert!(
            out.sent.normal.bytes > 0,
            "{mode:?}: no load crossed the bottleneck: {:?}",
            out.sent
        );
        let measured = out.rtts_us.len() as u64;
        match mode {
            Mode::Normal => {
                assert_eq!(out.client_sched, "other");
                assert_eq!(
                    out.sent.high.packets, 0,
                    "unmarked pings took the high class: {:?}",
                    out.sent
                );
            }
            Mode::Qos => {
                assert_eq!(out.client_sched, QOS_SCHED.to_string(), "as root");
                // Each ping is one AF42 segment toward host A (its ACKs are
                // AF42 too); the counters bracket the measured window
                // only roughly, hence the margin.
                assert!(
                    out.sent.high.packets >= measured * 9 / 10,
                    "{measured} measured pings, {:?}",
                    out.sent
                );
            }
        }
    }
    drop(router);
}
