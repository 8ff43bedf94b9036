//! Admin requests and replies: the router's side of the typed requests in
//! [`tagwire_proto::admin`] (listed in `docs/admin.md`). A body is parsed
//! once into an [`AdminRequest`] and answered with an [`AdminReply`], both
//! serialised by proto. Admin work runs on the admin lane. So that no
//! request stalls a lane, listings are paged (each page within the
//! connection's negotiated frame size and [`MAX_PAGE_ITEMS`]) and a
//! session-level change only queues the re-placement of the session's
//! channels for the lane's housekeeping task, answering when it is done.

use serde::Serialize;
use tagwire_core::filter::InterFilterOp;
use tagwire_core::route::RouteError;
use tagwire_proto::admin::{
    AdminError, AdminReply, AdminRequest, ConnectionInfo, EndpointEntry, FilterAdded, FilterOpSet,
    FilterPage, FilterRemoved, LaneEntry, Listing, MemoryInfo, ProxyInfo, Show, SubscriptionInfo,
    TagInfo, DEFAULT_PAGE_ITEMS, MAX_PAGE_ITEMS,
};
use tagwire_proto::{excerpt, ErrorCode};

use crate::filters::{op_name, FilterRecord};
pub use crate::filters::{FilterInfo, FilterLevel};
use crate::state::lanes::Reply;
use crate::state::{State, TagStats};

/// Bytes of an `AdminReply` frame besides its JSON body (type and request id).
const REPLY_OVERHEAD: usize = 5;

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

/// Runs an admin request against the router's state; `max_frame` is the
/// requesting connection's negotiated frame size, which a reply never
/// exceeds. The error is the code and message of the `Error` frame to send.
/// The body is parsed once into an [`AdminRequest`]; the reply is an
/// [`AdminReply`], encoded by proto.
pub(crate) fn handle(
    st: &mut State,
    body: &str,
    max_frame: usize,
    who: &Requester<'_>,
) -> Result<Reply, (ErrorCode, String)> {
    let request = AdminRequest::parse(body).map_err(|e| match e {
        AdminError::NotAnObject { .. } | AdminError::BadRequest { .. } => {
            (ErrorCode::BadRequest, format!("bad admin request: {e}"))
        }
        other => (ErrorCode::BadRequest, other.to_string()),
    })?;
    let (reply, settle) = answer(st, request, max_frame, who)?;
    let body = reply.to_json();
    Ok(if settle {
        Reply::WhenSettled(body)
    } else {
        Reply::Now(body)
    })
}

