//! The descriptor state machine, sans-I/O: slot states, the stamp word
//! (sequence number = generation, plus state), descriptor validation, and the
//! two decisions every stream makes — may the producer reuse a slot, and what
//! does a consumer do with the slot under its cursor. Time comes in as
//! nanoseconds. [`Model`] runs a whole stream on plain memory with these
//! decisions; the shared-memory mapping (`shm`) applies the same decisions to
//! atomics, and the property tests check one against the other.

use std::collections::VecDeque;

/// A deadline that never passes: the packet stays valid until consumed or dropped.
pub const NO_DEADLINE: u64 = u64::MAX;

/// The state of one descriptor slot (DSI §4.2–4.3).
///
/// `Free → Writing → Published → (Consumed | Expired | Retracted) → Writing …`.
/// `Consumed` is never written to shared memory: each consumer's cursor says
/// what it consumed, and the producer derives `Consumed` when it reuses a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SlotState {
    /// Never used since the stream was created.
    Free = 0,
    /// Claimed by the producer (a loan); its data is being written. Never delivered.
    Writing = 1,
    /// Visible to consumers.
    Published = 2,
    /// Every consumer attached at reuse time had read it.
    Consumed = 3,
    /// Its validity deadline passed before every consumer read it.
    Expired = 4,
    /// The producer took it back (retract, drop-oldest or crash clean-up).
    Retracted = 5,
}

impl SlotState {
    /// Decodes a state written in shared memory; `None` for an unknown value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Free,
            1 => Self::Writing,
            2 => Self::Published,
            3 => Self::Consumed,
            4 => Self::Expired,
            5 => Self::Retracted,
            _ => return None,
        })
    }
}

/// What happens to a slot; [`transition`] says which state it leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotEvent {
    /// The producer claims the slot for a new packet (a loan).
    Claim,
    /// The producer makes the written packet visible.
    Publish,
    /// Every consumer has read it (derived at reuse).
    AllConsumed,
    /// Its deadline passed.
    Expire,
    /// The producer takes it back.
    Retract,
}

/// An event that is not allowed in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("slot event {event:?} is not allowed in state {state:?}")]
pub struct InvalidTransition {
    /// The state the slot was in.
    pub state: SlotState,
    /// The refused event.
    pub event: SlotEvent,
}

/// The slot state machine: the state after `event`, or why it is refused.
pub fn transition(state: SlotState, event: SlotEvent) -> Result<SlotState, InvalidTransition> {
    use SlotEvent as E;
    use SlotState as S;
    match (state, event) {
        // A Writing slot is only claimed again when its producer died mid-write.
        (S::Free | S::Consumed | S::Expired | S::Retracted | S::Writing, E::Claim) => {
            Ok(S::Writing)
        }
        (S::Writing, E::Publish) => Ok(S::Published),
        (S::Published, E::AllConsumed) => Ok(S::Consumed),
        (S::Published, E::Expire) => Ok(S::Expired),
        (S::Published | S::Writing, E::Retract) => Ok(S::Retracted),
        _ => Err(InvalidTransition { state, event }),
    }
}

/// The stamp word of a descriptor: the packet's sequence number (the slot's
/// generation: slot = seq mod slots) in the high 56 bits, the state in the low 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Sequence number of the packet the slot holds (or held).
    pub seq: u64,
    /// Its state.
    pub state: SlotState,
}

/// Largest sequence number a stamp can carry (2^56 - 1 packets per stream).
pub const MAX_SEQ: u64 = (1 << 56) - 1;

impl Stamp {
    /// Packs the stamp into the word stored in shared memory.
    pub fn pack(self) -> u64 {
        (self.seq << 8) | self.state as u64
    }
    /// Unpacks a stamp word; `None` if the state byte is unknown.
    pub fn unpack(word: u64) -> Option<Self> {
        Some(Self {
            seq: word >> 8,
            state: SlotState::from_u8((word & 0xff) as u8)?,
        })
    }
}

/// The sizes a descriptor is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Descriptors in the ring.
    pub slots: u32,
    /// Bytes per data chunk (the largest packet).
    pub chunk_bytes: u64,
    /// Chunks in the data area.
    pub chunks: u32,
}

