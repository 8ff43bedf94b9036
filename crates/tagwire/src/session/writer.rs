//! The write path: publishes are written from the caller's thread when
//! the stream is idle and batched (written by the flusher thread) when they
//! come faster than [`HOT_INTERVAL`] apart; control frames from the engine
//! go out in order with them.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_core::connection::Connection;
use tagwire_proto::Event;

use super::write_state::{WriteState, HIGH_WATER, HOT_INTERVAL};
use super::{Inner, Session};
use crate::error::{Error, Result};
use crate::sync::lock;

/// In burst mode, how long the flusher waits for more events before writing
/// a small batch: the most a burst's last events wait.
const LINGER: Duration = Duration::from_micros(50);

impl Inner {
    /// Changes the engine's state with `f` and writes the control frames
    /// that makes (with anything batched before them) now. While the
    /// session is reconnecting they wait in the engine (see `take_control`).
    pub(super) fn control(&self, f: impl FnOnce(&mut Connection)) {
        let mut w = lock(&self.writer);
        f(&mut lock(&self.engine));
        if w.connected {
            self.take_control(&mut w);
            let _ = self.flush_locked(w);
        }
    }

    /// Moves the engine's control frames to the end of the write buffer.
    /// Only while connected (or, in `connect`, before the replayed
    /// publishes): the buffer of a lost connection is sifted for publishes.
    pub(super) fn take_control(&self, w: &mut WriteState) {
        let mut e = lock(&self.engine);
        while let Some(frames) = e.poll_transmit() {
            w.buf.extend_from_slice(&frames);
        }
    }

    /// Queues a publish; writes now if the stream is idle or the batch is full.
    /// `now_ns` is the event's source timestamp, reused to detect bursts.
    pub(crate) fn publish(
        &self,
        endpoint: u32,
        event: &Event,
        express: bool,
        now_ns: u64,
    ) -> Result<()> {
        self.publish_on(endpoint, event, express, now_ns, None)
            .map(|_| ())
    }

    /// The connection this session has now (see [`Inner::publish_in_region`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// [`publish`](Self::publish) for an event whose payload is a reference
    /// into a region granted on connection `epoch`: written only if that is
    /// still the session's connection once it is connected. `Ok(false)`:
    /// not written (the session reconnected: the daemon now there does not
    /// know the region); the caller sends the payload another way.
    pub(crate) fn publish_in_region(
        &self,
        endpoint: u32,
        event: &Event,
        express: bool,
        now_ns: u64,
        epoch: u64,
    ) -> Result<bool> {
        self.publish_on(endpoint, event, express, now_ns, Some(epoch))
    }

    fn publish_on(
        &self,
        endpoint: u32,
        event: &Event,
        express: bool,
        now_ns: u64,
        epoch: Option<u64>,
    ) -> Result<bool> {
        let w = self.wait_connected(lock(&self.writer))?;
        let mut w = w;
        // The epoch changes only under `writer`, so this holds until the
        // event is in the buffer (and a buffer a lost connection leaves
        // behind is sifted in `connect`).
        if epoch.is_some_and(|e| e != self.epoch()) {
            return Ok(false);
        }
        let len = 1 + 4 + event.encoded_len();
        if let Some(max) = w.datagram_max {
            if 4 + len > max {
                return Err(Error::EventTooLarge {
                    size: 4 + len,
                    max,
                    transport: "udp",
                });
            }
        }
        if len > w.max_frame as usize {
            if w.pieces && w.datagram_max.is_none() {
                // Protocol version 5: in pieces, written now.
                let mut encoded = BytesMut::with_capacity(event.encoded_len());
                event.encode(&mut encoded)?;
                let encoded = encoded.freeze();
                w.last_publish_ns = now_ns;
                return self
                    .write_pieces(&mut w, endpoint, 0, &encoded)
                    .map(|()| true);
            }
            return Err(Error::Encode(tagwire_proto::EncodeError::FrameTooLarge {
                len,
                max: w.max_frame as usize,
            }));
        }
        tagwire_proto::encode_publish(endpoint, event, &mut w.buf)?;
        let hot = now_ns.wrapping_sub(w.last_publish_ns) < HOT_INTERVAL.as_nanos() as u64;
        w.last_publish_ns = now_ns;
        if express || !hot || w.buf.len() >= HIGH_WATER {
            return self.flush_locked(w).map(|()| true);
        }
        if !w.flush_requested {
            w.flush_requested = true;
            if w.flusher_waiting {
                self.flush_cv.notify_one();
            }
        }
        Ok(true)
    }

