//! The mapping of the descriptor state machine onto shared memory: one sealed
//! memfd holding a header, a chunk table, one control area per stream (owner,
//! head, futex words, consumer entries, descriptor ring) and the data area.
//! The only module of the crate with `unsafe`; every block says why it holds.
//!
//! Memory safety rests on three rules: every pointer is computed from an index
//! checked against the geometry validated at attach; the memfd is sealed
//! against shrinking, so the mapping never faults; a data chunk is written only
//! by the producer that allocated it (reference count 1, no consumer hazard),
//! and read only under a hazard that keeps it from being reallocated.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::state::{
    self, consumer_step, reuse, ConsumerCounts, Descriptor, Geometry, Overload, ProducerCounts,
    Reuse, SlotState, Stamp, Step, MAX_SEQ,
};
use crate::Error;

const MAGIC: u64 = u64::from_le_bytes(*b"TAGWSHM1");
const VERSION: u32 = 2;
const HEADER_BYTES: u64 = 4096;
const PAGE: u64 = 4096;

/// The region header (first page). Written once by the creator before the fd is shared.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Header {
    magic: u64,
    version: u32,
    header_bytes: u32,
    total_bytes: u64,
    streams: u32,
    slots: u32,
    consumers_max: u32,
    chunks: u32,
    chunk_bytes: u64,
}

#[repr(C, align(64))]
struct Padded<T>(T);

#[repr(C)]
struct Owner {
    pid: AtomicU32,
    closed: AtomicU32,
}

#[repr(C)]
struct Waiters {
    /// The futex word: bumped by the side that wakes.
    epoch: AtomicU32,
    /// How many are (about to be) asleep on `epoch`.
    waiters: AtomicU32,
}

/// Per-stream control header (four cache lines).
#[repr(C)]
struct StreamCtl {
    owner: Padded<Owner>,
    head: Padded<AtomicU64>,
    consumers_wait: Padded<Waiters>,
    producer_wait: Padded<Waiters>,
}

/// One consumer entry (a cache line).
#[repr(C, align(64))]
struct Entry {
    pid: AtomicU32,
    active: AtomicU32,
    cursor: AtomicU64,
    /// Chunk being read, plus one (0: none): the allocator skips it.
    hazard: AtomicU64,
    spool_to: AtomicU64,
}

/// One packet descriptor (a cache line).
#[repr(C, align(64))]
struct Slot {
    stamp: AtomicU64,
    offset: AtomicU64,
    len: AtomicU64,
    vtime: AtomicU64,
    deadline: AtomicU64,
}

#[repr(C, align(64))]
struct ChunkMeta {
    refs: AtomicU32,
}

/// The header line of a pin row (see [`PinRow`]).
#[repr(C, align(64))]
struct RowHead {
    /// 1 while a [`PinRow`] owns the row.
    used: AtomicU32,
    /// The row's generation (low 16 bits used): pins of an earlier owner no longer count.
    gen: AtomicU32,
    /// The process that adopts the row's pins (0: none yet), so a row left
    /// behind by a crashed holder can be told from one still in use.
    holder: AtomicU32,
}

/// A pin word: the row's generation in the high 16 bits, pins held in the low 16.
const PIN_COUNT_MASK: u32 = 0xffff;

/// Where everything lies in the memfd (bytes from its start); see `docs/shm.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of the memfd.
    pub total_bytes: u64,
    /// Start of the chunk table (64 bytes per chunk: its reference count).
    pub chunk_table: u64,
    /// Start of the pin rows (`consumers_max` rows of `row_bytes`: a header
    /// line, then one u32 per chunk).
    pub pin_rows: u64,
    /// Bytes per pin row.
    pub row_bytes: u64,
    /// Start of stream 0's control area.
    pub streams: u64,
    /// Bytes per stream control area.
    pub stream_bytes: u64,
    /// Offset of the entries inside a stream's control area.
    pub entries_in_stream: u64,
    /// Offset of the descriptor ring inside a stream's control area.
    pub ring_in_stream: u64,
    /// Start of the data area (page-aligned).
    pub data: u64,
    /// The geometry descriptors are checked against.
    pub geometry: Geometry,
    /// Streams in the region.
    pub stream_count: u32,
    /// Consumer entries per stream.
    pub consumers_max: u32,
}

impl Layout {
    fn new(
        streams: u32,
        slots: u32,
        consumers_max: u32,
        chunks: u32,
        chunk_bytes: u64,
    ) -> Option<Self> {
        let ctl = std::mem::size_of::<StreamCtl>() as u64;
        let entries_in_stream = ctl;
        let ring_in_stream = entries_in_stream + 64 * consumers_max as u64;
        let stream_bytes = ring_in_stream + 64 * slots as u64;
        let chunk_table = HEADER_BYTES;
        let pin_rows = chunk_table + 64 * chunks as u64;
        let row_bytes = 64 + (4 * chunks as u64).div_ceil(64) * 64;
        let streams_off = pin_rows.checked_add(row_bytes.checked_mul(consumers_max as u64)?)?;
        let end_ctl = streams_off.checked_add(stream_bytes.checked_mul(streams as u64)?)?;
        let data = end_ctl.checked_add(PAGE - 1)? / PAGE * PAGE;
        let total_bytes = data.checked_add((chunks as u64).checked_mul(chunk_bytes)?)?;
        Some(Self {
            total_bytes,
            chunk_table,
            pin_rows,
            row_bytes,
            streams: streams_off,
            stream_bytes,
            entries_in_stream,
            ring_in_stream,
            data,
            geometry: Geometry {
                slots,
                chunk_bytes,
                chunks,
            },
            stream_count: streams,
            consumers_max,
        })
    }

    /// Offset of descriptor `slot` of `stream` (for tools and tests that inspect the ring).
    pub fn slot_offset(&self, stream: u32, slot: u32) -> u64 {
        self.streams + self.stream_bytes * stream as u64 + self.ring_in_stream + 64 * slot as u64
    }
}

/// Byte offsets of one stream's control header, consumer entries and ring in
/// its mapping ([`Mapping::stream_at`]), so the per-packet paths do not
/// recompute them from the layout.
#[derive(Clone, Copy, Debug)]
struct StreamAt {
    ctl: usize,
    entries: usize,
    ring: usize,
}

/// A live mapping of a region. Unmapped on drop; the memfd goes with the last fd and mapping.
struct Mapping {
    base: *mut u8,
    layout: Layout,
    fd: OwnedFd,
}

// SAFETY: the mapping is shared memory that every process and thread accesses
// through atomics (control area) or under the chunk ownership protocol (data
// area); the raw pointer itself is never mutated after creation.
unsafe impl Send for Mapping {}
// SAFETY: as for Send; `&Mapping` only hands out `&` to atomics and chunk
// pointers whose use is governed by the ownership protocol.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`total_bytes` are exactly what mmap returned and was
        // given; no reference into the mapping outlives it (every handle that
        // lends one holds an `Arc<Mapping>`).
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.layout.total_bytes as usize) };
    }
}

impl Mapping {
    fn map(fd: OwnedFd, layout: Layout) -> Result<Self, Error> {
        // SAFETY: a fresh shared mapping of the whole (sealed, correctly sized)
        // file at an address the kernel picks; nothing aliases it yet.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                layout.total_bytes as usize,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| Error::os("mmap", e))?;
        Ok(Self {
            base: base.cast(),
            layout,
            fd,
        })
    }

    /// # Safety
    /// `off + size_of::<T>() <= total_bytes`, `off` aligned for `T`, and `T`
    /// is made of atomics (valid for any bit pattern, shared access sound).
    unsafe fn at<T>(&self, off: u64) -> &T {
        debug_assert!(off + std::mem::size_of::<T>() as u64 <= self.layout.total_bytes);
        // SAFETY: guaranteed by the caller.
        unsafe { &*self.base.add(off as usize).cast::<T>() }
    }

    /// Where `stream`'s control structures lie, for handles that use them on every packet.
    fn stream_at(&self, stream: u32) -> StreamAt {
        assert!(
            stream < self.layout.stream_count,
            "stream index checked at handle creation"
        );
        let ctl = self.layout.streams + self.layout.stream_bytes * stream as u64;
        StreamAt {
            ctl: ctl as usize,
            entries: (ctl + self.layout.entries_in_stream) as usize,
            ring: (ctl + self.layout.ring_in_stream) as usize,
        }
    }

