//! Links between daemons: dialing configured peers, the `Peer` exchange,
//! flooding adverts, forwarding events, clock probes and link statistics.
//!
//! A link is an ordinary connection (one [`crate::connection::serve`] task,
//! the same engine, outbox and writer as a client's), on which both daemons
//! have said [`LinkFrame::Peer`]. The dialing daemon is the engine's client.
//! Each link has one forwarding queue, a [`Channel`] whose destination is
//! the link ([`Destination::Link`](crate::channel::Destination)): events
//! routed to the peer wait there under the same bounds and discard policy as
//! a subscriber's, and the link's writer frames them as `Forward`.
//! Where an event goes, adverts and pulls are decided by core's node engine
//! ([`tagwire_core::node::Node`]: link-state adverts, one shortest-path tree
//! per origin); this module does the I/O.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tagwire_core::federation::NodeId;
use tagwire_core::qos::ProxyMode;
use tagwire_core::queue::{BoundedQueue, DiscardPolicy, OrderPolicy};
use tagwire_proto::{
    ErrorCode, EventRef, FragmentOf, Interest, LinkFrame, ProxyAt, COMPRESS_LINK_VERSION,
    FRAGMENT_LINK_VERSION, MIN_LINK_VERSION, RELIABLE_LINK_VERSION, UDP_BANDS_LINK_VERSION,
};

use crate::channel::{Channel, Outbox, Outgoing};
use crate::state::State;
use crate::sync::Locked;
use crate::timing::now_ns;

use crate::state::federation::{BandConn, Link, MAX_REFUSAL_COUNTS};

/// How often the federation task looks for interest changes.
const TICK: Duration = Duration::from_millis(50);
/// How often each link's clock is probed.
const PROBE_EVERY_NS: u64 = 1_000_000_000;
/// First and longest wait between dial attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Failed connection attempts after which the dialer says what to check.
const HINT_AFTER: u32 = 3;

pub use tagwire_proto::admin::{DaemonInfo, FederationInfo, LinkInfo, TimeInfo};

/// What a connection knows when it hands a link frame over.
pub(crate) struct LinkConn<'a> {
    pub state: &'a Arc<Locked<State>>,
    pub conn: u64,
    pub outbox: &'a Arc<Outbox>,
    /// The peer's address; empty once `link` is known (only the handshake
    /// reads it).
    pub peer: &'a str,
    /// Whether this daemon dialed (the engine's client side).
    pub dialed: bool,
    /// Whether the peer's identity may link (the admin right).
    pub may_link: bool,
    pub max_control: usize,
    /// The peer's node, once `Peer` was exchanged.
    pub link: &'a mut Option<NodeId>,
    /// Where an event's deliveries are staged (the connection's, reused).
    pub stage: &'a mut crate::channel::Staging,
    /// When the frame arrived (its read's time, ns since the Unix epoch),
    /// for the channels' input jitter.
    pub arrived: u64,
}

/// Says who we are: the dialer's first link frame, after `Welcome`.
/// It says this daemon's link version (`[federation] link_version`, 6 by
/// default) unless the peer at that address refused a version before:
/// then one less each time (6, 5, …, 2).
pub(crate) fn say_peer(state: &Locked<State>, conn: u64, outbox: &Outbox, max: usize) {
    let st = state.borrow();
    let ours = st.config.federation.link_version;
    let version = st
        .connections
        .get(&conn)
        .and_then(|c| st.fed.reliable.downgraded.get(&c.peer).copied())
        .map_or(ours, |v| v.min(ours));
    let _ = outbox.send_link(&peer_frame(&st, conn, version, false), max);
}

/// Our `Peer` for connection `conn`: the link version, its band, and our
/// bands' TCP ports; in an acceptor's `answer` on link version 6 or more,
/// also our bands' UDP ports (never in a dialer's first `Peer`: a daemon
/// older than version 6 refuses bytes after the TCP ports).
fn peer_frame(st: &State, conn: u64, version: u16, answer: bool) -> LinkFrame {
    let udp_bands = if answer && version >= UDP_BANDS_LINK_VERSION {
        band_ports(st, |l| l.udp)
    } else {
        Vec::new()
    };
    LinkFrame::Peer {
        version,
        node: st.node.me(),
        name: st.config.name.clone(),
        cluster: st.config.federation.cluster.clone(),
        band: band_of(st, conn).to_string(),
        bands: band_ports(st, |l| l.tcp),
        udp_bands,
    }
}

