//! The daemon's federation state, as [`State`](super::State) holds
//! it: its node id and clock, its live links ([`Link`], one connection per
//! band) and their counters, and what `tagwire list` shows of them. Dialing
//! and the federation tick are the `federation` module's; the peer
//! exchange and link frames are `link`'s.

use std::collections::HashMap;
use std::sync::Arc;

use tagwire_core::federation::{NetClock, NodeId, Topology};
use tagwire_proto::admin::{DaemonInfo, FederationInfo, LinkInfo, TimeInfo};
use tagwire_proto::ErrorCode;

use super::lanes::LaneOf;
use crate::channel::{Channel, Outbox};
use crate::timing::now_ns;

/// The daemon's federation state: its routing view and its links.
#[derive(Debug)]
pub(crate) struct Federation {
    /// Live links by the peer's node id.
    pub links: HashMap<NodeId, Link>,
    /// The channel table generation last advertised.
    pub(crate) advertised: u64,
    /// Daemons became reachable (the daemons reachable now): clients are
    /// told on the next federation tick (`federation::tell_healed`).
    pub(crate) healed: Option<u32>,
    /// When clients were last told, so at most once a second.
    pub(crate) healed_told: Option<std::time::Instant>,
    /// Software clock skew for experiments: (offset ns, ppm).
    pub skew: (i64, i64),
    /// Where the daemon's clock readings start, for the skew's drift.
    epoch: u64,
    /// Band connections being dialed: (peer, band).
    pub(crate) band_dialing: std::collections::HashSet<(NodeId, String)>,
    /// How many of `links` this daemon dialed (kept by [`Federation::links_changed`]),
    /// read without the state lock by each band's lane: a lane looks for
    /// band connections to dial (under the lock) only when there are some,
    /// so a real-time lane of a daemon that dials no links never waits for
    /// the state lock on a timer.
    pub(crate) dialed_links: std::sync::Arc<crate::sync::Count>,
    /// The default band's lane and DSCP, for dialing discovered daemons.
    pub(crate) dialer: Option<(LaneOf, u8)>,
    /// How links to `tls://` peers handshake (`[federation.tls]`).
    pub(crate) tls: Option<crate::tls::LinkTls>,
    /// The network clock: this daemon's offset to the reference's time
    /// (core's [`NetClock`], fed with the probes of the parent link).
    pub net: NetClock,
    /// Refusals by each dialed peer (by address), for rate-limited logs;
    /// at most [`MAX_REFUSAL_COUNTS`] peers (then it starts over).
    pub(crate) refusals: HashMap<String, u32>,
    /// An advert's interest compiled off the lane for the frame its link
    /// handles next: (connection, origin, version, what compiling gave);
    /// see `link::precompile_advert`.
    pub(crate) compiled_advert: Option<CompiledFor>,
    /// Hop-by-hop acknowledgement: windows per link connection, the dedupe
    /// window, counters (see `reliable`).
    pub(crate) reliable: super::reliable::Reliable,
    /// Compression of events on links: which connections take it, the
    /// tags' codecs, counters (see `compress`).
    pub(crate) compress: super::compress::LinkCompression,
}

/// An advert's compiled interest and the advert it is for: (connection,
/// origin, version, what compiling gave).
pub(crate) type CompiledFor = (
    u64,
    NodeId,
    u64,
    Result<tagwire_core::federation::CompiledAdvert, tagwire_core::federation::FederationError>,
);

/// The routing tables' bounds configured in `[federation]`.
pub(crate) fn routing_limits(
    config: &crate::config::FederationConfig,
) -> tagwire_core::federation::Limits {
    tagwire_core::federation::Limits {
        max_nodes: config.max_nodes,
        max_interest: config.max_interest,
        ..Default::default()
    }
}

