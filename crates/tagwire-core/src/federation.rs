//! Routing between daemons (sans-I/O): which neighbours an event goes to.
//!
//! Every daemon floods an *advert* — its links and its local subscribers'
//! interest, versioned — to every other daemon over the links
//! (link-state routing, as Zenoh's routers and OSPF do). From the adverts
//! each daemon knows the whole graph, and all compute the same shortest-path
//! tree rooted at an event's origin (breadth-first, neighbours in node-id
//! order, so ties break the same everywhere). A daemon forwards an event only
//! to its children in the origin's tree whose subtree holds a matching
//! interest (pattern, and filter where one is given). So under a steady
//! topology an event crosses each link at most once, reaches each
//! interested daemon exactly once, and never loops or crosses a link toward
//! daemons that do not want it; during a change the hop limit bounds it.
//!
//! Bounds: [`Limits`] caps daemons, interest entries per daemon and filter
//! size; an advert over them is refused with an error naming the bound.
//! Adverts of daemons no longer reachable are dropped by [`Topology::prune`].
//!
//! ```
//! use tagwire_core::federation::{Topology, Limits};
//! use tagwire_proto::Interest;
//! let mut a = Topology::new(1, "a", Limits::default());
//! let mut b = Topology::new(2, "b", Limits::default());
//! let ad_a = a.set_neighbors(vec![2]).unwrap();
//! let ad_b = b.set_neighbors(vec![1]).unwrap();
//! b.apply(ad_a.clone()).unwrap();
//! let ad_b = b.set_interest(vec![Interest::pattern("/x/**")]).unwrap_or(ad_b);
//! a.apply(ad_b).unwrap();
//! assert_eq!(a.next_hops_for_tag(1, "/x/y"), vec![2]);
//! assert!(a.next_hops_for_tag(1, "/z").is_empty());
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use tagwire_proto::{EventRef, Interest, LinkFrame, ProxyAt};

use crate::filter::{Filter, FilterLimits};
use crate::tags::{Pattern, TagTable};

/// A daemon's id: random per start, so a restarted daemon is a new node and
/// its predecessor's advert simply becomes unreachable and is pruned.
pub type NodeId = u64;

/// Most links an event may cross; past it, it is dropped (a loop during a
/// topology change).
pub const MAX_HOPS: u8 = 32;

/// The bounds of the routing tables.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most daemons known at once.
    pub max_nodes: usize,
    /// Most interest entries one daemon may advertise.
    pub max_interest: usize,
    /// Limits for compiling advertised filters.
    pub filter: FilterLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_nodes: 1024,
            max_interest: 4096,
            filter: FilterLimits::default(),
        }
    }
}

/// Why an advert was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FederationError {
    /// Not an `Advert` frame.
    #[error("expected an Advert frame")]
    NotAnAdvert,
    /// Too many daemons.
    #[error("daemon {origin:#x} refused: {max} daemons are known already (federation.max_nodes)")]
    TooManyNodes {
        /// The advert's origin.
        origin: NodeId,
        /// The bound.
        max: usize,
    },
    /// Too many interest entries.
    #[error("advert of daemon {origin:#x} refused: {count} interest entries, at most {max} (federation.max_interest)")]
    TooMuchInterest {
        /// The advert's origin.
        origin: NodeId,
        /// Entries sent.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// An invalid pattern or filter.
    #[error("advert of daemon {origin:#x} refused: interest {what:?}: {why}")]
    BadInterest {
        /// The advert's origin.
        origin: NodeId,
        /// The pattern or filter.
        what: String,
        /// Why it does not parse.
        why: String,
    },
    /// Another daemon claims to be this one.
    #[error("an advert claims to come from this daemon ({origin:#x})")]
    ClaimsToBeUs {
        /// The id.
        origin: NodeId,
    },
}

/// What [`Topology::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Newer than what was known: routes changed; flood it on.
    Newer,
    /// Not newer: ignore it (do not flood).
    Stale,
}

/// One interest entry compiled: its pattern, its filter (`None`: every
/// event), its scale and where the scaling proxy runs.
#[derive(Debug, Clone)]
struct Compiled {
    pattern: Pattern,
    filter: Option<Arc<Filter>>,
    scale: u32,
    proxy: ProxyAt,
}

/// Interest compiled, entry by entry.
type CompiledInterest = Vec<Compiled>;

/// What a subtree's table holds per entry: the filter, and the scale that
/// applies on this daemon's link toward it (1 where the proxy is further on).
type Want = (Option<Arc<Filter>>, u32);

/// One daemon's advert, compiled.
#[derive(Debug, Clone)]
struct Node {
    version: u64,
    name: Arc<str>,
    neighbors: Vec<NodeId>,
    interest: Vec<Interest>,
    /// The interest compiled: pattern → filter (None: every event).
    compiled: CompiledInterest,
}

/// The children of this daemon in one origin's tree, each with the interest
/// of its subtree.
#[derive(Debug)]
struct Tree {
    children: Vec<(NodeId, TagTable<Want>)>,
}

/// Local interest aggregated and compiled by
/// [`Topology::prepare_interest`], ready to be put in force.
#[derive(Debug)]
pub struct PreparedInterest {
    interest: Vec<Interest>,
    compiled: CompiledInterest,
}

/// Another daemon's advert interest compiled beforehand, slice by slice
/// ([`CompiledAdvert::compile_more`], e.g. off the lane), to be put in force
/// by [`Topology::apply_compiled`] without compiling on the caller's thread.
#[derive(Debug, Default)]
pub struct CompiledAdvert {
    compiled: CompiledInterest,
}

impl CompiledAdvert {
    /// Compiles `interest`, the advert's next entries from `origin`, and
    /// appends them; fails on the first entry that does not compile (the
    /// whole advert is then refused with that error).
    pub fn compile_more(
        &mut self,
        origin: NodeId,
        interest: &[Interest],
        limits: &Limits,
    ) -> Result<(), FederationError> {
        self.compiled.extend(compile(origin, interest, limits)?);
        Ok(())
    }

    /// Entries compiled so far.
    pub fn len(&self) -> usize {
        self.compiled.len()
    }

    /// True when no entry is compiled.
    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }
}

/// The routing state of one daemon: every known advert, its own included.
#[derive(Debug)]
pub struct Topology {
    me: NodeId,
    limits: Limits,
    nodes: HashMap<NodeId, Node>,
    /// Trees by origin, computed on demand; cleared on any change.
    trees: HashMap<NodeId, Tree>,
    /// Daemons whose interest this daemon's own tree leaves out (the
    /// reliable hold's away and settling daemons: what is published here
    /// for them is held, not routed), see [`Topology::set_held_for`].
    held_for: BTreeSet<NodeId>,
    /// Since when each known daemon has been unreachable from here, as
    /// [`expire_unreachable`](Self::expire_unreachable) last saw it (only
    /// daemons with an advert here: bounded by `max_nodes`).
    unreachable_since: HashMap<NodeId, u64>,
}

/// How long an advert may stay unreachable before
/// [`Topology::expire_unreachable`] drops it, ns: long enough for the
/// adverts of a topology change to settle (a daemon can look unreachable
/// for a moment while they cross), short enough that a killed daemon is
/// soon forgotten.
pub const UNREACHABLE_GRACE_NS: u64 = 10_000_000_000;

impl Topology {
    /// The routing state of daemon `me`, knowing only itself.
    pub fn new(me: NodeId, name: &str, limits: Limits) -> Self {
        Self::starting_at(me, name, limits, 0)
    }