/// A snapshot of one descriptor (as read from shared memory, untrusted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// The raw stamp word.
    pub stamp: u64,
    /// Offset of the packet in the data area.
    pub offset: u64,
    /// Length of the packet.
    pub len: u64,
    /// Virtual time: the packet's position in the stream (DSI §4.1).
    pub vtime: u64,
    /// Validity deadline (ns); the packet is valid while `now < deadline`.
    pub deadline: u64,
}

/// How a descriptor written by a peer is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// The state byte is none of [`SlotState`].
    UnknownState(u8),
    /// The sequence number does not belong to this slot, or runs backwards.
    WrongSlot {
        /// The sequence number found.
        seq: u64,
    },
    /// The offset is not the start of a chunk inside the data area.
    Offset(u64),
    /// The length exceeds a chunk.
    Length(u64),
    /// A published packet sits beyond the published head, or a state that
    /// cannot be under a published cursor.
    State(SlotState),
}

impl Corruption {
    /// The value a report names, and what it is.
    pub fn describe(self) -> (&'static str, u64) {
        match self {
            Self::UnknownState(s) => ("unknown slot state", s as u64),
            Self::WrongSlot { seq } => ("sequence number of another slot", seq),
            Self::Offset(o) => ("data offset outside the data area", o),
            Self::Length(l) => ("length over the chunk size", l),
            Self::State(s) => ("impossible state under the cursor", s as u64),
        }
    }
}

impl Geometry {
    /// The slot of sequence number `seq` (a mask when `slots` is a power of
    /// two: the hot path then does no division).
    #[inline]
    pub fn slot_of(&self, seq: u64) -> u64 {
        let n = self.slots as u64;
        if n.is_power_of_two() {
            seq & (n - 1)
        } else {
            seq % n
        }
    }

    /// Checks that a published descriptor points inside the data area; returns its chunk.
    #[inline]
    pub fn chunk_of(&self, d: &Descriptor) -> Result<u32, Corruption> {
        let cb = self.chunk_bytes;
        let (aligned, chunk) = if cb.is_power_of_two() {
            (d.offset & (cb - 1) == 0, d.offset >> cb.trailing_zeros())
        } else if cb == 0 {
            (false, 0)
        } else {
            (d.offset.is_multiple_of(cb), d.offset / cb)
        };
        if !aligned {
            return Err(Corruption::Offset(d.offset));
        }
        if chunk >= self.chunks as u64 {
            return Err(Corruption::Offset(d.offset));
        }
        if d.len > self.chunk_bytes {
            return Err(Corruption::Length(d.len));
        }
        Ok(chunk as u32)
    }
}

/// What the producer does when the ring is full of unconsumed, valid packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overload {
    /// Reclaim the oldest packet (DSI's default; counted as dropped).
    DropOldest,
    /// Wait until a consumer catches up (blocking) or report `Full`.
    Block,
}

/// May the producer reuse a slot for a new packet, and how is the old one accounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// The slot holds nothing that still counts (never used, retracted, expired, abandoned).
    Vacant,
    /// Every consumer read the old packet.
    Consumed,
    /// The old packet's deadline passed before a consumer read it.
    Expired,
    /// The old packet is dropped unread (drop-oldest).
    Dropped,
    /// The producer must wait (or report `Full`).
    Wait,
}

/// The producer's reuse decision for a slot holding `old`. `min_cursor` is the
/// lowest cursor of the attached consumers (`None`: no consumer).
pub fn reuse(
    old: Stamp,
    deadline: u64,
    min_cursor: Option<u64>,
    now: u64,
    overload: Overload,
) -> Reuse {
    match old.state {
        SlotState::Free
        | SlotState::Writing
        | SlotState::Consumed
        | SlotState::Expired
        | SlotState::Retracted => Reuse::Vacant,
        SlotState::Published => {
            if min_cursor.is_none_or(|m| m > old.seq) {
                Reuse::Consumed
            } else if now >= deadline {
                Reuse::Expired
            } else {
                match overload {
                    Overload::DropOldest => Reuse::Dropped,
                    Overload::Block => Reuse::Wait,
                }
            }
        }
    }
}

