//! Channels (one subscription's delivery path) and the per-connection outbox
//! that batches their frames into vectored writes.
//!
//! A channel owns a bounded queue of encoded events. The outbox lists
//! channels with queued events and control frames (replies, errors); the
//! connection's writer drains it round-robin, at most [`BATCH_EVENTS`] events
//! or [`BATCH_BYTES`] bytes per `writev`.
//!
//! **Ownership.** The router's tables (`State::channels`, the routes) are the
//! only strong owners of a channel; an outbox's ready list holds it weakly.
//! So a channel, and every event in its queue, is freed the moment it leaves
//! the tables, whatever its connection's writer is doing — there is no
//! channel → outbox → channel cycle for a forgotten path to leave behind.
//!
//! **What a queued event keeps alive.** Events arrive as slices of a
//! connection's read buffer ([`READ_CHUNK`] bytes, shared by every frame read
//! into it), and a queued slice keeps that whole buffer alive. The rules:
//! - A channel whose queue is empty, or holds only slices of the read being
//!   handled now, queues a small event as a slice (no copy: the hot path of
//!   a subscriber that keeps up), and holds one [`READ_CHUNK`] of the
//!   memory budget for that read's buffer until its queue is empty again.
//!   So a queue's slices of small events pin at most one read buffer.
//! - A channel that is behind (its queue holds events from earlier reads)
//!   gets a copy: the event smaller than [`COPY_BELOW`] is copied once into a
//!   buffer of its own size, and the copy is shared by every other channel
//!   that gets the event (no per-subscriber copy).
//! - An event of [`COPY_BELOW`] bytes or more stays a slice and is counted at
//!   what it can keep alive: the whole chunk (at most twice its size), or,
//!   for a frame read into a buffer of its own, its own size.
//!
//! Each queue counts every event it holds at that size plus
//! [`QUEUED_OVERHEAD`], against its own byte bound and the router-wide
//! memory budget.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use tagwire_core::qos::{QosLayer, Resolved};
use tagwire_core::queue::{BoundedQueue, ItemKeys, Pushed, QueueItem};
use tagwire_proto::{
    deliver_prefix, forward_prefix, Frame, LinkFrame, DELIVER_PREFIX_LEN, FORWARD_PREFIX_LEN,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use crate::budget::MemoryBudget;
use crate::sync::{Count, Flag, Locked};
use crate::timing::{now_ns, NEVER};

/// Priority classes of the writer's ready lists (low, normal, high,
/// critical: priorities 0–63, 64–127, 128–191, 192–255).
pub(crate) const CLASSES: usize = 4;

/// Most events gathered into one vectored write (two iovecs each).
pub const BATCH_EVENTS: usize = 256;
/// Most bytes gathered into one vectored write.
pub const BATCH_BYTES: usize = 1024 * 1024;
/// Most events taken from one channel before the next channel's turn, unless
/// its `max_batch` says otherwise.
const PER_CHANNEL_TURN: usize = 64;
/// Size of an established connection's read buffer; frames that fit are
/// read into one shared buffer of this size.
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// Events read into a shared chunk and smaller than this are copied (once)
/// before they are queued, so that they do not keep the chunk alive.
pub(crate) const COPY_BELOW: usize = READ_CHUNK / 2;
/// Bytes counted per queued event besides its own: the queue slot and the
/// allocator's and `Bytes`' headers of its buffer.
pub(crate) const QUEUED_OVERHEAD: usize = 128;
/// Most fds passed with one write (each a shared-memory region).
const MAX_FDS_PER_WRITE: usize = 16;

/// An encoded event on its way to channels, and what queuing it keeps alive.
#[derive(Debug)]
pub(crate) struct Outgoing {
    bytes: Bytes,
    /// The read epoch of the shared chunk `bytes` is a slice of, or `None`
    /// for a buffer of its own.
    chunk: Option<u64>,
    /// A shared-memory reference for the one channel that gets it: its
    /// payload pinned while queued; written as the reference or a copy
    /// (`docs/shm.md`, "Pins").
    pin: Option<crate::shm::ShmQueued>,
}

impl Outgoing {
    /// An event that is a slice of the shared [`READ_CHUNK`] buffer of read
    /// `epoch`.
    pub(crate) fn in_chunk(bytes: Bytes, epoch: u64) -> Self {
        Outgoing {
            bytes,
            chunk: Some(epoch),
            pin: None,
        }
    }

    /// An event in a buffer of its own (a copy, or a frame read into a buffer
    /// of its own size).
    pub(crate) fn owned(bytes: Bytes) -> Self {
        Outgoing {
            bytes,
            chunk: None,
            pin: None,
        }
    }

    /// A shared-memory reference for one channel, with what keeps its
    /// payload until it is written.
    pub(crate) fn pinned(bytes: Bytes, pin: crate::shm::ShmQueued) -> Self {
        Outgoing {
            bytes,
            chunk: None,
            pin: Some(pin),
        }
    }

    /// The encoded event.
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The bytes to keep in a pull buffer and what they count for: a small
    /// slice is copied out of its chunk once (the copy then serves every
    /// channel too), so history never pins a read chunk for a small event;
    /// a large slice counts the chunk it keeps alive.
    pub(crate) fn for_history(&mut self) -> (Bytes, usize) {
        let (bytes, counted) = self.for_queue(false);
        (bytes.clone(), counted - QUEUED_OVERHEAD)
    }

    /// The read epoch of a small event that could be queued as a slice.
    fn small_slice_epoch(&self) -> Option<u64> {
        self.chunk.filter(|_| self.bytes.len() < COPY_BELOW)
    }

    /// The bytes to queue and what they count for. A small slice is copied
    /// out of its chunk unless `slice_ok` (the channel holds budget for the
    /// chunk); the copy replaces the slice, so later channels share it.
    fn for_queue(&mut self, slice_ok: bool) -> (&Bytes, usize) {
        if self.small_slice_epoch().is_some() && !slice_ok {
            self.bytes = Bytes::copy_from_slice(&self.bytes);
            self.chunk = None;
        }
        let pinned = if self.chunk.is_some() && self.bytes.len() >= COPY_BELOW {
            READ_CHUNK.max(self.bytes.len())
        } else {
            // A copy, a buffer of its own, or a small slice whose chunk the
            // channel holds budget for.
            self.bytes.len() + DELIVER_PREFIX_LEN
        };
        (&self.bytes, pinned + QUEUED_OVERHEAD)
    }
}

/// An event waiting in a channel's queue.
#[derive(Debug)]
pub(crate) struct Queued {
    /// The encoded event, shared with every other channel that got it.
    pub event: Bytes,
    /// When it expires (ns since the Unix epoch), or [`NEVER`]: an event
    /// whose deadline passes while it waits is dropped, not delivered.
    pub deadline: u64,
    /// Its priority on this channel (the event's under `client_propagated`,
    /// the channel's under `server_declared`), for `order`/`discard=priority`.
    pub priority: u8,
    /// On a link: the daemon it was published at, and the links it has
    /// crossed (written into its `Forward` frame).
    pub origin: u64,
    /// On a link: links crossed before this one.
    pub hops: u8,
    /// A shared-memory reference's pin, until it is written.
    pub pin: Option<crate::shm::ShmQueued>,
}

impl QueueItem for Queued {
    fn priority(&self) -> u8 {
        self.priority
    }
    fn deadline(&self) -> u64 {
        self.deadline
    }
}

/// What a channel needs to know of an event to queue it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventMeta {
    /// Its own deadline ([`NEVER`]: none).
    pub deadline: u64,
    /// Its source timestamp (0: none).
    pub source_time: u64,
    /// Its priority.
    pub priority: u8,
    /// The daemon it was published at (0: this one, on a client channel).
    pub origin: u64,
    /// Links it has crossed so far.
    pub hops: u8,
    /// Its per-publisher sequence number (for temporal scaling).
    pub seq: u64,
    /// Its publisher's key (see [`tagwire_core::proxy::publisher_key`]).
    pub publisher: u64,
}

