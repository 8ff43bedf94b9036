//! Where an event goes: tag patterns, TAO's filter levels and the
//! subscription index in one structure, so the daemon, embedded mode and the
//! benchmarks ask the same code for an event's destinations.
//!
//! A *channel* is one subscription: a pattern, the *session* (connection) it
//! belongs to, its own (TAO proxy) filters and at most one mapping filter. A
//! session holds the admin-level filters and the operator between the levels
//! (see [`levels_pass`](crate::filter::levels_pass)).
//!
//! Each channel is found one of two ways, chosen again whenever its filters,
//! its session's filters or the operator change:
//! - **through the index**: a channel with its own filters, in a session
//!   whose operator is AND (or that has no filters), can only receive an
//!   event one of its own filters matches. If every one of those filters has
//!   an equality or a required literal, they sit in a [`SubscriptionIndex`];
//!   per event the index finds the filters that match without evaluating the
//!   others, and only those channels' patterns and session filters are
//!   checked. A daemon with 100,000 filtered subscriptions on one pattern
//!   evaluates a handful per event, not 100,000.
//! - **by tag**: every other channel is found through the tag trie; if it
//!   has filters of any level or a mapping filter they are evaluated for each
//!   event whose tag it matches.
//!
//! Either way the result is that of [`levels_pass`](crate::filter::levels_pass) on every channel whose
//! pattern matches (a property test checks this).
//!
//! Work that is inherently proportional to a session's size can be done in
//! bounded slices, so that a caller serving other traffic on the same thread
//! never stalls for long: [`Routes::retire_session`] and
//! [`Routes::retire_channel`] make channels unreachable at once and leave
//! their removal, and the `queue_*` session-level changes leave the
//! re-placement of the session's channels, to [`Routes::settle`], which does
//! at most `budget` channels per call. Every other change costs O(1) (or
//! the number of filters involved) per channel.

use std::cell::OnceCell;
use std::collections::VecDeque;

// Looked up per channel by every change and per delivery while work is
// pending: hashbrown's default hasher (foldhash) is several times cheaper
// than SipHash, and ids come from the caller, not the network.
use hashbrown::{HashMap, HashSet};

use tagwire_proto::EventRef;

use crate::filter::{
    levels_pass_in, EventFields, Filter, FilterError, FilterLimits, FilterList, InterFilterOp,
    MappingFilter, MatchScratch, Meter, Overrides, SubscriptionIndex,
};
use crate::tags::{Pattern, TagTable};

/// A channel's id, unique in one [`Routes`].
pub type ChannelId = u64;
/// A session's id (the daemon uses its connection id).
pub type SessionId = u64;
/// A filter's id, chosen by the caller (for `filter list|remove`).
pub type FilterId = u64;

/// What went wrong changing the routes; the routes are unchanged then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// `add_channel` with an id already present.
    #[error("channel {0} already exists")]
    DuplicateChannel(ChannelId),
    /// The channel is not present.
    #[error("no channel {0}")]
    UnknownChannel(ChannelId),
    /// A filter list refused the filter (duplicate id, list full).
    #[error(transparent)]
    Filter(#[from] FilterError),
}

/// A channel as the tag trie holds it.
#[derive(Debug, Clone)]
struct ByTag<T> {
    id: ChannelId,
    session: SessionId,
    /// Whether any filter (either level) or a mapping filter must be applied.
    judge: bool,
    value: T,
}

/// What the index hands back for an indexed channel: all that routing an
/// event to it reads, so that with 100,000 indexed channels a match costs no
/// lookup in the channel table (issue 23).
#[derive(Debug, Clone)]
struct Hit<T> {
    channel: ChannelId,
    session: SessionId,
    /// The channel's pattern in [`PatternPool`].
    pattern: u32,
    /// Whether the channel has a mapping filter (only then is the channel
    /// itself read, to apply it).
    mapped: bool,
    value: T,
}

/// The patterns of the indexed channels, each held once however many
/// channels share it, so an event checks each distinct pattern once rather
/// than every matching channel's own copy (100,000 subscriptions on one
/// `/f/**` share one entry).
#[derive(Debug, Default)]
struct PatternPool {
    ids: HashMap<Pattern, u32>,
    /// Per id: the pattern and how many indexed channels use it.
    list: Vec<Option<(Pattern, usize)>>,
    free: Vec<u32>,
    /// Per id: (event number, whether the pattern matches that event's tag).
    memo: Vec<(u32, bool)>,
    event: u32,
}

impl PatternPool {
    fn intern(&mut self, p: &Pattern) -> u32 {
        if let Some(&id) = self.ids.get(p) {
            if let Some((_, refs)) = &mut self.list[id as usize] {
                *refs += 1;
            }
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.list.push(None);
                self.memo.push((0, false));
                (self.list.len() - 1) as u32
            }
        };
        self.list[id as usize] = Some((p.clone(), 1));
        self.memo[id as usize] = (0, false);
        self.ids.insert(p.clone(), id);
        id
    }

    fn release(&mut self, id: u32) {
        let Some(Some((p, refs))) = self.list.get_mut(id as usize) else {
            return;
        };
        *refs -= 1;
        if *refs == 0 {
            self.ids.remove(p);
            self.list[id as usize] = None;
            self.free.push(id);
        }
    }

    /// Starts a new event: forgets every memoized answer.
    fn next_event(&mut self) {
        if self.event == u32::MAX {
            self.event = 0;
            self.memo.iter_mut().for_each(|m| m.0 = 0);
        }
        self.event += 1;
    }

    /// Whether pattern `id` matches `tag`, the current event's tag.
    fn matches(&mut self, id: u32, tag: &str) -> bool {
        let i = id as usize;
        match self.memo.get(i) {
            Some(&(at, m)) if at == self.event => m,
            _ => {
                let m = self.list[i].as_ref().is_some_and(|(p, _)| p.matches(tag));
                self.memo[i] = (self.event, m);
                m
            }
        }
    }
}

