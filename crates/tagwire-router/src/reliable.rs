//! Hop-by-hop acknowledgement over links for reliable tags
//! (`reliability=reliable`, `exactly_once` or `durable` on a tag or the
//! daemon layer; docs/reliability.md). The windows are core's
//! ([`tagwire_core::reliable`]); this module keeps one pair per link
//! connection of link version 3, frames events as `Reliable`, answers with
//! `Ack`s and routes again what a lost connection or a failed
//! acknowledgement gives back.
//!
//! **Custody.** A daemon acknowledges a `Reliable` event once it delivered
//! it to its own subscribers and every link it forwarded it on acknowledged
//! it in turn (its *obligations*). So the publisher's daemon holds an event
//! until the whole path behind the next hop has it, and a `kill -9` of a
//! daemon in the middle loses nothing: its upstream neighbour still holds
//! the event and routes it again over the next route when the link drops.
//! Copies that arrive twice this way are dropped by the dedupe window
//! (origin daemon, publisher, sequence number).
//!
//! **A partition.** Reliable events published here for a daemon that is
//! away are held in core's node engine ([`tagwire_core::node::Node::hold_for_away`]);
//! when it is reachable again they go as `ReliableTo` frames ([`release`])
//! on the link its live events take, under the same windows and custody;
//! daemons on the way pass them on ([`offer_toward`]).
//!
//! **Cost.** With no reliable tag, or no version-3 link, an event costs one
//! flag test. For a reliable event: a cached lookup of its tag, one copy of
//! its bytes into the window per link (the frame goes on the connection's
//! control buffer, ahead of best-effort events) and, on the receiving
//! daemon, one dedupe lookup.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tagwire_core::federation::NodeId;
use tagwire_core::filter::Overrides;
use tagwire_core::node::Sink;
use tagwire_core::qos::{resolve, Property, Reliability};
use tagwire_core::reliable::{Push, RecvWindow, Seen, SendWindow, WindowFull, WindowLimits};
use tagwire_proto::{Ack, ErrorCode, EventRef, LinkFrame};

use crate::channel::Outbox;
use crate::state::reliable::{ConnRel, Held, Reliable, Upstream};
use crate::state::State;

/// Settled events after which a link's acknowledgement goes at once (else
/// on the federation task's next tick, every 50 ms).
pub(crate) const ACK_EVERY: usize = 32;
/// Settled events after which a client's `PublishAck` goes at once (else
/// at the end of the read, spaced by the connection's read loop: at most
/// one per millisecond under a flood, `connection::ACK_SPACING_NS`): each
/// costs the publisher's library a wake-up of its reader thread and a
/// turn of its writer lock. An eighth of a publisher's default window (at
/// 1,024 a flood of small events was acknowledged ~2,400 times a second,
/// more often than the spacing allows).
pub(crate) const CLIENT_ACK_EVERY: usize = 8192;
/// Most tags whose reliability is cached; at the bound the cache is cleared.
const CACHE_TAGS: usize = 4096;

/// The `ReliableCompressed` frame of held event `h` under `seq`, if it has
/// a compressed form.
fn compressed_frame(seq: u64, h: &Held) -> Option<LinkFrame> {
    let p = h.packed.as_ref()?;
    let codec = tagwire_proto::Codec::from_code(*p.first()?)?;
    let raw_len = u32::from_le_bytes(p.get(1..5)?.try_into().ok()?);
    Some(LinkFrame::Compressed {
        of: tagwire_proto::FragmentOf::Reliable {
            seq,
            origin: h.origin,
            hops: h.hops,
        },
        codec,
        raw_len,
        data: p.slice(tagwire_proto::COMPRESSED_HEADER_LEN..),
    })
}

/// The frame that carries held event `h` under `seq`: `ReliableTo` for one
/// addressed to a daemon, else `ReliableCompressed` if it has a compressed
/// form, else `Reliable`.
fn frame_of(seq: u64, h: &Held) -> LinkFrame {
    if let Some((to, _)) = &h.to {
        return LinkFrame::ReliableTo {
            seq,
            origin: h.origin,
            hops: h.hops,
            to: *to,
            event: h.event.clone(),
        };
    }
    compressed_frame(seq, h).unwrap_or_else(|| LinkFrame::Reliable {
        seq,
        origin: h.origin,
        hops: h.hops,
        event: h.event.clone(),
    })
}

/// Most times one event is routed again: past it, it is given up (counted
/// `unroutable`), so that daemons whose views of the topology disagree for
/// a while cannot pass it back and forth for ever.
const MAX_REROUTES: u8 = 8;

