//! Pins: read-only references to a payload in place that outlive a
//! sample, counted per pin row (one per reading process), so that the
//! daemon can hand a payload to another process and take it back when that
//! process dies.
#![allow(unsafe_code)]

use super::*;

impl Region {
    /// Takes a free pin row (`consumers_max` rows per region); see [`PinRow`].
    pub fn pin_row(&self) -> Result<PinRow, Error> {
        let chunks = self.map.layout.geometry.chunks;
        for row in 0..self.map.layout.consumers_max {
            let head = self.map.row_head(row);
            if head.used.compare_exchange(0, 1, SeqCst, Relaxed).is_err() {
                continue;
            }
            let gen = head.gen.load(SeqCst) & PIN_COUNT_MASK;
            head.holder.store(0, SeqCst);
            for c in 0..chunks {
                self.map.pin_word(row, c).store(gen << 16, SeqCst);
            }
            return Ok(PinRow {
                inner: Arc::new(RowInner {
                    map: self.map.clone(),
                    row,
                    gen,
                    abandoned: false.into(),
                }),
            });
        }
        Err(Error::Unavailable {
            what: "pin row (all taken), consumers_max",
            index: self.map.layout.consumers_max as u64,
        })
    }

    /// The holder's side of the pin row named by `ticket` ([`PinRow::ticket`]):
    /// records this process as its holder. Refused if the row is not in use
    /// in that generation.
    pub fn pin_holder(&self, ticket: u32) -> Result<PinHolder, Error> {
        let (row, gen) = (ticket >> 16, ticket & PIN_COUNT_MASK);
        if row >= self.map.layout.consumers_max {
            return Err(Error::Unavailable {
                what: "pin row",
                index: row as u64,
            });
        }
        let head = self.map.row_head(row);
        if head.used.load(SeqCst) != 1 || head.gen.load(SeqCst) & PIN_COUNT_MASK != gen {
            return Err(Error::Unavailable {
                what: "pin row in generation",
                index: gen as u64,
            });
        }
        head.holder.store(my_pid(), SeqCst);
        Ok(PinHolder {
            map: self.map.clone(),
            row,
            gen,
        })
    }
}

/// A row of the region's pin ledger, owned by a relay that hands packet
/// references on (the daemon keeps one per subscriber connection and
/// region). Every [`Pin`] recorded in it keeps its chunk from being
/// reallocated, even after the packet's slot was reused, so a reference in
/// flight (queued, in a socket, in a subscriber's queue) never reads torn or
/// lost data. Dropping the row (once no [`Pin`] made through it is left in
/// this process) gives back every pin still recorded, including those handed
/// over to its holder, and bumps the row's generation so a late unpin by an
/// old holder changes nothing.
pub struct PinRow {
    inner: Arc<RowInner>,
}

struct RowInner {
    map: Arc<Mapping>,
    row: u32,
    gen: u32,
    /// Set by [`PinRow::abandon`]: the row's pins stay as they are.
    abandoned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PinRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinRow")
            .field("row", &self.inner.row)
            .field("gen", &self.inner.gen)
            .finish()
    }
}

impl PinRow {
    /// What the row's holder needs to adopt its pins ([`Region::pin_holder`]):
    /// the row index (high 16 bits) and its generation (low 16).
    pub fn ticket(&self) -> u32 {
        self.inner.row << 16 | self.inner.gen
    }

    /// Pins recorded in the row now (made here and not yet given back by
    /// this process or by the holder they were handed over to).
    pub fn held(&self) -> u32 {
        let r = &self.inner;
        (0..r.map.layout.geometry.chunks)
            .map(|c| r.map.pin_word(r.row, c).load(SeqCst))
            .filter(|w| w >> 16 == r.gen)
            .map(|w| w & PIN_COUNT_MASK)
            .sum()
    }

    /// Lets go of the row without giving its pins back: for a region whose
    /// producer is gone for good, so no chunk will be written again, and a
    /// holder may still adopt pins handed over to it (events in flight).
    /// The row stays taken; the memory goes with the region's last mapping.
    pub fn abandon(&self) {
        self.inner.abandoned.store(true, Relaxed);
    }

    /// Whether a process adopted this row's pins ([`Region::pin_holder`])
    /// and still lives: if not, pins still recorded will never be given
    /// back by a holder, and the row may be dropped.
    pub fn holder_alive(&self) -> bool {
        let pid = self.inner.map.row_head(self.inner.row).holder.load(SeqCst);
        pid != 0 && !pid_gone(pid)
    }
}

impl Drop for RowInner {
    fn drop(&mut self) {
        if self.abandoned.load(Relaxed) {
            return;
        }
        let head = self.map.row_head(self.row);
        let next = (self.gen + 1) & PIN_COUNT_MASK;
        head.gen.store(next, SeqCst);
        for c in 0..self.map.layout.geometry.chunks {
            let old = self.map.pin_word(self.row, c).swap(next << 16, SeqCst);
            if old >> 16 == self.gen {
                let n = old & PIN_COUNT_MASK;
                let _ = self
                    .map
                    .chunk_meta(c)
                    .refs
                    .fetch_update(SeqCst, SeqCst, |r| Some(r.saturating_sub(n)));
            }
        }
        head.holder.store(0, SeqCst);
        head.used.store(0, SeqCst);
    }
}

