//! Admin requests and replies (`docs/admin.md`), typed: [`AdminRequest`] is
//! what an `Admin` frame carries, [`AdminReply`] what its `AdminReply` frame
//! answers. JSON is their wire form, written and read here only
//! ([`AdminRequest::parse`], [`AdminRequest::to_json`], [`AdminReply::parse`],
//! [`AdminReply::to_json`]); the router, the client library and the CLI all
//! use these types.
//!
//! ```
//! use tagwire_proto::admin::{AdminOp, AdminReply, AdminRequest};
//! let req = AdminRequest::parse(r#"{"op":"filter_remove","id":3}"#).unwrap();
//! assert_eq!(req, AdminRequest::FilterRemove { id: 3 });
//! let reply = AdminReply::parse(req.op(), r#"{"removed":3}"#).unwrap();
//! assert_eq!(reply.to_json(), r#"{"removed":3}"#);
//! # let _ = AdminOp::List;
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::excerpt;

/// Items in a listing page when the request gives no `limit`.
pub const DEFAULT_PAGE_ITEMS: usize = 500;
/// Most items in a listing page; a larger `limit` is clamped to it, so that
/// one page costs the lane a bounded time (about 10 µs per item).
pub const MAX_PAGE_ITEMS: usize = 1000;

/// What JSON counts as whitespace before a value.
const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// An admin request or reply that could not be read. The message names
/// the bad thing (the field, the `op`, the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The body is not a JSON object (other JSON such as `["list"]`, or text
    /// that is not JSON).
    #[error("expected a JSON object with an \"op\" key, got {found}")]
    NotAnObject {
        /// An excerpt of what came instead.
        found: String,
    },
    /// A JSON object that is no request: an unknown `op` or key, a missing
    /// field, a value of the wrong type (serde's message names which).
    #[error("{message}")]
    BadRequest {
        /// What was wrong.
        message: String,
    },
    /// A reply that does not have the shape of the answer to `op`.
    #[error("admin {op} reply: {message}")]
    BadReply {
        /// The request it answers.
        op: AdminOp,
        /// What was wrong.
        message: String,
    },
}

/// An admin request, tagged by `op` on the wire. Unknown keys are refused
/// (`deny_unknown_fields`), so that a misspelt option is never ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum AdminRequest {
    /// The daemon's network time (Narada §3): its clock corrected by its
    /// offset to the network's reference daemon (`tagwire time`).
    Time,
    /// Lists connections, endpoints, subscriptions and tags, one page at a
    /// time: a page that does not end the listing carries `next`, to send
    /// back as `after`.
    List {
        /// Where the previous page ended (its `next`); absent for the first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        /// Most items (connections, endpoints, subscriptions and tags
        /// together) in the page; default [`DEFAULT_PAGE_ITEMS`], at most
        /// [`MAX_PAGE_ITEMS`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// Attaches a filter (`filter`) or a mapping filter (`map`) through an
    /// endpoint: to its connection's session, or to each of its channels.
    FilterAdd {
        /// The endpoint whose session or channels get the filter.
        endpoint: String,
        /// `session`, `channel` (default) or `publisher`.
        #[serde(default)]
        level: FilterLevel,
        /// A constraint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter: Option<String>,
        /// A mapping filter (channel level only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        map: Option<String>,
    },
    /// Lists filters with their ids, one page at a time (like `list`).
    FilterList {
        /// The previous page's `next` (a filter id); absent for the first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        /// Most filters in the page; default [`DEFAULT_PAGE_ITEMS`], at most
        /// [`MAX_PAGE_ITEMS`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// Removes filter `id`.
    FilterRemove {
        /// The id from `filter_add` or `filter_list`.
        id: u64,
    },
    /// Changes QoS at run time (`tagwire admin qos`): `target` is
    /// `["daemon"]`, `["connection:ID"]`, `["/subscriber"]`,
    /// `["/publisher", "/subscriber"]` or `["/tag/pattern"]`; `set` maps
    /// properties to values, `unset` names properties to clear at that level.
    Qos {
        /// What to change.
        target: Vec<String>,
        /// `property: value` pairs.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        set: BTreeMap<String, String>,
        /// Properties to clear.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unset: Vec<String>,
    },
    /// Shows an endpoint's channels with their effective QoS and where each
    /// value came from, band, lane and queue (`tagwire admin show`); a tag
    /// pattern's QoS layer and pull buffer; `links` or `link:PEER`; or
    /// `reservations`.
    Show {
        /// An endpoint name, a tag pattern, `links`, `link:PEER` or
        /// `reservations`.
        target: String,
    },
    /// Sets the operator between the session and channel levels of the
    /// endpoint's connection: `and` (default) or `or`.
    FilterOp {
        /// An endpoint of the connection.
        endpoint: String,
        /// `and` or `or`.
        interfilter: String,
    },
    /// Asks for a shared-memory region for a publisher of this connection
    /// (`docs/shm.md`); answered on the connection's own lane, with the
    /// region's fd ahead of the reply.
    ShmOpen {
        /// The publisher endpoint's name.
        endpoint: String,
        /// Its id on the client's connection (echoed in `ShmRegion`).
        id: u32,
        /// The payload size the region's chunks should hold.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_packet: Option<u64>,
        /// The client's pid as it sees it (the daemon compares it with the
        /// socket's peer pid to tell another PID namespace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
    },
}

/// The kind of an [`AdminRequest`], without its fields: what a reply is
/// read as ([`AdminReply::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdminOp {
    /// `time`
    Time,
    /// `list`
    List,
    /// `filter_add`
    FilterAdd,
    /// `filter_list`
    FilterList,
    /// `filter_remove`
    FilterRemove,
    /// `qos`
    Qos,
    /// `show`
    Show,
    /// `filter_op`
    FilterOp,
    /// `shm_open`
    ShmOpen,
}