/// Each band's port (`addr` of its lane, where it has one), in the
/// configuration's band order: the lanes register as their threads start,
/// in no fixed order, and a `Peer` should say the same each time.
fn band_ports(
    st: &State,
    addr: impl Fn(&crate::state::LaneInfo) -> Option<std::net::SocketAddr>,
) -> Vec<(String, u16)> {
    let mut v: Vec<(usize, String, u16)> = st
        .lanes
        .iter()
        .filter_map(|l| {
            let at = st.config.bands.iter().position(|b| b.name == l.band);
            Some((at.unwrap_or(usize::MAX), l.band.clone(), addr(l)?.port()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, band, port)| (band, port)).collect()
}

/// The band of connection `conn` (the listener it came in on, or the lane
/// that dialed it).
fn band_of(st: &State, conn: u64) -> Arc<str> {
    st.connections.get(&conn).map_or_else(
        || Arc::from(st.config.default_band.as_str()),
        |c| c.band.clone(),
    )
}

/// Handles a link frame. An error closes the connection (the caller sends
/// it as the connection's last `Error`).
pub(crate) fn on_frame(
    c: LinkConn<'_>,
    frame: LinkFrame,
    chunk: Option<u64>,
) -> Result<(), (ErrorCode, String)> {
    let Some(peer) = *c.link else {
        let LinkFrame::Peer {
            version,
            node,
            name,
            cluster,
            band,
            bands,
            udp_bands,
        } = frame
        else {
            return Err((
                ErrorCode::HandshakeRequired,
                "a link frame before Peer (only daemons send link frames, and Peer first)".into(),
            ));
        };
        let ports = BandPorts {
            tcp: bands,
            udp: udp_bands,
        };
        return on_peer(c, version, node, name, cluster, band, ports);
    };
    let mut st = c.state.borrow_mut();
    if !matches!(
        frame,
        LinkFrame::Forward { .. } | LinkFrame::Reliable { .. } | LinkFrame::Compressed { .. }
    ) {
        // Control frames (a clock probe each way every second) prove the
        // peer alive; events are left out to keep the clock off their path.
        if let Some(l) = st.fed.links.get_mut(&peer) {
            l.heard = now_ns();
        }
    }
    match frame {
        LinkFrame::Peer { .. } => Err((ErrorCode::Malformed, "a second Peer on a link".into())),
        LinkFrame::Forward {
            origin,
            hops,
            event,
        } => {
            c.stage.arrived = c.arrived;
            on_forward(&mut st, c.stage, c.conn, peer, origin, hops, &event, chunk)
        }
        LinkFrame::Fragment {
            id,
            total,
            checksum,
            offset,
            of,
            data,
        } => {
            let arrived_on = band_of(&st, c.conn);
            let blob = tagwire_core::fragment::BlobId {
                id,
                total,
                checksum,
            };
            c.stage.arrived = c.arrived;
            crate::fragment::on_fragment(
                &mut st,
                c.stage,
                c.outbox,
                c.conn,
                peer,
                blob,
                offset,
                of,
                data,
                &arrived_on,
            )
        }
        LinkFrame::FragmentResume {
            id,
            total,
            checksum,
            have,
        } => {
            let blob = tagwire_core::fragment::BlobId {
                id,
                total,
                checksum,
            };
            crate::fragment::on_resume(&mut st, c.conn, blob, have);
            Ok(())
        }
        LinkFrame::Reliable {
            seq,
            origin,
            hops,
            event,
        } => {
            let arrived_on = band_of(&st, c.conn);
            c.stage.arrived = c.arrived;
            crate::reliable::on_reliable(
                &mut st,
                c.stage,
                c.conn,
                peer,
                seq,
                origin,
                hops,
                &event,
                chunk,
                &arrived_on,
            )
        }
        LinkFrame::Compressed {
            of,
            codec,
            raw_len,
            data,
        } => {
            // Handled as the `Forward` or `Reliable` it was (see
            // [`crate::compress`]); `chunk` is `None`: the event is a buffer
            // of its own.
            let event = crate::compress::decompress(&mut st, codec, raw_len, &data)?;
            c.stage.arrived = c.arrived;
            match of {
                FragmentOf::Forward { origin, hops } => {
                    on_forward(&mut st, c.stage, c.conn, peer, origin, hops, &event, None)
                }
                FragmentOf::Reliable { seq, origin, hops } => {
                    let arrived_on = band_of(&st, c.conn);
                    crate::reliable::on_reliable(
                        &mut st,
                        c.stage,
                        c.conn,
                        peer,
                        seq,
                        origin,
                        hops,
                        &event,
                        None,
                        &arrived_on,
                    )
                }
            }
        }
        LinkFrame::Ack(ack) => crate::reliable::on_ack(&mut st, c.conn, &ack),
        frame @ (LinkFrame::Advert { .. }
        | LinkFrame::PullRequest { .. }
        | LinkFrame::PullAnswer { .. }) => {
            // An advert whose filters were compiled off the lane (see
            // `precompile_advert`) is put in force as compiled.
            let compiled = match (&frame, st.fed.compiled_advert.take()) {
                (
                    LinkFrame::Advert {
                        origin, version, ..
                    },
                    Some((conn, o, v, compiled)),
                ) if conn == c.conn && o == *origin && v == *version => Some(compiled),
                _ => None,
            };
            match compiled {
                Some(compiled) => st.node.on_compiled_advert(peer, frame, compiled, now_ns()),
                None => st.node.on_link_frame(peer, frame, now_ns()),
            };
            crate::node_io::execute(&mut st);
            Ok(())
        }
        LinkFrame::TimeProbe { id, t1 } => {
            // Stamped with our network time, so the prober syncs to it.
            let t2 = st.fed.network_time();
            let reply = LinkFrame::TimeReply {
                id,
                t1,
                t2,
                t3: st.fed.network_time(),
            };
            let _ = c.outbox.send_link(&reply, c.max_control);
            Ok(())
        }
        LinkFrame::TimeReply { id, t1, t2, t3 } => {
            let t4 = st.fed.clock();
            let mut sample = None;
            if let Some(l) = st.fed.links.get_mut(&peer) {
                if l.probe == (id, t1) && t4 >= t1 && t3 >= t2 {
                    let rtt = (t4 - t1).saturating_sub(t3 - t2);
                    let offset = ((t2 as i128 - t1 as i128) + (t3 as i128 - t4 as i128)) / 2;
                    let offset = offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
                    l.rtt_ns = Some(rtt);
                    l.offset_ns = Some(offset);
                    sample = Some((rtt, offset));
                }
            }
            let me = st.node.me();
            let reference = st.node.topology().time_reference();
            st.fed.net.follow(reference, me);
            if let Some((rtt, offset)) = sample {
                if st.node.topology().parent_toward(reference) == Some(peer) {
                    st.fed.net.sample(t4, rtt, offset);
                }
            }
            Ok(())
        }
    }
}

/// A `Forward` (or a forwarded event put together from `Fragment`s)
/// arrived on link connection `conn` from `peer`: delivered here and routed
/// on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn on_forward(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    origin: NodeId,
    hops: u8,
    event: &bytes::Bytes,
    chunk: Option<u64>,
) -> Result<(), (ErrorCode, String)> {
    let ev = EventRef::parse(event)
        .map_err(|e| (ErrorCode::Malformed, format!("bad event in Forward: {e}")))?;
    if let Some(l) = st.fed.links.get_mut(&peer) {
        l.events_in += 1;
        l.bytes_in += event.len() as u64;
    }
    if !st.mcast.groups.is_empty() && !crate::multicast::first_copy(st, origin, &ev) {
        // A multicast group brought it already (counted there).
        return Ok(());
    }
    let Ok(deadline) = st.node.admit_forward(origin, hops, &ev, now_ns) else {
        return Ok(());
    };
    let mut out = match chunk {
        Some(epoch) => Outgoing::in_chunk(event, epoch),
        None => Outgoing::own_buffer(event),
    };
    let arrived_on = band_of(st, conn);
    let route = crate::dispatch::Route {
        origin,
        hops: hops.saturating_add(1),
        from: Some(peer),
        band: Some(&arrived_on),
        reliable: false,
        upstream: None,
        group: None,
        publisher_key: None,
    };
    crate::dispatch::deliver_routed(st, stage, &mut out, &ev, deadline, route);
    // A link's queues drop or count what they refuse: nobody to tell.
    let _ = stage.flush();
    Ok(())
}

/// Interest entries of a peer's advert compiled per slice off the lane:
/// each link compiles one slice at a time on a blocking thread, its lane
/// serving everything else meanwhile (a regex filter's automaton can take
/// milliseconds to build, and an advert holds up to `max_interest` entries).
pub(crate) const ADVERT_COMPILE_SLICE: usize = 32;

/// Compiles the filters of an advert that link connection `conn` is about
/// to handle off the lane, [`ADVERT_COMPILE_SLICE`] entries per blocking
/// task, yielding between slices, and leaves the result for
/// [`on_frame`] (`Federation::compiled_advert`). The link waits (its later
/// frames keep their order); the lane's other connections go on. Adverts
/// without filters, stale ones and ones over `max_interest` are left to
/// `on_frame` (nothing costly to compile, or refused without compiling).
pub(crate) async fn precompile_advert(state: &Arc<Locked<State>>, conn: u64, frame: &LinkFrame) {
    let LinkFrame::Advert {
        origin,
        version,
        interest,
        ..
    } = frame
    else {
        return;
    };
    if interest.iter().all(|i| i.filter.is_empty()) {
        return;
    }
    let limits = {
        let st = state.borrow();
        // Only a link (after `Peer`, with the right to link) gets its
        // advert compiled: anyone else's is refused by `on_frame` unread.
        if !st.fed.links.values().any(|l| l.conn == conn) {
            return;
        }
        let topo = st.node.topology();
        if interest.len() > topo.limits().max_interest || !topo.is_newer(*origin, *version) {
            return;
        }
        topo.limits().clone()
    };
    let origin = *origin;
    let mut compiled = tagwire_core::federation::CompiledAdvert::default();
    let mut failed = None;
    for slice in interest.chunks(ADVERT_COMPILE_SLICE) {
        let slice = slice.to_vec();
        let limits = limits.clone();
        let mut so_far = std::mem::take(&mut compiled);
        let done = tokio::task::spawn_blocking(move || {
            let r = so_far.compile_more(origin, &slice, &limits);
            (so_far, r)
        })
        .await;
        match done {
            Ok((so_far, Ok(()))) => compiled = so_far,
            Ok((_, Err(e))) => {
                failed = Some(e);
                break;
            }
            // The blocking pool is gone (shutting down): `on_frame`
            // compiles on the lane.
            Err(e) => {
                tracing::debug!(conn, "cannot compile an advert off the lane: {e}");
                return;
            }
        }
        tokio::task::yield_now().await;
    }
    let result = match failed {
        Some(e) => Err(e),
        None => Ok(compiled),
    };
    state.borrow_mut().fed.compiled_advert = Some((conn, origin, *version, result));
}

/// The ports a peer listed for its bands in its `Peer`.
struct BandPorts {
    tcp: Vec<(String, u16)>,
    udp: Vec<(String, u16)>,
}

#[allow(clippy::too_many_arguments)]
fn on_peer(
    c: LinkConn<'_>,
    version: u16,
    node: NodeId,
    name: String,
    cluster: String,
    band: String,
    ports: BandPorts,
) -> Result<(), (ErrorCode, String)> {
    let ours = c.state.borrow().config.federation.link_version;
    if !(MIN_LINK_VERSION..=ours).contains(&version) {
        return Err((
            ErrorCode::UnsupportedVersion,
            format!(
                "link protocol version {version}; this daemon speaks {MIN_LINK_VERSION} to {ours}"
            ),
        ));
    }
    // The lower of the two: the acceptor answers with it, and a dialer
    // that said 3 hears 2 from a daemon that speaks only 2.
    let version = version.min(ours);
    if !c.may_link {
        return Err((
            ErrorCode::PermissionDenied,
            "this identity may not link daemons (a peer needs the admin right)".into(),
        ));
    }
    let mut st = c.state.borrow_mut();
    let me = st.node.me();
    if cluster != st.config.federation.cluster {
        return Err((
            ErrorCode::PermissionDenied,
            format!(
                "daemon {name} is in cluster {cluster:?}, this one in {:?}",
                st.config.federation.cluster
            ),
        ));
    }
    if node == me || node == 0 {
        return Err((
            ErrorCode::PermissionDenied,
            format!("daemon {name} claims this daemon's node id {node:#x}"),
        ));
    }
    let here = band_of(&st, c.conn);
    if *band != *here {
        return Err((
            ErrorCode::BadRequest,
            format!("daemon {name} says this connection is for band {band:?}, but it came to band {here}'s listener"),
        ));
    }
    if band != st.config.default_band {
        return attach_band(c, &mut st, node, &name, band, version);
    }
    if let Some(l) = st.fed.links.get(&node) {
        return Err((
            ErrorCode::PermissionDenied,
            format!(
                "daemon {node:#x} ({name}) is already linked, from {} ({}); refusing a second link claiming its id",
                l.addr, l.name
            ),
        ));
    }
    if st.fed.links.len() >= st.config.federation.max_links {
        return Err((
            ErrorCode::LimitReached,
            format!(
                "{} links already (federation.max_links)",
                st.config.federation.max_links
            ),
        ));
    }
    let max = c.max_control;
    if !c.dialed {
        let _ = c
            .outbox
            .send_link(&peer_frame(&st, c.conn, version, true), max);
    }
    if version >= COMPRESS_LINK_VERSION {
        st.fed.compress.conns.insert(c.conn);
    }
    if version >= RELIABLE_LINK_VERSION {
        let lossy = st.is_udp(c.conn);
        st.fed
            .reliable
            .conn_up(c.conn, node, c.outbox.clone(), version, lossy);
    } else {
        tracing::warn!(
            peer = %c.peer,
            "daemon {name} speaks link version {version} (no acknowledgements): events of \
             reliable tags cross this link best effort"
        );
    }
    // The first clock probe at once: RTT and offset are known from the start.
    let t1 = st.fed.clock();
    let _ = c.outbox.send_link(&LinkFrame::TimeProbe { id: 1, t1 }, max);
    let channel = link_queue(&st, &name, c.outbox, c.conn);
    tracing::info!(peer = %c.peer, "linked with daemon {name} ({node:#x})");
    st.fed.refusals.remove(c.peer);
    st.fed.links.insert(
        node,
        Link {
            conn: c.conn,
            name: name.clone(),
            addr: c.peer.to_owned(),
            dialed: c.dialed,
            outbox: c.outbox.clone(),
            queue: channel,
            since: now_ns(),
            events_in: 0,
            bytes_in: 0,
            bytes_out: 0,
            rtt_ns: None,
            offset_ns: None,
            probe: (1, t1),
            bands: HashMap::new(),
            band_ports: ports.tcp,
            udp_band_ports: ports.udp,
            version,
            sampled: (0, 0, now_ns()),
            rate: (0, 0),
            heard: now_ns(),
        },
    );
    st.fed.links_changed();
    if let Some(conn) = st.connections.get_mut(&c.conn) {
        conn.name = format!("link:{name}");
    }
    *c.link = Some(node);
    // Bring the peer up to date, then tell everyone about the new link.
    st.node.link_up(node);
    crate::node_io::execute(&mut st);
    Ok(())
}

/// A link's forwarding queue on connection `conn`.
fn link_queue(st: &State, name: &str, outbox: &Arc<Outbox>, conn: u64) -> Arc<Channel> {
    let queue = BoundedQueue::with_policies(
        st.config.federation.link_queue_length,
        st.config.limits.max_queue_bytes,
        OrderPolicy::Fifo,
        DiscardPolicy::DropOldest,
    );
    Arc::new(
        Channel::new(
            0,
            Arc::from(format!("link:{name}")),
            "**".into(),
            queue,
            outbox.clone(),
            st.memory.clone(),
        )
        .for_link()
        .on_connection(conn),
    )
}

/// A further band connection of an existing link.
fn attach_band(
    c: LinkConn<'_>,
    st: &mut State,
    node: NodeId,
    name: &str,
    band: String,
    version: u16,
) -> Result<(), (ErrorCode, String)> {
    let queue = link_queue(st, name, c.outbox, c.conn);
    let me_frame = (!c.dialed).then(|| peer_frame(st, c.conn, version, true));
    let lossy = st.is_udp(c.conn);
    let Some(link) = st.fed.links.get_mut(&node) else {
        return Err((
            ErrorCode::BadRequest,
            format!(
                "daemon {name} opened a band {band} connection before its link on the default band"
            ),
        ));
    };
    if link.bands.contains_key(&band) {
        return Err((
            ErrorCode::PermissionDenied,
            format!("the link to daemon {name} already has a band {band} connection"),
        ));
    }
    if let Some(f) = me_frame {
        let _ = c.outbox.send_link(&f, c.max_control);
    }
    if version >= COMPRESS_LINK_VERSION {
        st.fed.compress.conns.insert(c.conn);
    }
    if version >= RELIABLE_LINK_VERSION {
        st.fed
            .reliable
            .conn_up(c.conn, node, c.outbox.clone(), version, lossy);
    }
    tracing::info!(peer = %c.peer, "band {band} connection of the link to daemon {name}");
    link.bands.insert(
        band,
        BandConn {
            conn: c.conn,
            queue,
        },
    );
    if let Some(conn) = st.connections.get_mut(&c.conn) {
        conn.name = format!("link:{name}");
    }
    *c.link = Some(node);
    Ok(())
}

/// A link's connection closed: forget the link (or its band connection)
/// and re-advertise.
pub(crate) fn closed(state: &Locked<State>, node: NodeId, conn: u64) {
    let mut st = state.borrow_mut();
    if let Some(l) = st.fed.links.get_mut(&node) {
        l.bands.retain(|_, b| b.conn != conn);
    }
    if st.fed.links.get(&node).is_some_and(|l| l.conn == conn) {
        let l = st.fed.links.remove(&node);
        if let Some(l) = l {
            tracing::info!("link to daemon {} ({node:#x}) closed", l.name);
        }
        st.fed.links_changed();
        st.node.link_down(node);
        crate::node_io::execute(&mut st);
    }
    // After the route changed: what it held goes over the next route.
    crate::reliable::conn_closed(&mut st, conn);
    crate::compress::conn_closed(&mut st, conn);
}

/// Channels whose interest is read per hold of the table lock.
const INTEREST_SLICE: usize = 1024;

/// The local interest: every channel's pattern, with its filter when it
/// has exactly one (a channel with none or several is taken unfiltered),
/// its scale and where its proxy runs (`auto`: where placement put it,
/// at this daemon until it has). Read in slices of [`INTEREST_SLICE`]
/// channels, yielding between them, so that at 100,000 subscriptions no
/// lane waits for the whole walk; channels that change meanwhile change
/// the table's generation, and the next tick reads again.
async fn local_interest(state: &Locked<State>) -> Vec<Interest> {
    let mut interest = Vec::new();
    let mut after = None;
    loop {
        let (slice, last) = interest_slice(&state.borrow(), after);
        interest.extend(slice);
        match last {
            Some(last) => after = Some(last),
            None => return interest,
        }
        tokio::task::yield_now().await;
    }
}

/// Up to [`INTEREST_SLICE`] channels' interest after channel `after`, and
/// the last channel read (`None`: the walk is done).
fn interest_slice(st: &State, after: Option<u64>) -> (Vec<Interest>, Option<u64>) {
    let mut last = None;
    let slice = st
        .channels
        .after(after)
        .take(INTEREST_SLICE)
        .map(|(global, ch)| {
            last = Some(*global);
            let mut filters = st
                .filters
                .records
                .of_channel(*global)
                .iter()
                .filter_map(|id| st.filters.records.get(*id))
                .filter(|r| r.info.kind == "filter");
            let filter = match (filters.next(), filters.next()) {
                (Some(f), None) => f.info.text.clone(),
                _ => String::new(),
            };
            let (scale, mode) = ch.proxy.borrow().clone();
            let proxy = match mode {
                ProxyMode::AtSubscriber => ProxyAt::Subscriber,
                ProxyMode::AtPublisher => ProxyAt::Publisher,
                ProxyMode::Node(n) => ProxyAt::Node(n.to_string()),
                ProxyMode::Auto => st
                    .placement
                    .node_of(*global)
                    .map_or(ProxyAt::Subscriber, |n| ProxyAt::Node(n.to_string())),
            };
            Interest {
                pattern: ch.pattern.clone(),
                filter,
                scale,
                proxy,
            }
        })
        .collect::<Vec<_>>();
    let more = slice.len() == INTEREST_SLICE;
    (slice, last.filter(|_| more))
}

/// Daemons became reachable that were not: every client connection that
/// speaks protocol version 7 gets a `Healed` frame, at most once a second
/// (a flapping link does not make its clients replay at its pace), so that
/// its durable subscriptions resume what was published there meanwhile
/// (docs/reliability.md). Link connections get none. Cost: one small frame
/// per client connection per heal.
pub(crate) fn tell_healed(st: &mut State) {
    let Some(daemons) = st.fed.healed else {
        return;
    };
    if st
        .fed
        .healed_told
        .is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1))
    {
        return;
    }
    st.fed.healed = None;
    st.fed.healed_told = Some(std::time::Instant::now());
    let links: std::collections::HashSet<u64> = st
        .fed
        .links
        .values()
        .flat_map(|l| std::iter::once(l.conn).chain(l.bands.values().map(|b| b.conn)))
        .collect();
    let max = st.config.limits.max_control_bytes;
    let frame = tagwire_proto::Frame::Healed { daemons };
    let mut told = 0usize;
    for (id, c) in &st.connections {
        if c.version >= tagwire_proto::HEALED_PROTOCOL_VERSION && !links.contains(id) {
            c.outbox.send(&frame, max);
            told += 1;
        }
    }
    tracing::info!("this daemon reaches {daemons} daemons, some again: told {told} clients");
}

