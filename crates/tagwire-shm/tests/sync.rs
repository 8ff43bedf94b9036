//! Blocking and non-blocking per side, fan-out and memory chaining.

use std::time::Duration;

use tagwire_shm::{
    Consumer, ConsumerConfig, Error, Overload, ProducerConfig, Region, RegionConfig, Stream,
    StreamConfig, NO_DEADLINE,
};

#[test]
fn well_synchronised_stream_makes_no_futex_call() {
    let (mut p, fd) = Stream::create(StreamConfig::default()).unwrap();
    let region = Region::attach(fd).unwrap();
    let mut a = region.consumer(0, ConsumerConfig::default()).unwrap();
    let mut b = region.consumer(0, ConsumerConfig::default()).unwrap();
    for k in 0..10_000u64 {
        p.publish_copy(&k.to_le_bytes(), k, NO_DEADLINE, 0).unwrap();
        for c in [&mut a, &mut b] {
            let s = c.next_blocking(Duration::from_secs(5), || 0).unwrap();
            assert_eq!(u64::from_le_bytes(s[..8].try_into().unwrap()), k);
        }
    }
    assert_eq!(p.stats().futex_wakes, 0);
    assert_eq!(p.stats().futex_waits, 0);
    for c in [&a, &b] {
        assert_eq!(c.stats().futex_waits, 0);
        assert_eq!(c.stats().futex_wakes, 0);
        assert_eq!(c.stats().counts.delivered, 10_000);
    }
}

#[test]
fn blocking_consumer_sleeps_on_an_empty_ring_and_wakes_on_publish() {
    let (mut p, fd) = Stream::create(StreamConfig::default()).unwrap();
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    assert!(matches!(
        c.next_blocking(Duration::from_millis(20), || 0),
        Err(Error::Timeout)
    ));
    assert!(c.stats().futex_waits >= 1);
    let t = std::thread::spawn(move || {
        let s = c
            .next_blocking(Duration::from_secs(10), || 0)
            .map(|s| s.to_vec());
        (s.unwrap(), c.stats())
    });
    std::thread::sleep(Duration::from_millis(50));
    p.publish_copy(b"wake", 0, NO_DEADLINE, 0).unwrap();
    let (data, _stats) = t.join().unwrap();
    assert_eq!(data, b"wake");
}

#[test]
fn blocking_producer_waits_for_the_consumer_and_loses_nothing() {
    let (mut p, fd) = Stream::create(StreamConfig {
        slots: 2,
        producer: ProducerConfig {
            overload: Overload::Block,
            block_timeout: Duration::from_secs(10),
            ..ProducerConfig::default()
        },
        ..StreamConfig::default()
    })
    .unwrap();
    let mut c = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        while got.len() < 1000 {
            let s = c.next_blocking(Duration::from_secs(10), || 0).unwrap();
            got.push(s.seq());
            if got.len() % 100 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        got
    });
    for k in 0..1000u64 {
        p.publish_copy(b"k", k, NO_DEADLINE, 0).unwrap();
    }
    assert_eq!(reader.join().unwrap(), (0..1000).collect::<Vec<_>>());
    assert_eq!(p.stats().counts.dropped, 0);
}

#[test]
fn relay_forwards_a_packet_to_another_stream_of_the_region_without_copying() {
    let region = Region::create(RegionConfig {
        streams: 2,
        ..RegionConfig::default()
    })
    .unwrap();
    let mut source = region.producer(0, ProducerConfig::default()).unwrap();
    let mut relay_in = region.consumer(0, ConsumerConfig::default()).unwrap();
    let mut relay_out = region.producer(1, ProducerConfig::default()).unwrap();
    let mut sink = region.consumer(1, ConsumerConfig::default()).unwrap();
    source.publish_copy(b"chained", 5, NO_DEADLINE, 0).unwrap();
    let s = relay_in.next(0).unwrap();
    relay_out.forward(&s, 6, NO_DEADLINE, 0).unwrap();
    let first = s.as_ptr();
    drop(s);
    // The source may reuse its slot; the chunk stays while stream 1 refers to it.
    for k in 0..40u64 {
        source.publish_copy(b"other", k, NO_DEADLINE, 0).unwrap();
    }
    let got = sink.next(0).unwrap();
    assert_eq!((&*got, got.vtime()), (&b"chained"[..], 6));
    assert_eq!(
        got.as_ptr(),
        first,
        "same bytes in the shared data area: no copy"
    );
    let other = Region::create(RegionConfig::default()).unwrap();
    let mut foreign = other.producer(0, ProducerConfig::default()).unwrap();
    assert!(matches!(
        foreign.forward(&got, 0, NO_DEADLINE, 0),
        Err(Error::OtherRegion)
    ));
}
