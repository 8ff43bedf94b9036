//! Shared memory across identities (issue 24, items 1 and 4): a region's
//! fd is read-write, so it goes only to connections of its publisher's
//! identity; a subscriber of another identity gets every payload as a copy
//! over the socket, never the fd (it cannot alter what others receive),
//! and takes none of the region's pin rows. One identity's publishers hold
//! at most their quota of regions, so another identity's publisher still
//! gets one. See `docs/shm.md` ("Trust") and `docs/security.md`.

mod common;

use std::time::Duration;

use common::tempdir::Dir;
use tagwire::router::config::{AclRule, AuthConfig, TokenConfig};
use tagwire::router::{Limits, Router, RouterConfig, RouterHandle};
use tagwire::{Session, ShmMode};

const WAIT: Duration = Duration::from_secs(10);
const BOB: &str = "bob-token-0123456789abcdef";

/// A router on a Unix socket where the daemon's owner (this process's
/// uid, no token) may do everything and `token:bob` may subscribe to
/// everything and publish under `/bob/**`.
struct Daemon {
    router: RouterHandle,
    url: String,
    _dir: Dir,
}

fn daemon(limits: Limits) -> Daemon {
    let dir = Dir::new("shm-trust");
    let path = dir.0.join("tagwired.sock");
    let router = Router::start(RouterConfig {
        tcp: None,
        unix: Some(path.clone()),
        limits,
        auth: AuthConfig {
            tokens: vec![TokenConfig {
                name: "bob".into(),
                token: Some(BOB.into()),
                file: None,
            }],
            ..AuthConfig::default()
        },
        acl: vec![AclRule {
            identity: "token:bob".into(),
            publish: vec!["/bob/**".into()],
            subscribe: vec!["/**".into()],
            admin: false,
        }],
        ..RouterConfig::default()
    })
    .expect("start router");
    Daemon {
        router,
        url: format!("unix://{}", path.display()),
        _dir: dir,
    }
}

fn owner(url: &str) -> Session {
    Session::builder()
        .shm(ShmMode::Auto)
        .shm_threshold(0)
        .connect(url)
        .expect("owner session")
}

fn bob(url: &str) -> Session {
    Session::builder()
        .shm(ShmMode::Auto)
        .shm_threshold(0)
        .token(BOB)
        .connect(url)
        .expect("bob's session")
}

#[test]
fn a_subscriber_of_another_identity_never_gets_the_region_and_reads_copies() {
    let d = daemon(Limits::default());
    let publisher_session = owner(&d.url);
    let reader = owner(&d.url);
    let stranger = bob(&d.url);
    let own = reader.subscribe("/trust/t").receiver().expect("subscribe");
    let theirs = stranger
        .subscribe("/trust/t")
        .receiver()
        .expect("bob subscribes");
    let p = publisher_session
        .declare_publisher("/trust/pub")
        .expect("declare");
    assert!(p.uses_shm(), "the owner's publisher has a region");
    for i in 0..50u8 {
        p.publish("/trust/t", vec![i; 4096]).expect("publish");
        let a = own.recv_timeout(WAIT).expect("recv").expect("event");
        let b = theirs.recv_timeout(WAIT).expect("recv").expect("event");
        assert_eq!(&a.payload()[..], &[i; 4096][..]);
        assert_eq!(&b.payload()[..], &[i; 4096][..]);
        assert!(
            a.is_in_place(),
            "the publisher's own identity reads in place"
        );
        assert!(
            !b.is_in_place(),
            "another identity's subscriber got a reference into the owner's region (and its read-write fd)"
        );
    }
    assert_eq!(stranger.shm_stats().in_place, 0);
    assert_eq!(
        stranger.shm_stats().unreadable,
        0,
        "bob was sent no reference"
    );
    let listed = publisher_session.list().expect("list").shm;
    assert_eq!(
        listed.rows_open, 1,
        "a pin row (and the fd) for the owner's reader only"
    );
    d.router.shutdown();
}

/// Set in the child process of the test below: the daemon's URL.
const CHILD_URL: &str = "TAGWIRE_SHM_TRUST_CHILD_URL";

/// The shared-memory region fds open in this process (`/memfd:tagwire-shm`),
/// and how many of them reopen read-write through `/proc/self/fd`.
fn region_fds() -> (usize, usize) {
    let (mut open, mut writable) = (0, 0);
    for entry in std::fs::read_dir("/proc/self/fd").expect("read /proc/self/fd") {
        let Ok(entry) = entry else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.to_string_lossy().starts_with("/memfd:tagwire-shm") {
            open += 1;
            let rw = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(entry.path());
            writable += usize::from(rw.is_ok());
        }
    }
    (open, writable)
}

