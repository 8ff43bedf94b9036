//! Datagrams: the unit of the UDP transport (`udp://HOST:PORT`). One UDP
//! datagram is a 16-byte header — magic `TD`, version, kind, the session id
//! the daemon assigned and a per-session, per-direction sequence number —
//! followed by a kind-specific body. A `Data` datagram's body is whole
//! frames of the stream protocol (`u32 length | type | body`, exactly as
//! over TCP), then optional zero padding; a frame never spans two
//! datagrams, so a lost datagram loses whole frames and the stream that
//! remains still splits into frames. See `docs/protocol.md`, "Datagrams".
//!
//! Opening a session proves the client's address first (a stateless
//! cookie, as QUIC's Retry and DTLS's HelloVerifyRequest do) and the daemon
//! never answers an unproven address with more bytes than it received:
//! `Open` is padded to [`MIN_OPEN_LEN`], `Cookie` is 41 bytes.
//!
//! ```
//! use bytes::BytesMut;
//! use tagwire_proto::datagram::{Datagram, DatagramKind, Header};
//! let mut d = BytesMut::new();
//! Header { kind: DatagramKind::Data, session: 7, seq: 1 }.encode(&mut d);
//! tagwire_proto::Frame::Ping { nonce: 9 }.encode(&mut d).unwrap();
//! let parsed = Datagram::parse(&d).unwrap();
//! assert_eq!(parsed.header.seq, 1);
//! assert_eq!(parsed.frames().unwrap().count(), 1);
//! ```

use bytes::BufMut;
use thiserror::Error;

/// The two bytes every datagram starts with.
pub const DATAGRAM_MAGIC: [u8; 2] = *b"TD";
/// The datagram format's version (byte 2).
pub const DATAGRAM_VERSION: u8 = 1;
/// Bytes of the header before the body.
pub const HEADER_LEN: usize = 16;
/// Bytes of an address cookie.
pub const COOKIE_LEN: usize = 24;
/// The smallest `Open` datagram a daemon answers (anti-amplification: its
/// answers to an unproven address are never larger than this).
pub const MIN_OPEN_LEN: usize = 1200;
/// The default largest datagram (header + frames): fits a 1,500-byte
/// Ethernet MTU under IPv4 or IPv6 and UDP headers.
pub const DEFAULT_MAX_DATAGRAM: usize = 1400;
/// The smallest `max_datagram` a daemon or client accepts: room for every
/// handshake frame (a version-3 `Hello` is at most 352 bytes).
pub const MIN_MAX_DATAGRAM: usize = 512;
/// The largest `max_datagram`: a UDP payload over IPv4.
pub const HARD_MAX_DATAGRAM: usize = 65_507;
/// The largest datagram that carries one control frame (anything but
/// `Publish` and `Deliver`) too large for `max_datagram`: it goes alone,
/// and IP fragments it (events never do).
pub const CONTROL_MAX_DATAGRAM: usize = 16 * 1024;
/// Bytes of a `Report` body: five `u64` counters.
pub const REPORT_LEN: usize = 40;

/// Feature bit: acknowledged datagrams (`AckedData`, `DataAck`). A client
/// offers features in its `Open`'s `session` field (old daemons ignore
/// it); the daemon answers with those it takes in its `Accept`'s `seq`
/// field (0 to a client that offered none, so old clients see what they
/// expect).
pub const FEATURE_ACKED: u32 = 1;

/// What a datagram carries (byte 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatagramKind {
    /// Whole frames of the session (either way).
    Data,
    /// Client → daemon: open a session (with the cookie, or asking for one);
    /// padded to at least [`MIN_OPEN_LEN`] bytes.
    Open,
    /// Daemon → client: the address cookie to repeat in the next `Open`.
    Cookie,
    /// Daemon → client: the session is open; the header carries its id.
    Accept,
    /// Daemon → client: the session id is unknown here (the daemon
    /// restarted, or the session timed out): open a new one.
    Reset,
    /// Either way: the sender's receive counters for the session (so that
    /// each side's `tagwire list` shows the loss the other side saw).
    Report,
    /// Daemon → multicast group: one event, MAC'd (`session` is the
    /// sender's node id, `seq` its per-group sequence number).
    Group,
    /// Daemon → multicast group: "node `session` is a member", MAC'd.
    Member,
    /// Either way: which of the peer's `Data` sequence numbers the sender
    /// gave up as lost and which arrived late ([`Gaps`]), so that the peer,
    /// which knows what each datagram carried, counts the loss per channel.
    Gaps,
    /// Either way, in a session that agreed on [`FEATURE_ACKED`]: whole
    /// frames that must arrive (everything but best-effort `Publish` and
    /// `Deliver`), numbered in their own sequence (`seq` from 1),
    /// acknowledged by `DataAck`, sent again until acknowledged and handed
    /// on in order, once.
    AckedData,
    /// Either way: which `AckedData` sequence numbers arrived ([`DataAck`]:
    /// all up to one, and ranges above it).
    DataAck,
}

