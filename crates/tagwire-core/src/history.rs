//! Pull buffers (history): per tag and publisher, a bounded ring of the most
//! recent encoded events, and the queries a `Pull` makes on it (the CMU
//! push-pull paper's §3.2 history buffers).
//!
//! Sans-I/O: the router hands each delivered event to
//! [`HistoryTable::record`] with the tag's `history` (events kept) and the
//! bytes the event counts for; a pull is [`HistoryTable::query`], which
//! answers the events held (as shared [`Bytes`], no copy), a
//! [`PullStatus::More`] when the per-reply cap cut it short, or
//! [`PullStatus::Gone`] with the oldest sequence number still held — never
//! an empty success.
//!
//! **Bounds**, each with its behaviour:
//! - a ring holds at most `history` events and
//!   [`HistoryLimits::max_bytes_per_tag`] bytes: a new event evicts the
//!   oldest ones until both hold; an event larger than the byte bound on its
//!   own is not recorded (counted in [`HistoryStats::too_large`]);
//! - at most [`HistoryLimits::max_publishers_per_tag`] rings per tag: a new
//!   publisher evicts the ring written least recently;
//! - at most [`HistoryLimits::max_tags`] tags with history: an event on one
//!   more tag is not recorded (counted in [`HistoryStats::tags_refused`]);
//! - at most [`HistoryLimits::max_total_bytes`] bytes in all: a new event
//!   evicts the oldest events of its own ring until the total fits; if its
//!   ring runs empty first, it is not recorded (counted in
//!   [`HistoryStats::over_budget`]);
//! - a reply carries at most [`HistoryLimits::max_reply_events`] events and
//!   [`HistoryLimits::max_reply_bytes`] bytes (at least one event): a longer
//!   answer ends with [`PullStatus::More`] and the next sequence number.
//!
//! Sequence numbers of a publisher's ring rise; an event whose number is not
//! above the newest held (a publisher that restarted) empties the ring first,
//! so the ring is always ordered and searched in O(log n).
//!
//! ```
//! use bytes::Bytes;
//! use tagwire_core::history::{HistoryLimits, HistoryTable};
//! use tagwire_proto::{PullQuery, PullStatus};
//! let mut table = HistoryTable::new(HistoryLimits::default());
//! for seq in 1..=5u64 {
//!     table.record("/t", "/pub", seq, seq * 10, Bytes::from(vec![seq as u8]), 3, 1);
//! }
//! let a = table.query("/t", "", &PullQuery::Latest).unwrap();
//! assert_eq!(a.events, vec![Bytes::from(vec![5u8])]);
//! let gone = table.query("/t", "", &PullQuery::Seq(1)).unwrap();
//! assert_eq!((gone.status, gone.oldest), (PullStatus::Gone, 3));
//! ```

mod policy;

pub use policy::{capacity_of, HistoryPolicy, POLICY_CACHE_TAGS};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tagwire_proto::{PullQuery, PullStatus, MAX_PULL_REPLY_EVENTS};

/// Largest `history` value the QoS property accepts anywhere; a router
/// configures a lower bound of its own (`limits.max_history`).
pub const MAX_HISTORY: usize = 1_000_000;

/// Bytes counted per held event besides what the router charges for it:
/// the ring slot and the `Bytes` header.
pub const ENTRY_OVERHEAD: usize = 64;

/// The table's bounds (see the module doc for what happens at each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Tags that keep history at once.
    pub max_tags: usize,
    /// Bytes held by all rings together.
    pub max_total_bytes: usize,
    /// Bytes held by one tag's rings together.
    pub max_bytes_per_tag: usize,
    /// Publisher rings per tag.
    pub max_publishers_per_tag: usize,
    /// Events in one reply.
    pub max_reply_events: usize,
    /// Event bytes in one reply.
    pub max_reply_bytes: usize,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_tags: 4096,
            max_total_bytes: 256 * 1024 * 1024,
            max_bytes_per_tag: 16 * 1024 * 1024,
            max_publishers_per_tag: 64,
            max_reply_events: 1024,
            max_reply_bytes: 1024 * 1024,
        }
    }
}

