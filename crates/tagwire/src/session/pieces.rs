//! Events larger than the connection's frame, in pieces (protocol version
//! 5; docs/reliability.md, "Pieces on client connections"). A publish
//! whose frame would be over the negotiated limit goes as `PublishPiece`
//! frames written straight from the encoded event (one slice each), with
//! the writer's lock held, so that no other publish comes between them. A
//! reliable one is held in the acknowledgement window like any other: after
//! a reconnect it is sent again by a thread of its own, from the start, and
//! the daemon's `PieceResume` (it holds the first bytes already) moves the
//! cursor there. Deliveries in pieces (`DeliverPiece`) are put together by
//! the reader thread (bounded) and handed to the subscriber whole.

use std::io::Write;
use std::sync::MutexGuard;

use bytes::{BufMut, Bytes, BytesMut};
use tagwire_core::fragment::{checksum, Reassembler, ReassemblyLimits};
use tagwire_proto::{kind, PieceOf, PUBLISH_PIECE_PREFIX_LEN};

use super::write_state::WriteState;
use super::Inner;
use crate::error::{Error, Result};
use crate::sync::lock;

/// The most data one `PublishPiece` carries (less if the frame is smaller).
pub(crate) const PIECE_DATA_MAX: usize = 1 << 20;

/// Events in pieces a session's reader puts together at once; past it the
/// oldest incomplete one is dropped.
const MAX_DELIVERIES_IN_PIECES: usize = 4;

/// The id every piece of `event` carries: the same each time it is sent
/// (the daemon recognises a resend by it), different for different events
/// (their headers differ: publisher, sequence number, time).
pub(crate) fn event_id(event: &[u8], sum: u32) -> u64 {
    let head = &event[..event.len().min(256)];
    (u64::from(sum) << 32) | u64::from(checksum(head))
}

/// The reader thread's reassembler of deliveries in pieces, keyed by
/// subscription and event id.
pub(crate) fn delivery_reassembler() -> Reassembler<(u32, u64)> {
    Reassembler::new(ReassemblyLimits {
        max_payload: tagwire_proto::MAX_PIECED_EVENT,
        max_blobs: MAX_DELIVERIES_IN_PIECES,
        max_bytes: tagwire_proto::MAX_PIECED_EVENT,
    })
}

impl Inner {
    /// Writes `event` (encoded) as `PublishPiece` frames of publisher
    /// `endpoint`, `seq` 0 (a plain publish) or its acknowledgement
    /// sequence number, with the writer's lock `w` held throughout. A
    /// write that fails marks the session disconnected and returns
    /// [`Error::Disconnected`] (a reliable event stays in the window and is
    /// sent again after the reconnect).
    pub(super) fn write_pieces(
        &self,
        w: &mut MutexGuard<'_, WriteState>,
        endpoint: u32,
        seq: u64,
        event: &Bytes,
    ) -> Result<()> {
        // What is buffered goes first, in order.
        let buffered = w.buf.split().freeze();
        let piece = (w.max_frame as usize)
            .saturating_sub(PUBLISH_PIECE_PREFIX_LEN - 4)
            .clamp(1, PIECE_DATA_MAX);
        let sum = checksum(event);
        let mut of = PieceOf {
            id: event_id(event, sum),
            total: event.len() as u64,
            checksum: sum,
            offset: 0,
        };
        let mut sock = lock(&self.socket);
        let Some(s) = sock.as_mut() else {
            w.connected = false;
            lock(&self.replay).extend_from_slice(&buffered);
            return Err(Error::Disconnected);
        };
        let fail = |e: std::io::Error, s: &mut crate::stream::Stream| {
            tracing::debug!("write of an event in pieces failed: {e}");
            s.shutdown();
            Error::Disconnected
        };
        if let Err(e) = s.write_all(&buffered) {
            let err = fail(e, s);
            *sock = None;
            w.connected = false;
            return Err(err);
        }
        let mut at = 0usize;
        let mut head = BytesMut::with_capacity(PUBLISH_PIECE_PREFIX_LEN);
        while at < event.len() {
            if let Some(have) = lock(&self.piece_resume).take(of.id) {
                if have as usize > at && have <= of.total {
                    tracing::info!(
                        "resuming event {:#x} at byte {have} of {} (the daemon holds the rest)",
                        of.id,
                        of.total
                    );
                    self.pieces_skipped
                        .fetch_add(have - at as u64, std::sync::atomic::Ordering::Relaxed);
                    at = have as usize;
                    if at >= event.len() {
                        break;
                    }
                }
            }
            let end = (at + piece).min(event.len());
            of.offset = at as u64;
            head.clear();
            head.put_u32_le((PUBLISH_PIECE_PREFIX_LEN - 4 + end - at) as u32);
            head.put_u8(kind::PUBLISH_PIECE);
            head.put_u32_le(endpoint);
            head.put_u64_le(seq);
            head.put_u64_le(of.id);
            head.put_u64_le(of.total);
            head.put_u32_le(of.checksum);
            head.put_u64_le(of.offset);
            debug_assert_eq!(head.len(), PUBLISH_PIECE_PREFIX_LEN);
            let r = s
                .write_all(&head)
                .and_then(|()| s.write_all(&event[at..end]));
            if let Err(e) = r {
                let err = fail(e, s);
                *sock = None;
                w.connected = false;
                return Err(err);
            }
            self.pieces_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            at = end;
        }
        Ok(())
    }
}
