//! `udp://HOST:PORT`: the session's bytes over UDP datagrams
//! (`docs/protocol.md`, "Datagrams"). As for TLS, the session talks to one
//! end of a Unix socket pair and two pump threads own the UDP socket: one
//! cuts the session's frames into datagrams, the other checks the
//! daemon's datagrams (address, session id, sequence) and writes their
//! frames to the session. Opening proves our address with the daemon's
//! cookie first. Delivery is best effort: loss and reordering are counted
//! ([`UdpCounters`]), never hidden, and a late datagram within 64 of the
//! newest is still delivered.

use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_core::datagram::{Packer, SeqWindow, Verdict};
use tagwire_proto::datagram::{
    encode_open, Datagram, DatagramKind, Header, Report, CONTROL_MAX_DATAGRAM,
    DEFAULT_MAX_DATAGRAM, HEADER_LEN,
};

/// How long the pump waits for an answer before it sends again (the
/// `Open`s, and its last datagram until the `Welcome`).
const RETRY: Duration = Duration::from_millis(250);
/// How often the pump reports its receive counters to the daemon.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What a UDP session saw: its receive counters for the daemon's
/// datagrams, and what it could not send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// The session id the daemon chose.
    pub session: u64,
    /// The daemon's datagrams accepted, lost, reordered, duplicate, bad.
    pub received: Report,
    /// Datagrams sent.
    pub sent: u64,
    /// Frames not sent: a control frame larger than a datagram may carry.
    pub too_large: u64,
}

/// Shared by the pump threads and the session.
#[derive(Debug, Default)]
pub(crate) struct UdpStatus {
    error: Mutex<Option<String>>,
    counters: Mutex<UdpCounters>,
    /// The socket, to change its DSCP.
    socket: Mutex<Option<OwnedFd>>,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl UdpStatus {
    /// The error that ended the session's datagrams, if any.
    pub(crate) fn error(&self) -> Option<String> {
        lock(&self.error).clone()
    }

    fn set_error(&self, msg: String) {
        lock(&self.error).get_or_insert(msg);
    }

    /// The counters so far.
    pub(crate) fn counters(&self) -> UdpCounters {
        *lock(&self.counters)
    }

    /// Marks the socket's packets with `dscp`.
    pub(crate) fn set_dscp(&self, dscp: u8) -> std::io::Result<()> {
        match &*lock(&self.socket) {
            Some(s) => tagwire_router::priority::set_dscp(s.as_fd(), dscp),
            None => Ok(()),
        }
    }
}

/// The largest frame (length field included) a publish may be over UDP
/// with the default `max_datagram`.
pub(crate) fn max_event_frame() -> usize {
    DEFAULT_MAX_DATAGRAM - HEADER_LEN
}

/// Opens a session with the daemon at `addr` within `timeout`: the cookie
/// exchange, then the pump threads, which run at `band`'s scheduling (they
/// carry its datagrams both ways). Returns the session's end of the pair.
pub(crate) fn connect(
    addr: &str,
    timeout: Duration,
    band: Option<crate::builder::ClientBand>,
) -> std::io::Result<(UnixStream, Arc<UdpStatus>)> {
    let deadline = Instant::now() + timeout;
    let target: SocketAddr = addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{addr} resolves to no address"),
        )
    })?;
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    // Connected: the kernel drops datagrams from any other address.
    socket.connect(target)?;
    let session = open(&socket, deadline)?;
    let (ours, theirs) = UnixStream::pair()?;
    let status = Arc::new(UdpStatus::default());
    *lock(&status.socket) = socket.try_clone().ok().map(OwnedFd::from);
    lock(&status.counters).session = session;
    let shared = Arc::new(Mutex::new(Shared {
        welcomed: false,
        last: None,
        packer: Packer::new(session, DEFAULT_MAX_DATAGRAM).with_control_max(CONTROL_MAX_DATAGRAM),
    }));
    let up = Up {
        socket: socket.try_clone()?,
        local: theirs.try_clone()?,
        shared: shared.clone(),
        status: status.clone(),
    };
    let down = Down {
        socket,
        local: theirs,
        session,
        shared,
        status: status.clone(),
        // Notes which of the daemon's datagrams it gave up or got late,
        // so the daemon can count the loss per channel (`Gaps`).
        window: SeqWindow::tracking_gaps(),
    };
    let band_up = band.clone();
    std::thread::Builder::new()
        .name("tagwire-udp-up".into())
        .spawn(move || {
            if let Some(b) = band_up {
                b.apply_to_current_thread("UDP sending thread");
            }
            up.run()
        })?;
    std::thread::Builder::new()
        .name("tagwire-udp-down".into())
        .spawn(move || {
            if let Some(b) = band {
                b.apply_to_current_thread("UDP receiving thread");
            }
            down.run()
        })?;
    Ok((ours, status))
}

