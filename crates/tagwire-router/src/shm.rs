//! Shared memory negotiated by the daemon (issue 16 items 2–3; `docs/shm.md`,
//! "Negotiated by the daemon"). The control plane stays here: a publisher on
//! this host asks for a region (`{"op":"shm_open"}`), the daemon creates it
//! (a `tagwire-shm` memfd), keeps a mapping and passes the fd back with
//! SCM_RIGHTS. The publisher writes payloads into the region and publishes
//! events whose payload is a 24-byte [`ShmRef`] (presence bit `SHM_REF`, 0x80); routing,
//! filters, QoS and counters see the event as usual. A channel whose
//! subscriber is on this host gets the reference (and, once, the region's
//! fd) and reads in place; every other channel, a link or a pull buffer gets
//! the payload copied out of the region once per event ([`ShmEvent`]).
//!
//! Bounds: `limits.shm_*` (packet size, slots, consumer entries, regions,
//! bytes); a region lives as long as its publisher endpoint's connection.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tagwire_proto::{ErrorCode, Event, EventRef, Frame, ShmRef, ShmRole};
use tagwire_shm::{Consumer, ConsumerConfig, Pin, PinRow, Region, RegionConfig};

use crate::channel::{Channel, Outgoing};
use crate::config::Limits;
use crate::timing::now_ns;

pub use tagwire_proto::admin::ShmCounters;

struct RegionEntry {
    region: Region,
    /// The daemon's own consumer entry: it reads each published packet once
    /// (so its cursor tells the publisher how far the daemon got).
    reader: Consumer,
    /// The daemon's own pin row: a packet being dispatched is pinned here.
    dispatch: PinRow,
    owner: u64,
    /// The owner connection's identity: only connections of this identity
    /// are sent the fd (see [`ShmTable::readers`]).
    identity: Arc<str>,
    endpoint: Arc<str>,
    /// The pin row of each connection that was sent the fd.
    rows: HashMap<u64, Arc<SubscriberRow>>,
    /// Rows of connections gone, kept while events queued for them are
    /// not dropped yet (the lane's housekeeping removes their channels
    /// later) or their process still holds pins (it gives them back as it
    /// drops payloads); let go when neither is true.
    parked: Vec<Arc<SubscriberRow>>,
    /// When `parked` was last swept by [`ShmEvent::check`] (ns).
    swept: u64,
    bytes: u64,
}

impl RegionEntry {
    /// Lets go of parked rows nothing holds any more. Dropping the last
    /// reference to a row gives back every pin still recorded in it, so a
    /// row is dropped only when no queued event shares it and its process
    /// holds no pin or is gone.
    fn sweep(&mut self) {
        self.parked
            .retain(|r| Arc::strong_count(r) > 1 || (r.row.held() > 0 && r.row.holder_alive()));
    }

    /// Forgets connection `conn`'s row: parked, then dropped by the sweep
    /// as soon as nothing holds it (at once, usually).
    fn forget(&mut self, conn: u64) {
        if let Some(row) = self.rows.remove(&conn) {
            self.parked.push(row);
        }
        self.sweep();
    }
}

/// The chunk size of a publisher's first region when it names none: small
/// payloads then cost little shared memory; a publisher that sends a larger
/// one asks again for a region sized for it.
pub(crate) const START_PACKET: u64 = 64 * 1024;

/// How often a region's parked pin rows are looked at while it publishes.
const SWEEP_EVERY_NS: u64 = 100_000_000;

/// The regions this daemon created, by id.
#[derive(Default)]
pub(crate) struct ShmTable {
    regions: HashMap<u64, RegionEntry>,
    /// The identity of each connection that subscribed reading shared
    /// memory: a region's fd (read-write) goes only to connections of its
    /// publisher's identity, so no other identity can alter what the
    /// publisher's readers receive; the others get copies (`docs/shm.md`,
    /// "Trust").
    readers: HashMap<u64, Arc<str>>,
    next_id: u64,
    pub(crate) counters: ShmCounters,
    /// What the connections' writers did with queued references.
    written: Arc<WriteCounters>,
}

