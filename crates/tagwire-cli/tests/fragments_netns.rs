//! A large reliable event over a link cut twice during the transfer
//! (issue 25 item 5; docs/reliability.md "Large payloads"), on the netns
//! testbed: three `tagwired` in a triangle d0–d1–d2, `reliability =
//! reliable` on their daemon layer, d0's egress shaped to 80 Mbit/s so the
//! transfer takes seconds. `tagwire pub --file` publishes a 64 MiB file of
//! random bytes at d0 (`FRAG_NETNS_MIB` sets another size, up to 4096: the
//! client connections carry it in pieces too; `FRAG_NETNS_RATE` d0's rate,
//! `FRAG_NETNS_TIMEOUT` the seconds each end may take, for the 2 GiB run of
//! `scripts/big-transfer.sh`); `tagwire sub --save` at d1 writes what
//! arrives, and both files' SHA-256 are compared. While the
//! event crosses, the d0–d1 link is cut (blackhole routes) until d0 drops
//! it (the event goes on through d2), healed, and cut again. The file must
//! arrive byte for byte, and the daemons' counters show the resume points
//! (`resumes_sent`, `bytes_skipped`; the daemons log each one: run with
//! `NETNS_SHOW_LOGS=1` to see them).
//!
//! Needs root, iproute2 and tc; without them this test FAILS with a message
//! saying how to get them. `.ci/run` runs it.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::{link_count, serial, testbed, Cuts, Daemons, Network, WAIT};
use tagwire_testbed::Testbed;

const TOKEN: &str = "fragments-netns-test-token-0123456789";

const SETUP: Daemons = Daemons {
    token: TOKEN,
    // The first lines go into [federation] (after its peers).
    extra_config: "reliable_window_bytes = 536870912\n\
                   [qos]\nreliability = \"reliable\"\n\
                   [limits]\nidle_timeout = 2\nmax_frame = 268435456\n\
                   max_buffered_bytes = 2147483648\nmax_queue_bytes = 536870912\n",
    listen: None,
};

/// Above 255 MiB (the client frame): the daemons hold the whole event while
/// they pass it on (docs/reliability.md), so every bound that counts it is
/// raised above it.
fn setup_for(mib: u64) -> Daemons {
    if mib <= 255 {
        return SETUP;
    }
    let b = (mib + 256) << 20;
    let config = format!(
        "reliable_window_bytes = {b}\nfragment_max_bytes = {b}\n\
         [qos]\nreliability = \"reliable\"\n\
         [limits]\nidle_timeout = 2\nmax_frame = 268435456\n\
         max_buffered_bytes = {}\nmax_queue_bytes = {b}\n",
        3 * b
    );
    Daemons {
        extra_config: Box::leak(config.into_boxed_str()),
        ..SETUP
    }
}

