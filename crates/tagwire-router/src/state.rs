//! The routing state a lane holds: the routes (channels by pattern and
//! filter), the endpoint
//! registry, connection and tag bookkeeping. Single-threaded (`Rc`/`RefCell`)
//! because a lane is one thread; nothing here is held across an `.await`.
//!
//! Every table is indexed so that adding or removing one item costs O(1) or
//! O(log n), and listings can be paged in order. Work proportional to a
//! whole connection (closing one with 65,536 subscriptions, re-placing a
//! session's channels after a session-level filter change) is left to the
//! lane's [`housekeeping`] task, which does it in slices of
//! [`SETTLE_SLICE`] channels and yields to the lane between slices.
//!
//! `State` and the types of its fields (its submodules: federation,
//! reliable windows, pieces, multicast groups, UDP counters, parked
//! deliveries, …) are the router's data layer: they import nothing that
//! operates on `State`. The operations are the modules of the layers above
//! (see the crate's top documentation).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use hashbrown::HashSet;
use tagwire_core::endpoint::{EndpointError, EndpointInfo, EndpointRegistry};
use tagwire_core::node::{Node, NodeLimits};
use tagwire_proto::{EndpointKind, Frame};

use serde::{Deserialize, Serialize};

use crate::admission::Admission;
use crate::auth::Authenticator;
use crate::budget::MemoryBudget;
use crate::channel::{Channel, Outbox};
use crate::config::RouterConfig;
use crate::filters::{FilterBook, Sources};
use crate::sync::Locked;

pub(crate) mod bandwidth;
pub(crate) mod compress;
pub(crate) mod federation;
pub(crate) mod fragment;
pub(crate) mod history;
pub(crate) mod lanes;
pub(crate) mod members;
pub(crate) mod multicast;
pub(crate) mod parked;
pub(crate) mod placement;
pub(crate) mod qos;
pub(crate) mod reliable;
pub(crate) mod udp;

pub(crate) struct ConnEntry {
    pub name: String,
    pub peer: String,
    pub outbox: Arc<Outbox>,
    /// Who it is, once through the handshake (empty before).
    pub identity: Arc<str>,
    /// Its session id (all zero: none), for endpoint reservations.
    pub session: [u8; tagwire_proto::SESSION_ID_LEN],
    /// The band (and so the lane) that serves it.
    pub band: Arc<str>,
    /// A handle on its TCP socket (a duplicate descriptor), to change its
    /// DSCP at run time; `None` for Unix and in-process connections.
    pub socket: Option<std::os::fd::OwnedFd>,
    /// The DSCP a channel's QoS put on its socket (`None`: the band's).
    pub dscp: Option<u8>,
    /// Its session-level QoS layer.
    pub qos: tagwire_core::qos::QosLayer,
    /// How it reached us (`tcp`, `unix`, `udp`, …; see `Transport::name`).
    pub transport: &'static str,
    /// A UDP session's counters.
    pub udp: Option<Arc<udp::UdpStats>>,
    /// Its protocol version, recorded once its `Welcome` is in its outbox
    /// (0 before: nothing unasked may precede the `Welcome`).
    pub version: u16,
}

/// A lane as it runs: its band and the scheduling it got.
#[derive(Debug, Clone)]
pub(crate) struct LaneInfo {
    /// The band's name.
    pub band: String,
    /// The band's DSCP.
    pub dscp: u8,
    /// The policy configured.
    pub sched_wanted: String,
    /// The policy in force (differs when the OS refused a real-time one).
    pub sched_applied: String,
    /// Why it differs, if it does.
    pub fell_back: Option<String>,
    /// The CPUs it is pinned to (empty: any), and why not if it asked.
    pub cpus: String,
    /// Its listeners.
    pub tcp: Option<std::net::SocketAddr>,
    /// Its Unix listener.
    pub unix: Option<std::path::PathBuf>,
    /// Its UDP socket.
    pub udp: Option<std::net::SocketAddr>,
    /// Its thread's kernel id (for its CPU time in `/metrics`).
    pub tid: Option<i32>,
}

