//! Channels (one subscription's delivery path) and the per-connection outbox
//! that batches their frames into vectored writes.
//!
//! A channel owns a bounded queue of encoded events (`Bytes` shared with the
//! publisher's read buffer and every other subscriber: no payload copy). The
//! outbox lists channels with queued events and control frames (replies,
//! errors); the connection's writer drains it round-robin, at most
//! [`BATCH_EVENTS`] events or [`BATCH_BYTES`] bytes per `writev`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use tagwire_core::queue::{BoundedQueue, Pushed};
use tagwire_proto::{deliver_prefix, Frame, DELIVER_PREFIX_LEN};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use crate::timing::{now_ns, NEVER};

/// Most events gathered into one vectored write (two iovecs each).
pub const BATCH_EVENTS: usize = 256;
/// Most bytes gathered into one vectored write.
pub const BATCH_BYTES: usize = 1024 * 1024;
/// Most events taken from one channel before the next channel's turn.
const PER_CHANNEL_TURN: usize = 64;

/// An event waiting in a channel's queue.
#[derive(Debug)]
pub(crate) struct Queued {
    /// The encoded event, shared with every other channel that got it.
    pub event: Bytes,
    /// When it expires (ns since the Unix epoch), or [`NEVER`]: an event
    /// whose deadline passes while it waits is dropped, not delivered.
    pub deadline: u64,
}

/// One subscription: where its events wait for the connection's writer.
#[derive(Debug)]
pub(crate) struct Channel {
    /// The client's subscription id (goes into `Deliver`).
    pub sub: u32,
    /// The subscriber endpoint's name.
    pub endpoint: Rc<str>,
    /// The pattern as written.
    pub pattern: String,
    /// Queued encoded events.
    pub queue: RefCell<BoundedQueue<Queued>>,
    /// Events handed to the socket.
    pub delivered: Cell<u64>,
    /// Events that expired while queued (dropped, not delivered).
    pub expired: Cell<u64>,
    /// Whether a `QueueFull` was reported since the queue last accepted.
    pub reject_reported: Cell<bool>,
    /// Whether this channel is in its outbox's ready list.
    scheduled: Cell<bool>,
    /// The connection it delivers on.
    pub outbox: Rc<Outbox>,
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
        endpoint: Rc<str>,
        pattern: String,
        queue: BoundedQueue<Queued>,
        outbox: Rc<Outbox>,
    ) -> Self {
        Channel {
            sub,
            endpoint,
            pattern,
            queue: RefCell::new(queue),
            delivered: Cell::new(0),
            expired: Cell::new(0),
            reject_reported: Cell::new(false),
            scheduled: Cell::new(false),
            outbox,
        }
    }

    /// Queues `event` (a shared reference, not a copy), to be dropped if
    /// still queued at `deadline`, and wakes the writer.
    pub(crate) fn offer(self: &Rc<Self>, event: &Bytes, deadline: u64) -> Offer {
        let queued = Queued {
            event: event.clone(),
            deadline,
        };
        let pushed = self
            .queue
            .borrow_mut()
            .push(queued, event.len() + DELIVER_PREFIX_LEN);
        match pushed {
            Pushed::Queued { .. } => {
                self.reject_reported.set(false);
                if !self.scheduled.replace(true) {
                    self.outbox.ready.borrow_mut().push_back(self.clone());
                    self.outbox.notify.notify_one();
                }
                Offer::Queued
            }
            Pushed::DroppedNewest(_) => Offer::Dropped,
            Pushed::Rejected(_) => Offer::Rejected {
                report: !self.reject_reported.replace(true),
            },
        }
    }
}

/// A connection's outgoing side: control frames plus channels with events.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    ready: RefCell<VecDeque<Rc<Channel>>>,
    control: RefCell<BytesMut>,
    notify: Notify,
    /// Set when the connection is closing: the writer flushes and stops.
    closing: Cell<bool>,
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

    /// Asks the writer to flush what is queued and stop.
    pub(crate) fn close(&self) {
        self.closing.set(true);
        self.notify.notify_one();
    }

    /// Writes queued frames to `w` until [`close`](Self::close) and empty.
    pub(crate) async fn run_writer<W: AsyncWrite + Unpin>(&self, mut w: W) -> std::io::Result<()> {
        let mut bodies: Vec<Bytes> = Vec::with_capacity(BATCH_EVENTS);
        let mut prefixes: Vec<[u8; DELIVER_PREFIX_LEN]> = Vec::with_capacity(BATCH_EVENTS);
        loop {
            let control = self.control.borrow_mut().split().freeze();
            self.gather(&mut bodies, &mut prefixes, control.len());
            if control.is_empty() && bodies.is_empty() {
                if self.closing.get() {
                    let _ = w.shutdown().await;
                    return Ok(());
                }
                self.notify.notified().await;
                continue;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(1 + 2 * bodies.len());
            if !control.is_empty() {
                slices.push(IoSlice::new(&control));
            }
            for (p, b) in prefixes.iter().zip(&bodies) {
                slices.push(IoSlice::new(p));
                slices.push(IoSlice::new(b));
            }
            write_all_vectored(&mut w, &mut slices).await?;
            drop(slices);
            bodies.clear();
            prefixes.clear();
        }
    }

    /// Takes up to a batch of events, round-robin over ready channels.
    fn gather(
        &self,
        bodies: &mut Vec<Bytes>,
        prefixes: &mut Vec<[u8; DELIVER_PREFIX_LEN]>,
        mut total: usize,
    ) {
        let mut ready = self.ready.borrow_mut();
        // Read the clock at most once per batch, and only for an event that
        // can expire.
        let mut now = None;
        while bodies.len() < BATCH_EVENTS && total < BATCH_BYTES {
            let Some(ch) = ready.pop_front() else { break };
            let mut q = ch.queue.borrow_mut();
            let (mut taken, mut expired) = (0u64, 0u64);
            while taken < PER_CHANNEL_TURN as u64
                && bodies.len() < BATCH_EVENTS
                && total < BATCH_BYTES
            {
                let Some(Queued { event, deadline }) = q.pop() else {
                    break;
                };
                if deadline != NEVER && *now.get_or_insert_with(now_ns) > deadline {
                    expired += 1;
                    continue;
                }
                prefixes.push(deliver_prefix(ch.sub, event.len()));
                total += DELIVER_PREFIX_LEN + event.len();
                bodies.push(event);
                taken += 1;
            }
            ch.delivered.set(ch.delivered.get() + taken);
            ch.expired.set(ch.expired.get() + expired);
            let empty = q.is_empty();
            drop(q);
            if empty {
                ch.scheduled.set(false);
            } else {
                ready.push_back(ch);
            }
        }
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
