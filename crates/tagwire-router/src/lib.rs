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
//!   TagTable::matches(tag) ── trie + cache → [Arc<Channel>]
//!        │  (the same `Bytes` handed to every channel: no payload copy)
//!        ▼
//!   Channel queues (bounded; discard policy at the bound)
//!        │  outbox: round-robin over ready channels
//!        ▼
//!   writev(up to 1,024 events or 64 KiB: prefix + bytes, those ≤ 512 B copied into
//!          one run, larger ones by reference) ──▶ socket
//! ```
//!
//! All of this runs on a **lane**: one OS thread with a single-threaded event
//! loop. Start a router with [`Router::start`]; it returns a [`RouterHandle`]
//! that can attach in-process clients ([`RouterHandle::connect_in_process`])
//! and shut it down.
//!
//! # Layers
//!
//! The modules stand in five layers, and **a module imports only from its
//! own layer or the layers below** (never up, and no two modules import each
//! other, directly or round a loop). Where a lower module needs something of
//! a higher one, the item moves down, or the higher one hands it in (a value
//! or a function: membership gets the federation task's dialer).
//!
//! 1. **Data and foundation** — types with their own methods, needing no
//!    operation on the routing state: `State` and the types
//!    of its fields (`state` and `state/`: connections, channels, endpoints,
//!    federation, reliable windows, pieces, multicast groups, UDP counters,
//!    parked deliveries, …), the durable store's database and thread
//!    (`store`), channels and their queues (`channel`), and the
//!    configuration and plumbing: [`config`], [`band`], [`cluster`], [`auth`],
//!    [`tls`], [`local`], [`priority`], [`transform`], `filters`, `budget`,
//!    `admission`, `pieces`, `read_buffer`, `shm`, `sync`, `timing`.
//! 2. **Operations on `&mut State`** that call nothing above them:
//!    `acked_delivery`, `bandwidth`, `compress`, `durable`, `history`,
//!    `placement`, `membership`, `reliable`, and `qos` (which tells the
//!    others when a QoS layer changes).
//! 3. **Dispatch** — executing routing decisions: `dispatch` (an event to
//!    its channels, links and groups) and `node_io` (what core's node
//!    engine decided: deliveries, frames to send, pulls to answer).
//! 4. **What arrives and is served**: `multicast` (the groups' sockets),
//!    `forwarded` (events from neighbours), `fragment` (events in pieces),
//!    `admin` (admin requests), `link` (link frames), `connection` (one
//!    connection's read and write loops), [`udp`] (datagram sessions) and
//!    `federation` (the federation task, dialing peers).
//! 5. **Lanes and the router**: `lane`, [`metrics`], [`mqtt`], `error` and
//!    this file.

mod acked_delivery;
mod admin;
mod admission;
pub mod auth;
pub mod band;
mod bandwidth;
mod budget;
mod channel;
pub mod cluster;
mod compress;
pub mod config;
mod connection;
mod dispatch;
mod durable;
mod error;
mod federation;
mod filters;
mod forwarded;
mod fragment;
mod history;
mod lane;
mod link;
pub mod local;
mod membership;
pub mod metrics;
pub mod mqtt;
pub(crate) mod multicast;
mod node_io;
mod pieces;
mod placement;
pub mod priority;
mod qos;
mod read_buffer;
mod reliable;
mod shm;
mod state;
mod store;
mod sync;
mod timing;
pub mod tls;
pub mod transform;
pub mod udp;

use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use auth::Authenticator;
pub use config::{FederationConfig, Limits, PeerTlsConfig, RouterConfig, TlsConfig};
pub use error::RouterError;
pub use history::HistoryTotals;
pub use lane::InProcessConnector;
pub use link::{DaemonInfo, FederationInfo, LinkInfo, TimeInfo};
pub use membership::{Beacon, BeaconError};
pub use shm::ShmCounters;
use state::lanes::LaneCommand;
use state::State;
pub use store::StoreError;
use sync::Locked;
/// The admin requests and replies (moved to `tagwire_proto::admin`; here
/// under their old names, so that code naming `tagwire_router::Listing`
/// still compiles).
pub use tagwire_proto::admin::{
    AdminReply, AdminRequest, ConnectionInfo, EndpointEntry, FilterInfo, FilterLevel, LaneEntry,
    Listing, MemoryInfo, ProxyInfo, SubscriptionInfo, TagInfo, DEFAULT_PAGE_ITEMS, MAX_PAGE_ITEMS,
};
use tokio::sync::mpsc;

