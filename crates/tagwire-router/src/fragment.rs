//! Large reliable events across links in pieces (link version 4;
//! docs/reliability.md, "Large payloads"). The pieces and their bounded,
//! resumable reassembly are core's ([`tagwire_core::fragment`]), the event
//! being sent and the reassemblies are held in
//! [`crate::state::fragment`]; this module keeps a held event's pieces
//! going on its link connection's control buffer as room allows, takes
//! `FragmentResume` answers (the peer holds a prefix: continue there) and
//! puts arriving pieces together, handing the whole event to the `Reliable`
//! (or `Forward`) path ([`crate::forwarded`]).
//!
//! A reassembly is keyed by the event's origin daemon and its id (a hash of
//! its publisher, sequence number, source time and tag, the same at every
//! daemon), not by the connection: so when a link is cut and the event comes
//! again (over the same link once it is back, or from another neighbour),
//! the receiver says how much it holds and only the rest crosses.

use bytes::Bytes;
use tagwire_core::federation::NodeId;
use tagwire_core::fragment::{BlobId, Piece, Progress, ReassemblyCounters};
use tagwire_proto::{ErrorCode, FragmentOf, LinkFrame};

use crate::channel::Outbox;
use crate::state::State;

/// How often pieces are written while an event is being sent in pieces
/// (the control buffer drains between two turns), and while none is.
const PUMP_BUSY: std::time::Duration = std::time::Duration::from_millis(2);
const PUMP_IDLE: std::time::Duration = std::time::Duration::from_millis(50);

/// Keeps pieces flowing: every [`PUMP_BUSY`] while a link connection sends
/// an event in pieces, writes what its control buffer takes (the
/// federation tick, every 50 ms, would cap a link at half the control
/// buffer per tick: 40 MiB/s with the defaults).
pub(crate) async fn pump(state: std::sync::Arc<crate::sync::Locked<State>>) {
    loop {
        let busy = {
            let mut st = state.borrow_mut();
            let max = st.config.limits.max_control_bytes;
            let r = &mut st.fed.reliable;
            let sending: Vec<u64> = r
                .conns
                .iter()
                .filter(|(_, c)| c.sending.is_some())
                .map(|(k, _)| *k)
                .collect();
            for conn in &sending {
                crate::reliable::transmit_conn(r, *conn, max);
            }
            !sending.is_empty()
        };
        tokio::time::sleep(if busy { PUMP_BUSY } else { PUMP_IDLE }).await;
    }
}

/// A `FragmentResume` arrived on link connection `conn`: if it names the
/// event being sent there, continue at the peer's point.
pub(crate) fn on_resume(st: &mut State, conn: u64, blob: BlobId, have: u64) {
    let max = st.config.limits.max_control_bytes;
    let r = &mut st.fed.reliable;
    let Some(cr) = r.conns.get_mut(&conn) else {
        return;
    };
    let peer = cr.peer;
    let Some(s) = cr.sending.as_mut().filter(|s| s.out.blob() == blob) else {
        tracing::debug!(
            conn,
            "FragmentResume for event {:#x} that is not being sent here: ignored",
            blob.id
        );
        return;
    };
    let cursor = s.out.cursor();
    s.out.resume(have);
    r.counters.resumes_taken += 1;
    r.counters.bytes_skipped += have.saturating_sub(cursor);
    tracing::info!(
        conn,
        "resuming reliable event {:#x} on the link to {peer:#x} at byte {have} of {} (the peer \
         holds that much; {} bytes not sent again)",
        blob.id,
        blob.total,
        have.saturating_sub(cursor)
    );
    crate::reliable::transmit_conn(r, conn, max);
}

/// A `Fragment` arrived on link connection `conn` from `peer`. An error
/// closes the link (the sender routes what it held again and resumes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn on_fragment(
    st: &mut State,
    stage: &mut crate::channel::Staging,
    outbox: &Outbox,
    conn: u64,
    peer: NodeId,
    blob: BlobId,
    offset: u64,
    of: FragmentOf,
    data: Bytes,
    band: &str,
) -> Result<(), (ErrorCode, String)> {
    let max = st.config.limits.max_control_bytes;
    let fragments_ok = st
        .fed
        .reliable
        .conns
        .get(&conn)
        .is_some_and(|c| c.piece > 0);
    if !fragments_ok {
        return Err((
            ErrorCode::Malformed,
            "a Fragment on a link of version 3 or lower".into(),
        ));
    }
    let origin = match of {
        FragmentOf::Reliable { seq, origin, .. } => {
            let expected = st
                .fed
                .reliable
                .conns
                .get(&conn)
                .map_or(1, |c| c.recv.expected());
            if seq < expected {
                // A piece still in flight of an event settled here already
                // (its peer resumed past it, or it completed): nothing to do.
                return Ok(());
            }
            if seq > expected {
                return Err((
                    ErrorCode::Malformed,
                    format!(
                        "Fragment of Reliable sequence number {seq}, expected {expected} (a gap \
                         on one connection)"
                    ),
                ));
            }
            origin
        }
        FragmentOf::Forward { origin, .. } => origin,
    };
    let key = (origin, blob.id);
    let r = &mut st.fed.reliable;
    let f = &mut r.fragments;
    let accepted = f.reasm.on_piece(key, &Piece { blob, offset, data });
    let c: ReassemblyCounters = f.reasm.counters();
    r.counters.reassembled = c.completed;
    r.counters.reassembly_dropped = c.dropped;
    let accepted = accepted.map_err(|e| (ErrorCode::Malformed, format!("Fragment: {e}")))?;
    let f = &mut r.fragments;
    if !accepted.dropped.is_empty() && f.warn_allowed() {
        tracing::warn!(
            "{} incomplete fragmented events dropped to make room \
             (federation.fragment_max_events/_bytes); {} so far",
            accepted.dropped.len(),
            f.reasm.counters().dropped
        );
    }
    match accepted.progress {
        Progress::Partial {
            resumed: true,
            have,
        } => {
            r.counters.resumes_sent += 1;
            tracing::info!(
                conn,
                "fragmented event {:#x} from {origin:#x} arrives again (from {peer:#x}): this \
                 daemon holds {have} of its {} bytes, asking the sender to resume there",
                blob.id,
                blob.total
            );
            let _ = outbox.send_link(&resume_frame(blob, have), max);
            Ok(())
        }
        Progress::Partial { .. } => Ok(()),
        Progress::AlreadyComplete => {
            if let FragmentOf::Reliable { seq, .. } = of {
                // Received whole a moment ago (on a connection since lost):
                // settled here as a copy, and the sender told to stop.
                crate::reliable::settle_copy(st, conn, seq)?;
            }
            st.fed.reliable.counters.resumes_sent += 1;
            let _ = outbox.send_link(&resume_frame(blob, blob.total), max);
            Ok(())
        }
        Progress::Complete(event) => match of {
            FragmentOf::Reliable { seq, origin, hops } => crate::forwarded::on_reliable(
                st, stage, conn, peer, seq, origin, hops, &event, None, band,
            ),
            FragmentOf::Forward { origin, hops } => {
                crate::forwarded::on_forward(st, stage, conn, peer, origin, hops, &event, None)
            }
        },
    }
}

fn resume_frame(blob: BlobId, have: u64) -> LinkFrame {
    LinkFrame::FragmentResume {
        id: blob.id,
        total: blob.total,
        checksum: blob.checksum,
        have,
    }
}
