//! Pulls over links: a pull whose history is kept at another daemon
//! (`node:NAME`, or the publisher's daemon) travels there hop by hop as a
//! `PullRequest` and its answer retraces the path as a `PullAnswer`
//! (docs/protocol.md, "Links between daemons").
//!
//! Each daemon on the way keeps the request in a bounded table under a
//! fresh link-local id, with where it came from (a client's request or a
//! neighbour's id) and the link it went out on. The table holds at most
//! [`MAX_PENDING`] pulls: past it a pull is refused at once
//! (`LimitReached`). A pull not answered within [`PULL_TIMEOUT_NS`] is
//! answered `Timeout`; one whose outgoing link closes is answered
//! `UnknownNode` at once. An answer with an unknown id, or from a link
//! other than the one the request went out on, is dropped (a stale or
//! forged answer reaches nobody). Costs: a table insert or remove per hop;
//! the expiry sweep runs on the federation tick and is bounded by the table.
//!
//! The daemon the client is connected to checks the client's right to read
//! the tag; the daemons on the way and the one that answers trust their
//! links (only identities with the admin right may link).

use std::collections::HashMap;

use bytes::BytesMut;
use tagwire_core::federation::{NodeId, MAX_HOPS};
use tagwire_proto::{ErrorCode, Frame, LinkFrame, Pull, PullOutcome};

use crate::state::State;
use crate::timing::now_ns;

/// Most pulls in flight through one daemon.
pub(crate) const MAX_PENDING: usize = 1024;
/// How long a pull waits for its answer.
pub(crate) const PULL_TIMEOUT_NS: u64 = 5_000_000_000;
/// The `node` of a pull that asks for the publisher's daemon (a daemon
/// name may not start with `@`).
pub const AT_PUBLISHER: &str = "@publisher";
/// Most tags whose origin daemon is remembered; at the bound the table is
/// cleared and refilled as events arrive (tags are at most 1 KiB, so the
/// table holds at most about 4 MiB).
const MAX_ORIGINS: usize = 4096;

/// Who waits for a pull's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asker {
    /// A client connection's request `req`; its reply may be `max_reply`
    /// bytes at most.
    Client { conn: u64, req: u32, max_reply: u32 },
    /// A neighbour's `PullRequest` `id`.
    Link { node: NodeId, id: u32 },
}

#[derive(Debug)]
struct Pending {
    asker: Asker,
    /// The link the request went out on (only its answer is taken).
    via: NodeId,
    /// Whom it was sent to, for messages.
    target: NodeId,
    deadline: u64,
}

/// Pulls in flight through this daemon, and where each tag's events come
/// from (for pulls at the publisher's daemon).
#[derive(Debug, Default)]
pub(crate) struct PullRelay {
    pending: HashMap<u32, Pending>,
    next_id: u32,
    /// Tag → the daemon its last event that crossed a link came from.
    origins: HashMap<Box<str>, NodeId>,
    /// Pulls answered `Timeout` here.
    pub timed_out: u64,
}

impl PullRelay {
    /// Notes that an event of `tag` published at `origin` arrived.
    pub(crate) fn note_origin(&mut self, tag: &str, origin: NodeId) {
        if self.origins.get(tag) == Some(&origin) {
            return;
        }
        if self.origins.len() >= MAX_ORIGINS && !self.origins.contains_key(tag) {
            self.origins.clear();
        }
        self.origins.insert(tag.into(), origin);
    }

