//! Fragmentation and coalescing of payloads larger than a frame (issue 25
//! item 5; docs/reliability.md, "Large payloads").
//!
//! A sender cuts a blob (an encoded event) into pieces that each fit in the
//! negotiated frame ([`Outgoing`]); every piece carries the blob's id, its
//! total length, a CRC-32 of the whole and its offset. The receiver puts the
//! pieces together in a [`Reassembler`], bounded per connection (or per peer
//! daemon) in blobs and bytes, and hands back the whole blob once every byte
//! is there and the checksum matches.
//!
//! **Resumable.** A reassembly outlives the connection it started on: when
//! the sender sends the same blob again (a reliable event routed again after
//! a reconnect), the receiver recognises it by (id, total, checksum) and
//! says which prefix it holds ([`Reassembler::resume_point`]); the sender
//! moves its cursor there ([`Outgoing::resume`]) instead of sending the
//! bytes again.
//!
//! **Bounds.** [`ReassemblyLimits`]: a blob over `max_payload` (at most
//! [`MAX_PAYLOAD`], 4 GiB) is refused; past `max_blobs` or `max_bytes` the
//! oldest incomplete reassembly is dropped and reported, so the caller can
//! tell its sender; a reassembly with more than [`MAX_GAPS`] disjoint ranges
//! is refused (a peer cannot make the bookkeeping grow).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use bytes::Bytes;

/// The largest blob the protocol can fragment: 4 GiB.
pub const MAX_PAYLOAD: u64 = 1 << 32;

/// Most disjoint received ranges one reassembly keeps (pieces arriving out
/// of order); a piece that would make more is refused.
pub const MAX_GAPS: usize = 1024;

/// The checksum of a whole blob (CRC-32, IEEE): what every piece carries.
pub fn checksum(blob: &[u8]) -> u32 {
    crc32fast::hash(blob)
}

/// The fixed description every piece of one blob carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlobId {
    /// The sender's id for the blob (stable across resends of the same blob).
    pub id: u64,
    /// The blob's length in bytes.
    pub total: u64,
    /// [`checksum`] of the whole blob.
    pub checksum: u32,
}

/// One piece of a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Which blob.
    pub blob: BlobId,
    /// Where `data` starts in the blob.
    pub offset: u64,
    /// The bytes (a shared slice of the sender's blob: no copy).
    pub data: Bytes,
}

/// A blob being sent in pieces of at most `chunk` bytes, from a cursor that
/// a receiver's resume point can move forward.
#[derive(Debug, Clone)]
pub struct Outgoing {
    blob: BlobId,
    data: Bytes,
    chunk: usize,
    next: u64,
}

/// Why a blob cannot be sent in pieces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutgoingError {
    /// Over [`MAX_PAYLOAD`].
    #[error("payload of {len} bytes is over the fragmentation limit of {max} bytes")]
    TooLarge {
        /// Its length.
        len: u64,
        /// [`MAX_PAYLOAD`].
        max: u64,
    },
    /// A piece size of 0.
    #[error("fragment size 0")]
    ZeroChunk,
}

impl Outgoing {
    /// Prepares `data` to go in pieces of at most `chunk` bytes under `id`
    /// (computes the checksum: one pass over the blob).
    pub fn new(id: u64, data: Bytes, chunk: usize) -> Result<Outgoing, OutgoingError> {
        if data.len() as u64 > MAX_PAYLOAD {
            return Err(OutgoingError::TooLarge {
                len: data.len() as u64,
                max: MAX_PAYLOAD,
            });
        }
        if chunk == 0 {
            return Err(OutgoingError::ZeroChunk);
        }
        let blob = BlobId {
            id,
            total: data.len() as u64,
            checksum: checksum(&data),
        };
        Ok(Outgoing {
            blob,
            data,
            chunk,
            next: 0,
        })
    }

    /// The blob's description.
    pub fn blob(&self) -> BlobId {
        self.blob
    }

    /// The offset of the next piece.
    pub fn cursor(&self) -> u64 {
        self.next
    }

    /// Whether every piece went out.
    pub fn is_done(&self) -> bool {
        self.next >= self.blob.total && !(self.blob.total == 0 && self.next == 0)
    }

