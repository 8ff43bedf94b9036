//! A connection's outgoing side: its control frames, the channels with
//! queued events (ready lists per priority class), and the writer that
//! drains them round-robin into vectored writes, passing shared-memory fds
//! along where the socket can carry them.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Weak;

use bytes::{Bytes, BytesMut};
#[cfg(test)]
use tagwire_proto::{deliver_prefix, forward_prefix};
use tagwire_proto::{
    deliver_reliable_prefix, kind, link_kind, Frame, LinkFrame, DELIVER_PREFIX_LEN,
    DELIVER_RELIABLE_PREFIX_LEN, FORWARD_PREFIX_LEN,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use super::event::Queued;
use super::jitter::{source_time_of, OUTPUT_SAMPLE};
use super::{Channel, Destination};
use crate::sync::{Count, Flag, Locked};
use crate::timing::{now_ns, NEVER};

/// Priority classes of the writer's ready lists (low, normal, high,
/// critical: priorities 0–63, 64–127, 128–191, 192–255).
pub(crate) const CLASSES: usize = 4;

/// Most events gathered into one vectored write: more than a read of 64 B
/// publishes queues (~700 per 64 KiB), so that a reader's turn is one write
/// per subscriber, not three. Each `writev` wakes the subscriber's reader
/// across CPUs; at 256 per write the daemon spent ~8 % more CPU per 64 B
/// event (BENCHMARKS.md, "Fewer writes per read"). [`BATCH_BYTES`] bounds
/// the write first for events over ~64 B.
pub const BATCH_EVENTS: usize = 1024;
/// Bytes after which a vectored write takes no more events (the event that
/// crosses it goes too). Small, so that a write is a short stretch of
/// kernel time: on a kernel without full preemption a real-time lane's
/// wake-up waits for another lane's write to end. Under a low-band flood
/// over Unix sockets the high band's ping p99 had a median of 1.81x
/// busy-idle with 1 MiB writes and 1.23x with 64 KiB ones (BENCHMARKS.md,
/// "Publish batches"). The price: one 64 KiB event per write (-13 % of
/// 64 KiB throughput).
pub const BATCH_BYTES: usize = 64 * 1024;
/// Most fds passed with one write (each a shared-memory region).
const MAX_FDS_PER_WRITE: usize = 16;
/// Events up to this size are copied, with their prefix, into the batch's
/// own buffer, so that a run of them is one iovec: the kernel copies an
/// iovec per segment, and two iovecs of 9 and 64 bytes per event cost the
/// daemon more than the copy (`_copy_from_iter` was 15 % of its samples
/// under a 64 B flood). Larger events are written from where they lie.
pub const COPY_AT_MOST: usize = 512;

/// The most a batch's buffer of copied events holds: a batch stops below
/// [`BATCH_BYTES`] and its last event adds at most a prefix and
/// [`COPY_AT_MOST`] bytes.
const FLAT_MAX: usize = BATCH_BYTES + PREFIX_MAX + COPY_AT_MOST;

/// The longest prefix: a `DeliverReliable`'s (17 bytes), rounded up.
const PREFIX_MAX: usize = 24;

/// The most released batches a lane (thread) keeps for its writers: about
/// 320 KiB per lane at most.
const SPARE_BATCHES: usize = 4;

thread_local! {
    /// Emptied batches of this lane's idle writers, for the next busy one.
    static SPARE: std::cell::RefCell<Vec<Batch>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One write's worth of events, gathered by [`Outbox::gather`]: small
/// events copied into one buffer, larger ones by reference.
#[derive(Default)]
pub(crate) struct Batch {
    /// The small events, each a prefix and its body, back to back.
    flat: BytesMut,
    events: Vec<Gathered>,
    /// Bytes gathered (prefixes included).
    bytes: usize,
}

/// An event of a [`Batch`], in order.
struct Gathered {
    prefix: Prefix,
    body: Body,
}

enum Body {
    /// The range of the batch's buffer that holds the body (its prefix
    /// right before it; read by tests, the writer writes whole runs).
    Flat(#[cfg_attr(not(test), allow(dead_code))] std::ops::Range<usize>),
    /// The event's bytes, and the length of the buffer when it came: the
    /// copied events before it end there.
    Shared(Bytes, usize),
}

/// An event larger than one `Deliver` on its way in pieces (see
/// [`Channel`]'s `piecing`): its bytes stay in the memory budget until the
/// last piece is gathered or the channel goes.
#[derive(Debug)]
pub(crate) struct Piecing {
    id: u64,
    /// Its delivery sequence number on an acknowledged subscription
    /// (`DeliverReliablePiece`, protocol version 6); `None`: `DeliverPiece`.
    seq: Option<u64>,
    event: Bytes,
    checksum: u32,
    /// Bytes of `event` gathered so far.
    offset: usize,
    _held: crate::budget::Reservation,
}

impl Piecing {
    /// Starts delivering `event` in pieces under event id `id`, charging
    /// its bytes to the channel's budget meanwhile (the queue let them go).
    fn new(ch: &Channel, id: u64, seq: Option<u64>, event: Bytes) -> Self {
        Piecing {
            id,
            seq,
            checksum: tagwire_core::fragment::checksum(&event),
            _held: crate::budget::Reservation::charged(&ch.budget, event.len()),
            event,
            offset: 0,
        }
    }
}

impl Batch {
    fn push(&mut self, prefix: Prefix, event: Bytes) {
        if self.events.capacity() == 0 {
            // First event since `release`: a spare batch of this lane, or
            // room for a whole batch at once, so that filling it never
            // reallocates (and copies) the buffer (doubling from empty was
            // 9 reallocations, 1.5 % of the daemon's samples under a 64 B
            // flood).
            match SPARE.with(|s| s.borrow_mut().pop()) {
                Some(spare) => *self = spare,
                None => {
                    self.flat.reserve(FLAT_MAX);
                    self.events.reserve(BATCH_EVENTS);
                }
            }
        }
        self.bytes += prefix.len as usize + event.len();
        let body = if event.len() <= COPY_AT_MOST {
            // All PREFIX_MAX bytes, then back to the prefix's end: a copy of
            // known size is a few stores, a prefix-sized one a call to memmove.
            self.flat.extend_from_slice(&prefix.bytes);
            self.flat
                .truncate(self.flat.len() - (prefix.bytes.len() - prefix.len as usize));
            let start = self.flat.len();
            self.flat.extend_from_slice(&event);
            Body::Flat(start..self.flat.len())
        } else {
            Body::Shared(event, self.flat.len())
        };
        self.events.push(Gathered { prefix, body });
    }

    /// Pushes the next pieces of `p` as `DeliverPiece` frames of
    /// subscription `sub`, `piece` bytes of data each, while `room` says
    /// the batch takes more (at least one piece): each piece's prefix is
    /// copied into the batch's buffer, its data written from the event's
    /// own bytes (a slice each, no copy). Returns whether the last piece went.
    fn push_pieces(
        &mut self,
        sub: u32,
        p: &mut Piecing,
        piece: usize,
        room: impl Fn(&Batch) -> bool,
    ) -> bool {
        let total = p.event.len();
        let mut of = tagwire_proto::PieceOf {
            id: p.id,
            total: total as u64,
            checksum: p.checksum,
            offset: 0,
        };
        loop {
            let (at, end) = (p.offset, (p.offset + piece).min(total));
            of.offset = at as u64;
            let before = self.flat.len();
            match p.seq {
                None => self
                    .flat
                    .extend_from_slice(&tagwire_proto::deliver_piece_prefix(sub, &of, end - at)),
                Some(seq) => {
                    self.flat
                        .extend_from_slice(&tagwire_proto::deliver_reliable_piece_prefix(
                            sub,
                            seq,
                            &of,
                            end - at,
                        ))
                }
            }
            self.bytes += self.flat.len() - before + (end - at);
            self.events.push(Gathered {
                prefix: Prefix {
                    bytes: [0; PREFIX_MAX],
                    len: 0,
                },
                body: Body::Shared(p.event.slice(at..end), self.flat.len()),
            });
            p.offset = end;
            if end == total {
                return true;
            }
            if !room(self) {
                return false;
            }
        }
    }

    /// How many events it holds.
    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Each event's prefix and body, in order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.events.iter().map(|g| {
            let body = match &g.body {
                Body::Flat(r) => &self.flat[r.clone()],
                Body::Shared(b, _) => &b[..],
            };
            (g.prefix.as_slice(), body)
        })
    }

    /// The iovecs that write it after `control`: a run of copied events is
    /// one.
    fn slices<'a>(&'a self, control: &'a [u8]) -> Vec<IoSlice<'a>> {
        let mut out = Vec::with_capacity(2 + 3 * self.events.len().min(64));
        if !control.is_empty() {
            out.push(IoSlice::new(control));
        }
        // The start of the run of copied events not yet in `out`.
        let mut run = 0;
        for g in &self.events {
            match &g.body {
                Body::Flat(_) => {}
                Body::Shared(b, end) => {
                    let end = *end;
                    if end > run {
                        out.push(IoSlice::new(&self.flat[run..end]));
                        run = end;
                    }
                    if g.prefix.len > 0 {
                        out.push(IoSlice::new(g.prefix.as_slice()));
                    }
                    out.push(IoSlice::new(b));
                }
            }
        }
        if self.flat.len() > run {
            out.push(IoSlice::new(&self.flat[run..]));
        }
        out
    }

    fn clear(&mut self) {
        self.flat.clear();
        self.events.clear();
        self.bytes = 0;
    }

    /// Gives its buffers ([`FLAT_MAX`] + [`BATCH_EVENTS`] entries, ~145 KiB)
    /// back to the lane's spares, or frees them if the lane has
    /// [`SPARE_BATCHES`], so that an idle connection holds no batch memory:
    /// a writer calls this before it sleeps, a busy one reuses them. A
    /// writer that sleeps after every event (a ping-pong) takes the same
    /// spare again instead of allocating and freeing 80 KiB per event (a
    /// large allocation: +1.7 µs per message, pinned).
    fn release(&mut self) {
        if self.events.capacity() == 0 {
            return;
        }
        let mut spare = std::mem::take(self);
        spare.clear();
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_BATCHES {
                s.push(spare);
            }
        });
    }
}