/// The federation's lane task: dials the configured peers, re-advertises
/// local interest when subscriptions change, probes link clocks.
pub(crate) async fn run(state: Arc<Locked<State>>, lane: crate::state::lanes::LaneOf, dscp: u8) {
    let peers = state.borrow().config.federation.peers.clone();
    state.borrow_mut().fed.dialer = Some((lane.clone(), dscp));
    for p in peers {
        tokio::task::spawn_local(dial(state.clone(), p, lane.clone(), dscp, false));
    }
    tokio::task::spawn_local(crate::membership::run(state.clone()));
    tokio::task::spawn_local(crate::fragment::pump(state.clone()));
    let mut next_probe = 0u64;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = {
            let mut st = state.borrow_mut();
            if crate::placement::run(&mut st) {
                st.channels.touch();
            }
            // Interest matters only to neighbours: with no link it is not
            // read at all. A link that comes up gets it on the next tick
            // (the generation still differs).
            let generation = st.channels.generation();
            (generation != st.fed.advertised && !st.fed.links.is_empty()).then_some(generation)
        };
        if let Some(generation) = due {
            let interest = local_interest(&state).await;
            // Aggregated and compiled (a filter compile per distinct
            // filter) on a blocking thread, holding neither the table lock
            // nor this lane; put in force under the lock in one step.
            let (me, limits) = {
                let st = state.borrow();
                (st.node.me(), st.node.topology().limits().clone())
            };
            let prepared = tokio::task::spawn_blocking(move || {
                tagwire_core::federation::Topology::prepare_interest(me, interest, &limits)
            })
            .await;
            if let Ok(prepared) = prepared {
                let mut st = state.borrow_mut();
                st.fed.advertised = generation;
                st.node.set_prepared_interest(prepared);
                crate::node_io::execute(&mut st);
            }
        }
        let mut st = state.borrow_mut();
        let max = st.config.limits.max_control_bytes;
        let (reference, me) = (st.node.topology().time_reference(), st.node.me());
        st.fed.net.follow(reference, me);
        if st.node.pulls_in_flight() > 0 {
            crate::node_io::handle_timeout(&mut st, now_ns());
        }
        crate::reliable::tick(&mut st);
        tell_healed(&mut st);
        let now = now_ns();
        if now >= next_probe {
            next_probe = now + PROBE_EVERY_NS;
            crate::acked_delivery::expire_due(&mut st, now);
            // Adverts unreachable for a while (a killed daemon) go.
            let expired = st.node.expire_unreachable(now);
            if expired > 0 {
                tracing::info!("forgot {expired} daemon(s) unreachable for 10 s");
            }
            let t1 = st.fed.clock();
            for l in st.fed.links.values_mut() {
                let (bin, bout, at) = l.sampled;
                let secs = now.saturating_sub(at) as f64 / 1e9;
                if secs > 0.0 {
                    l.rate = (
                        ((l.bytes_in - bin) as f64 / secs) as u64,
                        ((l.bytes_out - bout) as f64 / secs) as u64,
                    );
                }
                l.sampled = (l.bytes_in, l.bytes_out, now);
                let id = l.probe.0.wrapping_add(1);
                l.probe = (id, t1);
                let _ = l.outbox.send_link(&LinkFrame::TimeProbe { id, t1 }, max);
            }
        }
    }
}

