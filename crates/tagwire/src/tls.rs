//! TLS for `tls://HOST:PORT` URLs: which CA to trust, an optional client
//! certificate (mutual TLS) and the name checked in the server's
//! certificate ([`TlsOptions`]; from the environment with
//! [`TlsOptions::from_env`]).
//!
//! The session reads and writes its socket from two threads with blocking
//! I/O, which a rustls connection cannot share. So a TLS session talks to
//! one end of a Unix socket pair, and a *pump* thread owns the TCP socket
//! and the `rustls::ClientConnection` and copies bytes both ways, waiting in
//! `poll(2)` on both sockets. It ends when either side closes; an error it
//! meets (say, the server's alert refusing a missing client certificate)
//! is what the session's next read returns instead of a bare end of stream.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustls::pki_types::ServerName;
use tagwire_router::tls as files;

use crate::error::Error;

/// How long the TCP connect plus TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Plaintext read from the server but not yet taken by the session; past
/// it the pump stops reading the TCP socket (backpressure).
const MAX_PENDING_TO_SESSION: usize = 256 * 1024;
/// Bytes moved per read.
const CHUNK: usize = 64 * 1024;

/// TLS settings for `tls://` URLs.
///
/// ```no_run
/// let tls = tagwire::TlsOptions {
///     ca: Some("ca.pem".into()),
///     cert: Some("alice.pem".into()),
///     key: Some("alice.key".into()),
///     ..Default::default()
/// };
/// let session = tagwire::Session::connect_with_tls("tls://broker.lan:7701", &tls)?;
/// # Ok::<(), tagwire::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA certificates (PEM) that the server's certificate must chain to.
    /// Required: there is no built-in trust store (for a publicly signed
    /// server, use the system bundle, e.g. `/etc/ssl/certs/ca-certificates.crt`).
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM), for a router with `client_ca` set.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry; default: the URL's host.
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// Reads `TAGWIRE_TLS_CA`, `TAGWIRE_TLS_CERT`, `TAGWIRE_TLS_KEY` and
    /// `TAGWIRE_TLS_SERVER_NAME` (unset or empty: not given).
    pub fn from_env() -> Self {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        TlsOptions {
            ca: var("TAGWIRE_TLS_CA").map(PathBuf::from),
            cert: var("TAGWIRE_TLS_CERT").map(PathBuf::from),
            key: var("TAGWIRE_TLS_KEY").map(PathBuf::from),
            server_name: var("TAGWIRE_TLS_SERVER_NAME").map(|v| v.to_string_lossy().into_owned()),
        }
    }
}

/// A loaded client configuration: connects and handshakes.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    server_name: Option<ServerName<'static>>,
    hints: Arc<Hints>,
}

/// What error messages refer to: the CA file and whether a client
/// certificate was configured.
#[derive(Debug)]
struct Hints {
    ca: PathBuf,
    has_client_cert: bool,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector")
            .field("server_name", &self.server_name)
            .field("hints", &self.hints)
            .finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// Whether a client certificate is configured (then the certificate,
    /// not the owner's local token, identifies the session).
    pub(crate) fn has_client_cert(&self) -> bool {
        self.hints.has_client_cert
    }

