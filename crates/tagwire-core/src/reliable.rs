//! Reliability windows for hop-by-hop acknowledgement over links
//! (`reliability=reliable`, issue 25), sans-I/O: time is an argument.
//!
//! - [`SendWindow`]: one connection's sender side. Each reliable event gets
//!   the next per-connection sequence number and is held (bounded by count
//!   and bytes) until the peer acknowledges it as *done* (delivered there
//!   and, where it went on, acknowledged by the next hop in turn: custody)
//!   or *failed* (the peer could not pass it on: the sender routes it
//!   again). A full window does what its [`WindowFull`] policy says, and
//!   says so in the value it returns — never silently.
//! - [`RecvWindow`]: the receiver side. It puts frames back in order (a
//!   bounded reorder buffer), drops duplicates, and builds cumulative
//!   acknowledgements with selective ranges ([`Ack`]) once each event's
//!   obligations downstream are settled.
//! - [`Dedupe`]: a bounded window keyed by (origin daemon, publisher) that
//!   drops the copies a retransmission over another route delivers twice.
//!
//! Which to use when: a link over TCP needs the windows only to survive the
//! loss of the connection (the router never retransmits on a live one, so
//! it passes no `rto`); the reorder buffer and [`SendWindow::poll_retransmit`]
//! make the same windows correct over a lossy, reordering transport, which
//! the property tests (`tests/reliable.rs`) check against a model.

use std::collections::{BTreeMap, HashMap, VecDeque};

pub use tagwire_proto::{Ack, AckRange, MAX_ACK_RANGES, MAX_RELIABLE_WINDOW};

/// What a full [`SendWindow`] does with one more event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowFull {
    /// Takes nothing; the caller keeps the event and offers it again after
    /// an acknowledgement (backpressure).
    Block,
    /// Pushes out the oldest unacknowledged event (lost for this hop,
    /// counted) to take the new one.
    #[default]
    DropOldest,
    /// Refuses the new event (counted); the caller reports it.
    Reject,
}

/// A window's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLimits {
    /// Most events held (at most [`MAX_RELIABLE_WINDOW`]).
    pub max_events: usize,
    /// Most bytes held (the caller's measure of an event's size).
    pub max_bytes: usize,
}

impl Default for WindowLimits {
    fn default() -> Self {
        WindowLimits {
            max_events: 65_536,
            max_bytes: 64 << 20,
        }
    }
}

/// What [`SendWindow::push`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Push<T> {
    /// Held under sequence number `seq`; `evicted` are the oldest events a
    /// full `DropOldest` window pushed out to make room (usually none or
    /// one; more for a large event).
    Held {
        /// Its per-connection sequence number.
        seq: u64,
        /// The events it pushed out, oldest first.
        evicted: Vec<T>,
    },
    /// Full, policy `Block`: nothing taken, here is the event back.
    WouldBlock(T),
    /// Full, policy `Reject`: refused, here is the event back.
    Rejected(T),
}

/// Counters of a [`SendWindow`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Events taken into the window.
    pub held: u64,
    /// Released as done by an acknowledgement.
    pub done: u64,
    /// Released as failed (to be routed again).
    pub failed: u64,
    /// Pushed out by a full `DropOldest` window.
    pub evicted: u64,
    /// Refused by a full `Reject` window.
    pub rejected: u64,
    /// Offered to a full `Block` window.
    pub blocked: u64,
    /// Sent again after `rto` without an acknowledgement.
    pub retransmitted: u64,
}

/// An acknowledgement that cannot be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// It acknowledges a sequence number never sent.
    #[error("acknowledgement of sequence number {seq}, but only up to {sent} were sent")]
    Unsent {
        /// The sequence number acknowledged.
        seq: u64,
        /// The highest sent.
        sent: u64,
    },
    /// A range whose first is after its last, or above the cumulative
    /// acknowledgement while marked failed-below.
    #[error("acknowledgement range {first}..={last} is backwards")]
    BadRange {
        /// Its first sequence number.
        first: u64,
        /// Its last.
        last: u64,
    },
}

/// What an acknowledgement released from a [`SendWindow`].
#[derive(Debug, PartialEq, Eq)]
pub struct Released<T> {
    /// Done: delivered and passed on by the peer.
    pub done: Vec<T>,
    /// Failed: the peer could not pass them on; route them again.
    pub failed: Vec<T>,
}

impl<T> Default for Released<T> {
    fn default() -> Self {
        Released {
            done: Vec::new(),
            failed: Vec::new(),
        }
    }
}

#[derive(Debug)]
struct Held<T> {
    item: T,
    bytes: usize,
    /// When it was last handed to the transport (`None`: not yet).
    sent_at: Option<u64>,
}

/// A [`SendWindow`]'s held events: slot `i` is sequence number `base + i`,
/// `None` where a selective acknowledgement released it early. Numbers are
/// given out in order, so pushing, finding the next unsent and releasing
/// the oldest are O(1) (a `BTreeMap` cost a fifth of a reliable link's CPU).
#[derive(Debug)]
struct HeldRing<T> {
    base: u64,
    slots: VecDeque<Option<Held<T>>>,
    len: usize,
}

