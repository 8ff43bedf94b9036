//! The window of acknowledged publishing (see `acked`): the events a
//! connection holds until the daemon acknowledges them, their encoding
//! and their counters. Data of the session's writer state; the publishing
//! that fills it is `acked`'s.

use bytes::{Bytes, BytesMut};
use tagwire_core::bytelog::{ByteLog, Kept};
use tagwire_core::reliable::{Push, SendWindow, WindowFull, WindowLimits};
use tagwire_proto::{Ack, Event, Frame};

use crate::error::Result;

/// Held events smaller than a quarter of this are encoded into a block of
/// this size of the window's [`ByteLog`] (one allocation for hundreds of small
/// events, freed once the last of them is acknowledged) instead of a
/// buffer each.
const ARENA_BLOCK: usize = 64 * 1024;

/// An event held until acknowledged: its endpoint id on this connection
/// and its encoded bytes (sent again as they are after a reconnect).
#[derive(Debug)]
pub(super) struct HeldEvent {
    pub(super) endpoint: u32,
    pub(super) event: Kept,
}

/// Counters of acknowledged publishing ([`crate::Session::ack_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AckStats {
    /// Events held now, not yet acknowledged.
    pub unacknowledged: u64,
    /// Events the daemon acknowledged.
    pub acknowledged: u64,
    /// Events the daemon reported failed: it had custody but could route
    /// them nowhere (no path left to a daemon that wants them; lost,
    /// logged), or its durable store's queue was full (refused: not
    /// delivered, not stored; the session also gets a `QueueFull` refusal
    /// naming the store).
    pub failed: u64,
    /// Events sent again after a reconnect (acknowledgement not received).
    pub resent: u64,
    /// Events sent best effort because the daemon speaks no
    /// acknowledgements (protocol version 3).
    pub best_effort: u64,
    /// Publishes that found the window full and waited.
    pub waited: u64,
}

/// The session connection's window of unacknowledged events (in the
/// writer's state, so numbering and writing are one step).
#[derive(Debug)]
pub(super) struct AckWindow {
    pub(super) window: SendWindow<HeldEvent>,
    pub(super) limits: WindowLimits,
    /// The connection speaks version 4.
    pub(super) acked: bool,
    pub(super) warned: bool,
    pub(super) stats: AckStats,
    /// The blocks small held events are encoded into (see [`ARENA_BLOCK`]).
    pub(super) log: ByteLog,
    /// Threads waiting on `acked_cv` (a full window, `wait_acknowledged`):
    /// an acknowledgement wakes them only if there are any (a notify is a
    /// syscall, and acknowledgements come hundreds of times a second).
    pub(super) waiters: usize,
}

impl AckWindow {
    pub(super) fn new(limits: WindowLimits) -> AckWindow {
        AckWindow {
            window: SendWindow::new(limits, WindowFull::Block),
            limits,
            acked: false,
            warned: false,
            stats: AckStats::default(),
            log: ByteLog::new(ARENA_BLOCK),
            waiters: 0,
        }
    }

    /// Encodes `event` to be held: a small one into the log, a large one
    /// into a buffer of its own.
    pub(super) fn encode(&mut self, event: &Event) -> Result<Kept> {
        let len = event.encoded_len();
        if len >= ARENA_BLOCK / 4 {
            let mut own = BytesMut::with_capacity(len);
            event.encode(&mut own)?;
            return Ok(Kept::Own(own.freeze()));
        }
        Ok(Kept::Log(self.log.push_with(len, |b| event.encode(b))?))
    }

    /// Takes the next held event into the window and writes its frame to
    /// `buf`; `Err(item)`: the window is full.
    pub(super) fn push(
        &mut self,
        item: HeldEvent,
        buf: &mut BytesMut,
    ) -> std::result::Result<(), HeldEvent> {
        // At the bound (events, or bytes: overshot by at most one event);
        // an empty window takes any event.
        if self.window.is_full() {
            return Err(item);
        }
        // Written under the number the window gives it next: no reference
        // to the event is taken for the write.
        let seq = self.window.last_seq() + 1;
        // Cannot fail: the event was encoded and checked to fit.
        let _ = tagwire_proto::encode_publish_reliable(
            item.endpoint,
            seq,
            item.event.bytes(&self.log),
            buf,
        );
        let len = item.event.len();
        let held = self.window.hold(item, len, 0);
        debug_assert_eq!(held, seq, "the window numbers in order");
        Ok(())
    }

    /// Takes `item` into the window without writing it (it goes in pieces,
    /// written by the caller); `Err(item)`: the window is full.
    pub(super) fn push_unwritten(
        &mut self,
        item: HeldEvent,
    ) -> std::result::Result<u64, HeldEvent> {
        let len = item.event.len();
        match self.window.push(item, len) {
            Push::Held { seq, .. } => {
                self.window.mark_sent(seq, 0);
                Ok(seq)
            }
            Push::WouldBlock(item) | Push::Rejected(item) => Err(item),
        }
    }

    /// A new connection: what was held is written again, first, numbered
    /// from 1 (or as plain publishes to a daemon without acknowledgements).
    /// Events whose frame is over `max_frame` are not written: they are
    /// returned, to go in pieces from a thread of their own
    /// ([`Inner::resend_pieces`]).
    pub(super) fn reconnected(
        &mut self,
        acked: bool,
        max_frame: u32,
        buf: &mut BytesMut,
    ) -> Vec<(u32, Bytes)> {
        let held = self.window.drain();
        self.window = SendWindow::new(self.limits, WindowFull::Block);
        self.acked = acked;
        self.warned = false;
        let mut pieced = Vec::new();
        for h in held {
            self.stats.resent += 1;
            if 1 + 12 + h.event.len() > max_frame as usize {
                pieced.push((h.endpoint, h.event.into_bytes(&mut self.log)));
            } else if acked {
                // An empty window takes as many as it held before.
                let _ = self.push(h, buf);
            } else {
                self.stats.best_effort += 1;
                let _ = Frame::Publish {
                    endpoint: h.endpoint,
                    event: h.event.into_bytes(&mut self.log),
                }
                .encode(buf);
            }
        }
        pieced
    }

    /// The daemon's acknowledgement: releases (drops) what it settles.
    pub(super) fn on_ack(&mut self, ack: &Ack) {
        let (mut done, mut failed) = (0usize, 0usize);
        let log = &mut self.log;
        let released = self.window.release(ack, |item, f| {
            item.event.release(log);
            if f {
                failed += 1;
            } else {
                done += 1;
            }
        });
        match released {
            Ok(()) => {
                self.stats.acknowledged += done as u64;
                if failed > 0 {
                    self.stats.failed += failed as u64;
                    tracing::warn!(
                        "the daemon could not route or store {failed} acknowledged events (no path to the \
                         daemons that want them, or its durable store's queue was full): lost ({} so far)",
                        self.stats.failed
                    );
                }
            }
            Err(e) => tracing::warn!("a bad PublishAck from the daemon: {e}"),
        }
    }

    pub(super) fn stats(&self) -> AckStats {
        AckStats {
            unacknowledged: self.window.len() as u64,
            ..self.stats
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.window.is_empty()
    }
}