/// A non-default band's lane task: for every link this daemon dialed, opens
/// the link's connection for this band (to the port the peer listed for it)
/// once the link is up, and again whenever it is lost. A link dialed over
/// UDP opens a UDP session from a socket of this lane, marked with this
/// band's DSCP, to the band's UDP port the peer listed (link version 6; an
/// older peer lists none, and its UDP link stays on the default band).
pub(crate) async fn run_band(
    state: Arc<Locked<State>>,
    lane: crate::state::lanes::LaneOf,
    dscp: u8,
) {
    let band = lane.band.to_string();
    let dialed_links = state.borrow().fed.dialed_links.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if dialed_links.get() == 0 {
            // No link of ours to add this band's connection to: the state
            // lock stays untaken (a real-time lane must not queue for it
            // behind a lower lane's batch five times a second for nothing).
            continue;
        }
        let wanted: Vec<(NodeId, String)> = {
            let mut st = state.borrow_mut();
            let mut wanted = Vec::new();
            for (id, l) in &st.fed.links {
                if !l.dialed || l.bands.contains_key(&band) {
                    continue;
                }
                let udp = crate::config::is_udp_peer(&l.addr);
                let ports = if udp {
                    &l.udp_band_ports
                } else {
                    &l.band_ports
                };
                let Some(port) = ports.iter().find(|(b, _)| *b == band).map(|(_, p)| *p) else {
                    continue;
                };
                let (tls, host) = crate::config::peer_address(&l.addr);
                let Some((host, _)) = host.rsplit_once(':') else {
                    continue;
                };
                let scheme = match (udp, tls) {
                    (true, _) => "udp",
                    (false, true) => "tls",
                    (false, false) => "tcp",
                };
                wanted.push((*id, format!("{scheme}://{host}:{port}")));
            }
            wanted.retain(|(id, _)| st.fed.band_dialing.insert((*id, band.clone())));
            wanted
        };
        for (node, addr) in wanted {
            let (state, lane, band) = (state.clone(), lane.clone(), band.clone());
            tokio::task::spawn_local(async move {
                let target = crate::config::peer_address(&addr).1.to_owned();
                if crate::config::is_udp_peer(&addr) {
                    // The same cookie and token proof as the link's first
                    // session; served by this lane until it ends.
                    let dialed = crate::udp::dial_link(
                        state.clone(),
                        addr.clone(),
                        &target,
                        lane,
                        dscp,
                        Duration::from_secs(3),
                    )
                    .await;
                    if let Err(e) = dialed {
                        tracing::warn!("peer {addr} (band {band}): {e}");
                        tokio::time::sleep(BACKOFF_MAX).await;
                    }
                } else if let Ok(Ok(s)) = tokio::time::timeout(
                    Duration::from_secs(3),
                    tokio::net::TcpStream::connect(&target),
                )
                .await
                {
                    if let Err(e) = serve_dialed(&state, &addr, lane, dscp, s).await {
                        tracing::warn!("peer {addr} (band {band}): {e}");
                        tokio::time::sleep(BACKOFF_MAX).await;
                    }
                } else {
                    tokio::time::sleep(BACKOFF_MAX).await;
                }
                state.borrow_mut().fed.band_dialing.remove(&(node, band));
            });
        }
    }
}

