//! The metrics and dashboard listener (`[metrics]`, `tagwired --metrics
//! ADDR`; see `docs/metrics.md`): one HTTP/1.1 listener that serves
//!
//! - `/metrics`: the Prometheus text exposition format (version 0.0.4),
//! - `/`: a live web dashboard (static HTML/JS/CSS built into the binary),
//! - `/api/listing`: the JSON the dashboard polls once a second.
//!
//! It runs on its own ordinary (SCHED_OTHER) thread, never on a lane, and
//! reads the router's state as the admin `list` request does: one bounded
//! page at a time, handing the lock back to a waiting lane between pages
//! ([`snapshot`]). A snapshot is reused for [`SNAPSHOT_MAX_AGE`], so scrapers
//! and open dashboards cost the lanes at most two listings a second.
//!
//! Every request presents a token (`Authorization: Bearer TOKEN`, or
//! `?token=TOKEN`) that the daemon's authentication accepts, and the identity
//! must have the admin right (the owner has it); `/metrics` skips the check
//! only with `[metrics] public = true`. Bounds: [`MetricsConfig::max_connections`]
//! connections at once (more are closed at accept), request heads of at
//! most [`MAX_HEAD_BYTES`] read within [`HEAD_TIMEOUT`], no request bodies,
//! and [`CONNECTION_LIFETIME`] per connection: an idle, slow or garbage
//! connection fails alone.

mod dashboard;
mod exposition;
mod snapshot;

pub use crate::config::metrics::MetricsConfig;

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::auth::Transport;
use crate::state::State;
use crate::sync::Locked;

