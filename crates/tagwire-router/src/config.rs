//! Router configuration: listeners and limits. Every field has a default, so
//! `tagwired` runs with no file; a TOML file (see `docs/configuration.md`)
//! overrides the defaults and command-line flags override the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use band::BandConfig;
pub(crate) mod auth;
pub(crate) mod band;
pub(crate) mod bandwidth;
pub(crate) mod cluster;
pub(crate) mod error;
pub(crate) mod history;
pub(crate) mod metrics;
pub(crate) mod mqtt;
pub(crate) mod multicast;
pub(crate) mod qos;
pub(crate) mod store;
pub(crate) mod udp;

pub use auth::{AclRule, AuthConfig, TokenConfig};
pub use bandwidth::BandwidthConfig;
pub use cluster::ClusterConfig;
pub use error::ConfigError;
pub use metrics::MetricsConfig;
pub use multicast::MulticastConfig;
pub use store::{Fsync, StoreConfig};
pub use udp::UdpConfig;

/// Default TCP listen address.
pub const DEFAULT_TCP: &str = "127.0.0.1:7700";
/// Largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// The multicast group and port beacons go to by default.
pub const DEFAULT_BEACON_GROUP: &str = "239.255.42.99:7448";

/// Where the router listens and what it allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// Name reported in `Welcome` and `tagwire list`.
    pub name: String,
    /// TCP listen address; `None` disables TCP.
    pub tcp: Option<SocketAddr>,
    /// Unix socket path; `None` disables the Unix listener.
    pub unix: Option<PathBuf>,
    /// Limits on tables, queues and frames.
    pub limits: Limits,
    /// How clients prove who they are (`[auth]`).
    pub auth: AuthConfig,
    /// What identities other than the owner may do (`[[acl]]` rules).
    pub acl: Vec<AclRule>,
    /// Where endpoint reservations are kept across a restart: written at
    /// shutdown (live endpoints included), read at start. `None`: not kept.
    /// `tagwired` uses `reservations.json` in the private runtime directory.
    pub reservations_file: Option<PathBuf>,
    /// TLS on the TCP listener (`[tls]`); `None`: plain TCP.
    pub tls: Option<TlsConfig>,
    /// Priority bands, lowest priority first (`[[bands]]`; default `low`,
    /// `normal`, `high`, `critical`: see the `band` module).
    pub bands: Vec<BandConfig>,
    /// The band the main `tcp` / `unix` listeners serve.
    pub default_band: String,
    /// Daemon-level QoS defaults (`[qos]`, property = "value"; see
    /// docs/configuration.md, "QoS reference").
    pub qos: std::collections::BTreeMap<String, String>,
    /// Links to other daemons (`[federation]`; docs/federation.md).
    pub federation: FederationConfig,
    /// Bandwidth reservations on the egress interface (`[bandwidth]`;
    /// the `reserve` subscribe property).
    pub bandwidth: BandwidthConfig,
    /// The Prometheus metrics and web dashboard listener (`[metrics]`;
    /// docs/metrics.md). Off unless `listen` is set.
    pub metrics: MetricsConfig,
    /// A cluster in one step (`[cluster]`: a shared secret and daemons to
    /// join; see the `cluster` module). Applied when the router starts.
    pub cluster: ClusterConfig,
    /// The MQTT listener (`[mqtt]`; docs/mqtt.md). Off unless `listen` is set.
    pub mqtt: mqtt::MqttConfig,
    /// The durable store of `reliability=durable` tags (`[store]`;
    /// docs/reliability.md).
    pub store: StoreConfig,
    /// The UDP listener (`[udp]`; docs/transports.md). Off unless `listen`
    /// is set.
    pub udp: UdpConfig,
    /// IP multicast groups tags' events go to on the LAN segment
    /// (`[[multicast]]`; docs/transports.md, "Multicast"). None by default.
    pub multicast: Vec<MulticastConfig>,
}

