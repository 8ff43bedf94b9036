//! Link frames: what two daemons say to each other on a peer link, after the
//! ordinary `Hello`/`Welcome` handshake (the dialing daemon is the client).
//!
//! Link frames use type codes `0x20..=0x2f` and are framed like every other
//! frame (`u32 length | u8 type | body`). The dialer sends [`LinkFrame::Peer`]
//! first; the acceptor answers with its own. From then on both sides are
//! equal: each floods [`LinkFrame::Advert`]s (its links and interest), sends
//! events it routes as [`LinkFrame::Forward`], and probes the other's clock
//! with [`LinkFrame::TimeProbe`]/[`LinkFrame::TimeReply`].
//! `docs/protocol.md` ("Links between daemons") documents every byte.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::limits::MAX_TEXT_LEN;
use crate::reader::Reader;
use crate::writer::{patch_len, put_short_str as put_short, put_str16, FRAME_HEADER_LEN};

/// The newest link protocol version this crate speaks (carried in `Peer`).
/// Version 3 adds [`LinkFrame::Reliable`] and [`LinkFrame::Ack`]; version 4
/// adds [`LinkFrame::Fragment`] and [`LinkFrame::FragmentResume`]; version 5
/// adds [`LinkFrame::Compressed`]; version 6 adds the UDP ports of the
/// bands to the acceptor's [`LinkFrame::Peer`] (`udp_bands`); version 7
/// adds [`LinkFrame::ReliableTo`] and [`LinkFrame::FragmentCompressed`].
pub const LINK_VERSION: u16 = 7;
/// The first link version that carries [`LinkFrame::ReliableTo`] (reliable
/// events held for a daemon while it was unreachable, sent to it once it is
/// reachable again); an older peer gets none.
pub const RELIABLE_TO_LINK_VERSION: u16 = 7;
/// The first link version that carries compressed pieces of an event
/// ([`LinkFrame::FragmentCompressed`]); an older peer gets plain
/// [`LinkFrame::Fragment`]s.
pub const PIECE_COMPRESS_LINK_VERSION: u16 = 7;
/// The first link version whose acceptor lists its bands' UDP ports in
/// its `Peer` (`udp_bands`), so that a link dialed over UDP opens one
/// session per band; an older peer's UDP link stays on the default band.
pub const UDP_BANDS_LINK_VERSION: u16 = 6;
/// The first link version that carries compressed events
/// ([`LinkFrame::Compressed`]); an older peer gets them uncompressed.
pub const COMPRESS_LINK_VERSION: u16 = 5;
/// Bytes before the compressed data in a [`LinkFrame::Compressed`]'s body
/// after its `Forward`/`Reliable` fields: `u8 codec`, `u32 raw_len`.
pub const COMPRESSED_HEADER_LEN: usize = 5;
/// The first link version that carries events larger than a frame in
/// pieces ([`LinkFrame::Fragment`]).
pub const FRAGMENT_LINK_VERSION: u16 = 4;
/// Bytes of a `FragmentCompressed` frame before its compressed data: a
/// `Fragment`'s prefix, `u8 codec` and `u32 raw_len`.
pub const FRAGMENT_COMPRESSED_PREFIX_LEN: usize = FRAGMENT_PREFIX_LEN + COMPRESSED_HEADER_LEN;
/// Largest event a `Fragment` may describe: 4 GiB.
pub const MAX_FRAGMENTED_EVENT: u64 = 1 << 32;
/// Bytes of a `Fragment` frame before its data: header and fixed fields.
pub const FRAGMENT_PREFIX_LEN: usize = FRAME_HEADER_LEN + 46;
/// The oldest link protocol version this crate still links with (without
/// acknowledgements: reliable events cross such a link best effort).
pub const MIN_LINK_VERSION: u16 = 2;
/// The first link version with hop-by-hop acknowledgement.
pub const RELIABLE_LINK_VERSION: u16 = 3;
/// Bytes of a [`LinkFrame::ReliableTo`]'s body before its event: `seq`,
/// `origin`, `hops`, `to`.
pub const RELIABLE_TO_FIELDS_LEN: usize = 8 + 8 + 1 + 8;
/// Most ranges one [`Ack`] carries.
pub const MAX_ACK_RANGES: usize = 16;
/// Most unacknowledged reliable events one link connection may have in
/// flight: a receiver refuses a sequence number further ahead.
pub const MAX_RELIABLE_WINDOW: usize = 262_144;

/// Most neighbours one `Advert` may list.
pub const MAX_ADVERT_NEIGHBORS: usize = 1024;
/// Most bands one `Peer` may list.
pub const MAX_PEER_BANDS: usize = 16;
/// Most interest entries one `Advert` may carry.
pub const MAX_ADVERT_INTEREST: usize = 4096;
/// Bytes of a `Forward` frame before its event: header, origin, hops.
pub const FORWARD_PREFIX_LEN: usize = FRAME_HEADER_LEN + 8 + 1;

/// Link frame type codes.
pub mod link_kind {
    /// Either way, first: who this daemon is.
    pub const PEER: u8 = 0x20;
    /// Either way: one daemon's links and interest (flooded).
    pub const ADVERT: u8 = 0x21;
    /// Either way: an event routed over the link.
    pub const FORWARD: u8 = 0x22;
    /// Either way: a clock probe.
    pub const TIME_PROBE: u8 = 0x23;
    /// Either way: the answer to a clock probe.
    pub const TIME_REPLY: u8 = 0x24;
    /// Either way: a pull routed toward the daemon that keeps the history.
    pub const PULL_REQUEST: u8 = 0x25;
    /// Either way: the answer to a `PullRequest`, routed back hop by hop.
    pub const PULL_ANSWER: u8 = 0x26;
    /// Either way (link version 3): an event routed with a per-connection
    /// sequence number, held by the sender until acknowledged.
    pub const RELIABLE: u8 = 0x27;
    /// Either way (link version 3): which `Reliable` frames are settled.
    pub const ACK: u8 = 0x28;
    /// Either way (link version 4): one piece of a `Forward` or `Reliable`
    /// whose event is larger than the negotiated frame.
    pub const FRAGMENT: u8 = 0x29;
    /// Either way (link version 4): the receiver of `Fragment`s says how
    /// much of an event it holds, so the sender resumes there.
    pub const FRAGMENT_RESUME: u8 = 0x2a;
    /// Either way (link version 5): a `Forward` whose event is compressed.
    pub const FORWARD_COMPRESSED: u8 = 0x2b;
    /// Either way (link version 5): a `Reliable` whose event is compressed.
    pub const RELIABLE_COMPRESSED: u8 = 0x2c;
    /// Either way (link version 7): a reliable event addressed to one
    /// daemon (`to`), under the connection's sequence numbers like
    /// `Reliable`: daemons on the way pass it toward `to`, which delivers it
    /// locally only.
    pub const RELIABLE_TO: u8 = 0x2d;
    /// Either way (link version 7): a `Fragment` whose piece is compressed
    /// on its own (0x2d is `ReliableTo`'s, also version 7).
    pub const FRAGMENT_COMPRESSED: u8 = 0x2e;
}

/// How a [`LinkFrame::Compressed`] event is compressed (its `codec` byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Codec {
    /// LZ4 block format, no frame header (code 1).
    Lz4,
    /// A Zstandard frame (code 2).
    Zstd,
}

