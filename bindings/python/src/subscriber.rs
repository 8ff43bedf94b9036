//! `tagwire.Subscriber` (blocking iterator, `async for`) and
//! `tagwire.CallbackSubscription`.
//!
//! A blocking `recv` releases the GIL and waits in slices of
//! [`WAIT_SLICE`], taking the GIL between slices only to let Python handle
//! signals (Ctrl-C ends a blocked `for sample in sub`). `async for` uses no
//! thread: the library's queue wakes a waker that writes one byte to a
//! socket pair, and asyncio watches the other end (`loop.add_reader`). A
//! callback runs on a thread of its own that takes events from a bounded
//! queue like any receiver, so a slow Python callback never holds up the
//! session's reader thread (other subscriptions keep flowing); its queue
//! drops by the subscription's `discard` policy instead.

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::to_py;
use crate::sample::PySample;

/// The longest a blocked `recv` goes without looking at Python's signals.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Wakes an asyncio loop: one byte on a non-blocking socket pair (a full
/// socket already means "wake up", so a failed write is fine).
struct SocketWaker(UnixStream);

impl Wake for SocketWaker {
    fn wake(self: Arc<Self>) {
        let _ = (&self.0).write(&[1]);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let _ = (&self.0).write(&[1]);
    }
}

/// The read end asyncio watches and the waker that writes to it.
struct AsyncWake {
    read: UnixStream,
    waker: Arc<SocketWaker>,
}

impl AsyncWake {
    fn new() -> std::io::Result<Self> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        Ok(AsyncWake {
            read,
            waker: Arc::new(SocketWaker(write)),
        })
    }

    /// Reads every pending wake-up byte (bounded: the socket buffer).
    fn drain(&self) {
        let mut buf = [0u8; 64];
        while let Ok(n) = (&self.read).read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    }
}

/// What one bounded wait gave.
pub(crate) enum Got {
    Sample(tagwire::Sample),
    Timeout,
    Closed,
}

/// Waits for the next sample up to `timeout` (forever: `None`), the GIL
/// released, checking signals between slices and `closed` after each.
pub(crate) fn wait_sample(
    py: Python<'_>,
    sub: &tagwire::Subscriber,
    timeout: Option<Duration>,
    closed: &AtomicBool,
) -> PyResult<Got> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if closed.load(Ordering::Acquire) {
            return Ok(Got::Closed);
        }
        let slice = match deadline {
            None => WAIT_SLICE,
            Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
        };
        match py.detach(|| sub.recv_timeout(slice)) {
            Ok(Some(s)) => return Ok(Got::Sample(s)),
            Ok(None) => {}
            Err(tagwire::Error::Closed) => return Ok(Got::Closed),
            Err(e) => return Err(to_py(py, e)),
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Got::Timeout);
        }
    }
}

/// A subscription whose events queue for Python: `recv()`, `for sample in
/// sub`, `async for sample in sub`. `close()` (or leaving a `with` block,
/// or dropping the last reference) unsubscribes.
#[pyclass(frozen, module = "tagwire", name = "Subscriber")]
pub struct PySubscriber {
    inner: Mutex<Option<Arc<tagwire::Subscriber>>>,
    closed: AtomicBool,
    pattern: String,
    wake: OnceLock<AsyncWake>,
}

impl PySubscriber {
    pub(crate) fn new(sub: tagwire::Subscriber, pattern: String) -> Self {
        PySubscriber {
            inner: Mutex::new(Some(Arc::new(sub))),
            closed: AtomicBool::new(false),
            pattern,
            wake: OnceLock::new(),
        }
    }

    fn get(&self) -> Option<Arc<tagwire::Subscriber>> {
        crate::lock(&self.inner).clone()
    }

    fn next_sample(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Got> {
        match self.get() {
            None => Ok(Got::Closed),
            Some(sub) => wait_sample(py, &sub, timeout, &self.closed),
        }
    }

    fn wake(&self, py: Python<'_>) -> PyResult<&AsyncWake> {
        if let Some(w) = self.wake.get() {
            return Ok(w);
        }
        let w = AsyncWake::new().map_err(|e| to_py(py, tagwire::Error::Io(e)))?;
        Ok(self.wake.get_or_init(|| w))
    }
}

#[pymethods]
impl PySubscriber {
    /// The pattern subscribed to.
    #[getter]
    fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Waits for the next sample, the GIL released. With `timeout`
    /// (seconds), returns `None` when none came in time. Raises
    /// `SessionClosed` once the subscriber or its session is closed.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PySample>> {
        let timeout = timeout
            .map(|t| crate::publisher::duration(py, "timeout", t))
            .transpose()?;
        match self.next_sample(py, timeout)? {
            Got::Sample(s) => Ok(Some(PySample::new(s))),
            Got::Timeout => Ok(None),
            Got::Closed => Err(to_py(py, tagwire::Error::Closed)),
        }
    }

    /// The next sample if one is queued, else `None` (never blocks).
    fn try_recv(&self, py: Python<'_>) -> PyResult<Option<PySample>> {
        self.recv(py, Some(0.0))
    }

    /// Events this process's queue dropped because Python did not read
    /// fast enough (by the subscription's discard policy).
    #[getter]
    fn dropped(&self) -> u64 {
        self.get().map_or(0, |s| s.dropped())
    }

