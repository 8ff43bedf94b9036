//! Admin requests and replies: JSON documents carried by `Admin` and
//! `AdminReply` frames (listed in `docs/admin.md`). Admin work runs on the
//! lane like everything else for now; the priority-lanes work moves it to the
//! lowest-priority lane. So that no request stalls the lane, listings are
//! paged (each page within the connection's negotiated frame size and
//! [`MAX_PAGE_ITEMS`]) and a session-level change only queues the
//! re-placement of the session's channels for the lane's housekeeping task,
//! answering when it is done.

use serde::{Deserialize, Serialize};
use tagwire_core::filter::InterFilterOp;
use tagwire_core::route::RouteError;
use tagwire_proto::{excerpt, ErrorCode};

use crate::filters::{op_name, FilterRecord};
pub use crate::filters::{FilterInfo, FilterLevel};
use crate::state::{State, TagStats};

/// Items in a listing page when the request gives no `limit`.
pub const DEFAULT_PAGE_ITEMS: usize = 500;
/// Most items in a listing page; a larger `limit` is clamped to it, so that
/// one page costs the lane a bounded time (about 10 µs per item).
pub const MAX_PAGE_ITEMS: usize = 1000;
/// Bytes of an `AdminReply` frame besides its JSON body (type and request id).
const REPLY_OVERHEAD: usize = 5;
/// What JSON counts as whitespace before a value.
const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// An admin request, tagged by `op`.
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
        #[serde(default)]
        after: Option<String>,
        /// Most items (connections, endpoints, subscriptions and tags
        /// together) in the page; default [`DEFAULT_PAGE_ITEMS`], at most
        /// [`MAX_PAGE_ITEMS`].
        #[serde(default)]
        limit: Option<usize>,
    },
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
    /// Lists filters with their ids, one page at a time (like `list`).
    FilterList {
        /// The previous page's `next` (a filter id); absent for the first page.
        #[serde(default)]
        after: Option<u64>,
        /// Most filters in the page; default [`DEFAULT_PAGE_ITEMS`], at most
        /// [`MAX_PAGE_ITEMS`].
        #[serde(default)]
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
        #[serde(default)]
        set: std::collections::BTreeMap<String, String>,
        /// Properties to clear.
        #[serde(default)]
        unset: Vec<String>,
    },
    /// Shows an endpoint's channels with their effective QoS and where each
    /// value came from, band, lane and queue (`tagwire admin show`), or a tag
    /// pattern's QoS layer.
    Show {
        /// An endpoint name or a tag pattern given to `qos`.
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

/// An admin reply: to send at once, or once the routes have settled (a
/// session-level change re-places the session's channels in slices first).
#[derive(Debug)]
pub(crate) enum Reply {
    Now(String),
    WhenSettled(String),
}

/// Runs an admin request against the router's state; `max_frame` is the
/// requesting connection's negotiated frame size, which a reply never
/// exceeds. The error is the code and message of the `Error` frame to send.
pub(crate) fn handle(
    st: &mut State,
    body: &str,
    max_frame: usize,
    who: &Requester<'_>,
) -> Result<Reply, (ErrorCode, String)> {
    let bad = |m: String| (ErrorCode::BadRequest, m);
    // Only an object: serde would also read a tagged enum from a sequence
    // (`["filter_remove", 3]`: the tag, then the fields in order, unnamed).
    if !body.trim_start_matches(JSON_WHITESPACE).starts_with('{') {
        return Err(bad(format!(
            "bad admin request: expected a JSON object with an \"op\" key, got {}",
            excerpt(body)
        )));
    }
    let request: AdminRequest =
        serde_json::from_str(body).map_err(|e| bad(format!("bad admin request: {e}")))?;
    let budget = max_frame.saturating_sub(REPLY_OVERHEAD);
    let encode = |v: Result<serde_json::Value, serde_json::Error>| {
        v.map(|v| v.to_string()).map_err(|e| {
            (
                ErrorCode::Internal,
                format!("cannot encode admin reply: {e}"),
            )
        })
    };
    match request {
        AdminRequest::Time => encode(Ok(
            serde_json::to_value(st.fed.time_info()).unwrap_or_default()
        ))
        .map(Reply::Now),
        AdminRequest::List { after, limit } => {
            let page = list_page(st, after.as_deref(), page_items(limit)?, budget, who)?;
            serde_json::to_string(&page).map(Reply::Now).map_err(|e| {
                (
                    ErrorCode::Internal,
                    format!("cannot encode admin reply: {e}"),
                )
            })
        }
        AdminRequest::FilterList { after, limit } => {
            let page = filter_page(st, after, page_items(limit)?, budget, who)?;
            encode(Ok(page)).map(Reply::Now)
        }
        AdminRequest::FilterRemove { id } => {
            let conn = st
                .filters
                .records
                .get(id)
                .ok_or_else(|| bad(format!("no filter with id {id}")))?
                .connection;
            who.check(st, conn, &format!("filter {id}"))?;
            let rec = st
                .filters
                .records
                .remove(id)
                .ok_or_else(|| bad(format!("no filter with id {id}")))?;
            let reply = encode(Ok(serde_json::json!({ "removed": id })))?;
            match rec.info.level {
                FilterLevel::Session => {
                    st.routes.queue_remove_session_filter(rec.connection, id);
                    return Ok(Reply::WhenSettled(reply));
                }
                FilterLevel::Channel => {
                    let channels: Vec<u64> = rec.channels.iter().copied().collect();
                    if rec.info.kind == "map" {
                        st.routes.queue_remove_mapping(&channels, id);
                    } else {
                        st.routes.queue_remove_channel_filter(&channels, id);
                    }
                    return Ok(Reply::WhenSettled(reply));
                }
                FilterLevel::Publisher => {
                    if let Some(f) = st.sources.get_mut(rec.info.endpoint.as_str()) {
                        f.remove(id);
                    }
                }
            }
            Ok(Reply::Now(reply))
        }
        AdminRequest::Qos { target, set, unset } => {
            let reply = crate::qos::admin_qos(st, &target, &set, &unset, who.admin, |st, c| {
                who.may_touch(st, c)
            })?;
            encode(Ok(reply)).map(Reply::Now)
        }
        AdminRequest::Show { target } if target.starts_with("link:") || target == "links" => {
            let info = crate::link::federation_info(st);
            let want = target.trim_start_matches("link:");
            let links: Vec<_> = info
                .links
                .into_iter()
                .filter(|l| target == "links" || l.peer == want || l.node == want || l.addr == want)
                .collect();
            if links.is_empty() {
                return Err((
                    ErrorCode::BadRequest,
                    format!("no link to {want:?} (see `tagwire list --links`)"),
                ));
            }
            encode(Ok(serde_json::json!({ "links": links }))).map(Reply::Now)
        }
        AdminRequest::Show { target } if target == "reservations" => encode(Ok(
            serde_json::json!({ "reservations": crate::bandwidth::info(st) }),
        ))
        .map(Reply::Now),
        AdminRequest::Show { target } => {
            // About 1.5 KiB per channel shown.
            let max = (budget / 1536).max(1);
            let reply = crate::qos::admin_show(st, &target, max, |st, c| who.may_touch(st, c))?;
            encode(Ok(reply)).map(Reply::Now)
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
                        excerpt(other)
                    )))
                }
            };
            let conn = owner(st, &endpoint)?;
            who.check(st, conn, &format!("endpoint {}", excerpt(&endpoint)))?;
            st.routes.queue_set_op(conn, op);
            let reply = serde_json::json!({ "endpoint": endpoint, "interfilter": op_name(op) });
            encode(Ok(reply)).map(Reply::WhenSettled)
        }
        AdminRequest::FilterAdd {
            endpoint,
            level,
            filter,
            map,
        } => {
            who.check(
                st,
                owner(st, &endpoint)?,
                &format!("endpoint {}", excerpt(&endpoint)),
            )?;
            let (id, level) = add_filter(st, &endpoint, level, filter, map)?;
            let reply = encode(Ok(serde_json::json!({ "id": id })))?;
            Ok(if level == FilterLevel::Publisher {
                Reply::Now(reply)
            } else {
                Reply::WhenSettled(reply)
            })
        }
    }
}

