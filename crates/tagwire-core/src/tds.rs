//! Time services (NaradaBrokering §3.3–3.4), sans-I/O: the **buffering
//! service** ([`TimeBuffer`]), which time-orders events by their source
//! time and releases them by the paper's four criteria, and the
//! **time-differential service** ([`Playout`]), which releases events
//! keeping their original spacing after a bounded playout delay, so that
//! the network's jitter is removed. [`TimeService`] chains the two as a
//! channel's `buffer=` and `playout=` QoS properties ask (docs/time.md),
//! and [`Jitter`] is RFC 3550's interarrival jitter estimator, measured at
//! the service's input and output.
//!
//! Time is an argument: [`TimeService::push`] takes the arrival time,
//! [`TimeService::poll`] returns the event to release now (if any) and
//! [`TimeService::next_wake`] says when to call it again. The caller's
//! clock is one axis (the daemon's local clock, ns); source times are the
//! publisher's (network time under `network_clock`, docs/federation.md).
//! The playout engine does not need the two clocks to agree: it anchors
//! each stream's transit (arrival − source time) at its first event.
//!
//! Which to pick: `playout=tds:D` alone for a media or telemetry stream
//! whose receiver wants the publisher's spacing back (D a little above the
//! path's jitter); `buffer=…` alone to time-order events of several
//! publishers before delivery; both to do what the paper's Fig. 15 does.
//!
//! ```
//! use tagwire_core::tds::{LatePolicy, PlayoutConfig, TimeService};
//! let playout = PlayoutConfig { delay_ns: 10, late: LatePolicy::Deliver };
//! let mut tds = TimeService::new(None, Some(playout), 64, 1 << 20);
//! // Source times 100 and 110 arrive 5 and 12 ns late: jitter 7 ns.
//! tds.push("a", 100, 1, 105);
//! tds.push("b", 110, 1, 122);
//! assert_eq!(tds.next_wake(), Some(115)); // 100 + 5 (transit) + 10 (delay)
//! assert_eq!(tds.poll(115), Some("a"));
//! assert_eq!(tds.next_wake(), Some(125)); // the original 10 ns spacing
//! assert_eq!(tds.poll(125), Some("b"));
//! ```

use std::collections::{BTreeMap, VecDeque};

/// Default bound of a time service, in events (as `max_queue_length`).
pub const DEFAULT_MAX_EVENTS: usize = 1024;
/// Default bound of a time service, in bytes.
pub const DEFAULT_MAX_BYTES: usize = 8 << 20;
/// Largest event bound (`count:`).
pub const MAX_EVENTS: usize = 1 << 20;
/// Largest byte bound (`bytes:`), 1 GiB.
pub const MAX_BYTES: usize = 1 << 30;
/// Longest `max_delay:` of the buffer and playout delay of the TDS (60 s).
pub const MAX_HOLD_NS: u64 = 60_000_000_000;
/// Late events in a row after which the playout re-anchors its stream (the
/// path became slower for good, or the publisher's clock stepped).
pub const REANCHOR_AFTER_LATE: u32 = 8;

/// The buffering service's four release criteria (§3.3): when the buffer
/// holds `max_events` events or `max_bytes` bytes, or its oldest event has
/// waited `max_delay_ns`, it releases the earliest (by source time)
/// `release_permille`/1000 of what it holds, at least one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferConfig {
    /// Number of events that triggers a release (1..=[`MAX_EVENTS`]).
    pub max_events: usize,
    /// Total bytes that trigger a release (1..=[`MAX_BYTES`]).
    pub max_bytes: usize,
    /// Longest an event waits in the buffer, ns (1..=[`MAX_HOLD_NS`]).
    pub max_delay_ns: u64,
    /// The release factor in thousandths (500..=1000: 0.5–1.0).
    pub release_permille: u16,
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            max_events: DEFAULT_MAX_EVENTS,
            max_bytes: DEFAULT_MAX_BYTES,
            max_delay_ns: 100_000_000,
            release_permille: 1000,
        }
    }
}

