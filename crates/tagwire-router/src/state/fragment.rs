//! Reliable events in pieces, as the federation state holds them: the
//! event a link connection is sending in pieces ([`Sending`], with
//! [`start`] and [`send_pieces`]) and the daemon's reassemblies
//! ([`Fragments`]). Taking pieces and `FragmentResume` answers is
//! `fragment`'s (and the receiving path's, `forwarded`).

use std::time::Instant;

use bytes::Bytes;
use tagwire_core::federation::NodeId;
use tagwire_core::fragment::{Outgoing, Reassembler, ReassemblyLimits};
use tagwire_proto::{EventRef, FragmentOf, LinkFrame};

use crate::channel::Outbox;

/// A reliable event being sent in pieces on one link connection.
#[derive(Debug)]
pub(crate) struct Sending {
    /// Its sequence number on the connection.
    pub seq: u64,
    pub origin: NodeId,
    pub hops: u8,
    pub out: Outgoing,
}

/// The daemon's reassemblies and counters (in the federation state).
#[derive(Debug)]
pub(crate) struct Fragments {
    /// Piece size on links of version 4 (`[federation] fragment_size`).
    pub piece: usize,
    pub reasm: Reassembler<(NodeId, u64)>,
    last_warning: Option<Instant>,
}

impl Fragments {
    /// Empty, with `[federation]`'s bounds.
    pub(crate) fn new(config: &crate::config::FederationConfig) -> Self {
        Fragments {
            piece: config.fragment_size,
            reasm: Reassembler::new(ReassemblyLimits {
                max_payload: tagwire_proto::MAX_FRAGMENTED_EVENT,
                max_blobs: config.fragment_max_events,
                max_bytes: config.fragment_max_bytes as u64,
            }),
            last_warning: None,
        }
    }

    /// Whether a warning may be logged now: at most one a second.
    pub(crate) fn warn_allowed(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last_warning
            .is_some_and(|t| now.duration_since(t).as_secs() < 1)
        {
            return false;
        }
        self.last_warning = Some(now);
        true
    }
}

/// The id of an event's pieces: the same at every daemon for the same
/// event (FNV-1a over its publisher, sequence number, source time and tag).
pub(crate) fn event_id(ev: &EventRef<'_>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(ev.publisher.as_bytes());
    eat(&[0xff]);
    eat(&ev.seq.to_le_bytes());
    eat(&ev.source_time_ns.to_le_bytes());
    eat(ev.tag.as_bytes());
    h
}

/// Starts sending `event` (sequence number `seq`) in pieces of `piece`
/// bytes; `None` if it cannot be (it does not parse, or is over 4 GiB: the
/// caller sends it whole, as before).
pub(crate) fn start(
    seq: u64,
    origin: NodeId,
    hops: u8,
    event: &Bytes,
    piece: usize,
) -> Option<Sending> {
    let id = event_id(&EventRef::parse(event).ok()?);
    let out = Outgoing::new(id, event.clone(), piece).ok()?;
    Some(Sending {
        seq,
        origin,
        hops,
        out,
    })
}

/// Writes `s`'s next pieces while the control buffer takes them; true once
/// the last went. Returns the number of pieces written too.
pub(crate) fn send_pieces(outbox: &Outbox, s: &mut Sending, max_control: usize) -> (bool, u64) {
    let mut n = 0;
    while let Some(p) = s.out.peek() {
        let b = p.blob;
        let frame = LinkFrame::Fragment {
            id: b.id,
            total: b.total,
            checksum: b.checksum,
            offset: p.offset,
            of: FragmentOf::Reliable {
                seq: s.seq,
                origin: s.origin,
                hops: s.hops,
            },
            data: p.data,
        };
        // Half the control buffer at most: the rest stays free for the
        // connection's own frames (a Pong, an Ack), which close it as a
        // peer that does not read when they find the buffer full.
        if !outbox.send_link(&frame, max_control / 2) {
            return (false, n);
        }
        n += 1;
        s.out.advance();
    }
    (true, n)
}
