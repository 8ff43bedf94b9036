//! One client connection: the handshake, then frames in (decode → check →
//! route) and the writer task that drains the connection's outbox.
//!
//! Bad input fails alone: a frame that decodes badly gets an `Error` frame
//! naming the problem and the connection carries on; a stream that cannot be
//! split into frames any more (oversized or zero length) gets an `Error` and
//! is closed. Nothing here panics on peer input.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tagwire_core::filter::FilterList;
use tagwire_core::qos::ChannelQos;
use tagwire_core::queue::BoundedQueue;
use tagwire_core::tags::{validate_tag, Pattern};
use tagwire_proto::{
    kind, truncate, EndpointKind, ErrorCode, EventRef, Frame, FrameDecoder, StreamError,
    FRAME_HEADER_LEN, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, SESSION_ID_LEN,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::admin::Reply;
use crate::admission::{ConnLog, LogLine};
use crate::auth::{Rights, Transport};
use crate::channel::{Channel, Outbox, Outgoing, READ_CHUNK};
use crate::config::Limits;
use crate::dispatch::deliver;
use crate::filters::{op_name, FilterInfo, FilterLevel, FilterRecord, SourceFilters};
use crate::local::hex;
use crate::read_buffer::ReadBuffer;
use crate::state::{ConnEntry, Reservation, State};
use crate::timing::{deadline, expired, now_ns};

/// Frames one connection handles before the lane turns to its other tasks
/// (writers, other connections, housekeeping).
const FRAMES_PER_TURN: usize = 256;

/// How long a closing connection's writer may take to flush its last frames.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Whether an error is the peer's protocol mistake (counted toward
/// `limits.max_protocol_errors`) rather than a refusal for want of room
/// (`QueueFull`, `LimitReached`) or the router's own state.
fn is_protocol_error(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::QueueFull
            | ErrorCode::LimitReached
            | ErrorCode::ShuttingDown
            | ErrorCode::Internal
    )
}

struct Endpoint {
    name: Rc<str>,
    kind: EndpointKind,
    /// A publisher's own filters (empty: everything passes).
    filters: SourceFilters,
}

/// Per-connection protocol state.
struct Conn {
    id: u64,
    state: Rc<RefCell<State>>,
    outbox: Rc<Outbox>,
    welcomed: bool,
    endpoints: HashMap<u32, Endpoint>,
    /// Client subscription id → router-wide subscription id.
    subs: HashMap<u32, u64>,
    max_control: usize,
    /// How the peer reached us (what identifies it before any token).
    transport: Transport,
    /// Who the peer is, once through the handshake.
    identity: Rc<str>,
    /// What it may do.
    rights: Rights,
    /// Its session id (all zero: none), for endpoint reservations.
    session: [u8; SESSION_ID_LEN],
    /// Whether the peer said `Close`: its endpoint names are then released,
    /// not reserved.
    closed_cleanly: bool,
    /// `limits.max_protocol_errors`.
    max_protocol_errors: u32,
    /// Protocol errors so far.
    protocol_errors: Cell<u32>,
    /// Rate limit on this connection's error log lines.
    log: ConnLog,
}

/// A compiled `filter` or `map` subscription property.
enum Compiled {
    Filter(tagwire_core::filter::Filter),
    Mapping(tagwire_core::filter::MappingFilter),
}

/// Whether to keep reading after a frame.
enum Next {
    Continue,
    Close,
}

