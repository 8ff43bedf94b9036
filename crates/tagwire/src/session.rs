//! Sessions: one connection to a router (a daemon over TCP or a Unix socket,
//! or an in-process router in embedded mode), shared by the publishers and
//! subscribers made from it.
//!
//! The protocol is [`tagwire_core::connection::Connection`]'s (the engine:
//! handshake, request ids and replies, the endpoint and subscription tables,
//! what a reconnect declares again); this module does its I/O and threads.
//!
//! Threads: a *reader* thread feeds what it reads to the engine, wakes the
//! threads waiting for replies, runs callback subscriptions and fills
//! subscriber queues, and reconnects with backoff when the connection drops
//! (the engine then declares and subscribes again); a *flusher* thread
//! writes batched publishes. Publishing writes directly
//! from the caller's thread when the stream is idle (lowest latency) and
//! batches when publishes come faster than [`HOT_INTERVAL`] apart (highest
//! throughput: one `write` carries many events; the flusher lingers up to
//! 50 µs for a batch, so the last events of a burst wait at most that long).

mod ack_window;
mod acked;
mod bands;
mod connect;
mod dedupe;
mod pieces;
mod reader;
mod shm_region;
mod target;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_core::connection::{ClientHello, Config, Connection, Reply};
use tagwire_proto::admin::{
    AdminReply, AdminRequest, FilterInfo, FilterLevel, Listing, QosChanged, Show, TimeInfo,
};
use tagwire_proto::{EndpointKind, ErrorCode};

use crate::deliver::Deliver;
use crate::error::{Error, Result};
use crate::options::{Options, REQUEST_TIMEOUT};
use crate::sink::Sink;
use crate::stream::Stream;
use crate::sync::lock;

pub use ack_window::AckStats;
pub(crate) use target::Target;
pub use writer::HOT_INTERVAL;

use bands::RouterBands;
use connect::connect;
use reader::reader_main;
use tagwire_core::reliable::AckBatching;
use writer::{flusher_main, WriteState};

pub(crate) struct Inner {
    /// The daemons this session may use, in order of preference (one
    /// unless the URL listed several); `current` is the one in use.
    targets: Vec<Target>,
    current: AtomicUsize,
    name: String,
    pub(crate) options: Options,
    /// The origin of the engine's clock.
    origin: Instant,
    /// Lock order: `writer`, then `engine`, then `socket`, then `replay`;
    /// `waiters` and `sinks` are taken last, holding nothing else after.
    writer: Mutex<WriteState>,
    /// The protocol engine. Never held while a sink runs or I/O waits; the
    /// control frames it makes are moved into `writer.buf` (while
    /// connected: in order with the publishes) by [`Inner::take_control`].
    engine: Mutex<Connection>,
    socket: Mutex<Option<Stream>>,
    /// A batch whose write failed when the connection broke: its publishes
    /// go out again first after the reconnect (at most the batches in flight
    /// then, each at most `HIGH_WATER` plus one event).
    replay: Mutex<BytesMut>,
    flush_cv: Condvar,
    /// Notified (on `writer`) when the daemon acknowledges publishes.
    acked_cv: Condvar,
    /// Notified when the connection comes back or the session closes.
    connected_cv: Condvar,
    /// The threads waiting for a reply, by request id.
    waiters: Mutex<HashMap<u32, SyncSender<Reply>>>,
    /// Where each subscription's deliveries go; the reader thread keeps a
    /// copy, taken again when `subs_generation` changes.
    sinks: Mutex<HashMap<u32, Arc<Sink>>>,
    /// Acknowledged subscriptions that asked for a queue length: how their
    /// `DeliverAck`s are batched (see [`ack_batching_for`]); the others
    /// take the default.
    ack_batching: Mutex<HashMap<u32, AckBatching>>,
    subs_generation: AtomicU64,
    closed: AtomicBool,
    reader_thread: Mutex<Option<ThreadId>>,
    reconnects: AtomicU64,
    /// Events of acknowledged subscriptions the daemon sent again after a
    /// reconnect and this session had already taken (dropped).
    delivery_duplicates: AtomicU64,
    /// Connections established so far, bumped under `writer` before a new
    /// connection takes publishes: a shared-memory reference is written
    /// only on the connection whose daemon granted its region
    /// ([`Inner::publish_in_region`]).
    epoch: AtomicU64,
    /// Errors the router sent for no request (refused publishes, …) since
    /// [`Session::take_refusals`] last took them.
    refusals: Mutex<Refusals>,
    /// Network time minus this host's clock (ns), as last asked of the
    /// daemon, and when (local ns; 0: never) — for `network_clock`.
    net_offset: std::sync::atomic::AtomicI64,
    net_offset_at: AtomicU64,
    /// Sessions on other bands of the same router, opened on demand.
    bands: Mutex<HashMap<String, Session>>,
    /// The router's bands, once asked ([`Session::router_bands`]).
    router_bands: Mutex<Option<Arc<RouterBands>>>,
    /// Shared-memory regions and counters (`crate::shm`).
    pub(crate) shm: crate::shm::ClientShm,
    /// Over UDP: the current connection's datagram counters.
    udp: Mutex<Option<Arc<crate::udp::UdpStatus>>>,
    /// The daemon's resume points for events in pieces (`PieceResume`).
    piece_resume: Mutex<pieces::ResumePoints>,
    /// Pieces written, and bytes a resume saved sending again.
    pieces_sent: AtomicU64,
    pieces_skipped: AtomicU64,
}