    /// Returns `w` once the session is connected: at once if it is, else
    /// after waiting up to `reconnect_wait` for the reader thread to
    /// reconnect. Fails with [`Error::Closed`] if the session closes, with
    /// [`Error::NotReconnected`] at the bound, and with
    /// [`Error::Disconnected`] on the reader thread (a callback), which
    /// cannot wait for itself.
    pub(super) fn wait_connected<'a>(
        &'a self,
        mut w: MutexGuard<'a, WriteState>,
    ) -> Result<MutexGuard<'a, WriteState>> {
        let mut deadline = None;
        while !w.connected {
            if self.closed.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            if *lock(&self.reader_thread) == Some(std::thread::current().id()) {
                return Err(Error::Disconnected);
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + self.options.reconnect_wait);
            if now >= deadline {
                return Err(Error::NotReconnected {
                    url: self.target().describe(),
                    waited: self.options.reconnect_wait,
                });
            }
            w = self
                .connected_cv
                .wait_timeout(w, deadline - now)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
        Ok(w)
    }

    /// Writes the buffer. Takes the socket lock before releasing the writer
    /// lock, so bytes reach the socket in the order they were buffered.
    ///
    /// With no connection the bytes stay buffered, and a batch whose write
    /// fails is kept for replay: either way, after a reconnect the
    /// publishes among them are sent again (`connect`). The session is
    /// marked disconnected, so later publishes wait instead of piling up.
    pub(super) fn flush_locked(&self, mut w: MutexGuard<'_, WriteState>) -> Result<()> {
        if w.buf.is_empty() {
            return Ok(());
        }
        let mut sock = lock(&self.socket);
        let Some(s) = sock.as_mut() else {
            w.connected = false;
            return Ok(());
        };
        let data = w.buf.split().freeze();
        drop(w);
        if let Err(e) = s.write_all(&data) {
            tracing::debug!("write failed: {e}; keeping the batch for after the reconnect");
            // Wake the reader so it notices and reconnects.
            s.shutdown();
            *sock = None;
            lock(&self.replay).extend_from_slice(&data);
        }
        Ok(())
    }
}

/// The flusher thread: once a burst asks for a flush, lingers briefly (so
/// one write carries many events) and writes what is buffered. It never
/// waits for the writer lock while a publisher holds it: it lingers again
/// and tries again. (Waiting made every publish's unlock wake it, and it
/// took the lock from the publisher at the worst time: a context switch
/// per flush on each side under a flood.)
pub(super) fn flusher_main(inner: Arc<Inner>) {
    loop {
        {
            let mut w = lock(&inner.writer);
            while !(w.flush_requested || inner.closed.load(Ordering::Relaxed)) {
                w.flusher_waiting = true;
                w = inner.flush_cv.wait(w).unwrap_or_else(|e| e.into_inner());
                w.flusher_waiting = false;
            }
            if w.buf.len() >= HIGH_WATER / 4 {
                // Enough for one write already.
                w.flush_requested = false;
                let _ = inner.flush_locked(w);
                continue;
            }
        }
        loop {
            if inner.closed.load(Ordering::Relaxed) {
                return;
            }
            // Burst mode: linger so the write carries more (the publisher
            // writes a full batch itself at HIGH_WATER).
            std::thread::sleep(LINGER);
            let mut w = match inner.writer.try_lock() {
                Ok(w) => w,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                // A publisher is in the middle of a publish: it goes on
                // filling the batch; try again after another linger.
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            if w.flush_requested {
                w.flush_requested = false;
                let _ = inner.flush_locked(w);
            }
            break;
        }
    }
}

impl Session {
    /// Writes any batched publishes now.
    pub fn flush(&self) -> Result<()> {
        let inner = self.inner();
        inner.flush_locked(lock(&inner.writer))
    }
}
