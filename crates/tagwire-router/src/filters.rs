//! Content filters in the router (TAO's filter levels): a session's (admin)
//! filters apply to every channel of its connection, a channel's (proxy)
//! filters to that channel; the session's inter-filter operator (AND by
//! default, or OR) combines the two levels. A mapping filter on a channel
//! rewrites the priority or lifetime of that channel's copy of an event.
//!
//! The filters themselves live in the lane's
//! [`Routes`](tagwire_core::route::Routes), which evaluates them (through the
//! subscription index where it can) when an event is routed; this module
//! keeps the bookkeeping `tagwire admin filter list|remove` needs.
//!
//! With one daemon, the publisher's daemon and the subscriber's daemon are the
//! same router, so filters run once, when the event is routed: an event a
//! filter rejects is never queued. (Federation will evaluate the same sets at
//! the publisher's daemon, carried with interest, so that rejected events
//! never cross a link.)

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hashbrown::{HashMap, HashSet};
use tagwire_core::filter::{
    Filter, FilterError, FilterLimits, FilterList, InterFilterOp, MappingFilter, Overrides,
};
use tagwire_proto::{Event, EventRef, Expiry};

/// Publisher endpoints' own filters, kept in the router's state (admin
/// requests change them; each publish reads them under the same lock, so
/// they need no lock of their own). Every declared publisher has a list,
/// empty for most; the count of filters in all of them lets a publish skip
/// looking its publisher up while no publisher has any.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    lists: HashMap<Arc<str>, FilterList>,
    filters: usize,
    /// Work budget of one event's publisher filters
    /// (`limits.max_filter_work_per_event`; 0 until a publisher is declared).
    max_work: u64,
}

impl Sources {
    /// Publisher `name` was declared: it gets an empty list.
    pub fn declare(&mut self, name: &str, limits: &FilterLimits) {
        self.max_work = limits.max_event_work;
        let old = self.lists.insert(Arc::from(name), FilterList::new(limits));
        self.filters -= old.map_or(0, |l| l.len());
    }

    /// Publisher `name` is gone with its filters; false if it was none.
    pub fn undeclare(&mut self, name: &str) -> bool {
        let Some(list) = self.lists.remove(name) else {
            return false;
        };
        self.filters -= list.len();
        true
    }

    /// Whether `name` is a declared publisher.
    pub fn is_publisher(&self, name: &str) -> bool {
        self.lists.contains_key(name)
    }

    /// Adds filter `id` to publisher `name`'s list (nothing if `name` is
    /// not a publisher).
    pub fn add(&mut self, name: &str, id: u64, filter: Filter) -> Result<(), FilterError> {
        if let Some(list) = self.lists.get_mut(name) {
            list.add(id, filter)?;
            self.filters += 1;
        }
        Ok(())
    }

    /// Removes filter `id` from publisher `name`'s list.
    pub fn remove(&mut self, name: &str, id: u64) {
        if let Some(list) = self.lists.get_mut(name) {
            if list.remove(id).is_some() {
                self.filters -= 1;
            }
        }
    }

    /// Whether the publisher that `name` looks up (`None`: not known here)
    /// lets `event` pass: it has no filters, or one of them matches within
    /// the per-event work budget (an event whose publisher filters would
    /// cost more does not pass, issue 24 item 9). Looks it up only while
    /// some publisher has filters.
    pub fn accepts<'n>(
        &self,
        name: impl FnOnce() -> Option<&'n str>,
        event: &EventRef<'_>,
    ) -> bool {
        self.filters == 0
            || name()
                .and_then(|n| self.lists.get(n))
                .is_none_or(|f| f.passes_within(event, self.max_work))
    }
}

/// The event re-encoded with a mapping filter's overrides (a per-channel
/// copy: only channels whose mapping fires pay for it).
pub(crate) fn rewrite(event: &Bytes, o: Overrides) -> Option<Bytes> {
    let mut e = Event::decode(event).ok()?;
    if let Some(p) = o.priority {
        e.header.priority = p;
    }
    if let Some(t) = o.timeout_ns {
        e.header.expiry = Expiry::AfterNs(t);
    }
    let mut out = BytesMut::with_capacity(e.encoded_len());
    e.encode(&mut out).ok()?;
    Some(out.freeze())
}

pub use tagwire_proto::admin::{FilterInfo, FilterLevel};

