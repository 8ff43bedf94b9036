//! `Region::copy_published`: a producer's session copies out a packet it
//! published (to resend it over a socket after its reader went away) as
//! long as the packet is in the ring, gets `Expired` once the slot was
//! reused or the packet retracted, and the copy leaves the chunk's count
//! as it found it.

use tagwire_shm::{Error, ProducerConfig, Region, RegionConfig, NO_DEADLINE};

fn region() -> Region {
    Region::create(RegionConfig {
        streams: 1,
        slots: 4,
        consumers_max: 2,
        chunks: 4 + 2 + 1,
        chunk_bytes: 256,
        reserve: false,
        ..RegionConfig::default()
    })
    .expect("region")
}

/// The chunk table's counts, read through the memfd.
fn counts(r: &Region) -> Vec<u32> {
    let l = r.layout();
    let mut buf = [0u8; 4];
    (0..l.geometry.chunks)
        .map(|c| {
            let n =
                rustix::io::pread(r.fd(), &mut buf, l.chunk_table + 64 * c as u64).expect("pread");
            assert_eq!(n, 4);
            u32::from_le_bytes(buf)
        })
        .collect()
}

#[test]
fn a_published_packet_is_copied_out_until_its_slot_is_reused_or_it_is_retracted() {
    let r = region();
    let mut p = r.producer(0, ProducerConfig::default()).expect("producer");
    let first = p
        .publish_copy(b"first", 1, NO_DEADLINE, 0)
        .expect("publish");
    let second = {
        let mut loan = p.loan(300 - 100, 0).expect("loan");
        loan.fill(7);
        loan.publish(2, NO_DEADLINE)
    };
    let before = counts(&r);
    assert_eq!(r.copy_published(0, first).expect("copy"), b"first");
    assert_eq!(r.copy_published(0, second).expect("copy"), vec![7u8; 200]);
    assert_eq!(counts(&r), before, "the copy gave its reference back");
    // Not published yet, or not this stream.
    assert!(matches!(
        r.copy_published(0, 99),
        Err(Error::Expired { seq: 99 })
    ));
    assert!(matches!(
        r.copy_published(1, first),
        Err(Error::Unavailable { .. })
    ));
    // Retracted: gone.
    assert!(p.retract(second));
    assert!(matches!(
        r.copy_published(0, second),
        Err(Error::Expired { .. })
    ));
    // Lapped (drop-oldest, no consumer): the slot holds a later packet.
    for i in 0..4u8 {
        p.publish_copy(&[i; 8], 3, NO_DEADLINE, 0).expect("publish");
    }
    assert!(matches!(
        r.copy_published(0, first),
        Err(Error::Expired { .. })
    ));
}

/// A copier racing a producer that laps the ring (drop-oldest, every slot
/// reused many times, chunks kept or reallocated) gets each packet whole or
/// `Expired`, never torn bytes of two packets.
#[test]
fn a_copy_racing_the_producer_is_whole_or_expired_never_torn() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let r = region();
    let mut p = r.producer(0, ProducerConfig::default()).expect("producer");
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let copier = {
        let (r, last, stop) = (r.clone(), last.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut whole, mut expired) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let seq = last.load(Ordering::Acquire);
                if seq == u64::MAX {
                    continue;
                }
                match r.copy_published(0, seq) {
                    Ok(bytes) => {
                        let want = (seq % 251) as u8;
                        assert_eq!(bytes.len(), 200, "packet {seq}: length");
                        assert!(bytes.iter().all(|&b| b == want), "packet {seq}: torn bytes");
                        whole += 1;
                    }
                    Err(Error::Expired { .. }) => expired += 1,
                    Err(e) => panic!("packet {seq}: {e}"),
                }
            }
            (whole, expired)
        })
    };
    for _ in 0..200_000u64 {
        let seq = p.head();
        p.publish_copy(&[(seq % 251) as u8; 200], seq, NO_DEADLINE, 0)
            .expect("publish");
        last.store(seq, Ordering::Release);
    }
    stop.store(true, Ordering::Relaxed);
    let (whole, expired) = copier.join().expect("copier");
    assert!(whole > 0, "some copies were made ({expired} expired)");
}
