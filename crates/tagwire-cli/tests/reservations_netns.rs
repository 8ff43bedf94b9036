//! Bandwidth reservations (`reserve=RATE`, issue 15 item 6) on the netns
//! testbed: a `tagwired` on host 0 with `[bandwidth] interface = "veth0"`,
//! a subscriber on host 1 (so the daemon's deliveries leave by host 0's
//! veth0). Needs root and iproute2; without them these tests FAIL with a
//! message saying how to get them. The last test needs no namespace.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tagwire::Session;
use tagwire_testbed::{Testbed, TestbedConfig};

const TOKEN: &str = "reservations-netns-test-token-0123456789";
const PORT: u16 = 7700;
const WAIT: Duration = Duration::from_secs(20);

/// The testbeds share interface names; one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn config(dir: &Path, bandwidth: &str) -> std::path::PathBuf {
    let text = format!(
        r#"[auth]
local_token = false
[[auth.tokens]]
name = "t"
token = "{TOKEN}"
[[acl]]
identity = "token:t"
publish = ["/**"]
subscribe = ["/**"]
admin = true
{bandwidth}
"#
    );
    let p = dir.join("tagwired.toml");
    std::fs::write(&p, text).expect("write config");
    p
}

fn tagwired(addr: &str, cfg: &Path, dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tagwired"));
    c.args(["--tcp", addr, "--no-unix", "--name", "res"])
        .arg("--config")
        .arg(cfg)
        .env("XDG_RUNTIME_DIR", dir)
        .env("RUST_LOG", "info");
    c
}

fn session(url: &str) -> Session {
    Session::builder()
        .token(TOKEN)
        .connect(url)
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// Bytes class `1:MINOR` (hex) of `dev` in namespace `ns` has sent; `None`
/// if there is no such class.
fn class_bytes(ns: &str, dev: &str, class: &str) -> Option<u64> {
    let out = Command::new("tc")
        .args(["-n", ns, "-s", "class", "show", "dev", dev])
        .output()
        .expect("tc");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.starts_with(&format!("class htb {class} ")) {
            let sent = lines.next()?.trim().strip_prefix("Sent ")?.to_owned();
            return sent.split(' ').next()?.parse().ok();
        }
    }
    None
}

