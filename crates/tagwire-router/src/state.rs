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

use crate::admin::{ConnectionInfo, EndpointEntry, Listing, MemoryInfo, SubscriptionInfo, TagInfo};
use crate::admission::Admission;
use crate::budget::MemoryBudget;
use crate::channel::{Channel, Outbox};
use crate::config::RouterConfig;
use crate::filters::{FilterBook, SourceFilters};

pub(crate) struct ConnEntry {
    pub name: String,
    pub peer: String,
    pub outbox: Rc<Outbox>,
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
    /// The router-wide memory budget (`limits.max_buffered_bytes`).
    pub memory: Rc<MemoryBudget>,
    /// Connections before and after the handshake, and the log rate limit.
    pub admission: Admission,
    next_conn: u64,
}

impl State {
    pub fn new(config: RouterConfig) -> Self {
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
            memory,
            admission: Admission::default(),
            next_conn: 1,
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
