//! Publishers: named endpoints that send events on tags.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tagwire_proto::{EndpointKind, Event, Expiry, Value};

use crate::clock::now_ns;
use crate::error::Result;
use crate::session::Session;
use crate::sync::lock;

/// A declared publisher endpoint. Each event it sends gets the next
/// per-publisher sequence number and a source timestamp.
#[derive(Debug)]
pub struct Publisher {
    session: Session,
    id: u32,
    name: String,
    seq: AtomicU64,
    express: AtomicBool,
    /// Its events go acknowledged (`reliable`, `exactly_once`, `durable`;
    /// see [`Publisher::set_reliability`]).
    acked: AtomicBool,
    /// The event [`Publisher::publish`] reuses, so that a plain publish
    /// allocates nothing once its tag fits: header fields at their defaults,
    /// the publisher name set, the tag and payload replaced per call.
    plain: Mutex<Event>,
    /// Under `follow_priority`: this endpoint on other bands' connections
    /// (the band's session and the endpoint's id there), declared on first
    /// use.
    bands: Mutex<Vec<(String, Session, u32)>>,
    /// Its shared-memory region, if the daemon granted one (`docs/shm.md`).
    shm: Mutex<Option<crate::shm::ShmPublisher>>,
    /// Its `shm` mode, and the session's connection (`Inner::epoch`) when a
    /// region was last asked for: after a reconnect (the daemon forgot the
    /// region) it is asked for again, once per reconnect.
    /// `Off` too when the session cannot map the daemon's memory (a TCP or
    /// TLS daemon), so a publish skips the region path and its locks.
    shm_mode: crate::shm::ShmMode,
    /// The smallest payload put in shared memory (`auto`'s threshold,
    /// `SessionBuilder::shm_threshold`; 0 under `require`).
    shm_min: usize,
    shm_asked: AtomicU64,
    /// A region asked for and not answered yet (after a reconnect, or a
    /// larger one): never waited for, so a subscription callback may
    /// publish; events go over the socket meanwhile.
    shm_ask: Mutex<Option<crate::shm::ShmAsk>>,
}

/// A payload written in place: its length and the writer.
type Filler<'a> = (usize, &'a mut dyn FnMut(&mut [u8]));

fn system_time_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Session {
    /// Declares a publisher endpoint named `name` (unique in the router).
    pub fn declare_publisher(&self, name: &str) -> Result<Publisher> {
        self.declare_publisher_with(name, self.inner().options.shm)
    }

    /// Declares a publisher with its own `shm` mode (see [`crate::ShmMode`]):
    /// `Auto` (the session's default unless [`SessionBuilder::shm`](crate::SessionBuilder::shm) says
    /// otherwise) puts payloads in shared memory when the daemon is on this
    /// host and grants a region, and logs why not otherwise; `Require`
    /// fails instead; `Off` keeps payloads on the socket.
    pub fn declare_publisher_with(
        &self,
        name: &str,
        shm: crate::shm::ShmMode,
    ) -> Result<Publisher> {
        let id = self
            .inner()
            .declare_endpoint(EndpointKind::Publisher, name)?;
        // Under `auto` with a threshold the region is asked for at the
        // first payload that reaches it (`Publisher::send_in_shm`).
        let threshold = match shm {
            crate::shm::ShmMode::Auto => self.inner().options.shm_threshold,
            _ => 0,
        };
        // (A remote daemon is still "asked": that says why at debug level.)
        let region = if threshold > 0 && self.is_same_host() {
            None
        } else {
            match self.open_shm(name, id, shm) {
                Ok(r) => r,
                Err(e) => {
                    self.inner().undeclare_endpoint(id);
                    return Err(e);
                }
            }
        };
        Ok(Publisher::new(
            self.clone(),
            id,
            name.to_owned(),
            region,
            (shm, threshold),
        ))
    }
}