impl Codec {
    /// The byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }

    /// The codec with this byte, if any.
    pub fn from_code(code: u8) -> Option<Codec> {
        match code {
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// The name users type (`lz4`, `zstd`).
    pub fn name(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// What a `Fragment`'s event becomes once whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragmentOf {
    /// A [`LinkFrame::Forward`].
    Forward {
        /// The daemon where it was published.
        origin: u64,
        /// Links it crossed before this one.
        hops: u8,
    },
    /// A [`LinkFrame::Reliable`] (its `seq` on this connection).
    Reliable {
        /// Per-connection sequence number (≥ 1).
        seq: u64,
        /// The daemon where it was published.
        origin: u64,
        /// Links it crossed before this one.
        hops: u8,
    },
}

/// A range of per-connection sequence numbers in an [`Ack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRange {
    /// The first sequence number.
    pub first: u64,
    /// The last (inclusive; `first <= last`).
    pub last: u64,
    /// Failed: the receiver could not pass these on (the sender routes them
    /// again); else done.
    pub failed: bool,
}

/// An acknowledgement of `Reliable` frames on one connection: every
/// sequence number up to `done` is settled (done, unless a failed range
/// names it), and so are the ranges (selective, above `done`, or failed
/// below it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ack {
    /// Cumulative: everything up to here is settled (0: nothing yet).
    pub done: u64,
    /// At most [`MAX_ACK_RANGES`] ranges.
    pub ranges: Vec<AckRange>,
}

impl Ack {
    /// Writes its body (`u64 done`, `u8 n`, `n` × (`u64 first`, `u64 last`,
    /// `u8 failed`)): the same bytes in a link `Ack` and a client
    /// `PublishAck` (docs/protocol.md).
    pub fn encode_body(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        if self.ranges.len() > MAX_ACK_RANGES {
            return Err(EncodeError::TooLong {
                what: "ack ranges",
                len: self.ranges.len(),
                max: MAX_ACK_RANGES,
            });
        }
        out.put_u64_le(self.done);
        out.put_u8(self.ranges.len() as u8);
        for r in &self.ranges {
            if r.first > r.last {
                return Err(EncodeError::BadValue {
                    what: "ack range (first after last)",
                    value: r.first,
                });
            }
            out.put_u64_le(r.first);
            out.put_u64_le(r.last);
            out.put_u8(u8::from(r.failed));
        }
        Ok(())
    }

    /// Reads a body written by [`encode_body`](Self::encode_body).
    pub(crate) fn decode_body(r: &mut Reader<'_>) -> Result<Ack, DecodeError> {
        let done = r.u64("ack cumulative")?;
        let n = r.u8("ack range count")? as usize;
        if n > MAX_ACK_RANGES {
            return Err(DecodeError::TooLong {
                what: "ack ranges",
                len: n,
                max: MAX_ACK_RANGES,
            });
        }
        let mut ranges = Vec::with_capacity(n);
        for _ in 0..n {
            let first = r.u64("ack range first")?;
            let last = r.u64("ack range last")?;
            if first > last {
                return Err(DecodeError::BadValue {
                    what: "ack range (first after last)",
                    value: first,
                });
            }
            let failed = match r.u8("ack range kind")? {
                0 => false,
                1 => true,
                v => {
                    return Err(DecodeError::BadValue {
                        what: "ack range kind",
                        value: v as u64,
                    })
                }
            };
            ranges.push(AckRange {
                first,
                last,
                failed,
            });
        }
        Ok(Ack { done, ranges })
    }
}

/// Whether `kind` is a link frame type.
pub fn is_link_kind(kind: u8) -> bool {
    (0x20..=0x2f).contains(&kind)
}

/// One entry of a daemon's interest: a pattern and, optionally, the content
/// filter every subscription under it applies (empty: none), so that an
/// event nobody's filter accepts is dropped where it is published; and the
/// temporal scaling its subscribers want with where the scaling proxy runs,
/// so that events a proxy drops do not cross the links after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Interest {
    /// A tag pattern (`/a/*`, `/a/**`).
    pub pattern: String,
    /// A filter expression (see docs/filters.md), or empty.
    pub filter: String,
    /// Temporal scaling: 1 of every `scale` events (those whose sequence
    /// number is a multiple of it); 1: all. Never 0.
    pub scale: u32,
    /// Where the scaling happens: links after that point carry only the
    /// scaled stream.
    pub proxy: ProxyAt,
}

impl Interest {
    /// Interest in `pattern`: unfiltered, unscaled.
    pub fn pattern(pattern: impl Into<String>) -> Self {
        Interest {
            pattern: pattern.into(),
            filter: String::new(),
            scale: 1,
            proxy: ProxyAt::Subscriber,
        }
    }
}

/// Where a subscription's scaling proxy runs (push-pull paper §2.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ProxyAt {
    /// At the subscriber's daemon: every event crosses the links (code 0).
    #[default]
    Subscriber,
    /// At the publisher's daemon: only the scaled stream leaves it (code 1).
    Publisher,
    /// At the named daemon: the full stream reaches it, the scaled one
    /// leaves it (code 2).
    Node(String),
}

/// The outcome of a pull routed over links: the reply, or why not.
#[derive(Debug, Clone, PartialEq)]
pub enum PullOutcome {
    /// The daemon that keeps the history answered (code 0).
    Reply(crate::PullReply),
    /// It, or a daemon on the way, refused (code 1).
    Refused {
        /// The error code the client gets.
        code: crate::ErrorCode,
        /// What was wrong.
        message: String,
    },
}

