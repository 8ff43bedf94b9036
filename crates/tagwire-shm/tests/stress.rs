//! The ring's atomics under threads: a producer and three consumers, every
//! payload's checksum and sequence checked. Packets: TAGWIRE_SHM_STRESS_PACKETS
//! (default 1,000,000 in release builds, 100,000 in debug builds).

use std::time::Duration;

use tagwire_shm::{
    ConsumerConfig, Overload, ProducerConfig, Region, Stream, StreamConfig, NO_DEADLINE,
};

fn packets() -> u64 {
    let default = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    std::env::var("TAGWIRE_SHM_STRESS_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fill(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut buf[16..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let sum = buf[16..]
        .iter()
        .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
    buf[8..16].copy_from_slice(&sum.to_le_bytes());
}

fn check(buf: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(buf[..8].try_into().expect("stress stream and threads"));
    let sum = buf[16..]
        .iter()
        .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
    assert_eq!(
        sum,
        u64::from_le_bytes(buf[8..16].try_into().expect("stress stream and threads")),
        "torn payload of packet {seq}"
    );
    seq
}

fn run(overload: Overload) -> (u64, Vec<(u64, u64)>) {
    let n = packets();
    let (mut p, fd) = Stream::create(StreamConfig {
        slots: 8,
        consumers_max: 3,
        max_packet: 512,
        producer: ProducerConfig {
            overload,
            block_timeout: Duration::from_secs(30),
            ..ProducerConfig::default()
        },
        ..StreamConfig::default()
    })
    .expect("stress stream and threads");
    let region = Region::attach(fd).expect("stress stream and threads");
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let mut c = region
                .consumer(0, ConsumerConfig::default())
                .expect("stress stream and threads");
            std::thread::spawn(move || {
                let mut last = None::<u64>;
                let mut delivered = 0u64;
                loop {
                    match c.next_blocking(Duration::from_secs(30), || 0) {
                        Ok(s) => {
                            let seq = check(&s);
                            assert_eq!(seq, s.seq(), "payload under the right sequence number");
                            assert!(last.is_none_or(|l| seq > l), "in order");
                            last = Some(seq);
                            delivered += 1;
                        }
                        Err(tagwire_shm::Error::Expired { .. }) => {}
                        Err(tagwire_shm::Error::Closed) => break,
                        Err(e) => panic!("consumer: {e}"),
                    }
                }
                let k = c.stats();
                assert_eq!(k.counts.delivered, delivered);
                (delivered, k.counts.lost + k.torn)
            })
        })
        .collect();
    for seq in 0..n {
        let len = 16 + (seq as usize * 7) % 497;
        let mut loan = p.loan(len, 0).expect("stress stream and threads");
        fill(&mut loan, seq);
        assert_eq!(loan.publish(seq, NO_DEADLINE), seq);
    }
    let dropped = p.stats().counts.dropped;
    drop(p);
    let per = readers
        .into_iter()
        .map(|r| r.join().expect("stress stream and threads"))
        .collect();
    (dropped, per)
}

#[test]
fn three_consumers_drop_oldest_see_only_whole_packets_in_order() {
    let n = packets();
    let (_dropped, per) = run(Overload::DropOldest);
    for (delivered, missed) in per {
        assert_eq!(
            delivered + missed,
            n,
            "every packet delivered or counted missed"
        );
    }
}

#[test]
fn three_consumers_blocking_producer_get_every_packet() {
    let n = packets();
    let (dropped, per) = run(Overload::Block);
    assert_eq!(dropped, 0);
    for (delivered, missed) in per {
        assert_eq!((delivered, missed), (n, 0));
    }
}

/// Pins under threads: a reader takes each packet in place, pins it
/// (`Sample::pin_to`) and lets the sample (and its hazard) go at once, then
/// checks the pinned bytes again four packets later, while the producer laps
/// the ring (drop-oldest) and reuses chunks. A chunk taken for a loan while
/// a pin made under a hazard still holds it shows up as a torn payload.
#[test]
fn pins_taken_under_a_hazard_keep_their_bytes_while_the_producer_laps_the_ring() {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tagwire_shm::{Error, Pin, RegionConfig};

    let n = packets();
    const HELD: usize = 4;
    // 4 slots, a loan, a hazard, HELD + 1 pins: never out of chunks.
    let region = Region::create(RegionConfig {
        slots: 4,
        consumers_max: 2,
        chunks: 4 + 1 + 1 + HELD as u32 + 1,
        chunk_bytes: 512,
        reserve: false,
        ..RegionConfig::default()
    })
    .expect("region");
    let mut p = region
        .producer(0, ProducerConfig::default())
        .expect("producer");
    let mut c = region
        .consumer(0, ConsumerConfig::default())
        .expect("consumer");
    let row = region.pin_row().expect("pin row");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held: VecDeque<(u64, Pin)> = VecDeque::new();
            let mut checked = 0u64;
            while !stop.load(Ordering::Acquire) {
                match c.next(0) {
                    Ok(s) => {
                        let seq = check(&s);
                        assert_eq!(seq, s.seq(), "payload under the right sequence number");
                        let pin = s.pin_to(&row).expect("pin");
                        drop(s);
                        held.push_back((seq, pin));
                        if held.len() > HELD {
                            let (seq, pin) = held.pop_front().expect("held pins");
                            assert_eq!(check(&pin), seq, "a pinned packet changed");
                            checked += 1;
                        }
                    }
                    Err(Error::Empty | Error::Expired { .. }) => std::hint::spin_loop(),
                    Err(e) => panic!("consumer: {e}"),
                }
            }
            for (seq, pin) in held {
                assert_eq!(check(&pin), seq, "a pinned packet changed");
            }
            checked
        })
    };
    for seq in 0..n {
        let len = 16 + (seq as usize * 7) % 497;
        loop {
            match p.loan(len, 0) {
                Ok(mut loan) => {
                    fill(&mut loan, seq);
                    loan.publish(seq, NO_DEADLINE);
                    break;
                }
                Err(Error::OutOfChunks) => std::thread::yield_now(),
                Err(e) => panic!("loan: {e}"),
            }
        }
    }
    stop.store(true, Ordering::Release);
    let checked = reader.join().expect("reader thread");
    assert!(checked > 0, "the reader pinned and checked packets");
}
