//! Connecting and reconnecting: the handshake the engine drives, and what a
//! new connection writes first (the engine's declarations, then the
//! publishes the lost connection did not write).

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tagwire_core::connection::Input;
use tagwire_proto::Event;

use super::Inner;
use crate::error::{Error, Result};
use crate::stream::is_timeout;
use crate::stream::read_some;
use crate::stream::Stream;
use crate::sync::lock;

impl Inner {
    /// Connects to the daemon in use, else to the others in turn; the
    /// first that answers becomes the one in use. The error is the last
    /// daemon's.
    fn connect_any(&self, band: Option<&crate::options::ClientBand>) -> Result<Stream> {
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
    let mut s = inner.connect_any(band)?;
    if let Some(b) = band {
        // The router marks its side; we mark ours (TCP only: a Unix socket
        // has no IP header, and TLS runs over its own socket in the pump).
        if let Stream::Tcp(t) = &s {
            if let Err(e) = tagwire_router::priority::set_dscp(t, b.dscp) {
                tracing::debug!("cannot set DSCP {} on band {}: {e}", b.dscp, b.name);
            }
        }
        if let Stream::Udp(_, status) = &s {
            if let Err(e) = status.set_dscp(b.dscp) {
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
    let leftover = match handshake(inner, &mut s) {
        Err(Error::Refused {
            code: tagwire_proto::ErrorCode::UnsupportedVersion,
            message,
        }) if lock(&inner.engine).offered_version() > 3 => {
            // A daemon from before pieces (version 5) or acknowledged
            // publishing (version 4): speak one version less to it from
            // now on (version 4: events over its frame are refused;
            // version 3: reliable publishers best effort, each connection
            // warns once when one publishes).
            let offered = lock(&inner.engine).offered_version();
            let lacks = if offered > 4 {
                "events larger than its frame (pieces)"
            } else {
                "acknowledged publishing"
            };
            tracing::warn!(
                "{} does not speak protocol version {offered} ({message}): using version {}, \
                 without {lacks}",
                inner.target().describe(),
                offered - 1
            );
            lock(&inner.engine).set_offered_version(offered - 1);
            return connect(inner);
        }
        r => r?,
    };
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
    let (max_frame, acked, pieces) = {
        let e = lock(&inner.engine);
        (e.max_frame(), e.acknowledges(), e.pieces())
    };
    w.max_frame = max_frame;
    w.pieces = pieces;
    // Over UDP an event travels in one datagram (no fragmentation).
    w.datagram_max = match &s {
        Stream::Udp(..) => Some(crate::udp::max_event_frame()),
        _ => None,
    };
    *lock(&inner.udp) = match &s {
        Stream::Udp(_, status) => Some(status.clone()),
        _ => None,
    };
    // Reliable publishers' unacknowledged events go first (numbered anew);
    // the replay below skips their frames of the lost connection.
    let super::write_state::WriteState {
        acks,
        buf,
        pieced_resend,
        ..
    } = &mut *w;
    let mut resent = BytesMut::new();
    *pieced_resend = acks.reconnected(acked && pieces, max_frame, &mut resent);
    buf.extend_from_slice(&resent);
    let failed = std::mem::take(&mut *lock(&inner.replay));
    // Every region was granted by the daemon of an earlier connection: a
    // publish that refers to one goes out with its payload inline.
    let regions = inner.shm.new_connection();
    let mut stale = Stale {
        regions: &regions,
        unsent: 0,
    };
    keep_publishes(&failed, w.max_frame, &mut stale, &mut w.buf);
    keep_publishes(&unsent, w.max_frame, &mut stale, &mut w.buf);
    if stale.unsent > 0 {
        tracing::warn!(
            "{} events published in shared memory before the reconnect are lost: their packets left the region (counted in shm_stats().unsent)",
            stale.unsent
        );
        inner.shm.note_unsent(stale.unsent);
    }
    inner.epoch.fetch_add(1, Ordering::AcqRel);
    *lock(&inner.socket) = Some(write_half);
    w.connected = true;
    inner.connected_cv.notify_all();
    inner.flush_locked(w)?;
    Ok((s, leftover))
}

/// The regions of the connection that was lost, for publishes that refer
/// to them, and how many of those could not be resent.
struct Stale<'a> {
    regions: &'a std::collections::HashMap<u64, tagwire_shm::Region>,
    unsent: u64,
}

impl Stale<'_> {
    /// `frame` (a whole `Publish` frame) as it may go to a new daemon: as
    /// it is, or, if its payload refers to a region of the old one, with
    /// the payload copied inline out of the region (`None`: the packet is
    /// no longer there, or the frame does not parse: counted).
    fn resolve<'f>(&mut self, frame: &'f [u8]) -> Option<std::borrow::Cow<'f, [u8]>> {
        use std::borrow::Cow;
        let body = frame.get(9..)?;
        let shm = tagwire_proto::EventRef::parse(body).is_ok_and(|e| e.payload_in_shm);
        if !shm {
            return Some(Cow::Borrowed(frame));
        }
        let inline = (|| {
            let mut ev = Event::decode(&bytes::Bytes::copy_from_slice(body)).ok()?;
            let r = tagwire_proto::ShmRef::decode(&ev.payload).ok()?;
            let bytes = self.regions.get(&r.region)?.copy_published(0, r.seq).ok()?;
            if bytes.len() != r.len as usize {
                return None;
            }
            ev.payload = bytes::Bytes::from(bytes);
            ev.header.payload_in_shm = false;
            let endpoint = u32::from_le_bytes(frame.get(5..9)?.try_into().ok()?);
            let mut out = BytesMut::new();
            tagwire_proto::encode_publish(endpoint, &ev, &mut out).ok()?;
            Some(out)
        })();
        match inline {
            Some(out) => Some(Cow::Owned(out.to_vec())),
            None => {
                self.unsent += 1;
                None
            }
        }
    }
}