    /// Like [`new`](Self::new), with advert versions counting up from
    /// `version` — the daemon's start time, so that a daemon restarted
    /// under the same node id supersedes its old adverts.
    pub fn starting_at(me: NodeId, name: &str, limits: Limits, version: u64) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            me,
            Node {
                version,
                name: name.into(),
                neighbors: Vec::new(),
                interest: Vec::new(),
                compiled: Vec::new(),
            },
        );
        Topology {
            me,
            limits,
            nodes,
            trees: HashMap::new(),
            held_for: BTreeSet::new(),
            unreachable_since: HashMap::new(),
        }
    }

    /// Leaves the interest of `ids` out of the routes of events published
    /// here (the tree rooted at this daemon; other origins' trees keep it):
    /// the reliable hold's away and settling daemons, whose events from here
    /// are held and sent in order when they have settled. Costs the own
    /// tree's recomputation when the set changes.
    pub fn set_held_for(&mut self, ids: BTreeSet<NodeId>) {
        if ids != self.held_for {
            self.held_for = ids;
            self.trees.remove(&self.me);
        }
    }

    /// This daemon's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The number of daemons known, this one included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether only this daemon is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// The name a daemon advertised.
    pub fn name_of(&self, node: NodeId) -> Option<&str> {
        self.nodes.get(&node).map(|n| &*n.name)
    }

    /// This daemon's current advert.
    pub fn own_advert(&self) -> LinkFrame {
        self.advert_of(self.me)
            .expect("a topology always knows itself")
    }

    /// Every known advert (to bring a new neighbour up to date).
    pub fn adverts(&self) -> Vec<LinkFrame> {
        let mut ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|n| self.advert_of(n)).collect()
    }

    /// Daemon `id`'s advert as known here.
    pub fn advert_of(&self, id: NodeId) -> Option<LinkFrame> {
        let n = self.nodes.get(&id)?;
        Some(LinkFrame::Advert {
            origin: id,
            version: n.version,
            name: n.name.to_string(),
            neighbors: n.neighbors.clone(),
            interest: n.interest.clone(),
        })
    }

    /// Sets this daemon's neighbours. Returns the new advert to flood, or
    /// `None` if nothing changed.
    pub fn set_neighbors(&mut self, mut neighbors: Vec<NodeId>) -> Option<LinkFrame> {
        neighbors.sort_unstable();
        neighbors.dedup();
        let me = self.nodes.get_mut(&self.me).expect("knows itself");
        if me.neighbors == neighbors {
            return None;
        }
        me.neighbors = neighbors;
        me.version += 1;
        self.trees.clear();
        Some(self.own_advert())
    }

    /// Sets this daemon's interest (its local subscriptions), aggregated
    /// first (see [`aggregate`]). Entries that do not compile are left out.
    /// Returns the new advert to flood, or `None` if nothing changed.
    pub fn set_interest(&mut self, interest: Vec<Interest>) -> Option<LinkFrame> {
        let prepared = Self::prepare_interest(self.me, interest, &self.limits);
        self.set_prepared_interest(prepared)
    }

    /// The bounds this topology was made with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Aggregates and compiles daemon `me`'s local interest under `limits`,
    /// with no borrow of the topology: a daemon does this work (a filter
    /// compile per distinct filter) without holding its tables, then hands
    /// the result to [`set_prepared_interest`](Self::set_prepared_interest).
    pub fn prepare_interest(
        me: NodeId,
        interest: Vec<Interest>,
        limits: &Limits,
    ) -> PreparedInterest {
        let interest = aggregate(interest);
        let compiled = compile(me, &interest, limits).unwrap_or_else(|_| {
            // Local subscriptions were checked when made; keep what compiles.
            interest
                .iter()
                .filter_map(|i| compile(me, std::slice::from_ref(i), limits).ok())
                .flatten()
                .collect()
        });
        PreparedInterest { interest, compiled }
    }

    /// Puts prepared local interest in force: the new advert to flood, or
    /// `None` if the interest did not change. Costs a comparison.
    pub fn set_prepared_interest(&mut self, prepared: PreparedInterest) -> Option<LinkFrame> {
        let me = self.nodes.get_mut(&self.me).expect("knows itself");
        if me.interest == prepared.interest {
            return None;
        }
        me.interest = prepared.interest;
        me.compiled = prepared.compiled;
        me.version += 1;
        self.trees.clear();
        Some(self.own_advert())
    }

    /// Takes another daemon's advert. `Newer` means it replaced what was
    /// known (flood it on to the other neighbours); `Stale` means it did not.
    /// Compiles its filters here; see [`Topology::apply_compiled`].
    pub fn apply(&mut self, advert: LinkFrame) -> Result<Applied, FederationError> {
        self.apply_with(advert, None)
    }

    /// Like [`Topology::apply`], with the advert's interest compiled
    /// beforehand (`compiled`: what [`CompiledAdvert::compile_more`] gave
    /// for all its entries, in order, or its error). A `compiled` that does
    /// not hold one entry per interest entry is ignored (compiled here).
    pub fn apply_compiled(
        &mut self,
        advert: LinkFrame,
        compiled: Result<CompiledAdvert, FederationError>,
    ) -> Result<Applied, FederationError> {
        self.apply_with(advert, Some(compiled))
    }

    /// Whether an advert of `origin` at `version` would replace what is
    /// known (is worth compiling): not this daemon's, newer than the one
    /// held.
    pub fn is_newer(&self, origin: NodeId, version: u64) -> bool {
        origin != self.me && self.nodes.get(&origin).is_none_or(|n| n.version < version)
    }

    fn apply_with(
        &mut self,
        advert: LinkFrame,
        precompiled: Option<Result<CompiledAdvert, FederationError>>,
    ) -> Result<Applied, FederationError> {
        let LinkFrame::Advert {
            origin,
            version,
            name,
            mut neighbors,
            interest,
        } = advert
        else {
            return Err(FederationError::NotAnAdvert);
        };
        if origin == self.me {
            // Our own advert coming back is stale unless someone forged a
            // newer one: that is another daemon using our id.
            let mine = self.nodes[&self.me].version;
            return if version > mine {
                Err(FederationError::ClaimsToBeUs { origin })
            } else {
                Ok(Applied::Stale)
            };
        }
        match self.nodes.get(&origin) {
            Some(n) if n.version >= version => return Ok(Applied::Stale),
            None if self.nodes.len() >= self.limits.max_nodes => {
                return Err(FederationError::TooManyNodes {
                    origin,
                    max: self.limits.max_nodes,
                })
            }
            _ => {}
        }
        if interest.len() > self.limits.max_interest {
            return Err(FederationError::TooMuchInterest {
                origin,
                count: interest.len(),
                max: self.limits.max_interest,
            });
        }
        let compiled = match precompiled {
            Some(Ok(c)) if c.compiled.len() == interest.len() => c.compiled,
            Some(Err(e)) => return Err(e),
            _ => compile(origin, &interest, &self.limits)?,
        };
        neighbors.sort_unstable();
        neighbors.dedup();
        self.nodes.insert(
            origin,
            Node {
                version,
                name: name.into(),
                neighbors,
                interest,
                compiled,
            },
        );
        self.trees.clear();
        self.drop_superseded();
        Ok(Applied::Newer)
    }

    /// Drops the adverts of daemons this one cannot reach whose name a
    /// daemon it reaches now holds: a daemon restarted under a new id
    /// supersedes its old advert at once, everywhere, instead of when each
    /// daemon's own links next change (before, restarts could fill
    /// `max_nodes` and a `node:NAME` pull could pick the dead id). Costs a
    /// breadth-first walk per newer advert.
    fn drop_superseded(&mut self) -> usize {
        let reach = self.bfs(self.me);
        let live: std::collections::HashSet<Arc<str>> = reach
            .keys()
            .filter_map(|id| self.nodes.get(id))
            .map(|n| n.name.clone())
            .collect();
        let before = self.nodes.len();
        self.nodes
            .retain(|id, n| reach.contains_key(id) || !live.contains(&n.name));
        let dropped = before - self.nodes.len();
        if dropped > 0 {
            self.trees.clear();
        }
        dropped
    }

    /// Drops the adverts of daemons this one can no longer reach. Returns
    /// how many were dropped.
    pub fn prune(&mut self) -> usize {
        let reach = self.bfs(self.me);
        let before = self.nodes.len();
        self.nodes.retain(|id, _| reach.contains_key(id));
        let dropped = before - self.nodes.len();
        if dropped > 0 {
            self.trees.clear();
        }
        dropped
    }

    /// Drops the adverts of daemons that have been unreachable from here
    /// for `grace` ns or more, as seen at each call (call it now and then,
    /// e.g. every second, with the time). [`prune`](Self::prune) runs only
    /// when this daemon's own links change, and a daemon's advert can
    /// become unreachable later — a killed daemon stays reachable through a
    /// neighbour's advert that still names it, until that neighbour's next
    /// advert arrives — and would then be kept for good. Returns how many
    /// were dropped.
    pub fn expire_unreachable(&mut self, now: u64, grace: u64) -> usize {
        let reach = self.bfs(self.me);
        let nodes = &self.nodes;
        self.unreachable_since
            .retain(|id, _| nodes.contains_key(id) && !reach.contains_key(id));
        for id in nodes.keys().filter(|id| !reach.contains_key(id)) {
            self.unreachable_since.entry(*id).or_insert(now);
        }
        let expired: Vec<NodeId> = self
            .unreachable_since
            .iter()
            .filter(|(_, since)| now.saturating_sub(**since) >= grace)
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            self.nodes.remove(id);
            self.unreachable_since.remove(id);
        }
        if !expired.is_empty() {
            self.trees.clear();
        }
        expired.len()
    }

    /// Drops `id`'s advert now if it is unreachable from here (membership
    /// declared that daemon down: no need to wait for
    /// [`expire_unreachable`](Self::expire_unreachable)). A reachable one is
    /// kept, whatever membership says: the links decide routes. Returns
    /// whether it was dropped.
    pub fn forget_if_unreachable(&mut self, id: NodeId) -> bool {
        if id == self.me || !self.nodes.contains_key(&id) || self.bfs(self.me).contains_key(&id) {
            return false;
        }
        self.nodes.remove(&id);
        self.unreachable_since.remove(&id);
        self.trees.clear();
        true
    }

    /// The daemons this one reaches over links both ends confirm, itself
    /// included.
    pub fn reachable(&self) -> BTreeSet<NodeId> {
        self.bfs(self.me).into_keys().collect()
    }

    /// Every link both ends advertise, once, as (smaller id, larger id),
    /// sorted (the graph routes are computed on).
    pub fn links(&self) -> Vec<(NodeId, NodeId)> {
        let mut v: Vec<(NodeId, NodeId)> = self
            .nodes
            .iter()
            .flat_map(|(&a, n)| n.neighbors.iter().map(move |&b| (a, b)))
            .filter(|&(a, b)| a < b && self.linked(a, b))
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether `a` and `b` both list each other (a link both ends confirm).
    pub fn linked(&self, a: NodeId, b: NodeId) -> bool {
        let lists = |x: NodeId, y: NodeId| {
            self.nodes
                .get(&x)
                .is_some_and(|n| n.neighbors.binary_search(&y).is_ok())
        };
        lists(a, b) && lists(b, a)
    }

    /// Breadth-first from `root` over confirmed links, neighbours in id
    /// order: each reached node's parent (the root's is itself).
    fn bfs(&self, root: NodeId) -> BTreeMap<NodeId, NodeId> {
        let mut parent = BTreeMap::new();
        if !self.nodes.contains_key(&root) {
            return parent;
        }
        parent.insert(root, root);
        let mut queue = VecDeque::from([root]);
        while let Some(u) = queue.pop_front() {
            for &v in &self.nodes[&u].neighbors {
                if !parent.contains_key(&v) && self.linked(u, v) {
                    parent.insert(v, u);
                    queue.push_back(v);
                }
            }
        }
        parent
    }

    fn tree(&mut self, origin: NodeId) -> &mut Tree {
        if !self.trees.contains_key(&origin) {
            let parent = self.bfs(origin);
            let mut children = Vec::new();
            if parent.contains_key(&self.me) {
                for (&child, &p) in &parent {
                    if p != self.me || child == self.me {
                        continue;
                    }
                    // Everything whose path to the root passes through `child`.
                    let mut table = TagTable::new(1024);
                    let mut id = 0u64;
                    for &n in parent.keys() {
                        if !descends(&parent, n, child)
                            || (origin == self.me && self.held_for.contains(&n))
                        {
                            continue;
                        }
                        for c in &self.nodes[&n].compiled {
                            // The scale holds on this link if its proxy is
                            // behind us: at the origin, or a daemon on the
                            // path from the origin to here (this one included).
                            let scaled_here = match &c.proxy {
                                ProxyAt::Subscriber => false,
                                ProxyAt::Publisher => true,
                                ProxyAt::Node(name) => self
                                    .node_named(name)
                                    .is_some_and(|p| descends(&parent, self.me, p)),
                            };
                            let scale = if scaled_here { c.scale } else { 1 };
                            id += 1;
                            table.insert(id, c.pattern.clone(), (c.filter.clone(), scale));
                        }
                    }
                    children.push((child, table));
                }
            }
            self.trees.insert(origin, Tree { children });
        }
        self.trees.get_mut(&origin).expect("inserted above")
    }

    /// The neighbours to forward `event`, published at `origin`, to. An
    /// origin no advert names has no tree (and gets none cached: the cache
    /// holds at most one tree per known daemon).
    pub fn next_hops(&mut self, origin: NodeId, event: &EventRef<'_>) -> Vec<NodeId> {
        if !self.nodes.contains_key(&origin) {
            return Vec::new();
        }
        self.tree(origin)
            .children
            .iter_mut()
            .filter_map(|(n, table)| {
                let hit = table.matches(event.tag).iter().any(|(f, scale)| {
                    event.seq.is_multiple_of(u64::from(*scale))
                        && f.as_ref().is_none_or(|f| f.matches(event))
                });
                hit.then_some(*n)
            })
            .collect()
    }

    /// The daemon that advertised `name`: a reachable one before any other,
    /// then the smallest id.
    pub fn node_named(&self, name: &str) -> Option<NodeId> {
        let reach = self.bfs(self.me);
        // A reachable daemon first (a restarted one's old advert may linger).
        self.nodes
            .iter()
            .filter(|(_, n)| &*n.name == name)
            .map(|(id, _)| (!reach.contains_key(id), *id))
            .min()
            .map(|(_, id)| id)
    }

    /// Like [`next_hops`](Self::next_hops) for a tag alone: filters and
    /// scaling are taken as passing (for tests and reports).
    pub fn next_hops_for_tag(&mut self, origin: NodeId, tag: &str) -> Vec<NodeId> {
        if !self.nodes.contains_key(&origin) {
            return Vec::new();
        }
        self.tree(origin)
            .children
            .iter_mut()
            .filter_map(|(n, table)| (!table.matches(tag).is_empty()).then_some(*n))
            .collect()
    }

    /// The network's time reference: the reachable daemon with the
    /// smallest node id (every daemon picks the same one once adverts
    /// have spread).
    pub fn time_reference(&self) -> NodeId {
        self.bfs(self.me).keys().next().copied().unwrap_or(self.me)
    }

    /// This daemon's parent in the tree rooted at `root` (the neighbour on
    /// its shortest path there); `None` for the root itself or when `root`
    /// is unreachable.
    pub fn parent_toward(&self, root: NodeId) -> Option<NodeId> {
        if root == self.me {
            return None;
        }
        self.bfs(root).get(&self.me).copied()
    }

    /// Daemon `id`'s interest as compiled here, with its name, to keep
    /// while it is away ([`crate::node`]'s reliable hold): `None` when no
    /// advert of it is known or it wants nothing.
    pub fn kept_interest(&self, id: NodeId) -> Option<KeptInterest> {
        let n = self.nodes.get(&id)?;
        (!n.compiled.is_empty()).then(|| KeptInterest {
            name: n.name.clone(),
            compiled: n.compiled.clone(),
        })
    }

    /// The neighbour to pass an event published at `origin` and addressed
    /// to daemon `to` on (a `ReliableTo`): the child of this daemon, in
    /// `origin`'s shortest-path tree, on the path down to `to` — the same
    /// links the live events of `origin` take toward `to`, so the two keep
    /// their order. `None` when `to` or this daemon is not in that tree, or
    /// this daemon is not on the path (or is `to`). Costs a breadth-first
    /// walk: it is for events held while `to` was away, not the event path.
    pub fn next_hop_toward(&self, origin: NodeId, to: NodeId) -> Option<NodeId> {
        if to == self.me {
            return None;
        }
        let parent = self.bfs(origin);
        if !parent.contains_key(&self.me) {
            return None;
        }
        let mut at = to;
        // At most one step per daemon in the tree: the walk ends.
        for _ in 0..parent.len() {
            let p = *parent.get(&at)?;
            if p == self.me {
                return Some(at);
            }
            if p == at {
                // The root, and this daemon was not on the way.
                return None;
            }
            at = p;
        }
        None
    }

    /// Whether a daemon reachable from here other than `id` advertises
    /// `name` (so `id` was restarted under a new id: superseded).
    pub fn superseded(&self, id: NodeId, name: &str) -> bool {
        self.bfs(self.me)
            .keys()
            .any(|r| *r != id && self.nodes.get(r).is_some_and(|n| &*n.name == name))
    }

    /// Whether any daemon other than this one has interest matching `tag`
    /// (for counting events received that nobody here or beyond wanted).
    pub fn wanted_locally(&self, event: &EventRef<'_>) -> bool {
        self.nodes[&self.me].compiled.iter().any(|c| {
            c.pattern.matches(event.tag) && c.filter.as_ref().is_none_or(|f| f.matches(event))
        })
    }

    /// Each known daemon: id, name, advert version, neighbours and interest
    /// count, sorted by id.
    pub fn nodes(&self) -> Vec<(NodeId, String, u64, Vec<NodeId>, usize)> {
        let mut v: Vec<_> = self
            .nodes
            .iter()
            .map(|(id, n)| {
                (
                    *id,
                    n.name.to_string(),
                    n.version,
                    n.neighbors.clone(),
                    n.interest.len(),
                )
            })
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }
}

