//! Sessions: one connection to a router (a daemon over TCP or a Unix socket,
//! or an in-process router in embedded mode), shared by the publishers and
//! subscribers made from it.
//!
//! The protocol is [`tagwire_core::connection::Connection`]'s (the engine:
//! handshake, request ids and replies, the endpoint and subscription tables,
//! what a reconnect declares again); this module does its I/O and threads.
//!
//! Threads: a *reader* thread feeds what it reads to the engine, wakes the
//! threads waiting for replies, runs callback subscriptions and fills
//! subscriber queues, and reconnects with backoff when the connection drops
//! (the engine then declares and subscribes again); a *flusher* thread
//! writes batched publishes. Publishing writes directly
//! from the caller's thread when the stream is idle (lowest latency) and
//! batches when publishes come faster than [`HOT_INTERVAL`] apart (highest
//! throughput: one `write` carries many events; the flusher lingers up to
//! 50 µs for a batch, so the last events of a burst wait at most that long).

mod ack_window;
mod acked;
mod admin;
mod bands;
mod connect;
mod dedupe;
mod open;
mod piece_resume;
mod pieces;
mod reader;
mod requests;
mod router_bands;
mod shm_region;
mod target;
mod write_state;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Instant;

use bytes::BytesMut;
use tagwire_core::connection::{Connection, Reply};
use tagwire_core::reliable::AckBatching;
use tagwire_proto::ErrorCode;

use crate::options::Options;
use crate::sink::Sink;
use crate::stream::Stream;
use crate::sync::lock;

pub use ack_window::AckStats;
pub(crate) use target::Target;
pub use write_state::HOT_INTERVAL;

use piece_resume::ResumePoints;
use router_bands::RouterBands;
use write_state::WriteState;

pub(crate) struct Inner {
    /// The daemons this session may use, in order of preference (one
    /// unless the URL listed several); `current` is the one in use.
    targets: Vec<Target>,
    current: AtomicUsize,
    name: String,
    pub(crate) options: Options,
    /// The origin of the engine's clock.
    origin: Instant,
    /// Lock order: `writer`, then `engine`, then `socket`, then `replay`;
    /// `waiters` and `sinks` are taken last, holding nothing else after.
    writer: Mutex<WriteState>,
    /// The protocol engine. Never held while a sink runs or I/O waits; the
    /// control frames it makes are moved into `writer.buf` (while
    /// connected: in order with the publishes) by [`Inner::take_control`].
    engine: Mutex<Connection>,
    socket: Mutex<Option<Stream>>,
    /// A batch whose write failed when the connection broke: its publishes
    /// go out again first after the reconnect (at most the batches in flight
    /// then, each at most `HIGH_WATER` plus one event).
    replay: Mutex<BytesMut>,
    flush_cv: Condvar,
    /// Notified (on `writer`) when the daemon acknowledges publishes.
    acked_cv: Condvar,
    /// Notified when the connection comes back or the session closes.
    connected_cv: Condvar,
    /// The threads waiting for a reply, by request id.
    waiters: Mutex<HashMap<u32, SyncSender<Reply>>>,
    /// Where each subscription's deliveries go; the reader thread keeps a
    /// copy, taken again when `subs_generation` changes.
    sinks: Mutex<HashMap<u32, Arc<Sink>>>,
    /// Acknowledged subscriptions that asked for a queue length: how their
    /// `DeliverAck`s are batched (see `requests::ack_batching_for`); the others
    /// take the default.
    ack_batching: Mutex<HashMap<u32, AckBatching>>,
    subs_generation: AtomicU64,
    closed: AtomicBool,
    reader_thread: Mutex<Option<ThreadId>>,
    reconnects: AtomicU64,
    /// Events of acknowledged subscriptions the daemon sent again after a
    /// reconnect and this session had already taken (dropped).
    delivery_duplicates: AtomicU64,
    /// Connections established so far, bumped under `writer` before a new
    /// connection takes publishes: a shared-memory reference is written
    /// only on the connection whose daemon granted its region
    /// ([`Inner::publish_in_region`]).
    epoch: AtomicU64,
    /// Errors the router sent for no request (refused publishes, …) since
    /// [`Session::take_refusals`] last took them.
    refusals: Mutex<Refusals>,
    /// Network time minus this host's clock (ns), as last asked of the
    /// daemon, and when (local ns; 0: never) — for `network_clock`.
    net_offset: std::sync::atomic::AtomicI64,
    net_offset_at: AtomicU64,
    /// Sessions on other bands of the same router, opened on demand.
    bands: Mutex<HashMap<String, Session>>,
    /// The router's bands, once asked ([`Session::router_bands`]).
    router_bands: Mutex<Option<Arc<RouterBands>>>,
    /// Shared-memory regions and counters (`crate::shm`).
    pub(crate) shm: crate::shm::ClientShm,
    /// Over UDP: the current connection's datagram counters.
    udp: Mutex<Option<Arc<crate::udp::UdpStatus>>>,
    /// The daemon's resume points for events in pieces (`PieceResume`).
    piece_resume: Mutex<ResumePoints>,
    /// Pieces written, and bytes a resume saved sending again.
    pieces_sent: AtomicU64,
    pieces_skipped: AtomicU64,
}

