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
