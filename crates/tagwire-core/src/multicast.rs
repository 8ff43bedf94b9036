//! IP multicast fan-out's sans-I/O parts (docs/transports.md, "Multicast"):
//! a [`Group`] is one `[[multicast]]` entry as one daemon sees it — which
//! tags go to it, the datagrams it sends (numbered, MAC'd, at most
//! `max_datagram` bytes), the members it has heard (whose links an event
//! sent to the group skips), each sender's sequence window (loss,
//! reordering, duplicates, stale epochs) and the dedupe window of event
//! identities that keeps a link copy and a group copy from both being
//! delivered. It reads no clock and no socket: times come in as arguments.
//!
//! ```
//! use tagwire_core::multicast::{Group, Received};
//! let key = tagwire_proto::datagram::group_key(b"token", "239.1.2.3:7800");
//! let tags = vec![tagwire_core::tags::Pattern::parse("/cam/**").unwrap()];
//! let mut a = Group::new(tags.clone(), key, 1, 100, 1400);
//! let mut b = Group::new(tags, key, 2, 200, 1400);
//! let mut d = bytes::BytesMut::new();
//! a.encode_event(1, 0, b"an encoded event", &mut d).unwrap();
//! assert!(matches!(b.on_datagram(&d, 0, 0), Received::Event { sender: 1, .. }));
//! ```

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::BytesMut;
use tagwire_proto::datagram::{
    encode_group, encode_member, Datagram, DatagramKind, GroupEvent, Report, GROUP_OVERHEAD,
};

use crate::datagram::{SeqWindow, Verdict};
use crate::federation::NodeId;
use crate::tags::Pattern;

/// Most `[[multicast]]` groups one daemon takes part in.
pub const MAX_GROUPS: usize = 16;
/// Most members remembered per group; one more is not recorded (its
/// events keep taking links) and is counted `refused`.
pub const MAX_MEMBERS: usize = 256;
/// Most senders whose sequence windows a group keeps; a datagram from one
/// more is dropped and counted `refused`.
pub const MAX_SENDERS: usize = 256;
/// A member heard within this long is live: links to it are skipped.
pub const MEMBER_LIVE_NS: u64 = 3_000_000_000;
/// How often a daemon says it is a member.
pub const MEMBER_EVERY_NS: u64 = 1_000_000_000;
/// A `Member` datagram sent longer ago than this (by its own clock against
/// ours), or this far in the future, is refused: a replay is good this long.
pub const MEMBER_MAX_SKEW_MS: u64 = 10_000;
/// Event identities the dedupe window remembers per group (oldest
/// forgotten first).
pub const DEDUPE_KEYS: usize = 4096;

/// One group's counters, as `tagwire list` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCounters {
    /// Event datagrams this daemon sent to the group.
    pub sent: u64,
    /// Events of the group's tags too large for one datagram (they took
    /// the links instead).
    pub too_large: u64,
    /// Event datagrams accepted from other senders.
    pub received: u64,
    /// Other senders' sequence numbers never received.
    pub lost: u64,
    /// Datagrams that arrived after a later one.
    pub reordered: u64,
    /// Datagrams received twice, and events delivered already (by a link or
    /// another sender), dropped.
    pub duplicate: u64,
    /// Datagrams dropped as unusable: do not parse, wrong MAC, too old,
    /// stale epoch, a `Member` outside the clock window.
    pub bad: u64,
    /// Members or senders not recorded because the group's table was full.
    pub refused: u64,
}

/// What a datagram that arrived on the group turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received<'a> {
    /// An event to deliver (its datagram was new and its MAC right).
    Event {
        /// The daemon that sent it to the group.
        sender: NodeId,
        /// Its origin, hops and encoded event.
        event: GroupEvent<'a>,
    },
    /// A member said it is one (recorded).
    Member {
        /// The member.
        node: NodeId,
    },
    /// This daemon's own datagram, looped back: ignored.
    Own,
    /// Dropped and counted (bad, duplicate or refused).
    Dropped,
}