impl<T> HeldRing<T> {
    fn new(base: u64) -> Self {
        HeldRing {
            base,
            slots: VecDeque::new(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Holds `h` as number `base + slots`.
    fn push_back(&mut self, h: Held<T>) {
        self.slots.push_back(Some(h));
        self.len += 1;
    }

    /// Drops released slots at the front, so the front is held (or none is).
    fn trim(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    fn get(&self, seq: u64) -> Option<&Held<T>> {
        self.slots.get(self.index(seq)?)?.as_ref()
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut Held<T>> {
        let i = self.index(seq)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// The oldest held at or above `from`.
    fn first_from(&self, from: u64) -> Option<(u64, &Held<T>)> {
        let start = usize::try_from(from.saturating_sub(self.base)).ok()?;
        self.slots
            .range(start.min(self.slots.len())..)
            .enumerate()
            .find_map(|(k, h)| h.as_ref().map(|h| (self.base + (start + k) as u64, h)))
    }

    fn pop_first(&mut self) -> Option<(u64, Held<T>)> {
        self.trim();
        let h = self.slots.pop_front()??;
        let seq = self.base;
        self.base += 1;
        self.len -= 1;
        self.trim();
        Some((seq, h))
    }

    /// Held numbers below `end`, oldest first.
    fn iter_mut_below(&mut self, end: u64) -> impl Iterator<Item = (u64, &mut Held<T>)> {
        let base = self.base;
        let n = usize::try_from(end.saturating_sub(base)).unwrap_or(usize::MAX);
        self.slots
            .iter_mut()
            .take(n)
            .enumerate()
            .filter_map(move |(k, h)| h.as_mut().map(|h| (base + k as u64, h)))
    }

    /// Releases the held numbers in `first..=last` to `f`, oldest first.
    fn remove_range(&mut self, first: u64, last: u64, mut f: impl FnMut(Held<T>)) {
        let from = usize::try_from(first.saturating_sub(self.base)).unwrap_or(usize::MAX);
        let Some(to) = last.checked_sub(self.base) else {
            return;
        };
        let to = usize::try_from(to).unwrap_or(usize::MAX);
        for slot in self.slots.iter_mut().take(to.saturating_add(1)).skip(from) {
            if let Some(h) = slot.take() {
                self.len -= 1;
                f(h);
            }
        }
        self.trim();
    }

    /// Releases every held number up to `last` to `f`, oldest first: the
    /// front of the ring, drained in one step (a cumulative
    /// acknowledgement releases hundreds at a time).
    fn pop_through(&mut self, last: u64, mut f: impl FnMut(Held<T>)) {
        let Some(n) = last.checked_sub(self.base) else {
            return;
        };
        let n = usize::try_from(n.saturating_add(1))
            .unwrap_or(usize::MAX)
            .min(self.slots.len());
        let mut released = 0;
        for h in self.slots.drain(..n).flatten() {
            released += 1;
            f(h);
        }
        self.len -= released;
        self.base += n as u64;
        self.trim();
    }

    /// Takes every held event, oldest first; numbering goes on at `next`.
    fn take_all(&mut self, next: u64) -> impl Iterator<Item = Held<T>> {
        self.len = 0;
        self.base = next;
        std::mem::take(&mut self.slots).into_iter().flatten()
    }
}

/// One connection's sender side: a bounded retransmit buffer keyed by
/// per-connection sequence numbers (1, 2, …).
#[derive(Debug)]
pub struct SendWindow<T> {
    next: u64,
    held: HeldRing<T>,
    bytes: usize,
    /// Every held sequence number below it has been sent at least once.
    unsent_from: u64,
    limits: WindowLimits,
    policy: WindowFull,
    stats: SendStats,
}

impl<T> SendWindow<T> {
    /// An empty window (`max_events` is capped at [`MAX_RELIABLE_WINDOW`]).
    pub fn new(limits: WindowLimits, policy: WindowFull) -> Self {
        let limits = WindowLimits {
            max_events: limits.max_events.clamp(1, MAX_RELIABLE_WINDOW),
            max_bytes: limits.max_bytes.max(1),
        };
        SendWindow {
            next: 1,
            held: HeldRing::new(1),
            bytes: 0,
            unsent_from: 1,
            limits,
            policy,
            stats: SendStats::default(),
        }
    }

    /// Events held (unacknowledged).
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Its counters.
    pub fn stats(&self) -> SendStats {
        self.stats
    }

    /// The highest sequence number given out (0: none).
    pub fn last_seq(&self) -> u64 {
        self.next - 1
    }

    fn full_for(&self, bytes: usize) -> bool {
        !self.held.is_empty()
            && (self.held.len() >= self.limits.max_events
                || self.bytes + bytes > self.limits.max_bytes)
    }

    /// Whether the window is at its bound (events or bytes), for a caller
    /// that checks before it takes the next event and then
    /// [`hold`](Self::hold)s it (so a window overshoots its byte bound by
    /// at most one event).
    pub fn is_full(&self) -> bool {
        !self.held.is_empty()
            && (self.held.len() >= self.limits.max_events || self.bytes >= self.limits.max_bytes)
    }

    /// Holds `item` (`bytes` long) under the next sequence number whatever
    /// the bound (see [`is_full`](Self::is_full)), marked sent at `now`.
    pub fn hold(&mut self, item: T, bytes: usize, now: u64) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.bytes += bytes;
        self.stats.held += 1;
        self.held.push_back(Held {
            item,
            bytes,
            sent_at: Some(now),
        });
        self.unsent_from = self.unsent_from.max(seq + 1);
        seq
    }

    /// Holds `item` (`bytes` long) under the next sequence number, or, if
    /// the window is full, does what its policy says. An event larger than
    /// `max_bytes` is taken into an empty window (it would never fit).
    pub fn push(&mut self, item: T, bytes: usize) -> Push<T> {
        let mut evicted = Vec::new();
        if self.full_for(bytes) {
            match self.policy {
                WindowFull::Block => {
                    self.stats.blocked += 1;
                    return Push::WouldBlock(item);
                }
                WindowFull::Reject => {
                    self.stats.rejected += 1;
                    return Push::Rejected(item);
                }
                WindowFull::DropOldest => {
                    // Out with the oldest until it fits (one, unless the
                    // new event is large).
                    while self.full_for(bytes) {
                        let Some((_, h)) = self.held.pop_first() else {
                            break;
                        };
                        self.bytes -= h.bytes;
                        self.stats.evicted += 1;
                        evicted.push(h.item);
                    }
                }
            }
        }
        let seq = self.next;
        self.next += 1;
        self.bytes += bytes;
        self.stats.held += 1;
        self.held.push_back(Held {
            item,
            bytes,
            sent_at: None,
        });
        Push::Held { seq, evicted }
    }

    /// The next held event not yet sent, if any; mark it sent with
    /// [`mark_sent`](Self::mark_sent) once the transport took it.
    pub fn peek_unsent(&self) -> Option<(u64, &T)> {
        self.held
            .first_from(self.unsent_from)
            .map(|(s, h)| (s, &h.item))
    }

    /// Notes that `seq` (from [`peek_unsent`](Self::peek_unsent)) was handed
    /// to the transport at `now`.
    pub fn mark_sent(&mut self, seq: u64, now: u64) {
        if let Some(h) = self.held.get_mut(seq) {
            h.sent_at = Some(now);
        }
        self.unsent_from = self.unsent_from.max(seq + 1);
    }

    /// Sequence numbers sent at least `rto` ago and still unacknowledged,
    /// oldest first (at most `max`); they count as sent again at `now`.
    /// For transports that lose frames; a TCP link never calls it.
    pub fn poll_retransmit(&mut self, now: u64, rto: u64, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        for (seq, h) in self.held.iter_mut_below(self.unsent_from) {
            if out.len() >= max {
                break;
            }
            if let Some(at) = h.sent_at {
                if now.saturating_sub(at) >= rto {
                    h.sent_at = Some(now);
                    out.push(seq);
                }
            }
        }
        self.stats.retransmitted += out.len() as u64;
        out
    }

    /// The oldest held event.
    pub fn oldest(&self) -> Option<(u64, &T)> {
        self.held.first_from(0).map(|(s, h)| (s, &h.item))
    }

    /// The held event `seq`.
    pub fn get(&self, seq: u64) -> Option<&T> {
        self.held.get(seq).map(|h| &h.item)
    }

    /// Releases what `ack` acknowledges: everything up to `ack.done` (except
    /// what a failed range below it names) and the ranges above it. Ranges
    /// over events already released are ignored (acknowledgements may come
    /// twice). An acknowledgement of a number never sent is an error, and
    /// releases nothing.
    pub fn on_ack(&mut self, ack: &Ack) -> Result<Released<T>, AckError> {
        let mut out = Released::default();
        self.release(ack, |item, failed| {
            if failed {
                out.failed.push(item);
            } else {
                out.done.push(item);
            }
        })?;
        Ok(out)
    }

    /// Checks `ack` and hands each event it releases to `f` with whether
    /// it failed: failed ranges first (they may lie below `done`), then
    /// everything up to `done`, then the selective ranges above it. (What
    /// [`on_ack`](Self::on_ack) collects, for a caller that keeps no list.)
    pub fn release(&mut self, ack: &Ack, mut f: impl FnMut(T, bool)) -> Result<(), AckError> {
        let sent = self.unsent_from - 1;
        if ack.done > sent {
            return Err(AckError::Unsent {
                seq: ack.done,
                sent,
            });
        }
        for r in &ack.ranges {
            if r.first > r.last {
                return Err(AckError::BadRange {
                    first: r.first,
                    last: r.last,
                });
            }
            if r.last > sent {
                return Err(AckError::Unsent { seq: r.last, sent });
            }
        }
        let (mut bytes, mut done, mut failed) = (0, 0, 0);
        for r in ack.ranges.iter().filter(|r| r.failed) {
            self.held.remove_range(r.first, r.last, |h| {
                bytes += h.bytes;
                failed += 1;
                f(h.item, true);
            });
        }
        self.held.pop_through(ack.done, |h| {
            bytes += h.bytes;
            done += 1;
            f(h.item, false);
        });
        for r in ack.ranges.iter().filter(|r| !r.failed) {
            self.held.remove_range(r.first, r.last, |h| {
                bytes += h.bytes;
                done += 1;
                f(h.item, false);
            });
        }
        self.bytes -= bytes;
        self.stats.done += done;
        self.stats.failed += failed;
        Ok(())
    }

    /// Takes every held event, oldest first: the connection is gone and
    /// they are to be routed again. Sequence numbers go on from where they
    /// were (a new connection gets a new window).
    pub fn drain(&mut self) -> Vec<T> {
        self.bytes = 0;
        self.unsent_from = self.next;
        self.held.take_all(self.next).map(|h| h.item).collect()
    }
}

/// Slots an acknowledgement looks at above its cumulative point for
/// selective ranges.
const SACK_SCAN: usize = 4096;

/// A frame the receiver cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// Further ahead of the next expected number than the window holds.
    #[error("sequence number {seq} is beyond the window (expecting {expected}, window {window})")]
    BeyondWindow {
        /// The sequence number received.
        seq: u64,
        /// The next one expected.
        expected: u64,
        /// The window's size.
        window: usize,
    },
    /// Not the next expected number on a connection that keeps order
    /// ([`RecvWindow::on_next`]).
    #[error("sequence number {seq} out of order (expecting {expected})")]
    OutOfOrder {
        /// The sequence number received.
        seq: u64,
        /// The next one expected.
        expected: u64,
    },
    /// Settled or completed a sequence number not awaiting it.
    #[error("sequence number {seq} is not awaiting settlement")]
    NotAwaiting {
        /// The sequence number.
        seq: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Delivered to the caller, obligations not yet known.
    Routing,
    /// Waiting for `n` acknowledgements downstream; `failed` if one failed.
    Pending {
        n: u32,
        failed: bool,
    },
    Done,
    Failed,
}

/// Counters of a [`RecvWindow`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// Frames delivered in order.
    pub delivered: u64,
    /// Frames received twice (dropped).
    pub duplicates: u64,
    /// Frames that arrived ahead of a gap and waited for it.
    pub reordered: u64,
    /// Acknowledgements built.
    pub acks: u64,
}

/// One connection's receiver side.
#[derive(Debug)]
pub struct RecvWindow<T> {
    /// The next sequence number to deliver.
    expected: u64,
    /// Frames ahead of `expected`, waiting for the gap to fill.
    reorder: BTreeMap<u64, T>,
    /// Sequence number of `slots[0]`; everything below was acknowledged
    /// cumulatively (or is about to be, in `failed_below`).
    base: u64,
    /// Delivered events `base..expected` and their settlement.
    slots: VecDeque<Slot>,
    /// Failed ranges below `base` not yet reported.
    failed_below: Vec<(u64, u64)>,
    /// Whether anything changed since the last [`ack`](Self::ack).
    dirty: bool,
    /// Events settled since the last acknowledgement.
    settled_since_ack: usize,
    window: usize,
    stats: RecvStats,
}

impl<T> RecvWindow<T> {
    /// An empty receiver holding at most `window` events (capped at
    /// [`MAX_RELIABLE_WINDOW`]) ahead of the last acknowledgement.
    pub fn new(window: usize) -> Self {
        RecvWindow {
            expected: 1,
            reorder: BTreeMap::new(),
            base: 1,
            slots: VecDeque::new(),
            failed_below: Vec::new(),
            dirty: false,
            settled_since_ack: 0,
            window: window.clamp(1, MAX_RELIABLE_WINDOW),
            stats: RecvStats::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    /// The next sequence number it expects.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// Events settled since the last acknowledgement was built (for the
    /// caller's "acknowledge every n" rule).
    pub fn settled_since_ack(&self) -> usize {
        self.settled_since_ack
    }

    /// Takes frame `seq`: returns the frames now deliverable in order (this
    /// one and any it unblocked), each of which the caller routes and then
    /// settles with [`settle`](Self::settle). A duplicate returns nothing
    /// (and makes the next acknowledgement due again, since the sender may
    /// have lost the last one).
    pub fn on_frame(&mut self, seq: u64, item: T) -> Result<Vec<(u64, T)>, RecvError> {
        if seq < self.expected || self.reorder.contains_key(&seq) {
            self.stats.duplicates += 1;
            self.dirty = true;
            return Ok(Vec::new());
        }
        let held_from = self.base;
        if seq - held_from >= self.window as u64 {
            return Err(RecvError::BeyondWindow {
                seq,
                expected: self.expected,
                window: self.window,
            });
        }
        if seq != self.expected {
            self.stats.reordered += 1;
            self.reorder.insert(seq, item);
            return Ok(Vec::new());
        }
        let mut out = vec![(seq, item)];
        self.expected += 1;
        while let Some(item) = self.reorder.remove(&self.expected) {
            out.push((self.expected, item));
            self.expected += 1;
        }
        for _ in &out {
            self.slots.push_back(Slot::Routing);
        }
        self.stats.delivered += out.len() as u64;
        Ok(out)
    }

    /// [`on_frame`](Self::on_frame) for a connection that never reorders
    /// (TCP, a client's `PublishReliable`): frame `seq` must be the next
    /// expected one (else [`RecvError::OutOfOrder`]); it is taken for
    /// routing, then settled with [`settle`](Self::settle). Unlike
    /// `on_frame` it allocates nothing: it runs once per event on the
    /// acknowledged publishing path.
    pub fn on_next(&mut self, seq: u64) -> Result<(), RecvError> {
        if seq != self.expected || !self.reorder.is_empty() {
            return Err(RecvError::OutOfOrder {
                seq,
                expected: self.expected,
            });
        }
        if seq - self.base >= self.window as u64 {
            return Err(RecvError::BeyondWindow {
                seq,
                expected: self.expected,
                window: self.window,
            });
        }
        self.expected += 1;
        self.slots.push_back(Slot::Routing);
        self.stats.delivered += 1;
        Ok(())
    }

    fn slot(&mut self, seq: u64) -> Option<&mut Slot> {
        let i = seq.checked_sub(self.base)?;
        self.slots.get_mut(usize::try_from(i).ok()?)
    }

    /// Event `seq`, pending, waits for `more` acknowledgements downstream
    /// besides those it waits for (it was routed again).
    pub fn add_obligations(&mut self, seq: u64, more: u32) -> Result<(), RecvError> {
        let slot = self.slot(seq).ok_or(RecvError::NotAwaiting { seq })?;
        let Slot::Pending { n, failed } = *slot else {
            return Err(RecvError::NotAwaiting { seq });
        };
        *slot = Slot::Pending {
            n: n.saturating_add(more),
            failed,
        };
        Ok(())
    }

    /// Says how many acknowledgements downstream event `seq` waits for
    /// (0: done now, it went to no reliable link).
    pub fn settle(&mut self, seq: u64, obligations: u32) -> Result<(), RecvError> {
        let slot = self.slot(seq).ok_or(RecvError::NotAwaiting { seq })?;
        if *slot != Slot::Routing {
            return Err(RecvError::NotAwaiting { seq });
        }
        *slot = if obligations == 0 {
            Slot::Done
        } else {
            Slot::Pending {
                n: obligations,
                failed: false,
            }
        };
        if obligations == 0 {
            self.settled_since_ack += 1;
            self.dirty = true;
        }
        Ok(())
    }

    /// One of event `seq`'s obligations downstream is over: acknowledged
    /// (`failed` false) or not passed on (`failed`: the event is reported
    /// failed once all are over, so the sender routes it again).
    pub fn complete(&mut self, seq: u64, failed: bool) -> Result<(), RecvError> {
        let slot = self.slot(seq).ok_or(RecvError::NotAwaiting { seq })?;
        let Slot::Pending { n, failed: f } = *slot else {
            return Err(RecvError::NotAwaiting { seq });
        };
        let f = f || failed;
        *slot = match n {
            1 if f => Slot::Failed,
            1 => Slot::Done,
            n => Slot::Pending {
                n: n - 1,
                failed: f,
            },
        };
        if n == 1 {
            self.settled_since_ack += 1;
            self.dirty = true;
        }
        Ok(())
    }

    /// The acknowledgement to send now, if anything changed since the last:
    /// cumulative up to the first unsettled event, failed ranges below it,
    /// and up to [`MAX_ACK_RANGES`] ranges in all.
    pub fn ack(&mut self) -> Option<Ack> {
        if !self.dirty {
            return None;
        }
        // Move the cumulative point over settled events; failed runs are
        // remembered as ranges (at most MAX_ACK_RANGES - 1, so a range above
        // still fits: the point stops short when there are more).
        while let Some(front) = self.slots.front().copied() {
            match front {
                Slot::Done => {}
                Slot::Failed => {
                    let seq = self.base;
                    let ranges = self.failed_below.len();
                    match self.failed_below.last_mut() {
                        Some((_, last)) if *last + 1 == seq => *last = seq,
                        _ if ranges + 1 >= MAX_ACK_RANGES => break,
                        _ => self.failed_below.push((seq, seq)),
                    }
                }
                Slot::Routing | Slot::Pending { .. } => break,
            }
            self.slots.pop_front();
            self.base += 1;
        }
        let mut ranges: Vec<AckRange> = self
            .failed_below
            .drain(..)
            .map(|(first, last)| AckRange {
                first,
                last,
                failed: true,
            })
            .collect();
        // Settled runs above the cumulative point, among the first
        // SACK_SCAN slots (so an acknowledgement costs at most that much
        // however deep the window; later runs are reported once the
        // cumulative point moves).
        let mut run: Option<AckRange> = None;
        for (seq, s) in (self.base..).zip(self.slots.iter().take(SACK_SCAN)) {
            let kind = match s {
                Slot::Done => Some(false),
                Slot::Failed => Some(true),
                _ => None,
            };
            match (kind, run.as_mut()) {
                (Some(f), Some(r)) if r.failed == f && r.last + 1 == seq => r.last = seq,
                (Some(f), _) => {
                    if let Some(r) = run.take() {
                        ranges.push(r);
                    }
                    if ranges.len() >= MAX_ACK_RANGES {
                        break;
                    }
                    run = Some(AckRange {
                        first: seq,
                        last: seq,
                        failed: f,
                    });
                }
                (None, _) => {
                    if let Some(r) = run.take() {
                        ranges.push(r);
                    }
                }
            }
            if ranges.len() >= MAX_ACK_RANGES {
                break;
            }
        }
        if let Some(r) = run {
            if ranges.len() < MAX_ACK_RANGES {
                ranges.push(r);
            }
        }
        // More to say than one ack carries: the next is due at once.
        let truncated = ranges.len() >= MAX_ACK_RANGES;
        self.dirty = truncated
            || matches!(self.slots.front(), Some(Slot::Done | Slot::Failed))
            || !self.failed_below.is_empty();
        self.settled_since_ack = 0;
        self.stats.acks += 1;
        Some(Ack {
            done: self.base - 1,
            ranges,
        })
    }
}

/// What [`Dedupe::check`] says of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not seen before: deliver it.
    New,
    /// Seen before: drop it.
    Duplicate,
    /// Older than the window remembers: dropped as a duplicate (counted
    /// apart, since it may not be one).
    TooOld,
}

/// Counters of a [`Dedupe`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DedupeStats {
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Events older than the window, dropped.
    pub too_old: u64,
    /// Keys forgotten to stay within `max_keys`.
    pub forgotten: u64,
    /// Keys started over by a publisher that started again.
    pub restarts: u64,
}

/// Bits of history kept below each key's highest sequence number.
pub const DEDUPE_WINDOW: u64 = 1024;
const WORDS: usize = (DEDUPE_WINDOW / 64) as usize;

#[derive(Debug, Clone)]
struct Entry {
    highest: u64,
    /// The source time of the event numbered `highest`.
    highest_time: u64,
    /// Which of the [`DEDUPE_WINDOW`] numbers below `highest` were seen: a
    /// ring, number `n`'s bit at `n % DEDUPE_WINDOW` (a move of `highest`
    /// by one clears or sets one bit; a shifted history moved 16 words).
    below: [u64; WORDS],
    used: u64,
    /// `highest` itself was forgotten ([`Dedupe::forget`]).
    highest_unseen: bool,
}

/// A bounded dedupe window: per (origin daemon, publisher) key, the highest
/// sequence number seen and which of the [`DEDUPE_WINDOW`] below it were.
/// At `max_keys` the least recently used half is forgotten (counted); an
/// event of a forgotten key is taken as new.
///
/// **A publisher that starts again** under the same name numbers from 1
/// again: an event numbered at or below the highest seen but with a source
/// time *later* than that highest event's is the new incarnation's (a copy
/// carries its original's source time, which is not later), and starts the
/// key over. So source times are taken to grow per publisher: one whose
/// clock steps back and who restarts meanwhile can see its first events
/// taken for copies.
#[derive(Debug)]
pub struct Dedupe {
    /// Each key's entry in `entries`. foldhash, seeded per process (SipHash
    /// was a few per cent of a receiving daemon's CPU).
    keys: HashMap<(u64, u64), usize, foldhash::fast::RandomState>,
    /// The entries, by the index `keys` gives (a slot in `free` is unused).
    entries: Vec<Entry>,
    free: Vec<usize>,
    /// The key checked last and its index: a stream of one publisher's
    /// events finds its entry without hashing.
    last: Option<((u64, u64), usize)>,
    max_keys: usize,
    clock: u64,
    stats: DedupeStats,
}

impl Dedupe {
    /// An empty window for at most `max_keys` (≥ 2) keys.
    pub fn new(max_keys: usize) -> Self {
        Dedupe {
            keys: HashMap::default(),
            entries: Vec::new(),
            free: Vec::new(),
            last: None,
            max_keys: max_keys.max(2),
            clock: 0,
            stats: DedupeStats::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> DedupeStats {
        self.stats
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether event `seq` (source time `time`) of `publisher` published at
    /// `origin` is new, and notes it.
    pub fn check(&mut self, origin: u64, publisher: u64, seq: u64, time: u64) -> Seen {
        self.clock += 1;
        let clock = self.clock;
        let key = (origin, publisher);
        let Some(i) = self.index(key) else {
            if self.keys.len() >= self.max_keys {
                self.forget_half();
            }
            self.insert(
                key,
                Entry {
                    highest: seq,
                    highest_time: time,
                    below: [0; WORDS],
                    used: clock,
                    highest_unseen: false,
                },
            );
            return Seen::New;
        };
        let e = &mut self.entries[i];
        e.used = clock;
        if seq <= e.highest && time > e.highest_time {
            // The publisher started again (see the type's doc).
            self.stats.restarts += 1;
            *e = Entry {
                highest: seq,
                highest_time: time,
                below: [0; WORDS],
                used: clock,
                highest_unseen: false,
            };
            return Seen::New;
        }
        if seq > e.highest {
            advance(&mut e.below, e.highest, seq, !e.highest_unseen);
            e.highest = seq;
            e.highest_time = time;
            e.highest_unseen = false;
            return Seen::New;
        }
        if seq == e.highest && e.highest_unseen {
            e.highest_unseen = false;
            return Seen::New;
        }
        if seq == e.highest {
            self.stats.duplicates += 1;
            return Seen::Duplicate;
        }
        if e.highest - seq > DEDUPE_WINDOW {
            self.stats.too_old += 1;
            return Seen::TooOld;
        }
        if get(&e.below, seq) {
            self.stats.duplicates += 1;
            return Seen::Duplicate;
        }
        set(&mut e.below, seq);
        Seen::New
    }

    /// Takes back the note [`check`](Self::check) made of event `seq`: a
    /// daemon that could not pass the event on (its route went elsewhere)
    /// must take it when it comes again, not drop it as a copy. For the
    /// highest number seen, the next check of that number is new once.
    pub fn forget(&mut self, origin: u64, publisher: u64, seq: u64) {
        let Some(i) = self.index((origin, publisher)) else {
            return;
        };
        let e = &mut self.entries[i];
        if seq == e.highest {
            e.highest_unseen = true;
        } else if seq < e.highest && e.highest - seq <= DEDUPE_WINDOW {
            clear(&mut e.below, seq);
        }
    }

    /// Its logical clock: one tick per [`check`](Self::check). Mark it,
    /// and later [`forget_unused_since`](Self::forget_unused_since) the mark
    /// forgets the keys idle since (a caller's idle age, in its own time).
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Forgets every key not checked after clock value `mark` (counted in
    /// `forgotten`); returns how many it forgot. An event of a forgotten
    /// key is taken as new.
    pub fn forget_unused_since(&mut self, mark: u64) -> usize {
        let before = self.keys.len();
        self.retain(|e| e.used > mark);
        let n = before - self.keys.len();
        self.stats.forgotten += n as u64;
        n
    }

    /// Notes that every event of the key numbered up to `seq` was seen,
    /// `seq` itself with source time `time`: where a subscriber that
    /// resumes from a saved position stopped. Replaces what the key held.
    pub fn seed(&mut self, origin: u64, publisher: u64, seq: u64, time: u64) {
        self.clock += 1;
        let key = (origin, publisher);
        if !self.keys.contains_key(&key) && self.keys.len() >= self.max_keys {
            self.forget_half();
        }
        self.insert(
            key,
            Entry {
                highest: seq,
                highest_time: time,
                below: [u64::MAX; WORDS],
                used: self.clock,
                highest_unseen: false,
            },
        );
    }

    /// The earliest, over the keys held, of the source time of each key's
    /// highest event: every event not seen yet of a key held has a later
    /// source time (source times grow per publisher). `None` when empty.
    pub fn oldest_highest_time(&self) -> Option<u64> {
        self.keys
            .values()
            .map(|&i| self.entries[i].highest_time)
            .min()
    }

    /// Bytes its keys take (entries and table slots, an estimate).
    pub fn memory(&self) -> usize {
        self.keys.capacity() * (std::mem::size_of::<((u64, u64), usize)>() + 1)
            + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    fn forget_half(&mut self) {
        let mut used: Vec<u64> = self.keys.values().map(|&i| self.entries[i].used).collect();
        used.sort_unstable();
        let cut = used[used.len() / 2];
        let before = self.keys.len();
        self.retain(|e| e.used > cut);
        self.stats.forgotten += (before - self.keys.len()) as u64;
    }

    /// Key `key`'s entry index, if it has one (the last key: no hashing).
    fn index(&mut self, key: (u64, u64)) -> Option<usize> {
        if let Some((k, i)) = self.last {
            if k == key {
                return Some(i);
            }
        }
        let i = *self.keys.get(&key)?;
        self.last = Some((key, i));
        Some(i)
    }

    /// Puts `entry` as `key`'s (replacing what it had).
    fn insert(&mut self, key: (u64, u64), entry: Entry) {
        let i = match self.keys.get(&key) {
            Some(&i) => {
                self.entries[i] = entry;
                i
            }
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.entries[i] = entry;
                        i
                    }
                    None => {
                        self.entries.push(entry);
                        self.entries.len() - 1
                    }
                };
                self.keys.insert(key, i);
                i
            }
        };
        self.last = Some((key, i));
    }

    /// Keeps the keys whose entry `keep` says, freeing the others' slots.
    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        let (entries, free) = (&self.entries, &mut self.free);
        self.keys.retain(|_, i| {
            let kept = keep(&entries[*i]);
            if !kept {
                free.push(*i);
            }
            kept
        });
        if self.last.is_some_and(|(k, _)| !self.keys.contains_key(&k)) {
            self.last = None;
        }
    }
}

/// Number `n`'s bit in a history ring.
fn bit(n: u64) -> (usize, u64) {
    let i = n % DEDUPE_WINDOW;
    ((i / 64) as usize, 1 << (i % 64))
}

fn clear(bits: &mut [u64; WORDS], n: u64) {
    let (w, b) = bit(n);
    bits[w] &= !b;
}

fn get(bits: &[u64; WORDS], n: u64) -> bool {
    let (w, b) = bit(n);
    bits[w] & b != 0
}

fn set(bits: &mut [u64; WORDS], n: u64) {
    let (w, b) = bit(n);
    bits[w] |= b;
}

/// Moves a ring's highest number from `from` to `to` (> `from`): the
/// numbers in between were not seen (their bits, which held numbers now
/// out of the window, are cleared) and `from` itself was if `seen`.
fn advance(bits: &mut [u64; WORDS], from: u64, to: u64, seen: bool) {
    if to - from > DEDUPE_WINDOW {
        // `from` falls out of the window too.
        *bits = [0; WORDS];
        return;
    }
    for n in from + 1..to {
        clear(bits, n);
    }
    if seen {
        set(bits, from);
    } else {
        clear(bits, from);
    }
}

#[cfg(test)]
mod forget_tests {
    use super::*;

    #[test]
    fn dedupe_forgets_keys_unused_since_a_mark_and_keeps_the_others() {
        let mut d = Dedupe::new(64);
        for p in 0..10 {
            assert_eq!(d.check(0, p, 1, 1), Seen::New);
        }
        let mark = d.clock();
        // Publishers 0..3 are heard from again after the mark.
        for p in 0..3 {
            assert_eq!(d.check(0, p, 2, 2), Seen::New);
        }
        assert_eq!(d.forget_unused_since(mark), 7);
        assert_eq!(d.len(), 3);
        assert_eq!(d.stats().forgotten, 7);
        // Kept: a copy is still recognised; forgotten: taken as new.
        assert_eq!(d.check(0, 1, 2, 2), Seen::Duplicate);
        assert_eq!(d.check(0, 5, 1, 1), Seen::New);
    }

    #[test]
    fn the_oldest_highest_time_is_the_earliest_of_each_keys_newest_event() {
        let mut d = Dedupe::new(64);
        assert_eq!(d.oldest_highest_time(), None);
        assert_eq!(d.check(0, 1, 1, 100), Seen::New);
        assert_eq!(d.check(0, 1, 2, 300), Seen::New);
        assert_eq!(d.check(0, 2, 7, 200), Seen::New);
        // Key 1's newest is at 300, key 2's at 200.
        assert_eq!(d.oldest_highest_time(), Some(200));
        // A copy does not move it; a newer event of key 2 does.
        assert_eq!(d.check(0, 2, 7, 200), Seen::Duplicate);
        assert_eq!(d.check(0, 2, 8, 400), Seen::New);
        assert_eq!(d.oldest_highest_time(), Some(300));
    }

    #[test]
    fn a_seeded_key_takes_every_event_up_to_the_seed_as_seen() {
        let mut d = Dedupe::new(64);
        d.seed(0, 1, 5000, 500);
        for seq in [1, 3000, 4000, 4999, 5000] {
            assert_ne!(d.check(0, 1, seq, seq / 10), Seen::New, "{seq}");
        }
        assert_eq!(d.check(0, 1, 5001, 501), Seen::New);
        // A new run of the publisher (numbered from 1, later source times).
        assert_eq!(d.check(0, 1, 1, 900), Seen::New);
    }

    #[test]
    fn a_forgotten_key_is_not_found_through_the_last_key_checked() {
        let mut d = Dedupe::new(64);
        assert_eq!(d.check(0, 1, 5, 5), Seen::New);
        let mark = d.clock();
        assert_eq!(d.forget_unused_since(mark), 1);
        assert_eq!(d.check(0, 1, 5, 5), Seen::New, "key 1 was forgotten");
        assert_eq!(d.forget_unused_since(d.clock()), 1);
        // Key 2 takes the slot key 1 had.
        assert_eq!(d.check(0, 2, 9, 9), Seen::New);
        assert_eq!(d.check(0, 1, 5, 5), Seen::New, "key 1 was forgotten again");
        assert_eq!(
            d.check(0, 2, 9, 9),
            Seen::Duplicate,
            "key 2 kept its history"
        );
        assert_eq!(d.check(0, 1, 5, 5), Seen::Duplicate);
        // Forgetting half at the bound keeps the recent keys' histories.
        let mut d = Dedupe::new(4);
        for p in 0..4 {
            assert_eq!(d.check(0, p, 1, 1), Seen::New);
        }
        assert_eq!(d.check(0, 3, 2, 2), Seen::New);
        assert_eq!(
            d.check(0, 9, 1, 1),
            Seen::New,
            "a fifth key: half forgotten"
        );
        assert!(d.len() <= 3, "{}", d.len());
        assert_eq!(d.check(0, 3, 2, 2), Seen::Duplicate);
        assert_eq!(d.check(0, 9, 1, 1), Seen::Duplicate);
        assert_eq!(d.check(0, 0, 1, 1), Seen::New, "key 0 was the least recent");
    }

    #[test]
    fn the_window_reaches_exactly_its_width_below_the_highest() {
        let w = DEDUPE_WINDOW;
        let mut d = Dedupe::new(16);
        assert_eq!(d.check(0, 1, 10, 10), Seen::New);
        // A jump of exactly the window keeps the old highest (now at the
        // window's far edge); one more pushes it out.
        assert_eq!(d.check(0, 1, 10 + w, 20), Seen::New);
        assert_eq!(d.check(0, 1, 10, 10), Seen::Duplicate);
        assert_eq!(d.check(0, 1, 11, 11), Seen::New);
        assert_eq!(d.check(0, 1, 11 + w, 30), Seen::New);
        assert_eq!(d.check(0, 1, 10, 10), Seen::TooOld);
        assert_eq!(d.check(0, 1, 11, 11), Seen::Duplicate);
        // Numbers skipped over are not taken as seen, whatever their ring
        // bit held before (12's bit held 12 + w's, now the next highest's).
        assert_eq!(d.check(0, 1, 12 + w, 40), Seen::New);
        for n in 12..10 + w {
            assert_eq!(d.check(0, 1, n, 1), Seen::New, "{n}");
        }
        for n in [10 + w, 11 + w, 12 + w] {
            assert_eq!(d.check(0, 1, n, 1), Seen::Duplicate, "{n}");
        }
    }

    #[test]
    fn a_forgotten_event_is_new_again_once_and_others_stay_copies() {
        let mut d = Dedupe::new(16);
        for seq in 1..=5 {
            assert_eq!(d.check(1, 2, seq, seq), Seen::New);
        }
        // 3 (below the highest) and 5 (the highest) could not be passed on.
        d.forget(1, 2, 3);
        d.forget(1, 2, 5);
        assert_eq!(d.check(1, 2, 3, 3), Seen::New);
        assert_eq!(d.check(1, 2, 3, 3), Seen::Duplicate);
        assert_eq!(d.check(1, 2, 5, 5), Seen::New);
        assert_eq!(d.check(1, 2, 5, 5), Seen::Duplicate);
        assert_eq!(d.check(1, 2, 4, 4), Seen::Duplicate);
        // A forgotten highest overtaken by a newer event stays forgotten.
        d.forget(1, 2, 5);
        assert_eq!(d.check(1, 2, 6, 6), Seen::New);
        assert_eq!(d.check(1, 2, 5, 5), Seen::New);
        assert_eq!(d.check(1, 2, 5, 5), Seen::Duplicate);
    }
}

/// When a [`DeliveryAcks`] acknowledges: after `every` events, or `after`
/// ns past the first unacknowledged one — never one acknowledgement per
/// event under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckBatching {
    /// Acknowledge once this many events wait (at least 1).
    pub every: u64,
    /// Acknowledge once the oldest unacknowledged event waited this long (ns).
    pub after: u64,
}

impl Default for AckBatching {
    fn default() -> Self {
        AckBatching {
            every: 64,
            after: 20_000_000,
        }
    }
}

/// A `DeliverReliable` that cannot be right on a connection that keeps
/// order (a TCP or Unix stream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// Not the next delivery sequence number of its subscription.
    #[error("delivery sequence number {seq}, expected {expected} (they start at 1 on each connection and grow by one)")]
    OutOfOrder {
        /// The number received.
        seq: u64,
        /// The next expected.
        expected: u64,
    },
}

/// A subscriber's side of acknowledged delivery for one subscription on
/// one connection (the daemon's side is a [`SendWindow`]): checks that the
/// delivery sequence numbers come in order and batches cumulative
/// acknowledgements ([`AckBatching`]). A new connection starts a new one
/// (numbers start at 1 again); what the daemon sends again after a
/// reconnect is recognised by a [`Dedupe`] kept across connections.
#[derive(Debug)]
pub struct DeliveryAcks {
    expected: u64,
    acked: u64,
    /// When the oldest unacknowledged event was taken (ns).
    since: Option<u64>,
    batching: AckBatching,
}

impl DeliveryAcks {
    /// A receiver expecting sequence number 1.
    pub fn new(batching: AckBatching) -> Self {
        DeliveryAcks {
            expected: 1,
            acked: 0,
            since: None,
            batching: AckBatching {
                every: batching.every.max(1),
                after: batching.after,
            },
        }
    }

    /// Takes delivery `seq` at `now`: it must be the next one.
    pub fn on_frame(&mut self, seq: u64, now: u64) -> Result<(), DeliveryError> {
        if seq != self.expected {
            return Err(DeliveryError::OutOfOrder {
                seq,
                expected: self.expected,
            });
        }
        self.expected += 1;
        self.since.get_or_insert(now);
        Ok(())
    }

    /// Events taken and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.expected - 1 - self.acked
    }

    /// The acknowledgement due at `now` by the batching rule, if any.
    pub fn poll_ack(&mut self, now: u64) -> Option<Ack> {
        self.poll_ack_holding(now, 0)
    }

    /// The acknowledgement due at `now` by the batching rule, holding back
    /// the newest `held` events taken (still in the application's queue,
    /// not yet read: acknowledged once read, so that the sender's window,
    /// not this queue, bounds what waits for a slow reader). With events
    /// held, the rule's clock restarts at each acknowledgement.
    pub fn poll_ack_holding(&mut self, now: u64, held: u64) -> Option<Ack> {
        let upto = (self.expected - 1).saturating_sub(held);
        if upto <= self.acked {
            return None;
        }
        let due = upto - self.acked >= self.batching.every
            || self
                .since
                .is_some_and(|t| now.saturating_sub(t) >= self.batching.after);
        due.then(|| self.ack_upto(upto, now))
    }

    /// Acknowledges everything up to `upto` (taken, > `acked`).
    fn ack_upto(&mut self, upto: u64, now: u64) -> Ack {
        self.acked = upto;
        self.since = (self.unacked() > 0).then_some(now);
        Ack {
            done: upto,
            ranges: Vec::new(),
        }
    }

    /// When an acknowledgement falls due by time (ns), if one waits.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.since.map(|t| t.saturating_add(self.batching.after))
    }

    /// Acknowledges everything taken, now (e.g. before closing), if
    /// anything waits.
    pub fn flush(&mut self) -> Option<Ack> {
        if self.unacked() == 0 {
            return None;
        }
        self.acked = self.expected - 1;
        self.since = None;
        Some(Ack {
            done: self.acked,
            ranges: Vec::new(),
        })
    }
}

#[cfg(test)]
mod delivery_tests {
    use super::*;