/// The `[federation]` section: which daemons to link with and the bounds of
/// the routing tables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FederationConfig {
    /// Daemons to keep a link with, `tcp://HOST:PORT`, `HOST:PORT`, or
    /// `tls://HOST:PORT` for a peer that serves TLS (needs
    /// `[federation.tls]`; also `tagwired --peer`, repeatable). Unreachable
    /// ones are retried with backoff (100 ms doubling to 1 s).
    pub peers: Vec<String>,
    /// How links to `tls://` peers verify the peer (and, for a peer that
    /// requires client certificates, what this daemon presents).
    pub tls: Option<PeerTlsConfig>,
    /// Only daemons with the same cluster name link.
    pub cluster: String,
    /// The token this daemon presents when it dials a peer whose
    /// authentication is on (the peer must grant it the admin right).
    pub token: String,
    /// Most daemons known (adverts beyond it are refused).
    pub max_nodes: usize,
    /// Most interest entries one daemon may advertise.
    pub max_interest: usize,
    /// Most live links.
    pub max_links: usize,
    /// Events queued per link before the oldest is dropped.
    pub link_queue_length: usize,
    /// Software clock offset for experiments, ms (added to what this daemon
    /// stamps and probes with; the namespaces of a test share one clock).
    pub clock_offset_ms: i64,
    /// Software clock drift for experiments, parts per million.
    pub clock_skew_ppm: i64,
    /// This daemon's node id (0: random per start, the default). Set it
    /// to choose the time reference (the smallest id) in an experiment.
    pub node_id: u64,
    /// Run SWIM membership and failure detection (foca) on UDP.
    pub gossip_enabled: bool,
    /// The UDP gossip address (default: the TCP main address, as UDP).
    pub gossip: Option<SocketAddr>,
    /// The address other daemons reach this one at, `HOST:PORT`: gossiped
    /// as its SWIM identity (the port is the gossip port) and dialed for
    /// its links (at its TCP port). Default: the gossip address, or, when
    /// that is on every interface (`0.0.0.0`), the address of the interface
    /// routing to the first peer, else to the default route (see
    /// docs/federation.md, "Membership").
    pub advertise: Option<String>,
    /// `advertise`, or the address chosen for it, as resolved when the
    /// router starts (port 0: the gossip socket's own port). Not read from
    /// the file.
    #[serde(skip)]
    pub advertised: Option<SocketAddr>,
    /// Find daemons of the same cluster on the local network by multicast
    /// beacons, and link with them (off by default: a daemon joins a
    /// network only when told to; `tagwired --discovery`).
    pub discovery: bool,
    /// The beacons' multicast group and port.
    pub beacon_group: std::net::SocketAddrV4,
    /// Reliable events (`reliability=reliable`, `exactly_once`, `durable`)
    /// held per link connection until the peer acknowledges them (at most
    /// 262,144, the protocol's window); see docs/reliability.md.
    pub reliable_window_events: usize,
    /// And their bytes.
    pub reliable_window_bytes: usize,
    /// What a full window does with one more reliable event.
    pub reliable_window_full: ReliableWindowFull,
    /// (origin daemon, publisher) pairs the dedupe window remembers; at the
    /// bound the least recently used half is forgotten.
    pub reliable_dedupe_keys: usize,
    /// Reliable events published here held per daemon that is away
    /// (unreachable after being reached: a partition), sent to it once it
    /// is reachable again (docs/reliability.md, "A partition"); at the
    /// bound the oldest is dropped (counted `away_dropped`). 0 turns the
    /// hold off.
    pub reliable_hold_events: usize,
    /// And their bytes, per away daemon (outside
    /// `limits.max_buffered_bytes`, like the windows: mind
    /// `reliable_hold_daemons` × this).
    pub reliable_hold_bytes: usize,
    /// How long an event is held, and an away daemon remembered, in
    /// seconds; older ones are dropped (counted).
    pub reliable_hold_secs: u64,
    /// Most away daemons held for at once; at the bound the one away
    /// longest is forgotten with what it held (counted).
    pub reliable_hold_daemons: usize,
    /// On a link of version 4, a reliable event larger than this crosses in
    /// pieces of this many bytes (`Fragment`), resumable after a reconnect
    /// (docs/reliability.md, "Large payloads"); 4,096 ..= 16 MiB.
    pub fragment_size: usize,
    /// Most events this daemon reassembles from pieces at once; at the
    /// bound the oldest incomplete one is dropped (counted, logged).
    pub fragment_max_events: usize,
    /// Most bytes those reassemblies hold together (each is charged its
    /// whole length when its first piece comes; outside
    /// `limits.max_buffered_bytes`, like the reliable windows); an event
    /// larger than this is refused (the link closes naming it).
    pub fragment_max_bytes: usize,
    /// The newest link protocol version this daemon speaks, 2 ..= 7
    /// (default 7, the newest): lower it to link as a daemon of that
    /// version would during a rolling upgrade, or to test one (5: a
    /// `udp://` link carries every band on the default band's session; 6:
    /// no `ReliableTo`, so events held for a daemon away are not sent
    /// over that link).
    pub link_version: u16,
}

