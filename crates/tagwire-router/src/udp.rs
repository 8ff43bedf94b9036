//! The UDP listener of a band (`[udp] listen`, `tagwired --udp ADDR`): one
//! socket per band, carrying the band's DSCP, served by the band's lane.
//! Datagrams (`docs/protocol.md`, "Datagrams") are checked and sorted into
//! sessions; each session's frames go to an ordinary connection
//! ([`crate::connection::serve`]) through a bounded queue, and what the
//! connection writes is cut into datagrams ([`Packer`]) and sent to the
//! session's address. So the handshake, token proof, ACL and every limit
//! are the TCP ones; only the bytes' carriage differs.
//!
//! What a spoofed or garbage datagram can do is bounded: an address gets
//! a session only after repeating a stateless cookie; an unproven address
//! is answered with at most the bytes it sent; a session's datagrams are
//! taken only from its address with its 64-bit random id; sessions are
//! bounded (`max_sessions`); whatever does not fit is counted and dropped.
//!
//! A client that offers acknowledged datagrams in its `Open` gets every
//! frame but best-effort events (`Deliver`, `Publish`) in `AckedData`
//! datagrams: acknowledged, sent again until acknowledged (a timer wakes
//! the listener while any is in flight), handed to the connection in
//! order, once. At most
//! [`ACKED_WINDOW`](tagwire_core::datagram::ACKED_WINDOW) are in flight per session; past
//! it the connection's writes wait (its outbox fills, as over TCP).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tagwire_core::datagram::{
    split_frames, AckedReceiver, AckedSender, Packer, SeqWindow, Verdict,
};
use tagwire_proto::datagram::{
    check_cookie, make_cookie, DataAck, Datagram, DatagramKind, Gaps, Header, Report,
    CONTROL_MAX_DATAGRAM, COOKIE_WINDOW_SECS, FEATURE_ACKED, HEADER_LEN,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::auth::Transport;
use crate::config::UdpConfig;
use crate::state::lanes::LaneOf;
pub use crate::state::udp::{StatsRef, UdpStats};
use crate::state::State;
use crate::sync::Locked;

/// `(datagram seq, subscription, events)` entries a session remembers of
/// the datagrams it sent, to put a client's `Gaps` report on channels;
/// the oldest go first (then their loss counts in `unattributed`).
const CARRIED_ENTRIES: usize = 8192;

/// One session as the listener keeps it.
struct Session {
    id: u64,
    addr: SocketAddr,
    /// The cookie that opened it (a repeated `Open` gets the same `Accept`).
    cookie: [u8; tagwire_proto::datagram::COOKIE_LEN],
    window: SeqWindow,
    packer: Packer,
    /// Bytes written by the connection not yet a whole frame.
    stream: BytesMut,
    /// Whether the `Welcome` went out (then anti-amplification ends).
    welcomed: bool,
    /// Before the `Welcome`: bytes the client sent minus bytes sent to it.
    credit: usize,
    /// Until the client sends something new after the `Welcome`: the last
    /// datagram sent (the `Welcome`'s, at the end), sent again when the
    /// client repeats one (our answer was lost).
    last_sent: Option<Bytes>,
    /// The client's highest sequence number when the `Welcome` went out: a
    /// later one means it heard it.
    welcome_after: u32,
    /// Frames to the connection.
    tx: mpsc::Sender<Bytes>,
    /// Bytes in `tx` not yet read by the connection (bounded by
    /// `queue * max_datagram`).
    queued: Rc<Cell<usize>>,
    stats: Arc<UdpStats>,
    /// The largest frame dropped so far as too large (logged when it grows).
    logged_too_large: usize,
    /// What the last datagrams sent carried: `(seq, subscription, Deliver
    /// frames)`, ascending by seq, at most [`CARRIED_ENTRIES`].
    carried: VecDeque<(u32, u32, u32)>,
    /// The features the `Accept` named ([`FEATURE_ACKED`]).
    features: u32,
    /// The acknowledged datagrams, if the client offered them.
    acked: Option<SessionAcked>,
}

/// A session's acknowledged datagrams, both ways.
struct SessionAcked {
    packer: Packer,
    sender: AckedSender,
    receiver: AckedReceiver,
    /// Whole frames written by the connection, sorted: best-effort events
    /// and the rest.
    best: BytesMut,
    sure: BytesMut,
    /// The connection's writer, waiting for room in the window.
    waker: Option<Waker>,
}

impl Session {
    /// Notes the `Deliver` frames of datagram `d` (just numbered) by
    /// subscription.
    fn note_carried(&mut self, d: &[u8]) {
        let Ok(p) = Datagram::parse(d) else { return };
        let Ok(frames) = p.frames() else { return };
        let seq = p.header.seq;
        let from = self.carried.len();
        for (k, body) in frames {
            if k != tagwire_proto::kind::DELIVER {
                continue;
            }
            let Some(sub) = body
                .get(..4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            else {
                continue;
            };
            // Frames of one subscription are usually together: merge with
            // this datagram's entries.
            match self.carried.range_mut(from..).find(|(_, s, _)| *s == sub) {
                Some(e) => e.2 += 1,
                None => {
                    if self.carried.len() >= CARRIED_ENTRIES {
                        self.carried.pop_front();
                    }
                    self.carried.push_back((seq, sub, 1));
                }
            }
        }
    }

    /// Puts a client's `Gaps` report on the channels whose events the
    /// named datagrams carried.
    fn on_gaps(&mut self, g: &Gaps) {
        for (ranges, late) in [(&g.lost, false), (&g.late, true)] {
            for r in ranges {
                let oldest = self.carried.front().map_or(u32::MAX, |e| e.0);
                if r.first < oldest {
                    // Too old to know what they carried.
                    let n = u64::from(r.last.min(oldest.saturating_sub(1)) - r.first) + 1;
                    self.stats.unattributed.fetch_add(n, Ordering::Relaxed);
                }
                let at = self.carried.partition_point(|e| e.0 < r.first);
                for &(seq, sub, n) in self.carried.range(at..) {
                    if seq > r.last {
                        break;
                    }
                    self.stats.count_channel(sub, u64::from(n), late);
                }
            }
        }
    }
}

/// One band's UDP socket and its sessions.
struct Listener {
    socket: tokio::net::UdpSocket,
    sessions: RefCell<HashMap<u64, Rc<RefCell<Session>>>>,
    secret: [u8; 32],
    config: UdpConfig,
    /// Datagrams dropped before any session could be named.
    garbage: Cell<u64>,
    /// Opens dropped because `max_sessions` were open.
    refused: Cell<u64>,
    /// When the listener last logged (one line a second at most).
    last_log: Cell<Option<std::time::Instant>>,
    /// Zero of the acknowledged datagrams' clock.
    epoch: std::time::Instant,
    /// Some session has acknowledged datagrams in flight: the listener
    /// wakes every [`ACKED_TICK`] to send again what timed out.
    timers: Cell<bool>,
    /// Wakes the listener when a session's first datagram goes in flight.
    wake: tokio::sync::Notify,
}

/// How often the listener looks for acknowledged datagrams to send again
/// while any is in flight.
const ACKED_TICK: std::time::Duration = std::time::Duration::from_millis(10);

fn addr_bytes(a: &SocketAddr) -> Vec<u8> {
    a.to_string().into_bytes()
}

fn cookie_window() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / COOKIE_WINDOW_SECS)
}

