//! `tagwire.Publisher` and `tagwire.EventBuilder`: publish a payload with
//! fields, priority and per-event QoS (timeout, stop time, start time).
//! Every send releases the GIL (a publish may wait for a reconnect, bounded
//! by the session's `reconnect_wait`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};
use tagwire::{Bytes, Value};

use crate::error::{invalid, to_py};

/// Copies a payload given from Python (`bytes`, `bytearray`, `memoryview`
/// or anything with the buffer protocol; `str` as UTF-8) into the shared
/// buffer the event travels in. One copy is unavoidable: the event must own
/// its bytes after the call returns, and Python may change a `bytearray`.
pub(crate) fn payload_from(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Bytes::copy_from_slice(s.to_str()?.as_bytes()));
    }
    match PyBuffer::<u8>::get(obj) {
        Ok(buf) => Ok(Bytes::from(buf.to_vec(py)?)),
        Err(_) => Err(invalid(
            py,
            format!(
                "payload: expected bytes, bytearray, memoryview or str, got {}",
                obj.get_type().name()?
            ),
        )),
    }
}

/// A field value from Python: `bool`, `int` (64-bit signed), `float`,
/// `str` or `bytes`-like; anything else is refused naming the field.
fn value_from(py: Python<'_>, name: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    // `bool` first: it is a subclass of `int` in Python.
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        return v.extract::<i64>().map(Value::Int).map_err(|_| {
            invalid(
                py,
                format!("field {name:?}: {v} does not fit a 64-bit signed integer"),
            )
        });
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Value::Str(s.to_str()?.to_owned()));
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Value::Bytes(Bytes::copy_from_slice(b.as_bytes())));
    }
    Err(invalid(
        py,
        format!(
            "field {name:?}: expected int, float, bool, str or bytes, got {}",
            v.get_type().name()?
        ),
    ))
}

/// Seconds given from Python as a `Duration`, refusing negative or
/// non-finite values with a message naming the argument.
pub(crate) fn duration(py: Python<'_>, what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        invalid(
            py,
            format!("{what}: expected a finite number of seconds >= 0, got {secs}"),
        )
    })
}

/// A Unix timestamp in seconds (as `time.time()` gives) as a `SystemTime`.
fn timestamp(py: Python<'_>, what: &str, secs: f64) -> PyResult<SystemTime> {
    Ok(UNIX_EPOCH + duration(py, what, secs)?)
}

/// What an event carries besides its tag and payload.
#[derive(Default, Clone)]
struct EventOptions {
    fields: Vec<(String, Value)>,
    priority: Option<u8>,
    timeout: Option<Duration>,
    stop_time: Option<SystemTime>,
    start_time: Option<SystemTime>,
    type_name: Option<String>,
    event_name: Option<String>,
    virtual_time: Option<u64>,
    source_time_ns: Option<u64>,
}

impl EventOptions {
    fn is_plain(&self) -> bool {
        self.fields.is_empty()
            && self.priority.is_none()
            && self.timeout.is_none()
            && self.stop_time.is_none()
            && self.start_time.is_none()
            && self.type_name.is_none()
            && self.event_name.is_none()
            && self.virtual_time.is_none()
            && self.source_time_ns.is_none()
    }