#[derive(Debug)]
struct Chan<T> {
    session: SessionId,
    pattern: Pattern,
    /// `pattern` in the pool while the channel is indexed.
    pattern_id: u32,
    value: T,
    proxy: FilterList,
    mapping: Option<(FilterId, MappingFilter)>,
    /// Index entries holding `proxy`'s filters while the channel is found
    /// through the index; empty while it is found by tag.
    entries: Vec<u64>,
    /// Filters queued for `proxy` (counted against its bound).
    queued: usize,
}

impl<T> Chan<T> {
    fn mapped<'x>(&'x self, event: &EventRef<'x>, fields: &EventFields<'x>) -> Overrides {
        self.mapping
            .as_ref()
            .map_or_else(Overrides::default, |(_, m)| m.apply_in(event, fields))
    }
}

#[derive(Debug)]
struct Session {
    admin: FilterList,
    op: InterFilterOp,
    channels: HashSet<ChannelId>,
}

/// Work left for [`Routes::settle`].
#[derive(Debug)]
struct Pending<T> {
    /// Retired channels removed early (their id or session id was used
    /// again), still to hand back.
    removed: Vec<(ChannelId, T)>,
    /// Retired sessions and the channels of theirs still to remove.
    sessions: VecDeque<(SessionId, Vec<ChannelId>)>,
    /// Sessions retired, whose channels route nowhere any more.
    gone_sessions: HashSet<SessionId>,
    /// Channels retired one by one, still to remove (ids also in `gone`).
    channels: Vec<ChannelId>,
    gone: HashSet<ChannelId>,
    /// Channels retired together by [`Routes::retire_channels`], batch by
    /// batch, still to remove; an id no longer in `batched` is skipped
    /// (removed early, or retired again in a later batch).
    batches: Vec<Vec<ChannelId>>,
    /// The ids in `batches` still retired: one hash lookup answers
    /// [`Pending::is_gone`] however many batches wait (a binary search per
    /// batch made every lookup O(batches) during a burst of undeclares).
    batched: HashSet<ChannelId>,
    /// Sessions whose channels are still to be re-placed after a
    /// session-level change; until then their channels found by tag are
    /// judged (their filters evaluated) whatever their placement says.
    replace: VecDeque<(SessionId, Vec<ChannelId>)>,
    replacing: HashMap<SessionId, usize>,
    /// Channel-level filters still to add to (the rest of) these channels.
    adds: VecDeque<(FilterId, Filter, Vec<ChannelId>)>,
    /// Channel-level filters still to remove from (the rest of) these channels.
    removes: VecDeque<(FilterId, Vec<ChannelId>)>,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            removed: Vec::new(),
            sessions: VecDeque::new(),
            gone_sessions: HashSet::new(),
            channels: Vec::new(),
            gone: HashSet::new(),
            batches: Vec::new(),
            batched: HashSet::new(),
            replace: VecDeque::new(),
            replacing: HashMap::new(),
            adds: VecDeque::new(),
            removes: VecDeque::new(),
        }
    }
}

impl<T> Pending<T> {
    fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.batches.is_empty()
            && self.sessions.is_empty()
            && self.channels.is_empty()
            && self.replace.is_empty()
            && self.adds.is_empty()
            && self.removes.is_empty()
    }

    /// Whether anything retired or being re-placed may affect routing.
    fn affects_routing(&self) -> bool {
        !self.gone_sessions.is_empty()
            || !self.gone.is_empty()
            || !self.batched.is_empty()
            || !self.replacing.is_empty()
    }

    fn is_gone(&self, id: ChannelId, session: SessionId) -> bool {
        self.gone.contains(&id)
            || self.gone_sessions.contains(&session)
            || self.batched.contains(&id)
    }

    /// Forgets that channel `id` is retired (it is being removed early).
    fn unmark(&mut self, id: ChannelId) {
        self.gone.remove(&id);
        // Left in its batch, which skips it (it is no longer `batched`).
        self.batched.remove(&id);
    }
}

/// How one channel is found (shown by `tagwire list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// By tag alone, with nothing to evaluate.
    Plain,
    /// By tag, with its filters evaluated for each event the tag matches.
    Judged,
    /// Through the subscription index.
    Indexed,
}

impl RouteKind {
    /// `tag`, `filtered` or `indexed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Plain => "tag",
            RouteKind::Judged => "filtered",
            RouteKind::Indexed => "indexed",
        }
    }
}

/// How many channels are found each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteStats {
    /// Channels found by tag alone, with nothing to evaluate.
    pub plain: usize,
    /// Channels found by tag whose filters are evaluated per event.
    pub judged: usize,
    /// Channels found through the subscription index.
    pub indexed: usize,
}