impl DatagramKind {
    /// Its code on the wire.
    pub fn code(self) -> u8 {
        match self {
            DatagramKind::Data => 0,
            DatagramKind::Open => 1,
            DatagramKind::Cookie => 2,
            DatagramKind::Accept => 3,
            DatagramKind::Reset => 4,
            DatagramKind::Report => 5,
            DatagramKind::Group => 6,
            DatagramKind::Member => 7,
            DatagramKind::Gaps => 8,
            DatagramKind::AckedData => 9,
            DatagramKind::DataAck => 10,
        }
    }

    /// The kind with wire code `c`, if any.
    pub fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => DatagramKind::Data,
            1 => DatagramKind::Open,
            2 => DatagramKind::Cookie,
            3 => DatagramKind::Accept,
            4 => DatagramKind::Reset,
            5 => DatagramKind::Report,
            6 => DatagramKind::Group,
            7 => DatagramKind::Member,
            8 => DatagramKind::Gaps,
            9 => DatagramKind::AckedData,
            10 => DatagramKind::DataAck,
            _ => return None,
        })
    }
}

/// A datagram that cannot be used. Each variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DatagramError {
    /// Shorter than the header.
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated {
        /// Its length.
        len: usize,
    },
    /// Not a tagwire datagram.
    #[error("not a tagwire datagram (magic {got:02x?}, expected 54 44 \"TD\")")]
    BadMagic {
        /// The first two bytes.
        got: [u8; 2],
    },
    /// A format version this side does not speak.
    #[error("datagram version {version} is not supported (this side speaks {DATAGRAM_VERSION})")]
    UnsupportedVersion {
        /// The version byte.
        version: u8,
    },
    /// An unknown kind byte.
    #[error("unknown datagram kind {kind}")]
    UnknownKind {
        /// The kind byte.
        kind: u8,
    },
    /// A frame whose length runs past the end of the datagram.
    #[error("frame at offset {at} claims {len} bytes but only {left} remain in the datagram")]
    FrameOverrun {
        /// Offset of its length field in the body.
        at: usize,
        /// Its `length` field.
        len: usize,
        /// Bytes left after the length field.
        left: usize,
    },
    /// A frame cut inside its length field.
    #[error("frame length at offset {at} is cut off ({left} of 4 bytes)")]
    CutLength {
        /// Offset in the body.
        at: usize,
        /// Bytes left.
        left: usize,
    },
    /// Padding (after a zero length field) that is not all zero.
    #[error("padding at offset {at} is not all zero")]
    DirtyPadding {
        /// Offset of the first non-zero byte in the body.
        at: usize,
    },
    /// A `Data` datagram with sequence number 0 (sequences start at 1), or
    /// a session datagram without a session id.
    #[error("{kind:?} datagram with {what} 0")]
    Zero {
        /// The datagram's kind.
        kind: DatagramKind,
        /// `seq` or `session`.
        what: &'static str,
    },
    /// An `Open` shorter than [`MIN_OPEN_LEN`] (it would let a spoofed
    /// source make the daemon send more than it received).
    #[error("Open datagram of {len} bytes is shorter than the minimum of {MIN_OPEN_LEN}")]
    ShortOpen {
        /// Its length.
        len: usize,
    },
    /// A multicast datagram whose MAC is not the group key's (a host
    /// without the key, or a changed byte).
    #[error("multicast datagram MAC does not match the group key")]
    BadMac,
    /// A body of the wrong size or layout for its kind.
    #[error("{kind:?} datagram body is malformed ({reason})")]
    BadBody {
        /// The datagram's kind.
        kind: DatagramKind,
        /// What was wrong.
        reason: &'static str,
    },
}

/// The header every datagram starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the body is.
    pub kind: DatagramKind,
    /// The session id the daemon assigned (0 in `Open` and `Cookie`).
    pub session: u64,
    /// The sender's sequence number in this session (from 1, one per
    /// `Data` datagram; 0 in every other kind).
    pub seq: u32,
}

impl Header {
    /// Appends the 16 header bytes to `out`.
    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_slice(&DATAGRAM_MAGIC);
        out.put_u8(DATAGRAM_VERSION);
        out.put_u8(self.kind.code());
        out.put_u64_le(self.session);
        out.put_u32_le(self.seq);
    }
}

/// A parsed datagram: its header and its checked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The header.
    pub header: Header,
    /// The body after the header (for `Data`: frames and padding, already
    /// checked to split into whole frames).
    pub body: &'a [u8],
}

