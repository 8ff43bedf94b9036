//! `tagwire.Session`, `tagwire.SessionBuilder` and
//! `tagwire.EmbeddedRouter`: connect to a daemon (or run a router in this
//! process), declare publishers, subscribe, pull, and the admin calls.
//! Every call that waits on the network releases the GIL.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::error::{invalid, pull_to_py, to_py};
use crate::publisher::{duration, PyPublisher};
use crate::pull::PyPull;
use crate::sample::PySample;
use crate::subscriber::{PyCallbackSubscription, PySubscriber};

/// A serde value as the Python object `json.loads` makes of it.
fn to_python<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v)
        .map_err(|e| to_py(py, tagwire::Error::BadReply(format!("reply: {e}"))))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// A Python object (dict, list, str, numbers…) as JSON, through `json.dumps`.
fn from_python(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = py
        .import("json")?
        .call_method1("dumps", (obj,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| invalid(py, format!("admin request: {e}")))
}

/// The settings a session is opened with (`SessionBuilder` in Rust, plus
/// the band to open it on).
#[derive(Clone, Default)]
struct Options {
    connect_timeout: Option<Duration>,
    reconnect_wait: Option<Duration>,
    token: Option<String>,
    follow_priority: bool,
    network_clock: bool,
    shm: Option<tagwire::ShmMode>,
    band: Option<String>,
    tls: Option<tagwire::TlsOptions>,
}

fn shm_mode(py: Python<'_>, mode: &str) -> PyResult<tagwire::ShmMode> {
    mode.parse().map_err(|e| invalid(py, format!("shm: {e}")))
}

impl Options {
    fn builder(&self) -> tagwire::SessionBuilder {
        let mut b = tagwire::Session::builder()
            .follow_priority(self.follow_priority)
            .network_clock(self.network_clock);
        if let Some(d) = self.connect_timeout {
            b = b.connect_timeout(d);
        }
        if let Some(d) = self.reconnect_wait {
            b = b.reconnect_wait(d);
        }
        if let Some(t) = &self.token {
            b = b.token(t.clone());
        }
        if let Some(m) = self.shm {
            b = b.shm(m);
        }
        if let Some(t) = &self.tls {
            b = b.tls(t.clone());
        }
        b
    }

    /// Opens the session (`url`: `None` for the local daemon) and moves it
    /// to its band, the GIL released.
    fn open(&self, py: Python<'_>, url: Option<&str>) -> PyResult<PySession> {
        let builder = self.builder();
        let band = self.band.clone();
        let opened = py.detach(move || -> tagwire::Result<PySession> {
            let s = match url {
                Some(u) => builder.connect(u)?,
                None => builder.connect_local()?,
            };
            PySession::on_band_of(s, band.as_deref())
        });
        opened.map_err(|e| to_py(py, e))
    }
}

/// Configures a session before opening it; every setter returns the
/// builder (`Session.builder().token("…").band("high").connect(url)`).
#[pyclass(module = "tagwire", name = "SessionBuilder")]
#[derive(Default)]
pub struct PySessionBuilder {
    options: Options,
}

#[pymethods]
impl PySessionBuilder {
    #[new]
    fn new() -> Self {
        PySessionBuilder::default()
    }

    /// The longest a connection attempt may take, in seconds (default 5).
    fn connect_timeout(mut slf: PyRefMut<'_, Self>, seconds: f64) -> PyResult<PyRefMut<'_, Self>> {
        slf.options.connect_timeout = Some(duration(slf.py(), "connect_timeout", seconds)?);
        Ok(slf)
    }

    /// How long a call made while reconnecting waits, in seconds (default 5).
    fn reconnect_wait(mut slf: PyRefMut<'_, Self>, seconds: f64) -> PyResult<PyRefMut<'_, Self>> {
        slf.options.reconnect_wait = Some(duration(slf.py(), "reconnect_wait", seconds)?);
        Ok(slf)
    }

    /// The token to present (instead of `TAGWIRE_TOKEN` or the local token file).
    fn token(mut slf: PyRefMut<'_, Self>, token: String) -> PyRefMut<'_, Self> {
        slf.options.token = Some(token);
        slf
    }

    /// Open the session on this priority band (`low`, `normal`, `high`,
    /// `critical` by default): its connection is served by that band's lane
    /// and carries its DSCP.
    fn band(mut slf: PyRefMut<'_, Self>, band: String) -> PyRefMut<'_, Self> {
        slf.options.band = Some(band);
        slf
    }

    /// Send each event on the band its priority falls in (client-propagated priority).
    fn follow_priority(mut slf: PyRefMut<'_, Self>, on: bool) -> PyRefMut<'_, Self> {
        slf.options.follow_priority = on;
        slf
    }

    /// Stamp events with the daemons' network time.
    fn network_clock(mut slf: PyRefMut<'_, Self>, on: bool) -> PyRefMut<'_, Self> {
        slf.options.network_clock = on;
        slf
    }

    /// Default shared-memory mode: `"auto"` (default), `"require"` or `"off"`.
    fn shm(mut slf: PyRefMut<'_, Self>, mode: String) -> PyResult<PyRefMut<'_, Self>> {
        slf.options.shm = Some(shm_mode(slf.py(), &mode)?);
        Ok(slf)
    }

    /// TLS settings for a `tls://` URL, instead of the environment's
    /// (`TAGWIRE_TLS_CA`, `TAGWIRE_TLS_CERT`, `TAGWIRE_TLS_KEY`,
    /// `TAGWIRE_TLS_SERVER_NAME`): the CA file the server's certificate must
    /// chain to, a client certificate and key for mutual TLS, and the name
    /// the server's certificate must carry (default: the URL's host).
    #[pyo3(signature = (ca=None, cert=None, key=None, server_name=None))]
    fn tls(
        mut slf: PyRefMut<'_, Self>,
        ca: Option<std::path::PathBuf>,
        cert: Option<std::path::PathBuf>,
        key: Option<std::path::PathBuf>,
        server_name: Option<String>,
    ) -> PyRefMut<'_, Self> {
        slf.options.tls = Some(tagwire::TlsOptions {
            ca,
            cert,
            key,
            server_name,
        });
        slf
    }

    /// Connects to `url` (`tcp://HOST:PORT`, `tls://HOST:PORT`,
    /// `unix:///PATH`; several, comma-separated, to fail over between).
    fn connect(&self, py: Python<'_>, url: &str) -> PyResult<PySession> {
        self.options.open(py, Some(url))
    }

    /// Connects to the local daemon: its Unix socket if present, else
    /// `tcp://127.0.0.1:7700`.
    fn connect_local(&self, py: Python<'_>) -> PyResult<PySession> {
        self.options.open(py, None)
    }
}

/// A router running inside this process, shared by the sessions it opens.
#[pyclass(frozen, module = "tagwire", name = "EmbeddedRouter")]
pub struct PyEmbeddedRouter {
    router: tagwire::EmbeddedRouter,
}

#[pymethods]
impl PyEmbeddedRouter {
    /// Starts an in-process router with default limits.
    #[staticmethod]
    fn start(py: Python<'_>) -> PyResult<Self> {
        let router = py
            .detach(tagwire::EmbeddedRouter::start)
            .map_err(|e| to_py(py, e))?;
        Ok(PyEmbeddedRouter { router })
    }

    /// A new session on this router.
    fn session(&self, py: Python<'_>) -> PyResult<PySession> {
        let s = py
            .detach(|| self.router.session())
            .map_err(|e| to_py(py, e))?;
        Ok(PySession::from(s))
    }
}

/// A connection to a tagwire router (the daemon, or one in this process).
/// Publishers and subscribers made from it keep the connection open; it
/// closes when the session and all of them are closed or collected.
#[pyclass(frozen, module = "tagwire", name = "Session")]
pub struct PySession {
    inner: Mutex<Option<tagwire::Session>>,
    /// The session a band session was opened from (kept open with it).
    parent: Mutex<Option<tagwire::Session>>,
}

impl From<tagwire::Session> for PySession {
    fn from(s: tagwire::Session) -> Self {
        PySession {
            inner: Mutex::new(Some(s)),
            parent: Mutex::new(None),
        }
    }
}

impl PySession {
    fn on_band_of(s: tagwire::Session, band: Option<&str>) -> tagwire::Result<PySession> {
        match band {
            None => Ok(PySession::from(s)),
            Some(b) => {
                let banded = s.on_band(b)?;
                Ok(PySession {
                    inner: Mutex::new(Some(banded)),
                    parent: Mutex::new(Some(s)),
                })
            }
        }
    }

    fn get(&self, py: Python<'_>) -> PyResult<tagwire::Session> {
        crate::lock(&self.inner)
            .clone()
            .ok_or_else(|| to_py(py, tagwire::Error::Closed))
    }

    /// Sends an admin request and returns the reply as Python objects.
    fn admin_json<'py>(
        &self,
        py: Python<'py>,
        request: serde_json::Value,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = self.get(py)?;
        let reply = py
            .detach(|| s.admin_json(&request))
            .map_err(|e| to_py(py, e))?;
        to_python(py, &reply)
    }
}

#[pymethods]
impl PySession {
    /// Connects to a daemon at `url` with the default settings
    /// (`tcp://HOST:PORT`, `tls://HOST:PORT`, `unix:///PATH`). Keyword
    /// arguments are the `SessionBuilder` settings.
    #[staticmethod]
    #[pyo3(signature = (url, *, token=None, band=None, shm=None, connect_timeout=None, reconnect_wait=None))]
    fn connect(
        py: Python<'_>,
        url: &str,
        token: Option<String>,
        band: Option<String>,
        shm: Option<&str>,
        connect_timeout: Option<f64>,
        reconnect_wait: Option<f64>,
    ) -> PyResult<PySession> {
        let options = Options {
            token,
            band,
            shm: shm.map(|m| shm_mode(py, m)).transpose()?,
            connect_timeout: connect_timeout
                .map(|t| duration(py, "connect_timeout", t))
                .transpose()?,
            reconnect_wait: reconnect_wait
                .map(|t| duration(py, "reconnect_wait", t))
                .transpose()?,
            ..Options::default()
        };
        options.open(py, Some(url))
    }

    /// Connects to the local daemon: its Unix socket if present, else
    /// `tcp://127.0.0.1:7700`.
    #[staticmethod]
    fn connect_local(py: Python<'_>) -> PyResult<PySession> {
        Options::default().open(py, None)
    }

    /// Starts configuring a session.
    #[staticmethod]
    fn builder() -> PySessionBuilder {
        PySessionBuilder::default()
    }

    /// Starts a private in-process router and connects to it: the same API
    /// and protocol as a daemon, with no daemon.
    #[staticmethod]
    fn embedded(py: Python<'_>) -> PyResult<PySession> {
        let s = py
            .detach(tagwire::Session::embedded)
            .map_err(|e| to_py(py, e))?;
        Ok(PySession::from(s))
    }

    /// This session's client name (sent in the handshake).
    #[getter]
    fn name(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.name().to_owned())
    }

    /// The band this session's connection belongs to (`None`: the
    /// listener's default band).
    #[getter]
    fn band(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.get(py)?.band().map(str::to_owned))
    }

    /// A session on priority band `band` of the same router, sharing this
    /// session's endpoint names.
    fn on_band(&self, py: Python<'_>, band: &str) -> PyResult<PySession> {
        let s = self.get(py)?;
        let banded = py.detach(|| s.on_band(band)).map_err(|e| to_py(py, e))?;
        Ok(PySession {
            inner: Mutex::new(Some(banded)),
            parent: Mutex::new(Some(s)),
        })
    }

    /// Declares a publisher endpoint named `name` (unique in the router);
    /// `shm` overrides the session's shared-memory mode for it.
    #[pyo3(signature = (name, *, shm=None))]
    fn declare_publisher(
        &self,
        py: Python<'_>,
        name: &str,
        shm: Option<&str>,
    ) -> PyResult<PyPublisher> {
        let s = self.get(py)?;
        let mode = shm.map(|m| shm_mode(py, m)).transpose()?;
        let p = py
            .detach(|| match mode {
                Some(m) => s.declare_publisher_with(name, m),
                None => s.declare_publisher(name),
            })
            .map_err(|e| to_py(py, e))?;
        Ok(PyPublisher::new(p))
    }

    /// Subscribes to `pattern` (`*` one level, `**` any depth). Returns a
    /// `Subscriber` (iterate it, `recv()`, or `async for`), or with
    /// `callback` a `CallbackSubscription` that calls it with each sample.
    /// `qos` sets channel QoS properties by name, as users type them
    /// (`{"priority": "high", "max_queue_length": 100}`); a bad name or
    /// value raises `BadRequest` naming it. `playout` (`"tds:100ms"`,
    /// `"tds:100ms:drop"`) runs the time-differential service in this
    /// process: events are handed over in source-time order, keeping their
    /// original spacing after the playout delay (docs/time.md).
    #[pyo3(signature = (pattern, callback=None, *, endpoint=None, max_queue_length=None,
        local_queue_length=None, discard=None, filter=None, map=None, qos=None, playout=None))]
    #[allow(clippy::too_many_arguments)]
    fn subscribe(
        &self,
        py: Python<'_>,
        pattern: &str,
        callback: Option<Py<PyAny>>,
        endpoint: Option<&str>,
        max_queue_length: Option<usize>,
        local_queue_length: Option<usize>,
        discard: Option<&str>,
        filter: Option<&str>,
        map: Option<&str>,
        qos: Option<&Bound<'_, PyDict>>,
        playout: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let s = self.get(py)?;
        let mut b = s.subscribe(pattern);
        if let Some(p) = playout {
            let cfg = p
                .parse::<tagwire::PlayoutConfig>()
                .map_err(|e| invalid(py, format!("playout: {e}")))?;
            b = b.playout(cfg);
        }
        if let Some(e) = endpoint {
            b = b.endpoint(e);
        }
        if let Some(n) = max_queue_length {
            b = b.max_queue_length(n);
        }
        if let Some(n) = local_queue_length {
            b = b.local_queue_length(n);
        }
        if let Some(d) = discard {
            let policy = d
                .parse::<tagwire::DiscardPolicy>()
                .map_err(|e| invalid(py, format!("discard: {e}")))?;
            b = b.discard(policy);
        }
        if let Some(f) = filter {
            b = b.filter(f);
        }
        if let Some(m) = map {
            b = b.map(m);
        }
        for (k, v) in qos.into_iter().flat_map(|d| d.iter()) {
            let name: String = k
                .extract()
                .map_err(|_| invalid(py, format!("qos property name {k}: expected str")))?;
            // Values as users type them: "high", 100 and True all work.
            let value = match v.cast::<PyString>() {
                Ok(text) => text.to_str()?.to_owned(),
                Err(_) if v.is_instance_of::<pyo3::types::PyBool>() => {
                    v.extract::<bool>()?.to_string()
                }
                Err(_) => v.str()?.to_str()?.to_owned(),
            };
            b = b.qos(&name, &value);
        }
        let sub = py.detach(|| b.receiver()).map_err(|e| to_py(py, e))?;
        let pattern = pattern.to_owned();
        match callback {
            None => Ok(Py::new(py, PySubscriber::new(sub, pattern))?.into_any()),
            Some(cb) => {
                if !cb.bind(py).is_callable() {
                    return Err(invalid(py, "callback: expected a callable"));
                }
                let c = PyCallbackSubscription::start(py, sub, pattern, cb)?;
                Ok(Py::new(py, c)?.into_any())
            }
        }
    }

    /// Pulls from `tag`'s history (default: the latest event); `publisher`
    /// names whose history, `at` where it is kept (`at_subscriber`,
    /// `at_publisher`, `node:NAME`). Raises `Gone` (with `.oldest`) for
    /// events no longer held, `NoHistory` where the tag keeps none.
    #[pyo3(signature = (tag, pull=None, *, publisher=None, at=None))]
    fn pull(
        &self,
        py: Python<'_>,
        tag: &str,
        pull: Option<&PyPull>,
        publisher: Option<String>,
        at: Option<&str>,
    ) -> PyResult<Vec<PySample>> {
        let s = self.get(py)?;
        let what = pull.map_or(tagwire::Pull::Latest, |p| p.pull);
        let at = match at {
            None => tagwire::HistoryAt::default(),
            Some(a) => a.parse().map_err(|e| pull_to_py(py, e))?,
        };
        let options = tagwire::PullOptions { publisher, at };
        let samples = py
            .detach(|| s.pull_with(tag, what, &options))
            .map_err(|e| pull_to_py(py, e))?;
        Ok(samples.into_iter().map(PySample::new).collect())
    }

    /// The router's tags, endpoints, subscriptions, connections and lanes
    /// (`tagwire list`), every page followed, as a dict (typed as
    /// `tagwire.Listing` in the stubs).
    fn list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.get(py)?;
        let listing = py.detach(|| s.list()).map_err(|e| to_py(py, e))?;
        to_python(py, &listing)
    }

    /// Every filter the router knows (`tagwire admin filter list`).
    fn filter_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.get(py)?;
        let filters = py.detach(|| s.filter_list()).map_err(|e| to_py(py, e))?;
        to_python(py, &filters)
    }

    /// Changes QoS at run time, as `tagwire admin qos TARGET… NAME=VALUE…
    /// -NAME…` does: `target` is a subscriber endpoint (channel level), a
    /// publisher and a subscriber, a tag pattern, `connection:ID` or
    /// `daemon` (docs/admin.md); `set` maps property names to values,
    /// `unset` names properties to remove. All or nothing: a bad property
    /// or value raises `BadRequest` naming it. Returns the reply
    /// (`level`, `target`, `channels`, `dropped`).
    #[pyo3(signature = (target, set=None, unset=None))]
    fn admin_qos<'py>(
        &self,
        py: Python<'py>,
        target: &Bound<'py, PyAny>,
        set: Option<&Bound<'py, PyDict>>,
        unset: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let target: Vec<String> = match target.cast::<PyString>() {
            Ok(t) => vec![t.to_str()?.to_owned()],
            Err(_) => target
                .extract()
                .map_err(|_| invalid(py, "target: expected a str or a list of str"))?,
        };
        let mut props = serde_json::Map::new();
        for (k, v) in set.into_iter().flat_map(|d| d.iter()) {
            let name: String = k
                .extract()
                .map_err(|_| invalid(py, format!("qos property name {k}: expected str")))?;
            let value = match v.cast::<PyString>() {
                Ok(text) => text.to_str()?.to_owned(),
                Err(_) if v.is_instance_of::<pyo3::types::PyBool>() => {
                    v.extract::<bool>()?.to_string()
                }
                Err(_) => v.str()?.to_str()?.to_owned(),
            };
            props.insert(name, value.into());
        }
        let request = serde_json::json!({
            "op": "qos",
            "target": target,
            "set": props,
            "unset": unset.unwrap_or_default(),
        });
        self.admin_json(py, request)
    }

    /// What `tagwire admin show TARGET` shows: an endpoint's channels with
    /// their QoS and where each value came from, or a tag pattern's layer.
    fn admin_show<'py>(&self, py: Python<'py>, target: &str) -> PyResult<Bound<'py, PyAny>> {
        self.admin_json(py, serde_json::json!({"op": "show", "target": target}))
    }

    /// Sends any admin request (a dict with an `op` key, docs/admin.md) and
    /// returns the JSON reply as Python objects.
    fn admin<'py>(
        &self,
        py: Python<'py>,
        request: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = from_python(py, request)?;
        self.admin_json(py, request)
    }

    /// The daemon's network time, its offset and error bound (docs/time.md).
    fn network_time<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.get(py)?;
        let t = py.detach(|| s.network_time()).map_err(|e| to_py(py, e))?;
        to_python(py, &t)
    }

    /// One round trip to the router, in seconds.
    fn ping(&self, py: Python<'_>) -> PyResult<f64> {
        let s = self.get(py)?;
        let rtt = py.detach(|| s.ping()).map_err(|e| to_py(py, e))?;
        Ok(rtt.as_secs_f64())
    }

    /// Writes any batched publishes now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.get(py)?;
        py.detach(|| s.flush()).map_err(|e| to_py(py, e))
    }

    /// Whether the router is on this host (Unix socket or embedded), where
    /// shared memory can be used.
    #[getter]
    fn is_same_host(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.is_same_host())
    }

    /// Whether the session currently has a connection.
    #[getter]
    fn is_connected(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.is_connected())
    }

    /// How many times the session reconnected.
    #[getter]
    fn reconnects(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.get(py)?.reconnects())
    }

    /// What this session's shared-memory path did so far.
    fn shm_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.get(py)?.shm_stats();
        crate::counters(
            py,
            &[
                ("published", st.published),
                ("published_socket", st.published_socket),
                ("in_place", st.in_place),
                ("expired", st.expired),
                ("unreadable", st.unreadable),
                ("unsent", st.unsent),
            ],
        )
    }

    /// Lets go of this handle; the connection closes once the publishers
    /// and subscribers made from it are closed too. Idempotent.
    fn close(&self, py: Python<'_>) {
        let s = crate::lock(&self.inner).take();
        let p = crate::lock(&self.parent).take();
        py.detach(|| drop((s, p)));
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
        match crate::lock(&self.inner).as_ref() {
            Some(s) => format!("Session(name={:?})", s.name()),
            None => "Session(closed)".to_owned(),
        }
    }
}