fn page_items(limit: Option<usize>) -> Result<usize, (ErrorCode, String)> {
    match limit {
        None => Ok(DEFAULT_PAGE_ITEMS),
        Some(0) => Err((ErrorCode::BadRequest, "limit must be at least 1".to_owned())),
        Some(n) => Ok(n.min(MAX_PAGE_ITEMS)),
    }
}

/// Bytes a value takes in JSON (0 if it cannot be encoded).
fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// Fills a page item by item while it stays within `limit` items and
/// `budget` bytes, reserving room for the `next` cursor.
struct PageFill {
    used: usize,
    items: usize,
    /// Items looked at, kept or skipped: bounds the work of one page.
    visited: usize,
    limit: usize,
    budget: usize,
}

/// `"next":` plus quotes and a section name: the cursor's room besides its key.
const NEXT_OVERHEAD: usize = 40;

impl PageFill {
    fn new(base: usize, limit: usize, budget: usize) -> Self {
        PageFill {
            used: base,
            items: 0,
            visited: 0,
            limit,
            budget,
        }
    }

    /// Whether an item of `len` JSON bytes, whose cursor key takes
    /// `key_len`, still fits; if so it is counted.
    fn take(&mut self, len: usize, key_len: usize) -> bool {
        if self.items >= self.limit || self.used + len + 1 + NEXT_OVERHEAD + key_len > self.budget {
            return false;
        }
        self.used += len + 1;
        self.items += 1;
        true
    }

