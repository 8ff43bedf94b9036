//! Issue 16's bad inputs that belong to the crate, one test each: a consumer
//! that never consumes, a corrupted descriptor, a wrong-size or unsealed or
//! garbage memfd, a region over the memory bound. Plus the limits' behaviour.

use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::fs::{MemfdFlags, SealFlags};
use tagwire_shm::{
    Consumer, ConsumerConfig, Error, Overload, ProducerConfig, Region, RegionConfig, Stream,
    StreamConfig, NO_DEADLINE,
};

fn stream(overload: Overload, block_timeout: Duration) -> (tagwire_shm::Producer, OwnedFd) {
    Stream::create(StreamConfig {
        slots: 4,
        consumers_max: 2,
        max_packet: 4096,
        producer: ProducerConfig {
            overload,
            block_timeout,
            ..ProducerConfig::default()
        },
        ..StreamConfig::default()
    })
    .expect("a 4-slot test stream")
}

#[test]
fn consumer_that_never_consumes_makes_a_drop_oldest_producer_drop_and_count() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let mut idle = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    for k in 0..100u64 {
        p.publish_copy(&k.to_le_bytes(), k, NO_DEADLINE, 0).unwrap();
    }
    assert_eq!(p.stats().counts.published, 100);
    assert_eq!(
        p.stats().counts.dropped,
        96,
        "all but one ring of 4 dropped"
    );
    // The late consumer finds the newest ring's worth, and counts the rest as lost.
    let s = idle.next(0).unwrap();
    assert_eq!(s.seq(), 96);
    drop(s);
    assert_eq!(idle.stats().counts.lost, 96);
}

#[test]
fn consumer_that_never_consumes_makes_a_blocking_producer_report_full_or_time_out() {
    let (mut p, fd) = stream(Overload::Block, Duration::ZERO);
    let _idle = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    for k in 0..4u64 {
        p.publish_copy(b"x", k, NO_DEADLINE, 0).unwrap();
    }
    assert!(matches!(
        p.publish_copy(b"x", 4, NO_DEADLINE, 0),
        Err(Error::Full)
    ));
    assert_eq!(p.stats().counts.dropped, 0);

    let (mut p, fd) = stream(Overload::Block, Duration::from_millis(30));
    let _idle = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    for k in 0..4u64 {
        p.publish_copy(b"x", k, NO_DEADLINE, 0).unwrap();
    }
    assert!(matches!(
        p.publish_copy(b"x", 4, NO_DEADLINE, 0),
        Err(Error::Timeout)
    ));
    assert!(
        p.stats().futex_waits >= 1,
        "the blocked producer slept on the futex"
    );
}

#[test]
fn expired_packets_free_a_blocked_ring_and_are_never_delivered() {
    let (mut p, fd) = stream(Overload::Block, Duration::ZERO);
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    for k in 0..4u64 {
        p.publish_copy(b"old", k, 100, 0).unwrap();
    }
    // At t=100 the old packets are past their deadline: the ring has room again.
    p.publish_copy(b"new", 4, NO_DEADLINE, 100).unwrap();
    assert_eq!(p.stats().counts.expired, 1);
    let s = c.next(100).unwrap();
    assert_eq!((&*s, s.seq()), (&b"new"[..], 4));
    drop(s);
    assert_eq!(c.stats().counts.lost + c.stats().counts.expired, 4);
}

