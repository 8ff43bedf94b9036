//! The channel: one subscription's (or link's) bounded queue of encoded
//! events, its QoS, temporal scaling and timing, and what [`Channel::offer`]
//! does with an event.

use std::sync::Arc;

use tagwire_core::qos::{QosLayer, Resolved};
use tagwire_core::queue::{BoundedQueue, ItemKeys, Pushed};
use tagwire_core::tds::{BufferConfig, PlayoutConfig, TimeService};
use tagwire_proto::Frame;

use super::event::{EventMeta, Outgoing, Queued, READ_CHUNK};
use super::jitter::SharedJitter;
use super::outbox::{Outbox, CLASSES};
use super::transform::ChannelTransform;
use crate::budget::MemoryBudget;
use crate::sync::{Count, Flag, Locked};
use crate::timing::now_ns;

/// Most events taken from one channel before the next channel's turn, unless
/// its `max_batch` says otherwise.
const PER_CHANNEL_TURN: usize = 64;

/// Where a channel's events go: the frame its writer wraps each in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination {
    /// A client's subscription: `Deliver` frames.
    Subscriber,
    /// A link to another daemon: `Forward` frames with origin and hops.
    Link,
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
    seen: Locked<crate::state::placement::StreamSeen>,
    placing: Flag,
    /// Its spatial scaling plug-in, if it asked for one.
    pub transform: Option<ChannelTransform>,
    /// Events its plug-in could not transform (skipped for it alone).
    pub transform_errors: Count,
    /// Whether the subscriber was told of a transform error.
    transform_reported: Flag,
    /// The longest encoded event a `Deliver` on this connection may carry.
    max_event: usize,
    /// Events longer than this go as `DeliverPiece`s (protocol version 5;
    /// `usize::MAX`: never), each of at most `piece_size` bytes of data.
    pub(super) piece_at: usize,
    pub(super) piece_size: usize,
    /// Events delivered in pieces (their ids on this subscription).
    pub pieced: Count,
    /// The event being delivered in pieces and how far it got: the writer
    /// takes a batch's worth of its pieces per turn, so that control frames
    /// (an idle probe's `Ping`) and other channels go between them.
    pub(super) piecing: Locked<Option<super::outbox::Piecing>>,
    /// Whether `piecing` holds an event (read without its lock on every
    /// turn of the writer; only the writer sets either).
    pub(super) in_pieces: Flag,
    /// Whether a `QueueFull` was reported since the queue last accepted.
    pub reject_reported: Flag,
    /// Whether this channel is in its outbox's ready list.
    pub(super) scheduled: Flag,
    /// Its priority (0..=255): the writer serves higher classes first.
    priority: Count,
    /// Whether its priority, not the event's, orders its queue
    /// (`priority_model = server_declared`).
    server_declared: Flag,
    /// Most events the writer takes from this channel per turn (`max_batch`).
    pub(super) batch: Count,
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
    pub(super) not_before: Count,
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
    pub(super) budget: Arc<MemoryBudget>,
    /// The read epoch whose chunk this queue's small slices come from; while
    /// set, the channel holds [`READ_CHUNK`] of the budget for that chunk.
    pinned: Count,
    /// Its time services (`buffer`, `playout`; docs/time.md), ahead of its
    /// queue: events wait here until released, then go to the writer.
    /// Boxed: hundreds of bytes that most channels never have, which
    /// would spread the hot fields over more cache lines.
    time: Locked<Option<Box<TimeStage>>>,
    /// Whether `time` is set (checked without its lock).
    pub(super) timed: Flag,
    /// Events the memory budget had no room for in the time services.
    pub time_refused: Count,
    /// RFC 3550 jitter of the events it takes (arrival vs source time) and
    /// of those its writer takes (see [`super::jitter`]).
    pub(super) jitter_in: SharedJitter,
    pub(super) jitter_out: SharedJitter,
    /// Acknowledged delivery (a version-4 subscriber whose reliability is
    /// `reliable` or more): `DeliverReliable` frames, held until acknowledged.
    pub acked: Option<super::acked::AckedDelivery>,
}