    #[inline]
    fn ctl_at(&self, at: &StreamAt) -> &StreamCtl {
        // SAFETY: `at` comes from `stream_at` of this mapping (a checked
        // stream index), so the control area lies inside it; 64-aligned; atomics.
        unsafe { &*self.base.add(at.ctl).cast::<StreamCtl>() }
    }

    #[inline]
    fn entry_at(&self, at: &StreamAt, i: u32) -> &Entry {
        assert!(
            i < self.layout.consumers_max,
            "entry index below consumers_max"
        );
        // SAFETY: `at` comes from `stream_at` of this mapping and i <
        // consumers_max, so the entry lies inside the control area; 64-aligned; atomics.
        unsafe { &*self.base.add(at.entries + 64 * i as usize).cast::<Entry>() }
    }

    #[inline]
    fn slot_at(&self, at: &StreamAt, i: u32) -> &Slot {
        assert!(
            i < self.layout.geometry.slots,
            "slot index is seq mod slots"
        );
        // SAFETY: `at` comes from `stream_at` of this mapping and i < slots,
        // so the descriptor lies inside the ring; 64-aligned; atomics.
        unsafe { &*self.base.add(at.ring + 64 * i as usize).cast::<Slot>() }
    }

    fn ctl(&self, stream: u32) -> &StreamCtl {
        assert!(
            stream < self.layout.stream_count,
            "stream index checked at handle creation"
        );
        // SAFETY: stream < stream_count, so the control area lies inside the
        // mapping (Layout::new); offsets are multiples of 64; StreamCtl is atomics.
        unsafe { self.at(self.layout.streams + self.layout.stream_bytes * stream as u64) }
    }

    fn entry(&self, stream: u32, i: u32) -> &Entry {
        assert!(
            stream < self.layout.stream_count && i < self.layout.consumers_max,
            "entry index below consumers_max"
        );
        let off = self.layout.streams
            + self.layout.stream_bytes * stream as u64
            + self.layout.entries_in_stream
            + 64 * i as u64;
        // SAFETY: indices checked above, so inside the control area; 64-aligned; atomics.
        unsafe { self.at(off) }
    }

    fn slot(&self, stream: u32, i: u32) -> &Slot {
        assert!(
            stream < self.layout.stream_count && i < self.layout.geometry.slots,
            "slot index is seq mod slots"
        );
        // SAFETY: indices checked above, so inside the ring; 64-aligned; atomics.
        unsafe { self.at(self.layout.slot_offset(stream, i)) }
    }

    #[inline]
    fn chunk_meta(&self, c: u32) -> &ChunkMeta {
        assert!(
            c < self.layout.geometry.chunks,
            "chunk index validated by Geometry::chunk_of"
        );
        // SAFETY: c < chunks, so inside the chunk table; 64-aligned; atomics.
        unsafe { self.at(self.layout.chunk_table + 64 * c as u64) }
    }

    fn row_head(&self, row: u32) -> &RowHead {
        assert!(
            row < self.layout.consumers_max,
            "row index checked by its handle"
        );
        // SAFETY: row < consumers_max, so the row lies inside the pin rows
        // area (Layout::new); row_bytes and pin_rows are multiples of 64; atomics.
        unsafe { self.at(self.layout.pin_rows + self.layout.row_bytes * row as u64) }
    }

    fn pin_word(&self, row: u32, c: u32) -> &AtomicU32 {
        assert!(
            row < self.layout.consumers_max && c < self.layout.geometry.chunks,
            "row and chunk indices checked by their handles"
        );
        let off = self.layout.pin_rows + self.layout.row_bytes * row as u64 + 64 + 4 * c as u64;
        // SAFETY: indices checked above: the word lies inside the row (64 +
        // 4 * chunks <= row_bytes); 4-aligned; an atomic.
        unsafe { self.at(off) }
    }

    /// Offset of chunk `c` in the mapping: [off, off + chunk_bytes) lies inside it.
    #[inline]
    fn chunk_off(&self, c: u32) -> usize {
        assert!(
            c < self.layout.geometry.chunks,
            "chunk index validated by Geometry::chunk_of"
        );
        (self.layout.data + c as u64 * self.layout.geometry.chunk_bytes) as usize
    }

    #[inline]
    fn chunk_ptr(&self, c: u32) -> *mut u8 {
        let off = self.chunk_off(c);
        // SAFETY: chunk_off checked c < chunks, so the chunk [off, off +
        // chunk_bytes) is inside the mapping.
        unsafe { self.base.add(off) }
    }

    /// Is chunk `c` under some consumer's hazard, in any stream of the region?
    #[inline]
    fn hazard_held(&self, c: u32) -> bool {
        let want = c as u64 + 1;
        let l = &self.layout;
        let first = (l.streams + l.entries_in_stream) as usize;
        (0..l.stream_count as usize).any(|s| {
            let entries = first + s * l.stream_bytes as usize;
            (0..l.consumers_max as usize).any(|i| {
                // SAFETY: s < stream_count and i < consumers_max: entry i of
                // stream s, inside its control area (Layout::new); 64-aligned; atomics.
                let e = unsafe { &*self.base.add(entries + 64 * i).cast::<Entry>() };
                e.hazard.load(SeqCst) == want
            })
        })
    }

    /// Whether chunk `c`, of which the caller holds one reference and which
    /// no descriptor can hand to a new reader any more, is the caller's
    /// alone: no consumer reads it and nobody else holds a reference.
    ///
    /// The caller made every descriptor that named `c` unreadable first (a
    /// new stamp, SeqCst), so a consumer whose hazard store comes after the
    /// hazard loads here fails its stamp re-check (Dekker: SeqCst on both
    /// sides). A consumer seen without a hazard has finished reading; a pin
    /// (or forward) it took under its hazard added to `refs` before the
    /// hazard was cleared (Release), so the count loaded *after* the hazard
    /// loads includes it: checking the count first would miss a pin taken
    /// and its hazard cleared in between. Pins are only ever taken by a
    /// hazard holder or by the holder of another pin of the chunk, which
    /// keeps the count above 1 until it is given back.
    #[inline]
    fn exclusive(&self, c: u32) -> bool {
        !self.hazard_held(c) && self.chunk_meta(c).refs.load(SeqCst) == 1
    }

    /// Takes a free chunk (reference count 0 → 1, no hazard), starting at `hint`.
    fn alloc_chunk(&self, hint: &mut u32) -> Option<u32> {
        let n = self.layout.geometry.chunks;
        let mut c = (*hint).min(n - 1);
        for _ in 0..n {
            let this = c;
            c = if c + 1 == n { 0 } else { c + 1 };
            let c = this;
            let meta = self.chunk_meta(c);
            if meta.refs.load(Relaxed) != 0
                || meta.refs.compare_exchange(0, 1, SeqCst, Relaxed).is_err()
            {
                continue;
            }
            // A count of 0 means every descriptor naming `c` was re-stamped
            // before its reference was dropped (see `exclusive`).
            if !self.exclusive(c) {
                release_ref(meta);
                continue;
            }
            *hint = if c + 1 == n { 0 } else { c + 1 };
            return Some(c);
        }
        None
    }
}

/// Drops one reference (saturating: a count a peer corrupted to 0 stays 0).
#[inline]
fn release_ref(meta: &ChunkMeta) {
    let _ = meta.refs.fetch_update(SeqCst, SeqCst, |r| r.checked_sub(1));
}

fn my_pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// Is process `pid` gone? (EPERM means it exists under another user.) A
/// value no process can have (0, or past `i32::MAX`, which `kill` would
/// take for a process group) written by a peer counts as gone.
fn pid_gone(pid: u32) -> bool {
    match i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        None => true,
        Some(p) => rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH),
    }
}

fn wake_all(w: &Waiters) {
    w.epoch.fetch_add(1, SeqCst);
    let _ = rustix::thread::futex::wake(
        &w.epoch,
        rustix::thread::futex::Flags::empty(),
        i32::MAX as u32,
    );
}

fn futex_wait(w: &Waiters, seen: u32, timeout: Duration) {
    let ts = rustix::thread::futex::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    // EAGAIN (the epoch moved), EINTR and ETIMEDOUT all mean "look again".
    let _ = rustix::thread::futex::wait(
        &w.epoch,
        rustix::thread::futex::Flags::empty(),
        seen,
        Some(&ts),
    );
}