    /// Loads the files named in `opts`; `url` is for error messages.
    pub(crate) fn new(opts: &TlsOptions, url: &str) -> Result<Self, Error> {
        let fail = |reason: String| Error::Tls {
            url: url.to_owned(),
            reason,
        };
        let ca = opts.ca.as_ref().ok_or_else(|| {
            fail(
                "no CA to verify the server with: set --tls-ca or TAGWIRE_TLS_CA \
                 (for a publicly signed server, the system bundle such as \
                 /etc/ssl/certs/ca-certificates.crt)"
                    .into(),
            )
        })?;
        let roots = files::load_roots(ca, "CA").map_err(|e| fail(e.to_string()))?;
        let builder = rustls::ClientConfig::builder_with_provider(files::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_root_certificates(roots);
        let config = match (&opts.cert, &opts.key) {
            (Some(cert), Some(key)) => {
                let chain =
                    files::load_certs(cert, "certificate").map_err(|e| fail(e.to_string()))?;
                let key = files::load_private_key(key).map_err(|e| fail(e.to_string()))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    fail(format!(
                        "client certificate {} with key {}: {e}",
                        cert.display(),
                        opts.key.as_deref().unwrap_or(cert).display()
                    ))
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) | (None, Some(_)) => {
                return Err(fail(
                    "a client certificate needs its key: set both --tls-cert and --tls-key \
                     (TAGWIRE_TLS_CERT and TAGWIRE_TLS_KEY)"
                        .into(),
                ))
            }
        };
        let server_name = match &opts.server_name {
            Some(n) => Some(
                ServerName::try_from(n.clone())
                    .map_err(|e| fail(format!("invalid TLS server name {n:?}: {e}")))?,
            ),
            None => None,
        };
        Ok(TlsConnector {
            config: Arc::new(config),
            server_name,
            hints: Arc::new(Hints {
                ca: ca.clone(),
                has_client_cert: opts.cert.is_some(),
            }),
        })
    }

    /// Connects to `addr` (`HOST:PORT`), completes the TLS handshake and
    /// starts the pump. Returns the session's end and the pump's status.
    pub(crate) fn connect(
        &self,
        addr: &str,
        url: &str,
        timeout: std::time::Duration,
    ) -> Result<(UnixStream, Arc<PumpStatus>), Error> {
        let fail = |reason: String| Error::Tls {
            url: url.to_owned(),
            reason,
        };
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => default_server_name(addr).map_err(fail)?,
        };
        let connect_err = |source| Error::Connect {
            url: url.to_owned(),
            source,
        };
        let mut tcp = connect_within(addr, timeout).map_err(connect_err)?;
        tcp.set_nodelay(true).map_err(connect_err)?;
        tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(connect_err)?;
        tcp.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(connect_err)?;
        let mut tls = rustls::ClientConnection::new(self.config.clone(), name)
            .map_err(|e| fail(e.to_string()))?;
        while tls.is_handshaking() {
            if let Err(e) = tls.complete_io(&mut tcp) {
                return Err(fail(format!(
                    "handshake failed: {}",
                    explain(&e, "during the handshake", &self.hints)
                )));
            }
        }
        let (ours, theirs) = UnixStream::pair().map_err(connect_err)?;
        let status = Arc::new(PumpStatus::default());
        let pump = Pump {
            tls,
            tcp,
            local: theirs,
            to_tls: Vec::new(),
            to_local: Vec::new(),
            written_to_local: 0,
            status: status.clone(),
            hints: self.hints.clone(),
        };
        pump.prepare().map_err(connect_err)?;
        std::thread::Builder::new()
            .name("tagwire-tls".into())
            .spawn(move || pump.run())
            .map_err(connect_err)?;
        Ok((ours, status))
    }
}

/// The name to verify when none is given: the host of `HOST:PORT` (an IP
/// address, bracketed for IPv6, or a DNS name).
fn default_server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| {
        format!(
            "{host:?} is not a valid TLS server name ({e}); set one with \
             TlsOptions::server_name or TAGWIRE_TLS_SERVER_NAME"
        )
    })
}

