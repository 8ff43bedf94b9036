//! The bodies of the `Pull` (0x10) and `PullReply` (0x11) frames: a query
//! on a tag's history (pull buffer) and its answer. See `docs/protocol.md`,
//! "Pull (0x10)" and "PullReply (0x11)".

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::limits::MAX_TEXT_LEN;
use crate::reader::Reader;
use crate::writer::{put_short_str as put_short, put_str16};

/// Most events one `PullReply` carries (its count is a `u16`).
pub const MAX_PULL_REPLY_EVENTS: usize = u16::MAX as usize;

/// What a pull asks of a tag's history. Sequence numbers are the
/// publisher's (per publisher); times are source timestamps, ns since the
/// Unix epoch. Ranges are inclusive at both ends.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PullQuery {
    /// The most recent event (code 1).
    Latest,
    /// The n-th most recent event, 0 being the latest (code 2).
    Nth(u32),
    /// The event with this sequence number (code 3).
    Seq(u64),
    /// Events with sequence numbers `first..=last` (code 4).
    SeqRange {
        /// First sequence number.
        first: u64,
        /// Last sequence number.
        last: u64,
    },
    /// Events whose source time is in `from_ns..=to_ns` and whose sequence
    /// number is at least `from_seq` (0: any; a truncated reply's `next`
    /// continues a time range here) (code 5).
    TimeRange {
        /// Earliest source time.
        from_ns: u64,
        /// Latest source time.
        to_ns: u64,
        /// Smallest sequence number.
        from_seq: u64,
    },
    /// Events of a `reliability=durable` tag in the daemon's durable store
    /// (`docs/reliability.md`), for a replay: those at store position
    /// `from_pos` or later (0: the oldest held) whose sequence number is at
    /// least `from_seq` and whose source time is at least `from_ns`
    /// (code 6), published at the daemons `origins` selects (code 7 when
    /// it is not [`Origins::all`]). Positions rise in the order the daemon
    /// stored the events; a reply's `oldest`/`newest` are positions, and
    /// `More { next }` is the position to ask from next.
    Stored {
        /// First store position.
        from_pos: u64,
        /// Smallest sequence number.
        from_seq: u64,
        /// Earliest source time.
        from_ns: u64,
        /// Whose publications (by the daemon they were published at).
        origins: Origins,
    },
}

/// Most daemons an [`Origins`] names.
pub const MAX_ORIGINS: usize = 1024;

/// Which daemons' publications a `Stored` pull reads, each named by its
/// origin key (`tagwire_core::store::origin_key` of the daemon's name; 0 in
/// a record: not known). A replay that reads several daemons' stores reads
/// each daemon's own publications from its store (`Only`) and the rest
/// from the subscriber's daemon (`Except` those), so that no event comes
/// from two stores.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origins {
    /// Only events published at this daemon.
    Only(u64),
    /// Events published anywhere but at these daemons (none: every event).
    Except(Vec<u64>),
}

impl Origins {
    /// Every event, whoever published it.
    pub const fn all() -> Origins {
        Origins::Except(Vec::new())
    }

    /// Whether a record whose origin key is `origin` is selected.
    pub fn selects(&self, origin: u64) -> bool {
        match self {
            Origins::Only(o) => *o == origin,
            Origins::Except(keys) => !keys.contains(&origin),
        }
    }
}