/// Over a lossy link connection (UDP): a reliable event not acknowledged
/// within this long is sent again (acknowledgements go every 32 events or
/// 50 ms, so this is a lost frame or a lost acknowledgement, not a slow
/// one, on a LAN).
pub(crate) const LOSSY_RTO_NS: u64 = 250_000_000;
/// Most events one lossy connection sends again per tick (50 ms).
const LOSSY_RESEND_PER_TICK: usize = 256;

/// Whether the tag/daemon layers make `tag` reliable (`reliable`,
/// `exactly_once` or `durable`).
fn reliable_by_layers(st: &State, tag: &str) -> bool {
    tagwire_core::qos::layer_for(&st.qos_daemon, &st.qos_tags, tag, Property::Reliability)
        .is_some_and(|l| resolve(&[l]).values().reliability != Reliability::BestEffort)
        || crate::durable::is_durable(st, tag)
}

/// After a daemon or tag layer changed: whether any tag can be reliable.
pub(crate) fn layers_changed(st: &mut State) {
    let on = |l: &tagwire_core::qos::QosLayer| {
        l.is_set(Property::Reliability)
            && resolve(&[l]).values().reliability != Reliability::BestEffort
    };
    let layered = on(&st.qos_daemon) || st.qos_tags.iter().any(|t| on(&t.layer));
    let r = &mut st.fed.reliable;
    r.enabled = layered || st.store.enabled;
    r.cache.clear();
}

/// Whether an event of `tag` published here crosses links reliably: a
/// flag test when no tag is reliable or no link speaks version 3.
pub(crate) fn is_reliable(st: &mut State, tag: &str) -> bool {
    let rel = &st.fed.reliable;
    if rel.conns.is_empty() && rel.checked_out.is_none() {
        return false;
    }
    tag_is_reliable(st, tag)
}

/// Whether the tag/daemon layers make `tag` reliable, links or none (a
/// daemon cut off from every other still holds its reliable events for
/// the daemons away): a flag test when no tag is reliable, else a cached
/// lookup.
pub(crate) fn tag_is_reliable(st: &mut State, tag: &str) -> bool {
    if !st.fed.reliable.enabled {
        return false;
    }
    if let Some(r) = st.fed.reliable.cache.get(tag) {
        return *r;
    }
    let r = reliable_by_layers(st, tag);
    let cache = &mut st.fed.reliable.cache;
    if cache.len() >= CACHE_TAGS {
        cache.clear();
    }
    cache.insert(Box::from(tag), r);
    r
}

/// What [`offer`] did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// `conn` has no window (a version-2 link: the caller sends best effort).
    NoWindow,
    /// In the window (and written if the control buffer had room).
    Held,
    /// A full `reject` window refused it; `report`: tell the publisher now
    /// (at most once a second).
    Rejected { report: bool },
}

/// Puts `held` in the window of link connection `conn` and sends what the
/// connection's control buffer takes.
pub(crate) fn offer(rel: &mut Reliable, conn: u64, held: Held, max_control: usize) -> Offered {
    let Some(cr) = rel.conns.get_mut(&conn) else {
        return Offered::NoWindow;
    };
    let bytes = held.event.len();
    let upstream = held.upstream;
    let peer = cr.peer;
    match cr.send.push(held, bytes) {
        Push::Held { evicted, .. } => {
            rel.counters.pieces_sent += transmit(cr, max_control, &mut rel.fragments.compression);
            rel.counters.held += 1;
            if upstream.is_some() {
                rel.obligations += 1;
            }
            if !evicted.is_empty() {
                rel.counters.window_dropped += evicted.len() as u64;
                for e in &evicted {
                    if let Some(u) = e.upstream {
                        rel.completions.push((u, false));
                    }
                }
                if rel.warn_allowed() {
                    tracing::warn!(
                        "reliable window of the link to {peer:#x} is full \
                         (federation.reliable_window_events/_bytes): the oldest unacknowledged \
                         event is given up on that link ({} so far)",
                        rel.counters.window_dropped
                    );
                }
            }
        }
        Push::Rejected(_) | Push::WouldBlock(_) => {
            rel.counters.rejected += 1;
            let report = rel.warn_allowed();
            if report {
                tracing::warn!(
                    "reliable window of the link to {peer:#x} is full \
                     (federation.reliable_window_events/_bytes, reliable_window_full = \"reject\"): \
                     an event does not cross that link ({} so far)",
                    rel.counters.rejected
                );
            }
            return Offered::Rejected { report };
        }
    }
    Offered::Held
}

/// [`transmit`] on connection `conn`, counting the pieces.
pub(crate) fn transmit_conn(rel: &mut Reliable, conn: u64, max_control: usize) {
    if let Some(cr) = rel.conns.get_mut(&conn) {
        rel.counters.pieces_sent += transmit(cr, max_control, &mut rel.fragments.compression);
    }
}

