//! Membership and failure detection between daemons (SWIM, with the `foca`
//! crate) and discovery on the local network (UDP multicast beacons).
//!
//! Every daemon with federation on runs a foca member on a UDP socket (the
//! *gossip* address: its TCP main address's IP and port unless
//! `[federation] gossip` says otherwise); on every interface (`0.0.0.0`) it
//! gossips a routable address instead ([`advertise`]). It announces itself to its
//! configured peers and to daemons its beacons find; foca then probes
//! members, gossips who is up, and declares a silent one down within a few
//! seconds. What this module does with that:
//! - a member declared **down** loses its link at once (its routes are
//!   withdrawn and its advert pruned) instead of after the link's idle
//!   timeout — unless the link itself carried a control frame in the last
//!   3 s: a daemon back from a partition gossips stale "down"s about
//!   healthy daemons, which then rejoin under a renewed identity (same node
//!   id; a rename, not a departure);
//! - configured peers that are not up are announced to every 2 s (foca
//!   stops announcing once no member is up), so partitions heal and daemons
//!   started apart merge;
//! - a member that comes **up** through discovery is linked: the daemon with
//!   the smaller node id dials the other's TCP address.
//!
//! Bounds: foca's member table is bounded by `max_nodes` (discovered
//! daemons beyond it are not announced to; members gossiped past twice
//! `max_nodes` restart membership from the configured peers, counted as
//! `resets`, since foca itself has no bound); gossip datagrams over 1,400 bytes are never sent
//! and foca drops bad ones (counted); beacons are parsed by
//! [`Beacon::decode`] (fuzzed and property-tested) and bad ones counted.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use foca::{AccumulatingRuntime, BincodeCodec, Config, Foca, OwnedNotification, Timer};
use rand::{rngs::StdRng, SeedableRng};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::state::State;
use crate::sync::Locked;

pub(crate) mod advertise;
pub(crate) mod beacon;
use crate::state::members::Member;
pub use beacon::{Beacon, BeaconError};

/// How often a daemon sends its beacon.
const BEACON_EVERY: Duration = Duration::from_secs(1);
/// Largest gossip datagram read.
const MAX_DATAGRAM: usize = 1400;
/// How often configured peers that are not up are announced to again.
const REANNOUNCE_EVERY: Duration = Duration::from_secs(2);
/// How long with peers configured and no member up before a warning.
const ALONE_WARN_AFTER: Duration = Duration::from_secs(10);
/// A link that carried a control frame this recently is alive, whatever
/// SWIM says (each end probes the other's clock every second; 3 s leaves
/// room for a lane that a loaded host stalls for a moment).
const LINK_SILENT_NS: u64 = 3_000_000_000;
/// How long a link that SWIM declared down but that is still heard from is
/// watched: closed once silent for [`LINK_SILENT_NS`], kept if its daemon
/// comes back up (renewed) in SWIM meanwhile.
const DOWN_WATCH: Duration = Duration::from_secs(10);

/// The gossip address for this daemon: configured, else the TCP main
/// address (same IP and port number, UDP).
fn gossip_addr(st: &State) -> Option<SocketAddr> {
    match &st.config.federation.gossip {
        Some(a) => Some(*a),
        None => {
            st.lanes
                .iter()
                .find(|l| l.band == st.config.default_band)?
                .tcp
        }
    }
}

/// The UDP gossip address of configured peer `p` (`tcp://HOST:PORT`): the
/// same host and port.
fn peer_gossip(p: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    p.trim_start_matches("tcp://")
        .to_socket_addrs()
        .ok()?
        .next()
}

/// How the membership task has a daemon that discovery found dialed: the
/// federation task's dialer (`federation::dial_discovered`), handed in by
/// the federation task that starts membership.
pub(crate) type Dial = fn(Arc<Locked<State>>, SocketAddr);