    fn set_field(&mut self, name: String, value: Value) {
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.fields.push((name, value)),
        }
    }

    fn add_fields(&mut self, py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<()> {
        for (k, v) in fields.iter() {
            let name: String = k
                .extract()
                .map_err(|_| invalid(py, format!("field name {k}: expected str")))?;
            let value = value_from(py, &name, &v)?;
            self.set_field(name, value);
        }
        Ok(())
    }

    /// Sends `payload` on `tag` with these options, the GIL released.
    fn send(
        self,
        py: Python<'_>,
        publisher: &tagwire::Publisher,
        tag: &str,
        payload: Bytes,
    ) -> PyResult<()> {
        let sent = py.detach(|| {
            if self.is_plain() {
                return publisher.publish(tag, payload);
            }
            let mut ev = publisher.event(tag, payload);
            for (name, value) in self.fields {
                ev = ev.field(&name, value);
            }
            if let Some(p) = self.priority {
                ev = ev.priority(p);
            }
            if let Some(d) = self.timeout {
                ev = ev.timeout(d);
            }
            if let Some(t) = self.stop_time {
                ev = ev.stop_time(t);
            }
            if let Some(t) = self.start_time {
                ev = ev.start_time(t);
            }
            if let Some(s) = &self.type_name {
                ev = ev.type_name(s);
            }
            if let Some(s) = &self.event_name {
                ev = ev.event_name(s);
            }
            if let Some(v) = self.virtual_time {
                ev = ev.virtual_time(v);
            }
            if let Some(ns) = self.source_time_ns {
                ev = ev.source_time_ns(ns);
            }
            ev.send()
        });
        sent.map_err(|e| to_py(py, e))
    }
}

/// A declared publisher endpoint (`session.declare_publisher(name)`).
/// Each event it sends gets the next sequence number and a source
/// timestamp. `close()` (or leaving a `with` block) undeclares it.
#[pyclass(frozen, module = "tagwire", name = "Publisher")]
pub struct PyPublisher {
    inner: Mutex<Option<Arc<tagwire::Publisher>>>,
    name: String,
}

impl PyPublisher {
    pub(crate) fn new(p: tagwire::Publisher) -> Self {
        PyPublisher {
            name: p.name().to_owned(),
            inner: Mutex::new(Some(Arc::new(p))),
        }
    }

    fn get(&self, py: Python<'_>) -> PyResult<Arc<tagwire::Publisher>> {
        crate::lock(&self.inner)
            .clone()
            .ok_or_else(|| crate::error::to_py(py, tagwire::Error::Closed))
    }
}

#[pymethods]
impl PyPublisher {
    /// The endpoint name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Whether this publisher writes payloads into shared memory.
    #[getter]
    fn uses_shm(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.uses_shm())
    }

    /// Express mode: every event is written at once, never batched.
    fn set_express(&self, py: Python<'_>, express: bool) -> PyResult<()> {
        self.get(py)?.set_express(express);
        Ok(())
    }

    /// Publishes `payload` on `tag`; keyword arguments set fields, priority
    /// and per-event QoS (see `EventBuilder` for each).
    #[pyo3(signature = (tag, payload, *, fields=None, priority=None, timeout=None,
        stop_time=None, start_time=None, type_name=None, event_name=None,
        virtual_time=None, source_time_ns=None))]
    #[allow(clippy::too_many_arguments)]
    fn publish(
        &self,
        py: Python<'_>,
        tag: &str,
        payload: &Bound<'_, PyAny>,
        fields: Option<&Bound<'_, PyDict>>,
        priority: Option<u8>,
        timeout: Option<f64>,
        stop_time: Option<f64>,
        start_time: Option<f64>,
        type_name: Option<String>,
        event_name: Option<String>,
        virtual_time: Option<u64>,
        source_time_ns: Option<u64>,
    ) -> PyResult<()> {
        let publisher = self.get(py)?;
        let payload = payload_from(py, payload)?;
        let mut o = EventOptions {
            priority,
            type_name,
            event_name,
            virtual_time,
            source_time_ns,
            ..EventOptions::default()
        };
        if let Some(f) = fields {
            o.add_fields(py, f)?;
        }
        o.timeout = timeout.map(|t| duration(py, "timeout", t)).transpose()?;
        o.stop_time = stop_time
            .map(|t| timestamp(py, "stop_time", t))
            .transpose()?;
        o.start_time = start_time
            .map(|t| timestamp(py, "start_time", t))
            .transpose()?;
        o.send(py, &publisher, tag, payload)
    }

    /// Starts an event on `tag` whose fields and header are set by chained
    /// calls before `.send()` (as `Publisher::event` in Rust).
    fn event(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        tag: String,
        payload: &Bound<'_, PyAny>,
    ) -> PyResult<PyEventBuilder> {
        Ok(PyEventBuilder {
            publisher: slf.clone().unbind(),
            tag,
            payload: payload_from(py, payload)?,
            options: EventOptions::default(),
        })
    }

    /// Undeclares the endpoint; once it returns the name is free to any
    /// other session (unless another thread is still sending through it:
    /// then the name is freed when that send ends). Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let p = crate::lock(&self.inner).take();
        crate::close_last(py, p, tagwire::Publisher::close)
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
        format!("Publisher(name={:?})", self.name)
    }
}