/// What a link connection's full reliability window does with one more
/// reliable event (`[federation] reliable_window_full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReliableWindowFull {
    /// The oldest unacknowledged event is given up for that link (counted,
    /// logged) to take the new one.
    #[default]
    DropOldest,
    /// The new event does not cross that link (counted, logged; the
    /// publisher's daemon tells the publisher).
    Reject,
}

impl Default for FederationConfig {
    fn default() -> Self {
        FederationConfig {
            peers: Vec::new(),
            tls: None,
            cluster: "tagwire".into(),
            token: String::new(),
            max_nodes: 1024,
            max_interest: 4096,
            max_links: 64,
            link_queue_length: 65_536,
            clock_offset_ms: 0,
            clock_skew_ppm: 0,
            node_id: 0,
            gossip_enabled: true,
            gossip: None,
            advertise: None,
            advertised: None,
            discovery: false,
            beacon_group: DEFAULT_BEACON_GROUP
                .parse()
                .expect("the default beacon group parses"),
            reliable_window_events: 65_536,
            reliable_window_bytes: 16 << 20,
            reliable_window_full: ReliableWindowFull::DropOldest,
            reliable_dedupe_keys: 65_536,
            reliable_hold_events: 65_536,
            reliable_hold_bytes: 16 << 20,
            reliable_hold_secs: 60,
            reliable_hold_daemons: 16,
            fragment_size: 1 << 20,
            fragment_max_events: 16,
            fragment_max_bytes: 1 << 30,
            link_version: tagwire_proto::LINK_VERSION,
        }
    }
}