/// The holder's side of a [`PinRow`] (e.g. a subscriber process): adopts
/// the pins handed over to it.
#[derive(Clone)]
pub struct PinHolder {
    map: Arc<Mapping>,
    row: u32,
    gen: u32,
}

impl std::fmt::Debug for PinHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinHolder")
            .field("row", &self.row)
            .field("gen", &self.gen)
            .finish()
    }
}

impl PinHolder {
    /// The region the row belongs to.
    pub fn region(&self) -> Region {
        Region {
            map: self.map.clone(),
        }
    }

    /// Adopts the pin handed over for `chunk`, holding a packet of `len`
    /// bytes: readable in place until dropped, which gives the pin back.
    /// Refused if the indices are out of range or the row holds no pin of
    /// that chunk in this generation (never handed over, or the row was reset).
    pub fn adopt(&self, chunk: u32, len: u64) -> Result<Pin, Error> {
        let g = self.map.layout.geometry;
        if chunk >= g.chunks {
            return Err(Error::Unavailable {
                what: "chunk",
                index: chunk as u64,
            });
        }
        if len > g.chunk_bytes {
            return Err(Error::PacketTooLarge {
                len,
                max: g.chunk_bytes,
            });
        }
        let w = self.map.pin_word(self.row, chunk).load(SeqCst);
        if w >> 16 != self.gen || w & PIN_COUNT_MASK == 0 {
            return Err(Error::Unavailable {
                what: "pin (not handed over, or its row was reset) of chunk",
                index: chunk as u64,
            });
        }
        Ok(Pin {
            map: self.map.clone(),
            row: self.row,
            gen: self.gen,
            chunk,
            len: len as usize,
            armed: true,
            _row: None,
        })
    }
}

/// A packet's bytes kept from reuse by a pin recorded in a [`PinRow`]:
/// readable in place until dropped, which gives the pin back (unless it was
/// handed over to the row's holder with [`Pin::hand_over`]).
pub struct Pin {
    map: Arc<Mapping>,
    row: u32,
    gen: u32,
    chunk: u32,
    len: usize,
    armed: bool,
    /// Keeps the row (and so the pin's count in it) while this pin lives here.
    _row: Option<Arc<RowInner>>,
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pin")
            .field("row", &self.row)
            .field("chunk", &self.chunk)
            .field("len", &self.len)
            .finish()
    }
}

impl Pin {
    /// Records a pin of `chunk` in `row`. The caller keeps the chunk from
    /// being reallocated meanwhile (a hazard, or another pin of it).
    pub(super) fn record(
        map: &Arc<Mapping>,
        row: &PinRow,
        chunk: u32,
        len: usize,
    ) -> Result<Pin, Error> {
        let r = &row.inner;
        if !Arc::ptr_eq(map, &r.map) {
            return Err(Error::OtherRegion);
        }
        let meta = map.chunk_meta(chunk);
        meta.refs.fetch_add(1, SeqCst);
        let counted = map
            .pin_word(r.row, chunk)
            .fetch_update(SeqCst, SeqCst, |w| {
                (w >> 16 == r.gen && w & PIN_COUNT_MASK < PIN_COUNT_MASK).then(|| w + 1)
            });
        if counted.is_err() {
            release_ref(meta);
            return Err(Error::Unavailable {
                what: "pin count (65535 per chunk and row) of chunk",
                index: chunk as u64,
            });
        }
        Ok(Pin {
            map: map.clone(),
            row: r.row,
            gen: r.gen,
            chunk,
            len,
            armed: true,
            _row: Some(row.inner.clone()),
        })
    }

    /// Pins the same packet in `row` too (for another holder).
    pub fn pin_to(&self, row: &PinRow) -> Result<Pin, Error> {
        Pin::record(&self.map, row, self.chunk, self.len)
    }

    /// The data chunk that holds the packet (for the holder's [`PinHolder::adopt`]).
    pub fn chunk(&self) -> u32 {
        self.chunk
    }

    /// Hands the pin over to its row's holder, which gives it back when done
    /// ([`PinHolder::adopt`], then drop); returns the chunk to name to it.
    pub fn hand_over(mut self) -> u32 {
        self.armed = false;
        self.chunk
    }
}

impl std::ops::Deref for Pin {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: chunk < chunks and len <= chunk_bytes were checked when the
        // pin was made (Geometry::chunk_of under a hazard, or PinHolder::adopt);
        // the pin holds a chunk reference, so the allocator never gives the
        // chunk to a producer to write while it lives.
        unsafe { std::slice::from_raw_parts(self.map.chunk_ptr(self.chunk), self.len) }
    }
}

impl AsRef<[u8]> for Pin {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let gen = self.gen;
        let given_back =
            self.map
                .pin_word(self.row, self.chunk)
                .fetch_update(SeqCst, SeqCst, |w| {
                    (w >> 16 == gen && w & PIN_COUNT_MASK > 0).then(|| w - 1)
                });
        if given_back.is_ok() {
            release_ref(self.map.chunk_meta(self.chunk));
        }
    }
}