impl AdminOp {
    /// Its `op` name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            AdminOp::Time => "time",
            AdminOp::List => "list",
            AdminOp::FilterAdd => "filter_add",
            AdminOp::FilterList => "filter_list",
            AdminOp::FilterRemove => "filter_remove",
            AdminOp::Qos => "qos",
            AdminOp::Show => "show",
            AdminOp::FilterOp => "filter_op",
            AdminOp::ShmOpen => "shm_open",
        }
    }
}

impl std::fmt::Display for AdminOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl AdminRequest {
    /// Reads a request from its JSON wire form. Only a JSON object is a
    /// request (serde would also read a tagged enum from a sequence such as
    /// `["filter_remove", 3]`); an unknown `op` or key, a missing field or a
    /// value of the wrong type is an [`AdminError::BadRequest`] naming it.
    pub fn parse(body: &str) -> Result<AdminRequest, AdminError> {
        if !body.trim_start_matches(JSON_WHITESPACE).starts_with('{') {
            return Err(AdminError::NotAnObject {
                found: excerpt(body).to_string(),
            });
        }
        serde_json::from_str(body).map_err(|e| AdminError::BadRequest {
            message: e.to_string(),
        })
    }

    /// Its JSON wire form (absent options are left out).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self)
            .expect("admin requests serialise: plain fields, string map keys")
    }

    /// Its kind.
    pub fn op(&self) -> AdminOp {
        match self {
            AdminRequest::Time => AdminOp::Time,
            AdminRequest::List { .. } => AdminOp::List,
            AdminRequest::FilterAdd { .. } => AdminOp::FilterAdd,
            AdminRequest::FilterList { .. } => AdminOp::FilterList,
            AdminRequest::FilterRemove { .. } => AdminOp::FilterRemove,
            AdminRequest::Qos { .. } => AdminOp::Qos,
            AdminRequest::Show { .. } => AdminOp::Show,
            AdminRequest::FilterOp { .. } => AdminOp::FilterOp,
            AdminRequest::ShmOpen { .. } => AdminOp::ShmOpen,
        }
    }
}

/// An admin reply: the answer to one [`AdminRequest`], of the variant of
/// its [`AdminOp`]. On the wire each is a plain JSON object without a tag;
/// the requester knows what it asked ([`AdminReply::parse`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum AdminReply {
    /// To `time`.
    Time(TimeInfo),
    /// To `list`: one page.
    List(Box<Listing>),
    /// To `filter_add`.
    FilterAdded(FilterAdded),
    /// To `filter_list`: one page.
    FilterList(FilterPage),
    /// To `filter_remove`.
    FilterRemoved(FilterRemoved),
    /// To `qos`.
    Qos(QosChanged),
    /// To `show`.
    Show(Show),
    /// To `filter_op`.
    FilterOp(FilterOpSet),
    /// To `shm_open`.
    ShmOpened(ShmGranted),
}

impl AdminReply {
    /// Reads the reply to a request of kind `op` from its JSON wire form.
    /// Keys it does not know are ignored (a newer daemon may add some).
    pub fn parse(op: AdminOp, body: &str) -> Result<AdminReply, AdminError> {
        let bad = |e: serde_json::Error| AdminError::BadReply {
            op,
            message: e.to_string(),
        };
        Ok(match op {
            AdminOp::Time => AdminReply::Time(serde_json::from_str(body).map_err(bad)?),
            AdminOp::List => AdminReply::List(serde_json::from_str(body).map_err(bad)?),
            AdminOp::FilterAdd => AdminReply::FilterAdded(serde_json::from_str(body).map_err(bad)?),
            AdminOp::FilterList => AdminReply::FilterList(serde_json::from_str(body).map_err(bad)?),
            AdminOp::FilterRemove => {
                AdminReply::FilterRemoved(serde_json::from_str(body).map_err(bad)?)
            }
            AdminOp::Qos => AdminReply::Qos(serde_json::from_str(body).map_err(bad)?),
            AdminOp::Show => AdminReply::Show(serde_json::from_str(body).map_err(bad)?),
            AdminOp::FilterOp => AdminReply::FilterOp(serde_json::from_str(body).map_err(bad)?),
            AdminOp::ShmOpen => AdminReply::ShmOpened(serde_json::from_str(body).map_err(bad)?),
        })
    }