/// What one identity holds, checked against the per-identity quotas.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Usage {
    pub connections: usize,
    pub endpoints: usize,
    pub subscriptions: usize,
}

/// Endpoint names reserved for sessions, indexed by name and by expiry, so
/// that a lookup, an insertion, expiring old ones and evicting at the bound
/// each cost O(log n) (a drop of 25,000 endpoints must not scan the table
/// 25,000 times).
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    by_name: HashMap<String, Reservation>,
    by_expiry: BTreeSet<(u64, String)>,
}

impl Reservations {
    /// The reservation of `name`, if any (possibly expired).
    pub fn get(&self, name: &str) -> Option<&Reservation> {
        self.by_name.get(name)
    }

    /// Forgets the reservation of `name`.
    pub fn remove(&mut self, name: &str) -> Option<Reservation> {
        let r = self.by_name.remove(name)?;
        self.by_expiry.remove(&(r.until_ns, name.to_owned()));
        Some(r)
    }

    /// Reserves `name`, first forgetting the reservations expired at `now`
    /// and, at `max`, the one closest to expiry.
    pub fn insert(&mut self, name: &str, r: Reservation, now: u64, max: usize) {
        self.remove(name);
        while let Some((until, n)) = self.by_expiry.first().cloned() {
            if until > now && self.by_name.len() < max {
                break;
            }
            self.remove(&n);
        }
        if max > 0 {
            self.by_expiry.insert((r.until_ns, name.to_owned()));
            self.by_name.insert(name.to_owned(), r);
        }
    }

    /// Takes every reservation out.
    pub fn take_all(&mut self) -> HashMap<String, Reservation> {
        self.by_expiry.clear();
        std::mem::take(&mut self.by_name)
    }
}

/// An endpoint name kept for the session that held it when its connection
/// dropped without `Close` (or the daemon restarted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reservation {
    pub identity: String,
    /// The session id, hex.
    pub session: String,
    /// Until when (ns since the Unix epoch).
    pub until_ns: u64,
}

pub(crate) struct TagStats {
    pub published: u64,
    pub last_publisher: String,
}