/// An event being prepared (`publisher.event(tag, payload)`); each setter
/// returns the builder, `.send()` publishes.
#[pyclass(module = "tagwire", name = "EventBuilder")]
pub struct PyEventBuilder {
    publisher: Py<PyPublisher>,
    tag: String,
    payload: Bytes,
    options: EventOptions,
}

#[pymethods]
impl PyEventBuilder {
    /// Adds a filterable field (a repeated name replaces the value).
    fn field<'py>(
        mut slf: PyRefMut<'py, Self>,
        name: String,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        let v = value_from(slf.py(), &name, value)?;
        slf.options.set_field(name, v);
        Ok(slf)
    }

    /// Priority, 0 (lowest) to 255 (highest).
    fn priority(mut slf: PyRefMut<'_, Self>, p: u8) -> PyRefMut<'_, Self> {
        slf.options.priority = Some(p);
        slf
    }

    /// Expires the event `seconds` after its source time (TAO `timeout`).
    fn timeout(mut slf: PyRefMut<'_, Self>, seconds: f64) -> PyResult<PyRefMut<'_, Self>> {
        slf.options.timeout = Some(duration(slf.py(), "timeout", seconds)?);
        Ok(slf)
    }

    /// Expires the event at this Unix time in seconds (TAO `stop_time`).
    fn stop_time(mut slf: PyRefMut<'_, Self>, unix_seconds: f64) -> PyResult<PyRefMut<'_, Self>> {
        slf.options.stop_time = Some(timestamp(slf.py(), "stop_time", unix_seconds)?);
        Ok(slf)
    }

    /// Earliest delivery at this Unix time in seconds (TAO `start_time`).
    fn start_time(mut slf: PyRefMut<'_, Self>, unix_seconds: f64) -> PyResult<PyRefMut<'_, Self>> {
        slf.options.start_time = Some(timestamp(slf.py(), "start_time", unix_seconds)?);
        Ok(slf)
    }

    /// Structured-event type name (TAO), e.g. `CommunicationsAlarm`.
    fn type_name(mut slf: PyRefMut<'_, Self>, name: String) -> PyRefMut<'_, Self> {
        slf.options.type_name = Some(name);
        slf
    }

    /// Structured-event name (TAO), e.g. `lost_packet`.
    fn event_name(mut slf: PyRefMut<'_, Self>, name: String) -> PyRefMut<'_, Self> {
        slf.options.event_name = Some(name);
        slf
    }

    /// Virtual time: the event's position in its stream.
    fn virtual_time(mut slf: PyRefMut<'_, Self>, vt: u64) -> PyRefMut<'_, Self> {
        slf.options.virtual_time = Some(vt);
        slf
    }

    /// Source timestamp, ns since the Unix epoch (default: now).
    fn source_time_ns(mut slf: PyRefMut<'_, Self>, ns: u64) -> PyRefMut<'_, Self> {
        slf.options.source_time_ns = Some(ns);
        slf
    }

    /// Publishes the event (the builder can be sent again).
    fn send(&self, py: Python<'_>) -> PyResult<()> {
        let publisher = self.publisher.get().get(py)?;
        self.options
            .clone()
            .send(py, &publisher, &self.tag, self.payload.clone())
    }
}
