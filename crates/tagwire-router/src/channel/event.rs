//! An encoded event on its way to channels ([`Outgoing`]), what a channel
//! needs to know of it ([`EventMeta`]), the item a channel queues
//! ([`Queued`]), and what queuing one is counted at (see the module doc of
//! [`crate::channel`], "What a queued event keeps alive").

use bytes::Bytes;
use tagwire_core::queue::QueueItem;
use tagwire_proto::DELIVER_PREFIX_LEN;

/// Size of an established connection's read buffer; frames that fit are
/// read into one shared buffer of this size.
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// Events read into a shared chunk and smaller than this are copied (once)
/// before they are queued, so that they do not keep the chunk alive.
pub(crate) const COPY_BELOW: usize = READ_CHUNK / 2;
/// Bytes counted per queued event besides its own: the queue slot and the
/// allocator's and `Bytes`' headers of its buffer.
pub(crate) const QUEUED_OVERHEAD: usize = 128;

/// An encoded event on its way to channels, and what queuing it keeps alive.
/// It borrows the caller's `Bytes` where it can (`'b`): a channel that
/// queues the event takes its own reference, and the routing of a publish
/// need not take one more (an atomic increment and decrement per event).
/// A client's publish goes further ([`hand_over`](Self::hand_over)): the
/// last channel it is staged for gets the caller's reference itself.
#[derive(Debug)]
pub(crate) struct Outgoing<'b> {
    bytes: EventBytes<'b>,
    /// The read epoch of the shared chunk `bytes` is a slice of, or `None`
    /// for a buffer of its own.
    chunk: Option<u64>,
    /// A shared-memory reference for the one channel that gets it: its
    /// payload pinned while queued; written as the reference or a copy
    /// (`docs/shm.md`, "Pins").
    /// Boxed: most events have none, and every queued item would carry
    /// its size.
    pub(super) pin: Option<Box<crate::shm::ShmQueued>>,
    /// On a link: the bytes are a compressed event's (`u8 codec`, `u32
    /// raw_len`, data), written as a `ForwardCompressed`.
    pub(super) compressed: bool,
    /// The caller hands its bytes to the last item staged for this event
    /// ([`hand_over`](Self::hand_over), [`Staging::hand_over`]): that
    /// item takes no reference of its own (one atomic increment and one
    /// decrement less per event; with one subscriber, none is taken).
    ///
    /// [`Staging::hand_over`]: super::Staging::hand_over
    pub(super) hand_over: bool,
}

/// The encoded event of an [`Outgoing`]: the caller's, or a buffer of its
/// own (an event made here, or a copy out of a read chunk).
#[derive(Debug)]
enum EventBytes<'b> {
    Borrowed(&'b Bytes),
    Owned(Bytes),
}

impl<'b> Outgoing<'b> {
    /// An event that is a slice of the shared [`READ_CHUNK`] buffer of read
    /// `epoch`.
    pub(crate) fn in_chunk(bytes: &'b Bytes, epoch: u64) -> Self {
        Outgoing {
            bytes: EventBytes::Borrowed(bytes),
            chunk: Some(epoch),
            pin: None,
            compressed: false,
            hand_over: false,
        }
    }

    /// An event in a buffer of its own (a copy, or a frame read into a buffer
    /// of its own size).
    pub(crate) fn owned(bytes: Bytes) -> Self {
        Outgoing {
            bytes: EventBytes::Owned(bytes),
            chunk: None,
            pin: None,
            compressed: false,
            hand_over: false,
        }
    }

    /// A compressed event for a link's queue (see [`crate::compress::blob`]).
    pub(crate) fn compressed(blob: Bytes) -> Self {
        Outgoing {
            bytes: EventBytes::Owned(blob),
            chunk: None,
            pin: None,
            compressed: true,
            hand_over: false,
        }
    }

    /// A frame read into a buffer of its own size, borrowed.
    pub(crate) fn own_buffer(bytes: &'b Bytes) -> Self {
        Outgoing {
            bytes: EventBytes::Borrowed(bytes),
            chunk: None,
            pin: None,
            compressed: false,
            hand_over: false,
        }
    }

    /// A shared-memory reference for one channel, with what keeps its
    /// payload until it is written.
    pub(crate) fn pinned(bytes: Bytes, pin: crate::shm::ShmQueued) -> Self {
        Outgoing {
            bytes: EventBytes::Owned(bytes),
            chunk: None,
            pin: Some(Box::new(pin)),
            compressed: false,
            hand_over: false,
        }
    }