/// A daemon's interest as this daemon compiled it from its advert, kept
/// while the daemon is unreachable ([`Topology::kept_interest`]): which
/// events it wanted.
#[derive(Debug, Clone)]
pub struct KeptInterest {
    name: Arc<str>,
    compiled: CompiledInterest,
}

impl KeptInterest {
    /// The name the daemon advertised.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the daemon wants `event` published here: a pattern matches
    /// and its filter passes; a scale whose proxy is at the publisher (here)
    /// passes only its 1-in-n events (a proxy elsewhere: every event).
    pub fn matches(&self, event: &EventRef<'_>) -> bool {
        self.compiled.iter().any(|c| {
            c.pattern.matches(event.tag)
                && c.filter.as_ref().is_none_or(|f| f.matches(event))
                && (c.proxy != ProxyAt::Publisher
                    || event.seq.is_multiple_of(u64::from(c.scale.max(1))))
        })
    }
}

/// Most clock samples kept (NTP's clock filter keeps 8).
pub const CLOCK_SAMPLES: usize = 8;
/// A correction larger than this (ns) is stepped; smaller ones are slewed.
pub const STEP_NS: i64 = 10_000_000;
/// Most a slewed correction moves network time per sample (ns).
pub const SLEW_NS: i64 = 500_000;
/// The largest frequency error believed, parts per billion (±500 ppm).
pub const MAX_FREQ_PPB: i64 = 500_000;