pub(crate) struct State {
    pub config: RouterConfig,
    /// Links to other daemons and the routing between them.
    pub fed: federation::Federation,
    /// Daemons SWIM membership knows are up.
    pub members: members::Members,
    /// What the daemon decides (core's node engine): the routes — channels
    /// by pattern, with their filters and their sessions' (one session per
    /// connection, keyed by connection id) —, the network's adverts and
    /// live links, events held until their start time, pulls in flight.
    /// The router executes its decisions (the `node_io` module).
    pub node: Node<Arc<Channel>>,
    /// Every channel by its router-wide subscription id.
    pub channels: ChannelTable,
    pub endpoints: Endpoints,
    /// foldhash (seeded per process): looked up per event a link receives.
    pub connections: HashMap<u64, ConnEntry, foldhash::fast::RandomState>,
    /// Updated once per published event, so a fast (seeded) hasher.
    pub tags: hashbrown::HashMap<Box<str>, TagStats>,
    pub untracked_publishes: u64,
    /// Filters attached by subscriptions and admin requests.
    pub filters: FilterBook,
    /// Each publisher endpoint's filters, by endpoint name.
    pub sources: Sources,
    /// Events dropped because their publisher's filters rejected them.
    pub filtered_at_source: u64,
    /// Wakes the task that releases deferred events (held in the node).
    pub deferred_wake: Arc<tokio::sync::Notify>,
    /// Who may connect and what they may do.
    pub auth: Authenticator,
    /// What each identity holds, for its quotas.
    pub usage: HashMap<Arc<str>, Usage>,
    /// Endpoint names reserved for the sessions that held them.
    pub reservations: Reservations,
    /// Acknowledged subscriptions' undelivered events, kept for their
    /// session's reconnect (see `acked_delivery`).
    pub parked_deliveries: parked::ParkedDeliveries,
    /// The router-wide memory budget (`limits.max_buffered_bytes`).
    pub memory: Arc<MemoryBudget>,
    /// Client events being put together from pieces (protocol version 5).
    pub(crate) client_pieces: crate::pieces::ClientPieces,
    /// Connections before and after the handshake, and the log rate limit.
    pub admission: Admission,
    /// Wakes the [`housekeeping`] task when the routes have work left.
    pub housekeeping: Arc<tokio::sync::Notify>,
    /// Admin replies to send once the routes have settled (a session-level
    /// change answers when every channel of the session is re-placed).
    pub replies_when_settled: Vec<(Arc<Outbox>, Frame)>,
    /// The lanes, lowest band first (filled in as they start).
    pub lanes: Vec<LaneInfo>,
    /// The lanes' waits for this table's lock (the lock's own counters,
    /// for listings).
    pub table_waits: Arc<crate::sync::LockWaits>,
    /// The daemon-level QoS layer (`[qos]`).
    pub qos_daemon: tagwire_core::qos::QosLayer,
    /// Tag-level QoS layers, by pattern (at most `qos::MAX_TAG_LAYERS`).
    pub qos_tags: Vec<qos::TagQos>,
    /// Events queued per subscriber endpoint, shared by its channels
    /// (`max_events_per_consumer`).
    pub consumers: HashMap<Arc<str>, Arc<crate::sync::Count>>,
    /// Publisher names declared again by other (band) connections of the
    /// owner's session: name → those connections. When the owner goes, the
    /// name passes to one of them ([`State::hand_over`]).
    pub aliases: HashMap<String, Vec<u64>>,
    /// Publishers per `max_suppliers` scope.
    pub suppliers: qos::Suppliers,
    /// The configured band names, lowest first.
    pub band_names: Vec<String>,
    /// Each lane's command channel, by band name.
    pub lane_commands: Vec<(String, tokio::sync::mpsc::Sender<lanes::LaneCommand>)>,
    /// Admin requests for the admin lane (the lowest band's).
    pub admin_jobs: Option<tokio::sync::mpsc::Sender<lanes::AdminJob>>,
    /// Pull buffers (the `history` QoS property).
    pub history: tagwire_core::history::HistoryPolicy,
    /// The durable store (`reliability=durable`; [`crate::store`]).
    pub(crate) store: crate::store::RouterStore,
    /// Where `proxy=auto` subscriptions' proxies run.
    pub placement: placement::Placement,
    /// Bandwidth reservations (`reserve=`; the `bandwidth` module).
    pub(crate) bandwidth: bandwidth::Bandwidth,
    /// Shared-memory regions of same-host publishers.
    pub shm: crate::shm::ShmTable,
    /// Multicast groups (`[[multicast]]`; opened and served by the
    /// `multicast` module).
    pub(crate) mcast: multicast::Multicast,
    next_conn: u64,
}