/// A frame on a link between two daemons.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkFrame {
    /// Who is on this end, and which of the link's band connections this is.
    Peer {
        /// The link protocol version (see [`LINK_VERSION`]).
        version: u16,
        /// The daemon's node id, random per start.
        node: u64,
        /// The daemon's name.
        name: String,
        /// The cluster name; daemons of different clusters do not link.
        cluster: String,
        /// The priority band this connection carries (the first connection
        /// of a link is on the daemon's default band).
        band: String,
        /// The sender's bands and their TCP ports, so the dialer can open
        /// one connection per band (at most 16).
        bands: Vec<(String, u16)>,
        /// The sender's bands and their UDP ports (link version 6, at most
        /// 16): a trailing list, absent when empty. Only an acceptor lists
        /// them, answering a dialer that said version 6 or more (an older
        /// daemon refuses bytes after `bands`), so that a dialer linked
        /// over UDP opens one UDP session per band.
        udp_bands: Vec<(String, u16)>,
    },
    /// One daemon's state, flooded to every daemon: a newer `version` from
    /// the same `origin` replaces the older.
    Advert {
        /// The daemon it describes.
        origin: u64,
        /// Increases with each change of that daemon's links or interest.
        version: u64,
        /// Its name.
        name: String,
        /// Its neighbours (node ids it has a link with).
        neighbors: Vec<u64>,
        /// Its local subscribers' interest, aggregated.
        interest: Vec<Interest>,
    },
    /// An event being routed.
    Forward {
        /// The daemon where it was published.
        origin: u64,
        /// Links it has crossed before this one.
        hops: u8,
        /// The encoded event (see [`crate::EventRef::parse`]).
        event: Bytes,
    },
    /// A clock probe (NTP's t1: the sender's clock when sent).
    TimeProbe {
        /// Echoed in the reply.
        id: u32,
        /// Sender's clock at sending, ns.
        t1: u64,
    },
    /// The answer to a clock probe.
    TimeReply {
        /// The probe's id.
        id: u32,
        /// The probe's t1.
        t1: u64,
        /// Replier's clock when the probe arrived, ns.
        t2: u64,
        /// Replier's clock when the reply was sent, ns.
        t3: u64,
    },
    /// A pull on its way to `target`, the daemon that keeps the history;
    /// each daemon on the way relays it and remembers `id` to route the
    /// answer back.
    PullRequest {
        /// Link-local request id, echoed in the `PullAnswer`.
        id: u32,
        /// The daemon that is to answer.
        target: u64,
        /// Links it has crossed before this one.
        hops: u8,
        /// The largest `PullReply` frame the asker accepts, in bytes (its
        /// client's negotiated frame limit): the answer is cut to fit.
        max_reply: u32,
        /// The client's pull (its `req` is not used on links).
        pull: crate::Pull,
    },
    /// The answer to `PullRequest` `id`.
    PullAnswer {
        /// The request's link-local id.
        id: u32,
        /// The reply or the refusal.
        outcome: PullOutcome,
    },
    /// A reliable event being routed (link version 3): like `Forward`,
    /// with the connection's next sequence number; the sender holds it until
    /// an [`LinkFrame::Ack`] settles it.
    Reliable {
        /// Per-connection sequence number, from 1, consecutive.
        seq: u64,
        /// The daemon where it was published.
        origin: u64,
        /// Links it has crossed before this one.
        hops: u8,
        /// The encoded event (see [`crate::EventRef::parse`]).
        event: Bytes,
    },
    /// Settles `Reliable` frames of this connection (link version 3).
    Ack(Ack),
    /// A reliable event addressed to daemon `to` (link version 7): one
    /// that `origin` held while `to` was unreachable and sends now that it
    /// is reachable again. Numbered, held and acknowledged like
    /// [`LinkFrame::Reliable`] (the same per-connection `seq`); daemons on
    /// the way pass it toward `to` without delivering it, `to` delivers it
    /// to its local subscribers only.
    ReliableTo {
        /// Per-connection sequence number (shared with `Reliable`), from 1.
        seq: u64,
        /// The daemon where it was published.
        origin: u64,
        /// Links it has crossed before this one.
        hops: u8,
        /// The daemon it is for.
        to: u64,
        /// The encoded event (see [`crate::EventRef::parse`]).
        event: Bytes,
    },
    /// One piece of an event larger than the frame (link version 4): the
    /// receiver puts the pieces of (`id`, `total`, `checksum`) together and
    /// handles the whole as `of` says.
    Fragment {
        /// The sender's id for the event, the same when it sends the event
        /// again (after a reconnect).
        id: u64,
        /// The event's length (≤ [`MAX_FRAGMENTED_EVENT`]).
        total: u64,
        /// CRC-32 (IEEE) of the whole event.
        checksum: u32,
        /// Where `data` starts in the event (`offset + data.len() ≤ total`).
        offset: u64,
        /// The frame the event belongs to.
        of: FragmentOf,
        /// The piece.
        data: Bytes,
    },
    /// A `Forward` or `Reliable` (as `of` says) whose encoded event is
    /// compressed (link version 5): the receiver decompresses `data` into
    /// exactly `raw_len` bytes, refusing a `raw_len` over its frame limit
    /// before it allocates, and handles the event as `of` says.
    Compressed {
        /// The frame the event belongs to (type `0x2b` for `Forward`,
        /// `0x2c` for `Reliable`).
        of: FragmentOf,
        /// How `data` is compressed.
        codec: Codec,
        /// The encoded event's length once decompressed.
        raw_len: u32,
        /// The compressed event.
        data: Bytes,
    },
    /// A [`LinkFrame::Fragment`] whose piece is compressed on its own (link
    /// version 7): `data` decompresses into exactly `raw_len` bytes of the
    /// event at `offset`. Everything else (`id`, `total`, `checksum`,
    /// `offset`, resume) is in the event's raw coordinates, as for a
    /// `Fragment`; the receiver refuses a `raw_len` over its frame limit
    /// before it allocates.
    FragmentCompressed {
        /// The sender's id for the event.
        id: u64,
        /// The event's (raw) length (≤ [`MAX_FRAGMENTED_EVENT`]).
        total: u64,
        /// CRC-32 (IEEE) of the whole raw event.
        checksum: u32,
        /// Where the piece starts in the raw event (`offset + raw_len ≤
        /// total`).
        offset: u64,
        /// The frame the event belongs to.
        of: FragmentOf,
        /// How `data` is compressed.
        codec: Codec,
        /// The piece's length once decompressed.
        raw_len: u32,
        /// The compressed piece.
        data: Bytes,
    },
    /// The receiver holds the first `have` bytes of event (`id`, `total`,
    /// `checksum`) (link version 4): the sender continues from there
    /// (`have` = `total`: it has all of it; 0: start again).
    FragmentResume {
        /// The event's id.
        id: u64,
        /// Its length.
        total: u64,
        /// Its checksum.
        checksum: u32,
        /// Bytes held from the start.
        have: u64,
    },
}

impl LinkFrame {
    /// The frame's type code.
    pub fn kind(&self) -> u8 {
        match self {
            LinkFrame::Peer { .. } => link_kind::PEER,
            LinkFrame::Advert { .. } => link_kind::ADVERT,
            LinkFrame::Forward { .. } => link_kind::FORWARD,
            LinkFrame::TimeProbe { .. } => link_kind::TIME_PROBE,
            LinkFrame::TimeReply { .. } => link_kind::TIME_REPLY,
            LinkFrame::PullRequest { .. } => link_kind::PULL_REQUEST,
            LinkFrame::PullAnswer { .. } => link_kind::PULL_ANSWER,
            LinkFrame::Reliable { .. } => link_kind::RELIABLE,
            LinkFrame::Ack(_) => link_kind::ACK,
            LinkFrame::ReliableTo { .. } => link_kind::RELIABLE_TO,
            LinkFrame::Fragment { .. } => link_kind::FRAGMENT,
            LinkFrame::FragmentResume { .. } => link_kind::FRAGMENT_RESUME,
            LinkFrame::FragmentCompressed { .. } => link_kind::FRAGMENT_COMPRESSED,
            LinkFrame::Compressed {
                of: FragmentOf::Forward { .. },
                ..
            } => link_kind::FORWARD_COMPRESSED,
            LinkFrame::Compressed {
                of: FragmentOf::Reliable { .. },
                ..
            } => link_kind::RELIABLE_COMPRESSED,
        }
    }

