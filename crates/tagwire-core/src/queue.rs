//! Bounded per-subscriber queues: their order, discard and expiry policies.
//!
//! Every subscriber's queue has a bound (events and bytes). Which event leaves
//! next is the channel's [`OrderPolicy`]:
//! - [`Fifo`](OrderPolicy::Fifo) (default; TAO `FifoOrder`, also `any`):
//!   arrival order. Pick it unless events of one channel differ in urgency.
//! - [`Lifo`](OrderPolicy::Lifo): newest first, for "latest value" readers
//!   that would rather skip a backlog.
//! - [`Priority`](OrderPolicy::Priority): highest priority first, arrival
//!   order within a priority. Pick it when one channel carries both alarms
//!   and routine events.
//! - [`Deadline`](OrderPolicy::Deadline): earliest expiry first (events that
//!   never expire last), so that fewer events expire while they wait.
//!
//! What happens when an event arrives at a full queue is the channel's
//! [`DiscardPolicy`]:
//! - [`DropOldest`](DiscardPolicy::DropOldest) (default, TAO `fifo`): the
//!   oldest queued event makes room. Pick it for telemetry and video, where
//!   the newest sample matters most.
//! - [`DropNewest`](DiscardPolicy::DropNewest) (TAO `lifo`): the arriving event
//!   is dropped. Pick it when the first events of a burst matter most.
//! - [`Priority`](DiscardPolicy::Priority): the lowest-priority event goes,
//!   possibly the arriving one; among equals, the newest. Pick it when some
//!   events must survive a flood of others.
//! - [`Deadline`](DiscardPolicy::Deadline): the event with the earliest
//!   deadline goes (an already-expired one first), possibly the arriving
//!   one; among equals, the oldest.
//! - [`Reject`](DiscardPolicy::Reject) (TAO `reject_new`): the arriving event
//!   is refused and the publisher is told (`QueueFull`), so it can slow down.
//!
//! To order, discard or expire by priority or deadline, the queue reads them
//! from its items: a `BoundedQueue<T, ItemKeys>` holds items that implement
//! [`QueueItem`]; the plain `BoundedQueue<T>` ([`NoKeys`]) sees every item as
//! priority 0 that never expires.
//!
//! **Cost.** A fifo or lifo queue whose discard policy is `drop_oldest`,
//! `drop_newest` or `reject` is a ring buffer: O(1) per push and pop (plus
//! O(1) per event a push displaces). Any other combination keeps its events
//! in a slab with up to three B-tree indexes (arrival, priority, deadline):
//! O(log n) per push and pop, plus O(log n) per event displaced or expired.
//! Memory is bounded by the event bound: at most `bound` slots, i.e. about
//! `size_of::<T>() + 8` bytes per queued event for a ring buffer (its
//! capacity may round up to twice the events it once held) and about
//! `size_of::<T>() + 160` bytes per queued event for an indexed queue.
//!
//! Each queue counts what it accepted, handed out, dropped and let expire,
//! so that a slow consumer is visible in `tagwire list`; always
//! `pushed = popped + dropped + expired + len`.

use std::collections::{btree_map, vec_deque, BTreeMap, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

/// The deadline of an event that never expires.
pub const NEVER: u64 = u64::MAX;

/// What a full queue does with the next event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum DiscardPolicy {
    /// Drop the oldest queued event (TAO `fifo`).
    #[default]
    DropOldest,
    /// Drop the arriving event (TAO `lifo`).
    DropNewest,
    /// Refuse the arriving event and report it to the publisher (TAO `reject_new`).
    Reject,
    /// Drop the lowest-priority event, possibly the arriving one; among
    /// events of that priority, the newest (TAO `PriorityOrder`).
    Priority,
    /// Drop the event with the earliest deadline (an expired one first),
    /// possibly the arriving one; among equal deadlines, the oldest (TAO
    /// `DeadlineOrder`).
    Deadline,
}

impl DiscardPolicy {
    /// The canonical name (`drop_oldest`, `drop_newest`, `reject`, `priority`,
    /// `deadline`).
    pub fn as_str(self) -> &'static str {
        match self {
            DiscardPolicy::DropOldest => "drop_oldest",
            DiscardPolicy::DropNewest => "drop_newest",
            DiscardPolicy::Reject => "reject",
            DiscardPolicy::Priority => "priority",
            DiscardPolicy::Deadline => "deadline",
        }
    }

    /// Which index finds the victim, and from which end; `None` when the
    /// arriving event is the one refused.
    fn victim(self) -> Option<(KeyKind, End)> {
        match self {
            DiscardPolicy::DropOldest => Some((KeyKind::Arrival, End::First)),
            DiscardPolicy::Priority => Some((KeyKind::Priority, End::Last)),
            DiscardPolicy::Deadline => Some((KeyKind::Deadline, End::First)),
            DiscardPolicy::DropNewest | DiscardPolicy::Reject => None,
        }
    }
}

impl fmt::Display for DiscardPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown discard policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown discard policy {0:?} (expected drop_oldest|fifo, drop_newest|lifo, priority, deadline or reject|reject_new)")]
pub struct UnknownPolicy(pub String);

impl FromStr for DiscardPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop_oldest" | "fifo" => Ok(DiscardPolicy::DropOldest),
            "drop_newest" | "lifo" => Ok(DiscardPolicy::DropNewest),
            "reject" | "reject_new" => Ok(DiscardPolicy::Reject),
            "priority" => Ok(DiscardPolicy::Priority),
            "deadline" => Ok(DiscardPolicy::Deadline),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// Which queued event a queue hands out next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum OrderPolicy {
    /// Arrival order (TAO `FifoOrder`; `any` is an alias).
    #[default]
    Fifo,
    /// Newest first (TAO `LifoOrder`).
    Lifo,
    /// Highest priority first, arrival order within a priority (TAO
    /// `PriorityOrder`).
    Priority,
    /// Earliest deadline first, arrival order among equal deadlines; events
    /// that never expire come last (TAO `DeadlineOrder`).
    Deadline,
}

