//! Lanes: one OS thread per priority band, each with its own single-threaded
//! event loop and its band's scheduling policy. A lane accepts on its band's
//! listeners (marking TCP sockets with the band's DSCP) and serves those
//! connections; lanes never steal work from one another. The routing tables
//! are shared under one priority-inheriting lock ([`crate::sync`]); a lane
//! may be pinned to CPUs (`[[bands]] cpus`); an event published on one
//! lane is queued by that lane into the subscribers' channels and written by
//! each subscriber connection's own lane.
//!
//! The lowest band's lane is also the **admin lane** (TAO §3.4): admin
//! requests from every lane run there, as do housekeeping and the release of
//! events held for their start time, so listing, filters and QoS changes
//! never run on a real-time lane.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tagwire_proto::{ErrorCode, Frame};
use tokio::sync::mpsc;

use crate::auth::Transport;
use crate::band::Band;
use crate::priority::SchedPolicy;
use crate::priority::{apply_sched, Applied};
use crate::state::lanes::{AdminJob, LaneCommand, LaneOf, MAX_LANE_COMMANDS};
use crate::state::{LaneInfo, State};
use crate::sync::Locked;

/// Attaches in-process connections to a running router from any thread
/// (the MQTT listener's): a clone of the default lane's command channel.
#[derive(Clone)]
pub struct InProcessConnector {
    pub(crate) lane: mpsc::Sender<LaneCommand>,
}

impl std::fmt::Debug for InProcessConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessConnector").finish_non_exhaustive()
    }
}

impl InProcessConnector {
    /// A connected socket served by the router, as
    /// [`RouterHandle::connect_in_process`](crate::RouterHandle::connect_in_process)
    /// gives.
    pub fn connect(&self) -> std::io::Result<StdUnixStream> {
        let (ours, theirs) = StdUnixStream::pair()?;
        attach(&self.lane, theirs)?;
        Ok(ours)
    }
}

/// Hands in-process socket `theirs` to the lane behind `tx`.
pub(crate) fn attach(tx: &mpsc::Sender<LaneCommand>, theirs: StdUnixStream) -> std::io::Result<()> {
    tx.try_send(LaneCommand::Attach(theirs))
        .map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!("lane busy: {MAX_LANE_COMMANDS} commands already wait for it; try again"),
            ),
            mpsc::error::TrySendError::Closed(_) => {
                std::io::Error::new(std::io::ErrorKind::NotConnected, "router has stopped")
            }
        })
}

/// Sends a stop or scheduling command; a lane whose queue stays full for a
/// second (it is stuck) or that has stopped does not get it (logged).
pub(crate) fn command(tx: &mpsc::Sender<LaneCommand>, mut cmd: LaneCommand) {
    for _ in 0..100 {
        match tx.try_send(cmd) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
            Err(mpsc::error::TrySendError::Full(c)) => {
                cmd = c;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    tracing::warn!("a lane's command queue stayed full for a second; a command was not sent");
}

/// Spawns a lane thread named `name` running `make()` to completion on a
/// current-thread tokio runtime with a `LocalSet` (so tasks may use `Rc`).
pub(crate) fn spawn<F, Fut>(name: &str, make: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, make());
        })
}

/// Everything one lane serves.
pub(crate) struct LaneSetup {
    pub band: Band,
    pub state: Arc<Locked<State>>,
    pub tcp: Option<std::net::TcpListener>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub unix: Option<std::os::unix::net::UnixListener>,
    /// The band's UDP socket (`[udp] listen`), bound, with its settings.
    pub udp: Option<(std::net::UdpSocket, crate::config::UdpConfig)>,
    /// The multicast groups this band serves: (group index, socket).
    pub mcast: Vec<(usize, std::net::UdpSocket)>,
    pub commands: mpsc::Receiver<LaneCommand>,
    /// Set on the admin lane.
    pub admin_jobs: Option<mpsc::Receiver<AdminJob>>,
    /// Admin lane: every band's Unix socket, removed at shutdown.
    pub unix_paths: Vec<std::path::PathBuf>,
    /// Told once the lane has its scheduling and serves its listeners (the
    /// router handle returns only when every lane has said so).
    pub ready: std::sync::mpsc::Sender<()>,
}

