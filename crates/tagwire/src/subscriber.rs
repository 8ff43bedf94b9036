//! Subscriptions and the three ways to receive: a blocking receiver (and
//! iterator), an async stream, and a callback.
//!
//! Which to pick: a **callback** runs on the session's reader thread with no
//! hand-off, so it has the lowest latency, but it must not block (it may
//! publish). A **receiver** ([`Subscriber`]) queues events for your thread:
//! use it when handling an event takes time. Its queue is bounded like the
//! router's (`max_queue_length`, `discard`), so a slow application drops by
//! its own policy instead of stalling the connection. A subscription with
//! acknowledged delivery (`reliability` `reliable` or more) is acknowledged
//! only as the application reads, so its queue here never overflows: the
//! daemon holds the rest back (and applies the policy there).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tagwire_core::qos::DEFAULT_QUEUE_LENGTH;
use tagwire_core::queue::DiscardPolicy;
use tagwire_proto::EndpointKind;

use crate::error::{Error, Result};
use crate::playout::{PlayoutProbe, PlayoutStats};
use crate::queue::SubQueue;
use crate::sample::Sample;
use crate::session::Session;
use crate::sink::Sink;

/// Builds a subscription; see [`Session::subscribe`].
#[must_use = "a subscription is made by .receiver() or .callback()"]
pub struct SubscriptionBuilder {
    session: Session,
    pattern: String,
    endpoint: Option<String>,
    qos: Vec<(String, String)>,
    max_queue_length: usize,
    local_queue_length: Option<usize>,
    discard: DiscardPolicy,
    replay: Option<(crate::replay::ReplayFrom, crate::spacing::Spacing)>,
    playout: Option<crate::playout::PlayoutConfig>,
    resume: Option<bool>,
    resume_point: Option<crate::resume::ResumePoint>,
    playout_spin: std::time::Duration,
    on_error: Option<Box<dyn Fn(Error) + Send + Sync>>,
}

static AUTO_ENDPOINT: AtomicU64 = AtomicU64::new(0);

impl SubscriptionBuilder {
    pub(crate) fn new(session: Session, pattern: &str) -> Self {
        SubscriptionBuilder {
            session,
            pattern: pattern.to_owned(),
            endpoint: None,
            qos: Vec::new(),
            max_queue_length: DEFAULT_QUEUE_LENGTH,
            local_queue_length: None,
            discard: DiscardPolicy::default(),
            replay: None,
            playout: None,
            resume: None,
            resume_point: None,
            playout_spin: std::time::Duration::ZERO,
            on_error: None,
        }
    }

    /// Names the subscriber endpoint (default: `<session name>/sub<N>`).
    pub fn endpoint(mut self, name: &str) -> Self {
        self.endpoint = Some(name.to_owned());
        self
    }

    /// Bounds the subscriber's queue, in the router and in this process.
    pub fn max_queue_length(mut self, n: usize) -> Self {
        self.max_queue_length = n;
        self.qos.push(("max_queue_length".into(), n.to_string()));
        self
    }

    /// Bounds only this process's queue (default: the
    /// [`max_queue_length`](Self::max_queue_length)). A larger local queue
    /// absorbs bursts that the application reads more slowly than the
    /// connection delivers them; each queued event holds its memory until
    /// read, so mind the event size.
    pub fn local_queue_length(mut self, n: usize) -> Self {
        self.local_queue_length = Some(n);
        self
    }

    /// What a full queue does, in the router and in this process.
    pub fn discard(mut self, policy: DiscardPolicy) -> Self {
        self.discard = policy;
        self.qos.push(("discard".into(), policy.to_string()));
        self
    }

    /// Adds a channel-level content filter in the constraint language
    /// (`docs/filters.md`), e.g. `$priority < 2 and $.severity > 3`. Several
    /// filters are alternatives (any match passes). A filter that does not
    /// compile makes the subscription fail with `InvalidFilter`.
    pub fn filter(self, constraint: &str) -> Self {
        self.qos("filter", constraint)
    }

    /// Sets a mapping filter that rewrites this channel's copy of matching
    /// events, e.g. `map priority=high when $.severity > 3`.
    pub fn map(self, mapping: &str) -> Self {
        self.qos("map", mapping)
    }

