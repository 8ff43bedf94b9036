//! The durable store's pure parts (issue 25; `docs/reliability.md`): the
//! record format the router's embedded database keeps for each event of a
//! `reliability=durable` tag, the retention rule (count, bytes, age per
//! tag) that decides which records go, and where a replay starts.
//!
//! Sans-I/O: the router's store thread owns the database file (redb) and
//! asks [`TagLog`] which positions to delete; nothing here reads a clock
//! or a file.
//!
//! **Record** ([`StoreRecord`], version 2, little-endian): `u8` version (2),
//! `u64` stored-at time (ns since the Unix epoch, the daemon's clock when it
//! queued the event), `u64` origin (the [`origin_key`] of the daemon the
//! event was published at), `u32` event length, then the event exactly as
//! it travels in a `Publish` frame's body (`docs/protocol.md`, "Event
//! encoding"). Version 1 records (no origin field; written before replays
//! read other daemons' stores) still decode, with origin 0 ("not known").
//! Decoding checks every length and that the event parses; bad bytes are a
//! [`StoreRecordError`] naming what was wrong, never a panic.
//!
//! ```
//! use bytes::Bytes;
//! use tagwire_core::store::{StoreRecord, StoreRecordError};
//! let mut event = bytes::BytesMut::new();
//! tagwire_proto::Event::new("/t", Bytes::from_static(b"hi")).encode(&mut event).unwrap();
//! let rec = StoreRecord { stored_at_ns: 7, origin: 9, event: event.freeze() };
//! let bytes = rec.encode();
//! assert_eq!(StoreRecord::decode(&bytes).unwrap(), rec);
//! assert!(matches!(StoreRecord::decode(&bytes[..3]), Err(StoreRecordError::Truncated { .. })));
//! ```

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use tagwire_proto::{DecodeError, EventRef};

/// The record format's version byte (what this build writes).
pub const RECORD_VERSION: u8 = 2;
/// The first version, still read: no origin field.
pub const RECORD_VERSION_1: u8 = 1;
/// Bytes before the event: version, stored-at time, origin, event length.
pub const RECORD_HEADER_LEN: usize = 1 + 8 + 8 + 4;

/// The key under which a daemon's publications are stored: a stable hash
/// (64-bit FNV-1a) of its name, never 0 (0: origin not known). Names, not
/// node ids, because a daemon's node id may change when it restarts and
/// its store outlives it; a replay that reads several daemons' stores
/// selects each one's publications by this key (`PullQuery::Stored`'s
/// `origins`).
pub fn origin_key(daemon: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in daemon.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreRecord {
    /// When the daemon queued it for the store, ns since the Unix epoch
    /// (what `max_age` counts from).
    pub stored_at_ns: u64,
    /// The [`origin_key`] of the daemon it was published at (0: not known,
    /// a version 1 record).
    pub origin: u64,
    /// The encoded event (a `Publish` body).
    pub event: Bytes,
}

/// Why stored bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreRecordError {
    /// A version this build does not read.
    #[error("store record version {version} is not supported (this build reads versions {RECORD_VERSION_1} and {RECORD_VERSION})")]
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// Fewer bytes than a field needs.
    #[error("store record truncated: {what} needs {need} bytes, {have} left")]
    Truncated {
        /// The field.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// Bytes after the event.
    #[error("store record has {extra} bytes after its event")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The event inside does not parse.
    #[error("store record's event is malformed: {0}")]
    BadEvent(DecodeError),
}

impl StoreRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = BytesMut::with_capacity(RECORD_HEADER_LEN + self.event.len());
        out.put_u8(RECORD_VERSION);
        out.put_u64_le(self.stored_at_ns);
        out.put_u64_le(self.origin);
        // An event is at most a frame (u32 length on the wire), so its
        // length fits; a longer one is cut at the bound and fails to decode.
        out.put_u32_le(u32::try_from(self.event.len()).unwrap_or(u32::MAX));
        out.put_slice(&self.event);
        out.to_vec()
    }

    /// Parses a record, checking that its event parses.
    pub fn decode(bytes: &[u8]) -> Result<StoreRecord, StoreRecordError> {
        let trunc = |what, need, have| StoreRecordError::Truncated { what, need, have };
        let (&version, rest) = bytes
            .split_first()
            .ok_or(trunc("version", 1, bytes.len()))?;
        if version != RECORD_VERSION && version != RECORD_VERSION_1 {
            return Err(StoreRecordError::UnknownVersion { version });
        }
        let u64_at = |rest: &[u8], what| -> Result<u64, StoreRecordError> {
            rest.get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or(trunc(what, 8, rest.len()))
        };
        let time = u64_at(rest, "stored-at time")?;
        let rest = &rest[8..];
        let (origin, rest) = if version == RECORD_VERSION_1 {
            (0, rest)
        } else {
            (u64_at(rest, "origin")?, &rest[8..])
        };
        let len: [u8; 4] = rest.get(..4).and_then(|b| b.try_into().ok()).ok_or(trunc(
            "event length",
            4,
            rest.len(),
        ))?;
        let rest = &rest[4..];
        let len = u32::from_le_bytes(len) as usize;
        let event = rest.get(..len).ok_or(trunc("event", len, rest.len()))?;
        if rest.len() > len {
            return Err(StoreRecordError::TrailingBytes {
                extra: rest.len() - len,
            });
        }
        EventRef::parse(event).map_err(StoreRecordError::BadEvent)?;
        Ok(StoreRecord {
            stored_at_ns: time,
            origin,
            event: Bytes::copy_from_slice(event),
        })
    }
}