impl State {
    pub fn new(config: RouterConfig, auth: Authenticator) -> Self {
        let endpoints = Endpoints::new(config.limits.max_endpoints);
        let mut filters = FilterBook::default();
        filters.limits.max_event_work = config.limits.max_filter_work_per_event;
        let memory = Arc::new(MemoryBudget::new(config.limits.max_buffered_bytes));
        let history = tagwire_core::history::HistoryPolicy::default();
        let placement = Default::default();
        let fed = federation::Federation::new(&config.federation);
        let limits = NodeLimits {
            federation: federation::routing_limits(&config.federation),
            filters: filters.limits.clone(),
            max_deferred_events: config.limits.max_deferred_events,
            max_deferred_bytes: config.limits.max_deferred_bytes,
            history: history::limits(&config),
            away: tagwire_core::node::AwayLimits {
                max_daemons: config.federation.reliable_hold_daemons,
                max_events: config.federation.reliable_hold_events,
                max_bytes: config.federation.reliable_hold_bytes,
                max_age_ns: config
                    .federation
                    .reliable_hold_secs
                    .saturating_mul(1_000_000_000),
                ..tagwire_core::node::AwayLimits::default()
            },
            ..NodeLimits::default()
        };
        let me = federation::node_id(&config.federation);
        let node = Node::new(me, &config.name, limits, crate::timing::now_ns());
        State {
            fed,
            table_waits: Arc::default(),
            members: Default::default(),
            config,
            node,
            channels: ChannelTable::default(),
            endpoints,
            connections: HashMap::default(),
            tags: hashbrown::HashMap::new(),
            untracked_publishes: 0,
            filters,
            sources: Sources::default(),
            filtered_at_source: 0,
            deferred_wake: Arc::default(),
            auth,
            usage: HashMap::new(),
            reservations: Reservations::default(),
            parked_deliveries: Default::default(),
            client_pieces: Default::default(),
            memory,
            admission: Admission::default(),
            housekeeping: Arc::default(),
            replies_when_settled: Vec::new(),
            store: Default::default(),
            lanes: Vec::new(),
            qos_daemon: tagwire_core::qos::QosLayer::new(tagwire_core::qos::Level::Daemon),
            qos_tags: Vec::new(),
            suppliers: Default::default(),
            aliases: HashMap::new(),
            consumers: HashMap::new(),
            band_names: Vec::new(),
            lane_commands: Vec::new(),
            admin_jobs: None,
            history,
            placement,
            bandwidth: Default::default(),
            shm: Default::default(),
            mcast: Default::default(),
            next_conn: 1,
        }
    }

    /// The usage entry of `identity`.
    pub fn usage(&mut self, identity: &Arc<str>) -> &mut Usage {
        self.usage.entry(identity.clone()).or_default()
    }

    /// Drops `identity`'s usage entry once it holds nothing, so the table
    /// stays as small as the set of identities connected.
    pub fn forget_idle_identity(&mut self, identity: &str) {
        if let Some(u) = self.usage.get(identity) {
            if u.connections == 0 && u.endpoints == 0 && u.subscriptions == 0 {
                self.usage.remove(identity);
            }
        }
    }

    /// Reserves endpoint `name` for `(identity, session)` until `until_ns`,
    /// forgetting the reservation closest to expiry when the table is full.
    pub fn reserve(&mut self, name: &str, r: Reservation, now: u64) {
        let max = self.config.limits.max_reservations;
        self.reservations.insert(name, r, now, max);
    }

    /// Reads reservations kept by [`save_reservations`](Self::save_reservations)
    /// at the last shutdown; each lasts the configured time from `now`. A
    /// missing file is normal; a bad one is logged and ignored.
    pub fn load_reservations(&mut self, path: &std::path::Path, now: u64) {
        const MAX_FILE: u64 = 64 * 1024 * 1024;
        let read = || -> Result<HashMap<String, Reservation>, String> {
            if let Some(dir) = path.parent() {
                crate::local::check_private_dir(dir).map_err(|e| e.to_string())?;
            }
            let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
            if len > MAX_FILE {
                return Err(format!("{len} bytes, over {MAX_FILE}"));
            }
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map_err(|e| e.to_string())
        };
        if !path.exists() {
            return;
        }
        match read() {
            Ok(kept) => {
                let secs = self.config.limits.endpoint_reservation_secs;
                let until_ns = now.saturating_add(secs.saturating_mul(1_000_000_000));
                let n = kept.len();
                for (name, mut r) in kept {
                    r.until_ns = until_ns;
                    self.reserve(&name, r, now);
                }
                tracing::info!(
                    "{n} endpoint name(s) reserved for their sessions for {secs} s (from {})",
                    path.display()
                );
            }
            Err(e) => tracing::warn!("ignoring reservations file {}: {e}", path.display()),
        }
        let _ = std::fs::remove_file(path);
    }