/// Writes the window's unsent events to the connection's control buffer,
/// as many as it takes (the rest go on the next tick or acknowledgement).
/// An event larger than the connection's piece size goes in pieces
/// ([`send_pieces`](crate::state::fragment::send_pieces)), marked sent once its last piece is written.
/// Returns the pieces written; `comp` counts the pieces compressed.
fn transmit(
    cr: &mut ConnRel,
    max_control: usize,
    comp: &mut crate::state::fragment::PieceCompression,
) -> u64 {
    let mut pieces = 0;
    loop {
        if let Some(s) = cr.sending.as_mut() {
            let (done, n) =
                crate::state::fragment::send_pieces(&cr.outbox, s, max_control, cr.peer, comp);
            pieces += n;
            if !done {
                return pieces;
            }
            let seq = s.seq;
            cr.sending = None;
            cr.send.mark_sent(seq, 0);
        }
        let Some((seq, h)) = cr.send.peek_unsent() else {
            return pieces;
        };
        if cr.piece > 0 && h.event.len() > cr.piece && h.to.is_none() {
            // Pieces compressed only if the peer takes them (version 7).
            let compression = if cr.compress_pieces {
                h.compression
            } else {
                tagwire_core::compress::Compression::default()
            };
            if let Some(s) = crate::state::fragment::start(
                seq,
                h.origin,
                h.hops,
                &h.event,
                cr.piece,
                compression,
            ) {
                cr.sending = Some(s);
                continue;
            }
        }
        let frame = frame_of(seq, h);
        if !cr.outbox.send_link(&frame, max_control) {
            return pieces;
        }
        // A TCP connection never loses a frame, so no retransmission timer
        // is kept there: the clock is read for lossy connections only.
        let now = if cr.lossy { crate::timing::now_ns() } else { 0 };
        cr.send.mark_sent(seq, now);
    }
}

/// A lossy connection's events sent [`LOSSY_RTO_NS`] ago and not
/// acknowledged, sent again (at most [`LOSSY_RESEND_PER_TICK`]; what the
/// control buffer does not take waits for the next timeout). Returns how
/// many went.
fn retransmit(cr: &mut ConnRel, now: u64, max_control: usize) -> u64 {
    let due = cr
        .send
        .poll_retransmit(now, LOSSY_RTO_NS, LOSSY_RESEND_PER_TICK);
    let mut sent = 0;
    for seq in due {
        let Some(h) = cr.send.get(seq) else {
            continue;
        };
        let frame = frame_of(seq, h);
        if !cr.outbox.send_link(&frame, max_control) {
            break;
        }
        sent += 1;
    }
    sent
}

/// Sends connection `conn`'s acknowledgement if one is due (`now`: any
/// change; else only after [`ACK_EVERY`] settled events on a link,
/// [`CLIENT_ACK_EVERY`] on a client connection).
pub(crate) fn ack_if_due(rel: &mut Reliable, conn: u64, now: bool, max_control: usize) {
    let Some(cr) = rel.conn_mut(conn) else {
        return;
    };
    let every = if cr.client {
        CLIENT_ACK_EVERY
    } else {
        ACK_EVERY
    };
    if !now && cr.recv.settled_since_ack() < every {
        return;
    }
    if let Some(ack) = cr.recv.ack() {
        let sent = if cr.client {
            cr.outbox
                .send(&tagwire_proto::Frame::PublishAck(ack), max_control)
        } else {
            cr.outbox.send_link(&LinkFrame::Ack(ack), max_control)
        };
        if sent {
            rel.counters.acks_sent += 1;
        }
    }
}

/// A `PublishReliable` with sequence number `seq` arrived on client
/// connection `conn` (protocol version 4): takes it into the connection's
/// receive window (made on first use). The caller routes the event with
/// `Upstream { conn, seq }` and then calls [`client_settle`], and
/// [`client_batch_end`] once its batch of publishes is routed (the window
/// stays checked out of the map until then, see `Reliable::checked_out`).
/// A sequence number other than the next expected is refused (the
/// connection keeps order; a new connection starts at 1).
pub(crate) fn client_frame(
    st: &mut State,
    conn: u64,
    outbox: &Arc<Outbox>,
    seq: u64,
) -> Result<(), (ErrorCode, String)> {
    let rel = &mut st.fed.reliable;
    let cr = client_checkout(rel, conn, outbox);
    if !cr.client || seq != cr.recv.expected() {
        let (link, expected) = (!cr.client, cr.recv.expected());
        if link {
            // A link connection's windows stay in the map.
            rel.check_in();
        }
        return Err((
            ErrorCode::Malformed,
            format!(
                "PublishReliable with sequence number {seq}, expected {expected} (numbers start at 1 on each connection and grow by one)"
            ),
        ));
    }
    cr.recv
        .on_next(seq)
        .map_err(|e| (ErrorCode::Malformed, format!("PublishReliable: {e}")))?;
    rel.obligations = 0;
    Ok(())
}