/// Starts routers.
#[derive(Debug)]
pub struct Router;

/// A running router. Dropping it shuts the router down.
pub struct RouterHandle {
    /// Each lane's command channel and thread, lowest band (the admin
    /// lane) first.
    lanes: Vec<(String, mpsc::Sender<LaneCommand>, Option<JoinHandle<()>>)>,
    /// The default band's name.
    default_band: String,
    /// Each band's listeners: `(name, tcp, unix)`.
    bands: Vec<(String, Option<SocketAddr>, Option<PathBuf>)>,
    tcp: Option<SocketAddr>,
    unix: Option<PathBuf>,
    /// The default band's UDP socket (`[udp] listen`).
    udp: Option<SocketAddr>,
    /// The owner's token files (one per TCP band port), removed at shutdown.
    token_files: Vec<PathBuf>,
    state: Arc<Locked<State>>,
    reservations_file: Option<PathBuf>,
    /// The metrics and dashboard listener (`[metrics] listen`), if any.
    metrics: Option<metrics::MetricsServer>,
    /// The MQTT listener (`[mqtt] listen`), stopped before the lanes.
    mqtt: Option<mqtt::Gateway>,
}

impl Router {
    /// Binds the configured listeners and starts serving on a lane thread.
    /// Listener errors are reported here, before anything runs.
    pub fn start(mut config: RouterConfig) -> Result<RouterHandle, RouterError> {
        if let Some(setup) = cluster::apply(&mut config).map_err(config::ConfigError::from)? {
            tracing::info!("{setup}");
        }
        config.validate()?;
        membership::advertise::resolve(&mut config)?;
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
            ..RouterConfig::default()
        })
    }

    fn start_unchecked(config: RouterConfig) -> Result<RouterHandle, RouterError> {
        let bands = band::plan(&config)?;
        let tls = match &config.tls {
            Some(t) => Some(tls::server_config(t)?),
            None => None,
        };
        let link_tls = match &config.federation.tls {
            Some(t) => Some(tls::LinkTls::new(t)?),
            None => None,
        };
        let runtime_dir = local::runtime_dir();
        let mut listeners = Vec::new();
        for b in &bands {
            let tcp = match b.tcp {
                Some(addr) => {
                    let mut bound = band::bind_tcp(addr, b.dscp);
                    if bound.is_err() && b.tcp_derived {
                        // A derived port that is taken: any free one will do;
                        // clients find it in the listing's `lanes`.
                        let mut any = addr;
                        any.set_port(0);
                        tracing::warn!(
                            "band {}: port {} is taken; listening on a free port instead (see `tagwire list`)",
                            b.name,
                            addr.port()
                        );
                        bound = band::bind_tcp(any, b.dscp);
                    }
                    Some(bound.map_err(|source| RouterError::Listen {
                        what: format!("tcp {addr} (band {})", b.name),
                        source,
                    })?)
                }
                None => None,
            };
            let unix = match &b.unix {
                Some(path) => {
                    // The default sockets live in the user's private
                    // directory; never bind one inside a directory someone
                    // else made.
                    if path.parent() == Some(runtime_dir.as_path()) {
                        local::prepare_private_dir(&runtime_dir)?;
                    }
                    Some(bind_unix(path)?)
                }
                None => None,
            };
            listeners.push((tcp, unix));
        }
        let addrs: Vec<(String, Option<SocketAddr>, Option<PathBuf>)> = bands
            .iter()
            .zip(&listeners)
            .map(|(b, (t, _))| {
                (
                    b.name.clone(),
                    t.as_ref().and_then(band::bound_addr),
                    b.unix.clone(),
                )
            })
            .collect();
        let default = bands
            .iter()
            .position(|b| b.name == config.default_band)
            .expect("band::plan checked the default band");
        let tcp_addr = addrs[default].1;
        let unix_path = addrs[default].2.clone();
        let local_token = config.auth.enabled && config.auth.local_token;
        let (token, token_files) = match tcp_addr {
            Some(_) if local_token => {
                local::prepare_private_dir(&runtime_dir)?;
                let mut files = Vec::new();
                let mut token = None;
                for a in addrs.iter().filter_map(|(_, t, _)| *t) {
                    let path = local::token_path(a.port());
                    match &token {
                        None => token = Some(local::write_token(&path)?),
                        Some(t) => local::write_private(&path, t.as_bytes()).map_err(|source| {
                            local::LocalError::Io {
                                what: "cannot write token file",
                                path: path.clone(),
                                source,
                            }
                        })?,
                    }
                    files.push(path);
                }
                (token, files)
            }
            Some(_) => {
                // No local token for these ports: a token file left by an
                // earlier daemon (killed with `kill -9`) names a token this
                // one cannot prove, and local clients would refuse it.
                if local::check_private_dir(&runtime_dir).is_ok() {
                    for a in addrs.iter().filter_map(|(_, t, _)| *t) {
                        let _ = std::fs::remove_file(local::token_path(a.port()));
                    }
                }
                (None, Vec::new())
            }
            None => (None, Vec::new()),
        };
        // Listening only now that the token files exist: a client that
        // connected earlier would have found none and been refused.
        let listeners = listeners
            .into_iter()
            .zip(&addrs)
            .map(|((tcp, unix), (name, addr, _))| {
                let tcp = tcp
                    .map(|s| {
                        band::listen_tcp(s).map_err(|source| RouterError::Listen {
                            what: format!(
                                "tcp {} (band {name})",
                                addr.map_or_else(|| "?".into(), |a| a.to_string())
                            ),
                            source,
                        })
                    })
                    .transpose()?;
                Ok((tcp, unix))
            })
            .collect::<Result<Vec<_>, RouterError>>()?;
        // UDP (`[udp] listen`): the default band on the configured address,
        // the others on the same IP with a port the OS picks.
        let udp_config = config.udp.clone();
        let mut udp_sockets = Vec::new();
        for b in &bands {
            let socket = match udp_config.listen {
                None => None,
                Some(listen) => {
                    let addr = if b.name == config.default_band {
                        listen
                    } else {
                        SocketAddr::new(listen.ip(), 0)
                    };
                    let s =
                        std::net::UdpSocket::bind(addr).map_err(|source| RouterError::Listen {
                            what: format!("udp {addr} (band {})", b.name),
                            source,
                        })?;
                    Some((s, udp_config.clone()))
                }
            };
            udp_sockets.push(socket);
        }
        let mut token_files = token_files;
        if let Some(t) = &token {
            for (s, _) in udp_sockets.iter().flatten() {
                let Ok(a) = s.local_addr() else { continue };
                let path = local::udp_token_path(a.port());
                local::write_private(&path, t.as_bytes()).map_err(|source| {
                    local::LocalError::Io {
                        what: "cannot write token file",
                        path: path.clone(),
                        source,
                    }
                })?;
                token_files.push(path);
            }
        }
        let udp_addrs: Vec<Option<SocketAddr>> = udp_sockets
            .iter()
            .map(|s| s.as_ref().and_then(|(s, _)| s.local_addr().ok()))
            .collect();
        // The MQTT listener checks credentials as the router does (the same
        // tokens and ACL), then connects in-process with the same token.
        let mqtt_setup = match config.mqtt.listen {
            Some(_) => Some((
                config.mqtt.clone(),
                config.auth.clone(),
                Authenticator::new(
                    &config.auth,
                    &config.acl,
                    local::current_uid(),
                    token.clone(),
                )?,
            )),
            None => None,
        };
        let auth = Authenticator::new(&config.auth, &config.acl, local::current_uid(), token)?;
        let metrics_config = config.metrics.clone();
        let metrics_listener = metrics::bind(&metrics_config)?;
        let embedded = config.name == "embedded";
        if !embedded {
            tracing::info!("authentication {}", auth.describe());
            if !auth.enabled() {
                tracing::warn!(
                    "authentication is off: any local user may publish, subscribe and administer"
                );
            }
        }
        let scheme = if tls.is_some() { "tls" } else { "tcp" };
        let reservations_file = config.reservations_file.clone();
        let unix_paths: Vec<PathBuf> = bands.iter().filter_map(|b| b.unix.clone()).collect();
        let band_names: Vec<String> = bands.iter().map(|b| b.name.clone()).collect();
        let daemon_qos = config::qos::daemon_layer(&config.qos, &band_names)
            .map_err(|m| RouterError::Config(config::ConfigError::Invalid(m)))?;
        // The store thread wakes the timers task when it settled
        // obligations (custody of acknowledged durable events).
        let timers_wake = Arc::new(tokio::sync::Notify::new());
        let store = store::RouterStore::open(
            &config.store,
            &config.name,
            timing::now_ns(),
            timers_wake.clone(),
        )
        .map_err(RouterError::Store)?;
        let state = Arc::new(Locked::new(State::new(config, auth)));
        state.borrow_mut().table_waits = state.waits();
        state.borrow_mut().store = store;
        state.borrow_mut().deferred_wake = timers_wake;
        state.borrow_mut().fed.tls = link_tls;
        {
            let mut st = state.borrow_mut();
            st.qos_daemon = daemon_qos;
            st.refresh_supplier_limit();
            history::layers_changed(&mut st);
            durable::layers_changed(&mut st);
            reliable::layers_changed(&mut st);
            compress::layers_changed(&mut st);
            st.band_names = band_names;
        }
        if let Some(f) = &reservations_file {
            state.borrow_mut().load_reservations(f, timing::now_ns());
        }
        let (jobs_tx, jobs_rx) = mpsc::channel(state::lanes::MAX_ADMIN_JOBS);
        state.borrow_mut().admin_jobs = Some(jobs_tx);
        let mut jobs_rx = Some(jobs_rx);
        // Multicast groups (`[[multicast]]`): joined now, served by their
        // band's lane.
        let mut mcast_sockets = {
            let dscp_of = |name: &str| bands.iter().find(|b| b.name == name).map_or(0, |b| b.dscp);
            multicast::open(&mut state.borrow_mut(), dscp_of)
                .map_err(|m| RouterError::Config(config::ConfigError::Invalid(m)))?
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut lanes = Vec::new();
        for ((b, (tcp, unix)), udp) in bands.iter().zip(listeners).zip(udp_sockets) {
            let (tx, rx) = mpsc::channel(state::lanes::MAX_LANE_COMMANDS);
            let admin = b.rank == 0;
            let (mcast, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut mcast_sockets)
                .into_iter()
                .partition(|(band, _, _)| *band == b.name);
            mcast_sockets = rest;
            let setup = lane::LaneSetup {
                mcast: mcast.into_iter().map(|(_, i, s)| (i, s)).collect(),
                band: b.clone(),
                state: state.clone(),
                tcp,
                tls: tls.clone(),
                unix,
                udp,
                commands: rx,
                admin_jobs: if admin { jobs_rx.take() } else { None },
                unix_paths: if admin {
                    unix_paths.clone()
                } else {
                    Vec::new()
                },
                ready: ready_tx.clone(),
            };
            let thread = lane::spawn(&format!("tagwire-{}", b.name), move || lane::run(setup))
                .map_err(RouterError::Lane)?;
            state
                .borrow_mut()
                .lane_commands
                .push((b.name.clone(), tx.clone()));
            lanes.push((b.name.clone(), tx, Some(thread)));
        }
        // Every lane listed (with its scheduling and listeners) before
        // anyone can ask: `list` and `Session::on_band` rely on it.
        for _ in 0..lanes.len() {
            if ready_rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .is_err()
            {
                tracing::warn!("a lane did not start within 5 s");
                break;
            }
        }
        let metrics = match metrics_listener {
            Some(l) => Some(metrics::spawn(l, metrics_config, state.clone())?),
            None => None,
        };
        if !embedded {
            for ((name, t, u), d) in addrs.iter().zip(&udp_addrs) {
                let listeners: Vec<String> = [
                    t.map(|a| format!("{scheme}://{a}")),
                    u.as_ref().map(|p| format!("unix://{}", p.display())),
                    d.map(|a| format!("udp://{a}")),
                ]
                .into_iter()
                .flatten()
                .collect();
                tracing::info!("band {name}: listening on {}", listeners.join(" and "));
            }
        }
        let mqtt = match mqtt_setup {
            Some((mqtt_config, auth_config, mqtt_auth)) => {
                let default_lane = lanes
                    .iter()
                    .find(|(n, _, _)| *n == bands[default].name)
                    .map(|(_, tx, _)| tx.clone())
                    .expect("every band has a lane");
                mqtt::Gateway::start(
                    mqtt_config,
                    &auth_config,
                    mqtt_auth,
                    InProcessConnector { lane: default_lane },
                )?
            }
            None => None,
        };
        Ok(RouterHandle {
            mqtt,
            lanes,
            default_band: bands[default].name.clone(),
            bands: addrs,
            tcp: tcp_addr,
            udp: udp_addrs.get(default).copied().flatten(),
            unix: unix_path,
            token_files,
            state: state.clone(),
            reservations_file,
            metrics,
        })
    }
}

