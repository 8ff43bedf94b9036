//! `udp://HOST:PORT`: the session's bytes over UDP datagrams
//! (`docs/protocol.md`, "Datagrams"). As for TLS, the session talks to one
//! end of a Unix socket pair and two pump threads own the UDP socket: one
//! cuts the session's frames into datagrams, the other checks the
//! daemon's datagrams (address, session id, sequence) and writes their
//! frames to the session. Opening proves our address with the daemon's
//! cookie first. Best-effort events (`Publish`, `Deliver`) may be lost:
//! loss and reordering are counted ([`UdpCounters`]), never hidden, and a
//! late datagram within 64 of the newest is still delivered. Every other
//! frame (requests and replies, reliable events and their
//! acknowledgements) goes in `AckedData` datagrams when the daemon speaks
//! them: acknowledged, sent again until acknowledged, handed on in order
//! once (core's [`AckedSender`]/[`AckedReceiver`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_core::datagram::{
    split_frames, AckedReceiver, AckedSender, Packer, SeqWindow, Verdict,
};
use tagwire_proto::datagram::{
    encode_open_with, DataAck, Datagram, DatagramKind, Header, Report, CONTROL_MAX_DATAGRAM,
    DEFAULT_MAX_DATAGRAM, FEATURE_ACKED, HEADER_LEN,
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
    /// Whether the daemon acknowledges datagrams (`AckedData`): every frame
    /// but best-effort events arrives, in order.
    pub acknowledged: bool,
    /// `AckedData` datagrams sent again (lost, or their acknowledgement
    /// was).
    pub resent: u64,
    /// `AckedData` datagrams received twice (dropped).
    pub acked_duplicate: u64,
}

/// Shared by the pump threads and the session.
#[derive(Debug, Default)]
pub(crate) struct UdpStatus {
    error: Mutex<Option<String>>,
    counters: Mutex<UdpCounters>,
    /// The socket, to change its DSCP.
    socket: Mutex<Option<OwnedFd>>,
    stop: AtomicBool,
    /// Wakes the sending thread when acknowledgements free the window.
    room: Condvar,
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
    band: Option<crate::options::ClientBand>,
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
    let (session, features) = open(&socket, deadline)?;
    let acked = features & FEATURE_ACKED != 0;
    let (ours, theirs) = UnixStream::pair()?;
    let status = Arc::new(UdpStatus::default());
    *lock(&status.socket) = socket.try_clone().ok().map(OwnedFd::from);
    {
        let mut c = lock(&status.counters);
        c.session = session;
        c.acknowledged = acked;
    }
    let shared = Arc::new(Mutex::new(Shared {
        welcomed: false,
        last: None,
        packer: Packer::new(session, DEFAULT_MAX_DATAGRAM).with_control_max(CONTROL_MAX_DATAGRAM),
        acked: acked.then(|| Acked {
            packer: Packer::acked(session, DEFAULT_MAX_DATAGRAM)
                .with_control_max(CONTROL_MAX_DATAGRAM),
            sender: AckedSender::default(),
            receiver: AckedReceiver::default(),
        }),
        epoch: Instant::now(),
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
/// Offers acknowledged datagrams; returns the session id and the features
/// the daemon took (0 from a daemon that predates them).
fn open(socket: &UdpSocket, deadline: Instant) -> std::io::Result<(u64, u32)> {
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
        encode_open_with(cookie.as_ref(), FEATURE_ACKED, &mut d);
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
                    return Ok((p.header.session, p.header.seq & FEATURE_ACKED));
                }
                _ => {}
            }
        }
    }
}