    /// Its JSON wire form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("admin replies serialise: plain fields, string map keys")
    }

    /// The kind of request it answers.
    pub fn op(&self) -> AdminOp {
        match self {
            AdminReply::Time(_) => AdminOp::Time,
            AdminReply::List(_) => AdminOp::List,
            AdminReply::FilterAdded(_) => AdminOp::FilterAdd,
            AdminReply::FilterList(_) => AdminOp::FilterList,
            AdminReply::FilterRemoved(_) => AdminOp::FilterRemove,
            AdminReply::Qos(_) => AdminOp::Qos,
            AdminReply::Show(_) => AdminOp::Show,
            AdminReply::FilterOp(_) => AdminOp::FilterOp,
            AdminReply::ShmOpened(_) => AdminOp::ShmOpen,
        }
    }
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
    /// Session, channel or publisher.
    pub level: FilterLevel,
    /// `filter` or `map`.
    pub kind: String,
    /// The text as given.
    pub text: String,
    /// The session's operator between levels (`and`/`or`).
    pub interfilter: String,
}

/// The reply to `filter_add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterAdded {
    /// The new filter's id.
    pub id: u64,
}

/// The reply to `filter_remove`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterRemoved {
    /// The id removed.
    pub removed: u64,
}

/// One page of `filter_list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterPage {
    /// The filters, in id order.
    pub filters: Vec<FilterInfo>,
    /// Set when more follow: send it back as `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// The reply to `filter_op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterOpSet {
    /// The endpoint named.
    pub endpoint: String,
    /// The operator now in force (`and` or `or`).
    pub interfilter: String,
}

/// The reply to `shm_open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmGranted {
    /// The region granted; its fd came ahead in a `ShmRegion` frame.
    pub region: u64,
}

/// The reply to `qos`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosChanged {
    /// The level changed: `daemon`, `tag`, `session` or `channel`.
    pub level: String,
    /// The target as given.
    pub target: Vec<String>,
    /// Channels the change reached.
    pub channels: usize,
    /// Queued events a smaller `max_queue_length` dropped.
    pub dropped: usize,
}

/// The reply to `show`: what the target named.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Show {
    /// An endpoint with its channels.
    Endpoint(Box<EndpointShow>),
    /// A tag pattern's QoS layer (and pull buffer).
    Tag(TagShow),
    /// `links` or `link:PEER`.
    Links {
        /// The links shown.
        links: Vec<LinkInfo>,
    },
    /// `reservations`.
    Reservations {
        /// The bandwidth reservations.
        reservations: Reservations,
    },
}

impl<'de> Deserialize<'de> for Show {
    /// By the key that marks each shape (`endpoint`, `tag`, `links`,
    /// `reservations`), so that an error names the field of that shape.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        struct LinksShow {
            links: Vec<LinkInfo>,
        }
        #[derive(Deserialize)]
        struct ReservationsShow {
            reservations: Reservations,
        }
        let v = serde_json::Value::deserialize(d)?;
        let has = |k: &str| v.get(k).is_some();
        let shown = if has("endpoint") {
            Show::Endpoint(serde_json::from_value(v).map_err(D::Error::custom)?)
        } else if has("tag") {
            Show::Tag(serde_json::from_value(v).map_err(D::Error::custom)?)
        } else if has("links") {
            let l: LinksShow = serde_json::from_value(v).map_err(D::Error::custom)?;
            Show::Links { links: l.links }
        } else if has("reservations") {
            let r: ReservationsShow = serde_json::from_value(v).map_err(D::Error::custom)?;
            Show::Reservations {
                reservations: r.reservations,
            }
        } else {
            return Err(D::Error::custom(
                "expected a show reply with \"endpoint\", \"tag\", \"links\" or \"reservations\"",
            ));
        };
        Ok(shown)
    }
}

/// An endpoint as `tagwire admin show /endpoint` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointShow {
    /// Its name.
    pub endpoint: String,
    /// `publisher` or `subscriber`.
    pub kind: String,
    /// Its connection's id.
    pub connection: u64,
    /// The band serving its connection.
    pub band: String,
    /// That band's lane (null if it has none).
    pub lane: Option<LaneShow>,
    /// The DSCP marking of its connection.
    pub dscp: Option<u8>,
    /// Its channels (as many as fit the reply frame).
    pub channels: Vec<ChannelShow>,
    /// Whether some channels were left out.
    pub truncated: bool,
}

/// A lane's scheduling, in an [`EndpointShow`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneShow {
    /// The scheduling configured.
    pub sched: String,
    /// The scheduling in force.
    pub sched_applied: String,
    /// Why the lane does not run `sched`, if it does not.
    pub fell_back: Option<String>,
    /// The CPUs the lane is pinned to (empty: any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpus: String,
}

/// One channel of an [`EndpointShow`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelShow {
    /// Its pattern.
    pub pattern: String,
    /// Its effective QoS and the level each value came from.
    pub qos: Vec<QosResolved>,
    /// Events waiting.
    pub queue_depth: usize,
    /// Its queue bound.
    pub queue_bound: usize,
    /// Events its discard policy dropped.
    pub dropped: u64,
    /// Events that expired while queued.
    pub expired: u64,
    /// Events over the subscriber's frame limit.
    pub too_large: u64,
    /// Events refused by `max_events_per_consumer`.
    #[serde(default)]
    pub over_consumer: u64,
    /// Events written to the subscriber.
    pub delivered: u64,
    /// Its time services (`buffer`, `playout`), if it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<TimeServiceInfo>,
    /// The RFC 3550 jitter of its input and output (every channel, once it
    /// has seen an event with a source time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<JitterInfo>,
    /// Over `udp://`: its events the network lost or reordered (absent for
    /// stream transports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetLossInfo>,
}

