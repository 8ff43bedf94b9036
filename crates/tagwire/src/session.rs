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

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tagwire_core::connection::{ClientHello, Config, Connection, Input, Reply};
use tagwire_proto::admin::{
    AdminOp, AdminReply, AdminRequest, FilterInfo, FilterLevel, Listing, QosChanged, Show, TimeInfo,
};
use tagwire_proto::{EndpointKind, Event};
use tagwire_router::{Limits, Router, RouterHandle};

use crate::builder::{is_timeout, Options, SessionBuilder};
use crate::error::{Error, Result};
use crate::publisher::Publisher;
use crate::stream::Stream;
use crate::subscriber::{Sink, SubscriptionBuilder};
use crate::tls::{TlsConnector, TlsOptions};
use crate::url::ServerUrl;

/// Publishes closer together than this are batched into one write.
pub const HOT_INTERVAL: Duration = Duration::from_micros(20);
/// In burst mode, how long the flusher waits for more events before writing
/// a small batch: the most a burst's last events wait.
const LINGER: Duration = Duration::from_micros(50);
/// Buffered publish bytes that force an immediate write.
const HIGH_WATER: usize = 64 * 1024;
/// How long a request (declare, subscribe, admin) waits for its reply.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnect backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Read chunk size.
const READ_CHUNK: usize = 64 * 1024;

/// Where a session's connection comes from.
pub(crate) enum Target {
    Url(ServerUrl),
    Embedded(Arc<RouterHandle>),
    /// A `tls://` URL's `HOST:PORT` with its loaded TLS settings (reused on
    /// reconnect).
    Tls(String, TlsConnector),
}

impl Target {
    /// A target for `url`; `tls` gives the settings if it is `tls://`.
    pub(crate) fn new(url: ServerUrl, tls: impl FnOnce() -> TlsOptions) -> Result<Target> {
        Ok(match url {
            ServerUrl::Tls(addr) => {
                let connector = TlsConnector::new(&tls(), &format!("tls://{addr}"))?;
                Target::Tls(addr, connector)
            }
            url => Target::Url(url),
        })
    }

    fn connect(&self, timeout: Duration, band: Option<&str>) -> Result<Stream> {
        match self {
            Target::Url(url) => Stream::connect(url, timeout).map_err(|source| {
                if is_timeout(&source) {
                    Error::ConnectTimeout {
                        url: url.to_string(),
                        timeout,
                    }
                } else {
                    Error::Connect {
                        url: url.to_string(),
                        source,
                    }
                }
            }),
            Target::Embedded(r) => Ok(Stream::Unix(match band {
                Some(b) => r.connect_in_process_on(b)?,
                None => r.connect_in_process()?,
            })),
            Target::Tls(addr, connector) => {
                Stream::connect_tls(connector, addr, &format!("tls://{addr}"), timeout)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Url(u) => u.to_string(),
            Target::Tls(addr, _) => format!("tls://{addr}"),
            Target::Embedded(_) => "embedded".into(),
        }
    }

    /// The token to present in `Hello` (empty: the transport identifies us).
    fn token(&self) -> String {
        match self {
            Target::Url(ServerUrl::Tcp(addr)) | Target::Tls(addr, _) => {
                crate::credentials::token_for(addr)
            }
            Target::Url(_) | Target::Embedded(_) => String::new(),
        }
    }
}

struct WriteState {
    buf: BytesMut,
    /// Source timestamp of the previous publish (ns), for burst detection.
    last_publish_ns: u64,
    flush_requested: bool,
    /// The flusher is parked on the condvar (so a notify is needed).
    flusher_waiting: bool,
    connected: bool,
    /// The engine's frame limit, copied when the connection is
    /// established, so that a publish does not lock the engine.
    max_frame: u32,
}

pub(crate) struct Inner {
    /// The daemons this session may use, in order of preference (one
    /// unless the URL listed several); `current` is the one in use.
    targets: Vec<Target>,
    current: AtomicUsize,
    name: String,
    options: Options,
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
    /// Notified when the connection comes back or the session closes.
    connected_cv: Condvar,
    /// The threads waiting for a reply, by request id.
    waiters: Mutex<HashMap<u32, SyncSender<Reply>>>,
    /// Where each subscription's deliveries go; the reader thread keeps a
    /// copy, taken again when `subs_generation` changes.
    sinks: Mutex<HashMap<u32, Arc<Sink>>>,
    subs_generation: AtomicU64,
    closed: AtomicBool,
    reader_thread: Mutex<Option<ThreadId>>,
    reconnects: AtomicU64,
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
}

/// The router's bands as its listing gives them.
struct RouterBands {
    lanes: Vec<tagwire_router::LaneEntry>,
    default_band: String,
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

/// A router running inside this process, shared by any number of sessions
/// ([`EmbeddedRouter::session`]). It stops when it and its sessions are dropped.
#[derive(Clone, Debug)]
pub struct EmbeddedRouter(Arc<RouterHandle>);

impl EmbeddedRouter {
    /// Starts an in-process router with default limits.
    pub fn start() -> Result<Self> {
        Ok(EmbeddedRouter(Arc::new(Router::start_embedded(
            Limits::default(),
        )?)))
    }

