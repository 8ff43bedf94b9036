//! What the router sends its lanes, as [`State`](super::State) holds
//! their channels: a [`LaneCommand`] from the router handle, an
//! [`AdminJob`] for the admin lane and its [`Reply`]; and [`LaneOf`], the
//! lane a connection runs on.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use tagwire_proto::ErrorCode;
use tokio::sync::oneshot;

/// Most commands waiting for one lane (in-process connections to attach,
/// scheduling changes, stop). At the bound an attach is refused
/// (`WouldBlock`, "lane busy") and a scheduling change is dropped and
/// logged; lanes hand work to each other only through bounded queues.
pub(crate) const MAX_LANE_COMMANDS: usize = 256;

/// Most admin requests waiting for the admin lane. A connection waits for
/// its request's answer before it reads on, so at most one per connection
/// is queued; at the bound a request is refused with `LimitReached`.
pub(crate) const MAX_ADMIN_JOBS: usize = 1024;

/// What a lane is told by the router handle.
pub(crate) enum LaneCommand {
    /// Serve this in-process socket.
    Attach(StdUnixStream),
    /// Close the listeners (the router is stopping).
    StopAccepting,
    /// Admin lane only: tell every client the router is closing, flush,
    /// save reservations, then exit.
    Shutdown,
    /// Exit now.
    Exit,
    /// Run this scheduling from now on (a channel's `sched` changed).
    Sched(crate::priority::SchedPolicy),
}

/// An admin request sent to the admin lane by a connection on another lane.
pub(crate) struct AdminJob {
    pub body: String,
    pub identity: Arc<str>,
    pub admin: bool,
    pub max_frame: usize,
    pub reply: oneshot::Sender<Result<Reply, (ErrorCode, String)>>,
}

/// The lane a connection runs on.
#[derive(Debug, Clone)]
pub(crate) struct LaneOf {
    /// Its band.
    pub band: Arc<str>,
    /// Whether this is the admin lane (admin requests run inline).
    pub admin_lane: bool,
}

/// An admin reply, as the JSON body of its frame: to send at once, or once
/// the routes have settled (a session-level change re-places the session's
/// channels in slices first).
#[derive(Debug)]
pub(crate) enum Reply {
    Now(String),
    WhenSettled(String),
}