/// Appends to `out` the `Publish` frames of `frames` (whole frames, as this
/// session encoded them) that fit in `max_frame`, a shared-memory reference
/// into a region of the lost connection replaced by its payload.
fn keep_publishes(frames: &[u8], max_frame: u32, stale: &mut Stale<'_>, out: &mut BytesMut) {
    let mut rest = frames;
    while let Some(len) = rest
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    {
        let end = 4 + len as usize;
        let Some(frame) = rest.get(..end) else {
            return;
        };
        rest = &rest[end..];
        if frame.get(4) != Some(&tagwire_proto::kind::PUBLISH) {
            continue;
        }
        match stale.resolve(frame) {
            Some(f) if f.len() - 4 <= max_frame as usize => out.extend_from_slice(&f),
            // A payload put inline past the new daemon's frame limit: lost too.
            Some(std::borrow::Cow::Owned(_)) => stale.unsent += 1,
            Some(std::borrow::Cow::Borrowed(_)) | None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_proto::{Event, Frame};

    fn no_regions() -> std::collections::HashMap<u64, tagwire_shm::Region> {
        std::collections::HashMap::new()
    }

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
        let regions = no_regions();
        let mut stale = Stale {
            regions: &regions,
            unsent: 0,
        };
        let mut kept = BytesMut::new();
        keep_publishes(&frames, 4096, &mut stale, &mut kept);
        assert_eq!(
            kept, expected,
            "the Ping and the 5000-byte publish are left out"
        );
        let mut kept = BytesMut::new();
        keep_publishes(&frames[..frames.len() - 1], 1 << 20, &mut stale, &mut kept);
        assert_eq!(kept, expected, "a cut-off last frame is left out");
        assert_eq!(stale.unsent, 0);
    }

    /// Issue 24, item 14: a publish that refers to a region of the lost
    /// connection's daemon is replayed with its payload inline (the new
    /// daemon never granted that region); one whose packet left the
    /// region is counted, not sent.
    #[test]
    fn replayed_shared_memory_references_go_out_with_their_payload_inline() {
        use tagwire_shm::{ProducerConfig, Region, RegionConfig, NO_DEADLINE};
        let region = Region::create(RegionConfig {
            slots: 2,
            chunks: 2 + 4 + 1,
            chunk_bytes: 1024,
            reserve: false,
            ..RegionConfig::default()
        })
        .expect("region");
        let mut producer = region
            .producer(0, ProducerConfig::default())
            .expect("producer");
        let reference = |seq: u64, len: u32| {
            let r = tagwire_proto::ShmRef {
                region: 77,
                seq,
                len,
                chunk: 0,
            };
            let mut e = Event::new("/shm", bytes::Bytes::copy_from_slice(&r.encode()));
            e.header.payload_in_shm = true;
            e.header.seq = seq + 1;
            e
        };
        let gone = producer
            .publish_copy(b"lapped", 1, NO_DEADLINE, 0)
            .expect("publish");
        let kept = producer
            .publish_copy(b"still here", 2, NO_DEADLINE, 0)
            .expect("publish");
        producer
            .publish_copy(b"laps the first", 3, NO_DEADLINE, 0)
            .expect("publish");
        let mut frames = BytesMut::new();
        tagwire_proto::encode_publish(3, &reference(gone, 6), &mut frames).expect("encode");
        tagwire_proto::encode_publish(3, &reference(kept, 10), &mut frames).expect("encode");
        let regions = std::collections::HashMap::from([(77, region.clone())]);
        let mut stale = Stale {
            regions: &regions,
            unsent: 0,
        };
        let mut out = BytesMut::new();
        keep_publishes(&frames, 1 << 20, &mut stale, &mut out);
        assert_eq!(stale.unsent, 1, "the lapped packet is counted");
        let mut expected = reference(kept, 10);
        expected.payload = bytes::Bytes::from_static(b"still here");
        expected.header.payload_in_shm = false;
        let mut want = BytesMut::new();
        tagwire_proto::encode_publish(3, &expected, &mut want).expect("encode");
        assert_eq!(
            out, want,
            "the kept packet goes inline, its shared-memory bit cleared"
        );
        // Inline, it would not fit the new daemon's frames: counted.
        let mut stale = Stale {
            regions: &regions,
            unsent: 0,
        };
        let mut out = BytesMut::new();
        keep_publishes(&frames, (want.len() - 5) as u32, &mut stale, &mut out);
        assert_eq!((stale.unsent, out.len()), (2, 0));
        // A region this session does not have: counted too.
        let mut stale = Stale {
            regions: &no_regions(),
            unsent: 0,
        };
        let mut out = BytesMut::new();
        keep_publishes(&frames, 1 << 20, &mut stale, &mut out);
        assert_eq!((stale.unsent, out.len()), (2, 0));
    }
}