/// Client connection `conn`'s window, checked out of `conns` for its
/// publish batch (made on first use): a comparison when it already is,
/// else one lookup (and whatever another connection left checked out is
/// put back first). A link connection's windows come out too: the caller
/// puts them back at once (see [`client_frame`]).
fn client_checkout<'r>(rel: &'r mut Reliable, conn: u64, outbox: &Arc<Outbox>) -> &'r mut ConnRel {
    if rel.checked_out.as_ref().is_some_and(|(c, _)| *c != conn) {
        rel.check_in();
    }
    let conns = &mut rel.conns;
    let (_, cr) = rel.checked_out.get_or_insert_with(|| {
        let cr = conns.remove(&conn).unwrap_or_else(|| ConnRel {
            peer: 0,
            client: true,
            outbox: outbox.clone(),
            send: SendWindow::new(WindowLimits::default(), WindowFull::Reject),
            recv: RecvWindow::new(tagwire_proto::MAX_RELIABLE_WINDOW),
            lossy: false,
            // A client connection does not carry pieces (links only).
            piece: 0,
            sending: None,
            reliable_to: false,
            compress_pieces: false,
        });
        (conn, cr)
    });
    cr
}

/// The publish batch that checked out a client connection's window (see
/// [`client_frame`]) ended: the window goes back in the map. A flag test
/// when none is out.
pub(crate) fn client_batch_end(st: &mut State) {
    st.fed.reliable.check_in();
}

/// Whether the event is one this daemon already routed for the same
/// publisher of the same session (the library sent it again after a
/// reconnect because the acknowledgement was lost with the connection):
/// then it is dropped, and acknowledged as done.
pub(crate) fn client_duplicate(
    st: &mut State,
    session: &[u8; tagwire_proto::SESSION_ID_LEN],
    conn: u64,
    ev: &EventRef<'_>,
) -> bool {
    let key = match session_key(session) {
        0 => conn,
        k => k,
    };
    let publisher = tagwire_core::proxy::publisher_key(ev.publisher);
    match st
        .fed
        .reliable
        .publish_dedupe
        .check(key, publisher, ev.seq, ev.source_time_ns)
    {
        Seen::New => false,
        Seen::Duplicate | Seen::TooOld => {
            st.fed.reliable.counters.duplicates += 1;
            true
        }
    }
}

/// A session id folded into a dedupe key (0: no session).
fn session_key(session: &[u8; tagwire_proto::SESSION_ID_LEN]) -> u64 {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&session[..8]);
    hi.copy_from_slice(&session[8..]);
    u64::from_le_bytes(lo) ^ u64::from_le_bytes(hi).rotate_left(17)
}

/// The event `seq` of client connection `conn` was routed (or refused, or
/// dropped as a copy): it waits for the acknowledgements of the reliable
/// links it went on (the obligations routing counted), then is settled.
pub(crate) fn client_settle(st: &mut State, conn: u64, seq: u64) {
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    let n = std::mem::take(&mut r.obligations);
    if let Some(cr) = r.conn_mut(conn) {
        let _ = cr.recv.settle(seq, n);
    }
    complete_pending(r, max);
}

/// Sends client connection `conn` its acknowledgement now, if anything
/// was settled since the last (at the end of each batch of publishes).
pub(crate) fn client_ack(st: &mut State, conn: u64) {
    let max = st.config.limits.max_control_bytes;
    ack_if_due(&mut st.fed.reliable, conn, true, max);
}

/// Client connection `conn` closed: forgets its window (what it did not
/// acknowledge, the library sends again on its next connection).
pub(crate) fn client_closed(st: &mut State, conn: u64) {
    st.fed.reliable.check_in();
    if st.fed.reliable.conns.get(&conn).is_some_and(|c| c.client) {
        st.fed.reliable.conns.remove(&conn);
    }
}

/// The durable store committed (or failed to store) events that had
/// upstream obligations: completes them and acknowledges at once on each
/// connection concerned (the store's commit is what the publisher waits
/// for).
pub(crate) fn store_settled(st: &mut State, settled: Vec<(Upstream, bool)>) {
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    let mut conns: Vec<u64> = Vec::new();
    for (up, failed) in settled {
        if let Some(cr) = r.conn_mut(up.conn) {
            let _ = cr.recv.complete(up.seq, failed);
            if !conns.contains(&up.conn) {
                conns.push(up.conn);
            }
        }
    }
    for conn in conns {
        ack_if_due(r, conn, true, max);
    }
}

