//! One client connection, driven: the socket's bytes go into the protocol
//! engine ([`tagwire_core::connection::Connection`], which owns the
//! protocol), and what it hands over is decided here against the router's
//! state (identities, quotas, routes, filters, admin), then its replies go
//! to the connection's outbox. The writer task drains the outbox.
//!
//! Bad input fails alone: a frame that decodes badly gets an `Error` frame
//! naming the problem and the connection carries on; a stream that cannot be
//! split into frames any more (oversized or zero length) gets an `Error` and
//! is closed. Nothing here panics on peer input.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tagwire_core::connection::{self as engine, Connection, Input, Publish};
use tagwire_core::defer::Admit;
use tagwire_core::qos::{Level, QosLayer};
use tagwire_core::queue::BoundedQueue;
use tagwire_core::tags::Pattern;
use tagwire_proto::{
    kind, truncate, EndpointKind, ErrorCode, Frame, FrameDecoder, FRAME_HEADER_LEN, SESSION_ID_LEN,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::admission::{ConnLog, LogLine};
use crate::auth::{Rights, Transport};
use crate::channel::{Channel, Outbox, Outgoing, Staging, MAX_STAGED, READ_CHUNK};
use crate::config::Limits;
use crate::filters::{op_name, FilterInfo, FilterLevel, FilterRecord};
use crate::local::hex;
use crate::read_buffer::ReadBuffer;
use crate::state::lanes::{LaneOf, Reply};
use crate::state::{ConnEntry, PublishNote, Reservation, State};
use crate::sync::Locked;
use crate::timing::now_ns;

/// Frames one connection handles before the lane turns to its other tasks
/// (writers, other connections, housekeeping); the turn also ends with the
/// read (at most [`READ_CHUNK`], 64 KiB). Above one read of 64 B publishes
/// (~700), so that the writers they woke write once per read: at 256 the
/// daemon wrote three times per read and paid for each (BENCHMARKS.md,
/// "Fewer writes per read"). Bounds a turn of tiny frames (~40 B each).
const FRAMES_PER_TURN: usize = 1024;

/// How long a closing connection's writer may take to flush its last frames.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The first protocol version whose clients get deliveries by shared-memory
/// reference (presence bit `SHM_REF`, `ShmRegion`; docs/protocol.md).
const SHM_MIN_VERSION: u16 = 3;
/// Bytes a `DeliverReliable` prefix has beyond a `Deliver`'s (the delivery
/// sequence number).
const DELIVER_RELIABLE_EXTRA: usize =
    tagwire_proto::DELIVER_RELIABLE_PREFIX_LEN - tagwire_proto::DELIVER_PREFIX_LEN;

/// The engine's bounds from the router's limits.
fn engine_config(limits: &Limits) -> engine::Config {
    engine::Config {
        max_frame: limits.max_frame,
        handshake_max_frame: tagwire_proto::limits::MIN_MAX_FRAME,
        handshake_timeout: limits.handshake_timeout.as_nanos() as u64,
        idle_timeout: limits.idle_timeout.as_nanos() as u64,
        max_protocol_errors: limits.max_protocol_errors,
        max_endpoints: limits.max_endpoints_per_connection,
        max_subscriptions: limits.max_subscriptions_per_connection,
    }
}

/// The router's side of one connection: the engine plus what the router
/// knows about the peer.
/// The most data one `DeliverPiece` carries (less if the connection's
/// frame is smaller): 1 MiB, as a link's `Fragment`.
const PIECE_DATA_MAX: usize = 1 << 20;

struct Conn {
    id: u64,
    /// The tag this connection last published on, validated.
    tag_cache: engine::TagCache,
    state: Arc<Locked<State>>,
    outbox: Arc<Outbox>,
    engine: Connection,
    max_control: usize,
    /// How the peer reached us (what identifies it before any token).
    transport: Transport,
    /// Who the peer is, once through the handshake.
    identity: Arc<str>,
    /// What it may do.
    rights: Rights,
    /// Its session id (all zero: none), for endpoint reservations.
    session: [u8; SESSION_ID_LEN],
    /// Whether the connection was counted in its identity's usage.
    counted: bool,
    /// Whether it runs on the admin lane (else admin requests go there).
    admin_lane: bool,
    /// The engine's clock origin (it takes monotonic ns from here).
    origin: Instant,
    /// The wall clock at `origin`, ns since the Unix epoch.
    origin_wall: u64,
    /// The wall-clock time of the last read (`origin_wall` plus the
    /// engine's clock read for it): when the events in it arrived, for the
    /// channels' input jitter, with no clock read of its own.
    read_at: u64,
    /// Rate limit on this connection's error log lines.
    log: ConnLog,
    /// Whether this daemon dialed (a link to a configured peer).
    dialed: bool,
    /// The peer daemon's node id, once this connection is a link.
    link: Option<u64>,
    /// The deliveries of the link event being routed, kept between events
    /// so that routing one allocates nothing (see [`Staging`]).
    link_stage: Staging,
    /// The band of the listener (or dialing lane) it belongs to.
    band: Arc<str>,
}

/// A compiled `filter` or `map` subscription property.
enum Compiled {
    Filter(tagwire_core::filter::Filter),
    Mapping(tagwire_core::filter::MappingFilter),
}

/// Serves one accepted connection until it closes. `peer` is for logs.
///
/// The engine bounds the handshake (`limits.handshake_timeout`), idleness
/// (`limits.idle_timeout`: a `Ping`, then close) and bad frames
/// (`limits.max_protocol_errors`); the read buffer grows for a large frame
/// only within the memory budget ([`ReadBuffer`]).
pub(crate) async fn serve<R, W>(
    state: Arc<Locked<State>>,
    peer: String,
    transport: Transport,
    lane: LaneOf,
    socket: Option<std::os::fd::OwnedFd>,
    reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    serve_with(state, peer, transport, lane, socket, reader, writer, None).await
}

/// Serves a link this daemon dialed to peer `addr` (see [`crate::link`]):
/// the same loop as [`serve`], with the engine's client side.
pub(crate) async fn dial_serve<R, W>(
    state: Arc<Locked<State>>,
    addr: String,
    lane: LaneOf,
    socket: Option<std::os::fd::OwnedFd>,
    reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    let transport = Transport::Tcp { cert: None };
    dial_serve_over(state, addr, lane, socket, transport, reader, writer).await
}

/// [`dial_serve`] over `transport` (a UDP link names its session's
/// counters, and its reliable windows expect loss).
pub(crate) async fn dial_serve_over<R, W>(
    state: Arc<Locked<State>>,
    addr: String,
    lane: LaneOf,
    socket: Option<std::os::fd::OwnedFd>,
    transport: Transport,
    reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    let hello = engine::ClientHello {
        name: format!("link:{}", state.borrow().config.name),
        token: crate::link::token_for(&state.borrow().config.federation.token, &addr),
        session: [0; SESSION_ID_LEN],
        // Fresh for every dial: this engine never reconnects.
        nonce: crate::local::random_nonce(),
        proof: None,
    };
    serve_with(
        state,
        addr,
        transport,
        lane,
        socket,
        reader,
        writer,
        Some(hello),
    )
    .await
}

/// Most publishes routed under one lock of the router's state (see
/// [`PublishBatch`]).
const PUBLISH_BATCH: usize = 16;
/// A publish frame longer than this ends its batch: copying or
/// transforming it costs more than the lock it would share.
const BATCH_FRAME_MAX: usize = 4096;
/// Shortest spacing (ns) of a connection's `PublishAck`s at the end of
/// its reads: under a flood a read holds a few hundred events and comes
/// every few µs, and each acknowledgement costs the publisher's library a
/// wake-up of its reader thread and a turn of its writer lock. An event
/// read sooner than this after the last acknowledgement is acknowledged
/// at most this much later (the read loop's timer), or at once before any
/// frame other than a publish. A publisher's window (65,536 events by
/// default) is far larger than what arrives in this time.
const ACK_SPACING_NS: u64 = 1_000_000;

/// Consecutive publishes read in one go, routed under one lock of the
/// router's state and queued per channel under one lock each (see
/// [`Staging`]), so that a flood of small events pays the locked
/// instructions once per batch, not per event. A batch ends after
/// [`PUBLISH_BATCH`] publishes, [`MAX_STAGED`] deliveries, a publish over
/// [`BATCH_FRAME_MAX`] bytes, before any other frame is polled, and before the lane yields:
/// the state lock is held for at most that much routing. Refusals (ACL,
/// `QueueFull`, …) reach the publisher when the batch ends, in order.
struct PublishBatch<'s> {
    state: &'s Locked<State>,
    held: Option<crate::sync::Guard<'s, State>>,
    stage: Staging,
    note: PublishNote,
    refusals: Vec<(ErrorCode, String)>,
    count: usize,
    /// A `PublishReliable` was routed since the connection's last
    /// acknowledgement: acknowledge at the end of the read (or of the
    /// lane's turn), see [`PublishBatch::end_read`].
    acked: bool,
    /// When the last acknowledgement went out (the connection's clock, ns).
    last_ack: Option<u64>,
}

