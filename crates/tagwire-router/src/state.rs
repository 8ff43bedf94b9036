//! The routing state a lane holds: the routes (channels by pattern and
//! filter), the endpoint
//! registry, connection and tag bookkeeping. Single-threaded (`Rc`/`RefCell`)
//! because a lane is one thread; nothing here is held across an `.await`.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use tagwire_core::defer::Deferred;
use tagwire_core::endpoint::EndpointRegistry;
use tagwire_core::route::Routes;

use serde::{Deserialize, Serialize};

use crate::admin::{ConnectionInfo, EndpointEntry, Listing, MemoryInfo, SubscriptionInfo, TagInfo};
use crate::admission::Admission;
use crate::auth::Authenticator;
use crate::budget::MemoryBudget;
use crate::channel::{Channel, Outbox};
use crate::config::RouterConfig;
use crate::filters::{FilterBook, SourceFilters};

pub(crate) struct ConnEntry {
    pub name: String,
    pub peer: String,
    pub outbox: Rc<Outbox>,
    /// Who it is, once through the handshake (empty before).
    pub identity: Rc<str>,
    /// Its session id (all zero: none), for endpoint reservations.
    pub session: [u8; tagwire_proto::SESSION_ID_LEN],
}

/// What one identity holds, checked against the per-identity quotas.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Usage {
    pub connections: usize,
    pub endpoints: usize,
    pub subscriptions: usize,
}

/// An endpoint name kept for the session that held it when its connection
/// dropped without `Close` (or the daemon restarted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reservation {
    pub identity: String,
    /// The session id, hex.
    pub session: String,
    /// Until when (ns since the Unix epoch).
    pub until_ns: u64,
}

pub(crate) struct TagStats {
    pub published: u64,
    pub last_publisher: String,
}

pub(crate) struct State {
    pub config: RouterConfig,
    /// Channels by pattern, with their filters and their sessions' (one
    /// session per connection, keyed by connection id).
    pub routes: Routes<Rc<Channel>>,
    /// Every channel by its router-wide subscription id.
    pub channels: HashMap<u64, Rc<Channel>>,
    pub endpoints: EndpointRegistry,
    pub connections: HashMap<u64, ConnEntry>,
    /// Updated once per published event, so a fast (seeded) hasher.
    pub tags: hashbrown::HashMap<Box<str>, TagStats>,
    pub untracked_publishes: u64,
    pub expired: u64,
    /// Filters attached by subscriptions and admin requests.
    pub filters: FilterBook,
    /// Each publisher endpoint's filters, by endpoint name.
    pub sources: HashMap<Rc<str>, SourceFilters>,
    /// Events dropped because their publisher's filters rejected them.
    pub filtered_at_source: u64,
    /// Events held until their start time.
    pub deferred: Deferred<Bytes>,
    /// Wakes the task that releases deferred events.
    pub deferred_wake: Rc<tokio::sync::Notify>,
    /// Who may connect and what they may do.
    pub auth: Authenticator,
    /// What each identity holds, for its quotas.
    pub usage: HashMap<Rc<str>, Usage>,
    /// Endpoint names reserved for the sessions that held them.
    pub reservations: HashMap<String, Reservation>,
    /// The router-wide memory budget (`limits.max_buffered_bytes`).
    pub memory: Rc<MemoryBudget>,
    /// Connections before and after the handshake, and the log rate limit.
    pub admission: Admission,
    next_conn: u64,
}

impl State {
    pub fn new(config: RouterConfig, auth: Authenticator) -> Self {
        let endpoints = EndpointRegistry::new(config.limits.max_endpoints);
        let deferred = Deferred::new(
            config.limits.max_deferred_events,
            config.limits.max_deferred_bytes,
        );
        let filters = FilterBook::default();
        let memory = Rc::new(MemoryBudget::new(config.limits.max_buffered_bytes));
        State {
            config,
            routes: Routes::new(filters.limits.clone()),
            channels: HashMap::new(),
            endpoints,
            connections: HashMap::new(),
            tags: hashbrown::HashMap::new(),
            untracked_publishes: 0,
            expired: 0,
            filters,
            sources: HashMap::new(),
            filtered_at_source: 0,
            deferred,
            deferred_wake: Rc::default(),
            auth,
            usage: HashMap::new(),
            reservations: HashMap::new(),
            memory,
            admission: Admission::default(),
            next_conn: 1,
        }
    }

    /// The usage entry of `identity`.
    pub fn usage(&mut self, identity: &Rc<str>) -> &mut Usage {
        self.usage.entry(identity.clone()).or_default()
    }

    /// Drops `identity`'s usage entry once it holds nothing, so the table
    /// stays as small as the set of identities connected.
    pub fn forget_idle_identity(&mut self, identity: &str) {
        if let Some(u) = self.usage.get(identity) {
            if u.connections == 0 && u.endpoints == 0 && u.subscriptions == 0 {
                self.usage.remove(identity);
            }
        }
    }