impl FederationConfig {
    /// Checks peer addresses and bounds, naming the bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for p in &self.peers {
            let (tls, a) = peer_address(p);
            let ok = a.rsplit_once(':').is_some_and(|(h, port)| {
                !h.is_empty() && !h.contains("://") && port.parse::<u16>().is_ok_and(|p| p != 0)
            });
            if !ok {
                return Err(ConfigError::Invalid(format!(
                    "federation.peers: {p:?} is not tcp://HOST:PORT, tls://HOST:PORT or udp://HOST:PORT"
                )));
            }
            if tls && self.tls.is_none() {
                return Err(ConfigError::Invalid(format!(
                    "federation.peers: {p:?} speaks TLS, and nothing says how to verify it: set \
                     [federation.tls] ca (or tagwired --peer-tls-ca PEM) to the CA that signed \
                     its certificate"
                )));
            }
        }
        if let Some(t) = &self.tls {
            if t.cert.is_some() != t.key.is_some() {
                return Err(ConfigError::Invalid(
                    "federation.tls: a client certificate needs its key: set both cert and key \
                     (--peer-tls-cert and --peer-tls-key)"
                        .into(),
                ));
            }
        }
        for (name, v) in [
            ("max_nodes", self.max_nodes),
            ("max_interest", self.max_interest),
            ("max_links", self.max_links),
            ("link_queue_length", self.link_queue_length),
            ("reliable_window_events", self.reliable_window_events),
            ("reliable_window_bytes", self.reliable_window_bytes),
            ("reliable_dedupe_keys", self.reliable_dedupe_keys),
            ("reliable_hold_bytes", self.reliable_hold_bytes),
            ("reliable_hold_daemons", self.reliable_hold_daemons),
            ("fragment_max_events", self.fragment_max_events),
            ("fragment_max_bytes", self.fragment_max_bytes),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid(format!(
                    "federation.{name} = 0: it must be at least 1"
                )));
            }
        }
        let versions = tagwire_proto::MIN_LINK_VERSION..=tagwire_proto::LINK_VERSION;
        if !versions.contains(&self.link_version) {
            return Err(ConfigError::Invalid(format!(
                "federation.link_version = {} is outside {}..={} (the link versions this daemon speaks)",
                self.link_version,
                versions.start(),
                versions.end()
            )));
        }
        if !(4096..=16 << 20).contains(&self.fragment_size) {
            return Err(ConfigError::Invalid(format!(
                "federation.fragment_size = {} is outside 4096..=16777216",
                self.fragment_size
            )));
        }
        if self.reliable_window_events > tagwire_proto::MAX_RELIABLE_WINDOW {
            return Err(ConfigError::Invalid(format!(
                "federation.reliable_window_events = {} is over the protocol's {}",
                self.reliable_window_events,
                tagwire_proto::MAX_RELIABLE_WINDOW
            )));
        }
        if self.max_interest > tagwire_proto::MAX_ADVERT_INTEREST {
            return Err(ConfigError::Invalid(format!(
                "federation.max_interest = {} is over the protocol's {}",
                self.max_interest,
                tagwire_proto::MAX_ADVERT_INTEREST
            )));
        }
        if !self.beacon_group.ip().is_multicast() {
            return Err(ConfigError::Invalid(format!(
                "federation.beacon_group = {} is not a multicast address",
                self.beacon_group
            )));
        }
        if self.cluster.len() > 255 {
            return Err(ConfigError::Invalid(
                "federation.cluster is longer than 255 bytes".into(),
            ));
        }
        if self.clock_skew_ppm.abs() > 100_000 || self.clock_offset_ms.abs() > 86_400_000 {
            return Err(ConfigError::Invalid(
                "federation.clock_skew_ppm must be within ±100000 and clock_offset_ms within a day"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// `tls://HOST:PORT` → `(true, "HOST:PORT")`; `tcp://HOST:PORT`,
/// `udp://HOST:PORT` and `HOST:PORT` → `(false, "HOST:PORT")` (see
/// [`is_udp_peer`]).
pub fn peer_address(peer: &str) -> (bool, &str) {
    match peer.strip_prefix("tls://") {
        Some(a) => (true, a),
        None => (
            false,
            peer.strip_prefix("tcp://")
                .or_else(|| peer.strip_prefix("udp://"))
                .unwrap_or(peer),
        ),
    }
}

/// Whether a peer is dialed over UDP (`udp://HOST:PORT`: a best-effort
/// link in datagrams, docs/transports.md).
pub fn is_udp_peer(peer: &str) -> bool {
    peer.starts_with("udp://")
}

/// The `[federation.tls]` section: how this daemon's links to `tls://`
/// peers verify them, and the client certificate it presents to a peer whose
/// `[tls] client_ca` requires one. Relative paths in a configuration file are
/// relative to that file's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerTlsConfig {
    /// CA certificates (PEM) that must have signed the peers' certificates.
    pub ca: PathBuf,
    /// This daemon's client certificate chain (PEM), for peers that require
    /// one; needs `key`. Its CN is this daemon's identity there
    /// (`cert:<CN>`), unless the federation token, proven in the
    /// handshake, names another (a token decides the identity).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// The name to expect in peers' certificates when the address's host is
    /// not one of its names.
    #[serde(default)]
    pub server_name: Option<String>,
}

/// The `[tls]` section: when present the TCP listener speaks TLS only.
/// Relative paths in a configuration file are relative to that file's
/// directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain, PEM (leaf first).
    pub cert: PathBuf,
    /// The server's private key, PEM (PKCS#8, RSA or EC).
    pub key: PathBuf,
    /// CA certificates, PEM. When set, every client must present a
    /// certificate signed by one of them (mutual TLS); its subject CN
    /// becomes the connection's identity `cert:<CN>`.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// Bounds on every table and queue the router keeps. At each bound the
/// documented behaviour applies (refusal with `LimitReached`, or the
/// subscriber's discard policy for queues).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Maximum frame size offered in the handshake, bytes.
    pub max_frame: u32,
    /// Largest payload a shared-memory region carries (bytes, the chunk
    /// size); larger payloads of that publisher go over the socket.
    pub shm_max_packet: u64,
    /// Descriptors per region: packets the publisher may write ahead of the
    /// daemon's reading them; beyond it the publisher sends payloads over
    /// the socket until the daemon catches up.
    pub shm_slots: u32,
    /// Pin rows per region: the daemon takes one, each same-host subscriber
    /// connection reading the region one; further subscribers get copies.
    pub shm_consumers: u32,
    /// Payloads of one region a same-host subscriber connection may hold by
    /// reference at once (queued in the daemon, in flight, in its queue or
    /// held by the application); beyond it that subscriber gets copies. The
    /// region has `shm_slots + shm_pins + 2` data chunks.
    pub shm_pins: u32,
    /// Regions open at once (one per same-host publisher endpoint); beyond
    /// it publishers fall back to the socket (`shm=require`: refused).
    pub shm_max_regions: usize,
    /// Bytes of shared memory all regions together may reserve.
    pub shm_max_bytes: u64,
    /// Regions the publishers of one identity may hold at once (`None`: a
    /// quarter of `shm_max_regions`), so one identity cannot take every
    /// region from the others; beyond it its publishers use the socket.
    pub shm_max_regions_per_identity: Option<usize>,
    /// Bytes of shared memory the regions of one identity may reserve
    /// (`None`: a quarter of `shm_max_bytes`).
    pub shm_max_bytes_per_identity: Option<u64>,
    /// Concurrent connections; further ones get `LimitReached` and are closed.
    pub max_connections: usize,
    /// Endpoints in the whole router.
    pub max_endpoints: usize,
    /// Subscriptions in the whole router.
    pub max_subscriptions: usize,
    /// Endpoints one connection may declare.
    pub max_endpoints_per_connection: usize,
    /// Subscriptions one connection may hold.
    pub max_subscriptions_per_connection: usize,
    /// Bytes one subscriber queue may hold (its event bound is its `max_queue_length`).
    pub max_queue_bytes: usize,
    /// Bytes of control replies (Ok, Error, Pong, admin) waiting for a client
    /// that does not read; past it the connection is closed.
    pub max_control_bytes: usize,
    /// Distinct tags tracked for `tagwire list`; beyond it new tags are counted but not listed.
    pub max_tracked_tags: usize,
    /// Events held until their start time, in the whole router; beyond it
    /// (or [`Limits::max_deferred_bytes`]) such events get `LimitReached`.
    pub max_deferred_events: usize,
    /// Bytes of events held until their start time.
    pub max_deferred_bytes: usize,
    /// Largest `history` (events kept per tag and publisher) a `[qos]` or
    /// tag layer may set; over it the change is refused naming this bound.
    pub max_history: usize,
    /// Tags that keep history at once; events of one more are not recorded.
    pub max_history_tags: usize,
    /// Bytes of history in the whole router (counted at what they keep
    /// alive); at the bound a tag's new event replaces its own oldest ones.
    pub max_history_bytes: usize,
    /// Bytes of history of one tag, all its publishers together.
    pub max_history_bytes_per_tag: usize,
    /// Publishers whose history one tag keeps; one more replaces the one
    /// that published least recently.
    pub max_history_publishers_per_tag: usize,
    /// Most events in one pull reply; a longer answer says where to go on.
    pub history_reply_events: usize,
    /// Most event bytes in one pull reply (also kept under the connection's
    /// frame limit).
    pub history_reply_bytes: usize,
    /// Connections one identity may hold open; more get `LimitReached`.
    pub max_connections_per_identity: usize,
    /// Endpoints one identity may hold, across its connections.
    pub max_endpoints_per_identity: usize,
    /// Subscriptions one identity may hold, across its connections.
    pub max_subscriptions_per_identity: usize,
    /// Filters and mapping filters attached through one identity's
    /// endpoints (subscription properties and admin requests).
    pub max_filters_per_identity: usize,
    /// Compiled memory of those filters (regex automata included, as
    /// `Filter::memory_estimate` counts it), bytes.
    pub max_filter_bytes_per_identity: usize,
    /// Seconds an endpoint name stays reserved for its session after the
    /// connection drops without a `Close` (or the daemon restarts), so that
    /// the session, reconnecting, gets it back and nobody else can take it.
    pub endpoint_reservation_secs: u64,
    /// Endpoint names held in reservation at once; past it the oldest
    /// reservation is forgotten.
    pub max_reservations: usize,
    /// The router-wide memory budget, bytes: read buffers grown for frames
    /// larger than the 64 KiB read chunk plus every subscriber queue's bytes
    /// (counted at what they keep alive). A connection whose next frame would
    /// pass it gets `LimitReached` and is closed; an event that would pass it
    /// gets its channel's discard policy. The daemon never aborts on it.
    pub max_buffered_bytes: usize,
    /// Connections accepted but not yet through the handshake; further ones
    /// get `LimitReached` and are closed. They do not count toward
    /// [`Limits::max_connections`], which bounds established connections.
    pub max_pending_handshakes: usize,
    /// Time a new connection has to complete its handshake before it is
    /// closed (an `Error` with `HandshakeRequired` says so). TOML: seconds,
    /// fractions allowed.
    #[serde(with = "seconds")]
    pub handshake_timeout: Duration,
    /// Silence after which the router pings an established connection; if
    /// the peer still sends nothing for as long again, it is closed. TOML:
    /// seconds, fractions allowed.
    #[serde(with = "seconds")]
    pub idle_timeout: Duration,
    /// Protocol errors (malformed or unknown frames, publishing on an
    /// undeclared endpoint, bad tags, ...) one connection may cause; at the
    /// bound it gets a last `Error` saying so and is closed.
    pub max_protocol_errors: u32,
    /// Most work, in work units, that evaluating filters may cost for one
    /// routed event, summed over all its filtered subscriptions (issue 24
    /// item 9; `FilterLimits::max_event_work`, docs/filters.md "Budget per
    /// event"). Past it the event's remaining filtered subscriptions do not
    /// get it, and the router logs (rate-limited) the tag and subscription.
    pub max_filter_work_per_event: u64,
    /// The largest event a client (protocol version 5) may publish in
    /// pieces, bytes (at most 4 GiB; docs/reliability.md, "Pieces on
    /// client connections"). A larger one closes that connection.
    pub max_pieced_event: u64,
    /// Events one session (or session-less connection) may have in pieces
    /// at once; past it the oldest incomplete one is dropped.
    pub max_pieced_per_connection: usize,
    /// How long an incomplete event in pieces is kept without a new piece
    /// (it outlives its connection for this long, for the session's
    /// resume). TOML: seconds, fractions allowed.
    #[serde(with = "seconds")]
    pub piece_timeout: Duration,
}

/// `Duration` as (fractional) seconds in TOML, within 1 ms ..= 1 day.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        if !(0.001..=86_400.0).contains(&secs) {
            return Err(serde::de::Error::custom(format!(
                "{secs} seconds is outside 0.001..=86400"
            )));
        }
        Ok(Duration::from_secs_f64(secs))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame: tagwire_proto::limits::DEFAULT_MAX_FRAME,
            max_connections: 4096,
            max_endpoints: 100_000,
            max_subscriptions: 1_000_000,
            max_endpoints_per_connection: 4096,
            max_subscriptions_per_connection: 65_536,
            max_queue_bytes: 64 * 1024 * 1024,
            max_control_bytes: 4 * 1024 * 1024,
            max_tracked_tags: 10_000,
            max_deferred_events: 65_536,
            max_deferred_bytes: 64 * 1024 * 1024,
            max_history: 10_000,
            max_history_tags: 4096,
            max_history_bytes: 256 * 1024 * 1024,
            max_history_bytes_per_tag: 16 * 1024 * 1024,
            max_history_publishers_per_tag: 64,
            history_reply_events: 1024,
            history_reply_bytes: 1024 * 1024,
            max_connections_per_identity: 1024,
            max_endpoints_per_identity: 25_000,
            max_subscriptions_per_identity: 250_000,
            max_filters_per_identity: 100_000,
            max_filter_bytes_per_identity: 256 * 1024 * 1024,
            endpoint_reservation_secs: 30,
            max_reservations: 100_000,
            max_buffered_bytes: 1024 * 1024 * 1024,
            max_pending_handshakes: 256,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_protocol_errors: 64,
            max_filter_work_per_event: tagwire_core::filter::DEFAULT_MAX_EVENT_WORK,
            max_pieced_event: tagwire_proto::MAX_PIECED_EVENT,
            max_pieced_per_connection: 4,
            piece_timeout: Duration::from_secs(60),
            shm_max_packet: 1024 * 1024 + 4096,
            shm_slots: 16,
            shm_consumers: 8,
            shm_pins: 8,
            shm_max_regions: 64,
            shm_max_bytes: 512 * 1024 * 1024,
            shm_max_regions_per_identity: None,
            shm_max_bytes_per_identity: None,
        }
    }
}

