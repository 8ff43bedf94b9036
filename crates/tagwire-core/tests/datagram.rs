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
            if name.starts_with("data_ping") || name == "acked_data_ping" {
                assert_eq!(d.frames().expect("frames").count(), 1);
            }
            if name == "data_ack" {
                let a = tagwire_proto::datagram::DataAck::decode(d.body).expect("data ack");
                let r = |first, last| tagwire_proto::datagram::SeqRange { first, last };
                assert_eq!((a.upto, a.ranges), (5, vec![r(7, 8), r(10, 10)]));
            }
            if name == "accept_acked" {
                assert_eq!(
                    d.header.seq,
                    tagwire_proto::datagram::FEATURE_ACKED,
                    "an Accept's seq names the features taken"
                );
            }
        }
        n += 1;
    }
    assert_eq!(n, 32);
}

/// One simulated direction of acknowledged datagrams: `n` pings packed one
/// per datagram go through a path that drops datagram copies and
/// acknowledgements with probability `loss_pct` % (a xorshift from `seed`)
/// and delivers the rest in an order shuffled by `swaps`; the clock
/// advances 5 ms a round.
fn acked_run(n: usize, seed: u64, loss_pct: u64, swaps: &[(usize, usize)]) -> (Vec<u64>, u64) {
    use tagwire_core::datagram::{AckedReceiver, AckedSender};
    use tagwire_proto::datagram::DataAck;
    let mut tx = AckedSender::default();
    let mut rx = AckedReceiver::default();
    let mut packer = Packer::acked(9, 64);
    let mut stream = BytesMut::new();
    for i in 0..n {
        Frame::Ping { nonce: i as u64 }
            .encode(&mut stream)
            .expect("encode");
    }
    let mut dgs = Vec::new();
    packer.pack(&mut stream, 0, &mut dgs);
    let mut now = 0u64;
    let mut wire: Vec<Bytes> = tx.push(dgs, now);
    let mut x = seed | 1;
    let mut lose = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 100 < loss_pct
    };
    let mut got = Vec::new();
    for round in 0..20_000 {
        if tx.is_idle() {
            break;
        }
        for (i, (a, b)) in swaps.iter().enumerate() {
            if i % 3 == round % 3 && *a < wire.len() && *b < wire.len() {
                wire.swap(*a, *b);
            }
        }
        let mut acks: Vec<DataAck> = Vec::new();
        for d in wire.drain(..) {
            if lose() {
                continue;
            }
            let p = Datagram::parse(&d).expect("valid");
            assert_eq!(p.header.kind, DatagramKind::AckedData);
            if let Some(frames) = rx.on_datagram(p.header.seq, p.frame_bytes()) {
                let mut b = frames;
                while let Some(f) = tagwire_proto::FrameDecoder::new(1 << 20)
                    .next_raw(&mut b)
                    .expect("frame")
                {
                    match Frame::decode(f.0, f.1).expect("decode") {
                        Frame::Ping { nonce } => got.push(nonce),
                        f => panic!("{f:?}"),
                    }
                }
            }
            if let Some(a) = rx.take_ack() {
                acks.push(a);
            }
        }
        now += 5_000_000;
        for a in acks {
            if lose() {
                continue;
            }
            let mut body = BytesMut::new();
            a.encode(&mut body);
            assert_eq!(DataAck::decode(&body).expect("decodes"), a);
            wire.extend(tx.on_ack(&a, now).expect("ack of what was sent"));
        }
        wire.extend(tx.poll_timeout(now, 64).expect("not given up"));
    }
    assert!(tx.is_idle(), "everything acknowledged");
    (got, tx.counters().resent)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn acked_datagrams_arrive_once_in_order_through_loss_and_reordering(
        n in 1usize..700,
        seed in any::<u64>(),
        loss_pct in 0u64..30,
        swaps in proptest::collection::vec((0usize..300, 0usize..300), 0..10),
    ) {
        let (got, _) = acked_run(n, seed, loss_pct, &swaps);
        prop_assert_eq!(got, (0..n as u64).collect::<Vec<_>>());
    }

    #[test]
    fn data_ack_bodies_roundtrip_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        use tagwire_proto::datagram::DataAck;
        if let Ok(a) = DataAck::decode(&bytes) {
            let mut out = BytesMut::new();
            a.encode(&mut out);
            prop_assert_eq!(&out[..], &bytes[..]);
        }
    }
}

#[test]
fn acked_datagrams_lost_are_sent_again() {
    let (got, resent) = acked_run(500, 7, 20, &[]);
    assert_eq!(got, (0..500).collect::<Vec<_>>());
    assert!(resent > 0);
}
