//! A misbehaving peer scribbles over a shared-memory region's control area
//! (descriptors, chunk table, pin rows, consumer entries) while a publisher
//! and a subscriber use it: the daemon never panics and keeps serving
//! everyone else, what the subscriber gets stays within the reference's
//! bounds, and a new publisher gets a fresh region that works in place.
//! See `docs/shm.md` ("Trust").

mod common;

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::tempdir::Dir;
use tagwire::router::{Router, RouterConfig};
use tagwire::{Session, ShmMode};

const WAIT: Duration = Duration::from_secs(10);

/// This process's open memfds of shared-memory regions (the client's and
/// the in-process daemon's), reopened for writing through /proc.
fn region_files() -> Vec<std::fs::File> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("read /proc/self/fd") {
        let Ok(entry) = entry else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.to_string_lossy().starts_with("/memfd:tagwire-shm") {
            if let Ok(f) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(entry.path())
            {
                out.push(f);
            }
        }
    }
    out
}

/// A small deterministic generator (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn a_peer_scribbling_over_the_control_area_harms_no_one_else_and_never_the_daemon() {
    let dir = Dir::new("shm-scribble");
    let path = dir.0.join("tagwired.sock");
    let router = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: Some(path.clone()),
        ..RouterConfig::default()
    })
    .expect("start router");
    let unix = format!("unix://{}", path.display());
    let tcp = format!("tcp://{}", router.tcp_addr().expect("tcp addr"));

    let publisher_session = Session::builder()
        .shm(ShmMode::Auto)
        .shm_threshold(0)
        .connect(&unix)
        .expect("session");
    let reader = Session::builder()
        .shm(ShmMode::Auto)
        .shm_threshold(0)
        .connect(&unix)
        .expect("session");
    let sub = reader
        .subscribe("/scribble/shm")
        .max_queue_length(100_000)
        .receiver()
        .expect("subscribe");
    let publisher = publisher_session
        .declare_publisher("/scribble/pub")
        .expect("declare");
    assert!(publisher.uses_shm());
    // One event in place first, so the reader maps the region too.
    publisher
        .publish("/scribble/shm", vec![1u8; 512])
        .expect("publish");
    let first = sub.recv_timeout(WAIT).expect("recv").expect("event");
    assert!(first.is_in_place());
    drop(first);

    let files = region_files();
    assert!(!files.is_empty(), "the region's memfd is open here");
    // The control area: after the header page, before the data area (a
    // region of 64 KiB chunks keeps it within the first 16 KiB).
    let stop = Arc::new(AtomicBool::new(false));
    let scribbler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) && writes < 2_000_000 {
                for f in &files {
                    let off = 4096 + rng.next() % (12 * 1024);
                    let bytes = rng.next().to_le_bytes();
                    let len = 1 + (rng.next() % 8) as usize;
                    let _ = f.write_at(&bytes[..len], off);
                }
                writes += 1;
                if writes.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
            writes
        })
    };
    let reading = std::thread::spawn(move || {
        let mut got = 0u64;
        let mut bad_len = 0u64;
        while let Ok(Some(s)) = sub.recv_timeout(Duration::from_millis(500)) {
            got += 1;
            // Payload bytes are the peers' to trust; the length is not.
            if s.payload().len() != 512 {
                bad_len += 1;
            }
        }
        (got, bad_len)
    });
    // Publishing goes on regardless (over the socket when the region's
    // state refuses a loan); it never fails or panics here.
    for i in 0..5_000u32 {
        publisher
            .publish("/scribble/shm", vec![(i % 251) as u8; 512])
            .expect("publish while the region is scribbled over");
    }
    stop.store(true, Ordering::Relaxed);
    let writes = scribbler.join().expect("scribbler");
    let (got, bad_len) = reading.join().expect("reader");
    assert!(writes > 0);
    assert_eq!(bad_len, 0, "a payload length outside its reference");
    assert!(got > 0, "the subscriber still got events");

    // The daemon serves everyone else, and a new publisher gets a fresh
    // region that works in place.
    let other = Session::connect(&tcp).expect("tcp session after the attack");
    let tcp_sub = other
        .subscribe("/scribble/after")
        .receiver()
        .expect("subscribe");
    let fresh_session = Session::builder()
        .shm(ShmMode::Auto)
        .shm_threshold(0)
        .connect(&unix)
        .expect("session");
    let shm_sub = fresh_session
        .subscribe("/scribble/after")
        .receiver()
        .expect("subscribe");
    let fresh = fresh_session
        .declare_publisher("/scribble/fresh")
        .expect("declare");
    assert!(fresh.uses_shm());
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "nothing after the attack");
        fresh
            .publish("/scribble/after", b"after".to_vec())
            .expect("publish");
        if let Some(s) = shm_sub
            .recv_timeout(Duration::from_millis(100))
            .expect("recv")
        {
            assert_eq!(&s.payload()[..], b"after");
            assert!(s.is_in_place(), "the fresh region is used in place");
            break;
        }
    }
    let s = tcp_sub.recv_timeout(WAIT).expect("recv").expect("event");
    assert_eq!(&s.payload()[..], b"after");
    router.shutdown();
}
