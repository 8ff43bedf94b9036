//! [`SessionBuilder`]: how long a session waits to connect, and how long a
//! publish or request waits for a lost connection to come back.
//!
//! Pick a short `connect_timeout` for tools that should fail fast when no
//! daemon answers, and a `reconnect_wait` longer than your daemon takes to
//! restart for publishers that should ride through a restart; a
//! `reconnect_wait` of zero fails at once with [`Error::NotReconnected`](crate::Error::NotReconnected)
//! instead.

use std::time::Duration;

use crate::error::Result;
use crate::session::{Session, Target};
use crate::url::ServerUrl;
use crate::TlsOptions;

/// Default [`SessionBuilder::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`SessionBuilder::reconnect_wait`].
pub const DEFAULT_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// Under `shm=auto`, the smallest payload carried in shared memory
/// (default of [`SessionBuilder::shm_threshold`]): below it the copy into a
/// region, its pins and the reference cost more than the bytes over the
/// socket (BENCHMARKS.md, "Shared memory's size threshold").
pub const DEFAULT_SHM_THRESHOLD: usize = 4096;

/// Settings fixed when a session opens.
#[derive(Clone)]
pub(crate) struct Options {
    pub connect_timeout: Duration,
    pub reconnect_wait: Duration,
    /// The token to present; `None`: `TAGWIRE_TOKEN`, or the local token
    /// file for a daemon on loopback (see `docs/security.md`).
    pub token: Option<String>,
    /// TLS settings for a `tls://` URL; `None`: from the environment.
    pub tls: Option<TlsOptions>,
    /// The priority band this session's connection belongs to (`None`: the
    /// listener's own, the router's default band).
    pub band: Option<ClientBand>,
    /// The session id to present (band sessions share their parent's, so
    /// the router lets them publish under the parent's endpoint names).
    pub session_id: Option<[u8; tagwire_proto::SESSION_ID_LEN]>,
    /// Client-propagated priority: each event travels on the band of its
    /// priority (see [`SessionBuilder::follow_priority`]).
    pub follow_priority: bool,
    /// Stamp events with the daemons' network time (see
    /// [`SessionBuilder::network_clock`]).
    pub network_clock: bool,
    /// The default `shm` mode of this session's publishers and subscriptions.
    pub shm: crate::ShmMode,
    /// Under `shm=auto`: payloads smaller than this go over the socket.
    pub shm_threshold: usize,
    /// Acknowledged publishing: the window's bounds and the longest wait
    /// for room in it (see [`SessionBuilder::ack_window`]).
    pub ack_window: tagwire_core::reliable::WindowLimits,
    pub ack_timeout: Duration,
    /// The largest frame this session offers the daemon (see
    /// [`SessionBuilder::max_frame`]).
    pub max_frame: u32,
}

/// A session on a priority band: its connection is marked with the band's
/// DSCP and read by a thread with the band's scheduling.
#[derive(Debug, Clone)]
pub(crate) struct ClientBand {
    pub name: String,
    pub dscp: u8,
    pub sched: tagwire_router::priority::SchedPolicy,
    /// The CPUs the band's lane is pinned to (`[[bands]] cpus`): the
    /// band's reader thread is pinned to them too.
    pub cpus: Option<tagwire_router::priority::CpuList>,
}

