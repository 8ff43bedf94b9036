//! Shared memory negotiated by the daemon (issue 16 items 2–3; `docs/shm.md`,
//! "Negotiated by the daemon"). The control plane stays here: a publisher on
//! this host asks for a region (`{"op":"shm_open"}`), the daemon creates it
//! (a `tagwire-shm` memfd), keeps a mapping and passes the fd back with
//! SCM_RIGHTS. The publisher writes payloads into the region and publishes
//! events whose payload is a 24-byte [`ShmRef`] (flag `SHM_PAYLOAD`); routing,
//! filters, QoS and counters see the event as usual. A channel whose
//! subscriber is on this host gets the reference (and, once, the region's
//! fd) and reads in place; every other channel, a link or a pull buffer gets
//! the payload copied out of the region once per event ([`ShmEvent`]).
//!
//! Bounds: `limits.shm_*` (packet size, slots, consumer entries, regions,
//! bytes); a region lives as long as its publisher endpoint's connection.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tagwire_proto::{flags::SHM_PAYLOAD, Event, EventRef, Frame, ShmRef, ShmRole};
use tagwire_shm::{Consumer, ConsumerConfig, Region, RegionConfig};

use crate::channel::{Channel, Outgoing};
use crate::config::Limits;
use crate::timing::now_ns;

/// Counters of the daemon's shared-memory negotiation (shown by `tagwire list`'s JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShmCounters {
    /// Regions created for publishers.
    pub regions_created: u64,
    /// Regions refused (limits, out of memory, not on this host); the publisher fell back.
    pub regions_refused: u64,
    /// Regions open now.
    pub regions_open: u64,
    /// Bytes of shared memory reserved by open regions.
    pub bytes_open: u64,
    /// Deliveries that carried a reference (the subscriber reads in place).
    pub by_reference: u64,
    /// Events whose payload was copied out of a region (for socket subscribers, links, history).
    pub copied_out: u64,
    /// Events whose payload was gone (reclaimed) when a copy was needed: not delivered there.
    pub unreadable: u64,
    /// Events with the shared-memory flag that no region of theirs backs (refused or dropped).
    pub stray: u64,
}

struct RegionEntry {
    region: Region,
    /// The daemon's own consumer entry: its hazard guards a copy-out.
    reader: Consumer,
    owner: u64,
    endpoint: Arc<str>,
    /// Connections that were sent the fd.
    sent_to: HashSet<u64>,
    bytes: u64,
}

/// The regions this daemon created, by id.
#[derive(Default)]
pub(crate) struct ShmTable {
    regions: HashMap<u64, RegionEntry>,
    next_id: u64,
    pub(crate) counters: ShmCounters,
}

impl ShmTable {
    /// Creates a region for publisher `endpoint` of connection `conn`;
    /// returns its id and a dup of its fd to pass. The error names the reason.
    pub(crate) fn open(
        &mut self,
        limits: &Limits,
        conn: u64,
        endpoint: &str,
    ) -> Result<(u64, OwnedFd), String> {
        if let Some((id, e)) = self
            .regions
            .iter()
            .find(|(_, e)| e.owner == conn && &*e.endpoint == endpoint)
        {
            let fd = e
                .region
                .fd()
                .try_clone_to_owned()
                .map_err(|e| format!("dup of the region's fd failed: {e}"))?;
            return Ok((*id, fd));
        }
        let r = self.create(limits, conn, endpoint);
        if r.is_err() {
            self.counters.regions_refused += 1;
        }
        r
    }