    /// The next piece (a shared slice), without moving the cursor.
    pub fn peek(&self) -> Option<Piece> {
        if self.is_done() {
            return None;
        }
        let start = self.next as usize;
        let end = (start + self.chunk).min(self.data.len());
        Some(Piece {
            blob: self.blob,
            offset: self.next,
            data: self.data.slice(start..end),
        })
    }

    /// Marks the piece [`peek`](Self::peek) gave as sent.
    pub fn advance(&mut self) {
        if self.blob.total == 0 {
            self.next = 1; // the one empty piece went
            return;
        }
        self.next = (self.next + self.chunk as u64).min(self.blob.total);
    }

    /// The receiver holds `have` bytes from the start: continue there. A
    /// point past the end is ignored (a bad peer); a point behind the cursor
    /// moves it back (the receiver lost what it had: it says 0).
    pub fn resume(&mut self, have: u64) {
        if have <= self.blob.total {
            self.next = have;
        }
    }
}

/// The bounds of a [`Reassembler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyLimits {
    /// Largest blob accepted (≤ [`MAX_PAYLOAD`]).
    pub max_payload: u64,
    /// Most reassemblies held at once.
    pub max_blobs: usize,
    /// Most bytes held by all reassemblies together (each is charged its
    /// whole length when it starts).
    pub max_bytes: u64,
}

impl Default for ReassemblyLimits {
    fn default() -> Self {
        ReassemblyLimits {
            max_payload: MAX_PAYLOAD,
            max_blobs: 16,
            max_bytes: MAX_PAYLOAD,
        }
    }
}

/// Why a piece was refused. The reassembly it named (if any) is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FragmentError {
    /// A blob over `max_payload`.
    #[error("fragmented payload of {total} bytes is over the limit of {max} bytes")]
    TooLarge {
        /// Its declared length.
        total: u64,
        /// The limit.
        max: u64,
    },
    /// A blob that alone is over the bytes all reassemblies may hold.
    #[error("fragmented payload of {total} bytes is over the reassembly memory of {max} bytes")]
    OverBudget {
        /// Its declared length.
        total: u64,
        /// `max_bytes`.
        max: u64,
    },
    /// A piece reaching past the blob's end.
    #[error("fragment at offset {offset} of {len} bytes reaches past the payload's {total} bytes")]
    OutOfBounds {
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u64,
        /// The blob's length.
        total: u64,
    },
    /// An empty piece of a non-empty blob.
    #[error("empty fragment of a payload of {total} bytes")]
    Empty {
        /// The blob's length.
        total: u64,
    },
    /// Too many disjoint ranges.
    #[error("fragments of payload {id:#x} left more than {max} gaps")]
    TooManyGaps {
        /// The blob id.
        id: u64,
        /// [`MAX_GAPS`].
        max: usize,
    },
    /// Every byte came and the checksum does not match.
    #[error(
        "reassembled payload {id:#x} has checksum {got:#010x}, its fragments said {expected:#010x}"
    )]
    Checksum {
        /// The blob id.
        id: u64,
        /// What the pieces declared.
        expected: u32,
        /// What the bytes give.
        got: u32,
    },
}

/// What a piece did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Stored; the blob is not complete. `have`: the bytes held from the
    /// start (the resume point). `resumed`: this is the first piece of a
    /// blob the reassembler already held part of (a resend): tell the
    /// sender `have`.
    Partial {
        /// Contiguous bytes held from offset 0.
        have: u64,
        /// A resend of a blob already partly held.
        resumed: bool,
    },
    /// The whole blob, checked.
    Complete(Bytes),
    /// A late piece of a blob completed a moment ago (one of the last
    /// [`REMEMBERED_COMPLETE`]): ignored; tell the sender it may stop
    /// (resume point: the blob's length).
    AlreadyComplete,
}

/// How many completed blobs a reassembler remembers, so that the pieces a
/// sender still had in flight when the blob completed do not start a new
/// reassembly.
pub const REMEMBERED_COMPLETE: usize = 64;

/// The outcome of one piece: its progress and the reassemblies dropped to
/// make room (oldest first), which the caller reports to their senders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted<K> {
    /// The piece's effect.
    pub progress: Progress,
    /// Incomplete reassemblies dropped at the bound.
    pub dropped: Vec<(K, BlobId)>,
}