/// A filter to record: where it was attached.
#[derive(Debug, Clone)]
pub(crate) struct FilterRecord {
    pub info: FilterInfo,
    pub connection: u64,
    /// Channel ids (router-wide) holding it; empty for session filters.
    pub channels: Vec<u64>,
    /// The identity whose quota it counts against (its endpoint's owner).
    pub identity: Arc<str>,
    /// Its compiled memory ([`Filter::memory_estimate`]).
    pub bytes: usize,
}

/// A recorded filter.
#[derive(Debug)]
pub(crate) struct Stored {
    pub info: FilterInfo,
    pub connection: u64,
    /// Channel ids holding it (channel level).
    pub channels: HashSet<u64>,
    identity: Arc<str>,
    bytes: usize,
}

/// What one identity's filters hold, for `max_filters_per_identity` and
/// `max_filter_bytes_per_identity`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilterUsage {
    pub filters: usize,
    pub bytes: usize,
}

/// A channel's list of filter ids is pruned of removed filters' ids when it
/// reaches this length.
const STALE_PRUNE_AT: usize = 64;

/// Every filter by id (ordered, for paged listings), indexed by channel,
/// by connection (session level) and by publisher endpoint, so that
/// removing a channel, a connection or an endpoint touches only its own
/// filters.
#[derive(Debug, Default)]
pub(crate) struct Records {
    by_id: BTreeMap<u64, Stored>,
    by_channel: HashMap<u64, Vec<u64>>,
    sessions: HashMap<u64, Vec<u64>>,
    publishers: HashMap<String, Vec<u64>>,
    /// Per identity: kept in step with `by_id` by `insert` and `forget`.
    usage: HashMap<Arc<str>, FilterUsage>,
}

impl Records {
    /// Records filter `id`.
    pub fn insert(&mut self, id: u64, r: FilterRecord) {
        self.remove(id);
        for c in &r.channels {
            let list = self.by_channel.entry(*c).or_default();
            if list.len() >= STALE_PRUNE_AT {
                // Ids of filters removed since (see `remove`).
                let by_id = &self.by_id;
                list.retain(|f| by_id.get(f).is_some_and(|s| s.channels.contains(c)));
            }
            list.push(id);
        }
        match r.info.level {
            FilterLevel::Session => self.sessions.entry(r.connection).or_default().push(id),
            FilterLevel::Publisher => self
                .publishers
                .entry(r.info.endpoint.clone())
                .or_default()
                .push(id),
            FilterLevel::Channel => {}
        }
        let u = self.usage.entry(r.identity.clone()).or_default();
        u.filters += 1;
        u.bytes += r.bytes;
        self.by_id.insert(
            id,
            Stored {
                info: r.info,
                connection: r.connection,
                channels: r.channels.into_iter().collect(),
                identity: r.identity,
                bytes: r.bytes,
            },
        );
    }

    /// What `identity`'s filters hold.
    pub fn usage_of(&self, identity: &str) -> FilterUsage {
        self.usage.get(identity).copied().unwrap_or_default()
    }

    /// Takes filter `id` out of `by_id` and its identity's usage.
    fn forget(&mut self, id: u64) -> Option<Stored> {
        let r = self.by_id.remove(&id)?;
        if let Some(u) = self.usage.get_mut(&r.identity) {
            u.filters = u.filters.saturating_sub(1);
            u.bytes = u.bytes.saturating_sub(r.bytes);
            if u.filters == 0 {
                self.usage.remove(&r.identity);
            }
        }
        Some(r)
    }

    /// Filter `id`.
    pub fn get(&self, id: u64) -> Option<&Stored> {
        self.by_id.get(&id)
    }

    /// Forgets filter `id`, in O(1) however many channels hold it: their
    /// lists in `by_channel` keep its id until the channel goes or its list
    /// is pruned (ids with no record are skipped).
    pub fn remove(&mut self, id: u64) -> Option<Stored> {
        let r = self.forget(id)?;
        match r.info.level {
            FilterLevel::Session => unlist(&mut self.sessions, &r.connection, id),
            FilterLevel::Publisher => unlist(&mut self.publishers, r.info.endpoint.as_str(), id),
            FilterLevel::Channel => {}
        }
        Some(r)
    }

    /// Filters with ids above `after`, in id order.
    pub fn after(&self, after: Option<u64>) -> impl Iterator<Item = &Stored> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.by_id.range((from, Bound::Unbounded)).map(|(_, r)| r)
    }

    /// The ids of the filters channel `global` holds.
    pub fn of_channel(&self, global: u64) -> &[u64] {
        self.by_channel.get(&global).map_or(&[], Vec::as_slice)
    }

    /// Detaches channel `global` from filter `id`; forgets a channel-level
    /// filter left with no channel.
    pub fn detach(&mut self, id: u64, global: u64) {
        unlist(&mut self.by_channel, &global, id);
        let empty = self.by_id.get_mut(&id).is_some_and(|r| {
            r.channels.remove(&global);
            r.info.level == FilterLevel::Channel && r.channels.is_empty()
        });
        if empty {
            self.forget(id);
        }
    }
}

