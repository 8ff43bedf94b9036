//! Admin requests and replies: JSON documents carried by `Admin` and
//! `AdminReply` frames (listed in `docs/admin.md`). Admin work runs on the
//! lane like everything else for now; the priority-lanes work moves it to the
//! lowest-priority lane.

use serde::{Deserialize, Serialize};
use tagwire_core::filter::InterFilterOp;
use tagwire_core::route::RouteError;
use tagwire_proto::ErrorCode;

use crate::filters::{op_name, FilterRecord};
pub use crate::filters::{FilterInfo, FilterLevel};
use crate::state::State;

/// An admin request, tagged by `op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum AdminRequest {
    /// Lists connections, endpoints, subscriptions and tags.
    List,
    /// Attaches a filter (`filter`) or a mapping filter (`map`) through an
    /// endpoint: to its connection's session, or to each of its channels.
    FilterAdd {
        /// The endpoint whose session or channels get the filter.
        endpoint: String,
        /// `session` or `channel` (default).
        #[serde(default)]
        level: FilterLevel,
        /// A constraint.
        #[serde(default)]
        filter: Option<String>,
        /// A mapping filter (channel level only).
        #[serde(default)]
        map: Option<String>,
    },
    /// Lists every filter with its id.
    FilterList,
    /// Removes filter `id`.
    FilterRemove {
        /// The id from `filter_add` or `filter_list`.
        id: u64,
    },
    /// Sets the operator between the session and channel levels of the
    /// endpoint's connection: `and` (default) or `or`.
    FilterOp {
        /// An endpoint of the connection.
        endpoint: String,
        /// `and` or `or`.
        interfilter: String,
    },
}

/// Who sent an admin request: an identity sees and changes only what its own
/// connections declared, unless it has the admin right.
pub(crate) struct Requester<'a> {
    /// Its identity.
    pub identity: &'a str,
    /// Whether it may administer everything.
    pub admin: bool,
}

impl Requester<'_> {
    /// Whether it may see or change what connection `conn` holds.
    fn may_touch(&self, st: &State, conn: u64) -> bool {
        self.admin
            || st
                .connections
                .get(&conn)
                .is_some_and(|c| *c.identity == *self.identity)
    }

    /// `may_touch`, as the error to send when it may not.
    fn check(&self, st: &State, conn: u64, what: &str) -> Result<(), (ErrorCode, String)> {
        if self.may_touch(st, conn) {
            Ok(())
        } else {
            Err((
                ErrorCode::PermissionDenied,
                format!(
                    "identity {} may not change {what}: it belongs to another identity \
                     (the admin right is needed; see docs/security.md)",
                    self.identity
                ),
            ))
        }
    }
}

/// Runs an admin request against the router's state on behalf of `who`; the
/// error is the code and message of the `Error` frame to send.
pub(crate) fn handle(
    st: &mut State,
    body: &str,
    who: &Requester<'_>,
) -> Result<String, (ErrorCode, String)> {
    let bad = |m: String| (ErrorCode::BadRequest, m);
    let request: AdminRequest =
        serde_json::from_str(body).map_err(|e| bad(format!("bad admin request: {e}")))?;
    let reply = match request {
        AdminRequest::List => {
            let mut listing = st.listing();
            if !who.admin {
                own_only(st, &mut listing, who);
            }
            serde_json::to_value(listing)
        }
        AdminRequest::FilterList => {
            let mut v: Vec<&FilterInfo> = st
                .filters
                .records
                .values()
                .filter(|r| who.may_touch(st, r.connection))
                .map(|r| &r.info)
                .collect();
            v.sort_by_key(|i| i.id);
            Ok(serde_json::json!({ "filters": v }))
        }
        AdminRequest::FilterRemove { id } => {
            let conn = st
                .filters
                .records
                .get(&id)
                .ok_or_else(|| bad(format!("no filter with id {id}")))?
                .connection;
            who.check(st, conn, &format!("filter {id}"))?;
            let rec = st
                .filters
                .records
                .remove(&id)
                .ok_or_else(|| bad(format!("no filter with id {id}")))?;
            match rec.info.level {
                FilterLevel::Session => {
                    st.routes.remove_session_filter(rec.connection, id);
                }
                FilterLevel::Channel => {
                    for g in &rec.channels {
                        if rec.info.kind == "map" {
                            st.routes.remove_mapping(*g, id);
                        } else {
                            st.routes.remove_channel_filter(*g, id);
                        }
                    }
                }
                FilterLevel::Publisher => {
                    if let Some(f) = st.sources.get(rec.info.endpoint.as_str()) {
                        f.borrow_mut().remove(id);
                    }
                }
            }
            Ok(serde_json::json!({ "removed": id }))
        }
        AdminRequest::FilterOp {
            endpoint,
            interfilter,
        } => {
            let op = match interfilter.as_str() {
                "and" => InterFilterOp::And,
                "or" => InterFilterOp::Or,
                other => {
                    return Err(bad(format!(
                        "interfilter must be \"and\" or \"or\", not {}",
                        tagwire_proto::excerpt(other)
                    )))
                }
            };
            let conn = owner(st, &endpoint)?;
            who.check(st, conn, &format!("endpoint {endpoint:?}"))?;
            st.routes.set_op(conn, op);
            for r in st
                .filters
                .records
                .values_mut()
                .filter(|r| r.connection == conn)
            {
                r.info.interfilter = op_name(op).to_owned();
            }
            Ok(serde_json::json!({ "endpoint": endpoint, "interfilter": op_name(op) }))
        }
        AdminRequest::FilterAdd {
            endpoint,
            level,
            filter,
            map,
        } => {
            who.check(st, owner(st, &endpoint)?, &format!("endpoint {endpoint:?}"))?;
            let id = add_filter(st, &endpoint, level, filter, map)?;
            Ok(serde_json::json!({ "id": id }))
        }
    };
    reply.map(|v| v.to_string()).map_err(|e| {
        (
            ErrorCode::Internal,
            format!("cannot encode admin reply: {e}"),
        )
    })
}