impl Publisher {
    pub(crate) fn new(
        session: Session,
        id: u32,
        name: String,
        shm: Option<crate::shm::ShmPublisher>,
        (shm_mode, shm_min): (crate::shm::ShmMode, usize),
    ) -> Self {
        // A region was asked for when declared, unless a threshold defers
        // it to the first payload that reaches it (no epoch is `u64::MAX`).
        let asked = if shm_min == 0 {
            session.inner().epoch()
        } else {
            u64::MAX
        };
        let shm_asked = AtomicU64::new(asked);
        // `require` over a remote transport was refused when declared.
        let shm_mode = if session.is_same_host() {
            shm_mode
        } else {
            crate::shm::ShmMode::Off
        };
        let mut plain = Event::default();
        plain.header.publisher.clone_from(&name);
        Publisher {
            session,
            id,
            name,
            seq: AtomicU64::new(0),
            express: AtomicBool::new(false),
            acked: AtomicBool::new(false),
            plain: Mutex::new(plain),
            bands: Mutex::new(Vec::new()),
            shm: Mutex::new(shm),
            shm_mode,
            shm_min,
            shm_asked,
            shm_ask: Mutex::new(None),
        }
    }

    /// Express mode (as in Zenoh): every event is written at once, never
    /// batched. Use it for request/response and control traffic where
    /// latency matters more than throughput; the default batches events
    /// published less than [`crate::HOT_INTERVAL`] apart.
    pub fn set_express(&self, express: bool) {
        self.express.store(express, Ordering::Relaxed);
    }

    /// The publisher's end of the `reliability` property. With
    /// `reliable`, `exactly_once` or `durable`, each event is held until
    /// the daemon acknowledges it (it delivered the event to its local
    /// queues and every reliable link it went on holds it), and sent again
    /// after a reconnect; the daemon drops a copy it already routed (keyed
    /// by this session, this publisher and the event's sequence number),
    /// so a lost connection neither loses nor duplicates an event. Events
    /// also cross daemon links reliably. These events never use shared
    /// memory. At the window's bound a publish waits, then fails with
    /// [`Error::AckWindowFull`](crate::Error::AckWindowFull) (see
    /// [`crate::SessionBuilder::ack_window`]). `best_effort` (the default):
    /// fire and forget. See docs/reliability.md.
    pub fn set_reliability(&self, reliability: tagwire_core::qos::Reliability) {
        let acked = reliability != tagwire_core::qos::Reliability::BestEffort;
        self.acked.store(acked, Ordering::Relaxed);
    }

    /// Whether this publisher's events are acknowledged (see
    /// [`set_reliability`](Self::set_reliability)).
    pub fn is_acknowledged(&self) -> bool {
        self.acked.load(Ordering::Relaxed)
    }

    /// The endpoint name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Publishes `payload` on `tag` with default header values. (The same
    /// as `self.event(tag, payload).send()`, without building a new event.)
    pub fn publish(&self, tag: &str, payload: impl Into<Bytes>) -> Result<()> {
        let mut ev = lock(&self.plain);
        // The tag of the previous publish was checked then.
        if ev.header.tag != tag {
            tagwire_core::tags::validate_tag(tag)?;
            ev.header.tag.clear();
            ev.header.tag.push_str(tag);
        }
        ev.header.source_time_ns = 0;
        ev.payload = payload.into();
        let sent = self.stamp_and_send(&mut ev, false, None);
        // Do not keep the caller's payload alive until the next publish.
        ev.payload = Bytes::new();
        sent
    }