/// What the per-event filter budget ([`FilterLimits::max_event_work`]) did,
/// counted since the routes were made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// Work units spent evaluating filters, over all events routed.
    pub work: u64,
    /// Events whose filter evaluations ran over the budget.
    pub over_budget: u64,
    /// Filtered channels that did not get an event because the budget ran
    /// out before or during their evaluation (an indexed channel whose
    /// filter the budget stopped is not known by name and not counted).
    pub skipped: u64,
    /// How many times an event's fields were decoded for evaluation: at
    /// most once per event, however many channels read them.
    pub field_decodes: u64,
    /// The latest event that ran over the budget.
    pub last: Option<OverBudget>,
}

/// An event whose filter evaluations ran over the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// Its tag.
    pub tag: String,
    /// The first channel (found by tag) that the budget stopped, if the
    /// budget ran out there rather than in the index.
    pub channel: Option<ChannelId>,
    /// The work units the event's evaluations spent.
    pub work: u64,
}

/// The routing table: channels by pattern, their filters and sessions.
///
/// Bounded by its caller: the daemon limits the channels and
/// [`FilterLimits::max_filters_per_channel`] the filters of each level.
#[derive(Debug)]
pub struct Routes<T> {
    limits: FilterLimits,
    by_tag: TagTable<ByTag<T>>,
    /// Patterns of the indexed channels: the index is probed only for
    /// events that at least one of them matches.
    indexed_tags: TagTable<()>,
    index: SubscriptionIndex<Hit<T>>,
    scratch: MatchScratch,
    hits: Vec<Hit<T>>,
    patterns: PatternPool,
    channels: HashMap<ChannelId, Chan<T>>,
    sessions: HashMap<SessionId, Session>,
    next_entry: u64,
    pending: Pending<T>,
    budget: BudgetStats,
}

impl<T: Clone> Default for Routes<T> {
    fn default() -> Self {
        Routes::new(FilterLimits::default())
    }
}

impl<T: Clone> Routes<T> {
    /// Empty routes; `limits` bound each filter list.
    pub fn new(limits: FilterLimits) -> Self {
        let index_limits = FilterLimits {
            // The index only ever holds indexed filters; the caller bounds
            // how many channels (and so filters) there are.
            max_subscriptions: usize::MAX,
            ..limits.clone()
        };
        Routes {
            by_tag: TagTable::default(),
            indexed_tags: TagTable::default(),
            index: SubscriptionIndex::new(index_limits),
            scratch: MatchScratch::new(),
            hits: Vec::new(),
            patterns: PatternPool::default(),
            channels: HashMap::new(),
            sessions: HashMap::new(),
            next_entry: 0,
            pending: Pending::default(),
            budget: BudgetStats::default(),
            limits,
        }
    }

    /// What the per-event filter budget did so far (see
    /// [`FilterLimits::max_event_work`]); a caller logs `last` when
    /// `over_budget` grows.
    pub fn budget_stats(&self) -> &BudgetStats {
        &self.budget
    }

    /// The limits filter lists are bounded by.
    pub fn limits(&self) -> &FilterLimits {
        &self.limits
    }

    /// Number of channels, counting retired ones not yet handed back by
    /// [`Routes::settle`].
    pub fn len(&self) -> usize {
        self.channels.len() + self.pending.removed.len()
    }

    /// True when there are no channels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many channels are found each way.
    pub fn stats(&self) -> RouteStats {
        let mut s = RouteStats::default();
        for ch in self.channels.values() {
            match self.kind_of(ch) {
                RouteKind::Plain => s.plain += 1,
                RouteKind::Judged => s.judged += 1,
                RouteKind::Indexed => s.indexed += 1,
            }
        }
        s
    }

    /// How channel `id` is found; `None` if it is unknown or retired.
    pub fn kind(&self, id: ChannelId) -> Option<RouteKind> {
        let ch = self.channels.get(&id)?;
        if self.pending.is_gone(id, ch.session) {
            return None;
        }
        Some(self.kind_of(ch))
    }

    fn kind_of(&self, ch: &Chan<T>) -> RouteKind {
        if !ch.entries.is_empty() {
            RouteKind::Indexed
        } else if self.needs_judge(ch) {
            RouteKind::Judged
        } else {
            RouteKind::Plain
        }
    }

    /// The operator between a session's levels (AND for an unknown session).
    pub fn op(&self, session: SessionId) -> InterFilterOp {
        self.sessions
            .get(&session)
            .map_or_else(Default::default, |s| s.op)
    }

    /// Adds channel `id` of `session` on `pattern` with its own filters and
    /// mapping filter; `value` is what [`Routes::route`] hands back.
    ///
    /// A retired channel with the same id is removed first; so, all at once,
    /// are the retired channels of a retired session of the same id.
    pub fn add_channel(
        &mut self,
        id: ChannelId,
        session: SessionId,
        pattern: Pattern,
        value: T,
        filters: Vec<(FilterId, Filter)>,
        mapping: Option<(FilterId, MappingFilter)>,
    ) -> Result<(), RouteError> {
        self.flush_retired_session(session);
        if let Some(old) = self.channels.get(&id) {
            if !self.pending.is_gone(id, old.session) {
                return Err(RouteError::DuplicateChannel(id));
            }
            let old_session = old.session;
            self.pending.unmark(id);
            if let Some(value) = self.remove_now(id, old_session) {
                self.pending.removed.push((id, value));
            }
        } else {
            // Left in a batch by a channel its session's removal took.
            self.pending.batched.remove(&id);
        }
        let mut proxy = FilterList::new(&self.limits);
        for (fid, f) in filters {
            proxy.add(fid, f)?;
        }
        self.channels.insert(
            id,
            Chan {
                session,
                pattern,
                value,
                proxy,
                mapping,
                pattern_id: 0,
                entries: Vec::new(),
                queued: 0,
            },
        );
        self.session_mut(session).channels.insert(id);
        self.place(id);
        Ok(())
    }

