//! The UDP transport's sans-I/O parts: [`SeqWindow`] tells, from each
//! `Data` datagram's sequence number, whether it is new, late (reordered),
//! a duplicate or too old, and keeps the loss counters `tagwire list`
//! shows; [`Packer`] cuts a stream of whole frames into datagrams of at most
//! `max_datagram` bytes (a frame never spans two; one too large for any
//! datagram is dropped and counted, never sent in pieces: fragmentation
//! belongs to the reliability work). Neither reads a clock or a socket.
//!
//! ```
//! use tagwire_core::datagram::{SeqWindow, Verdict};
//! let mut w = SeqWindow::default();
//! assert_eq!(w.on_seq(1), Verdict::Accept);
//! assert_eq!(w.on_seq(3), Verdict::Accept); // 2 is counted lost
//! assert_eq!(w.on_seq(2), Verdict::Accept); // ...until it arrives late
//! assert_eq!(w.on_seq(2), Verdict::Duplicate);
//! assert_eq!((w.report().lost, w.report().reordered), (0, 1));
//! ```

use bytes::{Buf, BufMut, BytesMut};
use tagwire_proto::datagram::{
    DatagramKind, Gaps, Header, Report, SeqRange, HEADER_LEN, MAX_GAP_RANGES,
};

/// How many sequence numbers behind the highest one a late datagram may
/// be and still be accepted (one bit each).
pub const REORDER_WINDOW: u32 = 64;

/// What to do with a `Data` datagram, by its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand its frames on (new, or late but within the window).
    Accept,
    /// Seen already: drop it.
    Duplicate,
    /// Older than the window: drop it (it stays counted as lost).
    TooOld,
}

/// Ranges of each kind a [`SeqWindow`] keeps for its next [`Gaps`]
/// reports; past it, further ones are counted in
/// [`SeqWindow::gaps_unreported`] only.
pub const MAX_PENDING_GAP_RANGES: usize = 4 * MAX_GAP_RANGES;

/// The receive side of one session's sequence numbers: the highest seen
/// and a bitmap of the [`REORDER_WINDOW`] before it, plus the counters.
/// Made with [`SeqWindow::tracking_gaps`], it also notes *which* sequence
/// numbers it gave up as lost and which came late, for [`Gaps`] reports
/// to the sender (who knows what each datagram carried, and so counts the
/// loss per channel).
#[derive(Debug, Clone, Default)]
pub struct SeqWindow {
    highest: u32,
    /// Bit `i` set: `highest - 1 - i` arrived.
    seen: u64,
    report: Report,
    track: bool,
    lost: Vec<SeqRange>,
    late: Vec<SeqRange>,
    unreported: u64,
}

/// Appends `first..=last` to `list`, merged into its last range when they
/// touch; `false` if the list is at its bound.
fn push_range(list: &mut Vec<SeqRange>, first: u32, last: u32) -> bool {
    if let Some(p) = list.last_mut() {
        if p.last.checked_add(1) == Some(first) {
            p.last = last;
            return true;
        }
    }
    if list.len() >= MAX_PENDING_GAP_RANGES {
        return false;
    }
    list.push(SeqRange { first, last });
    true
}

impl SeqWindow {
    /// A window that also notes which sequence numbers it gave up and which
    /// came late ([`take_gaps`](Self::take_gaps)).
    pub fn tracking_gaps() -> SeqWindow {
        SeqWindow {
            track: true,
            ..SeqWindow::default()
        }
    }

    fn note_lost(&mut self, first: u32, last: u32) {
        if !push_range(&mut self.lost, first, last) {
            self.unreported += u64::from(last - first) + 1;
        }
    }

    /// Notes, before the window moves up to `seq`, the sequence numbers it
    /// gives up: those that fall below `seq - REORDER_WINDOW` unseen.
    fn give_up_below(&mut self, seq: u32) {
        let new_low = seq.saturating_sub(REORDER_WINDOW);
        // The old window's unseen numbers, oldest first.
        let lo = self.highest.saturating_sub(REORDER_WINDOW).max(1);
        for s in lo..self.highest.min(new_low) {
            let bit = self.highest - 1 - s;
            if self.seen & (1u64 << bit) == 0 {
                self.note_lost(s, s);
            }
        }
        // The numbers skipped that are already out of the new window.
        let first = self.highest + 1;
        if new_low > first {
            self.note_lost(first, new_low - 1);
        }
    }