/// The attack of issue 24, item 1, in a process of its own: a subscriber of
/// another identity reads the owner's stream, then looks for the region's
/// memfd among its fds to map it writable. It must find none.
#[test]
fn another_identitys_subscriber_process_is_never_sent_the_region_fd() {
    use std::io::{BufRead, BufReader, Write};
    if let Ok(url) = std::env::var(CHILD_URL) {
        // The child: bob subscribes, says so, reads 20 events, reports its fds.
        let s = bob(&url);
        let sub = s.subscribe("/trust/proc").receiver().expect("subscribe");
        println!("READY");
        std::io::stdout().flush().expect("flush");
        let mut got = 0;
        while got < 20 {
            match sub.recv_timeout(WAIT) {
                Ok(Some(_)) => got += 1,
                _ => break,
            }
        }
        let (open, writable) = region_fds();
        println!("GOT {got} FDS {open} WRITABLE {writable}");
        return;
    }
    let d = daemon(Limits::default());
    let publisher_session = owner(&d.url);
    let reader = owner(&d.url);
    let own = reader
        .subscribe("/trust/proc")
        .receiver()
        .expect("subscribe");
    let p = publisher_session
        .declare_publisher("/trust/proc/pub")
        .expect("declare");
    assert!(p.uses_shm());
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "another_identitys_subscriber_process_is_never_sent_the_region_fd",
            "--nocapture",
        ])
        .env(CHILD_URL, &d.url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bob's process");
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    let mut report = None;
    let mut published = false;
    for line in lines.by_ref() {
        let line = line.expect("read the child's output");
        if line == "READY" && !published {
            published = true;
            for i in 0..20u8 {
                p.publish("/trust/proc", vec![i; 2048]).expect("publish");
                let s = own.recv_timeout(WAIT).expect("recv").expect("event");
                assert!(s.is_in_place());
            }
        } else if line.starts_with("GOT ") {
            report = Some(line);
            break;
        }
    }
    let status = child.wait().expect("wait for bob's process");
    assert!(status.success(), "bob's process failed");
    let report = report.expect("bob's process reported");
    assert_eq!(
        report, "GOT 20 FDS 0 WRITABLE 0",
        "bob's process got the owner's region fd (and could map it writable)"
    );
    d.router.shutdown();
}

#[test]
fn connections_of_another_identity_take_no_pin_row_of_a_publishers_region() {
    let d = daemon(Limits::default());
    let publisher_session = owner(&d.url);
    let p = publisher_session
        .declare_publisher("/trust/rows/pub")
        .expect("declare");
    assert!(p.uses_shm());
    // More of bob's connections than the region has pin rows (8 by
    // default: the daemon's and 7), each reading one event first.
    let bobs: Vec<_> = (0..8)
        .map(|_| {
            let s = bob(&d.url);
            let sub = s.subscribe("/trust/rows").receiver().expect("subscribe");
            (s, sub)
        })
        .collect();
    p.publish("/trust/rows", vec![7u8; 256]).expect("publish");
    for (_, sub) in &bobs {
        let got = sub.recv_timeout(WAIT).expect("recv").expect("event");
        assert_eq!(&got.payload()[..], &[7u8; 256][..]);
    }
    // The owner's own subscriber still gets a row and reads in place.
    let reader = owner(&d.url);
    let own = reader
        .subscribe("/trust/rows")
        .receiver()
        .expect("subscribe");
    p.publish("/trust/rows", vec![8u8; 256]).expect("publish");
    let got = own.recv_timeout(WAIT).expect("recv").expect("event");
    assert_eq!(&got.payload()[..], &[8u8; 256][..]);
    assert!(
        got.is_in_place(),
        "another identity's connections took every pin row of the owner's region"
    );
    for (_, sub) in &bobs {
        let got = sub.recv_timeout(WAIT).expect("recv").expect("event");
        assert!(!got.is_in_place());
    }
    d.router.shutdown();
}

#[test]
fn one_identity_holds_at_most_its_quota_of_regions_and_another_still_gets_one() {
    // 8 regions in all: a quarter, 2, per identity.
    let d = daemon(Limits {
        shm_max_regions: 8,
        ..Limits::default()
    });
    let greedy = bob(&d.url);
    let mut held = Vec::new();
    for i in 0..2 {
        let p = greedy
            .declare_publisher(&format!("/bob/pub{i}"))
            .expect("declare");
        assert!(p.uses_shm(), "bob's publisher {i} has a region");
        held.push(p);
    }
    // The third falls back to the socket (`auto`) or is refused naming the quota.
    let third = greedy.declare_publisher("/bob/pub2").expect("declare");
    assert!(
        !third.uses_shm(),
        "one identity took a region beyond its quota"
    );
    let err = greedy
        .declare_publisher_with("/bob/pub3", ShmMode::Require)
        .expect_err("shm=require beyond the quota");
    assert!(
        err.to_string().contains("shm_max_regions_per_identity"),
        "{err}"
    );
    // Publishing still works over the socket.
    let watcher = owner(&d.url);
    let sub = watcher.subscribe("/bob/**").receiver().expect("subscribe");
    third
        .publish("/bob/t", b"over the socket".to_vec())
        .expect("publish");
    let got = sub.recv_timeout(WAIT).expect("recv").expect("event");
    assert_eq!(&got.payload()[..], b"over the socket");
    // The owner's publisher still gets a region.
    let o = owner(&d.url);
    let p = o.declare_publisher("/owner/pub").expect("declare");
    assert!(
        p.uses_shm(),
        "another identity's publisher was refused a region"
    );
    assert_eq!(watcher.list().expect("list").shm.regions_open, 3);
    d.router.shutdown();
}
