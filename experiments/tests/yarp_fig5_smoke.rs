//! netns smoke test of the YARP Fig. 5 benchmark (`experiments/src/bin/yarp_fig5`,
//! run in full by `scripts/yarp-fig5.sh`): one second of each channel,
//! normal and qos, both channels over TCP and then both over UDP (the
//! daemon's `[udp]` listener, `udp://` sessions on the same bands), with
//! the load at 70 % of a 10 Mbit/s bottleneck, through
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

use experiment::{Mode, Place, Spec, Transport, DAEMON, QOS_SCHED, SENDER};
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

    let mut run = 0;
    for transport in [Transport::Tcp, Transport::Udp] {
        for mode in [Mode::Normal, Mode::Qos] {
            run += 1;
            let spec = Spec {
                run,
                place: Place::Router,
                mode,
                load_percent: 70,
                link_kbit: 10_000,
                // Over UDP an event must fit one datagram.
                load_size: match transport {
                    Transport::Tcp => 8192,
                    Transport::Udp => 1200,
                },
                load_burst: match transport {
                    Transport::Tcp => 1,
                    Transport::Udp => 7,
                },
                ping_hz: 100.0,
                ping_size: 64,
                measured: transport,
                load_transport: transport,
                load_host: SENDER,
                pumps_fifo: false,
                warmup: Duration::from_millis(200),
                duration: Duration::from_secs(1),
            };
            let mode = (transport, mode);
            let out =
                experiment::run(&tb, &token, &spec).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            assert!(out.pings >= 50, "{mode:?}: only {} pings sent", out.pings);
            match transport {
                Transport::Tcp => {
                    assert_eq!(out.pongs, out.pings, "{mode:?}: every ping is echoed")
                }
                // Best effort: a datagram may be lost, and is counted, not
                // retransmitted; at 70 % of the link nearly all get through.
                Transport::Udp => assert!(
                    out.pongs * 10 >= out.pings * 9,
                    "{mode:?}: {} pongs for {} pings",
                    out.pongs,
                    out.pings
                ),
            }
            assert_eq!(
                out.bands,
                (mode.1.band().to_owned(), mode.1.band().to_owned()),
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
            match mode.1 {
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
                    // Each ping is one AF42 segment or datagram toward host A
                    // (over TCP its ACKs are AF42 too); the counters bracket the measured window
                    // only roughly, hence the margin.
                    assert!(
                        out.sent.high.packets >= measured * 9 / 10,
                        "{measured} measured pings, {:?}",
                        out.sent
                    );
                }
            }
        }
    }
    drop(router);
}