    /// Writes the live endpoints of sessions that have an id, and the
    /// unexpired reservations, to `path` (mode 0600), for the next start.
    pub fn save_reservations(&mut self, path: &std::path::Path, now: u64) {
        let mut kept: HashMap<String, Reservation> = self
            .reservations
            .take_all()
            .into_iter()
            .filter(|(_, r)| r.until_ns > now)
            .collect();
        for e in self.endpoints.after(None) {
            let Some(c) = self.connections.get(&e.owner) else {
                continue;
            };
            if c.session != [0; tagwire_proto::SESSION_ID_LEN] {
                let session = crate::local::hex(&c.session);
                let identity = c.identity.to_string();
                kept.insert(
                    e.name.clone(),
                    Reservation {
                        identity,
                        session,
                        until_ns: now,
                    },
                );
            }
        }
        // A daemon whose Unix socket and TCP token live elsewhere never
        // made the runtime directory: make it (0700) rather than lose the
        // reservations. An existing directory is used as it is.
        let parent = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.exists());
        let written = parent
            .map_or(Ok(()), |d| {
                crate::local::prepare_private_dir(d).map_err(std::io::Error::other)
            })
            .and_then(|()| serde_json::to_string(&kept).map_err(std::io::Error::from))
            .and_then(|json| crate::local::write_private(path, json.as_bytes()));
        if let Err(e) = written {
            tracing::warn!(
                "cannot keep endpoint reservations in {}: {e}",
                path.display()
            );
        }
    }

    /// Notes whether any QoS layer limits suppliers, after layers changed.
    pub fn refresh_supplier_limit(&mut self) {
        self.suppliers.refresh(&self.qos_daemon, &self.qos_tags);
    }

    /// Connection `conn` no longer publishes under `name` as an alias.
    pub fn drop_alias(&mut self, name: &str, conn: u64) {
        if let Some(v) = self.aliases.get_mut(name) {
            v.retain(|c| *c != conn);
            if v.is_empty() {
                self.aliases.remove(name);
            }
        }
    }

    /// The owner of publisher `name` is going: if another connection of its
    /// session publishes under the name too, the name passes to it (and
    /// keeps its filters) and this returns true.
    pub fn hand_over(&mut self, name: &str) -> bool {
        let Some(heirs) = self.aliases.get_mut(name) else {
            return false;
        };
        while let Some(heir) = heirs.pop() {
            if self.connections.contains_key(&heir) {
                if heirs.is_empty() {
                    self.aliases.remove(name);
                }
                self.endpoints.remove(name);
                return self
                    .endpoints
                    .declare(name, tagwire_proto::EndpointKind::Publisher, heir)
                    .is_ok();
            }
        }
        self.aliases.remove(name);
        false
    }

    /// What the network did to the events of subscription `sub` of
    /// connection `conn` on their way to a `udp://` client (`None`: not a
    /// UDP session).
    pub fn channel_net_loss(
        &self,
        conn: u64,
        sub: u32,
    ) -> Option<tagwire_proto::admin::NetLossInfo> {
        let udp = self.connections.get(&conn)?.udp.as_ref()?;
        Some(udp.channel_loss(sub))
    }

    /// The band of connection `conn` (the listener it came in on, or the
    /// lane that dialed it).
    pub fn band_of(&self, conn: u64) -> Arc<str> {
        self.connections.get(&conn).map_or_else(
            || Arc::from(self.config.default_band.as_str()),
            |c| c.band.clone(),
        )
    }

    /// Whether connection `conn` runs over UDP (frames can be lost).
    pub fn is_udp(&self, conn: u64) -> bool {
        self.connections.get(&conn).is_some_and(|c| c.udp.is_some())
    }

    pub fn next_connection_id(&mut self) -> u64 {
        let id = self.next_conn;
        self.next_conn += 1;
        id
    }

    /// Counts `n` publishes on `tag` by `publisher`, within the tracking
    /// bound.
    pub fn note_publish(&mut self, tag: &str, publisher: &str, n: u64) {
        if let Some(s) = self.tags.get_mut(tag) {
            s.published += n;
            if s.last_publisher != publisher {
                publisher.clone_into(&mut s.last_publisher);
            }
        } else if self.tags.len() < self.config.limits.max_tracked_tags {
            self.tags.insert(
                tag.into(),
                TagStats {
                    published: n,
                    last_publisher: publisher.to_owned(),
                },
            );
        } else {
            self.untracked_publishes += n;
        }
    }
}

