//! The reader thread: feeds what the connection brings to the engine,
//! hands deliveries to their subscriptions and replies to their waiters,
//! and reconnects with backoff when the connection drops.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tagwire_core::connection::Input;
use tagwire_core::reliable::DeliveryAcks;

use super::dedupe::Delivered;

use super::connect::connect;
use super::{Inner, Target};
use crate::deliver::Deliver;
use crate::sample::{KnownNames, Sample};
use crate::sink::Sink;
use crate::stream::{Stream, READ_CHUNK};
use crate::sync::lock;

/// Reconnect backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(50);

const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Like [`read_some`](crate::stream::read_some), keeping passed fds for the shared-memory regions.
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

/// An acknowledged delivery's dedupe: what the subscription was delivered
/// across reconnects, the subscription and the read's clock.
struct Check<'a> {
    seen: &'a mut Delivered,
    sub: u32,
    now: u64,
}

/// Hands a delivered event to its sink; a payload in shared memory gets
/// its mapped region attached (read at hand-over), or is skipped (counted)
/// if this session has no such region. With `check` (an acknowledged
/// delivery), an event the subscription already had (a resend after a
/// reconnect) is dropped and counted: it is parsed once for both.
fn deliver(
    inner: &Inner,
    sink: &Sink,
    event: Bytes,
    known: &mut KnownNames,
    check: Option<Check<'_>>,
) {
    let parsed = match check {
        None => Sample::new_with(event, known, |_| true),
        Some(Check { seen, sub, now }) => Sample::new_with(event, known, |ev| {
            seen.is_new(sub, ev, now, |s| lock(&inner.sinks).contains_key(&s))
        }),
    };
    let sample = match parsed {
        Ok((s, true)) => s,
        Ok((s, false)) => {
            inner.delivery_duplicates.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = s.shm_ref() {
                inner.shm.give_back(r);
            }
            return;
        }
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
    if let Some(r) = Sample::new(event).ok().and_then(|s| s.shm_ref()) {
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

pub(super) fn reader_main(inner: Arc<Inner>, mut stream: Stream, mut leftover: BytesMut) {
    if let Some(b) = &inner.options.band {
        // Deliveries of this band (and its subscribers' callbacks) run at
        // the band's priority, as in the router's lane (TAO §4.2).
        b.apply_to_current_thread("reader thread");
    }
    let mut backoff = BACKOFF_MIN;
    // Per acknowledged subscription, what it was delivered, across
    // reconnects: the daemon sends again what was not acknowledged.
    let mut seen = Delivered::new(inner.now());
    loop {
        read_loop(&inner, &mut stream, &mut leftover, &mut seen);
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
                    seen.reconnected(inner.now());
                    // Before the new connection is read: its deliveries
                    // are held while the resume replays run.
                    let sinks = lock(&inner.sinks).clone();
                    crate::sink::resync(&sinks, "a reconnect");
                    tracing::info!("reconnected to {}", inner.target().describe());
                    let pieced = std::mem::take(&mut lock(&inner.writer).pieced_resend);
                    inner.resend_pieces(pieced);
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

/// Feeds what the connection brings to the engine and acts on its inputs,
/// with the engine unlocked: deliveries to the sinks (from a copy of the
/// sink map, taken again only when it changes), replies to their waiters.
/// Returns when the connection ends.
fn read_loop(inner: &Inner, stream: &mut Stream, buf: &mut BytesMut, seen: &mut Delivered) {
    let mut sinks: HashMap<u32, Arc<Sink>> = HashMap::new();
    // Acknowledged subscriptions on this connection (numbers start at 1
    // on each), and whether a read timeout is set for their next ack.
    let mut acks: Acks = HashMap::default();
    let mut timed = false;
    // The last delivery's subscription and sink: a stream of deliveries
    // to one subscription looks its sink up once, not per event.
    let mut last: Option<(u32, Arc<Sink>)> = None;
    let mut generation = u64::MAX;
    let mut inputs = Vec::new();
    // The read's `PublishAck`s, settled under one lock of the writer.
    let mut publish_acks = Vec::new();
    let mut heard = None;
    // Deliveries in pieces (protocol version 5), put together here.
    let mut pieces = super::pieces::delivery_reassembler();
    // The names of the last delivery, validated.
    let mut known = KnownNames::default();
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
        // One clock read per read, not per acknowledged delivery.
        let mut read_now = None;
        for input in inputs.drain(..) {
            // An acknowledged delivery: its read's clock, for the dedupe.
            let (sub, event, acked) = match input {
                Input::DeliverReliable { sub, seq, event } => {
                    let now = *read_now.get_or_insert_with(|| inner.now());
                    settle(inner, &mut acks, now, sub, seq);
                    (sub, event, Some(now))
                }
                Input::Deliver { sub, event } => (sub, event, None),
                Input::DeliverPiece { sub, of, data } => match whole(&mut pieces, sub, of, data) {
                    Some(event) => (sub, event, None),
                    None => continue,
                },
                Input::DeliverReliablePiece { sub, seq, of, data } => {
                    // Settled (acknowledged, deduplicated) once whole: the
                    // daemon sends nothing else of this subscription
                    // between an event's pieces, so numbers stay in order.
                    let Some(event) = whole(&mut pieces, sub, of, data) else {
                        continue;
                    };
                    let now = *read_now.get_or_insert_with(|| inner.now());
                    settle(inner, &mut acks, now, sub, seq);
                    (sub, event, Some(now))
                }
                Input::PublishAck(ack) => {
                    publish_acks.push(ack);
                    continue;
                }
                other => {
                    handle_other(inner, other);
                    continue;
                }
            };
            let g = inner.subs_generation.load(Ordering::Acquire);
            if g != generation {
                generation = g;
                sinks = lock(&inner.sinks).clone();
                last = None;
            }
            if last.as_ref().is_none_or(|(s, _)| *s != sub) {
                last = sinks.get(&sub).map(|sink| (sub, sink.clone()));
            }
            match &last {
                Some((_, sink)) => {
                    let check = acked.map(|now| Check {
                        seen: &mut *seen,
                        sub,
                        now,
                    });
                    deliver(inner, sink, event, &mut known, check)
                }
                // Unsubscribed while it was on its way: a payload
                // in shared memory was pinned for this connection
                // and handed over; give the pin back.
                None => discard(inner, event),
            }
        }
        if !publish_acks.is_empty() {
            inner.on_publish_acks(&publish_acks);
            publish_acks.clear();
        }
        let held_back = send_acks(inner, &mut acks, &sinks);
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
        // An acknowledgement due by time wakes the read (AckBatching); so
        // does, every millisecond, one held back for events the application
        // has not read yet (no frame may come to wake the read: the
        // daemon's window for that subscription may be full).
        let due = acks.values().filter_map(DeliveryAcks::poll_timeout).min();
        let mut wait = due.map(|t| Duration::from_nanos(t.saturating_sub(inner.now())));
        if held_back {
            wait = Some(wait.map_or(UNREAD_POLL, |w| w.min(UNREAD_POLL)));
        }
        if wait.is_some() || timed {
            timed = wait.is_some();
            let _ = stream.set_read_timeout(wait.map(|w| w.max(Duration::from_millis(1))));
        }
        match read_some_fds(stream, buf, &inner.shm) {
            Ok(true) => heard = Some(inner.now()),
            Ok(false) => return,
            Err(e)
                if timed
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
            Err(e) => {
                if !inner.closed.load(Ordering::Relaxed) {
                    tracing::debug!("read failed: {e}");
                }
                return;
            }
        }
    }
}

/// Acknowledged subscriptions' acknowledgement batching, by subscription
/// (looked up per acknowledged delivery: foldhash, not SipHash).
type Acks = HashMap<u32, DeliveryAcks, foldhash::fast::RandomState>;

/// Takes acknowledged delivery `seq` of subscription `sub`: its
/// acknowledgement is counted, sent by [`send_acks`] (whether the event is
/// one the subscription already had is [`deliver`]'s check).
fn settle(inner: &Inner, acks: &mut Acks, now: u64, sub: u32, seq: u64) {
    let a = acks
        .entry(sub)
        .or_insert_with(|| DeliveryAcks::new(inner.ack_batching(sub)));
    if let Err(e) = a.on_frame(seq, now) {
        tracing::warn!("subscription {sub}: {e}");
    }
}

/// Adds a piece of an event of subscription `sub` to `pieces`: the event
/// once it is whole (a bad piece is logged and dropped).
fn whole(
    pieces: &mut tagwire_core::fragment::Reassembler<(u32, u64)>,
    sub: u32,
    of: tagwire_proto::PieceOf,
    data: Bytes,
) -> Option<Bytes> {
    let piece = tagwire_core::fragment::Piece {
        blob: tagwire_core::fragment::BlobId {
            id: of.id,
            total: of.total,
            checksum: of.checksum,
        },
        offset: of.offset,
        data,
    };
    match pieces.on_piece((sub, of.id), &piece) {
        Ok(a) => match a.progress {
            tagwire_core::fragment::Progress::Complete(event) => Some(event),
            _ => None,
        },
        Err(e) => {
            tracing::warn!("subscription {sub}: a bad piece from the daemon: {e}");
            None
        }
    }
}

/// How often the reader looks whether the application read events of an
/// acknowledged subscription whose acknowledgement it holds back.
const UNREAD_POLL: Duration = Duration::from_millis(1);

/// Sends the `DeliverAck`s due now: an acknowledged subscription's events
/// are acknowledged once the application read them (a receiver's queue
/// holds back the acknowledgement of what it still holds), so that a slow
/// reader is paced by the daemon's window for it, where its queue's
/// `discard` policy applies and is counted, instead of losing events in
/// this process's queue. Returns whether an acknowledgement is held back
/// for events not read yet (the read then wakes every [`UNREAD_POLL`]).
fn send_acks(inner: &Inner, acks: &mut Acks, sinks: &HashMap<u32, Arc<Sink>>) -> bool {
    if acks.is_empty() {
        return false;
    }
    let now = inner.now();
    let mut frames = BytesMut::new();
    let mut held_back = false;
    for (sub, a) in acks.iter_mut() {
        let unread = sinks.get(sub).map_or(0, |s| s.unread());
        let ack = a.poll_ack_holding(now, unread);
        held_back |= unread > 0 && a.unacked() > 0;
        if let Some(ack) = ack {
            let frame = tagwire_proto::Frame::DeliverAck { sub: *sub, ack };
            if let Err(e) = frame.encode(&mut frames) {
                tracing::warn!("cannot encode a DeliverAck: {e}");
            }
        }
    }
    if !frames.is_empty() {
        let mut w = lock(&inner.writer);
        if w.connected {
            w.buf.extend_from_slice(&frames);
            let _ = inner.flush_locked(w);
        }
    }
    held_back
}

/// Acts on an input other than a delivery.
fn handle_other(inner: &Inner, input: Input) {
    match input {
        Input::PublishAck(ack) => inner.on_publish_acks(&[ack]),
        Input::PieceResume { id, have, .. } => lock(&inner.piece_resume).set(id, have),
        Input::Healed { daemons } => {
            // Before the next frame is read: the events that come now from
            // the daemons reachable again are held while the resumes run.
            tracing::info!(
                "the daemon reaches {daemons} daemons again: resuming durable subscriptions"
            );
            let sinks = lock(&inner.sinks).clone();
            crate::sink::resync(&sinks, "the network healed");
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
        Input::EndpointLost {
            name,
            subs,
            code,
            message,
            ..
        } => {
            tracing::error!(
                "endpoint {name} was refused after the reconnect: {message} (code {code:?}); its subscriptions end"
            );
            let gone: Vec<_> = {
                let mut sinks = lock(&inner.sinks);
                subs.iter().filter_map(|s| sinks.remove(s)).collect()
            };
            for sink in gone {
                sink.fail(crate::error::Error::EndpointLost {
                    name: name.to_string(),
                    reason: message.clone(),
                });
            }
        }
        Input::PeerError { req, code, message } => {
            tracing::warn!("server reported: {message} (code {code:?})");
            if req == 0 {
                lock(&inner.refusals).note(code, &message);
            }
        }
        Input::Closed => {
            if let Some(c) = lock(&inner.engine).closed() {
                tracing::info!("connection closed: {} (code {})", c.reason, c.code);
            }
        }
        _ => {}
    }
}
