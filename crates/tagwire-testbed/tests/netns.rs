//! netns tests: they need root, `ip`/`tc` (iproute2) and `ping`
//! (iputils-ping). Without them they FAIL with a message saying how to get
//! them (docs/testbed.md); `.ci/run` runs them as root.
//!
//! The delay test also needs the kernel's `netem` qdisc. Where the kernel
//! has none (CONFIG_NET_SCH_NETEM unset and no module), it fails unless
//! `TAGWIRE_TESTBED_SKIP_NETEM=1` acknowledges that; `.ci/run` sets it only
//! after `scripts/netns.sh check netem` found netem missing, and says so.

use std::panic::AssertUnwindSafe;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use tagwire_testbed::{
    existing_namespaces, require_tool, ClassPackets, ClassSent, Shaping, Testbed, TestbedConfig,
    TestbedError, WanLink, WanMechanism,
};

const T: Duration = Duration::from_secs(20);

fn testbed(config: TestbedConfig) -> Testbed {
    Testbed::new(config).unwrap_or_else(|e| panic!("{e}"))
}

fn ping(args: &[&str]) -> Command {
    require_tool("ping", "iputils-ping").unwrap_or_else(|e| panic!("{e}"));
    let mut c = Command::new("ping");
    // -n numeric, -W 2 s per reply, -i 0.2 s between requests.
    c.args(["-n", "-W", "2", "-i", "0.2"]).args(args);
    c
}