    /// Appends this frame, header included, to `out`; on error `out` is left
    /// as it was.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        let r = self.encode_inner(out, start);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn encode_inner(&self, out: &mut BytesMut, start: usize) -> Result<(), EncodeError> {
        out.put_u32_le(0);
        out.put_u8(self.kind());
        match self {
            LinkFrame::Peer {
                version,
                node,
                name,
                cluster,
                band,
                bands,
                udp_bands,
            } => {
                out.put_u16_le(*version);
                out.put_u64_le(*node);
                put_short(out, "daemon name", name)?;
                put_short(out, "cluster name", cluster)?;
                put_short(out, "band name", band)?;
                put_band_ports(out, "peer bands", bands)?;
                if !udp_bands.is_empty() {
                    put_band_ports(out, "peer UDP bands", udp_bands)?;
                }
            }
            LinkFrame::Advert {
                origin,
                version,
                name,
                neighbors,
                interest,
            } => {
                out.put_u64_le(*origin);
                out.put_u64_le(*version);
                put_short(out, "daemon name", name)?;
                put_count(
                    out,
                    "advert neighbours",
                    neighbors.len(),
                    MAX_ADVERT_NEIGHBORS,
                )?;
                for n in neighbors {
                    out.put_u64_le(*n);
                }
                put_count(out, "advert interest", interest.len(), MAX_ADVERT_INTEREST)?;
                for i in interest {
                    put_str16(out, "interest pattern", &i.pattern)?;
                    put_str16(out, "interest filter", &i.filter)?;
                    if i.scale == 0 {
                        return Err(EncodeError::BadValue {
                            what: "interest scale",
                            value: 0,
                        });
                    }
                    out.put_u32_le(i.scale);
                    match &i.proxy {
                        ProxyAt::Subscriber => out.put_u8(0),
                        ProxyAt::Publisher => out.put_u8(1),
                        ProxyAt::Node(n) => {
                            out.put_u8(2);
                            put_short(out, "proxy node name", n)?;
                        }
                    }
                }
            }
            LinkFrame::Forward {
                origin,
                hops,
                event,
            } => {
                out.put_u64_le(*origin);
                out.put_u8(*hops);
                out.put_slice(event);
            }
            LinkFrame::TimeProbe { id, t1 } => {
                out.put_u32_le(*id);
                out.put_u64_le(*t1);
            }
            LinkFrame::TimeReply { id, t1, t2, t3 } => {
                out.put_u32_le(*id);
                out.put_u64_le(*t1);
                out.put_u64_le(*t2);
                out.put_u64_le(*t3);
            }
            LinkFrame::PullRequest {
                id,
                target,
                hops,
                max_reply,
                pull,
            } => {
                out.put_u32_le(*id);
                out.put_u64_le(*target);
                out.put_u8(*hops);
                out.put_u32_le(*max_reply);
                pull.encode(out)?;
            }
            LinkFrame::PullAnswer { id, outcome } => {
                out.put_u32_le(*id);
                match outcome {
                    PullOutcome::Reply(reply) => {
                        out.put_u8(0);
                        reply.encode(out)?;
                    }
                    PullOutcome::Refused { code, message } => {
                        out.put_u8(1);
                        out.put_u16_le(code.code());
                        put_str16(
                            out,
                            "error message",
                            crate::excerpt::truncate(message, MAX_TEXT_LEN),
                        )?;
                    }
                }
            }
            LinkFrame::Reliable {
                seq,
                origin,
                hops,
                event,
            } => {
                out.put_u64_le(*seq);
                out.put_u64_le(*origin);
                out.put_u8(*hops);
                out.put_slice(event);
            }
            LinkFrame::Ack(ack) => ack.encode_body(out)?,
            LinkFrame::ReliableTo {
                seq,
                origin,
                hops,
                to,
                event,
            } => {
                if *seq == 0 {
                    return Err(EncodeError::BadValue {
                        what: "reliable sequence number",
                        value: 0,
                    });
                }
                out.put_u64_le(*seq);
                out.put_u64_le(*origin);
                out.put_u8(*hops);
                out.put_u64_le(*to);
                out.put_slice(event);
            }
            LinkFrame::Fragment {
                id,
                total,
                checksum,
                offset,
                of,
                data,
            } => {
                check_fragment(*total, *offset, data.len() as u64)?;
                put_fragment_head(out, *id, *total, *checksum, *offset, of)?;
                out.put_slice(data);
            }
            LinkFrame::FragmentCompressed {
                id,
                total,
                checksum,
                offset,
                of,
                codec,
                raw_len,
                data,
            } => {
                check_fragment(*total, *offset, u64::from(*raw_len))?;
                put_fragment_head(out, *id, *total, *checksum, *offset, of)?;
                out.put_u8(codec.code());
                out.put_u32_le(*raw_len);
                out.put_slice(data);
            }
            LinkFrame::FragmentResume {
                id,
                total,
                checksum,
                have,
            } => {
                check_fragment(*total, *have, 0)?;
                out.put_u64_le(*id);
                out.put_u64_le(*total);
                out.put_u32_le(*checksum);
                out.put_u64_le(*have);
            }
            LinkFrame::Compressed {
                of,
                codec,
                raw_len,
                data,
            } => {
                match *of {
                    FragmentOf::Forward { origin, hops } => {
                        out.put_u64_le(origin);
                        out.put_u8(hops);
                    }
                    FragmentOf::Reliable { seq, origin, hops } => {
                        if seq == 0 {
                            return Err(EncodeError::BadValue {
                                what: "reliable sequence number",
                                value: 0,
                            });
                        }
                        out.put_u64_le(seq);
                        out.put_u64_le(origin);
                        out.put_u8(hops);
                    }
                }
                out.put_u8(codec.code());
                out.put_u32_le(*raw_len);
                out.put_slice(data);
            }
        }
        patch_len(out, start)
    }

    /// Decodes a link frame from its type code and body. A `Forward`'s event
    /// shares `body` (no copy); it is not parsed here.
    pub fn decode(kind: u8, body: Bytes) -> Result<LinkFrame, DecodeError> {
        let mut r = Reader::new(&body);
        let frame = match kind {
            link_kind::PEER => {
                let version = r.u16("link version")?;
                let node = r.u64("node id")?;
                let name = r.short_str("daemon name")?.to_owned();
                let cluster = r.short_str("cluster name")?.to_owned();
                let band = r.short_str("band name")?.to_owned();
                let bands = band_ports(&mut r, "peer bands")?;
                // Link version 6: the UDP ports, if anything follows.
                let udp_bands = if r.pos() < body.len() {
                    band_ports(&mut r, "peer UDP bands")?
                } else {
                    Vec::new()
                };
                LinkFrame::Peer {
                    version,
                    node,
                    name,
                    cluster,
                    band,
                    bands,
                    udp_bands,
                }
            }
            link_kind::ADVERT => {
                let origin = r.u64("advert origin")?;
                let version = r.u64("advert version")?;
                let name = r.short_str("daemon name")?.to_owned();
                let n = count(&mut r, "advert neighbours", MAX_ADVERT_NEIGHBORS)?;
                let mut neighbors = Vec::with_capacity(n);
                for _ in 0..n {
                    neighbors.push(r.u64("neighbour id")?);
                }
                let n = count(&mut r, "advert interest", MAX_ADVERT_INTEREST)?;
                let mut interest = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    let pattern = r.str16(MAX_TEXT_LEN, "interest pattern")?.to_owned();
                    let filter = r.str16(MAX_TEXT_LEN, "interest filter")?.to_owned();
                    let scale = r.u32("interest scale")?;
                    if scale == 0 {
                        return Err(DecodeError::BadValue {
                            what: "interest scale",
                            value: 0,
                        });
                    }
                    let proxy = match r.u8("proxy place")? {
                        0 => ProxyAt::Subscriber,
                        1 => ProxyAt::Publisher,
                        2 => ProxyAt::Node(r.short_str("proxy node name")?.to_owned()),
                        v => {
                            return Err(DecodeError::BadValue {
                                what: "proxy place",
                                value: v as u64,
                            })
                        }
                    };
                    interest.push(Interest {
                        pattern,
                        filter,
                        scale,
                        proxy,
                    });
                }
                LinkFrame::Advert {
                    origin,
                    version,
                    name,
                    neighbors,
                    interest,
                }
            }
            link_kind::FORWARD => {
                let origin = r.u64("forward origin")?;
                let hops = r.u8("hop count")?;
                return Ok(LinkFrame::Forward {
                    origin,
                    hops,
                    event: body.slice(9..),
                });
            }
            link_kind::TIME_PROBE => LinkFrame::TimeProbe {
                id: r.u32("probe id")?,
                t1: r.u64("t1")?,
            },
            link_kind::TIME_REPLY => LinkFrame::TimeReply {
                id: r.u32("probe id")?,
                t1: r.u64("t1")?,
                t2: r.u64("t2")?,
                t3: r.u64("t3")?,
            },
            link_kind::PULL_REQUEST => LinkFrame::PullRequest {
                id: r.u32("pull request id")?,
                target: r.u64("pull target")?,
                hops: r.u8("hop count")?,
                max_reply: r.u32("largest reply")?,
                pull: crate::Pull::decode(&mut r)?,
            },
            link_kind::PULL_ANSWER => {
                let id = r.u32("pull request id")?;
                let outcome = match r.u8("pull outcome")? {
                    0 => {
                        // The reply is the rest of the body, parsed by its own codec.
                        return Ok(LinkFrame::PullAnswer {
                            id,
                            outcome: PullOutcome::Reply(crate::PullReply::decode(
                                &body.slice(5..),
                            )?),
                        });
                    }
                    1 => PullOutcome::Refused {
                        code: crate::ErrorCode::from_code(r.u16("error code")?),
                        message: r.str16(MAX_TEXT_LEN, "error message")?.to_owned(),
                    },
                    v => {
                        return Err(DecodeError::BadValue {
                            what: "pull outcome",
                            value: v as u64,
                        })
                    }
                };
                LinkFrame::PullAnswer { id, outcome }
            }
            link_kind::RELIABLE => {
                let seq = r.u64("reliable sequence number")?;
                if seq == 0 {
                    return Err(DecodeError::BadValue {
                        what: "reliable sequence number",
                        value: 0,
                    });
                }
                let origin = r.u64("forward origin")?;
                let hops = r.u8("hop count")?;
                return Ok(LinkFrame::Reliable {
                    seq,
                    origin,
                    hops,
                    event: body.slice(17..),
                });
            }
            link_kind::ACK => LinkFrame::Ack(Ack::decode_body(&mut r)?),
            link_kind::RELIABLE_TO => {
                let seq = r.u64("reliable sequence number")?;
                if seq == 0 {
                    return Err(DecodeError::BadValue {
                        what: "reliable sequence number",
                        value: 0,
                    });
                }
                let origin = r.u64("forward origin")?;
                let hops = r.u8("hop count")?;
                let to = r.u64("reliable destination daemon")?;
                return Ok(LinkFrame::ReliableTo {
                    seq,
                    origin,
                    hops,
                    to,
                    event: body.slice(RELIABLE_TO_FIELDS_LEN..),
                });
            }
            link_kind::FORWARD_COMPRESSED | link_kind::RELIABLE_COMPRESSED => {
                let of = if kind == link_kind::FORWARD_COMPRESSED {
                    FragmentOf::Forward {
                        origin: r.u64("forward origin")?,
                        hops: r.u8("hop count")?,
                    }
                } else {
                    let seq = r.u64("reliable sequence number")?;
                    if seq == 0 {
                        return Err(DecodeError::BadValue {
                            what: "reliable sequence number",
                            value: 0,
                        });
                    }
                    FragmentOf::Reliable {
                        seq,
                        origin: r.u64("forward origin")?,
                        hops: r.u8("hop count")?,
                    }
                };
                let code = r.u8("compression codec")?;
                let codec = Codec::from_code(code).ok_or(DecodeError::BadValue {
                    what: "compression codec (1 lz4, 2 zstd)",
                    value: code as u64,
                })?;
                let raw_len = r.u32("decompressed length")?;
                let used = r.pos();
                return Ok(LinkFrame::Compressed {
                    of,
                    codec,
                    raw_len,
                    data: body.slice(used..),
                });
            }
            link_kind::FRAGMENT | link_kind::FRAGMENT_COMPRESSED => {
                let (id, total, checksum, offset, of) = fragment_head(&mut r)?;
                let compressed = if kind == link_kind::FRAGMENT_COMPRESSED {
                    let code = r.u8("compression codec")?;
                    let codec = Codec::from_code(code).ok_or(DecodeError::BadValue {
                        what: "compression codec (1 lz4, 2 zstd)",
                        value: code as u64,
                    })?;
                    Some((codec, r.u32("decompressed piece length")?))
                } else {
                    None
                };
                let data = body.slice(r.pos()..);
                let raw_len = compressed.map_or(data.len() as u64, |(_, n)| u64::from(n));
                check_fragment(total, offset, raw_len).map_err(|e| match e {
                    EncodeError::BadValue { what, value } => DecodeError::BadValue { what, value },
                    _ => DecodeError::BadValue {
                        what: "fragment",
                        value: offset,
                    },
                })?;
                return Ok(match compressed {
                    None => LinkFrame::Fragment {
                        id,
                        total,
                        checksum,
                        offset,
                        of,
                        data,
                    },
                    Some((codec, raw_len)) => LinkFrame::FragmentCompressed {
                        id,
                        total,
                        checksum,
                        offset,
                        of,
                        codec,
                        raw_len,
                        data,
                    },
                });
            }
            link_kind::FRAGMENT_RESUME => {
                let id = r.u64("fragment id")?;
                let total = r.u64("fragment total length")?;
                let checksum = r.u32("fragment checksum")?;
                let have = r.u64("fragment resume point")?;
                check_fragment(total, have, 0).map_err(|e| match e {
                    EncodeError::BadValue { what, value } => DecodeError::BadValue { what, value },
                    _ => DecodeError::BadValue {
                        what: "fragment resume point",
                        value: have,
                    },
                })?;
                LinkFrame::FragmentResume {
                    id,
                    total,
                    checksum,
                    have,
                }
            }
            other => return Err(DecodeError::UnknownFrameType(other)),
        };
        r.finish(link_frame_name(kind))?;
        Ok(frame)
    }
}

