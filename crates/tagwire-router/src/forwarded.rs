//! Events that arrive over links from a neighbour daemon: a `Forward`
//! ([`on_forward`]) or a `Reliable` ([`on_reliable`]), whole, decompressed
//! or put together from pieces. Each is checked (a multicast copy, the
//! dedupe window, the node engine's admission), delivered here and routed
//! on ([`crate::dispatch`]); a reliable one is then settled on its
//! connection ([`crate::reliable`]: acknowledgement and custody).

use bytes::Bytes;
use tagwire_core::federation::NodeId;
use tagwire_core::reliable::Seen;
use tagwire_proto::{ErrorCode, EventRef};

use crate::channel::Outgoing;
use crate::state::reliable::{Parked, Upstream};
use crate::state::State;
use crate::timing::now_ns;

/// A `Forward` (or a forwarded event put together from `Fragment`s)
/// arrived on link connection `conn` from `peer`: delivered here and routed
/// on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn on_forward(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    origin: NodeId,
    hops: u8,
    event: &bytes::Bytes,
    chunk: Option<u64>,
) -> Result<(), (ErrorCode, String)> {
    let ev = EventRef::parse(event)
        .map_err(|e| (ErrorCode::Malformed, format!("bad event in Forward: {e}")))?;
    if let Some(l) = st.fed.links.get_mut(&peer) {
        l.events_in += 1;
        l.bytes_in += event.len() as u64;
    }
    if !st.mcast.groups.is_empty() && !crate::multicast::first_copy(st, origin, &ev) {
        // A multicast group brought it already (counted there).
        return Ok(());
    }
    let Ok(deadline) = st.node.admit_forward(origin, hops, &ev, now_ns) else {
        return Ok(());
    };
    let mut out = match chunk {
        Some(epoch) => Outgoing::in_chunk(event, epoch),
        None => Outgoing::own_buffer(event),
    };
    let arrived_on = st.band_of(conn);
    let route = crate::dispatch::Route {
        origin,
        hops: hops.saturating_add(1),
        from: Some(peer),
        band: Some(&arrived_on),
        reliable: false,
        upstream: None,
        group: None,
        publisher_key: None,
        local_only: false,
    };
    crate::dispatch::deliver_routed(st, stage, &mut out, &ev, deadline, route);
    // A link's queues drop or count what they refuse: nobody to tell.
    let _ = stage.flush();
    Ok(())
}

/// A `Reliable` frame arrived on link connection `conn` from `peer`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn on_reliable(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    seq: u64,
    origin: NodeId,
    hops: u8,
    event: &Bytes,
    chunk: Option<u64>,
    band: &str,
) -> Result<(), (ErrorCode, String)> {
    on_numbered(
        st, stage, conn, peer, seq, origin, hops, None, event, chunk, band,
    )
}

/// A `ReliableTo` frame (link version 7) arrived on link connection `conn`
/// from `peer`: numbered like a `Reliable`, but addressed to daemon `to`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn on_reliable_to(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    seq: u64,
    origin: NodeId,
    hops: u8,
    to: NodeId,
    event: &Bytes,
    band: &str,
) -> Result<(), (ErrorCode, String)> {
    on_numbered(
        st,
        stage,
        conn,
        peer,
        seq,
        origin,
        hops,
        Some(to),
        event,
        None,
        band,
    )
}

