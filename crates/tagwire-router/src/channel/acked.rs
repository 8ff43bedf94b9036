//! Acknowledged delivery to a subscriber (protocol version 4,
//! `DeliverReliable`/`DeliverAck`; docs/reliability.md, "Between a daemon
//! and its subscribers"): the channel's writer numbers what it writes
//! (1, 2, … per subscription on each connection) and keeps each event in
//! a bounded window (core's [`SendWindow`]) until the subscriber
//! acknowledges it. A full window stops the writer taking from this
//! channel (its queue fills and its `discard` policy applies there,
//! counted) — never the connection's other channels. When the connection
//! drops, the window and the queue are parked for the subscriber's session
//! ([`crate::reliable::park_deliveries`]) and sent again, first, to the
//! subscription made again after its reconnect.

use std::sync::Arc;

use bytes::Bytes;
use tagwire_core::bytelog::{ByteLog, Kept};
use tagwire_core::queue::Pushed;
use tagwire_core::reliable::{Ack, AckError, SendWindow, WindowFull, WindowLimits};
use tagwire_proto::EventRef;

use super::event::{Queued, COPY_BELOW, QUEUED_OVERHEAD, READ_CHUNK};
use super::Channel;
use crate::sync::{Count, Flag, Locked};

/// A channel's acknowledged delivery: what it wrote and the subscriber has
/// not acknowledged yet.
#[derive(Debug)]
pub(crate) struct AckedDelivery {
    /// The window and the log its small events are copied into.
    pub(super) window: Locked<Held>,
    /// The writer found the window full and left the channel out of its
    /// ready list: the next acknowledgement puts it back.
    pub(super) blocked: Flag,
    /// Times the writer found the window full.
    pub window_full: Count,
    /// Events sent again after a reconnect (from a parked window or queue).
    pub resent: Count,
    /// Its connection dropped and it is parked: it stays in the routes and
    /// its queue holds the events published meanwhile (not listed as a
    /// live subscription).
    pub parked: Flag,
    /// The subscription made again after the reconnect, once this parked
    /// one handed its events over (set under this channel's queue lock):
    /// deliveries staged for this channel before that go there.
    successor: Locked<Option<std::sync::Weak<Channel>>>,
    limits: WindowLimits,
    /// Acknowledged publishers wait for this subscription's queue to fall
    /// below half its bound (see [`Channel::hold_back`]): the writer
    /// wakes them through `drained` when it does.
    pub(super) held_back: Flag,
    /// Woken by the writer when the queue fell below half its bound.
    pub(super) drained: tokio::sync::Notify,
    /// A publisher waited [`MAX_BLOCKING`] for this queue in vain: it is
    /// not held back for it again until the queue falls below half its
    /// bound (a subscriber that stopped reading costs each publisher one
    /// wait, then its `discard` policy applies, counted).
    pub(super) gave_up: Flag,
    /// Times an acknowledged publisher was held back for this subscription.
    pub(super) publishers_held: Count,
}

/// Whether a reliable subscription's queue of `len` (of `bound`) holds an
/// acknowledged publisher back: the one threshold that holds it, and whose
/// crossing back down releases it.
fn half_full(len: usize, bound: usize) -> bool {
    len * 2 >= bound
}

/// The longest an acknowledged publisher is held back for one
/// subscription's full queue (DDS's `max_blocking_time`, whose default is
/// also 100 ms); after it the subscription's `discard` policy applies.
pub(crate) const MAX_BLOCKING: std::time::Duration = std::time::Duration::from_millis(100);

/// A channel's window of what it wrote and the subscriber has not
/// acknowledged, and the log small events are copied into (see
/// [`for_window`]).
#[derive(Debug)]
pub(crate) struct Held {
    pub(super) window: SendWindow<Kept>,
    pub(super) log: ByteLog,
}

impl AckedDelivery {
    /// An empty window of `limits`.
    pub(crate) fn new(limits: WindowLimits) -> Self {
        AckedDelivery {
            window: Locked::new(Held {
                window: SendWindow::new(limits, WindowFull::Block),
                log: ByteLog::new(ARENA_BLOCK),
            }),
            blocked: Flag::new(false),
            window_full: Count::new(0),
            resent: Count::new(0),
            parked: Flag::new(false),
            successor: Locked::new(None),
            limits,
            held_back: Flag::new(false),
            drained: tokio::sync::Notify::new(),
            gave_up: Flag::new(false),
            publishers_held: Count::new(0),
        }
    }