    /// The sequence numbers given up and come late since the last call,
    /// at most [`MAX_GAP_RANGES`] ranges (the rest wait for the next call);
    /// `None` when there is nothing to report.
    pub fn take_gaps(&mut self) -> Option<Gaps> {
        if self.lost.is_empty() && self.late.is_empty() {
            return None;
        }
        let n = self.lost.len().min(MAX_GAP_RANGES);
        let lost: Vec<SeqRange> = self.lost.drain(..n).collect();
        self.late.sort_unstable_by_key(|r| r.first);
        let mut merged: Vec<SeqRange> = Vec::new();
        for r in self.late.drain(..) {
            match merged.last_mut() {
                Some(p) if p.last.saturating_add(1) >= r.first => p.last = p.last.max(r.last),
                _ => merged.push(r),
            }
        }
        let m = merged.len().min(MAX_GAP_RANGES - lost.len());
        self.late = merged.split_off(m);
        Some(Gaps { lost, late: merged })
    }

    /// Sequence numbers given up or come late that no [`Gaps`] report will
    /// name (the pending lists were at [`MAX_PENDING_GAP_RANGES`]).
    pub fn gaps_unreported(&self) -> u64 {
        self.unreported
    }

    /// Judges sequence number `seq` (from 1) and counts it.
    pub fn on_seq(&mut self, seq: u32) -> Verdict {
        if seq > self.highest {
            if self.track {
                self.give_up_below(seq);
            }
            let gap = seq - self.highest;
            // Sequence numbers skipped are lost until they turn up.
            self.report.lost += u64::from(gap - 1);
            self.seen = if gap > 64 {
                0
            } else {
                // The old highest becomes bit gap-1.
                let shifted = if gap == 64 { 0 } else { self.seen << gap };
                if self.highest > 0 {
                    shifted | (1u64 << (gap - 1))
                } else {
                    shifted
                }
            };
            self.highest = seq;
            self.report.received += 1;
            return Verdict::Accept;
        }
        if seq == self.highest {
            self.report.duplicate += 1;
            return Verdict::Duplicate;
        }
        let back = self.highest - seq; // 1..
        if back > REORDER_WINDOW {
            self.report.bad += 1;
            return Verdict::TooOld;
        }
        let bit = 1u64 << (back - 1);
        if self.seen & bit != 0 {
            self.report.duplicate += 1;
            return Verdict::Duplicate;
        }
        self.seen |= bit;
        if self.track && !push_range(&mut self.late, seq, seq) {
            self.unreported += 1;
        }
        self.report.reordered += 1;
        self.report.lost = self.report.lost.saturating_sub(1);
        self.report.received += 1;
        Verdict::Accept
    }

    /// The highest sequence number accepted (0: none yet).
    pub fn highest(&self) -> u32 {
        self.highest
    }

    /// Counts a datagram dropped as unusable.
    pub fn note_bad(&mut self) {
        self.report.bad += 1;
    }

    /// The counters so far.
    pub fn report(&self) -> Report {
        self.report
    }
}

/// The send side of one session: numbers `Data` datagrams and packs whole
/// frames into them.
#[derive(Debug, Clone)]
pub struct Packer {
    session: u64,
    next_seq: u32,
    max_datagram: usize,
    /// The largest datagram for one control frame (not `Publish` or
    /// `Deliver`) that does not fit in `max_datagram`: it goes alone, and
    /// IP fragments it.
    control_max: usize,
    /// Frames dropped because no datagram could hold them.
    too_large: u64,
    /// The largest frame dropped (for the log line that names it).
    largest_dropped: usize,
}

impl Packer {
    /// A packer for session `session` whose datagrams are at most
    /// `max_datagram` bytes.
    pub fn new(session: u64, max_datagram: usize) -> Packer {
        Packer {
            session,
            next_seq: 1,
            max_datagram: max_datagram.max(HEADER_LEN + 5),
            control_max: max_datagram.max(HEADER_LEN + 5),
            too_large: 0,
            largest_dropped: 0,
        }
    }

    /// Lets a control frame (anything but `Publish` and `Deliver`) that
    /// does not fit in `max_datagram` go alone in a datagram of up to
    /// `control_max` bytes (an admin reply, a long error message): events
    /// keep to `max_datagram`, rare control frames may be IP-fragmented.
    pub fn with_control_max(mut self, control_max: usize) -> Packer {
        self.control_max = control_max.max(self.max_datagram);
        self
    }

