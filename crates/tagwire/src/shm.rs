//! Shared memory negotiated by the daemon, the client's side (`docs/shm.md`,
//! "Negotiated by the daemon"). Over the daemon's Unix socket (or embedded)
//! a publisher asks for a region and writes its payloads there; only the
//! event header and a 24-byte reference travel over the socket. A
//! subscriber on the same host gets the region's fd once and reads payloads
//! in place: [`Sample::payload`](crate::Sample::payload) is then a `Bytes`
//! over the shared memory that keeps the packet from being reused until
//! the last clone is dropped. A packet reclaimed before it was handed over
//! (drop-oldest, expiry) is skipped and counted ([`ShmStats::expired`]),
//! never read torn.
//!
//! Which mode when: `auto` (default) uses shared memory where it can and
//! says why not in the log; `require` makes that an error; `off` keeps
//! payloads on the socket (e.g. to measure the difference).

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tagwire_proto::{ShmRef, ShmRole};
use tagwire_shm::{Consumer, ConsumerConfig, HeldSample, Producer, ProducerConfig, Region};

pub use tagwire_core::qos::ShmMode;

use crate::session::lock;

/// In-place samples one session holds at once per region (each takes a
/// consumer entry of the region); beyond it payloads are copied.
const MAX_HELD_PER_REGION: usize = 4;
/// Regions a session keeps mapped; regions whose producer is gone are let
/// go first, and a region beyond the bound is not mapped (its payloads
/// cannot be read: counted in [`ShmStats::unreadable`]).
const MAX_REGIONS: usize = 256;
/// Fds received but not yet named by a `ShmRegion` frame.
const MAX_PENDING_FDS: usize = 64;

/// What a session's shared-memory path did (see [`Session::shm_stats`](crate::Session::shm_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Events published with the payload in shared memory.
    pub published: u64,
    /// Events published over the socket although this session's publisher had a region
    /// (payload larger than a chunk, a loan outstanding, or a reconnect).
    pub published_socket: u64,
    /// Payloads handed to the application in place (no copy).
    pub in_place: u64,
    /// Payloads copied out of shared memory (every in-place entry was held).
    pub copied: u64,
    /// Packets reclaimed (drop-oldest, expiry, retract) before they were handed over: skipped.
    pub expired: u64,
    /// References to regions this session could not map: skipped.
    pub unreadable: u64,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    published_socket: AtomicU64,
    in_place: AtomicU64,
    copied: AtomicU64,
    expired: AtomicU64,
    unreadable: AtomicU64,
}

/// A session's shared-memory state: fds in transit, mapped regions, counters.
#[derive(Default)]
pub(crate) struct ClientShm {
    fds: Mutex<VecDeque<OwnedFd>>,
    regions: Mutex<HashMap<u64, Arc<ClientRegion>>>,
    grants: Mutex<HashMap<u64, Region>>,
    counters: Arc<Counters>,
}

impl ClientShm {
    /// Keeps fds that arrived with the socket's bytes (SCM_RIGHTS).
    pub(crate) fn received_fds(&self, fds: Vec<OwnedFd>) {
        let mut q = lock(&self.fds);
        for fd in fds {
            if q.len() >= MAX_PENDING_FDS {
                tracing::warn!("dropping a shared-memory fd the server sent unnamed");
                continue;
            }
            q.push_back(fd);
        }
    }