/// Publishes on one tag by one publisher not yet counted in the tag table:
/// a publish batch counts a run of them once ([`State::note_publish`]), as
/// a publisher usually keeps to one tag.
///
/// A run is one connection's and is told apart by its publisher's endpoint
/// id, not its name: the note is flushed at the end of every publish
/// batch, and a batch ends before any other frame (a declaration among
/// them) is handled, so within a run an id names one endpoint.
#[derive(Debug, Default)]
pub(crate) struct PublishNote {
    tag: String,
    publisher: String,
    endpoint: u32,
    count: u64,
    /// The publisher's key ([`tagwire_core::proxy::publisher_key`]),
    /// hashed once per run instead of once per event.
    key: u64,
}

impl PublishNote {
    /// Counts a publish on `tag` by `publisher` (the connection's endpoint
    /// `endpoint`), adding the run so far to `st` first if this one is not
    /// part of it. Returns the publisher's key
    /// ([`tagwire_core::proxy::publisher_key`]).
    pub fn add(&mut self, st: &mut State, tag: &str, endpoint: u32, publisher: &str) -> u64 {
        if self.count > 0 && self.endpoint == endpoint && self.tag == tag {
            self.count += 1;
            return self.key;
        }
        self.flush(st);
        tag.clone_into(&mut self.tag);
        publisher.clone_into(&mut self.publisher);
        self.endpoint = endpoint;
        self.count = 1;
        self.key = tagwire_core::proxy::publisher_key(publisher);
        self.key
    }

    /// Adds the run so far to `st`.
    pub fn flush(&mut self, st: &mut State) {
        if self.count > 0 {
            st.note_publish(&self.tag, &self.publisher, self.count);
            self.count = 0;
        }
    }
}

impl State {
    /// Sends `reply` on `outbox` now if the routes have settled, or once
    /// the [`housekeeping`] task has settled them.
    pub fn reply_when_settled(&mut self, outbox: Arc<Outbox>, reply: Frame) {
        if self.node.routes().is_settled() && self.replies_when_settled.is_empty() {
            outbox.send(&reply, usize::MAX);
        } else {
            self.replies_when_settled.push((outbox, reply));
            self.housekeeping.notify_one();
        }
    }

    /// Makes the channels of an undeclared endpoint get nothing more, at
    /// once (a hash insert per id is all it costs), and leaves their
    /// removal to housekeeping. Their ids can be used again straight away.
    pub fn retire_endpoint(&mut self, channels: Vec<u64>) {
        self.node.routes_mut().retire_channels(channels);
        self.housekeeping.notify_one();
    }

    /// One slice of left-over route work: removes up to [`SETTLE_SLICE`]
    /// retired channels from every table (or re-places that many), and
    /// once nothing is left sends the replies that waited for it. Returns
    /// true when nothing is left.
    pub fn settle_slice(&mut self, removed: &mut Vec<(u64, Arc<Channel>)>) -> bool {
        let done = self.node.routes_mut().settle(SETTLE_SLICE, removed);
        for (global, old) in removed.drain(..) {
            if self.channels.holds(global, &old) {
                self.channels.remove(&global);
                self.filters.forget_channel(global);
            } else {
                // Its id was used again by a new subscription: forget only
                // the old channel's filters.
                let keep = self.node.routes().filter_ids(global);
                self.filters.forget_channel_except(global, &keep);
            }
        }
        if done {
            for (outbox, reply) in self.replies_when_settled.drain(..) {
                outbox.send(&reply, usize::MAX);
            }
        }
        done
    }
}