    /// Its counters and bounds, for listings.
    pub(crate) fn info(&self) -> tagwire_proto::admin::AckedInfo {
        let h = self.window.borrow_mut();
        let w = &h.window;
        tagwire_proto::admin::AckedInfo {
            unacked: w.len(),
            unacked_bytes: w.bytes(),
            window_events: self.limits.max_events,
            window_bytes: self.limits.max_bytes,
            window_full: self.window_full.get(),
            resent: self.resent.get(),
            publishers_held: self.publishers_held.get(),
        }
    }
}

/// Small events are copied for the window into a log of blocks of this
/// size (one allocation for a hundred events or more, instead of one each,
/// and no reference counted per event). Events are acknowledged in order,
/// so a block is freed soon after its last event is: at most about two
/// blocks per subscription beyond what the window counts.
const ARENA_BLOCK: usize = 16 * 1024;

/// What the window keeps of an event the writer wrote, and what it counts
/// for: a small event is copied (a slice would keep its whole read buffer
/// alive for as long as it waits for the acknowledgement), into `arena`'s
/// log when it is under a quarter of [`ARENA_BLOCK`]; a large one is
/// shared and counted at the buffer it can keep alive.
pub(super) fn for_window(event: &Bytes, log: &mut ByteLog) -> (Kept, usize) {
    let len = event.len();
    if len < ARENA_BLOCK / 4 {
        (Kept::Log(log.push(event)), len + QUEUED_OVERHEAD)
    } else if len < COPY_BELOW {
        (
            Kept::Own(Bytes::copy_from_slice(event)),
            event.len() + QUEUED_OVERHEAD,
        )
    } else {
        (
            Kept::Own(event.clone()),
            event.len().max(READ_CHUNK) + QUEUED_OVERHEAD,
        )
    }
}

impl Channel {
    /// Whether an acknowledged publisher that just queued events here must
    /// wait before it reads on (a reliable subscription whose queue is at
    /// least half full, and not given up on): then it is marked, so that
    /// the writer wakes the publisher once the queue is below half.
    /// Checked once per channel per publish batch, only for batches with
    /// an acknowledged publish.
    pub(crate) fn hold_back(&self) -> bool {
        let Some(a) = self.acked.as_ref() else {
            return false;
        };
        if a.gave_up.get() || a.parked.get() {
            return false;
        }
        let q = self.queue.borrow_mut();
        let over = half_full(q.len(), q.bound());
        drop(q);
        if over {
            a.held_back.set(true);
            a.publishers_held.add(1);
        }
        over
    }