/// The cookie exchange: `Open`, `Cookie`, `Open` with it, `Accept`.
fn open(socket: &UdpSocket, deadline: Instant) -> std::io::Result<u64> {
    let mut cookie = None;
    let mut buf = vec![0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the daemon did not answer the UDP Open (no UDP listener there, or the datagrams were lost)",
            ));
        }
        let mut d = BytesMut::new();
        encode_open(cookie.as_ref(), &mut d);
        socket.send(&d)?;
        socket.set_read_timeout(Some(RETRY.min(left).max(Duration::from_millis(1))))?;
        let until = Instant::now() + RETRY.min(left);
        while Instant::now() < until {
            let n = match socket.recv(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                // ICMP port unreachable on a connected socket.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let Ok(p) = Datagram::parse(&buf[..n]) else {
                continue;
            };
            match p.header.kind {
                DatagramKind::Cookie => {
                    let mut c = [0u8; tagwire_proto::datagram::COOKIE_LEN];
                    c.copy_from_slice(p.body);
                    cookie = Some(c);
                    break;
                }
                DatagramKind::Accept if cookie.is_some() => {
                    socket.set_read_timeout(None)?;
                    return Ok(p.header.session);
                }
                _ => {}
            }
        }
    }
}

/// What both pump threads need.
struct Shared {
    welcomed: bool,
    /// Until the `Welcome`: our last datagram, sent again on silence.
    last: Option<Vec<u8>>,
    packer: Packer,
}

/// Session → daemon.
struct Up {
    socket: UdpSocket,
    local: UnixStream,
    shared: Arc<Mutex<Shared>>,
    status: Arc<UdpStatus>,
}

impl Up {
    fn run(mut self) {
        let mut stream = BytesMut::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match self.local.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            stream.extend_from_slice(&chunk[..n]);
            let mut out = Vec::new();
            let mut sh = lock(&self.shared);
            sh.packer.pack(&mut stream, 0, &mut out);
            let too_large = sh.packer.too_large();
            let welcomed = sh.welcomed;
            if !welcomed {
                if let Some(d) = out.last() {
                    sh.last = Some(d.to_vec());
                }
            }
            drop(sh);
            let mut sent = 0;
            for d in &out {
                // A full send buffer loses the datagram, as the network may.
                if self.socket.send(d).is_ok() {
                    sent += 1;
                }
            }
            let mut c = lock(&self.status.counters);
            c.sent += sent;
            c.too_large = too_large;
        }
        self.status.stop.store(true, Ordering::Relaxed);
    }
}

/// Daemon → session.
struct Down {
    socket: UdpSocket,
    local: UnixStream,
    session: u64,
    shared: Arc<Mutex<Shared>>,
    status: Arc<UdpStatus>,
    window: SeqWindow,
}