/// The band an event of `priority` crosses a link on when it did not arrive
/// on a connection of a band (an event held for its start time): 0..=255
/// split evenly over the bands, lowest first (as a client's
/// `follow_priority` does).
pub(crate) fn band_for_priority(st: &State, priority: u8) -> &str {
    let n = st.band_names.len();
    if n == 0 {
        return &st.config.default_band;
    }
    &st.band_names[priority as usize * n / 256]
}

/// Channels removed or re-placed per slice of housekeeping. A channel
/// costs a few microseconds (BENCHMARKS.md, "Admin work at scale"), so a
/// slice stays around a millisecond or two and the lane yields to data
/// that often.
pub(crate) const SETTLE_SLICE: usize = 256;

/// The lane task that finishes work left by admin requests and closing
/// connections ([`State::settle_slice`]), one slice at a time, yielding to
/// the lane's other tasks between slices so that events keep flowing.
pub(crate) async fn housekeeping(state: Arc<Locked<State>>) {
    let wake = state.borrow().housekeeping.clone();
    let mut removed = Vec::with_capacity(SETTLE_SLICE);
    loop {
        let done = state.with_fair(|st| st.settle_slice(&mut removed));
        if done {
            wake.notified().await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// Every channel by its router-wide id (ordered, for paged listings), and
/// the channels of each subscriber endpoint (so removing an endpoint does
/// not scan the others).
#[derive(Debug, Default)]
pub(crate) struct ChannelTable {
    by_id: BTreeMap<u64, Arc<Channel>>,
    by_endpoint: HashMap<Arc<str>, HashSet<u64>>,
    /// The DSCP each channel's QoS sets explicitly, by connection and
    /// channel: a connection's socket carries one marking, so the channels
    /// of one connection must agree (`qos::check_dscp`). A
    /// channel's claim goes with it.
    dscp: HashMap<u64, BTreeMap<u64, u8>>,
    /// Bumped by every insert and remove (the federation re-reads the local
    /// interest when it changes).
    generation: u64,
}

impl ChannelTable {
    /// Changes with every insert and remove.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Marks the table changed without a channel added or removed (a
    /// channel's scaling or proxy changed: the interest is re-advertised).
    pub fn touch(&mut self) {
        self.generation += 1;
    }

    /// Adds channel `global`.
    pub fn insert(&mut self, global: u64, channel: Arc<Channel>) {
        self.generation += 1;
        if let Some(old) = self.by_id.remove(&global) {
            self.unlink(global, &old.endpoint);
        }
        self.by_endpoint
            .entry(channel.endpoint.clone())
            .or_default()
            .insert(global);
        let code = qos::explicit_dscp(&channel.qos.borrow().resolved);
        self.claim_dscp(channel.conn, global, code);
        self.by_id.insert(global, channel);
    }

    /// Records the DSCP channel `global` of connection `conn` sets
    /// explicitly (`None`: it leaves its connection's marking alone).
    pub fn claim_dscp(&mut self, conn: u64, global: u64, code: Option<u8>) {
        match code {
            Some(code) => {
                self.dscp.entry(conn).or_default().insert(global, code);
            }
            None => {
                if let Some(claims) = self.dscp.get_mut(&conn) {
                    claims.remove(&global);
                    if claims.is_empty() {
                        self.dscp.remove(&conn);
                    }
                }
            }
        }
    }

    /// The explicit DSCP of each channel of connection `conn` that sets one.
    pub fn dscp_claims(&self, conn: u64) -> impl Iterator<Item = (u64, u8)> + '_ {
        self.dscp
            .get(&conn)
            .into_iter()
            .flat_map(|m| m.iter().map(|(g, c)| (*g, *c)))
    }

    /// Whether `channel` is the one held under `global`.
    pub fn holds(&self, global: u64, channel: &Arc<Channel>) -> bool {
        self.by_id
            .get(&global)
            .is_some_and(|c| Arc::ptr_eq(c, channel))
    }

    /// Removes channel `global`.
    pub fn remove(&mut self, global: &u64) -> Option<Arc<Channel>> {
        let channel = self.by_id.remove(global)?;
        self.generation += 1;
        self.unlink(*global, &channel.endpoint);
        self.claim_dscp(channel.conn, *global, None);
        Some(channel)
    }

    fn unlink(&mut self, global: u64, endpoint: &str) {
        if let Some(set) = self.by_endpoint.get_mut(endpoint) {
            set.remove(&global);
            if set.is_empty() {
                self.by_endpoint.remove(endpoint);
            }
        }
    }

    /// Channel `global`.
    pub fn get(&self, global: u64) -> Option<&Arc<Channel>> {
        self.by_id.get(&global)
    }

    /// The ids of endpoint `name`'s channels (in no order).
    pub fn of_endpoint(&self, name: &str) -> Vec<u64> {
        self.by_endpoint
            .get(name)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Channels with ids above `after`, in id order.
    pub fn after(&self, after: Option<u64>) -> impl Iterator<Item = (&u64, &Arc<Channel>)> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.by_id.range((from, Bound::Unbounded))
    }
}

/// The endpoint registry plus its names in order, for paged listings.
#[derive(Debug)]
pub(crate) struct Endpoints {
    registry: EndpointRegistry,
    names: BTreeSet<String>,
}

impl Endpoints {
    fn new(max: usize) -> Self {
        Endpoints {
            registry: EndpointRegistry::new(max),
            names: BTreeSet::new(),
        }
    }

    /// Registers `name` for connection `owner` (see [`EndpointRegistry::declare`]).
    pub fn declare(
        &mut self,
        name: &str,
        kind: EndpointKind,
        owner: u64,
    ) -> Result<(), EndpointError> {
        self.registry.declare(name, kind, owner)?;
        self.names.insert(name.to_owned());
        Ok(())
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: &str) -> Option<EndpointInfo> {
        self.names.remove(name);
        self.registry.remove(name)
    }

    /// Looks up `name`.
    pub fn get(&self, name: &str) -> Option<&EndpointInfo> {
        self.registry.get(name)
    }

    /// Endpoints named after `after`, in name order.
    pub fn after<'a>(&'a self, after: Option<&str>) -> impl Iterator<Item = &'a EndpointInfo> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.names
            .range::<str, _>((from, Bound::Unbounded))
            .filter_map(|n| self.registry.get(n))
    }
}