/// A numbered frame (`Reliable`, or `ReliableTo` when `to` is set): in
/// order on its connection, then routed.
#[allow(clippy::too_many_arguments)]
fn on_numbered(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    seq: u64,
    origin: NodeId,
    hops: u8,
    to: Option<NodeId>,
    event: &Bytes,
    chunk: Option<u64>,
    band: &str,
) -> Result<(), (ErrorCode, String)> {
    let Some(cr) = st.fed.reliable.conns.get_mut(&conn) else {
        return Err((
            ErrorCode::Malformed,
            "a Reliable frame on a link of version 2 (no acknowledgements)".into(),
        ));
    };
    if to.is_some() && !cr.reliable_to {
        return Err((
            ErrorCode::Malformed,
            "a ReliableTo frame on a link of version 6 or older (it came in version 7)".into(),
        ));
    }
    if !cr.lossy {
        if seq != cr.recv.expected() {
            return Err((
                ErrorCode::Malformed,
                format!(
                    "Reliable frame with sequence number {seq}, expected {} (a gap on one connection)",
                    cr.recv.expected()
                ),
            ));
        }
        cr.recv
            .on_next(seq)
            .map_err(|e| (ErrorCode::Malformed, format!("Reliable frame: {e}")))?;
        return match to {
            None => route_reliable(st, stage, conn, peer, seq, origin, hops, event, chunk, band),
            Some(to) => {
                route_reliable_to(st, stage, conn, peer, seq, origin, hops, to, event, band)
            }
        };
    }
    // A lossy connection (UDP): a frame ahead of a gap waits for it (the
    // sender sends the missing one again), a copy is dropped (and makes the
    // next acknowledgement due: ours may have been lost).
    let parked = Parked {
        origin,
        hops,
        event: event.clone(),
        to,
    };
    let ready = cr
        .recv
        .on_frame(seq, Some(parked))
        .map_err(|e| (ErrorCode::Malformed, format!("Reliable frame: {e}")))?;
    for (s, p) in ready {
        let Some(p) = p else { continue };
        match p.to {
            None => route_reliable(
                st, stage, conn, peer, s, p.origin, p.hops, &p.event, None, band,
            )?,
            Some(to) => route_reliable_to(
                st, stage, conn, peer, s, p.origin, p.hops, to, &p.event, band,
            )?,
        }
    }
    Ok(())
}

/// Routes the reliable event `seq` of link connection `conn`, in order:
/// dedupe, delivery, links, then settles it.
#[allow(clippy::too_many_arguments)]
fn route_reliable(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    seq: u64,
    origin: NodeId,
    hops: u8,
    event: &Bytes,
    chunk: Option<u64>,
    band: &str,
) -> Result<(), (ErrorCode, String)> {
    let max = st.config.limits.max_control_bytes;
    let ev = EventRef::parse(event)
        .map_err(|e| (ErrorCode::Malformed, format!("bad event in Reliable: {e}")))?;
    if let Some(l) = st.fed.links.get_mut(&peer) {
        l.events_in += 1;
        l.bytes_in += event.len() as u64;
    }
    let publisher = tagwire_core::proxy::publisher_key(ev.publisher);
    let settle = |st: &mut State, n: u32| {
        let r = &mut st.fed.reliable;
        if let Some(cr) = r.conns.get_mut(&conn) {
            let _ = cr.recv.settle(seq, n);
        }
        crate::reliable::complete_pending(r, max);
        crate::reliable::ack_if_due(r, conn, false, max);
    };
    match st
        .fed
        .reliable
        .dedupe
        .check(origin, publisher, ev.seq, ev.source_time_ns)
    {
        Seen::New => {}
        Seen::Duplicate | Seen::TooOld => {
            st.fed.reliable.counters.duplicates += 1;
            settle(st, 0);
            return Ok(());
        }
    }
    let Ok(deadline) = st
        .node
        .admit_forward(origin, hops, &ev, crate::timing::now_ns)
    else {
        settle(st, 0);
        return Ok(());
    };
    let mut out = match chunk {
        Some(epoch) => Outgoing::in_chunk(event, epoch),
        None => Outgoing::own_buffer(event),
    };
    let route = crate::dispatch::Route {
        origin,
        hops: hops.saturating_add(1),
        from: Some(peer),
        band: Some(band),
        reliable: true,
        upstream: Some(Upstream { conn, seq }),
        group: None,
        publisher_key: None,
        local_only: false,
    };
    st.fed.reliable.obligations = 0;
    let unwanted = st.node.counters().unwanted;
    crate::dispatch::deliver_routed(st, stage, &mut out, &ev, deadline, route);
    let _ = stage.flush();
    let n = std::mem::take(&mut st.fed.reliable.obligations);
    if n == 0 && st.node.counters().unwanted != unwanted {
        // It went nowhere here (no subscriber, no link): this daemon's view
        // of the routes disagrees with the sender's. Failed, so the sender
        // routes it again (elsewhere) instead of taking it as delivered;
        // and not remembered, so that if it comes here again (the routes
        // moved back) it is passed on, not dropped as a copy.
        let r = &mut st.fed.reliable;
        r.dedupe.forget(origin, publisher, ev.seq);
        let blob_key = (origin, crate::state::fragment::event_id(&ev));
        r.fragments.reasm.forget_completed(&blob_key);
        if let Some(cr) = r.conns.get_mut(&conn) {
            let _ = cr.recv.settle(seq, 1);
            let _ = cr.recv.complete(seq, true);
        }
        crate::reliable::complete_pending(r, max);
        crate::reliable::ack_if_due(r, conn, false, max);
        return Ok(());
    }
    settle(st, n);
    Ok(())
}