/// What the playout does with an event that arrives after its playout time
/// (its transit exceeds the stream's first by more than the delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum LatePolicy {
    /// Deliver it at once, out of spacing, and count it (`late`): the
    /// default, since a late event is usually still wanted.
    #[default]
    Deliver,
    /// Drop it and count it (`late_dropped`): for media whose late frames
    /// are worthless.
    Drop,
}

/// The time-differential service's settings (§3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlayoutConfig {
    /// The playout delay, ns: an on-time event is released this long after
    /// the stream's first transit plus its source-time offset (1..=[`MAX_HOLD_NS`]).
    pub delay_ns: u64,
    /// What happens to a late event.
    pub late: LatePolicy,
}

/// RFC 3550 (§6.4.1, A.8) interarrival jitter: J += (|D| − J)/16, where D
/// is the difference of two consecutive events' transit times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Jitter {
    last: Option<(u64, u64)>,
    /// 16 × J, ns (the RFC's fixed-point form).
    j16: u64,
}

impl Jitter {
    /// Takes one event seen at `at` with source time `src`.
    pub fn observe(&mut self, at: u64, src: u64) {
        if let Some((a, s)) = self.last {
            let d = (at as i128 - a as i128) - (src as i128 - s as i128);
            let d = d.unsigned_abs().min(u64::MAX as u128 / 32) as u64;
            // J16 += |D| - J16/16, rounded as the RFC's appendix does.
            self.j16 = self.j16 + d - ((self.j16 + 8) >> 4);
        }
        self.last = Some((at, src));
    }

    /// The estimate, ns.
    pub fn ns(&self) -> u64 {
        self.j16 >> 4
    }

    /// Whether it has seen an event (the estimate means something).
    pub fn has_seen(&self) -> bool {
        self.last.is_some()
    }

    /// Its state as three words (last arrival, last source time, 16 × J;
    /// an arrival of 0: nothing seen), so that a caller can keep it in
    /// plain atomics beside a lock it already holds.
    pub fn to_parts(&self) -> [u64; 3] {
        match self.last {
            Some((a, s)) => [a.max(1), s, self.j16],
            None => [0, 0, self.j16],
        }
    }

    /// The estimator [`to_parts`](Self::to_parts) described.
    pub fn from_parts([at, src, j16]: [u64; 3]) -> Self {
        Jitter {
            last: (at != 0).then_some((at, src)),
            j16,
        }
    }
}

/// The spacing rule the time-differential service and replay share: a
/// stream anchored at one event (its local arrival time and source time)
/// releases every later event at `anchor arrival + (source time − anchor
/// source time) + delay`, so events leave exactly as far apart as their
/// source times are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spacer {
    /// Local time minus source time at the anchor, ns.
    base: Option<i128>,
}

impl Spacer {
    /// Whether an anchor is set.
    pub fn is_anchored(&self) -> bool {
        self.base.is_some()
    }

    /// Anchors the stream at an event of source time `src` seen at `now`.
    pub fn anchor(&mut self, now: u64, src: u64) {
        self.base = Some(now as i128 - src as i128);
    }

    /// How far (ns) an event of source time `src` seen at `now` is behind
    /// the anchor's schedule (negative: ahead of it); 0 before an anchor.
    pub fn offset(&self, now: u64, src: u64) -> i128 {
        self.base.map_or(0, |b| (now as i128 - src as i128) - b)
    }

    /// When to release an event of source time `src` with a playout delay
    /// of `delay` ns (anchoring at `now` if there is no anchor yet).
    pub fn release_at(&mut self, now: u64, src: u64, delay: u64) -> u64 {
        let base = *self.base.get_or_insert(now as i128 - src as i128);
        (src as i128 + base + delay as i128).clamp(0, u64::MAX as i128) as u64
    }
}

/// One held event.
#[derive(Debug)]
struct Held<T> {
    item: T,
    src: u64,
    bytes: usize,
    arrived: u64,
}

