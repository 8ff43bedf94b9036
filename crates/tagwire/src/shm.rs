//! Shared memory negotiated by the daemon, the client's side (`docs/shm.md`,
//! "Negotiated by the daemon"). Over the daemon's Unix socket (or embedded)
//! a publisher asks for a region and writes its payloads there; only the
//! event header and a 24-byte reference travel over the socket. A
//! subscriber on the same host gets the region's fd once and reads payloads
//! in place: [`Sample::payload`](crate::Sample::payload) is then a `Bytes`
//! over the shared memory. The daemon pins each payload it sends by
//! reference for this connection; the session adopts the pin when the
//! event arrives and gives it back when the last clone of the payload (or
//! the queued sample) is dropped, so a payload is never lost or read torn
//! however far behind the subscriber is (past `limits.shm_pins` payloads
//! held, the daemon sends copies instead).
//!
//! Which mode when: `auto` (the default) uses shared memory where it can and
//! says why not in the log; `require` makes that an error; `off` keeps
//! payloads on the socket (e.g. to measure the difference).

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tagwire_proto::{ShmRef, ShmRole};
use tagwire_shm::{Overload, PinHolder, Producer, ProducerConfig, Region};

pub use tagwire_core::qos::ShmMode;

use crate::sync::lock;

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
    /// (payload larger than a chunk, the daemon not yet through the ring,
    /// every chunk pinned by subscribers, or a reconnect). Payloads under
    /// `auto`'s size threshold are not counted: the socket is their path.
    pub published_socket: u64,
    /// Payloads received in place (no copy).
    pub in_place: u64,
    /// In-place payloads whose deadline passed before the application took them: skipped.
    pub expired: u64,
    /// References this session could not read (a region it could not map,
    /// or a pin the daemon no longer holds): skipped.
    pub unreadable: u64,
    /// Events published in shared memory and not yet read by the daemon
    /// when the connection was lost, whose packet had left the region by
    /// the reconnect (the others are sent again with their payload
    /// inline): lost, and logged.
    pub unsent: u64,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    published_socket: AtomicU64,
    in_place: AtomicU64,
    expired: Arc<AtomicU64>,
    unreadable: AtomicU64,
    unsent: AtomicU64,
}

/// A session's shared-memory state: fds in transit, mapped regions, counters.
#[derive(Default)]
pub(crate) struct ClientShm {
    fds: Mutex<VecDeque<OwnedFd>>,
    regions: Mutex<HashMap<u64, PinHolder>>,
    grants: Mutex<HashMap<u64, Region>>,
    /// The regions this session's publishers produce into, by id, so that
    /// after a reconnect the publishes that refer to them and were not
    /// written (or whose write failed) can be sent with their payload
    /// inline; emptied at each reconnect, pruned of regions whose
    /// publisher is gone.
    produced: Mutex<HashMap<u64, Region>>,
    counters: Counters,
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

