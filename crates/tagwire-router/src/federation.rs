//! The federation's lane task and the dialing of peers: [`run`] dials the
//! configured peers (and, through [`crate::membership`], the daemons
//! discovery finds), re-advertises local interest when subscriptions
//! change, probes link clocks and ticks what the links keep (reliable
//! windows, pulls in flight, parked deliveries); [`run_band`] opens a
//! dialed link's connection for each further band. A dialed connection is
//! served as any other ([`crate::connection`], [`crate::udp`]); what its
//! link frames do is [`crate::link`]'s.

use std::sync::Arc;
use std::time::Duration;

use tagwire_core::federation::NodeId;
use tagwire_core::qos::ProxyMode;
use tagwire_proto::{Interest, LinkFrame, ProxyAt};

use crate::state::State;
use crate::sync::Locked;
use crate::timing::now_ns;

/// How often the federation task looks for interest changes.
const TICK: Duration = Duration::from_millis(50);
/// How often each link's clock is probed.
const PROBE_EVERY_NS: u64 = 1_000_000_000;
/// First and longest wait between dial attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Failed connection attempts after which the dialer says what to check.
const HINT_AFTER: u32 = 3;

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

/// The federation's lane task: dials the configured peers, re-advertises
/// local interest when subscriptions change, probes link clocks.
pub(crate) async fn run(state: Arc<Locked<State>>, lane: crate::state::lanes::LaneOf, dscp: u8) {
    let peers = state.borrow().config.federation.peers.clone();
    state.borrow_mut().fed.dialer = Some((lane.clone(), dscp));
    for p in peers {
        tokio::task::spawn_local(dial(state.clone(), p, lane.clone(), dscp, false));
    }
    tokio::task::spawn_local(crate::membership::run(state.clone(), dial_discovered));
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
        // What compressing pieces spared comes off each link's bytes out.
        let fed = &mut st.fed;
        for (peer, saved) in fed.reliable.fragments.compression.saved.drain() {
            if let Some(l) = fed.links.get_mut(&peer) {
                l.bytes_out = l.bytes_out.saturating_sub(saved);
            }
        }
        crate::node_io::tell_healed(&mut st);
        let now = now_ns();
        if now >= next_probe {
            next_probe = now + PROBE_EVERY_NS;
            crate::acked_delivery::expire_due(&mut st, now);
            // Adverts unreachable for a while (a killed daemon) go.
            let expired = st.node.expire_unreachable(now);
            if expired > 0 {
                tracing::info!("forgot {expired} daemon(s) unreachable for 10 s");
            }
            // Events held for a daemon that is reachable again and that
            // could not go when it came back go now (core's hold, every
            // second).
            crate::node_io::execute(&mut st);
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

trait AsFdOwned {
    fn as_fd_owned(&self) -> Option<std::os::fd::OwnedFd>;
}

impl AsFdOwned for tokio::net::TcpStream {
    fn as_fd_owned(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_peer_hint_names_the_listen_fix_with_its_port() {
        let m = unreachable_hint("tcp://b:7710", 3);
        assert!(
            m.contains("after 3 attempts") && m.contains("--listen 0.0.0.0:7710"),
            "{m}"
        );
    }
}