    /// The largest frame (length field included) one datagram holds.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_datagram - HEADER_LEN
    }

    /// Frames dropped as too large so far.
    pub fn too_large(&self) -> u64 {
        self.too_large
    }

    /// The largest frame dropped so far (bytes on the wire, 0: none).
    pub fn largest_dropped(&self) -> usize {
        self.largest_dropped
    }

    /// Sequence numbers used so far.
    pub fn sent(&self) -> u32 {
        self.next_seq - 1
    }

    /// Takes the whole frames at the front of `stream` (a cut-off last
    /// frame stays there) and appends them to `out` as `Data` datagrams,
    /// as few as fit in `max_datagram` each, each padded to at least
    /// `pad_to` bytes. Returns how many datagrams it appended.
    pub fn pack(&mut self, stream: &mut BytesMut, pad_to: usize, out: &mut Vec<BytesMut>) -> usize {
        let mut made = 0;
        let mut cur: Option<BytesMut> = None;
        let room = self.max_frame_bytes();
        while let Some(len) = stream
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        {
            let whole = 4 + len;
            if stream.len() < whole {
                break;
            }
            if whole > room {
                let event = matches!(
                    stream.get(4).copied(),
                    Some(tagwire_proto::kind::PUBLISH | tagwire_proto::kind::DELIVER)
                );
                if event || HEADER_LEN + whole > self.control_max {
                    self.too_large += 1;
                    self.largest_dropped = self.largest_dropped.max(whole);
                } else {
                    // A control frame alone in an oversized datagram.
                    if cur.is_some() {
                        out.push(self.finish(cur.take(), pad_to));
                        made += 1;
                    }
                    let mut d = BytesMut::with_capacity(HEADER_LEN + whole);
                    Header {
                        kind: DatagramKind::Data,
                        session: self.session,
                        seq: 0,
                    }
                    .encode(&mut d);
                    d.extend_from_slice(&stream[..whole]);
                    out.push(self.finish(Some(d), pad_to));
                    made += 1;
                }
                stream.advance(whole);
                continue;
            }
            if let Some(d) = &cur {
                if d.len() + whole > self.max_datagram {
                    out.push(self.finish(cur.take(), pad_to));
                    made += 1;
                }
            }
            let d = cur.get_or_insert_with(|| {
                let mut d = BytesMut::with_capacity(self.max_datagram);
                Header {
                    kind: DatagramKind::Data,
                    session: self.session,
                    seq: 0,
                }
                .encode(&mut d);
                d
            });
            d.extend_from_slice(&stream[..whole]);
            stream.advance(whole);
        }
        if cur.is_some() {
            out.push(self.finish(cur, pad_to));
            made += 1;
        }
        made
    }

    fn finish(&mut self, d: Option<BytesMut>, pad_to: usize) -> BytesMut {
        let mut d = d.unwrap_or_default();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        if d.len() >= HEADER_LEN {
            d[12..16].copy_from_slice(&seq.to_le_bytes());
        }
        let pad_to = pad_to.min(self.max_datagram);
        if d.len() < pad_to {
            d.put_bytes(0, pad_to - d.len());
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::datagram::Datagram;
    use tagwire_proto::Frame;

    #[test]
    fn gaps_are_lost_until_they_arrive_and_old_ones_are_dropped() {
        let mut w = SeqWindow::default();
        for s in [1, 2, 5] {
            assert_eq!(w.on_seq(s), Verdict::Accept);
        }
        assert_eq!(w.report().lost, 2);
        assert_eq!(w.on_seq(4), Verdict::Accept);
        assert_eq!(w.on_seq(4), Verdict::Duplicate);
        assert_eq!(w.on_seq(5), Verdict::Duplicate);
        assert_eq!(w.on_seq(200), Verdict::Accept);
        assert_eq!(w.on_seq(3), Verdict::TooOld);
        let r = w.report();
        assert_eq!(
            (r.received, r.lost, r.reordered, r.duplicate, r.bad),
            (5, 1 + 194, 1, 2, 1)
        );
    }

    fn r(first: u32, last: u32) -> SeqRange {
        SeqRange { first, last }
    }

    #[test]
    fn gaps_name_the_numbers_given_up_and_those_that_came_late() {
        let mut w = SeqWindow::tracking_gaps();
        for s in [1, 2, 5, 4] {
            w.on_seq(s);
        }
        // 3 is missing but still within the window: not given up yet.
        assert_eq!(
            w.take_gaps(),
            Some(Gaps {
                lost: vec![],
                late: vec![r(4, 4)]
            })
        );
        assert_eq!(w.take_gaps(), None);
        // 200 pushes 3 out, and 6..=135 with it; 136..=199 may still come.
        w.on_seq(200);
        w.on_seq(150);
        let g = w.take_gaps().expect("gaps");
        assert_eq!(g.lost, vec![r(3, 3), r(6, 135)]);
        assert_eq!(g.late, vec![r(150, 150)]);
        // Late arrivals out of order are reported sorted and merged.
        for s in [160, 158, 159] {
            w.on_seq(s);
        }
        w.on_seq(300);
        let g = w.take_gaps().expect("gaps");
        assert_eq!(g.late, vec![r(158, 160)]);
        let lost: u64 = g.lost.iter().map(|x| u64::from(x.last - x.first) + 1).sum();
        // Given up so far equals the window's lost count, less what is
        // still inside the window (236..=299 all missing).
        assert_eq!(lost + 1 + 130 + 64, w.report().lost);
        assert_eq!(w.gaps_unreported(), 0);
        // A window made without tracking notes nothing.
        let mut plain = SeqWindow::default();
        plain.on_seq(500);
        assert_eq!(plain.take_gaps(), None);
    }

    #[test]
    fn frames_are_packed_whole_and_too_large_ones_counted() {
        let mut stream = BytesMut::new();
        for n in 0..100u64 {
            Frame::Ping { nonce: n }
                .encode(&mut stream)
                .expect("encode");
        }
        let big = Frame::Close {
            code: 0,
            reason: "x".repeat(600),
        };
        big.encode(&mut stream).expect("encode");
        Frame::Ping { nonce: 100 }
            .encode(&mut stream)
            .expect("encode");
        let cut = stream.len();
        Frame::Ping { nonce: 101 }
            .encode(&mut stream)
            .expect("encode");
        stream.truncate(cut + 3);
        let mut p = Packer::new(9, 600);
        let mut out = Vec::new();
        p.pack(&mut stream, 0, &mut out);
        assert_eq!(stream.len(), 3, "the cut-off frame waits");
        assert_eq!(p.too_large(), 1);
        let mut nonces = Vec::new();
        for (i, d) in out.iter().enumerate() {
            assert!(d.len() <= 600);
            let parsed = Datagram::parse(d).expect("valid");
            assert_eq!(parsed.header.seq as usize, i + 1);
            for (k, b) in parsed.frames().expect("frames") {
                match Frame::decode(k, bytes::Bytes::copy_from_slice(b)).expect("frame") {
                    Frame::Ping { nonce } => nonces.push(nonce),
                    f => panic!("unexpected {f:?}"),
                }
            }
        }
        assert_eq!(nonces, (0..=100).collect::<Vec<_>>());
    }

    #[test]
    fn a_large_control_frame_goes_alone_but_a_large_event_is_dropped() {
        let mut stream = BytesMut::new();
        Frame::Ping { nonce: 1 }
            .encode(&mut stream)
            .expect("encode");
        Frame::Close {
            code: 0,
            reason: "x".repeat(2000),
        }
        .encode(&mut stream)
        .expect("encode");
        let ev = tagwire_proto::Event::new("/a", vec![0u8; 2000]);
        tagwire_proto::encode_publish(1, &ev, &mut stream).expect("encode");
        Frame::Ping { nonce: 2 }
            .encode(&mut stream)
            .expect("encode");
        let mut p = Packer::new(9, 600).with_control_max(4096);
        let mut out = Vec::new();
        p.pack(&mut stream, 0, &mut out);
        let kinds: Vec<Vec<u8>> = out
            .iter()
            .map(|d| {
                let d = Datagram::parse(d).expect("valid");
                d.frames().expect("frames").map(|(k, _)| k).collect()
            })
            .collect();
        assert_eq!(kinds, vec![vec![0x0a], vec![0x0c], vec![0x0a]]);
        assert_eq!(p.too_large(), 1, "the 2000-byte publish");
    }
}