    fn create(
        &mut self,
        limits: &Limits,
        conn: u64,
        endpoint: &str,
    ) -> Result<(u64, OwnedFd), String> {
        if self.regions.len() >= limits.shm_max_regions {
            return Err(format!(
                "{} shared-memory regions are open (limits.shm_max_regions)",
                limits.shm_max_regions
            ));
        }
        let chunk_bytes = limits.shm_max_packet.max(64).div_ceil(64) * 64;
        let cfg = RegionConfig {
            streams: 1,
            slots: limits.shm_slots,
            consumers_max: limits.shm_consumers,
            chunks: limits.shm_slots + limits.shm_consumers + 1,
            chunk_bytes,
            max_total_bytes: limits
                .shm_max_bytes
                .saturating_sub(self.counters.bytes_open),
            reserve: true,
        };
        let region = Region::create(cfg).map_err(|e| {
            format!("cannot create a shared-memory region: {e} (limits.shm_max_bytes = {}, {} bytes open)", limits.shm_max_bytes, self.counters.bytes_open)
        })?;
        let reader = region
            .consumer(0, ConsumerConfig::default())
            .map_err(|e| format!("cannot attach the daemon's reader: {e}"))?;
        let fd = region
            .fd()
            .try_clone_to_owned()
            .map_err(|e| format!("dup of the region's fd failed: {e}"))?;
        self.next_id += 1;
        let id = self.next_id;
        let bytes = region.layout().total_bytes;
        self.counters.regions_created += 1;
        self.counters.regions_open += 1;
        self.counters.bytes_open += bytes;
        self.regions.insert(
            id,
            RegionEntry {
                region,
                reader,
                owner: conn,
                endpoint: Arc::from(endpoint),
                sent_to: HashSet::new(),
                bytes,
            },
        );
        Ok((id, fd))
    }

    fn remove(&mut self, id: u64) {
        if let Some(e) = self.regions.remove(&id) {
            self.counters.regions_open -= 1;
            self.counters.bytes_open -= e.bytes;
        }
    }

    /// Forgets connection `conn`: closes the regions it owns (the daemon's
    /// mapping and fd go; clients holding the fd keep their own) and its
    /// place in the others' "fd sent" sets.
    pub(crate) fn forget_connection(&mut self, conn: u64) {
        let owned: Vec<u64> = self
            .regions
            .iter()
            .filter(|(_, e)| e.owner == conn)
            .map(|(id, _)| *id)
            .collect();
        for id in owned {
            self.remove(id);
        }
        for e in self.regions.values_mut() {
            e.sent_to.remove(&conn);
        }
    }

    /// Closes the region of publisher `endpoint` on `conn` (undeclared).
    pub(crate) fn forget_endpoint(&mut self, conn: u64, endpoint: &str) {
        let ids: Vec<u64> = self
            .regions
            .iter()
            .filter(|(_, e)| e.owner == conn && &*e.endpoint == endpoint)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.remove(id);
        }
    }
}

/// Whether an admin body is the shared-memory request (handled on the
/// connection's own lane: the fd must go out on that connection, in order).
pub(crate) fn is_open_request(body: &str) -> bool {
    body.contains("\"shm_open\"")
        && serde_json::from_str::<serde_json::Value>(body)
            .is_ok_and(|v| v.get("op").and_then(|o| o.as_str()) == Some("shm_open"))
}

/// The parsed `{"op":"shm_open","endpoint":NAME,"id":ID}` request.
pub(crate) struct OpenRequest {
    /// The publisher endpoint's name.
    pub endpoint: String,
    /// Its id on the client's connection (echoed in `ShmRegion`).
    pub id: u32,
}

/// Parses a `shm_open` request.
pub(crate) fn parse_open(body: &str) -> Result<OpenRequest, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("shm_open: bad JSON: {e}"))?;
    let endpoint = v
        .get("endpoint")
        .and_then(|e| e.as_str())
        .ok_or("shm_open: \"endpoint\" (a publisher endpoint name) is missing")?
        .to_owned();
    let id = v
        .get("id")
        .and_then(|e| e.as_u64())
        .and_then(|i| u32::try_from(i).ok())
        .ok_or("shm_open: \"id\" (the endpoint's id, a u32) is missing")?;
    Ok(OpenRequest { endpoint, id })
}

/// The `ShmRegion` frame for a producer grant.
pub(crate) fn producer_frame(region: u64, endpoint: u32) -> Frame {
    Frame::ShmRegion {
        region,
        role: ShmRole::Producer,
        endpoint,
    }
}