/// The buffering service: time-orders held events by source time and
/// releases them by [`BufferConfig`]'s criteria. It never holds more than
/// `max_events` events or (beyond one oversized event) `max_bytes` bytes:
/// reaching either releases.
#[derive(Debug)]
pub struct TimeBuffer<T> {
    cfg: BufferConfig,
    by_src: BTreeMap<(u64, u64), Held<T>>,
    /// (arrival, seq) → source time, for the time criterion.
    by_arrival: BTreeMap<(u64, u64), u64>,
    bytes: usize,
    seq: u64,
}

impl<T> TimeBuffer<T> {
    /// An empty buffer.
    pub fn new(cfg: BufferConfig) -> Self {
        TimeBuffer {
            cfg,
            by_src: BTreeMap::new(),
            by_arrival: BTreeMap::new(),
            bytes: 0,
            seq: 0,
        }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.by_src.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.by_src.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn push(&mut self, h: Held<T>) {
        self.seq += 1;
        self.bytes += h.bytes;
        self.by_arrival.insert((h.arrived, self.seq), h.src);
        self.by_src.insert((h.src, self.seq), h);
    }

    /// Whether a release criterion holds at `now`.
    pub fn due(&self, now: u64) -> bool {
        !self.is_empty()
            && (self.len() >= self.cfg.max_events
                || self.bytes >= self.cfg.max_bytes
                || self.next_wake().is_some_and(|w| w <= now))
    }

    /// When the time criterion next holds: the oldest arrival + `max_delay`.
    pub fn next_wake(&self) -> Option<u64> {
        let (&(arrived, _), _) = self.by_arrival.first_key_value()?;
        Some(arrived.saturating_add(self.cfg.max_delay_ns))
    }

    /// Releases ⌈release factor × held⌉ (at least one) of the earliest
    /// events by source time, in source-time order, into `out`.
    fn release(&mut self, mut out: impl FnMut(Held<T>)) {
        let n = (self.len() * self.cfg.release_permille as usize).div_ceil(1000);
        for _ in 0..n.max(1) {
            let Some(((_, seq), h)) = self.by_src.pop_first() else {
                break;
            };
            self.by_arrival.remove(&(h.arrived, seq));
            self.bytes -= h.bytes;
            out(h);
        }
    }
}

/// The time-differential service: releases each event at the stream's
/// anchor transit + its source time + the playout delay, so consecutive
/// events leave as far apart as their source times are. The anchor is the
/// first event's transit; an event that would wait more than twice the
/// delay (the first event was slow, an earlier clock, a new publisher)
/// re-anchors the stream and moves the held events as much earlier, and
/// [`REANCHOR_AFTER_LATE`] late events in a row re-anchor it (a slower
/// path). So every event waits at most 2 × delay. At its bound (events or bytes) the earliest held event
/// is released at once (counted `forced`).
#[derive(Debug)]
pub struct Playout<T> {
    cfg: PlayoutConfig,
    max_events: usize,
    max_bytes: usize,
    /// (release time, source time, seq) → event.
    held: BTreeMap<(u64, u64, u64), Held<T>>,
    bytes: usize,
    seq: u64,
    /// The stream's anchor (see [`Spacer`]).
    spacer: Spacer,
    late_run: u32,
}

/// Where [`Playout::push`] put an event.
enum Placed<T> {
    /// Held until its release time.
    Held,
    /// To be released now (late, or forced out by the bound).
    Now(Held<T>),
    /// Dropped (late, `LatePolicy::Drop`).
    Dropped,
}

impl<T> Playout<T> {
    /// An empty playout bounded by `max_events` events and `max_bytes` bytes.
    pub fn new(cfg: PlayoutConfig, max_events: usize, max_bytes: usize) -> Self {
        Playout {
            cfg,
            max_events: max_events.max(1),
            max_bytes: max_bytes.max(1),
            held: BTreeMap::new(),
            bytes: 0,
            seq: 0,
            spacer: Spacer::default(),
            late_run: 0,
        }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The earliest release time held.
    pub fn next_wake(&self) -> Option<u64> {
        self.held.first_key_value().map(|(&(t, _, _), _)| t)
    }

    fn push(&mut self, h: Held<T>, now: u64, stats: &mut TimeStats) -> Placed<T> {
        let delay = self.cfg.delay_ns as i128;
        if !self.spacer.is_anchored() {
            self.spacer.anchor(now, h.src);
        }
        let offset = self.spacer.offset(now, h.src);
        if offset < -delay {
            // It would wait over 2 × delay (the anchor event was slow, or
            // the path became faster): a new anchor, and the held events
            // move as much earlier, keeping their order and spacing (but
            // not before now).
            self.spacer.anchor(now, h.src);
            stats.reanchored += 1;
            let shift = offset.unsigned_abs().min(u64::MAX as u128) as u64;
            self.held = std::mem::take(&mut self.held)
                .into_iter()
                .map(|((at, src, seq), h)| ((at.saturating_sub(shift).max(now), src, seq), h))
                .collect();
        } else if offset > delay {
            self.late_run += 1;
            if self.late_run < REANCHOR_AFTER_LATE {
                return match self.cfg.late {
                    LatePolicy::Deliver => {
                        stats.late += 1;
                        Placed::Now(h)
                    }
                    LatePolicy::Drop => {
                        stats.late_dropped += 1;
                        Placed::Dropped
                    }
                };
            }
            self.spacer.anchor(now, h.src);
            stats.reanchored += 1;
        }
        self.late_run = 0;
        let at = self.spacer.release_at(now, h.src, self.cfg.delay_ns);
        self.seq += 1;
        self.bytes += h.bytes;
        self.held.insert((at, h.src, self.seq), h);
        Placed::Held
    }

    /// The earliest held event, if its time has come or `force`.
    fn pop(&mut self, now: u64, force: bool) -> Option<Held<T>> {
        let (&(at, _, _), _) = self.held.first_key_value()?;
        if at > now && !force {
            return None;
        }
        let (_, h) = self.held.pop_first()?;
        self.bytes -= h.bytes;
        Some(h)
    }

    fn over(&self) -> bool {
        self.held.len() > self.max_events || self.bytes > self.max_bytes
    }
}

/// What a [`TimeService`] did, for `tagwire admin show` and `list --json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeStats {
    /// Events released.
    pub released: u64,
    /// Late events delivered at once, out of spacing.
    pub late: u64,
    /// Late events dropped (`LatePolicy::Drop`).
    pub late_dropped: u64,
    /// Events released early because the service was at its bound.
    pub forced: u64,
    /// Events dropped because the caller did not take released events
    /// (its due list was at the bound).
    pub overflowed: u64,
    /// Times the playout re-anchored its stream.
    pub reanchored: u64,
}

/// A channel's time services: an optional buffering service feeding an
/// optional time-differential service. Bounded: the buffer by its release
/// criteria, the playout and the list of events due now by `max_events` /
/// `max_bytes` each (at the playout's bound the earliest event is released
/// early; at the due list's the oldest due event is dropped, counted
/// `overflowed`).
#[derive(Debug)]
pub struct TimeService<T> {
    buffer: Option<TimeBuffer<T>>,
    playout: Option<Playout<T>>,
    /// Released, not yet taken by [`poll`](Self::poll).
    due: VecDeque<Held<T>>,
    max_events: usize,
    stats: TimeStats,
    input: Jitter,
    output: Jitter,
}

impl<T> TimeService<T> {
    /// A service with a buffer and/or a playout (with neither, events pass
    /// straight through), bounded by `max_events` and `max_bytes`.
    pub fn new(
        buffer: Option<BufferConfig>,
        playout: Option<PlayoutConfig>,
        max_events: usize,
        max_bytes: usize,
    ) -> Self {
        TimeService {
            buffer: buffer.map(TimeBuffer::new),
            playout: playout.map(|p| Playout::new(p, max_events, max_bytes)),
            due: VecDeque::new(),
            max_events: max_events.max(1),
            stats: TimeStats::default(),
            input: Jitter::default(),
            output: Jitter::default(),
        }
    }

