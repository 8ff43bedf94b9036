//! Handing an accepted event to the channels that get it, now or, for an
//! event with a future start time, when that time comes.

use std::sync::Arc;

use bytes::Bytes;

use tagwire_proto::EventRef;

use crate::channel::{EventMeta, Outgoing, Staging};
use crate::filters::rewrite;
use crate::state::State;
use crate::timing::expired;
use tagwire_core::federation::NodeId;
use tagwire_core::filter::Overrides;
use tagwire_core::node::Sink;

use crate::channel::Channel;

/// Where an event comes from, for the links it may go on.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Route<'a> {
    /// It crosses links reliably (it came as `Reliable`, or its tag is
    /// reliable here); see [`crate::reliable`].
    pub reliable: bool,
    /// Where it came from on a reliable connection: the obligation its
    /// forwards take on.
    pub upstream: Option<crate::state::reliable::Upstream>,
    /// The daemon it was published at (0: this one).
    pub origin: u64,
    /// Links it has crossed.
    pub hops: u8,
    /// The neighbour it came from (never sent back there).
    pub from: Option<u64>,
    /// The band of the connection it arrived on: it crosses links on that
    /// band's connection, so a publisher's band holds end to end (`None`:
    /// the band its priority falls in).
    pub band: Option<&'a str>,
    /// It came from this multicast group (an index into
    /// [`Multicast`](crate::state::multicast::Multicast)): it goes to no
    /// group and skips links to that group's live members.
    pub group: Option<usize>,
    /// Its publisher's key ([`tagwire_core::proxy::publisher_key`]) if the
    /// caller has it (a client's publish batch hashes it once per run of
    /// one publisher); else it is hashed here.
    pub publisher_key: Option<u64>,
    /// Local channels only, no link and no multicast group: a `ReliableTo`
    /// that reached the daemon it was for.
    pub local_only: bool,
}

/// Offers an event published here to local channels and to the links that
/// lead to interested daemons; see [`deliver_routed`].
pub(crate) fn deliver(
    st: &mut State,
    stage: &mut Staging,
    event: &mut Outgoing,
    ev: &EventRef<'_>,
    deadline: u64,
    band: Option<&str>,
) -> usize {
    let route = Route {
        band,
        ..Route::default()
    };
    deliver_routed(st, stage, event, ev, deadline, route)
}

/// Offers `event` (already checked, with its `deadline`) to every channel
/// its routes give, applying mapping filters, then to the links its origin's
/// tree and the other daemons' interest pick (the node engine decides, see
/// [`tagwire_core::node::Node::route`]).
/// The deliveries wait in `stage` until its owner flushes it (see
/// [`Staging::flush`], which names the `reject` queues that refused one).
/// A small event read into a shared chunk is copied once, when the first
/// channel that cannot hold its chunk gets it (see [`Outgoing`]). Returns
/// how many links took it.
pub(crate) fn deliver_routed(
    st: &mut State,
    stage: &mut Staging,
    event: &mut Outgoing,
    ev: &EventRef<'_>,
    deadline: u64,
    route: Route<'_>,
) -> usize {
    if crate::shm::is_shm(ev) {
        // Only a local publisher's checked event may point into shared
        // memory ([`deliver_shm`]); from anywhere else it is dropped.
        st.shm.counters.stray += 1;
        return 0;
    }
    deliver_with(st, stage, event, None, ev, deadline, route)
}

/// Offers an event whose payload is in a shared-memory region (checked by
/// [`crate::shm::ShmEvent::check`]): channels of same-host subscribers get
/// the reference, everything else (other channels, pull buffers, links) the
/// payload copied out once.
pub(crate) fn deliver_shm(
    st: &mut State,
    stage: &mut Staging,
    event: &mut crate::shm::ShmEvent,
    ev: &EventRef<'_>,
    deadline: u64,
    band: Option<&str>,
) {
    let route = Route {
        band,
        ..Route::default()
    };
    let mut none = Outgoing::owned(Bytes::new());
    deliver_with(st, stage, &mut none, Some(event), ev, deadline, route);
}