/// Geometry and bounds of a region.
#[derive(Clone, Copy, Debug)]
pub struct RegionConfig {
    /// Streams (control areas) sharing the data area.
    pub streams: u32,
    /// Descriptors per stream ring.
    pub slots: u32,
    /// Consumer entries per stream.
    pub consumers_max: u32,
    /// Data chunks (one packet each).
    pub chunks: u32,
    /// Bytes per chunk: the largest packet.
    pub chunk_bytes: u64,
    /// Refuse regions larger than this (bytes).
    pub max_total_bytes: u64,
    /// Reserve the memory at creation (fallocate), as DSI reserves at stream creation;
    /// out of memory is then an error at creation rather than a fault later.
    pub reserve: bool,
}

impl Default for RegionConfig {
    fn default() -> Self {
        Self {
            streams: 1,
            slots: 16,
            consumers_max: 4,
            chunks: 16 + 4 + 1,
            chunk_bytes: 64 * 1024,
            max_total_bytes: 1 << 30,
            reserve: true,
        }
    }
}

/// A region: one memfd with a data area shared by one or more streams (DSI memory chaining).
#[derive(Clone)]
pub struct Region {
    map: Arc<Mapping>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("layout", &self.map.layout)
            .finish()
    }
}

impl Region {
    /// Creates, sizes, seals, reserves and maps a new region.
    pub fn create(cfg: RegionConfig) -> Result<Self, Error> {
        let bad = |what, value: u64| Err(Error::InvalidConfig { what, value });
        if cfg.streams == 0 || cfg.streams > 1024 {
            return bad("streams", cfg.streams as u64);
        }
        if cfg.slots == 0 || cfg.slots > 1 << 20 {
            return bad("slots", cfg.slots as u64);
        }
        if cfg.consumers_max == 0 || cfg.consumers_max > 1024 {
            return bad("consumers_max", cfg.consumers_max as u64);
        }
        if cfg.chunks == 0 || cfg.chunks > 1 << 24 {
            return bad("chunks", cfg.chunks as u64);
        }
        if cfg.chunk_bytes == 0 || !cfg.chunk_bytes.is_multiple_of(64) {
            return bad("chunk_bytes", cfg.chunk_bytes);
        }
        let layout = Layout::new(
            cfg.streams,
            cfg.slots,
            cfg.consumers_max,
            cfg.chunks,
            cfg.chunk_bytes,
        )
        .ok_or(Error::TooLarge {
            bytes: u64::MAX,
            max: cfg.max_total_bytes,
        })?;
        if layout.total_bytes > cfg.max_total_bytes || layout.total_bytes > isize::MAX as u64 {
            return Err(Error::TooLarge {
                bytes: layout.total_bytes,
                max: cfg.max_total_bytes,
            });
        }
        let fd = rustix::fs::memfd_create(
            "tagwire-shm",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|e| Error::os("memfd_create", e))?;
        rustix::fs::ftruncate(&fd, layout.total_bytes).map_err(|e| Error::os("ftruncate", e))?;
        if cfg.reserve {
            rustix::fs::fallocate(
                &fd,
                rustix::fs::FallocateFlags::empty(),
                0,
                layout.total_bytes,
            )
            .map_err(|e| Error::os("fallocate (reserving the region)", e))?;
        }
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| Error::os("fcntl(F_ADD_SEALS)", e))?;
        let map = Mapping::map(fd, layout)?;
        let header = Header {
            magic: MAGIC,
            version: VERSION,
            header_bytes: HEADER_BYTES as u32,
            total_bytes: layout.total_bytes,
            streams: cfg.streams,
            slots: cfg.slots,
            consumers_max: cfg.consumers_max,
            chunks: cfg.chunks,
            chunk_bytes: cfg.chunk_bytes,
        };
        // SAFETY: the mapping is fresh and not yet shared (the fd has not left
        // this function), page-aligned, and at least HEADER_BYTES long.
        unsafe { std::ptr::write_volatile(map.base.cast::<Header>(), header) };
        Ok(Self { map: Arc::new(map) })
    }

    /// Maps a region another process created; checks size, header and seals first.
    pub fn attach(fd: OwnedFd) -> Result<Self, Error> {
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::os("fstat", e))?;
        let actual = st.st_size as u64;
        if actual < HEADER_BYTES {
            return Err(Error::WrongSize {
                actual,
                expected: HEADER_BYTES,
            });
        }
        let mut buf = [0u8; std::mem::size_of::<Header>()];
        let n = rustix::io::pread(&fd, &mut buf, 0).map_err(|e| Error::os("pread", e))?;
        if n != buf.len() {
            return Err(Error::WrongSize {
                actual,
                expected: HEADER_BYTES,
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
        let h = Header {
            magic: u64_at(0),
            version: u32_at(8),
            header_bytes: u32_at(12),
            total_bytes: u64_at(16),
            streams: u32_at(24),
            slots: u32_at(28),
            consumers_max: u32_at(32),
            chunks: u32_at(36),
            chunk_bytes: u64_at(40),
        };
        let bad = |what, found: u64| Err(Error::BadHeader { what, found });
        if h.magic != MAGIC {
            return bad("magic", h.magic);
        }
        if h.version != VERSION {
            return bad("version", h.version as u64);
        }
        if h.header_bytes as u64 != HEADER_BYTES {
            return bad("header_bytes", h.header_bytes as u64);
        }
        if h.streams == 0 || h.slots == 0 || h.consumers_max == 0 || h.chunks == 0 {
            return bad("a zero count", 0);
        }
        if h.chunk_bytes == 0 || !h.chunk_bytes.is_multiple_of(64) {
            return bad("chunk_bytes", h.chunk_bytes);
        }
        let Some(layout) =
            Layout::new(h.streams, h.slots, h.consumers_max, h.chunks, h.chunk_bytes)
        else {
            return bad("geometry overflows", h.chunk_bytes);
        };
        if layout.total_bytes != h.total_bytes {
            return bad("total_bytes", h.total_bytes);
        }
        if actual != layout.total_bytes {
            return Err(Error::WrongSize {
                actual,
                expected: layout.total_bytes,
            });
        }
        let seals =
            rustix::fs::fcntl_get_seals(&fd).map_err(|e| Error::os("fcntl(F_GET_SEALS)", e))?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(Error::NotSealed);
        }
        Ok(Self {
            map: Arc::new(Mapping::map(fd, layout)?),
        })
    }

    /// The memfd, to pass to another process (e.g. over a Unix socket with SCM_RIGHTS).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.map.fd.as_fd()
    }

    /// Whether `stream`'s producer closed it or its process is gone (a
    /// reader may then let the region go once it has read what it wanted).
    pub fn producer_gone(&self, stream: u32) -> bool {
        if stream >= self.map.layout.stream_count {
            return true;
        }
        let owner = &self.map.ctl(stream).owner.0;
        let pid = owner.pid.load(SeqCst);
        owner.closed.load(SeqCst) == 1 || pid == 0 || pid_gone(pid)
    }

    /// Where everything lies in the memfd.
    pub fn layout(&self) -> Layout {
        self.map.layout
    }

    /// Returns the memory of every free chunk to the OS (DSI's memory flush:
    /// punches holes into the memfd); the next write into such a chunk faults
    /// fresh zeroed pages in. Each chunk is claimed first, so no producer
    /// allocates it meanwhile. Returns the bytes released.
    pub fn trim_free_chunks(&self) -> Result<u64, Error> {
        let mut released = 0;
        let g = self.map.layout.geometry;
        for c in 0..g.chunks {
            let meta = self.map.chunk_meta(c);
            if meta.refs.compare_exchange(0, 1, SeqCst, Relaxed).is_err() {
                continue;
            }
            if self.map.exclusive(c) {
                let off = self.map.layout.data + c as u64 * g.chunk_bytes;
                let mode =
                    rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
                let r = rustix::fs::fallocate(&self.map.fd, mode, off, g.chunk_bytes);
                if let Err(e) = r {
                    release_ref(meta);
                    return Err(Error::os("fallocate(PUNCH_HOLE)", e));
                }
                released += g.chunk_bytes;
            }
            release_ref(meta);
        }
        Ok(released)
    }

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

    /// Takes the producer role of `stream` (free, or held by a dead process: then
    /// an abandoned loan is reclaimed and never delivered).
    pub fn producer(&self, stream: u32, cfg: ProducerConfig) -> Result<Producer, Error> {
        if stream >= self.map.layout.stream_count {
            return Err(Error::Unavailable {
                what: "stream",
                index: stream as u64,
            });
        }
        let me = my_pid();
        let ctl = self.map.ctl(stream);
        let mut holder = ctl.owner.0.pid.load(SeqCst);
        loop {
            if holder != 0 && !pid_gone(holder) {
                return Err(Error::Unavailable {
                    what: "producer of a stream held by pid",
                    index: holder as u64,
                });
            }
            match ctl.owner.0.pid.compare_exchange(holder, me, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(h) => holder = h,
            }
        }
        ctl.owner.0.closed.store(0, SeqCst);
        Ok(Producer::new(self.map.clone(), stream, cfg))
    }

    /// Takes a consumer entry of `stream` (free, or held by a dead process).
    pub fn consumer(&self, stream: u32, cfg: ConsumerConfig) -> Result<Consumer, Error> {
        if stream >= self.map.layout.stream_count {
            return Err(Error::Unavailable {
                what: "stream",
                index: stream as u64,
            });
        }
        let me = my_pid();
        for i in 0..self.map.layout.consumers_max {
            let e = self.map.entry(stream, i);
            let holder = e.pid.load(SeqCst);
            if holder != 0 && !pid_gone(holder) {
                continue;
            }
            if e.pid.compare_exchange(holder, me, SeqCst, SeqCst).is_err() {
                continue;
            }
            // Inactive while the cursor is set, so the producer never sees a stale one.
            e.active.store(0, SeqCst);
            e.hazard.store(0, SeqCst);
            e.spool_to.store(0, SeqCst);
            let head = self.map.ctl(stream).head.0.load(SeqCst);
            e.cursor.store(head, SeqCst);
            e.active.store(1, SeqCst);
            return Ok(Consumer {
                map: self.map.clone(),
                stream,
                at: self.map.stream_at(stream),
                entry: i,
                cursor: head,
                spool_to: 0,
                liveness_ns: cfg.liveness_interval_ns,
                last_check: None,
                broken: None,
                stats: ConsumerStats::default(),
            });
        }
        Err(Error::Unavailable {
            what: "consumer entry (all taken), consumers_max",
            index: self.map.layout.consumers_max as u64,
        })
    }
}

