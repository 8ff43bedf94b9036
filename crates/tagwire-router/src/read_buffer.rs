//! A connection's read buffer, grown only by this module and only within the
//! memory budget.
//!
//! Frames are read into chunks of a fixed size (a small one before the
//! handshake, [`READ_CHUNK`] after); every frame that fits a chunk shares
//! it. A frame larger than a chunk gets an allocation of exactly its size,
//! reserved from the memory budget *before* it is allocated (and allocated
//! with `try_reserve`, so a refusal by the allocator is an error, not an
//! abort); the reservation is given back when the frame is complete. So a
//! frame's bytes live either in a shared chunk or alone in a buffer of their
//! own size, which is what [`crate::channel`] relies on to count what a
//! queued event keeps alive.

use bytes::BytesMut;
use std::sync::Arc;
use tagwire_proto::FRAME_HEADER_LEN;

use crate::budget::{MemoryBudget, Reservation};
#[cfg(doc)]
use crate::channel::READ_CHUNK;

/// Why the buffer could not make room for the next frame.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RoomError {
    /// The memory budget cannot hold the frame.
    #[error("memory budget reached (limits.max_buffered_bytes = {max} bytes, {used} in use): cannot buffer a frame of {need} bytes; closing the connection")]
    Budget {
        /// The frame's size with its length prefix.
        need: usize,
        /// Bytes of the budget in use.
        used: usize,
        /// The budget.
        max: usize,
    },
    /// The allocator refused.
    #[error("cannot allocate {need} bytes for a frame (out of memory); closing the connection")]
    Alloc {
        /// The allocation asked for.
        need: usize,
    },
}

/// Bytes read from a connection and not yet split into frames.
#[derive(Debug)]
pub(crate) struct ReadBuffer {
    /// The bytes; read into its spare capacity only after
    /// [`make_room`](Self::make_room).
    pub buf: BytesMut,
    chunk: usize,
    budget: Arc<MemoryBudget>,
    /// The budget held for a frame larger than a chunk, until it completes.
    large: Option<Reservation>,
}

impl ReadBuffer {
    /// A buffer reading in chunks of `chunk` bytes.
    pub(crate) fn new(chunk: usize, budget: Arc<MemoryBudget>) -> Self {
        ReadBuffer {
            buf: BytesMut::with_capacity(chunk),
            chunk,
            budget,
            large: None,
        }
    }

    /// Uses chunks of `chunk` bytes from the next new chunk on.
    pub(crate) fn set_chunk(&mut self, chunk: usize) {
        self.chunk = chunk;
    }

    /// The size (length prefix included) of the frame at the front of the
    /// buffer, if its header is there, its length is valid for `max_frame`
    /// and the frame is not complete yet. Invalid lengths are left to the
    /// frame decoder to report.
    pub(crate) fn incomplete_frame(&self, max_frame: u32) -> Option<usize> {
        let b = &self.buf;
        if b.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if len == 0 || len > max_frame {
            return None;
        }
        let total = 4 + len as usize;
        (b.len() < total).then_some(total)
    }

    /// Whether a frame of `total` bytes (length prefix included) is read
    /// into a buffer of its own rather than a shared chunk.
    pub(crate) fn is_large(&self, total: usize) -> bool {
        total > self.chunk
    }

    /// Called when a complete frame has been split off the front: gives back
    /// the budget held for it if it was a large one.
    pub(crate) fn frame_taken(&mut self) {
        // A large frame is alone in its buffer, so it is the first frame
        // taken after the reservation.
        self.large = None;
    }

    /// Makes sure the next read has room, growing the buffer for the
    /// incomplete frame at its front if that frame does not fit.
    pub(crate) fn make_room(&mut self, max_frame: u32) -> Result<(), RoomError> {
        let cap = self.buf.capacity();
        match self.incomplete_frame(max_frame) {
            Some(need) if need > cap => {
                if need > self.chunk {
                    self.large = None;
                    let Some(r) = Reservation::take(&self.budget, need) else {
                        self.budget.note_refusal();
                        return Err(RoomError::Budget {
                            need,
                            used: self.budget.used(),
                            max: self.budget.max(),
                        });
                    };
                    self.regrow(need)?;
                    self.large = Some(r);
                } else {
                    self.regrow(self.chunk)?;
                }
            }
            Some(_) => {}
            // No frame under way with a known size: at most a partial header.
            None if cap - self.buf.len() < (self.chunk / 4).max(FRAME_HEADER_LEN) => {
                self.regrow(self.chunk)?;
            }
            None => {}
        }
        Ok(())
    }

    /// Moves the unread bytes into a new allocation of exactly `cap` bytes.
    fn regrow(&mut self, cap: usize) -> Result<(), RoomError> {
        let mut v: Vec<u8> = Vec::new();
        v.try_reserve_exact(cap)
            .map_err(|_| RoomError::Alloc { need: cap })?;
        v.extend_from_slice(&self.buf);
        // Callers only regrow for more than the unread bytes, so `v` has
        // spare capacity, which the `Vec` → `Bytes` → `BytesMut` route keeps
        // (without copying).
        debug_assert!(v.len() < v.capacity(), "regrow for more than is held");
        self.buf = BytesMut::from(bytes::Bytes::from(v));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_frame_reserves_the_budget_until_it_completes_and_is_refused_past_it() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let mut rb = ReadBuffer::new(100, budget.clone());
        rb.buf.extend_from_slice(&600u32.to_le_bytes());
        rb.make_room(10_000).expect("fits the budget");
        assert_eq!(budget.used(), 604);
        assert!(rb.buf.capacity() >= 604);
        rb.buf.extend_from_slice(&[0u8; 600]);
        let _frame = rb.buf.split_to(604);
        rb.frame_taken();
        assert_eq!(budget.used(), 0, "given back once the frame is complete");

        let mut other = ReadBuffer::new(100, budget.clone());
        other.buf.extend_from_slice(&600u32.to_le_bytes());
        other.make_room(10_000).expect("fits");
        rb.buf.extend_from_slice(&600u32.to_le_bytes());
        let e = rb.make_room(10_000).unwrap_err();
        assert!(e.to_string().contains("max_buffered_bytes"), "{e}");
        drop(other);
        assert_eq!(budget.used(), 0, "given back when the connection ends");
    }

    #[test]
    fn small_frames_never_grow_the_buffer_past_a_chunk() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let mut rb = ReadBuffer::new(100, budget.clone());
        rb.buf.extend_from_slice(&[1, 0, 0]);
        rb.make_room(10_000).expect("room");
        assert!(rb.buf.capacity() <= 100);
        assert_eq!(budget.used(), 0);
    }
}