fn deliver_with(
    st: &mut State,
    stage: &mut Staging,
    event: &mut Outgoing,
    mut shm: Option<&mut crate::shm::ShmEvent>,
    ev: &EventRef<'_>,
    deadline: u64,
    route: Route<'_>,
) -> usize {
    if st.store.enabled {
        // First: an acknowledged event the store cannot take is refused
        // whole (not delivered), see [`crate::durable::record`].
        let stored = match shm.as_deref_mut() {
            None => crate::durable::record(st, event, ev, route.upstream, route.origin),
            Some(s) => match s.copied() {
                Some(copy) => crate::durable::record(st, copy, ev, route.upstream, route.origin),
                None => Ok(()),
            },
        };
        if stored.is_err() {
            return 0;
        }
    }
    match shm.as_deref_mut() {
        None => crate::history::record(st, event, ev),
        Some(s) if st.history.enabled() => {
            if let Some(copy) = s.copied() {
                crate::history::record(st, copy, ev);
            }
        }
        Some(_) => {}
    }
    let meta = EventMeta {
        deadline,
        source_time: ev.source_time_ns,
        priority: ev.priority,
        origin: route.origin,
        hops: route.hops,
        seq: ev.seq,
        publisher: route
            .publisher_key
            .unwrap_or_else(|| tagwire_core::proxy::publisher_key(ev.publisher)),
    };
    // The link band is worked out only when there are links.
    let band = if st.node.has_links() {
        route.band.map_or_else(
            || crate::state::band_for_priority(st, meta.priority).to_owned(),
            str::to_owned,
        )
    } else {
        String::new()
    };
    let origin = match route.origin {
        0 => st.node.me(),
        o => o,
    };
    // One flag test unless a tag is reliable and a link speaks version 3.
    let reliable = !band.is_empty() && (route.reliable || crate::reliable::is_reliable(st, ev.tag));
    // One flag test unless a tag compresses and a link speaks version 5
    // (reliable events go as `ReliableCompressed`, forwards as
    // `ForwardCompressed`).
    let compression = if band.is_empty() {
        tagwire_core::compress::Compression::default()
    } else {
        crate::compress::for_tag(st, ev.tag)
    };
    // A reliable event published here while a daemon that wants it is
    // away: held for it after routing (below). One flag test when no
    // daemon is away.
    let hold_for_away = route.origin == 0
        && !route.local_only
        && st.node.has_away()
        && (reliable || route.reliable || crate::reliable::tag_is_reliable(st, ev.tag));
    let mut sink = Execute {
        reliable,
        upstream: route.upstream,
        from: route.from,
        rel: &mut st.fed.reliable,
        max_control: st.config.limits.max_control_bytes,
        stage,
        event,
        shm,
        shm_table: &mut st.shm,
        links: &mut st.fed.links,
        comp: &mut st.fed.compress,
        compression,
        packed: None,
        limits: &st.config.limits,
        meta,
        band: &band,
        transformed: None,
        expired_by_mapping: 0,
    };
    // Multicast (one test when there is none): the group the event goes to
    // or came from; links to its live members are skipped. A reliable event
    // keeps to its links (a group has no acknowledgement). An event goes to
    // a group only when a live member next on its tree wants it (after
    // filters and an upstream proxy's scaling), as it would go to a link.
    let group = if st.mcast.groups.is_empty()
        || route.local_only
        || (reliable && route.group.is_none())
        || (route.group.is_none()
            && !wanted_by_member(&mut st.node, &st.mcast.groups, ev, origin, route.from))
    {
        None
    } else {
        let bytes = match sink.shm.as_deref_mut() {
            None => Some(sink.event.bytes().clone()),
            Some(s) => s.copied().map(|c| c.bytes().clone()),
        };
        bytes.and_then(|b| {
            crate::state::multicast::send_event(
                &mut st.mcast,
                route.group,
                origin,
                route.hops,
                ev.tag,
                &b,
            )
        })
    };
    let now = if group.is_some() {
        crate::timing::now_ns()
    } else {
        0
    };
    let groups = &st.mcast.groups;
    let skip = |to| {
        group
            .and_then(|i| groups.get(i))
            .is_some_and(|g| g.is_live_member(to, now))
    };
    let over = st.node.routes().budget_stats().over_budget;
    let links = if route.local_only {
        st.node.route_local(ev, &mut sink);
        0
    } else {
        st.node
            .route_skipping(ev, origin, route.hops, route.from, skip, &mut sink)
    };
    st.node.count_expired(sink.expired_by_mapping);
    // Held for the away daemons that want it, sent once they are back.
    if hold_for_away {
        let held = match sink.shm.as_deref_mut() {
            None => Some(sink.event.for_history().0),
            Some(s) => s.copied().map(|c| c.for_history().0),
        };
        if let Some(bytes) = held {
            let band = (!band.is_empty()).then_some(band.as_str());
            crate::reliable::hold_for_away(st, ev, &bytes, band);
        }
    }
    if st.node.routes().budget_stats().over_budget != over {
        log_over_budget(st);
    }
    links
}

/// Whether a live member of the multicast group covering `ev`'s tag is a
/// next hop that wants it (no group covers it: no).
fn wanted_by_member(
    node: &mut tagwire_core::node::Node<Arc<Channel>>,
    groups: &tagwire_core::multicast::Groups,
    ev: &EventRef<'_>,
    origin: NodeId,
    from: Option<NodeId>,
) -> bool {
    let Some(i) = groups.group_for(ev.tag) else {
        return false;
    };
    let now = crate::timing::now_ns();
    node.routes_to_any(ev, origin, from, |to| {
        groups.get(i).is_some_and(|g| g.is_live_member(to, now))
    })
}