/// Narrows `listing` to what `who`'s identity holds (tags are hidden: they
/// do not record who published them).
fn own_only(st: &State, listing: &mut Listing, who: &Requester<'_>) {
    listing.connections.retain(|c| c.identity == who.identity);
    listing
        .endpoints
        .retain(|e| who.may_touch(st, e.connection));
    let mine: std::collections::HashSet<&str> =
        listing.endpoints.iter().map(|e| e.name.as_str()).collect();
    listing
        .subscriptions
        .retain(|s| mine.contains(s.endpoint.as_str()));
    listing.tags.clear();
}

fn owner(st: &State, endpoint: &str) -> Result<u64, (ErrorCode, String)> {
    st.endpoints.get(endpoint).map(|e| e.owner).ok_or_else(|| {
        (
            ErrorCode::UnknownEndpoint,
            format!("no endpoint named {}", tagwire_proto::excerpt(endpoint)),
        )
    })
}

fn add_filter(
    st: &mut State,
    endpoint: &str,
    level: FilterLevel,
    filter: Option<String>,
    map: Option<String>,
) -> Result<u64, (ErrorCode, String)> {
    let bad = |m: String| (ErrorCode::BadRequest, m);
    let invalid = |what: &str, text: &str, e: tagwire_core::filter::FilterError| {
        (
            ErrorCode::InvalidFilter,
            format!("invalid {what} {}: {e}", tagwire_proto::excerpt(text)),
        )
    };
    let conn = owner(st, endpoint)?;
    let (kind, text) = match (filter, map) {
        (Some(f), None) => ("filter", f),
        (None, Some(m)) => ("map", m),
        _ => return Err(bad("give exactly one of \"filter\" and \"map\"".into())),
    };
    // On a publisher endpoint the default (channel) level means the
    // publisher's own filters: it has no channels.
    let is_publisher = st.sources.contains_key(endpoint);
    let level = match (level, is_publisher) {
        (FilterLevel::Channel, true) => FilterLevel::Publisher,
        (FilterLevel::Publisher, false) => {
            return Err(bad(format!(
            "endpoint {} is not a publisher; publisher-level filters attach to publisher endpoints",
            tagwire_proto::excerpt(endpoint)
        )))
        }
        (level, _) => level,
    };
    let id = st.filters.next_id();
    let channels: Vec<u64> = st
        .channels
        .iter()
        .filter(|(_, ch)| &*ch.endpoint == endpoint)
        .map(|(g, _)| *g)
        .collect();
    let refused = |e: RouteError| {
        (
            ErrorCode::InvalidFilter,
            format!("cannot add {kind} {}: {e}", tagwire_proto::excerpt(&text)),
        )
    };
    match (level, kind) {
        (FilterLevel::Publisher, "map") => {
            return Err(bad(
                "mapping filters attach to subscriptions (level \"channel\"), not publishers"
                    .into(),
            ))
        }
        (FilterLevel::Publisher, _) => {
            let f = st
                .filters
                .compile(&text)
                .map_err(|e| invalid(kind, &text, e))?;
            if let Some(source) = st.sources.get(endpoint) {
                source
                    .borrow_mut()
                    .add(id, f)
                    .map_err(|e| invalid(kind, &text, e))?;
            }
        }
        (FilterLevel::Session, "map") => {
            return Err(bad(
                "mapping filters attach to channels, not sessions (use level \"channel\")".into(),
            ))
        }
        (FilterLevel::Session, _) => {
            let f = st
                .filters
                .compile(&text)
                .map_err(|e| invalid(kind, &text, e))?;
            st.routes.add_session_filter(conn, id, f).map_err(refused)?;
        }
        (FilterLevel::Channel, _) => {
            if channels.is_empty() {
                return Err(bad(format!(
                    "endpoint {} has no subscriptions to filter",
                    tagwire_proto::excerpt(endpoint)
                )));
            }
            if kind == "map" {
                let m = st
                    .filters
                    .compile_mapping(&text)
                    .map_err(|e| invalid(kind, &text, e))?;
                st.routes.set_mapping(&channels, id, &m);
                // A channel holds one mapping filter: the new one replaces any other.
                for r in st
                    .filters
                    .records
                    .values_mut()
                    .filter(|r| r.info.kind == "map")
                {
                    r.channels.retain(|c| !channels.contains(c));
                }
                st.filters
                    .records
                    .retain(|_, r| r.info.kind != "map" || !r.channels.is_empty());
            } else {
                let f = st
                    .filters
                    .compile(&text)
                    .map_err(|e| invalid(kind, &text, e))?;
                st.routes
                    .add_channel_filter(&channels, id, &f)
                    .map_err(refused)?;
            }
        }
    }
    let interfilter = op_name(st.routes.op(conn)).to_owned();
    st.filters.records.insert(
        id,
        FilterRecord {
            info: FilterInfo {
                id,
                endpoint: endpoint.to_owned(),
                level,
                kind: kind.to_owned(),
                text,
                interfilter,
            },
            connection: conn,
            channels: if level == FilterLevel::Channel {
                channels
            } else {
                Vec::new()
            },
        },
    );
    Ok(id)
}