/// Keeps a link to `addr` up: connects, serves the link until it closes,
/// waits (100 ms doubling to 1 s, so a healed link is back within about a second), again.
/// Links with a daemon found by discovery (see [`crate::membership`]): a
/// dial loop that ends when that daemon is no longer up.
pub(crate) fn dial_discovered(state: Arc<Locked<State>>, link: std::net::SocketAddr) {
    let Some((lane, dscp)) = state.borrow().fed.dialer.clone() else {
        return;
    };
    tokio::task::spawn_local(dial(state, format!("tcp://{link}"), lane, dscp, true));
}

async fn dial(
    state: Arc<Locked<State>>,
    addr: String,
    lane: crate::state::lanes::LaneOf,
    dscp: u8,
    discovered: bool,
) {
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u32;
    loop {
        if discovered {
            let target = addr.trim_start_matches("tcp://");
            let up = state
                .borrow()
                .members
                .up
                .values()
                .any(|m| m.link.to_string() == target);
            if !up {
                return;
            }
        }
        let target = crate::config::peer_address(&addr).1.to_owned();
        if crate::config::is_udp_peer(&addr) {
            let started = std::time::Instant::now();
            match crate::udp::dial_link(
                state.clone(),
                addr.clone(),
                &target,
                lane.clone(),
                dscp,
                Duration::from_secs(3),
            )
            .await
            {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!("peer {addr}: {e}; retrying (attempt {failures})");
                    }
                }
            }
            if started.elapsed() > Duration::from_secs(10) {
                backoff = BACKOFF_MIN;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        }
        let connected = tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect(target.as_str()),
        )
        .await;
        match connected {
            Ok(Ok(s)) => {
                let started = std::time::Instant::now();
                match serve_dialed(&state, &addr, lane.clone(), dscp, s).await {
                    Ok(()) => failures = 0,
                    Err(e) => {
                        failures += 1;
                        if failures == 1 || failures.is_power_of_two() {
                            tracing::warn!("peer {addr}: {e}; retrying (attempt {failures})");
                        }
                    }
                }
                if started.elapsed() > Duration::from_secs(10) {
                    backoff = BACKOFF_MIN;
                }
            }
            Ok(Err(e)) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!("peer {addr}: cannot connect ({e}); retrying (attempt {failures}, next in {backoff:?})");
                }
                if failures == HINT_AFTER {
                    tracing::warn!("{}", unreachable_hint(&addr, failures));
                }
            }
            Err(_) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!("peer {addr}: connect timed out; retrying (attempt {failures})");
                }
                if failures == HINT_AFTER {
                    tracing::warn!("{}", unreachable_hint(&addr, failures));
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Serves the link on `s`, a TCP connection this daemon opened to `addr`:
/// marks it with `dscp`, completes TLS first for a `tls://` peer, then
/// runs the link until it closes. The error: the TLS handshake failed.
async fn serve_dialed(
    state: &Arc<Locked<State>>,
    addr: &str,
    lane: crate::state::lanes::LaneOf,
    dscp: u8,
    s: tokio::net::TcpStream,
) -> Result<(), String> {
    let _ = s.set_nodelay(true);
    if let Err(e) = crate::priority::set_dscp(&s, dscp) {
        tracing::debug!(%addr, "cannot set DSCP {dscp}: {e}");
    }
    let socket = s.as_fd_owned();
    let (tls, target) = crate::config::peer_address(addr);
    if !tls {
        let (r, w) = s.into_split();
        crate::connection::dial_serve(state.clone(), addr.to_owned(), lane, socket, r, w).await;
        return Ok(());
    }
    let link_tls = state.borrow().fed.tls.clone().ok_or_else(|| {
        "a tls:// peer, and no [federation.tls] to verify it with (--peer-tls-ca)".to_owned()
    })?;
    let stream = tokio::time::timeout(Duration::from_secs(5), link_tls.connect(target, s))
        .await
        .map_err(|_| "TLS handshake timed out after 5 s".to_owned())??;
    let (r, w) = tokio::io::split(stream);
    crate::connection::dial_serve(state.clone(), addr.to_owned(), lane, socket, r, w).await;
    Ok(())
}

/// What to check when peer `addr` stays unreachable: the usual cause is a
/// daemon listening on loopback only (the default).
pub(crate) fn unreachable_hint(addr: &str, attempts: u32) -> String {
    let target = crate::config::peer_address(addr).1;
    let port = target.rsplit_once(':').map_or("7700", |(_, p)| p);
    format!(
        "peer {addr}: still no connection after {attempts} attempts. Is tagwired running at {target}, \
         listening on an address this host can reach? A daemon listens on 127.0.0.1 only by default: \
         start it with --listen 0.0.0.0:{port} (or its interface address); a firewall may also block TCP {port}"
    )
}

/// The daemon-side reason for a refusal a peer sent to our dialing `addr`:
/// its words name the client-side setting (`TAGWIRE_TOKEN`), but between
/// daemons the fix is the federation token / cluster secret.
pub(crate) fn refused_by_peer(addr: &str, code: ErrorCode, message: &str) -> String {
    let host = crate::config::peer_address(addr)
        .1
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h);
    match code {
        ErrorCode::Unauthenticated => format!(
            "peer {addr} refused the link: [federation] token / --cluster-secret-file differs on {host} \
             (or is not set there, or here); the same secret must be on every daemon of the cluster \
             (it said: {message})"
        ),
        ErrorCode::PermissionDenied if message.contains("may not link") => format!(
            "peer {addr} refused the link: it knows this daemon's [federation] token but grants it no \
             admin right; give both daemons the same --cluster-secret-file, or add an [[acl]] rule \
             with admin = true for that token on {host} (it said: {message})"
        ),
        ErrorCode::PermissionDenied if message.contains("has no rights") => format!(
            "peer {addr} refused the link: its [[acl]] grants this daemon's token nothing; give both \
             daemons the same --cluster-secret-file, or an [[acl]] rule with admin = true on {host} \
             (it said: {message})"
        ),
        _ => format!("peer daemon {addr} reported {code:?}: {message}"),
    }
}