/// Settles the upstream obligations the last routing gave back.
pub(crate) fn complete_pending(rel: &mut Reliable, max_control: usize) {
    while let Some((up, failed)) = rel.completions.pop() {
        if let Some(cr) = rel.conn_mut(up.conn) {
            let _ = cr.recv.complete(up.seq, failed);
        }
        ack_if_due(rel, up.conn, false, max_control);
    }
}

/// A reliable event that arrived in pieces and that this daemon received
/// whole a moment ago (on a connection since lost): its sequence number
/// `seq` on `conn` is settled as a copy (counted in `duplicates`).
pub(crate) fn settle_copy(st: &mut State, conn: u64, seq: u64) -> Result<(), (ErrorCode, String)> {
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    let Some(cr) = r.conns.get_mut(&conn) else {
        return Ok(());
    };
    cr.recv
        .on_frame(seq, None)
        .map_err(|e| (ErrorCode::Malformed, format!("Fragment: {e}")))?;
    let _ = cr.recv.settle(seq, 0);
    r.counters.duplicates += 1;
    complete_pending(r, max);
    ack_if_due(r, conn, false, max);
    Ok(())
}

/// An `Ack` arrived on link connection `conn`.
pub(crate) fn on_ack(st: &mut State, conn: u64, ack: &Ack) -> Result<(), (ErrorCode, String)> {
    let max = st.config.limits.max_control_bytes;
    let rel = &mut st.fed.reliable;
    let Some(cr) = rel.conns.get_mut(&conn) else {
        return Err((
            ErrorCode::Malformed,
            "an Ack on a link of version 2 (no acknowledgements)".into(),
        ));
    };
    let peer = cr.peer;
    let released = cr
        .send
        .on_ack(ack)
        .map_err(|e| (ErrorCode::Malformed, format!("Ack: {e}")))?;
    let pieces = transmit(cr, max, &mut rel.fragments.compression);
    let r = &mut st.fed.reliable;
    r.counters.pieces_sent += pieces;
    for h in released.done {
        if let Some(u) = h.upstream {
            r.completions.push((u, false));
        }
    }
    complete_pending(r, max);
    for h in released.failed {
        reroute(st, h, Some(peer), conn);
    }
    Ok(())
}

/// Link connection `conn` closed: what its window held is routed again
/// (after the node engine took the link down, so over the next route).
pub(crate) fn conn_closed(st: &mut State, conn: u64) {
    // Its sender routes those again itself.
    st.fed
        .reliable
        .pending_to
        .retain(|p| p.upstream.conn != conn);
    let Some(mut cr) = st.fed.reliable.conns.remove(&conn) else {
        return;
    };
    let held = cr.send.drain();
    if !held.is_empty() {
        tracing::info!(
            "link connection {conn} to {:#x} closed with {} reliable events unacknowledged: \
             routing them again",
            cr.peer,
            held.len()
        );
    }
    for h in held {
        reroute(st, h, None, conn);
    }
}

/// After the topology changed: a connection whose held events the route
/// no longer takes — its link is not confirmed any more (the peer's advert
/// dropped it, while this end has not noticed the connection is dead), or
/// the route of its oldest held event now goes another way (a link came
/// back and the shortest path moved) — gives back what its window holds,
/// routed again now, before anything newer takes the new route, so that the
/// subscriber gets them in order. Late acknowledgements of them on the old
/// connection are ignored; late copies are dropped by the dedupe.
pub(crate) fn topology_changed(st: &mut State) {
    retry_pending_to(st, None);
    if st.fed.reliable.conns.is_empty() {
        return;
    }
    let me = st.node.me();
    let candidates: Vec<(u64, NodeId)> = st
        .fed
        .reliable
        .conns
        .iter()
        .filter(|(_, cr)| !cr.send.is_empty())
        .map(|(c, cr)| (*c, cr.peer))
        .collect();
    let mut stale = Vec::new();
    for (conn, peer) in candidates {
        let moved = !st.node.topology().linked(me, peer) || {
            let Some(cr) = st.fed.reliable.conns.get(&conn) else {
                continue;
            };
            let Some((_, h)) = cr.send.oldest() else {
                continue;
            };
            let (event, origin, hops, from) = (h.event.clone(), h.origin, h.hops, h.from);
            if let Some((to, _)) = &h.to {
                let to = *to;
                st.node.next_hop_toward(origin, to) != Some(peer)
            } else {
                match EventRef::parse(&event) {
                    Ok(ev) => {
                        let mut next = NextHops(Vec::new());
                        st.node.route(&ev, origin, hops, from, &mut next);
                        !next.0.contains(&peer)
                    }
                    Err(_) => false,
                }
            }
        };
        if moved {
            stale.push((conn, peer));
        }
    }
    for (conn, peer) in stale {
        let held = match st.fed.reliable.conns.get_mut(&conn) {
            Some(cr) => cr.send.drain(),
            None => continue,
        };
        tracing::info!(
            "the route no longer takes the link to {peer:#x}: routing its {} unacknowledged \
             reliable events again",
            held.len()
        );
        // Not excluded: an event whose route still takes this link goes on
        // it again (a copy, dropped by the dedupe where it arrives twice).
        for h in held {
            reroute(st, h, None, conn);
        }
    }
}