    /// Waits until this channel's queue is below half its bound, at most
    /// [`MAX_BLOCKING`]; after that the channel is given up on (see
    /// `gave_up`). No lock is held across the wait.
    pub(crate) async fn wait_drained(&self) {
        let Some(a) = self.acked.as_ref() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + MAX_BLOCKING;
        loop {
            let notified = a.drained.notified();
            tokio::pin!(notified);
            // Registered before the check: a wake-up between the check and
            // the wait is not lost.
            notified.as_mut().enable();
            {
                let q = self.queue.borrow_mut();
                if !half_full(q.len(), q.bound()) || a.parked.get() {
                    return;
                }
            }
            a.held_back.set(true);
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                a.gave_up.set(true);
                return;
            }
        }
    }

    /// Called by the writer after it took from this channel's queue
    /// (`len` left of `bound`): wakes the publishers held back for it once
    /// the queue is below half, and forgets a give-up.
    pub(super) fn drained_to(&self, len: usize, bound: usize) {
        if let Some(a) = self.acked.as_ref() {
            if !half_full(len, bound) && (a.held_back.get() || a.gave_up.get()) {
                a.held_back.set(false);
                a.gave_up.set(false);
                a.drained.notify_waiters();
            }
        }
    }

    /// Its acknowledged delivery's counters, if it has it.
    pub(crate) fn acked_info(&self) -> Option<tagwire_proto::admin::AckedInfo> {
        self.acked.as_ref().map(AckedDelivery::info)
    }

    /// Takes the subscriber's `DeliverAck`: releases what it settles and,
    /// if the writer had left this channel out for a full window, puts it
    /// back in the ready list. Returns how many events it released.
    pub(crate) fn on_deliver_ack(self: &Arc<Self>, ack: &Ack) -> Result<usize, AckError> {
        let Some(a) = &self.acked else {
            return Ok(0);
        };
        let mut n = 0;
        {
            let mut h = a.window.borrow_mut();
            let Held { window, log } = &mut *h;
            window.release(ack, |kept, _| {
                kept.release(log);
                n += 1;
            })?;
        }
        if n > 0 && a.blocked.replace(false) {
            self.outbox.ready.borrow_mut()[self.class()].push_back(Arc::downgrade(self));
            self.outbox.notify.notify_one();
        }
        Ok(n)
    }

    /// The connection is gone: takes what the subscriber has not
    /// acknowledged (the window, in order) and what was queued for it
    /// (after), emptying both; with `successor`, what is staged for this
    /// channel from now on goes there instead. The queue is locked first
    /// and across both (the writer's order), so no event moves from the
    /// queue to the window unseen.
    pub(crate) fn park(&self, successor: Option<&Arc<Channel>>) -> Vec<Bytes> {
        let Some(a) = &self.acked else {
            return Vec::new();
        };
        let mut q = self.queue.borrow_mut();
        let mut out: Vec<Bytes> = {
            let mut h = a.window.borrow_mut();
            let held = h.window.drain();
            held.into_iter()
                .map(|kept| kept.into_bytes(&mut h.log))
                .collect()
        };
        let (before, len) = (q.bytes(), q.len());
        while let Some(item) = q.pop() {
            out.push(item.event);
        }
        if let Some(next) = successor {
            *a.successor.borrow_mut() = Some(Arc::downgrade(next));
        }
        self.budget.release(before - q.bytes());
        self.track(len, q.len());
        drop(q);
        self.unpin();
        out
    }

    /// The subscription this parked one handed its events to, if it did
    /// (checked with the queue locked, see [`Channel::park`]).
    pub(super) fn successor(&self) -> Option<Arc<Channel>> {
        let a = self.acked.as_ref()?;
        a.successor
            .borrow()
            .as_ref()
            .and_then(std::sync::Weak::upgrade)
    }

    /// Whether it is parked (its connection dropped; see
    /// [`crate::acked_delivery`]).
    pub(crate) fn is_parked(&self) -> bool {
        self.acked.as_ref().is_some_and(|a| a.parked.get())
    }

    /// Queues `events` (parked when this subscription's previous connection
    /// dropped) ahead of anything else, in order; the queue's bound and
    /// discard policy apply. Called under the router's state lock before
    /// the channel is in the routes, so no live event comes first.
    pub(crate) fn preload(self: &Arc<Self>, events: Vec<Bytes>) -> usize {
        let mut q = self.queue.borrow_mut();
        let (before, len) = (q.bytes(), q.len());
        let mut queued = 0;
        for event in events {
            let Ok(ev) = EventRef::parse(&event) else {
                continue;
            };
            let deadline = tagwire_core::defer::deadline(&ev);
            let priority = ev.priority;
            let size = event.len() + QUEUED_OVERHEAD;
            let room = self
                .budget
                .room()
                .saturating_add(before)
                .saturating_sub(q.bytes());
            let item = Queued {
                event,
                deadline,
                priority,
                origin: 0,
                hops: 0,
                pin: None,
                // A subscriber's queue: never a link's compressed blob.
                compressed: false,
            };
            if let Pushed::Queued { .. } = q.push_within(item, size, room) {
                queued += 1;
            }
        }
        let (after, empty) = (q.bytes(), q.is_empty());
        self.track(len, q.len());
        // Under the lock, as in `push_staged`: a writer on another lane may
        // pop them as soon as it is free.
        if after >= before {
            self.budget.charge(after - before);
        } else {
            self.budget.release(before - after);
        }
        drop(q);
        if let Some(a) = &self.acked {
            a.resent.add(queued as u64);
        }
        if !empty && !self.scheduled.replace(true) {
            self.outbox.ready.borrow_mut()[self.class()].push_back(Arc::downgrade(self));
            self.outbox.notify.notify_one();
        }
        queued
    }
}
