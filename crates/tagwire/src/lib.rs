//! `tagwire` — the client library of the tagwire real-time publish/subscribe
//! middleware.
//!
//! A [`Session`] connects to a router: the node daemon `tagwired` over TCP
//! (optionally TLS, [`TlsOptions`]) or a Unix socket ([`Session::connect`]), or a router running inside this
//! process ([`Session::embedded`], [`EmbeddedRouter`]) — the same API and
//! protocol either way. From a session, declare named [`Publisher`]s and
//! subscribe to tag patterns (`*` one level, `**` any depth), receiving by
//! blocking [`Subscriber::recv`] / iterator, async stream, or callback.
//! Sessions reconnect with backoff and re-subscribe after a daemon restart;
//! meanwhile a publish waits (bounded by [`SessionBuilder::reconnect_wait`])
//! instead of failing, and connecting is bounded by
//! [`SessionBuilder::connect_timeout`].
//!
//! ```no_run
//! let session = tagwire::Session::connect("tcp://127.0.0.1:7700")?;
//! let sub = session.subscribe("/demo/**").receiver()?;
//! let publisher = session.declare_publisher("/example/pub")?;
//! publisher.event("/demo/x", "hi").field("severity", 3).priority(2).send()?;
//! let sample = sub.recv()?;
//! assert_eq!(&sample.payload()[..], b"hi");
//! # Ok::<(), tagwire::Error>(())
//! ```
//!
//! # Layers
//!
//! The modules stand in five layers, and **a module imports only from its
//! own layer or the layers below** (never up, and no two modules import each
//! other, directly or round a loop). Where a lower module needs something of
//! a higher one, the item moves down, or the higher one hands it in (a
//! value, a function, or a type parameter).
//!
//! 1. **Foundation** — what needs nothing above it: `error`, `sync` (the
//!    mutex helper `lock`), `clock` (`now_ns`), `url`, `tls`, `credentials`,
//!    `options` (what a session is opened with, its request timeout and the
//!    acknowledged window's defaults, its priority band), `spacing`, `sample`,
//!    `shm` (shared-memory regions and their counters), `udp` (the datagram
//!    pump) and `stream` (a connection's bytes over TCP, TLS, a Unix socket or
//!    UDP).
//! 2. **The sink chain** — where the session's reader thread puts a
//!    subscription's events: `deliver` (the trait a stage hands on to),
//!    `queue` (a receiver's queue), `seam` (live events held while a replay
//!    runs), `playout` and `resume`, which are generic over what they hand on
//!    to and know no session (a resume is handed its replays as a function),
//!    and `sink` (the `Sink` the session holds, which holds the stages).
//! 3. **The session** — `session` and `session/`, layered the same way:
//!    `session.rs` holds the data (`Inner`, [`Session`], the guard that
//!    closes it, [`Refusals`]) and the types of `Inner`'s fields stand in
//!    leaf files (`write_state`, `ack_window`, `piece_resume`,
//!    `router_bands`, `target`, `dedupe`); the operations stand above it —
//!    the write path (`writer`), acknowledged publishing (`acked`), events
//!    in pieces (`pieces`), requests (`requests`, then `admin`), bands,
//!    shared-memory regions, connecting (`connect`), the reader thread
//!    (`reader`), and on top `open` (opening a session, its threads, and
//!    closing it).
//! 4. **What is made from a session**: `builder` ([`SessionBuilder`] and
//!    [`Session::connect`]), `embedded`, `publisher` (and
//!    [`Session::declare_publisher`]), `replay` (a replay run against the
//!    session's stores; it makes the function a resume replays with),
//!    `pull`, and `subscriber` (and [`Session::subscribe`]).
//! 5. **This file**: the public paths.

mod builder;
mod clock;
mod credentials;
mod deliver;
mod embedded;
mod error;
mod options;
mod playout;
mod publisher;
mod pull;
mod queue;
mod replay;
mod resume;
mod sample;
mod seam;
mod session;
mod shm;
mod sink;
mod spacing;
mod stream;
mod subscriber;
mod sync;
mod tls;
mod udp;
mod url;

pub use builder::{
    SessionBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RECONNECT_WAIT, DEFAULT_SHM_THRESHOLD,
};
pub use embedded::EmbeddedRouter;
pub use error::{Error, Result};
pub use options::{DEFAULT_ACK_TIMEOUT, DEFAULT_ACK_WINDOW_BYTES, DEFAULT_ACK_WINDOW_EVENTS};
pub use playout::{LatePolicy, PlayoutConfig, PlayoutStats, TimeStats};
pub use publisher::{EventBuilder, Publisher};
pub use pull::{HistoryAt, Pull, PullError, PullOptions};
pub use replay::{ReplayFrom, Stored};
pub use resume::{ResumePoint, RESUME_MARGIN};
pub use sample::Sample;
pub use session::{AckStats, Refusals, Session, HOT_INTERVAL};
pub use shm::{ShmMode, ShmStats};
pub use spacing::Spacing;
pub use subscriber::{CallbackSubscription, Subscriber, SubscriptionBuilder};
pub use tagwire_core::qos::Reliability;
pub use tls::TlsOptions;
pub use udp::UdpCounters;
pub use url::ServerUrl;

pub use bytes::Bytes;
pub use tagwire_core::queue::DiscardPolicy;
pub use tagwire_proto::admin::{AdminReply, AdminRequest, FilterInfo, FilterLevel, Listing};
pub use tagwire_proto::{ErrorCode, Event, EventRef, Expiry, Value, ValueRef};
pub use tagwire_router::{RouterConfig, RouterHandle};

/// Typed admin requests and replies (`docs/admin.md`): what
/// [`Session::admin`] sends and returns, and the listing types.
pub mod admin {
    pub use tagwire_proto::admin::*;
}

/// Router types for running a router in-process with full control.
pub mod router {
    pub use tagwire_router::{
        auth, cluster, config, local, transform, FederationConfig, FederationInfo, Limits,
        LinkInfo, ProxyInfo, Router, RouterConfig, RouterError, RouterHandle, ShmCounters,
        TimeInfo, TlsConfig,
    };
}
