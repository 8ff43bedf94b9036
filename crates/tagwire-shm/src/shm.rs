//! The mapping of the descriptor state machine onto shared memory: one sealed
//! memfd holding a header, a chunk table, one control area per stream (owner,
//! head, futex words, consumer entries, descriptor ring) and the data area.
//! The only module of the crate with `unsafe` (with its submodules: the
//! producer, consumer and pin sides); every block says why it holds.
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

mod consumer;
mod pins;
mod producer;
mod stream;

pub use consumer::{Consumer, ConsumerConfig, ConsumerStats, Sample};
pub use pins::{Pin, PinHolder, PinRow};
pub use producer::{Loan, Producer, ProducerConfig, ProducerStats};
pub use stream::{Stream, StreamConfig};

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

    /// A copy of packet `seq` of `stream` if it is still published (not
    /// reused, retracted or expired by its producer): for a producer that
    /// must send a packet another way after the reader it was meant for
    /// went away (a daemon restart). The chunk is held by one more
    /// reference while it is copied and the stamp is checked again after
    /// taking it, so the copy is never torn: a packet reclaimed meanwhile
    /// is `Expired { seq }`.
    pub fn copy_published(&self, stream: u32, seq: u64) -> Result<Vec<u8>, Error> {
        if stream >= self.map.layout.stream_count {
            return Err(Error::Unavailable {
                what: "stream",
                index: stream as u64,
            });
        }
        let g = self.map.layout.geometry;
        let slot = g.slot_of(seq) as u32;
        let s = self.map.slot(stream, slot);
        let want = Stamp {
            seq: seq & MAX_SEQ,
            state: SlotState::Published,
        }
        .pack();
        let d = snapshot(s);
        if d.stamp != want || seq > MAX_SEQ {
            return Err(Error::Expired { seq });
        }
        let c = g.chunk_of(&d).map_err(|x| {
            let (what, value) = x.describe();
            Error::Corrupt { slot, what, value }
        })?;
        let meta = self.map.chunk_meta(c);
        // The extra reference keeps the chunk from being kept for the slot's
        // next packet or reallocated (both need the count at 1 or 0 after
        // re-stamping the slot, SeqCst): if the stamp is still ours after
        // it, no one writes the chunk until it is given back.
        if meta
            .refs
            .fetch_update(SeqCst, SeqCst, |r| r.checked_add(1))
            .is_err()
        {
            return Err(Error::Expired { seq });
        }
        let out = (s.stamp.load(SeqCst) == want).then(|| {
            let mut v = vec![0u8; d.len as usize];
            // SAFETY: chunk_of checked the chunk index and len <= chunk_bytes,
            // so [chunk, chunk + len) lies in the mapping; the chunk is not
            // written while the reference taken above is held (see above).
            unsafe {
                std::ptr::copy_nonoverlapping(self.map.chunk_ptr(c), v.as_mut_ptr(), v.len())
            };
            v
        });
        release_ref(meta);
        out.ok_or(Error::Expired { seq })
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
}

/// A descriptor as one read of its slot's words (the stamp read first).
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