/// Why a consumer passed over a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The producer reused the slot before this consumer reached it.
    Lost,
    /// The packet's deadline had passed.
    Expired,
    /// The producer retracted it.
    Retracted,
    /// Its virtual time is before the consumer's spool-forward target.
    Spooled,
}

/// What a consumer does with the slot under its cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing published at the cursor yet.
    Empty,
    /// The producer lapped the consumer: jump the cursor to `to`, counting the gap as lost.
    Lagged {
        /// The oldest sequence number still in the ring.
        to: u64,
    },
    /// Pass over this packet.
    Skip(Skip),
    /// Deliver the packet in `chunk`.
    Deliver {
        /// The data chunk holding the packet.
        chunk: u32,
    },
    /// The descriptor is malformed: close the stream for this consumer.
    Corrupt(Corruption),
}

/// The consumer's decision for cursor `cursor`, given the published head and
/// a snapshot of descriptor `cursor mod slots`.
pub fn consumer_step(
    g: &Geometry,
    cursor: u64,
    head: u64,
    d: &Descriptor,
    now: u64,
    spool_to: u64,
) -> Step {
    if cursor >= head {
        return Step::Empty;
    }
    let slots = g.slots as u64;
    if head - cursor > slots {
        return Step::Lagged { to: head - slots };
    }
    let Some(stamp) = Stamp::unpack(d.stamp) else {
        return Step::Corrupt(Corruption::UnknownState((d.stamp & 0xff) as u8));
    };
    if g.slot_of(stamp.seq) != g.slot_of(cursor) || stamp.seq < cursor {
        // The head says `cursor` was published and stamps only grow.
        return Step::Corrupt(Corruption::WrongSlot { seq: stamp.seq });
    }
    if stamp.seq > cursor {
        return Step::Skip(Skip::Lost);
    }
    match stamp.state {
        SlotState::Published => {}
        SlotState::Retracted => return Step::Skip(Skip::Retracted),
        SlotState::Expired => return Step::Skip(Skip::Expired),
        other => return Step::Corrupt(Corruption::State(other)),
    }
    let chunk = match g.chunk_of(d) {
        Ok(c) => c,
        Err(c) => return Step::Corrupt(c),
    };
    if now >= d.deadline {
        Step::Skip(Skip::Expired)
    } else if d.vtime < spool_to {
        Step::Skip(Skip::Spooled)
    } else {
        Step::Deliver { chunk }
    }
}

/// Per-consumer accounting: every packet published while a consumer is
/// attached ends in exactly one of these (or is still ahead of its cursor).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerCounts {
    /// Packets handed out as samples.
    pub delivered: u64,
    /// Packets reused by the producer before this consumer reached them.
    pub lost: u64,
    /// Packets passed over because their deadline passed.
    pub expired: u64,
    /// Packets passed over because the producer retracted them.
    pub retracted: u64,
    /// Packets passed over because of a spool-forward request.
    pub spooled: u64,
}

impl ConsumerCounts {
    /// Records one skipped packet.
    pub fn skip(&mut self, why: Skip) {
        match why {
            Skip::Lost => self.lost += 1,
            Skip::Expired => self.expired += 1,
            Skip::Retracted => self.retracted += 1,
            Skip::Spooled => self.spooled += 1,
        }
    }
}

/// The producer's accounting of reused slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerCounts {
    /// Packets published.
    pub published: u64,
    /// Packets reclaimed unread by drop-oldest.
    pub dropped: u64,
    /// Packets reclaimed after their deadline.
    pub expired: u64,
    /// Packets retracted on request.
    pub retracted: u64,
}

/// Outcome of [`Model::next`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelNext {
    /// A packet: its sequence number, virtual time and payload tag.
    Sample {
        /// Sequence number.
        seq: u64,
        /// Virtual time.
        vtime: u64,
        /// What the test published (stands for the payload).
        payload: u64,
    },
    /// Nothing to read.
    Empty,
}

#[derive(Clone, Copy, Debug)]
struct ModelSlot {
    stamp: Stamp,
    deadline: u64,
    vtime: u64,
    payload: u64,
}

