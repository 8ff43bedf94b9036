//! TAO's filter levels: filters on a session (TAO's admin) and on a channel
//! (TAO's proxy), combined by the admin's inter-filter operator.

use tagwire_proto::EventRef;

use super::budget::Meter;
use super::eval::EventFields;
use super::{Filter, FilterError, FilterLimits};

/// How a session's (admin) filters combine with a channel's (proxy) filters,
/// as CORBA's `InterFilterGroupOperator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InterFilterOp {
    /// The event must pass both levels (`AND_OP`; the default).
    #[default]
    And,
    /// The event must pass at least one level that has filters (`OR_OP`).
    Or,
}

/// The filters of one level of one channel, each with the caller's id (for
/// `tagwire admin filter list|remove`), bounded by
/// [`FilterLimits::max_filters_per_channel`].
///
/// A list passes an event when it is empty or when **any** of its filters
/// matches (filters on one level are alternatives, as in CORBA).
#[derive(Debug, Clone)]
pub struct FilterList {
    filters: Vec<(u64, Filter)>,
    max: usize,
}

impl Default for FilterList {
    /// An empty list bounded by the default [`FilterLimits`].
    fn default() -> Self {
        FilterList::new(&FilterLimits::default())
    }
}

impl FilterList {
    /// An empty list holding at most `limits.max_filters_per_channel` filters.
    pub fn new(limits: &FilterLimits) -> Self {
        FilterList {
            filters: Vec::new(),
            max: limits.max_filters_per_channel,
        }
    }

    /// Adds a filter under `id`; refuses a duplicate id or a full list.
    pub fn add(&mut self, id: u64, filter: Filter) -> Result<(), FilterError> {
        if self.filters.iter().any(|(i, _)| *i == id) {
            return Err(FilterError::DuplicateId { id });
        }
        if self.filters.len() >= self.max {
            return Err(FilterError::LimitExceeded {
                limit: "max_filters_per_channel",
                value: self.filters.len() + 1,
                max: self.max,
                at: None,
            });
        }
        self.filters.push((id, filter));
        Ok(())
    }

    /// Removes and returns the filter with `id`.
    pub fn remove(&mut self, id: u64) -> Option<Filter> {
        let i = self.filters.iter().position(|(x, _)| *x == id)?;
        Some(self.filters.remove(i).1)
    }

    /// The filters with their ids, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Filter)> {
        self.filters.iter().map(|(i, f)| (*i, f))
    }

    /// Number of filters.
    pub fn len(&self) -> usize {
        self.filters.len()
    }

    /// True when there are no filters (the level lets everything through).
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Whether any filter matches (false for an empty list; see [`FilterList::passes`]).
    pub fn any_matches(&self, event: &EventRef<'_>) -> bool {
        self.any_matches_in(event, &EventFields::new(*event))
    }

    pub(crate) fn any_matches_in<'x>(
        &'x self,
        event: &EventRef<'x>,
        fields: &EventFields<'x>,
    ) -> bool {
        self.filters
            .iter()
            .any(|(_, f)| f.truth_in(event, fields) == Some(true))
    }

    /// Whether the level lets `event` through: empty, or any filter matches.
    pub fn passes(&self, event: &EventRef<'_>) -> bool {
        self.is_empty() || self.any_matches(event)
    }

    /// [`FilterList::passes`] within a work budget of `max_work` units (see
    /// [`FilterLimits::max_event_work`]): a filter the budget cuts short
    /// does not match, so an event whose evaluation would cost more does
    /// not pass (publisher filters: one list per event, outside
    /// [`Routes`](crate::route::Routes)'s budget).
    pub fn passes_within(&self, event: &EventRef<'_>, max_work: u64) -> bool {
        self.is_empty()
            || self.any_matches_in(event, &EventFields::metered(*event, Meter::new(max_work)))
    }

    pub(crate) fn passes_in<'x>(&'x self, event: &EventRef<'x>, fields: &EventFields<'x>) -> bool {
        self.is_empty() || self.any_matches_in(event, fields)
    }
}

/// TAO's rule between levels, for one event on one channel.
///
/// - `And`: every level passes ([`FilterList::passes`]: empty or any match).
/// - `Or`: if neither level has filters the event passes; otherwise it passes
///   when some filter on either level matches. (An empty level does not make
///   `Or` pass everything: that would silently disable the other level.)
pub fn levels_pass(
    op: InterFilterOp,
    admin: &FilterList,
    proxy: &FilterList,
    event: &EventRef<'_>,
) -> bool {
    // Both levels read the event's fields through one table.
    levels_pass_in(op, admin, proxy, event, &EventFields::new(*event))
}

/// [`levels_pass`] with the event's fields (and work budget) shared with
/// the event's other evaluations.
pub(crate) fn levels_pass_in<'x>(
    op: InterFilterOp,
    admin: &'x FilterList,
    proxy: &'x FilterList,
    event: &EventRef<'x>,
    fields: &EventFields<'x>,
) -> bool {
    match op {
        InterFilterOp::And => admin.passes_in(event, fields) && proxy.passes_in(event, fields),
        InterFilterOp::Or => {
            (admin.is_empty() && proxy.is_empty())
                || admin.any_matches_in(event, fields)
                || proxy.any_matches_in(event, fields)
        }
    }
}

/// The filters that decide whether one channel gets an event: the session's
/// (admin) list, the channel's (proxy) list and the operator between them.
/// The router keeps one per channel at each place filters run (publisher's
/// daemon, subscriber's daemon) and calls [`FilterSet::matches`].
#[derive(Debug, Clone, Default)]
pub struct FilterSet {
    /// Session-level filters (TAO admin).
    pub admin: FilterList,
    /// Channel-level filters (TAO proxy).
    pub proxy: FilterList,
    /// How the two levels combine.
    pub op: InterFilterOp,
}

impl FilterSet {
    /// Empty lists bounded by `limits`, combined by `op`.
    pub fn new(op: InterFilterOp, limits: &FilterLimits) -> Self {
        FilterSet {
            admin: FilterList::new(limits),
            proxy: FilterList::new(limits),
            op,
        }
    }

    /// Whether the channel gets `event` (see [`levels_pass`]).
    pub fn matches(&self, event: &EventRef<'_>) -> bool {
        levels_pass(self.op, &self.admin, &self.proxy, event)
    }
}