#[test]
fn a_reserved_channels_bytes_go_through_its_class_and_over_capacity_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let tb = Testbed::new(TestbedConfig {
        hosts: 2,
        bottleneck: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        "[bandwidth]\ninterface = \"veth0\"\nlink_rate = \"10mbit\"\n",
    );
    let h0 = tb.host(0);
    let addr = format!("{}:{PORT}", h0.addr());
    let url = format!("tcp://{addr}");
    let mut daemon = h0
        .spawn(&tagwired(&addr, &cfg, dir.path()))
        .unwrap_or_else(|e| panic!("{e}"));
    daemon
        .wait_for_stderr("band normal: listening", WAIT)
        .unwrap_or_else(|e| panic!("daemon did not start: {e}"));

    let u = url.clone();
    let (sub_session, sub) = tb
        .host(1)
        .run_in(move || {
            let s = session(&u);
            let sub = s
                .subscribe("/r/**")
                .qos("reserve", "2mbit")
                .receiver()
                .unwrap_or_else(|e| panic!("reserve=2mbit refused: {e}"));
            (s, sub)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    // The class exists: 1:101, the first reservation's.
    let ns = h0.ns_name().to_owned();
    let before = class_bytes(&ns, "veth0", "1:101").expect("class 1:101 on host 0's veth0");

    let u = url.clone();
    let publisher_session = h0
        .run_in(move || session(&u))
        .unwrap_or_else(|e| panic!("{e}"));
    let publisher = publisher_session
        .declare_publisher("/r/pub")
        .expect("declare publisher");
    const N: usize = 50;
    for _ in 0..N {
        publisher.publish("/r/x", vec![7u8; 1000]).expect("publish");
    }
    let deadline = Instant::now() + WAIT;
    let mut got = 0;
    while got < N && Instant::now() < deadline {
        if sub
            .recv_timeout(Duration::from_millis(200))
            .expect("recv")
            .is_some()
        {
            got += 1;
        }
    }
    assert_eq!(got, N, "events received");
    let sent = class_bytes(&ns, "veth0", "1:101").expect("class 1:101") - before;
    assert!(
        sent >= (N * 1000) as u64,
        "class 1:101 sent {sent} bytes, less than the {} bytes of payload delivered through it",
        N * 1000
    );

    // Over capacity: 2 of 10 mbit are taken, 9 more do not fit.
    let u = url.clone();
    let refusal = tb
        .host(1)
        .run_in(move || {
            let s = session(&u);
            s.subscribe("/r/**")
                .qos("reserve", "9mbit")
                .receiver()
                .err()
                .map(|e| e.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("reserve=9mbit over a 10mbit link with 2mbit reserved must be refused");
    assert!(refusal.contains("capacity"), "{refusal}");

    // A bad rate names itself.
    let refusal = publisher_session
        .subscribe("/r/**")
        .qos("reserve", "10Mbps")
        .receiver()
        .err()
        .map(|e| e.to_string())
        .expect("reserve=10Mbps must be refused");
    assert!(refusal.contains("10Mbps"), "{refusal}");

    // `admin show reservations` lists the band's class.
    let shown = publisher_session
        .show("reservations")
        .expect("show reservations");
    let tagwire::admin::Show::Reservations {
        reservations: tagwire::admin::Reservations::Live { bands, .. },
    } = &shown
    else {
        panic!("expected live reservations, got {shown:?}");
    };
    assert_eq!(bands[0].class, "1:101", "{shown:?}");
    assert_eq!(bands[0].rate_bps, 2_000_000, "{shown:?}");

    // Unsubscribing releases it: the class goes.
    drop(sub);
    drop(sub_session);
    let deadline = Instant::now() + WAIT;
    while class_bytes(&ns, "veth0", "1:101").is_some() {
        assert!(
            Instant::now() < deadline,
            "class 1:101 still there after its only channel closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn without_a_bandwidth_section_reserve_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), "");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut child = tagwired(&addr, &cfg, dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start tagwired");
    let url = format!("tcp://{addr}");
    let deadline = Instant::now() + WAIT;
    let s = loop {
        if let Ok(s) = Session::builder().token(TOKEN).connect(&url) {
            break s;
        }
        assert!(Instant::now() < deadline, "tagwired did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let e = s
        .subscribe("/r/**")
        .qos("reserve", "1mbit")
        .receiver()
        .err()
        .map(|e| e.to_string());
    let _ = child.kill();
    let _ = child.wait();
    let e = e.expect("reserve without [bandwidth] must be refused");
    assert!(e.contains("[bandwidth] interface"), "{e}");
}

/// A daemon without `CAP_NET_ADMIN` (dropped from its bounding set with
/// `setpriv`, util-linux) refuses `reserve=` naming the right it lacks.
#[test]
fn without_cap_net_admin_reserve_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        "[bandwidth]\ninterface = \"lo\"\nlink_rate = \"10mbit\"\n",
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let addr = format!("127.0.0.1:{port}");
    let daemon = tagwired(&addr, &cfg, dir.path());
    let mut c = Command::new("setpriv");
    c.args(["--bounding-set", "-net_admin", "--inh-caps", "-net_admin"])
        .arg(daemon.get_program())
        .args(daemon.get_args())
        .envs(daemon.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stderr(std::process::Stdio::null());
    let mut child = c
        .spawn()
        .expect("setpriv (util-linux) is needed for this test");
    let url = format!("tcp://{addr}");
    let deadline = Instant::now() + WAIT;
    let s = loop {
        if let Ok(s) = Session::builder().token(TOKEN).connect(&url) {
            break s;
        }
        assert!(Instant::now() < deadline, "tagwired did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let e = s
        .subscribe("/r/**")
        .qos("reserve", "1mbit")
        .receiver()
        .err()
        .map(|e| e.to_string());
    let _ = child.kill();
    let _ = child.wait();
    let e = e.expect("reserve without CAP_NET_ADMIN must be refused");
    assert!(e.contains("CAP_NET_ADMIN"), "{e}");
}