impl OrderPolicy {
    /// The canonical name (`fifo`, `lifo`, `priority`, `deadline`).
    pub fn as_str(self) -> &'static str {
        match self {
            OrderPolicy::Fifo => "fifo",
            OrderPolicy::Lifo => "lifo",
            OrderPolicy::Priority => "priority",
            OrderPolicy::Deadline => "deadline",
        }
    }

    /// Which index gives the next event, and from which end.
    fn next(self) -> (KeyKind, End) {
        match self {
            OrderPolicy::Fifo => (KeyKind::Arrival, End::First),
            OrderPolicy::Lifo => (KeyKind::Arrival, End::Last),
            OrderPolicy::Priority => (KeyKind::Priority, End::First),
            OrderPolicy::Deadline => (KeyKind::Deadline, End::First),
        }
    }
}

impl fmt::Display for OrderPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown order policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown order policy {0:?} (expected fifo|any, lifo, priority or deadline)")]
pub struct UnknownOrder(pub String);

impl FromStr for OrderPolicy {
    type Err = UnknownOrder;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fifo" | "any" => Ok(OrderPolicy::Fifo),
            "lifo" => Ok(OrderPolicy::Lifo),
            "priority" => Ok(OrderPolicy::Priority),
            "deadline" => Ok(OrderPolicy::Deadline),
            other => Err(UnknownOrder(other.to_owned())),
        }
    }
}

/// An item that carries its own priority and deadline, for queues that
/// order, discard or expire by them (`BoundedQueue<T, ItemKeys>`).
///
/// Both must stay the same while the item is queued.
pub trait QueueItem {
    /// Priority, 0 (lowest) to 255 (highest).
    fn priority(&self) -> u8;
    /// When it expires, ns (since the Unix epoch, or any clock the caller
    /// uses consistently); [`NEVER`] if it does not. It has expired at `now`
    /// when `now > deadline`.
    fn deadline(&self) -> u64;
}

/// How a queue reads an item's priority and deadline: [`NoKeys`] or
/// [`ItemKeys`].
pub trait Keys<T> {
    /// The item's priority, 0 (lowest) to 255 (highest).
    fn priority(item: &T) -> u8;
    /// The item's deadline ([`NEVER`] if it does not expire).
    fn deadline(item: &T) -> u64;
}

/// Items without keys: every item has priority 0 and never expires, so
/// priority and deadline policies fall back to arrival order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoKeys;

impl<T> Keys<T> for NoKeys {
    fn priority(_: &T) -> u8 {
        0
    }
    fn deadline(_: &T) -> u64 {
        NEVER
    }
}

/// Keys read from the item itself through [`QueueItem`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemKeys;

impl<T: QueueItem> Keys<T> for ItemKeys {
    fn priority(item: &T) -> u8 {
        item.priority()
    }
    fn deadline(item: &T) -> u64 {
        item.deadline()
    }
}

/// The result of [`BoundedQueue::push`]. What was not kept is handed back.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Pushed<T> {
    /// Queued; `dropped` queued events were discarded to make room
    /// (`DropOldest`, `Priority`, `Deadline`; 0 when there was room).
    Queued {
        /// How many queued events were dropped.
        dropped: usize,
    },
    /// Not queued: the queue was full and the policy dropped the arriving
    /// event (`DropNewest`, or `Priority`/`Deadline` found it the one to
    /// drop), or the event alone is larger than the byte bound (any policy).
    DroppedNewest(T),
    /// Not queued: the queue was full and the policy is `Reject`.
    Rejected(T),
}

/// What a queue has done with the events offered to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Events offered to `push` (queued or not).
    pub pushed: u64,
    /// Events handed out by `pop` or `pop_live`.
    pub popped: u64,
    /// Events dropped or rejected by the discard policy or a byte bound.
    pub dropped: u64,
    /// Events dropped because their deadline passed while queued.
    pub expired: u64,
}

/// An index key: (primary, tie-break). Every key ends in a unique sequence
/// number, so keys of different events never collide.
type Key = (u64, u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    /// (seq, 0): oldest first.
    Arrival,
    /// (255 - priority, seq): highest priority first, oldest first among equals.
    Priority,
    /// (deadline, seq): earliest deadline first, oldest first among equals.
    Deadline,
}

impl KeyKind {
    const ALL: [KeyKind; 3] = [KeyKind::Arrival, KeyKind::Priority, KeyKind::Deadline];

    fn key(self, seq: u64, priority: u8, deadline: u64) -> Key {
        match self {
            KeyKind::Arrival => (seq, 0),
            KeyKind::Priority => (u64::from(u8::MAX - priority), seq),
            KeyKind::Deadline => (deadline, seq),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    First,
    Last,
}

#[derive(Debug, Clone)]
struct Slot<T> {
    item: T,
    size: usize,
    seq: u64,
    priority: u8,
    deadline: u64,
}

impl<T> Slot<T> {
    fn key(&self, kind: KeyKind) -> Key {
        kind.key(self.seq, self.priority, self.deadline)
    }
}

/// Events in a slab, found through B-tree indexes (one per key kind the
/// policies need; the deadline index always, for expiry).
#[derive(Debug, Clone)]
struct Indexed<T> {
    slots: Vec<Option<Slot<T>>>,
    free: Vec<u32>,
    next_seq: u64,
    /// Indexed by `KeyKind as usize`.
    indexes: [Option<BTreeMap<Key, u32>>; 3],
}

impl<T> Indexed<T> {
    fn new(order: OrderPolicy, discard: DiscardPolicy) -> Self {
        let mut indexes = [None, None, None];
        let wanted = [Some(order.next().0), discard.victim().map(|v| v.0)];
        for kind in KeyKind::ALL {
            if kind == KeyKind::Deadline || wanted.contains(&Some(kind)) {
                indexes[kind as usize] = Some(BTreeMap::new());
            }
        }
        Indexed {
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            indexes,
        }
    }

    fn index(&self, kind: KeyKind) -> &BTreeMap<Key, u32> {
        self.indexes[kind as usize]
            .as_ref()
            .expect("Indexed::new made an index for every kind its policies use")
    }

    fn len(&self) -> usize {
        self.index(KeyKind::Deadline).len()
    }

    fn slot(&self, at: u32) -> &Slot<T> {
        self.slots[at as usize]
            .as_ref()
            .expect("every index entry points at an occupied slot")
    }

    /// The slot at one end of an index.
    fn end(&self, kind: KeyKind, end: End) -> Option<u32> {
        let index = self.index(kind);
        let entry = match end {
            End::First => index.first_key_value(),
            End::Last => index.last_key_value(),
        };
        entry.map(|(_, &at)| at)
    }

    fn insert(&mut self, item: T, size: usize, priority: u8, deadline: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = Slot {
            item,
            size,
            seq,
            priority,
            deadline,
        };
        let at = match self.free.pop() {
            Some(at) => at,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).expect("a queue holds fewer than 2^32 events")
            }
        };
        for kind in KeyKind::ALL {
            if let Some(index) = &mut self.indexes[kind as usize] {
                index.insert(slot.key(kind), at);
            }
        }
        self.slots[at as usize] = Some(slot);
    }