/// One clock sample: when it was taken (local ns), its round trip, and the
/// offset it measured (the parent's network time minus our clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    at: u64,
    rtt: u64,
    offset: i64,
}

/// The network clock (Narada §3, NTP-style), sans-I/O: this daemon's offset
/// to the network's reference time, from samples of its parent's network
/// time (NTP's four timestamps, reduced to a round trip and an offset by
/// the caller). Of the last [`CLOCK_SAMPLES`] the one with the shortest
/// round trip is trusted most (the least queueing); the frequency error of
/// the local clock is the least-squares slope of the samples' offsets over
/// time, so the offset is predicted between samples and an old best sample
/// is carried forward by the drift since. A correction over [`STEP_NS`] is
/// stepped; a smaller one moves network time by at most [`SLEW_NS`] per
/// sample. Local time is an argument (ns): no clock is read here.
#[derive(Debug, Clone, Default)]
pub struct NetClock {
    offset: i64,
    freq_ppb: i64,
    set_at: u64,
    samples: VecDeque<Sample>,
    reference: NodeId,
    error: u64,
    synced: bool,
}

impl NetClock {
    /// The offset (network time minus local time) at local time `local`.
    pub fn offset_at(&self, local: u64) -> i64 {
        let age = local as i128 - self.set_at as i128;
        let drift = age * self.freq_ppb as i128 / 1_000_000_000;
        (self.offset as i128 + drift).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The network time at local time `local`.
    pub fn network_time(&self, local: u64) -> u64 {
        local.saturating_add_signed(self.offset_at(local))
    }

    /// How far off the offset may be: half the trusted sample's round trip.
    pub fn error(&self) -> u64 {
        self.error
    }

    /// The local clock's estimated frequency error, parts per billion.
    pub fn freq_ppb(&self) -> i64 {
        self.freq_ppb
    }

    /// Whether a sample was taken (or this daemon is the reference).
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The reference followed.
    pub fn reference(&self) -> NodeId {
        self.reference
    }

    /// Follows `reference` from now on; `me` is this daemon (the reference
    /// itself keeps offset 0). A new reference drops the old samples.
    pub fn follow(&mut self, reference: NodeId, me: NodeId) {
        if reference != self.reference {
            self.reference = reference;
            self.samples.clear();
            self.synced = reference == me;
            if self.synced {
                self.offset = 0;
                self.freq_ppb = 0;
                self.error = 0;
            }
        }
    }

    /// Takes a sample taken at local time `at`: round trip `rtt` and the
    /// measured `offset`. Samples with an absurd round trip (over 10 s) are
    /// ignored.
    pub fn sample(&mut self, at: u64, rtt: u64, offset: i64) {
        if rtt > 10_000_000_000 {
            return;
        }
        if self.samples.len() == CLOCK_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample { at, rtt, offset });
        let freq = self.slope().unwrap_or(self.freq_ppb);
        let Some(best) = self
            .samples
            .iter()
            .min_by_key(|s| (s.rtt, std::cmp::Reverse(s.at)))
            .copied()
        else {
            return;
        };
        let carried = (at as i128 - best.at as i128) * freq as i128 / 1_000_000_000;
        let target =
            (best.offset as i128 + carried).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let current = self.offset_at(at);
        let diff = target.saturating_sub(current);
        self.offset = if !self.synced || diff.abs() > STEP_NS {
            target
        } else {
            current + diff.clamp(-SLEW_NS, SLEW_NS)
        };
        self.set_at = at;
        self.freq_ppb = freq;
        self.error = best.rtt / 2;
        self.synced = true;
    }

