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

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tagwire_core::filter::{
    Filter, FilterError, FilterLimits, FilterList, InterFilterOp, MappingFilter, Overrides,
};
use tagwire_proto::{Event, Expiry};

/// A publisher endpoint's filters, shared between its connection (which
/// applies them to each publish) and the router's state (where admin
/// requests change them).
pub(crate) type SourceFilters = std::rc::Rc<std::cell::RefCell<FilterList>>;

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

/// Which level an admin filter is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterLevel {
    /// Every channel of the endpoint's connection (TAO admin).
    Session,
    /// Each channel of the endpoint (TAO proxy).
    #[default]
    Channel,
    /// A publisher endpoint (TAO supplier-side proxy): its events that no
    /// such filter accepts are dropped before routing, for every subscriber.
    Publisher,
}

/// One filter known to the router, as `tagwire admin filter list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterInfo {
    /// Id for `filter remove`.
    pub id: u64,
    /// The endpoint it was attached through.
    pub endpoint: String,
    /// Session or channel.
    pub level: FilterLevel,
    /// `filter` or `map`.
    pub kind: String,
    /// The text as given.
    pub text: String,
    /// The session's operator between levels (`and`/`or`).
    pub interfilter: String,
}

/// Where a filter lives, for listing and removal.
#[derive(Debug, Clone)]
pub(crate) struct FilterRecord {
    pub info: FilterInfo,
    pub connection: u64,
    /// Channel ids (router-wide) holding it; empty for session filters.
    pub channels: Vec<u64>,
}

/// The router's filter bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct FilterBook {
    pub limits: FilterLimits,
    pub records: HashMap<u64, FilterRecord>,
    next_id: u64,
}

impl FilterBook {
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Forgets channel `global`; drops channel filters left with no channel.
    pub fn forget_channel(&mut self, global: u64) {
        self.records.retain(|_, r| {
            r.channels.retain(|c| *c != global);
            r.info.level == FilterLevel::Session || !r.channels.is_empty()
        });
    }

    /// Forgets the publisher-level filters of endpoint `name`.
    pub fn forget_publisher(&mut self, name: &str) {
        self.records
            .retain(|_, r| r.info.level != FilterLevel::Publisher || r.info.endpoint != name);
    }

    /// Forgets everything attached through connection `conn`.
    pub fn forget_connection(&mut self, conn: u64) {
        self.records.retain(|_, r| r.connection != conn);
    }

    /// Compiles a filter with the router's limits.
    pub fn compile(&self, text: &str) -> Result<Filter, FilterError> {
        Filter::compile(text, &self.limits)
    }

    /// Compiles a mapping filter with the router's limits.
    pub fn compile_mapping(&self, text: &str) -> Result<MappingFilter, FilterError> {
        MappingFilter::compile(text, &self.limits)
    }
}

/// The name of an operator, as admin requests spell it.
pub(crate) fn op_name(op: InterFilterOp) -> &'static str {
    match op {
        InterFilterOp::And => "and",
        InterFilterOp::Or => "or",
    }
}
