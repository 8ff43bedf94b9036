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
use crate::options::{
    Options, DEFAULT_ACK_TIMEOUT, DEFAULT_ACK_WINDOW_BYTES, DEFAULT_ACK_WINDOW_EVENTS,
};
use crate::session::{Session, Target};
use crate::tls::TlsOptions;
use crate::url::ServerUrl;

/// Default [`SessionBuilder::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`SessionBuilder::reconnect_wait`].
pub const DEFAULT_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// Under `shm=auto`, the smallest payload carried in shared memory
/// (default of [`SessionBuilder::shm_threshold`]): below it the copy into a
/// region, its pins and the reference cost more than the bytes over the
/// socket (BENCHMARKS.md, "Shared memory's size threshold").
pub const DEFAULT_SHM_THRESHOLD: usize = 4096;

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
                shm: crate::shm::ShmMode::Auto,
                shm_threshold: DEFAULT_SHM_THRESHOLD,
                ack_window: tagwire_core::reliable::WindowLimits {
                    max_events: DEFAULT_ACK_WINDOW_EVENTS,
                    max_bytes: DEFAULT_ACK_WINDOW_BYTES,
                },
                ack_timeout: DEFAULT_ACK_TIMEOUT,
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
    pub fn shm(mut self, mode: crate::shm::ShmMode) -> Self {
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

impl Session {
    /// Connects to a daemon at `url`: `tcp://HOST:PORT`, `tls://HOST:PORT`
    /// or `unix:///PATH`, with the default timeouts ([`SessionBuilder`]). A
    /// `tls://` URL takes its settings from the environment
    /// ([`TlsOptions::from_env`]).
    pub fn connect(url: &str) -> Result<Session> {
        Session::builder().connect(url)
    }

    /// Connects like [`Session::connect`], with these TLS settings for a
    /// `tls://` URL instead of the environment's (other schemes ignore them).
    pub fn connect_with_tls(url: &str, tls: &TlsOptions) -> Result<Session> {
        Session::builder().tls(tls.clone()).connect(url)
    }

    /// Connects to the local daemon: its Unix socket if present, else
    /// `tcp://127.0.0.1:7700`.
    pub fn connect_local() -> Result<Session> {
        Session::builder().connect_local()
    }

    /// Starts configuring a session: connect timeout, reconnect wait.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }
}