/// The name of a link frame type, for messages.
pub fn link_frame_name(kind: u8) -> &'static str {
    match kind {
        link_kind::PEER => "Peer",
        link_kind::ADVERT => "Advert",
        link_kind::FORWARD => "Forward",
        link_kind::TIME_PROBE => "TimeProbe",
        link_kind::TIME_REPLY => "TimeReply",
        link_kind::PULL_REQUEST => "PullRequest",
        link_kind::PULL_ANSWER => "PullAnswer",
        link_kind::RELIABLE => "Reliable",
        link_kind::ACK => "Ack",
        link_kind::RELIABLE_TO => "ReliableTo",
        link_kind::FRAGMENT => "Fragment",
        link_kind::FRAGMENT_RESUME => "FragmentResume",
        link_kind::FORWARD_COMPRESSED => "ForwardCompressed",
        link_kind::RELIABLE_COMPRESSED => "ReliableCompressed",
        link_kind::FRAGMENT_COMPRESSED => "FragmentCompressed",
        _ => "unknown link frame",
    }
}

/// The bytes that precede an encoded event of `event_len` bytes in a
/// `Forward` frame: the router writes this prefix and the shared event bytes
/// with one vectored write, as for `Deliver`.
pub fn forward_prefix(origin: u64, hops: u8, event_len: usize) -> [u8; FORWARD_PREFIX_LEN] {
    let mut p = [0u8; FORWARD_PREFIX_LEN];
    let len = (1 + 8 + 1 + event_len) as u32;
    p[..4].copy_from_slice(&len.to_le_bytes());
    p[4] = link_kind::FORWARD;
    p[5..13].copy_from_slice(&origin.to_le_bytes());
    p[13] = hops;
    p
}

