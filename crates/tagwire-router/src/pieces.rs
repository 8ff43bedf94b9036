//! Events larger than a client connection's frame, published in pieces
//! (protocol version 5, `PublishPiece`; docs/reliability.md, "Pieces on
//! client connections"). The daemon puts the pieces together here, bounded,
//! and the connection routes the whole event as the `Publish` (or
//! `PublishReliable`) it stands for.
//!
//! A reassembly belongs to the publisher's **session** (its id from the
//! `Hello`; a connection without one owns its own), so that it outlives a
//! cut connection: the session, reconnected, sends the event again and its
//! first piece is answered with `PieceResume` (the bytes held from the
//! start). Bounds: `limits.max_pieced_event` per event,
//! `limits.max_pieced_per_connection` in progress per session (past it the
//! oldest is dropped), every byte charged to `limits.max_buffered_bytes`
//! when its event's first piece comes (refused past it: `LimitReached`, the
//! connection lives), and `limits.piece_timeout` without a piece (dropped).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tagwire_core::fragment::{BlobId, Piece, Progress, Reassembler, ReassemblyLimits};
use tagwire_proto::{ErrorCode, PieceOf};

use crate::budget::MemoryBudget;
use crate::config::Limits;

/// Who a reassembly belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// A session (its id, never all zero).
    Session([u8; tagwire_proto::SESSION_ID_LEN]),
    /// A connection without a session (its id).
    Conn(u64),
}

/// A reassembly's key within its owner: the publisher's name and the
/// event's id.
type Key = (Arc<str>, u64);

/// The bounds, from `[limits]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PieceLimits {
    max_event: u64,
    per_owner: usize,
    timeout_ns: u64,
}

impl PieceLimits {
    pub(crate) fn of(l: &Limits) -> Self {
        PieceLimits {
            max_event: l.max_pieced_event.min(tagwire_proto::MAX_PIECED_EVENT),
            per_owner: l.max_pieced_per_connection.max(1),
            timeout_ns: l.piece_timeout.as_nanos() as u64,
        }
    }
}

/// Counters (`tagwire list --json`, `pieces`).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct PieceCounters {
    /// Pieces taken.
    pub pieces: u64,
    /// Events put together and routed.
    pub completed: u64,
    /// Resends answered with `PieceResume`.
    pub resumed: u64,
    /// Pieces refused as bad (the connection was closed).
    pub refused: u64,
    /// Events refused for want of memory budget.
    pub over_budget: u64,
    /// Incomplete events dropped: at the per-session bound, or replaced.
    pub dropped: u64,
    /// Incomplete events dropped after `limits.piece_timeout` without a piece.
    pub timed_out: u64,
}

#[derive(Debug)]
struct OwnerPieces {
    reasm: Reassembler<Key>,
    /// When each reassembly last got a piece (ns, wall clock).
    touched: HashMap<Key, u64>,
    /// Bytes charged to the memory budget (the reassembler's held bytes).
    charged: u64,
    /// Events refused for want of budget, and when: their later pieces are
    /// ignored (for the timeout).
    refused: VecDeque<(Key, u64)>,
}

/// Most refused events remembered per owner (their later pieces ignored).
const REMEMBERED_REFUSED: usize = 16;

/// What a piece did, for the connection to act on.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Held; nothing to send.
    Partial,
    /// A resend of an event partly held: answer `PieceResume` with `have`.
    Resume {
        /// Bytes held from the start.
        have: u64,
    },
    /// The whole event, checked: route it.
    Complete(Bytes),
    /// A piece of an event completed a moment ago (a resend after a
    /// reconnect, or a late piece): not routed again.
    AlreadyComplete,
    /// Refused for want of memory budget (the connection lives): the
    /// message names the bound.
    OverBudget(String),
    /// A later piece of an event refused before: ignored.
    Ignored,
}

/// Every session's (and session-less connection's) reassemblies.
#[derive(Debug, Default)]
pub(crate) struct ClientPieces {
    owners: HashMap<Owner, OwnerPieces>,
    /// Counters.
    pub counters: PieceCounters,
}