    /// Takes an event with source time `src` and size `bytes`, arrived at
    /// `now`. Call [`poll`](Self::poll) after: it may be due at once.
    pub fn push(&mut self, item: T, src: u64, bytes: usize, now: u64) {
        self.input.observe(now, src);
        let h = Held {
            item,
            src,
            bytes,
            arrived: now,
        };
        match &mut self.buffer {
            Some(b) => {
                b.push(h);
                self.drain_buffer(now);
            }
            None => self.pass_on(h, now),
        }
    }

    /// Moves what the buffer's criteria release at `now` onward.
    fn drain_buffer(&mut self, now: u64) {
        let mut released = Vec::new();
        if let Some(b) = &mut self.buffer {
            // Each round releases at least one event: bounded.
            while b.due(now) {
                b.release(|h| released.push(h));
            }
        }
        for h in released {
            self.pass_on(h, now);
        }
    }

    fn pass_on(&mut self, h: Held<T>, now: u64) {
        let (due, max, stats) = (&mut self.due, self.max_events, &mut self.stats);
        let Some(p) = &mut self.playout else {
            return make_due(due, max, stats, h);
        };
        match p.push(h, now, stats) {
            Placed::Held | Placed::Dropped => {}
            Placed::Now(h) => make_due(due, max, stats, h),
        }
        while p.over() {
            let Some(h) = p.pop(now, true) else { break };
            stats.forced += 1;
            make_due(due, max, stats, h);
        }
    }