impl Limits {
    /// The regions one identity may hold: `shm_max_regions_per_identity`,
    /// or a quarter of `shm_max_regions` (at least one).
    pub fn shm_regions_per_identity(&self) -> usize {
        self.shm_max_regions_per_identity
            .unwrap_or((self.shm_max_regions / 4).max(1))
    }

    /// The shared-memory bytes one identity may reserve:
    /// `shm_max_bytes_per_identity`, or a quarter of `shm_max_bytes`.
    pub fn shm_bytes_per_identity(&self) -> u64 {
        self.shm_max_bytes_per_identity
            .unwrap_or(self.shm_max_bytes / 4)
    }
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            name: "tagwired".into(),
            tcp: DEFAULT_TCP.parse().ok(),
            unix: Some(default_unix_path()),
            limits: Limits::default(),
            auth: AuthConfig::default(),
            acl: Vec::new(),
            reservations_file: None,
            tls: None,
            bands: band::default_bands(),
            default_band: band::DEFAULT_BAND.into(),
            qos: Default::default(),
            federation: FederationConfig::default(),
            bandwidth: BandwidthConfig::default(),
            metrics: MetricsConfig::default(),
            cluster: ClusterConfig::default(),
            mqtt: mqtt::MqttConfig::default(),
            store: StoreConfig::default(),
            udp: UdpConfig::default(),
            multicast: Vec::new(),
        }
    }
}