/// Routes `held` again with the current topology, never to `exclude` (the
/// neighbour that could not pass it on). Its upstream obligation moves to
/// the links it now takes; with none, it is failed upstream (the daemon
/// before this one routes it again) or, here at its origin, lost (counted).
/// (`via`: the link connection it was held on, whose band it keeps if it
/// is held for a daemon that is away.)
fn reroute(st: &mut State, held: Held, exclude: Option<NodeId>, via: u64) {
    let max = st.config.limits.max_control_bytes;
    st.fed.reliable.counters.rerouted += 1;
    if held.to.is_some() {
        return reroute_to(st, held);
    }
    if held.tries >= MAX_REROUTES {
        if hold_rerouted(st, &held, via) {
            // Published here, wanted by a daemon that is away: held for it.
            if let Some(u) = held.upstream {
                st.fed.reliable.completions.push((u, false));
            }
            complete_pending(&mut st.fed.reliable, max);
            return;
        }
        let r = &mut st.fed.reliable;
        r.counters.unroutable += 1;
        if let Some(u) = held.upstream {
            r.completions.push((u, false));
        }
        if r.warn_allowed() {
            tracing::warn!(
                "a reliable event was routed again {MAX_REROUTES} times and found no daemon to \
                 take it: given up ({} so far)",
                r.counters.unroutable
            );
        }
        complete_pending(r, max);
        return;
    }
    let Ok(ev) = EventRef::parse(&held.event) else {
        // It parsed when it came; cannot happen. Give it up upstream.
        if let Some(u) = held.upstream {
            st.fed.reliable.completions.push((u, true));
        }
        complete_pending(&mut st.fed.reliable, max);
        return;
    };
    st.fed.reliable.obligations = 0;
    let mut sink = Reroute {
        links: &st.fed.links,
        rel: &mut st.fed.reliable,
        held: &held,
        exclude,
        max,
        taken: 0,
    };
    st.node
        .route(&ev, held.origin, held.hops, held.from, &mut sink);
    let taken = sink.taken;
    let added = std::mem::take(&mut st.fed.reliable.obligations);
    // Taken by no link: published here and wanted by a daemon that is
    // away, it is held for it (and counts as taken).
    let kept = taken == 0 && added == 0 && hold_rerouted(st, &held, via);
    let r = &mut st.fed.reliable;
    match held.upstream {
        Some(u) => {
            if added > 0 {
                if let Some(cr) = r.conn_mut(u.conn) {
                    let _ = cr.recv.add_obligations(u.seq, added);
                }
                r.completions.push((u, false));
            } else {
                r.completions.push((u, !kept));
            }
        }
        None if taken == 0 && !kept => {
            r.counters.unroutable += 1;
            if r.warn_allowed() {
                tracing::warn!(
                    "a reliable event of {} could not be routed again after its link was lost: \
                     no route to the daemons that want it ({} so far)",
                    ev.tag,
                    r.counters.unroutable
                );
            }
        }
        None => {}
    }
    complete_pending(r, max);
}

/// A reliable event routed again that no link took: if it was published
/// here and a daemon that is away wants it, it is held for that daemon
/// (core's hold, sent once it is reachable again). Returns whether it is.
/// It keeps the band of the connection it was held on (`via`), so that it
/// goes back on the same band connection as the newer events held with it:
/// one connection keeps their order, two would not.
fn hold_rerouted(st: &mut State, held: &Held, via: u64) -> bool {
    if held.origin != st.node.me() || !st.node.has_away() {
        return false;
    }
    let Ok(ev) = EventRef::parse(&held.event) else {
        return false;
    };
    let band = st.band_of(via);
    hold_for_away(st, &ev, &held.event, Some(&band))
}