    /// Sets any QoS property by name, as users type them (`docs/protocol.md`).
    pub fn qos(mut self, name: &str, value: &str) -> Self {
        self.qos.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Replays what the daemon's durable store holds of this tag from
    /// `from` first, then continues live, with no gap and no duplicate at
    /// the seam (docs/reliability.md, "Replay"). The pattern must be a tag
    /// whose `reliability` is `durable` at the daemon. The replay runs on a
    /// thread of its own; if it fails, a receiver's
    /// [`recv`](Subscriber::recv) returns [`Error::Replay`] (a callback
    /// subscription's [`on_error`](Self::on_error) gets it).
    pub fn replay_from(
        mut self,
        from: crate::replay::ReplayFrom,
        spacing: crate::spacing::Spacing,
    ) -> Self {
        self.replay = Some((from, spacing));
        self
    }

    /// Whether the subscription resumes from the daemon's durable store
    /// after each reconnect, from the last event it handed over, with no
    /// gap and no duplicate — also when the daemon restarted or was killed
    /// and lost what it held for the subscription (docs/reliability.md,
    /// "Resumed after a restart of the daemon"). On by default for a
    /// subscription made with [`replay_from`](Self::replay_from) or with
    /// `qos("reliability", "durable")` on one tag (no wildcard) and no
    /// `filter`, `map`, `scale`, `min_interval`, `buffer` or `playout` of
    /// its own (replayed events do not go through the daemon's channel
    /// services); `true` on a pattern with a wildcard fails the
    /// subscription. The tag must be
    /// durable at the daemon; if the resume replay fails, the
    /// subscription goes on live and the failure is logged.
    pub fn resume(mut self, on: bool) -> Self {
        self.resume = Some(on);
        self
    }

    /// Resumes where a previous subscription (of an earlier run of this
    /// process) stopped: replays the store from a little before `point`
    /// and drops what it says was taken, then continues live and resumes
    /// after reconnects as [`resume`](Self::resume) does. The pattern must
    /// be one durable tag. With [`replay_from`](Self::replay_from) too, the
    /// replay starts there instead. An empty point replays nothing.
    pub fn resume_from(mut self, point: crate::resume::ResumePoint) -> Self {
        self.resume_point = Some(point);
        self
    }

    /// Plays the subscription's events out **in this process** keeping the
    /// publisher's spacing (their source times) after `playout`'s delay:
    /// the time-differential service of the daemon's `playout=tds:D`
    /// (`qos("playout", …)`), run here instead, so that the jitter of the
    /// whole path, the last hop included, is removed (docs/time.md, "In
    /// the client library"). Parse one from text with
    /// `"tds:100ms".parse::<PlayoutConfig>()`. It holds at most the local
    /// queue's bound of events (and 8 MiB); a thread per subscription
    /// hands them over. [`Subscriber::playout_stats`] shows what it did.
    pub fn playout(mut self, playout: crate::playout::PlayoutConfig) -> Self {
        self.playout = Some(playout);
        self
    }

    /// With [`playout`](Self::playout): its thread wakes `spin` before each
    /// release and busy-waits the rest, so that events are handed over
    /// within a few µs of their due time instead of the kernel timer's
    /// wake-up (p99 ~140 µs for a real-time thread on a 2-vCPU VM; see
    /// docs/time.md, "Spinning for precision"). It costs up to `spin` of a
    /// CPU per release (at 2,000 events/s and 150 µs, 30 % of a core); at
    /// most [`MAX_PLAYOUT_SPIN`](crate::playout::MAX_PLAYOUT_SPIN) (1 ms,
    /// longer is cut to it). Use it with a callback subscription: a queue's
    /// reader thread adds its own wake-up back. Default: no spin.
    pub fn playout_spin(mut self, spin: std::time::Duration) -> Self {
        self.playout_spin = spin;
        self
    }

    /// For a callback subscription: `f` runs when the subscription ends
    /// for a reason other than its own drop or the session's close — its
    /// endpoint name lost across a reconnect ([`Error::EndpointLost`]), or
    /// a failed replay ([`Error::Replay`]). Without it, such an error is
    /// logged. (A receiver gets the error from `recv`.)
    pub fn on_error(mut self, f: impl Fn(Error) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Box::new(f));
        self
    }