impl RouterConfig {
    /// Parses TOML text (keys not given keep their defaults). Relative
    /// `[tls]` and `[cluster]` paths are taken relative to `path`'s directory.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let mut cfg: RouterConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        if let (Some(file), Some(dir)) = (&mut cfg.cluster.secret_file, path.parent()) {
            if file.is_relative() {
                *file = dir.join(&*file);
            }
        }
        if let (Some(tls), Some(dir)) = (&mut cfg.tls, path.parent()) {
            for file in [&mut tls.cert, &mut tls.key]
                .into_iter()
                .chain(tls.client_ca.as_mut())
            {
                if file.is_relative() {
                    *file = dir.join(&*file);
                }
            }
        }
        if let (Some(tls), Some(dir)) = (&mut cfg.federation.tls, path.parent()) {
            for file in std::iter::once(&mut tls.ca)
                .chain(tls.cert.as_mut())
                .chain(tls.key.as_mut())
            {
                if file.is_relative() {
                    *file = dir.join(&*file);
                }
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML file, refusing files over [`MAX_CONFIG_BYTES`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let read = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                path: path.to_owned(),
                len,
                max: MAX_CONFIG_BYTES,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::from_toml(&text, path)
    }

    /// Checks ranges that the types alone do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 255
            || n.starts_with('@')
            || n.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ConfigError::Invalid(format!(
                "name = {:?}: a daemon name is 1..=255 bytes, without spaces, and does not start with @ (pulls use @publisher for the publisher's daemon)",
                tagwire_proto::excerpt(n)
            )));
        }
        self.federation.validate()?;
        self.store.validate().map_err(ConfigError::Invalid)?;
        tagwire_proto::validate_max_frame(self.limits.max_frame).map_err(|_| {
            ConfigError::Invalid(format!(
                "limits.max_frame = {} is outside {}..={}",
                self.limits.max_frame,
                tagwire_proto::limits::MIN_MAX_FRAME,
                tagwire_proto::limits::HARD_MAX_FRAME
            ))
        })?;
        let l = &self.limits;
        if l.max_buffered_bytes < l.max_frame as usize {
            return Err(ConfigError::Invalid(format!(
                "limits.max_buffered_bytes = {} is smaller than limits.max_frame = {}: no large frame could ever be read",
                l.max_buffered_bytes, l.max_frame
            )));
        }
        if l.max_pending_handshakes == 0 || l.max_connections == 0 || l.max_protocol_errors == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_pending_handshakes, limits.max_connections and limits.max_protocol_errors must be at least 1".into(),
            ));
        }
        if self.tcp.is_none() && self.unix.is_none() {
            return Err(ConfigError::Invalid("no listener: set tcp or unix".into()));
        }
        if let Some(addr) = self.tcp.filter(|a| !a.ip().is_loopback()) {
            if !self.auth.enabled {
                return Err(ConfigError::Invalid(format!(
                    "tcp = {addr} is not a loopback address, and [auth] enabled = false: \
                     without authentication the daemon listens on loopback only"
                )));
            }
        }
        if self.tls.is_some() && self.tcp.is_none() {
            return Err(ConfigError::Invalid(
                "[tls] is set but tcp is not: TLS applies to the TCP listener".into(),
            ));
        }
        self.metrics.validate(self.auth.enabled)?;
        self.mqtt.validate(&self.auth)?;
        self.udp.validate(self.auth.enabled)?;
        band::plan_bands(
            &self.bands,
            &self.default_band,
            self.tcp,
            self.unix.as_deref(),
        )?;
        let bands: Vec<String> = self.bands.iter().map(|b| b.name.clone()).collect();
        multicast::validate(&self.multicast, &self.federation.token, &bands)?;
        let daemon = qos::daemon_layer(&self.qos, &bands).map_err(ConfigError::Invalid)?;
        history::validate_config(self, &daemon).map_err(ConfigError::Invalid)?;
        store::check_layer(self, &daemon)
            .map_err(|(_, m)| ConfigError::Invalid(format!("[qos]: {m}")))?;
        Ok(())
    }
}

