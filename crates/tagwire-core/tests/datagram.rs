//! Property tests of the UDP datagram format and the sequence window:
//! frames packed into datagrams come out whole and in order; any byte
//! string either parses or is refused (never a panic); a sequence number
//! is accepted at most once, and what was never accepted is counted lost;
//! the `Gaps` a window reports name each number given up exactly once,
//! never one that arrived, and decode to what was encoded.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tagwire_core::datagram::{Packer, SeqWindow, Verdict, REORDER_WINDOW};
use tagwire_proto::datagram::{Datagram, DatagramKind, Gaps, SeqRange, HEADER_LEN};
use tagwire_proto::Frame;

proptest! {
    #[test]
    fn packed_frames_come_out_whole_in_order(
        nonces in proptest::collection::vec(any::<u64>(), 0..200),
        reasons in proptest::collection::vec(0usize..900, 0..5),
        max in 64usize..1500,
        pad in 0usize..1300,
    ) {
        let mut stream = BytesMut::new();
        let mut want = Vec::new();
        for (i, n) in nonces.iter().enumerate() {
            let f = if i < reasons.len() {
                Frame::Close { code: 0, reason: "r".repeat(reasons[i]) }
            } else {
                Frame::Ping { nonce: *n }
            };
            let before = stream.len();
            f.encode(&mut stream).expect("encode");
            if stream.len() - before + HEADER_LEN <= max.max(HEADER_LEN + 5) {
                want.push(f);
            }
        }
        let mut p = Packer::new(42, max);
        let mut out = Vec::new();
        p.pack(&mut stream, pad, &mut out);
        prop_assert!(stream.is_empty());
        let mut got = Vec::new();
        for (i, d) in out.iter().enumerate() {
            prop_assert!(d.len() <= max.max(HEADER_LEN + 5));
            let parsed = Datagram::parse(d).expect("a packed datagram parses");
            prop_assert_eq!(parsed.header.kind, DatagramKind::Data);
            prop_assert_eq!(parsed.header.session, 42);
            prop_assert_eq!(parsed.header.seq as usize, i + 1);
            for (k, b) in parsed.frames().expect("frames") {
                got.push(Frame::decode(k, Bytes::copy_from_slice(b)).expect("decodes"));
            }
        }
        prop_assert_eq!(got.len() as u64 + p.too_large(), nonces.len() as u64);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..1400)) {
        if let Ok(d) = Datagram::parse(&bytes) {
            // What parses splits into frames that cover the frame bytes.
            let total: usize = d.frames().expect("frames").map(|(_, b)| 5 + b.len()).sum();
            prop_assert_eq!(total, d.frame_bytes().len());
        }
    }

    #[test]
    fn each_sequence_number_is_accepted_once_and_the_rest_counted_lost(
        seqs in proptest::collection::vec(1u32..300, 0..400),
    ) {
        let mut w = SeqWindow::default();
        let mut accepted = std::collections::BTreeSet::new();
        for s in &seqs {
            match w.on_seq(*s) {
                Verdict::Accept => prop_assert!(accepted.insert(*s), "{} accepted twice", s),
                Verdict::Duplicate => prop_assert!(accepted.contains(s)),
                Verdict::TooOld => {
                    let highest = accepted.iter().next_back().copied().unwrap_or(0);
                    prop_assert!(highest - s > REORDER_WINDOW);
                }
            }
        }
        let highest = accepted.iter().next_back().copied().unwrap_or(0) as u64;
        let r = w.report();
        prop_assert_eq!(r.received, accepted.len() as u64);
        prop_assert_eq!(r.lost, highest - accepted.len() as u64);
    }
}