    #[test]
    fn events_the_application_holds_are_acknowledged_once_it_reads_them() {
        let mut d = DeliveryAcks::new(AckBatching {
            every: 3,
            after: 100,
        });
        for seq in 1..=5 {
            d.on_frame(seq, 0).unwrap();
        }
        // Five taken, all five still queued: nothing to acknowledge, even
        // past the time rule.
        assert_eq!(d.poll_ack_holding(500, 5), None);
        // Two read (three held): fewer than `every`, but the time rule holds.
        assert_eq!(d.poll_ack_holding(500, 3).map(|a| a.done), Some(2));
        // The clock restarted at that acknowledgement.
        assert_eq!(d.poll_timeout(), Some(600));
        // One more read: two waiting, under both rules.
        assert_eq!(d.poll_ack_holding(550, 1), None);
        // All read: the count rule.
        assert_eq!(d.poll_ack_holding(550, 0).map(|a| a.done), Some(5));
        assert_eq!(d.poll_timeout(), None);
    }

    #[test]
    fn acknowledgements_are_batched_by_count_and_by_time() {
        let mut d = DeliveryAcks::new(AckBatching {
            every: 3,
            after: 100,
        });
        d.on_frame(1, 0).unwrap();
        d.on_frame(2, 10).unwrap();
        assert_eq!(d.poll_ack(20), None);
        assert_eq!(d.poll_timeout(), Some(100));
        d.on_frame(3, 30).unwrap();
        assert_eq!(d.poll_ack(30).map(|a| a.done), Some(3));
        assert_eq!(d.poll_timeout(), None);
        d.on_frame(4, 200).unwrap();
        assert_eq!(d.poll_ack(299), None);
        assert_eq!(d.poll_ack(300).map(|a| a.done), Some(4));
        assert_eq!(d.flush(), None);
        assert_eq!(
            d.on_frame(6, 400),
            Err(DeliveryError::OutOfOrder {
                seq: 6,
                expected: 5
            })
        );
    }
}