    /// Counts an item looked at; false once the page has looked at enough.
    fn visit(&mut self) -> bool {
        self.visited += 1;
        self.visited <= self.limit * 8
    }
}

const SECTIONS: [&str; 4] = ["connections", "endpoints", "subscriptions", "tags"];

/// One page of the listing after cursor `after` (`"<section>:<key>"`).
pub(crate) fn list_page(
    st: &State,
    after: Option<&str>,
    limit: usize,
    budget: usize,
    who: &Requester<'_>,
) -> Result<Listing, (ErrorCode, String)> {
    let bad_cursor = || {
        (
            ErrorCode::BadRequest,
            format!(
                "bad list cursor {}: pass back the \"next\" of the previous page",
                excerpt(after.unwrap_or_default())
            ),
        )
    };
    let (section, key) = match after {
        None => (SECTIONS[0], ""),
        Some(a) => a.split_once(':').ok_or_else(bad_cursor)?,
    };
    let first = SECTIONS
        .iter()
        .position(|s| *s == section)
        .ok_or_else(bad_cursor)?;
    let number = |k: &str| -> Result<Option<u64>, (ErrorCode, String)> {
        if k.is_empty() {
            Ok(None)
        } else {
            k.parse().map(Some).map_err(|_| bad_cursor())
        }
    };
    let mut page = Listing {
        server: st.config.name.clone(),
        auth: st.auth.describe(),
        default_band: st.config.default_band.clone(),
        lanes: if after.is_none() {
            lane_entries(st)
        } else {
            Vec::new()
        },
        connections: Vec::new(),
        endpoints: Vec::new(),
        subscriptions: Vec::new(),
        tags: Vec::new(),
        untracked_publishes: st.untracked_publishes,
        expired: st.expired,
        filtered_at_source: st.filtered_at_source,
        deferred: st.deferred.len(),
        history: crate::history::totals(st),
        shm: st.shm.listing(),
        memory: MemoryInfo {
            buffered_bytes: st.memory.used() as u64,
            max_buffered_bytes: st.memory.max() as u64,
            discarded_events: st.memory.discards(),
            refused_connections: st.memory.refusals(),
        },
        federation: (after.is_none()
            && !(st.fed.links.is_empty() && st.fed.topo.is_empty() && st.members.up.is_empty()))
        .then(|| crate::link::federation_info(st)),
        next: None,
    };
    let mut fill = PageFill::new(json_len(&page), limit, budget);
    for (i, sec) in SECTIONS.iter().enumerate().skip(first) {
        let from = if i == first { key } else { "" };
        // The key of the last item taken in this section (or where it started).
        let mut last: String = from.to_owned();
        let full = match *sec {
            "connections" => {
                let from = number(from)?;
                let mut ids: Vec<u64> = st
                    .connections
                    .keys()
                    .copied()
                    .filter(|id| from.is_none_or(|f| *id > f))
                    .collect();
                ids.sort_unstable();
                let mut full = false;
                for id in ids {
                    if !who.may_touch(st, id) {
                        continue;
                    }
                    let c = &st.connections[&id];
                    let item = ConnectionInfo {
                        id,
                        name: c.name.clone(),
                        peer: c.peer.clone(),
                        identity: c.identity.to_string(),
                        band: c.band.to_string(),
                    };
                    if !fill.take(json_len(&item), 20) {
                        full = true;
                        break;
                    }
                    page.connections.push(item);
                    last = id.to_string();
                }
                full
            }
            "endpoints" => {
                let mut full = false;
                for e in st.endpoints.after((!from.is_empty()).then_some(from)) {
                    if !who.may_touch(st, e.owner) {
                        if !fill.visit() {
                            full = true;
                            break;
                        }
                        last.clone_from(&e.name);
                        continue;
                    }
                    let item = EndpointEntry {
                        name: e.name.clone(),
                        kind: match e.kind {
                            tagwire_proto::EndpointKind::Publisher => "publisher".into(),
                            tagwire_proto::EndpointKind::Subscriber => "subscriber".into(),
                        },
                        connection: e.owner,
                    };
                    if !fill.take(json_len(&item), json_len(&item.name)) {
                        full = true;
                        break;
                    }
                    last.clone_from(&item.name);
                    page.endpoints.push(item);
                }
                full
            }
            "subscriptions" => {
                let mut full = false;
                for (id, ch) in st.channels.after(number(from)?) {
                    if !fill.visit() {
                        full = true;
                        break;
                    }
                    // Retired (unsubscribed, or its connection closed) and
                    // waiting for housekeeping to remove it; or another
                    // identity's (a router-wide id is connection << 32 | sub).
                    let route = st.routes.kind(*id).filter(|_| who.may_touch(st, *id >> 32));
                    let Some(route) = route else {
                        last = id.to_string();
                        continue;
                    };
                    let q = ch.queue.borrow();
                    let item = SubscriptionInfo {
                        endpoint: ch.endpoint.to_string(),
                        pattern: ch.pattern.clone(),
                        queue_depth: q.len(),
                        queue_bound: q.bound(),
                        discard: q.policy().to_string(),
                        dropped: q.dropped(),
                        delivered: ch.delivered.get(),
                        expired: ch.expired.get(),
                        too_large: ch.too_large.get(),
                        scaled_out: ch.scaled_out.get(),
                        transform: ch.transform.as_ref().map(|t| t.spec.to_string()),
                        transform_errors: ch.transform_errors.get(),
                        route: route.as_str().to_owned(),
                        proxy: proxy_info(st, *id, ch),
                    };
                    drop(q);
                    if !fill.take(json_len(&item), 20) {
                        full = true;
                        break;
                    }
                    page.subscriptions.push(item);
                    last = id.to_string();
                }
                full
            }
            // Tags do not record who published them: admins only.
            _ if !who.admin => false,
            _ => {
                let mut tags: Vec<(&str, &TagStats)> = st
                    .tags
                    .iter()
                    .map(|(t, s)| (&**t, s))
                    .filter(|(t, _)| *t > from)
                    .collect();
                tags.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut full = false;
                for (tag, s) in tags {
                    let item = TagInfo {
                        tag: tag.to_owned(),
                        published: s.published,
                        last_publisher: s.last_publisher.clone(),
                    };
                    if !fill.take(json_len(&item), json_len(tag)) {
                        full = true;
                        break;
                    }
                    page.tags.push(item);
                    last = tag.to_owned();
                }
                full
            }
        };
        if full {
            if fill.items == 0 && fill.visited <= fill.limit * 8 {
                return Err((
                    ErrorCode::LimitReached,
                    format!(
                        "a {sec} entry after {last:?} does not fit in one {} byte reply frame",
                        budget + REPLY_OVERHEAD
                    ),
                ));
            }
            page.next = Some(format!("{sec}:{last}"));
            return Ok(page);
        }
    }
    Ok(page)
}