    fn remove(&mut self, at: u32) -> Slot<T> {
        let slot = self.slots[at as usize]
            .take()
            .expect("every index entry points at an occupied slot");
        for kind in KeyKind::ALL {
            if let Some(index) = &mut self.indexes[kind as usize] {
                index.remove(&slot.key(kind));
            }
        }
        self.free.push(at);
        slot
    }

    /// How many events, taken from one end of the victim index, must go for
    /// an event of `size` bytes and key `arriving` to fit; `None` if the
    /// arriving event should go instead (a victim is not worse than it).
    fn plan(&self, (kind, end): (KeyKind, End), arriving: Key, room: Room) -> Option<usize> {
        let index = self.index(kind);
        match end {
            End::First => self.count_victims(index.iter(), |k| k < arriving, room),
            End::Last => self.count_victims(index.iter().rev(), |k| k > arriving, room),
        }
    }

    fn count_victims<'a>(
        &self,
        mut victims: impl Iterator<Item = (&'a Key, &'a u32)>,
        worse: impl Fn(Key) -> bool,
        room: Room,
    ) -> Option<usize> {
        let (mut n, mut freed) = (0, 0);
        while !room.fits(room.len - n, room.bytes - freed) {
            let (&key, &at) = victims.next()?;
            if !worse(key) {
                return None;
            }
            n += 1;
            freed += self.slot(at).size;
        }
        Some(n)
    }
}

/// What a push needs to know to decide whether an event fits.
#[derive(Clone, Copy)]
struct Room {
    len: usize,
    bytes: usize,
    size: usize,
    bound: usize,
    cap: usize,
}

impl Room {
    fn fits(&self, len: usize, bytes: usize) -> bool {
        len < self.bound && bytes.saturating_add(self.size) <= self.cap
    }
}

#[derive(Debug, Clone)]
enum Store<T> {
    /// Fifo/lifo order with drop_oldest, drop_newest or reject: a ring.
    /// `min_deadline` is at or before the earliest deadline queued.
    Ring {
        items: VecDeque<(T, usize)>,
        min_deadline: u64,
    },
    Indexed(Indexed<T>),
}

/// A queue bounded both in events and in bytes, with an order policy, a
/// discard policy and expiry; counts what it discards and lets expire.
///
/// `K` says where priorities and deadlines come from: [`NoKeys`] (the
/// default: none, as for `BoundedQueue<T>`) or [`ItemKeys`] (the items, which
/// implement [`QueueItem`]).
#[derive(Debug, Clone)]
pub struct BoundedQueue<T, K = NoKeys> {
    store: Store<T>,
    bound: usize,
    max_bytes: usize,
    bytes: usize,
    order: OrderPolicy,
    policy: DiscardPolicy,
    counts: QueueCounts,
    keys: PhantomData<fn() -> K>,
}

impl<T> BoundedQueue<T> {
    /// A FIFO queue holding at most `bound` items (at least 1), with no byte
    /// bound.
    pub fn new(bound: usize, policy: DiscardPolicy) -> Self {
        Self::with_byte_limit(bound, usize::MAX, policy)
    }

    /// A FIFO queue holding at most `bound` items (at least 1) and
    /// `max_bytes` bytes, as counted by the sizes given to
    /// [`push`](Self::push).
    pub fn with_byte_limit(bound: usize, max_bytes: usize, policy: DiscardPolicy) -> Self {
        Self::with_policies(bound, max_bytes, OrderPolicy::Fifo, policy)
    }
}

impl<T, K: Keys<T>> BoundedQueue<T, K> {
    /// A queue holding at most `bound` items (at least 1, at most 2^32 - 1)
    /// and `max_bytes` bytes, handing items out in `order` and discarding by
    /// `policy` when full. See the [module doc](self) for the cost of each
    /// combination.
    pub fn with_policies(
        bound: usize,
        max_bytes: usize,
        order: OrderPolicy,
        policy: DiscardPolicy,
    ) -> Self {
        let bound = bound.clamp(1, u32::MAX as usize);
        let ring = matches!(order, OrderPolicy::Fifo | OrderPolicy::Lifo)
            && matches!(
                policy,
                DiscardPolicy::DropOldest | DiscardPolicy::DropNewest | DiscardPolicy::Reject
            );
        // No slots up front: a subscription that never queues costs none
        // (64 preallocated slots were KBs per subscription, hundreds of MB
        // for 65,536 idle ones); storage grows on demand up to `bound`.
        let store = if ring {
            Store::Ring {
                items: VecDeque::new(),
                min_deadline: NEVER,
            }
        } else {
            Store::Indexed(Indexed::new(order, policy))
        };
        BoundedQueue {
            store,
            bound,
            max_bytes,
            bytes: 0,
            order,
            policy,
            counts: QueueCounts::default(),
            keys: PhantomData,
        }
    }

    /// Offers `item` of `size` bytes; at a bound, applies the discard policy.
    pub fn push(&mut self, item: T, size: usize) -> Pushed<T> {
        self.push_within(item, size, usize::MAX)
    }