/// The bytes written before an event: a `Deliver`, `DeliverReliable` or
/// `Forward` prefix.
#[derive(Debug, Clone, Copy)]
pub(super) struct Prefix {
    bytes: [u8; PREFIX_MAX],
    len: u8,
}

impl Prefix {
    /// Built as one 128-bit little-endian value (one store, where writing
    /// the fields byte-wise into an array cost a store-forwarding stall per
    /// event); the same bytes as [`deliver_prefix`] and [`forward_prefix`].
    fn of(ch: &Channel, q: &Queued) -> Self {
        let (value, len) = match ch.destination {
            Destination::Subscriber => {
                let frame_len = (1 + 4 + q.event.len()) as u32;
                let v = u128::from(frame_len)
                    | u128::from(kind::DELIVER) << 32
                    | u128::from(ch.sub) << 40;
                (v, DELIVER_PREFIX_LEN)
            }
            Destination::Link => {
                let frame_len = (1 + 8 + 1 + q.event.len()) as u32;
                let kind = if q.compressed {
                    link_kind::FORWARD_COMPRESSED
                } else {
                    link_kind::FORWARD
                };
                let v = u128::from(frame_len)
                    | u128::from(kind) << 32
                    | u128::from(q.origin) << 40
                    | u128::from(q.hops) << 104;
                (v, FORWARD_PREFIX_LEN)
            }
        };
        let mut bytes = [0u8; PREFIX_MAX];
        bytes[..16].copy_from_slice(&value.to_le_bytes());
        Prefix {
            bytes,
            len: len as u8,
        }
    }