/// The receive counters a `Report` carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// `Data` datagrams accepted.
    pub received: u64,
    /// Sequence numbers never received (a late arrival takes itself off).
    pub lost: u64,
    /// Datagrams that arrived after a later one.
    pub reordered: u64,
    /// Datagrams received twice (dropped).
    pub duplicate: u64,
    /// Datagrams dropped as unusable (bad header or framing, wrong address,
    /// too large, too old to place).
    pub bad: u64,
}

impl Report {
    /// Appends the 40 body bytes.
    pub fn encode(&self, out: &mut impl BufMut) {
        for v in [
            self.received,
            self.lost,
            self.reordered,
            self.duplicate,
            self.bad,
        ] {
            out.put_u64_le(v);
        }
    }

    /// Reads a `Report` body.
    pub fn decode(body: &[u8]) -> Result<Report, DatagramError> {
        if body.len() != REPORT_LEN {
            return Err(DatagramError::BadBody {
                kind: DatagramKind::Report,
                reason: "a Report body is exactly 40 bytes",
            });
        }
        let v = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Report {
            received: v(0),
            lost: v(1),
            reordered: v(2),
            duplicate: v(3),
            bad: v(4),
        })
    }
}

/// Most ranges one `Gaps` datagram carries (lost and late together): with
/// the header and the counts, 500 bytes, under [`MIN_MAX_DATAGRAM`].
pub const MAX_GAP_RANGES: usize = 60;

/// An inclusive range of `Data` sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRange {
    /// The first (at least 1).
    pub first: u32,
    /// The last (at least `first`).
    pub last: u32,
}

/// A `Gaps` body: `u16 lost_n | u16 late_n | lost_n × (u32 first, u32
/// last) | late_n × (u32 first, u32 last)`, little-endian. `lost` are the
/// peer's sequence numbers given up (they fell more than the reorder window
/// behind the highest without arriving); `late` those that arrived after a
/// later one. Each list ascends without overlap; at most
/// [`MAX_GAP_RANGES`] ranges in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gaps {
    /// Sequence numbers given up as lost.
    pub lost: Vec<SeqRange>,
    /// Sequence numbers that arrived late (reordered).
    pub late: Vec<SeqRange>,
}

impl Gaps {
    /// Appends the body (the caller keeps to [`MAX_GAP_RANGES`]; more are
    /// cut off there).
    pub fn encode(&self, out: &mut impl BufMut) {
        let lost = self.lost.len().min(MAX_GAP_RANGES);
        let late = self.late.len().min(MAX_GAP_RANGES - lost);
        out.put_u16_le(lost as u16);
        out.put_u16_le(late as u16);
        for r in self.lost[..lost].iter().chain(&self.late[..late]) {
            out.put_u32_le(r.first);
            out.put_u32_le(r.last);
        }
    }

    /// Reads and checks a `Gaps` body.
    pub fn decode(body: &[u8]) -> Result<Gaps, DatagramError> {
        let bad = |reason| DatagramError::BadBody {
            kind: DatagramKind::Gaps,
            reason,
        };
        if body.len() < 4 {
            return Err(bad("a Gaps body starts with two u16 counts"));
        }
        let lost_n = usize::from(u16::from_le_bytes([body[0], body[1]]));
        let late_n = usize::from(u16::from_le_bytes([body[2], body[3]]));
        if lost_n + late_n > MAX_GAP_RANGES {
            return Err(bad("a Gaps body carries at most 60 ranges"));
        }
        if body.len() != 4 + 8 * (lost_n + late_n) {
            return Err(bad("a Gaps body's length does not match its counts"));
        }
        let u =
            |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let list = |from: usize, n: usize| -> Result<Vec<SeqRange>, DatagramError> {
            let mut out: Vec<SeqRange> = Vec::with_capacity(n);
            for i in 0..n {
                let at = from + 8 * i;
                let r = SeqRange {
                    first: u(at),
                    last: u(at + 4),
                };
                if r.first == 0 || r.first > r.last {
                    return Err(bad("a Gaps range is empty or starts at 0"));
                }
                if out.last().is_some_and(|p| p.last >= r.first) {
                    return Err(bad("Gaps ranges must ascend without overlap"));
                }
                out.push(r);
            }
            Ok(out)
        };
        Ok(Gaps {
            lost: list(4, lost_n)?,
            late: list(4 + 8 * lost_n, late_n)?,
        })
    }
}

/// Most ranges above `upto` one `DataAck` carries.
pub const MAX_ACK_RANGES: usize = 60;

