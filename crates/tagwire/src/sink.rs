//! Where the session's reader thread puts a subscription's events: the
//! application's queue or callback, or a stage in front of it that holds,
//! replays or plays them out first (a seam, a resume, a playout), each of
//! which hands on to the sink behind it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::deliver::Deliver;
use crate::error::Error;
use crate::playout::Playout;
use crate::queue::SubQueue;
use crate::resume::Resume;
use crate::sample::Sample;
use crate::seam::Seam;

/// Where the reader thread puts a subscription's events.
pub(crate) enum Sink {
    Queue(Arc<SubQueue>),
    /// The callback, and what to call when the subscription fails.
    Callback(
        Box<dyn Fn(Sample) + Send + Sync>,
        Option<Box<dyn Fn(Error) + Send + Sync>>,
    ),
    /// A subscription that replays first (crate::seam).
    Seam(Arc<Seam<Sink>>),
    /// A subscription played out in this process (crate::playout).
    Playout(Playout<Sink>),
    /// A subscription resumed from the store after each reconnect
    /// (crate::resume): what the reader thread delivers to.
    Resume(Arc<Resume<Sink>>),
}

impl Sink {
    /// Events handed to this sink that the application has not read yet
    /// (a receiver's queue; 0 for the other sinks, which take events as
    /// they come or hold them themselves). An acknowledged subscription
    /// acknowledges an event only once it is read, so the daemon's window
    /// for it bounds what waits here.
    pub(crate) fn unread(&self) -> u64 {
        match self {
            Sink::Queue(q) => q.len() as u64,
            _ => 0,
        }
    }
}

impl Deliver for Sink {
    /// Hands over a checked sample (a shared-memory payload past its
    /// deadline is skipped when a callback gets it or the application takes it).
    fn deliver_sample(&self, sample: Sample) {
        match self {
            Sink::Queue(q) => q.push(sample),
            Sink::Callback(f, _) => {
                if let Some(s) = sample.settle() {
                    f(s)
                }
            }
            Sink::Seam(s) => s.offer(sample),
            Sink::Playout(p) => p.offer(sample),
            Sink::Resume(r) => r.offer(sample),
        }
    }

    /// Waits until the application's queue behind this sink has room (a
    /// replay thread, before it hands over a stored event); at once for a
    /// callback or a playout, which take events as they come.
    fn wait_for_room(&self) {
        match self {
            Sink::Queue(q) => q.wait_for_room(),
            Sink::Seam(s) => s.inner.wait_for_room(),
            Sink::Resume(r) => r.inner.wait_for_room(),
            Sink::Callback(..) | Sink::Playout(_) => {}
        }
    }

    fn close(&self) {
        match self {
            Sink::Queue(q) => q.close(),
            Sink::Seam(s) => s.inner.close(),
            Sink::Playout(p) => p.close(),
            Sink::Resume(r) => r.inner.close(),
            Sink::Callback(..) => {}
        }
    }

    /// Ends the subscription with `error`: a receiver's `recv` returns it
    /// (after what is queued), a callback's `on_error` gets it.
    fn fail(&self, error: Error) {
        match self {
            Sink::Queue(q) => q.fail(error),
            Sink::Callback(_, Some(f)) => f(error),
            Sink::Callback(_, None) => tracing::error!("subscription ended: {error}"),
            Sink::Seam(s) => s.inner.fail(error),
            Sink::Playout(p) => p.fail(error),
            Sink::Resume(r) => r.inner.fail(error),
        }
    }
}

/// After a reconnect, or when the daemon reaches daemons again that it
/// could not (`Healed`; `why` says which, for the log): every resumable
/// subscription of the session replays from its last delivered event.
pub(crate) fn resync(sinks: &HashMap<u32, Arc<Sink>>, why: &str) {
    for sink in sinks.values() {
        if let Sink::Resume(r) = &**sink {
            r.resync(why);
        }
    }
}