/// A channel's RFC 3550 interarrival jitter (J += (|D| − J)/16, D the
/// change in transit time between consecutive events; docs/time.md,
/// "Jitter of every channel"), with or without time services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JitterInfo {
    /// At its input: the time of the daemon's read that brought an event vs
    /// its source time (the first such event of each read), ns (`None`: no
    /// event with a source time yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_ns: Option<u64>,
    /// At its output: the writer's time taking each event for a write vs
    /// its source time, ns; sampled (every write batch that reads the
    /// clock anyway, and 1 in 16 of the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ns: Option<u64>,
}

/// A channel's time services (`buffer`, `playout`; docs/time.md): what
/// they hold and did, and the RFC 3550 jitter of the events at their input
/// and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TimeServiceInfo {
    /// Events held (buffer, playout, due).
    pub held: usize,
    /// Events released.
    pub released: u64,
    /// Late events delivered at once, out of spacing.
    pub late: u64,
    /// Late events dropped (`playout=tds:D:drop`).
    pub late_dropped: u64,
    /// Events released early because the services were at their bound.
    pub forced: u64,
    /// Times the playout re-anchored its stream.
    pub reanchored: u64,
    /// Events refused because the daemon's memory budget was full.
    pub refused: u64,
    /// RFC 3550 interarrival jitter at the input (arrival vs source time), ns.
    pub input_jitter_ns: u64,
    /// RFC 3550 jitter at the output (release vs source time), ns.
    pub output_jitter_ns: u64,
}

/// One effective QoS property of a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosResolved {
    /// The property's name.
    pub property: String,
    /// Its value.
    pub value: String,
    /// The level it came from: `default`, `daemon`, `tag`, `session`, `channel`.
    pub from: String,
}

/// One property set on a level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosSetting {
    /// The property's name.
    pub property: String,
    /// Its value.
    pub value: String,
}

/// A tag pattern's layer as `tagwire admin show /tag/**` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagShow {
    /// The pattern as given to `qos`.
    pub tag: String,
    /// Always `tag`.
    pub level: String,
    /// The properties set on it (empty when only history is shown).
    pub set: Vec<QosSetting>,
    /// Its pull buffer, when the tag keeps history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryShow>,
}

/// A tag's pull buffer, in a [`TagShow`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryShow {
    /// Its `history` (events kept per publisher).
    pub history: usize,
    /// Events held, all publishers.
    pub events: usize,
    /// Bytes counted, all publishers.
    pub bytes: usize,
    /// Each publisher's ring.
    pub publishers: Vec<PublisherHistory>,
}

/// One publisher's ring in a tag's pull buffer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherHistory {
    /// The publisher endpoint.
    pub publisher: String,
    /// Its oldest sequence number held.
    pub oldest: u64,
    /// Its newest.
    pub newest: u64,
    /// Events held.
    pub held: usize,
}

/// Bandwidth reservations (`tagwire admin show reservations`), by `state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state")]
#[non_exhaustive]
pub enum Reservations {
    /// None made yet: `[bandwidth]` as configured.
    #[serde(rename = "none yet")]
    NoneYet {
        /// The egress interface configured.
        interface: Option<String>,
        /// Its rate as configured.
        link_rate: String,
    },
    /// Reservations cannot be made here.
    #[serde(rename = "unavailable")]
    Unavailable {
        /// Why not.
        why: String,
    },
    /// Reservations in force.
    #[serde(rename = "live")]
    Live {
        /// The egress interface.
        interface: String,
        /// Its rate, bit/s.
        link_bps: u64,
        /// Reserved, bit/s.
        reserved_bps: u64,
        /// Per band.
        bands: Vec<ReservedBand>,
    },
}

/// One band's reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservedBand {
    /// The band.
    pub band: String,
    /// Its tc class (`1:N`).
    pub class: String,
    /// Reserved, bit/s.
    pub rate_bps: u64,
    /// Channels holding a share.
    pub channels: usize,
}

/// The daemon's network time, as `tagwire time` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeInfo {
    /// Network time now, ns since the Unix epoch.
    pub network_time_ns: u64,
    /// This daemon's own clock now (with any configured software skew).
    pub local_time_ns: u64,
    /// Network time minus the daemon's clock, ns.
    pub offset_ns: i64,
    /// How far off the offset may be (half the best probe's round trip), ns.
    pub error_ns: u64,
    /// Whether the offset has been measured (or this daemon is the reference).
    pub synced: bool,
    /// The reference daemon's name.
    pub reference: String,
    /// Its node id (hex).
    pub reference_node: String,
}

/// One page of the listing: the reply to `list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The router's name.
    pub server: String,
    /// How clients authenticate (e.g. `on: owner uid:1000, …` or `off …`).
    #[serde(default)]
    pub auth: String,
    /// The lanes, lowest band first (on the first page).
    #[serde(default)]
    pub lanes: Vec<LaneEntry>,
    /// The band of the main listeners (`default_band`).
    #[serde(default)]
    pub default_band: String,
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
    /// What the per-event filter work budget
    /// (`limits.max_filter_work_per_event`) did.
    #[serde(default)]
    pub filter_budget: FilterBudgetInfo,
    /// Links to other daemons (on the first page; absent when alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation: Option<FederationInfo>,
    /// The pull buffers (`history`).
    #[serde(default)]
    pub history: HistoryTotals,
    /// Shared memory negotiated by this daemon (`docs/shm.md`).
    #[serde(default)]
    pub shm: ShmCounters,
    /// The durable store (`docs/reliability.md`); absent when the daemon
    /// has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreTotals>,
    /// The multicast groups (`[[multicast]]`, docs/transports.md; on the
    /// first page; absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multicast: Vec<MulticastInfo>,
    /// Acknowledged subscriptions parked while their subscriber reconnects
    /// (docs/reliability.md); absent from older daemons' JSON and when
    /// nothing was ever parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<ParkedInfo>,
    /// Set when the listing goes on in another page: send it back as
    /// `after` to get that page. Absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// What the per-event filter work budget (`limits.max_filter_work_per_event`)
