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