/// The delivery counters, kept here only (the connections' writers on
/// other lanes count too) and summed into [`ShmCounters`] when listed.
#[derive(Default)]
struct WriteCounters {
    by_reference: AtomicU64,
    copied_out: AtomicU64,
    unreadable: AtomicU64,
}

/// A subscriber connection's pin row in a region, shared with the
/// references queued for it.
pub(crate) struct SubscriberRow {
    row: PinRow,
    /// `limits.shm_pins`: payloads the connection may hold by reference.
    limit: u32,
    counters: Arc<WriteCounters>,
}

/// A reference queued for one subscriber: its payload pinned in the
/// daemon's own row until the connection's writer takes it, which then
/// sends the reference (the pin moved to the subscriber's row and handed
/// over) if that row holds fewer than `limits.shm_pins`, else the event
/// with the payload copied inline. Dropped unwritten, it gives its pin back.
pub(crate) struct ShmQueued {
    pin: Pin,
    row: Arc<SubscriberRow>,
    copy: Arc<InlineCopy>,
}

impl std::fmt::Debug for ShmQueued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmQueued").field("pin", &self.pin).finish()
    }
}

impl ShmQueued {
    /// The bytes to write for this queued reference; `None`: the event
    /// could not be re-encoded (not sent).
    pub(crate) fn written(self) -> Option<Bytes> {
        let r = &self.row;
        if r.row.held() < r.limit {
            if let Ok(pin) = self.pin.pin_to(&r.row) {
                pin.hand_over();
                r.counters.by_reference.fetch_add(1, Ordering::Relaxed);
                return Some(self.copy.by_ref.clone());
            }
        }
        self.copy.get(&self.pin)
    }
}

impl ShmTable {
    /// The counters, with the pin rows counted now.
    pub(crate) fn listing(&self) -> ShmCounters {
        let mut c = self.counters;
        c.by_reference += self.written.by_reference.load(Ordering::Relaxed);
        c.copied_out += self.written.copied_out.load(Ordering::Relaxed);
        c.unreadable += self.written.unreadable.load(Ordering::Relaxed);
        for e in self.regions.values() {
            c.rows_parked += e.parked.len() as u64;
            c.rows_open += (e.rows.len() + e.parked.len()) as u64;
        }
        c
    }

    /// Gives publisher `endpoint` of connection `conn` a region whose chunks
    /// hold `max_packet` bytes (default [`START_PACKET`]; at most
    /// `limits.shm_max_packet`): its region if that is large enough, else a
    /// new one that replaces it (the old one closes once the new one is
    /// made; its packets were all read, as requests and events of a
    /// connection are handled in order). Returns the region's id and a dup
    /// of its fd to pass. The error names the reason.
    pub(crate) fn open(
        &mut self,
        limits: &Limits,
        conn: u64,
        identity: &Arc<str>,
        endpoint: &str,
        max_packet: Option<u64>,
    ) -> Result<(u64, OwnedFd), String> {
        let wanted = max_packet
            .unwrap_or(START_PACKET)
            .clamp(64, limits.shm_max_packet.max(64))
            .div_ceil(64)
            * 64;
        let old = self
            .regions
            .iter()
            .find(|(_, e)| e.owner == conn && &*e.endpoint == endpoint)
            .map(|(id, e)| (*id, e.region.layout().geometry.chunk_bytes));
        if let Some((id, _)) = old.filter(|(_, c)| *c >= wanted) {
            let fd = self.regions[&id]
                .region
                .fd()
                .try_clone_to_owned()
                .map_err(|e| format!("dup of the region's fd failed: {e}"))?;
            return Ok((id, fd));
        }
        let r = self.create(
            limits,
            conn,
            identity,
            endpoint,
            wanted,
            old.map(|(id, _)| id),
        );
        match (&r, old) {
            (Err(_), _) => self.counters.regions_refused += 1,
            (Ok(_), Some((old_id, _))) => self.remove(old_id),
            (Ok(_), None) => {}
        }
        r
    }