/// Applies the band's scheduling to this thread and records what it got
/// (one warning if the OS refused a real-time policy).
fn take_priority(band: &Band, state: &Locked<State>) {
    let (slot, ceiling) = {
        let st = state.borrow();
        let bands = &st.config.bands;
        let slot = bands.iter().position(|b| b.name == band.name);
        // The lowest real-time lane's priority: an ordinary lane holds the
        // shared tables at it while a real-time lane waits for them.
        let ceiling = bands
            .iter()
            .filter_map(|b| match b.sched.parse::<SchedPolicy>() {
                Ok(SchedPolicy::Fifo(p) | SchedPolicy::RoundRobin(p)) => Some(p),
                _ => None,
            })
            .min();
        (slot, ceiling)
    };
    let wanted = band.sched.to_string();
    let mut exactly = false;
    let (applied, fell_back) = match apply_sched(band.sched) {
        Ok(Applied::Exactly(p)) => {
            exactly = true;
            (p.to_string(), None)
        }
        Ok(Applied::FellBack { got, reason, .. }) => {
            tracing::warn!(
                band = %band.name,
                "lane cannot run {wanted} ({reason}); running {got} instead (grant CAP_SYS_NICE or run as root for real-time lanes)"
            );
            (got.to_string(), Some(reason.to_string()))
        }
        Err(e) => {
            tracing::warn!(band = %band.name, "lane scheduling {wanted} not applied: {e}");
            ("other".into(), Some(e.to_string()))
        }
    };
    if let Some(slot) = slot {
        let ordinary = matches!(band.sched, SchedPolicy::Other { .. });
        // Only where the policy took (a lane that could not take its own
        // cannot take the ceiling either).
        let ceiling = ceiling
            .filter(|_| ordinary && exactly)
            .map(|p| (p, band.sched));
        crate::sync::set_lane_slot(slot, !ordinary && exactly, ceiling);
    }
    let cpus = match &band.cpus {
        None => String::new(),
        Some(list) => match crate::priority::apply_affinity(list) {
            Ok(()) => list.to_string(),
            Err(e) => {
                tracing::warn!(band = %band.name, "lane cannot be pinned to CPUs {list} ({e}); it runs on any CPU");
                String::new()
            }
        },
    };
    let mut st = state.borrow_mut();
    match st.lanes.iter_mut().find(|l| l.band == band.name) {
        // Re-scheduled at run time: the listeners stay as they are.
        Some(info) => {
            info.sched_wanted = wanted;
            info.sched_applied = applied;
            info.fell_back = fell_back;
            info.cpus = cpus;
        }
        None => st.lanes.push(LaneInfo {
            band: band.name.clone(),
            dscp: band.dscp,
            sched_wanted: wanted,
            sched_applied: applied,
            fell_back,
            cpus,
            tcp: None,
            unix: band.unix.clone(),
            udp: None,
            tid: Some(rustix::thread::gettid().as_raw_nonzero().get()),
        }),
    }
}