impl EventMeta {
    pub(crate) fn of(ev: &tagwire_proto::EventRef<'_>) -> Self {
        EventMeta {
            deadline: tagwire_core::defer::deadline(ev),
            source_time: ev.source_time_ns,
            priority: ev.priority,
            origin: 0,
            hops: 0,
            seq: ev.seq,
            publisher: tagwire_core::proxy::publisher_key(ev.publisher),
        }
    }
}

/// A channel's spatial scaling plug-in and its parameters.
#[derive(Debug, Clone)]
pub(crate) struct ChannelTransform {
    /// The plug-in.
    pub plugin: Arc<dyn tagwire_core::proxy::Transform>,
    /// Its parameters.
    pub params: Arc<str>,
    /// The whole spec (`downscale:2`): events transformed for one spec are
    /// shared by every channel with that spec.
    pub spec: Arc<str>,
}

/// Where a channel's events go: the frame its writer wraps each in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination {
    /// A client's subscription: `Deliver` frames.
    Subscriber,
    /// A link to another daemon: `Forward` frames with origin and hops.
    Link,
}

/// The bytes written before an event: a `Deliver` or `Forward` prefix.
#[derive(Debug, Clone, Copy)]
struct Prefix {
    bytes: [u8; FORWARD_PREFIX_LEN],
    len: u8,
}