    /// A `ShmRegion` frame: names the oldest fd received.
    pub(crate) fn named(&self, region: u64, role: ShmRole) {
        let Some(fd) = lock(&self.fds).pop_front() else {
            tracing::warn!(
                region,
                "the server named shared-memory region {region} but no fd came with it; its payloads cannot be read here"
            );
            return;
        };
        let mapped = match Region::attach(fd) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(region, "cannot map shared-memory region {region}: {e}");
                return;
            }
        };
        match role {
            ShmRole::Producer => {
                lock(&self.grants).insert(region, mapped);
            }
            ShmRole::Consumer => {
                let mut regions = lock(&self.regions);
                if regions.len() >= MAX_REGIONS {
                    regions
                        .retain(|_, r| !(r.region.producer_gone(0) && Arc::strong_count(r) == 1));
                }
                if regions.len() >= MAX_REGIONS {
                    tracing::warn!(
                        region,
                        "{MAX_REGIONS} shared-memory regions mapped; not mapping {region}"
                    );
                    return;
                }
                regions.insert(
                    region,
                    Arc::new(ClientRegion {
                        region: mapped,
                        pool: Mutex::new(Vec::new()),
                        entries: AtomicUsize::new(0),
                        copier: Mutex::new(None),
                        counters: self.counters.clone(),
                    }),
                );
            }
        }
    }

    /// Takes the producer grant of `region` (after the `shm_open` reply).
    pub(crate) fn take_grant(&self, region: u64) -> Option<Region> {
        lock(&self.grants).remove(&region)
    }

    /// Resolves a delivered reference to its mapped region (no read yet).
    pub(crate) fn pending(&self, r: ShmRef) -> Option<Pending> {
        let region = lock(&self.regions).get(&r.region).cloned();
        match region {
            Some(region) => Some(Pending { region, r }),
            None => {
                self.counters.unreadable.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    pub(crate) fn note_published(&self, shm: bool) {
        let c = if shm {
            &self.counters.published
        } else {
            &self.counters.published_socket
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> ShmStats {
        let c = &self.counters;
        ShmStats {
            published: c.published.load(Ordering::Relaxed),
            published_socket: c.published_socket.load(Ordering::Relaxed),
            in_place: c.in_place.load(Ordering::Relaxed),
            copied: c.copied.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            unreadable: c.unreadable.load(Ordering::Relaxed),
        }
    }
}

/// A region this session reads: a pool of consumer entries (one per
/// sample held in place) and one entry for copies.
pub(crate) struct ClientRegion {
    region: Region,
    pool: Mutex<Vec<Consumer>>,
    entries: AtomicUsize,
    copier: Mutex<Option<Consumer>>,
    counters: Arc<Counters>,
}

/// A delivered payload reference not read yet (a queued sample holds no
/// shared memory: a subscriber that never reads pins nothing).
#[derive(Clone)]
pub(crate) struct Pending {
    region: Arc<ClientRegion>,
    r: ShmRef,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("ref", &self.r).finish()
    }
}

/// Holds a packet in place for a `Bytes` (`Bytes::from_owner`); gives the
/// consumer entry back to its region's pool when the last clone drops.
struct Held {
    sample: Option<HeldSample>,
    home: Arc<ClientRegion>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        self.sample.as_deref().unwrap_or_default()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(s) = self.sample.take() {
            lock(&self.home.pool).push(s.release());
        }
    }
}

impl Pending {
    /// Reads the payload: in place if an entry is free, else a copy.
    /// `None`: the packet was reclaimed (or is malformed): skip it.
    pub(crate) fn read(&self) -> Option<(Bytes, bool)> {
        let home = &self.region;
        let now = crate::publisher::now_ns();
        let consumer = lock(&home.pool).pop().or_else(|| {
            (home.entries.fetch_add(1, Ordering::Relaxed) < MAX_HELD_PER_REGION)
                .then(|| home.region.consumer(0, ConsumerConfig::default()).ok())
                .flatten()
                .or_else(|| {
                    home.entries.fetch_sub(1, Ordering::Relaxed);
                    None
                })
        });
        if let Some(c) = consumer {
            return match c.hold(self.r.seq, now) {
                Ok(held) if held.len() == self.r.len as usize => {
                    home.counters.in_place.fetch_add(1, Ordering::Relaxed);
                    let owner = Held {
                        sample: Some(held),
                        home: home.clone(),
                    };
                    Some((Bytes::from_owner(owner), true))
                }
                Ok(held) => {
                    lock(&home.pool).push(held.release());
                    home.counters.expired.fetch_add(1, Ordering::Relaxed);
                    None
                }
                Err(back) => {
                    lock(&home.pool).push(back.0);
                    home.counters.expired.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
        }
        let mut copier = lock(&home.copier);
        if copier.is_none() {
            *copier = home.region.consumer(0, ConsumerConfig::default()).ok();
        }
        let copied = copier
            .as_mut()
            .and_then(|c| c.read_at(self.r.seq, now).ok())
            .filter(|s| s.len() == self.r.len as usize)
            .map(|s| Bytes::copy_from_slice(&s));
        match copied {
            Some(b) => {
                home.counters.copied.fetch_add(1, Ordering::Relaxed);
                Some((b, false))
            }
            None => {
                home.counters.expired.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

/// A publisher's region: it is the producer of stream 0.
pub(crate) struct ShmPublisher {
    pub(crate) region: u64,
    pub(crate) producer: Producer,
    /// The largest payload (the chunk size).
    pub(crate) max: usize,
    /// The session's reconnect count when granted: after a reconnect the
    /// daemon no longer knows the region, and the publisher uses the socket.
    pub(crate) reconnects: u64,
}

impl std::fmt::Debug for ShmPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmPublisher")
            .field("region", &self.region)
            .field("max", &self.max)
            .finish()
    }
}

impl ShmPublisher {
    /// Becomes the producer of a granted region.
    pub(crate) fn new(region_id: u64, region: Region, reconnects: u64) -> Result<Self, String> {
        let max = region.layout().geometry.chunk_bytes as usize;
        let producer = region
            .producer(0, ProducerConfig::default())
            .map_err(|e| format!("cannot produce into shared-memory region {region_id}: {e}"))?;
        Ok(ShmPublisher {
            region: region_id,
            producer,
            max,
            reconnects,
        })
    }
}