/// Counters of a [`Reassembler`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReassemblyCounters {
    /// Blobs completed.
    pub completed: u64,
    /// Incomplete reassemblies dropped at a bound (or replaced by a
    /// different blob under the same key).
    pub dropped: u64,
    /// Pieces refused ([`FragmentError`]).
    pub refused: u64,
    /// Resends recognised (a piece at offset 0 of a blob partly held).
    pub resumed: u64,
    /// Bytes that arrived again (already held).
    pub duplicate_bytes: u64,
}

#[derive(Debug)]
struct Partial {
    blob: BlobId,
    buf: Vec<u8>,
    /// Disjoint, sorted, non-adjacent received ranges `[start, end)`.
    ranges: Vec<(u64, u64)>,
    /// Start order (smaller = older).
    order: u64,
}

impl Partial {
    fn have(&self) -> u64 {
        match self.ranges.first() {
            Some(&(0, end)) => end,
            _ => 0,
        }
    }

    fn complete(&self) -> bool {
        self.ranges.len() == 1 && self.ranges[0] == (0, self.blob.total)
    }

    /// Adds `[start, end)`; the bytes not held before go into the buffer.
    /// Returns the bytes that were held already, or `None` past `MAX_GAPS`.
    fn insert(&mut self, start: u64, data: &[u8]) -> Option<u64> {
        let end = start + data.len() as u64;
        // Merge with every range that overlaps or touches [start, end).
        let first = self.ranges.partition_point(|r| r.1 < start);
        let mut last = first;
        let (mut s, mut e) = (start, end);
        let mut overlap = 0u64;
        while last < self.ranges.len() && self.ranges[last].0 <= end {
            let (rs, re) = self.ranges[last];
            overlap += re.min(end).saturating_sub(rs.max(start));
            s = s.min(rs);
            e = e.max(re);
            last += 1;
        }
        if first == last && self.ranges.len() >= MAX_GAPS {
            return None;
        }
        // Copy the new bytes (copying held ones again is harmless: the
        // checksum decides in the end; a differing resend is caught there).
        self.buf[start as usize..end as usize].copy_from_slice(data);
        self.ranges.splice(first..last, [(s, e)]);
        Some(overlap)
    }
}

/// Puts pieces back together, for one connection or one peer, keyed by
/// `K` (e.g. the blob id, or a peer and the blob id). See the module docs.
#[derive(Debug)]
pub struct Reassembler<K> {
    limits: ReassemblyLimits,
    partials: HashMap<K, Partial>,
    held: u64,
    next_order: u64,
    counters: ReassemblyCounters,
    completed: VecDeque<(K, BlobId)>,
}

impl<K: Hash + Eq + Clone> Reassembler<K> {
    /// Empty, with `limits` (`max_payload` capped at [`MAX_PAYLOAD`]).
    pub fn new(mut limits: ReassemblyLimits) -> Self {
        limits.max_payload = limits.max_payload.min(MAX_PAYLOAD);
        Reassembler {
            limits,
            partials: HashMap::new(),
            held: 0,
            next_order: 0,
            counters: ReassemblyCounters::default(),
            completed: VecDeque::new(),
        }
    }

    /// Bytes held by incomplete reassemblies (their whole lengths).
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Incomplete reassemblies held.
    pub fn len(&self) -> usize {
        self.partials.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.partials.is_empty()
    }

    /// The counters.
    pub fn counters(&self) -> ReassemblyCounters {
        self.counters
    }

    /// The bytes held from the start of `blob` under `key`, if that very
    /// blob (same id, length and checksum) is being reassembled.
    pub fn resume_point(&self, key: &K, blob: &BlobId) -> Option<u64> {
        self.partials
            .get(key)
            .filter(|p| p.blob == *blob)
            .map(Partial::have)
    }

    /// Forgets that the blob under `key` completed, so that pieces of it
    /// that come again start a new reassembly (the caller could not pass
    /// the whole on and will need it again).
    pub fn forget_completed(&mut self, key: &K) {
        self.completed.retain(|(k, _)| k != key);
    }

    /// Forgets the reassembly under `key` (its sender gave it up).
    pub fn forget(&mut self, key: &K) -> Option<BlobId> {
        let p = self.partials.remove(key)?;
        self.held -= p.blob.total;
        Some(p.blob)
    }

