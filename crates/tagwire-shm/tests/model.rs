//! The shared-memory stream against the sans-I/O model: random scenarios run on
//! both (one thread, time as an argument) must give the same deliveries,
//! refusals and counters.

use proptest::prelude::*;
use tagwire_shm::state::{Model, ModelNext, Overload};
use tagwire_shm::{
    Consumer, ConsumerConfig, Error, ProducerConfig, Region, RegionConfig, NO_DEADLINE,
};

#[derive(Clone, Debug)]
enum Op {
    Publish {
        vtime: u64,
        ttl: Option<u64>,
        len: usize,
    },
    Next(usize),
    Attach(usize),
    Detach(usize),
    Retract(u64),
    ReclaimExpired,
    Spool(usize, u64),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u64..64, proptest::option::of(0u64..50), 8usize..256)
            .prop_map(|(vtime, ttl, len)| Op::Publish { vtime, ttl, len }),
        5 => (0usize..3).prop_map(Op::Next),
        1 => (0usize..3).prop_map(Op::Attach),
        1 => (0usize..3).prop_map(Op::Detach),
        1 => (0u64..8).prop_map(Op::Retract),
        1 => Just(Op::ReclaimExpired),
        1 => (0usize..3, 0u64..64).prop_map(|(c, v)| Op::Spool(c, v)),
        2 => (0u64..20).prop_map(Op::Tick),
    ]
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|k| (seq as u8).wrapping_mul(31) ^ k as u8)
        .collect();
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn shared_memory_stream_behaves_like_the_model(
        slots in 1u32..6,
        block in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let overload = if block { Overload::Block } else { Overload::DropOldest };
        let region = Region::create(RegionConfig {
            slots, consumers_max: 3, chunks: slots + 4, chunk_bytes: 256, reserve: false,
            ..RegionConfig::default()
        }).unwrap();
        let mut producer = region.producer(0, ProducerConfig { overload, ..ProducerConfig::default() }).unwrap();
        let mut consumers: Vec<Option<Consumer>> = vec![None, None, None];
        let mut model = Model::new(slots, 3, overload);
        let mut lens = std::collections::HashMap::new();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Publish { vtime, ttl, len } => {
                    let deadline = ttl.map_or(NO_DEADLINE, |t| now + t);
                    let seq = producer.head();
                    let got = producer.publish_copy(&payload(seq, len), vtime, deadline, now);
                    let want = model.publish(seq, vtime, deadline, now);
                    match (got, want) {
                        (Ok(a), Ok(b)) => { prop_assert_eq!(a, b); lens.insert(a, len); }
                        (Err(Error::Full), Err(())) => {}
                        (got, want) => prop_assert!(false, "publish: shm {:?}, model {:?}", got, want),
                    }
                }
                Op::Next(i) => {
                    let want = model.next(i, now);
                    model.release(i);
                    match (consumers[i].as_mut(), want) {
                        (None, ModelNext::Empty) => {}
                        (Some(c), ModelNext::Empty) => {
                            let got = c.next(now).map(|s| s.seq());
                            prop_assert!(matches!(got, Err(Error::Empty)), "next: shm {:?}, model empty", got);
                        }
                        (Some(c), ModelNext::Sample { seq, vtime, .. }) => {
                            let s = c.next(now).map_err(|e| TestCaseError::fail(format!("shm {e} / model {seq}")))?;
                            prop_assert_eq!(s.seq(), seq);
                            prop_assert_eq!(s.vtime(), vtime);
                            prop_assert_eq!(&*s, &payload(seq, lens[&seq])[..]);
                        }
                        (None, want) => prop_assert!(false, "model delivered {:?} to a detached consumer", want),
                    }
                }
                Op::Attach(i) => if consumers[i].is_none() {
                    consumers[i] = Some(region.consumer(0, ConsumerConfig::default()).unwrap());
                    model.attach(i);
                },
                Op::Detach(i) => { consumers[i] = None; model.detach(i); }
                Op::Retract(back) => {
                    let h = producer.head();
                    if h > back {
                        prop_assert_eq!(producer.retract(h - 1 - back), model.retract(h - 1 - back));
                    }
                }
                Op::ReclaimExpired => prop_assert_eq!(producer.reclaim_expired(now), model.reclaim_expired(now)),
                Op::Spool(i, v) => if let Some(c) = consumers[i].as_mut() { c.spool_forward(v); model.spool(i, v); },
                Op::Tick(d) => now += d,
            }
            prop_assert_eq!(producer.stats().counts, model.counts);
            for (i, c) in consumers.iter().enumerate() {
                if let (Some(c), Some(m)) = (c, model.consumers[i].as_ref()) {
                    prop_assert_eq!(c.stats().counts, m.counts);
                    prop_assert_eq!(c.cursor(), m.cursor);
                }
            }
        }
    }
}
