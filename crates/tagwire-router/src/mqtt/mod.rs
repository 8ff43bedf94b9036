//! The MQTT listener (`[mqtt] listen`, `tagwired --mqtt ADDR`): MQTT 3.1.1
//! and 5 clients publish and subscribe to tags. See `docs/mqtt.md`.
//!
//! A gateway, not a second router: each MQTT connection gets its own
//! in-process tagwire connection into this router, authenticated with the
//! MQTT password as its token, so the ACL, quotas, channels and discard
//! policies are the router's own and apply to the MQTT client's identity.
//! The gateway drives the core client engine
//! ([`tagwire_core::connection::Connection`]) over that socket, on one
//! thread (`tagwire-mqtt`) with one task per MQTT connection, instead of the
//! client library's two threads per session — so it lives here, beside the
//! router it speaks to, and the fuzz target reaches its parser.
//!
//! Modules: [`topic`] maps topic names and filters to tags and patterns;
//! [`packet`] reads and writes MQTT packets (rumqttc's codec) in one shape
//! for both versions; `session` runs one connection.
//!
//! Pick the bounds in [`MqttConfig`] by the clients you expect: a client
//! that never reads loses its oldest QoS 0 deliveries and then stops its own
//! channel (the router's discard policy applies there); it never slows
//! another connection.

pub mod packet;
mod session;
pub mod topic;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::auth::Authenticator;
use crate::config::{AuthConfig, ConfigError};
use crate::InProcessConnector;

/// The `[mqtt]` section: where the MQTT listener listens and its bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// Listen address (`tagwired --mqtt ADDR`); `None`: no MQTT listener.
    pub listen: Option<SocketAddr>,
    /// Most MQTT connections at once; past it a new connection is closed
    /// at once (and logged).
    pub max_connections: usize,
    /// Largest MQTT packet accepted (remaining length, bytes); a larger one
    /// fails its connection (MQTT 5: DISCONNECT 0x95).
    pub max_packet: usize,
    /// Deliveries queued per connection for its client; at the bound the
    /// oldest QoS 0 one is dropped, and with none left the connection stops
    /// reading its deliveries from the router until the client catches up.
    pub queue_length: usize,
    /// The same bound in payload bytes.
    pub queue_bytes: usize,
    /// QoS 1 deliveries in flight (unacknowledged) per connection; an MQTT
    /// 5 client's smaller receive maximum wins.
    pub inflight: u16,
    /// Subscriptions (filters) per connection.
    pub max_subscriptions: usize,
    /// The longest keep alive, seconds: a client asking for 0 (none) or
    /// more gets this one (MQTT 5 is told so in CONNACK).
    pub max_keep_alive: u16,
    /// Seconds a new connection has to send CONNECT.
    pub connect_timeout: u64,
    /// An `[[auth.tokens]]` name: clients that send no password connect as
    /// `token:NAME`. Unset (the default): no password, no connection.
    pub anonymous: Option<String>,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            listen: None,
            max_connections: 1024,
            max_packet: 1024 * 1024,
            queue_length: 1024,
            queue_bytes: 8 * 1024 * 1024,
            inflight: 32,
            max_subscriptions: 256,
            max_keep_alive: 600,
            connect_timeout: 10,
            anonymous: None,
        }
    }
}

impl MqttConfig {
    /// Checks the bounds, the anonymous token and the loopback rule.
    pub fn validate(&self, auth: &AuthConfig) -> Result<(), ConfigError> {
        let Some(addr) = self.listen else {
            return Ok(());
        };
        for (name, v) in [
            ("max_connections", self.max_connections),
            ("max_packet", self.max_packet),
            ("queue_length", self.queue_length),
            ("queue_bytes", self.queue_bytes),
            ("inflight", self.inflight as usize),
            ("max_subscriptions", self.max_subscriptions),
            ("max_keep_alive", self.max_keep_alive as usize),
            ("connect_timeout", self.connect_timeout as usize),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid(format!(
                    "mqtt.{name} = 0: it must be at least 1"
                )));
            }
        }
        if self.max_packet > 256 * 1024 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "mqtt.max_packet = {} is over MQTT's 268435455",
                self.max_packet
            )));
        }
        if !addr.ip().is_loopback() && !auth.enabled {
            return Err(ConfigError::Invalid(format!(
                "mqtt.listen = {addr} is not a loopback address, and [auth] enabled = false: \
                 without authentication the daemon listens on loopback only"
            )));
        }
        if let Some(name) = &self.anonymous {
            if !auth.tokens.iter().any(|t| &t.name == name) {
                return Err(ConfigError::Invalid(format!(
                    "mqtt.anonymous = {name:?}: no [[auth.tokens]] entry has that name"
                )));
            }
        }
        Ok(())
    }

    /// The secret of the `anonymous` token, read like the router reads it.
    fn anonymous_secret(&self, auth: &AuthConfig) -> Result<Option<String>, ConfigError> {
        let Some(name) = &self.anonymous else {
            return Ok(None);
        };
        let Some(t) = auth.tokens.iter().find(|t| &t.name == name) else {
            return Err(ConfigError::Invalid(format!(
                "mqtt.anonymous = {name:?}: no [[auth.tokens]] entry has that name"
            )));
        };
        match (&t.token, &t.file) {
            (Some(s), _) => Ok(Some(s.clone())),
            (None, Some(f)) => std::fs::read_to_string(f)
                .map(|s| Some(s.trim().to_owned()))
                .map_err(|e| {
                    ConfigError::Invalid(format!(
                        "mqtt.anonymous: cannot read token file {}: {e}",
                        f.display()
                    ))
                }),
            (None, None) => Err(ConfigError::Invalid(format!(
                "mqtt.anonymous = {name:?}: the token has no secret"
            ))),
        }
    }
}