#[test]
fn corrupted_descriptor_closes_the_stream_for_that_consumer_without_panic() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let region = Region::attach(fd).unwrap();
    let layout = region.layout();
    let mut c = region.consumer(0, ConsumerConfig::default()).unwrap();
    let mut healthy = region.consumer(0, ConsumerConfig::default()).unwrap();
    p.publish_copy(b"fine", 0, NO_DEADLINE, 0).unwrap();
    assert_eq!(&*healthy.next(0).unwrap(), b"fine");
    // A misbehaving peer points descriptor 1 far outside the data area.
    p.publish_copy(b"soon bad", 1, NO_DEADLINE, 0).unwrap();
    let off = layout.slot_offset(0, 1) + 8;
    rustix::io::pwrite(region.fd(), &(1u64 << 40).to_le_bytes(), off).unwrap();
    assert_eq!(&*c.next(0).unwrap(), b"fine");
    match c.next(0) {
        Err(Error::Corrupt {
            slot: 1,
            what,
            value,
        }) => {
            assert!(what.contains("offset"), "{what}");
            assert_eq!(value, 1 << 40);
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|s| s.seq())),
    }
    assert!(
        matches!(c.next(0), Err(Error::Corrupt { .. })),
        "the stream stays closed for it"
    );
    // An unknown state byte is reported too (by the other consumer).
    rustix::io::pwrite(
        region.fd(),
        &((1u64 << 8) | 0x7f).to_le_bytes(),
        layout.slot_offset(0, 1),
    )
    .unwrap();
    assert!(matches!(
        healthy.next(0),
        Err(Error::Corrupt {
            slot: 1,
            value: 0x7f,
            ..
        })
    ));
    // The producer goes on.
    p.publish_copy(b"after", 2, NO_DEADLINE, 0).unwrap();
}

fn memfd(len: u64, seal: bool) -> OwnedFd {
    let fd = rustix::fs::memfd_create("test", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .expect("memfd_create");
    rustix::fs::ftruncate(&fd, len).expect("ftruncate");
    if seal {
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).expect("seals");
    }
    fd
}

#[test]
fn memfd_of_the_wrong_size_is_refused() {
    assert!(matches!(
        Region::attach(memfd(100, true)),
        Err(Error::WrongSize { actual: 100, .. })
    ));
    // A valid header in a file one page short of what it describes.
    let (_p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let total = Region::attach(fd.try_clone().unwrap())
        .unwrap()
        .layout()
        .total_bytes;
    let mut header = [0u8; 4096];
    rustix::io::pread(&fd, &mut header, 0).unwrap();
    let short = memfd(total - 4096, false);
    rustix::io::pwrite(&short, &header, 0).unwrap();
    match Region::attach(short) {
        Err(Error::WrongSize { actual, expected }) => {
            assert_eq!((actual, expected), (total - 4096, total))
        }
        other => panic!("expected WrongSize, got {other:?}"),
    }
}

#[test]
fn memfd_with_a_garbage_header_or_without_seals_is_refused() {
    let garbage = memfd(1 << 20, true);
    rustix::io::pwrite(&garbage, b"not a tagwire region", 0).unwrap();
    assert!(matches!(
        Region::attach(garbage),
        Err(Error::BadHeader { what: "magic", .. })
    ));

    let (_p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let total = Region::attach(fd.try_clone().unwrap())
        .unwrap()
        .layout()
        .total_bytes;
    let mut header = [0u8; 4096];
    rustix::io::pread(&fd, &mut header, 0).unwrap();
    let unsealed = memfd(total, false);
    rustix::io::pwrite(&unsealed, &header, 0).unwrap();
    assert!(matches!(Region::attach(unsealed), Err(Error::NotSealed)));
}

#[test]
fn region_over_the_memory_bound_is_refused_with_its_size() {
    let err = Stream::create(StreamConfig {
        max_packet: 64 << 20,
        ..StreamConfig::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { max, .. } if max == 1 << 30),
        "{err}"
    );
    let err = Region::create(RegionConfig {
        chunk_bytes: (u64::MAX / 2) & !63,
        max_total_bytes: u64::MAX,
        ..RegionConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert!(matches!(
        Region::create(RegionConfig {
            slots: 0,
            ..RegionConfig::default()
        }),
        Err(Error::InvalidConfig { what: "slots", .. })
    ));
}

#[test]
fn packet_over_the_chunk_size_and_extra_consumers_are_refused() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    assert!(matches!(
        p.loan(4097, 0),
        Err(Error::PacketTooLarge {
            len: 4097,
            max: 4096
        })
    ));
    let region = Region::attach(fd).unwrap();
    let _a = region.consumer(0, ConsumerConfig::default()).unwrap();
    let _b = region.consumer(0, ConsumerConfig::default()).unwrap();
    assert!(matches!(
        region.consumer(0, ConsumerConfig::default()),
        Err(Error::Unavailable { .. })
    ));
    assert!(matches!(
        region.producer(0, ProducerConfig::default()),
        Err(Error::Unavailable { .. })
    ));
}

#[test]
fn held_sample_stays_intact_while_the_producer_retracts_and_laps_the_ring() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    p.publish_copy(&[7u8; 4096], 0, NO_DEADLINE, 0).unwrap();
    let s = c.next(0).unwrap();
    assert!(p.retract(0));
    for k in 1..50u64 {
        p.publish_copy(&[k as u8; 4096], k, NO_DEADLINE, 0).unwrap();
    }
    assert!(
        s.iter().all(|&b| b == 7),
        "the chunk under a hazard is never reused"
    );
    drop(s);
    // The consumer goes on with the newest packets; the lapped ones are counted lost.
    let s = c.next(0).unwrap();
    assert_eq!(s.seq(), 46);
}

#[test]
fn dropped_loan_is_retracted_and_never_delivered() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    {
        let mut loan = p.loan(3, 0).unwrap();
        loan.copy_from_slice(b"abc");
    }
    assert!(matches!(c.next(0), Err(Error::Empty)));
    p.publish_copy(b"def", 0, NO_DEADLINE, 0).unwrap();
    assert_eq!(&*c.next(0).unwrap(), b"def");
}

#[test]
fn spool_forward_skips_old_virtual_time_and_tells_the_producer() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    for v in 0..4u64 {
        p.publish_copy(b"v", v * 10, NO_DEADLINE, 0).unwrap();
    }
    c.spool_forward(25);
    assert_eq!(p.spool_target(), 25);
    assert_eq!(c.next(0).unwrap().vtime(), 30);
    assert_eq!(c.stats().counts.spooled, 3);
}