/// A `DataAck` body: `u32 upto | u16 n | n × (u32 first, u32 last)`,
/// little-endian: every `AckedData` sequence number up to `upto` arrived
/// (0: none yet), and so did those in the ranges, which lie above
/// `upto + 1`, ascend without touching, at most [`MAX_ACK_RANGES`]. The
/// numbers between are missing: the sender sends them again at once (a
/// negative acknowledgement), or after its timeout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataAck {
    /// All sequence numbers up to this one arrived.
    pub upto: u32,
    /// Ranges above `upto + 1` that arrived too.
    pub ranges: Vec<SeqRange>,
}

impl DataAck {
    /// Appends the body (at most [`MAX_ACK_RANGES`] ranges; more are cut
    /// off there).
    pub fn encode(&self, out: &mut impl BufMut) {
        let n = self.ranges.len().min(MAX_ACK_RANGES);
        out.put_u32_le(self.upto);
        out.put_u16_le(n as u16);
        for r in &self.ranges[..n] {
            out.put_u32_le(r.first);
            out.put_u32_le(r.last);
        }
    }

    /// Reads and checks a `DataAck` body.
    pub fn decode(body: &[u8]) -> Result<DataAck, DatagramError> {
        let bad = |reason| DatagramError::BadBody {
            kind: DatagramKind::DataAck,
            reason,
        };
        if body.len() < 6 {
            return Err(bad("a DataAck body starts with a u32 and a u16 count"));
        }
        let u =
            |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let upto = u(0);
        let n = usize::from(u16::from_le_bytes([body[4], body[5]]));
        if n > MAX_ACK_RANGES {
            return Err(bad("a DataAck body carries at most 60 ranges"));
        }
        if body.len() != 6 + 8 * n {
            return Err(bad("a DataAck body's length does not match its count"));
        }
        let mut ranges: Vec<SeqRange> = Vec::with_capacity(n);
        let mut floor = upto.checked_add(1).ok_or(bad("upto is the last number"))?;
        for i in 0..n {
            let at = 6 + 8 * i;
            let r = SeqRange {
                first: u(at),
                last: u(at + 4),
            };
            if r.first > r.last {
                return Err(bad("a DataAck range is empty"));
            }
            if r.first <= floor {
                return Err(bad(
                    "DataAck ranges must lie above upto + 1 and ascend with gaps between",
                ));
            }
            floor = r
                .last
                .checked_add(1)
                .ok_or(bad("a range ends at the last number"))?;
            ranges.push(r);
        }
        Ok(DataAck { upto, ranges })
    }
}

impl<'a> Datagram<'a> {
    /// Parses and checks `bytes`: the header, and the body's layout for its
    /// kind (a `Data` body must split into whole frames followed by zero
    /// padding; an `Open` must be at least [`MIN_OPEN_LEN`] bytes).
    pub fn parse(bytes: &'a [u8]) -> Result<Datagram<'a>, DatagramError> {
        if bytes.len() < HEADER_LEN {
            return Err(DatagramError::Truncated { len: bytes.len() });
        }
        if bytes[0..2] != DATAGRAM_MAGIC {
            return Err(DatagramError::BadMagic {
                got: [bytes[0], bytes[1]],
            });
        }
        if bytes[2] != DATAGRAM_VERSION {
            return Err(DatagramError::UnsupportedVersion { version: bytes[2] });
        }
        let kind = DatagramKind::from_code(bytes[3])
            .ok_or(DatagramError::UnknownKind { kind: bytes[3] })?;
        let mut s = [0u8; 8];
        s.copy_from_slice(&bytes[4..12]);
        let session = u64::from_le_bytes(s);
        let mut q = [0u8; 4];
        q.copy_from_slice(&bytes[12..16]);
        let seq = u32::from_le_bytes(q);
        let header = Header { kind, session, seq };
        let body = &bytes[HEADER_LEN..];
        let zero = |what| Err(DatagramError::Zero { kind, what });
        let bad = |reason| Err(DatagramError::BadBody { kind, reason });
        match kind {
            DatagramKind::Data | DatagramKind::AckedData => {
                if session == 0 {
                    return zero("session");
                }
                if seq == 0 {
                    return zero("seq");
                }
                check_frames(body)?;
            }
            DatagramKind::Open => {
                if bytes.len() < MIN_OPEN_LEN {
                    return Err(DatagramError::ShortOpen { len: bytes.len() });
                }
                open_cookie(body)?;
            }
            DatagramKind::Cookie => {
                if body.len() != COOKIE_LEN {
                    return bad("a Cookie body is exactly 24 bytes");
                }
            }
            DatagramKind::Accept | DatagramKind::Reset => {
                if session == 0 {
                    return zero("session");
                }
                if !body.is_empty() {
                    return bad("an Accept or Reset has no body");
                }
            }
            DatagramKind::Report => {
                if session == 0 {
                    return zero("session");
                }
                Report::decode(body)?;
            }
            DatagramKind::Group => {
                if session == 0 {
                    return zero("session");
                }
                if seq == 0 {
                    return zero("seq");
                }
                if body.len() < GROUP_OVERHEAD - HEADER_LEN + 1 {
                    return bad("a Group body is epoch, origin, hops, an event and a 16-byte MAC");
                }
            }
            DatagramKind::Member => {
                if session == 0 {
                    return zero("session");
                }
                if body.len() != MEMBER_BODY_LEN {
                    return bad("a Member body is exactly 32 bytes");
                }
            }
            DatagramKind::Gaps => {
                if session == 0 {
                    return zero("session");
                }
                Gaps::decode(body)?;
            }
            DatagramKind::DataAck => {
                if session == 0 {
                    return zero("session");
                }
                DataAck::decode(body)?;
            }
        }
        // An Accept's seq carries the features the daemon took.
        if !matches!(
            kind,
            DatagramKind::Data
                | DatagramKind::AckedData
                | DatagramKind::Group
                | DatagramKind::Accept
        ) && seq != 0
        {
            return bad("only Data, AckedData, Group and Accept datagrams carry a sequence number");
        }
        Ok(Datagram { header, body })
    }

    /// The frames of a `Data` or `AckedData` datagram, each as `(type,
    /// body)` (none for other kinds). The layout was checked by [`Datagram::parse`].
    pub fn frames(&self) -> Result<Frames<'a>, DatagramError> {
        if !matches!(
            self.header.kind,
            DatagramKind::Data | DatagramKind::AckedData
        ) {
            return Ok(Frames { rest: &[] });
        }
        let end = check_frames(self.body)?;
        Ok(Frames {
            rest: &self.body[..end],
        })
    }

