//! netns tests of `priority::set_dscp` on the wire: TCP between two testbed
//! hosts, captured with tcpdump on the receiving host. They need root,
//! iproute2 and tcpdump, and FAIL with a message saying how to get them
//! (docs/testbed.md); `.ci/run` runs them as root and installs tcpdump.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::Raw;
use tagwire_router::priority::{set_dscp, DSCP_AF42};
use tagwire_testbed::{require_tool, Host, NsChild, Shaping, Testbed, TestbedConfig};

const T: Duration = Duration::from_secs(10);
const PORT: u16 = 7100;
const ROUNDS: usize = 2;

fn testbed(config: TestbedConfig) -> Testbed {
    Testbed::new(config).unwrap_or_else(|e| panic!("{e}"))
}

/// tcpdump on `host`'s interface, for the first `count` TCP segments that
/// carry data (PSH) on PORT, both directions; returns once it listens.
fn capture(host: &Host, count: usize) -> NsChild<'_> {
    tcpdump(host, count, &format!("tcp port {PORT}"))
}

/// tcpdump on `host`'s interface for the first `count` data segments (PSH)
/// matching `filter`; returns once it listens.
fn tcpdump<'a>(host: &'a Host, count: usize, filter: &str) -> NsChild<'a> {
    let tcpdump = require_tool("tcpdump", "tcpdump").unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(tcpdump);
    cmd.args([
        "-v",
        "-n",
        "-l",
        "--immediate-mode",
        "-c",
        &count.to_string(),
    ])
    .args(["-i", host.iface()])
    .arg(format!("{filter} and tcp[tcpflags] & tcp-push != 0"));
    let mut child = host.spawn(&cmd).unwrap_or_else(|e| panic!("{e}"));
    child
        .wait_for_stderr("listening on", T)
        .unwrap_or_else(|e| panic!("{e}"));
    child
}

/// `(source address, tos)` of each packet in `tcpdump -v -n` output:
/// `… IP (tos 0x90, ttl 63, …)` then `    10.200.0.2.45678 > 10.200.1.2.7100: …`.
fn packets(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.split(" IP (tos ").nth(1) else {
            continue;
        };
        let tos = rest.split(',').next().unwrap_or("").to_owned();
        let src = lines
            .next()
            .and_then(|l| l.split_whitespace().next())
            .and_then(|s| s.rsplit_once('.'))
            .map(|(ip, _port)| ip.to_owned())
            .unwrap_or_default();
        out.push((src, tos));
    }
    out
}

/// A connection from host 0 to host 1 (a listener there); `client_dscp` and
/// `server_dscp` mark the two ends (None: unmarked). Exchanges ROUNDS
/// request/reply pairs and returns what tcpdump saw on host 1.
fn exchange(tb: &Testbed, client_dscp: Option<u8>, server_dscp: Option<u8>) -> String {
    let (client_host, server_host) = (tb.host(0), tb.host(1));
    let server_addr = (server_host.addr(), PORT);
    let listener = server_host
        .run_in(|| TcpListener::bind(server_addr))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("bind on host 1");
    let dump = capture(server_host, 2 * ROUNDS);
    let mut client = client_host
        .run_in(|| TcpStream::connect_timeout(&server_addr.into(), T))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("connect from host 0");
    let (mut server, _) = listener.accept().expect("accept");
    for s in [&client, &server] {
        s.set_read_timeout(Some(T)).expect("timeout");
    }
    if let Some(d) = client_dscp {
        set_dscp(&client, d).expect("mark the client");
    }
    if let Some(d) = server_dscp {
        set_dscp(&server, d).expect("mark the server");
    }
    let mut buf = [0u8; 5];
    for _ in 0..ROUNDS {
        client.write_all(b"ping!").expect("client writes");
        server.read_exact(&mut buf).expect("server reads");
        server.write_all(b"pong!").expect("server writes");
        client.read_exact(&mut buf).expect("client reads");
    }
    let out = dump.finish(T).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tcpdump failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn only_the_marked_end_sends_tos_0x90_on_the_wire() {
    let tb = testbed(TestbedConfig::default());
    let text = exchange(&tb, Some(DSCP_AF42), None);
    let seen = packets(&text);
    let (client, server) = (tb.host(0).addr().to_string(), tb.host(1).addr().to_string());
    assert_eq!(seen.len(), 2 * ROUNDS, "{text}");
    for (src, tos) in &seen {
        let want = if *src == client { "0x90" } else { "0x0" };
        assert!(*src == client || *src == server, "{src}: {text}");
        assert_eq!(tos, want, "packet from {src}: {text}");
    }
}

#[test]
fn both_marked_ends_send_tos_0x90_both_ways() {
    let tb = testbed(TestbedConfig::default());
    let text = exchange(&tb, Some(DSCP_AF42), Some(DSCP_AF42));
    let seen = packets(&text);
    let server = tb.host(1).addr().to_string();
    assert_eq!(seen.len(), 2 * ROUNDS, "{text}");
    assert_eq!(
        seen.iter().filter(|(src, _)| *src == server).count(),
        ROUNDS,
        "replies: {text}"
    );
    for (src, tos) in &seen {
        assert_eq!(tos, "0x90", "packet from {src}: {text}");
    }
}

#[test]
fn af42_marked_tcp_takes_the_high_class_at_the_bottleneck() {
    let tb = testbed(TestbedConfig {
        hosts: 2,
        bottleneck: Some(Shaping {
            delay: None,
            rate_kbit: Some(100_000),
            dscp_priority: true,
            loss_percent: None,
        }),
    });
    let before = tb
        .bottleneck_class_packets()
        .unwrap_or_else(|e| panic!("{e}"));
    exchange(&tb, Some(DSCP_AF42), None);
    let after = tb
        .bottleneck_class_packets()
        .unwrap_or_else(|e| panic!("{e}"));
    // Host 0's requests cross the bottleneck toward host 1 in the high
    // class (the SYN and the first ACK went before the mark, as normal).
    assert!(
        after.high - before.high >= ROUNDS as u64,
        "{before:?} -> {after:?}"
    );
}

/// A raw protocol client from host 0 to the router on host 1's `port`.
fn wire(tb: &Testbed, port: u16, token: &str) -> Raw {
    let addr = (tb.host(1).addr(), port);
    let s = tb
        .host(0)
        .run_in(|| TcpStream::connect_timeout(&addr.into(), T))
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("connect to the router");
    s.set_nodelay(true).expect("nodelay");
    Raw::welcomed_over(s, token)
}

/// tcpdump on host 1 for the first `count` data segments the router sends
/// from `port`.
fn capture_from(host: &Host, port: u16, count: usize) -> NsChild<'_> {
    tcpdump(
        host,
        count,
        &format!("src host {} and tcp src port {port}", host.addr()),
    )
}

