//! Pulls over links: a pull whose history is kept at another daemon
//! (`node:NAME`, or the publisher's daemon) travels there hop by hop as a
//! `PullRequest`, and its answer retraces the path as a `PullAnswer`
//! (docs/protocol.md, "Links between daemons").
//!
//! Each daemon on the way keeps the request in a bounded table under a
//! fresh link-local id, with who asked (a client's request or a
//! neighbour's id) and the link it went out on. Past
//! [`NodeLimits::max_pending_pulls`](super::NodeLimits) a pull is refused at
//! once (`LimitReached`); one not answered within `pull_timeout_ns` is
//! answered `Timeout`; one whose outgoing link closes is answered
//! `UnknownNode` at once. An answer with an unknown id, or from a link other
//! than the one the request went out on, is dropped (a stale or forged
//! answer reaches nobody). Costs: a table insert or remove per hop; expiry
//! is an ordered-set walk over the pulls due.

use std::collections::{BTreeSet, HashMap};

use tagwire_proto::{ErrorCode, LinkFrame, Pull, PullOutcome};

use crate::federation::{NodeId, Topology, MAX_HOPS};

use super::NodeLimits;

/// The `node` of a pull that asks for the publisher's daemon (a daemon
/// name may not start with `@`).
pub const AT_PUBLISHER: &str = "@publisher";

/// Who waits for a pull's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// A client connection's request `req`; its reply may be `max_reply`
    /// bytes at most.
    Client {
        /// The connection.
        conn: u64,
        /// Its request id.
        req: u32,
        /// The largest reply it takes.
        max_reply: u32,
    },
    /// A neighbour's `PullRequest` `id`.
    Link {
        /// The neighbour.
        node: NodeId,
        /// Its request id.
        id: u32,
    },
}

/// Why a pull cannot go on now; each becomes a refusal the asker gets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// `node:NAME` names no known daemon.
    #[error("history at node {name}: no daemon of this network is named so (known: {known})")]
    UnknownDaemon {
        /// The name asked for.
        name: String,
        /// The daemons known, comma-separated.
        known: String,
    },
    /// The pull crossed the hop limit.
    #[error("the pull for daemon {0} passed {MAX_HOPS} links")]
    TooManyHops(String),
    /// No live link leads toward the daemon.
    #[error("daemon {0} is not reachable from here now")]
    Unreachable(String),
    /// The table of pulls in flight is full.
    #[error("{0} pulls are already in flight through this daemon")]
    TooManyInFlight(usize),
    /// The link toward the daemon did not take the request.
    #[error("the link toward daemon {0} is not reading")]
    NotReading(String),
}

impl PullError {
    /// The error code a client gets for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            PullError::TooManyInFlight(_) | PullError::NotReading(_) => ErrorCode::LimitReached,
            _ => ErrorCode::UnknownNode,
        }
    }

    /// The refusal, as a pull's outcome.
    pub fn outcome(&self) -> PullOutcome {
        PullOutcome::Refused {
            code: self.code(),
            message: self.to_string(),
        }
    }
}

#[derive(Debug)]
struct Pending {
    asker: Asker,
    /// The link the request went out on (only its answer is taken).
    via: NodeId,
    /// The name of the daemon it was sent to, for the refusals: kept here
    /// because the topology may forget an unreachable daemon (prune) before
    /// the refusal is written.
    target: Box<str>,
    deadline: u64,
}

/// Pulls in flight through this node, and where each tag's events come
/// from (for pulls at the publisher's daemon).
#[derive(Debug)]
pub(super) struct PullRelay {
    pending: HashMap<u32, Pending>,
    /// (deadline, id) of every pending pull, for expiry in order.
    by_deadline: BTreeSet<(u64, u32)>,
    next_id: u32,
    /// Tag → the daemon its last event that crossed a link came from.
    origins: HashMap<Box<str>, NodeId>,
    max_pending: usize,
    timeout_ns: u64,
    max_origins: usize,
}

impl PullRelay {
    pub(super) fn new(limits: &NodeLimits) -> Self {
        PullRelay {
            pending: HashMap::new(),
            by_deadline: BTreeSet::new(),
            next_id: 0,
            origins: HashMap::new(),
            max_pending: limits.max_pending_pulls,
            timeout_ns: limits.pull_timeout_ns,
            max_origins: limits.max_origins,
        }
    }