/// One page of `filter_list` after filter id `after`.
fn filter_page(
    st: &State,
    after: Option<u64>,
    limit: usize,
    budget: usize,
    who: &Requester<'_>,
) -> Result<serde_json::Value, (ErrorCode, String)> {
    let mut fill = PageFill::new(
        json_len(&serde_json::json!({ "filters": [] })),
        limit,
        budget,
    );
    let mut filters = Vec::new();
    let mut next = None;
    // The id of the last filter looked at: where the next page starts.
    let mut last = after;
    for r in st.filters.records.after(after) {
        if !fill.visit() {
            next = last;
            break;
        }
        // A closed connection's, waiting for housekeeping to remove it; or
        // another identity's.
        if !st.connections.contains_key(&r.connection) || !who.may_touch(st, r.connection) {
            last = Some(r.info.id);
            continue;
        }
        let mut info = r.info.clone();
        info.interfilter = op_name(st.routes.op(r.connection)).to_owned();
        if !fill.take(json_len(&info), 20) {
            if filters.is_empty() {
                return Err((
                    ErrorCode::LimitReached,
                    format!(
                        "filter {} does not fit in one {} byte reply frame",
                        info.id,
                        budget + REPLY_OVERHEAD
                    ),
                ));
            }
            next = last;
            break;
        }
        last = Some(info.id);
        filters.push(info);
    }
    let mut page = serde_json::json!({ "filters": filters });
    if let Some(next) = next {
        page["next"] = next.into();
    }
    Ok(page)
}

