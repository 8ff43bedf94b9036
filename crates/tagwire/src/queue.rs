//! A receiver's queue ([`Subscriber`](crate::Subscriber)): bounded like
//! the router's (`max_queue_length`, `discard`), filled by the session's
//! reader thread, emptied by the application's thread (blocking, with a
//! deadline, or async), and waited on for room by a replay.

use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tagwire_core::queue::{BoundedQueue, DiscardPolicy, Pushed};

use crate::error::{Error, Result};
use crate::sample::Sample;
use crate::sync::lock;

pub(crate) struct SubQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// Signalled when an event is taken while a replay waits for room.
    room: Condvar,
}

struct QueueState {
    q: BoundedQueue<Sample>,
    waiters: usize,
    /// Replay threads waiting for room ([`SubQueue::wait_for_room`]).
    room_waiters: usize,
    waker: Option<Waker>,
    closed: bool,
    /// Why the subscription ended, if not by a close.
    failed: Option<Error>,
}

impl SubQueue {
    pub(crate) fn new(bound: usize, policy: DiscardPolicy) -> Arc<Self> {
        Arc::new(SubQueue {
            state: Mutex::new(QueueState {
                q: BoundedQueue::new(bound, policy),
                waiters: 0,
                room_waiters: 0,
                waker: None,
                closed: false,
                failed: None,
            }),
            ready: Condvar::new(),
            room: Condvar::new(),
        })
    }

    /// Waits while the queue is full (or until it closes): a replay reads
    /// the store no faster than the application takes its events, so that
    /// replayed events are never dropped at this queue's bound (live ones
    /// are, by its discard policy).
    pub(crate) fn wait_for_room(&self) {
        let mut st = lock(&self.state);
        while !st.closed && st.q.len() >= st.q.bound() {
            st.room_waiters += 1;
            st = self
                .room
                .wait_timeout(st, ROOM_POLL)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
            st.room_waiters -= 1;
        }
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.state).q.len()
    }

    pub(crate) fn push(&self, s: Sample) {
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

    pub(crate) fn fail(&self, error: Error) {
        lock(&self.state).failed = Some(error);
        self.close();
    }

    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        let waker = st.waker.take();
        drop(st);
        self.ready.notify_all();
        self.room.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }

    pub(crate) fn pop_until(&self, deadline: Option<Instant>) -> Result<Option<Sample>> {
        let mut st = lock(&self.state);
        loop {
            if let Some(s) = st.q.pop() {
                if st.room_waiters > 0 {
                    self.room.notify_all();
                }
                // An expired shared-memory payload is skipped (counted).
                match s.settle() {
                    Some(s) => return Ok(Some(s)),
                    None => continue,
                }
            }
            if st.closed {
                return Err(st.failed.take().unwrap_or(Error::Closed));
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

    /// The next event for an async receiver, or its waker registered.
    pub(crate) fn poll_pop(&self, cx: &mut Context<'_>) -> Poll<Result<Sample>> {
        let mut st = lock(&self.state);
        while let Some(s) = st.q.pop() {
            if st.room_waiters > 0 {
                self.room.notify_all();
            }
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

    /// Events this queue dropped by its discard policy.
    pub(crate) fn dropped(&self) -> u64 {
        lock(&self.state).q.dropped()
    }
}

/// How long a replay waiting for room sleeps before it looks again (it is
/// woken when an event is taken; this bounds a missed wake-up).
const ROOM_POLL: Duration = Duration::from_millis(100);