/// A file's SHA-256, by `sha256sum` (streams: no 2 GiB in this process).
fn sha256(p: &std::path::Path) -> String {
    let out = Command::new("sha256sum")
        .arg(p)
        .output()
        .unwrap_or_else(|e| panic!("sha256sum (coreutils) runs: {e}"));
    assert!(out.status.success(), "sha256sum {}", p.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Runs `ip`/`tc` on host `h`, failing the test naming the command.
fn run_on(tb: &Testbed, h: usize, prog: &str, args: &[&str]) {
    let mut c = Command::new(prog);
    c.args(args);
    let out = tb
        .host(h)
        .output(&c, WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{prog} {} on d{h}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Cuts d0–d1 until d0 has dropped the link, then heals it and waits until
/// the link is back.
fn cut_until_dropped(net: &Network<'_>, tb: &Testbed, round: u32) {
    eprintln!("cut {round}: d0–d1");
    let mut cuts = Cuts::new(tb);
    cuts.add(0, 1);
    let dropped = net.wait_until(&[0], WAIT, "d0 drops the cut link", |_, f| {
        link_count(f) == 1
    });
    eprintln!("cut {round}: d0 dropped the link after {dropped:?}");
    std::thread::sleep(Duration::from_secs(2));
    cuts.heal();
    let back = net.wait_until(&[0, 1], WAIT, "the cut link comes back", |_, f| {
        link_count(f) == 2
    });
    eprintln!("cut {round}: d0–d1 back {back:?} after the heal");
}

#[test]
fn a_large_reliable_event_arrives_intact_through_two_cuts_of_its_link_resuming_each_time() {
    let _g = serial();
    let mib: u64 = std::env::var("FRAG_NETNS_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    assert!(
        (1..=4096).contains(&mib),
        "FRAG_NETNS_MIB = {mib}: 1 to 4096 (an event is at most 4 GiB)"
    );
    let rate = std::env::var("FRAG_NETNS_RATE").unwrap_or_else(|_| "80mbit".into());
    let timeout: u64 = std::env::var("FRAG_NETNS_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(240);
    let dir = tempfile::tempdir().expect("tempdir");
    let sent = dir.path().join("sent.bin");
    let got = dir.path().join("got.bin");
    let made = Command::new("head")
        .args(["-c", &(mib << 20).to_string(), "/dev/urandom"])
        .stdout(std::fs::File::create(&sent).expect("create the file"))
        .status()
        .expect("head runs");
    assert!(made.success(), "head -c … /dev/urandom");
    assert_eq!(
        std::fs::metadata(&sent).expect("sent file").len(),
        mib << 20
    );

    let tb = testbed(3);
    let net = Network::start(&tb, setup_for(mib), &[(0, 1), (1, 2), (0, 2)]);
    net.wait_until(
        &[0, 1, 2],
        WAIT,
        "every daemon links both others",
        |_, f| link_count(f) == 2,
    );
    // 80 Mbit/s out of d0: 64 MiB take about 7 s per attempt.
    let iface = tb.host(0).iface();
    run_on(
        &tb,
        0,
        "tc",
        &[
            "qdisc", "replace", "dev", iface, "root", "tbf", "rate", &rate, "burst", "256kb",
            "latency", "500ms",
        ],
    );
    let timeout_s = timeout.to_string();
    let sub_args = [
        "--max-frame",
        "268435456",
        "sub",
        "/big/x",
        "-n",
        "1",
        "--timeout",
        &timeout_s,
        "--save",
        got.to_str().expect("utf-8 path"),
    ];
    let sub = tb
        .host(1)
        .spawn(&net.tagwire(1, &sub_args))
        .unwrap_or_else(|e| panic!("{e}"));
    net.wait_for_interest(&[0, 2], &[1]);
    let start = Instant::now();
    let publisher = tb
        .host(0)
        .spawn(&net.tagwire(
            0,
            &[
                "pub",
                "/big/x",
                "--file",
                sent.to_str().expect("utf-8 path"),
            ],
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    // Part of the event is across when the link is cut.
    std::thread::sleep(Duration::from_secs(3));
    cut_until_dropped(&net, &tb, 1);
    std::thread::sleep(Duration::from_secs(2));
    cut_until_dropped(&net, &tb, 2);
    let out = publisher
        .finish(Duration::from_secs(timeout))
        .unwrap_or_else(|e| panic!("the publisher: {e}"));
    assert!(
        out.status.success(),
        "tagwire pub: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = sub
        .finish(Duration::from_secs(timeout))
        .unwrap_or_else(|e| panic!("the subscriber: {e}"));
    let took = start.elapsed();
    let mut resumes = 0;
    for i in 0..3 {
        let r = &net.federation(i)["reliable"];
        eprintln!("d{i} reliable counters: {r}");
        resumes += r["resumes_sent"].as_u64().unwrap_or(0);
    }
    assert!(
        printed.status.success(),
        "tagwire sub: {}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let arrived = std::fs::metadata(&got).expect("the subscriber saved the payload");
    assert_eq!(arrived.len(), mib << 20, "the whole payload arrived");
    let (want, have) = (sha256(&sent), sha256(&got));
    eprintln!("sha256 sent {want}, saved {have}");
    assert_eq!(want, have, "the payload arrived byte for byte");
    eprintln!("{mib} MiB arrived intact {took:?} after publishing, through two cuts");
    assert!(
        resumes >= 1,
        "at least one daemon resumed the event where it held it (resumes_sent)"
    );
    let _ = run_on_quiet(&tb, iface);
}

/// Removes the shaping (the testbed goes away anyway).
fn run_on_quiet(tb: &Testbed, iface: &str) -> bool {
    let mut c = Command::new("tc");
    c.args(["qdisc", "del", "dev", iface, "root"]);
    tb.host(0).output(&c, WAIT).is_ok()
}