/// An event's filters ran over `limits.max_filter_work_per_event`: says
/// which tag and subscription, within the router-wide log rate limit.
#[cold]
fn log_over_budget(st: &State) {
    let b = st.node.routes().budget_stats();
    let Some(last) = &b.last else {
        return;
    };
    if !st.admission.log.allow(std::time::Instant::now()) {
        return;
    }
    let at = match last
        .channel
        .and_then(|c| st.channels.get(c).map(|ch| (c, ch)))
    {
        Some((c, ch)) => format!("subscription {c} of {} and those after it", ch.endpoint),
        None => "indexed subscriptions".to_owned(),
    };
    tracing::warn!(
        "evaluating the filters of an event on {} needed more than \
         limits.max_filter_work_per_event = {} work units: {at} did not get it \
         ({} events over the limit, {} deliveries skipped so far)",
        last.tag,
        st.config.limits.max_filter_work_per_event,
        b.over_budget,
        b.skipped,
    );
}

/// A transformed copy of an event: its transform's spec, and the copy or
/// why the transform failed.
type Transformed = (Arc<str>, Result<Bytes, String>);

/// Carries out the node's routing of one event: offers it to each local
/// channel (through its mapping filter or transform, or as a shared-memory
/// reference) and queues it on each link's forwarding queue for the band.
struct Execute<'a, 'e, 'b> {
    /// Where its deliveries wait to be queued (see [`Staging`]).
    stage: &'e mut Staging,
    event: &'e mut Outgoing<'b>,
    shm: Option<&'e mut crate::shm::ShmEvent>,
    shm_table: &'a mut crate::shm::ShmTable,
    links: &'a mut std::collections::HashMap<u64, crate::state::federation::Link>,
    /// The tag's compression on links, which links take it, and the event
    /// compressed (once, for the first link that takes it; `Some(None)`: it
    /// does not shrink).
    comp: &'a mut crate::state::compress::LinkCompression,
    compression: tagwire_core::compress::Compression,
    packed: Option<Option<Bytes>>,
    /// Whether the event crosses links reliably, its upstream obligation,
    /// the neighbour it came from, and the windows.
    reliable: bool,
    upstream: Option<crate::state::reliable::Upstream>,
    from: Option<NodeId>,
    rel: &'a mut crate::state::reliable::Reliable,
    max_control: usize,
    limits: &'a crate::config::Limits,
    meta: EventMeta,
    band: &'a str,
    /// Transformed copies of this event, one per spec (spatial scaling);
    /// `None` until a channel transforms (most events: then dropping the
    /// sink is one test, not a call to drop an empty list).
    transformed: Option<Vec<Transformed>>,
    expired_by_mapping: u64,
}