/// One consumer of the [`Model`].
#[derive(Clone, Debug, Default)]
pub struct ModelConsumer {
    /// Next sequence number to read.
    pub cursor: u64,
    /// Spool-forward target (virtual time).
    pub spool_to: u64,
    /// Sequence number of the sample it holds (cursor advances on release).
    pub holding: Option<u64>,
    /// Its accounting.
    pub counts: ConsumerCounts,
}

/// A whole stream on plain memory, single-threaded, driven by the same
/// decisions as the shared-memory stream: the reference the property tests use.
#[derive(Clone, Debug)]
pub struct Model {
    g: Geometry,
    overload: Overload,
    head: u64,
    ring: Vec<ModelSlot>,
    /// Consumers by entry index (`None`: detached).
    pub consumers: Vec<Option<ModelConsumer>>,
    /// The producer's accounting.
    pub counts: ProducerCounts,
    /// Every published (seq, payload), in order, for checking.
    pub history: VecDeque<(u64, u64)>,
}

impl Model {
    /// A model stream with `slots` descriptors and room for `consumers` consumers.
    pub fn new(slots: u32, consumers: usize, overload: Overload) -> Self {
        let free = ModelSlot {
            stamp: Stamp {
                seq: 0,
                state: SlotState::Free,
            },
            deadline: NO_DEADLINE,
            vtime: 0,
            payload: 0,
        };
        Self {
            g: Geometry {
                slots,
                chunk_bytes: 1,
                chunks: u32::MAX,
            },
            overload,
            head: 0,
            ring: vec![free; slots as usize],
            consumers: vec![None; consumers],
            counts: ProducerCounts::default(),
            history: VecDeque::new(),
        }
    }

    /// Sequence number of the next packet.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Attaches consumer entry `i`: it sees packets published from now on.
    pub fn attach(&mut self, i: usize) {
        self.consumers[i] = Some(ModelConsumer {
            cursor: self.head,
            ..Default::default()
        });
    }

    /// Detaches consumer entry `i`.
    pub fn detach(&mut self, i: usize) {
        self.consumers[i] = None;
    }

    fn min_cursor(&self) -> Option<u64> {
        self.consumers.iter().flatten().map(|c| c.cursor).min()
    }

    /// Publishes a packet; `Err(())` when the ring is full under `Block`.
    #[allow(clippy::result_unit_err)]
    pub fn publish(
        &mut self,
        payload: u64,
        vtime: u64,
        deadline: u64,
        now: u64,
    ) -> Result<u64, ()> {
        let s = self.head;
        let i = (s % self.g.slots as u64) as usize;
        let old = self.ring[i];
        match reuse(
            old.stamp,
            old.deadline,
            self.min_cursor(),
            now,
            self.overload,
        ) {
            Reuse::Wait => return Err(()),
            Reuse::Dropped => self.counts.dropped += 1,
            Reuse::Expired => self.counts.expired += 1,
            Reuse::Vacant | Reuse::Consumed => {}
        }
        self.ring[i] = ModelSlot {
            stamp: Stamp {
                seq: s,
                state: SlotState::Published,
            },
            deadline,
            vtime,
            payload,
        };
        self.head = s + 1;
        self.counts.published += 1;
        self.history.push_back((s, payload));
        Ok(s)
    }

    /// Retracts packet `seq` if it is still published; says whether it was.
    pub fn retract(&mut self, seq: u64) -> bool {
        let i = (seq % self.g.slots as u64) as usize;
        let slot = &mut self.ring[i];
        if slot.stamp.seq == seq && slot.stamp.state == SlotState::Published && seq < self.head {
            slot.stamp.state = SlotState::Retracted;
            self.counts.retracted += 1;
            true
        } else {
            false
        }
    }

    /// Marks every published packet whose deadline passed as expired; returns how many.
    pub fn reclaim_expired(&mut self, now: u64) -> u64 {
        let mut n = 0;
        for slot in &mut self.ring {
            if slot.stamp.state == SlotState::Published && now >= slot.deadline {
                slot.stamp.state = SlotState::Expired;
                n += 1;
            }
        }
        self.counts.expired += n;
        n
    }