/// A stream in a region of its own: the common case.
#[derive(Debug)]
pub struct Stream;

/// Configuration of a stream created with [`Stream::create`].
#[derive(Clone, Copy, Debug)]
pub struct StreamConfig {
    /// Descriptors in the ring.
    pub slots: u32,
    /// Consumer entries.
    pub consumers_max: u32,
    /// The largest packet (bytes, rounded up to 64).
    pub max_packet: u64,
    /// Refuse streams larger than this (bytes).
    pub max_total_bytes: u64,
    /// The producer's behaviour.
    pub producer: ProducerConfig,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            slots: 16,
            consumers_max: 4,
            max_packet: 64 * 1024,
            max_total_bytes: 1 << 30,
            producer: ProducerConfig::default(),
        }
    }
}

impl Stream {
    /// Creates a stream: data chunks = slots + consumers_max + 1, enough that a
    /// loan always finds a chunk. Returns the producer and the memfd for consumers.
    pub fn create(cfg: StreamConfig) -> Result<(Producer, OwnedFd), Error> {
        let chunks = cfg
            .slots
            .checked_add(cfg.consumers_max)
            .and_then(|n| n.checked_add(1))
            .ok_or(Error::InvalidConfig {
                what: "slots + consumers_max",
                value: u64::MAX,
            })?;
        let region = Region::create(RegionConfig {
            streams: 1,
            slots: cfg.slots,
            consumers_max: cfg.consumers_max,
            chunks,
            chunk_bytes: cfg.max_packet.max(64).div_ceil(64) * 64,
            max_total_bytes: cfg.max_total_bytes,
            reserve: true,
        })?;
        let fd = region.fd().try_clone_to_owned().map_err(|e| Error::Os {
            op: "dup",
            source: e,
        })?;
        Ok((region.producer(0, cfg.producer)?, fd))
    }
}

/// How a producer behaves at the limits.
#[derive(Clone, Copy, Debug)]
pub struct ProducerConfig {
    /// Drop the oldest packet or block when the ring is full of unconsumed valid packets.
    pub overload: Overload,
    /// With `Block`: how long a loan waits before `Timeout` (zero: report `Full` at once).
    pub block_timeout: Duration,
    /// How often (ns of the caller's clock) to look for dead consumers while blocked.
    pub liveness_interval_ns: u64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            overload: Overload::DropOldest,
            block_timeout: Duration::ZERO,
            liveness_interval_ns: 100_000_000,
        }
    }
}

/// Counters of a producer (this handle's view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Published, dropped, expired, retracted packets.
    pub counts: ProducerCounts,
    /// Futex waits (ring full, `Block`).
    pub futex_waits: u64,
    /// Futex wakes issued (a consumer was asleep).
    pub futex_wakes: u64,
    /// Dead consumers whose entries were freed.
    pub reaped: u64,
}

#[derive(Clone, Copy, Debug)]
struct Shadow {
    seq: u64,
    state: SlotState,
    chunk: u32,
    deadline: u64,
}

impl Shadow {
    /// Whether the slot holds a reference to `chunk` (a packet or a loan in it).
    #[inline]
    fn holds_chunk(&self) -> bool {
        matches!(self.state, SlotState::Published | SlotState::Writing)
    }
}

/// The producer of one stream (one per stream at a time).
pub struct Producer {
    map: Arc<Mapping>,
    stream: u32,
    at: StreamAt,
    cfg: ProducerConfig,
    head: u64,
    /// What this producer wrote into each slot: never re-read from shared memory.
    shadow: Vec<Shadow>,
    min_cursor_cache: u64,
    hint: u32,
    last_reap: Option<u64>,
    stats: ProducerStats,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("stream", &self.stream)
            .field("head", &self.head)
            .finish()
    }
}

impl Producer {
    fn new(map: Arc<Mapping>, stream: u32, cfg: ProducerConfig) -> Self {
        let g = map.layout.geometry;
        let head = map.ctl(stream).head.0.load(SeqCst).min(MAX_SEQ);
        let mut shadow = Vec::with_capacity(g.slots as usize);
        // Take over what a previous producer left: published packets stay
        // (their chunks referenced), an abandoned Writing slot is retracted.
        for i in 0..g.slots {
            let s = map.slot(stream, i);
            let d = snapshot(s);
            let mut sh = Shadow {
                seq: 0,
                state: SlotState::Free,
                chunk: 0,
                deadline: 0,
            };
            if let (Some(st), Ok(chunk)) = (Stamp::unpack(d.stamp), g.chunk_of(&d)) {
                if g.slot_of(st.seq) == i as u64 && st.seq <= head {
                    sh = Shadow {
                        seq: st.seq,
                        state: st.state,
                        chunk,
                        deadline: d.deadline,
                    };
                    if st.state == SlotState::Writing {
                        s.stamp.store(
                            Stamp {
                                seq: st.seq,
                                state: SlotState::Retracted,
                            }
                            .pack(),
                            SeqCst,
                        );
                        release_ref(map.chunk_meta(chunk));
                        sh.state = SlotState::Retracted;
                    }
                }
            }
            shadow.push(sh);
        }
        Self {
            at: map.stream_at(stream),
            map,
            stream,
            cfg,
            head,
            shadow,
            min_cursor_cache: 0,
            hint: 0,
            last_reap: None,
            stats: ProducerStats::default(),
        }
    }

    /// This handle's counters.
    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// Sequence number the next packet gets.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The region this stream lives in (to create more streams' handles over its data area).
    pub fn region(&self) -> Region {
        Region {
            map: self.map.clone(),
        }
    }

    fn ctl(&self) -> &StreamCtl {
        self.map.ctl_at(&self.at)
    }

    fn scan_min_cursor(&mut self) -> Option<u64> {
        let mut min = None::<u64>;
        for i in 0..self.map.layout.consumers_max {
            let e = self.map.entry(self.stream, i);
            if e.active.load(SeqCst) == 1 {
                let c = e.cursor.load(SeqCst);
                min = Some(min.map_or(c, |m| m.min(c)));
            }
        }
        self.min_cursor_cache = min.unwrap_or(self.head);
        min
    }