/// When [`PublishBatch::finish`] acknowledges what was settled.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AckWhen {
    /// Not yet: the batch ends within a read.
    Later,
    /// At the end of a read: if [`ACK_SPACING_NS`] passed since the last.
    Spaced,
    /// Now (a frame other than a publish follows, or the timer fired).
    Now,
}

impl<'s> PublishBatch<'s> {
    fn new(state: &'s Locked<State>) -> Self {
        PublishBatch {
            state,
            held: None,
            stage: Staging::default(),
            note: PublishNote::default(),
            refusals: Vec::new(),
            count: 0,
            acked: false,
            last_ack: None,
        }
    }

    /// Routes `p` within the batch (locking the state if the batch has not).
    fn publish(&mut self, conn: &mut Conn, p: &mut Publish, chunk: Option<u64>) {
        let st = self.held.get_or_insert_with(|| self.state.borrow_mut());
        self.stage.arrived = conn.read_at;
        let result = match p.reliable {
            None => conn.publish(st, &mut self.stage, &mut self.note, p, chunk, None),
            Some(seq) => {
                self.acked = true;
                self.stage.keep_all = true;
                conn.publish_acked(st, &mut self.stage, &mut self.note, p, chunk, seq)
            }
        };
        if let Err(refusal) = result {
            self.refusals.push(refusal);
        }
        self.count += 1;
    }

    /// Whether the batch holds the state lock.
    fn is_open(&self) -> bool {
        self.held.is_some()
    }

    /// Whether the batch must end now: it is full, or another lane waits
    /// for the state lock (it gets it after this publish, not after the
    /// batch: a higher band's publish is not held up by a lower band's
    /// batch).
    fn full(&self) -> bool {
        self.count >= PUBLISH_BATCH || self.stage.len() >= MAX_STAGED || self.state.contended()
    }

    /// Unlocks the state, queues the staged deliveries and sends the
    /// refusals (to go out with the connection's next flush).
    fn end(&mut self, conn: &mut Conn) {
        self.finish(conn, AckWhen::Later, conn.now_at_read());
    }

    /// [`end`](Self::end) at the end of a read (or of the lane's turn):
    /// also acknowledges the `PublishReliable`s settled since the last
    /// acknowledgement if that was [`ACK_SPACING_NS`] ago (else
    /// [`ack_due`](Self::ack_due) says when). At most one `PublishAck` per
    /// read, not one per batch of [`PUBLISH_BATCH`].
    fn end_read(&mut self, conn: &mut Conn) {
        self.finish(conn, AckWhen::Spaced, conn.now_at_read());
    }

    /// [`end`](Self::end), acknowledging at once what was settled; `now`
    /// (the connection's clock, ns) is when, for the spacing of the next:
    /// the last read's time before a frame of that read, the timer's when
    /// the read loop's timer fired.
    fn end_and_ack(&mut self, conn: &mut Conn, now: u64) {
        self.finish(conn, AckWhen::Now, now);
    }

    /// When (the connection's clock, ns) an acknowledgement held back by
    /// its spacing is due; `None`: none waits.
    fn ack_due(&self) -> Option<u64> {
        self.acked.then(|| {
            self.last_ack
                .map_or(0, |t| t.saturating_add(ACK_SPACING_NS))
        })
    }