    /// Consumer `i` asks to skip packets before virtual time `vtime`.
    pub fn spool(&mut self, i: usize, vtime: u64) {
        if let Some(c) = self.consumers[i].as_mut() {
            c.spool_to = vtime;
        }
    }

    /// Consumer `i` releases the sample it holds (marks it consumed).
    pub fn release(&mut self, i: usize) {
        if let Some(c) = self.consumers[i].as_mut() {
            if let Some(seq) = c.holding.take() {
                c.cursor = seq + 1;
            }
        }
    }

    /// Consumer `i` reads its next packet (and holds it until [`Model::release`]).
    pub fn next(&mut self, i: usize, now: u64) -> ModelNext {
        let g = self.g;
        let head = self.head;
        let ring = &self.ring;
        let Some(c) = self.consumers[i].as_mut() else {
            return ModelNext::Empty;
        };
        assert!(
            c.holding.is_none(),
            "model: one sample per consumer at a time"
        );
        for _ in 0..=2 * g.slots as u64 + 1 {
            let slot = ring[(c.cursor % g.slots as u64) as usize];
            let d = Descriptor {
                stamp: slot.stamp.pack(),
                offset: 0,
                len: 0,
                vtime: slot.vtime,
                deadline: slot.deadline,
            };
            match consumer_step(&g, c.cursor, head, &d, now, c.spool_to) {
                Step::Empty => return ModelNext::Empty,
                Step::Lagged { to } => {
                    c.counts.lost += to - c.cursor;
                    c.cursor = to;
                }
                Step::Skip(why) => {
                    c.counts.skip(why);
                    c.cursor += 1;
                }
                Step::Deliver { .. } => {
                    c.counts.delivered += 1;
                    c.holding = Some(c.cursor);
                    return ModelNext::Sample {
                        seq: c.cursor,
                        vtime: slot.vtime,
                        payload: slot.payload,
                    };
                }
                Step::Corrupt(x) => unreachable!("model writes no corrupt descriptor: {x:?}"),
            }
        }
        unreachable!("model: a consumer passes at most 2 rings per read")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stamp_round_trips_and_rejects_unknown_states() {
        let s = Stamp {
            seq: MAX_SEQ,
            state: SlotState::Retracted,
        };
        assert_eq!(Stamp::unpack(s.pack()), Some(s));
        assert_eq!(Stamp::unpack(0x17), None);
    }

    #[test]
    fn transitions_follow_the_dsi_life_cycle() {
        use SlotEvent as E;
        use SlotState as S;
        assert_eq!(transition(S::Free, E::Claim), Ok(S::Writing));
        assert_eq!(transition(S::Writing, E::Publish), Ok(S::Published));
        assert_eq!(transition(S::Published, E::Expire), Ok(S::Expired));
        assert!(transition(S::Free, E::Publish).is_err());
        assert!(transition(S::Published, E::Claim).is_err());
        assert!(transition(S::Expired, E::Publish).is_err());
    }

    #[test]
    fn descriptor_outside_the_data_area_is_corrupt() {
        let g = Geometry {
            slots: 4,
            chunk_bytes: 4096,
            chunks: 2,
        };
        let mut d = Descriptor {
            stamp: 0,
            offset: 8192,
            len: 1,
            vtime: 0,
            deadline: NO_DEADLINE,
        };
        assert_eq!(g.chunk_of(&d), Err(Corruption::Offset(8192)));
        d.offset = 4097;
        assert_eq!(g.chunk_of(&d), Err(Corruption::Offset(4097)));
        d.offset = 4096;
        d.len = 4097;
        assert_eq!(g.chunk_of(&d), Err(Corruption::Length(4097)));
        d.len = 4096;
        assert_eq!(g.chunk_of(&d), Ok(1));
    }

    /// One step of a random scenario.
    #[derive(Clone, Debug)]
    pub(crate) enum Op {
        Publish { vtime: u64, ttl: Option<u64> },
        Next(usize),
        Release(usize),
        Attach(usize),
        Detach(usize),
        Retract(u64),
        ReclaimExpired,
        Spool(usize, u64),
        Tick(u64),
    }

    pub(crate) fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..64, proptest::option::of(0u64..50)).prop_map(|(vtime, ttl)| Op::Publish { vtime, ttl }),
            4 => (0usize..3).prop_map(Op::Next),
            3 => (0usize..3).prop_map(Op::Release),
            1 => (0usize..3).prop_map(Op::Attach),
            1 => (0usize..3).prop_map(Op::Detach),
            1 => (0u64..8).prop_map(Op::Retract),
            1 => Just(Op::ReclaimExpired),
            1 => (0usize..3, 0u64..64).prop_map(|(c, v)| Op::Spool(c, v)),
            2 => (0u64..20).prop_map(Op::Tick),
        ]
    }

    proptest! {
        /// Every consumer gets packets in increasing sequence order, never an
        /// expired one, with the payload that was published under that number;
        /// and every packet published while it was attached is accounted once.
        #[test]
        fn model_delivers_in_order_valid_and_accounts_every_packet(
            slots in 1u32..6,
            block in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let overload = if block { Overload::Block } else { Overload::DropOldest };
            let mut m = Model::new(slots, 3, overload);
            let mut now = 0u64;
            let mut last_seq: [Option<u64>; 3] = [None; 3];
            let mut attached_at: [u64; 3] = [0; 3];
            let mut deadlines = std::collections::HashMap::new();
            for op in ops {
                match op {
                    Op::Publish { vtime, ttl } => {
                        let deadline = ttl.map_or(NO_DEADLINE, |t| now + t);
                        let payload = m.head() * 7 + 1;
                        if let Ok(s) = m.publish(payload, vtime, deadline, now) {
                            deadlines.insert(s, deadline);
                        } else {
                            prop_assert!(block, "only Block refuses a publish");
                        }
                    }
                    Op::Next(i) => {
                        if m.consumers[i].as_ref().is_some_and(|c| c.holding.is_none()) {
                            if let ModelNext::Sample { seq, payload, .. } = m.next(i, now) {
                                prop_assert!(last_seq[i].is_none_or(|l| seq > l));
                                prop_assert!(now < deadlines[&seq], "expired packet delivered");
                                prop_assert_eq!(payload, seq * 7 + 1);
                                last_seq[i] = Some(seq);
                            }
                        }
                    }
                    Op::Release(i) => m.release(i),
                    Op::Attach(i) => if m.consumers[i].is_none() {
                        m.attach(i);
                        attached_at[i] = m.head();
                        last_seq[i] = None;
                    },
                    Op::Detach(i) => m.detach(i),
                    Op::Retract(back) => { let h = m.head(); if h > back { m.retract(h - 1 - back); } }
                    Op::ReclaimExpired => { m.reclaim_expired(now); }
                    Op::Spool(i, v) => m.spool(i, v),
                    Op::Tick(d) => now += d,
                }
                if block {
                    prop_assert_eq!(m.counts.dropped, 0, "Block never drops");
                }
                for (i, c) in m.consumers.iter().enumerate() {
                    if let Some(c) = c {
                        let k = c.counts;
                        let accounted = k.delivered + k.lost + k.expired + k.retracted + k.spooled;
                        let held = c.holding.map_or(0, |_| 1);
                        // Packets behind the cursor (or held) since attach are accounted exactly once.
                        prop_assert_eq!(accounted, c.cursor + held - attached_at[i]);
                        prop_assert!(c.cursor <= m.head());
                    }
                }
            }
        }

        /// A slot's sequence number (its generation) only grows, and stays in its slot.
        #[test]
        fn generations_only_grow(slots in 1u32..6, n in 1u64..100) {
            let mut m = Model::new(slots, 1, Overload::DropOldest);
            let mut last = vec![None::<u64>; slots as usize];
            for k in 0..n {
                let s = m.publish(k, k, NO_DEADLINE, 0).expect("drop-oldest never refuses");
                let i = (s % slots as u64) as usize;
                prop_assert!(last[i].is_none_or(|l| s > l));
                last[i] = Some(s);
            }
        }
    }
}