    /// Frees the entries of consumers whose process is gone; returns how many.
    pub fn reap_dead_consumers(&mut self) -> u64 {
        let mut n = 0;
        for i in 0..self.map.layout.consumers_max {
            let e = self.map.entry(self.stream, i);
            let pid = e.pid.load(SeqCst);
            if pid != 0 && e.active.load(SeqCst) == 1 && pid_gone(pid) {
                e.active.store(0, SeqCst);
                e.hazard.store(0, SeqCst);
                if e.pid.compare_exchange(pid, 0, SeqCst, SeqCst).is_ok() {
                    n += 1;
                }
            }
        }
        self.stats.reaped += n;
        n
    }

    /// Decides whether the slot of `self.head`, holding `old`, may be
    /// reused; waits (Block) as configured. The caller counts the decision
    /// ([`Producer::count`]) once the slot is really taken.
    #[inline]
    fn make_room(&mut self, old: Shadow, now: u64) -> Result<Reuse, Error> {
        let stamp = Stamp {
            seq: old.seq,
            state: old.state,
        };
        // Cached lower bound first: the well-synchronised path reads no
        // consumer line (and never has to wait: every cursor is past it).
        if self.min_cursor_cache > old.seq {
            let m = Some(self.min_cursor_cache);
            return Ok(reuse(stamp, old.deadline, m, now, self.cfg.overload));
        }
        self.make_room_scan(stamp, old.deadline, now)
    }

    #[inline(never)]
    fn make_room_scan(&mut self, stamp: Stamp, deadline: u64, now: u64) -> Result<Reuse, Error> {
        let m = self.scan_min_cursor();
        match reuse(stamp, deadline, m, now, self.cfg.overload) {
            Reuse::Wait => self.wait_for_room(stamp, deadline, now),
            decision => Ok(decision),
        }
    }

    /// Accounts for the old packet of a slot just taken.
    #[inline]
    fn count(counts: &mut ProducerCounts, decision: Reuse) {
        match decision {
            Reuse::Dropped => counts.dropped += 1,
            Reuse::Expired => counts.expired += 1,
            Reuse::Vacant | Reuse::Consumed | Reuse::Wait => {}
        }
    }

    fn wait_for_room(&mut self, stamp: Stamp, deadline: u64, now: u64) -> Result<Reuse, Error> {
        if self
            .last_reap
            .is_none_or(|t| now.saturating_sub(t) >= self.cfg.liveness_interval_ns)
        {
            self.last_reap = Some(now);
            if self.reap_dead_consumers() > 0 {
                let m = self.scan_min_cursor();
                let d = reuse(stamp, deadline, m, now, self.cfg.overload);
                if d != Reuse::Wait {
                    return Ok(d);
                }
            }
        }
        if self.cfg.block_timeout.is_zero() {
            return Err(Error::Full);
        }
        let start = Instant::now();
        let slice = Duration::from_nanos(self.cfg.liveness_interval_ns.max(1_000_000));
        loop {
            let map = self.map.clone();
            let w = &map.ctl(self.stream).producer_wait.0;
            let seen = w.epoch.load(SeqCst);
            w.waiters.fetch_add(1, SeqCst);
            let m = self.scan_min_cursor();
            let d = reuse(stamp, deadline, m, now, self.cfg.overload);
            if d != Reuse::Wait {
                w.waiters.fetch_sub(1, SeqCst);
                return Ok(d);
            }
            let elapsed = start.elapsed();
            if elapsed >= self.cfg.block_timeout {
                w.waiters.fetch_sub(1, SeqCst);
                return Err(Error::Timeout);
            }
            futex_wait(w, seen, (self.cfg.block_timeout - elapsed).min(slice));
            self.stats.futex_waits += 1;
            w.waiters.fetch_sub(1, SeqCst);
            if start.elapsed() >= slice {
                self.reap_dead_consumers();
            }
        }
    }

    #[inline]
    fn check_seq(&self) -> Result<(), Error> {
        if self.head >= MAX_SEQ {
            return Err(Error::InvalidConfig {
                what: "sequence numbers exhausted at",
                value: self.head,
            });
        }
        Ok(())
    }

    /// Stamps `slot` `(seq, Writing)`. SeqCst: this store must be ordered
    /// before the loads that follow (the old chunk's reference drop, the
    /// allocator's or `exclusive`'s hazard loads), so a consumer that still
    /// reads the old packet either fails its stamp re-check or is seen.
    #[inline]
    fn stamp_writing(slot: &Slot, seq: u64) {
        slot.stamp.store(
            Stamp {
                seq,
                state: SlotState::Writing,
            }
            .pack(),
            SeqCst,
        );
    }

    /// Records slot `i` as Writing packet `seq` in `chunk` (its offset in
    /// the descriptor, and the shadow).
    #[inline]
    fn claimed(shadow: &mut [Shadow], map: &Mapping, slot: &Slot, i: u32, seq: u64, chunk: u32) {
        slot.offset
            .store(chunk as u64 * map.layout.geometry.chunk_bytes, Relaxed);
        shadow[i as usize] = Shadow {
            seq,
            state: SlotState::Writing,
            chunk,
            deadline: 0,
        };
    }

    /// Claims the slot of `self.head` for `chunk` (reference already held): state Writing.
    fn claim(&mut self, chunk: u32, now: u64) -> Result<(), Error> {
        self.check_seq()?;
        let (seq, i) = (
            self.head,
            self.map.layout.geometry.slot_of(self.head) as u32,
        );
        let old = self.shadow[i as usize];
        let decision = self.make_room(old, now)?;
        // The new stamp goes out before the old chunk's reference is dropped:
        // a reader of the old packet then fails its check, or the allocator sees its hazard.
        Self::stamp_writing(self.map.slot_at(&self.at, i), seq);
        self.claimed_fresh(old, decision, chunk);
        Ok(())
    }

    /// The well-synchronised loan, all in registers: the slot of `head`
    /// holds a packet every consumer has read (the cached lower bound of the
    /// cursors says so: `reuse` would say Consumed, nothing to count) whose
    /// chunk nothing else holds; the slot keeps that chunk for the new
    /// packet (see [`Producer::claim_for_loan`]). Returns the chunk's offset
    /// in the mapping, or `None` for the general path (which finds the slot
    /// as it was, or retracted if no chunk was left for it).
    #[inline]
    fn claim_kept(&mut self, len: usize) -> Option<usize> {
        let map = &*self.map;
        let g = map.layout.geometry;
        let (seq, i) = (self.head, g.slot_of(self.head) as u32);
        let old = *self.shadow.get(i as usize)?;
        if len as u64 > g.chunk_bytes
            || seq >= MAX_SEQ
            || old.state != SlotState::Published
            || self.min_cursor_cache <= old.seq
            || map.layout.stream_count != 1
            || map.chunk_meta(old.chunk).refs.load(Relaxed) != 1
            || map.hazard_held(old.chunk)
        {
            return None;
        }
        let slot = map.slot_at(&self.at, i);
        Self::stamp_writing(slot, seq);
        if !map.exclusive(old.chunk) {
            let chunk = self.claim_stamped(old, Reuse::Consumed).ok()?;
            return Some(self.map.chunk_off(chunk));
        }
        Self::claimed(&mut self.shadow, map, slot, i, seq, old.chunk);
        Some(map.chunk_off(old.chunk))
    }

    /// A loan in the general case ([`Producer::claim_for_loan`]); returns the chunk's offset.
    #[inline(never)]
    fn claim_loan(&mut self, len: usize, now: u64) -> Result<usize, Error> {
        let max = self.map.layout.geometry.chunk_bytes;
        if len as u64 > max {
            return Err(Error::PacketTooLarge {
                len: len as u64,
                max,
            });
        }
        let chunk = self.claim_for_loan(now)?;
        Ok(self.map.chunk_off(chunk))
    }

