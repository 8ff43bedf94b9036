//! A peer killed mid-operation: the test binary re-runs itself as the child
//! (env TAGWIRE_SHM_CHILD), which the parent SIGKILLs at a known point.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tagwire_shm::{
    ConsumerConfig, Error, Overload, ProducerConfig, Region, Stream, StreamConfig, NO_DEADLINE,
};

const ROLE: &str = "TAGWIRE_SHM_CHILD";

fn spawn(test: &str, role: &str, extra: &[(&str, String)]) -> (Child, String) {
    let mut cmd = Command::new(std::env::current_exe().expect("test setup or child I/O"));
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("test setup or child I/O");
    let out = child.stdout.take().expect("test setup or child I/O");
    // The child prints "SHM <text>" (after libtest's "test NAME ... ") at the point where it is to be killed (bounded read).
    let line = BufReader::new(out)
        .lines()
        .take(100)
        .map_while(Result::ok)
        .find_map(|l| l.split_once("SHM ").map(|(_, rest)| rest.trim().to_owned()))
        .expect("child reports its state");
    (child, line)
}

fn open_peer_fd(pid: u32, fd: &str) -> OwnedFd {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .expect("test setup or child I/O");
    f.into()
}

fn park() {
    // Bounded: the parent kills us long before this ends.
    std::thread::sleep(Duration::from_secs(30));
}

#[test]
fn producer_killed_mid_write_never_delivers_the_slot() {
    if std::env::var(ROLE).as_deref() == Ok("producer") {
        let (mut p, fd) = Stream::create(StreamConfig::default()).expect("test setup or child I/O");
        let mut loan = p.loan(4096, 0).expect("test setup or child I/O");
        loan[..2048].fill(0xAB); // half written
        use std::os::fd::AsRawFd;
        println!("SHM {}", fd.as_raw_fd());
        park();
        return;
    }
    let (mut child, fd) = spawn(
        "producer_killed_mid_write_never_delivers_the_slot",
        "producer",
        &[],
    );
    let region = Region::attach(open_peer_fd(child.id(), &fd)).expect("test setup or child I/O");
    let mut c = region
        .consumer(0, ConsumerConfig::default())
        .expect("test setup or child I/O");
    assert!(
        matches!(c.next(0), Err(Error::Empty)),
        "a slot being written is not visible"
    );
    child.kill().expect("test setup or child I/O");
    child.wait().expect("test setup or child I/O");
    match c.next(1_000_000_000) {
        Err(Error::ProducerGone { pid }) => assert_eq!(pid, child.id()),
        other => panic!("expected ProducerGone, got {:?}", other.map(|s| s.seq())),
    }
    // A new producer takes the stream over; the abandoned slot is reclaimed, never delivered.
    let mut p = region
        .producer(0, ProducerConfig::default())
        .expect("test setup or child I/O");
    p.publish_copy(b"after", 1, NO_DEADLINE, 0)
        .expect("test setup or child I/O");
    let s = c.next(2_000_000_000).expect("test setup or child I/O");
    assert_eq!(&*s, b"after");
    drop(s);
    assert_eq!(c.stats().counts.delivered, 1);
    assert!(matches!(c.next(2_000_000_000), Err(Error::Empty)));
}

#[test]
fn consumer_killed_holding_a_sample_is_reaped_and_unblocks_the_producer() {
    if std::env::var(ROLE).as_deref() == Ok("consumer") {
        let path = std::env::var("SHM_FD_PATH").expect("test setup or child I/O");
        let f: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("test setup or child I/O")
            .into();
        let region = Region::attach(f).expect("test setup or child I/O");
        let mut c = region
            .consumer(0, ConsumerConfig::default())
            .expect("test setup or child I/O");
        println!("SHM attached");
        let s = c
            .next_blocking(Duration::from_secs(10), || 0)
            .expect("test setup or child I/O");
        println!("SHM holding {}", s.seq());
        park();
        return;
    }
    let (mut p, fd) = Stream::create(StreamConfig {
        slots: 4,
        producer: ProducerConfig {
            overload: Overload::Block,
            liveness_interval_ns: 1,
            ..ProducerConfig::default()
        },
        ..StreamConfig::default()
    })
    .expect("test setup or child I/O");
    use std::os::fd::AsRawFd;
    let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
    let mut cmd = Command::new(std::env::current_exe().expect("test setup or child I/O"));
    cmd.args([
        "consumer_killed_holding_a_sample_is_reaped_and_unblocks_the_producer",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, "consumer")
    .env("SHM_FD_PATH", path)
    .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("test setup or child I/O");
    let mut lines = BufReader::new(child.stdout.take().expect("test setup or child I/O"))
        .lines()
        .take(100)
        .map_while(Result::ok);
    assert!(lines.any(|l| l.ends_with("SHM attached")));
    p.publish_copy(b"held", 0, NO_DEADLINE, 0)
        .expect("test setup or child I/O");
    assert!(lines.any(|l| l.ends_with("SHM holding 0")));
    for k in 1..4u64 {
        p.publish_copy(b"fill", k, NO_DEADLINE, 0)
            .expect("test setup or child I/O");
    }
    assert!(
        matches!(p.publish_copy(b"x", 4, NO_DEADLINE, 0), Err(Error::Full)),
        "the live consumer holds the ring"
    );
    child.kill().expect("test setup or child I/O");
    child.wait().expect("test setup or child I/O");
    p.publish_copy(b"x", 4, NO_DEADLINE, 10)
        .expect("test setup or child I/O");
    assert_eq!(p.stats().reaped, 1);
}

#[test]
fn blocked_consumer_learns_that_the_producer_died() {
    if std::env::var(ROLE).as_deref() == Ok("idle-producer") {
        let (_p, fd) = Stream::create(StreamConfig::default()).expect("child stream");
        use std::os::fd::AsRawFd;
        println!("SHM {}", fd.as_raw_fd());
        park();
        return;
    }
    let (mut child, fd) = spawn(
        "blocked_consumer_learns_that_the_producer_died",
        "idle-producer",
        &[],
    );
    let region = Region::attach(open_peer_fd(child.id(), &fd)).expect("attach");
    let mut c = region
        .consumer(
            0,
            ConsumerConfig {
                liveness_interval_ns: 1_000_000,
            },
        )
        .expect("consumer");
    assert!(matches!(c.next(0), Err(Error::Empty)));
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        child.kill().expect("kill");
        child.wait().expect("wait");
    });
    // The caller's clock never moves; the pid is still checked after each sleep.
    let r = c
        .next_blocking(Duration::from_secs(20), || 0)
        .map(|s| s.seq());
    assert!(matches!(r, Err(Error::ProducerGone { .. })), "{r:?}");
    killer.join().expect("killer thread");
}