/// A channel's time services and the settings they were made with. Each
/// held event keeps its size, reserved in the memory budget while held.
#[derive(Debug)]
pub(crate) struct TimeStage {
    settings: (Option<BufferConfig>, Option<PlayoutConfig>, usize),
    service: TimeService<(Queued, usize)>,
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

/// An event made ready for one channel's queue by [`Channel::prepare`],
/// queued by [`Channel::push_staged`].
#[derive(Debug)]
pub(crate) struct Staged {
    item: Queued,
    /// What it counts for in the queue and the memory budget.
    size: usize,
    /// The read whose chunk it is a small slice of, if it is one: queued
    /// as a slice only if the channel holds that chunk's budget by then.
    epoch: Option<u64>,
    /// Its source time (for the time services and the input jitter).
    source_time: u64,
}

impl Staged {
    /// Puts `bytes` in as the event of an item prepared for a handed-over
    /// event (see [`Outgoing::hand_over`]), in place of the empty
    /// `Bytes::new()` it was made with: a static slice, which has nothing
    /// to free (so it is not dropped: no call through its vtable).
    #[inline(always)]
    pub(super) fn set_event(&mut self, bytes: bytes::Bytes) {
        debug_assert!(self.item.event.is_empty());
        std::mem::forget(std::mem::replace(&mut self.item.event, bytes));
    }
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
            piece_at: usize::MAX,
            piece_size: usize::MAX,
            pieced: Count::new(0),
            piecing: Locked::new(None),
            in_pieces: Flag::new(false),
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
            time: Locked::new(None),
            timed: Flag::new(false),
            time_refused: Count::new(0),
            jitter_in: SharedJitter::default(),
            jitter_out: SharedJitter::default(),
            acked: None,
        }
    }

    /// Makes its deliveries acknowledged (`DeliverReliable`), held in a
    /// window of `limits` until the subscriber acknowledges them.
    pub(crate) fn with_acked(mut self, limits: tagwire_core::reliable::WindowLimits) -> Self {
        self.acked = Some(super::acked::AckedDelivery::new(limits));
        self
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
    pub(super) fn track(&self, before: usize, after: usize) {
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
    pub(crate) fn seen(&self) -> crate::state::placement::StreamSeen {
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
        self.set_time_services(v.buffer, v.playout, v.max_queue_length);
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

    pub(super) fn class(&self) -> usize {
        (self.priority() as usize) * CLASSES / 256
    }

    /// Bounds the events this channel delivers to `max` encoded bytes (the
    /// connection's negotiated frame limit less the `Deliver` prefix).
    pub(crate) fn with_max_event(mut self, max: usize) -> Self {
        self.max_event = max;
        self
    }

    /// Delivers events longer than `frame_event` (what one `Deliver` on the
    /// connection carries) up to `max` bytes in `DeliverPiece`s of at most
    /// `piece` bytes of data each (a subscriber of protocol version 5).
    pub(crate) fn with_pieces(mut self, frame_event: usize, piece: usize, max: usize) -> Self {
        self.piece_at = frame_event;
        self.piece_size = piece.max(1);
        self.max_event = max.max(frame_event);
        self
    }

    /// Whether a small slice of read `epoch` may be queued as a slice, with
    /// the queue locked (`q`): the channel already holds budget for that
    /// read's chunk, or its queue is empty and it takes that budget now.
    fn may_pin(&self, q: &BoundedQueue<Queued, ItemKeys>, epoch: u64) -> bool {
        // 0: nothing pinned (read epochs start at 1).
        match self.pinned.get() {
            0 if q.is_empty() && self.budget.try_reserve(READ_CHUNK) => {
                self.pinned.set(epoch);
                true
            }
            0 => false,
            e => e == epoch,
        }
    }

    /// Gives back the budget held for a pinned chunk (the queue is empty).
    pub(super) fn unpin(&self) {
        // Read first: a swap is a locked instruction, and nothing is pinned
        // on most turns.
        if self.pinned.get() != 0 && self.pinned.replace(0) != 0 {
            self.budget.release(READ_CHUNK);
        }
    }

    /// Queues `event` at once (the tests' shorthand for what a publish
    /// batch does: [`prepare`](Self::prepare), then
    /// [`push_staged`](Self::push_staged) under one lock for many events).
    #[cfg(test)]
    pub(crate) fn offer(self: &Arc<Self>, event: &mut Outgoing, meta: &EventMeta) -> Offer {
        assert!(
            !event.hand_over,
            "a handed-over event is staged, not offered"
        );
        match self.prepare(event, meta) {
            Some(s) => self.push_staged(std::iter::once(s), 0),
            None => Offer::Dropped,
        }
    }

    /// Makes `event` (shared with the other channels that get it, see
    /// [`Outgoing`]) ready for this queue, with its deadline and priority
    /// here; `None` if this channel leaves it out (too large for its
    /// connection, or its temporal scaling). Takes no lock unless the
    /// channel scales.
    pub(crate) fn prepare(&self, event: &mut Outgoing, meta: &EventMeta) -> Option<Staged> {
        if event.bytes().len() > self.max_event {
            self.too_large.add(1);
            return None;
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
                return None;
            }
        }
        // A small slice stays one if this channel holds (or may take) its
        // chunk; `push_staged` confirms that under the queue's lock and
        // copies it for this channel alone if not. A channel holding an
        // older chunk gets the copy shared with the channels after it.
        let pinned = self.pinned.get();
        let epoch = event
            .small_slice_epoch()
            // Held by the time services: a copy, not a pin on a read buffer.
            .filter(|e| (pinned == 0 || pinned == *e) && !self.timed.get());
        let hand_over = event.hand_over;
        let (bytes, size) = event.for_queue(epoch.is_some());
        Some(Staged {
            item: Queued {
                // A handed-over event's bytes come with `Staging::hand_over`
                // (or, if another item is staged after this one, a reference
                // of its own then): none taken here.
                event: if hand_over {
                    bytes::Bytes::new()
                } else {
                    bytes.clone()
                },
                deadline: self.deadline(meta),
                priority: if self.server_declared.get() {
                    self.priority()
                } else {
                    meta.priority
                },
                origin: meta.origin,
                hops: meta.hops,
                pin: event.pin.take(),
                compressed: event.compressed,
            },
            size,
            epoch,
            source_time: meta.source_time,
        })
    }

    /// Queues `items` (prepared for this channel, in order) under one lock
    /// of its queue, charges the memory budget once and wakes the writer
    /// once. The queue may use at most the budget's free room; beyond it
    /// the discard policy applies as at the queue's own bound. Returns what
    /// happened to the last item, except that a `reject` refusal to report
    /// wins (`Rejected { report: true }`). `arrived`: when the read that
    /// brought them arrived (0: not known), for the input jitter.
    pub(crate) fn push_staged(
        self: &Arc<Self>,
        items: impl Iterator<Item = Staged>,
        arrived: u64,
    ) -> Offer {
        if self.timed.get() {
            return self.push_timed(items);
        }
        self.push_queue(items, arrived)
    }

    /// [`push_staged`](Self::push_staged) into the queue itself. The input
    /// jitter takes the first event with a source time of the call (the
    /// events of one read share its arrival time): a cost per channel per
    /// read, not per event.
    fn push_queue(self: &Arc<Self>, items: impl Iterator<Item = Staged>, arrived: u64) -> Offer {
        let max = self.consumer_max.get();
        let mut outcome = Offer::Dropped;
        let mut report = false;
        let mut queued = false;
        let mut q = self.queue.borrow_mut();
        // A parked subscription that handed its events to the one made
        // again after its reconnect: what was staged for it goes there.
        if self.acked.is_some() {
            if let Some(next) = self.successor() {
                drop(q);
                // Collected: one concrete type, whatever called this.
                let items: Vec<Staged> = items.collect();
                return next.push_staged(items.into_iter(), arrived);
            }
        }
        let (before, len) = (q.bytes(), q.len());
        // The budget's room as the queue stood; what the queue grew since
        // is charged below.
        let free = self.budget.room().saturating_add(before);
        let consumer = self.consumer.get();
        // Its input jitter, updated under the queue's lock (no clock read:
        // the arrival is the read's time), from the call's first event with
        // a source time.
        let mut sampled = arrived == 0;
        for staged in items {
            let Staged {
                mut item,
                size,
                epoch,
                source_time,
            } = staged;
            if !sampled && source_time != 0 {
                sampled = true;
                let mut j = self.jitter_in.load();
                j.observe(arrived, source_time);
                self.jitter_in.store(&j);
            }
            if let Some(e) = epoch {
                if !self.may_pin(&q, e) {
                    item.event = bytes::Bytes::copy_from_slice(&item.event);
                }
            }
            if max != 0 && (consumer + q.len() as u64).saturating_sub(len as u64) >= max {
                // The consumer's bound across its channels: the arriving
                // event is the one refused (reject) or dropped.
                self.over_consumer.add(1);
                outcome = if q.policy() == tagwire_core::queue::DiscardPolicy::Reject {
                    let r = !self.reject_reported.replace(true);
                    report |= r;
                    Offer::Rejected { report: r }
                } else {
                    Offer::Dropped
                };
                continue;
            }
            let room = free.saturating_sub(q.bytes());
            let pushed = q.push_within(item, size, room);
            if room < size && !matches!(pushed, Pushed::Queued { dropped: 0 }) {
                self.budget.note_discard();
            }
            outcome = match pushed {
                Pushed::Queued { .. } => {
                    queued = true;
                    if self.reject_reported.get() {
                        self.reject_reported.set(false);
                    }
                    Offer::Queued
                }
                other => {
                    let o = self.refused(other);
                    report |= matches!(o, Offer::Rejected { report: true });
                    o
                }
            };
        }
        let (after, empty) = (q.bytes(), q.is_empty());
        self.track(len, q.len());
        if empty {
            // Nothing queued after all: nothing pinned.
            self.unpin();
        }
        // Charged under the queue's lock: a writer on another lane may pop
        // these events (and give their bytes back) as soon as it is free.
        if after >= before {
            self.budget.charge(after - before);
        } else {
            self.budget.release(before - after);
        }
        drop(q);
        // Read first: under a flood the channel is already scheduled, and a
        // swap is a locked instruction.
        if queued && !self.scheduled.get() && !self.scheduled.replace(true) {
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
        if report {
            Offer::Rejected { report: true }
        } else {
            outcome
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

impl Channel {
    /// Puts the `buffer` and `playout` properties in force: makes, remakes
    /// or removes the time services. Events held by services that go away
    /// move to the queue at once (their spacing is lost, nothing else).
    fn set_time_services(
        &self,
        buffer: Option<BufferConfig>,
        playout: Option<PlayoutConfig>,
        queue_length: usize,
    ) {
        let settings = (buffer, playout, queue_length);
        let mut t = self.time.borrow_mut();
        if t.as_ref().map(|s| s.settings) == Some(settings)
            || (t.is_none() && buffer.is_none() && playout.is_none())
        {
            return;
        }
        let held = t
            .take()
            .map(|mut s| s.service.drain_all())
            .unwrap_or_default();
        if buffer.is_some() || playout.is_some() {
            // Bounded by the buffer's own criteria, else by the queue's.
            let (events, bytes) = buffer
                .map_or((queue_length, tagwire_core::tds::DEFAULT_MAX_BYTES), |b| {
                    (b.max_events, b.max_bytes)
                });
            *t = Some(Box::new(TimeStage {
                settings,
                service: TimeService::new(buffer, playout, events, bytes),
            }));
        }
        self.timed.set(t.is_some());
        drop(t);
        if !held.is_empty() {
            self.requeue(held);
        }
    }

    /// Moves events released by the time services (or held by services that
    /// went away) into the queue, in order; the queue's bound and discard
    /// policy apply. The channel is scheduled already (it held them).
    fn requeue(&self, items: Vec<(Queued, usize)>) {
        let mut q = self.queue.borrow_mut();
        let (before, len) = (q.bytes(), q.len());
        for (item, size) in items {
            // Held in the budget while in the services: the queue charges
            // it again below.
            self.budget.release(size);
            let room = self
                .budget
                .room()
                .saturating_add(before)
                .saturating_sub(q.bytes());
            let _ = q.push_within(item, size, room);
        }
        let after = q.bytes();
        self.track(len, q.len());
        // Under the lock, as in `push_staged`.
        if after >= before {
            self.budget.charge(after - before);
        } else {
            self.budget.release(before - after);
        }
        drop(q);
        self.not_before.set(0);
        self.outbox.notify.notify_one();
    }

    /// [`push_staged`](Self::push_staged) into the time services: each event
    /// waits there until released (by the buffer's criteria, at its playout
    /// time); what they release at once (late events, their bound) goes to
    /// the queue. The writer is woken at the services' next release.
    fn push_timed(self: &Arc<Self>, items: impl Iterator<Item = Staged>) -> Offer {
        let now = now_ns();
        let mut outcome = Offer::Dropped;
        let mut due = Vec::new();
        let mut t = self.time.borrow_mut();
        let Some(stage) = t.as_mut() else {
            drop(t);
            return self.push_queue(items, 0);
        };
        for staged in items {
            if !self.budget.try_reserve(staged.size) {
                self.time_refused.add(1);
                self.budget.note_discard();
                continue;
            }
            // An event without a source time (0) is timed by its arrival.
            let src = match staged.source_time {
                0 => now,
                t => {
                    let mut j = self.jitter_in.load();
                    j.observe(now, t);
                    self.jitter_in.store(&j);
                    t
                }
            };
            stage
                .service
                .push((staged.item, staged.size), src, staged.size, now);
            outcome = Offer::Queued;
        }
        while let Some(d) = stage.service.poll(now) {
            due.push(d);
        }
        let wake = stage.service.next_wake();
        // Under the services' lock, as the writer decides whether the
        // channel still waits (see `Outbox::gather`).
        if let Some(w) = wake {
            if !self.scheduled.get() && !self.scheduled.replace(true) {
                self.not_before.set(w.max(1));
                self.outbox.ready.borrow_mut()[self.class()].push_back(Arc::downgrade(self));
                self.outbox.notify.notify_one();
            } else {
                let nb = self.not_before.get();
                if nb != 0 && w < nb {
                    self.not_before.set(w.max(1));
                    self.outbox.notify.notify_one();
                }
            }
        }
        drop(t);
        if !due.is_empty() {
            let staged = due.into_iter().map(|(item, size)| {
                self.budget.release(size);
                Staged {
                    item,
                    size,
                    epoch: None,
                    source_time: 0,
                }
            });
            let _ = self.push_queue(staged, 0);
            self.not_before.set(0);
            self.outbox.notify.notify_one();
        }
        outcome
    }

    /// Takes the events the time services release at `now` into `take`
    /// (if `room`, and while `take` says there is room for more), and
    /// returns when they next release (`Some(0)` or a time ≤ `now`: more
    /// are due now); `None` when they hold nothing. With nothing held and
    /// the queue empty (`queue_empty`, under the queue's lock) the channel
    /// is unscheduled here, under the services' lock, so that
    /// [`push_timed`](Self::push_timed) schedules it again; else
    /// `not_before` is set to the next release.
    pub(super) fn release_timed(
        &self,
        now: u64,
        queue_empty: bool,
        room: bool,
        mut take: impl FnMut(Queued) -> bool,
    ) -> Option<u64> {
        let mut t = self.time.borrow_mut();
        let wake = match t.as_mut() {
            Some(stage) => {
                if room {
                    while let Some((item, size)) = stage.service.poll(now) {
                        self.budget.release(size);
                        if !take(item) {
                            break;
                        }
                    }
                }
                stage.service.next_wake()
            }
            None => None,
        };
        match wake {
            None if queue_empty => self.scheduled.set(false),
            Some(w) if w > now && queue_empty => self.not_before.set(w),
            _ => {}
        }
        wake
    }

    /// The RFC 3550 jitter of its input and output, for `tagwire admin
    /// show` and `tagwire list`, once it has seen an event with a source
    /// time (see [`super::jitter`] for when each side is measured).
    pub(crate) fn jitter_info(&self) -> Option<tagwire_proto::admin::JitterInfo> {
        let (input, output) = (self.jitter_in.ns(), self.jitter_out.ns());
        (input.is_some() || output.is_some()).then_some(tagwire_proto::admin::JitterInfo {
            input_ns: input,
            output_ns: output,
        })
    }

    /// Its time services' state, for `tagwire admin show` and `tagwire
    /// list`, if it has any.
    pub(crate) fn time_info(&self) -> Option<tagwire_proto::admin::TimeServiceInfo> {
        let t = self.time.borrow();
        let s = &t.as_ref()?.service;
        let stats = s.stats();
        Some(tagwire_proto::admin::TimeServiceInfo {
            held: s.len(),
            released: stats.released,
            late: stats.late,
            late_dropped: stats.late_dropped,
            forced: stats.forced + stats.overflowed,
            reanchored: stats.reanchored,
            refused: self.time_refused.get(),
            input_jitter_ns: s.input_jitter_ns(),
            output_jitter_ns: s.output_jitter_ns(),
        })
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
        if let Some(stage) = self.time.get_mut() {
            let held: usize = stage.service.drain_all().iter().map(|(_, size)| size).sum();
            self.budget.release(held);
        }
    }
}
