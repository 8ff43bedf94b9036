//! SWIM membership between real daemons on the netns testbed
//! (docs/testbed.md, docs/federation.md "Membership, failure detection and
//! discovery"): daemons listening on every interface still gossip a routable
//! address, a restarted daemon replaces its predecessor everywhere, and a cut
//! daemon that comes back neither takes healthy daemons down with it nor
//! leaves membership split. Needs root, iproute2 and nft; without them these
//! tests FAIL with a message saying how to get them. `.ci/run` runs them.
//!
//! `NETNS_BIN_DIR=DIR` (or `SWIM_NETNS_BIN_DIR`) runs the `tagwired` and
//! `tagwire` found in DIR instead of this build's (to check that a test fails
//! on an older build); the daemons and helpers are `common/netns.rs`.
//!
//! A host is cut with an nftables table in its namespace that drops
//! everything but loopback (netem is not needed), and healed by deleting it.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::{
    knows_interest_of, link_count, link_to, others, printed, serial, testbed, Daemons, Network,
    PORT, WAIT,
};
use tagwire_testbed::{Host, Testbed};

const TOKEN: &str = "swim-netns-test-token-0123456789abcdef";

/// Links by token, the default idle timeout (so that only SWIM closes a cut
/// link early).
const DAEMONS: Daemons = Daemons {
    token: TOKEN,
    extra_config: "",
    listen: None,
};