/// One live link.
#[derive(Debug)]
pub(crate) struct Link {
    /// The connection carrying it.
    pub conn: u64,
    /// The peer's name.
    pub name: String,
    /// The peer's address as seen here.
    pub addr: String,
    /// Whether this daemon dialed it.
    pub dialed: bool,
    /// The connection's outbox (for link control frames).
    pub outbox: Arc<Outbox>,
    /// Events routed to the peer wait here.
    pub queue: Arc<Channel>,
    /// When it came up (ns since the epoch).
    pub since: u64,
    /// Events and bytes received from the peer.
    pub events_in: u64,
    /// Bytes of events received.
    pub bytes_in: u64,
    /// Bytes of events forwarded to the peer (queued).
    pub bytes_out: u64,
    /// Last measured round trip, ns.
    pub rtt_ns: Option<u64>,
    /// Estimated offset of the peer's clock from ours, ns (peer − us).
    pub offset_ns: Option<i64>,
    /// The last probe sent: (id, t1).
    pub(crate) probe: (u32, u64),
    /// The link's other band connections (band name → its connection and
    /// forwarding queue); the first connection, above, is on the default band.
    pub bands: HashMap<String, BandConn>,
    /// The peer's bands and their TCP ports (from its `Peer`).
    pub band_ports: Vec<(String, u16)>,
    /// The peer's bands and their UDP ports (from an acceptor's `Peer` on
    /// link version 6; empty otherwise): where a link dialed over UDP opens
    /// its band sessions.
    pub udp_band_ports: Vec<(String, u16)>,
    /// The link protocol version spoken on it.
    pub version: u16,
    /// Bytes in and out at the last rate sample, and when it was taken.
    pub(crate) sampled: (u64, u64, u64),
    /// Throughput over the last second: bytes/s in and out.
    pub rate: (u64, u64),
    /// When a control frame (clock probe or reply, advert, pull) last came
    /// from the peer, ns since the epoch: the link's own proof of life,
    /// which a SWIM "down" must agree with before the link is closed.
    pub(crate) heard: u64,
}

/// One more connection of a link, for one priority band.
#[derive(Debug)]
pub(crate) struct BandConn {
    /// The connection.
    pub conn: u64,
    /// Events of this band routed to the peer wait here.
    pub queue: Arc<Channel>,
}

/// This daemon's node id: the configured one, else random per start (never
/// 0, which means "this daemon" in routes).
pub(crate) fn node_id(config: &crate::config::FederationConfig) -> NodeId {
    match config.node_id {
        0 => loop {
            let id = rand_u64();
            if id != 0 {
                break id;
            }
        },
        id => id,
    }
}

impl Federation {
    /// Recounts [`dialed_links`](Self::dialed_links) after `links` changed.
    pub(crate) fn links_changed(&self) {
        let n = self.links.values().filter(|l| l.dialed).count();
        self.dialed_links.set(n as u64);
    }

    /// A daemon with no links yet.
    pub fn new(config: &crate::config::FederationConfig) -> Self {
        Federation {
            links: HashMap::new(),
            advertised: 0,
            healed: None,
            healed_told: None,
            skew: (config.clock_offset_ms * 1_000_000, config.clock_skew_ppm),
            epoch: now_ns(),
            band_dialing: Default::default(),
            dialed_links: Default::default(),
            net: NetClock::default(),
            dialer: None,
            tls: None,
            refusals: HashMap::new(),
            compiled_advert: None,
            reliable: super::reliable::Reliable::new(config),
            compress: Default::default(),
        }
    }

    /// The daemon named `name` in `topo`, or the refusal of `what` (a
    /// request naming it) as `UnknownNode`, listing the daemons known.
    pub fn daemon_named(
        topo: &Topology,
        name: &str,
        what: &str,
    ) -> Result<NodeId, (ErrorCode, String)> {
        topo.node_named(name).ok_or_else(|| {
            let mut known: Vec<String> = topo.nodes().into_iter().map(|n| n.1).collect();
            known.sort();
            (
                ErrorCode::UnknownNode,
                format!(
                    "{what}{}: no daemon of this network is named so (known: {})",
                    tagwire_proto::excerpt(name),
                    known.join(", ")
                ),
            )
        })
    }

    /// The daemon's clock as other daemons see it: the system clock with
    /// the configured software skew (the namespaces of a test share one
    /// kernel clock).
    pub fn clock(&self) -> u64 {
        let now = now_ns();
        let (offset, ppm) = self.skew;
        let drift = (now.saturating_sub(self.epoch) as i128 * ppm as i128 / 1_000_000) as i64;
        now.saturating_add_signed(offset.saturating_add(drift))
    }

    /// What `tagwire time` shows.
    pub(crate) fn time_info(&self, topo: &Topology) -> TimeInfo {
        let local = self.clock();
        let reference = match self.net.reference() {
            0 => topo.me(),
            r => r,
        };
        TimeInfo {
            network_time_ns: self.net.network_time(local),
            local_time_ns: local,
            offset_ns: self.net.offset_at(local),
            error_ns: self.net.error(),
            synced: self.net.synced() || reference == topo.me(),
            reference: topo.name_of(reference).unwrap_or_default().to_owned(),
            reference_node: format!("{reference:016x}"),
        }
    }

    /// The network time: this daemon's clock corrected by its offset to the
    /// reference (see [`NetClock`]).
    pub fn network_time(&self) -> u64 {
        self.net.network_time(self.clock())
    }
}

