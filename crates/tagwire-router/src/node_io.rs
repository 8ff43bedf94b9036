//! Carries out what core's node engine decided ([`tagwire_core::node`]):
//! link frames onto the links' outboxes, pulls answered from this daemon's
//! history, pull outcomes to the clients that asked, refused adverts to the
//! log and the peer; and, when time passes, the held events whose start
//! time came and the pulls that waited too long.
//!
//! Each call drains the node's outputs once; the work is bounded by what
//! the call that produced them queued (an advert flood: one frame per link).

use bytes::BytesMut;
use tagwire_core::node::{Asker, Output};
use tagwire_proto::{ErrorCode, EventRef, Frame, PullOutcome};

use std::sync::Arc;
use std::time::Duration;

use crate::channel::Outgoing;
use crate::state::State;
use crate::sync::Locked;
use crate::timing::now_ns;

/// Carries out every decision the node has queued.
pub(crate) fn execute(st: &mut State) {
    let max = st.config.limits.max_control_bytes;
    while let Some(out) = st.node.poll_output() {
        match out {
            Output::Link { to, frame } => {
                let sent = st
                    .fed
                    .links
                    .get(&to)
                    .is_some_and(|l| l.outbox.send_link(&frame, max));
                if !sent {
                    st.node.unsent(to, &frame);
                }
            }
            Output::PullDone {
                conn,
                req,
                max_reply,
                outcome,
            } => reply_to_client(st, conn, req, max_reply, outcome),
            Output::Stored {
                asker,
                max_reply,
                pull,
            } => stored_for_link(st, asker, max_reply, pull),
            Output::Healed { daemons } => {
                // At once (the first of a second): the frame is in the
                // clients' outboxes before any event published on the far
                // side can come back here (that needs this daemon's
                // interest to reach there first), so a resume's seam holds
                // every such event behind the replay.
                st.fed.healed = Some(daemons);
                tell_healed(st);
            }
            Output::Release { to, events } => crate::reliable::release(st, to, events),
            Output::AdvertRefused { from, error } => {
                let Some(l) = st.fed.links.get(&from) else {
                    continue;
                };
                tracing::warn!(peer = %l.addr, "{error}");
                // The advert is refused; the link stays.
                let _ = l.outbox.send(
                    &Frame::Error {
                        req: 0,
                        code: ErrorCode::LimitReached,
                        message: error.to_string(),
                    },
                    max,
                );
            }
        }
    }
    // A link the topology no longer confirms gives back its reliable events.
    crate::reliable::topology_changed(st);
}

/// Another daemon's replay reads this daemon's store (a `Stored` pull that
/// came over a link): the store thread answers on the link it came from;
/// a refusal now (a full queue, no store) is answered at once.
fn stored_for_link(st: &mut State, asker: Asker, max_reply: u32, pull: tagwire_proto::Pull) {
    let Asker::Link { node, id } = asker else {
        return;
    };
    let Some(outbox) = st.fed.links.get(&node).map(|l| l.outbox.clone()) else {
        return;
    };
    let to = crate::store::AnswerTo::Link {
        outbox,
        id,
        max_control: st.config.limits.max_control_bytes,
    };
    if let Err((code, message)) = crate::durable::pull(st, pull, to, max_reply) {
        st.node
            .answer(asker, PullOutcome::Refused { code, message });
    }
}

/// Time passed: the node answers the pulls that waited too long, and the
/// held events whose start time came are routed now (so subscriptions made
/// meanwhile get them too). Returns when the node is next due.
pub(crate) fn handle_timeout(st: &mut State, now: u64) -> Option<u64> {
    let mut stage = crate::channel::Staging::default();
    for event in st.node.handle_timeout(now) {
        // Parsed and checked when it was published.
        let Ok(ev) = EventRef::parse(&event) else {
            continue;
        };
        if let Ok(deadline) = st.node.admit_due(&ev, || now) {
            // A `reject` queue's refusal has nobody to tell by now; the
            // queue counts it.
            let mut out = Outgoing::owned(event.clone());
            crate::dispatch::deliver(st, &mut stage, &mut out, &ev, deadline, None);
        }
        if stage.len() >= crate::channel::MAX_STAGED {
            let _ = stage.flush();
        }
    }
    let _ = stage.flush();
    execute(st);
    st.node.poll_timeout()
}