    /// The next event to release at `now`, if any: the due ones first,
    /// then those the buffer's time criterion releases, then the playout's.
    pub fn poll(&mut self, now: u64) -> Option<T> {
        if self.due.is_empty() {
            self.drain_buffer(now);
        }
        let h = match self.due.pop_front() {
            Some(h) => h,
            None => self.playout.as_mut()?.pop(now, false)?,
        };
        self.output.observe(now, h.src);
        self.stats.released += 1;
        Some(h.item)
    }

    /// When to call [`poll`](Self::poll) next (`Some(0)`: now); `None`
    /// when nothing is held.
    pub fn next_wake(&self) -> Option<u64> {
        if !self.due.is_empty() {
            return Some(0);
        }
        let b = self.buffer.as_ref().and_then(|b| {
            // Count and bytes were drained at push; only time remains.
            b.next_wake()
        });
        let p = self.playout.as_ref().and_then(|p| p.next_wake());
        match (b, p) {
            (Some(b), Some(p)) => Some(b.min(p)),
            (b, p) => b.or(p),
        }
    }

    /// Events held (buffer, playout and due).
    pub fn len(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| b.len())
            + self.playout.as_ref().map_or(0, |p| p.len())
            + self.due.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held (buffer, playout and due).
    pub fn bytes(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| b.bytes())
            + self.playout.as_ref().map_or(0, |p| p.bytes)
            + self.due.iter().map(|h| h.bytes).sum::<usize>()
    }

    /// Its counters.
    pub fn stats(&self) -> TimeStats {
        self.stats
    }

    /// RFC 3550 jitter of the events at its input (arrival vs source
    /// time), ns.
    pub fn input_jitter_ns(&self) -> u64 {
        self.input.ns()
    }

    /// RFC 3550 jitter of the events it released (release vs source
    /// time), ns.
    pub fn output_jitter_ns(&self) -> u64 {
        self.output.ns()
    }

    /// Removes every held event (the service's settings changed or it was
    /// turned off), in release order as far as known: due, buffer, playout.
    pub fn drain_all(&mut self) -> Vec<T> {
        let mut out: Vec<T> = self.due.drain(..).map(|h| h.item).collect();
        if let Some(b) = &mut self.buffer {
            out.extend(std::mem::take(&mut b.by_src).into_values().map(|h| h.item));
            b.by_arrival.clear();
            b.bytes = 0;
        }
        if let Some(p) = &mut self.playout {
            out.extend(std::mem::take(&mut p.held).into_values().map(|h| h.item));
            p.bytes = 0;
        }
        out
    }
}

/// Queues a released event for [`TimeService::poll`]; at the bound the
/// oldest due event is dropped and counted.
fn make_due<T>(due: &mut VecDeque<Held<T>>, max: usize, stats: &mut TimeStats, h: Held<T>) {
    if due.len() >= max {
        due.pop_front();
        stats.overflowed += 1;
    }
    due.push_back(h);
}

#[cfg(test)]
mod tests;