fn tagwire(h: &Host, args: &[&str]) -> Command {
    common::netns::tagwire(h, TOKEN, args)
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The gossip addresses `f`'s members have.
fn member_addrs(f: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = strings(&f["members"])
        .iter()
        .filter_map(|m| m.split_once(' ').map(|(_, a)| a.to_owned()))
        .collect();
    v.sort();
    v
}

/// Cuts host `i` off (everything but loopback dropped, both ways) or heals it.
fn cut(tb: &Testbed, i: usize, on: bool) {
    let script = if on {
        "table inet swimcut {\n chain in { type filter hook input priority -10; policy drop; iif lo accept; }\n chain out { type filter hook output priority -10; policy drop; oif lo accept; }\n}\n".to_owned()
    } else {
        "delete table inet swimcut\n".to_owned()
    };
    nft(tb, i, &script, if on { "cut" } else { "heal" });
}

/// Drops (or stops dropping) what host `i` exchanges with the hosts `from`.
fn separate(tb: &Testbed, i: usize, from: &[usize], on: bool) {
    let script = if on {
        let set: Vec<String> = from
            .iter()
            .map(|&j| tb.host(j).addr().to_string())
            .collect();
        let set = set.join(", ");
        format!(
            "table inet swimpart {{\n chain in {{ type filter hook input priority -10; ip saddr {{ {set} }} drop; }}\n chain out {{ type filter hook output priority -10; ip daddr {{ {set} }} drop; }}\n}}\n"
        )
    } else {
        "delete table inet swimpart\n".to_owned()
    };
    nft(tb, i, &script, if on { "partition" } else { "heal" });
}

/// Runs an nft script in host `i`.
fn nft(tb: &Testbed, i: usize, script: &str, what: &str) {
    let path = std::env::temp_dir().join(format!("swimnft-{}-{i}-{what}.nft", std::process::id()));
    std::fs::write(&path, script).expect("write nft script");
    let mut c = Command::new("nft");
    c.arg("-f").arg(&path);
    let out = tb
        .host(i)
        .output(&c, WAIT)
        .unwrap_or_else(|e| panic!("nft (apt-get install -y nftables): {e}"));
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "nft -f ({what}): {} (apt-get install -y nftables)",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn daemons_listening_on_every_interface_gossip_a_routable_address_and_see_each_other() {
    let _g = serial();
    let tb = testbed(3);
    let net = Network::start(
        &tb,
        Daemons {
            listen: Some("0.0.0.0:7700"),
            ..DAEMONS
        },
        &[(0, 1), (1, 2), (2, 0)],
    );
    net.wait_until(
        &[0, 1, 2],
        WAIT,
        "every daemon has the two others as members at their host addresses",
        |i, f| member_addrs(f) == others(&tb, i),
    );
    for i in 0..3 {
        let f = net.federation(i);
        assert_eq!(f["bad_datagrams"], 0, "d{i} refused gossip: {f}");
    }
}

/// "name@node" of the adverts `f` lists under `name`.
fn adverts_named(f: &serde_json::Value, name: &str) -> Vec<serde_json::Value> {
    f["known"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["name"] == name)
        .map(|d| d["node"].clone())
        .collect()
}

#[test]
fn a_killed_daemons_advert_is_dropped_and_its_restart_replaces_it_everywhere() {
    let _g = serial();
    let tb = testbed(3);
    // A triangle, started last to first (each dialing one already up).
    let mut net = Network::start_in_order(&tb, DAEMONS, &[(0, 1), (1, 2), (2, 0)], vec![2, 1, 0]);
    net.wait_until(
        &[0, 1, 2],
        WAIT,
        "every daemon has two members and knows three daemons",
        |_, f| strings(&f["members"]).len() == 2 && f["daemons"] == 3,
    );
    let old = net.federation(1)["node"].clone();
    net.kill(1);
    // d0 and d2 each still hold an advert (the other's) that names d1 as a
    // neighbour when their own link to d1 closes, so d1's stays reachable
    // then; once both have updated it is unreachable, and must go.
    let took = net.wait_until(
        &[0, 2],
        Duration::from_secs(40),
        "the killed daemon's advert is dropped",
        |_, f| adverts_named(f, "d1").is_empty() && f["daemons"] == 2,
    );
    eprintln!("the killed daemon's advert was dropped {took:?} after the kill");
    net.start_one(1);
    let new = net.federation(1)["node"].clone();
    assert_ne!(old, new, "a restarted daemon is a new node");
    let new_id = new.as_str().unwrap_or_default().to_owned();
    let took = net.wait_until(
        &[0, 1, 2],
        Duration::from_secs(30),
        "every daemon knows d1 once, as its new node, in its adverts and its members",
        |i, f| {
            let members = strings(&f["members"]);
            let members_ok =
                i == 1 || (members.len() == 2 && members.iter().any(|m| m.starts_with(&new_id)));
            adverts_named(f, "d1") == vec![new.clone()] && members_ok && f["daemons"] == 3
        },
    );
    eprintln!("the restarted daemon replaced its predecessor everywhere {took:?} after it started");
}

#[test]
fn daemons_started_one_after_another_form_one_membership() {
    let _g = serial();
    let tb = testbed(3);
    // d0 announces to d1 and d1 to d2 before they listen; only d2's
    // announce to d0 arrives.
    let net = Network::start(&tb, DAEMONS, &[(0, 1), (1, 2), (2, 0)]);
    let took = net.wait_until(
        &[0, 1, 2],
        WAIT,
        "every daemon has the two others as members",
        |i, f| member_addrs(f) == others(&tb, i),
    );
    eprintln!("one membership {took:?} after the last daemon started");
    // docs/federation.md: `list --links --json` has them under `members`,
    // the whole listing (`list --json`) under `federation.members`.
    for i in 0..3 {
        let whole = net.listing(i);
        assert_eq!(
            member_addrs(&whole["federation"]),
            others(&tb, i),
            "d{i}'s `tagwire list --json` lists the members at federation.members: {whole}"
        );
    }
}

#[test]
fn healing_a_cut_daemon_keeps_healthy_links_and_membership_heals() {
    let _g = serial();
    let tb = testbed(3);
    // Started last to first, each dialing one already up, so that the
    // membership is whole before the cut.
    let net = Network::start_in_order(&tb, DAEMONS, &[(0, 1), (1, 2), (2, 0)], vec![2, 1, 0]);
    net.wait_until(
        &[0, 1, 2],
        WAIT,
        "every daemon has two members and two links",
        |_, f| strings(&f["members"]).len() == 2 && link_count(f) == 2,
    );
    let link_02 = |f: &serde_json::Value| link_to(f, "d2");
    let before = link_02(&net.federation(0));
    assert!(before.is_some(), "d0 links d2");
    // A control stream between the pair the cut never touches: d0 → d2,
    // 100 events/s for 22 s, across the cut (10 s) and the heal.
    let count = 2200;
    let h2 = tb.host(2);
    let sub = h2
        .spawn(&tagwire(
            h2,
            &["sub", "/control/**", "-n", &count.to_string()],
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    net.wait_until(&[0], WAIT, "d0 knows d2's interest", |_, f| {
        knows_interest_of(f, "d2")
    });
    let h0 = tb.host(0);
    let publisher = h0
        .spawn(&tagwire(
            h0,
            &[
                "pub",
                "/control/x",
                "c",
                "-n",
                &count.to_string(),
                "-r",
                "100",
            ],
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_secs(2));
    cut(&tb, 1, true);
    std::thread::sleep(Duration::from_secs(10));
    cut(&tb, 1, false);
    let healed = Instant::now();
    // Membership heals, while the stream goes on: every daemon has the two
    // others up again.
    net.wait_until(
        &[0, 1, 2],
        Duration::from_secs(30),
        "membership heals",
        |i, f| member_addrs(f) == others(&tb, i),
    );
    eprintln!(
        "membership whole again {:?} after the heal",
        healed.elapsed()
    );
    let out = publisher
        .finish(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "tagwire pub: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = printed(sub, Duration::from_secs(10))
        .lines()
        .filter(|l| l.starts_with("/control/x"))
        .count();
    let after = link_02(&net.federation(0));
    assert_eq!(
        got,
        count,
        "the subscriber on d2 lost {} of {count} events from d0 though the cut was d1's",
        count - got
    );
    assert_eq!(
        before, after,
        "the d0–d2 link was closed (SWIM declared a healthy daemon down after the heal)"
    );
}

#[test]
fn a_partition_of_two_and_two_heals_into_one_membership() {
    let _g = serial();
    let tb = testbed(4);
    // A ring 0→1→2→3→0, started last to first.
    let net = Network::start_in_order(
        &tb,
        DAEMONS,
        &[(0, 1), (1, 2), (2, 3), (3, 0)],
        vec![3, 2, 1, 0],
    );
    let all = [0, 1, 2, 3];
    net.wait_until(
        &all,
        WAIT,
        "every daemon has the three others as members",
        |i, f| member_addrs(f) == others(&tb, i),
    );
    let peer_conn = |i: usize, peer: &str| link_to(&net.federation(i), peer);
    let before = (peer_conn(0, "d1"), peer_conn(2, "d3"));
    assert!(
        before.0.is_some() && before.1.is_some(),
        "0–1 and 2–3 linked"
    );
    // {0, 1} | {2, 3}, for 10 s.
    separate(&tb, 0, &[2, 3], true);
    separate(&tb, 1, &[2, 3], true);
    net.wait_until(&all, WAIT, "each side sees only its own side", |i, f| {
        member_addrs(f).len() == 1
            && member_addrs(f)[0] == format!("{}:{PORT}", tb.host(i ^ 1).addr())
    });
    std::thread::sleep(Duration::from_secs(10));
    separate(&tb, 0, &[2, 3], false);
    separate(&tb, 1, &[2, 3], false);
    let healed = Instant::now();
    net.wait_until(
        &all,
        Duration::from_secs(30),
        "one membership again",
        |i, f| member_addrs(f) == others(&tb, i),
    );
    eprintln!("one membership {:?} after the heal", healed.elapsed());
    let after = (peer_conn(0, "d1"), peer_conn(2, "d3"));
    assert_eq!(
        before, after,
        "a link within one side was closed (connections of d0–d1 and d2–d3 before and after)"
    );
}

#[test]
fn a_daemon_whose_peers_never_answer_gossip_warns_naming_the_udp_port() {
    let _g = serial();
    let tb = testbed(2);
    // Both hosts drop gossip (UDP 7700) but not links (TCP).
    for i in 0..2 {
        nft(
            &tb,
            i,
            "table inet swimudp {\n chain in { type filter hook input priority -10; udp dport 7700 drop; }\n}\n",
            "drop-gossip",
        );
    }
    let mut net = Network::start_in_order(&tb, DAEMONS, &[(0, 1)], vec![1, 0]);
    let d0 = net.daemons[0].as_mut().expect("d0 runs");
    let line = d0
        .wait_for_stderr_line(
            "the warning that no member is up",
            |l| l.contains("WARN") && l.contains("no daemon is up"),
            Duration::from_secs(25),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        line.contains("UDP port 7700") && line.contains("[federation] advertise"),
        "the warning names the port and the setting: {line}"
    );
}