    /// Removes channel `id`, returning its value (`None` if it is unknown
    /// or already retired). Costs O(1) plus its own filters.
    pub fn remove_channel(&mut self, id: ChannelId) -> Option<T> {
        let session = self.channels.get(&id)?.session;
        if self.pending.is_gone(id, session) {
            return None;
        }
        self.remove_now(id, session)
    }

    /// Removes a session and all its channels at once, returning their
    /// values; O(its channels). See [`Routes::retire_session`] for the
    /// sliced form.
    pub fn remove_session(&mut self, session: SessionId) -> Vec<T> {
        let Some(s) = self.sessions.remove(&session) else {
            return Vec::new();
        };
        // Channels retired in a batch stay for `settle` to hand back.
        let live: Vec<ChannelId> = s
            .channels
            .into_iter()
            .filter(|c| !self.pending.is_gone(*c, session))
            .collect();
        live.into_iter()
            .filter_map(|c| {
                self.unplace(c);
                self.channels.remove(&c).map(|ch| ch.value)
            })
            .collect()
    }

    /// Makes every channel of `session` unreachable at once, in O(1): from
    /// now on [`Routes::route`] hands none of them back. Their removal is
    /// left to [`Routes::settle`]. Returns how many channels it had (counting
    /// any already retired by [`Routes::retire_channels`]).
    pub fn retire_session(&mut self, session: SessionId) -> usize {
        let Some(s) = self.sessions.remove(&session) else {
            return 0;
        };
        let n = s.channels.len();
        self.pending.replacing.remove(&session);
        self.pending.gone_sessions.insert(session);
        self.pending
            .sessions
            .push_back((session, s.channels.into_iter().collect()));
        n
    }

    /// Makes channel `id` unreachable at once, in O(1), leaving its removal
    /// to [`Routes::settle`]; whether it was there (and not yet retired).
    pub fn retire_channel(&mut self, id: ChannelId) -> bool {
        let Some(ch) = self.channels.get(&id) else {
            return false;
        };
        let session = ch.session;
        if self.pending.is_gone(id, session) {
            return false;
        }
        if let Some(s) = self.sessions.get_mut(&session) {
            s.channels.remove(&id);
        }
        self.pending.gone.insert(id);
        self.pending.channels.push(id);
        true
    }

    /// Makes every channel in `ids` unreachable at once, in O(1) per id
    /// (a hash insert, no table work), leaving their removal to
    /// [`Routes::settle`]. Ids of unknown or already retired channels are
    /// ignored (an unknown id later given to a new channel does not retire
    /// it).
    pub fn retire_channels(&mut self, mut ids: Vec<ChannelId>) {
        ids.retain(|id| {
            let live = self
                .channels
                .get(id)
                .is_some_and(|ch| !self.pending.is_gone(*id, ch.session));
            live && self.pending.batched.insert(*id)
        });
        if ids.is_empty() {
            return;
        }
        self.pending.batches.push(ids);
    }

    /// The ids of live channel `id`'s own filters and mapping filter.
    pub fn filter_ids(&self, id: ChannelId) -> Vec<FilterId> {
        self.channels
            .get(&id)
            .filter(|ch| !self.pending.is_gone(id, ch.session))
            .map(|ch| {
                let mut ids: Vec<FilterId> = ch.proxy.iter().map(|(f, _)| f).collect();
                ids.extend(ch.mapping.as_ref().map(|(f, _)| *f));
                ids
            })
            .unwrap_or_default()
    }