#[test]
fn closed_stream_is_reported_after_the_last_packet() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    p.publish_copy(b"last", 0, NO_DEADLINE, 0).unwrap();
    drop(p);
    assert_eq!(&*c.next(0).unwrap(), b"last");
    assert!(matches!(c.next(0), Err(Error::Closed)));
    assert!(matches!(
        c.next_blocking(Duration::from_secs(5), || 0),
        Err(Error::Closed)
    ));
}

#[test]
fn trimming_free_chunks_keeps_published_and_held_packets() {
    let (mut p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    p.publish_copy(&[1u8; 4096], 0, NO_DEADLINE, 0).unwrap();
    p.publish_copy(&[2u8; 4096], 1, NO_DEADLINE, 0).unwrap();
    let held = c.next(0).unwrap();
    let released = p.region().trim_free_chunks().unwrap();
    // 4 slots + 2 consumers + 1 = 7 chunks; one is published, one held and published.
    assert_eq!(released, 5 * 4096);
    assert!(held.iter().all(|&b| b == 1));
    drop(held);
    assert!(c.next(0).unwrap().iter().all(|&b| b == 2));
}

#[test]
fn a_pid_no_process_can_have_written_by_a_peer_counts_as_gone_without_panic() {
    // Found by the shm_region fuzz target: a producer pid past i32::MAX (a
    // process group to kill(2)) panicked a debug build's liveness check.
    let (p, fd) = stream(Overload::DropOldest, Duration::ZERO);
    let region = Region::attach(fd).unwrap();
    let layout = region.layout();
    let mut c = region.consumer(0, ConsumerConfig::default()).unwrap();
    for (now, pid) in [(0, u32::MAX), (1_000_000_000, 1 << 31)] {
        // The stream's control area starts with the producer's pid.
        rustix::io::pwrite(region.fd(), &pid.to_le_bytes(), layout.streams).unwrap();
        assert!(region.producer_gone(0), "pid {pid:#x}");
        // (The liveness check runs at most once per interval of `now`.)
        match c.next(now) {
            Err(Error::ProducerGone { pid: gone }) => assert_eq!(gone, pid),
            other => panic!("expected ProducerGone, got {:?}", other.map(|s| s.seq())),
        }
    }
    drop(p);
}
