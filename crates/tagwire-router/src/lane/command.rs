//! What is sent to a lane (a [`LaneCommand`] from the router handle, an
//! [`AdminJob`] for the admin lane), the [`InProcessConnector`] that
//! attaches in-process connections through it, and [`LaneOf`], the lane a
//! connection runs on.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use tagwire_proto::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use crate::admin::reply::Reply;

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

/// Attaches in-process connections to a running router from any thread
/// (the MQTT listener's): a clone of the default lane's command channel.
#[derive(Clone)]
pub struct InProcessConnector {
    pub(crate) lane: mpsc::UnboundedSender<LaneCommand>,
}

impl std::fmt::Debug for InProcessConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessConnector").finish_non_exhaustive()
    }
}

impl InProcessConnector {
    /// A connected socket served by the router, as
    /// [`RouterHandle::connect_in_process`] gives.
    pub fn connect(&self) -> std::io::Result<StdUnixStream> {
        let (ours, theirs) = StdUnixStream::pair()?;
        self.lane.send(LaneCommand::Attach(theirs)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::NotConnected, "router has stopped")
        })?;
        Ok(ours)
    }
}