/// The fields every piece starts with (`Fragment`, `FragmentCompressed`):
/// `u64 id`, `u64 total`, `u32 checksum`, `u64 offset`, `u8 kind`, `u64
/// seq` (0 for a `Forward`), `u64 origin`, `u8 hops`.
fn put_fragment_head(
    out: &mut BytesMut,
    id: u64,
    total: u64,
    checksum: u32,
    offset: u64,
    of: &FragmentOf,
) -> Result<(), EncodeError> {
    out.put_u64_le(id);
    out.put_u64_le(total);
    out.put_u32_le(checksum);
    out.put_u64_le(offset);
    match *of {
        FragmentOf::Forward { origin, hops } => {
            out.put_u8(link_kind::FORWARD);
            out.put_u64_le(0);
            out.put_u64_le(origin);
            out.put_u8(hops);
        }
        FragmentOf::Reliable { seq, origin, hops } => {
            if seq == 0 {
                return Err(EncodeError::BadValue {
                    what: "reliable sequence number",
                    value: 0,
                });
            }
            out.put_u8(link_kind::RELIABLE);
            out.put_u64_le(seq);
            out.put_u64_le(origin);
            out.put_u8(hops);
        }
    }
    Ok(())
}

/// Reads what [`put_fragment_head`] writes.
fn fragment_head(r: &mut Reader<'_>) -> Result<(u64, u64, u32, u64, FragmentOf), DecodeError> {
    let id = r.u64("fragment id")?;
    let total = r.u64("fragment total length")?;
    let checksum = r.u32("fragment checksum")?;
    let offset = r.u64("fragment offset")?;
    let kind = r.u8("fragment frame kind")?;
    let seq = r.u64("reliable sequence number")?;
    let origin = r.u64("forward origin")?;
    let hops = r.u8("hop count")?;
    let of = match (kind, seq) {
        (link_kind::FORWARD, 0) => FragmentOf::Forward { origin, hops },
        (link_kind::FORWARD, s) => {
            return Err(DecodeError::BadValue {
                what: "sequence number of a Forward fragment (must be 0)",
                value: s,
            })
        }
        (link_kind::RELIABLE, 0) => {
            return Err(DecodeError::BadValue {
                what: "reliable sequence number",
                value: 0,
            })
        }
        (link_kind::RELIABLE, seq) => FragmentOf::Reliable { seq, origin, hops },
        (k, _) => {
            return Err(DecodeError::BadValue {
                what: "fragment frame kind (0x22 Forward or 0x27 Reliable)",
                value: k as u64,
            })
        }
    };
    Ok((id, total, checksum, offset, of))
}

/// A fragment's (or resume point's) bounds: `total` ≤ 4 GiB and
/// `offset + len ≤ total`.
fn check_fragment(total: u64, offset: u64, len: u64) -> Result<(), EncodeError> {
    if total > MAX_FRAGMENTED_EVENT {
        return Err(EncodeError::BadValue {
            what: "fragmented event length (over 4 GiB)",
            value: total,
        });
    }
    if offset > total || len > total - offset {
        return Err(EncodeError::BadValue {
            what: "fragment offset (the piece reaches past the event's end)",
            value: offset,
        });
    }
    Ok(())
}

fn put_count(
    out: &mut BytesMut,
    what: &'static str,
    n: usize,
    max: usize,
) -> Result<(), EncodeError> {
    if n > max {
        return Err(EncodeError::TooLong { what, len: n, max });
    }
    out.put_u16_le(n as u16);
    Ok(())
}

/// A `Peer`'s list of (band, port): `u8 n` (at most [`MAX_PEER_BANDS`]) and
/// n × (str8 band, u16 port).
fn put_band_ports(
    out: &mut BytesMut,
    what: &'static str,
    ports: &[(String, u16)],
) -> Result<(), EncodeError> {
    if ports.len() > MAX_PEER_BANDS {
        return Err(EncodeError::TooLong {
            what,
            len: ports.len(),
            max: MAX_PEER_BANDS,
        });
    }
    out.put_u8(ports.len() as u8);
    for (b, port) in ports {
        put_short(out, "band name", b)?;
        out.put_u16_le(*port);
    }
    Ok(())
}

