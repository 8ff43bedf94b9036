//! Connecting and reconnecting: the handshake the engine drives, and what a
//! new connection writes first (the engine's declarations, then the
//! publishes the lost connection did not write).

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tagwire_core::connection::Input;

use super::reader::read_some;
use super::{lock, Inner};
use crate::builder::is_timeout;
use crate::error::{Error, Result};
use crate::stream::Stream;

impl Inner {
    /// Connects to the daemon in use, else to the others in turn; the
    /// first that answers becomes the one in use. The error is the last
    /// daemon's.
    fn connect_any(&self, band: Option<&str>) -> Result<Stream> {
        let n = self.targets.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for i in 0..n {
            let at = (first + i) % n;
            match self.targets[at].connect(self.options.connect_timeout, band) {
                Ok(s) => {
                    if at != first {
                        tracing::info!("failing over to {}", self.targets[at].describe());
                    }
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("a session has at least one target"))
    }
}

/// Writes the engine's `Hello` on `stream` and reads until the engine has
/// the `Welcome`; returns the bytes read past it. The engine decides: a
/// `Welcome`, a refusal ([`Error::Refused`]), a bad answer
/// ([`Error::Handshake`]) or, at its handshake deadline,
/// [`Error::ConnectTimeout`].
fn handshake(inner: &Inner, stream: &mut Stream) -> Result<BytesMut> {
    let engine = &inner.engine;
    let fail = |reason: String| Error::Handshake {
        url: inner.target().describe(),
        reason,
    };
    let hello = lock(engine).poll_transmit().unwrap_or_default();
    stream.write_all(&hello)?;
    let mut buf = BytesMut::new();
    let welcomed = loop {
        let mut e = lock(engine);
        match e.poll_input(&mut buf) {
            Some(Input::Welcome { .. }) => break Ok(()),
            Some(Input::PeerError { code, message, .. }) => {
                break Err(match e.closed() {
                    Some(c) if c.by_peer => Error::Refused { code, message },
                    _ => fail(message),
                });
            }
            Some(Input::Closed) => {
                let reason = e.closed().map(|c| c.reason.clone()).unwrap_or_default();
                break Err(fail(reason));
            }
            Some(_) => {
                // A `Challenge` answered: our `Proof` goes out before the Welcome.
                if let Some(out) = e.poll_transmit() {
                    drop(e);
                    stream.write_all(&out)?;
                }
                continue;
            }
            None => {}
        }
        let Some(deadline) = e.poll_timeout() else {
            break Err(fail("the connection closed before the Welcome".into()));
        };
        let wait = Duration::from_nanos(deadline.saturating_sub(inner.now()));
        drop(e);
        stream.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        match read_some(stream, &mut buf) {
            Ok(true) => lock(engine).received(inner.now()),
            Ok(false) => break Err(fail("server closed the connection".into())),
            Err(err) if is_timeout(&err) => {
                let mut e = lock(engine);
                e.handle_timeout(inner.now());
                if e.closed().is_some() {
                    break Err(Error::ConnectTimeout {
                        url: inner.target().describe(),
                        timeout: inner.options.connect_timeout,
                    });
                }
            }
            Err(err) => break Err(fail(format!("reading Welcome: {err}"))),
        }
    };
    stream.set_read_timeout(None)?;
    welcomed.map(|()| buf)
}

/// Connects (again): once the engine is welcomed, writes what it declares
/// and subscribes again, then the publishes not yet written, before
/// publishers may write. Returns the read half and the bytes read past the
/// `Welcome`.
pub(super) fn connect(inner: &Inner) -> Result<(Stream, BytesMut)> {
    // The handshake deadline counts from before the socket's connect.
    let started = inner.now();
    let band = inner.options.band.as_ref();
    let mut s = inner.connect_any(band.map(|b| b.name.as_str()))?;
    if let Some(b) = band {
        // The router marks its side; we mark ours (TCP only: a Unix socket
        // has no IP header, and TLS runs over its own socket in the pump).
        if let Stream::Tcp(t) = &s {
            if let Err(e) = tagwire_router::priority::set_dscp(t, b.dscp) {
                tracing::debug!("cannot set DSCP {} on band {}: {e}", b.dscp, b.name);
            }
        }
    }
    {
        let mut e = lock(&inner.engine);
        // A daemon that restarted may have written a new token.
        e.set_token((inner.options.token.clone()).unwrap_or_else(|| inner.target().token()));
        // A fresh nonce for every attempt: the server's token proof answers it.
        e.reconnect(started, tagwire_router::local::random_nonce());
    }
    let leftover = handshake(inner, &mut s)?;
    let write_half = s.try_clone()?;
    let mut w = lock(&inner.writer);
    if inner.closed.load(Ordering::Relaxed) {
        return Err(Error::Closed);
    }
    // Publishes not yet written (buffered, or in a batch whose write failed)
    // follow the engine's declarations; requests among them are not
    // replayed: their callers already got `Disconnected`.
    let unsent = w.buf.split();
    inner.take_control(&mut w);
    w.max_frame = lock(&inner.engine).max_frame();
    let failed = std::mem::take(&mut *lock(&inner.replay));
    keep_publishes(&failed, w.max_frame, &mut w.buf);
    keep_publishes(&unsent, w.max_frame, &mut w.buf);
    *lock(&inner.socket) = Some(write_half);
    w.connected = true;
    inner.connected_cv.notify_all();
    inner.flush_locked(w)?;
    Ok((s, leftover))
}

/// Appends to `out` the `Publish` frames of `frames` (whole frames, as this
/// session encoded them) that fit in `max_frame`.
fn keep_publishes(frames: &[u8], max_frame: u32, out: &mut BytesMut) {
    let mut rest = frames;
    while let Some(len) = rest
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    {
        let end = 4 + len as usize;
        let Some(frame) = rest.get(..end) else {
            return;
        };
        if frame.get(4) == Some(&tagwire_proto::kind::PUBLISH) && len <= max_frame {
            out.extend_from_slice(frame);
        }
        rest = &rest[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::{Event, Frame};

    #[test]
    fn replay_keeps_only_whole_publish_frames_that_fit() {
        let mut frames = BytesMut::new();
        let small = Event::new("/a", "x");
        let big = Event::new("/a", vec![0u8; 5000]);
        tagwire_proto::encode_publish(1, &small, &mut frames).expect("encode");
        Frame::Ping { nonce: 9 }
            .encode(&mut frames)
            .expect("encode");
        tagwire_proto::encode_publish(1, &big, &mut frames).expect("encode");
        let mut expected = BytesMut::new();
        tagwire_proto::encode_publish(1, &small, &mut expected).expect("encode");
        let mut kept = BytesMut::new();
        keep_publishes(&frames, 4096, &mut kept);
        assert_eq!(
            kept, expected,
            "the Ping and the 5000-byte publish are left out"
        );
        let mut kept = BytesMut::new();
        keep_publishes(&frames[..frames.len() - 1], 1 << 20, &mut kept);
        assert_eq!(kept, expected, "a cut-off last frame is left out");
    }
}