/// What both pump threads need.
struct Shared {
    welcomed: bool,
    /// Until the `Welcome`: our last datagram, sent again on silence
    /// (sessions without acknowledged datagrams only).
    last: Option<Vec<u8>>,
    packer: Packer,
    /// The acknowledged datagrams, if the daemon speaks them.
    acked: Option<Acked>,
    /// Zero of the acknowledged datagrams' clock.
    epoch: Instant,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// A session's acknowledged datagrams, both ways.
struct Acked {
    packer: Packer,
    sender: AckedSender,
    receiver: AckedReceiver,
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
        let mut best = BytesMut::new();
        let mut sure = BytesMut::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match self.local.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            stream.extend_from_slice(&chunk[..n]);
            let mut out = Vec::new();
            let mut sh = lock(&self.shared);
            let now = sh.now_ns();
            let Shared { packer, acked, .. } = &mut *sh;
            match acked {
                Some(a) => {
                    split_frames(&mut stream, &mut best, &mut sure);
                    packer.pack(&mut best, 0, &mut out);
                    let mut made = Vec::new();
                    a.packer.pack(&mut sure, 0, &mut made);
                    out.extend(a.sender.push(made, now).into_iter().map(BytesMut::from));
                }
                None => {
                    packer.pack(&mut stream, 0, &mut out);
                }
            }
            let too_large =
                sh.packer.too_large() + sh.acked.as_ref().map_or(0, |a| a.packer.too_large());
            let welcomed = sh.welcomed;
            if !welcomed && sh.acked.is_none() {
                if let Some(d) = out.last() {
                    sh.last = Some(d.to_vec());
                }
            }
            drop(sh);
            let mut sent = 0;
            for d in &out {
                // A full send buffer loses the datagram, as the network may
                // (an acknowledged one is sent again).
                if self.socket.send(d).is_ok() {
                    sent += 1;
                }
            }
            {
                let mut c = lock(&self.status.counters);
                c.sent += sent;
                c.too_large = too_large;
            }
            // The window is full: read no more until acknowledgements
            // make room (the session's writes wait, as over TCP).
            let mut sh = lock(&self.shared);
            while sh.acked.as_ref().is_some_and(|a| a.sender.backlog() > 0)
                && !self.status.stop.load(Ordering::Relaxed)
            {
                sh = self
                    .status
                    .room
                    .wait_timeout(sh, RETRY)
                    .map_or_else(|e| e.into_inner().0, |(g, _)| g);
            }
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
        let mut timeout = RETRY;
        loop {
            if self.status.stop.load(Ordering::Relaxed) {
                return None;
            }
            // Wake for the next retransmission of an acknowledged datagram.
            let want = {
                let sh = lock(&self.shared);
                let now = sh.now_ns();
                sh.acked
                    .as_ref()
                    .and_then(|a| a.sender.next_timeout())
                    .map_or(RETRY, |t| {
                        Duration::from_nanos(t.saturating_sub(now))
                            .clamp(Duration::from_millis(1), RETRY)
                    })
            };
            if want != timeout {
                timeout = want;
                if let Err(e) = self.socket.set_read_timeout(Some(timeout)) {
                    return Some(format!("udp socket: {e}"));
                }
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
            if let Some(end) = self.resend_due() {
                return Some(end);
            }
            let now = Instant::now();
            let sh = lock(&self.shared);
            if !sh.welcomed && sh.acked.is_none() && now.duration_since(last_heard) >= RETRY {
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

    /// Sends again the acknowledged datagrams whose timeout passed;
    /// `Some(why)` ends the session (the daemon acknowledged nothing for
    /// too long).
    fn resend_due(&mut self) -> Option<String> {
        let mut sh = lock(&self.shared);
        let now = sh.now_ns();
        let a = sh.acked.as_mut()?;
        let due = match a.sender.poll_timeout(now, 64) {
            Ok(d) => d,
            Err(e) => return Some(format!("udp: {e}")),
        };
        let resent = a.sender.counters().resent;
        drop(sh);
        for d in &due {
            let _ = self.socket.send(d);
        }
        lock(&self.status.counters).resent = resent;
        None
    }

    /// The daemon's `DataAck`: frees the window, sends what it names
    /// missing and what now fits.
    fn on_data_ack(&mut self, body: &[u8]) -> Option<String> {
        let Ok(ack) = DataAck::decode(body) else {
            self.bad();
            return None;
        };
        let mut sh = lock(&self.shared);
        let now = sh.now_ns();
        let Some(a) = sh.acked.as_mut() else {
            drop(sh);
            self.bad();
            return None;
        };
        let send = match a.sender.on_ack(&ack, now) {
            Ok(s) => s,
            Err(e) => return Some(format!("udp: {e}")),
        };
        let resent = a.sender.counters().resent;
        drop(sh);
        self.status.room.notify_all();
        for d in &send {
            let _ = self.socket.send(d);
        }
        lock(&self.status.counters).resent = resent;
        None
    }

    /// An `AckedData` datagram: its frames (and those parked behind it) to
    /// the session in order, and our acknowledgement.
    fn on_acked_data(&mut self, d: &Datagram<'_>) -> Option<String> {
        let mut sh = lock(&self.shared);
        let Some(a) = sh.acked.as_mut() else {
            drop(sh);
            self.bad();
            return None;
        };
        let ready = a.receiver.on_datagram(d.header.seq, d.frame_bytes());
        let ack = a.receiver.take_ack();
        let dup = a.receiver.counters().duplicate;
        drop(sh);
        if let Some(ack) = ack {
            let mut out = BytesMut::with_capacity(64);
            Header {
                kind: DatagramKind::DataAck,
                session: self.session,
                seq: 0,
            }
            .encode(&mut out);
            ack.encode(&mut out);
            let _ = self.socket.send(&out);
        }
        lock(&self.status.counters).acked_duplicate = dup;
        if let Some(frames) = ready {
            if let Err(e) = self.local.write_all(&frames) {
                return Some(format!("session socket: {e}"));
            }
        }
        None
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
            DatagramKind::AckedData => return self.on_acked_data(&d),
            DatagramKind::DataAck => return self.on_data_ack(d.body),
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