    /// Claims the slot of `self.head` for a loan; returns the chunk to write.
    ///
    /// The well-synchronised path keeps the slot's own chunk: once the slot
    /// is stamped Writing nobody can start reading the old packet, and if no
    /// consumer still reads it and no pin holds it ([`Mapping::exclusive`])
    /// the slot's reference becomes the loan's. That saves the two locked
    /// read-modify-writes of dropping the old reference and allocating.
    /// Only in a region of one stream: there every descriptor naming the
    /// chunk is this producer's, so none can be made (by `forward`) while
    /// the check runs. Otherwise, or if the chunk is visibly in use, a free
    /// chunk is allocated first, so a loan refused with `OutOfChunks`
    /// leaves the ring as it was (unless a reader took the chunk between the
    /// look before the stamp and the one after: [`Producer::claim_stamped`]).
    fn claim_for_loan(&mut self, now: u64) -> Result<u32, Error> {
        self.check_seq()?;
        let (seq, i) = (
            self.head,
            self.map.layout.geometry.slot_of(self.head) as u32,
        );
        let old = self.shadow[i as usize];
        let decision = self.make_room(old, now)?;
        let map = &*self.map;
        let slot = map.slot_at(&self.at, i);
        if old.holds_chunk()
            && map.layout.stream_count == 1
            && map.chunk_meta(old.chunk).refs.load(Relaxed) == 1
            && !map.hazard_held(old.chunk)
        {
            Self::stamp_writing(slot, seq);
            if !map.exclusive(old.chunk) {
                return self.claim_stamped(old, decision);
            }
            // The slot's reference is the loan's now: nothing to drop.
            Self::count(&mut self.stats.counts, decision);
            Self::claimed(&mut self.shadow, map, slot, i, seq, old.chunk);
            return Ok(old.chunk);
        }
        let chunk = map.alloc_chunk(&mut self.hint).ok_or(Error::OutOfChunks)?;
        Self::stamp_writing(slot, seq);
        self.claimed_fresh(old, decision, chunk);
        Ok(chunk)
    }

    /// The slot of `head` is stamped Writing and holds `chunk` (a reference
    /// the caller took); `old` was there before. The descriptor names the
    /// new chunk before the old one's reference goes: a producer that takes
    /// over after a crash here drops the reference of the chunk the
    /// descriptor names, never one twice.
    fn claimed_fresh(&mut self, old: Shadow, decision: Reuse, chunk: u32) {
        let map = &*self.map;
        let (seq, i) = (self.head, map.layout.geometry.slot_of(self.head) as u32);
        Self::count(&mut self.stats.counts, decision);
        Self::claimed(
            &mut self.shadow,
            map,
            map.slot_at(&self.at, i),
            i,
            seq,
            chunk,
        );
        if old.holds_chunk() {
            release_ref(map.chunk_meta(old.chunk));
        }
    }

    /// The slot of `head` is stamped Writing, but its old chunk turned out
    /// to be read or pinned after all (since the look before the stamp): a
    /// free chunk then, or, with none left, the slot stays retracted (its
    /// old packet is gone anyway; `decision` is counted) and `OutOfChunks`.
    #[cold]
    #[inline(never)]
    fn claim_stamped(&mut self, old: Shadow, decision: Reuse) -> Result<u32, Error> {
        if let Some(chunk) = self.map.alloc_chunk(&mut self.hint) {
            self.claimed_fresh(old, decision, chunk);
            return Ok(chunk);
        }
        let map = &*self.map;
        let (seq, i) = (self.head, map.layout.geometry.slot_of(self.head) as u32);
        map.slot_at(&self.at, i).stamp.store(
            Stamp {
                seq,
                state: SlotState::Retracted,
            }
            .pack(),
            SeqCst,
        );
        release_ref(map.chunk_meta(old.chunk));
        self.shadow[i as usize] = Shadow {
            seq,
            state: SlotState::Retracted,
            chunk: old.chunk,
            deadline: 0,
        };
        Self::count(&mut self.stats.counts, decision);
        Err(Error::OutOfChunks)
    }

    /// Makes the claimed packet visible and wakes sleeping consumers.
    #[inline]
    fn finish(&mut self, len: u64, vtime: u64, deadline: u64) -> u64 {
        let seq = self.head;
        let i = self.map.layout.geometry.slot_of(seq) as u32;
        let map = &*self.map;
        let slot = map.slot_at(&self.at, i);
        slot.len.store(len, Relaxed);
        slot.vtime.store(vtime, Relaxed);
        slot.deadline.store(deadline, Relaxed);
        slot.stamp.store(
            Stamp {
                seq,
                state: SlotState::Published,
            }
            .pack(),
            Release,
        );
        let sh = &mut self.shadow[i as usize];
        sh.state = SlotState::Published;
        sh.deadline = deadline;
        self.head = seq + 1;
        let ctl = map.ctl_at(&self.at);
        // SeqCst store, then the waiter count: the producer's half of the
        // futex hand-shake (a consumer going to sleep counts itself, SeqCst,
        // then re-reads the head), so one of the two sees the other.
        ctl.head.0.store(self.head, SeqCst);
        if ctl.consumers_wait.0.waiters.load(SeqCst) > 0 {
            wake_all(&ctl.consumers_wait.0);
            self.stats.futex_wakes += 1;
        }
        self.stats.counts.published += 1;
        seq
    }

    /// Lends a writable buffer of `len` bytes in the data area (a slot in state
    /// Writing); publish it with [`Loan::publish`]. Dropping the loan retracts it.
    #[inline(always)]
    pub fn loan(&mut self, len: usize, now_ns: u64) -> Result<Loan<'_>, Error> {
        let off = match self.claim_kept(len) {
            Some(off) => off,
            None => self.claim_loan(len, now_ns)?,
        };
        let seq = self.head;
        Ok(Loan {
            producer: self,
            off,
            len,
            seq,
            published: false,
        })
    }

    /// Copies `bytes` into a loan and publishes it; returns its sequence number.
    pub fn publish_copy(
        &mut self,
        bytes: &[u8],
        vtime: u64,
        deadline_ns: u64,
        now_ns: u64,
    ) -> Result<u64, Error> {
        let mut loan = self.loan(bytes.len(), now_ns)?;
        loan.copy_from_slice(bytes);
        Ok(loan.publish(vtime, deadline_ns))
    }

    /// Forwards a sample of another stream of the same region without copying
    /// (DSI memory chaining): the new descriptor points at the same chunk.
    pub fn forward(
        &mut self,
        sample: &Sample<'_>,
        vtime: u64,
        deadline_ns: u64,
        now_ns: u64,
    ) -> Result<u64, Error> {
        if !Arc::ptr_eq(&self.map, &sample.consumer.map) {
            return Err(Error::OtherRegion);
        }
        // The sample's hazard keeps the chunk from being reallocated meanwhile.
        self.map.chunk_meta(sample.chunk).refs.fetch_add(1, SeqCst);
        if let Err(e) = self.claim(sample.chunk, now_ns) {
            release_ref(self.map.chunk_meta(sample.chunk));
            return Err(e);
        }
        Ok(self.finish(sample.data.len() as u64, vtime, deadline_ns))
    }

    /// Retracts packet `seq` if it is still published (consumers skip it, one
    /// reading it gets `Expired`); says whether it was.
    pub fn retract(&mut self, seq: u64) -> bool {
        let i = self.map.layout.geometry.slot_of(seq) as usize;
        let sh = self.shadow[i];
        if seq >= self.head || sh.seq != seq || sh.state != SlotState::Published {
            return false;
        }
        self.set_gone(i as u32, SlotState::Retracted);
        self.stats.counts.retracted += 1;
        true
    }

    /// Reclaims every published packet whose deadline passed (frees its chunk); returns how many.
    pub fn reclaim_expired(&mut self, now_ns: u64) -> u64 {
        let mut n = 0;
        for i in 0..self.shadow.len() {
            let sh = self.shadow[i];
            if sh.state == SlotState::Published && now_ns >= sh.deadline {
                self.set_gone(i as u32, SlotState::Expired);
                n += 1;
            }
        }
        self.stats.counts.expired += n;
        n
    }

    fn set_gone(&mut self, i: u32, state: SlotState) {
        let sh = &mut self.shadow[i as usize];
        let slot = self.map.slot(self.stream, i);
        slot.stamp
            .store(Stamp { seq: sh.seq, state }.pack(), SeqCst);
        release_ref(self.map.chunk_meta(sh.chunk));
        sh.state = state;
    }

    /// The lowest spool-forward target of the attached consumers (virtual time):
    /// packets before it need not be produced (DSI §4.1). 0 when none asked.
    pub fn spool_target(&self) -> u64 {
        (0..self.map.layout.consumers_max)
            .map(|i| self.map.entry(self.stream, i))
            .filter(|e| e.active.load(SeqCst) == 1)
            .map(|e| e.spool_to.load(SeqCst))
            .min()
            .unwrap_or(0)
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let ctl = self.ctl();
        ctl.owner.0.closed.store(1, SeqCst);
        ctl.owner.0.pid.store(0, SeqCst);
        wake_all(&ctl.consumers_wait.0);
    }
}