/// Answers one request; `true` beside the reply: send it once the routes
/// have settled.
fn answer(
    st: &mut State,
    request: AdminRequest,
    max_frame: usize,
    who: &Requester<'_>,
) -> Result<(AdminReply, bool), (ErrorCode, String)> {
    let bad = |m: String| (ErrorCode::BadRequest, m);
    let budget = max_frame.saturating_sub(REPLY_OVERHEAD);
    let now = |r: AdminReply| Ok((r, false));
    match request {
        AdminRequest::Time => now(AdminReply::Time(st.fed.time_info(st.node.topology()))),
        AdminRequest::List { after, limit } => {
            let page = list_page(st, after.as_deref(), page_items(limit)?, budget, who)?;
            now(AdminReply::List(Box::new(page)))
        }
        AdminRequest::FilterList { after, limit } => {
            let page = filter_page(st, after, page_items(limit)?, budget, who)?;
            now(AdminReply::FilterList(page))
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
            let reply = AdminReply::FilterRemoved(FilterRemoved { removed: id });
            match rec.info.level {
                FilterLevel::Session => {
                    st.node
                        .routes_mut()
                        .queue_remove_session_filter(rec.connection, id);
                    Ok((reply, true))
                }
                FilterLevel::Channel => {
                    let channels: Vec<u64> = rec.channels.iter().copied().collect();
                    if rec.info.kind == "map" {
                        st.node.routes_mut().queue_remove_mapping(&channels, id);
                    } else {
                        st.node
                            .routes_mut()
                            .queue_remove_channel_filter(&channels, id);
                    }
                    Ok((reply, true))
                }
                FilterLevel::Publisher => {
                    st.sources.remove(&rec.info.endpoint, id);
                    Ok((reply, false))
                }
            }
        }
        AdminRequest::Qos { target, set, unset } => {
            let reply = crate::qos::admin_qos(st, &target, &set, &unset, who.admin, |st, c| {
                who.may_touch(st, c)
            })?;
            now(AdminReply::Qos(reply))
        }
        AdminRequest::Show { target } if target.starts_with("link:") || target == "links" => {
            let info = federation_info(st);
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
            now(AdminReply::Show(Show::Links { links }))
        }
        AdminRequest::Show { target } if target == "reservations" => {
            now(AdminReply::Show(Show::Reservations {
                reservations: crate::bandwidth::info(st),
            }))
        }
        AdminRequest::Show { target } => {
            // About 1.5 KiB per channel shown.
            let max = (budget / 1536).max(1);
            let reply = crate::qos::admin_show(st, &target, max, |st, c| who.may_touch(st, c))?;
            now(AdminReply::Show(reply))
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
            st.node.routes_mut().queue_set_op(conn, op);
            let reply = FilterOpSet {
                endpoint,
                interfilter: op_name(op).to_owned(),
            };
            Ok((AdminReply::FilterOp(reply), true))
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
            let reply = AdminReply::FilterAdded(FilterAdded { id });
            Ok((reply, level != FilterLevel::Publisher))
        }
        // Handled by the connection's own lane before it gets here (the
        // region's fd goes out on that connection); never run as admin work.
        AdminRequest::ShmOpen { .. } => Err(bad(
            "shm_open is answered by the connection's own lane, not as admin work".into(),
        )),
        // A request kind this router does not know yet (the enum is
        // non-exhaustive).
        other => Err(bad(format!(
            "admin request {} is not supported by this router",
            other.op()
        ))),
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
        expired: st.node.counters().expired,
        filtered_at_source: st.filtered_at_source,
        deferred: st.node.held().0,
        history: crate::history::totals(st),
        store: crate::durable::totals(st),
        parked: (st.parked_deliveries.stats.parked > 0).then(|| st.parked_deliveries.info()),
        shm: st.shm.listing(),
        multicast: if after.is_none() {
            crate::multicast::infos(st)
        } else {
            Vec::new()
        },
        filter_budget: {
            let b = st.node.routes().budget_stats();
            tagwire_proto::admin::FilterBudgetInfo {
                max_work_per_event: st.config.limits.max_filter_work_per_event,
                work: b.work,
                events_over_budget: b.over_budget,
                skipped_deliveries: b.skipped,
                last_tag: b.last.as_ref().map(|l| l.tag.clone()),
            }
        },
        memory: MemoryInfo {
            buffered_bytes: st.memory.used() as u64,
            max_buffered_bytes: st.memory.max() as u64,
            discarded_events: st.memory.discards(),
            refused_connections: st.memory.refusals(),
        },
        federation: (after.is_none()
            && !(st.fed.links.is_empty()
                && st.config.federation.peers.is_empty()
                && st.node.topology().is_empty()
                && st.members.up.is_empty()))
        .then(|| federation_info(st)),
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
                        transport: match c.transport {
                            "tcp" if st.config.tls.is_some() => "tls".into(),
                            t => t.into(),
                        },
                        udp: c.udp.as_ref().map(|u| u.info()),
                        dscp: (c.socket.is_some() || c.udp.is_some()).then(|| {
                            c.dscp.unwrap_or_else(|| {
                                st.lanes
                                    .iter()
                                    .find(|l| *l.band == *c.band)
                                    .map_or(0, |l| l.dscp)
                            })
                        }),
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
                    let route = st
                        .node
                        .routes()
                        .kind(*id)
                        .filter(|_| who.may_touch(st, *id >> 32));
                    // Parked (its connection dropped; counted under
                    // `parked`): not a live subscription.
                    let Some(route) = route.filter(|_| !ch.is_parked()) else {
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
                        time: ch.time_info(),
                        jitter: ch.jitter_info(),
                        net: st.channel_net_loss(ch.conn, ch.sub),
                        acked: ch.acked_info(),
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
) -> Result<FilterPage, (ErrorCode, String)> {
    let mut fill = PageFill::new(json_len(&FilterPage::default()), limit, budget);
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
        info.interfilter = op_name(st.node.routes().op(r.connection)).to_owned();
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
    Ok(FilterPage { filters, next })
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
    let is_publisher = st.sources.is_publisher(endpoint);
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
        c.retain(|g| st.node.routes().kind(*g).is_some());
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
            st.sources
                .add(endpoint, id, f)
                .map_err(|e| invalid(kind, &text, e))?;
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
            st.node
                .routes_mut()
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
                st.node.routes_mut().queue_set_mapping(&channels, id, &m);
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
                st.node
                    .routes_mut()
                    .queue_add_channel_filter(&channels, id, &f)
                    .map_err(refused)?;
            }
        }
    }
    let interfilter = op_name(st.node.routes().op(conn)).to_owned();
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