/// Serves one accepted connection until it closes. `peer` is for logs.
///
/// The read loop enforces the connection's time and memory bounds: the
/// handshake must complete within `limits.handshake_timeout`; an established
/// connection that sends nothing for `limits.idle_timeout` gets a `Ping`,
/// and is closed if it still sends nothing for as long again; the read
/// buffer grows for a large frame only within the memory budget
/// ([`ReadBuffer`]); and `limits.max_protocol_errors` bad frames close it.
pub(crate) async fn serve<R, W>(
    state: Rc<RefCell<State>>,
    peer: String,
    transport: Transport,
    mut reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    let outbox = Rc::new(Outbox::default());
    let (id, limits, evict) = register(&state, &peer, &outbox);
    let slot = Slot {
        id,
        state: state.clone(),
        established: Cell::new(false),
    };
    tracing::debug!(conn = id, %peer, "connection opened");
    let writer_box = outbox.clone();
    let mut writer_task =
        tokio::task::spawn_local(async move { writer_box.run_writer(writer).await });

    let memory = state.borrow().memory.clone();
    let budget = memory.clone();
    let mut conn = Conn {
        id,
        state: state.clone(),
        outbox: outbox.clone(),
        welcomed: false,
        endpoints: HashMap::new(),
        subs: HashMap::new(),
        max_control: limits.max_control_bytes,
        transport,
        identity: Rc::from(""),
        rights: Rights::default(),
        session: [0; SESSION_ID_LEN],
        closed_cleanly: false,
        max_protocol_errors: limits.max_protocol_errors,
        protocol_errors: Cell::new(0),
        log: ConnLog::default(),
    };
    // Until the handshake, only a Hello-sized frame is accepted and read into
    // a Hello-sized buffer, so a peer that has not said Hello cannot make the
    // router reserve a large buffer.
    let mut decoder = FrameDecoder::new(tagwire_proto::limits::MIN_MAX_FRAME);
    let mut rb = ReadBuffer::new(
        tagwire_proto::limits::MIN_MAX_FRAME as usize + FRAME_HEADER_LEN,
        budget,
    );
    let handshake_deadline = Instant::now() + limits.handshake_timeout;
    let mut last_heard = Instant::now();
    let mut pinged = false;
    'read: loop {
        if let Err(e) = rb.make_room(decoder.max_frame()) {
            conn.fail(ErrorCode::LimitReached, 0, e.to_string());
            break;
        }
        let deadline = if !conn.welcomed {
            handshake_deadline
        } else if pinged {
            last_heard + 2 * limits.idle_timeout
        } else {
            last_heard + limits.idle_timeout
        };
        let read = tokio::select! {
            r = tokio::time::timeout_at(deadline, reader.read_buf(&mut rb.buf)) => r,
            () = evict.notified(), if !conn.welcomed => {
                conn.fail(
                    ErrorCode::LimitReached,
                    0,
                    format!(
                        "closed to make room: {} newer connections are waiting for their handshake (limits.max_pending_handshakes)",
                        limits.max_pending_handshakes
                    ),
                );
                break;
            }
        };
        match read {
            Ok(Ok(0)) => {
                if !rb.buf.is_empty() {
                    conn.warn(format!(
                        "connection closed in the middle of a frame ({} bytes pending)",
                        rb.buf.len()
                    ));
                }
                break;
            }
            Ok(Ok(_)) => {
                last_heard = Instant::now();
                pinged = false;
            }
            Ok(Err(e)) => {
                tracing::debug!(conn = id, %peer, "read error: {e}");
                break;
            }
            Err(_) if !conn.welcomed => {
                conn.fail(
                    ErrorCode::HandshakeRequired,
                    0,
                    format!(
                        "no Hello within {:?} (limits.handshake_timeout); closing the connection",
                        limits.handshake_timeout
                    ),
                );
                break;
            }
            Err(_) if pinged => {
                conn.fail(
                    ErrorCode::LimitReached,
                    0,
                    format!(
                        "nothing received for {:?}, Ping unanswered (limits.idle_timeout = {:?}); closing the connection",
                        2 * limits.idle_timeout,
                        limits.idle_timeout
                    ),
                );
                break;
            }
            Err(_) => {
                pinged = true;
                if let Next::Close = conn.reply(Frame::Ping { nonce: id }) {
                    break;
                }
                continue;
            }
        }
        let epoch = memory.next_epoch();
        // Frames handled since the lane last yielded: a read holds up to
        // ~5,000 small requests, and others must not wait for all of them.
        let mut since_yield = 0usize;
        // Split complete frames; stop at one whose bytes are still coming
        // (the next make_room grows the buffer for it, within the budget).
        while rb.incomplete_frame(decoder.max_frame()).is_none() {
            match decoder.next_raw(&mut rb.buf) {
                Ok(Some((k, body))) => {
                    // Which read buffer the frame lives in: its own, or the
                    // shared chunk of this read (see `Outgoing`).
                    let chunk = if rb.is_large(body.len() + FRAME_HEADER_LEN) {
                        None
                    } else {
                        Some(epoch)
                    };
                    rb.frame_taken();
                    let welcomed = conn.welcomed;
                    if !welcomed && k == kind::HELLO {
                        // The per-identity limit is checked in `handshake`,
                        // once the credentials name the identity.
                        if let Err(message) = slot.check_room() {
                            conn.fail(ErrorCode::LimitReached, 0, message);
                            break 'read;
                        }
                    }
                    if conn.welcomed && (k == kind::SUBSCRIBE || k == kind::ADMIN) {
                        precompile_filters(&state, k, &body).await;
                    }
                    let next = conn.handle(k, body, chunk, &mut decoder);
                    state.borrow().filters.clear_precompiled();
                    if let Next::Close = next {
                        break 'read;
                    }
                    since_yield += 1;
                    if since_yield >= FRAMES_PER_TURN {
                        since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                    if !welcomed && conn.welcomed {
                        slot.establish();
                        rb.set_chunk(READ_CHUNK);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let code = match e {
                        StreamError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
                        _ => ErrorCode::Malformed,
                    };
                    conn.fail(code, 0, format!("{e}; closing the connection"));
                    break 'read;
                }
            }
        }
        if writer_task.is_finished() {
            break;
        }
        // Let writers drain what this chunk queued before reading more, so a
        // burst from one publisher does not overrun fast subscribers' queues.
        tokio::task::yield_now().await;
    }
    if let Some((n, last)) = conn.log.take_unreported() {
        conn.warn(format!(
            "{n} more errors on this connection were not logged (last: {last})"
        ));
    }
    conn.cleanup();
    drop(rb);
    outbox.close();
    if tokio::time::timeout(CLOSE_GRACE, &mut writer_task)
        .await
        .is_err()
    {
        // A peer that does not read must not keep its writer (and what it
        // holds) alive.
        writer_task.abort();
        tracing::debug!(
            conn = id,
            "writer did not flush within {:?}; dropped it",
            CLOSE_GRACE
        );
    }
    drop(slot);
    tracing::debug!(conn = id, %peer, "connection closed");
}

/// Compiles the costly filters (regular expressions) of a `Subscribe` or
/// `filter_add` on a blocking thread and hands them to the filter book, so
/// that the request, handled next, does not stall the lane building
/// automata. The connection waits (its later frames keep their order);
/// other connections go on.
async fn precompile_filters(state: &Rc<RefCell<State>>, k: u8, body: &Bytes) {
    // A Subscribe carries its filters as plain UTF-8: without the bytes of
    // the regex operator `=~` it has nothing costly, and is decoded only
    // once (in `handle`). Admin JSON may escape characters, so it is
    // always looked into.
    if k == kind::SUBSCRIBE && !body.windows(2).any(|w| w == b"=~") {
        return;
    }
    let Ok(frame) = Frame::decode(k, body.clone()) else {
        return; // `handle` reports the bad frame
    };
    let texts = crate::filters::costly_filters(&frame);
    if texts.is_empty() {
        return;
    }
    let limits = state.borrow().filters.limits.clone();
    match tokio::task::spawn_blocking(move || crate::filters::precompile(texts, &limits)).await {
        Ok(compiled) => state.borrow().filters.set_precompiled(compiled),
        // The blocking pool is gone (shutting down): `handle` compiles inline.
        Err(e) => tracing::debug!("cannot compile filters off the lane: {e}"),
    }
}

/// A connection's place in the admission counts; given back on drop.
struct Slot {
    id: u64,
    state: Rc<RefCell<State>>,
    established: Cell<bool>,
}

impl Slot {
    /// Whether an established connection may be added (checked on `Hello`).
    fn check_room(&self) -> Result<(), String> {
        let st = self.state.borrow();
        let max = st.config.limits.max_connections;
        if st.admission.established >= max {
            tracing::warn!("refusing a handshake: {max} connections already established");
            return Err(format!(
                "connection limit reached ({max} established connections, limits.max_connections)"
            ));
        }
        Ok(())
    }

    /// Moves the connection from pending to established.
    fn establish(&self) {
        if !self.established.replace(true) {
            let mut st = self.state.borrow_mut();
            st.admission.remove_pending(self.id);
            st.admission.established += 1;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut st = self.state.borrow_mut();
        if self.established.get() {
            st.admission.established -= 1;
        } else {
            st.admission.remove_pending(self.id);
        }
    }
}

/// Adds a connection to the router's table as pending its handshake. When
/// `limits.max_pending_handshakes` connections are pending already, the one
/// that has waited longest is told to close to make room. Returns the
/// connection's id, the limits, and the signal that it must close.
fn register(state: &RefCell<State>, peer: &str, outbox: &Rc<Outbox>) -> (u64, Limits, Rc<Notify>) {
    let mut st = state.borrow_mut();
    let limits = st.config.limits.clone();
    let id = st.next_connection_id();
    let (evict, evicted) = st.admission.add_pending(id, limits.max_pending_handshakes);
    if evicted && st.admission.log.allow(std::time::Instant::now()) {
        tracing::warn!(%peer, "{} connections waiting for their handshake: closing the oldest to make room", limits.max_pending_handshakes);
    }
    st.connections.insert(
        id,
        ConnEntry {
            name: String::new(),
            peer: peer.to_owned(),
            outbox: outbox.clone(),
            identity: Rc::from(""),
            session: [0; SESSION_ID_LEN],
        },
    );
    (id, limits, evict)
}

impl Conn {
    /// Sends an error frame and logs it (rate-limited). A protocol error
    /// counts toward `limits.max_protocol_errors`; at the bound a last
    /// `Error` says so and the connection closes.
    fn fail(&self, code: ErrorCode, req: u32, message: String) -> Next {
        match self.log.note(&message, std::time::Instant::now()) {
            LogLine::Full => self.warn(format!("{code:?}: {message}")),
            LogLine::Summary(n) => self.warn(format!(
                "{n} errors on this connection not logged since the last summary (latest: {code:?}: {})",
                truncate(&message, 200)
            )),
            LogLine::Nothing => {}
        }
        let next = self.reply(Frame::Error { req, code, message });
        if !is_protocol_error(code) {
            return next;
        }
        let n = self.protocol_errors.get() + 1;
        self.protocol_errors.set(n);
        if n < self.max_protocol_errors {
            return next;
        }
        let message = format!(
            "{n} protocol errors on this connection (limits.max_protocol_errors); closing the connection"
        );
        self.warn(message.clone());
        let _ = self.reply(Frame::Error {
            req: 0,
            code: ErrorCode::LimitReached,
            message,
        });
        Next::Close
    }

    /// A peer-caused warning, within the router-wide log rate limit.
    fn warn(&self, message: String) {
        if self
            .state
            .borrow()
            .admission
            .log
            .allow(std::time::Instant::now())
        {
            tracing::warn!(conn = self.id, "{message}");
        }
    }

    fn reply(&self, frame: Frame) -> Next {
        if self.outbox.send(&frame, self.max_control) {
            Next::Continue
        } else {
            tracing::warn!(
                conn = self.id,
                "client does not read its replies ({} bytes pending); closing",
                self.max_control
            );
            Next::Close
        }
    }

    /// Handles one frame; `chunk` is the read epoch of the shared chunk it
    /// was read into, or `None` for a buffer of its own (see [`ReadBuffer`]).
    fn handle(
        &mut self,
        k: u8,
        body: Bytes,
        chunk: Option<u64>,
        decoder: &mut FrameDecoder,
    ) -> Next {
        if k == kind::PUBLISH && self.welcomed {
            return self.publish(body, chunk);
        }
        let frame = match Frame::decode(k, body) {
            Ok(f) => f,
            Err(e) => {
                let code = match e {
                    tagwire_proto::DecodeError::UnknownFrameType(_) => ErrorCode::UnknownFrameType,
                    _ => ErrorCode::Malformed,
                };
                let message = format!("bad {} frame: {e}", tagwire_proto::frame_name(k));
                // Before the handshake nothing about the peer can be trusted.
                let next = self.fail(code, 0, message);
                return if self.welcomed { next } else { Next::Close };
            }
        };
        if !self.welcomed {
            return self.handshake(frame, decoder);
        }
        match frame {
            Frame::DeclareEndpoint {
                req,
                id,
                kind,
                name,
            } => self.declare(req, id, kind, name),
            Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos,
            } => self.subscribe(req, sub, endpoint, &pattern, &qos),
            Frame::Unsubscribe { req, sub } => match self.subs.remove(&sub) {
                Some(global) => {
                    self.drop_channel(global);
                    self.ack(req)
                }
                None => self.fail(
                    ErrorCode::UnknownSubscription,
                    req,
                    format!("no subscription with id {sub}"),
                ),
            },
            Frame::UndeclareEndpoint { req, id } => match self.endpoints.remove(&id) {
                Some(e) => {
                    // The endpoint's channels stop receiving now; the lane's
                    // housekeeping removes them in slices.
                    let mut st = self.state.borrow_mut();
                    let mut gone = st.channels.of_endpoint(&e.name);
                    // A router-wide id is (connection id << 32) | client id.
                    gone.retain(|g| self.subs.remove(&(*g as u32)) == Some(*g));
                    let dropped = gone.len();
                    st.retire_endpoint(gone);
                    st.endpoints.remove(&e.name);
                    let u = st.usage(&self.identity);
                    u.endpoints = u.endpoints.saturating_sub(1);
                    u.subscriptions = u.subscriptions.saturating_sub(dropped);
                    if st.sources.remove(&e.name).is_some() {
                        st.filters.forget_publisher(&e.name);
                    }
                    drop(st);
                    self.ack(req)
                }
                None => self.fail(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("no endpoint with id {id} on this connection"),
                ),
            },
            Frame::Ping { nonce } => self.reply(Frame::Pong { nonce }),
            Frame::Pong { .. } => Next::Continue,
            Frame::Close { .. } => {
                self.closed_cleanly = true;
                Next::Close
            }
            Frame::Admin { req, body } => self.admin(req, &body, decoder.max_frame()),
            Frame::Hello { .. } => {
                self.fail(ErrorCode::Malformed, 0, "Hello after the handshake".into())
            }
            other => self.fail(
                ErrorCode::Malformed,
                0,
                format!(
                    "a client may not send {} frames",
                    tagwire_proto::frame_name(other.kind())
                ),
            ),
        }
    }

    fn handshake(&mut self, frame: Frame, decoder: &mut FrameDecoder) -> Next {
        let Frame::Hello {
            version,
            max_frame,
            name,
            token,
            session,
        } = frame
        else {
            self.fail(
                ErrorCode::HandshakeRequired,
                0,
                format!(
                    "expected Hello, got {} before the handshake",
                    tagwire_proto::frame_name(frame.kind())
                ),
            );
            return Next::Close;
        };
        if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
            self.fail(
                ErrorCode::UnsupportedVersion,
                0,
                format!("protocol version {version} is not supported (this server speaks {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION})"),
            );
            return Next::Close;
        }
        let max_frame = match tagwire_proto::validate_max_frame(max_frame) {
            Ok(m) => m.min(self.state.borrow().config.limits.max_frame),
            Err(e) => {
                self.fail(ErrorCode::Malformed, 0, format!("bad Hello: {e}"));
                return Next::Close;
            }
        };
        let mut st = self.state.borrow_mut();
        let (identity, rights) = match st.auth.authenticate(&self.transport, &token) {
            Ok(granted) => granted,
            Err((code, message)) => {
                drop(st);
                self.fail(code, 0, message);
                return Next::Close;
            }
        };
        let max_conns = st.config.limits.max_connections_per_identity;
        let usage = st.usage(&identity);
        if usage.connections >= max_conns {
            drop(st);
            self.fail(
                ErrorCode::LimitReached,
                0,
                format!("identity {identity} already has {max_conns} connections open (max_connections_per_identity)"),
            );
            return Next::Close;
        }
        usage.connections += 1;
        if let Some(c) = st.connections.get_mut(&self.id) {
            c.name = name;
            c.identity = identity.clone();
            c.session = session;
        }
        let server = st.config.name.clone();
        drop(st);
        tracing::debug!(conn = self.id, %identity, "authenticated");
        self.identity = identity;
        self.rights = rights;
        self.session = session;
        decoder.set_max_frame(max_frame);
        self.welcomed = true;
        self.reply(Frame::Welcome {
            version,
            max_frame,
            name: server,
        })
    }

    fn declare(&mut self, req: u32, id: u32, kind: EndpointKind, name: String) -> Next {
        if self.endpoints.contains_key(&id) {
            return self.fail(
                ErrorCode::BadRequest,
                req,
                format!("endpoint id {id} is already used on this connection"),
            );
        }
        let max = self
            .state
            .borrow()
            .config
            .limits
            .max_endpoints_per_connection;
        if self.endpoints.len() >= max {
            return self.fail(
                ErrorCode::LimitReached,
                req,
                format!("this connection already has {max} endpoints"),
            );
        }
        let mut st = self.state.borrow_mut();
        let max_per_identity = st.config.limits.max_endpoints_per_identity;
        if st.usage(&self.identity).endpoints >= max_per_identity {
            drop(st);
            return self.fail(
                ErrorCode::LimitReached,
                req,
                format!(
                    "identity {} already holds {max_per_identity} endpoints (max_endpoints_per_identity)",
                    self.identity
                ),
            );
        }
        if let Some(r) = st.reservations.get(&name) {
            let now = now_ns();
            let ours = r.identity == *self.identity && r.session == hex(&self.session);
            if r.until_ns > now && !ours {
                let left = (r.until_ns - now) / 1_000_000_000 + 1;
                drop(st);
                return self.fail(
                    ErrorCode::DuplicateEndpoint,
                    req,
                    format!("endpoint name {name:?} is reserved for the session that held it for another {left} s"),
                );
            }
        }
        let declared = st.endpoints.declare(&name, kind, self.id);
        if declared.is_ok() {
            // Only now: a refused declare keeps the rightful session's claim.
            st.reservations.remove(&name);
            st.usage(&self.identity).endpoints += 1;
        }
        drop(st);
        if let Err(e) = declared {
            let code = match e {
                tagwire_core::endpoint::EndpointError::Duplicate { .. } => {
                    ErrorCode::DuplicateEndpoint
                }
                tagwire_core::endpoint::EndpointError::TableFull { .. } => ErrorCode::LimitReached,
                _ => ErrorCode::BadRequest,
            };
            return self.fail(code, req, e.to_string());
        }
        tracing::debug!(conn = self.id, endpoint = %name, ?kind, "endpoint declared");
        let name: Rc<str> = name.into();
        let filters = {
            let mut st = self.state.borrow_mut();
            let filters = Rc::new(RefCell::new(FilterList::new(&st.filters.limits)));
            if kind == EndpointKind::Publisher {
                st.sources.insert(name.clone(), filters.clone());
            }
            filters
        };
        self.endpoints.insert(
            id,
            Endpoint {
                name,
                kind,
                filters,
            },
        );
        self.ack(req)
    }

    fn subscribe(
        &mut self,
        req: u32,
        sub: u32,
        endpoint: u32,
        pattern: &str,
        qos: &[(String, String)],
    ) -> Next {
        let endpoint_name = match self.endpoints.get(&endpoint) {
            Some(e) if e.kind == EndpointKind::Subscriber => e.name.clone(),
            Some(e) => {
                return self.fail(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("endpoint {:?} is a publisher, not a subscriber", e.name),
                )
            }
            None => {
                return self.fail(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("no endpoint with id {endpoint} on this connection"),
                )
            }
        };
        if self.subs.contains_key(&sub) {
            return self.fail(
                ErrorCode::DuplicateSubscription,
                req,
                format!("subscription id {sub} is already used"),
            );
        }
        let parsed = match Pattern::parse(pattern) {
            Ok(p) => p,
            Err(e) => return self.fail(ErrorCode::InvalidPattern, req, e.to_string()),
        };
        if !self.rights.may_subscribe(&parsed) {
            return self.fail(
                ErrorCode::PermissionDenied,
                req,
                format!(
                    "identity {} may not subscribe to {pattern:?} (no [[acl]] subscribe pattern covers it)",
                    self.identity
                ),
            );
        }
        let (filter_props, qos): (Vec<_>, Vec<_>) =
            qos.iter().partition(|(k, _)| k == "filter" || k == "map");
        let compiled = match self.compile_filters(&filter_props) {
            Ok(c) => c,
            Err(message) => return self.fail(ErrorCode::InvalidFilter, req, message),
        };
        let channel_qos = match ChannelQos::default()
            .apply(qos.iter().map(|(k, v)| (k.as_str(), v.as_str())), |_, _| {
                Ok(false)
            }) {
            Ok(q) => q,
            Err(e) => return self.fail(ErrorCode::BadRequest, req, e.to_string()),
        };
        let mut st = self.state.borrow_mut();
        let limits = &st.config.limits;
        let filter_bytes: usize = compiled
            .iter()
            .map(|(_, _, c)| match c {
                Compiled::Filter(f) => f.memory_estimate(),
                Compiled::Mapping(m) => m.memory_estimate(),
            })
            .sum();
        if let Err(msg) = st.filters.admit(
            &self.identity,
            compiled.len(),
            filter_bytes,
            limits.max_filters_per_identity,
            limits.max_filter_bytes_per_identity,
        ) {
            drop(st);
            return self.fail(ErrorCode::LimitReached, req, msg);
        }
        let limits = &st.config.limits;
        let held = st.usage.get(&self.identity).map_or(0, |u| u.subscriptions);
        if self.subs.len() >= limits.max_subscriptions_per_connection
            || st.routes.len() >= limits.max_subscriptions
            || held >= limits.max_subscriptions_per_identity
        {
            let msg = format!(
                "subscription limit reached ({} per connection, {} per identity, {} in all)",
                limits.max_subscriptions_per_connection,
                limits.max_subscriptions_per_identity,
                limits.max_subscriptions
            );
            drop(st);
            return self.fail(ErrorCode::LimitReached, req, msg);
        }
        let queue = BoundedQueue::with_byte_limit(
            channel_qos.max_queue_length,
            limits.max_queue_bytes,
            channel_qos.discard,
        );
        let channel = Rc::new(Channel::new(
            sub,
            endpoint_name.clone(),
            pattern.to_owned(),
            queue,
            self.outbox.clone(),
            st.memory.clone(),
        ));
        let global = (self.id << 32) | sub as u64;
        let mut filters = Vec::new();
        let mut mapping = None;
        let mut records = Vec::new();
        for (kind, text, f) in compiled {
            let id = st.filters.next_id();
            let bytes = match f {
                Compiled::Filter(f) => {
                    let b = f.memory_estimate();
                    filters.push((id, f));
                    b
                }
                Compiled::Mapping(m) => {
                    let b = m.memory_estimate();
                    mapping = Some((id, m));
                    b
                }
            };
            records.push((id, kind, text, bytes));
        }
        let added =
            st.routes
                .add_channel(global, self.id, parsed, channel.clone(), filters, mapping);
        if let Err(e) = added {
            drop(st);
            return self.fail(ErrorCode::InvalidFilter, req, e.to_string());
        }
        let interfilter = op_name(st.routes.op(self.id));
        for (id, kind, text, bytes) in records {
            st.filters.records.insert(
                id,
                FilterRecord {
                    info: FilterInfo {
                        id,
                        endpoint: endpoint_name.to_string(),
                        level: FilterLevel::Channel,
                        kind: kind.to_owned(),
                        text,
                        interfilter: interfilter.to_owned(),
                    },
                    connection: self.id,
                    channels: vec![global],
                    identity: self.identity.clone(),
                    bytes,
                },
            );
        }
        st.channels.insert(global, channel);
        st.usage(&self.identity).subscriptions += 1;
        drop(st);
        self.subs.insert(sub, global);
        self.ack(req)
    }

    /// The hot path: check an event, then hand it (by reference) to every
    /// matching channel. `chunk`: as for [`Conn::handle`].
    fn publish(&mut self, body: Bytes, chunk: Option<u64>) -> Next {
        if body.len() < 4 {
            return self.fail(
                ErrorCode::Malformed,
                0,
                "bad Publish frame: truncated endpoint id".into(),
            );
        }
        let id = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        let event = body.slice(4..);
        let ev = match EventRef::parse(&event) {
            Ok(ev) => ev,
            Err(e) => return self.fail(ErrorCode::Malformed, 0, format!("bad Publish frame: {e}")),
        };
        let (publisher, source) = match self.endpoints.get(&id) {
            Some(e) if e.kind == EndpointKind::Publisher => (&e.name, &e.filters),
            _ => return self.fail(ErrorCode::UnknownEndpoint, 0, format!("publish on endpoint id {id}, which this connection has not declared as a publisher")),
        };
        if ev.publisher != &**publisher {
            return self.fail(
                ErrorCode::PublisherMismatch,
                0,
                format!(
                    "event names publisher {:?} but was sent on endpoint {:?}",
                    ev.publisher, publisher
                ),
            );
        }
        if let Err(e) = validate_tag(ev.tag) {
            return self.fail(ErrorCode::InvalidTag, 0, e.to_string());
        }
        if !self.rights.may_publish(ev.tag) {
            return self.fail(
                ErrorCode::PermissionDenied,
                0,
                format!(
                    "identity {} may not publish on {} (no [[acl]] publish pattern matches it)",
                    self.identity, ev.tag
                ),
            );
        }
        let mut st = self.state.borrow_mut();
        let deadline = deadline(&ev);
        if expired(deadline) {
            st.expired += 1;
            return Next::Continue;
        }
        let accepted = {
            let f = source.borrow();
            f.is_empty() || f.any_matches(&ev)
        };
        if !accepted {
            st.filtered_at_source += 1;
            return Next::Continue;
        }
        st.note_publish(ev.tag, ev.publisher);
        if let Some(start) = ev.start_time_ns.filter(|s| *s > now_ns()) {
            // Held until its start time; a copy, so the read buffer is not pinned.
            let held = Bytes::copy_from_slice(&event);
            let deferred = st.deferred.push(start, held, event.len());
            drop(st);
            return match deferred {
                Ok(()) => {
                    self.state.borrow().deferred_wake.notify_one();
                    Next::Continue
                }
                Err(e) => self.fail(
                    ErrorCode::LimitReached,
                    0,
                    format!("event on {} refused: {e}", ev.tag),
                ),
            };
        }
        let mut outgoing = match chunk {
            None => Outgoing::owned(event.clone()),
            Some(epoch) => Outgoing::in_chunk(event.clone(), epoch),
        };
        let reject = deliver(&mut st, &mut outgoing, &ev, deadline);
        drop(st);
        match reject {
            Some(who) => self.fail(
                ErrorCode::QueueFull,
                0,
                format!(
                    "event on {} rejected: queue full at subscriber {}",
                    ev.tag,
                    who.join(", ")
                ),
            ),
            None => Next::Continue,
        }
    }

    fn admin(&mut self, req: u32, body: &str, max_frame: u32) -> Next {
        let requester = crate::admin::Requester {
            identity: &self.identity,
            admin: self.rights.admin,
        };
        let result = crate::admin::handle(
            &mut self.state.borrow_mut(),
            body,
            max_frame as usize,
            &requester,
        );
        match result {
            Ok(Reply::Now(body)) => self.reply(Frame::AdminReply { req, body }),
            Ok(Reply::WhenSettled(body)) => {
                self.state
                    .borrow_mut()
                    .reply_when_settled(self.outbox.clone(), Frame::AdminReply { req, body });
                Next::Continue
            }
            Err((code, message)) => self.fail(code, req, message),
        }
    }

    /// Answers `Ok` unless the request id is 0 (fire-and-forget requests).
    fn ack(&self, req: u32) -> Next {
        if req == 0 {
            Next::Continue
        } else {
            self.reply(Frame::Ok { req })
        }
    }

    fn drop_channel(&self, global: u64) {
        let mut st = self.state.borrow_mut();
        let u = st.usage(&self.identity);
        u.subscriptions = u.subscriptions.saturating_sub(1);
        st.routes.remove_channel(global);
        st.channels.remove(&global);
        st.filters.forget_channel(global);
    }

    /// Compiles a subscription's `filter` and `map` properties; the error
    /// names the property and says where the text is wrong.
    fn compile_filters(
        &self,
        props: &[&(String, String)],
    ) -> Result<Vec<(&'static str, String, Compiled)>, String> {
        let st = self.state.borrow();
        let mut out = Vec::new();
        let mut maps = 0;
        for (k, text) in props {
            let compiled = if k == "map" {
                maps += 1;
                if maps > 1 {
                    return Err("at most one `map` property per subscription".into());
                }
                st.filters.compile_mapping(text).map(Compiled::Mapping)
            } else {
                st.filters.compile(text).map(Compiled::Filter)
            };
            match compiled {
                Ok(c) => out.push((if k == "map" { "map" } else { "filter" }, text.clone(), c)),
                Err(e) => return Err(format!("invalid {k} {}: {e}", tagwire_proto::excerpt(text))),
            }
        }
        Ok(out)
    }

    /// Forgets this connection's subscriptions and endpoints. Its channels
    /// stop receiving at once (O(1)); the lane's housekeeping task removes
    /// them, and their filters, in slices. Unless the peer said `Close`,
    /// its endpoint names stay reserved for its session (see
    /// [`Reservation`]).
    fn cleanup(&mut self) {
        let mut st = self.state.borrow_mut();
        st.routes.retire_session(self.id);
        st.housekeeping.notify_one();
        let subs = self.subs.len();
        self.subs.clear();
        st.filters.forget_connection(self.id);
        let reserve = !self.closed_cleanly && self.session != [0; SESSION_ID_LEN];
        let now = now_ns();
        let until_ns = now.saturating_add(
            st.config
                .limits
                .endpoint_reservation_secs
                .saturating_mul(1_000_000_000),
        );
        let endpoints = self.endpoints.len();
        let (identity, session) = (self.identity.to_string(), hex(&self.session));
        for (_, e) in self.endpoints.drain() {
            st.endpoints.remove(&e.name);
            if st.sources.remove(&e.name).is_some() {
                st.filters.forget_publisher(&e.name);
            }
            if reserve {
                let r = Reservation {
                    identity: identity.clone(),
                    session: session.clone(),
                    until_ns,
                };
                st.reserve(&e.name, r, now);
            }
        }
        st.connections.remove(&self.id);
        if self.welcomed {
            let u = st.usage(&self.identity);
            u.connections = u.connections.saturating_sub(1);
            u.endpoints = u.endpoints.saturating_sub(endpoints);
            u.subscriptions = u.subscriptions.saturating_sub(subs);
            st.forget_idle_identity(&self.identity);
        }
    }
}
