//! `tagwire._tagwire`, the native half of the `tagwire` Python package: a
//! thin PyO3 wrapper over the `tagwire` client library (no protocol code
//! here). The classes keep the Rust names — `Session`, `SessionBuilder`,
//! `Publisher`, `EventBuilder`, `Subscriber`, `CallbackSubscription`,
//! `Sample`, `Pull`, `EmbeddedRouter` — so docs/python.md and the Rust docs
//! read alike. The pure-Python half (`python/tagwire/`) holds the
//! exception hierarchy, the asyncio glue and the type stubs.
//!
//! ```python
//! import tagwire
//! session = tagwire.Session.connect("tcp://127.0.0.1:7700")
//! sub = session.subscribe("/demo/**")
//! session.declare_publisher("/py/pub").publish("/demo/x", b"hi", fields={"severity": 3})
//! print(next(sub).payload)
//! ```

mod error;
mod publisher;
mod pull;
mod sample;
mod session;
mod subscriber;

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;

/// Locks a mutex, recovering its data if a panicking thread poisoned it
/// (each critical section here only takes or clones an `Option`).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Closes a publisher's or subscriber's last handle with `close` (which
/// waits for the daemon), the GIL released. A handle another thread still
/// holds (a send or `recv` in progress) is only let go of here: it closes,
/// without the wait, when that thread lets go too.
pub(crate) fn close_last<T: Send + Sync>(
    py: Python<'_>,
    held: Option<Arc<T>>,
    close: impl FnOnce(T) -> tagwire::Result<()> + Send,
) -> PyResult<()> {
    match held.map(Arc::try_unwrap) {
        Some(Ok(last)) => py.detach(|| close(last)).map_err(|e| error::to_py(py, e)),
        Some(Err(shared)) => {
            py.detach(|| drop(shared));
            Ok(())
        }
        None => Ok(()),
    }
}

/// The native module.
/// A dict of named counters, as the stats getters return them.
pub(crate) fn counters<'py>(
    py: Python<'py>,
    items: &[(&str, u64)],
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    for (k, v) in items {
        d.set_item(k, v)?;
    }
    Ok(d)
}

#[pymodule]
fn _tagwire(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::PySession>()?;
    m.add_class::<session::PySessionBuilder>()?;
    m.add_class::<session::PyEmbeddedRouter>()?;
    m.add_class::<publisher::PyPublisher>()?;
    m.add_class::<publisher::PyEventBuilder>()?;
    m.add_class::<subscriber::PySubscriber>()?;
    m.add_class::<subscriber::PyCallbackSubscription>()?;
    m.add_class::<sample::PySample>()?;
    m.add_class::<pull::PyPull>()?;
    Ok(())
}