impl PullQuery {
    /// The query's code on the wire.
    pub fn code(&self) -> u8 {
        match self {
            PullQuery::Latest => 1,
            PullQuery::Nth(_) => 2,
            PullQuery::Seq(_) => 3,
            PullQuery::SeqRange { .. } => 4,
            PullQuery::TimeRange { .. } => 5,
            PullQuery::Stored { origins, .. } if *origins == Origins::all() => 6,
            PullQuery::Stored { .. } => 7,
        }
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u8(self.code());
        match *self {
            PullQuery::Latest => {}
            PullQuery::Nth(n) => out.put_u32_le(n),
            PullQuery::Seq(s) => out.put_u64_le(s),
            PullQuery::SeqRange { first, last } => {
                out.put_u64_le(first);
                out.put_u64_le(last);
            }
            PullQuery::TimeRange {
                from_ns,
                to_ns,
                from_seq,
            } => {
                out.put_u64_le(from_ns);
                out.put_u64_le(to_ns);
                out.put_u64_le(from_seq);
            }
            PullQuery::Stored {
                from_pos,
                from_seq,
                from_ns,
                ref origins,
            } => {
                out.put_u64_le(from_pos);
                out.put_u64_le(from_seq);
                out.put_u64_le(from_ns);
                let (mode, keys) = match origins {
                    _ if *origins == Origins::all() => return Ok(()),
                    Origins::Only(k) => (0u8, std::slice::from_ref(k)),
                    Origins::Except(keys) => (1u8, keys.as_slice()),
                };
                if keys.len() > MAX_ORIGINS {
                    return Err(EncodeError::TooLong {
                        what: "stored pull's origin list",
                        len: keys.len(),
                        max: MAX_ORIGINS,
                    });
                }
                out.put_u8(mode);
                out.put_u16_le(keys.len() as u16);
                for k in keys {
                    out.put_u64_le(*k);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<PullQuery, DecodeError> {
        Ok(match r.u8("pull query")? {
            1 => PullQuery::Latest,
            2 => PullQuery::Nth(r.u32("nth")?),
            3 => PullQuery::Seq(r.u64("sequence number")?),
            4 => PullQuery::SeqRange {
                first: r.u64("first sequence number")?,
                last: r.u64("last sequence number")?,
            },
            5 => PullQuery::TimeRange {
                from_ns: r.u64("from time")?,
                to_ns: r.u64("to time")?,
                from_seq: r.u64("from sequence number")?,
            },
            code @ (6 | 7) => PullQuery::Stored {
                from_pos: r.u64("from store position")?,
                from_seq: r.u64("from sequence number")?,
                from_ns: r.u64("from time")?,
                origins: if code == 6 {
                    Origins::all()
                } else {
                    Origins::decode(r)?
                },
            },
            v => {
                return Err(DecodeError::BadValue {
                    what: "pull query",
                    value: v as u64,
                })
            }
        })
    }
}

impl Origins {
    fn decode(r: &mut Reader<'_>) -> Result<Origins, DecodeError> {
        let mode = r.u8("origin selection")?;
        let n = r.u16("origin count")? as usize;
        if n > MAX_ORIGINS {
            return Err(DecodeError::TooMany {
                what: "origins of a stored pull",
                count: n,
                max: MAX_ORIGINS,
            });
        }
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            keys.push(r.u64("origin key")?);
        }
        match (mode, keys.as_slice()) {
            (0, [k]) => Ok(Origins::Only(*k)),
            (0, _) => Err(DecodeError::BadValue {
                what: "origin count of an only-origin selection (must be 1)",
                value: n as u64,
            }),
            // An empty Except is query 6: one encoding per query.
            (1, []) => Err(DecodeError::BadValue {
                what: "origin count of an except selection (none: that is query 6)",
                value: 0,
            }),
            (1, _) => Ok(Origins::Except(keys)),
            (v, _) => Err(DecodeError::BadValue {
                what: "origin selection",
                value: v as u64,
            }),
        }
    }
}

/// How a `PullReply` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullStatus {
    /// Every event asked for that is held is in the reply (code 0).
    Complete,
    /// The reply hit the per-reply cap; ask again from sequence number
    /// `next` for the rest (code 1).
    More {
        /// The first sequence number not in the reply.
        next: u64,
    },
    /// The event asked for is not held (overwritten, or never recorded);
    /// the reply's `oldest` says what is (code 2). Never an empty success.
    Gone,
}

/// The answer to a `Pull`: a status, what the buffer holds, and events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullReply {
    /// Request id of the `Pull`.
    pub req: u32,
    /// Complete, more to ask for, or gone.
    pub status: PullStatus,
    /// Oldest sequence number held (0 when `held` is 0).
    pub oldest: u64,
    /// Newest sequence number held (0 when `held` is 0).
    pub newest: u64,
    /// Events the buffer holds for this publisher.
    pub held: u32,
    /// The encoded events, oldest first (slices of the frame: no copy).
    pub events: Vec<Bytes>,
}

impl PullReply {
    pub(crate) fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        if self.events.len() > MAX_PULL_REPLY_EVENTS {
            return Err(EncodeError::TooLong {
                what: "pull reply event list",
                len: self.events.len(),
                max: MAX_PULL_REPLY_EVENTS,
            });
        }
        out.put_u32_le(self.req);
        let (status, next) = match self.status {
            PullStatus::Complete => (0, 0),
            PullStatus::More { next } => (1, next),
            PullStatus::Gone => (2, 0),
        };
        out.put_u8(status);
        out.put_u64_le(self.oldest);
        out.put_u64_le(self.newest);
        out.put_u32_le(self.held);
        out.put_u64_le(next);
        out.put_u16_le(self.events.len() as u16);
        for e in &self.events {
            let len = u32::try_from(e.len()).map_err(|_| EncodeError::ValueTooLong)?;
            out.put_u32_le(len);
            out.put_slice(e);
        }
        Ok(())
    }