    /// Takes one piece for `key`.
    pub fn on_piece(&mut self, key: K, piece: &Piece) -> Result<Accepted<K>, FragmentError> {
        let r = self.on_piece_inner(key, piece);
        if r.is_err() {
            self.counters.refused += 1;
        }
        r
    }

    fn on_piece_inner(&mut self, key: K, piece: &Piece) -> Result<Accepted<K>, FragmentError> {
        let blob = piece.blob;
        let len = piece.data.len() as u64;
        if blob.total > self.limits.max_payload {
            self.forget(&key);
            return Err(FragmentError::TooLarge {
                total: blob.total,
                max: self.limits.max_payload,
            });
        }
        if blob.total > self.limits.max_bytes {
            self.forget(&key);
            return Err(FragmentError::OverBudget {
                total: blob.total,
                max: self.limits.max_bytes,
            });
        }
        if piece.offset > blob.total || len > blob.total - piece.offset {
            self.forget(&key);
            return Err(FragmentError::OutOfBounds {
                offset: piece.offset,
                len,
                total: blob.total,
            });
        }
        if len == 0 && blob.total > 0 {
            self.forget(&key);
            return Err(FragmentError::Empty { total: blob.total });
        }
        let mut dropped = Vec::new();
        // A different blob under the same key replaces the old one.
        if self.partials.get(&key).is_some_and(|p| p.blob != blob) {
            if let Some(old) = self.forget(&key) {
                self.counters.dropped += 1;
                dropped.push((key.clone(), old));
            }
        }
        let mut resumed = false;
        if !self.partials.contains_key(&key) && self.completed.contains(&(key.clone(), blob)) {
            self.counters.duplicate_bytes += len;
            return Ok(Accepted {
                progress: Progress::AlreadyComplete,
                dropped,
            });
        }
        if let Some(p) = self.partials.get(&key) {
            resumed = piece.offset == 0 && !p.ranges.is_empty();
        } else {
            // Whole, in one piece: no buffer at all.
            if piece.offset == 0 && len == blob.total {
                return self.finish_single(key, piece, dropped);
            }
            self.make_room(&key, blob.total, &mut dropped);
            self.held += blob.total;
            let order = self.next_order;
            self.next_order += 1;
            self.partials.insert(
                key.clone(),
                Partial {
                    blob,
                    buf: vec![0; blob.total as usize],
                    ranges: Vec::new(),
                    order,
                },
            );
        }
        if resumed {
            self.counters.resumed += 1;
        }
        let Some(p) = self.partials.get_mut(&key) else {
            unreachable!("the reassembly was found or inserted above");
        };
        match p.insert(piece.offset, &piece.data) {
            Some(dup) => self.counters.duplicate_bytes += dup,
            None => {
                let id = blob.id;
                self.forget(&key);
                return Err(FragmentError::TooManyGaps { id, max: MAX_GAPS });
            }
        }
        if !p.complete() {
            let have = p.have();
            return Ok(Accepted {
                progress: Progress::Partial { have, resumed },
                dropped,
            });
        }
        let Some(p) = self.partials.remove(&key) else {
            unreachable!("the reassembly is held");
        };
        self.held -= blob.total;
        let got = checksum(&p.buf);
        if got != blob.checksum {
            return Err(FragmentError::Checksum {
                id: blob.id,
                expected: blob.checksum,
                got,
            });
        }
        self.remember(key, blob);
        Ok(Accepted {
            progress: Progress::Complete(Bytes::from(p.buf)),
            dropped,
        })
    }

    fn remember(&mut self, key: K, blob: BlobId) {
        self.counters.completed += 1;
        if self.completed.len() >= REMEMBERED_COMPLETE {
            self.completed.pop_front();
        }
        self.completed.push_back((key, blob));
    }

    fn finish_single(
        &mut self,
        key: K,
        piece: &Piece,
        dropped: Vec<(K, BlobId)>,
    ) -> Result<Accepted<K>, FragmentError> {
        let got = checksum(&piece.data);
        if got != piece.blob.checksum {
            return Err(FragmentError::Checksum {
                id: piece.blob.id,
                expected: piece.blob.checksum,
                got,
            });
        }
        self.remember(key, piece.blob);
        Ok(Accepted {
            progress: Progress::Complete(piece.data.clone()),
            dropped,
        })
    }