/// What a link of a version below `version` lacks, for the warning when a
/// peer refused it.
fn without_version(version: u16) -> &'static str {
    match version {
        v if v >= UDP_BANDS_LINK_VERSION => {
            "a udp:// link to it carries every band on the default band's session"
        }
        v if v >= COMPRESS_LINK_VERSION => "events are not compressed on that link",
        v if v >= FRAGMENT_LINK_VERSION => {
            "events larger than a piece cannot cross that link in pieces (resumable)"
        }
        _ => "events of reliable tags cross that link best effort",
    }
}

/// Logs an error the peer we dialed on connection `conn` sent, in daemon
/// terms. A refusal comes once per connection attempt (once a second), so
/// the 1st, 2nd, 4th, … refusal of each peer is logged.
pub(crate) fn log_peer_error(state: &Locked<State>, conn: u64, code: ErrorCode, message: &str) {
    let (addr, n) = {
        let mut st = state.borrow_mut();
        let addr = st
            .connections
            .get(&conn)
            .map(|c| c.peer.clone())
            .unwrap_or_default();
        if code == ErrorCode::UnsupportedVersion && !addr.is_empty() {
            // An older daemon refused our version: the next dial says one less.
            let (said, next) = st.fed.reliable.downgrade(&addr);
            drop(st);
            let what = without_version(next + 1);
            tracing::warn!(
                conn,
                "peer daemon {addr} refused link version {said} ({message}); dialing it \
                 again with version {next}: {what}"
            );
            return;
        }
        if !matches!(
            code,
            ErrorCode::Unauthenticated | ErrorCode::PermissionDenied
        ) {
            drop(st);
            tracing::warn!(conn, "peer daemon {addr} reported {code:?}: {message}");
            return;
        }
        if st.fed.refusals.len() >= MAX_REFUSAL_COUNTS && !st.fed.refusals.contains_key(&addr) {
            st.fed.refusals.clear();
        }
        let n = st.fed.refusals.entry(addr.clone()).or_insert(0);
        *n = n.saturating_add(1);
        (addr, *n)
    };
    if n == 1 || n.is_power_of_two() {
        let again = if n > 1 {
            format!(" [{n} times]")
        } else {
            String::new()
        };
        tracing::warn!("{}{again}", refused_by_peer(&addr, code, message));
    }
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> Option<std::os::fd::OwnedFd>;
}