    /// Like [`push`](Self::push), but the queue may grow by at most `room`
    /// bytes beyond what it holds now (a share of a wider memory budget): its
    /// byte bound for this push is `min(max_bytes, bytes() + room)`. At that
    /// bound the discard policy applies as at the queue's own bound, so a
    /// `DropOldest` queue makes room by dropping its own oldest events, and
    /// an event that cannot fit even in an emptied queue is dropped (and
    /// counted) whatever the policy.
    ///
    /// `Priority` and `Deadline` decide before they drop anything: they drop
    /// queued events only if every one of them ranks below the arriving
    /// event, and otherwise drop the arriving event alone.
    pub fn push_within(&mut self, item: T, size: usize, room: usize) -> Pushed<T> {
        self.counts.pushed += 1;
        let cap = self.max_bytes.min(self.bytes.saturating_add(room));
        if size > cap {
            self.counts.dropped += 1;
            return Pushed::DroppedNewest(item);
        }
        let room = Room {
            len: self.len(),
            bytes: self.bytes,
            size,
            bound: self.bound,
            cap,
        };
        if !room.fits(room.len, room.bytes) {
            match self.policy {
                DiscardPolicy::DropNewest => {
                    self.counts.dropped += 1;
                    return Pushed::DroppedNewest(item);
                }
                DiscardPolicy::Reject => {
                    self.counts.dropped += 1;
                    return Pushed::Rejected(item);
                }
                DiscardPolicy::DropOldest | DiscardPolicy::Priority | DiscardPolicy::Deadline => {}
            }
        }
        let (priority, deadline) = (K::priority(&item), K::deadline(&item));
        let dropped = match &mut self.store {
            Store::Ring {
                items,
                min_deadline,
            } => {
                // Only DropOldest gets here with a full ring. size <= cap, so
                // emptying the queue always makes room.
                let mut dropped = 0;
                while !room.fits(items.len(), self.bytes) {
                    let Some((_, old)) = items.pop_front() else {
                        break;
                    };
                    self.bytes -= old;
                    dropped += 1;
                }
                if items.is_empty() {
                    *min_deadline = NEVER;
                }
                *min_deadline = (*min_deadline).min(deadline);
                items.push_back((item, size));
                dropped
            }
            Store::Indexed(ix) => {
                let mut dropped = 0;
                if !room.fits(room.len, room.bytes) {
                    let victim = self.policy.victim().expect(
                        "a full queue whose policy refuses the arriving event returned above",
                    );
                    let arriving = victim.0.key(ix.next_seq, priority, deadline);
                    let Some(n) = ix.plan(victim, arriving, room) else {
                        self.counts.dropped += 1;
                        return Pushed::DroppedNewest(item);
                    };
                    for _ in 0..n {
                        let at = ix
                            .end(victim.0, victim.1)
                            .expect("plan counted only queued events");
                        self.bytes -= ix.remove(at).size;
                    }
                    dropped = n;
                }
                ix.insert(item, size, priority, deadline);
                dropped
            }
        };
        self.counts.dropped += dropped as u64;
        self.bytes += size;
        Pushed::Queued { dropped }
    }

    /// Changes the bound and the policies at run time, keeping what is
    /// queued: the items move to the new order (in the old order of
    /// hand-out), and if the new bound is smaller the new discard policy
    /// makes room, counted as drops (a `reject` queue drops the newest).
    /// The counters carry on. Returns how many items were dropped.
    ///
    /// Cost: O(n log n) for n queued items (at most the old bound); an
    /// admin change, never a per-event step.
    pub fn reconfigure(
        &mut self,
        bound: usize,
        order: OrderPolicy,
        policy: DiscardPolicy,
    ) -> usize {
        let mut next = Self::with_policies(bound, self.max_bytes, order, policy);
        let counts = self.counts;
        let mut dropped = 0;
        while let Some((item, size)) = self.take_next_sized() {
            match next.push(item, size) {
                Pushed::Queued { dropped: d } => dropped += d,
                Pushed::DroppedNewest(_) | Pushed::Rejected(_) => dropped += 1,
            }
        }
        next.counts = counts;
        next.counts.dropped += dropped as u64;
        *self = next;
        dropped
    }

    /// Takes the next item by the order policy (the oldest, for `fifo`),
    /// whether or not it has expired.
    pub fn pop(&mut self) -> Option<T> {
        let item = self.take_next()?;
        self.counts.popped += 1;
        Some(item)
    }

    /// Takes the next item by the order policy that has not expired at `now`
    /// (`now > deadline`); expired items met on the way are dropped and
    /// counted in [`expired`](Self::expired).
    pub fn pop_live(&mut self, now: u64) -> Option<T> {
        loop {
            let item = self.take_next()?;
            if now > K::deadline(&item) {
                self.counts.expired += 1;
                continue;
            }
            self.counts.popped += 1;
            return Some(item);
        }
    }

    fn take_next(&mut self) -> Option<T> {
        self.take_next_sized().map(|(item, _)| item)
    }

    fn take_next_sized(&mut self) -> Option<(T, usize)> {
        let (item, size) = match &mut self.store {
            Store::Ring { items, .. } => match self.order {
                OrderPolicy::Lifo => items.pop_back()?,
                _ => items.pop_front()?,
            },
            Store::Indexed(ix) => {
                let (kind, end) = self.order.next();
                let slot = ix.remove(ix.end(kind, end)?);
                (slot.item, slot.size)
            }
        };
        self.bytes -= size;
        Some((item, size))
    }

    /// Drops every queued item that has expired at `now` (`now > deadline`),
    /// counting them in [`expired`](Self::expired); returns how many.
    ///
    /// Cost: on an indexed queue O(log n) per expired item. On a ring (fifo
    /// or lifo with drop_oldest, drop_newest or reject) O(1) while nothing
    /// can have expired, else one O(n) pass; call it from housekeeping, not
    /// per event ([`pop_live`](Self::pop_live) drops expired items as it
    /// meets them).
    pub fn expire(&mut self, now: u64) -> usize {
        let mut expired = 0;
        match &mut self.store {
            Store::Ring {
                items,
                min_deadline,
            } => {
                if now <= *min_deadline {
                    return 0;
                }
                let mut min = NEVER;
                let bytes = &mut self.bytes;
                items.retain(|(item, size)| {
                    let deadline = K::deadline(item);
                    if now > deadline {
                        *bytes -= *size;
                        expired += 1;
                        false
                    } else {
                        min = min.min(deadline);
                        true
                    }
                });
                *min_deadline = min;
            }
            Store::Indexed(ix) => {
                while let Some(at) = ix.end(KeyKind::Deadline, End::First) {
                    if now <= ix.slot(at).deadline {
                        break;
                    }
                    self.bytes -= ix.remove(at).size;
                    expired += 1;
                }
            }
        }
        self.counts.expired += expired as u64;
        expired
    }