    /// Pulls in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// Where `pull` is to be answered: `None` here, or another daemon.
pub(crate) fn target(st: &State, pull: &Pull) -> Result<Option<NodeId>, (ErrorCode, String)> {
    let me = st.fed.me();
    let node = match pull.node.as_str() {
        "" => return Ok(None),
        AT_PUBLISHER => st.fed.relay.origins.get(pull.tag.as_str()).copied(),
        name => Some(st.fed.daemon_named(name, "history at node ")?),
    };
    Ok(node.filter(|n| *n != me))
}

/// Sends `pull` toward `target` for `asker`. An error is the refusal to
/// give the asker now.
pub(crate) fn ask(
    st: &mut State,
    asker: Asker,
    target: NodeId,
    hops: u8,
    max_reply: u32,
    pull: Pull,
) -> Result<(), (ErrorCode, String)> {
    let name = st.fed.topo.name_of(target).unwrap_or("?").to_owned();
    if hops >= MAX_HOPS {
        return Err((
            ErrorCode::UnknownNode,
            format!("the pull for daemon {name} passed {MAX_HOPS} links"),
        ));
    }
    let via = st
        .fed
        .topo
        .parent_toward(target)
        .filter(|n| st.fed.links.contains_key(n))
        .ok_or_else(|| {
            (
                ErrorCode::UnknownNode,
                format!("daemon {name} is not reachable from here now"),
            )
        })?;
    let relay = &mut st.fed.relay;
    if relay.pending.len() >= MAX_PENDING {
        return Err((
            ErrorCode::LimitReached,
            format!("{MAX_PENDING} pulls are already in flight through this daemon"),
        ));
    }
    let id = loop {
        relay.next_id = relay.next_id.wrapping_add(1);
        if !relay.pending.contains_key(&relay.next_id) {
            break relay.next_id;
        }
    };
    relay.pending.insert(
        id,
        Pending {
            asker,
            via,
            target,
            deadline: now_ns() + PULL_TIMEOUT_NS,
        },
    );
    let frame = LinkFrame::PullRequest {
        id,
        target,
        hops,
        max_reply,
        pull,
    };
    let max = st.config.limits.max_control_bytes;
    let sent = st
        .fed
        .links
        .get(&via)
        .is_some_and(|l| l.outbox.send_link(&frame, max));
    if !sent {
        st.fed.relay.pending.remove(&id);
        return Err((
            ErrorCode::LimitReached,
            format!("the link toward daemon {name} is not reading"),
        ));
    }
    Ok(())
}

/// A `PullRequest` from neighbour `from`: answered here from this daemon's
/// buffers, or relayed toward its target.
pub(crate) fn on_request(
    st: &mut State,
    from: NodeId,
    id: u32,
    target: NodeId,
    hops: u8,
    max_reply: u32,
    mut pull: Pull,
) {
    let outcome = if target == st.fed.me() {
        pull.node.clear();
        Some(match crate::history::answer(st, &pull, max_reply) {
            Ok(reply) => PullOutcome::Reply(reply),
            Err((code, message)) => PullOutcome::Refused { code, message },
        })
    } else {
        let asker = Asker::Link { node: from, id };
        ask(st, asker, target, hops.saturating_add(1), max_reply, pull)
            .err()
            .map(|(code, message)| PullOutcome::Refused { code, message })
    };
    if let Some(outcome) = outcome {
        reply(st, Asker::Link { node: from, id }, outcome);
    }
}

/// A `PullAnswer` from neighbour `from`: handed to whoever waits for it.
pub(crate) fn on_answer(st: &mut State, from: NodeId, id: u32, outcome: PullOutcome) {
    match st.fed.relay.pending.get(&id) {
        Some(p) if p.via == from => {}
        _ => {
            tracing::debug!("a PullAnswer {id} from {from:#x} nobody waits for: dropped");
            return;
        }
    }
    if let Some(p) = st.fed.relay.pending.remove(&id) {
        reply(st, p.asker, outcome);
    }
}

/// Answers the pulls that waited too long (`Timeout`), and those whose
/// link went away when `closed` names it (`UnknownNode`).
pub(crate) fn sweep(st: &mut State, closed: Option<NodeId>) {
    let now = now_ns();
    let due: Vec<u32> = st
        .fed
        .relay
        .pending
        .iter()
        .filter(|(_, p)| p.deadline <= now || Some(p.via) == closed)
        .map(|(id, _)| *id)
        .collect();
    for id in due {
        let Some(p) = st.fed.relay.pending.remove(&id) else {
            continue;
        };
        let name = st.fed.topo.name_of(p.target).unwrap_or("?").to_owned();
        let outcome = if Some(p.via) == closed {
            PullOutcome::Refused {
                code: ErrorCode::UnknownNode,
                message: format!("the link toward daemon {name} closed before it answered"),
            }
        } else {
            st.fed.relay.timed_out += 1;
            PullOutcome::Refused {
                code: ErrorCode::Timeout,
                message: format!(
                    "daemon {name} did not answer the pull within {} s",
                    PULL_TIMEOUT_NS / 1_000_000_000
                ),
            }
        };
        reply(st, p.asker, outcome);
    }
}

/// Gives `outcome` to `asker`: a client's `PullReply` or `Error`, or a
/// neighbour's `PullAnswer`. A reply over the client's frame limit (a peer
/// that ignored `max_reply`) becomes a `LimitReached` error.
pub(crate) fn reply(st: &mut State, asker: Asker, outcome: PullOutcome) {
    let max = st.config.limits.max_control_bytes;
    match asker {
        Asker::Link { node, id } => {
            if let Some(l) = st.fed.links.get(&node) {
                let _ = l
                    .outbox
                    .send_link(&LinkFrame::PullAnswer { id, outcome }, max);
            }
        }
        Asker::Client {
            conn,
            req,
            max_reply,
        } => {
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
            let _ = c.outbox.send_encoded(&buf, max);
        }
    }
}