    /// Drops the oldest incomplete reassemblies (never `keep`) until one of
    /// `total` bytes fits.
    fn make_room(&mut self, keep: &K, total: u64, dropped: &mut Vec<(K, BlobId)>) {
        while !self.partials.is_empty()
            && (self.partials.len() >= self.limits.max_blobs
                || self.held + total > self.limits.max_bytes)
        {
            let Some(oldest) = self
                .partials
                .iter()
                .filter(|(k, _)| *k != keep)
                .min_by_key(|(_, p)| p.order)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(b) = self.forget(&oldest) {
                self.counters.dropped += 1;
                dropped.push((oldest, b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn blob(n: usize) -> Bytes {
        (0..n)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<_>>()
            .into()
    }

    fn pieces(o: &mut Outgoing) -> Vec<Piece> {
        let mut v = Vec::new();
        while let Some(p) = o.peek() {
            v.push(p);
            o.advance();
        }
        v
    }

    fn limits() -> ReassemblyLimits {
        ReassemblyLimits {
            max_payload: 1 << 20,
            max_blobs: 4,
            max_bytes: 1 << 20,
        }
    }

    #[test]
    fn a_blob_cut_in_pieces_reassembles_byte_exact() {
        let data = blob(10_000);
        let mut o = Outgoing::new(7, data.clone(), 999).unwrap();
        let ps = pieces(&mut o);
        assert_eq!(ps.len(), 11);
        let mut r = Reassembler::new(limits());
        let mut out = None;
        for p in &ps {
            if let Progress::Complete(b) = r.on_piece(1u8, p).unwrap().progress {
                out = Some(b);
            }
        }
        assert_eq!(out.as_deref(), Some(&data[..]));
        assert_eq!(r.held_bytes(), 0);
        assert!(r.is_empty());
    }

    #[test]
    fn a_late_piece_of_a_completed_blob_is_ignored_until_its_completion_is_forgotten() {
        let data = blob(3000);
        let mut o = Outgoing::new(4, data.clone(), 1000).unwrap();
        let ps = pieces(&mut o);
        let mut r = Reassembler::new(limits());
        for p in &ps {
            r.on_piece(0u8, p).unwrap();
        }
        assert_eq!(
            r.on_piece(0u8, &ps[0]).unwrap().progress,
            Progress::AlreadyComplete
        );
        assert_eq!(r.held_bytes(), 0);
        r.forget_completed(&0u8);
        assert!(matches!(
            r.on_piece(0u8, &ps[0]).unwrap().progress,
            Progress::Partial { have: 1000, .. }
        ));
    }

    #[test]
    fn an_empty_blob_is_one_empty_piece() {
        let mut o = Outgoing::new(1, Bytes::new(), 10).unwrap();
        let ps = pieces(&mut o);
        assert_eq!(ps.len(), 1);
        let mut r = Reassembler::new(limits());
        assert_eq!(
            r.on_piece(0u8, &ps[0]).unwrap().progress,
            Progress::Complete(Bytes::new())
        );
    }

    #[test]
    fn a_resend_after_a_reconnect_resumes_at_the_held_prefix() {
        let data = blob(5000);
        let mut o = Outgoing::new(9, data.clone(), 1000).unwrap();
        let ps = pieces(&mut o);
        let mut r = Reassembler::new(limits());
        // The first connection carried three pieces, then died.
        for p in &ps[..3] {
            r.on_piece(0u8, p).unwrap();
        }
        // The sender starts again from 0; the receiver recognises it.
        let mut again = Outgoing::new(9, data.clone(), 1000).unwrap();
        let first = again.peek().unwrap();
        let a = r.on_piece(0u8, &first).unwrap();
        assert_eq!(
            a.progress,
            Progress::Partial {
                have: 3000,
                resumed: true
            }
        );
        assert_eq!(r.resume_point(&0u8, &again.blob()), Some(3000));
        again.resume(3000);
        let rest = pieces(&mut again);
        assert_eq!(rest.len(), 2);
        let mut out = None;
        for p in &rest {
            if let Progress::Complete(b) = r.on_piece(0u8, p).unwrap().progress {
                out = Some(b);
            }
        }
        assert_eq!(out.as_deref(), Some(&data[..]));
        assert_eq!(r.counters().resumed, 1);
    }

    #[test]
    fn at_the_blob_bound_the_oldest_incomplete_is_dropped_and_reported() {
        let mut r = Reassembler::new(ReassemblyLimits {
            max_blobs: 2,
            ..limits()
        });
        let first = |id: u64| {
            let mut o = Outgoing::new(id, blob(100), 10).unwrap();
            pieces(&mut o).remove(0)
        };
        assert!(r.on_piece(1u64, &first(1)).unwrap().dropped.is_empty());
        assert!(r.on_piece(2u64, &first(2)).unwrap().dropped.is_empty());
        let a = r.on_piece(3u64, &first(3)).unwrap();
        assert_eq!(a.dropped.len(), 1);
        assert_eq!(a.dropped[0].0, 1);
        assert_eq!(r.len(), 2);
        assert_eq!(r.counters().dropped, 1);
    }

    #[test]
    fn at_the_byte_bound_the_oldest_incomplete_is_dropped() {
        let mut r = Reassembler::new(ReassemblyLimits {
            max_bytes: 250,
            ..limits()
        });
        let first = |id: u64| {
            let mut o = Outgoing::new(id, blob(100), 10).unwrap();
            pieces(&mut o).remove(0)
        };
        r.on_piece(1u64, &first(1)).unwrap();
        r.on_piece(2u64, &first(2)).unwrap();
        assert_eq!(r.held_bytes(), 200);
        let a = r.on_piece(3u64, &first(3)).unwrap();
        assert_eq!(a.dropped.iter().map(|d| d.0).collect::<Vec<_>>(), [1]);
        assert_eq!(r.held_bytes(), 200);
    }

    #[test]
    fn a_blob_over_the_limits_is_refused_naming_its_size() {
        let mut r: Reassembler<u8> = Reassembler::new(limits());
        let p = Piece {
            blob: BlobId {
                id: 1,
                total: 2 << 20,
                checksum: 0,
            },
            offset: 0,
            data: Bytes::from_static(b"x"),
        };
        let e = r.on_piece(0, &p).unwrap_err();
        assert_eq!(
            e,
            FragmentError::TooLarge {
                total: 2 << 20,
                max: 1 << 20
            }
        );
        assert!(e.to_string().contains("2097152 bytes"));
        let over = Piece {
            blob: BlobId {
                id: 1,
                total: MAX_PAYLOAD + 1,
                checksum: 0,
            },
            ..p
        };
        let mut big: Reassembler<u8> = Reassembler::new(ReassemblyLimits {
            max_payload: u64::MAX,
            max_bytes: u64::MAX,
            max_blobs: 1,
        });
        assert!(matches!(
            big.on_piece(0, &over),
            Err(FragmentError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_piece_past_the_end_or_a_bad_checksum_is_refused() {
        let mut r: Reassembler<u8> = Reassembler::new(limits());
        let b = BlobId {
            id: 1,
            total: 10,
            checksum: checksum(b"0123456789"),
        };
        let past = Piece {
            blob: b,
            offset: 8,
            data: Bytes::from_static(b"abc"),
        };
        assert!(matches!(
            r.on_piece(0, &past),
            Err(FragmentError::OutOfBounds {
                offset: 8,
                len: 3,
                total: 10
            })
        ));
        r.on_piece(
            0,
            &Piece {
                blob: b,
                offset: 0,
                data: Bytes::from_static(b"01234"),
            },
        )
        .unwrap();
        let e = r
            .on_piece(
                0,
                &Piece {
                    blob: b,
                    offset: 5,
                    data: Bytes::from_static(b"XXXXX"),
                },
            )
            .unwrap_err();
        assert!(matches!(e, FragmentError::Checksum { id: 1, .. }));
        assert!(r.is_empty());
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn scattered_tiny_pieces_cannot_grow_the_range_list_past_its_bound() {
        let total = (MAX_GAPS as u64 + 2) * 2;
        let mut r: Reassembler<u8> = Reassembler::new(limits());
        let b = BlobId {
            id: 3,
            total,
            checksum: 0,
        };
        let mut refused = None;
        for i in 0..=MAX_GAPS as u64 {
            let p = Piece {
                blob: b,
                offset: i * 2,
                data: Bytes::from_static(b"x"),
            };
            if let Err(e) = r.on_piece(0, &p) {
                refused = Some(e);
                break;
            }
        }
        assert_eq!(
            refused,
            Some(FragmentError::TooManyGaps {
                id: 3,
                max: MAX_GAPS
            })
        );
        assert!(r.is_empty());
    }

    /// What the network may do to a stream of pieces.
    #[derive(Debug, Clone)]
    enum Fate {
        Deliver,
        Lose,
        Duplicate,
    }

    proptest! {
        /// Any split, loss, duplication and reordering: the reassembler
        /// yields the blob byte-exact exactly when every byte arrived
        /// (the model: the union of delivered ranges covers the blob), and
        /// otherwise holds the resume point the model predicts.
        #[test]
        fn reassembly_matches_the_model(
            len in 0usize..3000,
            chunk in 1usize..700,
            fates in prop::collection::vec(
                prop_oneof![4 => Just(Fate::Deliver), 1 => Just(Fate::Lose), 1 => Just(Fate::Duplicate)],
                0..64),
            order in prop::collection::vec(any::<u16>(), 0..64),
        ) {
            let data = blob(len);
            let mut o = Outgoing::new(5, data.clone(), chunk).unwrap();
            let ps = pieces(&mut o);
            // Apply fates, then a permutation.
            let mut sent: Vec<Piece> = Vec::new();
            for (i, p) in ps.iter().enumerate() {
                match fates.get(i).cloned().unwrap_or(Fate::Deliver) {
                    Fate::Deliver => sent.push(p.clone()),
                    Fate::Lose => {}
                    Fate::Duplicate => { sent.push(p.clone()); sent.push(p.clone()); }
                }
            }
            let mut keyed: Vec<(u16, Piece)> = sent.into_iter().enumerate()
                .map(|(i, p)| (order.get(i).copied().unwrap_or(i as u16), p)).collect();
            keyed.sort_by_key(|(k, _)| *k);
            let mut r = Reassembler::new(ReassemblyLimits { max_payload: 1 << 20, max_blobs: 2, max_bytes: 1 << 20 });
            let mut covered = vec![false; len];
            let mut done: Option<Bytes> = None;
            let mut completions = 0;
            for (_, p) in &keyed {
                let a = r.on_piece(0u8, p).unwrap();
                for b in &mut covered[p.offset as usize..p.offset as usize + p.data.len()] { *b = true; }
                if let Progress::Complete(b) = a.progress { done = Some(b); completions += 1; }
            }
            let model_complete = covered.iter().all(|c| *c) && !keyed.is_empty();
            if model_complete {
                prop_assert!(completions >= 1);
                prop_assert_eq!(done.as_deref(), Some(&data[..]));
            } else {
                prop_assert!(done.is_none());
                let prefix = covered.iter().take_while(|c| **c).count() as u64;
                if !keyed.is_empty() {
                    prop_assert_eq!(r.resume_point(&0u8, &o.blob()), Some(prefix));
                }
                // Resume from that point: the rest completes the blob.
                let mut again = Outgoing::new(5, data.clone(), chunk).unwrap();
                again.resume(prefix);
                let mut out = None;
                for p in pieces(&mut again) {
                    if let Progress::Complete(b) = r.on_piece(0u8, &p).unwrap().progress { out = Some(b); }
                }
                prop_assert_eq!(out.as_deref(), Some(&data[..]));
                prop_assert_eq!(r.held_bytes(), 0);
            }
        }

        /// Arbitrary pieces (any ids, lengths, offsets, checksums) never
        /// panic, and the bytes held never exceed the bound.
        #[test]
        fn arbitrary_pieces_keep_the_bounds(
            ps in prop::collection::vec((0u8..4, 0u64..3, 0u64..600, 0u64..700, 0usize..200, any::<u32>()), 0..100)
        ) {
            let lim = ReassemblyLimits { max_payload: 512, max_blobs: 3, max_bytes: 1000 };
            let mut r = Reassembler::new(lim);
            for (key, id, total, offset, len, sum) in ps {
                let p = Piece { blob: BlobId { id, total, checksum: sum }, offset, data: Bytes::from(vec![1u8; len]) };
                let _ = r.on_piece(key, &p);
                prop_assert!(r.held_bytes() <= lim.max_bytes);
                prop_assert!(r.len() <= lim.max_blobs);
            }
        }
    }
}
