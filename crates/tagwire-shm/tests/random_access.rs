//! Reading packets by sequence number (descriptors that travelled over a
//! socket): in place, never torn, `Expired` once reclaimed.

use tagwire_shm::{Consumer, ConsumerConfig, Error, Stream, StreamConfig, NO_DEADLINE};

fn stream(slots: u32) -> (tagwire_shm::Producer, Consumer) {
    let (p, fd) = Stream::create(StreamConfig {
        slots,
        consumers_max: 2,
        max_packet: 64,
        ..StreamConfig::default()
    })
    .expect("stream");
    (
        p,
        Consumer::attach(fd, ConsumerConfig::default()).expect("attach"),
    )
}

#[test]
fn read_at_reads_any_published_packet_in_place_out_of_order() {
    let (mut p, mut c) = stream(8);
    for i in 0..4u8 {
        p.publish_copy(&[i; 10], i as u64, NO_DEADLINE, 0)
            .expect("publish");
    }
    assert_eq!(&*c.read_at(2, 0).expect("seq 2"), &[2u8; 10][..]);
    assert_eq!(&*c.read_at(0, 0).expect("seq 0"), &[0u8; 10][..]);
    assert!(matches!(c.read_at(4, 0), Err(Error::Empty)));
}

#[test]
fn read_at_of_an_overwritten_retracted_or_expired_packet_is_expired() {
    let (mut p, mut c) = stream(2);
    for i in 0..3u8 {
        p.publish_copy(&[i; 4], 0, NO_DEADLINE, 0).expect("publish");
    }
    assert!(matches!(c.read_at(0, 0), Err(Error::Expired { seq: 0 })));
    assert!(p.retract(2));
    assert!(matches!(c.read_at(2, 0), Err(Error::Expired { seq: 2 })));
    p.publish_copy(b"late", 0, 100, 0).expect("publish");
    assert!(matches!(c.read_at(3, 100), Err(Error::Expired { seq: 3 })));
    assert_eq!(&*c.read_at(3, 99).expect("before its deadline"), b"late");
}