/// An event too large for one group datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "event of {len} bytes does not fit in one multicast datagram ({max} bytes of event at most)"
)]
pub struct TooLarge {
    /// The event's length.
    pub len: usize,
    /// The largest event that fits.
    pub max: usize,
}

/// A bounded set of recent event identities: (origin daemon, publisher
/// key, publisher sequence number).
#[derive(Debug, Clone, Default)]
pub struct Dedupe {
    seen: HashSet<(u64, u64, u64)>,
    order: VecDeque<(u64, u64, u64)>,
    cap: usize,
}

impl Dedupe {
    /// A window of `cap` identities.
    pub fn new(cap: usize) -> Dedupe {
        Dedupe {
            seen: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Whether this is the first copy of `key` within the window (then it
    /// is remembered). A sequence number of 0 (none) is always a first copy.
    pub fn first_copy(&mut self, key: (u64, u64, u64)) -> bool {
        if key.2 == 0 {
            return true;
        }
        if !self.seen.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    /// Identities remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// One sender's epoch and sequence window, and what its earlier epochs
/// counted.
#[derive(Debug, Clone, Default)]
struct Sender {
    epoch: u64,
    window: SeqWindow,
    before: Report,
}

/// One `[[multicast]]` group as this daemon sees it.
#[derive(Debug, Clone)]
pub struct Group {
    tags: Vec<Pattern>,
    key: [u8; 32],
    me: NodeId,
    epoch: u64,
    next_seq: u32,
    max_datagram: usize,
    members: HashMap<NodeId, u64>,
    senders: HashMap<NodeId, Sender>,
    dedupe: Dedupe,
    counters: GroupCounters,
}

fn add(a: &mut Report, b: &Report) {
    a.received += b.received;
    a.lost += b.lost;
    a.reordered += b.reordered;
    a.duplicate += b.duplicate;
    a.bad += b.bad;
}

impl Group {
    /// The group of `tags`, MAC'd with `key`, as daemon `me` started at
    /// `epoch` (its start time, ns: a restart must not go back) sees it;
    /// its datagrams are at most `max_datagram` bytes.
    pub fn new(
        tags: Vec<Pattern>,
        key: [u8; 32],
        me: NodeId,
        epoch: u64,
        max_datagram: usize,
    ) -> Group {
        Group {
            tags,
            key,
            me,
            epoch,
            next_seq: 1,
            max_datagram,
            members: HashMap::new(),
            senders: HashMap::new(),
            dedupe: Dedupe::new(DEDUPE_KEYS),
            counters: GroupCounters::default(),
        }
    }

    /// Whether events of `tag` go to this group.
    pub fn covers(&self, tag: &str) -> bool {
        self.tags.iter().any(|p| p.matches(tag))
    }

    /// The patterns whose events go to the group.
    pub fn tags(&self) -> &[Pattern] {
        &self.tags
    }

    /// The largest encoded event one datagram carries.
    pub fn max_event(&self) -> usize {
        self.max_datagram.saturating_sub(GROUP_OVERHEAD)
    }

    /// Appends the datagram that carries `event` (published at `origin`,
    /// `hops` links ago) to the group, numbered and MAC'd; an event too
    /// large for one datagram is counted and refused (it takes the links).
    pub fn encode_event(
        &mut self,
        origin: NodeId,
        hops: u8,
        event: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), TooLarge> {
        if event.len() > self.max_event() {
            self.counters.too_large += 1;
            return Err(TooLarge {
                len: event.len(),
                max: self.max_event(),
            });
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        encode_group(
            &self.key, self.me, seq, self.epoch, origin, hops, event, out,
        );
        Ok(())
    }

    /// Counts an event datagram the socket took.
    pub fn note_sent(&mut self) {
        self.counters.sent += 1;
    }

    /// Appends this daemon's `Member` datagram, said at `now_ms` (wall
    /// clock, ms since the Unix epoch).
    pub fn encode_member(&self, now_ms: u64, out: &mut BytesMut) {
        encode_member(&self.key, self.me, self.epoch, now_ms, out);
    }

    /// Judges a datagram that arrived on the group at `now_ns` (monotonic,
    /// for membership) and `now_ms` (wall clock, for a `Member`'s age).
    pub fn on_datagram<'a>(&mut self, bytes: &'a [u8], now_ns: u64, now_ms: u64) -> Received<'a> {
        let Ok(d) = Datagram::parse(bytes) else {
            self.counters.bad += 1;
            return Received::Dropped;
        };
        let node = d.header.session;
        match d.header.kind {
            DatagramKind::Member => {
                let Ok(claim) = d.member_claim(&self.key, bytes) else {
                    self.counters.bad += 1;
                    return Received::Dropped;
                };
                if node == self.me {
                    return Received::Own;
                }
                if claim.sent_ms.abs_diff(now_ms) > MEMBER_MAX_SKEW_MS {
                    self.counters.bad += 1;
                    return Received::Dropped;
                }
                if !self.members.contains_key(&node) && self.members.len() >= MAX_MEMBERS {
                    self.expire(now_ns);
                    if self.members.len() >= MAX_MEMBERS {
                        self.counters.refused += 1;
                        return Received::Dropped;
                    }
                }
                self.members.insert(node, now_ns);
                Received::Member { node }
            }
            DatagramKind::Group => {
                let Ok(event) = d.group_event(&self.key, bytes) else {
                    self.counters.bad += 1;
                    return Received::Dropped;
                };
                if node == self.me {
                    return Received::Own;
                }
                if !self.senders.contains_key(&node) && self.senders.len() >= MAX_SENDERS {
                    self.counters.refused += 1;
                    return Received::Dropped;
                }
                let s = self.senders.entry(node).or_default();
                if s.window.highest() == 0 && s.epoch == 0 {
                    s.epoch = event.epoch;
                }
                if event.epoch < s.epoch {
                    // An older start of that sender: a replay.
                    s.window.note_bad();
                    return Received::Dropped;
                }
                if event.epoch > s.epoch {
                    // The sender restarted: a new sequence.
                    let r = s.window.report();
                    add(&mut s.before, &r);
                    s.window = SeqWindow::default();
                    s.epoch = event.epoch;
                }
                match s.window.on_seq(d.header.seq) {
                    Verdict::Accept => Received::Event {
                        sender: node,
                        event,
                    },
                    Verdict::Duplicate | Verdict::TooOld => Received::Dropped,
                }
            }
            _ => {
                self.counters.bad += 1;
                Received::Dropped
            }
        }
    }

    /// Counts a datagram dropped as unusable after its MAC was checked (its
    /// event does not decode).
    pub fn note_bad(&mut self) {
        self.counters.bad += 1;
    }

    /// Whether this is the first copy of the event (`origin`, publisher
    /// key, publisher `seq`) this daemon delivers for the group, from the
    /// group or a link; a second copy is counted `duplicate`.
    pub fn first_copy(&mut self, origin: NodeId, publisher: u64, seq: u64) -> bool {
        let first = self.dedupe.first_copy((origin, publisher, seq));
        if !first {
            self.counters.duplicate += 1;
        }
        first
    }

    /// Whether `node` said it is a member within [`MEMBER_LIVE_NS`] of
    /// `now_ns` (an event sent to the group skips its link).
    pub fn is_live_member(&self, node: NodeId, now_ns: u64) -> bool {
        self.members
            .get(&node)
            .is_some_and(|&t| now_ns.saturating_sub(t) < MEMBER_LIVE_NS)
    }

    /// The live members, smallest id first.
    pub fn live_members(&self, now_ns: u64) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .members
            .keys()
            .copied()
            .filter(|n| self.is_live_member(*n, now_ns))
            .collect();
        v.sort_unstable();
        v
    }

    /// Forgets members silent for longer than [`MEMBER_LIVE_NS`].
    pub fn expire(&mut self, now_ns: u64) {
        self.members
            .retain(|_, t| now_ns.saturating_sub(*t) < MEMBER_LIVE_NS);
    }

    /// The counters: this daemon's sends, and every sender's windows summed.
    pub fn counters(&self) -> GroupCounters {
        let mut r = Report::default();
        for s in self.senders.values() {
            add(&mut r, &s.before);
            add(&mut r, &s.window.report());
        }
        GroupCounters {
            received: r.received,
            lost: r.lost,
            reordered: r.reordered,
            duplicate: self.counters.duplicate + r.duplicate,
            bad: self.counters.bad + r.bad,
            ..self.counters
        }
    }
}

/// The groups of one daemon, first match wins.
#[derive(Debug, Clone, Default)]
pub struct Groups {
    groups: Vec<Group>,
}

impl Groups {
    /// The groups, at most [`MAX_GROUPS`] (the config checks it).
    pub fn new(groups: Vec<Group>) -> Groups {
        Groups { groups }
    }

    /// Whether there is none (the hot path's one test).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The index of the first group whose tags match `tag`.
    pub fn group_for(&self, tag: &str) -> Option<usize> {
        if self.groups.is_empty() {
            return None;
        }
        self.groups.iter().position(|g| g.covers(tag))
    }

    /// Group `i`.
    pub fn get(&self, i: usize) -> Option<&Group> {
        self.groups.get(i)
    }

    /// Group `i`, to change.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Group> {
        self.groups.get_mut(i)
    }

    /// Every group.
    pub fn iter(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter()
    }

    /// Every group, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Group> {
        self.groups.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tagwire_proto::datagram::group_key;

    fn group(me: NodeId, epoch: u64) -> Group {
        Group::new(
            vec![Pattern::parse("/cam/**").expect("pattern")],
            group_key(b"token", "239.1.2.3:7800"),
            me,
            epoch,
            1400,
        )
    }

    fn send(g: &mut Group, event: &[u8]) -> BytesMut {
        let mut d = BytesMut::new();
        g.encode_event(g.me, 0, event, &mut d).expect("fits");
        d
    }

    #[test]
    fn a_datagram_without_the_key_is_bad_and_never_an_event() {
        let mut a = group(1, 10);
        let mut b = group(2, 20);
        let mut forger = Group::new(
            a.tags.clone(),
            group_key(b"guess", "239.1.2.3:7800"),
            1,
            10,
            1400,
        );
        let forged = send(&mut forger, b"evil");
        assert_eq!(b.on_datagram(&forged, 0, 0), Received::Dropped);
        let mut m = BytesMut::new();
        forger.encode_member(0, &mut m);
        assert_eq!(b.on_datagram(&m, 0, 0), Received::Dropped);
        assert!(!b.is_live_member(1, 0), "a forged Member is not a member");
        assert_eq!(b.counters().bad, 2);
        let good = send(&mut a, b"ok");
        assert!(matches!(
            b.on_datagram(&good, 0, 0),
            Received::Event { sender: 1, .. }
        ));
        assert_eq!(b.on_datagram(&good, 0, 0), Received::Dropped, "replayed");
        assert_eq!(b.counters().duplicate, 1);
    }

    #[test]
    fn members_are_live_for_three_seconds_and_old_claims_are_refused() {
        let a = group(1, 10);
        let mut b = group(2, 20);
        let mut m = BytesMut::new();
        a.encode_member(50_000, &mut m);
        assert_eq!(
            b.on_datagram(&m, 1_000, 50_000 + MEMBER_MAX_SKEW_MS + 1),
            Received::Dropped
        );
        assert_eq!(
            b.on_datagram(&m, 1_000, 50_100),
            Received::Member { node: 1 }
        );
        assert!(b.is_live_member(1, 1_000 + MEMBER_LIVE_NS - 1));
        assert!(!b.is_live_member(1, 1_000 + MEMBER_LIVE_NS));
        let mut own = BytesMut::new();
        b.encode_member(50_000, &mut own);
        assert_eq!(b.on_datagram(&own, 0, 50_000), Received::Own);
    }

    #[test]
    fn a_restarted_sender_starts_a_new_sequence_and_its_old_epoch_is_refused() {
        let mut old = group(1, 10);
        let mut b = group(2, 20);
        let d1 = send(&mut old, b"a");
        let d2 = send(&mut old, b"b");
        assert!(matches!(b.on_datagram(&d1, 0, 0), Received::Event { .. }));
        assert!(matches!(b.on_datagram(&d2, 0, 0), Received::Event { .. }));
        let mut new = group(1, 11);
        let n1 = send(&mut new, b"c");
        assert!(matches!(b.on_datagram(&n1, 0, 0), Received::Event { .. }));
        assert_eq!(b.on_datagram(&d2, 0, 0), Received::Dropped, "old epoch");
        let c = b.counters();
        assert_eq!((c.received, c.lost, c.bad), (3, 0, 1));
    }

    #[test]
    fn an_event_too_large_for_a_datagram_is_refused_and_counted() {
        let mut a = group(1, 10);
        let mut d = BytesMut::new();
        let max = a.max_event();
        assert!(a.encode_event(1, 0, &vec![0; max], &mut d).is_ok());
        assert_eq!(d.len(), 1400);
        assert_eq!(
            a.encode_event(1, 0, &vec![0; max + 1], &mut d),
            Err(TooLarge { len: max + 1, max })
        );
        assert_eq!(a.counters().too_large, 1);
    }

    proptest! {
        /// Whatever subset of a sender's datagrams arrives, in whatever
        /// order: each is delivered at most once, and received + lost is
        /// the highest sequence number seen (nothing lost silently) as long
        /// as no arrival is more than the window late.
        #[test]
        fn loss_is_counted_and_nothing_is_delivered_twice(
            arrivals in prop::collection::vec((1u32..60, any::<bool>()), 0..200)
        ) {
            let mut a = group(1, 10);
            let sent: Vec<BytesMut> = (0..60).map(|i| send(&mut a, &[i as u8])).collect();
            let mut b = group(2, 20);
            let mut delivered = std::collections::HashSet::new();
            let mut highest = 0;
            for (seq, twice) in arrivals {
                for _ in 0..(1 + usize::from(twice)) {
                    let d = &sent[seq as usize - 1];
                    if let Received::Event { event, .. } = b.on_datagram(d, 0, 0) {
                        prop_assert!(delivered.insert(event.event.to_vec()), "delivered twice");
                        highest = highest.max(seq);
                    }
                }
            }
            let c = b.counters();
            prop_assert_eq!(c.received as usize, delivered.len());
            prop_assert_eq!(c.received + c.lost, u64::from(highest));
        }

        /// Any byte changed in a group datagram makes it unusable (never an
        /// event with other contents).
        #[test]
        fn any_changed_byte_is_refused(at in 0usize..60, flip in 1u8..=255) {
            let mut a = group(1, 10);
            let mut b = group(2, 20);
            let mut d = send(&mut a, b"/cam/left some payload bytes");
            let at = at % d.len();
            d[at] ^= flip;
            prop_assert_eq!(b.on_datagram(&d, 0, 0), Received::Dropped);
        }

        /// The dedupe window passes the first copy of each identity and
        /// drops every later one while it remembers it.
        #[test]
        fn dedupe_passes_each_identity_once(keys in prop::collection::vec((0u64..4, 0u64..4, 1u64..50), 0..300)) {
            let mut g = group(2, 20);
            let mut seen = std::collections::HashSet::new();
            let n = keys.len();
            for (o, p, s) in keys {
                prop_assert_eq!(g.first_copy(o, p, s), seen.insert((o, p, s)));
            }
            prop_assert_eq!(g.counters().duplicate as usize, n - seen.len());
        }
    }
}