/// Says which step of TLS failed, with a hint where one helps.
fn explain(e: &std::io::Error, when: &str, hints: &Hints) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    if matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ) {
        return format!(
            "no answer {when} within {} s (is this a TLS port?)",
            HANDSHAKE_TIMEOUT.as_secs()
        );
    }
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
        return format!("{when}: {e}");
    };
    match tls {
        E::InvalidCertificate(c) => {
            let why = match c {
                C::UnknownIssuer | C::BadSignature => format!(
                    "it is not signed by a CA in {} (--tls-ca / TAGWIRE_TLS_CA)",
                    hints.ca.display()
                ),
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    "it is not valid for the name connected to (if the URL's host is not \
                     a name in the certificate, set TAGWIRE_TLS_SERVER_NAME)"
                        .into()
                }
                C::Expired | C::ExpiredContext { .. } => "it has expired".into(),
                C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".into(),
                _ => "it does not verify".into(),
            };
            format!("the server's certificate was rejected: {why} ({c:?})")
        }
        E::AlertReceived(
            a @ (A::CertificateRequired | A::HandshakeFailure | A::BadCertificate),
        ) if !hints.has_client_cert => {
            format!(
                "the server refused the connection {when} (alert {a:?}): it requires a client \
                 certificate; set --tls-cert and --tls-key (TAGWIRE_TLS_CERT, TAGWIRE_TLS_KEY)"
            )
        }
        E::AlertReceived(
            a @ (A::BadCertificate
            | A::UnknownCA
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::AccessDenied),
        ) => format!(
            "the server rejected the client certificate {when} (alert {a:?}): is it signed \
             by the router's client_ca?"
        ),
        E::AlertReceived(a) => format!("the server sent a fatal alert {when}: {a:?}"),
        other => format!("{when}: {other}"),
    }
}

/// What the pump thread met, if it stopped on an error.
#[derive(Debug, Default)]
pub(crate) struct PumpStatus {
    error: Mutex<Option<String>>,
}

impl PumpStatus {
    /// The error that ended the TLS connection, if any.
    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, msg: String) {
        *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
    }
}

/// Owns the TCP socket and the TLS state; copies plaintext between the
/// session's socket (`local`) and TLS records on `tcp`.
struct Pump {
    tls: rustls::ClientConnection,
    tcp: TcpStream,
    local: UnixStream,
    /// Plaintext from the session not yet accepted by rustls.
    to_tls: Vec<u8>,
    /// Plaintext from the server not yet written to the session.
    to_local: Vec<u8>,
    written_to_local: usize,
    status: Arc<PumpStatus>,
    hints: Arc<Hints>,
}

/// Why the pump stopped.
enum Stop {
    /// A side closed: not an error.
    Closed,
    /// A TLS or socket error: the session's next read reports it.
    Error(String),
}

impl Pump {
    fn prepare(&self) -> std::io::Result<()> {
        self.tcp.set_read_timeout(None)?;
        self.tcp.set_write_timeout(None)?;
        self.tcp.set_nonblocking(true)?;
        self.local.set_nonblocking(true)
    }

    fn run(mut self) {
        match self.pump() {
            Stop::Closed => {}
            Stop::Error(msg) => {
                tracing::debug!("TLS connection ended: {msg}");
                self.status.set(msg);
            }
        }
        // Best effort: tell the server we are done. Dropping `local` then
        // shows the session the end of the stream.
        self.tls.send_close_notify();
        let _ = self.tls.write_tls(&mut self.tcp);
    }