/// How long a snapshot of the listing is reused before a new one is taken.
pub const SNAPSHOT_MAX_AGE: Duration = Duration::from_millis(500);
/// Time a client has to send a whole request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest life of one HTTP connection (keep-alive included); then it is closed.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Largest request head (request line and headers) read, in bytes.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The token a request presents: the `Authorization: Bearer TOKEN` header
/// (`authorization`, the header's raw value) or else the `token` parameter
/// of the URI's query string (percent-decoded). `None` when neither gives a
/// non-empty token, or the header is not a Bearer credential in ASCII.
pub fn credential(authorization: Option<&[u8]>, query: Option<&str>) -> Option<String> {
    if let Some(h) = authorization {
        let h = std::str::from_utf8(h).ok()?.trim();
        let (scheme, token) = h.split_once(' ')?;
        let token = token.trim();
        return (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty())
            .then(|| token.to_owned());
    }
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

/// The running listener: its address and thread.
pub(crate) struct MetricsServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, drops open connections and waits for the thread.
    pub(crate) fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the metrics thread panicked");
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binds the configured listener (so that a bad address fails the start
/// before anything runs); `None` when `[metrics] listen` is not set.
pub(crate) fn bind(
    cfg: &MetricsConfig,
) -> Result<Option<std::net::TcpListener>, crate::error::RouterError> {
    let Some(addr) = cfg.listen else {
        return Ok(None);
    };
    let listen = |source| crate::error::RouterError::Listen {
        what: format!("metrics {addr}"),
        source,
    };
    let l = std::net::TcpListener::bind(addr).map_err(listen)?;
    l.set_nonblocking(true).map_err(listen)?;
    Ok(Some(l))
}

/// What the request handlers share (one thread: `Rc`).
struct Service {
    cfg: MetricsConfig,
    state: Arc<Locked<State>>,
    cache: RefCell<snapshot::Cache>,
}

/// Starts serving `listener` on its own thread.
pub(crate) fn spawn(
    listener: std::net::TcpListener,
    cfg: MetricsConfig,
    state: Arc<Locked<State>>,
) -> Result<MetricsServer, crate::error::RouterError> {
    let addr = listener
        .local_addr()
        .map_err(crate::error::RouterError::Lane)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(crate::error::RouterError::Lane)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("tagwire-metrics".into())
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, serve(listener, cfg, state, stop_rx));
        })
        .map_err(crate::error::RouterError::Lane)?;
    tracing::info!("metrics and dashboard: listening on http://{addr}");
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "metrics listener on {addr} is not loopback: plain HTTP, tokens cross the network in clear"
        );
    }
    Ok(MetricsServer {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

async fn serve(
    listener: std::net::TcpListener,
    cfg: MetricsConfig,
    state: Arc<Locked<State>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics listener unusable: {e}");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(cfg.max_connections));
    let service = Rc::new(Service {
        cache: RefCell::new(snapshot::Cache::new(cfg.max_series)),
        cfg,
        state,
    });
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: back off, do not spin.
                tracing::warn!("metrics listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if !refused_logged {
                tracing::warn!(
                    "metrics listener: {} connections open, closing {peer} (metrics.max_connections)",
                    service.cfg.max_connections
                );
                refused_logged = true;
            }
            drop(stream);
            continue;
        };
        let service = service.clone();
        tokio::task::spawn_local(async move {
            let svc = hyper::service::service_fn(move |req| {
                let service = service.clone();
                async move { Ok::<_, Infallible>(service.respond(&req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            match tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("metrics connection from {peer}: {e}"),
                Err(_) => tracing::debug!("metrics connection from {peer}: lifetime over"),
            }
            drop(permit);
        });
    }
}

/// A response with `status`, `content_type` and `body`.
fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// A plain-text error that closes the connection.
fn refuse(status: StatusCode, message: String) -> Response<Full<Bytes>> {
    let mut r = reply(status, "text/plain; charset=utf-8", message + "\n");
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"tagwired\""),
        );
    }
    r
}

impl Service {
    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let mut r = self.route(req);
        if req.method() == Method::HEAD {
            *r.body_mut() = Full::new(Bytes::new());
        }
        r
    }

    fn route(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {} not allowed: only GET and HEAD", req.method()),
            );
        }
        let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
            || req
                .headers()
                .get(header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0");
        if has_body {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "a request body is not accepted here".into(),
            );
        }
        let path = req.uri().path();
        let dashboard = self.cfg.dashboard;
        match path {
            "/metrics" => {}
            "/" | "/api/listing" if dashboard => {}
            _ => {
                return refuse(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no page {}: this listener serves /metrics{}",
                        tagwire_proto::excerpt(path),
                        if dashboard {
                            ", / and /api/listing"
                        } else {
                            ""
                        }
                    ),
                )
            }
        }
        if !(path == "/metrics" && self.cfg.public) {
            if let Err((status, message)) = self.authorize(req) {
                return refuse(status, message);
            }
        }
        let snap = match self.snapshot() {
            Ok(s) => s,
            Err(m) => return refuse(StatusCode::SERVICE_UNAVAILABLE, m),
        };
        match path {
            "/metrics" => match exposition::encode(&snap) {
                Ok(text) => reply(
                    StatusCode::OK,
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    text,
                ),
                Err(m) => refuse(StatusCode::INTERNAL_SERVER_ERROR, m),
            },
            "/api/listing" => reply(
                StatusCode::OK,
                "application/json",
                dashboard::listing_json(&snap).to_string(),
            ),
            _ => reply(
                StatusCode::OK,
                "text/html; charset=utf-8",
                dashboard::page(),
            ),
        }
    }

    /// Checks the request's token: its identity must hold the admin right.
    /// The error is the status and message to refuse with.
    fn authorize(&self, req: &Request<Incoming>) -> Result<(), (StatusCode, String)> {
        let token = credential(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes),
            req.uri().query(),
        )
        .unwrap_or_default();
        let st = self.state.borrow();
        let (identity, rights) = st
            .auth
            .authenticate(&Transport::Tcp { cert: None }, &token)
            .map_err(|(_, m)| {
                let hint = if token.is_empty() {
                    "present a token: `Authorization: Bearer TOKEN` or `?token=TOKEN` \
                     (the owner's token file in the runtime directory, or an [[auth.tokens]] secret)"
                        .to_owned()
                } else {
                    m
                };
                (StatusCode::UNAUTHORIZED, hint)
            })?;
        if !rights.admin {
            return Err((
                StatusCode::FORBIDDEN,
                format!(
                    "identity {identity} may not see the daemon's listing: it needs admin = true \
                     in an [[acl]] rule (see docs/metrics.md)"
                ),
            ));
        }
        Ok(())
    }

    /// The current snapshot, taking a new one when the last is older than
    /// [`SNAPSHOT_MAX_AGE`].
    fn snapshot(&self) -> Result<Rc<snapshot::Snapshot>, String> {
        let mut cache = self.cache.borrow_mut();
        cache.get(&self.state, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_header_wins_over_the_query_and_must_be_bearer() {
        assert_eq!(
            credential(Some(b"Bearer abc"), Some("token=xyz")).as_deref(),
            Some("abc")
        );
        assert_eq!(
            credential(Some(b"bearer  abc "), None).as_deref(),
            Some("abc")
        );
        assert_eq!(credential(Some(b"Basic abc"), Some("token=xyz")), None);
        assert_eq!(credential(Some(b"Bearer"), None), None);
        assert_eq!(credential(Some(b"Bearer \xff"), None), None);
        assert_eq!(
            credential(None, Some("a=1&token=x%2By+z")).as_deref(),
            Some("x+y z")
        );
        assert_eq!(credential(None, Some("token=")), None);
        assert_eq!(credential(None, None), None);
    }

    #[test]
    fn config_ranges_and_loopback_without_auth_are_checked() {
        let ok = MetricsConfig {
            listen: "127.0.0.1:9090".parse().ok(),
            ..MetricsConfig::default()
        };
        ok.validate(false).expect("loopback without auth is fine");
        let open = MetricsConfig {
            listen: "0.0.0.0:9090".parse().ok(),
            ..MetricsConfig::default()
        };
        let e = open.validate(false).unwrap_err().to_string();
        assert!(
            e.contains("metrics.listen") && e.contains("loopback"),
            "{e}"
        );
        open.validate(true).expect("with auth any address");
        for (series, conns, what) in [(0, 16, "max_series"), (50, 0, "max_connections")] {
            let c = MetricsConfig {
                max_series: series,
                max_connections: conns,
                ..MetricsConfig::default()
            };
            let e = c.validate(true).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
    }

    proptest! {
        /// A token sent percent-encoded in the query comes back exactly.
        #[test]
        fn a_query_token_round_trips(token in "[ -~]{1,64}", before in "[a-z]{0,5}") {
            let enc: String = form_urlencoded::byte_serialize(token.as_bytes()).collect();
            let q = format!("{before}=1&token={enc}");
            prop_assert_eq!(credential(None, Some(&q)), Some(token));
        }

        /// Any header bytes and query give a token or none, never a panic,
        /// and a token is never empty.
        #[test]
        fn any_input_is_taken_or_refused(h in proptest::collection::vec(any::<u8>(), 0..80),
                                         q in ".{0,80}", use_h: bool) {
            let t = credential(use_h.then_some(h.as_slice()), Some(&q));
            prop_assert!(t.is_none_or(|t| !t.is_empty()));
        }
    }
}