    pub(crate) fn decode(body: &Bytes) -> Result<PullReply, DecodeError> {
        let mut r = Reader::new(body);
        let req = r.u32("request id")?;
        let status = r.u8("pull status")?;
        let oldest = r.u64("oldest sequence number")?;
        let newest = r.u64("newest sequence number")?;
        let held = r.u32("held count")?;
        let next = r.u64("next sequence number")?;
        let status = match status {
            0 => PullStatus::Complete,
            1 => PullStatus::More { next },
            2 => PullStatus::Gone,
            v => {
                return Err(DecodeError::BadValue {
                    what: "pull status",
                    value: v as u64,
                })
            }
        };
        if !matches!(status, PullStatus::More { .. }) && next != 0 {
            return Err(DecodeError::BadValue {
                what: "next sequence number of a reply with nothing more",
                value: next,
            });
        }
        let n = r.u16("event count")? as usize;
        if status == PullStatus::Gone && n != 0 {
            return Err(DecodeError::TooMany {
                what: "events in a gone reply",
                count: n,
                max: 0,
            });
        }
        // Each event takes at least its 4-byte length: no allocation beyond
        // what the frame's own length allows.
        let mut events = Vec::with_capacity(n.min(body.len() / 4));
        for _ in 0..n {
            let len = r.u32("event length")? as usize;
            let at = r.pos();
            r.bytes(len, "pulled event")?;
            events.push(body.slice(at..at + len));
        }
        r.finish("PullReply")?;
        Ok(PullReply {
            req,
            status,
            oldest,
            newest,
            held,
            events,
        })
    }
}

/// A `Pull` frame's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// Request id echoed in the `PullReply` or `Error`.
    pub req: u32,
    /// Where the history is kept: empty for the daemon that gets the frame,
    /// `NAME` for the named node (the receiving daemon serves its own name
    /// and refuses any other with `UnknownNode`).
    pub node: String,
    /// Publisher endpoint whose history to read; empty: the tag's publisher
    /// that published last.
    pub publisher: String,
    /// The tag (not a pattern).
    pub tag: String,
    /// What to read.
    pub query: PullQuery,
}

impl Pull {
    pub(crate) fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u32_le(self.req);
        put_short(out, "node name", &self.node)?;
        put_short(out, "publisher name", &self.publisher)?;
        put_str16(out, "tag", &self.tag)?;
        self.query.encode(out)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Pull, DecodeError> {
        Ok(Pull {
            req: r.u32("request id")?,
            node: r.short_str("node name")?.to_owned(),
            publisher: r.short_str("publisher name")?.to_owned(),
            tag: r.str16(MAX_TEXT_LEN, "tag")?.to_owned(),
            query: PullQuery::decode(r)?,
        })
    }
}
