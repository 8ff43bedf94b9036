//! Acknowledged publishing (protocol version 4, `reliability` of
//! `reliable`, `exactly_once` or `durable` on a [`crate::Publisher`]): each
//! event goes out as `PublishReliable` and is held in a bounded window
//! (core's [`SendWindow`]) until the daemon's `PublishAck` says it has
//! custody of it (delivered to its local queues and held by every reliable
//! link it went on). After a reconnect, what the window still holds is sent
//! again first, numbered anew on the new connection; the daemon drops the
//! copies it already routed (keyed by this session's id, the publisher and
//! the event's sequence number), so a resend is not delivered twice.
//!
//! At the window's bound a publish **waits** for acknowledgements, at most
//! [`crate::SessionBuilder::ack_timeout`], then fails with
//! [`Error::AckWindowFull`]: never silently dropped. A daemon of protocol
//! version 3 (no acknowledgements) gets the events as plain `Publish`
//! frames, best effort, with a warning once per connection.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tagwire_core::bytelog::{ByteLog, Kept};
use tagwire_core::reliable::{Push, SendWindow, WindowFull, WindowLimits};
use tagwire_proto::{Ack, Event, Frame};

use super::writer::{WriteState, HIGH_WATER, HOT_INTERVAL};
use super::Inner;
use crate::error::{Error, Result};
use crate::sync::lock;

/// Held events smaller than a quarter of this are encoded into a block of
/// this size of the window's [`ByteLog`] (one allocation for hundreds of small
/// events, freed once the last of them is acknowledged) instead of a
/// buffer each.
const ARENA_BLOCK: usize = 64 * 1024;