/// Routes the `ReliableTo` `seq` of link connection `conn`, in order: at
/// its daemon `to`, delivered to the local subscribers only (through the
/// dedupe window: a copy of what arrived before the partition is dropped);
/// elsewhere passed on toward `to` over the link the origin's events take
/// there (core's `next_hop_toward`), without the dedupe (this daemon may
/// have passed newer events of the origin on to others already) and
/// without local delivery; then settled. No way on toward `to` (this
/// daemon's view of the routes disagrees, or that link does not speak link
/// version 7): failed, so the sender routes it again. Over the hop limit:
/// dropped, counted (`to_dropped`) and settled.
#[allow(clippy::too_many_arguments)]
fn route_reliable_to(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    conn: u64,
    peer: NodeId,
    seq: u64,
    origin: NodeId,
    hops: u8,
    to: NodeId,
    event: &Bytes,
    band: &str,
) -> Result<(), (ErrorCode, String)> {
    let max = st.config.limits.max_control_bytes;
    let ev = EventRef::parse(event).map_err(|e| {
        (
            ErrorCode::Malformed,
            format!("bad event in ReliableTo: {e}"),
        )
    })?;
    if let Some(l) = st.fed.links.get_mut(&peer) {
        l.events_in += 1;
        l.bytes_in += event.len() as u64;
    }
    let settle = |st: &mut State, n: u32, failed: bool| {
        let r = &mut st.fed.reliable;
        if let Some(cr) = r.conns.get_mut(&conn) {
            if failed {
                let _ = cr.recv.settle(seq, 1);
                let _ = cr.recv.complete(seq, true);
            } else {
                let _ = cr.recv.settle(seq, n);
            }
        }
        crate::reliable::complete_pending(r, max);
        crate::reliable::ack_if_due(r, conn, false, max);
    };
    if hops >= tagwire_core::federation::MAX_HOPS {
        st.fed.reliable.counters.to_dropped += 1;
        settle(st, 0, false);
        return Ok(());
    }
    if to != st.node.me() {
        // Behind those already waiting (order), else on at once; with no
        // way on yet, it waits for this daemon's routes to catch up with
        // the sender's (`retry_pending_to`), holding its obligation.
        let pending = crate::state::reliable::PendingTo {
            upstream: Upstream { conn, seq },
            from: peer,
            origin,
            hops: hops.saturating_add(1),
            to,
            band: std::sync::Arc::from(band),
            event: event.clone(),
            since: crate::timing::now_ns(),
        };
        if st.fed.reliable.pending_to.is_empty() && crate::reliable::pass_on_to(st, &pending) {
            settle(st, 1, false);
            return Ok(());
        }
        settle(st, 1, false);
        crate::reliable::wait_for_way_on(st, pending);
        return Ok(());
    }
    let publisher = tagwire_core::proxy::publisher_key(ev.publisher);
    match st
        .fed
        .reliable
        .dedupe
        .check(origin, publisher, ev.seq, ev.source_time_ns)
    {
        Seen::New => {}
        Seen::Duplicate | Seen::TooOld => {
            st.fed.reliable.counters.duplicates += 1;
            settle(st, 0, false);
            return Ok(());
        }
    }
    let Ok(deadline) = st.node.admit_due(&ev, crate::timing::now_ns) else {
        settle(st, 0, false);
        return Ok(());
    };
    st.fed.reliable.counters.to_delivered += 1;
    let mut out = Outgoing::own_buffer(event);
    let route = crate::dispatch::Route {
        origin,
        hops: hops.saturating_add(1),
        from: Some(peer),
        band: Some(band),
        reliable: true,
        upstream: Some(Upstream { conn, seq }),
        group: None,
        publisher_key: Some(publisher),
        local_only: true,
    };
    st.fed.reliable.obligations = 0;
    crate::dispatch::deliver_routed(st, stage, &mut out, &ev, deadline, route);
    let _ = stage.flush();
    let n = std::mem::take(&mut st.fed.reliable.obligations);
    settle(st, n, false);
    Ok(())
}