impl Federation {
    /// What `tagwire list` shows; `default_band` names the links' first
    /// connections.
    pub(crate) fn info(
        &self,
        node: &tagwire_core::node::Node<Arc<Channel>>,
        default_band: &str,
    ) -> FederationInfo {
        let topo = node.topology();
        let counters = node.counters();
        let now = now_ns();
        let mut links: Vec<LinkInfo> = self
            .links
            .iter()
            .map(|(id, l)| {
                let queues = std::iter::once(&l.queue).chain(l.bands.values().map(|b| &b.queue));
                let (mut depth, mut dropped, mut out) = (0, 0, 0);
                for q in queues {
                    let inner = q.queue.borrow();
                    depth += inner.len();
                    dropped += inner.dropped();
                    out += q.delivered.get();
                }
                let mut bands: Vec<String> = l.bands.keys().cloned().collect();
                bands.sort();
                let mut by_band: std::collections::BTreeMap<String, u64> = l
                    .bands
                    .iter()
                    .map(|(b, c)| (b.clone(), c.queue.delivered.get()))
                    .collect();
                by_band.insert(default_band.to_owned(), l.queue.delivered.get());
                LinkInfo {
                    peer: l.name.clone(),
                    node: format!("{id:016x}"),
                    addr: l.addr.clone(),
                    dialed: l.dialed,
                    connection: l.conn,
                    up_secs: now.saturating_sub(l.since) / 1_000_000_000,
                    rtt_us: l.rtt_ns.map(|r| r / 1000),
                    clock_offset_us: l.offset_ns.map(|o| o / 1000),
                    events_in: l.events_in,
                    bytes_in: l.bytes_in,
                    events_out: out,
                    // Less what compressing its pieces spared since the
                    // federation task last took it off.
                    bytes_out: l.bytes_out.saturating_sub(
                        self.reliable
                            .fragments
                            .compression
                            .saved
                            .get(id)
                            .copied()
                            .unwrap_or(0),
                    ),
                    rate_in_bps: l.rate.0,
                    rate_out_bps: l.rate.1,
                    queue_depth: depth,
                    dropped,
                    bands,
                    events_out_by_band: by_band,
                    unacked: std::iter::once(l.conn)
                        .chain(l.bands.values().map(|b| b.conn))
                        .filter_map(|c| self.reliable.conns.get(&c))
                        .map(|cr| cr.send.len() as u64)
                        .sum(),
                    acknowledged: self.reliable.conns.contains_key(&l.conn),
                    version: l.version,
                }
            })
            .collect();
        links.sort_by(|a, b| a.peer.cmp(&b.peer));
        FederationInfo {
            node: format!("{:016x}", node.me()),
            daemons: topo.len(),
            unwanted: counters.unwanted,
            hop_limited: counters.hop_limited,
            refused_adverts: counters.refused_adverts,
            links,
            peers: 0,
            known: topo
                .nodes()
                .into_iter()
                .map(|(id, name, version, neighbors, interest)| DaemonInfo {
                    name,
                    node: format!("{id:016x}"),
                    version,
                    neighbors: neighbors.iter().map(|n| format!("{n:016x}")).collect(),
                    interest,
                })
                .collect(),
            members: Vec::new(),
            bad_datagrams: 0,
            reliable: self.reliable.counters.clone(),
            compression: with_pieces(
                &self.compress.counters,
                &self.reliable.fragments.compression.counters,
            ),
        }
    }
}

/// The compression counters of whole events (`whole`) with those of
/// pieces sent compressed (`pieces`, which counts only what it sends).
fn with_pieces(
    whole: &tagwire_proto::admin::CompressionInfo,
    pieces: &tagwire_proto::admin::CompressionInfo,
) -> tagwire_proto::admin::CompressionInfo {
    tagwire_proto::admin::CompressionInfo {
        compressed: whole.compressed + pieces.compressed,
        raw_bytes: whole.raw_bytes + pieces.raw_bytes,
        wire_bytes: whole.wire_bytes + pieces.wire_bytes,
        not_smaller: whole.not_smaller + pieces.not_smaller,
        decompressed: whole.decompressed,
        failed: whole.failed,
        pieces: pieces.pieces,
        pieces_decompressed: whole.pieces_decompressed,
    }
}

/// Most peers whose refusals are counted; past it the counts start over.
pub(crate) const MAX_REFUSAL_COUNTS: usize = 1024;

/// A random u64 from the OS (a node id).
fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    if crate::local::random_bytes(&mut b).is_err() {
        // No OS randomness: time and pid still differ between daemons.
        return now_ns() ^ ((std::process::id() as u64) << 32);
    }
    u64::from_le_bytes(b)
}