    /// Notes that an event of `tag` published at `origin` arrived.
    pub(super) fn note_origin(&mut self, tag: &str, origin: NodeId) {
        if self.origins.get(tag) == Some(&origin) {
            return;
        }
        if self.origins.len() >= self.max_origins && !self.origins.contains_key(tag) {
            self.origins.clear();
        }
        self.origins.insert(tag.into(), origin);
    }

    pub(super) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    pub(super) fn next_deadline(&self) -> Option<u64> {
        self.by_deadline.first().map(|(d, _)| *d)
    }

    /// Where `pull` is to be answered: `None` here, or another daemon.
    pub(super) fn target(&self, topo: &Topology, pull: &Pull) -> Result<Option<NodeId>, PullError> {
        let node = match pull.node.as_str() {
            "" => return Ok(None),
            AT_PUBLISHER => self.origins.get(pull.tag.as_str()).copied(),
            name => Some(topo.node_named(name).ok_or_else(|| {
                let mut known: Vec<String> = topo.nodes().into_iter().map(|n| n.1).collect();
                known.sort();
                PullError::UnknownDaemon {
                    name: tagwire_proto::excerpt(name).to_string(),
                    known: known.join(", "),
                }
            })?),
        };
        Ok(node.filter(|n| *n != topo.me()))
    }

    /// Files a pull toward `target` and returns the link and the frame to
    /// send on it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &mut self,
        asker: Asker,
        target: NodeId,
        hops: u8,
        max_reply: u32,
        pull: Pull,
        now: u64,
        topo: &Topology,
        links: &BTreeSet<NodeId>,
    ) -> Result<(NodeId, LinkFrame), PullError> {
        // A relay may have forgotten the target (pruned when it became
        // unreachable): its id names it then.
        let name = || {
            topo.name_of(target)
                .map_or_else(|| format!("{target:#x}"), str::to_owned)
        };
        if hops >= MAX_HOPS {
            return Err(PullError::TooManyHops(name()));
        }
        let via = topo
            .parent_toward(target)
            .filter(|n| links.contains(n))
            .ok_or_else(|| PullError::Unreachable(name()))?;
        if self.pending.len() >= self.max_pending {
            return Err(PullError::TooManyInFlight(self.max_pending));
        }
        let id = loop {
            self.next_id = self.next_id.wrapping_add(1);
            if !self.pending.contains_key(&self.next_id) {
                break self.next_id;
            }
        };
        let deadline = now.saturating_add(self.timeout_ns);
        self.pending.insert(
            id,
            Pending {
                asker,
                via,
                target: name().into(),
                deadline,
            },
        );
        self.by_deadline.insert((deadline, id));
        let frame = LinkFrame::PullRequest {
            id,
            target,
            hops,
            max_reply,
            pull,
        };
        Ok((via, frame))
    }

    fn take(&mut self, id: u32) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        self.by_deadline.remove(&(p.deadline, id));
        Some(p)
    }

    /// A `PullAnswer` `id` from neighbour `from` (or the request could not
    /// be sent to it): who waits for it and the name of the daemon it was
    /// for, if the request went out on that link.
    pub(super) fn answered(&mut self, from: NodeId, id: u32) -> Option<(Asker, Box<str>)> {
        if self.pending.get(&id)?.via != from {
            return None;
        }
        self.take(id).map(|p| (p.asker, p.target))
    }

    /// The pulls that went out on the link to `peer`, which closed.
    pub(super) fn link_closed(&mut self, peer: NodeId) -> Vec<(Asker, PullOutcome)> {
        let ids: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.via == peer)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.take(id))
            .map(|p| {
                let outcome = PullOutcome::Refused {
                    code: ErrorCode::UnknownNode,
                    message: format!(
                        "the link toward daemon {} closed before it answered",
                        p.target
                    ),
                };
                (p.asker, outcome)
            })
            .collect()
    }

    /// The pulls whose deadline has passed at `now`.
    pub(super) fn expire(&mut self, now: u64) -> Vec<(Asker, PullOutcome)> {
        let mut out = Vec::new();
        while let Some(&(deadline, id)) = self.by_deadline.first() {
            if deadline > now {
                break;
            }
            let Some(p) = self.take(id) else {
                self.by_deadline.remove(&(deadline, id));
                continue;
            };
            let outcome = PullOutcome::Refused {
                code: ErrorCode::Timeout,
                message: format!(
                    "daemon {} did not answer the pull within {} s",
                    p.target,
                    self.timeout_ns / 1_000_000_000
                ),
            };
            out.push((p.asker, outcome));
        }
        out
    }
}