/// The membership task: runs foca on the gossip socket until the lane
/// stops. Without a TCP listener (embedded) or with gossip off it returns.
pub(crate) async fn run(state: Arc<Locked<State>>, dialer: Dial) {
    let (me, bind, gossip, link, peers, cluster, max_nodes, discovery, group) = {
        let st = state.borrow();
        let f = &st.config.federation;
        if !f.gossip_enabled {
            return;
        }
        let Some(bind) = gossip_addr(&st) else {
            return;
        };
        // The address gossiped as this daemon's own: `advertise`, or the
        // interface address chosen at start for a socket on every
        // interface (advertise.rs), or the bound address.
        let gossip = match f.advertised {
            Some(a) if a.port() == 0 => SocketAddr::new(a.ip(), bind.port()),
            Some(a) => a,
            None => bind,
        };
        if gossip.ip().is_unspecified() {
            tracing::warn!(
                "membership off: gossip listens on {bind} (every interface) and no peer or route says which address other daemons reach this one at; set [federation] advertise = \"IP:{}\"",
                bind.port()
            );
            return;
        }
        let link = st
            .lanes
            .iter()
            .find(|l| l.band == st.config.default_band)
            .and_then(|l| l.tcp)
            .unwrap_or(gossip);
        // A listener on every interface is dialed at the gossiped IP.
        let link = if link.ip().is_unspecified() {
            SocketAddr::new(gossip.ip(), link.port())
        } else {
            link
        };
        (
            st.node.me(),
            bind,
            gossip,
            link,
            f.peers.clone(),
            f.cluster.clone(),
            f.max_nodes,
            f.discovery,
            f.beacon_group,
        )
    };
    let socket = match UdpSocket::bind(bind).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("membership off: cannot bind the gossip socket udp {bind}: {e}");
            return;
        }
    };
    tracing::info!(
        "membership: gossip on udp {bind}, known to peers as {gossip} (links at {link})"
    );
    state.borrow_mut().members.running = true;
    let identity = Member {
        node: me,
        gossip,
        link,
        started: crate::timing::now_ns(),
    };
    let mut config = Config::new_lan(
        NonZeroU32::new(max_nodes.clamp(1, u32::MAX as usize) as u32).unwrap_or(NonZeroU32::MIN),
    );
    // Quicker than memberlist's LAN defaults: a dead daemon is declared
    // down in about 3 s on a quiet network.
    config.probe_period = Duration::from_millis(500);
    config.probe_rtt = Duration::from_millis(200);
    config.suspect_to_down_after = Duration::from_secs(2);
    config.periodic_announce = Some(foca::PeriodicParams {
        frequency: Duration::from_secs(5),
        num_members: std::num::NonZeroUsize::MIN,
    });
    config.periodic_announce_to_down_members = Some(foca::PeriodicParams {
        frequency: Duration::from_secs(5),
        num_members: std::num::NonZeroUsize::MIN.saturating_add(1),
    });
    let fresh = || {
        Foca::new(
            identity.clone(),
            config.clone(),
            StdRng::from_os_rng(),
            BincodeCodec(bincode::config::standard()),
        )
    };
    let mut foca = fresh();
    let mut rt = AccumulatingRuntime::new();
    let (timers_tx, mut timers) = mpsc::unbounded_channel::<Timer<Member>>();
    // The configured peers' gossip addresses (their TCP address, unless
    // they configured otherwise), resolved once; one that does not resolve
    // yet is tried again at each re-announce.
    let mut peer_addrs: Vec<(String, Option<SocketAddr>)> =
        peers.iter().map(|p| (p.clone(), peer_gossip(p))).collect();
    // Announce to the configured peers now, and again every
    // REANNOUNCE_EVERY to those not up: foca stops its own periodic
    // announces once it knows no member up (a daemon that was cut off, or
    // whose first announce was lost because its peer was not listening
    // yet), and forgets down members; this is what heals a partition and
    // merges daemons that started apart.
    let announce_peers = |foca: &mut Foca<_, _, _, _>,
                          rt: &mut AccumulatingRuntime<Member>,
                          peer_addrs: &[(String, Option<SocketAddr>)],
                          up: &HashSet<SocketAddr>| {
        for p in peer_addrs.iter().filter_map(|(_, a)| *a) {
            if up.contains(&p) {
                continue;
            }
            let target = Member {
                node: 0,
                gossip: p,
                link: p,
                started: 0,
            };
            let _ = foca.announce(target, &mut *rt);
        }
    };
    announce_peers(&mut foca, &mut rt, &peer_addrs, &HashSet::new());
    let mut reannounce = tokio::time::interval_at(
        tokio::time::Instant::now() + REANNOUNCE_EVERY,
        REANNOUNCE_EVERY,
    );
    reannounce.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Since when no member has been up (for the warning).
    let mut alone_since = Some(tokio::time::Instant::now());
    let mut warned_alone = false;
    let beacons = if discovery {
        beacon_socket(group).await
    } else {
        None
    };
    let beacon = Beacon {
        node: me,
        gossip: match gossip {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(_) => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, gossip.port()),
        },
        link: match link {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(_) => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, link.port()),
        },
        cluster: cluster.clone(),
    }
    .encode();
    let mut beacon_tick = tokio::time::interval(BEACON_EVERY);
    let mut buf = vec![0u8; MAX_DATAGRAM * 2];
    let mut bbuf = vec![0u8; 512];
    // Discovered daemons announced to, and when (again once not up after
    // REANNOUNCE_EVERY; at most max_nodes entries, then it starts over).
    let mut announced: std::collections::HashMap<SocketAddr, tokio::time::Instant> =
        std::collections::HashMap::new();
    loop {
        drain(&state, &mut rt, &socket, &timers_tx, &identity, dialer).await;
        tokio::select! {
            r = socket.recv_from(&mut buf) => {
                if let Ok((n, _from)) = r {
                    if foca.handle_data(&buf[..n], &mut rt).is_err() {
                        state.borrow_mut().members.bad_datagrams += 1;
                    }
                    // foca has no member bound of its own: past twice
                    // max_nodes (members gossiped by a peer that invents
                    // them), start over from the configured peers.
                    if foca.num_members() > max_nodes.saturating_mul(2) {
                        tracing::warn!(
                            "{} members gossiped, over twice federation.max_nodes = {max_nodes}: membership restarts from the configured peers",
                            foca.num_members()
                        );
                        foca = fresh();
                        rt = AccumulatingRuntime::new();
                        announced.clear();
                        let mut st = state.borrow_mut();
                        st.members.up.clear();
                        st.members.resets += 1;
                        drop(st);
                        announce_peers(&mut foca, &mut rt, &peer_addrs, &HashSet::new());
                    }
                }
            }
            Some(t) = timers.recv() => {
                let _ = foca.handle_timer(t, &mut rt);
            }
            _ = reannounce.tick() => {
                for (p, a) in peer_addrs.iter_mut().filter(|(_, a)| a.is_none()) {
                    *a = peer_gossip(p);
                }
                let (up, bad) = {
                    let st = state.borrow();
                    let up: HashSet<SocketAddr> = st.members.up.values().map(|m| m.gossip).collect();
                    (up, st.members.bad_datagrams)
                };
                announce_peers(&mut foca, &mut rt, &peer_addrs, &up);
                // Say once when peers are configured and still nobody is up.
                if !up.is_empty() {
                    alone_since = None;
                    warned_alone = false;
                } else if !peers.is_empty() {
                    let since = *alone_since.get_or_insert_with(tokio::time::Instant::now);
                    if !warned_alone && since.elapsed() >= ALONE_WARN_AFTER {
                        warned_alone = true;
                        tracing::warn!(
                            "membership: no daemon is up {} s after start or since the last one went down, though [federation] peers names {}; \
                             check that UDP port {} is open between the hosts and that the peers reach this daemon at {gossip} \
                             (set [federation] advertise otherwise); {bad} gossip datagrams were refused",
                            since.elapsed().as_secs(),
                            peers.join(", "),
                            bind.port(),
                        );
                    }
                }
            }
            _ = beacon_tick.tick(), if beacons.is_some() => {
                if let Some(b) = &beacons {
                    let _ = b.send_to(&beacon, group).await;
                }
            }
            r = async { beacons.as_ref().expect("guarded").recv_from(&mut bbuf).await }, if beacons.is_some() => {
                if let Ok((n, _)) = r {
                    match Beacon::decode(&bbuf[..n]) {
                        Ok(b) if b.node != me && b.cluster == cluster => {
                            let g = SocketAddr::V4(b.gossip);
                            let due = announced.get(&g).is_none_or(|at| at.elapsed() >= REANNOUNCE_EVERY)
                                && !state.borrow().members.up.values().any(|m| m.gossip == g);
                            if announced.len() >= max_nodes {
                                announced.clear();
                            }
                            if foca.num_members() < max_nodes && due {
                                announced.insert(g, tokio::time::Instant::now());
                                let target = Member { node: b.node, gossip: g, link: SocketAddr::V4(b.link), started: 0 };
                                let _ = foca.announce(target, &mut rt);
                            }
                        }
                        Ok(_) => {}
                        Err(_) => state.borrow_mut().members.bad_datagrams += 1,
                    }
                }
            }
        }
    }
}