    /// Subscribes; events queue for [`Subscriber::recv`], its iterator or its stream.
    pub fn receiver(self) -> Result<Subscriber> {
        let bound = self.local_queue_length.unwrap_or(self.max_queue_length);
        let queue = SubQueue::new(bound, self.discard);
        let (session, sub, playout) = self.create(Sink::Queue(queue.clone()))?;
        Ok(Subscriber {
            session,
            sub,
            queue,
            playout,
        })
    }

    /// Subscribes; `f` runs on the session's reader thread for each event.
    /// It must not block; it may publish.
    pub fn callback(
        mut self,
        f: impl Fn(Sample) + Send + Sync + 'static,
    ) -> Result<CallbackSubscription> {
        let on_error = self.on_error.take();
        let (session, sub, playout) = self.create(Sink::Callback(Box::new(f), on_error))?;
        Ok(CallbackSubscription {
            session,
            sub,
            playout,
        })
    }

    fn create(self, sink: Sink) -> Result<(Session, u32, Option<PlayoutProbe<Sink>>)> {
        tagwire_core::tags::Pattern::parse(&self.pattern)?;
        if self.replay.is_some() {
            tagwire_core::tags::validate_tag(&self.pattern).map_err(|e| Error::Replay {
                tag: self.pattern.clone(),
                reason: format!("a replay reads one tag, not a pattern: {e}"),
            })?;
        }
        let inner = self.session.inner().clone();
        let name = self.endpoint.unwrap_or_else(|| {
            format!(
                "{}/sub{}",
                self.session.name(),
                AUTO_ENDPOINT.fetch_add(1, Ordering::Relaxed)
            )
        });
        let endpoint = inner.declare_endpoint(EndpointKind::Subscriber, &name)?;
        let mut sink = Arc::new(sink);
        let mut probe = None;
        if let Some(cfg) = self.playout {
            let bound = self.local_queue_length.unwrap_or(self.max_queue_length);
            match crate::playout::Playout::start(cfg, self.playout_spin, bound, sink) {
                Ok((p, pr)) => {
                    sink = Arc::new(Sink::Playout(p));
                    probe = Some(pr);
                }
                Err(e) => {
                    inner.undeclare_endpoint(endpoint);
                    return Err(e.into());
                }
            }
        }
        let one_tag = tagwire_core::tags::validate_tag(&self.pattern).is_ok();
        let durable = self
            .qos
            .iter()
            .any(|(k, v)| k == "reliability" && v == "durable");
        let wants = self.resume_point.is_some() || self.resume == Some(true);
        let resume = match self.resume {
            _ if wants && !one_tag => {
                inner.undeclare_endpoint(endpoint);
                return Err(Error::Replay {
                    tag: self.pattern.clone(),
                    reason: "a resume replays one tag, not a pattern".into(),
                });
            }
            _ if self.resume_point.is_some() => true,
            Some(on) => on,
            // Replayed events bypass the daemon's channel filters, scaling
            // and time services: a subscription shaped by them is resumed
            // only when it asks.
            None => {
                let shaped = self.qos.iter().any(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "filter" | "map" | "scale" | "min_interval" | "buffer" | "playout"
                    )
                });
                self.replay.is_some() || (durable && one_tag && !shaped)
            }
        };
        // A saved point: replay from a little before it (unless the
        // application asked for its own start).
        let replay = self.replay.or_else(|| {
            let point = self.resume_point.as_ref()?;
            Some((
                crate::resume::start_of(point)?,
                crate::spacing::Spacing::Fast,
            ))
        });
        let (sink, seam, resumer) = match (replay, resume) {
            (_, true) => {
                let r = crate::resume::Resume::new(
                    &self.pattern,
                    sink,
                    crate::replay::opener(&self.session),
                );
                if let Some(point) = &self.resume_point {
                    r.seed(point);
                }
                (Arc::new(Sink::Resume(r.clone())), None, Some(r))
            }
            (None, false) => (sink, None, None),
            (Some(_), false) => {
                let seam = crate::seam::Seam::new(sink);
                (Arc::new(Sink::Seam(seam.clone())), Some(seam), None)
            }
        };
        // The seam holds live events from before the subscription is made;
        // the replay reads the store after it is.
        let prepared = match (&resumer, replay) {
            (Some(r), Some((from, _))) => Some(r.prepare(from)),
            _ => None,
        };
        match inner.add_subscription(endpoint, &self.pattern, self.qos, sink) {
            Ok(sub) => {
                if let (Some(r), Some(p), Some((from, spacing))) = (&resumer, prepared, replay) {
                    r.start(p, from, spacing)?;
                }
                if let (Some((from, spacing)), Some(seam)) = (self.replay, seam) {
                    let session = self.session.clone();
                    let tag = self.pattern.clone();
                    std::thread::Builder::new()
                        .name("tagwire-replay".into())
                        .spawn(move || crate::replay::run(session, tag, from, spacing, seam))?;
                }
                Ok((self.session, sub, probe))
            }
            Err(e) => {
                inner.undeclare_endpoint(endpoint);
                Err(e)
            }
        }
    }
}

