//! `tagwire-router` — the runtime shared by the `tagwired` daemon and by
//! embedded mode: lanes, listeners, connections, the admin service.
//!
//! ```text
//!   TCP (or TLS: `tls` module) / Unix socket / in-process socketpair
//!        │ read_buf (64 KiB chunks)
//!        ▼
//!   FrameDecoder ── split frames, bodies are zero-copy `Bytes` slices
//!        │
//!        ▼
//!   check: handshake, endpoint, EventRef::parse, tag, expiry
//!        │
//!        ▼
//!   TagTable::matches(tag) ── trie + cache → [Rc<Channel>]
//!        │  (the same `Bytes` handed to every channel: no payload copy)
//!        ▼
//!   Channel queues (bounded; discard policy at the bound)
//!        │  outbox: round-robin over ready channels
//!        ▼
//!   writev([Deliver prefix, event bytes] × up to 256) ──▶ socket
//! ```
//!
//! All of this runs on a **lane**: one OS thread with a single-threaded event
//! loop. Start a router with [`Router::start`]; it returns a [`RouterHandle`]
//! that can attach in-process clients ([`RouterHandle::connect_in_process`])
//! and shut it down.

mod admin;
mod admission;
pub mod auth;
mod budget;
mod channel;
pub mod config;
mod connection;
mod dispatch;
mod filters;
mod lane;
pub mod local;
pub mod priority;
mod read_buffer;
mod state;
mod timing;
pub mod tls;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use admin::{
    AdminRequest, ConnectionInfo, EndpointEntry, FilterInfo, FilterLevel, Listing, MemoryInfo,
    SubscriptionInfo, TagInfo, DEFAULT_PAGE_ITEMS, MAX_PAGE_ITEMS,
};
use auth::{Authenticator, Transport};
pub use config::{Limits, RouterConfig, TlsConfig};
use state::State;
use tagwire_proto::{ErrorCode, Frame};
use tokio::sync::mpsc;