    /// A `ShmRegion` frame: names the oldest fd received; `ticket`: for a
    /// consumer, the daemon's pin row for this connection.
    pub(crate) fn named(&self, region: u64, role: ShmRole, ticket: u32) {
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
                let holder = match mapped.pin_holder(ticket) {
                    Ok(h) => h,
                    Err(e) => {
                        tracing::warn!(region, "shared-memory region {region}: {e}");
                        return;
                    }
                };
                let mut regions = lock(&self.regions);
                if regions.len() >= MAX_REGIONS {
                    regions.retain(|_, h| !h.region().producer_gone(0));
                }
                if regions.len() >= MAX_REGIONS {
                    tracing::warn!(
                        region,
                        "{MAX_REGIONS} shared-memory regions mapped; not mapping {region}"
                    );
                    return;
                }
                // A region named again (a new connection after a reconnect)
                // comes with a new pin row.
                regions.insert(region, holder);
            }
        }
    }

    /// Takes the producer grant of `region` (after the `shm_open` reply).
    pub(crate) fn take_grant(&self, region: u64) -> Option<Region> {
        lock(&self.grants).remove(&region)
    }

    /// A publisher of this session produces into `region` (id `id`), which
    /// replaces region `replaces` (a larger one: every publish that refers
    /// to the old one was written before the grant's reply came).
    pub(crate) fn producing(&self, id: u64, region: &Region, replaces: Option<u64>) {
        let mut p = lock(&self.produced);
        if let Some(old) = replaces {
            p.remove(&old);
        }
        p.retain(|_, r| !r.producer_gone(0));
        p.insert(id, region.clone());
    }

    /// A new connection: takes the regions the lost one's publishers
    /// produced into (see `produced`), and lets go of everything else the
    /// old daemon handed out: fds not yet named, producer grants not taken,
    /// and the regions mapped to read in place (no reference into them can
    /// come any more: the reader thread read the old connection to its
    /// end; payloads adopted from them keep their own mapping).
    pub(crate) fn new_connection(&self) -> HashMap<u64, Region> {
        lock(&self.fds).clear();
        lock(&self.grants).clear();
        lock(&self.regions).clear();
        std::mem::take(&mut *lock(&self.produced))
    }

    pub(crate) fn note_unsent(&self, n: u64) {
        self.counters.unsent.fetch_add(n, Ordering::Relaxed);
    }

    /// The payload a delivered reference points at, in place: its pin is
    /// adopted now (a queued sample keeps the payload) and given back when
    /// the last clone of the bytes drops. `None`: unreadable (counted).
    pub(crate) fn adopt(&self, r: ShmRef) -> Option<Bytes> {
        let pin = self.pin_of(r);
        match pin {
            Some(Ok(pin)) => {
                self.counters.in_place.fetch_add(1, Ordering::Relaxed);
                Some(Bytes::from_owner(pin))
            }
            Some(Err(e)) => {
                tracing::debug!(region = r.region, "shared-memory payload unreadable: {e}");
                self.counters.unreadable.fetch_add(1, Ordering::Relaxed);
                None
            }
            None => {
                self.counters.unreadable.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The pin handed over with reference `r` (`None`: its region is not mapped here).
    fn pin_of(&self, r: ShmRef) -> Option<Result<tagwire_shm::Pin, tagwire_shm::Error>> {
        lock(&self.regions)
            .get(&r.region)
            .map(|h| h.adopt(r.chunk, r.len as u64))
    }

    /// Whether this session was given pin rows to read payloads in place
    /// (so references may be on their way to it).
    pub(crate) fn reads_in_place(&self) -> bool {
        !lock(&self.regions).is_empty()
    }

    /// Gives back the pin of a delivered reference nobody will read (its
    /// subscription is gone): adopted and dropped at once, not counted.
    pub(crate) fn give_back(&self, r: ShmRef) {
        if let Some(Err(e)) = self.pin_of(r) {
            tracing::debug!(region = r.region, "shared-memory pin not given back: {e}");
        }
    }

    /// The counter of in-place payloads skipped as expired (each sample holds it).
    pub(crate) fn expired_counter(&self) -> Arc<AtomicU64> {
        self.counters.expired.clone()
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
            expired: c.expired.load(Ordering::Relaxed),
            unreadable: c.unreadable.load(Ordering::Relaxed),
            unsent: c.unsent.load(Ordering::Relaxed),
        }
    }
}

/// A `shm_open` request on its way (see `Session::ask_shm`).
#[derive(Debug)]
pub(crate) struct ShmAsk {
    /// Where the reply comes.
    pub(crate) rx: std::sync::mpsc::Receiver<tagwire_core::connection::Reply>,
    /// The publisher's name (for messages).
    pub(crate) name: String,
    pub(crate) mode: ShmMode,
    /// `Some((max_packet, current region))` for a larger region.
    pub(crate) grow: Option<(u64, u64)>,
    /// The session's connection (its epoch: connections established so far) when asked.
    pub(crate) epoch: u64,
}

impl ShmAsk {
    /// Waits for the reply (not from a subscription callback: the reader
    /// thread would wait for itself).
    pub(crate) fn wait(&self) -> crate::error::Result<tagwire_core::connection::Reply> {
        use std::sync::mpsc::RecvTimeoutError;
        self.rx
            .recv_timeout(crate::options::REQUEST_TIMEOUT)
            .map_err(|e| match e {
                RecvTimeoutError::Timeout => crate::error::Error::Timeout {
                    what: "shm_open request",
                    secs: crate::options::REQUEST_TIMEOUT.as_secs(),
                },
                RecvTimeoutError::Disconnected => crate::error::Error::Disconnected,
            })
    }
}

/// Publisher `name` gets no region, for `why`: `require` fails naming it,
/// `auto` logs it and publishes over the socket (`Ok(None)`).
pub(crate) fn refuse(
    name: &str,
    mode: ShmMode,
    why: String,
) -> crate::error::Result<Option<ShmPublisher>> {
    match mode {
        ShmMode::Require => Err(crate::error::Error::Refused {
            code: tagwire_proto::ErrorCode::BadRequest,
            message: format!("shm=require for publisher {name}: {why}"),
        }),
        _ => {
            tracing::info!("publisher {name}: payloads go over the socket: {why}");
            Ok(None)
        }
    }
}

/// A publisher's region: it is the producer of stream 0.
pub(crate) struct ShmPublisher {
    pub(crate) region: u64,
    pub(crate) producer: Producer,
    /// The largest payload (the chunk size).
    pub(crate) max: usize,
    /// The session's connection when granted: after a reconnect the
    /// daemon no longer knows the region, and the publisher asks again.
    pub(crate) epoch: u64,
    /// The daemon gave no larger region (its `limits.shm_max_packet`, or a
    /// refusal): larger payloads go over the socket without asking again.
    pub(crate) at_daemon_limit: bool,
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
    pub(crate) fn new(region_id: u64, region: Region, epoch: u64) -> Result<Self, String> {
        let max = region.layout().geometry.chunk_bytes as usize;
        // Never reuse a slot the daemon has not read: `Full` then, and that
        // event goes over the socket (the socket's backpressure applies).
        let cfg = ProducerConfig {
            overload: Overload::Block,
            ..ProducerConfig::default()
        };
        let producer = region
            .producer(0, cfg)
            .map_err(|e| format!("cannot produce into shared-memory region {region_id}: {e}"))?;
        Ok(ShmPublisher {
            region: region_id,
            producer,
            max,
            epoch,
            at_daemon_limit: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagwire_shm::{ProducerConfig, RegionConfig};

    /// Issue 24, item 14: after a reconnect nothing of the old daemon's
    /// stays: regions mapped to read in place, unnamed fds, untaken grants
    /// (their ids could name a new daemon's regions).
    #[test]
    fn a_new_connection_lets_go_of_the_old_daemons_regions() {
        let region = Region::create(RegionConfig {
            reserve: false,
            ..RegionConfig::default()
        })
        .expect("region");
        let row = region.pin_row().expect("row");
        let shm = ClientShm::default();
        let fd = |r: &Region| r.fd().try_clone_to_owned().expect("dup");
        shm.received_fds(vec![fd(&region), fd(&region), fd(&region)]);
        shm.named(1, ShmRole::Consumer, row.ticket());
        shm.named(2, ShmRole::Producer, 0);
        assert!(shm.reads_in_place());
        let producer = region
            .producer(0, ProducerConfig::default())
            .expect("producer");
        shm.producing(3, &producer.region(), None);
        let produced = shm.new_connection();
        assert!(
            produced.contains_key(&3),
            "the producers' regions, for the replay"
        );
        assert!(!shm.reads_in_place(), "the old daemon's regions are let go");
        assert!(shm.take_grant(2).is_none());
        assert!(lock(&shm.fds).is_empty(), "the unnamed fd is closed");
        assert!(shm.new_connection().is_empty());
    }
}