/// did since the daemon started: how often it cut an event's filter
/// evaluations short, and what that cost subscribers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterBudgetInfo {
    /// The budget: work units of all filter evaluations of one event.
    pub max_work_per_event: u64,
    /// Work units spent evaluating filters, over all events routed.
    pub work: u64,
    /// Events whose filter evaluations ran over the budget.
    pub events_over_budget: u64,
    /// Filtered subscriptions (channels) that did not get an event because
    /// the budget ran out (indexed ones stopped in the index not counted).
    pub skipped_deliveries: u64,
    /// The tag of the latest event over the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tag: Option<String>,
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
    /// The band (and lane) that serves it.
    #[serde(default)]
    pub band: String,
    /// The DSCP its socket's packets carry: a channel's or the session's
    /// `dscp`, else its band's. Absent for Unix and in-process connections
    /// (no IP packets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
    /// How it reached the daemon: `tcp`, `tls`, `unix`, `in-process` or
    /// `udp` (empty from a daemon that predates the field).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub transport: String,
    /// A UDP session's loss counters (absent for stream transports, where
    /// the kernel retransmits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpInfo>,
}

/// A UDP session's counters (`docs/protocol.md`, "Datagrams"): what the
/// daemon saw of the client's datagrams, what the client reported of the
/// daemon's, and what the daemon could not send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UdpInfo {
    /// The session id.
    pub session: u64,
    /// Datagrams received from the client (accepted).
    pub received: u64,
    /// The client's sequence numbers never received.
    pub lost: u64,
    /// The client's datagrams that arrived after a later one.
    pub reordered: u64,
    /// The client's datagrams received twice (dropped).
    pub duplicate: u64,
    /// Datagrams dropped as unusable: bad framing, too large, too old, from
    /// another address with this session's id.
    pub bad: u64,
    /// Datagrams dropped because the connection had not read the ones
    /// before (`[udp] queue`).
    pub overrun: u64,
    /// Datagrams sent to the client.
    pub sent: u64,
    /// Frames not sent: larger than one datagram (`[udp] max_datagram`).
    pub too_large: u64,
    /// Datagrams the socket would not take (send buffer full) or the
    /// anti-amplification budget did not allow.
    pub send_dropped: u64,
    /// What the client last reported of the daemon's datagrams: received.
    pub peer_received: u64,
    /// ...lost (the daemon's datagrams the client never got).
    pub peer_lost: u64,
    /// ...reordered.
    pub peer_reordered: u64,
    /// ...duplicate, plus bad.
    pub peer_dropped: u64,
    /// The daemon's datagrams the client reported as given up or late
    /// (`Gaps`) that were too old to say what they carried (not counted
    /// per channel).
    pub unattributed: u64,
    /// Whether the session acknowledges datagrams (`AckedData`): every
    /// frame but best-effort events arrives, in order.
    #[serde(default)]
    pub acknowledged: bool,
    /// `AckedData` datagrams sent again to the client (lost, or their
    /// acknowledgement was).
    #[serde(default)]
    pub resent: u64,
}

/// What the network did to one channel's events on their way from the
/// daemon to a `udp://` subscriber, as the subscriber's library reported
/// it (`Gaps` datagrams; docs/transports.md, "Loss per channel").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetLossInfo {
    /// Events of the channel in datagrams the subscriber never got.
    pub lost: u64,
    /// Events of the channel in datagrams that arrived after a later one
    /// (delivered, out of order).
    pub reordered: u64,
}

/// One multicast group as a daemon takes part in it (docs/transports.md,
/// "Multicast"): its settings, live members and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MulticastInfo {
    /// The group, `IP:PORT`.
    pub group: String,
    /// The band whose lane serves it (and whose DSCP it carries).
    pub band: String,
    /// The interface's address, if one was configured.
    pub interface: Option<String>,
    /// The datagrams' IP TTL.
    pub ttl: u32,
    /// The tag patterns whose events go to it.
    pub tags: Vec<String>,
    /// Live members (node ids, hex): links to them are skipped.
    pub members: Vec<String>,
    /// Event datagrams sent to the group.
    pub sent: u64,
    /// Events too large for one datagram (they took the links).
    pub too_large: u64,
    /// Datagrams the socket would not take.
    pub send_dropped: u64,
    /// Event datagrams accepted from other senders.
    pub received: u64,
    /// Other senders' sequence numbers never received.
    pub lost: u64,
    /// Datagrams that arrived after a later one.
    pub reordered: u64,
    /// Datagrams received twice, and events already delivered (by a link).
    pub duplicate: u64,
    /// Datagrams dropped as unusable: do not parse, wrong MAC (no key),
    /// too old, stale epoch, a `Member` outside the clock window.
    pub bad: u64,
    /// Members or senders not recorded (the group's table was full).
    pub refused: u64,
}

