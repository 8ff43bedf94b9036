//! NETNS (root): `baseline zenoh-mcast` end to end on a namespace LAN of
//! three hosts on one bridge. A subscriber (host 2) gets the publisher's
//! (host 1) events over the multicast group, host 1's link carries one copy
//! of each event, and a ping (host 1) gets answers from a pong (host 2).
//! Without root it fails saying how to run it. The namespaces (`twzm<pid>-*`)
//! are removed when the test ends, also on failure.

use std::process::{Child, Command, Output, Stdio};

/// The namespaces of one test, removed (with every process in them) on drop.
struct Lan {
    prefix: String,
    hosts: usize,
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("run ip");
    assert!(st.success(), "ip {args:?} failed");
}

impl Lan {
    fn new(tag: &str, hosts: usize) -> Lan {
        let lan = Lan {
            prefix: format!("twzm{}{tag}", std::process::id()),
            hosts,
        };
        let br = lan.ns("br");
        ip(&["netns", "add", &br]);
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &br, "link", "set", "br0", "up"]);
        for i in 0..hosts {
            let h = lan.host(i);
            let port = format!("p{i}");
            ip(&["netns", "add", &h]);
            ip(&[
                "link", "add", "eth0", "netns", &h, "type", "veth", "peer", "name", &port, "netns",
                &br,
            ]);
            ip(&["-n", &br, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &br, "link", "set", &port, "up"]);
            let addr = format!("10.208.0.{}/24", i + 1);
            ip(&["-n", &h, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &h, "link", "set", "eth0", "up", "multicast", "on"]);
            ip(&["-n", &h, "link", "set", "lo", "up"]);
            ip(&["-n", &h, "route", "add", "224.0.0.0/4", "dev", "eth0"]);
        }
        lan
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn host(&self, i: usize) -> String {
        self.ns(&format!("h{i}"))
    }

    /// `baseline zenoh-mcast ARGS` on host `i`.
    fn baseline(&self, i: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.host(i),
            env!("CARGO_BIN_EXE_baseline"),
        ])
        .arg("zenoh-mcast")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    }

    fn counter(&self, i: usize, name: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.host(i), "cat"])
            .arg(format!("/sys/class/net/eth0/statistics/{name}"))
            .output()
            .expect("read a link counter");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a number")
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        let names = (0..self.hosts).map(|i| self.host(i)).chain([self.ns("br")]);
        for n in names {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &n]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", &n]).status();
        }
    }
}

/// Fails the test, saying how to run it, unless it runs as root.
fn require_root() {
    assert!(
        is_root(),
        "this test needs root: it creates network namespaces and a bridge. Run it as root, e.g. \
         `cd bench && sudo -E env \"PATH=$PATH\" cargo test --release --test zenoh_mcast_netns` \
         (this machine's sessions run as root)"
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

fn json(out: Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {text}"))
}

fn wait(child: Child, what: &str) -> serde_json::Value {
    json(child.wait_with_output().expect("wait for a role"), what)
}

#[test]
fn a_subscriber_gets_the_stream_over_the_group_one_copy_on_the_wire() {
    require_root();
    let lan = Lan::new("f", 3);
    let group = "udp/224.0.6.1:17850#iface=eth0";
    let sub = lan
        .baseline(1, &["sub", "--group", group, "--wait", "20"])
        .spawn()
        .expect("start the subscriber");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let tx0 = lan.counter(0, "tx_bytes");
    let publisher = lan
        .baseline(0, &["pub", "--group", group, "--duration", "1"])
        .output()
        .expect("run the publisher");
    let publisher = json(publisher, "pub");
    let sub = wait(sub, "sub");
    let tx = lan.counter(0, "tx_bytes") - tx0;
    let sent = publisher["sent"].as_u64().expect("sent");
    let received = sub["received"].as_u64().expect("received");
    assert!(sent > 1000, "{publisher}");
    assert!(received > 0 && received <= sent, "{sub} of {publisher}");
    // One copy per event plus Zenoh's framing: well under two payloads.
    assert!(
        tx < sent * 128,
        "{tx} bytes on host 0's link for {sent} events"
    );
}

#[test]
fn ping_gets_answers_from_pong_over_the_group() {
    require_root();
    let lan = Lan::new("l", 2);
    let group = "udp/224.0.6.2:17851#iface=eth0";
    let pong = lan
        .baseline(1, &["pong", "--group", group, "--wait", "20"])
        .spawn()
        .expect("start the pong");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let ping = lan
        .baseline(
            0,
            &[
                "ping",
                "--group",
                group,
                "--duration",
                "1.5",
                "--wait",
                "20",
            ],
        )
        .output()
        .expect("run the ping");
    let ping = json(ping, "ping");
    let pong = wait(pong, "pong");
    assert!(ping["samples"].as_u64().expect("samples") > 0, "{ping}");
    assert!(ping["rtt_p50_us"].as_f64().expect("p50") > 0.0, "{ping}");
    assert!(pong["echoed"].as_u64().expect("echoed") > 0, "{pong}");
}