    /// Reserves endpoint `name` for `(identity, session)` until `until_ns`,
    /// forgetting the reservation closest to expiry when the table is full.
    pub fn reserve(&mut self, name: &str, r: Reservation) {
        if self.reservations.len() >= self.config.limits.max_reservations
            && !self.reservations.contains_key(name)
        {
            let oldest = self
                .reservations
                .iter()
                .min_by_key(|(_, r)| r.until_ns)
                .map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                self.reservations.remove(&n);
            }
        }
        if self.reservations.len() < self.config.limits.max_reservations {
            self.reservations.insert(name.to_owned(), r);
        }
    }

    /// Reads reservations kept by [`save_reservations`](Self::save_reservations)
    /// at the last shutdown; each lasts the configured time from `now`. A
    /// missing file is normal; a bad one is logged and ignored.
    pub fn load_reservations(&mut self, path: &std::path::Path, now: u64) {
        const MAX_FILE: u64 = 64 * 1024 * 1024;
        let read = || -> Result<HashMap<String, Reservation>, String> {
            if let Some(dir) = path.parent() {
                crate::local::check_private_dir(dir).map_err(|e| e.to_string())?;
            }
            let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
            if len > MAX_FILE {
                return Err(format!("{len} bytes, over {MAX_FILE}"));
            }
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map_err(|e| e.to_string())
        };
        if !path.exists() {
            return;
        }
        match read() {
            Ok(kept) => {
                let secs = self.config.limits.endpoint_reservation_secs;
                let until_ns = now.saturating_add(secs.saturating_mul(1_000_000_000));
                let n = kept.len();
                for (name, mut r) in kept {
                    r.until_ns = until_ns;
                    self.reserve(&name, r);
                }
                tracing::info!(
                    "{n} endpoint name(s) reserved for their sessions for {secs} s (from {})",
                    path.display()
                );
            }
            Err(e) => tracing::warn!("ignoring reservations file {}: {e}", path.display()),
        }
        let _ = std::fs::remove_file(path);
    }

    /// Writes the live endpoints of sessions that have an id, and the
    /// unexpired reservations, to `path` (mode 0600), for the next start.
    pub fn save_reservations(&mut self, path: &std::path::Path, now: u64) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut kept: HashMap<String, Reservation> = self
            .reservations
            .drain()
            .filter(|(_, r)| r.until_ns > now)
            .collect();
        for e in self.endpoints.list() {
            let Some(c) = self.connections.get(&e.owner) else {
                continue;
            };
            if c.session != [0; tagwire_proto::SESSION_ID_LEN] {
                let session = crate::connection::hex(&c.session);
                let identity = c.identity.to_string();
                kept.insert(
                    e.name.clone(),
                    Reservation {
                        identity,
                        session,
                        until_ns: now,
                    },
                );
            }
        }
        let write = || -> std::io::Result<()> {
            let tmp = path.with_extension("tmp");
            let _ = std::fs::remove_file(&tmp);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(serde_json::to_string(&kept)?.as_bytes())?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!(
                "cannot keep endpoint reservations in {}: {e}",
                path.display()
            );
        }
    }

    pub fn next_connection_id(&mut self) -> u64 {
        let id = self.next_conn;
        self.next_conn += 1;
        id
    }

    /// Counts a publish on `tag` by `publisher`, within the tracking bound.
    pub fn note_publish(&mut self, tag: &str, publisher: &str) {
        if let Some(s) = self.tags.get_mut(tag) {
            s.published += 1;
            if s.last_publisher != publisher {
                publisher.clone_into(&mut s.last_publisher);
            }
        } else if self.tags.len() < self.config.limits.max_tracked_tags {
            self.tags.insert(
                tag.into(),
                TagStats {
                    published: 1,
                    last_publisher: publisher.to_owned(),
                },
            );
        } else {
            self.untracked_publishes += 1;
        }
    }

    pub fn listing(&self) -> Listing {
        let mut channels: Vec<_> = self.channels.iter().collect();
        channels.sort_by_key(|(id, _)| **id);
        let mut connections: Vec<_> = self
            .connections
            .iter()
            .map(|(id, c)| ConnectionInfo {
                id: *id,
                name: c.name.clone(),
                peer: c.peer.clone(),
                identity: c.identity.to_string(),
            })
            .collect();
        connections.sort_by_key(|c| c.id);
        let mut tags: Vec<_> = self
            .tags
            .iter()
            .map(|(t, s)| TagInfo {
                tag: t.to_string(),
                published: s.published,
                last_publisher: s.last_publisher.clone(),
            })
            .collect();
        tags.sort_by(|a, b| a.tag.cmp(&b.tag));
        Listing {
            server: self.config.name.clone(),
            auth: self.auth.describe(),
            connections,
            endpoints: self
                .endpoints
                .list()
                .into_iter()
                .map(|e| EndpointEntry {
                    name: e.name.clone(),
                    kind: match e.kind {
                        tagwire_proto::EndpointKind::Publisher => "publisher".into(),
                        tagwire_proto::EndpointKind::Subscriber => "subscriber".into(),
                    },
                    connection: e.owner,
                })
                .collect(),
            subscriptions: channels
                .into_iter()
                .map(|(id, ch)| {
                    let q = ch.queue.borrow();
                    SubscriptionInfo {
                        endpoint: ch.endpoint.to_string(),
                        pattern: ch.pattern.clone(),
                        queue_depth: q.len(),
                        queue_bound: q.bound(),
                        discard: q.policy().to_string(),
                        dropped: q.dropped(),
                        delivered: ch.delivered.get(),
                        expired: ch.expired.get(),
                        route: self.routes.kind(*id).map_or("", |k| k.as_str()).to_owned(),
                    }
                })
                .collect(),
            tags,
            untracked_publishes: self.untracked_publishes,
            expired: self.expired,
            filtered_at_source: self.filtered_at_source,
            deferred: self.deferred.len(),
            memory: MemoryInfo {
                buffered_bytes: self.memory.used() as u64,
                max_buffered_bytes: self.memory.max() as u64,
                discarded_events: self.memory.discards(),
                refused_connections: self.memory.refusals(),
            },
        }
    }
}