/// A writable packet buffer in the data area, not yet visible to consumers.
pub struct Loan<'a> {
    producer: &'a mut Producer,
    /// The chunk's offset in the mapping (`Mapping::chunk_off`).
    off: usize,
    len: usize,
    seq: u64,
    published: bool,
}

impl Loan<'_> {
    /// The sequence number the packet will have.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Publishes the packet with its virtual time and validity deadline; returns its sequence number.
    #[inline(always)]
    pub fn publish(mut self, vtime: u64, deadline_ns: u64) -> u64 {
        self.published = true;
        self.producer.finish(self.len as u64, vtime, deadline_ns)
    }
}

impl std::ops::Deref for Loan<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `off` is chunk_off of a checked chunk index, len <=
        // chunk_bytes, so the bytes lie inside the mapping; the chunk is this
        // loan's alone (its one reference taken by alloc_chunk or kept from
        // the slot under `exclusive`, no hazard, not published).
        unsafe { std::slice::from_raw_parts(self.producer.map.base.add(self.off), self.len) }
    }
}

impl std::ops::DerefMut for Loan<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.producer.map.base.add(self.off), self.len) }
    }
}

impl Drop for Loan<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.published {
            let i = self.producer.map.layout.geometry.slot_of(self.seq) as u32;
            self.producer.set_gone(i, SlotState::Retracted);
        }
    }
}

/// How a consumer behaves.
#[derive(Clone, Copy, Debug)]
pub struct ConsumerConfig {
    /// How often (ns of the caller's clock) an idle consumer checks that the producer lives.
    pub liveness_interval_ns: u64,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            liveness_interval_ns: 100_000_000,
        }
    }
}

/// Counters of a consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Delivered and skipped packets, by reason.
    pub counts: ConsumerCounts,
    /// Packets reclaimed while being read (`Expired` returned).
    pub torn: u64,
    /// Futex waits (ring empty, blocking receive).
    pub futex_waits: u64,
    /// Futex wakes issued (the producer was asleep).
    pub futex_wakes: u64,
}

/// One consumer of a stream: reads packets in place, in order.
pub struct Consumer {
    map: Arc<Mapping>,
    stream: u32,
    at: StreamAt,
    entry: u32,
    cursor: u64,
    spool_to: u64,
    liveness_ns: u64,
    last_check: Option<u64>,
    broken: Option<(u32, state::Corruption)>,
    stats: ConsumerStats,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("stream", &self.stream)
            .field("cursor", &self.cursor)
            .finish()
    }
}

/// A packet ready to hand out (plain values, no borrow).
#[derive(Clone, Copy)]
struct Ready {
    seq: u64,
    chunk: u32,
    len: u64,
    vtime: u64,
    deadline: u64,
}

#[inline]
fn snapshot(s: &Slot) -> Descriptor {
    Descriptor {
        stamp: s.stamp.load(Acquire),
        offset: s.offset.load(Relaxed),
        len: s.len.load(Relaxed),
        vtime: s.vtime.load(Relaxed),
        deadline: s.deadline.load(Relaxed),
    }
}

impl Consumer {
    /// Attaches to stream 0 of the region in `fd` (checks size, header and seals).
    pub fn attach(fd: OwnedFd, cfg: ConsumerConfig) -> Result<Self, Error> {
        Region::attach(fd)?.consumer(0, cfg)
    }

