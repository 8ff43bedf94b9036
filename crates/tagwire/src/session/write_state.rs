//! The write path's state (see `writer`): the batch being filled, the
//! burst detection, what the connection allows, and the acknowledged
//! window; held under `Inner::writer`.

use std::time::Duration;

use bytes::BytesMut;

/// Publishes closer together than this are batched into one write.
pub const HOT_INTERVAL: Duration = Duration::from_micros(20);

/// Buffered publish bytes that force an immediate write.
pub(super) const HIGH_WATER: usize = 64 * 1024;

pub(super) struct WriteState {
    pub(super) buf: BytesMut,
    /// Source timestamp of the previous publish (ns), for burst detection.
    pub(super) last_publish_ns: u64,
    pub(super) flush_requested: bool,
    /// The flusher is parked on the condvar (so a notify is needed).
    pub(super) flusher_waiting: bool,
    pub(super) connected: bool,
    /// The engine's frame limit, copied when the connection is
    /// established, so that a publish does not lock the engine.
    pub(super) max_frame: u32,
    /// Reliable publishers' events not yet acknowledged (see `acked`).
    pub(super) acks: super::ack_window::AckWindow,
    /// Over UDP: the largest frame (length field included) one datagram
    /// carries; a larger publish is refused (`EventTooLarge`).
    pub(super) datagram_max: Option<usize>,
    /// The connection carries events larger than its frame in pieces
    /// (protocol version 5).
    pub(super) pieces: bool,
    /// Reliable events in pieces a reconnect found unacknowledged, for
    /// the reader thread to hand to [`Inner::resend_pieces`].
    pub(super) pieced_resend: Vec<(u32, bytes::Bytes)>,
}

impl WriteState {
    /// The state of a session not yet connected.
    pub(super) fn new(acks: tagwire_core::reliable::WindowLimits) -> WriteState {
        WriteState {
            buf: BytesMut::with_capacity(HIGH_WATER),
            last_publish_ns: 0,
            flush_requested: false,
            flusher_waiting: false,
            connected: false,
            max_frame: 0,
            acks: super::ack_window::AckWindow::new(acks),
            datagram_max: None,
            pieces: false,
            pieced_resend: Vec::new(),
        }
    }
}
