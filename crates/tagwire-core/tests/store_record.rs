//! Property tests of the durable store's record format and retention rule
//! (`tagwire_core::store`): `decode(encode(r)) == r` for any record whose
//! event is well formed, garbage is a named `StoreRecordError` and never a
//! panic, and the retention rule keeps exactly the newest records that fit
//! every bound (checked against a naive model). The `store_record` fuzz
//! target feeds the decoder arbitrary bytes the same way.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tagwire_core::store::{
    origin_key, Retention, StoreRecord, StoreRecordError, TagLog, SEEK_CLOCK_MARGIN_NS,
    SEEK_TOLERANCE_NS,
};
use tagwire_proto::Event;

fn arb_event() -> impl Strategy<Value = Bytes> {
    (
        "/[a-z]{1,8}(/[a-z0-9]{1,6}){0,3}",
        "[a-z/]{0,12}",
        any::<u64>(),
        any::<u64>(),
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(tag, publisher, seq, time, priority, payload)| {
            let mut e = Event::new(tag, payload);
            e.header.publisher = publisher;
            e.header.seq = seq;
            e.header.source_time_ns = time;
            e.header.priority = priority;
            let mut out = BytesMut::new();
            e.encode(&mut out).expect("a generated event encodes");
            out.freeze()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_of_encode_is_the_record(
        stored_at_ns in any::<u64>(),
        origin in any::<u64>(),
        event in arb_event(),
    ) {
        let r = StoreRecord { stored_at_ns, origin, event };
        prop_assert_eq!(StoreRecord::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn a_version_1_record_decodes_with_origin_not_known(
        stored_at_ns in any::<u64>(),
        event in arb_event(),
    ) {
        // Version 1: version, stored-at time, event length, event (no origin).
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&stored_at_ns.to_le_bytes());
        v1.extend_from_slice(&(event.len() as u32).to_le_bytes());
        v1.extend_from_slice(&event);
        let r = StoreRecord { stored_at_ns, origin: 0, event };
        prop_assert_eq!(StoreRecord::decode(&v1), Ok(r));
    }

    #[test]
    fn garbage_is_a_named_error_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = StoreRecord::decode(&bytes) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn a_cut_or_extended_record_is_refused_with_what_is_wrong(
        event in arb_event(),
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        let full = StoreRecord { stored_at_ns: 1, origin: 5, event }.encode();
        let at = cut.index(full.len());
        let truncated = matches!(
            StoreRecord::decode(&full[..at]),
            Err(StoreRecordError::Truncated { .. })
        );
        prop_assert!(truncated, "cut at {}", at);
        let mut longer = full.clone();
        longer.extend_from_slice(&extra);
        prop_assert_eq!(
            StoreRecord::decode(&longer),
            Err(StoreRecordError::TrailingBytes { extra: extra.len() })
        );
    }

    #[test]
    fn origin_keys_are_never_zero_and_tell_names_apart(a in "[a-z0-9-]{0,12}", b in "[a-z0-9-]{0,12}") {
        prop_assert_ne!(origin_key(&a), 0);
        if a != b {
            prop_assert_ne!(origin_key(&a), origin_key(&b));
        }
    }

    /// The seek never skips a record a replay from `from_ns` must read:
    /// every record whose source time (at most the clock margin after its
    /// stored-at time) is at least `from_ns` is at or after the position it
    /// gives; stored-at times out of order within the tolerance are fine,
    /// and beyond it the seek gives up.
    #[test]
    fn the_seek_skips_only_records_older_than_the_earliest_asked_for(
        steps in prop::collection::vec((0u64..3_000_000_000, 0u64..2_000_000_000, 0u64..60_000_000_000), 1..80),
        from_ns in 0u64..300_000_000_000,
        step_back in any::<bool>(),
    ) {
        let mut log = TagLog::default();
        let mut at = 100_000_000_000u64;
        let mut records = Vec::new();
        for (pos, (step, jitter, ahead)) in steps.iter().enumerate() {
            at += step;
            let mut stored = at.saturating_sub(*jitter % SEEK_TOLERANCE_NS);
            if step_back && pos == steps.len() / 2 {
                stored = stored.saturating_sub(10 * SEEK_TOLERANCE_NS);
            }
            log.push(pos as u64, 1, stored);
            // A source time at most the margin after it was stored.
            records.push((pos as u64, stored + ahead % SEEK_CLOCK_MARGIN_NS));
        }
        let seek = log.seek(from_ns);
        prop_assert_eq!(seek.is_none(), from_ns == 0 || (step_back && steps.len() > 1));
        match seek {
            None => {}
            Some(start) => {
                for (pos, source) in &records {
                    if *source >= from_ns {
                        prop_assert!(*pos >= start, "record {} (source {}) before the seek's {}", pos, source, start);
                    }
                }
            }
        }
    }

    #[test]
    fn retention_keeps_the_newest_records_that_fit_every_bound(
        sizes in prop::collection::vec((1u64..50, 0u64..20), 1..60),
        max_events in 1u64..20,
        max_bytes in 1u64..400,
        max_age_ns in 0u64..300,
    ) {
        let limits = Retention { max_events, max_bytes, max_age_ns };
        let mut log = TagLog::default();
        let mut model: Vec<(u64, u64, u64)> = Vec::new();
        let mut now = 0;
        for (pos, (bytes, step)) in sizes.iter().enumerate() {
            now += step;
            log.push(pos as u64, *bytes, now);
            model.push((pos as u64, *bytes, now));
            let gone = log.evict(&limits, now);
            // The model: drop from the front while any bound is broken.
            let mut expect = Vec::new();
            while let Some(&(p, _, at)) = model.first() {
                let bytes: u64 = model.iter().map(|r| r.1).sum();
                let broken = model.len() as u64 > max_events
                    || bytes > max_bytes
                    || (max_age_ns > 0 && now - at > max_age_ns);
                if !broken { break; }
                expect.push(p);
                model.remove(0);
            }
            prop_assert_eq!(gone, expect);
            prop_assert_eq!(log.len(), model.len() as u64);
            prop_assert_eq!(log.bytes(), model.iter().map(|r| r.1).sum::<u64>());
        }
    }
}

/// The seek does skip: records stored once a second for 1,000 s, a replay
/// from second 500 starts 61 s before it (the clock margin and the
/// tolerance), not at the oldest.
#[test]
fn the_seek_starts_a_margin_before_the_time_asked_for() {
    let mut log = TagLog::default();
    for i in 0..1000u64 {
        log.push(i, 1, i * 1_000_000_000);
    }
    assert_eq!(log.seek(500_000_000_000), Some(439));
    assert_eq!(log.seek(0), None);
    assert_eq!(
        log.seek(5_000_000_000_000),
        Some(1000),
        "past the newest: nothing to read"
    );
}