    /// This consumer's counters.
    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }

    /// Sequence number of the next packet it will look at.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The region this stream lives in (to open a relay's producer on another stream).
    pub fn region(&self) -> Region {
        Region {
            map: self.map.clone(),
        }
    }

    /// Asks the producer not to produce before virtual time `vtime`, and skips
    /// packets before it meanwhile (DSI's "spool forward").
    pub fn spool_forward(&mut self, vtime: u64) {
        self.spool_to = vtime;
        self.map
            .entry(self.stream, self.entry)
            .spool_to
            .store(vtime, SeqCst);
    }

    fn publish_cursor(&self) {
        let e = self.map.entry(self.stream, self.entry);
        e.cursor.store(self.cursor, SeqCst);
        let w = &self.map.ctl(self.stream).producer_wait.0;
        if w.waiters.load(SeqCst) > 0 {
            wake_all(w);
        }
    }

    fn idle_error(&mut self, now: u64) -> Error {
        let owner = &self.map.ctl(self.stream).owner.0;
        if owner.closed.load(SeqCst) == 1 {
            return Error::Closed;
        }
        if self
            .last_check
            .is_none_or(|t| now.saturating_sub(t) >= self.liveness_ns)
        {
            self.last_check = Some(now);
            let pid = owner.pid.load(SeqCst);
            if pid != 0 && pid_gone(pid) {
                return Error::ProducerGone { pid };
            }
        }
        Error::Empty
    }

    /// The next packet to deliver (its hazard set), or why there is none.
    #[inline]
    fn advance(&mut self, now: u64) -> Result<Ready, Error> {
        // The well-synchronised case first: the packet under the cursor is
        // published, valid and wanted. Anything else (nothing published, lag,
        // skips, corruption, a stream broken before) goes to `advance_steps`,
        // which reads the descriptor afresh and applies `consumer_step`.
        let map = &*self.map;
        let g = map.layout.geometry;
        let cursor = self.cursor;
        let head = map.ctl_at(&self.at).head.0.load(SeqCst);
        if self.broken.is_none() && cursor < head && head - cursor <= g.slots as u64 {
            let i = g.slot_of(cursor) as u32;
            let slot = map.slot_at(&self.at, i);
            let d = snapshot(slot);
            if d.stamp >> 8 == cursor
                && d.stamp & 0xff == SlotState::Published as u64
                && now < d.deadline
                && d.vtime >= self.spool_to
            {
                if let Ok(chunk) = g.chunk_of(&d) {
                    let e = map.entry_at(&self.at, self.entry);
                    // SeqCst store, then the stamp again: the consumer's half
                    // of the hazard hand-shake (the producer stamps, SeqCst,
                    // then loads hazards), so either the producer sees the
                    // hazard or this re-check sees its new stamp.
                    e.hazard.store(chunk as u64 + 1, SeqCst);
                    fence(Acquire);
                    if slot.stamp.load(SeqCst) == d.stamp {
                        self.stats.counts.delivered += 1;
                        return Ok(Ready {
                            seq: cursor,
                            chunk,
                            len: d.len,
                            vtime: d.vtime,
                            deadline: d.deadline,
                        });
                    }
                    // Reclaimed under us: never hand out what may be torn.
                    e.hazard.store(0, SeqCst);
                    return Err(self.torn());
                }
            }
        }
        self.advance_steps(now)
    }

    /// The packet under the cursor was reclaimed while its hazard was set:
    /// counted, passed over, `Expired`.
    #[cold]
    fn torn(&mut self) -> Error {
        self.stats.torn += 1;
        let seq = self.cursor;
        self.cursor += 1;
        self.publish_cursor();
        Error::Expired { seq }
    }

    /// `advance` in the general case: steps through the ring with `consumer_step`.
    #[inline(never)]
    fn advance_steps(&mut self, now: u64) -> Result<Ready, Error> {
        if let Some((slot, c)) = self.broken {
            let (what, value) = c.describe();
            return Err(Error::Corrupt { slot, what, value });
        }
        let g = self.map.layout.geometry;
        let start = self.cursor;
        for _ in 0..2 * g.slots as u64 + 2 {
            let head = self.map.ctl(self.stream).head.0.load(SeqCst);
            let i = g.slot_of(self.cursor) as u32;
            let slot = self.map.slot(self.stream, i);
            let d = snapshot(slot);
            match consumer_step(&g, self.cursor, head, &d, now, self.spool_to) {
                Step::Empty => {
                    if self.cursor != start {
                        self.publish_cursor();
                    }
                    return Err(self.idle_error(now));
                }
                Step::Lagged { to } => {
                    self.stats.counts.lost += to - self.cursor;
                    self.cursor = to;
                }
                Step::Skip(why) => {
                    self.stats.counts.skip(why);
                    self.cursor += 1;
                }
                Step::Corrupt(c) => {
                    self.broken = Some((i, c));
                    let e = self.map.entry(self.stream, self.entry);
                    e.active.store(0, SeqCst);
                    e.hazard.store(0, SeqCst);
                    let (what, value) = c.describe();
                    return Err(Error::Corrupt {
                        slot: i,
                        what,
                        value,
                    });
                }
                Step::Deliver { chunk } => {
                    let e = self.map.entry(self.stream, self.entry);
                    // The hazard hand-shake, as in `advance`.
                    e.hazard.store(chunk as u64 + 1, SeqCst);
                    fence(Acquire);
                    if slot.stamp.load(SeqCst) != d.stamp {
                        // Reclaimed under us: never hand out what may be torn.
                        e.hazard.store(0, SeqCst);
                        return Err(self.torn());
                    }
                    self.stats.counts.delivered += 1;
                    return Ok(Ready {
                        seq: self.cursor,
                        chunk,
                        len: d.len,
                        vtime: d.vtime,
                        deadline: d.deadline,
                    });
                }
            }
        }
        // Bounded: a consumer passes at most two rings per call; the rest waits for the next call.
        self.publish_cursor();
        Err(Error::Empty)
    }

    #[inline]
    fn sample(&mut self, r: Ready) -> Sample<'_> {
        // SAFETY: chunk < chunks and len <= chunk_bytes (Geometry::chunk_of);
        // the hazard set in `advance` keeps the chunk from being reallocated
        // and written until the sample is dropped; the producer finished
        // writing before publishing (Release/Acquire on the stamp).
        let data =
            unsafe { std::slice::from_raw_parts(self.map.chunk_ptr(r.chunk), r.len as usize) };
        Sample {
            seq: r.seq,
            chunk: r.chunk,
            vtime: r.vtime,
            deadline: r.deadline,
            data,
            consumer: self,
        }
    }

    /// The next valid packet, without blocking: `Empty` when there is none,
    /// `Expired` if one was reclaimed while being read (call again for the next).
    #[inline(always)]
    pub fn next(&mut self, now_ns: u64) -> Result<Sample<'_>, Error> {
        let r = self.advance(now_ns)?;
        Ok(self.sample(r))
    }

    /// Like [`Consumer::next`], but sleeps on a futex while the ring is empty,
    /// up to `timeout`; `now` reads the caller's clock (ns) for deadlines.
    pub fn next_blocking(
        &mut self,
        timeout: Duration,
        now: impl Fn() -> u64,
    ) -> Result<Sample<'_>, Error> {
        let start = Instant::now();
        let map = self.map.clone();
        let ctl = map.ctl(self.stream);
        let w = &ctl.consumers_wait.0;
        loop {
            let seen = w.epoch.load(SeqCst);
            match self.advance(now()) {
                Ok(r) => return Ok(self.sample(r)),
                Err(Error::Empty) => {}
                Err(e) => return Err(e),
            }
            w.waiters.fetch_add(1, SeqCst);
            if ctl.head.0.load(SeqCst) > self.cursor || ctl.owner.0.closed.load(SeqCst) == 1 {
                w.waiters.fetch_sub(1, SeqCst);
                continue;
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                w.waiters.fetch_sub(1, SeqCst);
                return Err(Error::Timeout);
            }
            let slice = Duration::from_nanos(self.liveness_ns.max(1_000_000));
            let slept = Instant::now();
            futex_wait(w, seen, (timeout - elapsed).min(slice));
            self.stats.futex_waits += 1;
            w.waiters.fetch_sub(1, SeqCst);
            // A whole slice asleep (not woken by a packet): look at the
            // producer's pid on the next pass even if the caller's clock did
            // not move. After a wake-up, the pid check keeps its own pace.
            if slept.elapsed() >= slice {
                self.last_check = None;
            }
        }
    }

    /// Reads packet `seq` in place, out of order (random access by a
    /// descriptor that travelled elsewhere, e.g. over the daemon's socket):
    /// `Expired` if it was reclaimed, retracted, overwritten or is past its
    /// deadline (never torn data); `Empty` if it is not published yet;
    /// `Corrupt` for a malformed descriptor. The cursor only moves forward.
    pub fn read_at(&mut self, seq: u64, now_ns: u64) -> Result<Sample<'_>, Error> {
        let r = self.pin(seq, now_ns)?;
        Ok(self.sample(r))
    }

    /// Sets the hazard on packet `seq`'s chunk if it is deliverable; see [`Consumer::read_at`].
    fn pin(&mut self, seq: u64, now: u64) -> Result<Ready, Error> {
        let g = self.map.layout.geometry;
        let head = self.map.ctl(self.stream).head.0.load(SeqCst);
        if seq >= head {
            return Err(Error::Empty);
        }
        if head - seq > g.slots as u64 {
            self.stats.counts.lost += 1;
            return Err(Error::Expired { seq });
        }
        let i = g.slot_of(seq) as u32;
        let slot = self.map.slot(self.stream, i);
        let d = snapshot(slot);
        let Some(stamp) = Stamp::unpack(d.stamp) else {
            return Err(Error::Corrupt {
                slot: i,
                what: "unknown state",
                value: d.stamp & 0xff,
            });
        };
        if stamp.seq != seq || stamp.state != SlotState::Published || now >= d.deadline {
            self.stats.counts.expired += 1;
            return Err(Error::Expired { seq });
        }
        let chunk = g.chunk_of(&d).map_err(|c| {
            let (what, value) = c.describe();
            Error::Corrupt {
                slot: i,
                what,
                value,
            }
        })?;
        let e = self.map.entry(self.stream, self.entry);
        e.hazard.store(chunk as u64 + 1, SeqCst);
        fence(Acquire);
        if slot.stamp.load(SeqCst) != d.stamp {
            e.hazard.store(0, SeqCst);
            self.stats.torn += 1;
            return Err(Error::Expired { seq });
        }
        self.stats.counts.delivered += 1;
        Ok(Ready {
            seq,
            chunk,
            len: d.len,
            vtime: d.vtime,
            deadline: d.deadline,
        })
    }

    #[inline]
    fn release(&mut self, seq: u64) {
        let map = &*self.map;
        let e = map.entry_at(&self.at, self.entry);
        e.hazard.store(0, Release);
        self.cursor = self.cursor.max(seq + 1);
        // SeqCst store, then the producer's waiter count: the consumer's half
        // of the futex hand-shake (a producer going to sleep counts itself,
        // SeqCst, then re-reads the cursors), so one of the two sees the other.
        e.cursor.store(self.cursor, SeqCst);
        let w = &map.ctl_at(&self.at).producer_wait.0;
        if w.waiters.load(SeqCst) > 0 {
            wake_all(w);
            self.stats.futex_wakes += 1;
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let e = self.map.entry(self.stream, self.entry);
        e.active.store(0, SeqCst);
        e.hazard.store(0, SeqCst);
        e.pid.store(0, SeqCst);
        let w = &self.map.ctl(self.stream).producer_wait.0;
        if w.waiters.load(SeqCst) > 0 {
            wake_all(w);
        }
    }
}

/// A packet read in place; it stays valid (its chunk is not reused) until
/// dropped, and is then marked consumed.
pub struct Sample<'a> {
    seq: u64,
    chunk: u32,
    vtime: u64,
    deadline: u64,
    data: &'a [u8],
    consumer: &'a mut Consumer,
}

impl Sample<'_> {
    /// The packet's sequence number in its stream.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// Its virtual time.
    pub fn vtime(&self) -> u64 {
        self.vtime
    }
    /// Its validity deadline (ns).
    pub fn deadline(&self) -> u64 {
        self.deadline
    }
}

impl Sample<'_> {
    /// Pins this packet in `row` (under the sample's hazard): its bytes stay
    /// readable through the returned [`Pin`] after the sample is dropped and
    /// its slot reused.
    pub fn pin_to(&self, row: &PinRow) -> Result<Pin, Error> {
        Pin::record(&self.consumer.map, row, self.chunk, self.data.len())
    }
}

impl std::ops::Deref for Sample<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.data
    }
}

impl Drop for Sample<'_> {
    #[inline]
    fn drop(&mut self) {
        self.consumer.release(self.seq);
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
    fn record(map: &Arc<Mapping>, row: &PinRow, chunk: u32, len: usize) -> Result<Pin, Error> {
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

/// The CPU's time-stamp counter (x86-64 `rdtsc`; 0 elsewhere), for benchmarks
/// that report cycles as DSI does.
pub fn cycle_counter() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc reads a counter register; it touches no memory and is
        // available on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}