/// Sends what foca wants sent, schedules its timers, and acts on its
/// notifications.
async fn drain(
    state: &Arc<Locked<State>>,
    rt: &mut AccumulatingRuntime<Member>,
    socket: &UdpSocket,
    timers: &mpsc::UnboundedSender<Timer<Member>>,
    me: &Member,
    dialer: Dial,
) {
    while let Some((to, data)) = rt.to_send() {
        let _ = socket.send_to(&data, to.gossip).await;
    }
    while let Some((after, timer)) = rt.to_schedule() {
        let tx = timers.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(timer);
        });
    }
    while let Some(n) = rt.to_notify() {
        match n {
            OwnedNotification::MemberUp(m) if m.node != me.node => member_up(state, m, dialer),
            OwnedNotification::MemberDown(m) => member_down(state, &m),
            // The same daemon under a renewed identity (it learned it had
            // been declared down, e.g. by a daemon that was cut off): no
            // daemon went away, so its links stay.
            OwnedNotification::Rename(old, new) if old.node == new.node => {
                tracing::debug!("daemon {:#x} renewed its SWIM identity", new.node);
                let mut st = state.borrow_mut();
                if st.members.up.contains_key(&new.node) {
                    st.members.up.insert(new.node, new);
                }
            }
            OwnedNotification::Rename(old, new) => {
                member_down(state, &old);
                member_up(state, new, dialer);
            }
            OwnedNotification::Rejoin(_) => {
                tracing::info!(
                    "membership: another daemon had declared this one down (a partition healing, or stale gossip); rejoined under a renewed identity"
                );
            }
            OwnedNotification::Idle => {
                tracing::info!(
                    "membership: no daemon is up; announcing to the configured peers every {} s",
                    REANNOUNCE_EVERY.as_secs()
                );
            }
            _ => {}
        }
    }
}