    fn finish(&mut self, conn: &mut Conn, when: AckWhen, now: u64) {
        let ack = self.acked
            && match when {
                AckWhen::Later => false,
                AckWhen::Spaced => self.ack_due().is_some_and(|due| now >= due),
                AckWhen::Now => true,
            };
        if ack && self.held.is_none() {
            self.held = Some(self.state.borrow_mut());
        }
        let Some(mut st) = self.held.take() else {
            return;
        };
        // The connection's reliable window goes back in the map (its
        // `PublishReliable`s looked it up once for the batch).
        crate::reliable::client_batch_end(&mut st);
        self.note.flush(&mut st);
        if ack {
            self.acked = false;
            self.last_ack = Some(now);
            crate::reliable::client_ack(&mut st, conn.id);
        }
        drop(st);
        self.count = 0;
        if let Some(who) = self.stage.flush() {
            self.refusals.push((
                ErrorCode::QueueFull,
                format!(
                    "events rejected: queue full at subscriber {}",
                    who.join(", ")
                ),
            ));
        }
        for (code, message) in self.refusals.drain(..) {
            conn.note_error(code, &message);
            conn.engine.refuse_publish(code, message);
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve_with<R, W>(
    state: Arc<Locked<State>>,
    peer: String,
    transport: Transport,
    lane: LaneOf,
    socket: Option<std::os::fd::OwnedFd>,
    mut reader: R,
    writer: W,
    dial: Option<engine::ClientHello>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    let outbox = Arc::new(Outbox::default());
    if matches!(transport, Transport::Unix { .. } | Transport::InProcess) {
        // Same host: shared-memory fds can be passed (see `crate::shm`).
        if let Some(fd) = socket.as_ref().and_then(|s| s.try_clone().ok()) {
            outbox.set_fd_socket(fd);
        }
    }
    let (id, limits, evict) = register(&state, &peer, &outbox, &lane, socket);
    if let Some(c) = state.borrow_mut().connections.get_mut(&id) {
        c.transport = transport.name();
        if let Transport::Udp { stats } = &transport {
            c.udp = Some(stats.0.clone());
        }
    }
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
    let origin = Instant::now();
    let mut conn = Conn {
        id,
        tag_cache: engine::TagCache::default(),
        state: state.clone(),
        outbox: outbox.clone(),
        engine: match &dial {
            None => Connection::server(engine_config(&limits), 0),
            Some(hello) => {
                // A link needs nothing newer than version 3, which daemons
                // of before acknowledged publishing (version 4) accept.
                Connection::client_offering(engine_config(&limits), hello.clone(), 0, 3)
            }
        },
        max_control: limits.max_control_bytes,
        transport,
        // A daemon we dialed is the peer our configuration names.
        identity: Arc::from(if dial.is_some() { "peer" } else { "" }),
        rights: if dial.is_some() {
            Rights::all()
        } else {
            Rights::default()
        },
        session: [0; SESSION_ID_LEN],
        counted: false,
        admin_lane: lane.admin_lane,
        origin,
        origin_wall: now_ns(),
        read_at: 0,
        log: ConnLog::default(),
        dialed: dial.is_some(),
        link: None,
        link_stage: Staging::default(),
        band: lane.band.clone(),
    };
    // A dialing engine's Hello is waiting.
    conn.flush();
    // Until the handshake, only a Hello-sized frame is accepted (the
    // engine's pre-handshake limit) and read into a Hello-sized buffer, so a
    // peer that has not said Hello cannot make the router reserve a large
    // buffer.
    let mut rb = ReadBuffer::new(
        tagwire_proto::limits::MIN_MAX_FRAME as usize + FRAME_HEADER_LEN,
        memory.clone(),
    );
    // One publish batch for the connection's life: its staging tables and
    // strings are reused, so a read of one event (a ping-pong) allocates
    // nothing for them. Every read ends it (`batch.end_read`).
    let mut batch = PublishBatch::new(&state);
    'read: loop {
        if let Err(e) = rb.make_room(conn.engine.max_frame()) {
            conn.fail_connection(ErrorCode::LimitReached, e.to_string());
            break;
        }
        let deadline = conn
            .engine
            .poll_timeout()
            .into_iter()
            .chain(batch.ack_due())
            .min()
            .map_or(origin + Duration::from_secs(86_400 * 365), |t| {
                origin + Duration::from_nanos(t)
            });
        let read = tokio::select! {
            r = tokio::time::timeout_at(deadline, reader.read_buf(&mut rb.buf)) => r,
            () = outbox.killed() => {
                tracing::debug!(conn = id, %peer, "ended by the router (peer daemon down)");
                conn.engine.transport_lost("ended by the router");
                break;
            }
            () = evict.notified(), if !conn.engine.is_established() => {
                conn.fail_connection(
                    ErrorCode::LimitReached,
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
                conn.engine.transport_lost("end of stream");
                break;
            }
            Ok(Ok(_)) => {
                let now = conn.now();
                conn.engine.received(now);
                conn.read_at = conn.origin_wall.saturating_add(now);
            }
            Ok(Err(e)) => {
                tracing::debug!(conn = id, %peer, "read error: {e}");
                conn.engine.transport_lost("read error");
                break;
            }
            Err(_) => {
                let now = conn.now();
                conn.engine.handle_timeout(now);
                if batch.ack_due().is_some_and(|due| now >= due) {
                    batch.end_and_ack(&mut conn, now);
                }
                if !conn.flush() {
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
        while rb.incomplete_frame(conn.engine.max_frame()).is_none() {
            // A batch ends before any other frame is polled: the engine may
            // answer that frame at once (a `Ping`'s `Pong`), and the batch's
            // refusals must go out before it, in order.
            if batch.is_open()
                && !matches!(
                    FrameDecoder::next_kind(&rb.buf),
                    Some(kind::PUBLISH | kind::PUBLISH_RELIABLE)
                )
            {
                batch.end(&mut conn);
            }
            let was_established = conn.engine.is_established();
            let Some(mut input) = conn.engine.poll_input(&mut rb.buf) else {
                break;
            };
            rb.frame_taken();
            let chunk = |len: usize| (!rb.is_large(len)).then_some(epoch);
            if let Input::Publish(p) = &mut input {
                // Routed under the state lock held across the batch; the
                // connection's replies wait for the batch's end (flushing
                // them may log, which locks the state). Its bytes go to the
                // last channel that takes it.
                let chunk = chunk(p.frame_len);
                batch.publish(&mut conn, p, chunk);
                if batch.full() || p.frame_len > BATCH_FRAME_MAX {
                    batch.end(&mut conn);
                    // An acknowledged publisher that filled half a reliable
                    // subscription's queue waits for it (at most
                    // `MAX_BLOCKING`), its turn ended: held back, not dropped.
                    if let Some(ch) = batch.stage.take_held_back() {
                        batch.end_read(&mut conn);
                        if !conn.flush() {
                            break 'read;
                        }
                        ch.wait_drained().await;
                        since_yield = 0;
                    }
                }
            } else {
                // Acknowledged first: the frame may wait (an admin request
                // on the admin lane).
                let now = conn.now_at_read();
                batch.end_and_ack(&mut conn, now);
                let precompiled = matches!(input, Input::Subscribe { .. } | Input::Admin { .. });
                if precompiled {
                    precompile_filters(&state, &input).await;
                }
                if let Input::Link(frame) = &input {
                    crate::link::precompile_advert(&state, conn.id, frame).await;
                }
                match input {
                    Input::PublishPiece {
                        endpoint,
                        seq,
                        of,
                        data,
                    } => {
                        // A whole event is routed as the publish it stands
                        // for, in a batch of its own.
                        if let Some(mut p) = conn.publish_piece(endpoint, seq, of, data) {
                            batch.publish(&mut conn, &mut p, None);
                            batch.end(&mut conn);
                        }
                    }
                    Input::Admin { body, .. } if crate::shm::is_open_request(&body) => {
                        // On this lane: the region's fd goes out on this connection.
                        conn.shm_open(&body);
                    }
                    Input::Admin { body, .. } if !conn.admin_lane => {
                        // Admin work runs on the admin lane; this connection
                        // waits for its answer (its later frames keep their
                        // order), the lane's other connections go on.
                        let result = conn.admin_elsewhere(body).await;
                        conn.finish_admin(result);
                    }
                    input => conn.handle(input, chunk),
                }
                if precompiled {
                    state.borrow().filters.clear_precompiled();
                }
            }
            if !batch.is_open() && !conn.flush() {
                break 'read;
            }
            if !was_established && conn.engine.is_established() {
                slot.establish();
                rb.set_chunk(READ_CHUNK);
                // The Welcome goes out before anything the daemon sends
                // unasked (a `Healed`, which needs the version recorded).
                if !conn.flush() {
                    break 'read;
                }
                let version = conn.engine.version();
                if let Some(c) = state.borrow_mut().connections.get_mut(&conn.id) {
                    c.version = version;
                }
            }
            since_yield += 1;
            if since_yield >= FRAMES_PER_TURN {
                batch.end_read(&mut conn);
                if !conn.flush() {
                    break 'read;
                }
                since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
        batch.end_read(&mut conn);
        if !conn.flush() {
            break;
        }
        if let Some(ch) = batch.stage.take_held_back() {
            ch.wait_drained().await;
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
    // A batch left open by a `break` holds the state lock: unlock it, as
    // cleanup takes the lock (its staged deliveries are not queued: the
    // connection is ending).
    drop(batch);
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
async fn precompile_filters(state: &Arc<Locked<State>>, input: &Input) {
    let texts = crate::filters::costly_filters(input);
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
    state: Arc<Locked<State>>,
    established: Cell<bool>,
}

impl Slot {
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
fn register(
    state: &Locked<State>,
    peer: &str,
    outbox: &Arc<Outbox>,
    lane: &LaneOf,
    socket: Option<std::os::fd::OwnedFd>,
) -> (u64, Limits, Arc<Notify>) {
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
            identity: Arc::from(""),
            session: [0; SESSION_ID_LEN],
            band: lane.band.clone(),
            socket,
            dscp: None,
            qos: tagwire_core::qos::QosLayer::new(tagwire_core::qos::Level::Session),
            transport: "",
            udp: None,
            version: 0,
        },
    );
    crate::bandwidth::mark_connection(&st, id);
    (id, limits, evict)
}

impl Conn {
    /// The engine's clock: monotonic ns since the connection opened.
    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// The connection's clock at its last read (no clock read).
    fn now_at_read(&self) -> u64 {
        self.read_at.saturating_sub(self.origin_wall)
    }

    /// Moves the engine's replies to the outbox. False: the connection is
    /// over (the engine closed it, or the peer does not read its replies).
    fn flush(&mut self) -> bool {
        if let Some(frames) = self.engine.poll_transmit() {
            if !self.outbox.send_encoded(&frames, self.max_control) {
                tracing::warn!(
                    conn = self.id,
                    "client does not read its replies ({} bytes pending); closing",
                    self.max_control
                );
                return false;
            }
        }
        match self.engine.closed() {
            None => true,
            Some(c) => {
                if !c.by_peer && c.code != ErrorCode::Internal.code() {
                    let message = c.reason.clone();
                    self.note_error(ErrorCode::from_code(c.code), &message);
                }
                if c.by_peer && self.dialed && c.code == ErrorCode::UnsupportedVersion.code() {
                    // A daemon of an older link version closed our `Peer`:
                    // the next dial says its version (docs/protocol.md).
                    let message = c.reason.clone();
                    crate::link::log_peer_error(
                        &self.state,
                        self.id,
                        ErrorCode::UnsupportedVersion,
                        &message,
                    );
                }
                false
            }
        }
    }

    /// Logs a refusal (rate-limited per connection and router-wide).
    fn note_error(&self, code: ErrorCode, message: &str) {
        match self.log.note(message, std::time::Instant::now()) {
            LogLine::Full => self.warn(format!("{code:?}: {message}")),
            LogLine::Summary(n) => self.warn(format!(
                "{n} errors on this connection not logged since the last summary (latest: {code:?}: {})",
                truncate(message, 200)
            )),
            LogLine::Nothing => {}
        }
    }

    /// Refuses the request the engine handed over, and logs it.
    fn refuse(&mut self, code: ErrorCode, message: String) {
        self.note_error(code, &message);
        self.engine.refuse(code, message);
    }

    /// Ends the connection from the router's side (a limit of the router,
    /// not the protocol): a last `Error`, then close.
    fn fail_connection(&mut self, code: ErrorCode, message: String) {
        self.note_error(code, &message);
        let _ = self.outbox.send(
            &Frame::Error {
                req: 0,
                code,
                message,
            },
            self.max_control,
        );
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

    /// Decides what the engine handed over. `chunk(len)`: the read epoch of
    /// the shared chunk a frame of `len` bytes was read into, or `None` for
    /// a buffer of its own (see [`ReadBuffer`]).
    fn handle(&mut self, input: Input, chunk: impl Fn(usize) -> Option<u64>) {
        match input {
            // The read loop routes publishes in batches (`PublishBatch`).
            Input::Publish(_) => debug_assert!(false, "a publish reached Conn::handle"),
            Input::Hello { hello, .. } => self.handshake(*hello),
            Input::Declare { id, kind, name, .. } => self.declare(id, kind, name),
            Input::Subscribe {
                sub,
                endpoint,
                pattern,
                qos,
                ..
            } => self.subscribe(sub, &endpoint, &pattern, &qos),
            Input::Unsubscribe { sub, .. } => {
                self.drop_channel(self.global(sub));
                self.engine.accept();
            }
            Input::Undeclare { endpoint, subs, .. } => {
                self.undeclare(&endpoint, &subs);
                self.engine.accept();
            }
            Input::Admin { body, .. } => self.admin(&body),
            Input::DeliverAck { sub, ack } => self.deliver_ack(sub, &ack),
            Input::Pull(pull) if matches!(pull.query, tagwire_proto::PullQuery::Stored { .. }) => {
                // A replay from the durable store: answered by the store thread.
                let pull = *pull;
                let checked = crate::history::check_readable(&pull, &self.rights);
                match checked {
                    Err((code, message)) => self.engine.refuse_pull(code, message),
                    Ok(()) => {
                        let max_frame = self.engine.max_frame();
                        let req = self.engine.defer();
                        let pull = tagwire_proto::Pull { req, ..pull };
                        let mut st = self.state.borrow_mut();
                        let r = match st.node.pull_target(&pull) {
                            // This daemon's store (`node` empty or this
                            // daemon's name).
                            Ok(None) => {
                                let to = crate::store::AnswerTo::Client {
                                    outbox: self.outbox.clone(),
                                    max_control: self.max_control,
                                };
                                crate::durable::pull(&mut st, pull, to, max_frame)
                            }
                            // Another daemon's store: the pull goes there
                            // over the links, like a history pull.
                            Ok(Some(node)) => {
                                let asker = tagwire_core::node::Asker::Client {
                                    conn: self.id,
                                    req,
                                    max_reply: max_frame,
                                };
                                if let Err(e) = st.node.ask(asker, node, max_frame, pull, now_ns())
                                {
                                    st.node.answer(asker, e.outcome());
                                }
                                crate::node_io::execute(&mut st);
                                Ok(())
                            }
                            Err(e) => Err((e.code(), e.to_string())),
                        };
                        drop(st);
                        if let Err((code, message)) = r {
                            self.outbox
                                .send(&Frame::Error { req, code, message }, self.max_control);
                        }
                    }
                }
            }
            Input::Pull(pull) => {
                let pull = *pull;
                let max_frame = self.engine.max_frame();
                let mut st = self.state.borrow_mut();
                let target = crate::history::check_readable(&pull, &self.rights).and_then(|()| {
                    st.node
                        .pull_target(&pull)
                        .map_err(|e| (e.code(), e.to_string()))
                });
                let answer = match target {
                    Ok(None) => st.node.answer_here(&pull, max_frame).map(Some),
                    Ok(Some(node)) => {
                        // Answered when the other daemon's answer is back.
                        let asker = tagwire_core::node::Asker::Client {
                            conn: self.id,
                            req: self.engine.defer(),
                            max_reply: max_frame,
                        };
                        if let Err(e) = st.node.ask(asker, node, max_frame, pull, now_ns()) {
                            st.node.answer(asker, e.outcome());
                        }
                        crate::node_io::execute(&mut st);
                        Ok(None)
                    }
                    Err(e) => Err(e),
                };
                drop(st);
                match answer {
                    Ok(Some(reply)) => self.engine.answer_pull(reply),
                    Ok(None) => {}
                    Err((code, message)) => self.engine.refuse_pull(code, message),
                }
            }
            Input::Refused { code, message, .. } => self.note_error(code, &message),
            Input::PeerError { code, message, .. } => {
                if self.dialed {
                    crate::link::log_peer_error(&self.state, self.id, code, &message);
                } else {
                    tracing::debug!(conn = self.id, "peer reported {code:?}: {message}");
                }
            }
            Input::Welcome { .. } if self.dialed => {
                crate::link::say_peer(&self.state, self.id, &self.outbox, self.max_control);
            }
            Input::Link(frame) => {
                let frame = *frame;
                let len = match &frame {
                    tagwire_proto::LinkFrame::Forward { event, .. } => {
                        event.len() + tagwire_proto::FORWARD_PREFIX_LEN
                    }
                    _ => 0,
                };
                // The peer's address is read only until `Peer` made this a
                // link (its handshake logs and remembers it): not per event.
                let peer = match self.link {
                    Some(_) => String::new(),
                    None => self
                        .state
                        .borrow()
                        .connections
                        .get(&self.id)
                        .map(|c| c.peer.clone())
                        .unwrap_or_default(),
                };
                let c = crate::link::LinkConn {
                    state: &self.state,
                    conn: self.id,
                    outbox: &self.outbox,
                    peer: &peer,
                    dialed: self.dialed,
                    may_link: self.rights.admin,
                    max_control: self.max_control,
                    link: &mut self.link,
                    stage: &mut self.link_stage,
                    arrived: self.read_at,
                };
                if let Err((code, message)) = crate::link::on_frame(c, frame, chunk(len)) {
                    self.note_error(code, &message);
                    self.engine.close(code.code(), &message);
                }
            }
            _ => {}
        }
    }

    /// A `PublishPiece` (protocol version 5): put together with the
    /// session's other pieces of its event (see [`crate::pieces`]); the
    /// whole event, once there, is returned to be routed as the `Publish`
    /// (`seq` 0) or `PublishReliable` it stands for. A bad piece closes the
    /// connection; one over the memory budget is refused (the connection
    /// lives); a resend of an event partly held is answered `PieceResume`.
    fn publish_piece(
        &mut self,
        endpoint: u32,
        seq: u64,
        of: tagwire_proto::PieceOf,
        data: bytes::Bytes,
    ) -> Option<Publish> {
        let name = self.engine.endpoint_name(endpoint)?.clone();
        let owner = if self.session == [0; SESSION_ID_LEN] {
            crate::pieces::Owner::Conn(self.id)
        } else {
            crate::pieces::Owner::Session(self.session)
        };
        let mut st = self.state.borrow_mut();
        let limits = crate::pieces::PieceLimits::of(&st.config.limits);
        let memory = st.memory.clone();
        let outcome = st
            .client_pieces
            .on_piece(&memory, limits, owner, name, of, data, now_ns());
        // A reliable event that will not be routed is settled at once (its
        // refusal, or its earlier routing, is the answer).
        let settle = |st: &mut State, conn: &Conn| {
            if seq != 0 && crate::reliable::client_frame(st, conn.id, &conn.outbox, seq).is_ok() {
                crate::reliable::client_settle(st, conn.id, seq);
                crate::reliable::client_ack(st, conn.id);
            }
            crate::reliable::client_batch_end(st);
        };
        match outcome {
            Err((code, message)) => {
                drop(st);
                self.note_error(code, &message);
                self.engine.close(code.code(), &message);
                None
            }
            Ok(crate::pieces::Outcome::Partial | crate::pieces::Outcome::Ignored) => None,
            Ok(crate::pieces::Outcome::Resume { have }) => {
                drop(st);
                tracing::info!(
                    conn = self.id,
                    "event {:#x} of {} bytes in pieces arrives again: this daemon holds {have} bytes, asking the publisher to resume there",
                    of.id,
                    of.total
                );
                let resume = Frame::PieceResume {
                    endpoint,
                    id: of.id,
                    have,
                };
                self.outbox.send(&resume, self.max_control);
                None
            }
            Ok(crate::pieces::Outcome::AlreadyComplete) => {
                if of.offset == 0 {
                    settle(&mut st, self);
                    drop(st);
                    let resume = Frame::PieceResume {
                        endpoint,
                        id: of.id,
                        have: of.total,
                    };
                    self.outbox.send(&resume, self.max_control);
                }
                None
            }
            Ok(crate::pieces::Outcome::OverBudget(message)) => {
                settle(&mut st, self);
                drop(st);
                self.note_error(ErrorCode::LimitReached, &message);
                self.engine.refuse_publish(ErrorCode::LimitReached, message);
                None
            }
            Ok(crate::pieces::Outcome::Complete(bytes)) => Some(Publish {
                endpoint,
                frame_len: bytes.len() + FRAME_HEADER_LEN + 4,
                bytes,
                reliable: (seq != 0).then_some(seq),
            }),
        }
    }

    /// Whether `name` is already this session's publisher on another of its
    /// connections (same identity, same non-zero session id): RT-CORBA's
    /// banded connections of one client share its endpoints.
    fn is_alias(&self, st: &State, name: &str, kind: EndpointKind) -> bool {
        if kind != EndpointKind::Publisher || self.session == [0; SESSION_ID_LEN] {
            return false;
        }
        let Some(e) = st.endpoints.get(name) else {
            return false;
        };
        e.owner != self.id
            && e.kind == EndpointKind::Publisher
            && st
                .connections
                .get(&e.owner)
                .is_some_and(|c| c.session == self.session && c.identity == self.identity)
    }

    /// Whether this connection holds `name`'s registration (not an alias).
    fn owns(st: &State, name: &str, conn: u64) -> bool {
        st.endpoints.get(name).is_some_and(|e| e.owner == conn)
    }

    /// A router-wide subscription id: (connection id << 32) | client id.
    fn global(&self, sub: u32) -> u64 {
        (self.id << 32) | sub as u64
    }

    fn handshake(&mut self, hello: engine::ClientHello) {
        let mut st = self.state.borrow_mut();
        let crate::auth::Granted {
            identity,
            rights,
            prove,
        } = match st.auth.authenticate_hello(&self.transport, &hello) {
            Ok(granted) => granted,
            Err((code, message)) => {
                drop(st);
                return self.refuse(code, message);
            }
        };
        let max_conns = st.config.limits.max_connections_per_identity;
        let usage = st.usage(&identity);
        if usage.connections >= max_conns {
            drop(st);
            return self.refuse(
                ErrorCode::LimitReached,
                format!("identity {identity} already has {max_conns} connections open (max_connections_per_identity)"),
            );
        }
        let max = st.config.limits.max_connections;
        if st.admission.established >= max {
            drop(st);
            tracing::warn!("refusing a handshake: {max} connections already established");
            return self.refuse(
                ErrorCode::LimitReached,
                format!("connection limit reached ({max} established connections, limits.max_connections)"),
            );
        }
        st.usage(&identity).connections += 1;
        if let Some(c) = st.connections.get_mut(&self.id) {
            c.name = hello.name;
            c.identity = identity.clone();
            c.session = hello.session;
        }
        let server = st.config.name.clone();
        drop(st);
        tracing::debug!(conn = self.id, %identity, "authenticated");
        self.identity = identity;
        self.rights = rights;
        self.session = hello.session;
        self.counted = true;
        match prove {
            // Version 3 with a token: this server proves it knows the token
            // first; the engine welcomes the client once its proof checks out.
            Some(token) => self
                .engine
                .challenge(&server, &token, crate::local::random_nonce()),
            None => self.engine.accept_hello(&server),
        }
    }

    fn declare(&mut self, _id: u32, kind: EndpointKind, name: String) {
        let mut st = self.state.borrow_mut();
        let max_per_identity = st.config.limits.max_endpoints_per_identity;
        if st.usage(&self.identity).endpoints >= max_per_identity {
            drop(st);
            return self.refuse(
                ErrorCode::LimitReached,
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
                return self.refuse(
                    ErrorCode::DuplicateEndpoint,
                    format!("endpoint name {name:?} is reserved for the session that held it for another {left} s"),
                );
            }
        }
        if self.is_alias(&st, &name, kind) {
            // The same session declares the endpoint again on another of its
            // (band) connections: it may publish there too, under the same
            // name; the first declaration keeps the name and its filters.
            st.aliases.entry(name.clone()).or_default().push(self.id);
            drop(st);
            tracing::debug!(conn = self.id, endpoint = %name, "endpoint alias on another band");
            return self.engine.accept();
        }
        if let Err(e) = st.endpoints.declare(&name, kind, self.id) {
            drop(st);
            let code = match e {
                tagwire_core::endpoint::EndpointError::Duplicate { .. } => {
                    ErrorCode::DuplicateEndpoint
                }
                tagwire_core::endpoint::EndpointError::TableFull { .. } => ErrorCode::LimitReached,
                _ => ErrorCode::BadRequest,
            };
            return self.refuse(code, e.to_string());
        }
        // Only now: a refused declare keeps the rightful session's claim.
        st.reservations.remove(&name);
        st.usage(&self.identity).endpoints += 1;
        if kind == EndpointKind::Publisher {
            let limits = st.filters.limits.clone();
            st.sources.declare(&name, &limits);
        }
        drop(st);
        tracing::debug!(conn = self.id, endpoint = %name, ?kind, "endpoint declared");
        self.engine.accept();
    }

    /// Forgets an undeclared endpoint (the engine already removed it and
    /// its subscriptions `subs` from the connection's tables).
    fn undeclare(&mut self, endpoint: &engine::Endpoint, subs: &[u32]) {
        // The endpoint's channels stop receiving now; the lane's
        // housekeeping removes them in slices.
        let gone: Vec<u64> = subs.iter().map(|s| self.global(*s)).collect();
        let dropped = gone.len();
        let mut st = self.state.borrow_mut();
        st.retire_endpoint(gone);
        st.shm.forget_endpoint(self.id, &endpoint.name);
        if !Self::owns(&st, &endpoint.name, self.id) {
            // An alias: the owner keeps the name.
            return st.drop_alias(&endpoint.name, self.id);
        }
        if st.hand_over(&endpoint.name) {
            return; // another band connection of the session has it now
        }
        st.endpoints.remove(&endpoint.name);
        let u = st.usage(&self.identity);
        u.endpoints = u.endpoints.saturating_sub(1);
        u.subscriptions = u.subscriptions.saturating_sub(dropped);
        st.suppliers.forget(&endpoint.name);
        st.consumers.remove(&*endpoint.name);
        if st.sources.undeclare(&endpoint.name) {
            st.filters.forget_publisher(&endpoint.name);
        }
    }

    fn subscribe(
        &mut self,
        sub: u32,
        endpoint: &Arc<str>,
        pattern: &str,
        qos: &[(String, String)],
    ) {
        let parsed = match Pattern::parse(pattern) {
            Ok(p) => p,
            Err(e) => return self.refuse(ErrorCode::InvalidPattern, e.to_string()),
        };
        if !self.rights.may_subscribe(&parsed) {
            let message = format!(
                "identity {} may not subscribe to {pattern:?} (no [[acl]] subscribe pattern covers it)",
                self.identity
            );
            return self.refuse(ErrorCode::PermissionDenied, message);
        }
        let (filter_props, qos): (Vec<_>, Vec<_>) =
            qos.iter().partition(|(k, _)| k == "filter" || k == "map");
        let (transform_props, qos): (Vec<_>, Vec<_>) =
            qos.into_iter().partition(|(k, _)| k == "transform");
        let (reserve_props, qos): (Vec<_>, Vec<_>) =
            qos.into_iter().partition(|(k, _)| k == "reserve");
        if !reserve_props.is_empty() && !self.rights.admin {
            // A reservation is the band's, on the daemon's egress: it takes
            // rate from every other connection's best effort.
            return self.refuse(
                ErrorCode::PermissionDenied,
                "reserve: a bandwidth reservation guarantees the band's rate on the daemon's egress for every connection of the band (and takes it from best effort): it needs the admin right".into(),
            );
        }
        let transform = match transform_props.last() {
            None => None,
            Some((_, spec)) => {
                let (name, params) = tagwire_core::proxy::split_spec(spec);
                let registry = crate::transform::registry();
                let Some(plugin) = registry.get(name) else {
                    let mut known: Vec<&str> = registry.keys().copied().collect();
                    known.sort();
                    let message = format!(
                        "transform {spec:?}: unknown plug-in {name:?} (known: {})",
                        known.join(", ")
                    );
                    return self.refuse(ErrorCode::BadRequest, message);
                };
                if let Err(why) = plugin.check(params) {
                    return self
                        .refuse(ErrorCode::BadRequest, format!("transform {spec:?}: {why}"));
                }
                Some(crate::channel::ChannelTransform {
                    plugin: plugin.clone(),
                    params: Arc::from(params),
                    spec: Arc::from(spec.as_str()),
                })
            }
        };
        let compiled = match self.compile_filters(&filter_props) {
            Ok(c) => c,
            Err(message) => return self.refuse(ErrorCode::InvalidFilter, message),
        };
        let mut st = self.state.borrow_mut();
        let layer = match QosLayer::parse(
            Level::Channel,
            qos.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &st.band_names,
        ) {
            Ok(l) => l,
            Err(e) => {
                drop(st);
                return self.refuse(ErrorCode::BadRequest, e.to_string());
            }
        };
        let resolved = crate::qos::resolve_channel(&st, self.id, &parsed, &layer);
        let checked = crate::qos::check_lane_change(
            self.rights.admin,
            layer.is_set(tagwire_core::qos::Property::Sched),
        )
        .and_then(|()| crate::qos::check_band(&st, self.id, &resolved))
        .and_then(|()| crate::qos::check_dscp(&st, self.id, self.global(sub), &resolved))
        .and_then(|()| crate::qos::check_proxy(&st, &resolved))
        .and_then(|()| crate::qos::check_consumers(&st, endpoint, &parsed, &resolved));
        if let Err((code, message)) = checked {
            drop(st);
            return self.refuse(code, message);
        }
        let shm_mode = resolved.values().shm;
        let same_host = self.outbox.passes_fds();
        if shm_mode == tagwire_core::qos::ShmMode::Require && !same_host {
            drop(st);
            return self.refuse(
                ErrorCode::BadRequest,
                "shm=require: this subscriber is not on the daemon's host (shared memory needs the Unix socket or embedded mode; it is connected over TCP)".into(),
            );
        }
        // References (presence bit SHM_REF) and region fds (ShmRegion) go
        // only to version-3 clients: versions 1 and 2 reserved that bit.
        let version = self.engine.version();
        if shm_mode == tagwire_core::qos::ShmMode::Require && version < SHM_MIN_VERSION {
            drop(st);
            return self.refuse(
                ErrorCode::BadRequest,
                format!("shm=require: this client speaks protocol version {version}, which has no shared-memory references (version {SHM_MIN_VERSION} has)"),
            );
        }
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
            return self.refuse(ErrorCode::LimitReached, msg);
        }
        let limits = &st.config.limits;
        let held = st.usage.get(&self.identity).map_or(0, |u| u.subscriptions);
        if st.node.routes().len() >= limits.max_subscriptions
            || held >= limits.max_subscriptions_per_identity
        {
            let msg = format!(
                "subscription limit reached ({} per identity, {} in all)",
                limits.max_subscriptions_per_identity, limits.max_subscriptions
            );
            drop(st);
            return self.refuse(ErrorCode::LimitReached, msg);
        }
        let v = resolved.values();
        let queue = BoundedQueue::with_policies(
            v.max_queue_length,
            limits.max_queue_bytes,
            v.order,
            v.discard,
        );
        if let Some((_, rate)) = reserve_props.last() {
            let band = st
                .connections
                .get(&self.id)
                .map_or_else(|| st.config.default_band.clone(), |c| c.band.to_string());
            let (global, conn) = (self.global(sub), self.id);
            if let Err(msg) = crate::bandwidth::reserve(&mut st, global, conn, &band, rate) {
                drop(st);
                return self.refuse(ErrorCode::BadRequest, msg);
            }
        }
        // Acknowledged delivery (docs/reliability.md): its events are not
        // shared-memory references (a reference cannot be sent again after
        // a reconnect).
        let acked = crate::acked_delivery::wants_acks(version, v.reliability);
        let reads_shm = !acked
            && same_host
            && shm_mode != tagwire_core::qos::ShmMode::Off
            && version >= SHM_MIN_VERSION;
        if reads_shm {
            st.shm.note_reader(self.id, &self.identity);
        }
        let endpoint_name: Arc<str> = Arc::from(&**endpoint);
        let mut channel = Channel::new(
            sub,
            endpoint_name.clone(),
            pattern.to_owned(),
            queue,
            self.outbox.clone(),
            st.memory.clone(),
        )
        .with_max_event(self.engine.max_delivered_event())
        .on_connection(self.id)
        .reading_shm(reads_shm)
        .for_consumer(
            st.consumers
                .entry(endpoint_name.clone())
                .or_default()
                .clone(),
        );
        if let Some(t) = transform {
            channel = channel.with_transform(t);
        }
        // The longest event one frame delivers to this subscription.
        let mut frame_event = self.engine.max_delivered_event();
        if acked {
            let limits = crate::acked_delivery::window_limits(
                v.max_queue_length,
                st.config.limits.max_queue_bytes,
            );
            frame_event = frame_event.saturating_sub(DELIVER_RELIABLE_EXTRA);
            channel = channel.with_acked(limits).with_max_event(frame_event);
        }
        if self.engine.pieces() && (!acked || self.engine.reliable_pieces()) {
            // Protocol version 5 (6 for acknowledged delivery): larger
            // events go in pieces, up to the daemon's
            // `limits.max_pieced_event`.
            let prefix = if acked {
                tagwire_proto::DELIVER_RELIABLE_PIECE_PREFIX_LEN
            } else {
                tagwire_proto::DELIVER_PIECE_PREFIX_LEN
            };
            let piece = (self.engine.max_frame() as usize)
                .saturating_sub(prefix - 4)
                .min(PIECE_DATA_MAX);
            let max = usize::try_from(st.config.limits.max_pieced_event).unwrap_or(usize::MAX);
            channel = channel.with_pieces(frame_event, piece, max);
        }
        let channel = Arc::new(channel);
        crate::qos::put_in_force(&mut st, &channel, layer, resolved);
        if acked && self.session != [0; SESSION_ID_LEN] {
            crate::acked_delivery::resume(&mut st, self.session, &channel, now_ns());
        }
        let global = self.global(sub);
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
        let added = st.node.routes_mut().add_channel(
            global,
            self.id,
            parsed,
            channel.clone(),
            filters,
            mapping,
        );
        if let Err(e) = added {
            crate::bandwidth::release(&mut st, global);
            drop(st);
            return self.refuse(ErrorCode::InvalidFilter, e.to_string());
        }
        let interfilter = op_name(st.node.routes().op(self.id));
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
        self.engine.accept();
    }

    /// The hot path: check an event (parsed once, here), then route it to
    /// every matching channel, with the router's state locked by the caller
    /// (`st`, held across a [`PublishBatch`]); its deliveries wait in
    /// `stage` (see [`Staging`]). `chunk`: as for [`Conn::handle`]. A
    /// refusal is returned, to be sent once the state is unlocked.
    /// A `PublishReliable` (protocol version 4): taken into the
    /// connection's receive window, dropped if this daemon already routed
    /// it (sent again after a reconnect), else routed reliably; settled
    /// once routed (custody: delivered to the local queues and held by
    /// every reliable link it went on, see [`crate::reliable`]), and
    /// acknowledged at the batch's end. A refused event is settled too:
    /// its refusal is the answer.
    fn publish_acked(
        &mut self,
        st: &mut State,
        stage: &mut Staging,
        note: &mut PublishNote,
        p: &mut Publish,
        chunk: Option<u64>,
        seq: u64,
    ) -> Result<(), (ErrorCode, String)> {
        crate::reliable::client_frame(st, self.id, &self.outbox, seq)?;
        let upstream = crate::state::reliable::Upstream { conn: self.id, seq };
        st.store.refused = None;
        let mut result = self.publish(st, stage, note, p, chunk, Some(upstream));
        if let Some(why) = st.store.refused.take() {
            // The durable store could not take custody: not delivered, and
            // failed in the acknowledgement (settled below).
            result = Err((
                ErrorCode::QueueFull,
                format!("event refused: the durable store cannot take it now: {why}"),
            ));
        }
        crate::reliable::client_settle(st, self.id, seq);
        result
    }

    fn publish(
        &mut self,
        st: &mut State,
        stage: &mut Staging,
        note: &mut PublishNote,
        p: &mut Publish,
        chunk: Option<u64>,
        upstream: Option<crate::state::reliable::Upstream>,
    ) -> Result<(), (ErrorCode, String)> {
        let ev = self.engine.publish_event(p, &mut self.tag_cache)?;
        if !self.rights.may_publish(ev.tag) {
            return Err((
                ErrorCode::PermissionDenied,
                format!(
                    "identity {} may not publish on {} (no [[acl]] publish pattern matches it)",
                    self.identity, ev.tag
                ),
            ));
        }
        if upstream.is_some() && crate::reliable::client_duplicate(st, &self.session, self.id, &ev)
        {
            return Ok(());
        }
        let mut shm = None;
        if crate::shm::is_shm(&ev) {
            match crate::shm::ShmEvent::check(&mut st.shm, self.id, &ev, &p.bytes) {
                Ok(Some(s)) => shm = Some(s),
                // The packet expired before the daemon read it (counted).
                Ok(None) => return Ok(()),
                Err(refusal) => return Err(refusal),
            }
        }
        let decision = st.node.admit(&ev, now_ns);
        let deadline = match decision {
            Admit::Expired => return Ok(()),
            Admit::Hold { deadline, .. } | Admit::Now { deadline } => deadline,
        };
        // The publisher's name, looked up only for publisher filters and
        // `max_suppliers` (most daemons have neither).
        let endpoint = || self.engine.endpoint_name(p.endpoint);
        if !st.sources.accepts(|| endpoint().map(|n| &**n), &ev) {
            st.filtered_at_source += 1;
            return Ok(());
        }
        if st.suppliers.limited {
            if let Some(name) = endpoint() {
                crate::qos::check_suppliers(st, ev.tag, name)?;
            }
        }
        let publisher_key = note.add(st, ev.tag, p.endpoint, ev.publisher);
        if let Admit::Hold { until, .. } = decision {
            // Held until its start time; a copy, so the read buffer is not
            // pinned (and a shared-memory payload is copied out now).
            let held = match shm.as_mut() {
                None => Bytes::copy_from_slice(&p.bytes),
                Some(s) => match s.copied() {
                    Some(copy) => copy.bytes().clone(),
                    None => return Ok(()),
                },
            };
            return match st.node.hold(until, held) {
                Ok(()) => {
                    st.deferred_wake.notify_one();
                    Ok(())
                }
                Err(e) => Err((
                    ErrorCode::LimitReached,
                    format!("event on {} refused: {e}", ev.tag),
                )),
            };
        }
        match shm.as_mut() {
            Some(s) => {
                crate::dispatch::deliver_shm(st, stage, s, &ev, deadline, Some(&self.band));
            }
            None => {
                // The frame's bytes go to the last item staged for it
                // (`hand_over` below): with one subscriber, routing takes
                // and drops no reference of them.
                let mut outgoing = match chunk {
                    None => Outgoing::own_buffer(&p.bytes),
                    Some(epoch) => Outgoing::in_chunk(&p.bytes, epoch),
                };
                outgoing.hand_over();
                let route = crate::dispatch::Route {
                    band: Some(&self.band),
                    reliable: upstream.is_some(),
                    upstream,
                    publisher_key: Some(publisher_key),
                    ..crate::dispatch::Route::default()
                };
                crate::dispatch::deliver_routed(st, stage, &mut outgoing, &ev, deadline, route);
                stage.hand_over(outgoing.into_owned(), &mut p.bytes);
            }
        }
        Ok(())
    }

    /// A same-host publisher asks for a shared-memory region: create it,
    /// queue `ShmRegion` with the fd, then the reply `{"region": id}` (so the
    /// fd reaches the client first). Refused over TCP or at a limit; the
    /// client then publishes over the socket (or, with `shm=require`, fails).
    fn shm_open(&mut self, body: &str) {
        let req = match crate::shm::parse_open(body) {
            Ok(r) => r,
            Err(message) => return self.refuse(ErrorCode::BadRequest, message),
        };
        if !self.outbox.passes_fds() {
            return self.refuse(
                ErrorCode::BadRequest,
                "shm_open: the connection is not on the daemon's host (shared memory needs the Unix socket or embedded mode)".into(),
            );
        }
        if let (Some(claimed), Some(seen)) = (req.pid, self.outbox.peer_pid()) {
            if claimed != seen {
                return self.refuse(
                    ErrorCode::BadRequest,
                    format!(
                        "shm_open: the client is in another PID namespace (pid {claimed} there, {seen} here): shared memory needs one, its liveness checks are by pid"
                    ),
                );
            }
        }
        let mut st = self.state.borrow_mut();
        let ours = st
            .endpoints
            .get(&req.endpoint)
            .is_some_and(|e| e.owner == self.id && e.kind == EndpointKind::Publisher);
        if !ours {
            drop(st);
            return self.refuse(
                ErrorCode::BadRequest,
                format!(
                    "shm_open: {:?} is not a publisher this connection declared",
                    req.endpoint
                ),
            );
        }
        let limits = st.config.limits.clone();
        let opened = st.shm.open(
            &limits,
            self.id,
            &self.identity,
            &req.endpoint,
            req.max_packet,
        );
        drop(st);
        match opened {
            Ok((region, fd)) => {
                let frame = crate::shm::producer_frame(region, req.id);
                if self.outbox.send_with_fd(&frame, fd, self.max_control) {
                    tracing::debug!(conn = self.id, endpoint = %req.endpoint, region, "shared-memory region granted");
                    self.engine.answer_admin(format!("{{\"region\":{region}}}"));
                } else {
                    self.state
                        .borrow_mut()
                        .shm
                        .forget_endpoint(self.id, &req.endpoint);
                    self.refuse(
                        ErrorCode::LimitReached,
                        "shm_open: cannot queue the region's fd".into(),
                    );
                }
            }
            Err(why) => {
                tracing::info!(conn = self.id, endpoint = %req.endpoint, "no shared memory for this publisher: {why}");
                self.refuse(ErrorCode::LimitReached, format!("shm_open: {why}"))
            }
        }
    }

    fn admin(&mut self, body: &str) {
        let requester = crate::admin::Requester {
            identity: &self.identity,
            admin: self.rights.admin,
        };
        let result = crate::admin::handle(
            &mut self.state.borrow_mut(),
            body,
            self.engine.max_frame() as usize,
            &requester,
        );
        self.finish_admin(result);
    }

    /// Sends an admin request to the admin lane and waits for its result.
    async fn admin_elsewhere(&self, body: String) -> Result<Reply, (ErrorCode, String)> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = crate::state::lanes::AdminJob {
            body,
            identity: self.identity.clone(),
            admin: self.rights.admin,
            max_frame: self.engine.max_frame() as usize,
            reply: tx,
        };
        let sent = match &self.state.borrow().admin_jobs {
            Some(jobs) => jobs.try_send(job),
            None => Err(tokio::sync::mpsc::error::TrySendError::Closed(job)),
        };
        let gone = || {
            (
                ErrorCode::ShuttingDown,
                "the admin lane has stopped".to_owned(),
            )
        };
        match sent {
            Ok(()) => {}
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                return Err((
                    ErrorCode::LimitReached,
                    format!(
                        "the admin lane has {} requests waiting; try again",
                        crate::state::lanes::MAX_ADMIN_JOBS
                    ),
                ))
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return Err(gone()),
        }
        rx.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Answers the admin request the engine handed over with `result`.
    fn finish_admin(&mut self, result: Result<Reply, (ErrorCode, String)>) {
        match result {
            Ok(Reply::Now(body)) => self.engine.answer_admin(body),
            Ok(Reply::WhenSettled(body)) => {
                let req = self.engine.defer();
                self.state
                    .borrow_mut()
                    .reply_when_settled(self.outbox.clone(), Frame::AdminReply { req, body });
            }
            Err((code, message)) => self.refuse(code, message),
        }
    }

    /// A subscriber's `DeliverAck` (version 4): releases what it settles
    /// from the subscription's window. One that cannot be right (an
    /// unknown subscription, a number never sent) is answered with an
    /// `Error` naming it; the connection stays open.
    fn deliver_ack(&mut self, sub: u32, ack: &tagwire_proto::Ack) {
        let channel = self.state.borrow().channels.get(self.global(sub)).cloned();
        let result = match channel {
            Some(ch) if ch.acked.is_some() => ch.on_deliver_ack(ack).map_err(|e| e.to_string()),
            Some(_) => Err("it is not a subscription with acknowledged delivery".into()),
            // Unsubscribed meanwhile: nothing to release.
            None => Ok(0),
        };
        if let Err(why) = result {
            let message = format!("bad DeliverAck for subscription {sub}: {why}");
            self.note_error(ErrorCode::Malformed, &message);
            self.outbox.send(
                &Frame::Error {
                    req: 0,
                    code: ErrorCode::Malformed,
                    message,
                },
                self.max_control,
            );
        }
    }

    fn drop_channel(&self, global: u64) {
        let mut st = self.state.borrow_mut();
        let u = st.usage(&self.identity);
        u.subscriptions = u.subscriptions.saturating_sub(1);
        st.node.routes_mut().remove_channel(global);
        st.channels.remove(&global);
        st.filters.forget_channel(global);
        crate::bandwidth::release(&mut st, global);
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
        if let Some(node) = self.link {
            crate::link::closed(&self.state, node, self.id);
        }
        let mut st = self.state.borrow_mut();
        crate::reliable::client_closed(&mut st, self.id);
        let memory = st.memory.clone();
        st.client_pieces.connection_closed(&memory, self.id);
        st.shm.forget_connection(self.id);
        let closed_cleanly = self.engine.closed().is_some_and(|c| c.by_peer);
        let reserve = !closed_cleanly && self.session != [0; SESSION_ID_LEN];
        let now = now_ns();
        let until_ns = now.saturating_add(
            st.config
                .limits
                .endpoint_reservation_secs
                .saturating_mul(1_000_000_000),
        );
        // Acknowledged subscriptions are parked for the session's
        // reconnect: they stay in the routes and hold what is published
        // meanwhile (see `crate::acked_delivery`); the rest stop receiving.
        let mut parked = Vec::new();
        if reserve {
            let acked: Vec<(u64, Arc<Channel>)> = self
                .engine
                .subscriptions()
                .keys()
                .filter_map(|sub| {
                    let g = self.global(*sub);
                    st.channels.get(g).map(|ch| (g, ch.clone()))
                })
                .filter(|(_, ch)| ch.acked.is_some())
                .collect();
            if !acked.is_empty() {
                parked = crate::acked_delivery::park(&mut st, self.session, &acked, now, until_ns);
            }
        }
        if parked.is_empty() {
            st.node.routes_mut().retire_session(self.id);
        } else {
            let rest: Vec<u64> = self
                .engine
                .subscriptions()
                .keys()
                .map(|sub| self.global(*sub))
                .filter(|g| !parked.contains(g))
                .collect();
            st.node.routes_mut().retire_channels(rest);
        }
        st.housekeeping.notify_one();
        let subs = self.engine.subscriptions().len();
        st.filters.forget_connection(self.id);
        let mut owned: Vec<&engine::Endpoint> = Vec::new();
        for e in self.engine.endpoints().values() {
            if !Self::owns(&st, &e.name, self.id) {
                st.drop_alias(&e.name, self.id);
            } else if !st.hand_over(&e.name) {
                owned.push(e);
            }
        }
        let endpoints = owned.len();
        let (identity, session) = (self.identity.to_string(), hex(&self.session));
        for e in owned {
            st.endpoints.remove(&e.name);
            st.suppliers.forget(&e.name);
            st.consumers.remove(&*e.name);
            if st.sources.undeclare(&e.name) {
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
        crate::bandwidth::release_connection(&mut st, self.id);
        if self.counted {
            let u = st.usage(&self.identity);
            u.connections = u.connections.saturating_sub(1);
            u.endpoints = u.endpoints.saturating_sub(endpoints);
            u.subscriptions = u.subscriptions.saturating_sub(subs);
            st.forget_idle_identity(&self.identity);
        }
    }
}