    fn pump(&mut self) -> Stop {
        let mut local_eof = false;
        let mut tcp_eof = false;
        let mut chunk = vec![0u8; CHUNK];
        loop {
            if let Err(stop) = self.move_data() {
                return stop;
            }
            let pending_to_local = self.to_local.len() - self.written_to_local;
            if tcp_eof && pending_to_local == 0 {
                return Stop::Closed;
            }
            if local_eof && self.to_tls.is_empty() && !self.tls.wants_write() {
                return Stop::Closed;
            }
            let mut tcp_events = PollFlags::empty();
            if !tcp_eof && self.to_local.len() < MAX_PENDING_TO_SESSION {
                tcp_events |= PollFlags::IN;
            }
            if self.tls.wants_write() {
                tcp_events |= PollFlags::OUT;
            }
            let mut local_events = PollFlags::empty();
            if !local_eof && self.to_tls.is_empty() {
                local_events |= PollFlags::IN;
            }
            if pending_to_local > 0 {
                local_events |= PollFlags::OUT;
            }
            // A socket with nothing wanted is left out: poll would report its
            // hang-up over and over and spin.
            let mut fds = Vec::with_capacity(2);
            if !tcp_events.is_empty() {
                fds.push(PollFd::new(&self.tcp, tcp_events));
            }
            if !local_events.is_empty() {
                fds.push(PollFd::new(&self.local, local_events));
            }
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Stop::Error(format!("poll: {e}")),
            }
            let ready = |i: usize| fds.get(i).map_or(PollFlags::empty(), |f| f.revents());
            let (tcp_ready, local_ready) = match (tcp_events.is_empty(), local_events.is_empty()) {
                (false, false) => (ready(0), ready(1)),
                (false, true) => (ready(0), PollFlags::empty()),
                _ => (PollFlags::empty(), ready(0)),
            };
            drop(fds);
            let readable = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
            if tcp_events.contains(PollFlags::IN) && tcp_ready.intersects(readable) {
                match self.read_tcp(&mut chunk) {
                    Ok(eof) => tcp_eof = eof,
                    Err(stop) => return stop,
                }
            }
            if local_events.contains(PollFlags::IN) && local_ready.intersects(readable) {
                match self.local.read(&mut chunk) {
                    Ok(0) => local_eof = true,
                    Ok(n) => self.to_tls.extend_from_slice(&chunk[..n]),
                    Err(e) if is_transient(&e) => {}
                    Err(_) => local_eof = true,
                }
            }
        }
    }

    /// Hands pending plaintext to rustls, writes TLS records to the server
    /// and plaintext to the session, as far as each goes without blocking.
    fn move_data(&mut self) -> Result<(), Stop> {
        if !self.to_tls.is_empty() {
            match self.tls.writer().write(&self.to_tls) {
                Ok(n) => {
                    self.to_tls.drain(..n);
                }
                Err(e) => return Err(Stop::Error(format!("TLS write: {e}"))),
            }
        }
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if is_transient(&e) => break,
                Err(e) => return Err(Stop::Error(format!("writing to the server: {e}"))),
            }
        }
        while self.written_to_local < self.to_local.len() {
            match self.local.write(&self.to_local[self.written_to_local..]) {
                Ok(n) => self.written_to_local += n,
                Err(e) if is_transient(&e) => break,
                // The session is gone.
                Err(_) => return Err(Stop::Closed),
            }
        }
        if self.written_to_local == self.to_local.len() {
            self.to_local.clear();
            self.written_to_local = 0;
        }
        Ok(())
    }

    /// Reads TLS records until the socket would block; true at the end of
    /// the server's stream.
    fn read_tcp(&mut self, plain: &mut [u8]) -> Result<bool, Stop> {
        while self.to_local.len() < MAX_PENDING_TO_SESSION {
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(true),
                Ok(_) => {}
                Err(e) if is_transient(&e) => return Ok(false),
                Err(e) => return Err(Stop::Error(format!("reading from the server: {e}"))),
            }
            if let Err(e) = self.tls.process_new_packets() {
                // Send our alert, if any, before reporting.
                let _ = self.tls.write_tls(&mut self.tcp);
                let io = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
                return Err(Stop::Error(explain(
                    &io,
                    "after the handshake",
                    &self.hints,
                )));
            }
            loop {
                match self.tls.reader().read(plain) {
                    Ok(0) => return Ok(true),
                    Ok(n) => self.to_local.extend_from_slice(&plain[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    // The server closed TCP without close_notify.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(true),
                    Err(e) => return Err(Stop::Error(format!("TLS read: {e}"))),
                }
            }
        }
        Ok(false)
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// Connects to the first address of `addr` that answers within `timeout`.
fn connect_within(addr: &str, timeout: std::time::Duration) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{addr} resolves to no address"),
    );
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout.max(std::time::Duration::from_millis(1))) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_server_name_is_the_urls_host() {
        let name = |a| default_server_name(a).map(|n| n.to_str().into_owned());
        assert_eq!(name("broker.lan:7701").as_deref(), Ok("broker.lan"));
        assert_eq!(name("127.0.0.1:7701").as_deref(), Ok("127.0.0.1"));
        assert_eq!(name("[::1]:7701").as_deref(), Ok("::1"));
        assert!(matches!(
            default_server_name("[::1]:7701"),
            Ok(ServerName::IpAddress(_))
        ));
        let e = name("bad host:1").expect_err("a space is not a DNS name");
        assert!(e.contains("TAGWIRE_TLS_SERVER_NAME"), "{e}");
    }
}