    /// The bytes of a `Data` or `AckedData` datagram's frames, without the
    /// padding: what
    /// goes into the connection engine as stream bytes.
    pub fn frame_bytes(&self) -> &'a [u8] {
        match self.header.kind {
            DatagramKind::Data | DatagramKind::AckedData => match check_frames(self.body) {
                Ok(end) => &self.body[..end],
                Err(_) => &[],
            },
            _ => &[],
        }
    }

    /// The cookie of an `Open` (`None`: it asks for one).
    pub fn open_cookie(&self) -> Option<[u8; COOKIE_LEN]> {
        match self.header.kind {
            DatagramKind::Open => open_cookie(self.body).ok().flatten(),
            _ => None,
        }
    }
}

/// An `Open` body: `u8 has_cookie` (0 or 1), the cookie if 1, zero padding.
fn open_cookie(body: &[u8]) -> Result<Option<[u8; COOKIE_LEN]>, DatagramError> {
    let bad = |reason| DatagramError::BadBody {
        kind: DatagramKind::Open,
        reason,
    };
    let (cookie, pad_at) = match body.first() {
        Some(0) => (None, 1),
        Some(1) => {
            let c = body.get(1..1 + COOKIE_LEN).ok_or(bad("cookie cut off"))?;
            let mut out = [0u8; COOKIE_LEN];
            out.copy_from_slice(c);
            (Some(out), 1 + COOKIE_LEN)
        }
        Some(_) => return Err(bad("has_cookie must be 0 or 1")),
        None => return Err(bad("empty")),
    };
    if let Some(i) = body[pad_at..].iter().position(|b| *b != 0) {
        return Err(DatagramError::DirtyPadding { at: pad_at + i });
    }
    Ok(cookie)
}

/// Appends an `Open` datagram (asking for a cookie, or repeating one),
/// padded to `MIN_OPEN_LEN`, offering no features.
pub fn encode_open(cookie: Option<&[u8; COOKIE_LEN]>, out: &mut bytes::BytesMut) {
    encode_open_with(cookie, 0, out)
}

/// Appends an `Open` datagram offering `features` ([`FEATURE_ACKED`]) in
/// its header's `session` field.
pub fn encode_open_with(
    cookie: Option<&[u8; COOKIE_LEN]>,
    features: u32,
    out: &mut bytes::BytesMut,
) {
    let start = out.len();
    Header {
        kind: DatagramKind::Open,
        session: u64::from(features),
        seq: 0,
    }
    .encode(out);
    match cookie {
        Some(c) => {
            out.put_u8(1);
            out.put_slice(c);
        }
        None => out.put_u8(0),
    }
    let len = out.len() - start;
    if len < MIN_OPEN_LEN {
        out.put_bytes(0, MIN_OPEN_LEN - len);
    }
}