    /// Starts an event on `tag` whose header and fields can be set before
    /// [`EventBuilder::send`].
    pub fn event(&self, tag: &str, payload: impl Into<Bytes>) -> EventBuilder<'_> {
        EventBuilder {
            publisher: self,
            event: Event::new(tag, payload),
        }
    }

    /// Sends a prepared event. Its publisher name and sequence number are
    /// set here; a zero source timestamp is set to now.
    pub fn send(&self, mut event: Event) -> Result<()> {
        self.name.clone_into(&mut event.header.publisher);
        tagwire_core::tags::validate_tag(&event.header.tag)?;
        self.stamp_and_send(&mut event, true, None)
    }

    /// Publishes a `len`-byte payload on `tag` that `fill` writes in place:
    /// with a shared-memory region (`docs/shm.md`) the buffer is a loan in
    /// the region's data area, so publishing copies nothing; without one it
    /// is a fresh buffer sent over the socket. The buffer is lent for the
    /// duration of `fill` (it lives in this publisher's region, under its
    /// lock), then published.
    ///
    /// ```no_run
    /// # let session = tagwire::Session::connect("unix:///run/tagwire.sock")?;
    /// let p = session.declare_publisher_with("/cam/pub", tagwire::ShmMode::Auto)?;
    /// p.loan("/cam/frame", 1 << 20, |frame| frame.fill(0x80))?; // a grey 1 MiB frame
    /// # Ok::<(), tagwire::Error>(())
    /// ```
    pub fn loan(&self, tag: &str, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        tagwire_core::tags::validate_tag(tag)?;
        let mut event = Event::new(tag, Bytes::new());
        self.name.clone_into(&mut event.header.publisher);
        let mut fill = Some(fill);
        let mut filler = |buf: &mut [u8]| {
            if let Some(f) = fill.take() {
                f(buf)
            }
        };
        self.stamp_and_send(&mut event, false, Some((len, &mut filler)))
    }

    /// Sets the sequence number and (if zero) the source timestamp of an
    /// event already carrying this publisher's name and a checked tag, and
    /// hands it to the session.
    /// `banded`: the event's priority was given (`send`, `event()`), so under
    /// `follow_priority` it picks the band; a plain `publish` stays on the
    /// session's own connection.
    ///
    /// `fill`: the payload is `len` bytes written by the filler (in the
    /// region when there is one: see [`loan`](Self::loan)).
    fn stamp_and_send(
        &self,
        event: &mut Event,
        banded: bool,
        mut fill: Option<Filler<'_>>,
    ) -> Result<()> {
        event.header.seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let now = now_ns();
        if event.header.source_time_ns == 0 {
            event.header.source_time_ns =
                now.saturating_add_signed(self.session.network_offset(now));
        }
        let express = self.express.load(Ordering::Relaxed);
        let band = if banded {
            self.session.band_for_priority(event.header.priority)?
        } else {
            None
        };
        let acked = self.acked.load(Ordering::Relaxed);
        if band.is_none() && !acked {
            if let Some(sent) = self.send_in_shm(event, express, now, &mut fill) {
                return sent;
            }
        }
        if let Some((len, f)) = fill {
            // No region (or not for this event): fill a buffer of our own.
            let mut buf = vec![0u8; len];
            f(&mut buf);
            event.payload = Bytes::from(buf);
        }
        let on_band;
        let (inner, id) = match band {
            Some(band) => {
                on_band = self.on_band(&band)?;
                (on_band.0.inner(), on_band.1)
            }
            None => (self.session.inner(), self.id),
        };
        if acked {
            return inner.publish_acked(id, event, express, now);
        }
        inner.publish(id, event, express, now)
    }

    /// Whether this publisher puts its payloads in shared memory (the
    /// daemon granted a region; see [`Session::declare_publisher_with`]).
    pub fn uses_shm(&self) -> bool {
        lock(&self.shm).is_some()
    }

    /// Publishes with the payload copied into this publisher's region and
    /// a reference in its place; `None`: not possible for this event (no
    /// region, too large, a reconnect since), the caller uses the socket.
    fn send_in_shm(
        &self,
        event: &mut Event,
        express: bool,
        now: u64,
        fill: &mut Option<Filler<'_>>,
    ) -> Option<Result<()>> {
        if self.shm_mode == crate::shm::ShmMode::Off {
            // Never a region (and none granted: `Off` is never asked).
            return None;
        }
        let len = fill.as_ref().map_or(event.payload.len(), |(len, _)| *len);
        if len < self.shm_min {
            // Small: the socket is cheaper (`auto`'s threshold).
            return None;
        }
        self.send_in_shm_once(event, express, now, fill, true)
    }

    /// [`send_in_shm`](Self::send_in_shm); `may_retry`: if the session
    /// reconnected before the reference was written, try once more in a
    /// region of the new connection (the payload copied there).
    fn send_in_shm_once(
        &self,
        event: &mut Event,
        express: bool,
        now: u64,
        fill: &mut Option<Filler<'_>>,
        may_retry: bool,
    ) -> Option<Result<()>> {
        let mut guard = lock(&self.shm);
        let epoch = self.session.inner().epoch();
        if guard.as_ref().is_some_and(|s| s.epoch != epoch) {
            // The daemon that granted the region is gone or restarted.
            *guard = None;
        }
        let len = fill.as_ref().map_or(event.payload.len(), |(len, _)| *len);
        let mut ask = lock(&self.shm_ask);
        if ask.is_none() {
            let current = guard.as_ref().map(|s| (s.region, s.max, s.at_daemon_limit));
            let want = match current {
                // Reconnected, or the first payload over `auto`'s threshold:
                // ask (once per connection); under a threshold for chunks
                // of twice this payload (there is no region to replace:
                // region ids start at 1).
                // (`send_in_shm` never comes here with `Off`.)
                None if self.shm_asked.swap(epoch, Ordering::Relaxed) != epoch => {
                    Some((self.shm_min > 0).then(|| ((len as u64).saturating_mul(2), 0)))
                }
                // A larger payload than the region holds: ask for a region
                // sized for it (twice, for some room); the daemon caps it at
                // its limit and replaces the old region if it grants one.
                Some((region, max, false)) if len > max => {
                    Some(Some(((len as u64).saturating_mul(2), region)))
                }
                _ => None,
            };
            if let Some(grow) = want {
                // `require` was checked when declared; now it is best effort.
                let mode = match self.shm_mode {
                    crate::shm::ShmMode::Require => crate::shm::ShmMode::Auto,
                    m => m,
                };
                *ask = self
                    .session
                    .ask_shm(&self.name, self.id, mode, grow)
                    .ok()
                    .flatten();
                // Outside a subscription callback the answer is waited for
                // (this event may use it); inside, it is taken when it comes.
                if !self.session.inner().on_reader_thread() {
                    if let Some(a) = ask.take() {
                        let reply = a.wait();
                        self.take_shm_answer(&mut guard, a, reply, epoch);
                    }
                }
            }
        } else if let Some(a) = ask.as_ref() {
            match a.rx.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                answer => {
                    let a = ask.take().expect("checked above");
                    let reply = answer.map_err(|_| crate::error::Error::Disconnected);
                    self.take_shm_answer(&mut guard, a, reply, epoch);
                }
            }
        }
        drop(ask);
        let shm = guard.as_mut()?;
        let stats = &self.session.inner().shm;
        if len > shm.max {
            stats.note_published(false);
            return None;
        }
        let deadline = match event.header.expiry {
            Expiry::Never => tagwire_shm::NO_DEADLINE,
            Expiry::AfterNs(d) => event.header.source_time_ns.saturating_add(d),
            Expiry::AtNs(t) => t,
        };
        let vtime = event.header.virtual_time.unwrap_or(event.header.seq);
        let published = match fill.as_mut() {
            // The caller writes the payload straight into the region (and,
            // should no loan be had, into the socket path's buffer instead).
            Some((len, f)) => shm.producer.loan(*len, now).map(|mut loan| {
                f(&mut loan);
                loan.publish(vtime, deadline)
            }),
            None => shm
                .producer
                .publish_copy(&event.payload, vtime, deadline, now),
        };
        let seq = match published {
            Ok(seq) => seq,
            Err(e) => {
                tracing::debug!(
                    "publisher {}: shared memory: {e}; this event goes over the socket",
                    self.name
                );
                stats.note_published(false);
                return None;
            }
        };
        let r = tagwire_proto::ShmRef {
            region: shm.region,
            seq,
            len: len as u32,
            chunk: 0,
        };
        let granted_on = shm.epoch;
        // A loan's payload is only in the region: kept at hand (a reference
        // count) in case the connection changes before it is written.
        let loaned = fill.is_some().then(|| shm.producer.region());
        drop(guard);
        let payload = std::mem::replace(&mut event.payload, Bytes::copy_from_slice(&r.encode()));
        event.header.payload_in_shm = true;
        let sent = self
            .session
            .inner()
            .publish_in_region(self.id, event, express, now, granted_on);
        event.header.payload_in_shm = false;
        event.payload = payload;
        match sent {
            Ok(true) => {
                stats.note_published(true);
                Some(Ok(()))
            }
            // The session reconnected meanwhile: the daemon now there never
            // granted that region, so the payload goes inline.
            Ok(false) => {
                {
                    let mut guard = lock(&self.shm);
                    if guard.as_ref().is_some_and(|s| s.epoch == granted_on) {
                        *guard = None;
                    }
                }
                if let Some(region) = loaned {
                    match region.copy_published(0, seq) {
                        Ok(bytes) => event.payload = Bytes::from(bytes),
                        Err(e) => {
                            stats.note_unsent(1);
                            return Some(Err(crate::error::Error::ShmPacketGone {
                                publisher: self.name.clone(),
                                reason: e.to_string(),
                            }));
                        }
                    }
                }
                *fill = None;
                if may_retry {
                    return self.send_in_shm_once(event, express, now, fill, false);
                }
                stats.note_published(false);
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Installs the region an `shm_open` answer grants (or, for a larger
    /// region refused or capped, marks the current one at the daemon's limit).
    fn take_shm_answer(
        &self,
        guard: &mut Option<crate::shm::ShmPublisher>,
        a: crate::shm::ShmAsk,
        reply: Result<tagwire_core::connection::Reply>,
        epoch: u64,
    ) {
        let granted = self.session.answer_shm(&a, reply).ok().flatten();
        match (granted, a.grow) {
            (Some(p), grow) if p.epoch == epoch => {
                let short = grow.is_some_and(|(want, _)| (p.max as u64) < want / 2);
                *guard = Some(p);
                if let Some(s) = guard.as_mut() {
                    s.at_daemon_limit = short;
                }
            }
            (_, Some(_)) => {
                if let Some(s) = guard.as_mut() {
                    s.at_daemon_limit = true;
                }
            }
            (_, None) => {}
        }
    }

    /// This endpoint on band `band`'s connection (declared there on first
    /// use: the router lets one session publish under its name on each of
    /// its band connections).
    fn on_band(&self, band: &str) -> Result<(Session, u32)> {
        if let Some((_, s, id)) = lock(&self.bands).iter().find(|(b, _, _)| b == band) {
            return Ok((s.clone(), *id));
        }
        let session = self.session.on_band(band)?;
        let id = session
            .inner()
            .declare_endpoint(tagwire_proto::EndpointKind::Publisher, &self.name)?;
        lock(&self.bands).push((band.to_owned(), session.clone(), id));
        Ok((session, id))
    }

    /// The session this publisher belongs to.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Undeclares the endpoint and returns once the router has done so, so
    /// that its name is free to any other session (dropping a publisher
    /// undeclares too, without waiting). Fails only if a round trip fails;
    /// a lost connection has already freed the name.
    pub fn close(self) -> Result<()> {
        let mut sessions: Vec<Session> = lock(&self.bands)
            .iter()
            .map(|(_, s, _)| s.clone())
            .collect();
        sessions.push(self.session.clone());
        drop(self);
        sessions.iter().try_for_each(Session::sync)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        for (_, s, id) in lock(&self.bands).drain(..) {
            s.inner().undeclare_endpoint(id);
        }
        self.session.inner().undeclare_endpoint(self.id);
    }
}

/// An event being prepared; see [`Publisher::event`].
#[derive(Debug)]
#[must_use = "an event is only published by .send()"]
pub struct EventBuilder<'a> {
    publisher: &'a Publisher,
    event: Event,
}

impl EventBuilder<'_> {
    /// Adds a filterable field (names are unique; a repeated name replaces the value).
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        match self.event.fields.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.event.fields.push((name.to_owned(), value)),
        }
        self
    }

    /// Sets the priority, 0 (lowest) to 255 (highest).
    pub fn priority(mut self, p: u8) -> Self {
        self.event.header.priority = p;
        self
    }

    /// Expires the event `d` after its source timestamp (TAO `timeout`).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.event.header.expiry = Expiry::AfterNs(d.as_nanos().min(u64::MAX as u128) as u64);
        self
    }

    /// Expires the event at `t` (TAO `stop_time`).
    pub fn stop_time(mut self, t: SystemTime) -> Self {
        self.event.header.expiry = Expiry::AtNs(system_time_ns(t));
        self
    }

    /// Earliest delivery time (TAO `start_time`).
    pub fn start_time(mut self, t: SystemTime) -> Self {
        self.event.header.start_time_ns = Some(system_time_ns(t));
        self
    }

    /// Structured-event type name (TAO), e.g. `CommunicationsAlarm`.
    pub fn type_name(mut self, s: &str) -> Self {
        self.event.header.type_name = Some(s.to_owned());
        self
    }

    /// Structured-event name (TAO), e.g. `lost_packet`.
    pub fn event_name(mut self, s: &str) -> Self {
        self.event.header.event_name = Some(s.to_owned());
        self
    }

    /// Virtual time: the event's position in its stream.
    pub fn virtual_time(mut self, vt: u64) -> Self {
        self.event.header.virtual_time = Some(vt);
        self
    }

    /// Source timestamp, ns since the Unix epoch (default: now).
    pub fn source_time_ns(mut self, ns: u64) -> Self {
        self.event.header.source_time_ns = ns;
        self
    }

    /// Publishes the event.
    pub fn send(self) -> Result<()> {
        self.publisher.send(self.event)
    }
}
