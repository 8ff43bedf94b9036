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
use tagwire_proto::datagram::{DatagramKind, Header, Report, HEADER_LEN};

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

/// The receive side of one session's sequence numbers: the highest seen
/// and a bitmap of the [`REORDER_WINDOW`] before it, plus the counters.
#[derive(Debug, Clone, Default)]
pub struct SeqWindow {
    highest: u32,
    /// Bit `i` set: `highest - 1 - i` arrived.
    seen: u64,
    report: Report,
}

impl SeqWindow {
    /// Judges sequence number `seq` (from 1) and counts it.
    pub fn on_seq(&mut self, seq: u32) -> Verdict {
        if seq > self.highest {
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