    /// This event's caller gives its bytes to the last item staged for it
    /// once routing is done, with [`Staging::hand_over`] (which it must
    /// call before the staging is flushed), instead of that item taking a
    /// reference of its own.
    ///
    /// [`Staging::hand_over`]: super::Staging::hand_over
    #[inline]
    pub(crate) fn hand_over(&mut self) {
        self.hand_over = true;
    }

    /// Whether the bytes are still the caller's (not a copy made here).
    #[inline]
    pub(super) fn is_borrowed(&self) -> bool {
        matches!(self.bytes, EventBytes::Borrowed(_))
    }

    /// The bytes, if they are a buffer of its own (a copy made here).
    #[inline(always)]
    pub(crate) fn into_owned(self) -> Option<Bytes> {
        match self.bytes {
            EventBytes::Borrowed(_) => None,
            EventBytes::Owned(b) => Some(b),
        }
    }

    /// The encoded event.
    pub(crate) fn bytes(&self) -> &Bytes {
        match &self.bytes {
            EventBytes::Borrowed(b) => b,
            EventBytes::Owned(b) => b,
        }
    }

    /// The bytes to keep in a pull buffer and what they count for: a small
    /// slice is copied out of its chunk once (the copy then serves every
    /// channel too), so history never pins a read chunk for a small event;
    /// a large slice counts the chunk it keeps alive.
    pub(crate) fn for_history(&mut self) -> (Bytes, usize) {
        let (bytes, counted) = self.for_queue(false);
        (bytes.clone(), counted - QUEUED_OVERHEAD)
    }

    /// The read epoch of a small event that could be queued as a slice.
    pub(super) fn small_slice_epoch(&self) -> Option<u64> {
        self.chunk.filter(|_| self.bytes().len() < COPY_BELOW)
    }

    /// The bytes to queue and what they count for. A small slice is copied
    /// out of its chunk unless `slice_ok` (the channel holds budget for the
    /// chunk); the copy replaces the slice, so later channels share it.
    pub(super) fn for_queue(&mut self, slice_ok: bool) -> (&Bytes, usize) {
        if self.small_slice_epoch().is_some() && !slice_ok {
            self.bytes = EventBytes::Owned(Bytes::copy_from_slice(self.bytes()));
            self.chunk = None;
        }
        let len = self.bytes().len();
        let pinned = if self.chunk.is_some() && len >= COPY_BELOW {
            READ_CHUNK.max(len)
        } else {
            // A copy, a buffer of its own, or a small slice whose chunk the
            // channel holds budget for.
            len + DELIVER_PREFIX_LEN
        };
        (self.bytes(), pinned + QUEUED_OVERHEAD)
    }
}

/// An event waiting in a channel's queue.
#[derive(Debug)]
pub(crate) struct Queued {
    /// The encoded event, shared with every other channel that got it.
    pub event: Bytes,
    /// When it expires (ns since the Unix epoch), or
    /// [`NEVER`](crate::timing::NEVER): an event whose deadline passes while
    /// it waits is dropped, not delivered.
    pub deadline: u64,
    /// Its priority on this channel (the event's under `client_propagated`,
    /// the channel's under `server_declared`), for `order`/`discard=priority`.
    pub priority: u8,
    /// On a link: the daemon it was published at, and the links it has
    /// crossed (written into its `Forward` frame).
    pub origin: u64,
    /// On a link: links crossed before this one.
    pub hops: u8,
    /// A shared-memory reference's pin, until it is written.
    pub pin: Option<Box<crate::shm::ShmQueued>>,
    /// On a link: `event` is compressed (written as `ForwardCompressed`).
    pub compressed: bool,
}

impl QueueItem for Queued {
    fn priority(&self) -> u8 {
        self.priority
    }
    fn deadline(&self) -> u64 {
        self.deadline
    }
}

/// What a channel needs to know of an event to queue it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventMeta {
    /// Its own deadline ([`NEVER`](crate::timing::NEVER): none).
    pub deadline: u64,
    /// Its source timestamp (0: none).
    pub source_time: u64,
    /// Its priority.
    pub priority: u8,
    /// The daemon it was published at (0: this one, on a client channel).
    pub origin: u64,
    /// Links it has crossed so far.
    pub hops: u8,
    /// Its per-publisher sequence number (for temporal scaling).
    pub seq: u64,
    /// Its publisher's key (see [`tagwire_core::proxy::publisher_key`]).
    pub publisher: u64,
}

impl EventMeta {
    pub(crate) fn of(ev: &tagwire_proto::EventRef<'_>) -> Self {
        EventMeta {
            deadline: tagwire_core::defer::deadline(ev),
            source_time: ev.source_time_ns,
            priority: ev.priority,
            origin: 0,
            hops: 0,
            seq: ev.seq,
            publisher: tagwire_core::proxy::publisher_key(ev.publisher),
        }
    }
}