fn owner(st: &State, endpoint: &str) -> Result<u64, (ErrorCode, String)> {
    st.endpoints.get(endpoint).map(|e| e.owner).ok_or_else(|| {
        (
            ErrorCode::UnknownEndpoint,
            format!("no endpoint named {}", excerpt(endpoint)),
        )
    })
}

/// Attaches a filter; returns its id and the level it went to.
fn add_filter(
    st: &mut State,
    endpoint: &str,
    level: FilterLevel,
    filter: Option<String>,
    map: Option<String>,
) -> Result<(u64, FilterLevel), (ErrorCode, String)> {
    let bad = |m: String| (ErrorCode::BadRequest, m);
    let invalid = |what: &str, text: &str, e: tagwire_core::filter::FilterError| {
        (
            ErrorCode::InvalidFilter,
            format!("invalid {what} {}: {e}", excerpt(text)),
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
            excerpt(endpoint)
        )))
        }
        (level, _) => level,
    };
    let identity = st
        .connections
        .get(&conn)
        .map_or_else(|| std::sync::Arc::from(""), |c| c.identity.clone());
    // Whether the endpoint owner's identity may hold `bytes` more of
    // compiled filters (checked before anything is attached).
    let charge = |st: &State, bytes: usize| {
        let l = &st.config.limits;
        st.filters
            .admit(
                &identity,
                1,
                bytes,
                l.max_filters_per_identity,
                l.max_filter_bytes_per_identity,
            )
            .map_err(|m| (ErrorCode::LimitReached, m))
    };
    let bytes;
    let id = st.filters.next_id();
    // The endpoint's own channels (not every channel of the router), less
    // any retired ones still waiting for housekeeping.
    let channels: Vec<u64> = if level == FilterLevel::Channel {
        let mut c = st.channels.of_endpoint(endpoint);
        c.retain(|g| st.routes.kind(*g).is_some());
        c.sort_unstable();
        c
    } else {
        Vec::new()
    };
    let refused = |e: RouteError| {
        (
            ErrorCode::InvalidFilter,
            format!("cannot add {kind} {}: {e}", excerpt(&text)),
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
            bytes = f.memory_estimate();
            charge(st, bytes)?;
            if let Some(source) = st.sources.get_mut(endpoint) {
                source.add(id, f).map_err(|e| invalid(kind, &text, e))?;
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
            bytes = f.memory_estimate();
            charge(st, bytes)?;
            st.routes
                .queue_add_session_filter(conn, id, f)
                .map_err(refused)?;
        }
        (FilterLevel::Channel, _) => {
            if channels.is_empty() {
                return Err(bad(format!(
                    "endpoint {} has no subscriptions to filter",
                    excerpt(endpoint)
                )));
            }
            if kind == "map" {
                let m = st
                    .filters
                    .compile_mapping(&text)
                    .map_err(|e| invalid(kind, &text, e))?;
                bytes = m.memory_estimate();
                charge(st, bytes)?;
                st.routes.queue_set_mapping(&channels, id, &m);
                // A channel holds one mapping filter: the new one replaces any other.
                for c in &channels {
                    let maps: Vec<u64> = st
                        .filters
                        .records
                        .of_channel(*c)
                        .iter()
                        .copied()
                        .filter(|f| {
                            st.filters
                                .records
                                .get(*f)
                                .is_some_and(|r| r.info.kind == "map")
                        })
                        .collect();
                    for f in maps {
                        st.filters.records.detach(f, *c);
                    }
                }
            } else {
                let f = st
                    .filters
                    .compile(&text)
                    .map_err(|e| invalid(kind, &text, e))?;
                bytes = f.memory_estimate();
                charge(st, bytes)?;
                st.routes
                    .queue_add_channel_filter(&channels, id, &f)
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
            channels,
            identity,
            bytes,
        },
    );
    Ok((id, level))
}

/// The reply to [`AdminRequest::List`].
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
    /// Links to other daemons (on the first page; absent when alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation: Option<crate::link::FederationInfo>,
    /// The pull buffers (`history`).
    #[serde(default)]
    pub history: crate::history::HistoryTotals,
    /// Shared memory negotiated by this daemon (`docs/shm.md`).
    #[serde(default)]
    pub shm: crate::shm::ShmCounters,
    /// Set when the listing goes on in another page: send it back as
    /// `after` to get that page. Absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
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

/// The lanes as they run, for listings.
pub(crate) fn lane_entries(st: &State) -> Vec<LaneEntry> {
    let mut lanes: Vec<LaneEntry> = st
        .lanes
        .iter()
        .map(|l| LaneEntry {
            band: l.band.clone(),
            sched: l.sched_wanted.clone(),
            sched_applied: l.sched_applied.clone(),
            fell_back: l.fell_back.clone(),
            dscp: l.dscp,
            cpus: l.cpus.clone(),
            tcp: l.tcp.map(|a| a.to_string()),
            unix: l.unix.as_ref().map(|p| p.display().to_string()),
        })
        .collect();
    let order: Vec<&str> = st.config.bands.iter().map(|b| b.name.as_str()).collect();
    lanes.sort_by_key(|l| order.iter().position(|n| *n == l.band));
    lanes
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

/// The [`ProxyInfo`] of channel `global`, if it scales or names a place.
fn proxy_info(st: &State, global: u64, ch: &crate::channel::Channel) -> Option<ProxyInfo> {
    use tagwire_core::qos::ProxyMode;
    let (scale, mode) = ch.proxy.borrow().clone();
    if scale <= 1 && mode == ProxyMode::AtSubscriber {
        return None;
    }
    let me = st.config.name.clone();
    let (runs_at, reason) = match &mode {
        ProxyMode::AtSubscriber => (me, "asked for (proxy=at_subscriber)".to_owned()),
        ProxyMode::AtPublisher => (
            "the publisher's daemon".to_owned(),
            "asked for (proxy=at_publisher)".to_owned(),
        ),
        ProxyMode::Node(n) => (
            n.to_string(),
            "asked for (proxy=node:NAME); where that daemon is not on the events' path, they are scaled at this one".to_owned(),
        ),
        ProxyMode::Auto => match st.placement.get(global) {
            Some(p) => (p.node.clone(), p.reason.clone()),
            None => (me, "not placed yet (placement runs once a second)".to_owned()),
        },
    };
    Some(ProxyInfo {
        mode: mode.to_string(),
        runs_at,
        reason,
    })
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
