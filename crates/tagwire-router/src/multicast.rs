//! IP multicast fan-out (`[[multicast]]`; docs/transports.md, "Multicast"):
//! the sockets and the I/O around core's [`tagwire_core::multicast`].
//!
//! Each group has one UDP socket, bound to the group's port, joined to the
//! group on the configured interface, with the entry's TTL and the band's
//! DSCP. Sending happens where an event is routed ([`crate::dispatch`]
//! calls [`send_event`](crate::state::multicast::send_event) with the state locked; the socket is non-blocking and
//! what it will not take is counted). Receiving runs on the band's lane
//! ([`serve`]): it also says once a second that this daemon is a member.
//! An event taken from the group is delivered and routed on as if it had
//! come over a link from its sender, skipping links to the group's live
//! members.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tagwire_core::federation::NodeId;
use tagwire_core::multicast::{Group, Groups, Received, MEMBER_EVERY_NS};
use tagwire_proto::admin::MulticastInfo;
use tagwire_proto::EventRef;

use crate::channel::{Outgoing, Staging};
use crate::state::multicast::{GroupIo, Multicast};
use crate::state::State;
use crate::sync::Locked;
use crate::timing::now_ns;

/// Opens every group's socket. Returns, per group, the band and the
/// receiving socket the band's lane serves. `Err` names the group and
/// what failed (bind, join, socket options).
pub(crate) fn open(
    st: &mut State,
    dscp_of: impl Fn(&str) -> u8,
) -> Result<Vec<(String, usize, std::net::UdpSocket)>, String> {
    let me = st.node.me();
    let epoch = now_ns();
    let token = st.config.federation.token.clone();
    let default_band = st.config.default_band.clone();
    let mut groups = Vec::new();
    let mut io = Vec::new();
    let mut serve = Vec::new();
    for (i, e) in st.config.multicast.iter().enumerate() {
        let band = e.band.clone().unwrap_or_else(|| default_band.clone());
        let what = |m: String| format!("multicast group {}: {m}", e.group);
        let socket = group_socket(e.group, e.interface, e.ttl, dscp_of(&band)).map_err(what)?;
        let send = socket
            .try_clone()
            .map_err(|err| what(format!("cannot clone the socket: {err}")))?;
        let tags = e
            .tags
            .iter()
            .map(|t| tagwire_core::tags::Pattern::parse(t).map_err(|err| what(err.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let key =
            tagwire_proto::datagram::group_key(e.secret(&token).as_bytes(), &e.group.to_string());
        groups.push(Group::new(tags, key, me, epoch, e.max_datagram));
        io.push(GroupIo {
            addr: e.group,
            band: band.clone(),
            interface: e.interface,
            ttl: e.ttl,
            socket: send,
            send_dropped: 0,
        });
        serve.push((band, i, socket));
    }
    st.mcast = Multicast {
        groups: Groups::new(groups),
        io,
    };
    Ok(serve)
}

/// A UDP socket on the group's port, joined to it on `interface`, sending
/// with `ttl` and `dscp`, looping back (two daemons on one host), non-blocking.
fn group_socket(
    group: SocketAddrV4,
    interface: Option<Ipv4Addr>,
    ttl: u32,
    dscp: u8,
) -> Result<std::net::UdpSocket, String> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| format!("cannot make a UDP socket: {e}"))?;
    s.set_reuse_address(true)
        .and_then(|()| s.set_reuse_port(true))
        .map_err(|e| format!("cannot set SO_REUSEADDR/SO_REUSEPORT: {e}"))?;
    let bind = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.port());
    s.bind(&SocketAddr::V4(bind).into())
        .map_err(|e| format!("cannot bind {bind}: {e}"))?;
    let iface = interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
    s.join_multicast_v4(group.ip(), &iface)
        .map_err(|e| format!("cannot join on interface {iface}: {e}"))?;
    // Only the groups this socket joined, not every group any socket of
    // the host joined on that port.
    let _ = s.set_multicast_all_v4(false);
    if let Some(i) = interface {
        s.set_multicast_if_v4(&i)
            .map_err(|e| format!("cannot send on interface {i}: {e}"))?;
    }
    s.set_multicast_ttl_v4(ttl)
        .map_err(|e| format!("cannot set TTL {ttl}: {e}"))?;
    s.set_multicast_loop_v4(true)
        .map_err(|e| format!("cannot set IP_MULTICAST_LOOP: {e}"))?;
    s.set_nonblocking(true)
        .map_err(|e| format!("cannot make the socket non-blocking: {e}"))?;
    let s: std::net::UdpSocket = s.into();
    if let Err(e) = crate::priority::set_dscp(&s, dscp) {
        tracing::debug!("multicast group {group}: cannot set DSCP {dscp}: {e}");
    }
    Ok(s)
}