impl ClientBand {
    /// Runs the calling thread at the band's scheduling and on its CPUs, as
    /// the router's lane does (TAO §4.2): the reader thread, and the UDP
    /// pump threads that carry the band's datagrams. `what` names the
    /// thread in the warning when the policy cannot be had.
    pub(crate) fn apply_to_current_thread(&self, what: &str) {
        use tagwire_router::priority::{apply_affinity, apply_sched, Applied};
        match apply_sched(self.sched) {
            Ok(Applied::FellBack { reason, got, .. }) => tracing::warn!(
                "band {}: the {what} cannot run {} ({reason}); running {got}",
                self.name,
                self.sched
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "band {}: scheduling {} not applied: {e}",
                self.name,
                self.sched
            ),
        }
        // On the band's CPUs too, so a real-time band's client work stays
        // off the CPUs that carry bulk traffic.
        if let Some(cpus) = &self.cpus {
            if let Err(e) = apply_affinity(cpus) {
                tracing::warn!(
                    "band {}: the {what} cannot be pinned to CPUs {cpus} ({e})",
                    self.name
                );
            }
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_wait", &self.reconnect_wait)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// Opens a [`Session`] with non-default timeouts; start with
/// [`Session::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// let session = tagwire::Session::builder()
///     .connect_timeout(Duration::from_secs(1))
///     .reconnect_wait(Duration::from_secs(30))
///     .connect("tcp://127.0.0.1:7700")?;
/// # Ok::<(), tagwire::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a session is opened by .connect() or .connect_local()"]
pub struct SessionBuilder {
    options: Options,
}

impl Default for SessionBuilder {
    fn default() -> Self {
        SessionBuilder {
            options: Options {
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                reconnect_wait: DEFAULT_RECONNECT_WAIT,
                token: None,
                tls: None,
                band: None,
                session_id: None,
                follow_priority: false,
                network_clock: false,
                shm: crate::ShmMode::Auto,
                shm_threshold: DEFAULT_SHM_THRESHOLD,
                ack_window: tagwire_core::reliable::WindowLimits {
                    max_events: crate::session::DEFAULT_ACK_WINDOW_EVENTS,
                    max_bytes: crate::session::DEFAULT_ACK_WINDOW_BYTES,
                },
                ack_timeout: crate::session::DEFAULT_ACK_TIMEOUT,
                max_frame: tagwire_proto::limits::DEFAULT_MAX_FRAME,
            },
        }
    }
}

impl SessionBuilder {
    /// The longest a connection attempt may take, from the socket's connect
    /// to the server's `Welcome` (default [`DEFAULT_CONNECT_TIMEOUT`]). At
    /// the bound, connecting fails with [`Error::ConnectTimeout`](crate::Error::ConnectTimeout); the same
    /// bound applies to each reconnection attempt.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.options.connect_timeout = d;
        self
    }

    /// How long a publish or a request (declare, subscribe, admin, ping)
    /// made while the session is reconnecting waits for the connection to
    /// come back (default [`DEFAULT_RECONNECT_WAIT`]). A publish never
    /// buffers while it waits, so memory stays bounded; past the bound it
    /// fails with [`Error::NotReconnected`](crate::Error::NotReconnected), and the session keeps trying to
    /// reconnect in the background.
    pub fn reconnect_wait(mut self, d: Duration) -> Self {
        self.options.reconnect_wait = d;
        self
    }

    /// Bounds of the window of events a reliable publisher
    /// ([`Publisher::set_reliability`](crate::Publisher::set_reliability))
    /// holds until the daemon acknowledges them: at most `events` events
    /// (capped at 262,144) and `bytes` bytes per connection (defaults
    /// [`DEFAULT_ACK_WINDOW_EVENTS`](crate::DEFAULT_ACK_WINDOW_EVENTS),
    /// [`DEFAULT_ACK_WINDOW_BYTES`](crate::DEFAULT_ACK_WINDOW_BYTES)). At
    /// the bound a publish waits (see [`ack_timeout`](Self::ack_timeout)).
    pub fn ack_window(mut self, events: usize, bytes: usize) -> Self {
        self.options.ack_window = tagwire_core::reliable::WindowLimits {
            max_events: events,
            max_bytes: bytes,
        };
        self
    }

    /// How long a reliable publish waits for room in a full window (the
    /// daemon's acknowledgements) before it fails with
    /// [`Error::AckWindowFull`](crate::Error::AckWindowFull) (default
    /// [`DEFAULT_ACK_TIMEOUT`](crate::DEFAULT_ACK_TIMEOUT)). A publish from
    /// a subscription callback fails at once instead of waiting.
    pub fn ack_timeout(mut self, d: Duration) -> Self {
        self.options.ack_timeout = d;
        self
    }

    /// The token to present to the daemon over TCP, instead of
    /// `TAGWIRE_TOKEN` or the local token file (see `docs/security.md`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.token = Some(token.into());
        self
    }

    /// TLS settings for a `tls://` URL, instead of the environment's
    /// ([`TlsOptions::from_env`]).
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.options.tls = Some(tls);
        self
    }