/// Holds reliable event `event` (published here) for the away daemons
/// that want it, on `band` (default: its priority's): not one larger than
/// a piece (`fragment_size`: a `ReliableTo` goes whole), counted dropped.
/// Returns whether it is held for any.
pub(crate) fn hold_for_away(
    st: &mut State,
    ev: &EventRef<'_>,
    event: &Bytes,
    band: Option<&str>,
) -> bool {
    if event.len() > st.fed.reliable.fragments.piece {
        st.fed.reliable.counters.away_dropped += 1;
        return false;
    }
    let band: Arc<str> = match band {
        Some(b) if !b.is_empty() => Arc::from(b),
        _ => Arc::from(crate::state::band_for_priority(st, ev.priority)),
    };
    st.node
        .hold_for_away(ev, event, &band, crate::timing::now_ns())
        > 0
}

/// Offers `held`, a `ReliableTo` (its `to` set), to the window of the link
/// toward its daemon on its band (core's `next_hop_toward`: the links the
/// origin's live events take there), if that connection speaks link
/// version 7. Returns whether a window took it.
pub(crate) fn offer_toward(st: &mut State, held: Held) -> bool {
    let Some((to, band)) = held.to.clone() else {
        return false;
    };
    let Some(next) = st.node.next_hop_toward(held.origin, to) else {
        return false;
    };
    let Some(l) = st.fed.links.get(&next) else {
        return false;
    };
    let conn = l.bands.get(&*band).map_or(&l.queue, |b| &b.queue).conn;
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    if !r.conns.get(&conn).is_some_and(|c| c.reliable_to) {
        return false;
    }
    offer(r, conn, held, max) == Offered::Held
}

/// Gives an event addressed to `to` back to core's hold (published here:
/// it could not be sent on toward `to`); counted dropped if the hold does
/// not take it.
fn hold_again(st: &mut State, to: NodeId, event: &Bytes, band: &Arc<str>) {
    let held = EventRef::parse(event).is_ok_and(|ev| {
        st.node
            .hold_again(to, &ev, event, band, crate::timing::now_ns())
    });
    if !held {
        st.fed.reliable.counters.away_dropped += 1;
    }
}

/// Passes `ReliableTo` `p` on toward its daemon (its obligation upstream
/// is already counted: settled when the next daemon acknowledges it).
/// Returns whether a window took it.
pub(crate) fn pass_on_to(st: &mut State, p: &crate::state::reliable::PendingTo) -> bool {
    let held = Held {
        event: p.event.clone(),
        origin: p.origin,
        hops: p.hops,
        from: Some(p.from),
        upstream: Some(p.upstream),
        tries: 0,
        packed: None,
        to: Some((p.to, p.band.clone())),
        // A `ReliableTo` goes whole, never in (compressed) pieces.
        compression: tagwire_core::compress::Compression::default(),
    };
    let taken = offer_toward(st, held);
    // `offer` counted an obligation for it: the caller settled it already.
    st.fed.reliable.obligations = 0;
    if taken {
        st.fed.reliable.counters.to_forwarded += 1;
    }
    taken
}

/// `ReliableTo` `p` has no way on yet: it waits (bounded: at the bound the
/// oldest waiting is failed back to its sender).
pub(crate) fn wait_for_way_on(st: &mut State, p: crate::state::reliable::PendingTo) {
    use crate::state::reliable::MAX_PENDING_TO;
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    if r.pending_to.len() >= MAX_PENDING_TO {
        if let Some(old) = r.pending_to.pop_front() {
            r.completions.push((old.upstream, true));
        }
    }
    r.pending_to.push_back(p);
    complete_pending(r, max);
}

/// The routes changed (or time passed): `ReliableTo` events waiting for a
/// way on go on now, in order, up to the first that still has none — in
/// the same step that gave the way, before any newer event can take it.
/// Those that waited longer than `PENDING_TO_NS` are failed back to their
/// sender (which routes them again, or holds them again at their origin).
pub(crate) fn retry_pending_to(st: &mut State, now: Option<u64>) {
    use crate::state::reliable::PENDING_TO_NS;
    if st.fed.reliable.pending_to.is_empty() {
        return;
    }
    let max = st.config.limits.max_control_bytes;
    while let Some(p) = st.fed.reliable.pending_to.pop_front() {
        if pass_on_to(st, &p) {
            continue;
        }
        if now.is_some_and(|n| n.saturating_sub(p.since) > PENDING_TO_NS) {
            st.fed.reliable.completions.push((p.upstream, true));
            continue;
        }
        st.fed.reliable.pending_to.push_front(p);
        break;
    }
    complete_pending(&mut st.fed.reliable, max);
}