/// One lane: a band's thread, its scheduling and its sockets' DSCP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneEntry {
    /// The band's name.
    pub band: String,
    /// The scheduling configured (`other`, `other:10`, `fifo:20`, …).
    pub sched: String,
    /// The scheduling in force: differs from `sched` when the OS refused
    /// a real-time policy (then `fell_back` says why).
    pub sched_applied: String,
    /// Why the lane does not run `sched`, if it does not.
    #[serde(default)]
    pub fell_back: Option<String>,
    /// DSCP of the band's sockets (0..=63).
    pub dscp: u8,
    /// The CPUs its lane is pinned to (`[[bands]] cpus`, canonical form such
    /// as `0,2-3`); empty: any CPU. Clients pin the band's threads to them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpus: String,
    /// Its TCP listener.
    #[serde(default)]
    pub tcp: Option<String>,
    /// Its Unix socket.
    #[serde(default)]
    pub unix: Option<String>,
    /// Its UDP socket (`[udp] listen`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<String>,
    /// Times its lane blocked on the routing tables' lock because another
    /// thread held it (an uncontended lock counts nothing), by length:
    /// entry 0 counts waits under 1 µs, entry k ≥ 1 those of 2^(k-1) to
    /// 2^k µs, the last everything longer (docs/configuration.md, "Lanes and
    /// shared tables"). Empty: it never waited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub table_waits_us: Vec<u64>,
    /// The longest of those waits, µs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub table_wait_max_us: u64,
    /// Their total, µs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub table_wait_total_us: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// Events longer than the subscriber's negotiated frame limit (dropped).
    #[serde(default)]
    pub too_large: u64,
    /// Events its temporal scaling (`scale`, `min_interval`) left out.
    #[serde(default)]
    pub scaled_out: u64,
    /// Its spatial scaling plug-in (`transform`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<String>,
    /// Events its plug-in could not transform (skipped for it).
    #[serde(default)]
    pub transform_errors: u64,
    /// How the router finds it per event: `tag` (pattern only), `filtered`
    /// (pattern, then its filters evaluated) or `indexed` (through the
    /// subscription index; see docs/filters.md).
    #[serde(default)]
    pub route: String,
    /// Where its scaling proxy runs, when it scales or names a place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyInfo>,
    /// Its time services (`buffer`, `playout`), if it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<TimeServiceInfo>,
    /// The RFC 3550 jitter of its input and output (every subscription,
    /// once it has seen an event with a source time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<JitterInfo>,
    /// Over `udp://`: its events the network lost or reordered (absent for
    /// stream transports, where nothing is lost on the way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetLossInfo>,
    /// Its acknowledged delivery (a version-4 subscriber whose reliability
    /// is `reliable` or more; docs/reliability.md), if it has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked: Option<AckedInfo>,
}

/// A subscription's acknowledged delivery (`DeliverReliable`/`DeliverAck`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckedInfo {
    /// Events written and not yet acknowledged by the subscriber.
    pub unacked: usize,
    /// Their bytes, as the window counts them.
    pub unacked_bytes: usize,
    /// Its window's bounds (events, bytes): its queue's.
    pub window_events: usize,
    /// Its window's byte bound.
    pub window_bytes: usize,
    /// Times the writer found the window full and left the subscription
    /// out until an acknowledgement (its queue then fills; its `discard`
    /// policy applies there, counted in `dropped`).
    pub window_full: u64,
    /// Events sent again after the subscriber's reconnect.
    pub resent: u64,
    /// Times an acknowledged publisher was held back because this
    /// subscription's queue was half full (docs/reliability.md, "A reliable
    /// publisher held back"); absent from older daemons.
    #[serde(default)]
    pub publishers_held: u64,
}

/// Acknowledged subscriptions whose connection dropped, parked for their
/// session's reconnect (docs/reliability.md, "Between a daemon and its
/// subscribers"): what is held now and what happened so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedInfo {
    /// Subscriptions parked now.
    pub subscriptions: u64,
    /// Events held for them now: unacknowledged when their connection
    /// dropped, and published since.
    pub events: u64,
    /// Their bytes, as charged to `limits.max_buffered_bytes`.
    pub bytes: u64,
    /// Subscriptions parked since the daemon started.
    pub parked: u64,
    /// Subscriptions given their events after a reconnect.
    pub resumed: u64,
    /// Events sent after a reconnect.
    pub resent: u64,
    /// Events given up: no room in the memory budget, too many parked
    /// subscriptions, their time ran out, or their queue's bound on the
    /// resume.
    pub dropped: u64,
    /// Events published while their subscriber was away and held for it
    /// (subscriptions resumed so far).
    pub held_total: u64,
    /// Events published while their subscriber was away that its queue's
    /// `discard` policy dropped at its bound (`max_queue_length`,
    /// `limits.max_queue_bytes`, the memory budget).
    pub held_dropped: u64,
}

/// Where a subscription's scaling proxy runs, and why there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyInfo {
    /// The `proxy` property: at_subscriber, at_publisher, node:NAME, auto.
    pub mode: String,
    /// The daemon it runs on (`at_publisher`: the publisher's daemon).
    pub runs_at: String,
    /// Why there (for `auto`: the optimiser's objective value, or why it
    /// could not place it).
    pub reason: String,
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