    /// The least-squares slope of offset over time, in ppb, once the
    /// samples span at least 2 s; clamped to ±[`MAX_FREQ_PPB`].
    fn slope(&self) -> Option<i64> {
        let n = self.samples.len();
        let first = self.samples.front()?.at;
        let last = self.samples.back()?.at;
        if n < 3 || last.saturating_sub(first) < 2_000_000_000 {
            return None;
        }
        let xs: Vec<f64> = self.samples.iter().map(|s| (s.at - first) as f64).collect();
        let ys: Vec<f64> = self.samples.iter().map(|s| s.offset as f64).collect();
        let (mx, my) = (
            xs.iter().sum::<f64>() / n as f64,
            ys.iter().sum::<f64>() / n as f64,
        );
        let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
        let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
        if sxx <= 0.0 {
            return None;
        }
        let ppb = (sxy / sxx * 1e9).clamp(-(MAX_FREQ_PPB as f64), MAX_FREQ_PPB as f64);
        Some(ppb as i64)
    }
}

/// Whether `n`'s path to the root (in `parent`) passes through `anc`.
fn descends(parent: &BTreeMap<NodeId, NodeId>, mut n: NodeId, anc: NodeId) -> bool {
    loop {
        if n == anc {
            return true;
        }
        match parent.get(&n) {
            Some(&p) if p != n => n = p,
            _ => return false,
        }
    }
}

fn compile(
    origin: NodeId,
    interest: &[Interest],
    limits: &Limits,
) -> Result<CompiledInterest, FederationError> {
    interest
        .iter()
        .map(|i| {
            let bad = |why: String, what: &str| FederationError::BadInterest {
                origin,
                what: what.to_owned(),
                why,
            };
            let p = Pattern::parse(&i.pattern).map_err(|e| bad(e.to_string(), &i.pattern))?;
            let f = if i.filter.is_empty() {
                None
            } else {
                Some(Arc::new(
                    Filter::compile(&i.filter, &limits.filter)
                        .map_err(|e| bad(e.to_string(), &i.filter))?,
                ))
            };
            if i.scale == 0 {
                return Err(bad("a scale of 0".into(), &i.pattern));
            }
            Ok(Compiled {
                pattern: p,
                filter: f,
                scale: i.scale,
                proxy: i.proxy.clone(),
            })
        })
        .collect()
}

