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

use std::collections::{BTreeMap, VecDeque};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagwire_proto::datagram::{
    DataAck, DatagramKind, Gaps, Header, Report, SeqRange, HEADER_LEN, MAX_ACK_RANGES,
    MAX_GAP_RANGES,
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
    kind: DatagramKind,
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
            kind: DatagramKind::Data,
            next_seq: 1,
            max_datagram: max_datagram.max(HEADER_LEN + 5),
            control_max: max_datagram.max(HEADER_LEN + 5),
            too_large: 0,
            largest_dropped: 0,
        }
    }

    /// A packer of `AckedData` datagrams (their own sequence from 1), for
    /// an [`AckedSender`]: no frame is dropped as too large below
    /// `control_max` (an event that does not fit `max_datagram` goes alone).
    pub fn acked(session: u64, max_datagram: usize) -> Packer {
        Packer {
            kind: DatagramKind::AckedData,
            ..Packer::new(session, max_datagram)
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
                // Acknowledged datagrams carry events that must arrive:
                // alone, up to control_max, like a control frame.
                let event = event && self.kind == DatagramKind::Data;
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
                        kind: self.kind,
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
                    kind: self.kind,
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

/// Whether a frame of type `kind` may be lost on a datagram session that
/// acknowledges: only best-effort events (`Publish`, `Deliver`) go in
/// plain `Data` datagrams; every other frame (requests, replies,
/// acknowledged events and their acknowledgements, `Close`) goes in
/// `AckedData`.
pub fn best_effort_frame(kind: u8) -> bool {
    matches!(
        kind,
        tagwire_proto::kind::PUBLISH | tagwire_proto::kind::DELIVER
    )
}

/// Moves the whole frames at the front of `stream` (a cut-off last frame
/// stays) to `best_effort` or `acked` by [`best_effort_frame`], each
/// keeping its order.
pub fn split_frames(stream: &mut BytesMut, best_effort: &mut BytesMut, acked: &mut BytesMut) {
    while let Some(len) = stream
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    {
        let whole = 4 + len;
        if stream.len() < whole || len == 0 {
            break;
        }
        let to = if best_effort_frame(stream[4]) {
            &mut *best_effort
        } else {
            &mut *acked
        };
        to.extend_from_slice(&stream[..whole]);
        stream.advance(whole);
    }
}

/// `AckedData` datagrams one side has in flight, unacknowledged, at most;
/// more wait in the sender's backlog (and its producer is held back).
pub const ACKED_WINDOW: usize = 256;
/// The first retransmission timeout, before any round trip was measured.
pub const ACKED_INITIAL_RTO_NS: u64 = 200_000_000;
/// The shortest retransmission timeout.
pub const ACKED_MIN_RTO_NS: u64 = 20_000_000;
/// The longest retransmission timeout (backed off per try up to it).
pub const ACKED_MAX_RTO_NS: u64 = 2_000_000_000;
/// An `AckedData` datagram not acknowledged this long after it was first
/// sent ends the session ([`AckedError::GaveUp`]).
pub const ACKED_GIVE_UP_NS: u64 = 15_000_000_000;

/// Why an acknowledged datagram stream cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckedError {
    /// A datagram was not acknowledged within [`ACKED_GIVE_UP_NS`].
    #[error("AckedData datagram {seq} was not acknowledged within {}s ({tries} tries)", ACKED_GIVE_UP_NS / 1_000_000_000)]
    GaveUp {
        /// Its sequence number.
        seq: u32,
        /// How often it was sent.
        tries: u32,
    },
    /// The peer acknowledged a number never sent.
    #[error("DataAck acknowledges {seq}, but only up to {sent} was sent")]
    AckedUnsent {
        /// The number acknowledged.
        seq: u32,
        /// The highest sent.
        sent: u32,
    },
    /// The sequence numbers ran out (2^32 - 1 datagrams): a new session
    /// starts them again.
    #[error("the session's AckedData sequence numbers ran out")]
    Exhausted,
}

/// Counters of one side's acknowledged datagrams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckedCounters {
    /// `AckedData` datagrams sent the first time.
    pub sent: u64,
    /// Sent again (timeout or a gap named by a `DataAck`).
    pub resent: u64,
    /// Acknowledged.
    pub acked: u64,
    /// Received and handed on (in order, once).
    pub received: u64,
    /// Received again (dropped; our acknowledgement was lost or late).
    pub duplicate: u64,
    /// Received too far ahead of the next expected (dropped unacknowledged).
    pub beyond_window: u64,
}

#[derive(Debug, Clone)]
struct InFlight {
    datagram: Bytes,
    first_ns: u64,
    last_ns: u64,
    tries: u32,
}