/// The socket in the user's private runtime directory:
/// `$XDG_RUNTIME_DIR/tagwire/tagwire.sock`, else `/tmp/tagwire-UID/tagwire.sock`
/// (see [`crate::local`]).
pub fn default_unix_path() -> PathBuf {
    crate::local::runtime_dir().join("tagwire.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults_and_unknown_keys_are_named() {
        let c = RouterConfig::from_toml(
            "tcp = \"127.0.0.1:9000\"\n[limits]\nmax_connections = 3\n",
            Path::new("x.toml"),
        )
        .expect("valid config");
        assert_eq!(c.tcp, "127.0.0.1:9000".parse().ok());
        assert_eq!(c.limits.max_connections, 3);
        assert_eq!(c.limits.max_endpoints, Limits::default().max_endpoints);
        let e = RouterConfig::from_toml("tcpp = 1", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("tcpp"), "{e}");
        let e =
            RouterConfig::from_toml("[limits]\nmax_frame = 1", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("max_frame"), "{e}");
    }

    /// The per-event filter budget (issue 24 item 9) is a `[limits]` key,
    /// defaulting to the core's.
    #[test]
    fn max_filter_work_per_event_is_read_from_limits() {
        let c = RouterConfig::from_toml(
            "[limits]\nmax_filter_work_per_event = 1234\n",
            Path::new("x.toml"),
        )
        .expect("valid config");
        assert_eq!(c.limits.max_filter_work_per_event, 1234);
        assert_eq!(
            Limits::default().max_filter_work_per_event,
            tagwire_core::filter::DEFAULT_MAX_EVENT_WORK
        );
    }

    #[test]
    fn tls_section_paths_are_relative_to_the_config_file() {
        let c = RouterConfig::from_toml(
            "[tls]\ncert = \"server.pem\"\nkey = \"/abs/server.key\"\nclient_ca = \"ca.pem\"\n",
            Path::new("/etc/tagwire/tagwired.toml"),
        )
        .expect("valid config");
        let tls = c.tls.expect("tls section");
        assert_eq!(tls.cert, Path::new("/etc/tagwire/server.pem"));
        assert_eq!(tls.key, Path::new("/abs/server.key"));
        assert_eq!(
            tls.client_ca.as_deref(),
            Some(Path::new("/etc/tagwire/ca.pem"))
        );
        let e =
            RouterConfig::from_toml("[tls]\ncert = \"a.pem\"\n", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("key"), "{e}");
    }

    #[test]
    fn timeouts_are_seconds_with_fractions_and_out_of_range_values_are_named() {
        let c = RouterConfig::from_toml(
            "[limits]\nhandshake_timeout = 0.25\nidle_timeout = 30\n",
            Path::new("x.toml"),
        )
        .expect("valid config");
        assert_eq!(c.limits.handshake_timeout, Duration::from_millis(250));
        assert_eq!(c.limits.idle_timeout, Duration::from_secs(30));
        let e = RouterConfig::from_toml("[limits]\nidle_timeout = -1\n", Path::new("x.toml"))
            .unwrap_err();
        assert!(e.to_string().contains("idle_timeout"), "{e}");
        let e =
            RouterConfig::from_toml("[limits]\nmax_buffered_bytes = 1000\n", Path::new("x.toml"))
                .unwrap_err();
        assert!(e.to_string().contains("max_buffered_bytes"), "{e}");
    }
}