/// An event held until acknowledged: its endpoint id on this connection
/// and its encoded bytes (sent again as they are after a reconnect).
#[derive(Debug)]
pub(super) struct HeldEvent {
    endpoint: u32,
    event: Kept,
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
    window: SendWindow<HeldEvent>,
    limits: WindowLimits,
    /// The connection speaks version 4.
    pub(super) acked: bool,
    warned: bool,
    stats: AckStats,
    /// The blocks small held events are encoded into (see [`ARENA_BLOCK`]).
    log: ByteLog,
    /// Threads waiting on `acked_cv` (a full window, `wait_acknowledged`):
    /// an acknowledgement wakes them only if there are any (a notify is a
    /// syscall, and acknowledgements come hundreds of times a second).
    waiters: usize,
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
    fn encode(&mut self, event: &Event) -> Result<Kept> {
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
    fn push(&mut self, item: HeldEvent, buf: &mut BytesMut) -> std::result::Result<(), HeldEvent> {
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
    fn push_unwritten(&mut self, item: HeldEvent) -> std::result::Result<u64, HeldEvent> {
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

impl Inner {
    /// Publishes `event` acknowledged: held until the daemon acknowledges
    /// it, sent again after a reconnect. Waits for room in a full window
    /// up to `ack_timeout`.
    pub(crate) fn publish_acked(
        &self,
        endpoint: u32,
        event: &Event,
        express: bool,
        now_ns: u64,
    ) -> Result<()> {
        let w = self.wait_connected(lock(&self.writer))?;
        if 1 + 12 + event.encoded_len() > w.max_frame as usize {
            let mut encoded = BytesMut::with_capacity(event.encoded_len());
            event.encode(&mut encoded)?;
            return self.publish_acked_large(w, endpoint, encoded.freeze());
        }
        let mut w = w;
        let encoded = w.acks.encode(event)?;
        self.hold_and_write(
            w,
            HeldEvent {
                endpoint,
                event: encoded,
            },
            express,
            now_ns,
        )
    }

    /// [`publish_acked`](Self::publish_acked) of an event already encoded:
    /// one larger than the frame goes in pieces (protocol version 5).
    pub(crate) fn publish_acked_encoded(
        &self,
        endpoint: u32,
        encoded: Bytes,
        express: bool,
    ) -> Result<()> {
        let now_ns = crate::clock::now_ns();
        let w = self.wait_connected(lock(&self.writer))?;
        if 1 + 12 + encoded.len() > w.max_frame as usize {
            return self.publish_acked_large(w, endpoint, encoded);
        }
        self.hold_and_write(
            w,
            HeldEvent {
                endpoint,
                event: Kept::Own(encoded),
            },
            express,
            now_ns,
        )
    }

    /// An event larger than the frame: in pieces if the daemon takes them
    /// (version 5) and acknowledges, else refused naming the sizes.
    fn publish_acked_large<'a>(
        &'a self,
        w: MutexGuard<'a, WriteState>,
        endpoint: u32,
        encoded: Bytes,
    ) -> Result<()> {
        if !w.pieces || !w.acks.acked {
            return Err(Error::Encode(tagwire_proto::EncodeError::FrameTooLarge {
                len: 1 + 12 + encoded.len(),
                max: w.max_frame as usize,
            }));
        }
        self.publish_acked_in_pieces(w, endpoint, encoded)
    }

    /// Holds `item` in the window (waiting up to `ack_timeout` for room)
    /// and writes its frame, flushing as the publisher's pace asks.
    fn hold_and_write<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriteState>,
        mut item: HeldEvent,
        express: bool,
        now_ns: u64,
    ) -> Result<()> {
        let mut deadline = None;
        loop {
            if !w.acks.acked {
                if !w.acks.warned {
                    w.acks.warned = true;
                    tracing::warn!(
                        "{} speaks no acknowledgements (protocol version 3): reliable publishers \
                         publish best effort to it (upgrade the daemon)",
                        self.target().describe()
                    );
                }
                let WriteState { acks, buf, .. } = &mut *w;
                acks.stats.best_effort += 1;
                Frame::Publish {
                    endpoint: item.endpoint,
                    event: item.event.into_bytes(&mut acks.log),
                }
                .encode(buf)?;
                break;
            }
            let WriteState { acks, buf, .. } = &mut *w;
            match acks.push(item, buf) {
                Ok(()) => break,
                Err(back) => item = back,
            }
            w = match self.wait_for_room(w, &mut deadline) {
                Ok(w) => w,
                Err(e) => {
                    // Not held: its place in the log is given back.
                    item.event.release(&mut lock(&self.writer).acks.log);
                    return Err(e);
                }
            };
        }
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

    /// A reliable event larger than the frame: held in the window (waiting
    /// for room as any other) and written in pieces. A connection lost on
    /// the way is not an error: the event is sent again after the
    /// reconnect, resumed where the daemon stands.
    fn publish_acked_in_pieces<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriteState>,
        endpoint: u32,
        event: Bytes,
    ) -> Result<()> {
        let mut item = HeldEvent {
            endpoint,
            event: Kept::Own(event.clone()),
        };
        let mut deadline = None;
        let seq = loop {
            match w.acks.push_unwritten(item) {
                Ok(seq) => break seq,
                Err(back) => item = back,
            }
            w = self.wait_for_room(w, &mut deadline)?;
        };
        match self.write_pieces(&mut w, endpoint, seq, &event) {
            Ok(()) | Err(Error::Disconnected) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn flush_and_relock<'a>(
        &'a self,
        w: MutexGuard<'a, WriteState>,
    ) -> Result<MutexGuard<'a, WriteState>> {
        self.flush_locked(w)?;
        Ok(lock(&self.writer))
    }

    /// The window is full: writes what is buffered (so the daemon can
    /// acknowledge it) and waits for an acknowledgement, until `deadline`
    /// (set on the first call: now + `ack_timeout`); past it, or on the
    /// reader thread (which cannot wait for itself: a callback gets the
    /// error at once), `AckWindowFull`.
    fn wait_for_room<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriteState>,
        deadline: &mut Option<Instant>,
    ) -> Result<MutexGuard<'a, WriteState>> {
        let now = Instant::now();
        let until = *deadline.get_or_insert_with(|| {
            w.acks.stats.waited += 1;
            now + self.options.ack_timeout
        });
        if now >= until || self.on_reader_thread() {
            return Err(Error::AckWindowFull {
                held: w.acks.window.len(),
                waited: self.options.ack_timeout,
            });
        }
        w = self.flush_and_relock(w)?;
        w = self.wait_for_ack(w, until - now);
        self.wait_connected(w)
    }

    /// Waits on `acked_cv` for at most `timeout`, counted in `waiters`.
    fn wait_for_ack<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriteState>,
        timeout: Duration,
    ) -> MutexGuard<'a, WriteState> {
        w.acks.waiters += 1;
        let mut w = self
            .acked_cv
            .wait_timeout(w, timeout)
            .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        w.acks.waiters -= 1;
        w
    }

    /// The reader thread's `PublishAck`s of one read, in order: releases
    /// what they settle under one lock of the writer (the publishing thread
    /// holds it between its publishes) and wakes publishers waiting for
    /// room (if any wait).
    pub(super) fn on_publish_acks(&self, acks: &[Ack]) {
        let mut w = lock(&self.writer);
        for a in acks {
            w.acks.on_ack(a);
        }
        let wake = w.acks.waiters > 0;
        drop(w);
        if wake {
            self.acked_cv.notify_all();
        }
    }

    /// Counters of acknowledged publishing.
    pub(crate) fn ack_stats(&self) -> AckStats {
        lock(&self.writer).acks.stats()
    }

    /// Waits until every acknowledged publish so far was acknowledged (or
    /// reported failed), at most `timeout`.
    pub(crate) fn wait_acknowledged(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut w = lock(&self.writer);
        loop {
            if w.acks.is_empty() {
                return Ok(());
            }
            if self.closed.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Unacknowledged {
                    held: w.acks.window.len(),
                    waited: timeout,
                });
            }
            w = self.flush_and_relock(w)?;
            w = self.wait_for_ack(w, (deadline - now).min(Duration::from_millis(100)));
        }
    }
}
