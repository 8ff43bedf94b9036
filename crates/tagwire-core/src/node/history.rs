//! The node's pull buffers (the `history` QoS property): recording routed
//! events and answering pulls — a local client's, or a `PullRequest` whose
//! target is this daemon — from core's [`HistoryTable`].
//!
//! Which tags keep how much (`capacity`) is the caller's to say: it comes
//! from the QoS layers, which the router resolves. What a held event keeps
//! alive (`cost`) is the caller's too: a slice of a read buffer pins more
//! than its length. Every bound and its behaviour is
//! [`crate::history`]'s.

use bytes::Bytes;
use tagwire_proto::{ErrorCode, EventRef, Pull, PullReply, FRAME_HEADER_LEN};

use crate::history::{HistoryTable, PullError};
use crate::tags::validate_tag;

use super::Node;

/// Bytes of a `PullReply` besides its events: header and fixed fields.
const REPLY_FIXED: usize = FRAME_HEADER_LEN + 35;
/// Bytes per event in a `PullReply` besides the event: its length.
const REPLY_PER_EVENT: usize = 4;

impl<C: Clone> Node<C> {
    /// The pull buffers.
    pub fn history(&self) -> &HistoryTable {
        &self.history
    }

    /// The pull buffers, to re-size them after the QoS layers changed.
    pub fn history_mut(&mut self) -> &mut HistoryTable {
        &mut self.history
    }

    /// Records routed event `ev` (encoded as `event`, keeping `cost` bytes
    /// alive) in its tag's history of `capacity` events; 0: the tag keeps
    /// none.
    pub fn record(&mut self, ev: &EventRef<'_>, event: Bytes, cost: usize, capacity: usize) {
        if capacity == 0 {
            return;
        }
        let (tag, publisher) = (ev.tag, ev.publisher);
        let (seq, time) = (ev.seq, ev.source_time_ns);
        self.history
            .record(tag, publisher, seq, time, event, capacity, cost);
    }

    /// Answers `pull` from this daemon's buffers in a reply of at most
    /// `max_frame` bytes (the asking connection's limit). Whoever asked has
    /// checked the asker may read the tag. Cost: bounded by the reply cap.
    pub fn answer_here(
        &self,
        pull: &Pull,
        max_frame: u32,
    ) -> Result<PullReply, (ErrorCode, String)> {
        validate_tag(&pull.tag).map_err(|e| (ErrorCode::InvalidTag, e.to_string()))?;
        let room = (max_frame as usize).saturating_sub(REPLY_FIXED);
        let a = self
            .history
            .query_within(
                &pull.tag,
                &pull.publisher,
                &pull.query,
                room,
                REPLY_PER_EVENT,
            )
            .map_err(|e| {
                let code = match e {
                    PullError::NoHistory { .. } | PullError::UnknownPublisher { .. } => {
                        ErrorCode::NoHistory
                    }
                    _ => ErrorCode::BadRequest,
                };
                (code, e.to_string())
            })?;
        if let Some(first) = a.events.first() {
            if first.len() + REPLY_PER_EVENT > room {
                return Err((
                    ErrorCode::LimitReached,
                    format!(
                        "the event is {} bytes: a reply carrying it would pass this connection's frame limit of {max_frame} bytes",
                        first.len()
                    ),
                ));
            }
        }
        Ok(PullReply {
            req: pull.req,
            status: a.status,
            oldest: a.oldest,
            newest: a.newest,
            held: u32::try_from(a.held).unwrap_or(u32::MAX),
            events: a.events,
        })
    }
}
