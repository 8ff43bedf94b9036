//! `tagwire-shm` — same-host zero-copy streams after the DROPS Streaming
//! Interface (DSI): a ring of packet descriptors (the control area) and a
//! data area, both in one sealed memfd reserved at creation and bounded.
//! A packet carries a virtual time (its position in the stream) and a
//! validity deadline; under overload the producer drops the oldest packet or
//! blocks, as configured; it may retract packets; consumers (several per
//! stream) read in place and are told `Expired` if a packet is reclaimed
//! under them. Each side blocks on a futex only when the ring is empty
//! (consumer) or full (producer); a well-synchronised stream makes no system call.
//!
//! - [`state`]: the descriptor state machine, sans-I/O (time as an argument).
//! - [`Region`], [`Stream`], [`Producer`], [`Consumer`], [`Loan`], [`Sample`]:
//!   the mapping onto shared memory (the only module with `unsafe`).
//!
//! ```
//! use tagwire_shm::{Consumer, ConsumerConfig, Stream, StreamConfig, NO_DEADLINE};
//! let (mut producer, fd) = Stream::create(StreamConfig::default()).unwrap();
//! let mut consumer = Consumer::attach(fd, ConsumerConfig::default()).unwrap();
//! let mut loan = producer.loan(5, 0).unwrap();
//! loan.copy_from_slice(b"hello");
//! loan.publish(1, NO_DEADLINE);
//! let sample = consumer.next(0).unwrap();
//! assert_eq!((&*sample, sample.vtime()), (&b"hello"[..], 1));
//! ```
//!
//! Layout, limits and the behaviour at each limit: `docs/shm.md`.

mod shm;
pub mod state;

pub use shm::{
    cycle_counter, Consumer, ConsumerConfig, ConsumerStats, Layout, Loan, Pin, PinHolder, PinRow,
    Producer, ProducerConfig, ProducerStats, Region, RegionConfig, Sample, Stream, StreamConfig,
};
pub use state::{Overload, NO_DEADLINE};

/// Everything that can go wrong with a shared-memory stream, grouped by whose fault it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // --- the caller misused the API or asked for too much ---
    /// A configuration value is out of range.
    #[error("invalid shared-memory configuration: {what} = {value}")]
    InvalidConfig {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// The region would exceed the configured bound on shared memory.
    #[error("shared-memory region of {bytes} bytes exceeds the bound of {max} bytes")]
    TooLarge {
        /// Bytes asked for.
        bytes: u64,
        /// The bound (`max_total_bytes`).
        max: u64,
    },
    /// A packet is larger than a data chunk.
    #[error("packet of {len} bytes exceeds the chunk size of {max} bytes")]
    PacketTooLarge {
        /// Its length.
        len: u64,
        /// The chunk size.
        max: u64,
    },
    /// The stream, consumer entry or producer role does not exist or is taken.
    #[error("{what} {index} is not available")]
    Unavailable {
        /// What was asked for ("stream", "consumer entry", "producer").
        what: &'static str,
        /// Its index or the pid holding it.
        index: u64,
    },
    /// A sample forwarded to a stream of another region (memory chaining needs one region).
    #[error("the sample lives in another shared-memory region")]
    OtherRegion,

    // --- the peer or the file is bad ---
    /// The memfd's size does not match its header (or is too small for one).
    #[error("shared-memory file of {actual} bytes, expected {expected}")]
    WrongSize {
        /// Size found (fstat).
        actual: u64,
        /// Size the header implies.
        expected: u64,
    },
    /// The header's magic, version or geometry is wrong.
    #[error("bad shared-memory header: {what} = {found}")]
    BadHeader {
        /// The field.
        what: &'static str,
        /// The value found.
        found: u64,
    },
    /// The memfd is not sealed against shrinking (a peer could make us fault).
    #[error("shared-memory file is not sealed against shrinking")]
    NotSealed,
    /// A descriptor written by the peer is malformed; the stream is closed for this side.
    #[error("corrupt descriptor in slot {slot}: {what} ({value})")]
    Corrupt {
        /// The slot.
        slot: u32,
        /// What is wrong.
        what: &'static str,
        /// The offending value.
        value: u64,
    },
    /// The producer process is gone (crashed or killed).
    #[error("the producer (pid {pid}) is gone")]
    ProducerGone {
        /// Its pid.
        pid: u32,
    },

    // --- a limit or a state was reached ---
    /// Nothing to read (non-blocking consume).
    #[error("no packet available")]
    Empty,
    /// The ring is full of unconsumed valid packets and the producer does not drop (non-blocking produce).
    #[error("ring full: every slot holds an unconsumed valid packet")]
    Full,
    /// No free data chunk (every chunk is referenced by a descriptor or read by a consumer).
    #[error("no free data chunk in the region")]
    OutOfChunks,
    /// A blocking call waited its whole timeout.
    #[error("timed out")]
    Timeout,
    /// The packet was reclaimed (retracted, dropped, expired) while it was being read.
    #[error("packet {seq} expired while being read")]
    Expired {
        /// Its sequence number.
        seq: u64,
    },
    /// The producer closed the stream and every packet was read.
    #[error("stream closed by the producer")]
    Closed,
    /// A system call failed (memfd_create, ftruncate, fallocate, mmap, futex…).
    #[error("{op} failed: {source}")]
    Os {
        /// The call.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn os(op: &'static str, e: rustix::io::Errno) -> Self {
        Self::Os {
            op,
            source: e.into(),
        }
    }
}