impl ClientPieces {
    /// Takes one piece of event `of` from publisher `publisher` of `owner`.
    /// `Err`: a bad piece (over the size bound, past its end, a checksum
    /// that does not match once whole): close the connection with it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_piece(
        &mut self,
        memory: &MemoryBudget,
        limits: PieceLimits,
        owner: Owner,
        publisher: Arc<str>,
        of: PieceOf,
        data: Bytes,
        now: u64,
    ) -> Result<Outcome, (ErrorCode, String)> {
        self.expire(memory, limits, now);
        self.counters.pieces += 1;
        let o = self.owners.entry(owner).or_insert_with(|| OwnerPieces {
            reasm: Reassembler::new(ReassemblyLimits {
                max_payload: limits.max_event,
                max_blobs: limits.per_owner,
                max_bytes: limits.max_event.saturating_mul(limits.per_owner as u64),
            }),
            touched: HashMap::new(),
            charged: 0,
            refused: VecDeque::new(),
        });
        let key: Key = (publisher, of.id);
        if o.refused.iter().any(|(k, _)| *k == key) {
            return Ok(Outcome::Ignored);
        }
        let piece = Piece {
            blob: BlobId {
                id: of.id,
                total: of.total,
                checksum: of.checksum,
            },
            offset: of.offset,
            data,
        };
        let result = o.reasm.on_piece(key.clone(), &piece);
        // Charge (or give back) what the reassemblies hold now.
        let held = o.reasm.held_bytes();
        let mut over = None;
        if held > o.charged {
            if memory.try_reserve((held - o.charged) as usize) {
                o.charged = held;
            } else {
                over = Some(memory.room());
            }
        } else {
            memory.release((o.charged - held) as usize);
            o.charged = held;
        }
        if let Some(room) = over {
            o.reasm.forget(&key);
            o.touched.remove(&key);
            let held = o.reasm.held_bytes();
            if held < o.charged {
                memory.release((o.charged - held) as usize);
                o.charged = held;
            }
            if o.refused.len() >= REMEMBERED_REFUSED {
                o.refused.pop_front();
            }
            o.refused.push_back((key, now));
            memory.note_discard();
            self.counters.over_budget += 1;
            return Ok(Outcome::OverBudget(format!(
                "event of {} bytes in pieces refused: the memory budget has {room} bytes free \
                 (limits.max_buffered_bytes = {})",
                of.total,
                memory.max()
            )));
        }
        match result {
            Err(e) => {
                o.touched.remove(&key);
                self.counters.refused += 1;
                Err((ErrorCode::Malformed, format!("bad PublishPiece: {e}")))
            }
            Ok(a) => {
                for (k, _) in &a.dropped {
                    o.touched.remove(k);
                    self.counters.dropped += 1;
                }
                match a.progress {
                    Progress::Partial { have, resumed } => {
                        o.touched.insert(key, now);
                        if resumed {
                            self.counters.resumed += 1;
                            Ok(Outcome::Resume { have })
                        } else {
                            Ok(Outcome::Partial)
                        }
                    }
                    Progress::Complete(b) => {
                        o.touched.remove(&key);
                        self.counters.completed += 1;
                        Ok(Outcome::Complete(b))
                    }
                    Progress::AlreadyComplete => Ok(Outcome::AlreadyComplete),
                }
            }
        }
    }

    /// Drops the reassemblies that got no piece for the timeout, and the
    /// owners left with none.
    fn expire(&mut self, memory: &MemoryBudget, limits: PieceLimits, now: u64) {
        for o in self.owners.values_mut() {
            let stale: Vec<Key> = o
                .touched
                .iter()
                .filter(|(_, t)| now.saturating_sub(**t) >= limits.timeout_ns)
                .map(|(k, _)| k.clone())
                .collect();
            for k in stale {
                o.touched.remove(&k);
                if o.reasm.forget(&k).is_some() {
                    self.counters.timed_out += 1;
                }
            }
            let held = o.reasm.held_bytes();
            if held < o.charged {
                memory.release((o.charged - held) as usize);
                o.charged = held;
            }
            o.refused
                .retain(|(_, t)| now.saturating_sub(*t) < limits.timeout_ns);
        }
        self.owners
            .retain(|_, o| !o.reasm.is_empty() || !o.touched.is_empty() || !o.refused.is_empty());
    }

    /// A connection without a session ended: its reassemblies go (nobody
    /// can resume them).
    pub(crate) fn connection_closed(&mut self, memory: &MemoryBudget, conn: u64) {
        if let Some(o) = self.owners.remove(&Owner::Conn(conn)) {
            memory.release(o.charged as usize);
        }
    }

    /// Bytes held by incomplete reassemblies, all owners.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> u64 {
        self.owners.values().map(|o| o.charged).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> PieceLimits {
        PieceLimits {
            max_event: 1000,
            per_owner: 2,
            timeout_ns: 1_000,
        }
    }

    fn of(id: u64, blob: &[u8], offset: u64) -> PieceOf {
        PieceOf {
            id,
            total: blob.len() as u64,
            checksum: tagwire_core::fragment::checksum(blob),
            offset,
        }
    }

    /// `p.on_piece` under `limits()` for publisher `/p` of `who`: bytes
    /// `range` of event `id` (whole: `blob`) at `now`.
    fn piece(
        p: &mut ClientPieces,
        memory: &MemoryBudget,
        who: Owner,
        id: u64,
        blob: &[u8],
        range: std::ops::Range<usize>,
        now: u64,
    ) -> Result<Outcome, (ErrorCode, String)> {
        p.on_piece(
            memory,
            limits(),
            who,
            Arc::from("/p"),
            of(id, blob, range.start as u64),
            Bytes::copy_from_slice(&blob[range]),
            now,
        )
    }

    #[test]
    fn pieces_are_charged_to_the_memory_budget_and_released_when_whole() {
        let memory = MemoryBudget::new(10_000);
        let mut p = ClientPieces::default();
        let blob = vec![7u8; 600];
        let who = Owner::Conn(1);
        let r = piece(&mut p, &memory, who, 1, &blob, 0..300, 0).expect("a good piece");
        assert!(matches!(r, Outcome::Partial));
        assert_eq!(memory.used(), 600);
        let r = piece(&mut p, &memory, who, 1, &blob, 300..blob.len(), 1).expect("a good piece");
        assert!(matches!(r, Outcome::Complete(ref b) if b[..] == blob[..]));
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn an_event_over_the_budget_is_refused_and_its_later_pieces_ignored() {
        let memory = MemoryBudget::new(500);
        let mut p = ClientPieces::default();
        let blob = vec![1u8; 600];
        let who = Owner::Conn(1);
        let r = piece(&mut p, &memory, who, 1, &blob, 0..300, 0).expect("refused, not an error");
        assert!(
            matches!(r, Outcome::OverBudget(ref m) if m.contains("max_buffered_bytes")),
            "{r:?}"
        );
        assert_eq!(memory.used(), 0);
        let r = piece(&mut p, &memory, who, 1, &blob, 300..blob.len(), 1).expect("ignored");
        assert!(matches!(r, Outcome::Ignored));
    }

    #[test]
    fn an_oversized_or_overreaching_piece_is_an_error_and_a_stale_one_times_out() {
        let memory = MemoryBudget::new(100_000);
        let mut p = ClientPieces::default();
        let who = Owner::Session([9; 16]);
        let big = vec![0u8; 2000];
        let e = p
            .on_piece(
                &memory,
                limits(),
                who,
                Arc::from("/p"),
                of(1, &big, 0),
                Bytes::from_static(b"x"),
                0,
            )
            .expect_err("over max_pieced_event");
        assert!(e.1.contains("over the limit of 1000"), "{}", e.1);
        let blob = vec![3u8; 400];
        piece(&mut p, &memory, who, 2, &blob, 0..100, 10).expect("a good piece");
        assert_eq!(p.held_bytes(), 400);
        // A piece of another event, after the timeout: the stale one went.
        let other = vec![4u8; 200];
        piece(&mut p, &memory, who, 3, &other, 0..100, 5_000).expect("a good piece");
        assert_eq!(p.counters.timed_out, 1);
        assert_eq!(memory.used(), 200);
        // A resend of event 3 from its start: resume at 100.
        let r = piece(&mut p, &memory, who, 3, &other, 0..50, 5_001).expect("a resend");
        assert!(matches!(r, Outcome::Resume { have: 100 }), "{r:?}");
    }
}