/// Closes the session when the last handle (session, publisher or
/// subscriber) is dropped.
pub(crate) struct Guard(pub(crate) Arc<Inner>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A connection to a tagwire router. Clone it freely: clones share the
/// connection, which closes when the session and everything made from it
/// are dropped.
#[derive(Clone)]
pub struct Session {
    pub(crate) guard: Arc<Guard>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("server", &self.guard.0.target().describe())
            .field("name", &self.guard.0.name)
            .finish()
    }
}

static SESSION_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Session {
    pub(crate) fn open(target: Target, options: Options) -> Result<Session> {
        Session::open_any(vec![target], options)
    }

    /// A session that uses the first of `targets` that answers, and on a
    /// lost connection reconnects to whichever answers next (failover
    /// between daemons, which keeps the subscriptions: they are made again).
    pub(crate) fn open_any(targets: Vec<Target>, options: Options) -> Result<Session> {
        let name = format!(
            "{}-{}.{}",
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "client".into()),
            std::process::id(),
            SESSION_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let config = Config {
            handshake_timeout: u64::try_from(options.connect_timeout.as_nanos())
                .unwrap_or(u64::MAX),
            // The router probes an idle client and the engine answers; the
            // reader thread blocks in `read` and keeps no timer of its own.
            idle_timeout: 0,
            max_frame: options.max_frame,
            ..Config::default()
        };
        let hello = ClientHello {
            name: name.clone(),
            token: String::new(), // `connect` reads it before each attempt
            // Kept across reconnects, so the router gives our endpoint names back.
            session: options
                .session_id
                .unwrap_or_else(crate::credentials::new_session_id),
            // `connect` draws a fresh one before each attempt.
            nonce: [0; tagwire_proto::handshake::NONCE_LEN],
            proof: None,
        };
        let ack_window = options.ack_window;
        let inner = Arc::new(Inner {
            targets,
            current: AtomicUsize::new(0),
            name,
            options,
            origin: Instant::now(),
            writer: Mutex::new(WriteState::new(ack_window)),
            engine: Mutex::new(Connection::client(config, hello, 0)),
            socket: Mutex::new(None),
            udp: Mutex::new(None),
            replay: Mutex::new(BytesMut::new()),
            flush_cv: Condvar::new(),
            acked_cv: Condvar::new(),
            connected_cv: Condvar::new(),
            waiters: Mutex::new(HashMap::new()),
            sinks: Mutex::new(HashMap::new()),
            ack_batching: Mutex::new(HashMap::new()),
            subs_generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            reader_thread: Mutex::new(None),
            reconnects: AtomicU64::new(0),
            delivery_duplicates: AtomicU64::new(0),
            piece_resume: Mutex::new(Default::default()),
            pieces_sent: AtomicU64::new(0),
            pieces_skipped: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            refusals: Mutex::new(Refusals::default()),
            net_offset: std::sync::atomic::AtomicI64::new(0),
            net_offset_at: AtomicU64::new(0),
            bands: Mutex::new(HashMap::new()),
            router_bands: Mutex::new(None),
            shm: Default::default(),
        });
        let (stream, leftover) = connect(&inner)?;
        let r = inner.clone();
        let reader = std::thread::Builder::new()
            .name("tagwire-reader".into())
            .spawn(move || reader_main(r, stream, leftover))?;
        *lock(&inner.reader_thread) = Some(reader.thread().id());
        let f = inner.clone();
        std::thread::Builder::new()
            .name("tagwire-flusher".into())
            .spawn(move || flusher_main(f))?;
        Ok(Session {
            guard: Arc::new(Guard(inner)),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.guard.0
    }

    /// Counters of acknowledged publishing (reliable publishers, see
    /// [`Publisher::set_reliability`](crate::Publisher::set_reliability)) on this session's connection.
    pub fn ack_stats(&self) -> AckStats {
        self.inner().ack_stats()
    }

    /// Waits until the daemon acknowledged every event this session's
    /// reliable publishers sent (or reported it failed), at most
    /// `timeout`; else [`Error::Unacknowledged`]. Events published on other
    /// bands' connections (`follow_priority`) are not waited for.
    pub fn wait_acknowledged(&self, timeout: Duration) -> Result<()> {
        self.inner().wait_acknowledged(timeout)
    }

    /// This session's client name (sent in the handshake).
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// Asks the router for its tags, endpoints and subscriptions. The
    /// router answers in pages that fit the connection's frame size
    /// (`docs/admin.md`); this follows them and returns the whole listing,
    /// with the counters of the last page.
    pub fn list(&self) -> Result<Listing> {
        self.list_all()
    }

    fn list_all(&self) -> Result<Listing> {
        let mut all: Option<Listing> = None;
        let mut after: Option<String> = None;
        loop {
            let mut page = self.list_page(after.clone(), None)?;
            let next = page.next.take();
            all = Some(match all {
                None => page,
                Some(mut acc) => {
                    acc.connections.append(&mut page.connections);
                    acc.endpoints.append(&mut page.endpoints);
                    acc.subscriptions.append(&mut page.subscriptions);
                    acc.tags.append(&mut page.tags);
                    Listing {
                        connections: acc.connections,
                        endpoints: acc.endpoints,
                        subscriptions: acc.subscriptions,
                        tags: acc.tags,
                        multicast: acc.multicast,
                        ..page
                    }
                }
            });
            match next {
                Some(n) if after.as_ref() != Some(&n) => after = Some(n),
                Some(n) => {
                    return Err(Error::BadReply(format!(
                        "admin list reply: the cursor {n:?} does not advance"
                    )))
                }
                None => break,
            }
        }
        Ok(all.expect("the loop runs at least once and sets it"))
    }

    /// Every filter the router knows (`tagwire admin filter list`), following
    /// the router's pages like [`Session::list`].
    pub fn filter_list(&self) -> Result<Vec<FilterInfo>> {
        let mut all = Vec::new();
        let mut after: Option<u64> = None;
        loop {
            let reply = self.admin(AdminRequest::FilterList { after, limit: None })?;
            let AdminReply::FilterList(page) = reply else {
                return Err(unexpected(reply));
            };
            all.extend(page.filters);
            match page.next {
                Some(n) if after.is_none_or(|a| n > a) => after = Some(n),
                Some(n) => {
                    return Err(Error::BadReply(format!(
                        "admin filter_list reply: the cursor {n} does not advance"
                    )))
                }
                None => return Ok(all),
            }
        }
    }

    /// The offset to add to this host's clock for network time, under
    /// [`SessionBuilder::network_clock`](crate::SessionBuilder::network_clock)
    /// (0 otherwise): asked of the daemon when older than 10 s.
    pub(crate) fn network_offset(&self, now: u64) -> i64 {
        let inner = self.inner();
        if !inner.options.network_clock {
            return 0;
        }
        let at = inner.net_offset_at.load(Ordering::Relaxed);
        if at == 0 || now.saturating_sub(at) > 10_000_000_000 {
            let before = crate::clock::now_ns();
            if let Ok(t) = self.network_time() {
                let after = crate::clock::now_ns();
                // The daemon's reading stands for the middle of the request.
                let mid = before / 2 + after / 2;
                let offset = t.network_time_ns as i128 - mid as i128;
                inner.net_offset.store(offset as i64, Ordering::Relaxed);
                inner.net_offset_at.store(now.max(1), Ordering::Relaxed);
            }
        }
        inner.net_offset.load(Ordering::Relaxed)
    }

    /// The daemon's network time (its clock corrected by its offset to the
    /// network's reference daemon, docs/time.md), with the offset and its
    /// error bound. Stamp events with it to compare times across hosts.
    pub fn network_time(&self) -> Result<TimeInfo> {
        match self.admin(AdminRequest::Time)? {
            AdminReply::Time(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    /// Sends an admin request (`docs/admin.md`) and returns its typed
    /// reply, of the variant that answers the request's kind. A refusal is
    /// [`Error::Refused`] with the daemon's code and message (naming what
    /// was wrong).
    ///
    /// ```no_run
    /// use tagwire::admin::{AdminReply, AdminRequest};
    /// # fn main() -> tagwire::Result<()> {
    /// let session = tagwire::Session::connect_local()?;
    /// let reply = session.admin(AdminRequest::Show { target: "/viewer3".into() })?;
    /// if let AdminReply::Show(shown) = reply {
    ///     println!("{shown:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn admin(&self, request: AdminRequest) -> Result<AdminReply> {
        let op = request.op();
        let text = self.admin_text(request.to_json())?;
        AdminReply::parse(op, &text).map_err(|e| Error::BadReply(e.to_string()))
    }

    /// The escape hatch: sends `request` as it is (JSON, `docs/admin.md`)
    /// and returns the reply as JSON, for a request this library has no
    /// type for (a newer daemon's) or to test the daemon's parser.
    /// Prefer [`Session::admin`].
    pub fn admin_json(&self, request: &serde_json::Value) -> Result<serde_json::Value> {
        let text = self.admin_text(request.to_string())?;
        serde_json::from_str(&text).map_err(|e| Error::BadReply(format!("admin reply: {e}")))
    }

    /// Sends an admin request body; the reply's JSON text.
    fn admin_text(&self, body: String) -> Result<String> {
        let ((), reply) = self
            .inner()
            .request("admin request", |e| ((), e.admin(body)))?;
        match reply? {
            Reply::Admin(text) => Ok(text),
            Reply::Err(code, message) => Err(Error::Refused { code, message }),
            Reply::Ok | Reply::Pulled(_) => Err(Error::BadReply("expected an admin reply".into())),
        }
    }

    /// One page of the listing after cursor `after`.
    pub(crate) fn list_page(&self, after: Option<String>, limit: Option<usize>) -> Result<Listing> {
        match self.admin(AdminRequest::List { after, limit })? {
            AdminReply::List(page) => Ok(*page),
            other => Err(unexpected(other)),
        }
    }

    /// Attaches filter `filter` (docs/filters.md) through `endpoint` at
    /// `level` (`tagwire admin filter add`); returns its id. Channel and
    /// session levels answer once every subscription concerned has it.
    pub fn filter_add(&self, endpoint: &str, level: FilterLevel, filter: &str) -> Result<u64> {
        self.add_filter(AdminRequest::FilterAdd {
            endpoint: endpoint.to_owned(),
            level,
            filter: Some(filter.to_owned()),
            map: None,
        })
    }

    /// Attaches mapping filter `map` to each channel of subscriber
    /// `endpoint` (replacing any other); returns its id.
    pub fn map_add(&self, endpoint: &str, map: &str) -> Result<u64> {
        self.add_filter(AdminRequest::FilterAdd {
            endpoint: endpoint.to_owned(),
            level: FilterLevel::Channel,
            filter: None,
            map: Some(map.to_owned()),
        })
    }

    fn add_filter(&self, request: AdminRequest) -> Result<u64> {
        match self.admin(request)? {
            AdminReply::FilterAdded(a) => Ok(a.id),
            other => Err(unexpected(other)),
        }
    }

    /// Removes filter `id` (from [`Session::filter_add`] or
    /// [`Session::filter_list`]).
    pub fn filter_remove(&self, id: u64) -> Result<()> {
        match self.admin(AdminRequest::FilterRemove { id })? {
            AdminReply::FilterRemoved(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Sets how the session and channel levels of `endpoint`'s connection
    /// combine: `"and"` (the default) or `"or"`.
    pub fn filter_op(&self, endpoint: &str, interfilter: &str) -> Result<()> {
        let request = AdminRequest::FilterOp {
            endpoint: endpoint.to_owned(),
            interfilter: interfilter.to_owned(),
        };
        match self.admin(request)? {
            AdminReply::FilterOp(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Changes QoS at run time (`tagwire admin qos`): on `target`
    /// (`["daemon"]`, `["connection:ID"]`, `["/subscriber"]`,
    /// `["/publisher", "/subscriber"]` or `["/tag/pattern"]`) sets each
    /// `(property, value)` of `set` and clears each property of `unset`,
    /// all or nothing.
    pub fn set_qos(
        &self,
        target: &[&str],
        set: &[(&str, &str)],
        unset: &[&str],
    ) -> Result<QosChanged> {
        let request = AdminRequest::Qos {
            target: target.iter().map(|t| (*t).to_owned()).collect(),
            set: set
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            unset: unset.iter().map(|u| (*u).to_owned()).collect(),
        };
        match self.admin(request)? {
            AdminReply::Qos(q) => Ok(q),
            other => Err(unexpected(other)),
        }
    }

    /// What `tagwire admin show TARGET` shows: an endpoint's channels with
    /// their effective QoS, a tag pattern's layer and pull buffer, `links`,
    /// `link:PEER` or `reservations`.
    pub fn show(&self, target: &str) -> Result<Show> {
        let request = AdminRequest::Show {
            target: target.to_owned(),
        };
        match self.admin(request)? {
            AdminReply::Show(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// The errors the router sent for no request since the last call — a
    /// publish refused by the ACL (`PermissionDenied`), a full queue
    /// (`QueueFull`), a bad tag — on this session and its band sessions,
    /// and forgets them. Publishing is fire-and-forget: call
    /// [`Session::ping`] first to be sure the router has handled every
    /// publish sent so far (its refusals arrive before the `Pong`).
    pub fn take_refusals(&self) -> Refusals {
        let inner = self.inner();
        let mut all = std::mem::take(&mut *lock(&inner.refusals));
        let bands: Vec<Session> = lock(&inner.bands).values().cloned().collect();
        for b in bands {
            all.absorb(b.take_refusals());
        }
        all
    }

    /// Measures one round trip to the router (a `Ping` answered by `Pong`).
    pub fn ping(&self) -> Result<Duration> {
        let start = Instant::now();
        let ((), reply) = self.inner().request("ping", |e| ((), e.ping()))?;
        match reply? {
            Reply::Ok => Ok(start.elapsed()),
            _ => Err(Error::BadReply("expected a Pong".into())),
        }
    }

    /// Returns once the router has handled everything sent before on this
    /// connection (a round trip: one connection's frames are handled in
    /// order). A lost connection counts as handled: its endpoints and
    /// subscriptions are gone with it.
    pub(crate) fn sync(&self) -> Result<()> {
        match self.ping() {
            Ok(_) | Err(Error::Disconnected | Error::Closed | Error::NotReconnected { .. }) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Writes any batched publishes now.
    pub fn flush(&self) -> Result<()> {
        let inner = self.inner();
        inner.flush_locked(lock(&inner.writer))
    }

    /// Over `udp://`: the connection's datagram counters (the daemon's
    /// datagrams received, lost, reordered, …; what could not be sent);
    /// `None` over stream transports.
    pub fn udp_counters(&self) -> Option<crate::udp::UdpCounters> {
        lock(&self.inner().udp).as_ref().map(|s| s.counters())
    }

    /// How many times the session reconnected after losing its connection.
    pub fn reconnects(&self) -> u64 {
        self.inner().reconnects.load(Ordering::Relaxed)
    }

    /// Events of subscriptions with acknowledged delivery (reliability
    /// `reliable` or more) that the daemon sent again after a reconnect and
    /// this session had already delivered: dropped, not delivered twice.
    pub fn delivery_duplicates(&self) -> u64 {
        self.inner().delivery_duplicates.load(Ordering::Relaxed)
    }

    /// Whether the session currently has a connection.
    pub fn is_connected(&self) -> bool {
        lock(&self.inner().writer).connected
    }
}

/// Errors the router sent for no request (see [`Session::take_refusals`]):
/// how many, and the first and the last of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    /// How many.
    pub count: u64,
    /// The first one: its code and the router's message.
    pub first: Option<(ErrorCode, String)>,
    /// The last one.
    pub last: Option<(ErrorCode, String)>,
}

impl Refusals {
    /// Notes one more.
    pub(crate) fn note(&mut self, code: ErrorCode, message: &str) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((code, message.to_owned()));
        }
        self.last = Some((code, message.to_owned()));
    }

    fn absorb(&mut self, other: Refusals) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
        if other.last.is_some() {
            self.last = other.last;
        }
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the
/// state it guards stays consistent: every critical section is short).
/// How an acknowledged subscription batches its `DeliverAck`s, if its QoS
/// names a `max_queue_length` (the daemon's window for it): one per
/// sixteenth of that queue, 64 to 4,096 events (a large queue asked for
/// throughput; each acknowledgement costs a write here and a read and a
/// turn of its lane in the daemon). `None`: the default (64 events, which
/// is a sixteenth of the daemon's default queue of 1,024). A queue made
/// smaller later by `tagwire admin qos` may leave acknowledgements to the
/// batching's timer (20 ms).
fn ack_batching_for(qos: &[(String, String)]) -> Option<AckBatching> {
    let (_, v) = qos.iter().rev().find(|(k, _)| k == "max_queue_length")?;
    let n: u64 = v.trim().parse().ok()?;
    let every = (n / 16).clamp(AckBatching::default().every, 4096);
    Some(AckBatching {
        every,
        ..AckBatching::default()
    })
}

impl Inner {
    /// Subscription `sub`'s acknowledgement batching (see
    /// [`ack_batching_for`]).
    pub(super) fn ack_batching(&self, sub: u32) -> AckBatching {
        lock(&self.ack_batching)
            .get(&sub)
            .copied()
            .unwrap_or_default()
    }
}

impl Inner {
    /// The daemon in use (or last tried).
    pub(crate) fn target(&self) -> &Target {
        &self.targets[self.current.load(Ordering::Relaxed) % self.targets.len()]
    }

    /// Declares an endpoint and waits for the router's answer.
    pub(crate) fn declare_endpoint(&self, kind: EndpointKind, name: &str) -> Result<u32> {
        let (id, reply) = self.request("endpoint declaration", |e| e.declare(kind, name))?;
        // The engine forgets a refused endpoint itself; one whose answer
        // never came is forgotten here (and freed, should the router have it).
        reply
            .and_then(expect_ok)
            .inspect_err(|_| self.undeclare_endpoint(id))?;
        Ok(id)
    }

    /// Subscribes endpoint `endpoint` and waits for the router's answer;
    /// returns the subscription id. The sink is in place before the
    /// `Subscribe` is written, so that no delivery can arrive before it.
    pub(crate) fn add_subscription(
        &self,
        endpoint: u32,
        pattern: &str,
        mut qos: Vec<(String, String)>,
        sink: Arc<Sink>,
    ) -> Result<u32> {
        if self.options.shm != crate::shm::ShmMode::Auto && !qos.iter().any(|(k, _)| k == "shm") {
            // The session's default, unless the subscription says.
            qos.push(("shm".into(), self.options.shm.to_string()));
        }
        let batching = ack_batching_for(&qos);
        let (sub, reply) = self.request("subscription", |e| {
            let (sub, req) = e.subscribe(endpoint, pattern, qos);
            if let Some(b) = batching {
                lock(&self.ack_batching).insert(sub, b);
            }
            lock(&self.sinks).insert(sub, sink);
            self.subs_generation.fetch_add(1, Ordering::Release);
            (sub, req)
        })?;
        reply.and_then(expect_ok).inspect_err(|_| {
            lock(&self.ack_batching).remove(&sub);
            lock(&self.sinks).remove(&sub);
            self.subs_generation.fetch_add(1, Ordering::Release);
            self.control(|e| e.unsubscribe(sub));
        })?;
        Ok(sub)
    }

    /// Drops a subscription and its endpoint without waiting for replies.
    pub(crate) fn remove_subscription(&self, sub: u32) {
        lock(&self.ack_batching).remove(&sub);
        lock(&self.sinks).remove(&sub);
        self.subs_generation.fetch_add(1, Ordering::Release);
        self.control(|e| {
            if let Some(endpoint) = e.subscriptions().get(&sub).map(|s| s.endpoint) {
                e.unsubscribe(sub);
                e.undeclare(endpoint);
            }
        });
    }

    /// Frees an endpoint's name without waiting for the reply.
    pub(crate) fn undeclare_endpoint(&self, id: u32) {
        self.control(|e| e.undeclare(id));
    }

    /// Sends a request made by `make` (which returns its result and the
    /// request id) and waits for its reply. Fails if the request could not
    /// be sent; once it is, returns `make`'s result and the reply, or why
    /// none came ([`Error::Timeout`], [`Error::Disconnected`]).
    pub(crate) fn request<T>(
        &self,
        what: &'static str,
        make: impl FnOnce(&mut Connection) -> (T, u32),
    ) -> Result<(T, Result<Reply>)> {
        if *lock(&self.reader_thread) == Some(std::thread::current().id()) {
            return Err(Error::BadReply(format!(
                "cannot make a {what} from inside a subscription callback (it would wait for itself)"
            )));
        }
        let (t, req, rx) = self.send_request(make)?;
        let reply = match rx.recv_timeout(REQUEST_TIMEOUT) {
            Ok(r) => Ok(r),
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.waiters).remove(&req);
                lock(&self.engine).forget(req);
                Err(Error::Timeout {
                    what,
                    secs: REQUEST_TIMEOUT.as_secs(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(Error::Disconnected),
        };
        Ok((t, reply))
    }

    /// Whether the calling thread is this session's reader thread (a
    /// subscription callback runs there; it must not wait for a reply).
    pub(crate) fn on_reader_thread(&self) -> bool {
        *lock(&self.reader_thread) == Some(std::thread::current().id())
    }

    /// Sends a request and returns, without waiting, where its reply will
    /// come (from any thread, a subscription callback's included).
    pub(crate) fn send_request<T>(
        &self,
        make: impl FnOnce(&mut Connection) -> (T, u32),
    ) -> Result<(T, u32, Receiver<Reply>)> {
        let mut w = self.wait_connected(lock(&self.writer))?;
        let (t, req) = make(&mut lock(&self.engine));
        let (tx, rx) = sync_channel(1);
        lock(&self.waiters).insert(req, tx);
        self.take_control(&mut w);
        self.flush_locked(w)?;
        Ok((t, req, rx))
    }

    /// The engine's clock: nanoseconds since `origin`.
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // The batched publishes, then the engine's `Close` (a reconnect
        // under way stops at it).
        let mut w = lock(&self.writer);
        lock(&self.engine).close(0, "client closed");
        if w.connected {
            self.take_control(&mut w);
        }
        let _ = self.flush_locked(w);
        let mut w = lock(&self.writer);
        w.connected = false;
        if let Some(s) = lock(&self.socket).take() {
            if self.shm.reads_in_place() {
                // The reader thread reads on until the daemon closes, to
                // give back the pins of payloads still on their way (`drain`).
                s.shutdown_write();
            } else {
                s.shutdown();
            }
        }
        drop(w);
        self.flush_cv.notify_all();
        self.connected_cv.notify_all();
        let sinks = std::mem::take(&mut *lock(&self.sinks));
        for sink in sinks.values() {
            sink.close();
        }
    }
}

fn expect_ok(r: Reply) -> Result<()> {
    match r {
        Reply::Ok => Ok(()),
        Reply::Err(code, message) => Err(Error::Refused { code, message }),
        Reply::Admin(_) => Err(Error::BadReply("unexpected admin reply".into())),
        Reply::Pulled(_) => Err(Error::BadReply("unexpected pull reply".into())),
    }
}
/// A reply of another kind than the request's (which
/// [`AdminReply::parse`] rules out).
fn unexpected(reply: AdminReply) -> Error {
    Error::BadReply(format!(
        "expected another reply than the one to {}",
        reply.op()
    ))
}
