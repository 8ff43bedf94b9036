//! Links between daemons: the link frames a connection hands over (the
//! `Peer` exchange, adverts, acknowledgements, clock probes' answers), a
//! link's queues per band and its statistics. Events that arrive on a link
//! go on to [`crate::forwarded`]; dialing peers and the federation tick
//! are the `federation` module's.
//!
//! A link is an ordinary connection (one `connection::serve` task,
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

use tagwire_core::federation::NodeId;
use tagwire_core::queue::{BoundedQueue, DiscardPolicy, OrderPolicy};
use tagwire_proto::{
    ErrorCode, FragmentOf, LinkFrame, COMPRESS_LINK_VERSION, FRAGMENT_LINK_VERSION,
    MIN_LINK_VERSION, PIECE_COMPRESS_LINK_VERSION, RELIABLE_LINK_VERSION, UDP_BANDS_LINK_VERSION,
};

use crate::channel::{Channel, Outbox};
use crate::state::State;
use crate::sync::Locked;
use crate::timing::now_ns;

use crate::state::federation::{BandConn, Link, MAX_REFUSAL_COUNTS};

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
        band: st.band_of(conn).to_string(),
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

/// Handles a link frame. An error closes the connection (the caller sends
/// it as the connection's last `Error`).
pub(crate) fn on_frame(
    mut c: LinkConn<'_>,
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
        LinkFrame::Forward { .. }
            | LinkFrame::Reliable { .. }
            | LinkFrame::ReliableTo { .. }
            | LinkFrame::Compressed { .. }
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
            crate::forwarded::on_forward(
                &mut st, c.stage, c.conn, peer, origin, hops, &event, chunk,
            )
        }
        LinkFrame::Fragment {
            id,
            total,
            checksum,
            offset,
            of,
            data,
        } => on_piece(
            &mut st,
            &mut c,
            peer,
            (id, total, checksum),
            offset,
            of,
            data,
        ),
        LinkFrame::FragmentCompressed {
            id,
            total,
            checksum,
            offset,
            of,
            codec,
            raw_len,
            data,
        } => {
            // A piece compressed on its own (link version 7): decompressed,
            // bounded as a `Compressed` event is, then taken as the
            // `Fragment` it stands for.
            let ok = st
                .fed
                .reliable
                .conns
                .get(&c.conn)
                .is_some_and(|c| c.compress_pieces);
            if !ok {
                return Err((
                    ErrorCode::Malformed,
                    format!(
                        "a FragmentCompressed on a link of version {} or lower (it came in \
                         version {PIECE_COMPRESS_LINK_VERSION})",
                        PIECE_COMPRESS_LINK_VERSION - 1
                    ),
                ));
            }
            let data = crate::compress::decompress(&mut st, codec, raw_len, &data, "piece")?;
            st.fed.compress.counters.pieces_decompressed += 1;
            on_piece(
                &mut st,
                &mut c,
                peer,
                (id, total, checksum),
                offset,
                of,
                data,
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
            let arrived_on = st.band_of(c.conn);
            c.stage.arrived = c.arrived;
            crate::forwarded::on_reliable(
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
        LinkFrame::ReliableTo {
            seq,
            origin,
            hops,
            to,
            event,
        } => {
            let arrived_on = st.band_of(c.conn);
            c.stage.arrived = c.arrived;
            crate::forwarded::on_reliable_to(
                &mut st,
                c.stage,
                c.conn,
                peer,
                seq,
                origin,
                hops,
                to,
                &event,
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
            let event = crate::compress::decompress(&mut st, codec, raw_len, &data, "event")?;
            c.stage.arrived = c.arrived;
            match of {
                FragmentOf::Forward { origin, hops } => crate::forwarded::on_forward(
                    &mut st, c.stage, c.conn, peer, origin, hops, &event, None,
                ),
                FragmentOf::Reliable { seq, origin, hops } => {
                    let arrived_on = st.band_of(c.conn);
                    crate::forwarded::on_reliable(
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
    let here = st.band_of(c.conn);
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

/// A piece of an event in pieces (a `Fragment`, or a `FragmentCompressed`
/// once decompressed), taken on toward reassembly.
fn on_piece(
    st: &mut State,
    c: &mut LinkConn<'_>,
    peer: NodeId,
    (id, total, checksum): (u64, u64, u32),
    offset: u64,
    of: tagwire_proto::FragmentOf,
    data: bytes::Bytes,
) -> Result<(), (ErrorCode, String)> {
    let arrived_on = st.band_of(c.conn);
    let blob = tagwire_core::fragment::BlobId {
        id,
        total,
        checksum,
    };
    c.stage.arrived = c.arrived;
    crate::fragment::on_fragment(
        st,
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

/// What a link of a version below `version` lacks, for the warning when a
/// peer refused it.
fn without_version(version: u16) -> &'static str {
    match version {
        v if v >= tagwire_proto::RELIABLE_TO_LINK_VERSION => {
            "reliable events held for a daemon that was away (a partition) are not sent over that \
             link, and events in pieces cross it uncompressed"
        }
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
}