/// Whether an event of `tag` from `origin` that arrived over a link is the
/// first copy this daemon sees (a group may have brought it already);
/// always for tags no group covers.
pub(crate) fn first_copy(st: &mut State, origin: NodeId, ev: &EventRef<'_>) -> bool {
    let Some(i) = st.mcast.groups.group_for(ev.tag) else {
        return true;
    };
    let publisher = tagwire_core::proxy::publisher_key(ev.publisher);
    st.mcast
        .groups
        .get_mut(i)
        .is_none_or(|g| g.first_copy(origin, publisher, ev.seq))
}

/// Serves group `idx` on this lane: takes its datagrams and says once a
/// second that this daemon is a member.
pub(crate) async fn serve(
    state: Arc<Locked<State>>,
    idx: usize,
    socket: tokio::net::UdpSocket,
    band: Arc<str>,
) {
    let group = state.borrow().mcast.io.get(idx).map(|g| g.addr);
    let Some(group) = group else { return };
    let mut buf = vec![0u8; tagwire_proto::datagram::HARD_MAX_DATAGRAM + 1];
    let mut tick = tokio::time::interval(std::time::Duration::from_nanos(MEMBER_EVERY_NS));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let d = {
                    let mut st = state.borrow_mut();
                    let now = now_ns();
                    st.mcast.groups.get_mut(idx).map(|g| {
                        g.expire(now);
                        let mut d = BytesMut::new();
                        g.encode_member(now / 1_000_000, &mut d);
                        d
                    })
                };
                if let Some(d) = d {
                    if socket.send_to(&d, group).await.is_err() {
                        if let Some(io) = state.borrow_mut().mcast.io.get_mut(idx) {
                            io.send_dropped += 1;
                        }
                    }
                }
            }
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, _)) => on_datagram(&state, idx, &band, &buf[..n]),
                Err(e) => {
                    tracing::debug!("multicast group {group}: recv: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// A datagram on group `idx`: judged by core; an event is delivered here
/// and routed on as if from its sender.
fn on_datagram(state: &Locked<State>, idx: usize, band: &str, bytes: &[u8]) {
    let mut st = state.borrow_mut();
    let now = now_ns();
    let Some(g) = st.mcast.groups.get_mut(idx) else {
        return;
    };
    let (sender, ge) = match g.on_datagram(bytes, now, now / 1_000_000) {
        Received::Event { sender, event } => (sender, event),
        Received::Member { .. } | Received::Own | Received::Dropped => return,
    };
    let event = Bytes::copy_from_slice(ge.event);
    let ev = match EventRef::parse(&event) {
        Ok(ev) => ev,
        Err(_) => {
            g.note_bad();
            return;
        }
    };
    let publisher = tagwire_core::proxy::publisher_key(ev.publisher);
    if !g.first_copy(ge.origin, publisher, ev.seq) {
        return;
    }
    let Ok(deadline) = st.node.admit_forward(ge.origin, ge.hops, &ev, now_ns) else {
        return;
    };
    let mut out = Outgoing::own_buffer(&event);
    let mut stage = Staging::default();
    stage.arrived = now;
    let route = crate::dispatch::Route {
        origin: ge.origin,
        hops: ge.hops.saturating_add(1),
        from: Some(sender),
        band: Some(band),
        group: Some(idx),
        ..crate::dispatch::Route::default()
    };
    crate::dispatch::deliver_routed(&mut st, &mut stage, &mut out, &ev, deadline, route);
    let _ = stage.flush();
}

/// The groups as `tagwire list` shows them.
pub(crate) fn infos(st: &State) -> Vec<MulticastInfo> {
    let now = now_ns();
    st.mcast
        .groups
        .iter()
        .zip(&st.mcast.io)
        .map(|(g, io)| {
            let c = g.counters();
            MulticastInfo {
                group: io.addr.to_string(),
                band: io.band.clone(),
                interface: io.interface.map(|i| i.to_string()),
                ttl: io.ttl,
                tags: g.tags().iter().map(|p| p.as_str().to_owned()).collect(),
                members: g
                    .live_members(now)
                    .iter()
                    .map(|n| format!("{n:016x}"))
                    .collect(),
                sent: c.sent,
                too_large: c.too_large,
                send_dropped: io.send_dropped,
                received: c.received,
                lost: c.lost,
                reordered: c.reordered,
                duplicate: c.duplicate,
                bad: c.bad,
                refused: c.refused,
            }
        })
        .collect()
}