fn member_up(state: &Arc<Locked<State>>, m: Member, dialer: Dial) {
    let mut st = state.borrow_mut();
    tracing::info!(
        "daemon {:#x} is up (gossip {}, links {})",
        m.node,
        m.gossip,
        m.link
    );
    let dial = st.config.federation.discovery
        && m.node > st.node.me()
        && !st.fed.links.contains_key(&m.node)
        && !st
            .config
            .federation
            .peers
            .iter()
            .any(|p| peer_gossip(p) == Some(m.gossip));
    let addr = m.link;
    st.members.up.insert(m.node, m);
    if dial {
        drop(st);
        dialer(state.clone(), addr);
    }
}

/// SWIM declared `m` down: forget it, and close its link unless the link
/// itself proves it alive (a control frame within [`LINK_SILENT_NS`]): a
/// daemon coming back from a partition gossips stale "down"s about healthy
/// daemons, which renew their identity at once; closing their links would
/// cut traffic the partition never touched. Such a link is watched and
/// closed once silent.
fn member_down(state: &Arc<Locked<State>>, m: &Member) {
    let mut st = state.borrow_mut();
    if st
        .members
        .up
        .get(&m.node)
        .is_some_and(|known| known.started > m.started)
    {
        // A renewed identity of that daemon is up already.
        return;
    }
    st.members.up.remove(&m.node);
    let now = crate::timing::now_ns();
    let Some(l) = st.fed.links.get(&m.node) else {
        // No link here: its advert goes now if no link reaches it either
        // (else after 10 s unreachable, or never while it is reachable).
        let forgot = st.node.declared_down(m.node);
        tracing::info!(
            "daemon {:#x} is down (SWIM){}",
            m.node,
            if forgot {
                "; its advert is dropped"
            } else {
                ""
            }
        );
        return;
    };
    let silent = now.saturating_sub(l.heard);
    if silent >= LINK_SILENT_NS {
        tracing::info!(
            "daemon {:#x} ({}) is down (SWIM): its links close",
            m.node,
            l.name
        );
        close_link(l);
        return;
    }
    tracing::info!(
        "SWIM declared daemon {:#x} ({}) down, but its link was heard from {} ms ago: it stays until silent for {} s",
        m.node,
        l.name,
        silent / 1_000_000,
        LINK_SILENT_NS / 1_000_000_000
    );
    let conn = l.conn;
    let node = m.node;
    drop(st);
    let state = state.clone();
    tokio::task::spawn_local(async move {
        let until = tokio::time::Instant::now() + DOWN_WATCH;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let st = state.borrow();
            if st.members.up.contains_key(&node) {
                return;
            }
            let Some(l) = st.fed.links.get(&node).filter(|l| l.conn == conn) else {
                return;
            };
            if crate::timing::now_ns().saturating_sub(l.heard) >= LINK_SILENT_NS {
                tracing::info!(
                    "daemon {node:#x} ({}) is down (SWIM) and its link silent: its links close",
                    l.name
                );
                close_link(l);
                return;
            }
        }
    });
}