fn unlist<K, Q>(map: &mut HashMap<K, Vec<u64>>, key: &Q, id: u64)
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(list) = map.get_mut(key) {
        if let Some(i) = list.iter().position(|x| *x == id) {
            list.swap_remove(i);
        }
        if list.is_empty() {
            map.remove(key);
        }
    }
}

/// The router's filter bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct FilterBook {
    pub limits: FilterLimits,
    pub records: Records,
    next_id: u64,
    /// Filters of the request being handled, compiled off the lane
    /// (`(is_map, text, result)`); empty between requests.
    precompiled: std::cell::RefCell<Vec<(bool, String, Precompiled)>>,
}

/// A filter compiled off the lane (see [`precompile`]).
#[derive(Debug)]
pub(crate) enum Precompiled {
    Filter(Result<Filter, FilterError>),
    Mapping(Result<MappingFilter, FilterError>),
}

/// The filter texts a request would compile, when one of them is costly to
/// compile (a regular expression, `=~`, builds its automaton): `(is_map,
/// text)` pairs from a `Subscribe`'s `filter`/`map` properties or an admin
/// `filter_add`. Empty when there is nothing worth moving off the lane.
pub(crate) fn costly_filters(input: &tagwire_core::connection::Input) -> Vec<(bool, String)> {
    use tagwire_core::connection::Input;
    let texts: Vec<(bool, String)> = match input {
        Input::Subscribe { qos, .. } => qos
            .iter()
            .filter(|(k, _)| k == "filter" || k == "map")
            .map(|(k, v)| (k == "map", v.clone()))
            .collect(),
        Input::Admin { body, .. } => match tagwire_proto::AdminRequest::parse(body) {
            Ok(tagwire_proto::AdminRequest::FilterAdd { filter, map, .. }) => filter
                .map(|t| (false, t))
                .into_iter()
                .chain(map.map(|t| (true, t)))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    if texts.iter().any(|(_, t)| t.contains("=~")) {
        texts
    } else {
        Vec::new()
    }
}

/// Compiles `texts` with `limits`: run on a blocking thread, so that a
/// regular expression's automaton (tens of ms for a large one) never stalls
/// the lane.
pub(crate) fn precompile(
    texts: Vec<(bool, String)>,
    limits: &FilterLimits,
) -> Vec<(bool, String, Precompiled)> {
    texts
        .into_iter()
        .map(|(map, text)| {
            let c = if map {
                Precompiled::Mapping(MappingFilter::compile(&text, limits))
            } else {
                Precompiled::Filter(Filter::compile(&text, limits))
            };
            (map, text, c)
        })
        .collect()
}

impl FilterBook {
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Forgets channel `global`; drops channel filters left with no
    /// channel. O(the channel's filters).
    pub fn forget_channel(&mut self, global: u64) {
        let ids = self.records.of_channel(global).to_vec();
        for id in ids {
            self.records.detach(id, global);
        }
    }

    /// Like [`FilterBook::forget_channel`] for a channel whose id a new
    /// channel holding filters `keep` already uses.
    pub fn forget_channel_except(&mut self, global: u64, keep: &[u64]) {
        let ids = self.records.of_channel(global).to_vec();
        for id in ids.into_iter().filter(|id| !keep.contains(id)) {
            self.records.detach(id, global);
        }
    }

    /// Forgets the publisher-level filters of endpoint `name`.
    pub fn forget_publisher(&mut self, name: &str) {
        let ids = self
            .records
            .publishers
            .get(name)
            .cloned()
            .unwrap_or_default();
        for id in ids {
            self.records.remove(id);
        }
    }

    /// Forgets the session-level filters of connection `conn` (its
    /// channels' filters go with its channels, its publishers' with them).
    pub fn forget_connection(&mut self, conn: u64) {
        let ids = self
            .records
            .sessions
            .get(&conn)
            .cloned()
            .unwrap_or_default();
        for id in ids {
            self.records.remove(id);
        }
    }

    /// Whether `identity` may attach `filters` more filters holding
    /// `bytes` of compiled memory; the error names the quota.
    pub fn admit(
        &self,
        identity: &str,
        filters: usize,
        bytes: usize,
        max_filters: usize,
        max_bytes: usize,
    ) -> Result<(), String> {
        let u = self.records.usage_of(identity);
        if u.filters + filters > max_filters {
            return Err(format!(
                "identity {identity} already has {} filters (max_filters_per_identity = {max_filters})",
                u.filters
            ));
        }
        if u.bytes + bytes > max_bytes {
            return Err(format!(
                "identity {identity}'s filters would hold {} bytes compiled, over max_filter_bytes_per_identity = {max_bytes}",
                u.bytes + bytes
            ));
        }
        Ok(())
    }

    /// Compiles a filter with the router's limits (or takes the one
    /// [`precompile`] built off the lane for this text).
    pub fn compile(&self, text: &str) -> Result<Filter, FilterError> {
        match self.take_precompiled(false, text) {
            Some(Precompiled::Filter(r)) => r,
            _ => Filter::compile(text, &self.limits),
        }
    }

    /// Compiles a mapping filter with the router's limits (or takes the one
    /// [`precompile`] built off the lane for this text).
    pub fn compile_mapping(&self, text: &str) -> Result<MappingFilter, FilterError> {
        match self.take_precompiled(true, text) {
            Some(Precompiled::Mapping(r)) => r,
            _ => MappingFilter::compile(text, &self.limits),
        }
    }

    fn take_precompiled(&self, map: bool, text: &str) -> Option<Precompiled> {
        let mut p = self.precompiled.borrow_mut();
        let i = p.iter().position(|(m, t, _)| *m == map && t == text)?;
        Some(p.swap_remove(i).2)
    }

    /// Hands over filters compiled off the lane, for the request about to
    /// be handled; what that request does not use is dropped by
    /// [`FilterBook::clear_precompiled`] right after it.
    pub fn set_precompiled(&self, compiled: Vec<(bool, String, Precompiled)>) {
        *self.precompiled.borrow_mut() = compiled;
    }

    /// Drops precompiled filters the request did not use.
    pub fn clear_precompiled(&self) {
        self.precompiled.borrow_mut().clear();
    }
}

/// The name of an operator, as admin requests spell it.
pub(crate) fn op_name(op: InterFilterOp) -> &'static str {
    match op {
        InterFilterOp::And => "and",
        InterFilterOp::Or => "or",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::Value;

    fn event(severity: i64) -> Bytes {
        let mut e = Event::new("/t", Bytes::new());
        e.header.publisher = "/a".into();
        e.fields.push(("severity".into(), Value::Int(severity)));
        let mut b = BytesMut::new();
        e.encode(&mut b).expect("encodes");
        b.freeze()
    }

    fn no_lookup<'n>() -> Option<&'n str> {
        panic!("looked the publisher up although no publisher has filters")
    }

    #[test]
    fn sources_look_a_publisher_up_only_while_some_publisher_has_filters() {
        let limits = FilterLimits::default();
        let (low, high) = (event(1), event(5));
        let low = EventRef::parse(&low).expect("parses");
        let high = EventRef::parse(&high).expect("parses");
        let mut s = Sources::default();
        s.declare("/a", &limits);
        s.declare("/b", &limits);
        assert!(s.is_publisher("/a") && !s.is_publisher("/c"));
        assert!(s.accepts(no_lookup, &low));

        let f = Filter::compile("$.severity > 3", &limits).expect("compiles");
        s.add("/a", 7, f).expect("adds");
        assert!(!s.accepts(|| Some("/a"), &low));
        assert!(s.accepts(|| Some("/a"), &high));
        assert!(s.accepts(|| Some("/b"), &low), "/b has no filters");
        assert!(s.accepts(|| None, &low), "an unknown publisher");

        s.remove("/a", 7);
        assert!(s.accepts(no_lookup, &low), "the last filter removed");

        // Gone with its filters: the count follows.
        let f = Filter::compile("$.severity > 3", &limits).expect("compiles");
        s.add("/b", 8, f).expect("adds");
        assert!(s.undeclare("/b"));
        assert!(!s.undeclare("/b"), "already gone");
        assert!(s.accepts(no_lookup, &low));

        // Declared again: a fresh, empty list.
        let f = Filter::compile("$.severity > 3", &limits).expect("compiles");
        s.add("/a", 9, f).expect("adds");
        s.declare("/a", &limits);
        assert!(s.accepts(no_lookup, &low));

        // A filter for an endpoint that is no publisher is not counted.
        let f = Filter::compile("$.severity > 3", &limits).expect("compiles");
        s.add("/nobody", 10, f).expect("ignored");
        assert!(s.accepts(no_lookup, &low));
    }
}
