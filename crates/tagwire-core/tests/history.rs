//! Pull buffers against a naive model: a `VecDeque` of the last `history`
//! events per publisher, queried by linear scans.

use std::collections::VecDeque;

use bytes::Bytes;
use proptest::prelude::*;
use tagwire_core::history::{HistoryLimits, HistoryTable, PullError};
use tagwire_proto::{PullQuery, PullStatus};

#[derive(Debug, Clone)]
enum Op {
    /// Publish the next event (sequence number steps up by `gap`, time by `dt`).
    Record {
        gap: u64,
        dt: u64,
    },
    Query(PullQuery),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..3, 0u64..20).prop_map(|(gap, dt)| Op::Record { gap, dt }),
        1 => Just(Op::Query(PullQuery::Latest)),
        1 => (0u32..12).prop_map(|n| Op::Query(PullQuery::Nth(n))),
        1 => (0u64..80).prop_map(|s| Op::Query(PullQuery::Seq(s))),
        1 => (0u64..80, 0u64..12).prop_map(|(a, l)| Op::Query(PullQuery::SeqRange { first: a, last: a + l })),
        1 => (0u64..400, 0u64..200, 0u64..60).prop_map(|(f, l, s)| Op::Query(PullQuery::TimeRange { from_ns: f, to_ns: f + l, from_seq: s })),
    ]
}

fn seq_of(b: &Bytes) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[..8]);
    u64::from_le_bytes(x)
}

proptest! {
    #[test]
    fn history_matches_a_vecdeque_model(cap in 1usize..10, max_reply in 1usize..6, ops in proptest::collection::vec(op(), 1..120)) {
        let mut table = HistoryTable::new(HistoryLimits { max_reply_events: max_reply, ..HistoryLimits::default() });
        let mut model: VecDeque<(u64, u64)> = VecDeque::new();
        let (mut seq, mut time) = (0u64, 0u64);
        for op in ops {
            match op {
                Op::Record { gap, dt } => {
                    seq += gap;
                    time += dt;
                    prop_assert!(table.record("/t", "/p", seq, time, Bytes::from(seq.to_le_bytes().to_vec()), cap, 8));
                    model.push_back((seq, time));
                    while model.len() > cap { model.pop_front(); }
                }
                Op::Query(q) => {
                    let got = table.query("/t", "", &q);
                    if model.is_empty() {
                        prop_assert!(matches!(got, Err(PullError::NoHistory { .. })), "{:?}", got);
                        continue;
                    }
                    let oldest = model.front().map_or(0, |e| e.0);
                    let newest = model.back().map_or(0, |e| e.0);
                    // What the model says: Ok(list) (empty list: gone) or an error name.
                    let want: Result<Vec<u64>, &str> = match q {
                        PullQuery::Latest => Ok(vec![newest]),
                        PullQuery::Nth(n) if n as usize >= cap => Err("nth"),
                        PullQuery::Nth(n) => Ok(model.iter().rev().nth(n as usize).map(|e| e.0).into_iter().collect()),
                        PullQuery::Seq(s) if s > newest => Err("after"),
                        PullQuery::Seq(s) => Ok(model.iter().filter(|e| e.0 == s).map(|e| e.0).collect()),
                        PullQuery::SeqRange { first, last } if last - first + 1 > cap as u64 => Err("larger"),
                        PullQuery::SeqRange { first, .. } if first < oldest => Ok(vec![]),
                        PullQuery::SeqRange { first, .. } if first > newest => Err("after"),
                        PullQuery::SeqRange { first, last } => Ok(model.iter().filter(|e| e.0 >= first && e.0 <= last).map(|e| e.0).collect()),
                        PullQuery::TimeRange { from_ns, to_ns, from_seq } => Ok(model.iter().filter(|e| e.1 >= from_ns && e.1 <= to_ns && e.0 >= from_seq).map(|e| e.0).collect()),
                        PullQuery::Stored { .. } => Err("stored"),
                    };
                    match (want, got) {
                        (Err(name), Err(e)) => {
                            let ok = matches!((name, &e), ("nth", PullError::NthBeyondHistory { .. }) | ("after", PullError::SeqAfterNewest { .. }) | ("larger", PullError::RangeLargerThanBuffer { .. }) | ("stored", PullError::NotHistory));
                            prop_assert!(ok, "{} vs {:?}", name, e);
                        }
                        (Ok(list), Ok(a)) => {
                            prop_assert_eq!((a.oldest, a.newest, a.held), (oldest, newest, model.len()));
                            if list.is_empty() {
                                // A missing sample: gone, never an empty success.
                                prop_assert_eq!(a.status, PullStatus::Gone);
                                prop_assert!(a.events.is_empty());
                            } else {
                                let got: Vec<u64> = a.events.iter().map(seq_of).collect();
                                let n = list.len().min(max_reply);
                                prop_assert_eq!(&got[..], &list[..n]);
                                if n < list.len() {
                                    prop_assert_eq!(a.status, PullStatus::More { next: list[n] });
                                } else {
                                    prop_assert_eq!(a.status, PullStatus::Complete);
                                }
                            }
                        }
                        (w, g) => prop_assert!(false, "model {:?}, table {:?}", w, g),
                    }
                }
            }
        }
    }

    #[test]
    fn byte_bounds_hold_whatever_is_recorded(sizes in proptest::collection::vec((0usize..3, 1usize..3000), 1..200)) {
        let limits = HistoryLimits { max_total_bytes: 20_000, max_bytes_per_tag: 8_000, max_tags: 2, ..HistoryLimits::default() };
        let mut table = HistoryTable::new(limits);
        for (i, (tag, size)) in sizes.into_iter().enumerate() {
            let tag = ["/a", "/b", "/c"][tag];
            table.record(tag, "/p", i as u64 + 1, 0, Bytes::from(vec![0u8; 8]), 50, size);
            prop_assert!(table.total_bytes() <= limits.max_total_bytes);
            prop_assert!(table.tag_count() <= limits.max_tags);
            for t in ["/a", "/b", "/c"] {
                if let Some(info) = table.info(t) {
                    prop_assert!(info.bytes <= limits.max_bytes_per_tag);
                    prop_assert!(info.events <= 50);
                }
            }
        }
    }
}
