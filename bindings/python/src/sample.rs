//! `tagwire.Sample`: one received event. The payload stays in the bytes it
//! arrived in (the receive buffer, or the shared-memory packet the
//! publisher wrote) and is exported through the buffer protocol, so
//! `memoryview(sample)` reads it without a copy; `sample.payload` copies it
//! into a `bytes` object.

#![allow(unsafe_code)] // the buffer protocol (`__getbuffer__`) is an FFI call; see the SAFETY notes

use std::ffi::{c_char, c_int, c_void};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyMemoryView};
use tagwire::{Bytes, Expiry, ValueRef};

/// A received event: tag, header, fields and payload.
#[pyclass(frozen, module = "tagwire", name = "Sample")]
pub struct PySample {
    sample: tagwire::Sample,
    /// The payload, taken once so that the exported buffer's address stays
    /// put (and, for a shared-memory payload, the daemon's pin stays held)
    /// while this object or a view of it lives.
    payload: Bytes,
}

impl PySample {
    pub(crate) fn new(sample: tagwire::Sample) -> Self {
        let payload = sample.payload();
        PySample { sample, payload }
    }
}

/// A field value as the Python object of its type.
fn value_to_py<'py>(py: Python<'py>, v: ValueRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        ValueRef::Int(i) => i.into_pyobject(py)?.into_any(),
        ValueRef::Float(f) => f.into_pyobject(py)?.into_any(),
        ValueRef::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        ValueRef::Str(s) => s.into_pyobject(py)?.into_any(),
        ValueRef::Bytes(b) => PyBytes::new(py, b).into_any(),
    })
}

#[pymethods]
impl PySample {
    /// The tag the event was published on.
    #[getter]
    fn tag(&self) -> &str {
        self.sample.tag()
    }

    /// The payload as `bytes` (a copy; `memoryview(sample)` or
    /// `sample.payload_view` reads it in place).
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.payload)
    }

    /// A read-only `memoryview` of the payload, without a copy.
    #[getter]
    fn payload_view<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(slf.as_any())
    }

    /// The filterable fields, name to value (int, float, bool, str, bytes).
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, v) in self.sample.event().fields() {
            d.set_item(name, value_to_py(py, v)?)?;
        }
        Ok(d)
    }

    /// The publishing endpoint's name.
    #[getter]
    fn publisher(&self) -> String {
        self.sample.event().publisher.to_owned()
    }

    /// The publisher's sequence number of this event.
    #[getter]
    fn seq(&self) -> u64 {
        self.sample.event().seq
    }

    /// Source timestamp, ns since the Unix epoch.
    #[getter]
    fn source_time_ns(&self) -> u64 {
        self.sample.event().source_time_ns
    }

    /// Priority, 0 (lowest) to 255 (highest).
    #[getter]
    fn priority(&self) -> u8 {
        self.sample.event().priority
    }

    /// Virtual time (the event's position in its stream), if set.
    #[getter]
    fn virtual_time(&self) -> Option<u64> {
        self.sample.event().virtual_time
    }

    /// Earliest delivery time, ns since the Unix epoch, if set.
    #[getter]
    fn start_time_ns(&self) -> Option<u64> {
        self.sample.event().start_time_ns
    }

    /// Relative expiry (TAO `timeout`) in ns after the source time, if set.
    #[getter]
    fn timeout_ns(&self) -> Option<u64> {
        match self.sample.event().expiry {
            Expiry::AfterNs(ns) => Some(ns),
            _ => None,
        }
    }

    /// Absolute expiry (TAO `stop_time`), ns since the Unix epoch, if set.
    #[getter]
    fn stop_time_ns(&self) -> Option<u64> {
        match self.sample.event().expiry {
            Expiry::AtNs(ns) => Some(ns),
            _ => None,
        }
    }

    /// Structured-event type name (TAO), if set.
    #[getter]
    fn type_name(&self) -> Option<String> {
        self.sample.event().type_name.map(str::to_owned)
    }

    /// Structured-event name (TAO), if set.
    #[getter]
    fn event_name(&self) -> Option<String> {
        self.sample.event().event_name.map(str::to_owned)
    }

    /// Whether the payload is read in place in shared memory (no copy was
    /// made between the publisher and this object; see docs/shm.md).
    #[getter]
    fn is_in_place(&self) -> bool {
        self.sample.is_in_place()
    }

    fn __len__(&self) -> usize {
        self.payload.len()
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.payload)
    }

    fn __repr__(&self) -> String {
        let ev = self.sample.event();
        format!(
            "Sample(tag={:?}, publisher={:?}, seq={}, payload=<{} bytes>)",
            ev.tag,
            ev.publisher,
            ev.seq,
            self.payload.len()
        )
    }

    /// Exports the payload read-only, in place.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("null Py_buffer"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "a sample's payload is read-only (it may lie in shared memory mapped read-only)",
            ));
        }
        let data: &[u8] = &slf.get().payload;
        let (ptr, len) = (data.as_ptr(), data.len());
        // SAFETY: `view` is non-null and points at a Py_buffer the caller
        // (CPython's buffer machinery) owns for this call. The exported
        // bytes belong to `payload`, a `Bytes` that this frozen object
        // never replaces, so they stay valid and unmoved for as long as
        // `view.obj` holds its strong reference to this object (taken by
        // `into_ptr`, released by PyBuffer_Release). `format` points at a
        // static NUL-terminated string that nobody frees; `shape` and
        // `strides` point into `view` itself, as CPython's own
        // PyBuffer_FillInfo does.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr as *mut c_void;
            (*view).len = len as ffi::Py_ssize_t;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                c"B".as_ptr() as *mut c_char
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    /// Nothing to free: the view's reference to this object keeps the
    /// payload alive, and CPython drops that reference itself.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