fn tos_seen(dump: NsChild<'_>) -> Vec<String> {
    let out = dump.finish(T).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    packets(&text).into_iter().map(|(_, tos)| tos).collect()
}

/// A router serving every band on host 1, port `base` and up.
fn router_on_host1(tb: &Testbed, base: u16) -> (tagwire_router::RouterHandle, String) {
    let addr = std::net::SocketAddr::from((tb.host(1).addr(), base));
    let h = tb
        .host(1)
        .run_in(|| {
            tagwire_router::Router::start(tagwire_router::RouterConfig {
                tcp: Some(addr),
                unix: None,
                ..tagwire_router::RouterConfig::default()
            })
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("router starts in host 1");
    let token = tagwire_router::local::read_token(&tagwire_router::local::token_path(base))
        .expect("the router's local token");
    (h, token)
}

#[test]
fn the_daemon_marks_each_bands_connections_with_the_bands_dscp() {
    let tb = testbed(TestbedConfig::default());
    let (h, token) = router_on_host1(&tb, 7300);
    let high_port = h
        .bands()
        .iter()
        .find(|(n, _, _)| n == "high")
        .and_then(|(_, t, _)| *t)
        .expect("a high band listener")
        .port();
    let dump = capture_from(tb.host(1), high_port, 2);
    let mut high = wire(&tb, high_port, &token);
    high.declare(1, tagwire_proto::EndpointKind::Subscriber, "/netns/high");
    assert_eq!(
        tos_seen(dump),
        ["0x90", "0x90"],
        "AF42 on the high band's replies"
    );
    drop(h);
}

#[test]
fn admin_qos_changes_a_live_connections_dscp_on_the_wire() {
    let tb = testbed(TestbedConfig::default());
    let (h, token) = router_on_host1(&tb, 7400);
    let dump = capture_from(tb.host(1), 7400, 8);
    let mut c = wire(&tb, 7400, &token).subscriber("/netns/viewer", "/netns/**", &[]);
    // YARP's `prop set … (qos ((dscp EF)))`, from another connection.
    let mut admin = wire(&tb, 7400, &token);
    admin.admin(
        &serde_json::json!({"op": "qos", "target": ["/netns/viewer"], "set": {"dscp": "ef"}}),
    );
    c.ping(7);
    // To the viewer: Challenge (its token proof), Welcome, Ok, Ok in the
    // normal band's CS0; to the admin connection: Challenge, Welcome and the
    // reply, still CS0 (only the viewer's connection changed); then the
    // viewer's Pong, in EF (0xb8).
    assert_eq!(
        tos_seen(dump),
        ["0x0", "0x0", "0x0", "0x0", "0x0", "0x0", "0x0", "0xb8"]
    );
    drop(h);
}