    /// Regions and bytes the regions of `identity` hold, leaving out
    /// region `except` (one about to be replaced).
    fn held_by(&self, identity: &str, except: Option<u64>) -> (usize, u64) {
        self.regions
            .iter()
            .filter(|(id, e)| &*e.identity == identity && Some(**id) != except)
            .fold((0, 0), |(n, b), (_, e)| (n + 1, b + e.bytes))
    }

    fn create(
        &mut self,
        limits: &Limits,
        conn: u64,
        identity: &Arc<str>,
        endpoint: &str,
        chunk_bytes: u64,
        replaces: Option<u64>,
    ) -> Result<(u64, OwnedFd), String> {
        if self.regions.len() >= limits.shm_max_regions {
            return Err(format!(
                "{} shared-memory regions are open (limits.shm_max_regions)",
                limits.shm_max_regions
            ));
        }
        let (held, held_bytes) = self.held_by(identity, replaces);
        let max_held = limits.shm_regions_per_identity();
        if held >= max_held {
            return Err(format!(
                "identity {identity} already holds {held} shared-memory regions (limits.shm_max_regions_per_identity = {max_held})"
            ));
        }
        let max_bytes = limits.shm_bytes_per_identity();
        let cfg = RegionConfig {
            streams: 1,
            slots: limits.shm_slots,
            consumers_max: limits.shm_consumers.max(2),
            // Every slot's packet, the publisher's next loan, the packet the
            // daemon is reading, and the subscribers' pins.
            chunks: limits
                .shm_slots
                .saturating_add(limits.shm_pins)
                .saturating_add(2),
            chunk_bytes,
            max_total_bytes: limits
                .shm_max_bytes
                .saturating_sub(self.counters.bytes_open)
                .min(max_bytes.saturating_sub(held_bytes)),
            reserve: true,
        };
        let region = Region::create(cfg).map_err(|e| match e {
            tagwire_shm::Error::TooLarge { .. }
                if max_bytes.saturating_sub(held_bytes)
                    < limits.shm_max_bytes.saturating_sub(self.counters.bytes_open) =>
            {
                format!("cannot create a shared-memory region: {e} (identity {identity} holds {held_bytes} bytes; limits.shm_max_bytes_per_identity = {max_bytes})")
            }
            e => format!("cannot create a shared-memory region: {e} (limits.shm_max_bytes = {}, {} bytes open)", limits.shm_max_bytes, self.counters.bytes_open),
        })?;
        let reader = region
            .consumer(0, ConsumerConfig::default())
            .map_err(|e| format!("cannot attach the daemon's reader: {e}"))?;
        let dispatch = region
            .pin_row()
            .map_err(|e| format!("cannot take the daemon's pin row: {e}"))?;
        let fd = region
            .fd()
            .try_clone_to_owned()
            .map_err(|e| format!("dup of the region's fd failed: {e}"))?;
        if self.next_id == 0 {
            // Ids do not repeat across daemon restarts (they start at the
            // first region's time in µs, below 2^53): a client's reference
            // into a region of an earlier daemon never names a new one.
            self.next_id = now_ns() / 1000;
        }
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
                dispatch,
                owner: conn,
                identity: identity.clone(),
                endpoint: Arc::from(endpoint),
                rows: HashMap::new(),
                parked: Vec::new(),
                swept: 0,
                bytes,
            },
        );
        Ok((id, fd))
    }

    /// Closes region `id` (its publisher is gone, undeclared, or moved to a
    /// larger region). Its rows are abandoned, not reset: no producer
    /// writes the region again, and subscribers may still adopt the pins of
    /// events in flight to them.
    fn remove(&mut self, id: u64) {
        if let Some(e) = self.regions.remove(&id) {
            self.counters.regions_open -= 1;
            self.counters.bytes_open -= e.bytes;
            e.dispatch.abandon();
            for row in e.rows.values() {
                row.row.abandon();
            }
            for row in &e.parked {
                row.row.abandon();
            }
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
            e.forget(conn);
        }
        self.readers.remove(&conn);
    }

    /// Connection `conn` of `identity` subscribes reading shared memory:
    /// it may be sent the fds of its own identity's regions.
    pub(crate) fn note_reader(&mut self, conn: u64, identity: &Arc<str>) {
        self.readers.insert(conn, identity.clone());
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

/// The parsed `{"op":"shm_open","endpoint":NAME,"id":ID[,"max_packet":BYTES][,"pid":PID]}` request.
pub(crate) struct OpenRequest {
    /// The publisher endpoint's name.
    pub endpoint: String,
    /// Its id on the client's connection (echoed in `ShmRegion`).
    pub id: u32,
    /// The payload size the region's chunks should hold.
    pub max_packet: Option<u64>,
    /// The client's pid as it sees it: compared with the socket's peer pid,
    /// it tells a client in another PID namespace (liveness is by pid).
    pub pid: Option<u32>,
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
    let max_packet = optional(&v, "max_packet", Some, "a byte count (an unsigned integer)")?;
    let pid = optional(&v, "pid", |p| u32::try_from(p).ok(), "a process id (a u32)")?;
    Ok(OpenRequest {
        endpoint,
        id,
        max_packet,
        pid,
    })
}

/// The optional unsigned field `key` of a request, converted by `conv`;
/// the error says it must be `what`.
fn optional<T>(
    v: &serde_json::Value,
    key: &str,
    conv: impl FnOnce(u64) -> Option<T>,
    what: &str,
) -> Result<Option<T>, String> {
    v.get(key)
        .map(|x| {
            x.as_u64()
                .and_then(conv)
                .ok_or_else(|| format!("shm_open: \"{key}\" must be {what}"))
        })
        .transpose()
}

/// The `ShmRegion` frame for a producer grant.
pub(crate) fn producer_frame(region: u64, endpoint: u32) -> Frame {
    Frame::ShmRegion {
        region,
        role: ShmRole::Producer,
        endpoint,
    }
}

/// An event whose payload is in a region, read and pinned by the daemon
/// for the time of its dispatch: the reference form (with the pinned
/// chunk), a per-channel copy of it carrying that channel's pin, and, made
/// on first need, a copy with the payload inline.
pub(crate) struct ShmEvent {
    /// The daemon's pin (its dispatch row): the payload stays readable.
    pin: Pin,
    /// The reference form, and the copy shared with the queued references.
    copy: Arc<InlineCopy>,
    /// What [`ShmEvent::for_channel`] hands the last channel that got the reference.
    for_channel: Outgoing<'static>,
    /// The copy for channels that get one now: `None`: not asked for yet.
    copy_out: Option<Option<Outgoing<'static>>>,
    region: u64,
}

/// An event's reference form and, made once on first need (at dispatch,
/// or by the first writer that sends a copy) and shared by everyone who
/// needs it, the event with its payload inline.
struct InlineCopy {
    by_ref: Bytes,
    bytes: std::sync::OnceLock<Option<Bytes>>,
    counters: Arc<WriteCounters>,
}

impl InlineCopy {
    /// The copy (`pin` holds the payload); `None`: it does not re-encode.
    fn get(&self, pin: &Pin) -> Option<Bytes> {
        self.bytes
            .get_or_init(|| {
                let made = inline(&self.by_ref, pin);
                let c = match made {
                    Some(_) => &self.counters.copied_out,
                    None => &self.counters.unreadable,
                };
                c.fetch_add(1, Ordering::Relaxed);
                made
            })
            .clone()
    }
}

impl ShmEvent {
    /// Checks a published event whose payload is a shared-memory reference:
    /// the reference names a region that connection `conn` owns; then reads
    /// the packet (which tells the publisher the daemon got this far) and
    /// pins it. `Ok(None)`: the packet was gone (expired before the daemon
    /// read it): counted, nothing to deliver. A reference that does not
    /// parse (not 24 bytes) is `Malformed` (the event's parse already
    /// refuses it); one the connection may not use
    /// or that names no published packet of its length, `BadRequest`
    /// (docs/protocol.md, "ShmRegion").
    pub(crate) fn check(
        table: &mut ShmTable,
        conn: u64,
        ev: &EventRef<'_>,
        event: &Bytes,
    ) -> Result<Option<ShmEvent>, (ErrorCode, String)> {
        let r = ShmRef::decode(ev.payload)
            .map_err(|e| (ErrorCode::Malformed, format!("shared-memory event: {e}")))?;
        Self::check_ref(table, conn, r, ev, event).map_err(|m| (ErrorCode::BadRequest, m))
    }

    fn check_ref(
        table: &mut ShmTable,
        conn: u64,
        r: ShmRef,
        ev: &EventRef<'_>,
        event: &Bytes,
    ) -> Result<Option<ShmEvent>, String> {
        let Some(e) = table.regions.get_mut(&r.region).filter(|e| e.owner == conn) else {
            table.counters.stray += 1;
            return Err(format!(
                "the event's payload refers to shared-memory region {}, which this connection was not given",
                r.region
            ));
        };
        let now = now_ns();
        if !e.parked.is_empty() && now.saturating_sub(e.swept) >= SWEEP_EVERY_NS {
            e.swept = now;
            e.sweep();
        }
        let pinned = match e.reader.read_at(r.seq, now) {
            Ok(sample) if sample.len() == r.len as usize => sample.pin_to(&e.dispatch),
            Ok(sample) => {
                return Err(format!(
                    "the event's payload reference says {} bytes, shared-memory packet {} holds {}",
                    r.len,
                    r.seq,
                    sample.len()
                ))
            }
            Err(tagwire_shm::Error::Empty) => {
                return Err(format!(
                    "the event's payload refers to shared-memory packet {}, which is not published",
                    r.seq
                ))
            }
            Err(e @ tagwire_shm::Error::Corrupt { .. }) => {
                return Err(format!("shared-memory region {}: {e}", r.region))
            }
            Err(e) => Err(e),
        };
        let pin = match pinned {
            Ok(pin) => pin,
            Err(_) => {
                table.written.unreadable.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        };
        let by_ref = with_chunk(event, ev.payload, pin.chunk())
            .ok_or("the shared-memory reference is not the event's last bytes")?;
        Ok(Some(ShmEvent {
            pin,
            copy: Arc::new(InlineCopy {
                by_ref,
                bytes: std::sync::OnceLock::new(),
                counters: table.written.clone(),
            }),
            for_channel: Outgoing::owned(Bytes::new()),
            copy_out: None,
            region: r.region,
        }))
    }

    /// What channel `ch` gets: if its subscriber reads shared memory (the
    /// region's fd and the connection's pin-row ticket go to it first,
    /// once), the reference with its payload pinned until the writer takes
    /// it ([`ShmQueued`]); else the copy.
    pub(crate) fn for_channel(
        &mut self,
        table: &mut ShmTable,
        ch: &Channel,
        inline_needed: bool,
        limits: &Limits,
    ) -> Option<&mut Outgoing<'static>> {
        if ch.shm && !inline_needed && ch.outbox.passes_fds() {
            if let Some(q) = self.queued_for(table, ch, limits) {
                self.for_channel = Outgoing::pinned(self.copy.by_ref.clone(), q);
                return Some(&mut self.for_channel);
            }
        }
        self.copied()
    }

    /// The payload pinned for `ch`'s connection (its row made, with the fd
    /// sent, on first use); `None`: that connection gets a copy.
    fn queued_for(&self, table: &mut ShmTable, ch: &Channel, limits: &Limits) -> Option<ShmQueued> {
        let e = table.regions.get_mut(&self.region)?;
        if !e.rows.contains_key(&ch.conn) {
            // The fd is read-write: only the publisher's own identity gets it.
            if table.readers.get(&ch.conn) != Some(&e.identity) {
                return None;
            }
            let row = e.region.pin_row().or_else(|_| {
                e.sweep();
                e.region.pin_row()
            });
            let row = row.ok()?;
            let frame = Frame::ShmRegion {
                region: self.region,
                role: ShmRole::Consumer,
                endpoint: row.ticket(),
            };
            let fd = e.region.fd().try_clone_to_owned().ok()?;
            if !ch.outbox.send_with_fd(&frame, fd, limits.max_control_bytes) {
                return None;
            }
            let row = SubscriberRow {
                row,
                limit: limits.shm_pins,
                counters: table.written.clone(),
            };
            e.rows.insert(ch.conn, Arc::new(row));
        }
        let row = e.rows.get(&ch.conn)?.clone();
        let pin = self.pin.pin_to(&e.dispatch).ok()?;
        Some(ShmQueued {
            pin,
            row,
            copy: self.copy.clone(),
        })
    }

    /// The event with its payload copied out of the region (made once).
    pub(crate) fn copied(&mut self) -> Option<&mut Outgoing<'static>> {
        let (copy, pin) = (&self.copy, &self.pin);
        self.copy_out
            .get_or_insert_with(|| copy.get(pin).map(Outgoing::owned))
            .as_mut()
    }
}