/// The send side of a session's `AckedData`: numbers come from an
/// [`Packer::acked`]; each datagram is held until a `DataAck` covers it,
/// sent again after the retransmission timeout (measured round trip,
/// backed off per try) or at once when a `DataAck` names it missing below
/// one that arrived. At most [`ACKED_WINDOW`] in flight; the rest wait in
/// a backlog the caller keeps short by not producing while it is not empty.
#[derive(Debug, Clone)]
pub struct AckedSender {
    /// Sequence number of `flight[0]`.
    base: u32,
    /// `None`: acknowledged by a range, waiting for those below.
    flight: VecDeque<Option<InFlight>>,
    backlog: VecDeque<Bytes>,
    srtt_ns: Option<u64>,
    rttvar_ns: u64,
    counters: AckedCounters,
}

impl Default for AckedSender {
    fn default() -> Self {
        AckedSender {
            base: 1,
            flight: VecDeque::new(),
            backlog: VecDeque::new(),
            srtt_ns: None,
            rttvar_ns: 0,
            counters: AckedCounters::default(),
        }
    }
}

impl AckedSender {
    /// The retransmission timeout now (before the per-try back-off).
    pub fn rto_ns(&self) -> u64 {
        match self.srtt_ns {
            None => ACKED_INITIAL_RTO_NS,
            Some(s) => (s + 4 * self.rttvar_ns).clamp(ACKED_MIN_RTO_NS, ACKED_MAX_RTO_NS),
        }
    }

    fn timeout_of(&self, f: &InFlight) -> u64 {
        let back = self
            .rto_ns()
            .saturating_mul(1u64 << (f.tries.saturating_sub(1)).min(6));
        f.last_ns.saturating_add(back.min(ACKED_MAX_RTO_NS))
    }

    /// Datagrams waiting for room in the window.
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }

    /// Datagrams sent and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.flight.iter().filter(|f| f.is_some()).count()
    }

    /// Whether nothing waits for an acknowledgement or for room.
    pub fn is_idle(&self) -> bool {
        self.flight.is_empty() && self.backlog.is_empty()
    }

    /// The counters so far.
    pub fn counters(&self) -> AckedCounters {
        self.counters
    }

    /// Takes `AckedData` datagrams (numbered in order by an acked
    /// [`Packer`]) and returns those to send now: as many as the window
    /// has room for; the rest wait in the backlog.
    pub fn push(&mut self, datagrams: Vec<BytesMut>, now_ns: u64) -> Vec<Bytes> {
        self.backlog
            .extend(datagrams.into_iter().map(BytesMut::freeze));
        self.admit(now_ns)
    }

    fn admit(&mut self, now_ns: u64) -> Vec<Bytes> {
        let mut out = Vec::new();
        while self.flight.len() < ACKED_WINDOW {
            let Some(d) = self.backlog.pop_front() else {
                break;
            };
            self.counters.sent += 1;
            out.push(d.clone());
            self.flight.push_back(Some(InFlight {
                datagram: d,
                first_ns: now_ns,
                last_ns: now_ns,
                tries: 1,
            }));
        }
        out
    }

    /// The highest sequence number sent.
    fn highest(&self) -> u32 {
        self.base
            .saturating_add(self.flight.len() as u32)
            .saturating_sub(1)
    }

    fn sample_rtt(&mut self, f: &InFlight, now_ns: u64) {
        // Karn: only datagrams sent once measure the round trip.
        if f.tries != 1 {
            return;
        }
        let r = now_ns.saturating_sub(f.first_ns);
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(r);
                self.rttvar_ns = r / 2;
            }
            Some(s) => {
                self.rttvar_ns = (3 * self.rttvar_ns + s.abs_diff(r)) / 4;
                self.srtt_ns = Some((7 * s + r) / 8);
            }
        }
    }

    /// The peer's acknowledgement: releases what it covers and returns
    /// what to send now: the datagrams it names missing (below one that
    /// arrived) that were last sent more than a round trip ago, then those
    /// the freed window admits from the backlog.
    pub fn on_ack(&mut self, ack: &DataAck, now_ns: u64) -> Result<Vec<Bytes>, AckedError> {
        let top = ack.ranges.last().map_or(ack.upto, |r| r.last);
        if top > self.highest() {
            return Err(AckedError::AckedUnsent {
                seq: top,
                sent: self.highest(),
            });
        }
        while self.base <= ack.upto {
            match self.flight.pop_front() {
                Some(Some(f)) => {
                    self.counters.acked += 1;
                    self.sample_rtt(&f, now_ns);
                }
                Some(None) => {}
                None => break,
            }
            self.base = self.base.checked_add(1).ok_or(AckedError::Exhausted)?;
        }
        for r in &ack.ranges {
            for seq in r.first.max(self.base)..=r.last {
                let i = (seq - self.base) as usize;
                if let Some(slot) = self.flight.get_mut(i) {
                    if let Some(f) = slot.take() {
                        self.counters.acked += 1;
                        self.sample_rtt(&f, now_ns);
                    }
                }
            }
        }
        while matches!(self.flight.front(), Some(None)) {
            self.flight.pop_front();
            self.base = self.base.checked_add(1).ok_or(AckedError::Exhausted)?;
        }
        let mut out = Vec::new();
        if let Some(last_got) = ack.ranges.last().map(|r| r.last) {
            // Missing below one that arrived: lost (or reordered, if it
            // was sent within the last round trip: then wait).
            let fresh = self.srtt_ns.unwrap_or(ACKED_INITIAL_RTO_NS);
            let n = last_got.saturating_sub(self.base) as usize;
            for f in self.flight.iter_mut().take(n).flatten() {
                if now_ns.saturating_sub(f.last_ns) > fresh {
                    f.last_ns = now_ns;
                    f.tries += 1;
                    self.counters.resent += 1;
                    out.push(f.datagram.clone());
                }
            }
        }
        out.extend(self.admit(now_ns));
        Ok(out)
    }

    /// When the next retransmission is due (`None`: nothing in flight).
    pub fn next_timeout(&self) -> Option<u64> {
        self.flight
            .iter()
            .flatten()
            .map(|f| self.timeout_of(f))
            .min()
    }

    /// The datagrams whose timeout passed, to send again now (at most
    /// `max`); `Err` when one waited [`ACKED_GIVE_UP_NS`] in vain.
    pub fn poll_timeout(&mut self, now_ns: u64, max: usize) -> Result<Vec<Bytes>, AckedError> {
        let rto = self.rto_ns();
        let mut out = Vec::new();
        let base = self.base;
        for (i, f) in self.flight.iter_mut().enumerate() {
            let Some(f) = f else { continue };
            if now_ns.saturating_sub(f.first_ns) >= ACKED_GIVE_UP_NS {
                return Err(AckedError::GaveUp {
                    seq: base.wrapping_add(i as u32),
                    tries: f.tries,
                });
            }
            let back = rto
                .saturating_mul(1u64 << f.tries.saturating_sub(1).min(6))
                .min(ACKED_MAX_RTO_NS);
            if out.len() < max && now_ns >= f.last_ns.saturating_add(back) {
                f.last_ns = now_ns;
                f.tries += 1;
                out.push(f.datagram.clone());
            }
        }
        self.counters.resent += out.len() as u64;
        Ok(out)
    }
}