impl Prefix {
    fn of(ch: &Channel, q: &Queued) -> Self {
        let mut bytes = [0u8; FORWARD_PREFIX_LEN];
        let len = match ch.destination {
            Destination::Subscriber => {
                bytes[..DELIVER_PREFIX_LEN].copy_from_slice(&deliver_prefix(ch.sub, q.event.len()));
                DELIVER_PREFIX_LEN
            }
            Destination::Link => {
                bytes = forward_prefix(q.origin, q.hops, q.event.len());
                FORWARD_PREFIX_LEN
            }
        };
        Prefix {
            bytes,
            len: len as u8,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// A channel's QoS: what its own level sets, and the effective values with
/// the level each came from (for `tagwire admin show`).
#[derive(Debug, Clone)]
pub(crate) struct ChannelQosState {
    pub layer: QosLayer,
    pub resolved: Resolved,
}

/// One subscription: where its events wait for the connection's writer.
#[derive(Debug)]
pub(crate) struct Channel {
    /// The client's subscription id (goes into `Deliver`).
    pub sub: u32,
    /// What its events are framed as.
    pub destination: Destination,
    /// The subscriber endpoint's name.
    pub endpoint: Arc<str>,
    /// The pattern as written.
    pub pattern: String,
    /// Queued encoded events.
    pub queue: Locked<BoundedQueue<Queued, ItemKeys>>,
    /// Events handed to the socket.
    pub delivered: Count,
    /// Events that expired while queued (dropped, not delivered).
    pub expired: Count,
    /// Events longer than the subscriber's connection accepts (its
    /// negotiated frame limit): dropped, never sent.
    pub too_large: Count,
    /// Its temporal scaling proxy (`scale`, `min_interval`).
    scaler: Locked<tagwire_core::proxy::TemporalScaler>,
    /// Whether `scaler` passes everything (checked without its lock).
    scaling: Flag,
    /// Events its temporal scaling left out.
    pub scaled_out: Count,
    /// Its scale and where its scaling proxy runs (advertised to the links).
    pub proxy: Locked<(u32, tagwire_core::qos::ProxyMode)>,
    /// Its `max_delay` bound, ns (`u64::MAX`: none), for placement.
    max_delay: Count,
    /// What it saw of its stream, for placement (`proxy=auto` channels
    /// that scale only: `placing`).
    seen: Locked<crate::placement::StreamSeen>,
    placing: Flag,
    /// Its spatial scaling plug-in, if it asked for one.
    pub transform: Option<ChannelTransform>,
    /// Events its plug-in could not transform (skipped for it alone).
    pub transform_errors: Count,
    /// Whether the subscriber was told of a transform error.
    transform_reported: Flag,
    /// The longest encoded event a `Deliver` on this connection may carry.
    max_event: usize,
    /// Whether a `QueueFull` was reported since the queue last accepted.
    pub reject_reported: Flag,
    /// Whether this channel is in its outbox's ready list.
    scheduled: Flag,
    /// Its priority (0..=255): the writer serves higher classes first.
    priority: Count,
    /// Whether its priority, not the event's, orders its queue
    /// (`priority_model = server_declared`).
    server_declared: Flag,
    /// Most events the writer takes from this channel per turn (`max_batch`).
    batch: Count,
    /// Channel-level `timeout` in ns (0: none): tightens each event's deadline.
    timeout: Count,
    /// Channel-level `stop_time` (0: none).
    stop_time: Count,
    /// Channel-level `start_time` (0: none): nothing is written before it.
    start_time: Count,
    /// `pacing_interval` in ns (0: write at once): events that find the
    /// channel idle wait this long, and those arriving meanwhile with them,
    /// before the writer takes them.
    pacing: Count,
    /// When the writer may next take from this channel (0: now).
    not_before: Count,
    /// Events queued across all channels of this channel's subscriber
    /// endpoint (shared by them), for `max_events_per_consumer`.
    consumer: Arc<Count>,
    /// `max_events_per_consumer` (0: no bound beyond each queue's).
    consumer_max: Count,
    /// Events refused because the consumer's bound was reached.
    pub over_consumer: Count,
    /// The connection it delivers on.
    pub conn: u64,
    /// Whether its subscriber reads payloads in shared memory (same host,
    /// `shm` not `off`): it gets references instead of copies.
    pub shm: bool,
    /// Its QoS layer and effective QoS.
    pub qos: Locked<ChannelQosState>,
    /// The connection it delivers on.
    pub outbox: Arc<Outbox>,
    /// The router-wide budget its queued bytes are charged to.
    budget: Arc<MemoryBudget>,
    /// The read epoch whose chunk this queue's small slices come from; while
    /// set, the channel holds [`READ_CHUNK`] of the budget for that chunk.
    pinned: Count,
}

/// What [`Channel::offer`] did with an event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Queued (possibly dropping older events, counted by the queue).
    Queued,
    /// Dropped by the channel's discard policy.
    Dropped,
    /// Refused (`reject` policy); `report` is true the first time since the
    /// queue last accepted, so the publisher is told once, not per event.
    Rejected {
        /// Whether to tell the publisher.
        report: bool,
    },
}

impl Channel {
    pub(crate) fn new(
        sub: u32,
        endpoint: Arc<str>,
        pattern: String,
        queue: BoundedQueue<Queued, ItemKeys>,
        outbox: Arc<Outbox>,
        budget: Arc<MemoryBudget>,
    ) -> Self {
        Channel {
            sub,
            destination: Destination::Subscriber,
            endpoint,
            pattern,
            queue: Locked::new(queue),
            delivered: Count::new(0),
            expired: Count::new(0),
            too_large: Count::new(0),
            scaler: Locked::new(tagwire_core::proxy::TemporalScaler::new(1, 0)),
            scaling: Flag::new(false),
            scaled_out: Count::new(0),
            proxy: Locked::new((1, tagwire_core::qos::ProxyMode::AtSubscriber)),
            max_delay: Count::new(u64::MAX),
            seen: Locked::new(Default::default()),
            placing: Flag::new(false),
            transform: None,
            transform_errors: Count::new(0),
            transform_reported: Flag::new(false),
            max_event: usize::MAX,
            reject_reported: Flag::new(false),
            scheduled: Flag::new(false),
            priority: Count::new(tagwire_core::qos::DEFAULT_PRIORITY as u64),
            server_declared: Flag::new(false),
            batch: Count::new(PER_CHANNEL_TURN as u64),
            timeout: Count::new(0),
            stop_time: Count::new(0),
            start_time: Count::new(0),
            pacing: Count::new(0),
            not_before: Count::new(0),
            consumer: Arc::new(Count::new(0)),
            consumer_max: Count::new(0),
            over_consumer: Count::new(0),
            conn: 0,
            shm: false,
            qos: Locked::new(ChannelQosState {
                layer: QosLayer::new(tagwire_core::qos::Level::Channel),
                resolved: Resolved::default(),
            }),
            outbox,
            budget,
            pinned: Count::new(0),
        }
    }

    /// Runs `t` on each event's payload before queueing (spatial scaling).
    pub(crate) fn with_transform(mut self, t: ChannelTransform) -> Self {
        self.transform = Some(t);
        self
    }

    /// Its plug-in failed on an event: skipped here, counted, and the
    /// subscriber told once (an `Error`, request id 0).
    pub(crate) fn transform_failed(&self, why: &str, max_control: usize) {
        self.transform_errors.add(1);
        if !self.transform_reported.replace(true) {
            let spec = self.transform.as_ref().map_or("", |t| &t.spec);
            let _ = self.outbox.send(
                &Frame::Error {
                    req: 0,
                    code: tagwire_proto::ErrorCode::BadRequest,
                    message: format!(
                        "subscription {} ({}): transform {spec} failed: {why}; events it cannot transform are skipped for this subscription",
                        self.endpoint, self.pattern
                    ),
                },
                max_control,
            );
        }
    }

    /// Makes this the forwarding queue of a link to another daemon.
    pub(crate) fn for_link(mut self) -> Self {
        self.destination = Destination::Link;
        self
    }

    /// Shares `count` (events queued for the subscriber endpoint) with the
    /// endpoint's other channels.
    pub(crate) fn for_consumer(mut self, count: Arc<Count>) -> Self {
        self.consumer = count;
        self
    }

    /// Keeps the consumer's count in step with this queue's length.
    fn track(&self, before: usize, after: usize) {
        if after >= before {
            self.consumer.add((after - before) as u64);
        } else {
            self.consumer.sub_saturating((before - after) as u64);
        }
    }

    /// Its `max_delay` bound, ns, if it has one.
    pub(crate) fn max_delay(&self) -> Option<u64> {
        Some(self.max_delay.get()).filter(|d| *d != u64::MAX)
    }

    /// What it saw of its stream so far.
    pub(crate) fn seen(&self) -> crate::placement::StreamSeen {
        *self.seen.borrow()
    }

    /// Sets the connection the channel delivers on.
    pub(crate) fn on_connection(mut self, conn: u64) -> Self {
        self.conn = conn;
        self
    }

    /// Lets the channel carry shared-memory references (see [`crate::shm`]).
    pub(crate) fn reading_shm(mut self, shm: bool) -> Self {
        self.shm = shm;
        self
    }

    /// Puts the effective QoS in force on this channel (its queue, priority
    /// and timing; the connection's DSCP and the lane's scheduling are the
    /// router's to apply). Returns the events a smaller queue dropped.
    pub(crate) fn apply_qos(&self, layer: QosLayer, resolved: Resolved) -> usize {
        let v = resolved.values();
        self.set_priority(v.priority);
        self.server_declared
            .set(v.priority_model == tagwire_core::qos::PriorityModel::ServerDeclared);
        self.batch.set(v.max_batch.max(1) as u64);
        self.timeout.set(v.timeout.unwrap_or(0));
        self.stop_time.set(v.stop_time.unwrap_or(0));
        self.start_time.set(v.start_time.unwrap_or(0));
        self.pacing.set(v.pacing_interval);
        self.consumer_max
            .set(v.max_events_per_consumer.unwrap_or(0) as u64);
        {
            let mut s = self.scaler.borrow_mut();
            s.set(v.scale, v.min_interval);
            self.scaling.set(!s.is_identity());
        }
        *self.proxy.borrow_mut() = (v.scale, v.proxy.clone());
        self.placing
            .set(v.scale > 1 && v.proxy == tagwire_core::qos::ProxyMode::Auto);
        self.max_delay.set(v.max_delay.unwrap_or(u64::MAX));
        let mut q = self.queue.borrow_mut();
        let dropped =
            if (q.bound(), q.order(), q.policy()) != (v.max_queue_length, v.order, v.discard) {
                let (before, len) = (q.bytes(), q.len());
                let d = q.reconfigure(v.max_queue_length, v.order, v.discard);
                self.budget.release(before - q.bytes());
                self.track(len, q.len());
                d
            } else {
                0
            };
        drop(q);
        *self.qos.borrow_mut() = ChannelQosState { layer, resolved };
        dropped
    }

    /// The deadline of an event on this channel: its own, tightened by the
    /// channel's `timeout` (after the source time) and `stop_time`.
    fn deadline(&self, meta: &EventMeta) -> u64 {
        let mut d = meta.deadline;
        let t = self.timeout.get();
        if t != 0 && meta.source_time != 0 {
            d = d.min(meta.source_time.saturating_add(t));
        }
        let stop = self.stop_time.get();
        if stop != 0 {
            d = d.min(stop);
        }
        d
    }

    /// The channel's priority (0..=255).
    pub(crate) fn priority(&self) -> u8 {
        self.priority.get() as u8
    }

    /// Changes the channel's priority: from its next turn on, the writer
    /// serves it in that class.
    pub(crate) fn set_priority(&self, p: u8) {
        self.priority.set(p as u64);
    }

    fn class(&self) -> usize {
        (self.priority() as usize) * CLASSES / 256
    }

    /// Bounds the events this channel delivers to `max` encoded bytes (the
    /// connection's negotiated frame limit less the `Deliver` prefix).
    pub(crate) fn with_max_event(mut self, max: usize) -> Self {
        self.max_event = max;
        self
    }

    /// Whether a small slice of read `epoch` may be queued as a slice: the
    /// queue is empty (then the channel takes budget for the chunk) or holds
    /// slices of that same read only.
    fn may_pin(&self, epoch: u64) -> bool {
        // 0: nothing pinned (read epochs start at 1).
        match self.pinned.get() {
            0 if self.queue.borrow().is_empty() && self.budget.try_reserve(READ_CHUNK) => {
                self.pinned.set(epoch);
                true
            }
            0 => false,
            e => e == epoch,
        }
    }

    /// Gives back the budget held for a pinned chunk (the queue is empty).
    fn unpin(&self) {
        if self.pinned.replace(0) != 0 {
            self.budget.release(READ_CHUNK);
        }
    }

    /// Queues `event` (shared with the other channels that get it, see
    /// [`Outgoing`]), to be dropped if still queued at `deadline`, and wakes
    /// the writer. The queue may use at most the memory budget's free room;
    /// beyond it the discard policy applies as at the queue's own bound.
    pub(crate) fn offer(self: &Arc<Self>, event: &mut Outgoing, meta: &EventMeta) -> Offer {
        if event.bytes().len() > self.max_event {
            self.too_large.add(1);
            return Offer::Dropped;
        }
        if self.scaling.get() {
            if self.placing.get() {
                self.seen.borrow_mut().see(meta, event.bytes().len());
            }
            if !self
                .scaler
                .borrow_mut()
                .admit(meta.publisher, meta.seq, meta.source_time)
            {
                // Left out by this subscriber's temporal scaling: not a drop.
                self.scaled_out.add(1);
                return Offer::Dropped;
            }
        }
        let slice_ok = event.small_slice_epoch().is_some_and(|e| self.may_pin(e));
        let (bytes, size) = event.for_queue(slice_ok);
        let queued = Queued {
            event: bytes.clone(),
            deadline: self.deadline(meta),
            priority: if self.server_declared.get() {
                self.priority()
            } else {
                meta.priority
            },
            origin: meta.origin,
            hops: meta.hops,
            pin: event.pin.take(),
        };
        let max = self.consumer_max.get();
        if max != 0 && self.consumer.get() >= max {
            // The consumer's bound across its channels: the arriving event
            // is the one refused (reject) or dropped.
            self.over_consumer.add(1);
            return if self.queue.borrow().policy() == tagwire_core::queue::DiscardPolicy::Reject {
                Offer::Rejected {
                    report: !self.reject_reported.replace(true),
                }
            } else {
                Offer::Dropped
            };
        }
        let room = self.budget.room();
        let mut q = self.queue.borrow_mut();
        let (before, len) = (q.bytes(), q.len());
        let pushed = q.push_within(queued, size, room);
        let after = q.bytes();
        self.track(len, q.len());
        drop(q);
        if after >= before {
            self.budget.charge(after - before);
        } else {
            self.budget.release(before - after);
        }
        if room < size && !matches!(pushed, Pushed::Queued { dropped: 0 }) {
            self.budget.note_discard();
        }
        match pushed {
            Pushed::Queued { .. } => {
                self.reject_reported.set(false);
                if !self.scheduled.replace(true) {
                    // Idle until now: it may have to wait (start time, pacing).
                    let (start, pacing) = (self.start_time.get(), self.pacing.get());
                    if start != 0 || pacing != 0 {
                        let now = now_ns();
                        let paced = if pacing != 0 {
                            now.saturating_add(pacing)
                        } else {
                            0
                        };
                        self.not_before.set(start.max(paced));
                    }
                    self.outbox.ready.borrow_mut()[self.class()].push_back(Arc::downgrade(self));
                    self.outbox.notify.notify_one();
                }
                Offer::Queued
            }
            Pushed::DroppedNewest(_) | Pushed::Rejected(_) if self.queue.borrow().is_empty() => {
                // Nothing queued after all: nothing pinned.
                self.unpin();
                self.refused(pushed)
            }
            other => self.refused(other),
        }
    }

    fn refused(&self, pushed: Pushed<Queued>) -> Offer {
        match pushed {
            Pushed::Rejected(_) => Offer::Rejected {
                report: !self.reject_reported.replace(true),
            },
            _ => Offer::Dropped,
        }
    }
}

impl Drop for Channel {
    /// Gives the queued events' bytes (and a pinned chunk's) back to the
    /// memory budget; the events themselves are freed with the queue.
    fn drop(&mut self) {
        let q = self.queue.get_mut();
        let (bytes, len) = (q.bytes(), q.len());
        self.budget.release(bytes);
        self.track(len, 0);
        self.unpin();
    }
}

/// A connection's outgoing side: control frames plus channels with events.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Channels with queued events, held weakly: a channel dropped from the
    /// router's tables is skipped here (see the module doc).
    ready: Locked<[VecDeque<Weak<Channel>>; CLASSES]>,
    control: Locked<BytesMut>,
    notify: Notify,
    /// Set when the connection is closing: the writer flushes and stops.
    closing: Flag,
    /// Woken to end the connection from outside its task (a peer daemon
    /// declared down by membership).
    kill: Notify,
    /// The Unix socket (a dup) for passing fds with SCM_RIGHTS; `None` on
    /// TCP and TLS (see [`crate::shm`]).
    fd_socket: Locked<Option<std::os::fd::OwnedFd>>,
    /// Fds to pass with the next write of the control frames (each named
    /// by a `ShmRegion` frame queued with it).
    fds: Locked<Vec<std::os::fd::OwnedFd>>,
}

impl Outbox {
    /// Queues a control frame. Returns false if control bytes exceed `max`
    /// (a client that sends requests but never reads): the caller closes.
    pub(crate) fn send(&self, frame: &Frame, max: usize) -> bool {
        let mut c = self.control.borrow_mut();
        if c.len() > max {
            return false;
        }
        if let Err(e) = frame.encode(&mut c) {
            tracing::error!(
                "cannot encode a {} frame: {e}",
                tagwire_proto::frame_name(frame.kind())
            );
        }
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Queues a link frame (see [`LinkFrame`]), like [`send`](Self::send).
    pub(crate) fn send_link(&self, frame: &LinkFrame, max: usize) -> bool {
        let mut c = self.control.borrow_mut();
        if c.len() > max {
            return false;
        }
        if let Err(e) = frame.encode(&mut c) {
            tracing::error!("cannot encode a link frame: {e}");
        }
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Queues encoded control frames (from the protocol engine). Returns
    /// false if control bytes exceed `max`: the caller closes.
    pub(crate) fn send_encoded(&self, frames: &[u8], max: usize) -> bool {
        let mut c = self.control.borrow_mut();
        if c.len() > max {
            return false;
        }
        c.extend_from_slice(frames);
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Makes this outbox pass fds over `socket` (a Unix socket).
    pub(crate) fn set_fd_socket(&self, socket: std::os::fd::OwnedFd) {
        *self.fd_socket.borrow() = Some(socket);
    }

    /// Whether fds can be passed on this connection.
    pub(crate) fn passes_fds(&self) -> bool {
        self.fd_socket.borrow().is_some()
    }

    /// The peer's pid as this daemon's PID namespace sees it (`SO_PEERCRED`
    /// on the fd-passing socket), if it has one.
    pub(crate) fn peer_pid(&self) -> Option<u32> {
        let sock = self.fd_socket.borrow();
        let cred = rustix::net::sockopt::socket_peercred(sock.as_ref()?).ok()?;
        Some(cred.pid.as_raw_nonzero().get() as u32)
    }

    /// Queues a control frame with an fd that travels with it (SCM_RIGHTS
    /// on the first byte of the write that carries it). False: no room
    /// (as [`send`](Self::send)) or no Unix socket.
    pub(crate) fn send_with_fd(&self, frame: &Frame, fd: std::os::fd::OwnedFd, max: usize) -> bool {
        if !self.passes_fds() {
            return false;
        }
        let mut c = self.control.borrow_mut();
        if c.len() > max || self.fds.borrow().len() >= MAX_FDS_PER_WRITE {
            return false;
        }
        if frame.encode(&mut c).is_err() {
            return false;
        }
        self.fds.borrow().push(fd);
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Writes the start of `control` with the pending fds attached;
    /// returns the bytes written. Waits (bounded) while the socket is full.
    async fn write_fds(
        &self,
        control: &[u8],
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> std::io::Result<usize> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        use std::os::fd::AsFd;
        let sock = match self.fd_socket.borrow().as_ref() {
            Some(s) => s.try_clone()?,
            None => return Ok(0),
        };
        let borrowed: Vec<std::os::fd::BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        let mut space = vec![
            std::mem::MaybeUninit::<u8>::uninit();
            rustix::cmsg_space!(ScmRights(MAX_FDS_PER_WRITE))
        ];
        // A full socket: retry for up to ~1 s, then give up on the fds (the
        // client sees `ShmRegion` without one and falls back to copies).
        for _ in 0..1000 {
            let mut anc = SendAncillaryBuffer::new(&mut space);
            if !anc.push(SendAncillaryMessage::ScmRights(&borrowed)) {
                return Ok(0);
            }
            match sendmsg(
                &sock,
                &[IoSlice::new(control)],
                &mut anc,
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            ) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        tracing::warn!(
            "could not pass shared-memory fds within 1 s (socket full); the client copies instead"
        );
        Ok(0)
    }

    /// Ends the connection from outside: its task stops reading, cleans up
    /// and closes (see [`killed`](Self::killed)).
    pub(crate) fn kill(&self) {
        self.kill.notify_one();
    }

    /// Resolves when [`kill`](Self::kill) was called.
    pub(crate) async fn killed(&self) {
        self.kill.notified().await
    }

    /// Asks the writer to flush what is queued and stop.
    pub(crate) fn close(&self) {
        self.closing.set(true);
        self.notify.notify_one();
    }

    /// Writes queued frames to `w` until [`close`](Self::close) and empty.
    pub(crate) async fn run_writer<W: AsyncWrite + Unpin>(&self, mut w: W) -> std::io::Result<()> {
        let mut bodies: Vec<Bytes> = Vec::with_capacity(BATCH_EVENTS);
        let mut prefixes: Vec<Prefix> = Vec::with_capacity(BATCH_EVENTS);
        loop {
            let mut control = self.control.borrow_mut().split().freeze();
            let fds = std::mem::take(&mut *self.fds.borrow());
            if !fds.is_empty() && !control.is_empty() {
                let n = self.write_fds(&control, fds).await?;
                control = control.slice(n..);
            }
            let wake = self.gather(&mut bodies, &mut prefixes, control.len());
            if control.is_empty() && bodies.is_empty() {
                if self.closing.get() {
                    let _ = w.shutdown().await;
                    return Ok(());
                }
                match wake {
                    // A channel waits for its start time or pacing interval.
                    Some(at) => {
                        let wait = std::time::Duration::from_nanos(at.saturating_sub(now_ns()));
                        let _ = tokio::time::timeout(wait, self.notify.notified()).await;
                    }
                    None => self.notify.notified().await,
                }
                continue;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(1 + 2 * bodies.len());
            if !control.is_empty() {
                slices.push(IoSlice::new(&control));
            }
            for (p, b) in prefixes.iter().zip(&bodies) {
                slices.push(IoSlice::new(p.as_slice()));
                slices.push(IoSlice::new(b));
            }
            write_all_vectored(&mut w, &mut slices).await?;
            drop(slices);
            bodies.clear();
            prefixes.clear();
        }
    }

    /// Takes up to a batch of events: the highest priority class first,
    /// round-robin over the ready channels of a class. Channels that must
    /// wait (start time, pacing) are passed over; returns the earliest time
    /// one of them may go.
    fn gather(
        &self,
        bodies: &mut Vec<Bytes>,
        prefixes: &mut Vec<Prefix>,
        mut total: usize,
    ) -> Option<u64> {
        let mut ready = self.ready.borrow_mut();
        // Read the clock at most once per batch, and only for an event that
        // can expire or a channel that may have to wait.
        let mut now = None;
        let mut waiting: Vec<(usize, Weak<Channel>)> = Vec::new();
        let mut wake: Option<u64> = None;
        while bodies.len() < BATCH_EVENTS && total < BATCH_BYTES {
            let Some(weak) = ready.iter_mut().rev().find_map(|c| c.pop_front()) else {
                break;
            };
            // A channel that was dropped meanwhile took its queue with it.
            let Some(ch) = weak.upgrade() else { continue };
            let not_before = ch.not_before.get();
            if not_before != 0 {
                if *now.get_or_insert_with(now_ns) < not_before {
                    wake = Some(wake.map_or(not_before, |w| w.min(not_before)));
                    waiting.push((ch.class(), weak));
                    continue;
                }
                ch.not_before.set(0);
            }
            let mut q = ch.queue.borrow_mut();
            let (before, len) = (q.bytes(), q.len());
            let (mut taken, mut expired) = (0u64, 0u64);
            let turn = ch.batch.get();
            while taken < turn && bodies.len() < BATCH_EVENTS && total < BATCH_BYTES {
                let Some(item) = q.pop() else {
                    break;
                };
                if item.deadline != NEVER && *now.get_or_insert_with(now_ns) > item.deadline {
                    expired += 1;
                    continue;
                }
                let mut item = item;
                if let Some(q) = item.pin.take() {
                    // Written below: by reference if the subscriber's pin
                    // row has room (it gives the pin back), else a copy.
                    match q.written() {
                        Some(bytes) => item.event = bytes,
                        None => continue,
                    }
                }
                let prefix = Prefix::of(&ch, &item);
                total += prefix.len as usize + item.event.len();
                prefixes.push(prefix);
                bodies.push(item.event);
                taken += 1;
            }
            ch.delivered.set(ch.delivered.get() + taken);
            ch.expired.set(ch.expired.get() + expired);
            ch.budget.release(before - q.bytes());
            ch.track(len, q.len());
            // Under the queue's lock: an event offered (on any lane) after
            // this sees the channel unscheduled and schedules it again.
            let empty = q.is_empty();
            if empty {
                ch.scheduled.set(false);
                ch.unpin();
            }
            drop(q);
            if !empty {
                ready[ch.class()].push_back(weak);
            }
        }
        for (class, weak) in waiting {
            ready[class].push_back(weak);
        }
        wake
    }
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut slices: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = w.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_core::queue::{DiscardPolicy, OrderPolicy};

    const NO_META: EventMeta = EventMeta {
        deadline: NEVER,
        source_time: 0,
        priority: 64,
        origin: 0,
        hops: 0,
        seq: 0,
        publisher: 0,
    };

    fn channel(budget: &Arc<MemoryBudget>) -> (Arc<Outbox>, Arc<Channel>) {
        let outbox = Arc::new(Outbox::default());
        let queue = BoundedQueue::with_policies(
            1 << 20,
            1 << 30,
            OrderPolicy::Fifo,
            DiscardPolicy::DropOldest,
        );
        let ch = Arc::new(Channel::new(
            1,
            "/sub".into(),
            "/**".into(),
            queue,
            outbox.clone(),
            budget.clone(),
        ));
        (outbox, ch)
    }

    /// The subscription ids of one batch the writer gathers, in order.
    fn gathered_subs(outbox: &Outbox) -> Vec<u32> {
        let (mut bodies, mut prefixes) = (Vec::new(), Vec::new());
        let _ = outbox.gather(&mut bodies, &mut prefixes, 0);
        prefixes
            .iter()
            .map(|p| {
                let p = p.as_slice();
                u32::from_le_bytes([p[5], p[6], p[7], p[8]])
            })
            .collect()
    }

    #[test]
    fn the_writer_serves_a_higher_priority_channel_first_and_follows_a_change() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (outbox, low) = channel(&budget);
        let queue = BoundedQueue::with_policies(
            1 << 20,
            1 << 30,
            OrderPolicy::Fifo,
            DiscardPolicy::DropOldest,
        );
        let high = Arc::new(Channel::new(
            2,
            "/sub2".into(),
            "/**".into(),
            queue,
            outbox.clone(),
            budget.clone(),
        ));
        low.set_priority(0);
        high.set_priority(200);
        for ch in [&low, &high] {
            let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
        }
        let subs = gathered_subs(&outbox);
        assert_eq!(subs, [2, 1], "high (sub 2) before low (sub 1)");
        // Swap the priorities: the next turn follows them.
        low.set_priority(255);
        high.set_priority(0);
        for ch in [&high, &low] {
            let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
        }
        let subs = gathered_subs(&outbox);
        assert_eq!(subs, [1, 2]);
    }

    /// What the router test that slept 2.5 s for events to expire in a
    /// stalled subscriber's queue checked, with deadlines instead of sleep:
    /// an event whose deadline passes while queued is dropped and counted,
    /// its neighbours are delivered, and a channel `timeout` tightens the
    /// deadline an event brings.
    #[test]
    fn events_that_expire_while_queued_are_dropped_and_counted_not_delivered() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (outbox, ch) = channel(&budget);
        let past = EventMeta {
            deadline: 1,
            ..NO_META
        };
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"keep1")), &NO_META);
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"stale")), &past);
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"keep2")), &NO_META);
        // A channel timeout of 1 ns after a source time long past.
        let mut layer = QosLayer::new(tagwire_core::qos::Level::Channel);
        layer = layer
            .with([("timeout", "1ns")], &[])
            .expect("a valid timeout");
        let resolved = tagwire_core::qos::resolve(&[&layer]);
        ch.apply_qos(layer, resolved);
        let old = EventMeta {
            source_time: 1,
            ..NO_META
        };
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"timed")), &old);
        let (mut bodies, mut prefixes) = (Vec::new(), Vec::new());
        let _ = outbox.gather(&mut bodies, &mut prefixes, 0);
        let got: Vec<&[u8]> = bodies.iter().map(|b| &b[..]).collect();
        assert_eq!(got, [&b"keep1"[..], b"keep2"]);
        assert_eq!(ch.expired.get(), 2);
        assert_eq!(ch.delivered.get(), 2);
    }

    fn with_qos(ch: &Channel, props: &[(&str, &str)]) {
        let layer = QosLayer::new(tagwire_core::qos::Level::Channel)
            .with(props.iter().copied(), &[])
            .expect("valid properties");
        let resolved = tagwire_core::qos::resolve(&[&layer]);
        ch.apply_qos(layer, resolved);
    }

    #[test]
    fn a_channel_start_time_or_pacing_holds_its_events_until_then() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (outbox, ch) = channel(&budget);
        let later = now_ns() + 3_600_000_000_000;
        with_qos(&ch, &[("start_time", &later.to_string())]);
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
        let (mut bodies, mut prefixes) = (Vec::new(), Vec::new());
        let wake = outbox.gather(&mut bodies, &mut prefixes, 0);
        assert!(bodies.is_empty(), "nothing before the start time");
        assert_eq!(wake, Some(later), "the writer wakes at the start time");
        // A start time in the past: delivered at once.
        with_qos(&ch, &[("start_time", "1")]);
        ch.not_before.set(1);
        assert_eq!(gathered_subs(&outbox), [1]);
        // Pacing: an event that finds the channel idle waits the interval.
        with_qos(&ch, &[("start_time", "none"), ("pacing_interval", "60s")]);
        let before = now_ns();
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"p")), &NO_META);
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"q")), &NO_META);
        let (mut bodies, mut prefixes) = (Vec::new(), Vec::new());
        let wake = outbox
            .gather(&mut bodies, &mut prefixes, 0)
            .expect("a wake time");
        assert!(bodies.is_empty());
        assert!(wake >= before + 60_000_000_000, "{wake} vs {before}");
        // When the interval is over, both go in one batch.
        ch.not_before.set(1);
        assert_eq!(gathered_subs(&outbox), [1, 1]);
    }

    #[test]
    fn max_events_per_consumer_bounds_all_channels_of_an_endpoint_together() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let consumer = Arc::new(Count::new(0));
        let outbox = Arc::new(Outbox::default());
        let make = |sub| {
            let queue = BoundedQueue::with_policies(
                1 << 20,
                1 << 30,
                OrderPolicy::Fifo,
                DiscardPolicy::DropOldest,
            );
            let ch = Arc::new(
                Channel::new(
                    sub,
                    "/sub".into(),
                    "/**".into(),
                    queue,
                    outbox.clone(),
                    budget.clone(),
                )
                .for_consumer(consumer.clone()),
            );
            with_qos(&ch, &[("max_events_per_consumer", "3")]);
            ch
        };
        let (a, b) = (make(1), make(2));
        for _ in 0..5 {
            for ch in [&a, &b] {
                let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
            }
        }
        assert_eq!(consumer.get(), 3, "three queued across both channels");
        assert_eq!(a.queue.borrow().len() + b.queue.borrow().len(), 3);
        assert_eq!(a.over_consumer.get() + b.over_consumer.get(), 7);
        assert_eq!(gathered_subs(&outbox).len(), 3);
        assert_eq!(consumer.get(), 0, "the writer took them: room again");
        assert_eq!(
            a.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META),
            Offer::Queued
        );
        drop(a);
        assert_eq!(consumer.get(), 0, "a dropped channel gives its count back");
    }

    #[test]
    fn a_dropped_channel_frees_its_queue_although_its_outbox_lists_it() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (outbox, ch) = channel(&budget);
        let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
        for _ in 0..10 {
            let mut ev = Outgoing::in_chunk(chunk.slice(0..40_000), 1);
            assert_eq!(ch.offer(&mut ev, &NO_META), Offer::Queued);
        }
        assert!(budget.used() > 0);
        assert_eq!(
            outbox
                .ready
                .borrow()
                .iter()
                .map(VecDeque::len)
                .sum::<usize>(),
            1,
            "scheduled on its outbox"
        );
        let weak = Arc::downgrade(&ch);
        // The router's tables let go of the channel (its subscriber left).
        drop(ch);
        assert!(
            weak.upgrade().is_none(),
            "the outbox does not keep it alive"
        );
        assert_eq!(budget.used(), 0, "its queued bytes are given back");
        // The outbox's (dead) entry is skipped by the writer.
        let (mut bodies, mut prefixes) = (Vec::new(), Vec::new());
        let _ = outbox.gather(&mut bodies, &mut prefixes, 0);
        assert!(bodies.is_empty());
        assert_eq!(Arc::strong_count(&outbox), 1);
    }

    #[test]
    fn a_small_event_to_a_queue_that_keeps_up_stays_a_slice_and_holds_one_chunk() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (outbox, a) = channel(&budget);
        let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
        for i in 0..10 {
            let mut ev = Outgoing::in_chunk(chunk.slice(i * 44..(i + 1) * 44), 1);
            a.offer(&mut ev, &NO_META);
        }
        let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
        {
            let q = a.queue.borrow();
            let first = &q.iter().next().expect("queued").event;
            assert_eq!(first.as_ptr(), chunk.as_ptr(), "a slice, not a copy");
            assert_eq!(q.bytes(), 10 * per_event);
        }
        assert_eq!(budget.used(), 10 * per_event + READ_CHUNK, "plus the chunk");
        let (mut bodies, mut prefixes) = (Vec::new(), Vec::new());
        let _ = outbox.gather(&mut bodies, &mut prefixes, 0);
        assert_eq!(bodies.len(), 10);
        assert_eq!(budget.used(), 0, "an empty queue pins nothing");
    }

    #[test]
    fn a_small_event_to_queues_that_are_behind_is_copied_once_for_all_of_them() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (_o1, a) = channel(&budget);
        let (_o2, b) = channel(&budget);
        let old = Bytes::from(vec![1u8; READ_CHUNK]);
        // Both hold an event of an earlier read (epoch 1): they are behind.
        a.offer(&mut Outgoing::in_chunk(old.slice(0..44), 1), &NO_META);
        b.offer(&mut Outgoing::in_chunk(old.slice(0..44), 1), &NO_META);
        let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
        let range = chunk.as_ptr_range();
        let mut ev = Outgoing::in_chunk(chunk.slice(100..144), 2);
        a.offer(&mut ev, &NO_META);
        b.offer(&mut ev, &NO_META);
        let qa = a.queue.borrow();
        let qb = b.queue.borrow();
        let ea = &qa.iter().nth(1).expect("queued").event;
        let eb = &qb.iter().nth(1).expect("queued").event;
        assert!(
            !range.contains(&ea.as_ptr()),
            "not a slice of the new chunk"
        );
        assert_eq!(ea.as_ptr(), eb.as_ptr(), "one copy shared by both channels");
        let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
        assert_eq!(qa.bytes(), 2 * per_event);
        assert_eq!(budget.used(), 2 * (2 * per_event + READ_CHUNK));
    }

    #[test]
    fn a_large_event_stays_in_its_chunk_and_is_counted_at_the_chunk() {
        let budget = Arc::new(MemoryBudget::new(1 << 30));
        let (_o, a) = channel(&budget);
        let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
        let mut ev = Outgoing::in_chunk(chunk.slice(0..COPY_BELOW), 1);
        a.offer(&mut ev, &NO_META);
        let q = a.queue.borrow();
        assert_eq!(
            q.iter().next().expect("queued").event.as_ptr(),
            chunk.as_ptr()
        );
        assert_eq!(q.bytes(), READ_CHUNK + QUEUED_OVERHEAD);
    }

    #[test]
    fn queues_stop_at_the_memory_budget_with_their_discard_policy() {
        let per_event = 1000 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
        let budget = Arc::new(MemoryBudget::new(3 * per_event));
        let (_o1, a) = channel(&budget);
        let (_o2, b) = channel(&budget);
        let ev = || Outgoing::owned(Bytes::from(vec![1u8; 1000]));
        for _ in 0..3 {
            assert_eq!(a.offer(&mut ev(), &NO_META), Offer::Queued);
        }
        // b has nothing to drop: the event is dropped and counted.
        assert_eq!(b.offer(&mut ev(), &NO_META), Offer::Dropped);
        // a (drop_oldest) makes room from its own queue.
        assert_eq!(a.offer(&mut ev(), &NO_META), Offer::Queued);
        assert_eq!(a.queue.borrow().dropped(), 1);
        assert_eq!(budget.used(), 3 * per_event);
        assert_eq!(budget.discards(), 2);
    }
}