/// Aggregates interest: scaling at the subscriber's daemon is left out
/// (it changes nothing upstream), duplicates go, an entry whose pattern an
/// unfiltered, unscaled entry's pattern covers goes (`/a/x` under `/a/**`),
/// and the rest is sorted (so equal sets compare equal).
pub fn aggregate(mut interest: Vec<Interest>) -> Vec<Interest> {
    for i in &mut interest {
        if i.proxy == ProxyAt::Subscriber || i.scale <= 1 {
            i.scale = 1;
            i.proxy = ProxyAt::Subscriber;
        }
    }
    interest.sort();
    interest.dedup();
    let plain = |i: &Interest| i.filter.is_empty() && i.scale == 1;
    // The unfiltered patterns in a trie, asked once per entry which of them
    // cover it: O(n) for n entries (one `covers` per pair was O(n²), about
    // 64 million checks for 8,000 distinct subscriptions, redone at every
    // change of the local subscriptions).
    let mut unfiltered: TagTable<Box<str>> = TagTable::new(0);
    for (n, i) in interest.iter().filter(|i| plain(i)).enumerate() {
        if let Ok(p) = Pattern::parse(&i.pattern) {
            unfiltered.insert(n as u64, p, i.pattern.as_str().into());
        }
    }
    interest.retain(|i| {
        let Ok(p) = Pattern::parse(&i.pattern) else {
            return false;
        };
        !unfiltered.any_covering(&p, |u| **u != *p.as_str() || !plain(i))
    });
    interest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn want(p: &str) -> Interest {
        Interest::pattern(p)
    }

    /// A network of topologies wired by `edges`, adverts flooded until quiet.
    fn network(n: u64, edges: &[(u64, u64)], interest: &[(u64, &str)]) -> Vec<Topology> {
        let mut t: Vec<Topology> = (1..=n)
            .map(|i| Topology::new(i, &format!("d{i}"), Limits::default()))
            .collect();
        for i in 1..=n {
            let nb: Vec<u64> = edges
                .iter()
                .filter_map(|&(a, b)| {
                    if a == i {
                        Some(b)
                    } else if b == i {
                        Some(a)
                    } else {
                        None
                    }
                })
                .collect();
            t[(i - 1) as usize].set_neighbors(nb);
            let w: Vec<Interest> = interest
                .iter()
                .filter(|(d, _)| *d == i)
                .map(|(_, p)| want(p))
                .collect();
            t[(i - 1) as usize].set_interest(w);
        }
        // Flood: everyone's adverts to everyone (what the links converge to).
        let all: Vec<LinkFrame> = t.iter().map(|x| x.own_advert()).collect();
        for x in &mut t {
            for a in &all {
                let _ = x.apply(a.clone());
            }
        }
        t
    }

    /// Delivers an event from `origin` hop by hop; returns how many times
    /// each daemon received it (origin excluded) and the links crossed.
    fn flood(t: &mut [Topology], origin: u64, tag: &str) -> (HashMap<u64, u32>, u32) {
        let mut got = HashMap::new();
        let mut crossings = 0;
        let mut queue = VecDeque::from([(origin, 0u8)]);
        while let Some((at, hops)) = queue.pop_front() {
            assert!(hops <= MAX_HOPS, "loop");
            for next in t[(at - 1) as usize].next_hops_for_tag(origin, tag) {
                crossings += 1;
                *got.entry(next).or_insert(0) += 1;
                queue.push_back((next, hops + 1));
            }
        }
        (got, crossings)
    }

    #[test]
    fn a_chain_routes_end_to_end_and_only_where_wanted() {
        let mut t = network(3, &[(1, 2), (2, 3)], &[(3, "/a/**")]);
        let (got, _) = flood(&mut t, 1, "/a/x");
        assert_eq!(got.get(&3), Some(&1));
        assert_eq!(got.get(&2), Some(&1), "through the middle");
        let (got, crossings) = flood(&mut t, 1, "/b");
        assert!(got.is_empty());
        assert_eq!(crossings, 0);
    }

    #[test]
    fn a_ring_delivers_once_and_does_not_loop() {
        let edges: Vec<(u64, u64)> = (1..=5).map(|i| (i, i % 5 + 1)).collect();
        let interest: Vec<(u64, &str)> = (1..=5).map(|i| (i, "/r/**")).collect();
        let mut t = network(5, &edges, &interest);
        for origin in 1..=5 {
            let (got, crossings) = flood(&mut t, origin, "/r/x");
            for d in (1..=5).filter(|d| *d != origin) {
                assert_eq!(got.get(&d), Some(&1), "daemon {d} from {origin}");
            }
            assert_eq!(crossings, 4, "a tree over 5 nodes has 4 edges");
        }
    }

    #[test]
    fn an_uninterested_branch_gets_nothing() {
        // A star: 1 in the middle; only 4 wants it.
        let mut t = network(5, &[(1, 2), (1, 3), (1, 4), (1, 5)], &[(4, "/s")]);
        let (got, crossings) = flood(&mut t, 2, "/s");
        assert_eq!(crossings, 2, "2→1→4 only");
        assert_eq!(got.get(&4), Some(&1));
        assert!(!got.contains_key(&3) && !got.contains_key(&5));
    }

    #[test]
    fn a_cut_link_reroutes_and_a_dead_node_is_pruned() {
        let edges: Vec<(u64, u64)> = (1..=4).map(|i| (i, i % 4 + 1)).collect();
        let mut t = network(4, &edges, &[(3, "/c")]);
        // Cut 2–3: both ends drop it and flood.
        let a2 = t[1].set_neighbors(vec![1]).expect("changed");
        let a3 = t[2].set_neighbors(vec![4]).expect("changed");
        for x in t.iter_mut() {
            let _ = x.apply(a2.clone());
            let _ = x.apply(a3.clone());
        }
        let (got, _) = flood(&mut t, 2, "/c");
        assert_eq!(got.get(&3), Some(&1), "2→1→4→3");
        // 4 goes away: 1 drops it; 3 is unreachable from 1 now and pruned.
        let a1 = t[0].set_neighbors(vec![2]).expect("changed");
        t[0].apply(a1).ok();
        assert_eq!(t[0].prune(), 2);
        assert!(flood(&mut t, 1, "/c").0.is_empty());
    }

    #[test]
    fn a_killed_daemon_left_reachable_by_a_stale_advert_is_dropped_after_the_grace() {
        // A triangle 1–2–3; 3 is killed. 1 and 2 each close their link to
        // 3 and flood; 1 learns 2's new advert after its own link change.
        let mut t = network(3, &[(1, 2), (2, 3), (3, 1)], &[]);
        let a1 = t[0].set_neighbors(vec![2]).expect("changed");
        assert_eq!(
            t[0].prune(),
            0,
            "3 is still reachable through 2's old advert"
        );
        let a2 = t[1].set_neighbors(vec![1]).expect("changed");
        assert_eq!(t[1].apply(a1), Ok(Applied::Newer));
        assert_eq!(t[0].apply(a2), Ok(Applied::Newer));
        assert!(!t[0].reachable().contains(&3));
        assert_eq!(
            t[0].len(),
            3,
            "3's advert lingers: no own link changed since"
        );
        let t0 = 1_000_000_000;
        assert_eq!(t[0].expire_unreachable(t0, UNREACHABLE_GRACE_NS), 0);
        assert_eq!(
            t[0].expire_unreachable(t0 + UNREACHABLE_GRACE_NS - 1, UNREACHABLE_GRACE_NS),
            0,
            "kept within the grace"
        );
        assert_eq!(
            t[0].expire_unreachable(t0 + UNREACHABLE_GRACE_NS, UNREACHABLE_GRACE_NS),
            1
        );
        assert_eq!(t[0].name_of(3), None);
        assert_eq!(t[0].len(), 2);
    }

    #[test]
    fn a_daemon_declared_down_is_forgotten_at_once_only_if_unreachable() {
        let mut t = network(3, &[(1, 2), (2, 3), (3, 1)], &[]);
        assert!(!t[0].forget_if_unreachable(3), "3 is linked: kept");
        let a1 = t[0].set_neighbors(vec![2]).expect("changed");
        assert!(
            !t[0].forget_if_unreachable(3),
            "reachable through 2's advert"
        );
        let a2 = t[1].set_neighbors(vec![1]).expect("changed");
        t[1].apply(a1).expect("valid");
        t[0].apply(a2).expect("valid");
        assert!(t[0].forget_if_unreachable(3));
        assert_eq!(t[0].name_of(3), None);
        assert!(!t[0].forget_if_unreachable(1), "never itself");
    }

    #[test]
    fn an_advert_reachable_again_within_the_grace_is_kept() {
        let mut t = network(3, &[(1, 2), (2, 3)], &[]);
        // 2 drops its link to 3 for a moment: 3 is unreachable from 1.
        let a2 = t[1].set_neighbors(vec![1]).expect("changed");
        t[0].apply(a2).expect("valid");
        assert!(!t[0].reachable().contains(&3));
        assert_eq!(t[0].expire_unreachable(0, UNREACHABLE_GRACE_NS), 0);
        // The link is back before the grace ends; the clock restarts.
        let a2 = t[1].set_neighbors(vec![1, 3]).expect("changed");
        t[0].apply(a2).expect("valid");
        assert!(t[0].reachable().contains(&3));
        assert_eq!(
            t[0].expire_unreachable(UNREACHABLE_GRACE_NS / 2, UNREACHABLE_GRACE_NS),
            0
        );
        let a2 = t[1].set_neighbors(vec![1]).expect("changed");
        t[0].apply(a2).expect("valid");
        assert_eq!(
            t[0].expire_unreachable(UNREACHABLE_GRACE_NS + 1, UNREACHABLE_GRACE_NS),
            0,
            "unreachable again only since the last call"
        );
        assert_eq!(
            t[0].expire_unreachable(2 * UNREACHABLE_GRACE_NS + 1, UNREACHABLE_GRACE_NS),
            1
        );
    }

    #[test]
    fn filters_are_applied_where_the_event_is_published() {
        let mut a = Topology::new(1, "a", Limits::default());
        let mut b = Topology::new(2, "b", Limits::default());
        let _ = a.set_neighbors(vec![2]);
        b.apply(a.own_advert()).expect("valid");
        let _ = b.set_neighbors(vec![1]);
        let _ = b.set_interest(vec![Interest {
            filter: "$.level > 3".into(),
            ..Interest::pattern("/t")
        }]);
        a.apply(b.own_advert()).expect("valid");
        let mut e = tagwire_proto::Event::new("/t", &b""[..]);
        e.fields
            .push(("level".into(), tagwire_proto::Value::Int(1)));
        let enc = |e: &tagwire_proto::Event| {
            let mut b = bytes::BytesMut::new();
            e.encode(&mut b).expect("encodable");
            b
        };
        let low = enc(&e);
        e.fields[0].1 = tagwire_proto::Value::Int(9);
        let high = enc(&e);
        assert!(a
            .next_hops(1, &EventRef::parse(&low).expect("valid"))
            .is_empty());
        assert_eq!(
            a.next_hops(1, &EventRef::parse(&high).expect("valid")),
            vec![2]
        );
    }

    /// A network wired by `edges` whose daemon `sub` has `interest`.
    fn scaled_network(
        n: u64,
        edges: &[(u64, u64)],
        sub: u64,
        interest: Vec<Interest>,
    ) -> Vec<Topology> {
        let mut t = network(n, edges, &[]);
        let ad = t[(sub - 1) as usize]
            .set_interest(interest)
            .expect("changed");
        for x in &mut t {
            let _ = x.apply(ad.clone());
        }
        t
    }

    /// Which sequence numbers 1..=12 of `/a/x` from `origin` cross the
    /// link `from` → `to`, each event routed hop by hop from the origin.
    fn crossing(t: &mut [Topology], origin: u64, from: u64, to: u64) -> Vec<u64> {
        let mut seen = Vec::new();
        for seq in 1..=12u64 {
            let mut e = tagwire_proto::Event::new("/a/x", &b""[..]);
            e.header.seq = seq;
            let mut b = bytes::BytesMut::new();
            e.encode(&mut b).expect("encodable");
            let ev = EventRef::parse(&b).expect("valid");
            let mut queue = VecDeque::from([origin]);
            while let Some(at) = queue.pop_front() {
                for next in t[(at - 1) as usize].next_hops(origin, &ev) {
                    if (at, next) == (from, to) {
                        seen.push(seq);
                    }
                    queue.push_back(next);
                }
            }
        }
        seen
    }

    fn scaled(scale: u32, proxy: ProxyAt) -> Interest {
        Interest {
            scale,
            proxy,
            ..Interest::pattern("/a/**")
        }
    }

    #[test]
    fn links_are_the_pairs_both_ends_advertise_once_each() {
        let mut t = network(3, &[(1, 2), (2, 3)], &[]);
        assert_eq!(t[0].links(), vec![(1, 2), (2, 3)]);
        // A neighbour only one end lists is no link.
        let ad = t[2].set_neighbors(vec![1, 2]).expect("changed");
        let _ = t[0].apply(ad);
        assert_eq!(t[0].links(), vec![(1, 2), (2, 3)]);
    }

    #[test]
    fn a_proxy_at_the_publisher_sends_only_the_scaled_stream_over_every_link() {
        let mut t = scaled_network(3, &[(1, 2), (2, 3)], 3, vec![scaled(4, ProxyAt::Publisher)]);
        assert_eq!(crossing(&mut t, 1, 1, 2), vec![4, 8, 12]);
        assert_eq!(crossing(&mut t, 1, 2, 3), vec![4, 8, 12]);
    }

    #[test]
    fn a_proxy_at_a_named_node_scales_only_the_links_after_it() {
        let mut t = scaled_network(
            3,
            &[(1, 2), (2, 3)],
            3,
            vec![scaled(4, ProxyAt::Node("d2".into()))],
        );
        assert_eq!(crossing(&mut t, 1, 1, 2), (1..=12).collect::<Vec<_>>());
        assert_eq!(crossing(&mut t, 1, 2, 3), vec![4, 8, 12]);
    }

    #[test]
    fn a_proxy_at_the_subscriber_or_off_the_path_lets_every_event_cross() {
        for proxy in [
            ProxyAt::Subscriber,
            ProxyAt::Node("d4".into()),
            ProxyAt::Node("nowhere".into()),
        ] {
            let mut t = scaled_network(
                4,
                &[(1, 2), (2, 3), (1, 4)],
                3,
                vec![scaled(4, proxy.clone())],
            );
            assert_eq!(
                crossing(&mut t, 1, 2, 3),
                (1..=12).collect::<Vec<_>>(),
                "{proxy:?}"
            );
        }
    }

    #[test]
    fn several_scaled_subscribers_get_the_union_of_their_samples() {
        let mut t = scaled_network(
            2,
            &[(1, 2)],
            2,
            vec![scaled(4, ProxyAt::Publisher), scaled(6, ProxyAt::Publisher)],
        );
        assert_eq!(crossing(&mut t, 1, 1, 2), vec![4, 6, 8, 12]);
        // An unscaled subscriber beside them wants everything.
        let mut t = scaled_network(
            2,
            &[(1, 2)],
            2,
            vec![scaled(4, ProxyAt::Publisher), Interest::pattern("/a/x")],
        );
        assert_eq!(crossing(&mut t, 1, 1, 2), (1..=12).collect::<Vec<_>>());
    }

    #[test]
    fn aggregation_keeps_scaled_entries_unless_a_plain_one_covers_them() {
        let a = aggregate(vec![
            scaled(4, ProxyAt::Publisher),
            scaled(2, ProxyAt::Subscriber),
        ]);
        // Scaling at the subscriber is plain interest upstream, and covers the rest.
        assert_eq!(a, vec![Interest::pattern("/a/**")]);
        let a = aggregate(vec![
            scaled(4, ProxyAt::Publisher),
            scaled(2, ProxyAt::Publisher),
        ]);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn an_advert_compiled_beforehand_in_slices_is_put_in_force_as_compiled() {
        let filtered = |i: usize| Interest {
            filter: format!("$.k == {i}"),
            ..Interest::pattern(format!("/f/{i}"))
        };
        let advert = |version, interest: Vec<Interest>| LinkFrame::Advert {
            origin: 2,
            version,
            name: "b".into(),
            neighbors: vec![1],
            interest,
        };
        let interest: Vec<Interest> = (0..10).map(filtered).collect();
        let mut a = Topology::new(1, "a", Limits::default());
        assert!(a.is_newer(2, 1));
        assert!(!a.is_newer(1, 9), "our own advert is never compiled");
        let mut c = CompiledAdvert::default();
        for slice in interest.chunks(3) {
            c.compile_more(2, slice, &a.limits).expect("compiles");
        }
        assert_eq!(c.len(), 10);
        let applied = a.apply_compiled(advert(1, interest.clone()), Ok(c));
        assert!(matches!(applied, Ok(Applied::Newer)));
        assert!(!a.is_newer(2, 1));
        assert_eq!(a.nodes[&2].compiled.len(), 10);
        // A compile error found beforehand refuses the advert.
        let mut bad = interest.clone();
        bad[7].filter = "$.k ==".into();
        let mut c = CompiledAdvert::default();
        let e = c
            .compile_more(2, &bad, &a.limits)
            .expect_err("a bad filter");
        let refused = a.apply_compiled(advert(2, bad), Err(e));
        assert!(matches!(refused, Err(FederationError::BadInterest { .. })));
        assert_eq!(a.nodes[&2].version, 1);
        // One that does not match the advert's entries is compiled again.
        let applied = a.apply_compiled(advert(3, interest), Ok(CompiledAdvert::default()));
        assert!(matches!(applied, Ok(Applied::Newer)));
        assert_eq!(a.nodes[&2].compiled.len(), 10);
    }

    #[test]
    fn a_scale_of_zero_in_an_advert_is_refused() {
        let mut a = Topology::new(1, "a", Limits::default());
        let bad = LinkFrame::Advert {
            origin: 2,
            version: 1,
            name: "b".into(),
            neighbors: vec![1],
            interest: vec![scaled(0, ProxyAt::Publisher)],
        };
        let e = a.apply(bad).expect_err("scale 0");
        assert!(e.to_string().contains("scale of 0"), "{e}");
    }

    #[test]
    fn bad_adverts_are_refused_with_the_reason() {
        let mut a = Topology::new(
            1,
            "a",
            Limits {
                max_nodes: 2,
                max_interest: 2,
                ..Limits::default()
            },
        );
        let advert = |origin, interest: Vec<Interest>| LinkFrame::Advert {
            origin,
            version: 1,
            name: "x".into(),
            neighbors: vec![],
            interest,
        };
        let e = a.apply(advert(2, vec![want("/a"); 3])).unwrap_err();
        assert!(e.to_string().contains("max_interest"), "{e}");
        let e = a.apply(advert(2, vec![want("no-slash")])).unwrap_err();
        assert!(e.to_string().contains("no-slash"), "{e}");
        a.apply(advert(2, vec![want("/a")])).expect("fits");
        let e = a.apply(advert(3, vec![])).unwrap_err();
        assert!(e.to_string().contains("max_nodes"), "{e}");
        let e = a.apply(advert(1, vec![])).unwrap_err();
        assert!(matches!(e, FederationError::ClaimsToBeUs { .. }), "{e}");
        assert_eq!(a.apply(advert(2, vec![])).expect("ok"), Applied::Stale);
    }

    #[test]
    fn the_time_reference_is_the_smallest_reachable_id_and_parents_lead_to_it() {
        let t = network(4, &[(1, 2), (2, 3), (3, 4)], &[]);
        assert!(t.iter().all(|x| x.time_reference() == 1));
        assert_eq!(t[3].parent_toward(1), Some(3));
        assert_eq!(t[1].parent_toward(1), Some(1));
        assert_eq!(t[0].parent_toward(1), None);
    }

    /// A local clock `offset_ns` + `ppm` off true time, probed once a second
    /// through a link with `delay` each way and `jitter` of queueing on
    /// either leg; returns the largest |estimate − truth| after `warmup`.
    fn simulate(offset_ns: i64, ppm: i64, delay: u64, jitter: &[(u64, u64)], warmup: usize) -> i64 {
        let local =
            |t: u64| (t as i128 + offset_ns as i128 + t as i128 * ppm as i128 / 1_000_000) as u64;
        let mut c = NetClock::default();
        c.follow(1, 2);
        let mut worst = 0;
        for (k, (j1, j2)) in jitter.iter().enumerate() {
            let t = 2_000_000_000_000 + k as u64 * 1_000_000_000;
            // t1, t4 on our clock; t2 = t3 on the parent's (true time).
            let t1 = local(t);
            let t2 = t + delay + j1;
            let t4 = local(t2 + delay + j2);
            let rtt = t4 - t1;
            let off = ((t2 as i128 - t1 as i128) + (t2 as i128 - t4 as i128)) / 2;
            c.sample(t4, rtt, off as i64);
            if k >= warmup {
                // Half a second later, between samples.
                let truth = t2 + delay + j2 + 500_000_000;
                let err = c.network_time(local(truth)) as i64 - truth as i64;
                worst = worst.max(err.abs());
            }
        }
        worst
    }

    #[test]
    fn a_skewed_clock_is_corrected_to_within_the_delay_asymmetry() {
        // 19 s off and 150 ppm fast (Narada's Cardiff machine, and a drift).
        let flat = vec![(0, 0); 40];
        let worst = simulate(-19_235_000_000, 150, 200_000, &flat, 5);
        assert!(worst < 50_000, "worst {worst}");
        // Queueing on one leg only in every other sample: the min-delay
        // sample is trusted, so the error stays near the clean samples'.
        let noisy: Vec<(u64, u64)> = (0..40)
            .map(|k| if k % 2 == 0 { (0, 0) } else { (3_000_000, 0) })
            .collect();
        assert!(simulate(5_000_000, -80, 200_000, &noisy, 8) < 200_000);
    }

    #[test]
    fn without_samples_the_reference_keeps_offset_zero() {
        let mut c = NetClock::default();
        c.follow(7, 7);
        assert!(c.synced());
        assert_eq!(c.network_time(123), 123);
        let mut other = NetClock::default();
        other.follow(7, 9);
        assert!(!other.synced());
    }

    proptest! {
        /// Any sample sequence, however absurd, leaves a usable clock: no
        /// panic, no overflow, the frequency within its bound.
        #[test]
        fn garbage_samples_never_panic(samples in prop::collection::vec((any::<u64>(), any::<u64>(), any::<i64>()), 0..40)) {
            let mut c = NetClock::default();
            c.follow(1, 2);
            for (at, rtt, off) in samples {
                c.sample(at, rtt, off);
                let _ = c.network_time(at);
                prop_assert!(c.freq_ppb().abs() <= MAX_FREQ_PPB);
            }
        }

        /// With symmetric delays and any offset and drift within ±500 ppm,
        /// the estimate converges to within 0.1 ms.
        #[test]
        fn symmetric_links_converge(offset in -1_000_000_000_000i64..1_000_000_000_000, ppm in -400i64..400, delay in 10_000u64..5_000_000) {
            let flat = vec![(0, 0); 30];
            let worst = simulate(offset, ppm, delay, &flat, 10);
            prop_assert!(worst < 100_000, "worst error {worst} ns");
        }
    }

    #[test]
    fn events_of_unknown_origins_go_nowhere_and_cache_nothing() {
        let mut t = network(2, &[(1, 2)], &[(2, "/**")]);
        for origin in 1000..2000 {
            assert!(t[0].next_hops_for_tag(origin, "/x").is_empty());
        }
        assert!(t[0].trees.len() <= 2, "{} trees cached", t[0].trees.len());
    }

    #[test]
    fn aggregation_collapses_covered_patterns() {
        let agg = aggregate(vec![want("/a/x"), want("/a/**"), want("/a/x"), want("/b")]);
        assert_eq!(agg, vec![want("/a/**"), want("/b")]);
        let filtered = Interest {
            filter: "$.x > 1".into(),
            ..Interest::pattern("/a/y")
        };
        assert_eq!(
            aggregate(vec![filtered.clone(), want("/a/**")]),
            vec![want("/a/**")]
        );
        assert_eq!(aggregate(vec![filtered.clone()]), vec![filtered]);
    }

    proptest! {
        /// On any connected graph, every interested daemon gets an event
        /// exactly once, and nobody else gets it unless on the way.
        #[test]
        fn any_graph_delivers_exactly_once(
            n in 2u64..9,
            extra in prop::collection::vec((1u64..9, 1u64..9), 0..12),
            wanting in prop::collection::vec(any::<bool>(), 9),
            origin in 1u64..9,
        ) {
            // A spanning chain keeps it connected; extra edges add cycles.
            let mut edges: Vec<(u64, u64)> = (1..n).map(|i| (i, i + 1)).collect();
            edges.extend(extra.into_iter().filter(|(a, b)| a != b && *a <= n && *b <= n));
            let interest: Vec<(u64, &str)> =
                (1..=n).filter(|d| wanting[*d as usize]).map(|d| (d, "/p/**")).collect();
            let origin = (origin - 1) % n + 1;
            let mut t = network(n, &edges, &interest);
            let (got, _) = flood(&mut t, origin, "/p/q");
            for d in 1..=n {
                if d != origin && wanting[d as usize] {
                    prop_assert_eq!(got.get(&d), Some(&1));
                }
                prop_assert!(got.get(&d).copied().unwrap_or(0) <= 1);
            }
        }
    }

    /// The aggregation as first written: one `covers` per pair of entries.
    fn aggregate_pairwise(mut interest: Vec<Interest>) -> Vec<Interest> {
        for i in &mut interest {
            if i.proxy == ProxyAt::Subscriber || i.scale <= 1 {
                i.scale = 1;
                i.proxy = ProxyAt::Subscriber;
            }
        }
        interest.sort();
        interest.dedup();
        let plain = |i: &Interest| i.filter.is_empty() && i.scale == 1;
        let unfiltered: Vec<Pattern> = interest
            .iter()
            .filter(|i| plain(i))
            .filter_map(|i| Pattern::parse(&i.pattern).ok())
            .collect();
        interest.retain(|i| {
            let Ok(p) = Pattern::parse(&i.pattern) else {
                return false;
            };
            !unfiltered
                .iter()
                .any(|u| u.covers(&p) && (u.as_str() != p.as_str() || !plain(i)))
        });
        interest
    }

    fn interest_entry() -> impl Strategy<Value = Interest> {
        let level = prop_oneof![
            3 => prop_oneof![Just("a"), Just("b")].prop_map(str::to_owned),
            1 => Just("*".to_owned()),
            1 => Just("**".to_owned()),
        ];
        (
            prop::collection::vec(level, 1..4),
            any::<bool>(),
            prop_oneof![Just(1u32), Just(2u32)],
            any::<bool>(),
        )
            .prop_map(|(levels, filtered, scale, at_publisher)| Interest {
                filter: if filtered {
                    "$.x > 1".into()
                } else {
                    String::new()
                },
                scale,
                proxy: if at_publisher {
                    ProxyAt::Publisher
                } else {
                    ProxyAt::Subscriber
                },
                ..Interest::pattern(format!("/{}", levels.join("/")))
            })
    }

    proptest! {
        /// The trie-based aggregation keeps exactly what the pairwise one
        /// kept (issue 24 item 11: the pairwise one was O(n²)).
        #[test]
        fn aggregate_equals_pairwise_aggregation(
            interest in prop::collection::vec(interest_entry(), 0..16),
        ) {
            prop_assert_eq!(aggregate(interest.clone()), aggregate_pairwise(interest));
        }
    }

    /// Not a test: the cost of aggregating `TAGWIRE_AGGREGATE_N` (8,000)
    /// distinct `/s/{i}/**` patterns, pairwise and through the trie, for
    /// BENCHMARKS.md ("Distinct subscriptions"):
    /// `cargo test --release -p tagwire-core --lib aggregate_timing -- --ignored --nocapture`
    #[test]
    #[ignore = "a timing run for BENCHMARKS.md, not a test"]
    fn aggregate_timing() {
        let n: usize = std::env::var("TAGWIRE_AGGREGATE_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8_000);
        let interest: Vec<Interest> = (0..n)
            .map(|i| Interest::pattern(format!("/s/{i}/**")))
            .collect();
        let t = std::time::Instant::now();
        let trie = aggregate(interest.clone());
        let trie_took = t.elapsed();
        let t = std::time::Instant::now();
        let pairwise = aggregate_pairwise(interest);
        let pairwise_took = t.elapsed();
        assert_eq!(trie, pairwise);
        println!("aggregate {n} distinct patterns: pairwise {pairwise_took:?}, trie {trie_took:?}");
    }
}