/// Where a replay starts (`tagwire sub TAG --replay-from …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayFrom {
    /// Everything the store holds for the tag (`start`).
    Start,
    /// Events whose publisher sequence number is at least this (`SEQ`).
    Seq(u64),
    /// Events whose source time is at least this, ns since the Unix epoch
    /// (`time:NS`).
    Time(u64),
    /// Events whose source time is at most this long before the replay
    /// starts, ns (`30s`, `5m`; the client turns it into a [`Time`](Self::Time)).
    Ago(u64),
}

/// A `--replay-from` value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid replay start {}: expected start, a sequence number, time:NS (ns since the Unix epoch) or a duration ago such as 30s or 5m", tagwire_proto::excerpt(.value))]
pub struct ReplayFromError {
    /// The value given.
    pub value: String,
}

impl std::str::FromStr for ReplayFrom {
    type Err = ReplayFromError;
    fn from_str(s: &str) -> Result<Self, ReplayFromError> {
        let bad = || ReplayFromError {
            value: s.to_owned(),
        };
        if s == "start" {
            return Ok(ReplayFrom::Start);
        }
        if let Some(t) = s.strip_prefix("time:") {
            return t.parse().map(ReplayFrom::Time).map_err(|_| bad());
        }
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return s.parse().map(ReplayFrom::Seq).map_err(|_| bad());
        }
        const UNITS: [(&str, u64); 6] = [
            ("ns", 1),
            ("us", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("m", 60_000_000_000),
            ("h", 3_600_000_000_000),
        ];
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (n, unit) = s.split_at(digits);
        let n: u64 = n.parse().map_err(|_| bad())?;
        let (_, scale) = UNITS.iter().find(|(u, _)| *u == unit).ok_or_else(bad)?;
        n.checked_mul(*scale).map(ReplayFrom::Ago).ok_or_else(bad)
    }
}

/// A tag's retention bounds (`[store]` in the daemon's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most records kept per tag.
    pub max_events: u64,
    /// Most event bytes kept per tag.
    pub max_bytes: u64,
    /// Oldest record kept, ns after it was stored (0: no age bound).
    pub max_age_ns: u64,
}

/// One tag's records, oldest first, as the retention rule sees them:
/// position, bytes and stored-at time of each (24 bytes per record in
/// memory; rebuilt from the database when the daemon starts).
#[derive(Debug, Default, Clone)]
pub struct TagLog {
    records: VecDeque<(u64, u64, u64)>,
    bytes: u64,
    /// A record was stored more than [`SEEK_TOLERANCE_NS`] before the one
    /// ahead of it (the daemon's clock stepped back): [`TagLog::seek`]
    /// gives up until the log is empty again.
    disordered: bool,
}

/// How far a publisher's clock may be ahead of its daemon's for
/// [`TagLog::seek`] to be exact: an event's source time is at most this
/// after the time the daemon stored it.
pub const SEEK_CLOCK_MARGIN_NS: u64 = 60_000_000_000;
/// How far out of order stored-at times may be (lanes queue events
/// concurrently) and [`TagLog::seek`] still used.
pub const SEEK_TOLERANCE_NS: u64 = 1_000_000_000;

