//! Sessions: one connection to a router (a daemon over TCP or a Unix socket,
//! or an in-process router in embedded mode), shared by the publishers and
//! subscribers made from it.
//!
//! Threads: a *reader* thread reads frames, answers requests, runs callback
//! subscriptions and fills subscriber queues, and reconnects with backoff
//! when the connection drops (re-declaring endpoints and re-subscribing); a
//! *flusher* thread writes batched publishes. Publishing writes directly
//! from the caller's thread when the stream is idle (lowest latency) and
//! batches when publishes come faster than [`HOT_INTERVAL`] apart (highest
//! throughput: one `write` carries many events; the flusher lingers up to
//! 50 µs for a batch, so the last events of a burst wait at most that long).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_proto::{EndpointKind, ErrorCode, Event, Frame, FrameDecoder, PROTOCOL_VERSION};
use tagwire_router::{FilterInfo, Limits, Listing, Router, RouterHandle};

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
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
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

    fn connect(&self, timeout: Duration) -> Result<Stream> {
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
            Target::Embedded(r) => Ok(Stream::Unix(r.connect_in_process()?)),
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

pub(crate) enum Reply {
    Ok,
    Admin(String),
    Err(ErrorCode, String),
}

pub(crate) struct SubEntry {
    pub endpoint: u32,
    pub pattern: String,
    pub qos: Vec<(String, String)>,
    pub sink: Arc<Sink>,
}

#[derive(Default)]
struct Table {
    endpoints: HashMap<u32, (EndpointKind, String)>,
    subs: HashMap<u32, SubEntry>,
    pending: HashMap<u32, SyncSender<Reply>>,
}

struct WriteState {
    buf: BytesMut,
    /// Source timestamp of the previous publish (ns), for burst detection.
    last_publish_ns: u64,
    flush_requested: bool,
    /// The flusher is parked on the condvar (so a notify is needed).
    flusher_waiting: bool,
    connected: bool,
    max_frame: u32,
}

pub(crate) struct Inner {
    target: Target,
    name: String,
    /// Kept across reconnects, so the router gives our endpoint names back.
    session_id: [u8; tagwire_proto::SESSION_ID_LEN],
    options: Options,
    /// Lock order: `writer` before `socket` before `replay`.
    writer: Mutex<WriteState>,
    socket: Mutex<Option<Stream>>,
    /// A batch whose write failed when the connection broke: its publishes
    /// go out again first after the reconnect (at most the batches in flight
    /// then, each at most `HIGH_WATER` plus one event).
    replay: Mutex<BytesMut>,
    flush_cv: Condvar,
    /// Notified when the connection comes back or the session closes.
    connected_cv: Condvar,
    table: Mutex<Table>,
    subs_generation: AtomicU64,
    next_id: AtomicU32,
    closed: AtomicBool,
    reader_thread: Mutex<Option<ThreadId>>,
    reconnects: AtomicU64,
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
            .field("server", &self.guard.0.target.describe())
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
        let name = format!(
            "{}-{}.{}",
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "client".into()),
            std::process::id(),
            SESSION_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let session_id = crate::credentials::new_session_id();
        let started = Instant::now();
        let mut stream = target.connect(options.connect_timeout)?;
        let left = options.connect_timeout.saturating_sub(started.elapsed());
        let token = options.token.clone().unwrap_or_else(|| target.token());
        let (max_frame, leftover) = handshake(
            &mut stream,
            &name,
            &target.describe(),
            &token,
            &session_id,
            left,
        )
        .map_err(|e| timed_out(e, &target, options.connect_timeout))?;
        let write_half = stream.try_clone()?;
        let inner = Arc::new(Inner {
            target,
            name,
            session_id,
            options,
            writer: Mutex::new(WriteState {
                buf: BytesMut::with_capacity(HIGH_WATER),
                last_publish_ns: 0,
                flush_requested: false,
                flusher_waiting: false,
                connected: true,
                max_frame,
            }),
            socket: Mutex::new(Some(write_half)),
            replay: Mutex::new(BytesMut::new()),
            flush_cv: Condvar::new(),
            connected_cv: Condvar::new(),
            table: Mutex::new(Table::default()),
            subs_generation: AtomicU64::new(0),
            next_id: AtomicU32::new(1),
            closed: AtomicBool::new(false),
            reader_thread: Mutex::new(None),
            reconnects: AtomicU64::new(0),
        });
        let r = inner.clone();
        let reader = std::thread::Builder::new()
            .name("tagwire-reader".into())
            .spawn(move || reader_main(r, stream, max_frame, leftover))?;
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
        let id = self
            .inner()
            .declare_endpoint(EndpointKind::Publisher, name)?;
        Ok(Publisher::new(self.clone(), id, name.to_owned()))
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
        let mut all: Option<Listing> = None;
        let mut after: Option<String> = None;
        loop {
            let request = match &after {
                None => serde_json::json!({"op": "list"}),
                Some(a) => serde_json::json!({"op": "list", "after": a}),
            };
            let reply = self.admin(&request)?;
            let mut page: Listing = serde_json::from_value(reply)
                .map_err(|e| Error::BadReply(format!("admin list reply: {e}")))?;
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
            let request = match after {
                None => serde_json::json!({"op": "filter_list"}),
                Some(a) => serde_json::json!({"op": "filter_list", "after": a}),
            };
            let mut reply = self.admin(&request)?;
            let page: Vec<FilterInfo> = serde_json::from_value(reply["filters"].take())
                .map_err(|e| Error::BadReply(format!("admin filter_list reply: {e}")))?;
            all.extend(page);
            match reply.get("next").and_then(serde_json::Value::as_u64) {
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

    /// Sends an admin request (`docs/admin.md`) and returns the JSON reply.
    pub fn admin(&self, request: &serde_json::Value) -> Result<serde_json::Value> {
        let body = request.to_string();
        match self
            .inner()
            .request("admin request", |req| Frame::Admin { req, body })?
        {
            Reply::Admin(text) => serde_json::from_str(&text)
                .map_err(|e| Error::BadReply(format!("admin reply: {e}"))),
            Reply::Err(code, message) => Err(Error::Refused { code, message }),
            Reply::Ok => Err(Error::BadReply("expected an admin reply".into())),
        }
    }

    /// Measures one round trip to the router (a `Ping` answered by `Pong`).
    pub fn ping(&self) -> Result<Duration> {
        let start = Instant::now();
        match self
            .inner()
            .request("ping", |req| Frame::Ping { nonce: req as u64 })?
        {
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
    pub(crate) fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn declare_endpoint(&self, kind: EndpointKind, name: &str) -> Result<u32> {
        let id = self.next_id();
        let name_owned = name.to_owned();
        self.request("endpoint declaration", |req| Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name_owned,
        })
        .and_then(expect_ok)?;
        lock(&self.table)
            .endpoints
            .insert(id, (kind, name.to_owned()));
        Ok(id)
    }

    pub(crate) fn add_subscription(&self, sub: u32, entry: SubEntry) -> Result<()> {
        let (endpoint, pattern, qos) = (entry.endpoint, entry.pattern.clone(), entry.qos.clone());
        // Register the sink first so that no delivery can arrive before it.
        lock(&self.table).subs.insert(sub, entry);
        self.subs_generation.fetch_add(1, Ordering::Release);
        let r = self
            .request("subscription", |req| Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos,
            })
            .and_then(expect_ok);
        if r.is_err() {
            lock(&self.table).subs.remove(&sub);
            self.subs_generation.fetch_add(1, Ordering::Release);
        }
        r
    }

    /// Drops a subscription and its endpoint without waiting for replies.
    pub(crate) fn remove_subscription(&self, sub: u32) {
        let entry = lock(&self.table).subs.remove(&sub);
        self.subs_generation.fetch_add(1, Ordering::Release);
        if let Some(e) = entry {
            let _ = self.send_now(&Frame::Unsubscribe { req: 0, sub });
            self.undeclare_endpoint(e.endpoint);
        }
    }

    /// Frees an endpoint's name without waiting for the reply.
    pub(crate) fn undeclare_endpoint(&self, id: u32) {
        if lock(&self.table).endpoints.remove(&id).is_some() {
            let _ = self.send_now(&Frame::UndeclareEndpoint { req: 0, id });
        }
    }

    /// Sends a request and waits for its reply.
    fn request(&self, what: &'static str, make: impl FnOnce(u32) -> Frame) -> Result<Reply> {
        if *lock(&self.reader_thread) == Some(std::thread::current().id()) {
            return Err(Error::BadReply(format!(
                "cannot make a {what} from inside a subscription callback (it would wait for itself)"
            )));
        }
        drop(self.wait_connected(lock(&self.writer))?);
        let req = self.next_id();
        let (tx, rx) = sync_channel(1);
        lock(&self.table).pending.insert(req, tx);
        if let Err(e) = self.send_now(&make(req)) {
            lock(&self.table).pending.remove(&req);
            return Err(e);
        }
        match rx.recv_timeout(REQUEST_TIMEOUT) {
            Ok(r) => Ok(r),
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.table).pending.remove(&req);
                Err(Error::Timeout {
                    what,
                    secs: REQUEST_TIMEOUT.as_secs(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(Error::Disconnected),
        }
    }

    /// Encodes `frame` and writes it (with anything batched before it) now.
    pub(crate) fn send_now(&self, frame: &Frame) -> Result<()> {
        let mut w = lock(&self.writer);
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        if !w.connected {
            return Err(Error::Disconnected);
        }
        frame.encode(&mut w.buf)?;
        self.flush_locked(w)
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
                    url: self.target.describe(),
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
    /// publishes among them are sent again (`reconnect`). The session is
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
        {
            let w = lock(&self.writer);
            let _ = self.flush_locked(w);
        }
        let mut w = lock(&self.writer);
        w.connected = false;
        if let Some(s) = lock(&self.socket).take() {
            let mut close = BytesMut::new();
            if (Frame::Close {
                code: 0,
                reason: "client closed".into(),
            })
            .encode(&mut close)
            .is_ok()
            {
                let mut s2 = s;
                let _ = s2.write_all(&close);
                s2.shutdown();
            }
        }
        drop(w);
        self.flush_cv.notify_all();
        self.connected_cv.notify_all();
        let t = std::mem::take(&mut lock(&self.table).subs);
        for (_, e) in t {
            e.sink.close();
        }
    }
}

fn expect_ok(r: Reply) -> Result<()> {
    match r {
        Reply::Ok => Ok(()),
        Reply::Err(code, message) => Err(Error::Refused { code, message }),
        Reply::Admin(_) => Err(Error::BadReply("unexpected admin reply".into())),
    }
}

/// Sends `Hello` with `token` and `session`, waits up to `timeout` for
/// `Welcome`; returns the negotiated max frame and any bytes read past it.
fn handshake(
    stream: &mut Stream,
    name: &str,
    url: &str,
    token: &str,
    session: &[u8; tagwire_proto::SESSION_ID_LEN],
    timeout: Duration,
) -> Result<(u32, BytesMut)> {
    let fail = |reason: String| Error::Handshake {
        url: url.to_owned(),
        reason,
    };
    let mut out = BytesMut::new();
    Frame::Hello {
        version: PROTOCOL_VERSION,
        max_frame: tagwire_proto::limits::DEFAULT_MAX_FRAME,
        name: name.to_owned(),
        token: token.to_owned(),
        session: *session,
    }
    .encode(&mut out)?;
    stream.write_all(&out)?;
    stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let decoder = FrameDecoder::new(tagwire_proto::limits::DEFAULT_MAX_FRAME);
    let mut buf = BytesMut::new();
    let frame = loop {
        if let Some((k, body)) = decoder
            .next_raw(&mut buf)
            .map_err(|e| fail(e.to_string()))?
        {
            break Frame::decode(k, body).map_err(|e| fail(e.to_string()))?;
        }
        if !read_some(stream, &mut buf).map_err(|e| match is_timeout(&e) {
            true => Error::Io(e),
            false => fail(format!("reading Welcome: {e}")),
        })? {
            return Err(fail("server closed the connection".into()));
        }
    };
    stream.set_read_timeout(None)?;
    match frame {
        Frame::Welcome { max_frame, .. } => Ok((max_frame, buf)),
        Frame::Error { code, message, .. } => Err(Error::Refused { code, message }),
        other => Err(fail(format!(
            "expected Welcome, got {}",
            tagwire_proto::frame_name(other.kind())
        ))),
    }
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

fn reader_main(inner: Arc<Inner>, mut stream: Stream, max_frame: u32, mut leftover: BytesMut) {
    let mut backoff = BACKOFF_MIN;
    loop {
        read_loop(&inner, &mut stream, max_frame, &mut leftover);
        // The connection is gone: stop writers and fail waiting requests.
        lock(&inner.writer).connected = false;
        if let Some(s) = lock(&inner.socket).take() {
            s.shutdown();
        }
        lock(&inner.table).pending.clear();
        if inner.closed.load(Ordering::Relaxed) || matches!(inner.target, Target::Embedded(_)) {
            close_sinks(&inner);
            return;
        }
        tracing::warn!(
            "lost connection to {}; reconnecting",
            inner.target.describe()
        );
        loop {
            std::thread::sleep(backoff);
            if inner.closed.load(Ordering::Relaxed) {
                return;
            }
            match reconnect(&inner) {
                Ok((s, lo)) => {
                    stream = s;
                    leftover = lo;
                    backoff = BACKOFF_MIN;
                    inner.reconnects.fetch_add(1, Ordering::Relaxed);
                    tracing::info!("reconnected to {}", inner.target.describe());
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

fn close_sinks(inner: &Inner) {
    for e in lock(&inner.table).subs.values() {
        e.sink.close();
    }
}

/// Connects again, re-declares every endpoint and re-subscribes every
/// subscription before publishers may write.
fn reconnect(inner: &Inner) -> Result<(Stream, BytesMut)> {
    let timeout = inner.options.connect_timeout;
    let started = Instant::now();
    let mut s = inner.target.connect(timeout)?;
    let left = timeout.saturating_sub(started.elapsed());
    let token = (inner.options.token.clone()).unwrap_or_else(|| inner.target.token());
    let (max_frame, leftover) = handshake(
        &mut s,
        &inner.name,
        &inner.target.describe(),
        &token,
        &inner.session_id,
        left,
    )
    .map_err(|e| timed_out(e, &inner.target, timeout))?;
    let write_half = s.try_clone()?;
    let mut w = lock(&inner.writer);
    // Publishes not yet written (buffered, or in a batch whose write failed)
    // follow the declarations; requests among them are not replayed: their
    // callers already got `Disconnected`.
    let unsent = w.buf.split();
    let failed = std::mem::take(&mut *lock(&inner.replay));
    {
        let t = lock(&inner.table);
        let mut endpoints: Vec<_> = t.endpoints.iter().collect();
        endpoints.sort_by_key(|(id, _)| **id);
        for (id, (kind, name)) in endpoints {
            Frame::DeclareEndpoint {
                req: 0,
                id: *id,
                kind: *kind,
                name: name.clone(),
            }
            .encode(&mut w.buf)?;
        }
        for (sub, e) in &t.subs {
            Frame::Subscribe {
                req: 0,
                sub: *sub,
                endpoint: e.endpoint,
                pattern: e.pattern.clone(),
                qos: e.qos.clone(),
            }
            .encode(&mut w.buf)?;
        }
    }
    keep_publishes(&failed, max_frame, &mut w.buf);
    keep_publishes(&unsent, max_frame, &mut w.buf);
    *lock(&inner.socket) = Some(write_half);
    w.connected = true;
    w.max_frame = max_frame;
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

/// Turns a handshake that ran out of time into [`Error::ConnectTimeout`].
fn timed_out(e: Error, target: &Target, timeout: Duration) -> Error {
    match e {
        Error::Io(io) if is_timeout(&io) => Error::ConnectTimeout {
            url: target.describe(),
            timeout,
        },
        e => e,
    }
}

fn read_loop(inner: &Inner, stream: &mut Stream, max_frame: u32, buf: &mut BytesMut) {
    let decoder = FrameDecoder::new(max_frame);
    let mut sinks: HashMap<u32, Arc<Sink>> = HashMap::new();
    let mut generation = u64::MAX;
    loop {
        loop {
            let (k, body) = match decoder.next_raw(buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("bad frame from server: {e}; dropping the connection");
                    return;
                }
            };
            if k == tagwire_proto::kind::DELIVER {
                let g = inner.subs_generation.load(Ordering::Acquire);
                if g != generation {
                    generation = g;
                    sinks = lock(&inner.table)
                        .subs
                        .iter()
                        .map(|(id, e)| (*id, e.sink.clone()))
                        .collect();
                }
                if body.len() < 4 {
                    tracing::warn!("truncated Deliver frame from server");
                    continue;
                }
                let sub = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
                if let Some(sink) = sinks.get(&sub) {
                    sink.deliver(body.slice(4..));
                }
                continue;
            }
            match Frame::decode(k, body) {
                Ok(Frame::Ok { req }) => answer(inner, req, Reply::Ok),
                Ok(Frame::AdminReply { req, body }) => answer(inner, req, Reply::Admin(body)),
                Ok(Frame::Error { req, code, message }) => {
                    if req != 0 && lock(&inner.table).pending.contains_key(&req) {
                        answer(inner, req, Reply::Err(code, message));
                    } else {
                        tracing::warn!("server reported: {message} (code {code:?})");
                    }
                }
                Ok(Frame::Pong { nonce }) => {
                    if let Ok(req) = u32::try_from(nonce) {
                        answer(inner, req, Reply::Ok);
                    }
                }
                Ok(Frame::Ping { nonce }) => {
                    let _ = inner.send_now(&Frame::Pong { nonce });
                }
                Ok(Frame::Close { reason, .. }) => {
                    tracing::info!("server closed the connection: {reason}");
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("bad frame from server: {e}"),
            }
        }
        match read_some(stream, buf) {
            Ok(true) => {}
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

fn answer(inner: &Inner, req: u32, reply: Reply) {
    if let Some(tx) = lock(&inner.table).pending.remove(&req) {
        let _ = tx.send(reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