impl Down {
    fn run(mut self) {
        let why = self.pump();
        if let Some(msg) = why {
            tracing::debug!("udp session ended: {msg}");
            self.status.set_error(msg);
        }
        self.status.stop.store(true, Ordering::Relaxed);
        // The session reads the end of the stream.
        let _ = self.local.shutdown(std::net::Shutdown::Both);
    }

    fn pump(&mut self) -> Option<String> {
        let mut buf = vec![0u8; CONTROL_MAX_DATAGRAM + 1];
        let mut last_heard = Instant::now();
        let mut last_report = Instant::now();
        let mut reported = Report::default();
        if let Err(e) = self.socket.set_read_timeout(Some(RETRY)) {
            return Some(format!("udp socket: {e}"));
        }
        loop {
            if self.status.stop.load(Ordering::Relaxed) {
                return None;
            }
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    last_heard = Instant::now();
                    if let Some(end) = self.on_datagram(&buf[..n]) {
                        return Some(end);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    return Some("the daemon's UDP port is closed (ICMP port unreachable)".into());
                }
                Err(e) => return Some(format!("udp receive: {e}")),
            }
            let now = Instant::now();
            let sh = lock(&self.shared);
            if !sh.welcomed && now.duration_since(last_heard) >= RETRY {
                // Nothing back: our last handshake datagram or its answer
                // was lost. The same datagram again (same seq).
                if let Some(d) = &sh.last {
                    let _ = self.socket.send(d);
                }
                last_heard = now;
            }
            drop(sh);
            let r = self.window.report();
            if now.duration_since(last_report) >= REPORT_EVERY && r != reported {
                let mut d = BytesMut::with_capacity(64);
                Header {
                    kind: DatagramKind::Report,
                    session: self.session,
                    seq: 0,
                }
                .encode(&mut d);
                r.encode(&mut d);
                let _ = self.socket.send(&d);
                reported = r;
                last_report = now;
                // Which datagrams: at most MAX_PENDING_GAP_RANGES / 60 (4)
                // Gaps datagrams a second.
                while let Some(g) = self.window.take_gaps() {
                    let mut d = BytesMut::with_capacity(512);
                    Header {
                        kind: DatagramKind::Gaps,
                        session: self.session,
                        seq: 0,
                    }
                    .encode(&mut d);
                    g.encode(&mut d);
                    let _ = self.socket.send(&d);
                }
            }
        }
    }

    /// Handles one datagram; `Some(why)` ends the session.
    fn on_datagram(&mut self, bytes: &[u8]) -> Option<String> {
        let Ok(d) = Datagram::parse(bytes) else {
            self.bad();
            return None;
        };
        if d.header.session != self.session {
            self.bad();
            return None;
        }
        match d.header.kind {
            DatagramKind::Data => {}
            DatagramKind::Reset => {
                return Some(
                    "the daemon does not know this UDP session (it restarted, or the session timed out)"
                        .into(),
                )
            }
            // A repeated Accept (our second Open crossed it): nothing to do.
            DatagramKind::Accept => return None,
            _ => {
                self.bad();
                return None;
            }
        }
        let verdict = self.window.on_seq(d.header.seq);
        lock(&self.status.counters).received = self.window.report();
        if verdict != Verdict::Accept {
            return None;
        }
        let frames = d.frame_bytes();
        if frames.is_empty() {
            return None;
        }
        {
            let mut sh = lock(&self.shared);
            if !sh.welcomed
                && d.frames()
                    .is_ok_and(|mut f| f.any(|(k, _)| k == tagwire_proto::kind::WELCOME))
            {
                sh.welcomed = true;
                sh.last = None;
            }
        }
        // Blocking: a session that does not read makes the socket's buffer
        // fill, and the kernel drops (counted as lost by the sequence).
        if let Err(e) = self.local.write_all(frames) {
            return Some(format!("session socket: {e}"));
        }
        None
    }

    fn bad(&mut self) {
        self.window.note_bad();
        lock(&self.status.counters).received = self.window.report();
    }
}