/// The lanes as they run, for listings.
pub(crate) fn lane_entries(st: &State) -> Vec<LaneEntry> {
    let slot = |band: &str| st.config.bands.iter().position(|b| b.name == band);
    let mut lanes: Vec<LaneEntry> = st
        .lanes
        .iter()
        .map(|l| {
            let (table_waits_us, table_wait_max_us, table_wait_total_us) = slot(&l.band)
                .map(|i| st.table_waits.lane(i).summary_us())
                .unwrap_or_default();
            LaneEntry {
                table_waits_us,
                table_wait_max_us,
                table_wait_total_us,
                band: l.band.clone(),
                sched: l.sched_wanted.clone(),
                sched_applied: l.sched_applied.clone(),
                fell_back: l.fell_back.clone(),
                dscp: l.dscp,
                cpus: l.cpus.clone(),
                tcp: l.tcp.map(|a| a.to_string()),
                unix: l.unix.as_ref().map(|p| p.display().to_string()),
                udp: l.udp.map(|a| a.to_string()),
            }
        })
        .collect();
    let order: Vec<&str> = st.config.bands.iter().map(|b| b.name.as_str()).collect();
    lanes.sort_by_key(|l| order.iter().position(|n| *n == l.band));
    lanes
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
            None if st.fed.links.is_empty() => {
                (me, "no other daemon is linked: scaled at this daemon".to_owned())
            }
            None => (me, "not placed yet (placement runs once a second)".to_owned()),
        },
    };
    Some(ProxyInfo {
        mode: mode.to_string(),
        runs_at,
        reason,
    })
}

/// The federation part of the listing, membership included.
pub(crate) fn federation_info(st: &State) -> tagwire_proto::admin::FederationInfo {
    let mut info = st.fed.info(&st.node, &st.config.default_band);
    let mut members: Vec<String> = st
        .members
        .up
        .values()
        .map(|m| format!("{:016x} {}", m.node, m.gossip))
        .collect();
    members.sort();
    info.members = members;
    info.bad_datagrams = st.members.bad_datagrams;
    info.peers = st.config.federation.peers.len();
    let (daemons, events, bytes) = st.node.away_held();
    let c = st.node.away_counters();
    let r = &mut info.reliable;
    r.away_daemons = daemons as u64;
    r.away_events = events as u64;
    r.away_bytes = bytes as u64;
    r.away_held = c.held;
    r.away_released = c.released;
    r.away_dropped += c.dropped_full + c.dropped_age + c.dropped_gone;
    info
}