impl AsFdOwned for tokio::net::TcpStream {
    fn as_fd_owned(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned().ok()
    }
}

/// The token to present to peer `addr`: the configured one, else, for a
/// daemon on this host, its owner's token file (as a local client does).
pub(crate) fn token_for(configured: &str, addr: &str) -> String {
    if !configured.is_empty() {
        return configured.to_owned();
    }
    let a = crate::config::peer_address(addr).1;
    let loopback = a.starts_with("127.") || a.starts_with("localhost:") || a.starts_with("[::1]");
    match a.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()) {
        Some(port) if loopback => {
            // UDP ports have token files of their own (`token-udp-PORT`).
            let path = if crate::config::is_udp_peer(addr) {
                crate::local::udp_token_path(port)
            } else {
                crate::local::token_path(port)
            };
            crate::local::read_token(&path).unwrap_or_default()
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_link_names_the_daemon_side_setting_and_the_host() {
        let m = refused_by_peer(
            "a:7700",
            ErrorCode::Unauthenticated,
            "the token presented is not valid for this daemon",
        );
        assert!(
            m.contains("[federation] token / --cluster-secret-file differs on a ")
                && !m.contains("TAGWIRE_TOKEN"),
            "{m}"
        );
        let m = refused_by_peer(
            "tcp://10.0.0.1:7700",
            ErrorCode::PermissionDenied,
            "this identity may not link daemons (a peer needs the admin right)",
        );
        assert!(
            m.contains("admin = true") && m.contains("on 10.0.0.1"),
            "{m}"
        );
    }

    #[test]
    fn a_refused_link_version_names_what_the_version_below_lacks() {
        assert!(without_version(6).contains("udp://"));
        assert!(without_version(5).contains("compressed"));
        assert!(without_version(4).contains("pieces"));
        assert!(without_version(3).contains("best effort"));
    }

    #[test]
    fn an_unreachable_peer_hint_names_the_listen_fix_with_its_port() {
        let m = unreachable_hint("tcp://b:7710", 3);
        assert!(
            m.contains("after 3 attempts") && m.contains("--listen 0.0.0.0:7710"),
            "{m}"
        );
    }
}