/// Why a router could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// A listener could not bind.
    #[error("cannot listen on {what}: {source}")]
    Listen {
        /// The address or path.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// Another daemon already serves the Unix socket.
    #[error("another tagwired is already listening on {0}")]
    AlreadyRunning(PathBuf),
    /// The lane thread could not start.
    #[error("cannot start the lane thread: {0}")]
    Lane(std::io::Error),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The private runtime directory or a file in it is unsafe or unwritable.
    #[error(transparent)]
    Local(#[from] local::LocalError),
    /// A `[tls]` file is missing or unusable (the error names the file).
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

enum Command {
    Attach(StdUnixStream),
    Shutdown,
}

/// Starts routers.
#[derive(Debug)]
pub struct Router;

/// A running router. Dropping it shuts the router down.
#[derive(Debug)]
pub struct RouterHandle {
    commands: mpsc::UnboundedSender<Command>,
    lane: Option<JoinHandle<()>>,
    tcp: Option<SocketAddr>,
    unix: Option<PathBuf>,
    /// The owner's token file, removed at shutdown.
    token_file: Option<PathBuf>,
}

impl Router {
    /// Binds the configured listeners and starts serving on a lane thread.
    /// Listener errors are reported here, before anything runs.
    pub fn start(config: RouterConfig) -> Result<RouterHandle, RouterError> {
        config.validate()?;
        Self::start_unchecked(config)
    }

    /// Starts a router with no listeners, for in-process clients only
    /// (embedded mode).
    pub fn start_embedded(limits: Limits) -> Result<RouterHandle, RouterError> {
        Self::start_unchecked(RouterConfig {
            name: "embedded".into(),
            tcp: None,
            unix: None,
            limits,
            auth: config::AuthConfig {
                local_token: false,
                ..config::AuthConfig::default()
            },
            acl: Vec::new(),
            reservations_file: None,
            tls: None,
        })
    }

    fn start_unchecked(config: RouterConfig) -> Result<RouterHandle, RouterError> {
        let tls = match &config.tls {
            Some(t) => Some(tls::server_config(t)?),
            None => None,
        };
        let tcp = match config.tcp {
            Some(addr) => {
                let l =
                    std::net::TcpListener::bind(addr).map_err(|source| RouterError::Listen {
                        what: format!("tcp {addr}"),
                        source,
                    })?;
                l.set_nonblocking(true).map_err(RouterError::Lane)?;
                Some(l)
            }
            None => None,
        };
        let tcp_addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
        let runtime_dir = local::runtime_dir();
        let unix = match &config.unix {
            Some(path) => {
                // The default socket lives in the user's private directory;
                // never bind it inside one someone else made.
                if path.parent() == Some(runtime_dir.as_path()) {
                    local::prepare_private_dir(&runtime_dir)?;
                }
                Some(bind_unix(path)?)
            }
            None => None,
        };
        let unix_path = config.unix.clone();
        let (token, token_file) = match tcp_addr {
            Some(a) if config.auth.enabled && config.auth.local_token => {
                local::prepare_private_dir(&runtime_dir)?;
                let path = local::token_path(a.port());
                (Some(local::write_token(&path)?), Some(path))
            }
            _ => (None, None),
        };
        let auth = Authenticator::new(&config.auth, &config.acl, local::current_uid(), token)?;
        if config.name != "embedded" {
            tracing::info!("authentication {}", auth.describe());
            if !auth.enabled() {
                tracing::warn!(
                    "authentication is off: any local user may publish, subscribe and administer"
                );
            }
        }
        let scheme = if tls.is_some() { "tls" } else { "tcp" };
        let (tx, rx) = mpsc::unbounded_channel();
        let lane = lane::spawn("tagwire-lane-0", move || {
            serve(config, auth, tcp, tls, unix, rx)
        })
        .map_err(RouterError::Lane)?;
        if let Some(a) = tcp_addr {
            tracing::info!("listening on {scheme}://{a}");
        }
        if let Some(p) = &unix_path {
            tracing::info!("listening on unix://{}", p.display());
        }
        Ok(RouterHandle {
            commands: tx,
            lane: Some(lane),
            tcp: tcp_addr,
            unix: unix_path,
            token_file,
        })
    }
}

impl RouterHandle {
    /// The bound TCP address, if TCP is enabled.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// The Unix socket path, if enabled.
    pub fn unix_path(&self) -> Option<&Path> {
        self.unix.as_deref()
    }

    /// A connected in-process socket served by this router: the same
    /// protocol and code path as a network client, without a listener.
    pub fn connect_in_process(&self) -> std::io::Result<StdUnixStream> {
        let (ours, theirs) = StdUnixStream::pair()?;
        self.commands.send(Command::Attach(theirs)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::NotConnected, "router has stopped")
        })?;
        Ok(ours)
    }

    /// Tells every client the router is closing, flushes, stops the lane and
    /// removes the Unix socket. Waits for the lane to finish.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(lane) = self.lane.take() {
            if lane.join().is_err() {
                tracing::error!("the lane thread panicked");
            }
        }
        if let Some(t) = self.token_file.take() {
            let _ = std::fs::remove_file(t);
        }
    }
}

impl Drop for RouterHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binds a Unix socket, replacing a stale file but never a live daemon's.
fn bind_unix(path: &Path) -> Result<std::os::unix::net::UnixListener, RouterError> {
    if path.exists() {
        if StdUnixStream::connect(path).is_ok() {
            return Err(RouterError::AlreadyRunning(path.to_owned()));
        }
        let _ = std::fs::remove_file(path);
    }
    let listen_err = |source| RouterError::Listen {
        what: format!("unix {}", path.display()),
        source,
    };
    let l = std::os::unix::net::UnixListener::bind(path).map_err(listen_err)?;
    l.set_nonblocking(true).map_err(listen_err)?;
    // Who may connect is decided by the directory (private by default) and
    // then by the peer's credentials against the ACL, not by the socket
    // file's mode: another user who can reach it gets a named refusal.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(listen_err)?;
    Ok(l)
}

