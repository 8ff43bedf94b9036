//! Reliable events in pieces, as the federation state holds them: the
//! event a link connection is sending in pieces ([`Sending`], with
//! [`start`] and [`send_pieces`], which compresses each piece on its own
//! where the tag says `compression` and the peer speaks link version 7)
//! and the daemon's reassemblies ([`Fragments`]). Taking pieces and
//! `FragmentResume` answers is `fragment`'s (and the receiving path's,
//! `forwarded`).

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use tagwire_core::compress::Compression;
use tagwire_core::federation::NodeId;
use tagwire_core::fragment::{Outgoing, Piece, Reassembler, ReassemblyLimits};
use tagwire_proto::admin::CompressionInfo;
use tagwire_proto::{Codec, EventRef, FragmentOf, LinkFrame, COMPRESSED_HEADER_LEN};

use crate::channel::Outbox;

/// A reliable event being sent in pieces on one link connection.
#[derive(Debug)]
pub(crate) struct Sending {
    /// Its sequence number on the connection.
    pub seq: u64,
    pub origin: NodeId,
    pub hops: u8,
    pub out: Outgoing,
    /// How its pieces are compressed (none: the tag does not say
    /// `compression`, or the peer speaks link version 6 or lower).
    pub compression: Compression,
    /// The next piece's frame, made (and compressed) but not taken by a
    /// full control buffer: sent as it is next time, not compressed again
    /// (dropped if a `FragmentResume` moved the cursor).
    ready: Option<Ready>,
}

/// A piece's frame, ready to go.
#[derive(Debug)]
struct Ready {
    /// Where the piece starts in the event.
    offset: u64,
    frame: LinkFrame,
    /// Its raw and wire bytes (codec header included) if it is compressed.
    sizes: Option<(u64, u64)>,
    /// Compression was tried and the piece did not shrink.
    not_smaller: bool,
}

/// What compressing pieces did (in [`Fragments`]): counted into the
/// listing's `compression` counters, and the bytes it spared per peer,
/// taken off its link's `bytes_out` (which counted the event whole when it
/// was queued).
#[derive(Debug, Default)]
pub(crate) struct PieceCompression {
    pub counters: CompressionInfo,
    /// Bytes spared per peer daemon since the federation task last took
    /// them off its link's `bytes_out` (at most one entry per link).
    pub saved: HashMap<NodeId, u64>,
}

/// The daemon's reassemblies and counters (in the federation state).
#[derive(Debug)]
pub(crate) struct Fragments {
    /// Piece size on links of version 4 (`[federation] fragment_size`).
    pub piece: usize,
    pub reasm: Reassembler<(NodeId, u64)>,
    /// Pieces compressed on their own (link version 7).
    pub compression: PieceCompression,
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
            compression: PieceCompression::default(),
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
/// bytes, each compressed as `compression` says; `None` if it cannot be (it
/// does not parse, or is over 4 GiB: the caller sends it whole, as before).
pub(crate) fn start(
    seq: u64,
    origin: NodeId,
    hops: u8,
    event: &Bytes,
    piece: usize,
    compression: Compression,
) -> Option<Sending> {
    let id = event_id(&EventRef::parse(event).ok()?);
    let out = Outgoing::new(id, event.clone(), piece).ok()?;
    Some(Sending {
        seq,
        origin,
        hops,
        out,
        compression,
        ready: None,
    })
}

/// Writes `s`'s next pieces to link connection `outbox` (to daemon `peer`)
/// while the control buffer takes them; true once the last went. Returns
/// the number of pieces written too.
///
/// A piece at least the tag's `MIN` long is compressed on its own
/// (`FragmentCompressed`; one that does not shrink goes as a `Fragment`,
/// counted `not_smaller`). **At most one piece is compressed per call**:
/// the work one call does under the state lock is one piece's compression
/// (`federation.fragment_size`, 1 MiB by default), whatever the event's
/// size; the pump (every 2 ms) or the next acknowledgement sends the next.
pub(crate) fn send_pieces(
    outbox: &Outbox,
    s: &mut Sending,
    max_control: usize,
    peer: NodeId,
    comp: &mut PieceCompression,
) -> (bool, u64) {
    let mut n = 0;
    let mut compressed_one = false;
    loop {
        let ready = match s.ready.take() {
            Some(r) if r.offset == s.out.cursor() => r,
            _ => {
                let Some(p) = s.out.peek() else {
                    return (true, n);
                };
                let codec = s.compression.codec_for(p.data.len());
                if codec.is_some() && compressed_one {
                    return (false, n);
                }
                compressed_one |= codec.is_some();
                piece_frame(s, p, codec)
            }
        };
        // Half the control buffer at most: the rest stays free for the
        // connection's own frames (a Pong, an Ack), which close it as a
        // peer that does not read when they find the buffer full.
        if !outbox.send_link(&ready.frame, max_control / 2) {
            s.ready = Some(ready);
            return (false, n);
        }
        let c = &mut comp.counters;
        if let Some((raw, wire)) = ready.sizes {
            c.compressed += 1;
            c.pieces += 1;
            c.raw_bytes += raw;
            c.wire_bytes += wire;
            *comp.saved.entry(peer).or_default() += raw.saturating_sub(wire);
        } else if ready.not_smaller {
            c.not_smaller += 1;
        }
        n += 1;
        s.out.advance();
    }
}

/// Piece `p` of `s` as a frame: compressed with `codec` if given and it
/// shrinks, else a plain `Fragment`.
fn piece_frame(s: &Sending, p: Piece, codec: Option<Codec>) -> Ready {
    let b = p.blob;
    let of = FragmentOf::Reliable {
        seq: s.seq,
        origin: s.origin,
        hops: s.hops,
    };
    let raw = p.data.len();
    let packed = codec.and_then(|c| {
        let data = tagwire_core::compress::compress(c, &p.data)?;
        // A piece is at most `fragment_size` (16 MiB) long.
        let raw_len = u32::try_from(raw).ok()?;
        Some((c, raw_len, data))
    });
    match packed {
        Some((codec, raw_len, data)) => Ready {
            offset: p.offset,
            sizes: Some((raw as u64, (COMPRESSED_HEADER_LEN + data.len()) as u64)),
            not_smaller: false,
            frame: LinkFrame::FragmentCompressed {
                id: b.id,
                total: b.total,
                checksum: b.checksum,
                offset: p.offset,
                of,
                codec,
                raw_len,
                data: Bytes::from(data),
            },
        },
        None => Ready {
            offset: p.offset,
            sizes: None,
            not_smaller: codec.is_some(),
            frame: LinkFrame::Fragment {
                id: b.id,
                total: b.total,
                checksum: b.checksum,
                offset: p.offset,
                of,
                data: p.data,
            },
        },
    }
}