/// Closes the session when the last handle (session, publisher or
/// subscriber) is dropped.
pub(crate) struct Guard(pub(crate) Arc<Inner>);

/// A connection to a tagwire router. Clone it freely: clones share the
/// connection, which closes when the session and everything made from it
/// are dropped.
#[derive(Clone)]
pub struct Session {
    pub(crate) guard: Arc<Guard>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("server", &self.guard.0.target().describe())
            .field("name", &self.guard.0.name)
            .finish()
    }
}

impl Session {
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.guard.0
    }

    /// This session's client name (sent in the handshake).
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// The errors the router sent for no request since the last call — a
    /// publish refused by the ACL (`PermissionDenied`), a full queue
    /// (`QueueFull`), a bad tag — on this session and its band sessions,
    /// and forgets them. Publishing is fire-and-forget: call
    /// [`Session::ping`] first to be sure the router has handled every
    /// publish sent so far (its refusals arrive before the `Pong`).
    pub fn take_refusals(&self) -> Refusals {
        let inner = self.inner();
        let mut all = std::mem::take(&mut *lock(&inner.refusals));
        let bands: Vec<Session> = lock(&inner.bands).values().cloned().collect();
        for b in bands {
            all.absorb(b.take_refusals());
        }
        all
    }

    /// Over `udp://`: the connection's datagram counters (the daemon's
    /// datagrams received, lost, reordered, …; what could not be sent);
    /// `None` over stream transports.
    pub fn udp_counters(&self) -> Option<crate::udp::UdpCounters> {
        lock(&self.inner().udp).as_ref().map(|s| s.counters())
    }

    /// How many times the session reconnected after losing its connection.
    pub fn reconnects(&self) -> u64 {
        self.inner().reconnects.load(Ordering::Relaxed)
    }

    /// Events of subscriptions with acknowledged delivery (reliability
    /// `reliable` or more) that the daemon sent again after a reconnect and
    /// this session had already delivered: dropped, not delivered twice.
    pub fn delivery_duplicates(&self) -> u64 {
        self.inner().delivery_duplicates.load(Ordering::Relaxed)
    }

    /// Whether the session currently has a connection.
    pub fn is_connected(&self) -> bool {
        lock(&self.inner().writer).connected
    }
}

/// Errors the router sent for no request (see [`Session::take_refusals`]):
/// how many, and the first and the last of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    /// How many.
    pub count: u64,
    /// The first one: its code and the router's message.
    pub first: Option<(ErrorCode, String)>,
    /// The last one.
    pub last: Option<(ErrorCode, String)>,
}

impl Refusals {
    /// Notes one more.
    pub(crate) fn note(&mut self, code: ErrorCode, message: &str) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((code, message.to_owned()));
        }
        self.last = Some((code, message.to_owned()));
    }

    fn absorb(&mut self, other: Refusals) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
        if other.last.is_some() {
            self.last = other.last;
        }
    }
}

impl Inner {
    /// Subscription `sub`'s acknowledgement batching (see
    /// `requests::ack_batching_for`).
    pub(super) fn ack_batching(&self, sub: u32) -> AckBatching {
        lock(&self.ack_batching)
            .get(&sub)
            .copied()
            .unwrap_or_default()
    }
}

impl Inner {
    /// The daemon in use (or last tried).
    pub(crate) fn target(&self) -> &Target {
        &self.targets[self.current.load(Ordering::Relaxed) % self.targets.len()]
    }

    /// Whether the calling thread is this session's reader thread (a
    /// subscription callback runs there; it must not wait for a reply).
    pub(crate) fn on_reader_thread(&self) -> bool {
        *lock(&self.reader_thread) == Some(std::thread::current().id())
    }

    /// The engine's clock: nanoseconds since `origin`.
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