/// Core's hold gave back the reliable events published here while daemon
/// `to` was away, now that it is reachable again (oldest first): each goes
/// as a `ReliableTo` on the link toward `to`, in this same step, so before
/// any newer event of theirs; what that link does not take (it does not
/// speak link version 7, or no link leads there) goes back to the hold.
pub(crate) fn release(st: &mut State, to: NodeId, events: Vec<tagwire_core::node::HeldEvent>) {
    let me = st.node.me();
    let (mut sent, mut again) = (0usize, 0usize);
    for h in events {
        let held = Held {
            event: h.event.clone(),
            origin: me,
            hops: 0,
            from: None,
            upstream: None,
            tries: 0,
            packed: None,
            to: Some((to, h.label.clone())),
            compression: tagwire_core::compress::Compression::default(),
        };
        if offer_toward(st, held) {
            sent += 1;
        } else {
            hold_again(st, to, &h.event, &h.label);
            again += 1;
        }
    }
    st.fed.reliable.counters.to_forwarded += sent as u64;
    tracing::info!(
        "daemon {to:#x} is reachable again: sending it the {sent} reliable events held for it \
         while it was away ({again} held on: no link toward it takes them now)"
    );
}

/// Routes a `ReliableTo` again (its link was lost, its route moved, or the
/// next daemon could not pass it on): toward its daemon over the link the
/// route takes now. Its upstream obligation moves there; with none, it is
/// failed upstream (the daemon before routes it again) or, here at its
/// origin, held again for its daemon.
fn reroute_to(st: &mut State, held: Held) {
    let max = st.config.limits.max_control_bytes;
    let Some((to, band)) = held.to.clone() else {
        return;
    };
    let upstream = held.upstream;
    let event = held.event.clone();
    let given_up = held.tries >= MAX_REROUTES;
    st.fed.reliable.obligations = 0;
    let taken = !given_up && {
        let again = Held {
            tries: held.tries.saturating_add(1),
            packed: None,
            ..held
        };
        offer_toward(st, again)
    };
    let added = std::mem::take(&mut st.fed.reliable.obligations);
    match upstream {
        Some(u) => {
            let r = &mut st.fed.reliable;
            if taken && added > 0 {
                if let Some(cr) = r.conn_mut(u.conn) {
                    let _ = cr.recv.add_obligations(u.seq, added);
                }
                r.completions.push((u, false));
            } else {
                r.completions.push((u, true));
            }
        }
        None if !taken => hold_again(st, to, &event, &band),
        None => {}
    }
    complete_pending(&mut st.fed.reliable, max);
}

/// The links a routing picks (local channels ignored).
struct NextHops(Vec<NodeId>);

impl Sink<Arc<crate::channel::Channel>> for NextHops {
    fn channel(&mut self, _: &Arc<crate::channel::Channel>, _: Overrides) {}
    fn link(&mut self, to: NodeId, _origin: NodeId, _hops: u8) {
        self.0.push(to);
    }
}

/// Routes a held event again: links only (local channels already had it).
struct Reroute<'a> {
    links: &'a HashMap<NodeId, crate::state::federation::Link>,
    rel: &'a mut Reliable,
    held: &'a Held,
    exclude: Option<NodeId>,
    max: usize,
    taken: usize,
}

impl Sink<Arc<crate::channel::Channel>> for Reroute<'_> {
    fn channel(&mut self, _: &Arc<crate::channel::Channel>, _: Overrides) {}

    fn link(&mut self, to: NodeId, origin: NodeId, hops: u8) {
        if Some(to) == self.exclude {
            return;
        }
        let Some(l) = self.links.get(&to) else {
            return;
        };
        let held = Held {
            event: self.held.event.clone(),
            origin,
            hops,
            from: self.held.from,
            upstream: self.held.upstream,
            tries: self.held.tries.saturating_add(1),
            // Routed again: whole (this connection's peer may not speak
            // link version 5). Its pieces, if it goes in pieces, are
            // compressed as before where the peer speaks version 7 (decided
            // per connection when they are sent).
            packed: None,
            to: None,
            compression: self.held.compression,
        };
        if offer(self.rel, l.conn, held, self.max) == Offered::Held {
            self.taken += 1;
        }
    }
}

/// The federation task's tick: unsent events to the control buffers, and
/// the acknowledgements due.
pub(crate) fn tick(st: &mut State) {
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    // Between batches nothing is checked out; to be sure the tick sees
    // every connection.
    r.check_in();
    if !r.pending_to.is_empty() {
        retry_pending_to(st, Some(crate::timing::now_ns()));
    }
    let r = &mut st.fed.reliable;
    let conns: Vec<u64> = r.conns.keys().copied().collect();
    let mut now = None;
    for conn in conns {
        transmit_conn(r, conn, max);
        if let Some(cr) = r.conns.get_mut(&conn).filter(|c| c.lossy) {
            let now = *now.get_or_insert_with(crate::timing::now_ns);
            r.counters.retransmitted += retransmit(cr, now, max);
        }
        ack_if_due(r, conn, true, max);
    }
}
