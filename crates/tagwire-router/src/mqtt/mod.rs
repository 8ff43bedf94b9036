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

pub use crate::config::mqtt::MqttConfig;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::auth::Authenticator;
use crate::config::AuthConfig;
use crate::lane::InProcessConnector;

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
    ) -> Result<Option<Gateway>, crate::error::RouterError> {
        let Some(listen) = config.listen else {
            return Ok(None);
        };
        config.validate(auth_config)?;
        let anonymous = config.anonymous_secret(auth_config)?;
        let listen_err = |source| crate::error::RouterError::Listen {
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
            .map_err(crate::error::RouterError::Lane)?;
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