impl TagLog {
    /// Notes a record loaded or written at `pos` (positions rise).
    pub fn push(&mut self, pos: u64, bytes: u64, stored_at_ns: u64) {
        if self
            .records
            .back()
            .is_some_and(|r| stored_at_ns.saturating_add(SEEK_TOLERANCE_NS) < r.2)
        {
            self.disordered = true;
        }
        self.records.push_back((pos, bytes, stored_at_ns));
        self.bytes += bytes;
    }

    /// Records held.
    pub fn len(&self) -> u64 {
        self.records.len() as u64
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Event bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the oldest record is past the age bound at `now_ns`.
    pub fn expired(&self, limits: &Retention, now_ns: u64) -> bool {
        limits.max_age_ns > 0
            && self
                .records
                .front()
                .is_some_and(|r| now_ns.saturating_sub(r.2) > limits.max_age_ns)
    }

    /// Where a replay of the events whose source time is at least
    /// `from_ns` may start reading instead of at the oldest record: the
    /// first position stored less than [`SEEK_CLOCK_MARGIN_NS`] (plus
    /// [`SEEK_TOLERANCE_NS`]) before `from_ns`. Every record before it was
    /// stored earlier, so its source time is before `from_ns` as long as
    /// the publisher's clock was not more than the margin ahead of the
    /// daemon's. `None`: read from the oldest (`from_ns` is 0, or the
    /// stored-at times went back by more than the tolerance). A binary
    /// search: O(log n).
    pub fn seek(&self, from_ns: u64) -> Option<u64> {
        if from_ns == 0 || self.disordered {
            return None;
        }
        let before = from_ns.saturating_sub(SEEK_CLOCK_MARGIN_NS + SEEK_TOLERANCE_NS);
        let i = self.records.partition_point(|r| r.2 < before);
        match self.records.get(i) {
            Some(r) => Some(r.0),
            None => self.records.back().map(|r| r.0 + 1),
        }
    }

    /// Oldest and newest positions held.
    pub fn span(&self) -> Option<(u64, u64)> {
        Some((self.records.front()?.0, self.records.back()?.0))
    }

    /// Removes the oldest records until the count, the bytes and (at
    /// `now_ns`) the age bound all hold; returns the positions to delete,
    /// oldest first. The newest record goes too if it alone breaks a bound.
    pub fn evict(&mut self, limits: &Retention, now_ns: u64) -> Vec<u64> {
        let mut gone = Vec::new();
        while let Some(&(pos, bytes, at)) = self.records.front() {
            let too_many = self.records.len() as u64 > limits.max_events;
            let too_big = self.bytes > limits.max_bytes;
            let too_old = limits.max_age_ns > 0 && now_ns.saturating_sub(at) > limits.max_age_ns;
            if !(too_many || too_big || too_old) {
                break;
            }
            self.records.pop_front();
            self.bytes -= bytes;
            gone.push(pos);
        }
        if self.records.is_empty() {
            self.disordered = false;
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_from_parses_each_form_and_names_a_bad_one() {
        assert_eq!("start".parse(), Ok(ReplayFrom::Start));
        assert_eq!("42".parse(), Ok(ReplayFrom::Seq(42)));
        assert_eq!("time:5".parse(), Ok(ReplayFrom::Time(5)));
        assert_eq!("30s".parse(), Ok(ReplayFrom::Ago(30_000_000_000)));
        for bad in [
            "",
            "s",
            "-1",
            "time:x",
            "3 s",
            "1y",
            "99999999999999999999h",
        ] {
            let e = bad.parse::<ReplayFrom>().unwrap_err();
            assert!(e.to_string().contains("expected start"), "{bad}: {e}");
        }
    }

    #[test]
    fn retention_evicts_oldest_first_at_each_bound() {
        let limits = Retention {
            max_events: 3,
            max_bytes: 100,
            max_age_ns: 1_000,
        };
        let mut log = TagLog::default();
        for pos in 1..=4 {
            log.push(pos, 10, pos * 100);
        }
        assert_eq!(log.evict(&limits, 400), vec![1], "count bound");
        log.push(5, 85, 500);
        assert_eq!(log.evict(&limits, 500), vec![2, 3], "byte bound");
        assert_eq!(log.span(), Some((4, 5)));
        assert_eq!((log.len(), log.bytes()), (2, 95));
        assert_eq!(log.evict(&limits, 1_450), vec![4], "age bound");
        assert_eq!(
            log.evict(&limits, 1_501),
            vec![5],
            "age bound, the newest too"
        );
        assert!(log.is_empty());
    }
}