proptest! {
    #[test]
    fn gaps_name_exactly_the_numbers_given_up_and_those_that_came_late(
        seqs in proptest::collection::vec(1u32..400, 0..500),
    ) {
        let mut w = SeqWindow::tracking_gaps();
        let mut accepted = std::collections::BTreeSet::new();
        let mut late_want = std::collections::BTreeSet::new();
        let (mut lost_got, mut late_got) = (Vec::new(), Vec::new());
        for s in &seqs {
            let highest = accepted.iter().next_back().copied().unwrap_or(0);
            if w.on_seq(*s) == Verdict::Accept {
                accepted.insert(*s);
                if *s < highest {
                    late_want.insert(*s);
                }
            }
            // Each report decodes to what was encoded.
            while let Some(g) = w.take_gaps() {
                let mut b = Vec::new();
                g.encode(&mut b);
                let back = Gaps::decode(&b).expect("a window's Gaps decode");
                prop_assert_eq!(&back, &g);
                let each = |rs: &[SeqRange]| {
                    rs.iter().flat_map(|r| r.first..=r.last).collect::<Vec<_>>()
                };
                lost_got.extend(each(&g.lost));
                late_got.extend(each(&g.late));
            }
        }
        let highest = accepted.iter().next_back().copied().unwrap_or(0);
        let floor = highest.saturating_sub(REORDER_WINDOW);
        // Given up: every number below the window that never arrived, once.
        let lost_want: Vec<u32> = (1..floor).filter(|s| !accepted.contains(s)).collect();
        lost_got.sort_unstable();
        prop_assert_eq!(lost_got, lost_want);
        late_got.sort_unstable();
        prop_assert_eq!(late_got, late_want.into_iter().collect::<Vec<_>>());
        prop_assert_eq!(w.gaps_unreported(), 0);
    }

    #[test]
    fn gaps_bodies_roundtrip_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(g) = Gaps::decode(&bytes) {
            let mut b = Vec::new();
            g.encode(&mut b);
            prop_assert_eq!(b, bytes);
        }
    }
}

/// The vectors of docs/protocol.md, "Datagram vectors": good ones parse
/// (and a Report decodes to the counters it spells), `bad_` ones are refused.
#[test]
fn protocol_md_datagram_vectors() {
    let doc = include_str!("../../../docs/protocol.md");
    let block = doc
        .split("```datagram-vectors\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("docs/protocol.md has a datagram-vectors block");
    let mut n = 0;
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (name, hex) = line.split_once(':').expect("name: hex");
        let hex: String = hex.split_whitespace().collect();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let parsed = Datagram::parse(&bytes);
        let key = tagwire_proto::datagram::group_key(b"token", "239.1.2.3:7800");
        if name.starts_with("bad_mac_") {
            let d = parsed.unwrap_or_else(|e| panic!("{name} parses: {e}"));
            assert_eq!(
                d.group_event(&key, &bytes),
                Err(tagwire_proto::datagram::DatagramError::BadMac),
                "{name}"
            );
        } else if name.starts_with("bad_") {
            assert!(parsed.is_err(), "{name} must be refused");
        } else {
            let d = parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
            if name == "report" {
                let r = tagwire_proto::datagram::Report::decode(d.body).expect("report");
                assert_eq!(
                    (r.received, r.lost, r.reordered, r.duplicate, r.bad),
                    (100, 2, 1, 0, 3)
                );
            }
            if name == "group_event" {
                let g = d.group_event(&key, &bytes).expect("group MAC");
                assert_eq!(
                    (
                        d.header.session,
                        d.header.seq,
                        g.epoch,
                        g.origin,
                        g.hops,
                        g.event
                    ),
                    (42, 7, 1000, 99, 2, &b"EVENT"[..])
                );
            }
            if name == "member" {
                let m = d.member_claim(&key, &bytes).expect("member MAC");
                assert_eq!((m.epoch, m.sent_ms), (1000, 5555));
            }
            if name == "gaps" {
                let g = tagwire_proto::datagram::Gaps::decode(d.body).expect("gaps");
                let r = |first, last| tagwire_proto::datagram::SeqRange { first, last };
                assert_eq!(g.lost, vec![r(3, 3), r(6, 135)]);
                assert_eq!(g.late, vec![r(150, 150)]);
            }
            if name.starts_with("data_ping") {
                assert_eq!(d.frames().expect("frames").count(), 1);
            }
        }
        n += 1;
    }
    assert_eq!(n, 24);
}