/// `event` (whose payload is the reference `payload`) with the reference's
/// `chunk` set: the payload is the encoding's tail, so only its last four
/// bytes change.
fn with_chunk(event: &Bytes, payload: &[u8], chunk: u32) -> Option<Bytes> {
    if payload.len() != ShmRef::LEN || !event.ends_with(payload) {
        return None;
    }
    let mut out = BytesMut::from(&event[..]);
    let n = out.len();
    out[n - 4..].copy_from_slice(&chunk.to_le_bytes());
    Some(out.freeze())
}

/// `by_ref` with its shared-memory bit cleared and the payload `pin` holds inline.
fn inline(by_ref: &Bytes, pin: &Pin) -> Option<Bytes> {
    let mut ev = Event::decode(by_ref).ok()?;
    ev.header.payload_in_shm = false;
    ev.payload = Bytes::copy_from_slice(pin);
    let mut out = BytesMut::with_capacity(ev.encoded_len());
    ev.encode(&mut out).ok()?;
    Some(out.freeze())
}

/// Whether an encoded event carries its payload in shared memory (presence
/// bit `SHM_REF`; its `flags` are the application's and never mean this).
pub(crate) fn is_shm(ev: &EventRef<'_>) -> bool {
    ev.payload_in_shm
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Arc<str> {
        Arc::from("uid:1000")
    }

    fn chunk_of(t: &ShmTable, id: u64) -> u64 {
        t.regions[&id].region.layout().geometry.chunk_bytes
    }

    #[test]
    fn a_region_starts_small_and_a_larger_payload_replaces_it_once_capped_at_the_limit() {
        let limits = Limits {
            shm_max_packet: 256 * 1024,
            ..Limits::default()
        };
        let mut t = ShmTable::default();
        let (first, _fd) = t.open(&limits, 1, &id(), "/p", None).expect("open");
        assert_eq!(chunk_of(&t, first), START_PACKET);
        // Asking for no more than it holds keeps the region.
        let (same, _fd) = t.open(&limits, 1, &id(), "/p", Some(1000)).expect("open");
        assert_eq!(same, first);
        // A larger payload: a new region replaces the old one.
        let (bigger, _fd) = t
            .open(&limits, 1, &id(), "/p", Some(200_001))
            .expect("open");
        assert_ne!(bigger, first);
        assert_eq!(chunk_of(&t, bigger), 200_064, "rounded up to 64");
        assert!(!t.regions.contains_key(&first), "the old region closed");
        // Past the daemon's limit: capped, and the region replaced once more.
        let (capped, _fd) = t
            .open(&limits, 1, &id(), "/p", Some(10 << 20))
            .expect("open");
        assert_eq!(chunk_of(&t, capped), 256 * 1024);
        let c = t.listing();
        assert_eq!((c.regions_created, c.regions_open), (3, 1));
        assert_eq!(c.bytes_open, t.regions[&capped].bytes);
        // Another endpoint or connection gets its own region.
        let (other, _fd) = t.open(&limits, 2, &id(), "/p", None).expect("open");
        assert_ne!(other, capped);
        assert_eq!(t.listing().regions_open, 2);
    }

    #[test]
    fn a_refused_larger_region_leaves_the_old_one_in_place() {
        let mut limits = Limits::default();
        let mut t = ShmTable::default();
        let (first, _fd) = t.open(&limits, 1, &id(), "/p", None).expect("open");
        // Only room for what is open: the larger region is refused.
        limits.shm_max_bytes = t.listing().bytes_open;
        let err = t
            .open(&limits, 1, &id(), "/p", Some(1 << 20))
            .expect_err("no room");
        assert!(err.contains("shm_max_bytes"), "{err}");
        assert!(
            t.regions.contains_key(&first),
            "the old region stays usable"
        );
        assert_eq!(t.listing().regions_refused, 1);
    }

    #[test]
    fn one_identity_gets_at_most_its_quota_of_regions_and_bytes_and_another_still_gets_one() {
        let limits = Limits {
            shm_max_regions: 8,
            ..Limits::default()
        };
        assert_eq!(limits.shm_regions_per_identity(), 2, "a quarter by default");
        let mut t = ShmTable::default();
        let greedy: Arc<str> = Arc::from("token:greedy");
        t.open(&limits, 1, &greedy, "/a", None).expect("first");
        t.open(&limits, 2, &greedy, "/b", None).expect("second");
        let err = t
            .open(&limits, 3, &greedy, "/c", None)
            .expect_err("over the quota");
        assert!(err.contains("shm_max_regions_per_identity"), "{err}");
        // Growing a region it holds replaces it: still within the quota.
        t.open(&limits, 1, &greedy, "/a", Some(200_000))
            .expect("a larger region replacing one held");
        t.open(&limits, 4, &id(), "/owner", None)
            .expect("another identity still gets a region");
        // Bytes: an identity's regions together stay within its share.
        let limits = Limits {
            shm_max_bytes_per_identity: Some(3 << 20),
            ..Limits::default()
        };
        let mut t = ShmTable::default();
        t.open(&limits, 1, &greedy, "/a", None).expect("1.7 MiB");
        let err = t
            .open(&limits, 2, &greedy, "/b", None)
            .expect_err("over the byte quota");
        assert!(err.contains("shm_max_bytes_per_identity"), "{err}");
        t.open(&limits, 3, &id(), "/owner", None)
            .expect("another identity still gets a region");
    }

    #[test]
    fn shm_open_requests_parse_or_name_what_is_wrong() {
        let r = parse_open(r#"{"op":"shm_open","endpoint":"/p","id":3}"#).expect("parse");
        assert_eq!((r.endpoint.as_str(), r.id, r.max_packet), ("/p", 3, None));
        let r = parse_open(r#"{"op":"shm_open","endpoint":"/p","id":3,"max_packet":4096,"pid":7}"#)
            .expect("parse");
        assert_eq!((r.max_packet, r.pid), (Some(4096), Some(7)));
        for (body, names) in [
            (r#"{"op":"shm_open","id":3}"#, "endpoint"),
            (r#"{"op":"shm_open","endpoint":"/p"}"#, "id"),
            (r#"{"op":"shm_open","endpoint":"/p","id":-1}"#, "id"),
            (
                r#"{"op":"shm_open","endpoint":"/p","id":3,"max_packet":"big"}"#,
                "max_packet",
            ),
            (
                r#"{"op":"shm_open","endpoint":"/p","id":3,"max_packet":-5}"#,
                "max_packet",
            ),
            ("{not json", "bad JSON"),
        ] {
            let err = parse_open(body)
                .err()
                .unwrap_or_else(|| panic!("{body} parsed"));
            assert!(err.contains(names), "{body}: {err}");
        }
    }

    proptest::proptest! {
        /// Whatever the body, parsing gives a request or an error, never a panic.
        #[test]
        fn any_shm_open_body_parses_or_is_refused(body in ".{0,200}") {
            let _ = parse_open(&body);
        }
    }
}