/// Ends a link's connections now; each one's task forgets the link as it
/// closes, and the dialer, if any, tries again.
fn close_link(l: &crate::state::federation::Link) {
    l.outbox.kill();
    for b in l.bands.values() {
        b.queue.outbox.kill();
    }
}

/// A UDP socket joined to the beacon group on every interface's default.
async fn beacon_socket(group: SocketAddrV4) -> Option<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let make = || -> std::io::Result<UdpSocket> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.port())).into())?;
        s.join_multicast_v4(group.ip(), &Ipv4Addr::UNSPECIFIED)?;
        s.set_multicast_ttl_v4(1)?;
        s.set_multicast_loop_v4(true)?;
        s.set_nonblocking(true)?;
        UdpSocket::from_std(s.into())
    };
    match make() {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("discovery off: cannot join multicast group {group}: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn beacons_round_trip(node in any::<u64>(), a in any::<[u8; 4]>(), p in any::<u16>(), b in any::<[u8; 4]>(), q in any::<u16>(), cluster in "[a-z0-9-]{0,40}") {
            let beacon = Beacon {
                node,
                gossip: SocketAddrV4::new(a.into(), p),
                link: SocketAddrV4::new(b.into(), q),
                cluster,
            };
            prop_assert_eq!(Beacon::decode(&beacon.encode()), Ok(beacon));
        }

        #[test]
        fn any_datagram_is_a_beacon_or_a_named_error(d in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = Beacon::decode(&d);
        }
    }

    #[test]
    fn bad_beacons_say_what_is_wrong() {
        assert_eq!(Beacon::decode(b"XXXX1"), Err(BeaconError::Magic));
        assert_eq!(Beacon::decode(b"TWB1\x02"), Err(BeaconError::Version(2)));
        assert_eq!(
            Beacon::decode(b"TWB1\x01abc"),
            Err(BeaconError::Truncated(8))
        );
        let mut ok = Beacon {
            node: 1,
            gossip: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1),
            link: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 2),
            cluster: "c".into(),
        }
        .encode();
        ok.push(0);
        assert_eq!(
            Beacon::decode(&ok),
            Err(BeaconError::Malformed("bytes after the cluster name"))
        );
    }
}