fn header(kind: DatagramKind, session: u64) -> BytesMut {
    let mut d = BytesMut::with_capacity(64);
    Header {
        kind,
        session,
        seq: 0,
    }
    .encode(&mut d);
    d
}

/// An `Accept` for session `id` naming the `features` taken (in `seq`).
fn accept_with(id: u64, features: u32) -> BytesMut {
    let mut d = BytesMut::with_capacity(HEADER_LEN);
    Header {
        kind: DatagramKind::Accept,
        session: id,
        seq: features,
    }
    .encode(&mut d);
    d
}

fn random_u64() -> u64 {
    let n = crate::local::random_nonce();
    let mut b = [0u8; 8];
    b.copy_from_slice(&n[..8]);
    u64::from_le_bytes(b).max(1)
}

/// Serves `socket` (already bound, carrying the band's DSCP) until the lane
/// stops.
pub(crate) async fn serve(
    state: Arc<Locked<State>>,
    socket: tokio::net::UdpSocket,
    lane: LaneOf,
    config: UdpConfig,
) {
    let mut secret = [0u8; 32];
    secret.copy_from_slice(&crate::local::random_nonce());
    let l = Rc::new(Listener {
        socket,
        sessions: RefCell::new(HashMap::new()),
        secret,
        config,
        garbage: Cell::new(0),
        refused: Cell::new(0),
        last_log: Cell::new(None),
        epoch: std::time::Instant::now(),
        timers: Cell::new(false),
        wake: tokio::sync::Notify::new(),
    });
    // One byte more than the largest datagram: a longer one is seen as such.
    let mut buf = vec![0u8; CONTROL_MAX_DATAGRAM.max(l.config.max_datagram) + 1];
    let mut next_tick = tokio::time::Instant::now() + ACKED_TICK;
    loop {
        let got = tokio::select! {
            r = l.socket.recv_from(&mut buf) => Some(r),
            _ = tokio::time::sleep_until(next_tick), if l.timers.get() => None,
            _ = l.wake.notified() => None,
        };
        let now = tokio::time::Instant::now();
        if now >= next_tick {
            l.tick();
            next_tick = now + ACKED_TICK;
        }
        let Some(got) = got else { continue };
        let (n, from) = match got {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("udp recv: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let bytes = &buf[..n];
        if n > CONTROL_MAX_DATAGRAM.max(l.config.max_datagram) {
            l.drop_garbage(
                from,
                &format!(
                    "datagram of {n}+ bytes is over max_datagram {}",
                    l.config.max_datagram
                ),
            );
            continue;
        }
        let d = match Datagram::parse(bytes) {
            Ok(d) => d,
            Err(e) => {
                l.drop_garbage(from, &e.to_string());
                continue;
            }
        };
        if n > l.config.max_datagram && !lone_control(&d) {
            l.drop_garbage(from, &format!("datagram of {n} bytes is over max_datagram {} (only a lone control frame may be larger)", l.config.max_datagram));
            continue;
        }
        match d.header.kind {
            DatagramKind::Open => l.on_open(&state, &lane, from, &d, n),
            DatagramKind::Data => l.on_data(from, &d, n),
            DatagramKind::AckedData => l.on_acked_data(from, &d, n),
            DatagramKind::DataAck => {
                if let Some(s) = l.session_from(from, d.header.session, n) {
                    match DataAck::decode(d.body) {
                        Ok(a) => l.on_data_ack(&mut s.borrow_mut(), &a),
                        Err(e) => l.drop_garbage(from, &e.to_string()),
                    }
                }
            }
            DatagramKind::Report => {
                if let Some(s) = l.session_from(from, d.header.session, n) {
                    if let Ok(r) = Report::decode(d.body) {
                        s.borrow().stats.set_peer(&r);
                    }
                }
            }
            DatagramKind::Gaps => {
                if let Some(s) = l.session_from(from, d.header.session, n) {
                    if let Ok(g) = Gaps::decode(d.body) {
                        s.borrow_mut().on_gaps(&g);
                    }
                }
            }
            DatagramKind::Cookie | DatagramKind::Accept | DatagramKind::Reset => {
                l.drop_garbage(from, "a client sent a daemon's datagram kind");
            }
            DatagramKind::Group | DatagramKind::Member => {
                l.drop_garbage(from, "a multicast datagram sent to the UDP listener");
            }
        }
    }
}

/// Whether `d` carries exactly one frame that is not an event (such a
/// datagram may exceed `max_datagram`, up to `CONTROL_MAX_DATAGRAM`).
fn lone_control(d: &Datagram<'_>) -> bool {
    let Ok(mut frames) = d.frames() else {
        return false;
    };
    matches!(
        (frames.next(), frames.next()),
        (Some((k, _)), None) if k != tagwire_proto::kind::PUBLISH
    )
}

impl Listener {
    fn allow_log(&self) -> bool {
        let now = std::time::Instant::now();
        match self.last_log.get() {
            Some(t) if now.duration_since(t) < std::time::Duration::from_secs(1) => false,
            _ => {
                self.last_log.set(Some(now));
                true
            }
        }
    }

    fn drop_garbage(&self, from: SocketAddr, why: &str) {
        self.garbage.set(self.garbage.get() + 1);
        if self.allow_log() {
            tracing::debug!(%from, "udp: dropped a datagram: {why} ({} so far)", self.garbage.get());
        }
    }

    fn send(&self, d: &[u8], to: SocketAddr) -> bool {
        self.socket.try_send_to(d, to).is_ok()
    }

    /// The session `id` if `from` is its address (else counted and `None`;
    /// an unknown id gets a `Reset` no larger than what came).
    fn session_from(&self, from: SocketAddr, id: u64, got: usize) -> Option<Rc<RefCell<Session>>> {
        let s = self.sessions.borrow().get(&id).cloned();
        match s {
            None => {
                let reset = header(DatagramKind::Reset, id);
                if reset.len() <= got {
                    self.send(&reset, from);
                }
                self.drop_garbage(from, "unknown session id");
                None
            }
            Some(s) if s.borrow().addr != from => {
                let mut b = s.borrow_mut();
                b.window.note_bad();
                b.stats.set_window(&b.window.report());
                drop(b);
                self.drop_garbage(from, "a session's id from another address");
                None
            }
            Some(s) => Some(s),
        }
    }

    fn on_open(
        self: &Rc<Self>,
        state: &Arc<Locked<State>>,
        lane: &LaneOf,
        from: SocketAddr,
        d: &Datagram<'_>,
        got: usize,
    ) {
        let addr = addr_bytes(&from);
        let now = cookie_window();
        let cookie = match d.open_cookie() {
            Some(c) if check_cookie(&self.secret, &addr, now, &c) => c,
            _ => {
                // No cookie, or a stale or forged one: a fresh cookie, 40
                // bytes against an Open of at least 1,200.
                let mut out = header(DatagramKind::Cookie, 0);
                out.put_slice(&make_cookie(&self.secret, &addr, now));
                if out.len() <= got {
                    self.send(&out, from);
                }
                return;
            }
        };
        // A repeated Open (our Accept was lost) gets the same session.
        let again = self
            .sessions
            .borrow()
            .values()
            .find(|s| {
                let s = s.borrow();
                s.addr == from && s.cookie == cookie
            })
            .map(|s| s.borrow().id);
        if let Some(id) = again {
            let features = self
                .sessions
                .borrow()
                .get(&id)
                .map_or(0, |s| s.borrow().features);
            self.send(&accept_with(id, features), from);
            return;
        }
        if self.sessions.borrow().len() >= self.config.max_sessions {
            self.refused.set(self.refused.get() + 1);
            if self.allow_log() {
                tracing::warn!(%from, "udp: {} sessions open (udp.max_sessions): dropping a new one ({} dropped so far)", self.config.max_sessions, self.refused.get());
            }
            return;
        }
        let mut id = random_u64();
        while self.sessions.borrow().contains_key(&id) {
            id = random_u64();
        }
        let (tx, rx) = mpsc::channel(self.config.queue);
        let queued = Rc::new(Cell::new(0));
        let stats = Arc::new(UdpStats::default());
        stats.session.store(id, Ordering::Relaxed);
        // Features: the client offers them in the Open's session field.
        let features = (d.header.session & u64::from(FEATURE_ACKED)) as u32;
        let accept = accept_with(id, features);
        stats
            .acknowledged
            .store(features & FEATURE_ACKED != 0, Ordering::Relaxed);
        let session = Rc::new(RefCell::new(Session {
            id,
            addr: from,
            cookie,
            window: SeqWindow::default(),
            packer: Packer::new(id, self.config.max_datagram)
                .with_control_max(CONTROL_MAX_DATAGRAM),
            stream: BytesMut::new(),
            welcomed: false,
            credit: got.saturating_sub(accept.len()),
            last_sent: None,
            welcome_after: 0,
            tx,
            queued: queued.clone(),
            stats: stats.clone(),
            logged_too_large: 0,
            carried: VecDeque::new(),
            features,
            acked: (features & FEATURE_ACKED != 0).then(|| SessionAcked {
                packer: Packer::acked(id, self.config.max_datagram)
                    .with_control_max(CONTROL_MAX_DATAGRAM),
                sender: AckedSender::default(),
                receiver: AckedReceiver::default(),
                best: BytesMut::new(),
                sure: BytesMut::new(),
                waker: None,
            }),
        }));
        self.sessions.borrow_mut().insert(id, session.clone());
        self.send(&accept, from);
        let reader = ChanReader {
            rx,
            cur: Bytes::new(),
            queued,
        };
        let writer = UdpWriter {
            listener: self.clone(),
            session,
        };
        tokio::task::spawn_local(crate::connection::serve(
            state.clone(),
            format!("udp {from}"),
            Transport::Udp {
                stats: StatsRef(stats),
            },
            lane.clone(),
            None,
            reader,
            writer,
        ));
    }

    fn on_data(&self, from: SocketAddr, d: &Datagram<'_>, got: usize) {
        let Some(s) = self.session_from(from, d.header.session, got) else {
            return;
        };
        let mut s = s.borrow_mut();
        if !s.welcomed {
            s.credit += got;
        }
        let verdict = s.window.on_seq(d.header.seq);
        s.stats.set_window(&s.window.report());
        match verdict {
            Verdict::Accept => {
                if s.welcomed && d.header.seq > s.welcome_after {
                    // Past the handshake: the client heard our Welcome.
                    s.last_sent = None;
                }
                let frames = d.frame_bytes();
                let room = self.config.queue * self.config.max_datagram;
                if frames.is_empty() {
                } else if s.queued.get() + frames.len() > room
                    || s.tx.try_send(Bytes::copy_from_slice(frames)).is_err()
                {
                    UdpStats::bump(&s.stats.overrun);
                } else {
                    s.queued.set(s.queued.get() + frames.len());
                }
            }
            Verdict::Duplicate => {
                // The client did not hear our answer: send it again.
                if let Some(last) = s.last_sent.clone() {
                    if s.welcomed || last.len() <= s.credit {
                        if !s.welcomed {
                            s.credit -= last.len();
                        }
                        if self.send(&last, s.addr) {
                            UdpStats::bump(&s.stats.sent);
                        }
                    }
                }
            }
            Verdict::TooOld => {}
        }
    }

    /// Sends what the connection wrote, as datagrams (best-effort events
    /// in `Data`, the rest in `AckedData` if the session acknowledges).
    fn flush(&self, s: &mut Session) {
        let mut out = Vec::new();
        let now = self.now_ns();
        let Session {
            packer,
            stream,
            acked,
            ..
        } = s;
        match acked {
            Some(a) => {
                split_frames(stream, &mut a.best, &mut a.sure);
                packer.pack(&mut a.best, 0, &mut out);
                let mut made = Vec::new();
                a.packer.pack(&mut a.sure, 0, &mut made);
                out.extend(a.sender.push(made, now).into_iter().map(BytesMut::from));
                if !a.sender.is_idle() && !self.timers.get() {
                    self.timers.set(true);
                    self.wake.notify_one();
                }
            }
            None => {
                packer.pack(stream, 0, &mut out);
            }
        }
        let too_large = s.packer.too_large() + s.acked.as_ref().map_or(0, |a| a.packer.too_large());
        s.stats.too_large.store(too_large, Ordering::Relaxed);
        if s.packer.largest_dropped() > s.logged_too_large {
            s.logged_too_large = s.packer.largest_dropped();
            tracing::warn!(
                session = s.id, peer = %s.addr,
                "udp: a frame of {} bytes does not fit in one datagram (max_datagram {}, {} bytes of frames): not sent, counted in too_large",
                s.logged_too_large, self.config.max_datagram, s.packer.max_frame_bytes()
            );
        }
        for d in out {
            self.send_to_session(s, &d);
        }
    }

    /// Sends datagram `d` of session `s`: within the anti-amplification
    /// budget until the `Welcome` went out.
    fn send_to_session(&self, s: &mut Session, d: &[u8]) {
        if !s.welcomed {
            if d.len() > s.credit {
                UdpStats::bump(&s.stats.send_dropped);
                return;
            }
            s.credit -= d.len();
            let parsed = Datagram::parse(d).ok();
            if parsed
                .and_then(|p| p.frames().ok())
                .is_some_and(|mut f| f.any(|(k, _)| k == tagwire_proto::kind::WELCOME))
            {
                s.welcomed = true;
                s.welcome_after = s.window.highest();
            }
            if s.acked.is_none() {
                s.last_sent = Some(Bytes::copy_from_slice(d));
            }
        }
        s.note_carried(d);
        if self.send(d, s.addr) {
            UdpStats::bump(&s.stats.sent);
        } else {
            UdpStats::bump(&s.stats.send_dropped);
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// A client's `AckedData`: its frames (and those parked behind it) to
    /// the connection in order, and our `DataAck`. One the connection has
    /// no room for is dropped unacknowledged (the client sends it again).
    fn on_acked_data(&self, from: SocketAddr, d: &Datagram<'_>, got: usize) {
        let Some(s) = self.session_from(from, d.header.session, got) else {
            return;
        };
        let mut s = s.borrow_mut();
        if !s.welcomed {
            s.credit += got;
        }
        let room = self.config.queue * self.config.max_datagram;
        let frames = d.frame_bytes();
        if s.queued.get() + frames.len() > room || s.tx.capacity() == 0 {
            UdpStats::bump(&s.stats.overrun);
            return;
        }
        let Some(a) = s.acked.as_mut() else {
            drop(s);
            self.drop_garbage(from, "AckedData in a session that did not agree on it");
            return;
        };
        let ready = a.receiver.on_datagram(d.header.seq, frames);
        let ack = a.receiver.take_ack();
        if let Some(ack) = ack {
            let mut out = header(DatagramKind::DataAck, s.id);
            ack.encode(&mut out);
            self.send_to_session(&mut s, &out);
        }
        if let Some(ready) = ready.filter(|r| !r.is_empty()) {
            let len = ready.len();
            if s.tx.try_send(ready.freeze()).is_ok() {
                s.queued.set(s.queued.get() + len);
            } else {
                UdpStats::bump(&s.stats.overrun);
            }
        }
    }

    /// A client's `DataAck`: frees the window, sends what it names missing
    /// and what now fits, wakes the connection's writer.
    fn on_data_ack(&self, s: &mut Session, ack: &DataAck) {
        let now = self.now_ns();
        let Some(a) = s.acked.as_mut() else {
            self.drop_garbage(s.addr, "DataAck in a session that did not agree on it");
            return;
        };
        match a.sender.on_ack(ack, now) {
            Ok(send) => {
                if let Some(w) = a.waker.take() {
                    w.wake();
                }
                s.stats
                    .resent
                    .store(a.sender.counters().resent, Ordering::Relaxed);
                for d in send {
                    self.send_to_session(s, &d);
                }
            }
            Err(e) => {
                tracing::warn!(session = s.id, peer = %s.addr, "udp: {e}: ending the session");
                end_session(s);
            }
        }
    }

    /// Every [`ACKED_TICK`] while some session has acknowledged datagrams
    /// in flight: sends again those whose timeout passed; ends a session
    /// whose client acknowledged nothing for too long.
    fn tick(&self) {
        if !self.timers.get() {
            return;
        }
        let now = self.now_ns();
        let mut busy = false;
        let sessions: Vec<_> = self.sessions.borrow().values().cloned().collect();
        for s in sessions {
            let mut s = s.borrow_mut();
            let Some(a) = s.acked.as_mut() else { continue };
            match a.sender.poll_timeout(now, 64) {
                Ok(due) => {
                    busy |= !a.sender.is_idle();
                    let resent = a.sender.counters().resent;
                    s.stats.resent.store(resent, Ordering::Relaxed);
                    for d in due {
                        self.send_to_session(&mut s, &d);
                    }
                }
                Err(e) => {
                    tracing::warn!(session = s.id, peer = %s.addr, "udp: {e}: ending the session");
                    end_session(&mut s);
                }
            }
        }
        self.timers.set(busy);
    }
}

/// Ends session `s`: its connection reads the end of the stream (and its
/// writer, dropped, takes the session out of the table); nothing more is
/// sent again.
fn end_session(s: &mut Session) {
    let (closed, _) = mpsc::channel(1);
    s.tx = closed;
    s.acked = None;
}

/// The connection's read side: the frames of the session's accepted
/// datagrams, in order of arrival; the end of the stream when the session
/// is gone.
struct ChanReader {
    rx: mpsc::Receiver<Bytes>,
    cur: Bytes,
    queued: Rc<Cell<usize>>,
}

impl AsyncRead for ChanReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.cur.is_empty() {
                let n = self.cur.len().min(buf.remaining());
                buf.put_slice(&self.cur[..n]);
                self.cur.advance(n);
                return Poll::Ready(Ok(()));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => {
                    self.queued.set(self.queued.get().saturating_sub(b.len()));
                    self.cur = b;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The connection's write side: whole frames go out in datagrams at once
/// (UDP never blocks the writer: what the socket will not take is counted).
/// Dropping it ends the session.
struct UdpWriter {
    listener: Rc<Listener>,
    session: Rc<RefCell<Session>>,
}

impl AsyncWrite for UdpWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut s = self.session.borrow_mut();
        if window_full(&mut s, cx) {
            return Poll::Pending;
        }
        s.stream.extend_from_slice(buf);
        self.listener.flush(&mut s);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut s = self.session.borrow_mut();
        if window_full(&mut s, cx) {
            return Poll::Pending;
        }
        let mut n = 0;
        for b in bufs {
            s.stream.extend_from_slice(b);
            n += b.len();
        }
        self.listener.flush(&mut s);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Whether session `s`'s acknowledged datagrams fill the window with more
/// waiting: then the writer waits (woken by the next `DataAck`).
fn window_full(s: &mut Session, cx: &mut Context<'_>) -> bool {
    match s.acked.as_mut() {
        Some(a) if a.sender.backlog() > 0 => {
            a.waker = Some(cx.waker().clone());
            true
        }
        _ => false,
    }
}

impl Drop for UdpWriter {
    fn drop(&mut self) {
        let id = self.session.borrow().id;
        self.listener.sessions.borrow_mut().remove(&id);
    }
}

/// How long a dialing daemon waits for an answer before it sends again
/// (its `Open`s, and its last datagram until the `Welcome`).
const DIAL_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// This daemon's side of a link it dials over UDP (`--peer udp://…`).
struct Dialed {
    socket: tokio::net::UdpSocket,
    session: u64,
    welcomed: Cell<bool>,
    last: RefCell<Option<Bytes>>,
    stats: Arc<UdpStats>,
}

/// Opens a UDP session with the daemon at `target` (the cookie exchange)
/// within `timeout`, then serves the link over it until it ends. `Err`:
/// no session (named).
pub(crate) async fn dial_link(
    state: Arc<Locked<State>>,
    addr: String,
    target: &str,
    lane: LaneOf,
    dscp: u8,
    timeout: std::time::Duration,
) -> Result<(), String> {
    let peer: SocketAddr = tokio::net::lookup_host(target)
        .await
        .map_err(|e| format!("cannot resolve {target}: {e}"))?
        .next()
        .ok_or_else(|| format!("{target} resolves to no address"))?;
    let local: SocketAddr = if peer.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(local)
        .await
        .map_err(|e| format!("udp bind: {e}"))?;
    socket
        .connect(peer)
        .await
        .map_err(|e| format!("udp connect: {e}"))?;
    if let Err(e) = crate::priority::set_dscp(&socket, dscp) {
        tracing::debug!(%addr, "cannot set DSCP {dscp}: {e}");
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut cookie = None;
    let mut buf = vec![0u8; CONTROL_MAX_DATAGRAM + 1];
    let session = 'open: loop {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "no answer to the UDP Open within {timeout:?} (no [udp] listener at {target}?)"
            ));
        }
        let mut d = BytesMut::new();
        tagwire_proto::datagram::encode_open(cookie.as_ref(), &mut d);
        let _ = socket.send(&d).await;
        let until = tokio::time::Instant::now() + DIAL_RETRY;
        while let Ok(r) = tokio::time::timeout_at(until, socket.recv(&mut buf)).await {
            let Ok(n) = r else { break };
            let Ok(p) = Datagram::parse(&buf[..n]) else {
                continue;
            };
            match p.header.kind {
                DatagramKind::Cookie => {
                    let mut c = [0u8; tagwire_proto::datagram::COOKIE_LEN];
                    c.copy_from_slice(p.body);
                    cookie = Some(c);
                    continue 'open;
                }
                DatagramKind::Accept if cookie.is_some() => break 'open p.header.session,
                _ => {}
            }
        }
    };
    let stats = Arc::new(UdpStats::default());
    stats.session.store(session, Ordering::Relaxed);
    let d = Rc::new(Dialed {
        socket,
        session,
        welcomed: Cell::new(false),
        last: RefCell::new(None),
        stats,
    });
    let (tx, rx) = mpsc::channel(256);
    let queued = Rc::new(Cell::new(0));
    let reader = ChanReader {
        rx,
        cur: Bytes::new(),
        queued: queued.clone(),
    };
    let writer = DialWriter {
        dialed: d.clone(),
        packer: RefCell::new(
            Packer::new(session, DEFAULT_DIAL_DATAGRAM).with_control_max(CONTROL_MAX_DATAGRAM),
        ),
        stream: RefCell::new(BytesMut::new()),
    };
    let receiving = tokio::task::spawn_local(dial_receive(d.clone(), tx, queued));
    let transport = Transport::Udp {
        stats: StatsRef(d.stats.clone()),
    };
    crate::connection::dial_serve_over(state, addr, lane, None, transport, reader, writer).await;
    receiving.abort();
    Ok(())
}

/// The largest datagram a dialing daemon sends (the default of `[udp]
/// max_datagram`; the peer's own limit is not known to it).
const DEFAULT_DIAL_DATAGRAM: usize = tagwire_proto::datagram::DEFAULT_MAX_DATAGRAM;

/// Receives the peer's datagrams for a dialed link: checks them, hands
/// their frames on, and until the `Welcome` sends our last datagram again
/// after [`DIAL_RETRY`] of silence. Ends (and so ends the link) on `Reset`.
async fn dial_receive(d: Rc<Dialed>, tx: mpsc::Sender<Bytes>, queued: Rc<Cell<usize>>) {
    let mut window = SeqWindow::default();
    let mut buf = vec![0u8; CONTROL_MAX_DATAGRAM + 1];
    loop {
        let got = tokio::time::timeout(DIAL_RETRY, d.socket.recv(&mut buf)).await;
        let n = match got {
            Err(_) => {
                if !d.welcomed.get() {
                    let last = d.last.borrow().clone();
                    if let Some(last) = last {
                        let _ = d.socket.send(&last).await;
                    }
                }
                continue;
            }
            Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
        };
        let Ok(p) = Datagram::parse(&buf[..n]) else {
            window.note_bad();
            d.stats.set_window(&window.report());
            continue;
        };
        if p.header.session != d.session {
            window.note_bad();
            d.stats.set_window(&window.report());
            continue;
        }
        match p.header.kind {
            DatagramKind::Data => {}
            DatagramKind::Reset => return,
            _ => continue,
        }
        let verdict = window.on_seq(p.header.seq);
        d.stats.set_window(&window.report());
        if verdict != Verdict::Accept {
            continue;
        }
        let frames = p.frame_bytes();
        if frames.is_empty() {
            continue;
        }
        if p.frames()
            .is_ok_and(|mut f| f.any(|(k, _)| k == tagwire_proto::kind::WELCOME))
        {
            d.welcomed.set(true);
            d.last.borrow_mut().take();
        }
        if queued.get() + frames.len() > 256 * DEFAULT_DIAL_DATAGRAM
            || tx.try_send(Bytes::copy_from_slice(frames)).is_err()
        {
            UdpStats::bump(&d.stats.overrun);
        } else {
            queued.set(queued.get() + frames.len());
        }
    }
}

/// The dialed link's write side: whole frames out in datagrams at once.
struct DialWriter {
    dialed: Rc<Dialed>,
    packer: RefCell<Packer>,
    stream: RefCell<BytesMut>,
}

impl DialWriter {
    fn put(&self, bytes: &[&[u8]]) {
        let mut stream = self.stream.borrow_mut();
        for b in bytes {
            stream.extend_from_slice(b);
        }
        let mut out = Vec::new();
        let mut packer = self.packer.borrow_mut();
        packer.pack(&mut stream, 0, &mut out);
        let d = &self.dialed;
        d.stats
            .too_large
            .store(packer.too_large(), Ordering::Relaxed);
        for dg in out {
            if !d.welcomed.get() {
                *d.last.borrow_mut() = Some(Bytes::copy_from_slice(&dg));
            }
            if d.socket.try_send(&dg).is_ok() {
                UdpStats::bump(&d.stats.sent);
            } else {
                UdpStats::bump(&d.stats.send_dropped);
            }
        }
    }
}

impl AsyncWrite for DialWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.put(&[buf]);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let slices: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
        self.put(&slices);
        Poll::Ready(Ok(slices.iter().map(|b| b.len()).sum()))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