/// Checks that `body` is whole frames then zero padding; returns where the
/// frames end.
fn check_frames(body: &[u8]) -> Result<usize, DatagramError> {
    let mut at = 0;
    while at < body.len() {
        let left = body.len() - at;
        if left < 4 {
            // Fewer than four bytes left: only zero padding may remain.
            return match body[at..].iter().position(|b| *b != 0) {
                None => Ok(at),
                Some(_) => Err(DatagramError::CutLength { at, left }),
            };
        }
        let len = u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]) as usize;
        if len == 0 {
            // A zero length ends the frames: the rest is padding.
            return match body[at..].iter().position(|b| *b != 0) {
                None => Ok(at),
                Some(i) => Err(DatagramError::DirtyPadding { at: at + i }),
            };
        }
        if len > left - 4 {
            return Err(DatagramError::FrameOverrun {
                at,
                len,
                left: left - 4,
            });
        }
        at += 4 + len;
    }
    Ok(at)
}

/// The frames of a `Data` datagram, `(type, body)` each.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Frames<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let len = u32::from_le_bytes(self.rest.get(..4)?.try_into().ok()?) as usize;
        let frame = self.rest.get(4..4 + len)?;
        self.rest = &self.rest[4 + len..];
        let (kind, body) = frame.split_first()?;
        Some((*kind, body))
    }
}

/// Seconds one cookie window lasts; a cookie is good in its window and the
/// next (10 to 20 s).
pub const COOKIE_WINDOW_SECS: u64 = 10;

const COOKIE_LABEL: &[u8] = b"tagwire-udp cookie";

/// The address cookie for `addr` (the source address's bytes, as the
/// daemon writes them) in time window `window` (seconds / 10): `window`
/// (u64 LE) then 16 bytes of `HMAC(secret, label | window | addr)`. The
/// daemon keeps no state for it: a client that repeats it proves it
/// receives at that address.
pub fn make_cookie(secret: &[u8; 32], addr: &[u8], window: u64) -> [u8; COOKIE_LEN] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret)
        .expect("invariant: HMAC accepts keys of every length");
    m.update(COOKIE_LABEL);
    m.update(&window.to_le_bytes());
    m.update(addr);
    let mac = m.finalize().into_bytes();
    let mut out = [0u8; COOKIE_LEN];
    out[..8].copy_from_slice(&window.to_le_bytes());
    out[8..].copy_from_slice(&mac[..COOKIE_LEN - 8]);
    out
}

/// Whether `cookie` was made by [`make_cookie`] with `secret` for `addr`
/// in window `now_window` or the one before (constant time in the MAC).
pub fn check_cookie(
    secret: &[u8; 32],
    addr: &[u8],
    now_window: u64,
    cookie: &[u8; COOKIE_LEN],
) -> bool {
    let mut w = [0u8; 8];
    w.copy_from_slice(&cookie[..8]);
    let window = u64::from_le_bytes(w);
    if window != now_window && window.checked_add(1) != Some(now_window) {
        return false;
    }
    let want = make_cookie(secret, addr, window);
    want.iter()
        .zip(cookie)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// Bytes of the MAC that ends every multicast datagram.
pub const GROUP_MAC_LEN: usize = 16;
/// Bytes a `Group` datagram adds to its event: header, epoch, origin,
/// hops and MAC.
pub const GROUP_OVERHEAD: usize = HEADER_LEN + 8 + 8 + 1 + GROUP_MAC_LEN;
/// Bytes of a `Member` body: epoch, the sender's wall clock (ms) and MAC.
pub const MEMBER_BODY_LEN: usize = 8 + 8 + GROUP_MAC_LEN;

const GROUP_KEY_LABEL: &[u8] = b"tagwire-multicast key v1";

/// The 32-byte key of multicast group `group` (`"IP:PORT"`) from a shared
/// `secret` (`[federation] token` or the group's own `key`): a key good
/// for one group only.
pub fn group_key(secret: &[u8], group: &str) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret)
        .expect("invariant: HMAC accepts keys of every length");
    m.update(GROUP_KEY_LABEL);
    m.update(group.as_bytes());
    m.finalize().into_bytes().into()
}

fn group_mac(key: &[u8; 32], signed: &[u8]) -> [u8; GROUP_MAC_LEN] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
        .expect("invariant: HMAC accepts keys of every length");
    m.update(signed);
    let full = m.finalize().into_bytes();
    let mut out = [0u8; GROUP_MAC_LEN];
    out.copy_from_slice(&full[..GROUP_MAC_LEN]);
    out
}

/// Appends a `Group` datagram: sender `node`, its per-group `seq`, its
/// `epoch` (start time), the event's `origin` daemon and `hops`, the
/// encoded `event`, and the MAC under `key`.
#[allow(clippy::too_many_arguments)]
pub fn encode_group(
    key: &[u8; 32],
    node: u64,
    seq: u32,
    epoch: u64,
    origin: u64,
    hops: u8,
    event: &[u8],
    out: &mut bytes::BytesMut,
) {
    let start = out.len();
    Header {
        kind: DatagramKind::Group,
        session: node,
        seq,
    }
    .encode(out);
    out.put_u64_le(epoch);
    out.put_u64_le(origin);
    out.put_u8(hops);
    out.put_slice(event);
    let mac = group_mac(key, &out[start..]);
    out.put_slice(&mac);
}