    /// A new session on this router.
    pub fn session(&self) -> Result<Session> {
        Session::open(
            Target::Embedded(self.0.clone()),
            SessionBuilder::default().options(),
        )
    }
}

static SESSION_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Session {
    /// Connects to a daemon at `url`: `tcp://HOST:PORT`, `tls://HOST:PORT`
    /// or `unix:///PATH`, with the default timeouts ([`SessionBuilder`]). A
    /// `tls://` URL takes its settings from the environment
    /// ([`TlsOptions::from_env`]).
    pub fn connect(url: &str) -> Result<Session> {
        Session::builder().connect(url)
    }

    /// Connects like [`Session::connect`], with these TLS settings for a
    /// `tls://` URL instead of the environment's (other schemes ignore them).
    pub fn connect_with_tls(url: &str, tls: &TlsOptions) -> Result<Session> {
        Session::builder().tls(tls.clone()).connect(url)
    }

    /// Connects to the local daemon: its Unix socket if present, else
    /// `tcp://127.0.0.1:7700`.
    pub fn connect_local() -> Result<Session> {
        Session::builder().connect_local()
    }

    /// Starts configuring a session: connect timeout, reconnect wait.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }

    /// Starts a private in-process router and connects to it: the same API
    /// and protocol as a daemon, with no daemon.
    pub fn embedded() -> Result<Session> {
        EmbeddedRouter::start()?.session()
    }

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
            ..Config::default()
        };
        let hello = ClientHello {
            name: name.clone(),
            token: String::new(), // `connect` reads it before each attempt
            // Kept across reconnects, so the router gives our endpoint names back.
            session: options
                .session_id
                .unwrap_or_else(crate::credentials::new_session_id),
        };
        let inner = Arc::new(Inner {
            targets,
            current: AtomicUsize::new(0),
            name,
            options,
            origin: Instant::now(),
            writer: Mutex::new(WriteState {
                buf: BytesMut::with_capacity(HIGH_WATER),
                last_publish_ns: 0,
                flush_requested: false,
                flusher_waiting: false,
                connected: false,
                max_frame: 0,
            }),
            engine: Mutex::new(Connection::client(config, hello, 0)),
            socket: Mutex::new(None),
            replay: Mutex::new(BytesMut::new()),
            flush_cv: Condvar::new(),
            connected_cv: Condvar::new(),
            waiters: Mutex::new(HashMap::new()),
            sinks: Mutex::new(HashMap::new()),
            subs_generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            reader_thread: Mutex::new(None),
            reconnects: AtomicU64::new(0),
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

    /// This session's client name (sent in the handshake).
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// Declares a publisher endpoint named `name` (unique in the router).
    pub fn declare_publisher(&self, name: &str) -> Result<Publisher> {
        self.declare_publisher_with(name, self.inner().options.shm)
    }

    /// Declares a publisher with its own `shm` mode (see [`crate::ShmMode`]):
    /// `Auto` (the session's default unless [`SessionBuilder::shm`] says
    /// otherwise) puts payloads in shared memory when the daemon is on this
    /// host and grants a region, and logs why not otherwise; `Require`
    /// fails instead; `Off` keeps payloads on the socket.
    pub fn declare_publisher_with(&self, name: &str, shm: crate::ShmMode) -> Result<Publisher> {
        let id = self
            .inner()
            .declare_endpoint(EndpointKind::Publisher, name)?;
        let region = match self.open_shm(name, id, shm) {
            Ok(r) => r,
            Err(e) => {
                self.inner().undeclare_endpoint(id);
                return Err(e);
            }
        };
        Ok(Publisher::new(
            self.clone(),
            id,
            name.to_owned(),
            region,
            shm,
        ))
    }

    /// Asks the daemon for a shared-memory region for publisher `name` (the
    /// daemon's start size) and waits for it; see [`Session::ask_shm`].
    pub(crate) fn open_shm(
        &self,
        name: &str,
        id: u32,
        mode: crate::ShmMode,
    ) -> Result<Option<crate::shm::ShmPublisher>> {
        match self.ask_shm(name, id, mode, None)? {
            None => Ok(None),
            Some(ask) => {
                let reply = ask.wait();
                self.answer_shm(&ask, reply)
            }
        }
    }

    /// Sends the `shm_open` request for publisher `name` without waiting
    /// (so a subscription callback may publish, and grow its region):
    /// `grow: Some((max_packet, current))` asks for a region whose chunks
    /// hold `max_packet` bytes to replace region `current`. `Ok(None)`: not
    /// asked (`off`, or the daemon is not on this host under `auto`).
    pub(crate) fn ask_shm(
        &self,
        name: &str,
        id: u32,
        mode: crate::ShmMode,
        grow: Option<(u64, u64)>,
    ) -> Result<Option<crate::shm::ShmAsk>> {
        if mode == crate::ShmMode::Off {
            return Ok(None);
        }
        if !self.is_same_host() {
            let why = format!(
                "the daemon is reached over {} (shared memory needs its Unix socket or embedded mode)",
                self.inner().target().describe()
            );
            if mode == crate::ShmMode::Auto {
                // The expected case for a remote daemon: not worth a log line.
                tracing::debug!("publisher {name}: payloads go over the socket: {why}");
                return Ok(None);
            }
            return crate::shm::refuse(name, mode, why).map(|_| None);
        }
        let body = AdminRequest::ShmOpen {
            endpoint: name.to_owned(),
            id,
            max_packet: grow.map(|(m, _)| m),
            pid: Some(std::process::id()),
        }
        .to_json();
        match self.inner().send_request(|e| ((), e.admin(body))) {
            Ok(((), _, rx)) => Ok(Some(crate::shm::ShmAsk {
                rx,
                name: name.to_owned(),
                mode,
                grow,
                reconnects: self.reconnects(),
            })),
            Err(e) => crate::shm::refuse(name, mode, e.to_string()).map(|_| None),
        }
    }

    /// The region an `shm_open` reply grants, taken as producer. `auto`
    /// logs why not and gives `Ok(None)`; `require` fails naming it; a
    /// growth answered with the current region (the daemon makes none
    /// larger) is `Ok(None)` without a log line.
    pub(crate) fn answer_shm(
        &self,
        ask: &crate::shm::ShmAsk,
        reply: Result<Reply>,
    ) -> Result<Option<crate::shm::ShmPublisher>> {
        let refuse = |why: String| crate::shm::refuse(&ask.name, ask.mode, why);
        let region = match reply {
            Ok(Reply::Admin(text)) => match AdminReply::parse(AdminOp::ShmOpen, &text) {
                Ok(AdminReply::ShmOpened(g)) => g.region,
                Ok(other) => {
                    return refuse(format!("unexpected shm_open reply {}", other.to_json()))
                }
                Err(e) => return refuse(e.to_string()),
            },
            Ok(Reply::Err(_, message)) => return refuse(message),
            Ok(_) => return refuse("expected an admin reply to shm_open".into()),
            Err(Error::BadReply(why)) => return refuse(why),
            Err(e) => return refuse(e.to_string()),
        };
        if ask.grow.is_some_and(|(_, current)| current == region) {
            // Already as large as the daemon makes them (its fd came again).
            drop(self.inner().shm.take_grant(region));
            return Ok(None);
        }
        let Some(mapped) = self.inner().shm.take_grant(region) else {
            return refuse(format!(
                "region {region} was granted but its fd did not arrive"
            ));
        };
        match crate::shm::ShmPublisher::new(region, mapped, ask.reconnects) {
            Ok(p) => Ok(Some(p)),
            Err(why) => refuse(why),
        }
    }

    /// Whether this session reaches its router on this host (a Unix socket
    /// or embedded), where shared memory can be negotiated.
    pub fn is_same_host(&self) -> bool {
        matches!(
            self.inner().target(),
            Target::Url(ServerUrl::Unix(_)) | Target::Embedded(_)
        )
    }

    /// What this session's shared-memory path did so far (see `docs/shm.md`).
    pub fn shm_stats(&self) -> crate::ShmStats {
        self.inner().shm.stats()
    }

    /// Starts building a subscription to `pattern` (`*` one level, `**` any
    /// depth); finish with `.receiver()`, `.callback(f)`.
    pub fn subscribe(&self, pattern: &str) -> SubscriptionBuilder {
        SubscriptionBuilder::new(self.clone(), pattern)
    }

    /// Asks the router for its tags, endpoints and subscriptions. The
    /// router answers in pages that fit the connection's frame size
    /// (`docs/admin.md`); this follows them and returns the whole listing,
    /// with the counters of the last page.
    pub fn list(&self) -> Result<Listing> {
        self.list_all()
    }

    /// A session on priority band `band` of the same router (`low`,
    /// `normal`, `high`, `critical` by default), opened on first use and
    /// shared after: its connection goes to the band's listener, so the
    /// router serves it on that band's lane; its TCP socket carries the
    /// band's DSCP both ways; and its reader thread runs with the band's
    /// scheduling, so its subscribers' callbacks run at the band's priority.
    /// Declare the endpoints that need the band on it:
    /// `session.on_band("high")?.declare_publisher("/alarm")`.
    pub fn on_band(&self, band: &str) -> Result<Session> {
        let inner = self.inner();
        if inner.options.band.as_ref().is_some_and(|b| b.name == band) {
            return Ok(self.clone());
        }
        if let Some(s) = lock(&inner.bands).get(band) {
            return Ok(s.clone());
        }
        let bands = self.router_bands()?;
        let Some(lane) = bands.lanes.iter().find(|l| l.band == band) else {
            return Err(Error::UnknownBand {
                band: band.to_owned(),
                known: bands
                    .lanes
                    .iter()
                    .map(|l| l.band.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let no_listener =
            || Error::BadReply(format!("band {band} has no listener for this transport"));
        let port = || -> Result<u16> {
            lane.tcp
                .as_deref()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.parse().ok())
                .ok_or_else(no_listener)
        };
        let with_port = |hostport: &str, port: u16| match hostport.rsplit_once(':') {
            Some((host, _)) => format!("{host}:{port}"),
            None => format!("{hostport}:{port}"),
        };
        let target = match inner.target() {
            Target::Url(ServerUrl::Tcp(a)) => Target::Url(ServerUrl::Tcp(with_port(a, port()?))),
            Target::Url(ServerUrl::Tls(a)) => Target::Url(ServerUrl::Tls(with_port(a, port()?))),
            Target::Url(ServerUrl::Unix(_)) => Target::Url(ServerUrl::Unix(
                lane.unix
                    .clone()
                    .map(std::path::PathBuf::from)
                    .ok_or_else(no_listener)?,
            )),
            Target::Tls(a, c) => Target::Tls(with_port(a, port()?), c.clone()),
            Target::Embedded(r) => Target::Embedded(r.clone()),
        };
        let mut options = inner.options.clone();
        // The same session id: the router then lets the band connection
        // publish under this session's endpoint names.
        options.session_id = Some(lock(&inner.engine).session_id());
        options.follow_priority = false;
        options.band = Some(crate::builder::ClientBand {
            name: band.to_owned(),
            dscp: lane.dscp,
            sched: lane.sched.parse().unwrap_or_default(),
        });
        let s = Session::open(target, options)?;
        lock(&inner.bands).insert(band.to_owned(), s.clone());
        Ok(s)
    }

    /// The band an event of `priority` travels on under
    /// [`SessionBuilder::follow_priority`] (`None`: this session's own
    /// connection). The router's bands split 0..=255 evenly, lowest first.
    pub(crate) fn band_for_priority(&self, priority: u8) -> Result<Option<String>> {
        let inner = self.inner();
        if !inner.options.follow_priority {
            return Ok(None);
        }
        let bands = self.router_bands()?;
        let lanes = &bands.lanes;
        if lanes.is_empty() {
            return Ok(None);
        }
        let band = lanes[priority as usize * lanes.len() / 256].band.as_str();
        // An unbanded session reached the router's default band.
        let own = inner
            .options
            .band
            .as_ref()
            .map_or(bands.default_band.as_str(), |b| b.name.as_str());
        Ok((band != own).then(|| band.to_owned()))
    }

    /// The router's bands (lanes, lowest first) and its default band, asked
    /// once per session (they are fixed while the router runs).
    fn router_bands(&self) -> Result<Arc<RouterBands>> {
        let inner = self.inner();
        if let Some(b) = lock(&inner.router_bands).clone() {
            return Ok(b);
        }
        let page = self.list_page(None, Some(1))?;
        let b = Arc::new(RouterBands {
            lanes: page.lanes,
            default_band: page.default_band,
        });
        *lock(&inner.router_bands) = Some(b.clone());
        Ok(b)
    }

    /// The band this session's connection belongs to (`None`: the
    /// listener's default band).
    pub fn band(&self) -> Option<&str> {
        self.inner().options.band.as_ref().map(|b| b.name.as_str())
    }

    /// The band that serves this session's connection: its own band, or
    /// the router's default band (asked once per session).
    pub fn band_in_use(&self) -> Result<String> {
        match self.band() {
            Some(b) => Ok(b.to_owned()),
            None => Ok(self.router_bands()?.default_band.clone()),
        }
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
            let before = crate::publisher::now_ns();
            if let Ok(t) = self.network_time() {
                let after = crate::publisher::now_ns();
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
    fn list_page(&self, after: Option<String>, limit: Option<usize>) -> Result<Listing> {
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

    /// Measures one round trip to the router (a `Ping` answered by `Pong`).
    pub fn ping(&self) -> Result<Duration> {
        let start = Instant::now();
        let ((), reply) = self.inner().request("ping", |e| ((), e.ping()))?;
        match reply? {
            Reply::Ok => Ok(start.elapsed()),
            _ => Err(Error::BadReply("expected a Pong".into())),
        }
    }

    /// Writes any batched publishes now.
    pub fn flush(&self) -> Result<()> {
        let inner = self.inner();
        inner.flush_locked(lock(&inner.writer))
    }

    /// How many times the session reconnected after losing its connection.
    pub fn reconnects(&self) -> u64 {
        self.inner().reconnects.load(Ordering::Relaxed)
    }

    /// Whether the session currently has a connection.
    pub fn is_connected(&self) -> bool {
        lock(&self.inner().writer).connected
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the
/// state it guards stays consistent: every critical section is short).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// The daemon in use (or last tried).
    fn target(&self) -> &Target {
        &self.targets[self.current.load(Ordering::Relaxed) % self.targets.len()]
    }

    /// Connects to the daemon in use, else to the others in turn; the
    /// first that answers becomes the one in use. The error is the last
    /// daemon's.
    fn connect_any(&self, band: Option<&str>) -> Result<Stream> {
        let n = self.targets.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for i in 0..n {
            let at = (first + i) % n;
            match self.targets[at].connect(self.options.connect_timeout, band) {
                Ok(s) => {
                    if at != first {
                        tracing::info!("failing over to {}", self.targets[at].describe());
                    }
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("a session has at least one target"))
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
        if self.options.shm != crate::ShmMode::Auto && !qos.iter().any(|(k, _)| k == "shm") {
            // The session's default, unless the subscription says.
            qos.push(("shm".into(), self.options.shm.to_string()));
        }
        let (sub, reply) = self.request("subscription", |e| {
            let (sub, req) = e.subscribe(endpoint, pattern, qos);
            lock(&self.sinks).insert(sub, sink);
            self.subs_generation.fetch_add(1, Ordering::Release);
            (sub, req)
        })?;
        reply.and_then(expect_ok).inspect_err(|_| {
            lock(&self.sinks).remove(&sub);
            self.subs_generation.fetch_add(1, Ordering::Release);
            self.control(|e| e.unsubscribe(sub));
        })?;
        Ok(sub)
    }

    /// Drops a subscription and its endpoint without waiting for replies.
    pub(crate) fn remove_subscription(&self, sub: u32) {
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

    /// Changes the engine's state with `f` and writes the control frames
    /// that makes (with anything batched before them) now. While the
    /// session is reconnecting they wait in the engine (see `take_control`).
    fn control(&self, f: impl FnOnce(&mut Connection)) {
        let mut w = lock(&self.writer);
        f(&mut lock(&self.engine));
        if w.connected {
            self.take_control(&mut w);
            let _ = self.flush_locked(w);
        }
    }

    /// Moves the engine's control frames to the end of the write buffer.
    /// Only while connected (or, in `connect`, before the replayed
    /// publishes): the buffer of a lost connection is sifted for publishes.
    fn take_control(&self, w: &mut WriteState) {
        let mut e = lock(&self.engine);
        while let Some(frames) = e.poll_transmit() {
            w.buf.extend_from_slice(&frames);
        }
    }

    /// The engine's clock: nanoseconds since `origin`.
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Queues a publish; writes now if the stream is idle or the batch is full.
    /// `now_ns` is the event's source timestamp, reused to detect bursts.
    pub(crate) fn publish(
        &self,
        endpoint: u32,
        event: &Event,
        express: bool,
        now_ns: u64,
    ) -> Result<()> {
        let w = self.wait_connected(lock(&self.writer))?;
        let mut w = w;
        let len = 1 + 4 + event.encoded_len();
        if len > w.max_frame as usize {
            return Err(Error::Encode(tagwire_proto::EncodeError::FrameTooLarge {
                len,
                max: w.max_frame as usize,
            }));
        }
        tagwire_proto::encode_publish(endpoint, event, &mut w.buf)?;
        let hot = now_ns.wrapping_sub(w.last_publish_ns) < HOT_INTERVAL.as_nanos() as u64;
        w.last_publish_ns = now_ns;
        if express || !hot || w.buf.len() >= HIGH_WATER {
            return self.flush_locked(w);
        }
        if !w.flush_requested {
            w.flush_requested = true;
            if w.flusher_waiting {
                self.flush_cv.notify_one();
            }
        }
        Ok(())
    }

    /// Returns `w` once the session is connected: at once if it is, else
    /// after waiting up to `reconnect_wait` for the reader thread to
    /// reconnect. Fails with [`Error::Closed`] if the session closes, with
    /// [`Error::NotReconnected`] at the bound, and with
    /// [`Error::Disconnected`] on the reader thread (a callback), which
    /// cannot wait for itself.
    fn wait_connected<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriteState>,
    ) -> Result<MutexGuard<'a, WriteState>> {
        let mut deadline = None;
        while !w.connected {
            if self.closed.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            if *lock(&self.reader_thread) == Some(std::thread::current().id()) {
                return Err(Error::Disconnected);
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + self.options.reconnect_wait);
            if now >= deadline {
                return Err(Error::NotReconnected {
                    url: self.target().describe(),
                    waited: self.options.reconnect_wait,
                });
            }
            w = self
                .connected_cv
                .wait_timeout(w, deadline - now)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
        Ok(w)
    }

    /// Writes the buffer. Takes the socket lock before releasing the writer
    /// lock, so bytes reach the socket in the order they were buffered.
    ///
    /// With no connection the bytes stay buffered, and a batch whose write
    /// fails is kept for replay: either way, after a reconnect the
    /// publishes among them are sent again (`connect`). The session is
    /// marked disconnected, so later publishes wait instead of piling up.
    fn flush_locked(&self, mut w: MutexGuard<'_, WriteState>) -> Result<()> {
        if w.buf.is_empty() {
            return Ok(());
        }
        let mut sock = lock(&self.socket);
        let Some(s) = sock.as_mut() else {
            w.connected = false;
            return Ok(());
        };
        let data = w.buf.split().freeze();
        drop(w);
        if let Err(e) = s.write_all(&data) {
            tracing::debug!("write failed: {e}; keeping the batch for after the reconnect");
            // Wake the reader so it notices and reconnects.
            s.shutdown();
            *sock = None;
            lock(&self.replay).extend_from_slice(&data);
        }
        Ok(())
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

/// Writes the engine's `Hello` on `stream` and reads until the engine has
/// the `Welcome`; returns the bytes read past it. The engine decides: a
/// `Welcome`, a refusal ([`Error::Refused`]), a bad answer
/// ([`Error::Handshake`]) or, at its handshake deadline,
/// [`Error::ConnectTimeout`].
fn handshake(inner: &Inner, stream: &mut Stream) -> Result<BytesMut> {
    let engine = &inner.engine;
    let fail = |reason: String| Error::Handshake {
        url: inner.target().describe(),
        reason,
    };
    let hello = lock(engine).poll_transmit().unwrap_or_default();
    stream.write_all(&hello)?;
    let mut buf = BytesMut::new();
    let welcomed = loop {
        let mut e = lock(engine);
        match e.poll_input(&mut buf) {
            Some(Input::Welcome { .. }) => break Ok(()),
            Some(Input::PeerError { code, message, .. }) => {
                break Err(match e.closed() {
                    Some(c) if c.by_peer => Error::Refused { code, message },
                    _ => fail(message),
                });
            }
            Some(Input::Closed) => {
                let reason = e.closed().map(|c| c.reason.clone()).unwrap_or_default();
                break Err(fail(reason));
            }
            Some(_) => continue,
            None => {}
        }
        let Some(deadline) = e.poll_timeout() else {
            break Err(fail("the connection closed before the Welcome".into()));
        };
        let wait = Duration::from_nanos(deadline.saturating_sub(inner.now()));
        drop(e);
        stream.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        match read_some(stream, &mut buf) {
            Ok(true) => lock(engine).received(inner.now()),
            Ok(false) => break Err(fail("server closed the connection".into())),
            Err(err) if is_timeout(&err) => {
                let mut e = lock(engine);
                e.handle_timeout(inner.now());
                if e.closed().is_some() {
                    break Err(Error::ConnectTimeout {
                        url: inner.target().describe(),
                        timeout: inner.options.connect_timeout,
                    });
                }
            }
            Err(err) => break Err(fail(format!("reading Welcome: {err}"))),
        }
    };
    stream.set_read_timeout(None)?;
    welcomed.map(|()| buf)
}

/// Reads into `buf`; false on end of stream.
fn read_some(stream: &mut Stream, buf: &mut BytesMut) -> std::io::Result<bool> {
    let start = buf.len();
    buf.resize(start + READ_CHUNK, 0);
    let n = loop {
        match stream.read(&mut buf[start..]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    Ok(n? > 0)
}

/// Like [`read_some`], keeping passed fds for the shared-memory regions.
fn read_some_fds(
    stream: &mut Stream,
    buf: &mut BytesMut,
    shm: &crate::shm::ClientShm,
) -> std::io::Result<bool> {
    let start = buf.len();
    buf.resize(start + READ_CHUNK, 0);
    let mut fds = Vec::new();
    let n = loop {
        match stream.read_with_fds(&mut buf[start..], &mut fds) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    if !fds.is_empty() {
        shm.received_fds(fds);
    }
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    Ok(n? > 0)
}

/// Hands a delivered event to its sink; a payload in shared memory gets
/// its mapped region attached (read at hand-over), or is skipped (counted)
/// if this session has no such region.
fn deliver(inner: &Inner, sink: &Sink, event: Bytes) {
    let sample = match crate::sample::Sample::new(event) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("dropping a malformed event from the server: {e}");
            return;
        }
    };
    match sample.shm_ref() {
        None => sink.deliver_sample(sample),
        Some(r) => {
            if let Some(payload) = inner.shm.adopt(r) {
                let expired = inner.shm.expired_counter();
                sink.deliver_sample(sample.with_shm_payload(payload, expired));
            }
        }
    }
}

/// Drops a delivered event nobody takes (its subscription is gone),
/// giving back the pin of a payload in shared memory: else the daemon
/// counts it held by this connection for as long as the connection lasts
/// (and past it, parked, until this process exits), and past
/// `limits.shm_pins` such pins the connection gets copies only.
fn discard(inner: &Inner, event: Bytes) {
    if let Some(r) = crate::sample::Sample::new(event)
        .ok()
        .and_then(|s| s.shm_ref())
    {
        inner.shm.give_back(r);
    }
}

/// How long a closed session's reader thread waits for the daemon to
/// close the connection (see [`drain`]).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// After this session's own `Close`, if it reads payloads in place: reads
/// what the daemon still sends until it closes the connection (at most
/// [`DRAIN_TIMEOUT`]), giving back the pins of the payloads in shared
/// memory among it. Otherwise the daemon counts them held by this process
/// until it exits (the connection's pin row parked), and a few sessions
/// closed so could pin every spare chunk of a publisher's region, sending
/// all its payloads over the socket, for every subscriber.
fn drain(inner: &Inner, stream: &mut Stream, buf: &mut BytesMut) {
    use tagwire_proto::{kind, Frame, FrameDecoder};
    if !inner.shm.reads_in_place() {
        return;
    }
    let decoder = FrameDecoder::new(lock(&inner.engine).max_frame());
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        loop {
            match decoder.next_raw(buf) {
                Ok(Some((kind::DELIVER, body))) if body.len() >= 4 => {
                    discard(inner, body.slice(4..));
                }
                Ok(Some((kind::SHM_REGION, body))) => {
                    if let Ok(Frame::ShmRegion {
                        region,
                        role,
                        endpoint,
                    }) = Frame::decode(kind::SHM_REGION, body)
                    {
                        inner.shm.named(region, role, endpoint);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        if !matches!(read_some_fds(stream, buf, &inner.shm), Ok(true)) {
            return;
        }
    }
}

fn flusher_main(inner: Arc<Inner>) {
    loop {
        let mut w = lock(&inner.writer);
        while !(w.flush_requested || inner.closed.load(Ordering::Relaxed)) {
            w.flusher_waiting = true;
            w = inner.flush_cv.wait(w).unwrap_or_else(|e| e.into_inner());
            w.flusher_waiting = false;
        }
        if inner.closed.load(Ordering::Relaxed) {
            return;
        }
        // Burst mode: linger briefly so one write carries many events (the
        // publisher writes a full batch itself at HIGH_WATER).
        if w.buf.len() < HIGH_WATER / 4 {
            w = inner
                .flush_cv
                .wait_timeout(w, LINGER)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
        w.flush_requested = false;
        let _ = inner.flush_locked(w);
    }
}

fn reader_main(inner: Arc<Inner>, mut stream: Stream, mut leftover: BytesMut) {
    if let Some(b) = &inner.options.band {
        // Deliveries of this band (and its subscribers' callbacks) run at
        // the band's priority, as in the router's lane (TAO §4.2).
        match tagwire_router::priority::apply_sched(b.sched) {
            Ok(tagwire_router::priority::Applied::FellBack { reason, got, .. }) => tracing::warn!(
                "band {}: the reader thread cannot run {} ({reason}); running {got}",
                b.name,
                b.sched
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("band {}: scheduling {} not applied: {e}", b.name, b.sched),
        }
    }
    let mut backoff = BACKOFF_MIN;
    loop {
        read_loop(&inner, &mut stream, &mut leftover);
        // The connection is gone: stop writers and fail waiting requests.
        lock(&inner.writer).connected = false;
        if let Some(s) = lock(&inner.socket).take() {
            s.shutdown();
        }
        lock(&inner.engine).transport_lost("the connection to the server ended");
        lock(&inner.waiters).clear();
        if inner.closed.load(Ordering::Relaxed) || matches!(inner.target(), Target::Embedded(_)) {
            for sink in lock(&inner.sinks).values() {
                sink.close();
            }
            return;
        }
        tracing::warn!(
            "lost connection to {}; reconnecting",
            inner.target().describe()
        );
        loop {
            std::thread::sleep(backoff);
            if inner.closed.load(Ordering::Relaxed) {
                return;
            }
            match connect(&inner) {
                Ok((s, lo)) => {
                    stream = s;
                    leftover = lo;
                    backoff = BACKOFF_MIN;
                    inner.reconnects.fetch_add(1, Ordering::Relaxed);
                    tracing::info!("reconnected to {}", inner.target().describe());
                    break;
                }
                Err(e) => {
                    tracing::debug!("reconnect failed: {e}");
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}

/// Connects (again): once the engine is welcomed, writes what it declares
/// and subscribes again, then the publishes not yet written, before
/// publishers may write. Returns the read half and the bytes read past the
/// `Welcome`.
fn connect(inner: &Inner) -> Result<(Stream, BytesMut)> {
    // The handshake deadline counts from before the socket's connect.
    let started = inner.now();
    let band = inner.options.band.as_ref();
    let mut s = inner.connect_any(band.map(|b| b.name.as_str()))?;
    if let Some(b) = band {
        // The router marks its side; we mark ours (TCP only: a Unix socket
        // has no IP header, and TLS runs over its own socket in the pump).
        if let Stream::Tcp(t) = &s {
            if let Err(e) = tagwire_router::priority::set_dscp(t, b.dscp) {
                tracing::debug!("cannot set DSCP {} on band {}: {e}", b.dscp, b.name);
            }
        }
    }
    {
        let mut e = lock(&inner.engine);
        // A daemon that restarted may have written a new token.
        e.set_token((inner.options.token.clone()).unwrap_or_else(|| inner.target().token()));
        e.reconnect(started);
    }
    let leftover = handshake(inner, &mut s)?;
    let write_half = s.try_clone()?;
    let mut w = lock(&inner.writer);
    if inner.closed.load(Ordering::Relaxed) {
        return Err(Error::Closed);
    }
    // Publishes not yet written (buffered, or in a batch whose write failed)
    // follow the engine's declarations; requests among them are not
    // replayed: their callers already got `Disconnected`.
    let unsent = w.buf.split();
    inner.take_control(&mut w);
    w.max_frame = lock(&inner.engine).max_frame();
    let failed = std::mem::take(&mut *lock(&inner.replay));
    keep_publishes(&failed, w.max_frame, &mut w.buf);
    keep_publishes(&unsent, w.max_frame, &mut w.buf);
    *lock(&inner.socket) = Some(write_half);
    w.connected = true;
    inner.connected_cv.notify_all();
    inner.flush_locked(w)?;
    Ok((s, leftover))
}

/// Appends to `out` the `Publish` frames of `frames` (whole frames, as this
/// session encoded them) that fit in `max_frame`.
fn keep_publishes(frames: &[u8], max_frame: u32, out: &mut BytesMut) {
    let mut rest = frames;
    while let Some(len) = rest
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    {
        let end = 4 + len as usize;
        let Some(frame) = rest.get(..end) else {
            return;
        };
        if frame.get(4) == Some(&tagwire_proto::kind::PUBLISH) && len <= max_frame {
            out.extend_from_slice(frame);
        }
        rest = &rest[end..];
    }
}

/// Feeds what the connection brings to the engine and acts on its inputs,
/// with the engine unlocked: deliveries to the sinks (from a copy of the
/// sink map, taken again only when it changes), replies to their waiters.
/// Returns when the connection ends.
fn read_loop(inner: &Inner, stream: &mut Stream, buf: &mut BytesMut) {
    let mut sinks: HashMap<u32, Arc<Sink>> = HashMap::new();
    let mut generation = u64::MAX;
    let mut inputs = Vec::new();
    let mut heard = None;
    loop {
        let (control, over) = {
            let mut e = lock(&inner.engine);
            if let Some(now) = heard.take() {
                e.received(now);
            }
            while let Some(input) = e.poll_input(buf) {
                inputs.push(input);
            }
            (e.transmit_len() > 0, e.closed().is_some())
        };
        for input in inputs.drain(..) {
            match input {
                Input::Deliver { sub, event } => {
                    let g = inner.subs_generation.load(Ordering::Acquire);
                    if g != generation {
                        generation = g;
                        sinks = lock(&inner.sinks).clone();
                    }
                    match sinks.get(&sub) {
                        Some(sink) => deliver(inner, sink, event),
                        // Unsubscribed while it was on its way: a payload
                        // in shared memory was pinned for this connection
                        // and handed over; give the pin back.
                        None => discard(inner, event),
                    }
                }
                Input::ShmRegion {
                    region,
                    role,
                    endpoint,
                } => inner.shm.named(region, role, endpoint),
                Input::Reply { req, reply } => {
                    if let Some(tx) = lock(&inner.waiters).remove(&req) {
                        let _ = tx.send(reply);
                    }
                }
                Input::PeerError { code, message, .. } => {
                    tracing::warn!("server reported: {message} (code {code:?})");
                }
                Input::Closed => {
                    if let Some(c) = lock(&inner.engine).closed() {
                        tracing::info!("connection closed: {} (code {})", c.reason, c.code);
                    }
                }
                _ => {}
            }
        }
        if control {
            // A `Pong`, or the engine's last `Close`.
            let mut w = lock(&inner.writer);
            if w.connected {
                inner.take_control(&mut w);
                let _ = inner.flush_locked(w);
            }
        }
        if over {
            if inner.closed.load(Ordering::Relaxed) {
                drain(inner, stream, buf);
            }
            return;
        }
        match read_some_fds(stream, buf, &inner.shm) {
            Ok(true) => heard = Some(inner.now()),
            Ok(false) => return,
            Err(e) => {
                if !inner.closed.load(Ordering::Relaxed) {
                    tracing::debug!("read failed: {e}");
                }
                return;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::Frame;

    #[test]
    fn replay_keeps_only_whole_publish_frames_that_fit() {
        let mut frames = BytesMut::new();
        let small = Event::new("/a", "x");
        let big = Event::new("/a", vec![0u8; 5000]);
        tagwire_proto::encode_publish(1, &small, &mut frames).expect("encode");
        Frame::Ping { nonce: 9 }
            .encode(&mut frames)
            .expect("encode");
        tagwire_proto::encode_publish(1, &big, &mut frames).expect("encode");
        let mut expected = BytesMut::new();
        tagwire_proto::encode_publish(1, &small, &mut expected).expect("encode");
        let mut kept = BytesMut::new();
        keep_publishes(&frames, 4096, &mut kept);
        assert_eq!(
            kept, expected,
            "the Ping and the 5000-byte publish are left out"
        );
        let mut kept = BytesMut::new();
        keep_publishes(&frames[..frames.len() - 1], 1 << 20, &mut kept);
        assert_eq!(kept, expected, "a cut-off last frame is left out");
    }
}