    /// RT-CORBA's client-propagated priority model, end to end: a
    /// publisher sends each event on the connection of the band its
    /// priority falls in (with the default bands: 0–63 `low`, 64–127
    /// `normal`, 128–191 `high`, 192–255 `critical`), opened on first use,
    /// so the event is marked, queued and served at that band's priority
    /// all the way. Events of different bands may overtake each other; one
    /// band keeps its order. Off by default (one connection per session).
    pub fn follow_priority(mut self, on: bool) -> Self {
        self.options.follow_priority = on;
        self
    }

    /// Stamps every event's source time with the daemons' **network time**
    /// (docs/federation.md, "Time") instead of this host's clock: the
    /// session asks its daemon for the offset at the first publish and again
    /// when it is 10 s old (that publish waits one round trip), so events
    /// published on different hosts of a network carry comparable times.
    /// Off by default. An event whose source time the caller set keeps it.
    pub fn network_clock(mut self, on: bool) -> Self {
        self.options.network_clock = on;
        self
    }

    /// The default `shm` mode of the session's publishers and subscriptions
    /// (see `docs/shm.md`): `auto` (the default) uses shared memory where
    /// the daemon is on this host, `require` makes a publisher or
    /// subscription fail where shared memory cannot be had, `off` keeps
    /// payloads on the socket.
    pub fn shm(mut self, mode: crate::ShmMode) -> Self {
        self.options.shm = mode;
        self
    }

    /// Under `shm=auto`, the smallest payload a publisher puts in shared
    /// memory (default [`DEFAULT_SHM_THRESHOLD`], 4 KiB); smaller ones go
    /// over the socket, which is faster for them. A publisher asks for its
    /// region at its first payload of this size, so one that only sends
    /// small payloads never holds one. `0`: every payload, the region asked
    /// for when the publisher is declared. `require` ignores it (every
    /// payload in shared memory).
    pub fn shm_threshold(mut self, bytes: usize) -> Self {
        self.options.shm_threshold = bytes;
        self
    }

    /// The largest frame (`type + body`) this session offers the daemon
    /// in its `Hello` (default 16 MiB): the connection carries frames up to
    /// the smaller of this and the daemon's `limits.max_frame`, so an event
    /// larger than 16 MiB needs both raised. Clamped to the protocol's
    /// 4 KiB ..= 256 MiB (`MIN_MAX_FRAME ..= HARD_MAX_FRAME`).
    pub fn max_frame(mut self, bytes: u32) -> Self {
        self.options.max_frame = bytes.clamp(
            tagwire_proto::limits::MIN_MAX_FRAME,
            tagwire_proto::limits::HARD_MAX_FRAME,
        );
        self
    }

    pub(crate) fn options(&self) -> Options {
        self.options.clone()
    }

    /// Connects to a daemon at `url`: `tcp://HOST:PORT`, `tls://HOST:PORT`
    /// or `unix:///PATH`. Several URLs separated by commas name daemons to
    /// fail over between (linked daemons of one network, see
    /// docs/federation.md): the first that answers is used, and when its
    /// connection is lost the session reconnects to whichever answers next,
    /// making its declarations and subscriptions again there.
    pub fn connect(self, url: &str) -> Result<Session> {
        let targets = url
            .split(',')
            .map(|u| {
                let tls = self.options.tls.clone();
                Target::new(ServerUrl::parse(u.trim())?, || {
                    tls.unwrap_or_else(TlsOptions::from_env)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Session::open_any(targets, self.options)
    }

    /// Connects to the local daemon: its Unix socket if present, else
    /// `tcp://127.0.0.1:7700`.
    pub fn connect_local(self) -> Result<Session> {
        Session::open(Target::Url(ServerUrl::local_default()), self.options)
    }
}

/// Whether an I/O error is a timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` report
/// `WouldBlock`, `connect_timeout` reports `TimedOut`).
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}