/// Reads what [`put_band_ports`] wrote.
fn band_ports(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<(String, u16)>, DecodeError> {
    let n = r.u8(what)? as usize;
    if n > MAX_PEER_BANDS {
        return Err(DecodeError::TooLong {
            what,
            len: n,
            max: MAX_PEER_BANDS,
        });
    }
    let mut ports = Vec::with_capacity(n);
    for _ in 0..n {
        ports.push((r.short_str("band name")?.to_owned(), r.u16("band port")?));
    }
    Ok(ports)
}

fn count(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<usize, DecodeError> {
    let n = r.u16(what)? as usize;
    if n > max {
        return Err(DecodeError::TooLong { what, len: n, max });
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameDecoder;
    use proptest::prelude::*;

    fn roundtrip(f: &LinkFrame) -> LinkFrame {
        let mut buf = BytesMut::new();
        f.encode(&mut buf).expect("encodable");
        let (k, body) = FrameDecoder::new(1 << 24)
            .next_raw(&mut buf)
            .expect("framed")
            .expect("whole");
        LinkFrame::decode(k, body).expect("decodes")
    }

    fn peer(udp_bands: Vec<(String, u16)>) -> LinkFrame {
        LinkFrame::Peer {
            version: LINK_VERSION,
            node: 9,
            name: "a".into(),
            cluster: "tagwire".into(),
            band: "normal".into(),
            bands: vec![("high".into(), 7701)],
            udp_bands,
        }
    }

    #[test]
    fn a_peer_without_udp_bands_ends_after_its_tcp_bands_as_version_5_did() {
        let mut buf = BytesMut::new();
        peer(vec![]).encode(&mut buf).expect("encodable");
        // length, type, version, node, "a", "tagwire", "normal", 1 band.
        let tcp_bands_end = 4 + 1 + 2 + 8 + 2 + 8 + 7 + 1 + 7;
        assert_eq!(buf.len(), tcp_bands_end, "nothing after the TCP bands");
        let with = peer(vec![("high".into(), 7711)]);
        assert_eq!(roundtrip(&with), with);
        assert_eq!(roundtrip(&peer(vec![])), peer(vec![]));
    }

    #[test]
    fn a_peer_listing_more_than_16_udp_bands_is_refused_both_ways() {
        let many: Vec<(String, u16)> = (0..17).map(|i| (format!("b{i}"), 1)).collect();
        let mut buf = BytesMut::new();
        let e = peer(many).encode(&mut buf).expect_err("too many");
        assert!(e.to_string().contains("peer UDP bands"), "{e}");
        let mut body = BytesMut::new();
        peer(vec![]).encode(&mut body).expect("encodable");
        let mut body = body.split_off(FRAME_HEADER_LEN);
        body.put_u8(17);
        let e = LinkFrame::decode(link_kind::PEER, body.freeze()).expect_err("too many");
        assert!(e.to_string().contains("peer UDP bands"), "{e}");
    }

    fn fragment_body(total: u64, offset: u64, kind: u8, seq: u64, data: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u64_le(7);
        b.put_u64_le(total);
        b.put_u32_le(0xdead_beef);
        b.put_u64_le(offset);
        b.put_u8(kind);
        b.put_u64_le(seq);
        b.put_u64_le(1);
        b.put_u8(0);
        b.put_slice(data);
        b.freeze()
    }

    #[test]
    fn the_fragment_prefix_is_the_bytes_before_its_data() {
        let f = LinkFrame::Fragment {
            id: 1,
            total: 3,
            checksum: 2,
            offset: 0,
            of: FragmentOf::Reliable {
                seq: 1,
                origin: 2,
                hops: 0,
            },
            data: Bytes::from_static(b"abc"),
        };
        let mut buf = BytesMut::new();
        f.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), FRAGMENT_PREFIX_LEN + 3);
    }

    #[test]
    fn a_compressed_piece_has_a_fragments_prefix_then_codec_and_raw_length() {
        let f = LinkFrame::FragmentCompressed {
            id: 1,
            total: 100,
            checksum: 2,
            offset: 90,
            of: FragmentOf::Reliable {
                seq: 1,
                origin: 2,
                hops: 0,
            },
            codec: Codec::Lz4,
            raw_len: 10,
            data: Bytes::from_static(b"abc"),
        };
        let mut buf = BytesMut::new();
        f.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), FRAGMENT_COMPRESSED_PREFIX_LEN + 3);
        assert_eq!(buf[4], link_kind::FRAGMENT_COMPRESSED);
        assert_eq!(buf[FRAGMENT_PREFIX_LEN], Codec::Lz4.code());
        // Its raw length reaches past the event's end: refused both ways,
        // though its compressed bytes would fit.
        let mut past = f.clone();
        if let LinkFrame::FragmentCompressed { raw_len, .. } = &mut past {
            *raw_len = 11;
        }
        let e = past.encode(&mut BytesMut::new()).unwrap_err().to_string();
        assert!(e.contains("fragment offset"), "{e}");
        let mut body = buf[5..].to_vec();
        let at = FRAGMENT_PREFIX_LEN - 5 + 1;
        body[at..at + 4].copy_from_slice(&11u32.to_le_bytes());
        let e = LinkFrame::decode(link_kind::FRAGMENT_COMPRESSED, Bytes::from(body.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fragment offset"), "{e}");
        // An unknown codec.
        body[at - 1] = 9;
        let e = LinkFrame::decode(link_kind::FRAGMENT_COMPRESSED, Bytes::from(body))
            .unwrap_err()
            .to_string();
        assert!(e.contains("compression codec"), "{e}");
        assert_eq!(
            link_frame_name(link_kind::FRAGMENT_COMPRESSED),
            "FragmentCompressed"
        );
    }

    #[test]
    fn a_fragment_out_of_its_bounds_is_refused_naming_the_field() {
        let d = |b| {
            LinkFrame::decode(link_kind::FRAGMENT, b)
                .unwrap_err()
                .to_string()
        };
        // Past the end of its event.
        let e = d(fragment_body(4, 2, link_kind::RELIABLE, 1, b"xyz"));
        assert!(e.contains("fragment offset"), "{e}");
        // Over 4 GiB.
        let e = d(fragment_body(
            MAX_FRAGMENTED_EVENT + 1,
            0,
            link_kind::FORWARD,
            0,
            b"x",
        ));
        assert!(e.contains("over 4 GiB"), "{e}");
        // A kind that is neither Forward nor Reliable.
        let e = d(fragment_body(4, 0, 0x06, 0, b"x"));
        assert!(e.contains("fragment frame kind"), "{e}");
        // A Reliable piece with sequence number 0, a Forward piece with one.
        let e = d(fragment_body(4, 0, link_kind::RELIABLE, 0, b"x"));
        assert!(e.contains("reliable sequence number"), "{e}");
        let e = d(fragment_body(4, 0, link_kind::FORWARD, 5, b"x"));
        assert!(e.contains("must be 0"), "{e}");
        // Truncated before its data.
        let e = d(fragment_body(4, 0, link_kind::FORWARD, 0, b"").slice(..30));
        assert!(
            e.contains("truncated") || e.contains("Truncated") || e.contains("bytes"),
            "{e}"
        );
        // A resume point past the end.
        let mut b = BytesMut::new();
        b.put_u64_le(7);
        b.put_u64_le(10);
        b.put_u32_le(0);
        b.put_u64_le(11);
        let e = LinkFrame::decode(link_kind::FRAGMENT_RESUME, b.freeze())
            .unwrap_err()
            .to_string();
        assert!(e.contains("fragment"), "{e}");
    }

    #[test]
    fn the_forward_prefix_is_what_encode_writes_before_the_event() {
        let f = LinkFrame::Forward {
            origin: 0x0102_0304_0506_0708,
            hops: 3,
            event: Bytes::from_static(b"event-bytes"),
        };
        let mut buf = BytesMut::new();
        f.encode(&mut buf).expect("encodable");
        assert_eq!(
            &buf[..FORWARD_PREFIX_LEN],
            &forward_prefix(0x0102_0304_0506_0708, 3, 11)
        );
        assert_eq!(&buf[FORWARD_PREFIX_LEN..], b"event-bytes");
    }

    #[test]
    fn an_advert_over_its_bounds_is_refused_both_ways() {
        let f = LinkFrame::Advert {
            origin: 1,
            version: 1,
            name: "a".into(),
            neighbors: vec![0; MAX_ADVERT_NEIGHBORS + 1],
            interest: vec![],
        };
        assert!(f.encode(&mut BytesMut::new()).is_err());
        let mut body = BytesMut::new();
        body.put_u64_le(1);
        body.put_u64_le(1);
        body.put_u8(0);
        body.put_u16_le((MAX_ADVERT_NEIGHBORS + 1) as u16);
        let e = LinkFrame::decode(link_kind::ADVERT, body.freeze()).unwrap_err();
        assert!(e.to_string().contains("neighbours"), "{e}");
    }

    fn frames() -> impl Strategy<Value = LinkFrame> {
        let interest =
            (("[/a-z*]{1,20}"), ("[ a-z=<>0-9]{0,20}")).prop_map(|(pattern, filter)| Interest {
                pattern,
                filter,
                scale: 1,
                proxy: ProxyAt::Subscriber,
            });
        let interest = (
            interest,
            1u32..100,
            prop_oneof![
                Just(ProxyAt::Subscriber),
                Just(ProxyAt::Publisher),
                "[a-z]{1,8}".prop_map(ProxyAt::Node)
            ],
        )
            .prop_map(|(i, scale, proxy)| Interest { scale, proxy, ..i });
        prop_oneof![
            (
                any::<u16>(),
                any::<u64>(),
                "[a-z]{0,10}",
                "[a-z]{0,10}",
                "[a-z]{0,10}",
                prop::collection::vec(("[a-z]{1,8}", any::<u16>()), 0..4),
                prop::collection::vec(("[a-z]{1,8}", any::<u16>()), 0..4)
            )
                .prop_map(|(version, node, name, cluster, band, bands, udp_bands)| {
                    LinkFrame::Peer {
                        version,
                        node,
                        name,
                        cluster,
                        band,
                        bands,
                        udp_bands,
                    }
                }),
            (
                any::<u64>(),
                any::<u64>(),
                "[a-z]{0,10}",
                prop::collection::vec(any::<u64>(), 0..8),
                prop::collection::vec(interest, 0..8)
            )
                .prop_map(|(origin, version, name, neighbors, interest)| {
                    LinkFrame::Advert {
                        origin,
                        version,
                        name,
                        neighbors,
                        interest,
                    }
                }),
            (
                any::<u64>(),
                any::<u8>(),
                prop::collection::vec(any::<u8>(), 0..64)
            )
                .prop_map(|(origin, hops, e)| LinkFrame::Forward {
                    origin,
                    hops,
                    event: Bytes::from(e)
                }),
            (any::<u32>(), any::<u64>()).prop_map(|(id, t1)| LinkFrame::TimeProbe { id, t1 }),
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>())
                .prop_map(|(id, t1, t2, t3)| LinkFrame::TimeReply { id, t1, t2, t3 }),
            (
                any::<u32>(),
                any::<u64>(),
                any::<u8>(),
                "[a-z]{0,8}",
                "/[a-z]{1,8}",
                any::<u64>()
            )
                .prop_map(|(id, target, hops, node, tag, seq)| {
                    LinkFrame::PullRequest {
                        id,
                        target,
                        hops,
                        max_reply: 65_536,
                        pull: crate::Pull {
                            req: 0,
                            node,
                            publisher: String::new(),
                            tag,
                            query: crate::PullQuery::Seq(seq),
                        },
                    }
                }),
            (
                any::<u32>(),
                0u64..1000,
                prop::collection::vec(prop::collection::vec(any::<u8>(), 0..16), 0..3)
            )
                .prop_map(|(id, oldest, events)| LinkFrame::PullAnswer {
                    id,
                    outcome: PullOutcome::Reply(crate::PullReply {
                        req: 0,
                        status: crate::PullStatus::Complete,
                        oldest,
                        newest: oldest + 5,
                        held: 6,
                        events: events.into_iter().map(Bytes::from).collect(),
                    }),
                }),
            (
                1u64..,
                any::<u64>(),
                any::<u8>(),
                prop::collection::vec(any::<u8>(), 0..64)
            )
                .prop_map(|(seq, origin, hops, e)| LinkFrame::Reliable {
                    seq,
                    origin,
                    hops,
                    event: Bytes::from(e)
                }),
            (
                1u64..,
                any::<u64>(),
                any::<u8>(),
                any::<u64>(),
                prop::collection::vec(any::<u8>(), 0..64)
            )
                .prop_map(|(seq, origin, hops, to, e)| LinkFrame::ReliableTo {
                    seq,
                    origin,
                    hops,
                    to,
                    event: Bytes::from(e)
                }),
            (
                any::<u64>(),
                prop::collection::vec(
                    (any::<u64>(), 0u64..1000, any::<bool>()),
                    0..=MAX_ACK_RANGES
                )
            )
                .prop_map(|(done, ranges)| LinkFrame::Ack(Ack {
                    done,
                    ranges: ranges
                        .into_iter()
                        .map(|(first, len, failed)| AckRange {
                            first,
                            last: first.saturating_add(len),
                            failed
                        })
                        .collect()
                })),
            (any::<u32>(), any::<u16>(), "[a-z ]{0,20}").prop_map(|(id, code, message)| {
                LinkFrame::PullAnswer {
                    id,
                    outcome: PullOutcome::Refused {
                        code: crate::ErrorCode::from_code(code),
                        message,
                    },
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn decode_of_encode_is_the_frame(f in frames()) {
            prop_assert_eq!(roundtrip(&f), f);
        }

        /// Every valid fragment and resume frame decodes to itself.
        #[test]
        fn fragments_roundtrip(
            id in any::<u64>(),
            total in 0u64..=MAX_FRAGMENTED_EVENT,
            checksum in any::<u32>(),
            at in any::<u64>(),
            data in prop::collection::vec(any::<u8>(), 0..64),
            seq in any::<u64>(),
            origin in any::<u64>(),
            hops in any::<u8>(),
        ) {
            let len = (data.len() as u64).min(total);
            let offset = at % (total - len + 1);
            let of = if seq == 0 { FragmentOf::Forward { origin, hops } } else { FragmentOf::Reliable { seq, origin, hops } };
            let f = LinkFrame::Fragment { id, total, checksum, offset, of, data: Bytes::from(data[..len as usize].to_vec()) };
            prop_assert_eq!(roundtrip(&f), f);
            let r = LinkFrame::FragmentResume { id, total, checksum, have: offset };
            prop_assert_eq!(roundtrip(&r), r);
        }

        /// Every valid compressed piece decodes to itself: its raw length,
        /// not its compressed bytes, is what must fit in the event.
        #[test]
        fn compressed_fragments_roundtrip(
            id in any::<u64>(),
            total in 0u64..=MAX_FRAGMENTED_EVENT,
            checksum in any::<u32>(),
            at in any::<u64>(),
            raw in any::<u32>(),
            data in prop::collection::vec(any::<u8>(), 0..64),
            seq in any::<u64>(),
            origin in any::<u64>(),
            hops in any::<u8>(),
            zstd in any::<bool>(),
        ) {
            let raw_len = (u64::from(raw)).min(total);
            let offset = at % (total - raw_len + 1);
            let of = if seq == 0 { FragmentOf::Forward { origin, hops } } else { FragmentOf::Reliable { seq, origin, hops } };
            let codec = if zstd { Codec::Zstd } else { Codec::Lz4 };
            let f = LinkFrame::FragmentCompressed { id, total, checksum, offset, of, codec, raw_len: raw_len as u32, data: Bytes::from(data) };
            prop_assert_eq!(roundtrip(&f), f);
        }

        #[test]
        fn arbitrary_bodies_never_panic(kind in 0x20u8..=0x2f, body in prop::collection::vec(any::<u8>(), 0..128)) {
            let _ = LinkFrame::decode(kind, Bytes::from(body));
        }
    }
}