/// Why a pull cannot be answered at all (a missing event is not an error:
/// it is [`PullStatus::Gone`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The tag keeps no history (its `history` is 0, or nothing was recorded
    /// since it was set).
    #[error("tag {} keeps no history (set one with `tagwire admin qos TAG history=N`)", tagwire_proto::excerpt(.tag))]
    NoHistory {
        /// The tag.
        tag: String,
    },
    /// The tag keeps history, but not of this publisher.
    #[error("tag {} holds no history of publisher {}", tagwire_proto::excerpt(.tag), tagwire_proto::excerpt(.publisher))]
    UnknownPublisher {
        /// The tag.
        tag: String,
        /// The publisher named.
        publisher: String,
    },
    /// A sequence number after the newest held: not published yet.
    #[error("sequence number {seq} is out of range: the newest held is {newest}")]
    SeqAfterNewest {
        /// The number asked for.
        seq: u64,
        /// The newest held.
        newest: u64,
    },
    /// `Nth(n)` with `n` at or beyond the tag's `history`: never held.
    #[error("n-th most recent {n} is out of range: history keeps {capacity} events (n 0..={})", .capacity.saturating_sub(1))]
    NthBeyondHistory {
        /// The `n` asked for.
        n: u32,
        /// The tag's `history`.
        capacity: usize,
    },
    /// A replay query (`Stored`, code 6): served by the durable store of
    /// the daemon the client is connected to, never from history.
    #[error("a replay (pull query Stored) reads the durable store of the daemon the client is connected to, not a pull buffer")]
    NotHistory,
    /// A range whose first end is after its last.
    #[error("range {first}..{last} is backwards")]
    Backwards {
        /// First end.
        first: u64,
        /// Last end.
        last: u64,
    },
    /// A sequence range of more events than the buffer can ever hold.
    #[error("range {first}..{last} spans {len} events, larger than the buffer of {capacity} (history={capacity})")]
    RangeLargerThanBuffer {
        /// First sequence number.
        first: u64,
        /// Last sequence number.
        last: u64,
        /// Events it spans.
        len: u128,
        /// The tag's `history`.
        capacity: usize,
    },
}

/// The answer to a pull that could be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Complete, more to ask for, or gone.
    pub status: PullStatus,
    /// The encoded events, oldest first (empty when gone).
    pub events: Vec<Bytes>,
    /// Oldest sequence number held (0 if none).
    pub oldest: u64,
    /// Newest sequence number held (0 if none).
    pub newest: u64,
    /// Events held in the ring asked.
    pub held: usize,
}

/// Counters of the table (for `tagwire admin show` and the listing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryStats {
    /// Events recorded.
    pub recorded: u64,
    /// Events evicted by a bound (count, bytes, a new publisher, a restart).
    pub evicted: u64,
    /// Events not recorded: larger than the per-tag byte bound.
    pub too_large: u64,
    /// Events not recorded: a new tag beyond `max_tags`.
    pub tags_refused: u64,
    /// Events not recorded: the total byte bound, with their ring empty.
    pub over_budget: u64,
}

/// One tag's history, as `tagwire admin show` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagHistoryInfo {
    /// Its `history` (events kept per publisher).
    pub capacity: usize,
    /// Events held, all publishers.
    pub events: usize,
    /// Bytes counted, all publishers.
    pub bytes: usize,
    /// Publishers with a ring, with (oldest, newest, held) each.
    pub publishers: Vec<(Arc<str>, u64, u64, usize)>,
}

#[derive(Debug, Clone)]
struct Entry {
    seq: u64,
    time: u64,
    cost: usize,
    bytes: Bytes,
}

#[derive(Debug, Default)]
struct Ring {
    events: VecDeque<Entry>,
    /// When it was last written (the tag's write counter), to evict the
    /// ring written least recently.
    written: u64,
}

#[derive(Debug)]
struct TagHistory {
    capacity: usize,
    bytes: usize,
    rings: HashMap<Arc<str>, Ring>,
    /// The publisher that wrote last (answers a pull naming none).
    last: Option<Arc<str>>,
    writes: u64,
}

/// Every tag's pull buffers, bounded as the module doc says.
#[derive(Debug)]
pub struct HistoryTable {
    limits: HistoryLimits,
    tags: HashMap<Arc<str>, TagHistory>,
    total_bytes: usize,
    stats: HistoryStats,
}