impl Session {
    /// Starts building a subscription to `pattern` (`*` one level, `**` any
    /// depth); finish with `.receiver()`, `.callback(f)`.
    pub fn subscribe(&self, pattern: &str) -> SubscriptionBuilder {
        SubscriptionBuilder::new(self.clone(), pattern)
    }
}

/// A subscription whose events queue for the application's thread.
/// Dropping it unsubscribes.
pub struct Subscriber {
    session: Session,
    sub: u32,
    queue: Arc<SubQueue>,
    /// Its client-side playout, if it has one.
    playout: Option<PlayoutProbe<Sink>>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("sub", &self.sub)
            .finish()
    }
}

impl Subscriber {
    /// Waits for the next event. Fails with [`Error::Closed`] once the session is closed.
    pub fn recv(&self) -> Result<Sample> {
        self.queue.pop_until(None)?.ok_or(Error::Closed)
    }

    /// Waits up to `d` for the next event; `Ok(None)` on timeout.
    pub fn recv_timeout(&self, d: Duration) -> Result<Option<Sample>> {
        self.queue.pop_until(Some(Instant::now() + d))
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> Result<Option<Sample>> {
        self.queue.pop_until(Some(Instant::now()))
    }

    /// Waits for the next event without blocking a thread.
    pub async fn recv_async(&self) -> Result<Sample> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Result<Sample>> {
        self.queue.poll_pop(cx)
    }

    /// A blocking iterator over events; it ends when the session closes.
    pub fn iter(&self) -> impl Iterator<Item = Sample> + '_ {
        std::iter::from_fn(move || self.recv().ok())
    }

    /// Events dropped by this process's queue because the application did
    /// not read fast enough (a slow consumer), by the subscription's discard
    /// policy. The router counts the drops of its own queue separately
    /// (`tagwire list`, [`crate::Listing`]).
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }

    /// What its client-side playout ([`SubscriptionBuilder::playout`]) did
    /// so far; `None` without one.
    pub fn playout_stats(&self) -> Option<PlayoutStats> {
        self.playout.as_ref().and_then(|p| p.stats())
    }

    /// The session this subscription belongs to.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

impl futures_core::Stream for Subscriber {
    type Item = Sample;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Sample>> {
        self.poll_recv(cx).map(Result::ok)
    }
}

impl Subscriber {
    /// Unsubscribes and returns once the router has done so: the
    /// subscription's endpoint name is then free to any other session
    /// (dropping unsubscribes too, without waiting).
    pub fn close(self) -> Result<()> {
        let session = self.session.clone();
        drop(self);
        session.sync()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Some(p) = &self.playout {
            p.stop();
        }
        self.session.inner().remove_subscription(self.sub);
    }
}

/// A subscription served by a callback. Dropping it unsubscribes.
pub struct CallbackSubscription {
    session: Session,
    sub: u32,
    /// Its client-side playout, if it has one.
    playout: Option<PlayoutProbe<Sink>>,
}

impl std::fmt::Debug for CallbackSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSubscription")
            .field("sub", &self.sub)
            .finish()
    }
}

impl Drop for CallbackSubscription {
    fn drop(&mut self) {
        if let Some(p) = &self.playout {
            p.stop();
        }
        self.session.inner().remove_subscription(self.sub);
    }
}