    /// A `DeliverReliable` prefix: delivery sequence number `seq` of an
    /// acknowledged subscription.
    fn reliable(ch: &Channel, q: &Queued, seq: u64) -> Self {
        let mut bytes = [0u8; PREFIX_MAX];
        bytes[..DELIVER_RELIABLE_PREFIX_LEN].copy_from_slice(&deliver_reliable_prefix(
            ch.sub,
            seq,
            q.event.len(),
        ));
        Prefix {
            bytes,
            len: DELIVER_RELIABLE_PREFIX_LEN as u8,
        }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

#[cfg(test)]
#[test]
fn prefixes_are_the_protocols_deliver_and_forward_prefixes() {
    let budget = std::sync::Arc::new(crate::budget::MemoryBudget::new(1 << 20));
    let queue = tagwire_core::queue::BoundedQueue::with_policies(
        8,
        1 << 20,
        tagwire_core::queue::OrderPolicy::Fifo,
        tagwire_core::queue::DiscardPolicy::DropOldest,
    );
    let outbox = std::sync::Arc::new(Outbox::default());
    let sub = Channel::new(
        0xA1B2_C3D4,
        "/s".into(),
        "/**".into(),
        queue,
        outbox,
        budget,
    );
    let item = Queued {
        event: Bytes::from(vec![0u8; 300]),
        deadline: NEVER,
        priority: 0,
        origin: 0x0102_0304_0506_0708,
        hops: 0xEE,
        pin: None,
        compressed: false,
    };
    assert_eq!(
        Prefix::of(&sub, &item).as_slice(),
        deliver_prefix(0xA1B2_C3D4, 300)
    );
    let link = sub.for_link();
    assert_eq!(
        Prefix::of(&link, &item).as_slice(),
        forward_prefix(0x0102_0304_0506_0708, 0xEE, 300)
    );
    // A compressed event: the same bytes but the type, `ForwardCompressed`.
    let packed = Queued {
        compressed: true,
        ..item
    };
    let mut want = forward_prefix(0x0102_0304_0506_0708, 0xEE, 300);
    want[4] = link_kind::FORWARD_COMPRESSED;
    assert_eq!(Prefix::of(&link, &packed).as_slice(), want);
}

/// A connection's outgoing side: control frames plus channels with events.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Channels with queued events, held weakly: a channel dropped from the
    /// router's tables is skipped here (see the module doc).
    pub(super) ready: Locked<[VecDeque<Weak<Channel>>; CLASSES]>,
    control: Locked<BytesMut>,
    pub(super) notify: Notify,
    /// Set when the connection is closing: the writer flushes and stops.
    closing: Flag,
    /// Woken to end the connection from outside its task (a peer daemon
    /// declared down by membership).
    kill: Notify,
    /// The Unix socket (a dup) for passing fds with SCM_RIGHTS; `None` on
    /// TCP and TLS (see [`crate::shm`]).
    fd_socket: Locked<Option<std::os::fd::OwnedFd>>,
    /// Fds to pass with the next write of the control frames (each named
    /// by a `ShmRegion` frame queued with it).
    fds: Locked<Vec<std::os::fd::OwnedFd>>,
    /// Write batches gathered with events, for the output jitter's sample
    /// (see [`super::jitter`]); only the writer touches it.
    batches: Count,
}

impl Outbox {
    /// Queues a control frame. Returns false if control bytes exceed `max`
    /// (a client that sends requests but never reads): the caller closes.
    pub(crate) fn send(&self, frame: &Frame, max: usize) -> bool {
        let mut c = self.control.borrow_mut();
        if c.len() > max {
            return false;
        }
        if let Err(e) = frame.encode(&mut c) {
            tracing::error!(
                "cannot encode a {} frame: {e}",
                tagwire_proto::frame_name(frame.kind())
            );
        }
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Queues a link frame (see [`LinkFrame`]), like [`send`](Self::send).
    pub(crate) fn send_link(&self, frame: &LinkFrame, max: usize) -> bool {
        let mut c = self.control.borrow_mut();
        if c.len() > max {
            return false;
        }
        if let Err(e) = frame.encode(&mut c) {
            tracing::error!("cannot encode a link frame: {e}");
        }
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Queues encoded control frames (from the protocol engine). Returns
    /// false if control bytes exceed `max`: the caller closes.
    pub(crate) fn send_encoded(&self, frames: &[u8], max: usize) -> bool {
        let mut c = self.control.borrow_mut();
        if c.len() > max {
            return false;
        }
        c.extend_from_slice(frames);
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Makes this outbox pass fds over `socket` (a Unix socket).
    pub(crate) fn set_fd_socket(&self, socket: std::os::fd::OwnedFd) {
        *self.fd_socket.borrow() = Some(socket);
    }

    /// Whether fds can be passed on this connection.
    pub(crate) fn passes_fds(&self) -> bool {
        self.fd_socket.borrow().is_some()
    }

    /// The peer's pid as this daemon's PID namespace sees it (`SO_PEERCRED`
    /// on the fd-passing socket), if it has one.
    pub(crate) fn peer_pid(&self) -> Option<u32> {
        let sock = self.fd_socket.borrow();
        let cred = rustix::net::sockopt::socket_peercred(sock.as_ref()?).ok()?;
        Some(cred.pid.as_raw_nonzero().get() as u32)
    }

    /// Queues a control frame with an fd that travels with it (SCM_RIGHTS
    /// on the first byte of the write that carries it). False: no room
    /// (as [`send`](Self::send)) or no Unix socket.
    pub(crate) fn send_with_fd(&self, frame: &Frame, fd: std::os::fd::OwnedFd, max: usize) -> bool {
        if !self.passes_fds() {
            return false;
        }
        let mut c = self.control.borrow_mut();
        if c.len() > max || self.fds.borrow().len() >= MAX_FDS_PER_WRITE {
            return false;
        }
        if frame.encode(&mut c).is_err() {
            return false;
        }
        self.fds.borrow().push(fd);
        drop(c);
        self.notify.notify_one();
        true
    }

    /// Writes the start of `control` with the pending fds attached;
    /// returns the bytes written. Waits (bounded) while the socket is full.
    async fn write_fds(
        &self,
        control: &[u8],
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> std::io::Result<usize> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        use std::os::fd::AsFd;
        let sock = match self.fd_socket.borrow().as_ref() {
            Some(s) => s.try_clone()?,
            None => return Ok(0),
        };
        let borrowed: Vec<std::os::fd::BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        let mut space = vec![
            std::mem::MaybeUninit::<u8>::uninit();
            rustix::cmsg_space!(ScmRights(MAX_FDS_PER_WRITE))
        ];
        // A full socket: retry for up to ~1 s, then give up on the fds (the
        // client sees `ShmRegion` without one and falls back to copies).
        for _ in 0..1000 {
            let mut anc = SendAncillaryBuffer::new(&mut space);
            if !anc.push(SendAncillaryMessage::ScmRights(&borrowed)) {
                return Ok(0);
            }
            match sendmsg(
                &sock,
                &[IoSlice::new(control)],
                &mut anc,
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            ) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        tracing::warn!(
            "could not pass shared-memory fds within 1 s (socket full); the client copies instead"
        );
        Ok(0)
    }

    /// Ends the connection from outside: its task stops reading, cleans up
    /// and closes (see [`killed`](Self::killed)).
    pub(crate) fn kill(&self) {
        self.kill.notify_one();
    }

    /// Resolves when [`kill`](Self::kill) was called.
    pub(crate) async fn killed(&self) {
        self.kill.notified().await
    }

    /// Asks the writer to flush what is queued and stop.
    pub(crate) fn close(&self) {
        self.closing.set(true);
        self.notify.notify_one();
    }

    /// Writes queued frames to `w` until [`close`](Self::close) and empty.
    pub(crate) async fn run_writer<W: AsyncWrite + Unpin>(&self, mut w: W) -> std::io::Result<()> {
        let mut batch = Batch::default();
        // Made at the first timed wait; `Err`: none could be made (tokio's
        // timer instead, to the millisecond).
        let mut timer: Option<Result<WakeTimer, ()>> = None;
        loop {
            let mut control = self.control.borrow_mut().split().freeze();
            let fds = std::mem::take(&mut *self.fds.borrow());
            if !fds.is_empty() && !control.is_empty() {
                let n = self.write_fds(&control, fds).await?;
                control = control.slice(n..);
            }
            let wake = self.gather(&mut batch, control.len());
            if control.is_empty() && batch.is_empty() {
                batch.release();
                if self.closing.get() {
                    let _ = w.shutdown().await;
                    return Ok(());
                }
                match wake {
                    // A channel waits for its start time or pacing interval.
                    Some(at) => {
                        let t = timer.get_or_insert_with(|| {
                            WakeTimer::new().map_err(|e| {
                                tracing::warn!(
                                    "no timerfd ({e}): timed channels wake to the millisecond"
                                );
                            })
                        });
                        match t {
                            Ok(t) => {
                                tokio::select! {
                                    r = t.sleep_until(at) => r?,
                                    _ = self.notify.notified() => {}
                                }
                            }
                            Err(()) => {
                                let wait =
                                    std::time::Duration::from_nanos(at.saturating_sub(now_ns()));
                                let _ = tokio::time::timeout(wait, self.notify.notified()).await;
                            }
                        }
                    }
                    None => self.notify.notified().await,
                }
                continue;
            }
            let mut slices = batch.slices(&control);
            write_all_vectored(&mut w, &mut slices).await?;
            drop(slices);
            batch.clear();
        }
    }

    /// Takes up to a batch of events: the highest priority class first,
    /// round-robin over the ready channels of a class. Channels that must
    /// wait (start time, pacing) are passed over; returns the earliest time
    /// one of them may go.
    pub(crate) fn gather(&self, batch: &mut Batch, control: usize) -> Option<u64> {
        let total = |b: &Batch| control + b.bytes;
        let mut ready = self.ready.borrow_mut();
        // Read the clock at most once per batch, and only for an event that
        // can expire or a channel that may have to wait.
        let mut now = None;
        let mut waiting: Vec<(usize, Weak<Channel>)> = Vec::new();
        let mut wake: Option<u64> = None;
        // Whether this batch is the output jitter's sample (decided at its
        // first channel: 1 in OUTPUT_SAMPLE batches reads the clock for it).
        let mut first = true;
        while batch.len() < BATCH_EVENTS && total(batch) < BATCH_BYTES {
            let Some(weak) = ready.iter_mut().rev().find_map(|c| c.pop_front()) else {
                break;
            };
            // A channel that was dropped meanwhile took its queue with it.
            let Some(ch) = weak.upgrade() else { continue };
            if first {
                first = false;
                let n = self.batches.get().wrapping_add(1);
                self.batches.set(n);
                if n.is_multiple_of(OUTPUT_SAMPLE) {
                    now.get_or_insert_with(now_ns);
                }
            }
            let not_before = ch.not_before.get();
            if not_before != 0 {
                if *now.get_or_insert_with(now_ns) < not_before {
                    wake = Some(wake.map_or(not_before, |w| w.min(not_before)));
                    waiting.push((ch.class(), weak));
                    continue;
                }
                ch.not_before.set(0);
            }
            let mut q = ch.queue.borrow_mut();
            let (before, len) = (q.bytes(), q.len());
            let (mut taken, mut expired) = (0u64, 0u64);
            let turn = ch.batch.get();
            let room = |taken: u64, batch: &Batch| {
                taken < turn && batch.len() < BATCH_EVENTS && total(batch) < BATCH_BYTES
            };
            // Its output jitter, under the queue's lock, for the events
            // taken while this batch has a clock read (see `super::jitter`).
            let mut jitter = None;
            let mut observe = |now: Option<u64>, event: &[u8]| {
                if let (Some(t), Some(src)) = (now, source_time_of(event).filter(|s| *s != 0)) {
                    jitter
                        .get_or_insert_with(|| ch.jitter_out.load())
                        .observe(t, src);
                }
            };
            // Acknowledged delivery: each event written is held in the
            // window until the subscriber acknowledges it; a full window
            // leaves this channel out until then (see `super::acked`).
            let mut window = ch.acked.as_ref().map(|a| a.window.borrow_mut());
            let mut full = window.as_ref().is_some_and(|h| h.window.is_full());
            // An event in pieces goes on first, a batch's worth per turn;
            // while pieces are left (`unfinished`) the channel takes nothing
            // else, so its order holds.
            let fits = |b: &Batch| b.len() < BATCH_EVENTS && total(b) < BATCH_BYTES;
            let mut unfinished = false;
            if ch.in_pieces.get() {
                let mut piecing = ch.piecing.borrow_mut();
                if let Some(p) = piecing.as_mut() {
                    unfinished = !batch.push_pieces(ch.sub, p, ch.piece_size, fits);
                }
                if !unfinished {
                    *piecing = None;
                    ch.in_pieces.set(false);
                }
            }
            let mut put =
                |item: Queued, batch: &mut Batch, full: &mut bool, unfinished: &mut bool| {
                    // Acknowledged delivery: numbered and held in the window
                    // (a whole event or one in pieces alike).
                    let seq = window.as_mut().map(|h| {
                        let (kept, size) = super::acked::for_window(&item.event, &mut h.log);
                        let seq = h.window.hold(kept, size, 0);
                        *full = h.window.is_full();
                        seq
                    });
                    if item.event.len() > ch.piece_at {
                        // Larger than a frame: in pieces (protocol version
                        // 5; 6 on an acknowledged subscription).
                        let mut p = Piecing::new(&ch, ch.pieced.add(1), seq, item.event);
                        if !batch.push_pieces(ch.sub, &mut p, ch.piece_size, fits) {
                            *ch.piecing.borrow_mut() = Some(p);
                            ch.in_pieces.set(true);
                            *unfinished = true;
                        }
                        return;
                    }
                    let prefix = match seq {
                        None => Prefix::of(&ch, &item),
                        Some(seq) => Prefix::reliable(&ch, &item, seq),
                    };
                    batch.push(prefix, item.event);
                };
            while !full && !unfinished && room(taken, batch) {
                let Some(mut item) = q.pop() else {
                    break;
                };
                if writable(&mut item, &mut now, &mut expired) {
                    observe(now, &item.event);
                    put(item, batch, &mut full, &mut unfinished);
                    taken += 1;
                }
            }
            // Then what its time services (buffer, playout) release now,
            // under the same rules; `held`: when they next release.
            let mut held = None;
            let timed = ch.timed.get();
            if timed && !full && !unfinished {
                let t = *now.get_or_insert_with(now_ns);
                held = ch.release_timed(t, q.is_empty(), room(taken, batch), |mut item| {
                    if writable(&mut item, &mut Some(t), &mut expired) {
                        observe(Some(t), &item.event);
                        put(item, batch, &mut full, &mut unfinished);
                        taken += 1;
                    }
                    !full && !unfinished && room(taken, batch)
                });
            }
            drop(window);
            if let Some(j) = &jitter {
                ch.jitter_out.store(j);
            }
            ch.delivered.set(ch.delivered.get() + taken);
            ch.expired.set(ch.expired.get() + expired);
            ch.budget.release(before - q.bytes());
            ch.track(len, q.len());
            // Under the queue's lock: an event offered (on any lane) after
            // this sees the channel unscheduled and schedules it again.
            let empty = q.is_empty() && !unfinished;
            // Acknowledged publishers held back for this queue go on once it
            // is below half (a flag test for other channels).
            if ch.acked.is_some() {
                ch.drained_to(q.len(), q.bound());
            }
            // A timed channel's `release_timed` decided whether it stays
            // scheduled, under its services' lock.
            if empty {
                if !timed {
                    ch.scheduled.set(false);
                }
                ch.unpin();
            }
            drop(q);
            if full && !unfinished {
                // Left out until an acknowledgement puts it back
                // (`Channel::on_deliver_ack`): with events queued it stays
                // scheduled; a timed channel's services keep theirs.
                if let Some(a) = &ch.acked {
                    a.window_full.add(1);
                    a.blocked.set(true);
                }
                continue;
            }
            match held {
                _ if !empty => ready[ch.class()].push_back(weak),
                // More released now than one turn takes.
                Some(w) if w <= now.unwrap_or(0) => ready[ch.class()].push_back(weak),
                Some(w) => {
                    wake = Some(wake.map_or(w, |x| x.min(w)));
                    waiting.push((ch.class(), weak));
                }
                _ => {}
            }
        }
        for (class, weak) in waiting {
            ready[class].push_back(weak);
        }
        wake
    }
}

/// Whether an item leaving its channel's queue (or its time services) for
/// the batch is written: not if it expired while it waited (counted in
/// `expired`; the clock is read only for an item that can expire, at most
/// once per batch) or its shared-memory payload can be neither referenced
/// nor copied; else its pin is turned into what is written — by reference
/// if the subscriber's pin row has room (it gives the pin back), else a
/// copy. The item is changed in place, not moved in and out (eight words,
/// per event).
#[inline]
fn writable(item: &mut Queued, now: &mut Option<u64>, expired: &mut u64) -> bool {
    if item.deadline != NEVER && *now.get_or_insert_with(now_ns) > item.deadline {
        *expired += 1;
        return false;
    }
    if let Some(pin) = item.pin.take() {
        match pin.written() {
            Some(event) => item.event = event,
            None => return false,
        }
    }
    true
}

/// The writer's timer for timed waits (start time, pacing, the time
/// services' next release): a timerfd armed at an absolute `CLOCK_REALTIME`
/// time (the clock of [`now_ns`]), woken through the lane's event loop. It
/// fires within the kernel's high-resolution timer slack (~50 µs), where
/// tokio's timer wheel rounds to the millisecond — too coarse for a playout
/// of events 500 µs apart (NaradaBrokering Fig. 20).
struct WakeTimer(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl WakeTimer {
    fn new() -> std::io::Result<Self> {
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let fd = timerfd_create(
            TimerfdClockId::Realtime,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // `AsyncFd::new` is deprecated as unsound for types whose raw fd may
        // change or close while registered; an `OwnedFd` moved into the
        // `AsyncFd` stays open and the same until it is dropped, which is
        // what `AsyncFd::register` asks (and this crate allows no `unsafe`).
        #[allow(deprecated)]
        let fd = tokio::io::unix::AsyncFd::new(fd)?;
        Ok(WakeTimer(fd))
    }

    /// Resolves at `at` (ns since the Unix epoch; at once if past).
    async fn sleep_until(&self, at: u64) -> std::io::Result<()> {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        let at = at.max(1); // 0 would disarm the timer
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: (at / 1_000_000_000) as i64,
                tv_nsec: (at % 1_000_000_000) as i64,
            },
        };
        timerfd_settime(self.0.get_ref(), TimerfdTimerFlags::ABSTIME, &spec)?;
        loop {
            let mut ready = self.0.readable().await?;
            let mut expirations = [0u8; 8];
            match rustix::io::read(ready.get_inner(), &mut expirations) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut slices: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = w.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

#[cfg(test)]
#[test]
fn a_batch_writes_its_events_in_order_with_runs_of_small_ones_in_one_iovec() {
    let prefix = |n: u8| Prefix {
        bytes: [n; PREFIX_MAX],
        len: 9,
    };
    let big = Bytes::from(vec![0xB0u8; COPY_AT_MOST + 1]);
    let mut batch = Batch::default();
    batch.push(prefix(1), Bytes::from_static(b"one"));
    batch.push(prefix(2), Bytes::from_static(b"two"));
    batch.push(prefix(3), big.clone());
    batch.push(prefix(4), Bytes::from_static(b"four"));
    let control = b"ctl";
    let slices = batch.slices(control);
    let lens: Vec<usize> = slices.iter().map(|s| s.len()).collect();
    // control, the run of "one" and "two", the big one's prefix and body
    // (by reference), the run of "four".
    assert_eq!(lens, [3, 9 + 3 + 9 + 3, 9, COPY_AT_MOST + 1, 9 + 4]);
    assert_eq!(
        slices[3].as_ptr(),
        big.as_ptr(),
        "a large body is not copied"
    );
    let written: Vec<u8> = slices.iter().flat_map(|s| s.to_vec()).collect();
    let mut expected = control.to_vec();
    for (n, body) in [(1u8, &b"one"[..]), (2, b"two"), (3, &big), (4, b"four")] {
        expected.extend_from_slice(&[n; 9]);
        expected.extend_from_slice(body);
    }
    assert_eq!(written, expected);
    let bodies: Vec<&[u8]> = batch.iter().map(|(_, b)| b).collect();
    assert_eq!(bodies, [&b"one"[..], b"two", &big[..], b"four"]);
    assert_eq!(batch.bytes, 4 * 9 + 3 + 3 + big.len() + 4);
}

#[cfg(test)]
#[test]
fn a_released_batch_is_reused_by_the_lanes_next_writer_and_spares_are_bounded() {
    let prefix = Prefix {
        bytes: [7; PREFIX_MAX],
        len: 9,
    };
    let spares = || SPARE.with(|s| s.borrow().len());
    let held = Bytes::from(vec![1u8; COPY_AT_MOST + 1]);
    let mut a = Batch::default();
    a.push(prefix, Bytes::from_static(b"x"));
    a.push(prefix, held.clone());
    let buffer = a.flat.as_ptr();
    a.release();
    assert_eq!(
        a.events.capacity(),
        0,
        "an idle writer holds no batch memory"
    );
    assert_eq!(spares(), 1);
    assert!(held.is_unique(), "a spare holds no event");
    let mut b = Batch::default();
    b.push(prefix, Bytes::from_static(b"y"));
    assert_eq!(b.flat.as_ptr(), buffer, "the next writer takes the spare");
    assert_eq!(spares(), 0);
    assert_eq!(b.iter().count(), 1, "and starts empty");
    let mut many: Vec<Batch> = (0..SPARE_BATCHES + 2).map(|_| Batch::default()).collect();
    for m in &mut many {
        m.push(prefix, Bytes::from_static(b"z"));
    }
    for m in &mut many {
        m.release();
    }
    assert_eq!(spares(), SPARE_BATCHES, "at most SPARE_BATCHES kept");
}