impl Sink<Arc<Channel>> for Execute<'_, '_, '_> {
    fn channel(&mut self, ch: &Arc<Channel>, overrides: Overrides) {
        // The event as this channel gets it: the caller's, or (shared
        // memory) the reference or a copy. A closure, as the two borrow
        // for different lifetimes.
        let mut offer = |event: &mut Outgoing<'_>| {
            if let Some(t) = &ch.transform {
                let transformed = self.transformed.get_or_insert_with(Vec::new);
                let done = match transformed.iter().find(|(k, _)| **k == *t.spec) {
                    Some((_, r)) => r.clone(),
                    None => {
                        let r = transform(event.bytes(), t);
                        transformed.push((t.spec.clone(), r.clone()));
                        r
                    }
                };
                match done {
                    Ok(bytes) => self
                        .stage
                        .offer(ch, &mut Outgoing::owned(bytes), &self.meta),
                    Err(why) => ch.transform_failed(&why, self.limits.max_control_bytes),
                }
                return;
            }
            if overrides.is_empty() {
                self.stage.offer(ch, event, &self.meta)
            } else {
                let copy = rewrite(event.bytes(), overrides).and_then(|copy| {
                    let m = EventRef::parse(&copy).ok().map(|e| EventMeta::of(&e))?;
                    Some((copy, m))
                });
                match copy {
                    Some((_, m)) if expired(m.deadline) => self.expired_by_mapping += 1,
                    Some((copy, m)) => self.stage.offer(ch, &mut Outgoing::owned(copy), &m),
                    None => self.stage.offer(ch, event, &self.meta),
                }
            }
        };
        match self.shm.as_deref_mut() {
            None => offer(self.event),
            Some(s) => {
                let inline = ch.transform.is_some() || !overrides.is_empty();
                if let Some(e) = s.for_channel(self.shm_table, ch, inline, self.limits) {
                    offer(e)
                }
            }
        }
    }

    fn link(&mut self, to: NodeId, origin: NodeId, _hops: u8) {
        let band = self.band;
        let conn_of = |links: &std::collections::HashMap<u64, crate::state::federation::Link>| {
            links
                .get(&to)
                .map(|l| l.bands.get(band).map_or(&l.queue, |b| &b.queue).conn)
        };
        // An event larger than a link connection's piece size crosses it
        // reliably whatever its tag says: so in pieces, resumable (a
        // best-effort event over the link's frame limit was refused
        // before). One comparison for a small event.
        let piece = self.rel.fragments.piece;
        let in_pieces = match self.shm.as_deref_mut() {
            None => self.event.bytes().len() > piece,
            Some(s) => s.copied().is_some_and(|e| e.bytes().len() > piece),
        } && conn_of(self.links)
            .and_then(|c| self.rel.conns.get(&c))
            .is_some_and(|c| c.piece > 0);
        // An event in pieces is not compressed whole here: each piece is
        // compressed on its own when it is sent (link version 7, the held
        // event's `compression`), so the work per step is one piece's.
        let packed = match self.compression.codec {
            Some(_) if !in_pieces => conn_of(self.links).and_then(|c| self.packed_for(c)),
            _ => None,
        };
        let Some(l) = self.links.get_mut(&to) else {
            return;
        };
        let m = EventMeta {
            origin,
            ..self.meta
        };
        let queue = l.bands.get(self.band).map_or(&l.queue, |b| &b.queue);
        let reliable = self.reliable || in_pieces;
        if reliable && self.rel.conns.contains_key(&queue.conn) {
            let conn = queue.conn;
            let event = match self.shm.as_deref_mut() {
                None => Some(self.event.for_history().0),
                Some(s) => s.copied().map(|c| c.for_history().0),
            };
            if let Some(event) = event {
                l.bytes_out += packed.as_ref().map_or(event.len(), Bytes::len) as u64;
                let held = crate::state::reliable::Held {
                    event,
                    origin,
                    hops: self.meta.hops,
                    from: self.from,
                    upstream: self.upstream,
                    tries: 0,
                    packed: packed.clone(),
                    to: None,
                    compression: self.compression,
                };
                let offered = crate::reliable::offer(self.rel, conn, held, self.max_control);
                if let crate::reliable::Offered::Rejected { report: true } = offered {
                    // The publisher (here) learns it with the batch's refusals.
                    self.stage.also_rejected(format!(
                        "link:{} (its reliable window is full: federation.reliable_window_events/_bytes)",
                        l.name
                    ));
                }
            }
            return;
        }
        let mut offer = |event: &mut Outgoing<'_>| {
            self.stage.offer(queue, event, &m);
            l.bytes_out += event.bytes().len() as u64;
        };
        if let Some(blob) = packed {
            return offer(&mut Outgoing::compressed(blob));
        }
        // Links get a shared-memory payload copied out (once).
        match self.shm.as_deref_mut() {
            None => offer(self.event),
            Some(s) => {
                if let Some(copy) = s.copied() {
                    offer(copy)
                }
            }
        }
    }
}

impl Execute<'_, '_, '_> {
    /// The event compressed for link connection `conn`, if it speaks link
    /// version 5 and the event is long enough and shrinks (compressed once
    /// per event, shared by every link that takes it).
    fn packed_for(&mut self, conn: u64) -> Option<Bytes> {
        if !self.comp.conns.contains(&conn) {
            return None;
        }
        if self.packed.is_none() {
            let event = match self.shm.as_deref_mut() {
                None => Some(self.event.bytes().clone()),
                Some(s) => s.copied().map(|c| c.bytes().clone()),
            };
            let codec = event
                .as_ref()
                .and_then(|e| self.compression.codec_for(e.len()));
            self.packed = Some(match (codec, event) {
                (Some(codec), Some(e)) => crate::compress::blob(&mut self.comp.counters, codec, &e),
                _ => None,
            });
        }
        self.packed.clone().flatten()
    }
}

/// The event with its payload transformed by `t` (re-encoded once).
fn transform(event: &Bytes, t: &crate::channel::ChannelTransform) -> Result<Bytes, String> {
    let mut e = tagwire_proto::Event::decode(event).map_err(|e| e.to_string())?;
    let payload = tagwire_core::proxy::apply_isolated(&*t.plugin, &t.params, &e.payload)?;
    e.payload = Bytes::from(payload);
    let mut out = bytes::BytesMut::with_capacity(e.encoded_len());
    e.encode(&mut out).map_err(|e| e.to_string())?;
    Ok(out.freeze())
}