/// A lane's life: take its priority, accept on its listeners, serve.
pub(crate) async fn run(mut setup: LaneSetup) {
    let state = setup.state.clone();
    take_priority(&setup.band, &state);
    let band: Arc<str> = Arc::from(setup.band.name.as_str());
    let dscp = setup.band.dscp;
    let admin_lane = setup.admin_jobs.is_some();
    let mut tasks = Vec::new();
    if admin_lane {
        tasks.push(tokio::task::spawn_local(crate::node_io::timers(
            state.clone(),
        )));
        tasks.push(tokio::task::spawn_local(crate::state::housekeeping(
            state.clone(),
        )));
    }
    if *band == *state.borrow().config.default_band {
        let lane = LaneOf {
            band: band.clone(),
            admin_lane,
        };
        tasks.push(tokio::task::spawn_local(crate::federation::run(
            state.clone(),
            lane,
            dscp,
        )));
    } else {
        let lane = LaneOf {
            band: band.clone(),
            admin_lane,
        };
        tasks.push(tokio::task::spawn_local(crate::federation::run_band(
            state.clone(),
            lane,
            dscp,
        )));
    }
    let mut accepts = Vec::new();
    if let Some(l) = setup.tcp.take() {
        let addr = l.local_addr().ok();
        if let Some(info) = state
            .borrow_mut()
            .lanes
            .iter_mut()
            .find(|i| i.band == setup.band.name)
        {
            info.tcp = addr;
        }
        match tokio::net::TcpListener::from_std(l) {
            Ok(l) => accepts.push(tokio::task::spawn_local(accept_tcp(
                state.clone(),
                l,
                setup.tls.take(),
                band.clone(),
                dscp,
                admin_lane,
            ))),
            Err(e) => tracing::error!("tcp listener: {e}"),
        }
    }
    if let Some(l) = setup.unix.take() {
        match tokio::net::UnixListener::from_std(l) {
            Ok(l) => accepts.push(tokio::task::spawn_local(accept_unix(
                state.clone(),
                l,
                band.clone(),
                admin_lane,
            ))),
            Err(e) => tracing::error!("unix listener: {e}"),
        }
    }
    if let Some((socket, config)) = setup.udp.take() {
        let addr = socket.local_addr().ok();
        if let Err(e) = crate::priority::set_dscp(&socket, dscp) {
            tracing::debug!("cannot set DSCP {dscp} on the udp socket: {e}");
        }
        if let Some(info) = state
            .borrow_mut()
            .lanes
            .iter_mut()
            .find(|i| i.band == setup.band.name)
        {
            info.udp = addr;
        }
        match socket
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UdpSocket::from_std(socket))
        {
            Ok(s) => accepts.push(tokio::task::spawn_local(crate::udp::serve(
                state.clone(),
                s,
                LaneOf {
                    band: band.clone(),
                    admin_lane,
                },
                config,
            ))),
            Err(e) => tracing::error!("udp socket: {e}"),
        }
    }
    for (idx, socket) in std::mem::take(&mut setup.mcast) {
        match tokio::net::UdpSocket::from_std(socket) {
            Ok(s) => accepts.push(tokio::task::spawn_local(crate::multicast::serve(
                state.clone(),
                idx,
                s,
                band.clone(),
            ))),
            Err(e) => tracing::error!("multicast socket: {e}"),
        }
    }
    let _ = setup.ready.send(());
    let mut jobs = setup.admin_jobs.take();
    loop {
        let cmd = tokio::select! {
            c = setup.commands.recv() => c,
            Some(job) = async {
                match jobs.as_mut() {
                    Some(j) => j.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                run_admin_job(&state, job);
                continue;
            }
        };
        match cmd {
            Some(LaneCommand::Attach(s)) => {
                let stream = s
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(s));
                match stream {
                    Ok(s) => spawn_unix(
                        state.clone(),
                        s,
                        "in-process".into(),
                        Transport::InProcess,
                        band.clone(),
                        admin_lane,
                    ),
                    Err(e) => tracing::error!("cannot attach in-process client: {e}"),
                }
            }
            Some(LaneCommand::StopAccepting) => {
                for a in accepts.drain(..) {
                    a.abort();
                }
            }
            Some(LaneCommand::Shutdown) => {
                close_all(&state).await;
                for p in &setup.unix_paths {
                    let _ = std::fs::remove_file(p);
                }
                break;
            }
            Some(LaneCommand::Sched(policy)) => {
                let mut band = setup.band.clone();
                band.sched = policy;
                take_priority(&band, &state);
            }
            Some(LaneCommand::Exit) | None => break,
        }
    }
    for t in tasks.into_iter().chain(accepts) {
        t.abort();
    }
}

/// Runs one admin request here, on the admin lane, and sends the result back.
fn run_admin_job(state: &Locked<State>, job: AdminJob) {
    let requester = crate::admin::Requester {
        identity: &job.identity,
        admin: job.admin,
    };
    let result = crate::admin::handle(
        &mut state.borrow_mut(),
        &job.body,
        job.max_frame,
        &requester,
    );
    let _ = job.reply.send(result);
}