/// The pull buffers' totals, as `tagwire list` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryTotals {
    /// Tags that keep history now.
    pub tags: usize,
    /// Bytes held, counted at what they keep alive.
    pub bytes: usize,
    /// Events recorded since the start.
    pub recorded: u64,
    /// Events evicted by a bound (count, bytes, a new publisher, a restart).
    pub evicted: u64,
    /// Events not recorded: a new tag beyond `limits.max_history_tags`, the
    /// byte bounds with nothing left to evict, or larger than a tag's bound.
    pub not_recorded: u64,
}

/// The durable store's counters, as `tagwire list --json` shows them
/// (`docs/reliability.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreTotals {
    /// Events written since the start.
    pub stored: u64,
    /// Events of durable tags delivered but not stored: the store's queue
    /// full, a tag beyond `store.max_tags`, or a write error.
    pub not_stored: u64,
    /// Records deleted by retention (count, bytes, age).
    pub evicted: u64,
    /// Records that did not decode when the store was opened (deleted).
    pub corrupt: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Acknowledged events refused because the store's queue was full (not
    /// delivered, acknowledged failed); absent from older daemons' JSON.
    #[serde(default)]
    pub refused: u64,
}

/// Counters of the daemon's shared-memory negotiation (shown by `tagwire list`'s JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmCounters {
    /// Regions created for publishers.
    pub regions_created: u64,
    /// Regions refused (limits, out of memory, not on this host); the publisher fell back.
    pub regions_refused: u64,
    /// Regions open now.
    pub regions_open: u64,
    /// Bytes of shared memory reserved by open regions.
    pub bytes_open: u64,
    /// Deliveries that carried a reference (the subscriber reads in place).
    pub by_reference: u64,
    /// Events whose payload was copied out of a region (for socket subscribers, links, history).
    pub copied_out: u64,
    /// Events whose payload was gone (reclaimed) when a copy was needed: not delivered there.
    pub unreadable: u64,
    /// Events with the shared-memory flag that no region of theirs backs (refused or dropped).
    pub stray: u64,
    /// Subscriber connections' pin rows in open regions now (each holds at
    /// most `limits.shm_pins` payloads).
    #[serde(default)]
    pub rows_open: u64,
    /// Of those, rows of closed connections kept while events queued for
    /// them remain or their process still holds payloads in place.
    #[serde(default)]
    pub rows_parked: u64,
}

/// One link, as `tagwire list --links` and `tagwire admin show link PEER`
/// show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    /// The peer daemon's name.
    pub peer: String,
    /// Its node id (hex).
    pub node: String,
    /// Its address as seen from here.
    pub addr: String,
    /// Whether this daemon dialed it.
    pub dialed: bool,
    /// The connection carrying it.
    pub connection: u64,
    /// Seconds since it came up.
    pub up_secs: u64,
    /// Last measured round trip, µs.
    pub rtt_us: Option<u64>,
    /// The peer's clock minus ours, µs (NTP-style estimate).
    pub clock_offset_us: Option<i64>,
    /// Events received from the peer.
    pub events_in: u64,
    /// Bytes of events received.
    pub bytes_in: u64,
    /// Events written to the peer.
    pub events_out: u64,
    /// Bytes of events routed to the peer.
    pub bytes_out: u64,
    /// Throughput received over the last second, bytes/s.
    #[serde(default)]
    pub rate_in_bps: u64,
    /// Throughput routed to the peer over the last second, bytes/s.
    #[serde(default)]
    pub rate_out_bps: u64,
    /// Events waiting in the link's queue.
    pub queue_depth: usize,
    /// Events the link's queues dropped (oldest first, at their bound).
    pub dropped: u64,
    /// The bands whose own connection is up (besides the first, on the
    /// default band).
    #[serde(default)]
    pub bands: Vec<String>,
    /// Events written per band connection (the first connection under the
    /// default band's name).
    #[serde(default)]
    pub events_out_by_band: BTreeMap<String, u64>,
    /// Reliable events sent on the link and not yet acknowledged (held in
    /// its windows; docs/reliability.md).
    #[serde(default)]
    pub unacked: u64,
    /// Whether the link acknowledges reliable events (link version 3).
    #[serde(default)]
    pub acknowledged: bool,
    /// The link protocol version spoken on it (0: a daemon too old to say).
    #[serde(default)]
    pub version: u16,
}

/// The federation, as the first page of `tagwire list` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FederationInfo {
    /// This daemon's node id (hex).
    pub node: String,
    /// Daemons known (this one included).
    pub daemons: usize,
    /// Events received that nobody here or beyond wanted (dropped).
    pub unwanted: u64,
    /// Events dropped at the hop limit.
    pub hop_limited: u64,
    /// Adverts refused.
    pub refused_adverts: u64,
    /// The live links.
    pub links: Vec<LinkInfo>,
    /// Peers this daemon is configured to dial (`[federation] peers`): a
    /// replay that reads other daemons' stores waits a little for them
    /// after a restart (docs/reliability.md).
    #[serde(default)]
    pub peers: usize,
    /// Every daemon known from the adverts (this one included): the
    /// network's topology and interest as this daemon sees it.
    #[serde(default)]
    pub known: Vec<DaemonInfo>,
    /// Daemons SWIM membership (foca) has up: node ids (hex) with their
    /// gossip address, sorted.
    #[serde(default)]
    pub members: Vec<String>,
    /// Gossip datagrams and beacons refused as malformed.
    #[serde(default)]
    pub bad_datagrams: u64,
    /// Hop-by-hop acknowledgement of reliable tags: what this daemon held,
    /// gave up, routed again and dropped as copies.
    #[serde(default)]
    pub reliable: ReliableInfo,
    /// Compression of events on links (`compression=lz4|zstd`): what this
    /// daemon compressed and decompressed.
    #[serde(default)]
    pub compression: CompressionInfo,
}