    /// A time at which something may expire: at or before the earliest
    /// deadline queued (exact on an indexed queue; on a ring it may be
    /// earlier, after the earliest one was popped). `None` when nothing
    /// queued can expire. Sans-I/O: the caller wakes [`expire`](Self::expire)
    /// then.
    pub fn next_expiry(&self) -> Option<u64> {
        let at = match &self.store {
            Store::Ring {
                items,
                min_deadline,
            } if !items.is_empty() => *min_deadline,
            Store::Ring { .. } => NEVER,
            Store::Indexed(ix) => ix
                .end(KeyKind::Deadline, End::First)
                .map_or(NEVER, |at| ix.slot(at).deadline),
        };
        (at != NEVER).then_some(at)
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        match &self.store {
            Store::Ring { items, .. } => items.len(),
            Store::Indexed(ix) => ix.len(),
        }
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound, in events.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The discard policy.
    pub fn policy(&self) -> DiscardPolicy {
        self.policy
    }

    /// The order policy.
    pub fn order(&self) -> OrderPolicy {
        self.order
    }

    /// Events dropped or rejected so far (not counting expired ones).
    pub fn dropped(&self) -> u64 {
        self.counts.dropped
    }

    /// Events dropped because they expired while queued.
    pub fn expired(&self) -> u64 {
        self.counts.expired
    }

    /// Every counter: pushed, popped, dropped, expired.
    pub fn counts(&self) -> QueueCounts {
        self.counts
    }

    /// Iterates over queued items in the order [`pop`](Self::pop) would take
    /// them (oldest first for `fifo`).
    pub fn iter(&self) -> Iter<'_, T> {
        let inner = match &self.store {
            Store::Ring { items, .. } => IterInner::Ring {
                items: items.iter(),
                back: self.order == OrderPolicy::Lifo,
            },
            Store::Indexed(ix) => {
                let (kind, end) = self.order.next();
                IterInner::Indexed {
                    ix,
                    slots: ix.index(kind).values(),
                    back: end == End::Last,
                }
            }
        };
        Iter { inner }
    }
}

/// Queued items in the order they would be popped; see [`BoundedQueue::iter`].
#[derive(Debug)]
pub struct Iter<'a, T> {
    inner: IterInner<'a, T>,
}