/// An event whose payload is in a region: the reference form (as
/// published) and, made on first need, a copy with the payload inline.
pub(crate) struct ShmEvent {
    by_ref: Outgoing,
    /// `None`: not made yet; `Some(None)`: the payload was gone.
    copy: Option<Option<Outgoing>>,
    r: ShmRef,
}

impl ShmEvent {
    /// Checks a published event with the shared-memory flag: its reference
    /// parses and names a region that connection `conn` owns.
    pub(crate) fn check(
        table: &mut ShmTable,
        conn: u64,
        ev: &EventRef<'_>,
        event: Outgoing,
    ) -> Result<ShmEvent, String> {
        let r = ShmRef::decode(ev.payload).map_err(|e| format!("shared-memory event: {e}"))?;
        match table.regions.get(&r.region) {
            Some(e) if e.owner == conn && r.stream == 0 => Ok(ShmEvent {
                by_ref: Outgoing::owned(Bytes::copy_from_slice(event.bytes())),
                copy: None,
                r,
            }),
            _ => {
                table.counters.stray += 1;
                Err(format!(
                    "the event's payload refers to shared-memory region {} stream {}, which this connection was not given",
                    r.region, r.stream
                ))
            }
        }
    }

    /// What channel `ch` gets: the reference if its subscriber reads
    /// shared memory (the region's fd goes to its connection first, once),
    /// else the copy. `None`: the payload is gone (counted).
    pub(crate) fn for_channel(
        &mut self,
        table: &mut ShmTable,
        ch: &Channel,
        inline_needed: bool,
        max_control: usize,
    ) -> Option<&mut Outgoing> {
        if ch.shm && !inline_needed && ch.outbox.passes_fds() {
            if let Some(e) = table.regions.get_mut(&self.r.region) {
                let sent = e.sent_to.contains(&ch.conn) || {
                    let frame = Frame::ShmRegion {
                        region: self.r.region,
                        role: ShmRole::Consumer,
                        endpoint: 0,
                    };
                    let ok = e
                        .region
                        .fd()
                        .try_clone_to_owned()
                        .is_ok_and(|fd| ch.outbox.send_with_fd(&frame, fd, max_control));
                    if ok {
                        e.sent_to.insert(ch.conn);
                    }
                    ok
                };
                if sent {
                    table.counters.by_reference += 1;
                    return Some(&mut self.by_ref);
                }
            }
        }
        self.copied(table)
    }

    /// The event with its payload copied out of the region (made once).
    pub(crate) fn copied(&mut self, table: &mut ShmTable) -> Option<&mut Outgoing> {
        if self.copy.is_none() {
            let made = copy_out(table, &self.by_ref, &self.r);
            match &made {
                Some(_) => table.counters.copied_out += 1,
                None => table.counters.unreadable += 1,
            }
            self.copy = Some(made);
        }
        self.copy.as_mut().and_then(|c| c.as_mut())
    }
}

/// Reads the payload of `r` (under the daemon's hazard) into a re-encoded
/// event without the flag. `None`: the packet is gone or the bytes are bad.
fn copy_out(table: &mut ShmTable, by_ref: &Outgoing, r: &ShmRef) -> Option<Outgoing> {
    let e = table.regions.get_mut(&r.region)?;
    let payload = {
        let sample = e.reader.read_at(r.seq, now_ns()).ok()?;
        if sample.len() != r.len as usize {
            return None;
        }
        Bytes::copy_from_slice(&sample)
    };
    let mut ev = Event::decode(by_ref.bytes()).ok()?;
    ev.header.flags &= !SHM_PAYLOAD;
    ev.payload = payload;
    let mut out = BytesMut::with_capacity(ev.encoded_len());
    ev.encode(&mut out).ok()?;
    Some(Outgoing::owned(out.freeze()))
}

/// Whether an encoded event carries its payload in shared memory.
pub(crate) fn is_shm(ev: &EventRef<'_>) -> bool {
    ev.flags & SHM_PAYLOAD != 0
}