    /// What this subscription's client-side playout did (`subscribe(...,
    /// playout="tds:…")`): a dict of `held`, `released`, `late`,
    /// `late_dropped`, `forced`, `overflowed`, `reanchored` and the RFC 3550
    /// jitter at its input and output (`input_jitter_ns`,
    /// `output_jitter_ns`); `None` without a playout.
    #[getter]
    fn playout_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(st) = self.get().and_then(|s| s.playout_stats()) else {
            return Ok(None);
        };
        let c = st.counters;
        crate::counters(
            py,
            &[
                ("held", st.held as u64),
                ("released", c.released),
                ("late", c.late),
                ("late_dropped", c.late_dropped),
                ("forced", c.forced),
                ("overflowed", c.overflowed),
                ("reanchored", c.reanchored),
                ("input_jitter_ns", st.input_jitter_ns),
                ("output_jitter_ns", st.output_jitter_ns),
            ],
        )
        .map(Some)
    }

    /// Unsubscribes; a blocked `recv` or `async for` ends; once it returns,
    /// the endpoint name (if this was its last subscription) is free to any
    /// other session. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closed.store(true, Ordering::Release);
        let sub = crate::lock(&self.inner).take();
        if let Some(w) = self.wake.get() {
            w.waker.wake_by_ref();
        }
        // Another thread in `recv` lets go when woken (above).
        crate::close_last(py, sub, tagwire::Subscriber::close)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PySample>> {
        match self.next_sample(py, None)? {
            Got::Sample(s) => Ok(Some(PySample::new(s))),
            _ => Ok(None),
        }
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// An awaitable of the next sample (`StopAsyncIteration` at the end).
    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tagwire._aio")?
            .call_method1("anext_sample", (slf,))
    }

    /// Waits for the next sample without blocking the event loop (asyncio).
    fn recv_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tagwire._aio")?
            .call_method1("recv_sample", (slf,))
    }

    /// For `tagwire._aio`: the next sample if queued, else `None` after
    /// arranging for `_wake_fd()` to become readable when one is.
    fn _poll(&self, py: Python<'_>) -> PyResult<Option<PySample>> {
        let wake = self.wake(py)?;
        wake.drain();
        let Some(sub) = self.get().filter(|_| !self.closed.load(Ordering::Acquire)) else {
            return Err(to_py(py, tagwire::Error::Closed));
        };
        let waker = Waker::from(wake.waker.clone());
        let mut cx = Context::from_waker(&waker);
        let mut next = pin!(sub.recv_async());
        match next.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(s)) => Ok(Some(PySample::new(s))),
            Poll::Ready(Err(e)) => Err(to_py(py, e)),
            Poll::Pending => Ok(None),
        }
    }

    /// For `tagwire._aio`: the file descriptor that becomes readable when
    /// `_poll()` has something new.
    fn _wake_fd(&self, py: Python<'_>) -> PyResult<i32> {
        Ok(self.wake(py)?.read.as_raw_fd())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        format!("Subscriber(pattern={:?})", self.pattern)
    }
}

/// A subscription served by a Python callback, called with each `Sample` on
/// a thread of its own. Keep a reference: `close()` or dropping the last
/// reference unsubscribes.
#[pyclass(frozen, module = "tagwire", name = "CallbackSubscription")]
pub struct PyCallbackSubscription {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pattern: String,
}

impl PyCallbackSubscription {
    pub(crate) fn start(
        py: Python<'_>,
        sub: tagwire::Subscriber,
        pattern: String,
        callback: Py<PyAny>,
    ) -> PyResult<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tagwire-py-callback".into())
            .spawn(move || callback_main(sub, callback, &s))
            .map_err(|e| to_py(py, tagwire::Error::Io(e)))?;
        Ok(PyCallbackSubscription {
            stop,
            thread: Mutex::new(Some(thread)),
            pattern,
        })
    }
}

/// The callback thread: takes samples from the subscription's queue (no
/// GIL while waiting) and calls `callback` with each; an exception in the
/// callback goes to `sys.unraisablehook` and the thread goes on. Ends when
/// stopped, when the session closes, or when Python is shutting down.
fn callback_main(sub: tagwire::Subscriber, callback: Py<PyAny>, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let sample = match sub.recv_timeout(WAIT_SLICE) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(_) => break,
        };
        let called = Python::try_attach(|py| {
            let result =
                Py::new(py, PySample::new(sample)).and_then(|s| callback.call1(py, (s,)).map(drop));
            if let Err(e) = result {
                e.write_unraisable(py, Some(callback.bind(py)));
            }
        });
        if called.is_none() {
            // Python is finalizing: nothing can be called any more.
            break;
        }
    }
    // Unsubscribed and confirmed by the router before the thread ends, so
    // that `close()`, which joins it, frees the endpoint name for others.
    let _ = sub.close();
    // Dropped attached where Python still runs; else pyo3 defers the
    // reference count change (and at exit nobody needs it).
    Python::try_attach(move |_| drop(callback));
}

#[pymethods]
impl PyCallbackSubscription {
    /// The pattern subscribed to.
    #[getter]
    fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Stops calling the callback and unsubscribes; returns once the
    /// callback thread has ended and the router has unsubscribed (the
    /// endpoint name is then free to others; at once, without that wait,
    /// when called from the callback).
    fn close(&self, py: Python<'_>) {
        self.stop.store(true, Ordering::Release);
        let t = crate::lock(&self.thread).take();
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                py.detach(|| {
                    let _ = t.join();
                });
            }
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        format!("CallbackSubscription(pattern={:?})", self.pattern)
    }
}

impl Drop for PyCallbackSubscription {
    fn drop(&mut self) {
        // The thread sees the flag within one WAIT_SLICE and ends by itself.
        self.stop.store(true, Ordering::Release);
    }
}