#[derive(Debug)]
enum IterInner<'a, T> {
    Ring {
        items: vec_deque::Iter<'a, (T, usize)>,
        back: bool,
    },
    Indexed {
        ix: &'a Indexed<T>,
        slots: btree_map::Values<'a, Key, u32>,
        back: bool,
    },
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        match &mut self.inner {
            IterInner::Ring { items, back } => {
                let next = if *back {
                    items.next_back()
                } else {
                    items.next()
                };
                next.map(|(t, _)| t)
            }
            IterInner::Indexed { ix, slots, back } => {
                let at = if *back {
                    slots.next_back()
                } else {
                    slots.next()
                }?;
                Some(&ix.slot(*at).item)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fill(policy: DiscardPolicy) -> (BoundedQueue<u32>, Vec<Pushed<u32>>) {
        let mut q = BoundedQueue::new(3, policy);
        let out = (0..5).map(|i| q.push(i, 1)).collect();
        (q, out)
    }

    #[test]
    fn reconfigure_keeps_the_queue_and_applies_the_new_bound_and_order() {
        let mut q = BoundedQueue::new(8, DiscardPolicy::DropOldest);
        for i in 0..6u32 {
            let _ = q.push(i, 10);
        }
        let _ = q.pop();
        // Shrink to 3 with drop_oldest, lifo: 1 and 2 go, 5 comes out first.
        let dropped = q.reconfigure(3, OrderPolicy::Lifo, DiscardPolicy::DropOldest);
        assert_eq!(dropped, 2);
        assert_eq!((q.len(), q.bytes(), q.bound()), (3, 30, 3));
        assert_eq!(q.dropped(), 2);
        assert_eq!(q.order(), OrderPolicy::Lifo);
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(5), Some(4), Some(3), None)
        );
        let c = q.counts();
        assert_eq!(c.pushed, c.popped + c.dropped + c.expired + q.len() as u64);
    }

    #[test]
    fn drop_oldest_keeps_the_newest_events_and_counts_drops() {
        let (mut q, out) = fill(DiscardPolicy::DropOldest);
        assert_eq!(out[2], Pushed::Queued { dropped: 0 });
        assert_eq!(out[3], Pushed::Queued { dropped: 1 });
        assert_eq!(out[4], Pushed::Queued { dropped: 1 });
        assert_eq!(q.dropped(), 2);
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(2), Some(3), Some(4), None)
        );
    }

    #[test]
    fn drop_newest_keeps_the_first_events() {
        let (q, out) = fill(DiscardPolicy::DropNewest);
        assert_eq!(out[3], Pushed::DroppedNewest(3));
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(q.dropped(), 2);
    }

    #[test]
    fn reject_hands_the_event_back_and_counts_it() {
        let (q, out) = fill(DiscardPolicy::Reject);
        assert_eq!(out[4], Pushed::Rejected(4));
        assert_eq!(q.len(), 3);
        assert_eq!(q.dropped(), 2);
    }

    #[test]
    fn byte_bound_drops_as_many_old_events_as_needed() {
        let mut q = BoundedQueue::with_byte_limit(100, 10, DiscardPolicy::DropOldest);
        for i in 0..5 {
            assert_eq!(q.push(i, 2), Pushed::Queued { dropped: 0 });
        }
        assert_eq!(q.push(9, 6), Pushed::Queued { dropped: 3 });
        assert_eq!(q.bytes(), 10);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![3, 4, 9]);
        assert_eq!(
            q.push(7, 11),
            Pushed::DroppedNewest(7),
            "larger than the byte bound"
        );
        assert_eq!(q.dropped(), 4);
    }

    #[test]
    fn byte_bound_applies_reject_policy() {
        let mut q = BoundedQueue::with_byte_limit(100, 4, DiscardPolicy::Reject);
        assert_eq!(q.push(1, 4), Pushed::Queued { dropped: 0 });
        assert_eq!(q.push(2, 1), Pushed::Rejected(2));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn push_within_a_budget_share_applies_the_policy_at_the_share() {
        // Room for 3 more bytes: a DropOldest queue makes room from itself.
        let mut q = BoundedQueue::with_byte_limit(100, 100, DiscardPolicy::DropOldest);
        assert_eq!(q.push(1, 4), Pushed::Queued { dropped: 0 });
        assert_eq!(q.push_within(2, 4, 3), Pushed::Queued { dropped: 1 });
        assert_eq!(q.bytes(), 4);
        // Nothing queued and no room: dropped and counted, whatever the policy.
        let mut q = BoundedQueue::with_byte_limit(100, 100, DiscardPolicy::DropOldest);
        assert_eq!(q.push_within(1, 4, 3), Pushed::DroppedNewest(1));
        assert_eq!(q.dropped(), 1);
        let mut q = BoundedQueue::with_byte_limit(100, 100, DiscardPolicy::Reject);
        assert_eq!(q.push(1, 4), Pushed::Queued { dropped: 0 });
        assert_eq!(q.push_within(2, 4, 0), Pushed::Rejected(2));
        assert_eq!(q.bytes(), 4);
    }

    #[test]
    fn policy_names_parse_with_tao_aliases_and_unknown_names_are_named() {
        assert_eq!("fifo".parse(), Ok(DiscardPolicy::DropOldest));
        assert_eq!("lifo".parse(), Ok(DiscardPolicy::DropNewest));
        assert_eq!("reject_new".parse(), Ok(DiscardPolicy::Reject));
        assert_eq!("priority".parse(), Ok(DiscardPolicy::Priority));
        assert_eq!("deadline".parse(), Ok(DiscardPolicy::Deadline));
        let e = "sometimes".parse::<DiscardPolicy>().unwrap_err();
        assert!(e.to_string().contains("\"sometimes\""));
        assert_eq!("any".parse(), Ok(OrderPolicy::Fifo));
        assert_eq!("deadline".parse(), Ok(OrderPolicy::Deadline));
        let e = "random".parse::<OrderPolicy>().unwrap_err();
        assert!(e.to_string().contains("\"random\""), "{e}");
        for p in [
            DiscardPolicy::DropOldest,
            DiscardPolicy::DropNewest,
            DiscardPolicy::Reject,
            DiscardPolicy::Priority,
            DiscardPolicy::Deadline,
        ] {
            assert_eq!(p.as_str().parse(), Ok(p));
        }
        for o in [
            OrderPolicy::Fifo,
            OrderPolicy::Lifo,
            OrderPolicy::Priority,
            OrderPolicy::Deadline,
        ] {
            assert_eq!(o.as_str().parse(), Ok(o));
        }
    }

    /// A test event: (id, priority, deadline).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Ev(u32, u8, u64);

    impl QueueItem for Ev {
        fn priority(&self) -> u8 {
            self.1
        }
        fn deadline(&self) -> u64 {
            self.2
        }
    }

    fn keyed(
        bound: usize,
        order: OrderPolicy,
        discard: DiscardPolicy,
    ) -> BoundedQueue<Ev, ItemKeys> {
        BoundedQueue::with_policies(bound, usize::MAX, order, discard)
    }

    fn ids(q: &mut BoundedQueue<Ev, ItemKeys>) -> Vec<u32> {
        std::iter::from_fn(|| q.pop()).map(|e| e.0).collect()
    }

    #[test]
    fn priority_order_takes_the_highest_first_and_fifo_within_a_priority() {
        let mut q = keyed(10, OrderPolicy::Priority, DiscardPolicy::DropOldest);
        for e in [
            Ev(0, 1, NEVER),
            Ev(1, 9, NEVER),
            Ev(2, 1, NEVER),
            Ev(3, 9, NEVER),
        ] {
            assert_eq!(q.push(e, 1), Pushed::Queued { dropped: 0 });
        }
        assert_eq!(q.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 3, 0, 2]);
        assert_eq!(ids(&mut q), vec![1, 3, 0, 2]);
    }

    #[test]
    fn deadline_order_takes_the_earliest_expiry_first_and_never_last() {
        let mut q = keyed(10, OrderPolicy::Deadline, DiscardPolicy::DropNewest);
        for e in [Ev(0, 0, NEVER), Ev(1, 0, 30), Ev(2, 0, 10), Ev(3, 0, 30)] {
            assert_eq!(q.push(e, 1), Pushed::Queued { dropped: 0 });
        }
        assert_eq!(ids(&mut q), vec![2, 1, 3, 0]);
    }

    #[test]
    fn lifo_order_takes_the_newest_first() {
        let mut q = BoundedQueue::<u32>::with_policies(
            3,
            usize::MAX,
            OrderPolicy::Lifo,
            DiscardPolicy::DropOldest,
        );
        for i in 0..4 {
            let _ = q.push(i, 1);
        }
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![3, 2, 1]);
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(3), Some(2), Some(1), None)
        );
    }

    #[test]
    fn priority_discard_drops_the_lowest_priority_possibly_the_arriving_event() {
        let mut q = keyed(2, OrderPolicy::Fifo, DiscardPolicy::Priority);
        let _ = q.push(Ev(0, 5, NEVER), 1);
        let _ = q.push(Ev(1, 3, NEVER), 1);
        // Lower than everything queued: the arriving event goes.
        assert_eq!(
            q.push(Ev(2, 1, NEVER), 1),
            Pushed::DroppedNewest(Ev(2, 1, NEVER))
        );
        // Equal to the lowest: the newer (arriving) one goes.
        assert_eq!(
            q.push(Ev(3, 3, NEVER), 1),
            Pushed::DroppedNewest(Ev(3, 3, NEVER))
        );
        // Higher: the lowest queued goes; fifo order is kept.
        assert_eq!(q.push(Ev(4, 4, NEVER), 1), Pushed::Queued { dropped: 1 });
        assert_eq!(q.dropped(), 3);
        assert_eq!(ids(&mut q), vec![0, 4]);
    }

    #[test]
    fn priority_discard_drops_the_newest_of_the_lowest_priority() {
        let mut q = keyed(3, OrderPolicy::Fifo, DiscardPolicy::Priority);
        for e in [Ev(0, 1, NEVER), Ev(1, 1, NEVER), Ev(2, 7, NEVER)] {
            let _ = q.push(e, 1);
        }
        assert_eq!(q.push(Ev(3, 2, NEVER), 1), Pushed::Queued { dropped: 1 });
        assert_eq!(ids(&mut q), vec![0, 2, 3]);
    }

    #[test]
    fn priority_discard_decides_before_dropping_anything_at_the_byte_bound() {
        let mut q: BoundedQueue<Ev, ItemKeys> =
            BoundedQueue::with_policies(10, 10, OrderPolicy::Fifo, DiscardPolicy::Priority);
        let _ = q.push(Ev(0, 9, NEVER), 4);
        let _ = q.push(Ev(1, 1, NEVER), 4);
        // Needs 6 bytes freed: the priority-1 event is not enough and the
        // priority-9 one ranks above it, so the arriving event goes alone.
        assert_eq!(
            q.push(Ev(2, 5, NEVER), 8),
            Pushed::DroppedNewest(Ev(2, 5, NEVER))
        );
        assert_eq!(q.len(), 2);
        assert_eq!(q.bytes(), 8);
        // Needs 2 bytes: the priority-1 event makes room.
        assert_eq!(q.push(Ev(3, 5, NEVER), 4), Pushed::Queued { dropped: 1 });
        assert_eq!(ids(&mut q), vec![0, 3]);
    }

    #[test]
    fn deadline_discard_drops_the_earliest_deadline_and_never_expiring_last() {
        let mut q = keyed(2, OrderPolicy::Fifo, DiscardPolicy::Deadline);
        let _ = q.push(Ev(0, 0, NEVER), 1);
        let _ = q.push(Ev(1, 0, 20), 1);
        assert_eq!(q.push(Ev(2, 0, 10), 1), Pushed::DroppedNewest(Ev(2, 0, 10)));
        assert_eq!(q.push(Ev(3, 0, 30), 1), Pushed::Queued { dropped: 1 });
        // Equal deadlines: the older goes.
        assert_eq!(q.push(Ev(4, 0, 30), 1), Pushed::Queued { dropped: 1 });
        assert_eq!(ids(&mut q), vec![0, 4]);
    }

    #[test]
    fn without_keys_priority_and_deadline_policies_fall_back_to_arrival_order() {
        let mut q = BoundedQueue::<u32>::new(2, DiscardPolicy::Priority);
        assert_eq!(q.order(), OrderPolicy::Fifo);
        let _ = (q.push(0, 1), q.push(1, 1));
        assert_eq!(q.push(2, 1), Pushed::DroppedNewest(2));
        let mut q = BoundedQueue::<u32>::new(2, DiscardPolicy::Deadline);
        let _ = (q.push(0, 1), q.push(1, 1));
        assert_eq!(q.push(2, 1), Pushed::Queued { dropped: 1 });
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn pop_live_skips_and_counts_expired_events() {
        for order in [OrderPolicy::Fifo, OrderPolicy::Priority] {
            let mut q = keyed(10, order, DiscardPolicy::DropOldest);
            for e in [Ev(0, 0, 5), Ev(1, 0, 50), Ev(2, 0, 5)] {
                let _ = q.push(e, 3);
            }
            assert_eq!(q.pop_live(10), Some(Ev(1, 0, 50)), "{order}");
            assert_eq!(q.pop_live(10), None);
            assert_eq!(q.expired(), 2);
            assert_eq!(q.dropped(), 0);
            assert_eq!(q.bytes(), 0);
            // Expiry is `now > deadline`: due at the deadline itself.
            let _ = q.push(Ev(3, 0, 10), 1);
            assert_eq!(q.pop_live(10), Some(Ev(3, 0, 10)));
        }
    }

    #[test]
    fn expire_drops_every_expired_event_wherever_it_is() {
        for (order, discard) in [
            (OrderPolicy::Fifo, DiscardPolicy::DropOldest),
            (OrderPolicy::Priority, DiscardPolicy::Priority),
        ] {
            let mut q = keyed(10, order, discard);
            for e in [Ev(0, 0, 50), Ev(1, 0, 5), Ev(2, 0, NEVER), Ev(3, 0, 7)] {
                let _ = q.push(e, 2);
            }
            assert_eq!(q.next_expiry(), Some(5));
            assert_eq!(q.expire(5), 0, "not yet: expired only after the deadline");
            assert_eq!(q.expire(8), 2);
            assert_eq!(q.expired(), 2);
            assert_eq!(q.bytes(), 4);
            assert_eq!(q.next_expiry(), Some(50));
            assert_eq!(q.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 2]);
            assert_eq!(q.expire(u64::MAX - 1), 1);
            assert_eq!(q.next_expiry(), None);
        }
    }

    #[test]
    fn a_ring_rechecks_its_earliest_deadline_only_when_it_may_have_passed() {
        let mut q = keyed(10, OrderPolicy::Fifo, DiscardPolicy::DropOldest);
        let _ = q.push(Ev(0, 0, 5), 1);
        let _ = q.push(Ev(1, 0, 50), 1);
        assert_eq!(q.pop(), Some(Ev(0, 0, 5)));
        // The hint may be early after a pop; an expire pass makes it exact.
        assert_eq!(q.next_expiry(), Some(5));
        assert_eq!(q.expire(6), 0);
        assert_eq!(q.next_expiry(), Some(50));
    }

    fn policy() -> impl Strategy<Value = (OrderPolicy, DiscardPolicy)> {
        (
            prop::sample::select(vec![
                OrderPolicy::Fifo,
                OrderPolicy::Lifo,
                OrderPolicy::Priority,
                OrderPolicy::Deadline,
            ]),
            prop::sample::select(vec![
                DiscardPolicy::DropOldest,
                DiscardPolicy::DropNewest,
                DiscardPolicy::Reject,
                DiscardPolicy::Priority,
                DiscardPolicy::Deadline,
            ]),
        )
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push {
            priority: u8,
            deadline: u64,
            size: usize,
            room: usize,
        },
        Pop,
        PopLive(u64),
        Expire(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, prop_oneof![Just(NEVER), 0u64..40], 1usize..6, prop_oneof![Just(usize::MAX), 0usize..8])
                .prop_map(|(priority, deadline, size, room)| Op::Push { priority, deadline, size, room }),
            1 => Just(Op::Pop),
            1 => (0u64..40).prop_map(Op::PopLive),
            1 => (0u64..40).prop_map(Op::Expire),
        ]
    }

    /// The position of an event in the order policy's ranking (smaller =
    /// taken first); `seq` is its arrival number.
    fn rank(order: OrderPolicy, e: &Ev, seq: u32) -> (u64, i64) {
        match order {
            OrderPolicy::Fifo => (0, i64::from(seq)),
            OrderPolicy::Lifo => (0, -i64::from(seq)),
            OrderPolicy::Priority => (u64::from(u8::MAX - e.1), i64::from(seq)),
            OrderPolicy::Deadline => (e.2, i64::from(seq)),
        }
    }

    /// The position of a queued event in the discard policy's ranking
    /// (smaller = dropped first).
    fn victim_rank(discard: DiscardPolicy, e: &Ev, seq: u32) -> (u64, i64) {
        match discard {
            DiscardPolicy::Priority => (u64::from(e.1), -i64::from(seq)),
            DiscardPolicy::Deadline => (e.2, i64::from(seq)),
            _ => (0, i64::from(seq)),
        }
    }

    proptest! {
        /// Random pushes, pops and expiries on every policy pair: the bounds
        /// hold, each pop takes the first live event by the order policy, an
        /// expire leaves nothing expired, and the counts add up.
        #[test]
        fn bounds_order_and_counts_hold_for_every_policy(
            (order, discard) in policy(),
            bound in 1usize..6,
            max_bytes in 1usize..16,
            ops in prop::collection::vec(op(), 0..80),
        ) {
            let mut q: BoundedQueue<Ev, ItemKeys> =
                BoundedQueue::with_policies(bound, max_bytes, order, discard);
            // The model: what is queued, with arrival numbers.
            let mut model: Vec<(Ev, u32)> = Vec::new();
            let mut next_id = 0u32;
            for op in ops {
                match op {
                    Op::Push { priority, deadline, size, room } => {
                        let e = Ev(next_id, priority, deadline);
                        next_id += 1;
                        let before: Vec<u32> = model.iter().map(|(e, _)| e.0).collect();
                        let pushed = q.push_within(e, size, room);
                        let now: Vec<u32> = q.iter().map(|e| e.0).collect();
                        match pushed {
                            Pushed::Queued { dropped } => {
                                prop_assert!(now.contains(&e.0));
                                prop_assert_eq!(before.len() + 1 - dropped, now.len());
                                // The dropped ones are the first `dropped` by
                                // the discard ranking, each below the arriving event.
                                let mut ranked = model.clone();
                                ranked.sort_by_key(|(m, s)| victim_rank(discard, m, *s));
                                let mut want_gone: Vec<u32> = ranked[..dropped].iter().map(|(m, _)| m.0).collect();
                                let mut gone: Vec<u32> = before.iter().copied().filter(|id| !now.contains(id)).collect();
                                want_gone.sort_unstable();
                                gone.sort_unstable();
                                prop_assert_eq!(gone, want_gone);
                                for (m, s) in &ranked[..dropped] {
                                    prop_assert!(victim_rank(discard, m, *s) < victim_rank(discard, &e, e.0));
                                }
                                if dropped > 0 {
                                    prop_assert!(matches!(discard, DiscardPolicy::DropOldest | DiscardPolicy::Priority | DiscardPolicy::Deadline));
                                }
                                model.retain(|(m, _)| now.contains(&m.0));
                                model.push((e, e.0));
                            }
                            Pushed::DroppedNewest(x) | Pushed::Rejected(x) => {
                                prop_assert_eq!(x, e);
                                prop_assert_eq!(&before, &{ let mut n = now.clone(); n.sort_unstable(); n });
                            }
                        }
                    }
                    Op::Pop => {
                        let want = model.iter().enumerate().min_by_key(|(_, (e, s))| rank(order, e, *s)).map(|(i, _)| i);
                        let got = q.pop();
                        prop_assert_eq!(got, want.map(|i| model.remove(i).0));
                    }
                    Op::PopLive(now) => {
                        let mut live: Vec<usize> = (0..model.len()).collect();
                        live.sort_by_key(|&i| rank(order, &model[i].0, model[i].1));
                        let first_live = live.iter().position(|&i| now <= model[i].0 .2);
                        let got = q.pop_live(now);
                        let taken: Vec<usize> = match first_live { Some(p) => live[..=p].to_vec(), None => live };
                        let want = first_live.map(|_| model[*taken.last().expect("first live taken")].0);
                        prop_assert_eq!(got, want);
                        let mut taken = taken;
                        taken.sort_unstable();
                        for i in taken.into_iter().rev() { model.remove(i); }
                    }
                    Op::Expire(now) => {
                        let n = q.expire(now);
                        let before = model.len();
                        model.retain(|(e, _)| now <= e.2);
                        prop_assert_eq!(n, before - model.len());
                        prop_assert!(q.iter().all(|e| now <= e.2));
                    }
                }
                prop_assert!(q.len() <= bound);
                prop_assert!(q.bytes() <= max_bytes);
                prop_assert_eq!(q.len(), model.len());
                let c = q.counts();
                prop_assert_eq!(c.pushed, c.popped + c.dropped + c.expired + q.len() as u64);
                if let Some(at) = q.next_expiry() {
                    prop_assert!(q.iter().all(|e| e.2 >= at));
                }
            }
        }

        /// Discard by priority keeps the best events: after pushes alone the
        /// queue holds the `bound` highest priorities seen, the earliest
        /// among equals.
        #[test]
        fn priority_discard_keeps_the_highest_priorities(prios in prop::collection::vec(0u8..5, 0..40), bound in 1usize..6) {
            let mut q = keyed(bound, OrderPolicy::Priority, DiscardPolicy::Priority);
            for (i, p) in prios.iter().enumerate() {
                let _ = q.push(Ev(i as u32, *p, NEVER), 1);
            }
            let mut want: Vec<(u8, u32)> = prios.iter().enumerate().map(|(i, p)| (*p, i as u32)).collect();
            want.sort_by_key(|&(p, i)| (std::cmp::Reverse(p), i));
            want.truncate(bound);
            let got: Vec<(u8, u32)> = std::iter::from_fn(|| q.pop()).map(|e| (e.1, e.0)).collect();
            prop_assert_eq!(got, want);
        }
    }
}
