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
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tagwire_core::bytelog::Kept;
use tagwire_proto::{Ack, Event, Frame};

use super::ack_window::{AckStats, HeldEvent};
use super::write_state::{WriteState, HIGH_WATER, HOT_INTERVAL};
use super::{Inner, Session};
use crate::error::{Error, Result};
use crate::sync::lock;

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

impl Inner {
    /// Sends again, from a thread of their own, the reliable events in
    /// pieces a reconnect found unacknowledged (the reader thread must stay
    /// free to read the daemon's `PieceResume`).
    pub(super) fn resend_pieces(self: &Arc<Self>, held: Vec<(u32, Bytes)>) {
        if held.is_empty() {
            return;
        }
        let inner = self.clone();
        let spawned = std::thread::Builder::new()
            .name("tagwire-pieces".into())
            .spawn(move || {
                for (endpoint, event) in held {
                    if let Err(e) = inner.publish_acked_encoded(endpoint, event, true) {
                        tracing::warn!("could not send an event in pieces again: {e}");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no thread to send events in pieces again: {e}");
        }
    }
}

impl Session {
    /// Counters of acknowledged publishing (reliable publishers, see
    /// [`Publisher::set_reliability`](crate::Publisher::set_reliability)) on this session's connection.
    pub fn ack_stats(&self) -> AckStats {
        self.inner().ack_stats()
    }

    /// Waits until the daemon acknowledged every event this session's
    /// reliable publishers sent (or reported it failed), at most
    /// `timeout`; else [`Error::Unacknowledged`]. Events published on other
    /// bands' connections (`follow_priority`) are not waited for.
    pub fn wait_acknowledged(&self, timeout: Duration) -> Result<()> {
        self.inner().wait_acknowledged(timeout)
    }
}