/// Gives a pull's `outcome` to client connection `conn`'s request `req`: a
/// `PullReply` or an `Error`. A reply over the client's frame limit (a peer
/// that ignored `max_reply`) becomes a `LimitReached` error.
fn reply_to_client(st: &State, conn: u64, req: u32, max_reply: u32, outcome: PullOutcome) {
    let Some(c) = st.connections.get(&conn) else {
        return;
    };
    let refusal = |code, message| Frame::Error { req, code, message };
    let frame = match outcome {
        PullOutcome::Reply(mut r) => {
            r.req = req;
            Frame::PullReply(r)
        }
        PullOutcome::Refused { code, message } => refusal(code, message),
    };
    let mut buf = BytesMut::new();
    let fits = frame.encode(&mut buf).is_ok() && buf.len() <= max_reply as usize;
    if !fits {
        buf.clear();
        let _ = refusal(
            ErrorCode::LimitReached,
            format!("the pull's answer is over this connection's frame limit of {max_reply} bytes"),
        )
        .encode(&mut buf);
    }
    let _ = c
        .outbox
        .send_encoded(&buf, st.config.limits.max_control_bytes);
}

/// The lane task that acts on the node's timers: it releases held events
/// when their start time comes and answers pulls that waited too long
/// ([`handle_timeout`]), and settles the obligations the durable store
/// committed ([`crate::reliable::store_settled`]). It sleeps until the node
/// is next due or until a new event is held or the store wakes it.
pub(crate) async fn timers(state: Arc<Locked<State>>) {
    let wake = state.borrow().deferred_wake.clone();
    loop {
        let next = {
            let mut st = state.borrow_mut();
            let settled = st.store.settled.take();
            if !settled.is_empty() {
                crate::reliable::store_settled(&mut st, settled);
            }
            handle_timeout(&mut st, now_ns())
        };
        match next {
            Some(due) => {
                let wait = Duration::from_nanos(due.saturating_sub(now_ns()));
                let _ = tokio::time::timeout(wait, wake.notified()).await;
            }
            None => wake.notified().await,
        }
    }
}

/// Daemons became reachable that were not: every client connection that
/// speaks protocol version 7 gets a `Healed` frame, at most once a second
/// (a flapping link does not make its clients replay at its pace), so that
/// its durable subscriptions resume what was published there meanwhile
/// (docs/reliability.md). Called when core reports it and on each
/// federation tick (a heal within a second of the last one waits for it). Link connections get none. Cost: one small frame
/// per client connection per heal.
pub(crate) fn tell_healed(st: &mut State) {
    let Some(daemons) = st.fed.healed else {
        return;
    };
    if st
        .fed
        .healed_told
        .is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1))
    {
        return;
    }
    st.fed.healed = None;
    st.fed.healed_told = Some(std::time::Instant::now());
    let links: std::collections::HashSet<u64> = st
        .fed
        .links
        .values()
        .flat_map(|l| std::iter::once(l.conn).chain(l.bands.values().map(|b| b.conn)))
        .collect();
    let max = st.config.limits.max_control_bytes;
    let frame = tagwire_proto::Frame::Healed { daemons };
    let mut told = 0usize;
    for (id, c) in &st.connections {
        if c.version >= tagwire_proto::HEALED_PROTOCOL_VERSION && !links.contains(id) {
            c.outbox.send(&frame, max);
            told += 1;
        }
    }
    tracing::info!("this daemon reaches {daemons} daemons, some again: told {told} clients");
}