impl std::fmt::Debug for RouterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterHandle")
            .field("bands", &self.bands)
            .field("tcp", &self.tcp)
            .field("unix", &self.unix)
            .finish_non_exhaustive()
    }
}

impl RouterHandle {
    /// The bound TCP address, if TCP is enabled.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp
    }

    /// The TCP address the default band listens on (with the real port if
    /// the configuration asked for port 0).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    /// The Unix socket path, if enabled.
    pub fn unix_path(&self) -> Option<&Path> {
        self.unix.as_deref()
    }

    /// The metrics and dashboard listener's address (`[metrics] listen`), if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(metrics::MetricsServer::addr)
    }

    /// Each band's name and listeners `(name, tcp, unix)`, lowest first.
    pub fn bands(&self) -> &[(String, Option<SocketAddr>, Option<PathBuf>)] {
        &self.bands
    }

    /// The MQTT listener's bound address, if `[mqtt] listen` is set.
    pub fn mqtt_addr(&self) -> Option<SocketAddr> {
        self.mqtt.as_ref().map(mqtt::Gateway::addr)
    }

    /// A connected in-process socket served by this router: the same
    /// protocol and code path as a network client, without a listener.
    /// It is served by the default band's lane.
    pub fn connect_in_process(&self) -> std::io::Result<StdUnixStream> {
        self.connect_in_process_on(&self.default_band.clone())
    }

    /// Like [`connect_in_process`](Self::connect_in_process), served by
    /// band `band`'s lane.
    pub fn connect_in_process_on(&self, band: &str) -> std::io::Result<StdUnixStream> {
        let Some((_, tx, _)) = self.lanes.iter().find(|(n, _, _)| n == band) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no band {band:?} on this router"),
            ));
        };
        let (ours, theirs) = StdUnixStream::pair()?;
        lane::attach(tx, theirs)?;
        Ok(ours)
    }

    /// Tells every client the router is closing, flushes, stops the lane and
    /// removes the Unix socket. Waits for the lane to finish.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(mut m) = self.metrics.take() {
            m.stop();
        }
        if let Some(mut g) = self.mqtt.take() {
            g.stop();
        }
        if self.lanes.is_empty() {
            return;
        }
        for (_, tx, _) in &self.lanes {
            lane::command(tx, LaneCommand::StopAccepting);
        }
        // The admin lane says goodbye to every client and lets the writers
        // (on every lane) flush; then the other lanes exit.
        let mut lanes = std::mem::take(&mut self.lanes).into_iter();
        if let Some((_, tx, thread)) = lanes.next() {
            lane::command(&tx, LaneCommand::Shutdown);
            join(thread);
        }
        for (_, tx, thread) in lanes {
            lane::command(&tx, LaneCommand::Exit);
            join(thread);
        }
        // Every lane has stopped: the store writes what is queued and syncs.
        self.state.borrow_mut().store.close();
        if let Some(f) = &self.reservations_file {
            self.state
                .borrow_mut()
                .save_reservations(f, timing::now_ns());
        }
        for t in self.token_files.drain(..) {
            let _ = std::fs::remove_file(t);
        }
        tracing::info!("router stopped");
    }
}

fn join(thread: Option<JoinHandle<()>>) {
    if let Some(t) = thread {
        if t.join().is_err() {
            tracing::error!("a lane thread panicked");
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