impl HistoryTable {
    /// An empty table with these bounds.
    pub fn new(limits: HistoryLimits) -> Self {
        HistoryTable {
            limits,
            tags: HashMap::new(),
            total_bytes: 0,
            stats: HistoryStats::default(),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> &HistoryLimits {
        &self.limits
    }

    /// Counters.
    pub fn stats(&self) -> HistoryStats {
        self.stats
    }

    /// Tags with history.
    pub fn tag_count(&self) -> usize {
        self.tags.len()
    }

    /// Bytes counted in all.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Records event `seq` of `publisher` on `tag` (source time `time`, ns)
    /// in a ring of `capacity` events (`capacity` 0: the tag keeps none, and
    /// any ring it has goes). `cost` is what the router counts the bytes
    /// for (what they keep alive); [`ENTRY_OVERHEAD`] is added. Returns
    /// whether it was recorded. Cost: O(1) amortised plus what it evicts.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        tag: &str,
        publisher: &str,
        seq: u64,
        time: u64,
        bytes: Bytes,
        capacity: usize,
        cost: usize,
    ) -> bool {
        if capacity == 0 {
            self.remove_tag(tag);
            return false;
        }
        let cost = cost.saturating_add(ENTRY_OVERHEAD);
        if cost > self.limits.max_bytes_per_tag || cost > self.limits.max_total_bytes {
            self.stats.too_large += 1;
            return false;
        }
        if !self.tags.contains_key(tag) {
            if self.tags.len() >= self.limits.max_tags {
                self.stats.tags_refused += 1;
                return false;
            }
            self.tags.insert(
                Arc::from(tag),
                TagHistory {
                    capacity,
                    bytes: 0,
                    rings: HashMap::new(),
                    last: None,
                    writes: 0,
                },
            );
        }
        let limits = self.limits;
        let Some(t) = self.tags.get_mut(tag) else {
            return false;
        };
        let mut freed = 0usize;
        let mut evicted = 0u64;
        if t.capacity != capacity {
            t.capacity = capacity;
            for ring in t.rings.values_mut() {
                while ring.events.len() > capacity {
                    if let Some(e) = ring.events.pop_front() {
                        freed += e.cost;
                        evicted += 1;
                    }
                }
            }
        }
        if !t.rings.contains_key(publisher) && t.rings.len() >= limits.max_publishers_per_tag {
            let stalest = t
                .rings
                .iter()
                .min_by_key(|(_, r)| r.written)
                .map(|(p, _)| p.clone());
            if let Some(p) = stalest {
                if let Some(r) = t.rings.remove(&p) {
                    evicted += r.events.len() as u64;
                    freed += r.events.iter().map(|e| e.cost).sum::<usize>();
                }
                if t.last.as_ref() == Some(&p) {
                    t.last = None;
                }
            }
        }
        let name: Arc<str> = match t.rings.get_key_value(publisher) {
            Some((k, _)) => k.clone(),
            None => Arc::from(publisher),
        };
        t.writes += 1;
        let writes = t.writes;
        let ring = t.rings.entry(name.clone()).or_default();
        ring.written = writes;
        if ring.events.back().is_some_and(|e| e.seq >= seq) {
            // A publisher that restarted: its old numbers no longer order.
            evicted += ring.events.len() as u64;
            freed += ring.events.drain(..).map(|e| e.cost).sum::<usize>();
        }
        while ring.events.len() >= capacity {
            match ring.events.pop_front() {
                Some(e) => {
                    freed += e.cost;
                    evicted += 1;
                }
                None => break,
            }
        }
        t.bytes -= freed;
        self.total_bytes -= freed;
        // The tag's bytes: this publisher's oldest first, then the oldest of
        // the ring written least recently. The total: this ring only.
        let mut ok = true;
        while t.bytes + cost > limits.max_bytes_per_tag
            || self.total_bytes + cost > limits.max_total_bytes
        {
            let over_tag = t.bytes + cost > limits.max_bytes_per_tag;
            let own = t.rings.get(&name).is_some_and(|r| !r.events.is_empty());
            let from = if own {
                Some(name.clone())
            } else if over_tag {
                t.rings
                    .iter()
                    .filter(|(_, r)| !r.events.is_empty())
                    .min_by_key(|(_, r)| r.written)
                    .map(|(p, _)| p.clone())
            } else {
                None
            };
            let popped = from
                .and_then(|p| t.rings.get_mut(&p))
                .and_then(|r| r.events.pop_front());
            match popped {
                Some(e) => {
                    t.bytes -= e.cost;
                    self.total_bytes -= e.cost;
                    evicted += 1;
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        self.stats.evicted += evicted;
        if !ok {
            self.stats.over_budget += 1;
            self.drop_empty(tag, &name);
            return false;
        }
        let Some(ring) = t.rings.get_mut(&name) else {
            return false;
        };
        ring.events.push_back(Entry {
            seq,
            time,
            cost,
            bytes,
        });
        t.bytes += cost;
        t.last = Some(name);
        self.total_bytes += cost;
        self.stats.recorded += 1;
        true
    }

    fn drop_empty(&mut self, tag: &str, publisher: &Arc<str>) {
        let Some(t) = self.tags.get_mut(tag) else {
            return;
        };
        if t.rings.get(publisher).is_some_and(|r| r.events.is_empty()) {
            t.rings.remove(publisher);
            if t.last.as_ref() == Some(publisher) {
                t.last = None;
            }
        }
        if t.rings.is_empty() {
            self.tags.remove(tag);
        }
    }

    /// Sets the `history` of every tag again after a QoS change: `capacity`
    /// gives each tag's new value; a tag at 0 loses its history, a smaller
    /// one drops its oldest events. Cost: O(tags + events dropped).
    pub fn recapacity(&mut self, mut capacity: impl FnMut(&str) -> usize) {
        let mut freed_total = 0;
        let mut evicted = 0u64;
        self.tags.retain(|tag, t| {
            let cap = capacity(tag);
            if cap == 0 {
                freed_total += t.bytes;
                evicted += t.rings.values().map(|r| r.events.len() as u64).sum::<u64>();
                return false;
            }
            t.capacity = cap;
            for ring in t.rings.values_mut() {
                while ring.events.len() > cap {
                    if let Some(e) = ring.events.pop_front() {
                        t.bytes -= e.cost;
                        freed_total += e.cost;
                        evicted += 1;
                    }
                }
            }
            true
        });
        self.total_bytes -= freed_total;
        self.stats.evicted += evicted;
    }

    /// Drops a tag's history.
    pub fn remove_tag(&mut self, tag: &str) {
        if let Some(t) = self.tags.remove(tag) {
            self.total_bytes -= t.bytes;
            self.stats.evicted += t.rings.values().map(|r| r.events.len() as u64).sum::<u64>();
        }
    }

    /// What a tag's history holds.
    pub fn info(&self, tag: &str) -> Option<TagHistoryInfo> {
        let t = self.tags.get(tag)?;
        let mut publishers: Vec<_> = t
            .rings
            .iter()
            .map(|(p, r)| {
                let (o, n) = ends(&r.events);
                (p.clone(), o, n, r.events.len())
            })
            .collect();
        publishers.sort();
        Some(TagHistoryInfo {
            capacity: t.capacity,
            events: t.rings.values().map(|r| r.events.len()).sum(),
            bytes: t.bytes,
            publishers,
        })
    }

    /// Every tag with history, sorted, at most `max`.
    pub fn tags(&self, max: usize) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self.tags.keys().cloned().collect();
        v.sort();
        v.truncate(max);
        v
    }

    /// Answers `query` on `tag`'s ring of `publisher` (`""`: the publisher
    /// that wrote last). Cost: O(log n + events in the reply).
    pub fn query(
        &self,
        tag: &str,
        publisher: &str,
        query: &PullQuery,
    ) -> Result<Answer, PullError> {
        self.query_within(tag, publisher, query, usize::MAX, 0)
    }

    /// [`query`](Self::query) with a tighter byte cap: the events and
    /// `per_event` bytes for each (a reply's length fields) stay within
    /// `max_bytes` as well as [`HistoryLimits::max_reply_bytes`] (at least
    /// one event is always included: the caller checks that it fits).
    pub fn query_within(
        &self,
        tag: &str,
        publisher: &str,
        query: &PullQuery,
        max_bytes: usize,
        per_event: usize,
    ) -> Result<Answer, PullError> {
        let cap = Cap {
            events: self.limits.max_reply_events.clamp(1, MAX_PULL_REPLY_EVENTS),
            bytes: self.limits.max_reply_bytes.min(max_bytes),
            per_event,
        };
        let no_history = || PullError::NoHistory {
            tag: tag.to_owned(),
        };
        if let PullQuery::Stored { .. } = query {
            return Err(PullError::NotHistory);
        }
        let t = self.tags.get(tag).ok_or_else(no_history)?;
        let ring = if publisher.is_empty() {
            t.last.as_ref().and_then(|p| t.rings.get(p))
        } else {
            t.rings.get(publisher)
        };
        let ring = match ring {
            Some(r) => r,
            None if publisher.is_empty() => return Err(no_history()),
            None => {
                return Err(PullError::UnknownPublisher {
                    tag: tag.to_owned(),
                    publisher: publisher.to_owned(),
                })
            }
        };
        let ev = &ring.events;
        let (oldest, newest) = ends(ev);
        let answer = |status, events| Answer {
            status,
            events,
            oldest,
            newest,
            held: ev.len(),
        };
        let gone = || answer(PullStatus::Gone, Vec::new());
        let history = t.capacity;
        let at_seq = |s: u64| ev.binary_search_by_key(&s, |e| e.seq).ok();
        let one = |i: Option<usize>| match i.and_then(|i| ev.get(i)) {
            Some(e) => answer(PullStatus::Complete, vec![e.bytes.clone()]),
            None => gone(),
        };
        Ok(match *query {
            PullQuery::Latest => one(ev.len().checked_sub(1)),
            PullQuery::Nth(n) => {
                if n as usize >= history {
                    return Err(PullError::NthBeyondHistory {
                        n,
                        capacity: history,
                    });
                }
                one(ev.len().checked_sub(1 + n as usize))
            }
            PullQuery::Seq(s) => {
                if ev.is_empty() || s < oldest {
                    gone()
                } else if s > newest {
                    return Err(PullError::SeqAfterNewest { seq: s, newest });
                } else {
                    one(at_seq(s))
                }
            }
            PullQuery::SeqRange { first, last } => {
                if first > last {
                    return Err(PullError::Backwards { first, last });
                }
                let len = (last - first) as u128 + 1;
                if len > history as u128 {
                    return Err(PullError::RangeLargerThanBuffer {
                        first,
                        last,
                        len,
                        capacity: history,
                    });
                }
                if ev.is_empty() || first < oldest {
                    return Ok(gone());
                }
                if first > newest {
                    return Err(PullError::SeqAfterNewest { seq: first, newest });
                }
                let start = ev.partition_point(|e| e.seq < first);
                let a = collect(ev, start, cap, |e| e.seq <= last, |_| true, answer);
                if a.events.is_empty() {
                    gone()
                } else {
                    a
                }
            }
            PullQuery::TimeRange {
                from_ns,
                to_ns,
                from_seq,
            } => {
                if from_ns > to_ns {
                    return Err(PullError::Backwards {
                        first: from_ns,
                        last: to_ns,
                    });
                }
                let start = ev.partition_point(|e| e.seq < from_seq);
                let in_time = |e: &Entry| e.time >= from_ns && e.time <= to_ns;
                let a = collect(ev, start, cap, |_| true, in_time, answer);
                if a.events.is_empty() {
                    gone()
                } else {
                    a
                }
            }
            PullQuery::Stored { .. } => return Err(PullError::NotHistory),
        })
    }
}

/// A reply's cap.
#[derive(Clone, Copy)]
struct Cap {
    events: usize,
    bytes: usize,
    per_event: usize,
}

/// Events from `start` while `more` holds that `keep` selects, up to the
/// reply cap (at least one).
fn collect(
    ev: &VecDeque<Entry>,
    start: usize,
    cap: Cap,
    more: impl Fn(&Entry) -> bool,
    keep: impl Fn(&Entry) -> bool,
    answer: impl Fn(PullStatus, Vec<Bytes>) -> Answer,
) -> Answer {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for e in ev.range(start..) {
        if !more(e) {
            break;
        }
        if !keep(e) {
            continue;
        }
        let size = e.bytes.len().saturating_add(cap.per_event);
        if out.len() >= cap.events || (!out.is_empty() && bytes.saturating_add(size) > cap.bytes) {
            return answer(PullStatus::More { next: e.seq }, out);
        }
        bytes = bytes.saturating_add(size);
        out.push(e.bytes.clone());
    }
    answer(PullStatus::Complete, out)
}

fn ends(ev: &VecDeque<Entry>) -> (u64, u64) {
    match (ev.front(), ev.back()) {
        (Some(a), Some(b)) => (a.seq, b.seq),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(seq: u64) -> Bytes {
        Bytes::from(seq.to_le_bytes().to_vec())
    }

    fn table() -> HistoryTable {
        HistoryTable::new(HistoryLimits::default())
    }

    fn seqs(a: &Answer) -> Vec<u64> {
        a.events
            .iter()
            .map(|e| {
                let mut x = [0u8; 8];
                x.copy_from_slice(e);
                u64::from_le_bytes(x)
            })
            .collect()
    }

    #[test]
    fn a_ring_keeps_the_last_history_events() {
        let mut t = table();
        for s in 1..=10 {
            assert!(t.record("/a", "/p", s, s, b(s), 4, 8));
        }
        let a = t
            .query("/a", "", &PullQuery::SeqRange { first: 7, last: 10 })
            .expect("held");
        assert_eq!(seqs(&a), vec![7, 8, 9, 10]);
        assert_eq!((a.oldest, a.newest, a.held), (7, 10, 4));
        assert_eq!(t.stats().evicted, 6);
        assert_eq!(t.total_bytes(), 4 * (8 + ENTRY_OVERHEAD));
    }

    #[test]
    fn an_overwritten_sequence_number_answers_gone_with_the_oldest_held() {
        let mut t = table();
        for s in 1..=10 {
            t.record("/a", "/p", s, s, b(s), 4, 8);
        }
        let a = t.query("/a", "/p", &PullQuery::Seq(3)).expect("answered");
        assert_eq!(
            (a.status, a.oldest, a.events.len()),
            (PullStatus::Gone, 7, 0)
        );
        let a = t
            .query("/a", "/p", &PullQuery::SeqRange { first: 5, last: 8 })
            .expect("answered");
        assert_eq!(a.status, PullStatus::Gone);
        let a = t.query("/a", "/p", &PullQuery::Nth(3)).expect("held");
        assert_eq!(seqs(&a), vec![7]);
    }

    #[test]
    fn a_sequence_number_after_the_newest_is_out_of_range() {
        let mut t = table();
        t.record("/a", "/p", 1, 1, b(1), 4, 8);
        assert_eq!(
            t.query("/a", "", &PullQuery::Seq(2)),
            Err(PullError::SeqAfterNewest { seq: 2, newest: 1 })
        );
    }

    #[test]
    fn a_range_larger_than_the_buffer_is_refused_naming_it() {
        let mut t = table();
        t.record("/a", "/p", 1, 1, b(1), 4, 8);
        let e = t
            .query("/a", "", &PullQuery::SeqRange { first: 1, last: 5 })
            .unwrap_err();
        assert!(matches!(
            e,
            PullError::RangeLargerThanBuffer { capacity: 4, .. }
        ));
        assert!(e.to_string().contains("history=4"), "{e}");
        let e = t
            .query(
                "/a",
                "",
                &PullQuery::SeqRange {
                    first: 0,
                    last: u64::MAX,
                },
            )
            .unwrap_err();
        assert!(matches!(e, PullError::RangeLargerThanBuffer { .. }));
        assert!(matches!(
            t.query("/a", "", &PullQuery::SeqRange { first: 3, last: 2 }),
            Err(PullError::Backwards { .. })
        ));
        assert!(matches!(
            t.query("/a", "", &PullQuery::Nth(4)),
            Err(PullError::NthBeyondHistory { n: 4, capacity: 4 })
        ));
    }

    #[test]
    fn a_tag_without_history_is_named() {
        let mut t = table();
        let e = t.query("/none", "", &PullQuery::Latest).unwrap_err();
        assert!(e.to_string().contains("/none"), "{e}");
        assert!(!t.record("/a", "/p", 1, 1, b(1), 0, 8));
        assert!(t.query("/a", "", &PullQuery::Latest).is_err());
        t.record("/a", "/p", 1, 1, b(1), 2, 8);
        assert_eq!(
            t.query("/a", "/q", &PullQuery::Latest),
            Err(PullError::UnknownPublisher {
                tag: "/a".into(),
                publisher: "/q".into()
            })
        );
    }

    #[test]
    fn a_time_range_selects_by_source_time_and_gone_when_none() {
        let mut t = table();
        for s in 1..=5 {
            t.record("/a", "/p", s, s * 100, b(s), 10, 8);
        }
        let q = PullQuery::TimeRange {
            from_ns: 150,
            to_ns: 400,
            from_seq: 0,
        };
        assert_eq!(seqs(&t.query("/a", "", &q).expect("held")), vec![2, 3, 4]);
        let q = PullQuery::TimeRange {
            from_ns: 0,
            to_ns: 50,
            from_seq: 0,
        };
        let a = t.query("/a", "", &q).expect("answered");
        assert_eq!((a.status, a.oldest), (PullStatus::Gone, 1));
    }

    #[test]
    fn a_reply_over_the_cap_says_more_and_where_to_go_on() {
        let mut t = HistoryTable::new(HistoryLimits {
            max_reply_events: 3,
            ..HistoryLimits::default()
        });
        for s in 1..=10 {
            t.record("/a", "/p", s, s, b(s), 10, 8);
        }
        let a = t
            .query("/a", "", &PullQuery::SeqRange { first: 1, last: 10 })
            .expect("held");
        assert_eq!(seqs(&a), vec![1, 2, 3]);
        assert_eq!(a.status, PullStatus::More { next: 4 });
        let mut t = HistoryTable::new(HistoryLimits {
            max_reply_bytes: 20,
            ..HistoryLimits::default()
        });
        for s in 1..=4 {
            t.record("/a", "/p", s, s, b(s), 10, 8);
        }
        let q = PullQuery::TimeRange {
            from_ns: 0,
            to_ns: 100,
            from_seq: 2,
        };
        let a = t.query("/a", "", &q).expect("held");
        assert_eq!(
            (seqs(&a), a.status),
            (vec![2, 3], PullStatus::More { next: 4 })
        );
    }

    #[test]
    fn byte_bounds_evict_or_refuse() {
        let per_event = 100 + ENTRY_OVERHEAD;
        let mut t = HistoryTable::new(HistoryLimits {
            max_bytes_per_tag: 3 * per_event,
            max_total_bytes: 5 * per_event,
            ..HistoryLimits::default()
        });
        for s in 1..=5 {
            t.record("/a", "/p", s, s, b(s), 100, 100);
        }
        assert_eq!(t.info("/a").map(|i| i.events), Some(3), "per-tag bytes");
        for s in 1..=5 {
            t.record("/b", "/p", s, s, b(s), 100, 100);
        }
        assert!(t.total_bytes() <= 5 * per_event);
        assert_eq!(t.info("/b").map(|i| i.events), Some(2), "the total bound");
        assert!(!t.record("/c", "/p", 1, 1, b(1), 100, 100));
        assert_eq!(t.stats().over_budget, 1);
        assert!(!t.record("/a", "/p", 9, 9, b(9), 100, 4 * per_event));
        assert_eq!(t.stats().too_large, 1);
    }

    #[test]
    fn tag_and_publisher_bounds() {
        let mut t = HistoryTable::new(HistoryLimits {
            max_tags: 2,
            max_publishers_per_tag: 2,
            ..HistoryLimits::default()
        });
        assert!(t.record("/a", "/p1", 1, 1, b(1), 4, 8));
        assert!(t.record("/a", "/p2", 1, 1, b(1), 4, 8));
        assert!(t.record("/a", "/p1", 2, 2, b(2), 4, 8));
        assert!(t.record("/a", "/p3", 1, 1, b(1), 4, 8));
        let info = t.info("/a").expect("held");
        let names: Vec<&str> = info.publishers.iter().map(|p| &*p.0).collect();
        assert_eq!(names, vec!["/p1", "/p3"], "the stalest ring went");
        assert!(t.record("/b", "/p", 1, 1, b(1), 4, 8));
        assert!(!t.record("/c", "/p", 1, 1, b(1), 4, 8));
        assert_eq!(t.stats().tags_refused, 1);
    }

    #[test]
    fn a_restarted_publisher_empties_its_ring() {
        let mut t = table();
        for s in 5..=7 {
            t.record("/a", "/p", s, s, b(s), 10, 8);
        }
        t.record("/a", "/p", 1, 1, b(1), 10, 8);
        let a = t.query("/a", "", &PullQuery::Latest).expect("held");
        assert_eq!((a.oldest, a.newest, a.held), (1, 1, 1));
    }

    #[test]
    fn recapacity_shrinks_and_drops() {
        let mut t = table();
        for s in 1..=10 {
            t.record("/a", "/p", s, s, b(s), 10, 8);
            t.record("/b", "/p", s, s, b(s), 10, 8);
        }
        t.recapacity(|tag| if tag == "/a" { 3 } else { 0 });
        assert_eq!(t.info("/a").map(|i| i.events), Some(3));
        assert!(t.info("/b").is_none());
        assert_eq!(t.total_bytes(), 3 * (8 + ENTRY_OVERHEAD));
    }
}
