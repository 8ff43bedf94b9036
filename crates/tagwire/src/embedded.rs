//! Embedded mode: a router running inside this process, reached through
//! in-process sockets by as many sessions as the application opens.

use std::sync::Arc;

use tagwire_router::{Limits, Router, RouterHandle};

use crate::builder::SessionBuilder;
use crate::error::Result;
use crate::session::{Session, Target};

/// A router running inside this process, shared by any number of sessions
/// ([`EmbeddedRouter::session`]). It stops when it and its sessions are dropped.
#[derive(Clone, Debug)]
pub struct EmbeddedRouter(Arc<RouterHandle>);

impl EmbeddedRouter {
    /// Starts an in-process router with default limits.
    pub fn start() -> Result<Self> {
        Ok(EmbeddedRouter(Arc::new(Router::start_embedded(
            Limits::default(),
        )?)))
    }

    /// A new session on this router.
    pub fn session(&self) -> Result<Session> {
        Session::open(
            Target::Embedded(self.0.clone()),
            SessionBuilder::default().options(),
        )
    }
}

impl Session {
    /// Starts a private in-process router and connects to it: the same API
    /// and protocol as a daemon, with no daemon.
    pub fn embedded() -> Result<Session> {
        EmbeddedRouter::start()?.session()
    }
}