/// The router's shared state may move between lane threads.
#[allow(dead_code)]
fn assert_shareable() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Locked<State>>();
    send_sync::<Channel>();
    send_sync::<Outbox>();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(max_tracked_tags: usize) -> State {
        let mut config = RouterConfig::default();
        config.limits.max_tracked_tags = max_tracked_tags;
        State::new(config, Authenticator::disabled(0))
    }

    #[test]
    fn a_publish_note_counts_each_run_once_and_every_publish() {
        let mut st = state(2);
        let mut note = PublishNote::default();
        for _ in 0..3 {
            note.add(&mut st, "/x", 1, "/p");
        }
        assert!(st.tags.is_empty(), "a run is counted when it ends");
        note.add(&mut st, "/x", 2, "/q");
        assert_eq!(st.tags["/x"].published, 3);
        assert_eq!(st.tags["/x"].last_publisher, "/p");
        note.add(&mut st, "/y", 2, "/q");
        note.add(&mut st, "/z", 2, "/q");
        note.flush(&mut st);
        note.flush(&mut st);
        assert_eq!(st.tags["/x"].published, 4);
        assert_eq!(st.tags["/x"].last_publisher, "/q");
        assert_eq!(st.tags["/y"].published, 1);
        // Past the tracking bound, counted as untracked.
        assert!(!st.tags.contains_key("/z"));
        assert_eq!(st.untracked_publishes, 1);
    }
}