/// Round-trip times of the replies in `ping` output, in ms.
fn rtts_ms(out: &str) -> Vec<f64> {
    out.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn hosts_ping_each_other_through_the_router() {
    let tb = testbed(TestbedConfig::default());
    for (from, to) in [(0, 1), (1, 0)] {
        let dst = tb.host(to).addr().to_string();
        let out = tb
            .host(from)
            .output(&ping(&["-c", "2", &dst]), T)
            .unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ping {from} -> {to} failed: {text}");
        // One hop: the router decremented the TTL from 64 to 63.
        assert!(text.contains("ttl=63"), "not routed once: {text}");
    }
}

#[test]
fn netem_delay_is_a_lower_bound_of_ping_rtt() {
    let delay = Duration::from_millis(30);
    let tb = match Testbed::new(TestbedConfig {
        hosts: 2,
        bottleneck: Some(Shaping {
            delay: Some(delay),
            ..Shaping::default()
        }),
    }) {
        Ok(tb) => tb,
        Err(e @ TestbedError::QdiscUnavailable { .. })
            if std::env::var_os("TAGWIRE_TESTBED_SKIP_NETEM").is_some_and(|v| v == "1") =>
        {
            eprintln!("SKIPPED (TAGWIRE_TESTBED_SKIP_NETEM=1): {e}");
            return;
        }
        Err(e) => {
            panic!("{e} (set TAGWIRE_TESTBED_SKIP_NETEM=1 to acknowledge a kernel without netem)")
        }
    };
    let dst = tb.host(1).addr().to_string();
    let out = tb
        .host(0)
        .output(&ping(&["-c", "3", &dst]), T)
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let rtts = rtts_ms(&text);
    assert_eq!(rtts.len(), 3, "three replies expected: {text}");
    for rtt in rtts {
        assert!(
            rtt >= delay.as_secs_f64() * 1e3,
            "RTT {rtt} ms below the {delay:?} delay: {text}"
        );
    }
}

#[test]
fn dscp_marked_packets_take_their_class_at_the_bottleneck() {
    let tb = testbed(TestbedConfig {
        hosts: 2,
        bottleneck: Some(Shaping {
            delay: None,
            rate_kbit: Some(10_000),
            dscp_priority: true,
            loss_percent: None,
        }),
    });
    let dst = tb.host(1).addr().to_string();
    let before = tb
        .bottleneck_class_packets()
        .unwrap_or_else(|e| panic!("{e}"));
    // -Q sets the TOS byte: 0x90 = AF42 (DSCP 36), 0x28 = AF11 (DSCP 10).
    for (tos, count) in [("0x90", "3"), ("0x28", "2"), ("0", "2")] {
        let out = tb
            .host(0)
            .output(&ping(&["-c", count, "-Q", tos, &dst]), T)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let after = tb
        .bottleneck_class_packets()
        .unwrap_or_else(|e| panic!("{e}"));
    let sent = ClassPackets {
        high: after.high - before.high,
        normal: after.normal - before.normal,
        low: after.low - before.low,
    };
    // Echo requests cross the bottleneck (router -> host 1); replies do not.
    assert_eq!(sent.high, 3, "{sent:?}");
    assert_eq!(sent.low, 2, "{sent:?}");
    // Unmarked pings plus ARP and IPv6 neighbour discovery.
    assert!(sent.normal >= 2, "{sent:?}");
}

#[test]
fn shaping_a_host_egress_classifies_what_that_host_sends_and_not_the_router() {
    let tb = testbed(TestbedConfig::default());
    let shaping = Shaping {
        rate_kbit: Some(10_000),
        dscp_priority: true,
        ..Shaping::default()
    };
    tb.shape_egress(0, &shaping)
        .unwrap_or_else(|e| panic!("{e}"));
    tb.mtu_sized_packets().unwrap_or_else(|e| panic!("{e}"));
    let before = tb.egress_class_sent(0).unwrap_or_else(|e| panic!("{e}"));
    let dst = tb.host(1).addr().to_string();
    for (tos, count) in [("0x90", "3"), ("0", "2")] {
        let out = tb
            .host(0)
            .output(&ping(&["-c", count, "-Q", tos, &dst]), T)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let sent = tb
        .egress_class_sent(0)
        .unwrap_or_else(|e| panic!("{e}"))
        .since(&before);
    // Echo requests leave host 0 through its shaped veth0.
    assert_eq!(sent.high.packets, 3, "{sent:?}");
    assert!(sent.high.bytes >= 3 * 84, "{sent:?}");
    assert!(sent.normal.packets >= 2, "{sent:?}");
    assert_eq!(
        sent.link.packets,
        sent.high.packets + sent.normal.packets + sent.low.packets,
        "{sent:?}"
    );
    // The router's port is untouched, and host 1 sends unshaped.
    assert_eq!(
        tb.bottleneck_class_sent().unwrap_or_else(|e| panic!("{e}")),
        ClassSent::default()
    );
    assert_eq!(
        tb.egress_class_sent(1).unwrap_or_else(|e| panic!("{e}")),
        ClassSent::default()
    );
}

#[test]
fn sockets_made_in_run_in_live_in_that_host() {
    let tb = testbed(TestbedConfig::default());
    let server_addr = (tb.host(1).addr(), 7000);
    // The host's address exists only inside its namespace.
    assert!(std::net::TcpListener::bind(server_addr).is_err());
    let listener = tb
        .host(1)
        .run_in(|| std::net::TcpListener::bind(server_addr))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("bind in host 1");
    let client = tb
        .host(0)
        .run_in(|| std::net::TcpStream::connect(server_addr))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("connect from host 0 through the router");
    let (_conn, peer) = listener.accept().expect("accept");
    assert_eq!(peer.ip(), tb.host(0).addr());
    drop(client);
}

/// A WAN link from host 0 to host 1's port 7000: with netem where the
/// kernel has it, else the software relay in the router namespace. Either
/// way a round trip to the path's address takes at least twice the one-way
/// delay (a lower bound only), the far end sees host 0's traffic arrive,
/// and connections to host 1 outside the path are not delayed by it
/// (checked only as "they work": an upper bound would be timing).
#[test]
fn a_wan_link_delays_its_path_and_names_how() {
    use std::io::{Read, Write};
    let tb = testbed(TestbedConfig::default());
    let server = (tb.host(1).addr(), 7000);
    let listener = tb
        .host(1)
        .run_in(|| std::net::TcpListener::bind(server))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("bind in host 1");
    let echo = std::thread::spawn(move || {
        for _ in 0..2 {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut b = [0u8; 64];
            while let Ok(n @ 1..) = s.read(&mut b) {
                if s.write_all(&b[..n]).is_err() {
                    break;
                }
            }
        }
    });
    let d = Duration::from_millis(15);
    let path = tb
        .wan_link(0, 1, &[7000], WanLink::new(d, Duration::from_millis(2)))
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", path.mechanism());
    if path.mechanism() == WanMechanism::SoftwareRelay {
        assert_eq!(path.peer(7000).ip(), &tb.host(0).gateway());
    }
    let target = path.peer(7000);
    let mut s = tb
        .host(0)
        .run_in(|| std::net::TcpStream::connect(target))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("connect through the WAN path");
    s.set_read_timeout(Some(T)).expect("timeout");
    for i in 0..3u8 {
        let start = std::time::Instant::now();
        s.write_all(&[i]).expect("write");
        let mut b = [0u8; 1];
        s.read_exact(&mut b).expect("echo");
        assert_eq!(b[0], i);
        let rtt = start.elapsed();
        assert!(
            rtt >= 2 * (d - Duration::from_millis(2)),
            "round trip {rtt:?} under 2 × (15 − 2) ms"
        );
    }
    drop(s);
    // Direct, outside the path: works.
    let mut direct = tb
        .host(0)
        .run_in(|| std::net::TcpStream::connect(server))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("connect directly");
    direct.set_read_timeout(Some(T)).expect("timeout");
    direct.write_all(b"d").expect("write");
    let mut b = [0u8; 1];
    direct.read_exact(&mut b).expect("echo");
    drop(direct);
    drop(path);
    echo.join().expect("echo thread");
}

fn assert_gone(names: &[String]) {
    let left = existing_namespaces().expect("list /run/netns");
    for n in names {
        assert!(!left.contains(n), "namespace {n} is left behind: {left:?}");
    }
}

#[test]
fn dropping_a_testbed_removes_its_namespaces() {
    let tb = testbed(TestbedConfig {
        hosts: 3,
        bottleneck: None,
    });
    let names = tb.namespaces();
    assert_eq!(names.len(), 4);
    let present = existing_namespaces().expect("list /run/netns");
    assert!(names.iter().all(|n| present.contains(n)), "{present:?}");
    drop(tb);
    assert_gone(&names);
}

/// The state of process `pid`: `None` if it no longer exists, else the
/// state letter of /proc/PID/stat (`Z` for a zombie nobody reaped yet).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim().chars().next()
}

#[test]
fn a_panicking_test_still_removes_its_namespaces_and_processes() {
    let seen: Mutex<Option<(Vec<String>, u32, u32)>> = Mutex::new(None);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let tb = testbed(TestbedConfig::default());
        let child = tb
            .host(0)
            .spawn(Command::new("sleep").arg("1000"))
            .unwrap_or_else(|e| panic!("{e}"));
        // An orphan the test never sees as a child: only the teardown's
        // sweep of the namespace's processes can end it.
        let mut orphan = Command::new("sh");
        orphan.args(["-c", "sleep 1000 >/dev/null 2>&1 & echo $!"]);
        let out = tb
            .host(1)
            .output(&orphan, T)
            .unwrap_or_else(|e| panic!("{e}"));
        let orphan_pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("pid");
        *seen.lock().expect("lock") = Some((tb.namespaces(), child.id(), orphan_pid));
        panic!("the test fails here");
    }));
    assert!(result.is_err(), "the closure was meant to panic");
    let (names, child, orphan) = seen
        .lock()
        .expect("lock")
        .take()
        .expect("set before the panic");
    assert_gone(&names);
    for pid in [child, orphan] {
        let state = process_state(pid);
        assert!(
            state.is_none() || state == Some('Z'),
            "process {pid} still runs: {state:?}"
        );
    }
}

#[test]
fn out_of_range_host_count_is_refused_naming_it() {
    let e = Testbed::new(TestbedConfig {
        hosts: 0,
        bottleneck: None,
    })
    .expect_err("0 hosts");
    assert!(
        matches!(e, TestbedError::BadConfig { .. }) && e.to_string().contains("hosts 0"),
        "{e}"
    );
}