    /// Whether [`Routes::settle`] has work left.
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }

    /// Does at most `budget` channels' worth of left-over work: removes
    /// retired channels (appending `(id, value)` to `removed`) and re-places
    /// the channels of sessions changed by the `queue_*` methods. Returns
    /// true when no work is left.
    pub fn settle(&mut self, budget: usize, removed: &mut Vec<(ChannelId, T)>) -> bool {
        let mut left = budget;
        while left > 0 {
            if let Some(done) = self.pending.removed.pop() {
                left -= 1;
                removed.push(done);
                continue;
            }
            if let Some(batch) = self.pending.batches.last_mut() {
                let take = batch.len().min(left);
                let ids: Vec<ChannelId> = batch.drain(batch.len() - take..).collect();
                if batch.is_empty() {
                    self.pending.batches.pop();
                }
                left -= take.max(1);
                for id in ids {
                    // Removed early, or in a later batch too.
                    if !self.pending.batched.remove(&id) {
                        continue;
                    }
                    let Some(session) = self.channels.get(&id).map(|c| c.session) else {
                        continue;
                    };
                    // Also retired one by one: removed by that.
                    if self.pending.gone.contains(&id) {
                        continue;
                    }
                    if let Some(value) = self.remove_now(id, session) {
                        removed.push((id, value));
                    }
                }
                continue;
            }
            if let Some(id) = self.pending.channels.pop() {
                left -= 1;
                if self.pending.gone.remove(&id) {
                    let session = self.channels.get(&id).map(|c| c.session);
                    if let Some(value) = session.and_then(|s| self.remove_now(id, s)) {
                        removed.push((id, value));
                    }
                }
                continue;
            }
            if let Some((session, ids)) = self.pending.sessions.front_mut() {
                let session = *session;
                let take = ids.len().min(left);
                let batch: Vec<ChannelId> = ids.drain(ids.len() - take..).collect();
                if ids.is_empty() {
                    self.pending.sessions.pop_front();
                    if !self.pending.sessions.iter().any(|(s, _)| *s == session) {
                        self.pending.gone_sessions.remove(&session);
                    }
                }
                left -= take.max(1);
                for id in batch {
                    if self.channels.get(&id).is_some_and(|c| c.session == session) {
                        if let Some(value) = self.remove_now(id, session) {
                            removed.push((id, value));
                        }
                    }
                }
                continue;
            }
            if let Some((fid, filter, ids)) = self.pending.adds.front_mut() {
                let (fid, filter) = (*fid, filter.clone());
                let take = ids.len().min(left);
                let batch: Vec<ChannelId> = ids.drain(ids.len() - take..).collect();
                if ids.is_empty() {
                    self.pending.adds.pop_front();
                }
                left -= take.max(1);
                for id in batch {
                    let live = self.is_live(id);
                    let Some(ch) = self.channels.get_mut(&id) else {
                        continue;
                    };
                    ch.queued = ch.queued.saturating_sub(1);
                    // Counted against the bound when queued, so it fits.
                    if live && ch.proxy.add(fid, filter.clone()).is_ok() {
                        self.place(id);
                    }
                }
                continue;
            }
            if let Some((fid, ids)) = self.pending.removes.front_mut() {
                let fid = *fid;
                let take = ids.len().min(left);
                let batch: Vec<ChannelId> = ids.drain(ids.len() - take..).collect();
                if ids.is_empty() {
                    self.pending.removes.pop_front();
                }
                left -= take.max(1);
                for id in batch {
                    self.change_channel(id, |ch| ch.proxy.remove(fid).is_some());
                }
                continue;
            }
            if let Some((session, ids)) = self.pending.replace.front_mut() {
                let session = *session;
                let take = ids.len().min(left);
                let batch: Vec<ChannelId> = ids.drain(ids.len() - take..).collect();
                if ids.is_empty() {
                    self.pending.replace.pop_front();
                    if let Some(n) = self.pending.replacing.get_mut(&session) {
                        *n -= 1;
                        if *n == 0 {
                            self.pending.replacing.remove(&session);
                        }
                    }
                }
                left -= take.max(1);
                for id in batch {
                    if self
                        .channels
                        .get(&id)
                        .is_some_and(|c| c.session == session && !self.pending.is_gone(id, session))
                    {
                        self.place(id);
                    }
                }
                continue;
            }
            break;
        }
        self.pending.is_empty()
    }

    /// Removes channel `id` of `session` now (its pending marks are the
    /// caller's business).
    fn remove_now(&mut self, id: ChannelId, session: SessionId) -> Option<T> {
        self.unplace(id);
        let ch = self.channels.remove(&id)?;
        if let Some(s) = self.sessions.get_mut(&session) {
            s.channels.remove(&id);
        }
        Some(ch.value)
    }

    /// Finishes, at once, the removal of a retired session's channels
    /// before its id is used again.
    fn flush_retired_session(&mut self, session: SessionId) {
        if !self.pending.gone_sessions.remove(&session) {
            return;
        }
        let mut keep = VecDeque::new();
        while let Some((s, ids)) = self.pending.sessions.pop_front() {
            if s != session {
                keep.push_back((s, ids));
                continue;
            }
            for id in ids {
                if self.channels.get(&id).is_some_and(|c| c.session == session) {
                    if let Some(value) = self.remove_now(id, session) {
                        self.pending.removed.push((id, value));
                    }
                }
            }
        }
        self.pending.sessions = keep;
    }

    /// Adds filter `fid` to the own (proxy) level of every channel in
    /// `channels`: to all of them, or (on an error) to none.
    pub fn add_channel_filter(
        &mut self,
        channels: &[ChannelId],
        fid: FilterId,
        filter: &Filter,
    ) -> Result<(), RouteError> {
        if let Some(c) = channels.iter().find(|c| !self.channels.contains_key(*c)) {
            return Err(RouteError::UnknownChannel(*c));
        }
        for (i, c) in channels.iter().enumerate() {
            let added = self
                .channels
                .get_mut(c)
                .map(|ch| ch.proxy.add(fid, filter.clone()));
            if let Some(Err(e)) = added {
                for c in &channels[..i] {
                    if let Some(ch) = self.channels.get_mut(c) {
                        ch.proxy.remove(fid);
                    }
                }
                return Err(e.into());
            }
        }
        for c in channels {
            self.place(*c);
        }
        Ok(())
    }

    /// Like [`Routes::add_channel_filter`] (all or nothing, the same
    /// errors), but only checks each channel and counts the filter against
    /// its bound, O(1) per channel: adding it to each channel and
    /// re-placing the channel is left to [`Routes::settle`], until which the
    /// filter does not yet apply to the channels it has not reached.
    pub fn queue_add_channel_filter(
        &mut self,
        channels: &[ChannelId],
        fid: FilterId,
        filter: &Filter,
    ) -> Result<(), RouteError> {
        let max = self.limits.max_filters_per_channel;
        for c in channels {
            let ch = match self.channels.get(c) {
                Some(ch) if !self.pending.is_gone(*c, ch.session) => ch,
                _ => return Err(RouteError::UnknownChannel(*c)),
            };
            if ch.proxy.iter().any(|(f, _)| f == fid) {
                return Err(FilterError::DuplicateId { id: fid }.into());
            }
            if ch.proxy.len() + ch.queued >= max {
                return Err(FilterError::LimitExceeded {
                    limit: "max_filters_per_channel",
                    value: ch.proxy.len() + ch.queued + 1,
                    max,
                    at: None,
                }
                .into());
            }
        }
        for c in channels {
            if let Some(ch) = self.channels.get_mut(c) {
                ch.queued += 1;
            }
        }
        self.pending
            .adds
            .push_back((fid, filter.clone(), channels.to_vec()));
        Ok(())
    }

    /// Queues the removal of filter `fid` from the own level of each of
    /// `channels`: [`Routes::settle`] removes it and re-places each channel;
    /// until then the filter still applies to the channels not yet reached.
    /// A queued [`Routes::queue_add_channel_filter`] of `fid` is cancelled
    /// where it has not been applied yet.
    pub fn queue_remove_channel_filter(&mut self, channels: &[ChannelId], fid: FilterId) {
        // Not yet added to some channels: it never will be.
        let mut cancelled = VecDeque::new();
        for (f, filter, ids) in std::mem::take(&mut self.pending.adds) {
            if f == fid {
                for c in &ids {
                    if let Some(ch) = self.channels.get_mut(c) {
                        ch.queued = ch.queued.saturating_sub(1);
                    }
                }
            } else {
                cancelled.push_back((f, filter, ids));
            }
        }
        self.pending.adds = cancelled;
        if !channels.is_empty() {
            self.pending.removes.push_back((fid, channels.to_vec()));
        }
    }

    /// Sets (replaces) the mapping filter of every channel in `channels`,
    /// O(1) per channel; a mapping filter applies on either path at once,
    /// and [`Routes::settle`] later re-places the channels.
    pub fn queue_set_mapping(
        &mut self,
        channels: &[ChannelId],
        fid: FilterId,
        mapping: &MappingFilter,
    ) {
        for c in channels {
            if let Some(ch) = self.channels.get_mut(c) {
                ch.mapping = Some((fid, mapping.clone()));
                self.refresh_mapped(*c);
            }
        }
        self.queue_replace_channels(channels);
    }

    /// Removes the mapping filter `fid` from each of `channels` that has it,
    /// O(1) per channel, leaving their re-placement to [`Routes::settle`].
    pub fn queue_remove_mapping(&mut self, channels: &[ChannelId], fid: FilterId) {
        let mut changed = Vec::with_capacity(channels.len());
        for c in channels {
            if let Some(ch) = self.channels.get_mut(c) {
                if ch.mapping.as_ref().is_some_and(|(f, _)| *f == fid) {
                    ch.mapping = None;
                    changed.push(*c);
                }
            }
        }
        for c in &changed {
            self.refresh_mapped(*c);
        }
        self.queue_replace_channels(&changed);
    }

    /// Copies whether indexed channel `id` has a mapping filter into its
    /// index entries (routing reads it there); O(its filters).
    fn refresh_mapped(&mut self, id: ChannelId) {
        let Some(ch) = self.channels.get(&id) else {
            return;
        };
        let mapped = ch.mapping.is_some();
        for e in &ch.entries {
            if let Some(h) = self.index.get_mut(*e) {
                h.mapped = mapped;
            }
        }
    }

    fn is_live(&self, id: ChannelId) -> bool {
        self.channels
            .get(&id)
            .is_some_and(|ch| !self.pending.is_gone(id, ch.session))
    }

    /// Queues the re-placement of `channels`, by session.
    fn queue_replace_channels(&mut self, channels: &[ChannelId]) {
        let mut by_session: HashMap<SessionId, Vec<ChannelId>> = HashMap::new();
        for c in channels {
            if let Some(ch) = self.channels.get(c) {
                by_session.entry(ch.session).or_default().push(*c);
            }
        }
        for (session, ids) in by_session {
            *self.pending.replacing.entry(session).or_default() += 1;
            self.pending.replace.push_back((session, ids));
        }
    }

    /// Removes filter `fid` from channel `id`'s own level; whether it was there.
    pub fn remove_channel_filter(&mut self, id: ChannelId, fid: FilterId) -> bool {
        if self.change_channel(id, |ch| ch.proxy.remove(fid).is_some()) {
            return true;
        }
        // Queued for the channel and not added yet: it never will be.
        for (f, _, ids) in &mut self.pending.adds {
            if *f != fid {
                continue;
            }
            if let Some(i) = ids.iter().position(|c| *c == id) {
                ids.swap_remove(i);
                if let Some(ch) = self.channels.get_mut(&id) {
                    ch.queued = ch.queued.saturating_sub(1);
                }
                return true;
            }
        }
        false
    }

    /// Sets (replaces) the mapping filter of every channel in `channels`.
    pub fn set_mapping(&mut self, channels: &[ChannelId], fid: FilterId, mapping: &MappingFilter) {
        for c in channels {
            self.change_channel(*c, |ch| {
                ch.mapping = Some((fid, mapping.clone()));
                true
            });
        }
    }

    /// Removes channel `id`'s mapping filter if its id is `fid`; whether it was.
    pub fn remove_mapping(&mut self, id: ChannelId, fid: FilterId) -> bool {
        self.change_channel(id, |ch| {
            let hit = ch.mapping.as_ref().is_some_and(|(f, _)| *f == fid);
            if hit {
                ch.mapping = None;
            }
            hit
        })
    }

    /// Applies `change` to channel `id` and, if it reports a change, puts
    /// the channel where its filters now say; whether it changed.
    fn change_channel(&mut self, id: ChannelId, change: impl FnOnce(&mut Chan<T>) -> bool) -> bool {
        let changed = self.channels.get_mut(&id).is_some_and(change);
        if changed {
            self.place(id);
        }
        changed
    }

    /// Adds filter `fid` to a session's (admin) level and re-places the
    /// session's channels at once (O(its channels)).
    pub fn add_session_filter(
        &mut self,
        session: SessionId,
        fid: FilterId,
        filter: Filter,
    ) -> Result<(), RouteError> {
        self.session_mut(session).admin.add(fid, filter)?;
        self.replace_now(session);
        Ok(())
    }

    /// Removes filter `fid` from a session's level; whether it was there.
    /// Re-places the session's channels at once.
    pub fn remove_session_filter(&mut self, session: SessionId, fid: FilterId) -> bool {
        let removed = self
            .sessions
            .get_mut(&session)
            .is_some_and(|s| s.admin.remove(fid).is_some());
        if removed {
            self.replace_now(session);
        }
        removed
    }

    /// Sets the operator between a session's two levels. Re-places the
    /// session's channels at once.
    pub fn set_op(&mut self, session: SessionId, op: InterFilterOp) {
        self.session_mut(session).op = op;
        self.replace_now(session);
    }

    /// Like [`Routes::add_session_filter`], in O(1): the re-placement of
    /// the session's channels is left to [`Routes::settle`]. Meanwhile the
    /// new filter applies to every channel found by tag; a channel found
    /// through the index that the change moves to the tag path (operator
    /// OR) may miss events only the session level passes until then.
    pub fn queue_add_session_filter(
        &mut self,
        session: SessionId,
        fid: FilterId,
        filter: Filter,
    ) -> Result<(), RouteError> {
        self.session_mut(session).admin.add(fid, filter)?;
        self.queue_replace(session);
        Ok(())
    }

    /// Like [`Routes::remove_session_filter`], leaving the re-placement to
    /// [`Routes::settle`] (see [`Routes::queue_add_session_filter`]).
    pub fn queue_remove_session_filter(&mut self, session: SessionId, fid: FilterId) -> bool {
        let removed = self
            .sessions
            .get_mut(&session)
            .is_some_and(|s| s.admin.remove(fid).is_some());
        if removed {
            self.queue_replace(session);
        }
        removed
    }

    /// Like [`Routes::set_op`], leaving the re-placement to
    /// [`Routes::settle`] (see [`Routes::queue_add_session_filter`]).
    pub fn queue_set_op(&mut self, session: SessionId, op: InterFilterOp) {
        self.session_mut(session).op = op;
        self.queue_replace(session);
    }

    /// Re-places every channel of `session` now, dropping any queued
    /// re-placement of it.
    fn replace_now(&mut self, session: SessionId) {
        if self.pending.replacing.remove(&session).is_some() {
            self.pending.replace.retain(|(s, _)| *s != session);
        }
        let ids: Vec<ChannelId> = self
            .sessions
            .get(&session)
            .map(|s| s.channels.iter().copied().collect())
            .unwrap_or_default();
        for id in ids {
            self.place(id);
        }
    }

    /// Calls `deliver(value, overrides)` once for every channel that gets
    /// `event`; `overrides` are what its mapping filter sets (empty if none).
    pub fn route(&mut self, event: &EventRef<'_>, mut deliver: impl FnMut(&T, Overrides)) {
        let tag = event.tag;
        let unsettled = self.pending.affects_routing();
        // One field table and one work budget for all of the event's
        // evaluations (issue 24 item 9), made when the first filter is
        // about to be evaluated: an event with nothing to evaluate pays
        // nothing for them.
        let max_work = self.limits.max_event_work;
        let lazy = OnceCell::new();
        let fields = || lazy.get_or_init(|| EventFields::metered(*event, Meter::new(max_work)));
        let mut stopped: Option<ChannelId> = None;
        let mut skipped = 0u64;
        for e in self.by_tag.matches(tag).iter() {
            if unsettled && self.pending.is_gone(e.id, e.session) {
                continue;
            }
            // A session whose channels are being re-placed judges them all.
            let judge = e.judge || (unsettled && self.pending.replacing.contains_key(&e.session));
            if !judge {
                deliver(&e.value, Overrides::default());
                continue;
            }
            let Some(ch) = self.channels.get(&e.id) else {
                continue;
            };
            let Some(s) = self.sessions.get(&ch.session) else {
                continue;
            };
            let fields = fields();
            if fields.meter.is_over() {
                skipped += 1;
                continue;
            }
            let passes = levels_pass_in(s.op, &s.admin, &ch.proxy, event, fields);
            let overrides = if passes {
                ch.mapped(event, fields)
            } else {
                Overrides::default()
            };
            if fields.meter.is_over() {
                // The budget ran out in this channel's evaluation: a pass
                // decided before that stands, a mapping cut short does not.
                if !passes || ch.mapping.is_some() {
                    stopped.get_or_insert(e.id);
                    skipped += 1;
                    continue;
                }
            }
            if passes {
                deliver(&e.value, overrides);
            }
        }
        if !self.index.is_empty() && !self.indexed_tags.matches(tag).is_empty() {
            let fields = fields();
            self.hits.clear();
            self.index
                .matching_in(event, &mut self.scratch, &fields.meter, &mut self.hits);
            if self.hits.len() > 1 {
                // A channel with several matching filters is delivered once.
                self.hits.sort_unstable_by_key(|h| h.channel);
                self.hits.dedup_by_key(|h| h.channel);
            }
            self.patterns.next_event();
            for h in &self.hits {
                if unsettled && self.pending.is_gone(h.channel, h.session) {
                    continue;
                }
                // Indexed channels' sessions use AND or have no filters.
                let Some(s) = self.sessions.get(&h.session) else {
                    continue;
                };
                if !s.admin.passes_in(event, fields) || !self.patterns.matches(h.pattern, tag) {
                    if fields.meter.is_over() && !s.admin.is_empty() {
                        skipped += 1;
                    }
                    continue;
                }
                if !h.mapped {
                    deliver(&h.value, Overrides::default());
                } else if let Some(ch) = self.channels.get(&h.channel) {
                    let overrides = ch.mapped(event, fields);
                    if fields.meter.is_over() {
                        skipped += 1;
                        continue;
                    }
                    deliver(&h.value, overrides);
                }
            }
        }
        let Some(fields) = lazy.get() else {
            return;
        };
        let work = fields.meter.used();
        if work > 0 || fields.decodes() > 0 || fields.meter.is_over() {
            let b = &mut self.budget;
            b.work = b.work.saturating_add(work);
            b.field_decodes = b.field_decodes.saturating_add(fields.decodes().into());
            if fields.meter.is_over() {
                b.over_budget += 1;
                b.skipped = b.skipped.saturating_add(skipped);
                b.last = Some(OverBudget {
                    tag: tag.to_owned(),
                    channel: stopped,
                    work,
                });
            }
        }
    }

    fn session_mut(&mut self, session: SessionId) -> &mut Session {
        if !self.sessions.contains_key(&session) {
            self.flush_retired_session(session);
        }
        let limits = &self.limits;
        self.sessions.entry(session).or_insert_with(|| Session {
            admin: FilterList::new(limits),
            op: InterFilterOp::default(),
            channels: HashSet::new(),
        })
    }

    /// Queues the re-placement of every channel of `session`.
    fn queue_replace(&mut self, session: SessionId) {
        let Some(s) = self.sessions.get(&session) else {
            return;
        };
        if s.channels.is_empty() {
            return;
        }
        let ids: Vec<ChannelId> = s.channels.iter().copied().collect();
        if self.pending.replacing.contains_key(&session) {
            // Already queued: start that re-placement over, with every channel.
            if let Some(queued) = self.pending.replace.iter_mut().find(|(s, _)| *s == session) {
                queued.1 = ids;
                return;
            }
        }
        *self.pending.replacing.entry(session).or_default() += 1;
        self.pending.replace.push_back((session, ids));
    }

    fn needs_judge(&self, ch: &Chan<T>) -> bool {
        !ch.proxy.is_empty()
            || ch.mapping.is_some()
            || self
                .sessions
                .get(&ch.session)
                .is_some_and(|s| !s.admin.is_empty())
    }

    /// Takes channel `id` out of the trie or the index.
    fn unplace(&mut self, id: ChannelId) {
        let Some(ch) = self.channels.get_mut(&id) else {
            return;
        };
        if ch.entries.is_empty() {
            self.by_tag.remove(id);
        } else {
            for e in ch.entries.drain(..) {
                self.index.remove(e);
            }
            self.indexed_tags.remove(id);
            self.patterns.release(ch.pattern_id);
        }
    }

    /// Puts channel `id` where its filters say (see the module docs),
    /// taking it out of where it was first.
    fn place(&mut self, id: ChannelId) {
        self.unplace(id);
        let Some(ch) = self.channels.get(&id) else {
            return;
        };
        let session_allows = !matches!(
            self.sessions.get(&ch.session),
            Some(s) if s.op == InterFilterOp::Or && !s.admin.is_empty()
        );
        if !ch.proxy.is_empty() && session_allows {
            let mut entries = Vec::with_capacity(ch.proxy.len());
            let mut all_indexed = true;
            let pattern_id = self.patterns.intern(&ch.pattern);
            let hit = Hit {
                channel: id,
                session: ch.session,
                pattern: pattern_id,
                mapped: ch.mapping.is_some(),
                value: ch.value.clone(),
            };
            for (_, f) in ch.proxy.iter() {
                let e = self.next_entry;
                self.next_entry += 1;
                match self.index.insert_indexed(e, f.clone(), hit.clone()) {
                    Ok(true) => entries.push(e),
                    _ => {
                        all_indexed = false;
                        break;
                    }
                }
            }
            if all_indexed {
                let pattern = ch.pattern.clone();
                self.indexed_tags.insert(id, pattern, ());
                if let Some(ch) = self.channels.get_mut(&id) {
                    ch.entries = entries;
                    ch.pattern_id = pattern_id;
                }
                return;
            }
            self.patterns.release(pattern_id);
            for e in entries {
                self.index.remove(e);
            }
        }
        let entry = ByTag {
            id,
            session: ch.session,
            judge: self.needs_judge(ch),
            value: ch.value.clone(),
        };
        self.by_tag.insert(id, ch.pattern.clone(), entry);
    }
}
