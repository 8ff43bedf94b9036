//! Subscriptions and the three ways to receive: a blocking receiver (and
//! iterator), an async stream, and a callback.
//!
//! Which to pick: a **callback** runs on the session's reader thread with no
//! hand-off, so it has the lowest latency, but it must not block (it may
//! publish). A **receiver** ([`Subscriber`]) queues events for your thread:
//! use it when handling an event takes time. Its queue is bounded like the
//! router's (`max_queue_length`, `discard`), so a slow application drops by
//! its own policy instead of stalling the connection.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tagwire_core::qos::DEFAULT_QUEUE_LENGTH;
use tagwire_core::queue::{BoundedQueue, DiscardPolicy, Pushed};
use tagwire_proto::EndpointKind;

use crate::error::{Error, Result};
use crate::sample::Sample;
use crate::session::{lock, Session};

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

    /// Subscribes; events queue for [`Subscriber::recv`], its iterator or its stream.
    pub fn receiver(self) -> Result<Subscriber> {
        let bound = self.local_queue_length.unwrap_or(self.max_queue_length);
        let queue = SubQueue::new(bound, self.discard);
        let (session, sub) = self.create(Sink::Queue(queue.clone()))?;
        Ok(Subscriber {
            session,
            sub,
            queue,
        })
    }

    /// Subscribes; `f` runs on the session's reader thread for each event.
    /// It must not block; it may publish.
    pub fn callback(
        self,
        f: impl Fn(Sample) + Send + Sync + 'static,
    ) -> Result<CallbackSubscription> {
        let (session, sub) = self.create(Sink::Callback(Box::new(f)))?;
        Ok(CallbackSubscription { session, sub })
    }

    fn create(self, sink: Sink) -> Result<(Session, u32)> {
        tagwire_core::tags::Pattern::parse(&self.pattern)?;
        let inner = self.session.inner().clone();
        let name = self.endpoint.unwrap_or_else(|| {
            format!(
                "{}/sub{}",
                self.session.name(),
                AUTO_ENDPOINT.fetch_add(1, Ordering::Relaxed)
            )
        });
        let endpoint = inner.declare_endpoint(EndpointKind::Subscriber, &name)?;
        match inner.add_subscription(endpoint, &self.pattern, self.qos, Arc::new(sink)) {
            Ok(sub) => Ok((self.session, sub)),
            Err(e) => {
                inner.undeclare_endpoint(endpoint);
                Err(e)
            }
        }
    }
}

/// Where the reader thread puts a subscription's events.
pub(crate) enum Sink {
    Queue(Arc<SubQueue>),
    Callback(Box<dyn Fn(Sample) + Send + Sync>),
}

impl Sink {
    /// Hands over a checked sample (a shared-memory payload past its
    /// deadline is skipped when a callback gets it or the application takes it).
    pub(crate) fn deliver_sample(&self, sample: Sample) {
        match self {
            Sink::Queue(q) => q.push(sample),
            Sink::Callback(f) => {
                if let Some(s) = sample.settle() {
                    f(s)
                }
            }
        }
    }

    pub(crate) fn close(&self) {
        if let Sink::Queue(q) = self {
            q.close();
        }
    }
}

pub(crate) struct SubQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

struct QueueState {
    q: BoundedQueue<Sample>,
    waiters: usize,
    waker: Option<Waker>,
    closed: bool,
}

impl SubQueue {
    fn new(bound: usize, policy: DiscardPolicy) -> Arc<Self> {
        Arc::new(SubQueue {
            state: Mutex::new(QueueState {
                q: BoundedQueue::new(bound, policy),
                waiters: 0,
                waker: None,
                closed: false,
            }),
            ready: Condvar::new(),
        })
    }

    fn push(&self, s: Sample) {
        let size = s.raw().len();
        let mut st = lock(&self.state);
        if let Pushed::Rejected(_) | Pushed::DroppedNewest(_) = st.q.push(s, size) {
            return;
        }
        let notify = st.waiters > 0;
        let waker = st.waker.take();
        drop(st);
        if notify {
            self.ready.notify_one();
        }
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        let waker = st.waker.take();
        drop(st);
        self.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn pop_until(&self, deadline: Option<Instant>) -> Result<Option<Sample>> {
        let mut st = lock(&self.state);
        loop {
            if let Some(s) = st.q.pop() {
                // An expired shared-memory payload is skipped (counted).
                match s.settle() {
                    Some(s) => return Ok(Some(s)),
                    None => continue,
                }
            }
            if st.closed {
                return Err(Error::Closed);
            }
            st.waiters += 1;
            st = match deadline {
                None => self.ready.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        st.waiters -= 1;
                        return Ok(None);
                    }
                    self.ready
                        .wait_timeout(st, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            st.waiters -= 1;
        }
    }
}

/// A subscription whose events queue for the application's thread.
/// Dropping it unsubscribes.
pub struct Subscriber {
    session: Session,
    sub: u32,
    queue: Arc<SubQueue>,
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
        let mut st = lock(&self.queue.state);
        while let Some(s) = st.q.pop() {
            if let Some(s) = s.settle() {
                return Poll::Ready(Ok(s));
            }
        }
        if st.closed {
            return Poll::Ready(Err(Error::Closed));
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
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
        lock(&self.queue.state).q.dropped()
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
        self.session.inner().remove_subscription(self.sub);
    }
}

/// A subscription served by a callback. Dropping it unsubscribes.
pub struct CallbackSubscription {
    session: Session,
    sub: u32,
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
        self.session.inner().remove_subscription(self.sub);
    }
}