/// The reply to [`AdminRequest::List`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The router's name.
    pub server: String,
    /// How clients authenticate (e.g. `on: owner uid:1000, …` or `off …`).
    #[serde(default)]
    pub auth: String,
    /// Open client connections.
    pub connections: Vec<ConnectionInfo>,
    /// Registered endpoints.
    pub endpoints: Vec<EndpointEntry>,
    /// Subscriptions with their queue state.
    pub subscriptions: Vec<SubscriptionInfo>,
    /// Tags published so far (up to the tracking limit).
    pub tags: Vec<TagInfo>,
    /// Publishes on tags beyond the tracking limit.
    pub untracked_publishes: u64,
    /// Events dropped because they had expired on arrival.
    pub expired: u64,
    /// Events dropped by their publisher's (publisher-level) filters.
    #[serde(default)]
    pub filtered_at_source: u64,
    /// Events held until their start time.
    #[serde(default)]
    pub deferred: usize,
    /// Use of the router-wide memory budget.
    #[serde(default)]
    pub memory: MemoryInfo,
}

/// Use of the memory budget (`limits.max_buffered_bytes`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryInfo {
    /// Bytes charged now: large frames being read plus queued events.
    pub buffered_bytes: u64,
    /// The budget.
    pub max_buffered_bytes: u64,
    /// Events dropped or refused because the budget was spent.
    pub discarded_events: u64,
    /// Connections closed because the budget was spent.
    pub refused_connections: u64,
}

/// One client connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionInfo {
    /// Router-local id.
    pub id: u64,
    /// The client's name from `Hello`.
    pub name: String,
    /// Peer address.
    pub peer: String,
    /// Who it is (`uid:1000`, `token:alice`, `cert:alice`, `anonymous`).
    #[serde(default)]
    pub identity: String,
}

/// One endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointEntry {
    /// Its name.
    pub name: String,
    /// `publisher` or `subscriber`.
    pub kind: String,
    /// Owning connection id.
    pub connection: u64,
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionInfo {
    /// The subscriber endpoint.
    pub endpoint: String,
    /// The pattern.
    pub pattern: String,
    /// Events waiting in its queue.
    pub queue_depth: usize,
    /// Its queue bound.
    pub queue_bound: usize,
    /// Its discard policy.
    pub discard: String,
    /// Events dropped by the discard policy.
    pub dropped: u64,
    /// Events written to the subscriber.
    pub delivered: u64,
    /// Events that expired while queued (dropped, not delivered).
    #[serde(default)]
    pub expired: u64,
    /// How the router finds it per event: `tag` (pattern only), `filtered`
    /// (pattern, then its filters evaluated) or `indexed` (through the
    /// subscription index; see docs/filters.md).
    #[serde(default)]
    pub route: String,
}

/// One tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagInfo {
    /// The tag.
    pub tag: String,
    /// Events published on it.
    pub published: u64,
    /// The last publisher endpoint.
    pub last_publisher: String,
}