/// What every connection of one listener shares.
pub(crate) struct Shared {
    pub(crate) config: MqttConfig,
    pub(crate) auth: Authenticator,
    pub(crate) anonymous: Option<String>,
    pub(crate) connector: InProcessConnector,
    /// Live client ids → (connection number, its takeover signal).
    pub(crate) clients: Mutex<HashMap<String, (u64, Arc<tokio::sync::Notify>)>>,
    pub(crate) live: AtomicUsize,
    pub(crate) next_conn: AtomicU64,
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
}

/// A running MQTT listener; [`Gateway::stop`] (or drop) closes it.
pub struct Gateway {
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("addr", &self.addr).finish()
    }
}

impl Gateway {
    /// Binds `config.listen` and serves MQTT on its own thread, attaching
    /// one in-process connection per client through `connector`. `auth` is
    /// built like the router's (same tokens, same ACL).
    pub(crate) fn start(
        config: MqttConfig,
        auth_config: &AuthConfig,
        auth: Authenticator,
        connector: InProcessConnector,
    ) -> Result<Option<Gateway>, crate::RouterError> {
        let Some(listen) = config.listen else {
            return Ok(None);
        };
        config.validate(auth_config)?;
        let anonymous = config.anonymous_secret(auth_config)?;
        let listen_err = |source| crate::RouterError::Listen {
            what: format!("mqtt {listen}"),
            source,
        };
        let std_listener = std::net::TcpListener::bind(listen).map_err(listen_err)?;
        std_listener.set_nonblocking(true).map_err(listen_err)?;
        let addr = std_listener.local_addr().map_err(listen_err)?;
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            auth,
            anonymous,
            connector,
            clients: Mutex::new(HashMap::new()),
            live: AtomicUsize::new(0),
            next_conn: AtomicU64::new(1),
            shutdown,
        });
        let thread = std::thread::Builder::new()
            .name("tagwire-mqtt".into())
            .spawn(move || run(std_listener, shared))
            .map_err(crate::RouterError::Lane)?;
        tracing::info!("mqtt: listening on mqtt://{addr} (MQTT 3.1.1 and 5)");
        Ok(Some(Gateway {
            addr,
            stop,
            thread: Some(thread),
        }))
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tells every client the daemon is stopping (MQTT 5: DISCONNECT 0x8B),
    /// closes the listener and waits for its thread.
    pub fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the mqtt thread panicked");
            }
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("mqtt: cannot start the runtime: {e}");
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("mqtt: cannot use the listener: {e}");
                return;
            }
        };
        let mut shutdown = shared.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                accepted = listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // EMFILE and the like: back off instead of spinning.
                            tracing::warn!("mqtt: accept failed: {e}");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let max = shared.config.max_connections;
                    if shared.live.fetch_add(1, Ordering::AcqRel) >= max {
                        shared.live.fetch_sub(1, Ordering::AcqRel);
                        tracing::warn!(%peer, "mqtt: {max} connections already (mqtt.max_connections); closing the new one");
                        drop(tcp);
                        continue;
                    }
                    let s = shared.clone();
                    tokio::spawn(async move {
                        session::serve(&s, tcp, peer).await;
                        s.live.fetch_sub(1, Ordering::AcqRel);
                    });
                }
            }
        }
        // Let the connections say goodbye (bounded).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        while shared.live.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
}