async fn serve(
    config: RouterConfig,
    auth: Authenticator,
    tcp: Option<std::net::TcpListener>,
    tls: Option<Arc<rustls::ServerConfig>>,
    unix: Option<std::os::unix::net::UnixListener>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let unix_path = config.unix.clone();
    let reservations_file = config.reservations_file.clone();
    let state = Rc::new(RefCell::new(State::new(config, auth)));
    if let Some(f) = &reservations_file {
        state.borrow_mut().load_reservations(f, timing::now_ns());
    }
    let mut accepts = vec![
        tokio::task::spawn_local(dispatch::release_deferred(state.clone())),
        tokio::task::spawn_local(state::housekeeping(state.clone())),
    ];
    if let Some(l) = tcp {
        match tokio::net::TcpListener::from_std(l) {
            Ok(l) => accepts.push(tokio::task::spawn_local(accept_tcp(state.clone(), l, tls))),
            Err(e) => tracing::error!("tcp listener: {e}"),
        }
    }
    if let Some(l) = unix {
        match tokio::net::UnixListener::from_std(l) {
            Ok(l) => accepts.push(tokio::task::spawn_local(accept_unix(state.clone(), l))),
            Err(e) => tracing::error!("unix listener: {e}"),
        }
    }
    while let Some(cmd) = commands.recv().await {
        match cmd {
            Command::Attach(s) => {
                let stream = s
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(s));
                match stream {
                    Ok(s) => {
                        spawn_unix(state.clone(), s, "in-process".into(), Transport::InProcess)
                    }
                    Err(e) => tracing::error!("cannot attach in-process client: {e}"),
                }
            }
            Command::Shutdown => break,
        }
    }
    for a in accepts {
        a.abort();
    }
    let outboxes: Vec<_> = state
        .borrow()
        .connections
        .values()
        .map(|c| c.outbox.clone())
        .collect();
    for o in &outboxes {
        o.send(
            &Frame::Close {
                code: ErrorCode::ShuttingDown.code(),
                reason: "server shutting down".into(),
            },
            usize::MAX,
        );
        o.close();
    }
    // Let writers flush their Close frames, bounded.
    for _ in 0..20 {
        if outboxes.iter().all(|o| Rc::strong_count(o) <= 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if let Some(p) = unix_path {
        let _ = std::fs::remove_file(p);
    }
    if let Some(f) = &reservations_file {
        state.borrow_mut().save_reservations(f, timing::now_ns());
    }
    tracing::info!("router stopped");
}

async fn accept_tcp(
    state: Rc<RefCell<State>>,
    l: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let tls = tls.map(|config| {
        let max_pending = state.borrow().config.limits.max_connections;
        TlsAccept {
            acceptor: tokio_rustls::TlsAcceptor::from(config),
            pending: Rc::new(Cell::new(0)),
            max_pending,
        }
    });
    loop {
        match l.accept().await {
            Ok((s, peer)) => {
                let _ = s.set_nodelay(true);
                match &tls {
                    Some(t) => t.spawn(state.clone(), s, peer),
                    None => {
                        let (r, w) = s.into_split();
                        tokio::task::spawn_local(connection::serve(
                            state.clone(),
                            peer.to_string(),
                            Transport::Tcp { cert: None },
                            r,
                            w,
                        ));
                    }
                }
            }
            Err(e) => {
                tracing::warn!("accept (tcp): {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn accept_unix(state: Rc<RefCell<State>>, l: tokio::net::UnixListener) {
    loop {
        match l.accept().await {
            Ok((s, _)) => {
                let uid = s.peer_cred().ok().map(|c| c.uid());
                let peer = match uid {
                    Some(uid) => format!("unix uid {uid}"),
                    None => "unix".into(),
                };
                spawn_unix(state.clone(), s, peer, Transport::Unix { uid });
            }
            Err(e) => {
                tracing::warn!("accept (unix): {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn spawn_unix(
    state: Rc<RefCell<State>>,
    s: tokio::net::UnixStream,
    peer: String,
    transport: Transport,
) {
    let (r, w) = s.into_split();
    tokio::task::spawn_local(connection::serve(state, peer, transport, r, w));
}

/// The TLS side of the TCP listener: handshakes run in their own tasks,
/// bounded in time ([`TLS_HANDSHAKE_TIMEOUT`]) and in number (at most
/// `limits.max_connections` at once; beyond that new sockets are closed).
struct TlsAccept {
    acceptor: tokio_rustls::TlsAcceptor,
    pending: Rc<Cell<usize>>,
    max_pending: usize,
}

/// How long a TLS handshake may take before the socket is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

impl TlsAccept {
    fn spawn(&self, state: Rc<RefCell<State>>, s: tokio::net::TcpStream, peer: SocketAddr) {
        if self.pending.get() >= self.max_pending {
            tracing::debug!(%peer, "dropping connection: {} TLS handshakes already in progress", self.max_pending);
            return;
        }
        self.pending.set(self.pending.get() + 1);
        let pending = self.pending.clone();
        let accept = self.acceptor.accept(s);
        tokio::task::spawn_local(async move {
            let done = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, accept).await;
            pending.set(pending.get() - 1);
            let stream = match done {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, "TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out after {} s", TLS_HANDSHAKE_TIMEOUT.as_secs());
                    return;
                }
            };
            let identity = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(tls::cert_identity);
            let (r, w) = tokio::io::split(stream);
            let transport = Transport::Tcp { cert: identity };
            connection::serve(state, peer.to_string(), transport, r, w).await;
        });
    }
}