/// Counters of compressed link events (docs/reliability.md, "Compression on
/// links"), in `tagwire list --links --json` as `compression`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressionInfo {
    /// Events sent compressed (`ForwardCompressed`, `ReliableCompressed`),
    /// and pieces of events sent compressed (`FragmentCompressed`): each
    /// piece counts one.
    pub compressed: u64,
    /// Their encoded bytes before compression (a piece: its raw bytes).
    pub raw_bytes: u64,
    /// Their compressed bytes (with the 5-byte codec and length header).
    pub wire_bytes: u64,
    /// Events (or pieces) of a compressed tag sent as they were: they did
    /// not shrink.
    pub not_smaller: u64,
    /// Compressed events and pieces received and decompressed here.
    pub decompressed: u64,
    /// Of `compressed`, the pieces (`FragmentCompressed`, link version 7).
    #[serde(default)]
    pub pieces: u64,
    /// Of `decompressed`, the pieces.
    #[serde(default)]
    pub pieces_decompressed: u64,
    /// Compressed events refused here (over the frame limit, or a bad
    /// stream): each closed its link connection.
    pub failed: u64,
}

/// Counters of reliable links (docs/reliability.md), in `tagwire list
/// --links --json` as `reliable`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReliableInfo {
    /// Reliable events put in a link's window.
    pub held: u64,
    /// Given up by a full window (`reliable_window_full = "drop_oldest"`).
    pub window_dropped: u64,
    /// Refused by a full window (`"reject"`).
    pub rejected: u64,
    /// Routed again (a lost link, a route that moved, a failed
    /// acknowledgement).
    pub rerouted: u64,
    /// Routed again and taken by no route: lost.
    pub unroutable: u64,
    /// Copies dropped by the dedupe window.
    pub duplicates: u64,
    /// Acknowledgements sent.
    pub acks_sent: u64,
    /// `Fragment`s written (pieces of events larger than
    /// `federation.fragment_size`, link version 4).
    #[serde(default)]
    pub pieces_sent: u64,
    /// Events put together from pieces here.
    #[serde(default)]
    pub reassembled: u64,
    /// Incomplete reassemblies dropped at `fragment_max_events`/`_bytes`.
    #[serde(default)]
    pub reassembly_dropped: u64,
    /// Resume points this daemon sent (an event arriving again that it held
    /// part of).
    #[serde(default)]
    pub resumes_sent: u64,
    /// Resume points that moved this daemon's sending on.
    #[serde(default)]
    pub resumes_taken: u64,
    /// Bytes not sent again thanks to those.
    #[serde(default)]
    pub bytes_skipped: u64,
    /// Reliable events sent again on a UDP link because no acknowledgement
    /// came within 250 ms (the frame or its acknowledgement was lost).
    #[serde(default)]
    pub retransmitted: u64,
    /// Daemons away now (unreachable, their interest kept) for which
    /// reliable events published here are held (issue 25, a partition).
    #[serde(default)]
    pub away_daemons: u64,
    /// Events held for them now, and their bytes.
    #[serde(default)]
    pub away_events: u64,
    /// (See `away_events`.)
    #[serde(default)]
    pub away_bytes: u64,
    /// Events held for an away daemon since the start (once per daemon).
    #[serde(default)]
    pub away_held: u64,
    /// Held events sent toward their daemon when it was reachable again
    /// (`ReliableTo`).
    #[serde(default)]
    pub away_released: u64,
    /// Held events dropped: at the count or byte bound
    /// (`reliable_hold_events`/`_bytes`), the age bound
    /// (`reliable_hold_secs`), with a daemon forgotten (away longer, a
    /// restart under a new id, over `reliable_hold_daemons`), or larger than
    /// `fragment_size` (never held). Lost for that daemon: the publisher's
    /// daemon counts them here.
    #[serde(default)]
    pub away_dropped: u64,
    /// `ReliableTo` events this daemon passed on toward their daemon.
    #[serde(default)]
    pub to_forwarded: u64,
    /// `ReliableTo` events delivered here (their daemon is this one;
    /// copies it already had are counted in `duplicates`).
    #[serde(default)]
    pub to_delivered: u64,
    /// `ReliableTo` events dropped here: over the hop limit (counted, the
    /// sender told done) — a routing loop, never a normal path.
    #[serde(default)]
    pub to_dropped: u64,
}

/// A daemon as its advert describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// Its name.
    pub name: String,
    /// Its node id (hex).
    pub node: String,
    /// Its advert's version.
    pub version: u64,
    /// Its neighbours' node ids (hex).
    pub neighbors: Vec<String>,
    /// How many interest entries it advertises.
    pub interest: usize,
}