/// Appends a `Member` datagram: node `node` (started at `epoch`) is a
/// member, said at wall-clock `now_ms`, MAC'd under `key`.
pub fn encode_member(
    key: &[u8; 32],
    node: u64,
    epoch: u64,
    now_ms: u64,
    out: &mut bytes::BytesMut,
) {
    let start = out.len();
    Header {
        kind: DatagramKind::Member,
        session: node,
        seq: 0,
    }
    .encode(out);
    out.put_u64_le(epoch);
    out.put_u64_le(now_ms);
    let mac = group_mac(key, &out[start..]);
    out.put_slice(&mac);
}

/// A `Group` datagram's body, after its MAC was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupEvent<'a> {
    /// The sender's start time (a newer epoch restarts its sequence).
    pub epoch: u64,
    /// The daemon the event was published at.
    pub origin: u64,
    /// Links it crossed before the group.
    pub hops: u8,
    /// The event, encoded as in `Forward`.
    pub event: &'a [u8],
}

/// A `Member` datagram's body, after its MAC was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberClaim {
    /// The member's start time.
    pub epoch: u64,
    /// The member's wall clock when it sent it, ms since the Unix epoch.
    pub sent_ms: u64,
}

/// Checks the MAC that ends `bytes` (a whole datagram) in constant time.
fn check_group_mac(key: &[u8; 32], bytes: &[u8]) -> Result<(), DatagramError> {
    let split = bytes
        .len()
        .checked_sub(GROUP_MAC_LEN)
        .ok_or(DatagramError::Truncated { len: bytes.len() })?;
    let (signed, mac) = bytes.split_at(split);
    let want = group_mac(key, signed);
    if want.iter().zip(mac).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
        return Err(DatagramError::BadMac);
    }
    Ok(())
}

impl<'a> Datagram<'a> {
    /// The event of a `Group` datagram (`bytes` is the whole datagram
    /// `self` was parsed from) if its MAC is right under `key`.
    pub fn group_event(
        &self,
        key: &[u8; 32],
        bytes: &'a [u8],
    ) -> Result<GroupEvent<'a>, DatagramError> {
        if self.header.kind != DatagramKind::Group {
            return Err(DatagramError::BadBody {
                kind: self.header.kind,
                reason: "not a Group datagram",
            });
        }
        check_group_mac(key, bytes)?;
        let b = &self.body[..self.body.len() - GROUP_MAC_LEN];
        let u = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Ok(GroupEvent {
            epoch: u(0),
            origin: u(8),
            hops: b[16],
            event: &b[17..],
        })
    }

    /// The claim of a `Member` datagram if its MAC is right under `key`.
    pub fn member_claim(&self, key: &[u8; 32], bytes: &[u8]) -> Result<MemberClaim, DatagramError> {
        if self.header.kind != DatagramKind::Member {
            return Err(DatagramError::BadBody {
                kind: self.header.kind,
                reason: "not a Member datagram",
            });
        }
        check_group_mac(key, bytes)?;
        let u = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&self.body[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Ok(MemberClaim {
            epoch: u(0),
            sent_ms: u(8),
        })
    }
}