/// Tells every client the router is closing and lets the writers flush,
/// for at most 200 ms.
async fn close_all(state: &Locked<State>) {
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
    for _ in 0..20 {
        if outboxes.iter().all(|o| Arc::strong_count(o) <= 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn accept_tcp(
    state: Arc<Locked<State>>,
    l: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    band: Arc<str>,
    dscp: u8,
    admin_lane: bool,
) {
    let tls = tls.map(|config| {
        let max_pending = state.borrow().config.limits.max_connections;
        TlsAccept {
            acceptor: tokio_rustls::TlsAcceptor::from(config),
            pending: std::rc::Rc::new(std::cell::Cell::new(0)),
            max_pending,
        }
    });
    loop {
        match l.accept().await {
            Ok((s, peer)) => {
                let _ = s.set_nodelay(true);
                if let Err(e) = crate::priority::set_dscp(&s, dscp) {
                    tracing::debug!(%peer, "cannot set DSCP {dscp}: {e}");
                }
                let lane = LaneOf {
                    band: band.clone(),
                    admin_lane,
                };
                match &tls {
                    Some(t) => t.spawn(state.clone(), s, peer, lane),
                    None => {
                        let socket = dup(&s);
                        let (r, w) = s.into_split();
                        tokio::task::spawn_local(crate::connection::serve(
                            state.clone(),
                            peer.to_string(),
                            Transport::Tcp { cert: None },
                            lane,
                            socket,
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

async fn accept_unix(
    state: Arc<Locked<State>>,
    l: tokio::net::UnixListener,
    band: Arc<str>,
    admin_lane: bool,
) {
    loop {
        match l.accept().await {
            Ok((s, _)) => {
                let uid = s.peer_cred().ok().map(|c| c.uid());
                let peer = match uid {
                    Some(uid) => format!("unix uid {uid}"),
                    None => "unix".into(),
                };
                spawn_unix(
                    state.clone(),
                    s,
                    peer,
                    Transport::Unix { uid },
                    band.clone(),
                    admin_lane,
                );
            }
            Err(e) => {
                tracing::warn!("accept (unix): {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn spawn_unix(
    state: Arc<Locked<State>>,
    s: tokio::net::UnixStream,
    peer: String,
    transport: Transport,
    band: Arc<str>,
    admin_lane: bool,
) {
    // A dup of the socket: shared-memory fds are passed on it (SCM_RIGHTS).
    let socket = dup(&s);
    let (r, w) = s.into_split();
    let lane = LaneOf { band, admin_lane };
    tokio::task::spawn_local(crate::connection::serve(
        state, peer, transport, lane, socket, r, w,
    ));
}

/// The TLS side of a TCP listener: handshakes run in their own tasks,
/// bounded in time ([`TLS_HANDSHAKE_TIMEOUT`]) and in number (at most
/// `limits.max_connections` at once; beyond that new sockets are closed).
struct TlsAccept {
    acceptor: tokio_rustls::TlsAcceptor,
    pending: std::rc::Rc<std::cell::Cell<usize>>,
    max_pending: usize,
}

/// How long a TLS handshake may take before the socket is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

impl TlsAccept {
    fn spawn(
        &self,
        state: Arc<Locked<State>>,
        s: tokio::net::TcpStream,
        peer: SocketAddr,
        lane: LaneOf,
    ) {
        if self.pending.get() >= self.max_pending {
            tracing::debug!(%peer, "dropping connection: {} TLS handshakes already in progress", self.max_pending);
            return;
        }
        self.pending.set(self.pending.get() + 1);
        let pending = self.pending.clone();
        let socket = dup(&s);
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
                .and_then(crate::tls::cert_identity);
            let (r, w) = tokio::io::split(stream);
            let transport = Transport::Tcp { cert: identity };
            crate::connection::serve(state, peer.to_string(), transport, lane, socket, r, w).await;
        });
    }
}

/// A second descriptor for `s`, kept to change its DSCP at run time.
fn dup(s: &impl std::os::fd::AsFd) -> Option<std::os::fd::OwnedFd> {
    s.as_fd().try_clone_to_owned().ok()
}

#[cfg(test)]
mod bounded_tests {
    use super::*;

    #[test]
    fn a_full_lane_queue_refuses_an_attach_naming_why_and_a_stopped_one_too() {
        let (tx, mut rx) = mpsc::channel(1);
        let (_a, b) = StdUnixStream::pair().expect("socketpair");
        attach(&tx, b).expect("room for one");
        let (_c, d) = StdUnixStream::pair().expect("socketpair");
        let full = attach(&tx, d).expect_err("the queue is full");
        assert_eq!(full.kind(), std::io::ErrorKind::WouldBlock);
        assert!(full.to_string().contains("lane busy"), "{full}");
        assert!(matches!(rx.try_recv(), Ok(LaneCommand::Attach(_))));
        drop(rx);
        let (_e, f) = StdUnixStream::pair().expect("socketpair");
        let stopped = attach(&tx, f).expect_err("the lane is gone");
        assert_eq!(stopped.kind(), std::io::ErrorKind::NotConnected);
    }
}