/// The receive side of a session's `AckedData`: hands frames on in
/// sequence order, once; parks up to [`ACKED_WINDOW`] datagrams ahead of a
/// gap; says what arrived in a [`DataAck`] after each datagram.
#[derive(Debug, Clone)]
pub struct AckedReceiver {
    next: u32,
    parked: BTreeMap<u32, Bytes>,
    ack_due: bool,
    counters: AckedCounters,
}

impl Default for AckedReceiver {
    fn default() -> Self {
        AckedReceiver {
            next: 1,
            parked: BTreeMap::new(),
            ack_due: false,
            counters: AckedCounters::default(),
        }
    }
}

impl AckedReceiver {
    /// Takes datagram `seq`'s frame bytes; returns the frames now in order
    /// (this datagram's and those parked behind it), concatenated, or
    /// nothing (a copy, parked ahead of a gap, or beyond the window).
    pub fn on_datagram(&mut self, seq: u32, frames: &[u8]) -> Option<BytesMut> {
        if seq < self.next || self.parked.contains_key(&seq) {
            self.counters.duplicate += 1;
            self.ack_due = true;
            return None;
        }
        if seq - self.next >= ACKED_WINDOW as u32 {
            self.counters.beyond_window += 1;
            return None;
        }
        self.ack_due = true;
        if seq != self.next {
            self.parked.insert(seq, Bytes::copy_from_slice(frames));
            return None;
        }
        let mut out = BytesMut::from(frames);
        self.counters.received += 1;
        self.next = self.next.wrapping_add(1);
        while let Some(b) = self.parked.remove(&self.next) {
            out.extend_from_slice(&b);
            self.counters.received += 1;
            self.next = self.next.wrapping_add(1);
        }
        Some(out)
    }

    /// The acknowledgement to send, if anything arrived since the last.
    pub fn take_ack(&mut self) -> Option<DataAck> {
        if !self.ack_due {
            return None;
        }
        self.ack_due = false;
        let mut ranges: Vec<SeqRange> = Vec::new();
        for &s in self.parked.keys() {
            match ranges.last_mut() {
                Some(r) if r.last.checked_add(1) == Some(s) => r.last = s,
                _ => {
                    if ranges.len() == MAX_ACK_RANGES {
                        break;
                    }
                    ranges.push(SeqRange { first: s, last: s });
                }
            }
        }
        Some(DataAck {
            upto: self.next.saturating_sub(1),
            ranges,
        })
    }

    /// The counters so far.
    pub fn counters(&self) -> AckedCounters {
        self.counters
    }

    /// Bytes parked ahead of a gap.
    pub fn parked_bytes(&self) -> usize {
        self.parked.values().map(Bytes::len).sum()
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