/// Checks a configured largest datagram.
pub fn validate_max_datagram(n: usize) -> Result<(), String> {
    if (MIN_MAX_DATAGRAM..=HARD_MAX_DATAGRAM).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "max_datagram {n} is outside {MIN_MAX_DATAGRAM}..={HARD_MAX_DATAGRAM} bytes"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn data(session: u64, seq: u32, frames: &[u8]) -> BytesMut {
        let mut d = BytesMut::new();
        Header {
            kind: DatagramKind::Data,
            session,
            seq,
        }
        .encode(&mut d);
        d.extend_from_slice(frames);
        d
    }

    #[test]
    fn bad_datagrams_are_refused_naming_what_is_wrong() {
        let ping = [1, 0, 0, 0, 0x0a];
        for (bytes, want) in [
            (b"TD\x01".to_vec(), "shorter than the 16-byte header"),
            (
                {
                    let mut d = data(1, 1, &[]).to_vec();
                    d[0] = b'X';
                    d
                },
                "magic",
            ),
            (
                {
                    let mut d = data(1, 1, &[]).to_vec();
                    d[2] = 9;
                    d
                },
                "version 9",
            ),
            (
                {
                    let mut d = data(1, 1, &[]).to_vec();
                    d[3] = 77;
                    d
                },
                "kind 77",
            ),
            (data(0, 1, &ping).to_vec(), "session 0"),
            (data(1, 0, &ping).to_vec(), "seq 0"),
            (data(1, 1, &[9, 0, 0, 0, 0x0a]).to_vec(), "claims 9 bytes"),
            (
                data(1, 1, &[1, 0, 0, 0, 0x0a, 0, 0, 0, 0, 7]).to_vec(),
                "padding",
            ),
            (data(1, 1, &[1, 0, 0, 0, 0x0a, 1, 0]).to_vec(), "cut off"),
        ] {
            let e = Datagram::parse(&bytes).expect_err("bad").to_string();
            assert!(e.contains(want), "{bytes:?}: {e}");
        }
        let mut short_open = BytesMut::new();
        encode_open(None, &mut short_open);
        short_open.truncate(MIN_OPEN_LEN - 1);
        let e = Datagram::parse(&short_open).expect_err("short").to_string();
        assert!(e.contains("1199 bytes") && e.contains("1200"), "{e}");
    }

    #[test]
    fn data_padding_after_whole_frames_is_allowed() {
        let d = data(5, 3, &[1, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0, 0]);
        let p = Datagram::parse(&d).expect("valid");
        assert_eq!(
            p.frames().expect("frames").collect::<Vec<_>>(),
            vec![(0x0a, &[][..])]
        );
        assert_eq!(p.frame_bytes(), &[1, 0, 0, 0, 0x0a]);
    }

    #[test]
    fn open_carries_its_cookie_and_is_padded() {
        let mut d = BytesMut::new();
        encode_open(Some(&[7; COOKIE_LEN]), &mut d);
        assert_eq!(d.len(), MIN_OPEN_LEN);
        let p = Datagram::parse(&d).expect("valid");
        assert_eq!(p.open_cookie(), Some([7; COOKIE_LEN]));
    }

    #[test]
    fn group_and_member_datagrams_carry_their_fields_under_the_right_key_only() {
        let key = group_key(b"token", "239.1.2.3:7800");
        assert_ne!(
            key,
            group_key(b"token", "239.1.2.3:7801"),
            "one key per group"
        );
        let mut d = BytesMut::new();
        encode_group(&key, 42, 7, 1000, 99, 2, b"EVENT", &mut d);
        assert_eq!(d.len(), GROUP_OVERHEAD + 5);
        let p = Datagram::parse(&d).expect("valid");
        assert_eq!(
            (p.header.kind, p.header.session, p.header.seq),
            (DatagramKind::Group, 42, 7)
        );
        let g = p.group_event(&key, &d).expect("right key");
        assert_eq!(
            (g.epoch, g.origin, g.hops, g.event),
            (1000, 99, 2, &b"EVENT"[..])
        );
        assert_eq!(
            p.group_event(&group_key(b"other", "239.1.2.3:7800"), &d),
            Err(DatagramError::BadMac)
        );
        let mut flipped = d.to_vec();
        flipped[HEADER_LEN + 17] ^= 1;
        let p2 = Datagram::parse(&flipped).expect("still parses");
        assert_eq!(p2.group_event(&key, &flipped), Err(DatagramError::BadMac));

        let mut m = BytesMut::new();
        encode_member(&key, 42, 1000, 5555, &mut m);
        let p = Datagram::parse(&m).expect("valid");
        assert_eq!(
            p.member_claim(&key, &m),
            Ok(MemberClaim {
                epoch: 1000,
                sent_ms: 5555
            })
        );
        assert_eq!(
            p.member_claim(&group_key(b"x", "239.1.2.3:7800"), &m),
            Err(DatagramError::BadMac)
        );
        let mut short = m.to_vec();
        short.pop();
        assert!(
            Datagram::parse(&short).is_err(),
            "a Member body is 32 bytes"
        );
    }

    #[test]
    fn a_cookie_is_good_for_its_address_and_two_windows_only() {
        let secret = [3u8; 32];
        let c = make_cookie(&secret, b"10.0.0.1:5000", 100);
        assert!(check_cookie(&secret, b"10.0.0.1:5000", 100, &c));
        assert!(check_cookie(&secret, b"10.0.0.1:5000", 101, &c));
        assert!(!check_cookie(&secret, b"10.0.0.1:5000", 102, &c), "expired");
        assert!(
            !check_cookie(&secret, b"10.0.0.2:5000", 100, &c),
            "other address"
        );
        assert!(
            !check_cookie(&[4u8; 32], b"10.0.0.1:5000", 100, &c),
            "other secret"
        );
        let mut forged = c;
        forged[0] = 101;
        assert!(
            !check_cookie(&secret, b"10.0.0.1:5000", 101, &forged),
            "window moved"
        );
    }
}
