//! The placement problem every algorithm solves, precomputed from a
//! [`Topology`]: placement units (one shared proxy per tag, or one proxy per
//! subscriber), each unit's delay-feasible candidates (a proxy node plus
//! one route per leg) with their cost, and the capacity constraints that
//! can bind.
//!
//! Cost model (paper §2.4, unicast): subscriber i served through a proxy on
//! node j over routes p (publisher → j) and q (j → i) costs
//! `hops(p)·L + hops(q)·L'_i` bytes/s of bandwidth (the paper's
//! `K·(d_pub f + d_sub f')` with K the message size) and has delay
//! `δ = hops(p)·T + hops(q)·T' + latency(p) + latency(q)`. The candidate
//! routes of a leg are listed in [`crate::paths`]; dominated candidates are
//! removed (see [`PlacementProblem::new`]).

use std::fmt;
use std::str::FromStr;

use crate::deadline::{Deadline, Ticker};
use crate::error::PlaceError;
use crate::limits;
use crate::model::{ProxySharing, Topology};
use crate::paths::{Route, RouteScratch, RouteTree};

/// Relative slack of every capacity check, shared by all algorithms: a
/// load fits a capacity C when it is at most C·(1 + 1e-9). Relative only:
/// an absolute floor would let a tiny capacity be exceeded many times over.
pub const CAPACITY_TOLERANCE: f64 = 1e-9;

/// Relative tolerance under which two objective values count as equal
/// (max(|x|, 1)·1e-9); placements that tie within it are told apart by the
/// deterministic tie-break of [`crate::tiebreak`].
pub const VALUE_TOLERANCE: f64 = 1e-9;

/// Most rounds of [`PlacementProblem`]'s capacity pruning (each removes
/// at least one candidate or ends it).
pub const PRUNE_ROUNDS: usize = 64;

/// Relative slack of delay-bound checks (δ ≤ δʳ·(1 + 1e-12)).
pub const DELAY_TOLERANCE: f64 = 1e-12;

/// Whether `load` fits `capacity` (within [`CAPACITY_TOLERANCE`]).
pub fn fits_capacity(load: f64, capacity: f64) -> bool {
    load <= capacity * (1.0 + CAPACITY_TOLERANCE)
}

/// The absolute slack [`VALUE_TOLERANCE`] allows around the value `x`.
pub fn value_slack(x: f64) -> f64 {
    VALUE_TOLERANCE * x.abs().max(1.0)
}

fn within_bound(delay: f64, bound: Option<f64>) -> bool {
    bound.map_or(true, |b| delay <= b * (1.0 + DELAY_TOLERANCE))
}

/// What to minimise (the paper's three cost functions, §2.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Objective {
    /// Total network bandwidth, bytes/s summed over links (the default).
    #[default]
    Bandwidth,
    /// Total CPU units/s summed over nodes.
    Cpu,
    /// Bandwidth + weight × CPU.
    Mixed(f64),
}

impl Objective {
    /// The objective value of something with this bandwidth and CPU.
    pub fn value(&self, bandwidth: f64, cpu: f64) -> f64 {
        match *self {
            Objective::Bandwidth => bandwidth,
            Objective::Cpu => cpu,
            Objective::Mixed(w) => bandwidth + w * cpu,
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Objective::Bandwidth => f.write_str("bandwidth"),
            Objective::Cpu => f.write_str("cpu"),
            Objective::Mixed(w) => write!(f, "mixed:{w}"),
        }
    }
}

impl FromStr for Objective {
    type Err = PlaceError;
    fn from_str(s: &str) -> Result<Self, PlaceError> {
        let bad = || PlaceError::InvalidObjective {
            value: s.to_owned(),
        };
        match s {
            "bandwidth" => Ok(Objective::Bandwidth),
            "cpu" => Ok(Objective::Cpu),
            _ => {
                let w = s.strip_prefix("mixed:").ok_or_else(bad)?;
                let w: f64 = w.trim().parse().map_err(|_| bad())?;
                if w.is_finite() && w >= 0.0 {
                    Ok(Objective::Mixed(w))
                } else {
                    Err(bad())
                }
            }
        }
    }
}

/// A set of subscribers of one tag that share one proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// Tag index.
    pub tag: usize,
    /// Subscriber indices within the tag.
    pub subscribers: Vec<usize>,
}

/// Names of a candidate's costs in [`PlacementProblem::objective_values`]'s
/// errors: bandwidth, CPU, objective value.
const COST_NAMES: [&str; 3] = ["bandwidth", "CPU", "objective"];

/// A proxy node and one route per leg that meet every delay bound of a
/// unit, with their costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Node index.
    pub node: usize,
    /// Bandwidth (bytes/s over all links) of the unit's channels via this node.
    pub bandwidth: f64,
    /// CPU (units/s over all nodes) of the unit's channels via this node.
    pub cpu: f64,
}

/// One row of the Appendix A table: a unit's delays and costs at one node
/// over one choice of routes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEvaluation {
    /// Node index j.
    pub node: usize,
    /// d_pub(j): hops from the publisher.
    pub hops_from_publisher: u32,
    /// d_sub(i,j) for each subscriber of the unit.
    pub hops_to_subscriber: Vec<u32>,
    /// δ(i,j) in ms for each subscriber of the unit.
    pub delays_ms: Vec<f64>,
    /// Bandwidth cost Σ_i cost(i,j) in bytes/s (TotalCost_j).
    pub bandwidth: f64,
    /// CPU cost in units/s.
    pub cpu: f64,
    /// Whether every δ(i,j) is within its bound.
    pub feasible: bool,
    /// Links publisher → proxy.
    pub route_from_publisher: Vec<usize>,
    /// Links proxy → subscriber, for each subscriber of the unit.
    pub routes_to_subscriber: Vec<Vec<usize>>,
}

/// A resource whose capacity can be exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A link's bandwidth.
    Link(usize),
    /// A node's CPU.
    Node(usize),
}

/// A capacity constraint that can bind: Σ load ≤ capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityRow {
    /// The resource.
    pub resource: Resource,
    /// Its capacity.
    pub capacity: f64,
}

/// Scratch space to accumulate a candidate's loads, indexed by resource id
/// (links first, then nodes).
struct LoadScratch {
    load: Vec<f64>,
    touched: Vec<usize>,
}

/// What the build's node-major loop reuses at each node: each route tree's
/// routes to the node (computed on first use, shared by the units that use
/// the tree), the route search's buffers and the load accumulator.
struct NodeScratch {
    routes: Vec<Option<Vec<Route>>>,
    search: RouteScratch,
    loads: LoadScratch,
}

impl NodeScratch {
    /// Forgets the previous node's routes.
    fn clear(&mut self) {
        self.routes.iter_mut().for_each(|r| *r = None);
    }
}

impl LoadScratch {
    fn new(resources: usize) -> Self {
        LoadScratch {
            load: vec![0.0; resources],
            touched: Vec::new(),
        }
    }
    fn add(&mut self, r: usize, v: f64) {
        if v == 0.0 {
            return;
        }
        if self.load[r] == 0.0 {
            self.touched.push(r);
        }
        self.load[r] += v;
    }
    /// The accumulated loads as sorted (resource, load) pairs; clears.
    fn take(&mut self, keep: impl Fn(usize) -> bool) -> Vec<(u32, f64)> {
        let mut out: Vec<(u32, f64)> = self
            .touched
            .iter()
            .filter(|&&r| keep(r))
            .map(|&r| (r as u32, self.load[r]))
            .collect();
        out.sort_unstable_by_key(|&(r, _)| r);
        for &r in &self.touched {
            self.load[r] = 0.0;
        }
        self.touched.clear();
        out
    }
}

/// One candidate being built: costs, routes (publisher leg first), loads
/// on capacitated resources.
struct Column {
    cand: Candidate,
    legs: Vec<Route>,
    loads: Vec<(u32, f64)>,
}

/// A precomputed placement problem; build once, solve with any objective.
#[derive(Debug, Clone)]
pub struct PlacementProblem<'t> {
    topo: &'t Topology,
    units: Vec<Unit>,
    trees: Vec<RouteTree>,
    /// Tree index of each tag's publisher.
    pub_tree: Vec<usize>,
    /// Tree index of each subscriber, per tag.
    sub_tree: Vec<Vec<usize>>,
    candidates: Vec<Vec<Candidate>>,
    /// Per unit, per candidate: its routes, publisher leg first.
    routes: Vec<Vec<Vec<Route>>>,
    rows: Vec<CapacityRow>,
    /// Per unit, per candidate: (row, load) for every row it loads.
    cand_loads: Vec<Vec<Vec<(u32, f64)>>>,
    /// Delay-feasible candidates before dominated ones were removed.
    generated: usize,
    /// (unit, node) pairs whose route combinations were not all
    /// enumerated (more than [`BuildOptions::max_route_combos`]).
    truncated: usize,
    /// The route-combination cap this problem was built with.
    max_route_combos: usize,
    /// Candidates removed because no placement that fits the capacities
    /// can contain them (see [`PlacementProblem::prune_capacity_infeasible`]).
    pruned: usize,
    /// Set when the pruning proved that no placement fits: the capacity
    /// row (resource name) that showed it.
    proven_infeasible: Option<String>,
}

/// How [`PlacementProblem::build`] builds a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildOptions {
    /// Most route combinations per (unit, proxy node); beyond it, the
    /// default combination and single-leg deviations only, and the problem
    /// says so ([`PlacementProblem::truncated_route_combos`]).
    pub max_route_combos: usize,
    /// Most candidates generated in all; beyond it the build fails with
    /// [`PlaceError::LimitExceeded`] (bounds memory when the cap is raised).
    pub max_candidates: usize,
    /// Stop building at this deadline with [`PlaceError::TimeLimit`].
    pub deadline: Deadline,
    /// Remove candidates that no placement fitting the capacities can
    /// contain (exact; see [`PlacementProblem::pruned_candidates`]). On by
    /// default; off only to check that it changes no answer.
    pub prune: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            max_route_combos: limits::MAX_ROUTE_COMBOS,
            max_candidates: limits::MAX_CANDIDATES,
            deadline: Deadline::none(),
            prune: true,
        }
    }
}

impl<'t> PlacementProblem<'t> {
    /// Builds the problem: routes, units, candidates and binding capacity
    /// rows. Fails if some unit has no node meeting its delay bounds, or a
    /// delay overflows.
    ///
    /// Candidates of a unit: every node j and every combination of one
    /// candidate route per leg (at most [`limits::MAX_ROUTE_COMBOS`] per
    /// node) that meets all the unit's delay bounds, in node order. Other
    /// fewest-hop routes are only tried for legs whose default route
    /// crosses a link or node with a capacity. Then dominated candidates
    /// are dropped, which never changes the optimum: one whose bandwidth,
    /// CPU and load on every capacity that can bind are all at least those
    /// of another candidate of the same unit on the same node (or, when a
    /// capacity can bind, of one that loads no capacity at all), and that is
    /// costlier or comes later.
    pub fn new(topo: &'t Topology) -> Result<Self, PlaceError> {
        Self::build(topo, BuildOptions::default())
    }

    /// [`PlacementProblem::new`] with a route-combination cap, a candidate
    /// limit and a deadline (checked between route trees and every few
    /// (unit, node) pairs).
    pub fn build(topo: &'t Topology, options: BuildOptions) -> Result<Self, PlaceError> {
        let out_of_time = |stage: &'static str| PlaceError::TimeLimit {
            seconds: options.deadline.limit_secs(),
            stage,
        };
        let mut units = Vec::new();
        for (t, tag) in topo.tags.iter().enumerate() {
            match tag.proxy {
                ProxySharing::Shared => units.push(Unit {
                    tag: t,
                    subscribers: (0..tag.subscribers.len()).collect(),
                }),
                ProxySharing::PerSubscriber => {
                    units.extend((0..tag.subscribers.len()).map(|s| Unit {
                        tag: t,
                        subscribers: vec![s],
                    }))
                }
            }
        }
        let n = topo.nodes.len() as u64;
        let evaluations = units.len() as u64 * n;
        if evaluations > limits::MAX_EVALUATIONS {
            return Err(PlaceError::LimitExceeded {
                what: "placement units × nodes",
                value: evaluations,
                max: limits::MAX_EVALUATIONS,
            });
        }

        // One route tree per distinct publisher/subscriber node.
        let mut tree_of_node: Vec<Option<usize>> = vec![None; topo.nodes.len()];
        let mut roots = Vec::new();
        let mut tree_for = |node: usize, roots: &mut Vec<usize>| -> usize {
            *tree_of_node[node].get_or_insert_with(|| {
                roots.push(node);
                roots.len() - 1
            })
        };
        let mut pub_tree = Vec::with_capacity(topo.tags.len());
        let mut sub_tree = Vec::with_capacity(topo.tags.len());
        for tag in &topo.tags {
            pub_tree.push(tree_for(tag.publisher, &mut roots));
            sub_tree.push(
                tag.subscribers
                    .iter()
                    .map(|s| tree_for(s.node, &mut roots))
                    .collect::<Vec<_>>(),
            );
        }
        let entries = roots.len() as u64 * n;
        if entries > limits::MAX_TREE_ENTRIES {
            return Err(PlaceError::LimitExceeded {
                what: "route table entries (distinct endpoint nodes × nodes)",
                value: entries,
                max: limits::MAX_TREE_ENTRIES,
            });
        }
        let mut trees = Vec::with_capacity(roots.len());
        for &r in &roots {
            if options.deadline.expired() {
                return Err(out_of_time("computing routes"));
            }
            trees.push(RouteTree::new(topo, r));
        }

        let mut problem = PlacementProblem {
            topo,
            units,
            trees,
            pub_tree,
            sub_tree,
            candidates: Vec::new(),
            routes: Vec::new(),
            rows: Vec::new(),
            cand_loads: Vec::new(),
            generated: 0,
            truncated: 0,
            max_route_combos: options.max_route_combos.max(1),
            pruned: 0,
            proven_infeasible: None,
        };

        let nl = topo.links.len();
        let capped = |r: usize| {
            if r < nl {
                topo.links[r].bandwidth.is_some()
            } else {
                topo.nodes[r - nl].cpu.is_some()
            }
        };
        let any_capacity = (0..nl + topo.nodes.len()).any(capped);
        // Appendix A's loop, over routes too: every node j for every unit.
        // Node-major, so that each route tree's routes to j are computed
        // once for all the units that share the tree (a tag's publisher,
        // a subscriber in several units), not once per unit.
        let mut columns: Vec<Vec<Column>> = problem.units.iter().map(|_| Vec::new()).collect();
        let mut scratch = NodeScratch {
            routes: vec![None; problem.trees.len()],
            search: RouteScratch::default(),
            loads: LoadScratch::new(nl + topo.nodes.len()),
        };
        let mut ticker = Ticker::new(options.deadline, 16);
        let mut total = 0usize;
        for j in 0..topo.nodes.len() {
            scratch.clear();
            for (u, cols) in columns.iter_mut().enumerate() {
                if ticker.expired() {
                    return Err(out_of_time("evaluating candidate proxy nodes"));
                }
                let before = cols.len();
                let truncated =
                    problem.columns_at(u, j, any_capacity, &capped, &mut scratch, cols)?;
                problem.truncated += usize::from(truncated);
                total += cols.len() - before;
                if total > options.max_candidates {
                    return Err(PlaceError::LimitExceeded {
                        what: "candidates (proxy node and routes per unit)",
                        value: total as u64,
                        max: options.max_candidates as u64,
                    });
                }
            }
        }
        if let Some(u) = columns.iter().position(Vec::is_empty) {
            return Err(problem.delay_infeasibility(u));
        }
        problem.generated = columns.iter().map(Vec::len).sum();
        problem.find_binding_rows(columns);
        if options.prune {
            problem.prune_capacity_infeasible(options.deadline);
        }
        Ok(problem)
    }

    /// Whether a leg's default route crosses a link or (inner) node with a
    /// capacity, so that other fewest-hop routes may matter.
    fn crosses_capacity(&self, tree: usize, j: usize, capped: &dyn Fn(usize) -> bool) -> bool {
        let nl = self.topo.links.len();
        let root = self.trees[tree].root();
        let mut hit = false;
        self.trees[tree].for_each_default_link(j, |l| {
            let [a, b] = self.topo.links[l].ends;
            hit |= capped(l) || (a != root && capped(nl + a)) || (b != root && capped(nl + b));
        });
        hit
    }

    /// Appends unit `u`'s candidates with the proxy on node `j`; true when
    /// not every route combination was enumerated. `scratch` caches each
    /// route tree's routes to `j` (filled here on first use).
    fn columns_at(
        &self,
        u: usize,
        j: usize,
        any_capacity: bool,
        capped: &dyn Fn(usize) -> bool,
        scratch: &mut NodeScratch,
        out: &mut Vec<Column>,
    ) -> Result<bool, PlaceError> {
        let topo = self.topo;
        let unit = &self.units[u];
        let tag = &topo.tags[unit.tag];
        let max = limits::MAX_ROUTES_PER_LEG;
        let pt = self.pub_tree[unit.tag];
        let alt = |t: usize| any_capacity && self.crosses_capacity(t, j, capped);
        let sub_trees = unit.subscribers.iter().map(|&s| self.sub_tree[unit.tag][s]);
        for t in std::iter::once(pt).chain(sub_trees.clone()) {
            if scratch.routes[t].is_none() {
                let found = self.trees[t].routes(topo, j, alt(t), max, &mut scratch.search);
                scratch.routes[t] = Some(found);
            }
        }
        let NodeScratch {
            routes: cached,
            loads: acc,
            ..
        } = scratch;
        let routes = |t: usize| cached[t].as_deref().unwrap_or(&[]);
        let pub_routes = routes(pt);
        let sub_routes: Vec<&[Route]> = sub_trees.map(routes).collect();
        let mut budget = self.max_route_combos;
        let mut truncated = false;
        for p in pub_routes {
            if budget == 0 {
                // Publisher routes left untried.
                truncated = true;
                break;
            }
            let pub_delay = f64::from(p.hops) * tag.period_ms + p.latency_ms;
            // Feasible routes of each subscriber given p.
            let mut feasible: Vec<Vec<usize>> = Vec::with_capacity(sub_routes.len());
            for (pos, &s) in unit.subscribers.iter().enumerate() {
                let sub = &tag.subscribers[s];
                let ok: Vec<usize> = sub_routes[pos]
                    .iter()
                    .enumerate()
                    .filter(|(_, q)| {
                        let d = pub_delay + f64::from(q.hops) * sub.period_ms + q.latency_ms;
                        within_bound(d, sub.max_delay_ms)
                    })
                    .map(|(k, _)| k)
                    .collect();
                if ok.is_empty() {
                    break;
                }
                feasible.push(ok);
            }
            if feasible.len() < sub_routes.len() {
                continue;
            }
            let product = feasible
                .iter()
                .try_fold(1usize, |acc, f| acc.checked_mul(f.len()))
                .unwrap_or(usize::MAX);
            let mut combos: Vec<Vec<usize>> = Vec::new();
            if product <= budget {
                // Every combination, the first subscriber's route slowest.
                let mut idx = vec![0usize; feasible.len()];
                'all: loop {
                    combos.push(idx.iter().zip(&feasible).map(|(&i, f)| f[i]).collect());
                    let mut d = feasible.len();
                    loop {
                        if d == 0 {
                            break 'all;
                        }
                        d -= 1;
                        idx[d] += 1;
                        if idx[d] < feasible[d].len() {
                            break;
                        }
                        idx[d] = 0;
                    }
                }
            } else {
                truncated = true;
                let base: Vec<usize> = feasible.iter().map(|f| f[0]).collect();
                combos.push(base.clone());
                'dev: for (pos, f) in feasible.iter().enumerate() {
                    for &q in &f[1..] {
                        if combos.len() >= budget {
                            break 'dev;
                        }
                        let mut c = base.clone();
                        c[pos] = q;
                        combos.push(c);
                    }
                }
            }
            budget -= combos.len();
            for combo in combos {
                let mut legs = Vec::with_capacity(1 + combo.len());
                legs.push(p.clone());
                legs.extend(
                    combo
                        .iter()
                        .enumerate()
                        .map(|(pos, &q)| sub_routes[pos][q].clone()),
                );
                let e = self.evaluate_legs(u, j, &legs);
                if let Some(pos) = e.delays_ms.iter().position(|d| !d.is_finite()) {
                    let sub = &tag.subscribers[unit.subscribers[pos]];
                    return Err(PlaceError::InvalidValue {
                        what: format!(
                            "the delay of subscriber {:?} of tag {:?} with its proxy on node {:?}",
                            sub.name, tag.name, topo.nodes[j].name
                        ),
                        value: e.delays_ms[pos],
                        requirement: "a finite number of ms (periods or latencies too large)",
                    });
                }
                self.accumulate(u, j, &legs, acc);
                let loads = acc.take(capped);
                out.push(Column {
                    cand: Candidate {
                        node: j,
                        bandwidth: e.bandwidth,
                        cpu: e.cpu,
                    },
                    legs,
                    loads,
                });
            }
        }
        Ok(truncated)
    }

    /// How many (unit, proxy node) pairs had more route combinations than
    /// the build's cap, so that only some were candidates. When non-zero,
    /// "no candidate combination fits the capacities" does not prove that
    /// no placement fits.
    pub fn truncated_route_combos(&self) -> usize {
        self.truncated
    }

    /// The route-combination cap this problem was built with.
    pub fn max_route_combos(&self) -> usize {
        self.max_route_combos
    }

    /// The topology.
    pub fn topology(&self) -> &'t Topology {
        self.topo
    }

    /// The placement units.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// Candidates of each unit (node and routes meeting its delay bounds,
    /// dominated ones removed), in node order.
    pub fn candidates(&self) -> &[Vec<Candidate>] {
        &self.candidates
    }

    /// Delay-feasible candidates generated, before dominated ones were
    /// removed.
    pub fn generated_candidates(&self) -> usize {
        self.generated
    }

    /// Capacity constraints that can bind (those that cannot are dropped:
    /// even the worst choice for every unit fits them).
    pub fn capacity_rows(&self) -> &[CapacityRow] {
        &self.rows
    }

    /// `(row, load)` pairs of unit `u` at its candidate `k`, by row.
    pub fn candidate_loads(&self, u: usize, k: usize) -> &[(u32, f64)] {
        &self.cand_loads[u][k]
    }

    /// Whether unit `u` at candidate `k` fits every capacity row on top of
    /// the partial `loads` (one per row): the searches' pruning test.
    pub fn candidate_fits(&self, u: usize, k: usize, loads: &[f64]) -> bool {
        self.cand_loads[u][k]
            .iter()
            .all(|&(r, x)| fits_capacity(loads[r as usize] + x, self.rows[r as usize].capacity))
    }

    /// Number of complete combinations of candidates (as f64: it overflows
    /// integers quickly). This is what a naive exhaustive search enumerates.
    pub fn combinations(&self) -> f64 {
        self.candidates.iter().map(|c| c.len() as f64).product()
    }

    /// Whether `choice` (a candidate index per unit) fits every capacity
    /// row (within [`CAPACITY_TOLERANCE`]).
    pub fn fits(&self, choice: &[usize]) -> bool {
        let mut load = vec![0.0; self.rows.len()];
        for (u, &k) in choice.iter().enumerate() {
            for &(r, x) in &self.cand_loads[u][k] {
                load[r as usize] += x;
            }
        }
        load.iter()
            .zip(&self.rows)
            .all(|(&l, r)| fits_capacity(l, r.capacity))
    }

    /// The objective value of every candidate, `[unit][candidate]`, for a
    /// solver. Fails if a candidate's bandwidth, CPU or objective value, or
    /// their sum over the costliest candidate of every unit, is not finite
    /// (rates, sizes or CPU costs so large that they overflow): no
    /// algorithm can compare such costs, and the MIP solver must not be
    /// given them. Finite sums also keep every capacity row's load finite.
    pub fn objective_values(&self, objective: Objective) -> Result<Vec<Vec<f64>>, PlaceError> {
        const REQUIREMENT: &str = "a finite number (message sizes, rates or CPU costs too large)";
        let mut values = Vec::with_capacity(self.candidates.len());
        let mut worst = [0.0f64; 3];
        for (u, cands) in self.candidates.iter().enumerate() {
            let mut vs = Vec::with_capacity(cands.len());
            let mut unit_worst = [0.0f64; 3];
            for c in cands {
                let v = objective.value(c.bandwidth, c.cpu);
                let costs = [c.bandwidth, c.cpu, v];
                if let Some(i) = costs.iter().position(|x| !x.is_finite()) {
                    return Err(PlaceError::InvalidValue {
                        what: format!(
                            "the {} cost of tag {:?} with its proxy on node {:?}",
                            COST_NAMES[i],
                            self.topo.tags[self.units[u].tag].name,
                            self.topo.nodes[c.node].name
                        ),
                        value: costs[i],
                        requirement: REQUIREMENT,
                    });
                }
                for (w, x) in unit_worst.iter_mut().zip(costs) {
                    *w = w.max(x);
                }
                vs.push(v);
            }
            for (w, x) in worst.iter_mut().zip(unit_worst) {
                *w += x;
            }
            values.push(vs);
        }
        if let Some(i) = worst.iter().position(|x| !x.is_finite()) {
            return Err(PlaceError::InvalidValue {
                what: format!(
                    "the total {} cost of the costliest placement",
                    COST_NAMES[i]
                ),
                value: worst[i],
                requirement: REQUIREMENT,
            });
        }
        Ok(values)
    }

    /// The Appendix A table row of unit `u` at node `j`: delays of all the
    /// unit's subscribers and its costs, over the routes of the unit's first
    /// candidate on `j` (the default routes when `j` is no candidate).
    pub fn evaluate(&self, u: usize, j: usize) -> NodeEvaluation {
        match self.candidates[u].iter().position(|c| c.node == j) {
            Some(k) => self.evaluate_candidate(u, k),
            None => {
                let unit = &self.units[u];
                let mut legs = Vec::with_capacity(1 + unit.subscribers.len());
                let default = |t: &RouteTree| Route {
                    hops: t.hops(j),
                    latency_ms: t.latency_ms(j),
                    links: {
                        let mut l = Vec::new();
                        t.for_each_default_link(j, |x| l.push(x as u32));
                        l
                    },
                };
                legs.push(default(&self.trees[self.pub_tree[unit.tag]]));
                for &s in &unit.subscribers {
                    legs.push(default(&self.trees[self.sub_tree[unit.tag][s]]));
                }
                self.evaluate_legs(u, j, &legs)
            }
        }
    }

    /// The evaluation of unit `u`'s candidate `k` (its node and routes).
    pub fn evaluate_candidate(&self, u: usize, k: usize) -> NodeEvaluation {
        self.evaluate_legs(u, self.candidates[u][k].node, &self.routes[u][k])
    }

    fn evaluate_legs(&self, u: usize, j: usize, legs: &[Route]) -> NodeEvaluation {
        let unit = &self.units[u];
        let tag = &self.topo.tags[unit.tag];
        let p = &legs[0];
        let d_pub = p.hops;
        let f = tag.rate();
        let l = tag.bandwidth();
        let mut hops_to_subscriber = Vec::with_capacity(unit.subscribers.len());
        let mut delays_ms = Vec::with_capacity(unit.subscribers.len());
        let mut bandwidth = 0.0;
        let mut cpu = 0.0;
        let mut feasible = true;
        for (pos, &s) in unit.subscribers.iter().enumerate() {
            let sub = &tag.subscribers[s];
            let q = &legs[1 + pos];
            let d_sub = q.hops;
            let delay = f64::from(d_pub) * tag.period_ms
                + f64::from(d_sub) * sub.period_ms
                + p.latency_ms
                + q.latency_ms;
            feasible &= within_bound(delay, sub.max_delay_ms);
            bandwidth += f64::from(d_pub) * l + f64::from(d_sub) * sub.bandwidth();
            // Every hop costs forward_cpu per message at both ends; the proxy
            // scales every input message.
            cpu += 2.0 * tag.forward_cpu * (f64::from(d_pub) * f + f64::from(d_sub) * sub.rate())
                + tag.scale_cpu * f;
            hops_to_subscriber.push(d_sub);
            delays_ms.push(delay);
        }
        let mut route_from_publisher: Vec<usize> = p.links.iter().map(|&x| x as usize).collect();
        route_from_publisher.reverse();
        NodeEvaluation {
            node: j,
            hops_from_publisher: d_pub,
            hops_to_subscriber,
            delays_ms,
            bandwidth,
            cpu,
            feasible,
            route_from_publisher,
            routes_to_subscriber: legs[1..]
                .iter()
                .map(|q| q.links.iter().map(|&x| x as usize).collect())
                .collect(),
        }
    }

    fn delay_infeasibility(&self, u: usize) -> PlaceError {
        let unit = &self.units[u];
        let tag = &self.topo.tags[unit.tag];
        let n = self.topo.nodes.len();
        let max = limits::MAX_ROUTES_PER_LEG;
        let best_leg = |t: usize, j: usize, period: f64| {
            self.trees[t]
                .routes(self.topo, j, false, max, &mut RouteScratch::default())
                .iter()
                .map(|r| f64::from(r.hops) * period + r.latency_ms)
                .fold(f64::INFINITY, f64::min)
        };
        // Least delay of every subscriber at every node (each leg on its
        // own best route): delays[j][pos].
        let pub_best: Vec<f64> = (0..n)
            .map(|j| best_leg(self.pub_tree[unit.tag], j, tag.period_ms))
            .collect();
        let delays: Vec<Vec<f64>> = (0..n)
            .map(|j| {
                unit.subscribers
                    .iter()
                    .map(|&s| {
                        let sub = &tag.subscribers[s];
                        pub_best[j] + best_leg(self.sub_tree[unit.tag][s], j, sub.period_ms)
                    })
                    .collect()
            })
            .collect();
        // A subscriber no node can serve alone?
        for (pos, &s) in unit.subscribers.iter().enumerate() {
            let sub = &tag.subscribers[s];
            let Some(bound) = sub.max_delay_ms else {
                continue;
            };
            let best = (0..n).min_by(|&a, &b| delays[a][pos].total_cmp(&delays[b][pos]));
            if let Some(best) = best {
                if !within_bound(delays[best][pos], Some(bound)) {
                    return PlaceError::DelayBoundUnsatisfiable {
                        tag: tag.name.clone(),
                        subscriber: sub.name.clone(),
                        bound_ms: bound,
                        best_node: self.topo.nodes[best].name.clone(),
                        best_delay_ms: delays[best][pos],
                    };
                }
            }
        }
        // Otherwise the subscribers of a shared proxy disagree: report the
        // node whose worst excess over a bound is smallest.
        let mut best: Option<(f64, usize, usize)> = None;
        for (j, d) in delays.iter().enumerate() {
            let (excess, pos) = worst_excess(d, unit, tag);
            if excess > 0.0 && best.map_or(true, |(b, _, _)| excess < b) {
                best = Some((excess, j, pos));
            }
        }
        match best {
            Some((_, node, pos)) => {
                let sub = &tag.subscribers[unit.subscribers[pos]];
                PlaceError::NoCommonProxyNode {
                    tag: tag.name.clone(),
                    best_node: self.topo.nodes[node].name.clone(),
                    subscriber: sub.name.clone(),
                    delay_ms: delays[node][pos],
                    bound_ms: sub.max_delay_ms.unwrap_or(f64::INFINITY),
                }
            }
            // Unreachable in practice: a unit with no candidate has a violation.
            None => PlaceError::CapacityInfeasible {
                binding_rows: 0,
                first: format!("tag {:?}", tag.name),
            },
        }
    }

    /// Accumulates unit `u`'s link (bytes/s) and node (CPU/s) loads, by
    /// resource id (links, then nodes), with its proxy on node `j` and the
    /// given routes.
    fn accumulate(&self, u: usize, j: usize, legs: &[Route], s: &mut LoadScratch) {
        let topo = self.topo;
        let nl = topo.links.len();
        let unit = &self.units[u];
        let tag = &topo.tags[unit.tag];
        let k = unit.subscribers.len() as f64;
        let pub_bw = tag.bandwidth() * k;
        let pub_cpu = tag.forward_cpu * tag.rate() * k;
        for &l in &legs[0].links {
            let [a, b] = topo.links[l as usize].ends;
            s.add(l as usize, pub_bw);
            s.add(nl + a, pub_cpu);
            s.add(nl + b, pub_cpu);
        }
        s.add(nl + j, tag.scale_cpu * tag.rate() * k);
        for (pos, &si) in unit.subscribers.iter().enumerate() {
            let sub = &tag.subscribers[si];
            let (bw, cpu) = (sub.bandwidth(), tag.forward_cpu * sub.rate());
            for &l in &legs[1 + pos].links {
                let [a, b] = topo.links[l as usize].ends;
                s.add(l as usize, bw);
                s.add(nl + a, cpu);
                s.add(nl + b, cpu);
            }
        }
    }

    /// Keeps only capacity rows that some combination could exceed,
    /// removes dominated candidates and records each candidate's load on
    /// the rows.
    fn find_binding_rows(&mut self, mut columns: Vec<Vec<Column>>) {
        let topo = self.topo;
        let nl = topo.links.len();
        let nr = nl + topo.nodes.len();
        let capacity = |r: usize| {
            if r < nl {
                topo.links[r].bandwidth
            } else {
                topo.nodes[r - nl].cpu
            }
        };
        let mut worst = vec![0.0f64; nr];
        let mut unit_worst = vec![0.0f64; nr];
        let mut touched = Vec::new();
        for cols in &columns {
            for c in cols {
                for &(r, x) in &c.loads {
                    let r = r as usize;
                    if unit_worst[r] == 0.0 {
                        touched.push(r);
                    }
                    unit_worst[r] = unit_worst[r].max(x);
                }
            }
            for r in touched.drain(..) {
                worst[r] += unit_worst[r];
                unit_worst[r] = 0.0;
            }
        }
        let mut row_of = vec![u32::MAX; nr];
        let mut rows = Vec::new();
        for r in 0..nr {
            if let Some(cap) = capacity(r) {
                if worst[r] > cap {
                    row_of[r] = rows.len() as u32;
                    rows.push(CapacityRow {
                        resource: if r < nl {
                            Resource::Link(r)
                        } else {
                            Resource::Node(r - nl)
                        },
                        capacity: cap,
                    });
                }
            }
        }
        for cols in &mut columns {
            for c in cols.iter_mut() {
                c.loads.retain(|&(r, _)| row_of[r as usize] != u32::MAX);
                for e in &mut c.loads {
                    e.0 = row_of[e.0 as usize];
                }
                c.loads.sort_unstable_by_key(|&(r, _)| r);
            }
        }
        let coupled = !rows.is_empty();
        self.rows = rows;
        self.candidates = Vec::with_capacity(columns.len());
        self.routes = Vec::with_capacity(columns.len());
        self.cand_loads = Vec::with_capacity(columns.len());
        for cols in columns {
            let keep = undominated(&cols, coupled);
            let mut cands = Vec::new();
            let mut routes = Vec::new();
            let mut loads = Vec::new();
            for (c, k) in cols.into_iter().zip(keep) {
                if k {
                    cands.push(c.cand);
                    routes.push(c.legs);
                    loads.push(c.loads);
                }
            }
            self.candidates.push(cands);
            self.routes.push(routes);
            self.cand_loads.push(loads);
        }
    }

    /// Removes candidates that no placement fitting the capacities can
    /// contain, by bound propagation (exact: the optimum and the set of
    /// feasible placements do not change). For each capacity row r, every
    /// unit must add at least its least load on r (`min_u(r)`), so unit u
    /// can take candidate k only if `load_uk(r) − min_u(r)` fits in the
    /// row's slack `capacity(r) − Σ_v min_v(r)`. Removing a candidate can
    /// raise a unit's least load, so this repeats until nothing changes (at
    /// most [`PRUNE_ROUNDS`] rounds, and never past `deadline`: stopping
    /// early only leaves candidates in). Rows that can no longer bind are
    /// dropped afterwards. On tight capacities (every resource near its
    /// load under one placement) this removes most candidates, which is
    /// what lets the searches find a placement at all (issue 24 item 10).
    ///
    /// If a row's slack is negative, or a unit would lose its last
    /// candidate, no placement fits: that is recorded
    /// ([`PlacementProblem::proven_infeasible`]) and the candidates are
    /// left as they are, so every algorithm still runs and agrees.
    fn prune_capacity_infeasible(&mut self, deadline: Deadline) {
        let nrows = self.rows.len();
        if nrows == 0 {
            return;
        }
        // Slack in the same relative tolerance as every capacity check,
        // plus as much again for rounding in the sums below.
        let caps: Vec<f64> = self
            .rows
            .iter()
            .map(|r| r.capacity * (1.0 + CAPACITY_TOLERANCE))
            .collect();
        let margin: Vec<f64> = self
            .rows
            .iter()
            .map(|r| r.capacity * CAPACITY_TOLERANCE)
            .collect();
        let mut count = vec![0usize; nrows];
        let mut least = vec![f64::INFINITY; nrows];
        let mut touched: Vec<usize> = Vec::new();
        // Per unit: (row, least load) for rows every candidate loads.
        let unit_least = |loads: &[Vec<(u32, f64)>],
                          count: &mut [usize],
                          least: &mut [f64],
                          touched: &mut Vec<usize>|
         -> Vec<(u32, f64)> {
            for ls in loads {
                for &(r, x) in ls {
                    let r = r as usize;
                    if count[r] == 0 {
                        touched.push(r);
                    }
                    count[r] += 1;
                    least[r] = least[r].min(x);
                }
            }
            let mut out: Vec<(u32, f64)> = touched
                .iter()
                .filter(|&&r| count[r] == loads.len())
                .map(|&r| (r as u32, least[r]))
                .collect();
            out.sort_unstable_by_key(|&(r, _)| r);
            for &r in touched.iter() {
                count[r] = 0;
                least[r] = f64::INFINITY;
            }
            touched.clear();
            out
        };
        for _ in 0..PRUNE_ROUNDS {
            if deadline.expired() {
                return;
            }
            let mins: Vec<Vec<(u32, f64)>> = self
                .cand_loads
                .iter()
                .map(|ls| unit_least(ls, &mut count, &mut least, &mut touched))
                .collect();
            let mut slack = caps.clone();
            for m in &mins {
                for &(r, x) in m {
                    slack[r as usize] -= x;
                }
            }
            if let Some(r) = (0..nrows).find(|&r| slack[r] < -margin[r]) {
                self.proven_infeasible = Some(self.resource_name(self.rows[r].resource));
                return;
            }
            let mut removed_any = false;
            for (u, m) in mins.iter().enumerate() {
                let least_on = |r: u32| {
                    m.binary_search_by_key(&r, |&(rr, _)| rr)
                        .map_or(0.0, |i| m[i].1)
                };
                let keep: Vec<Option<usize>> = self.cand_loads[u]
                    .iter()
                    .map(|ls| {
                        ls.iter().position(|&(r, x)| {
                            x - least_on(r) > slack[r as usize] + margin[r as usize]
                        })
                    })
                    .collect();
                if keep.iter().all(Option::is_none) {
                    continue;
                }
                if keep.iter().all(Option::is_some) {
                    // Nothing of this unit fits: name the row that ruled
                    // out its first candidate.
                    let (r, _) = self.cand_loads[u][0][keep[0].unwrap_or(0)];
                    self.proven_infeasible =
                        Some(self.resource_name(self.rows[r as usize].resource));
                    return;
                }
                let before = self.candidates[u].len();
                let mut it = keep.iter();
                self.candidates[u].retain(|_| it.next().is_some_and(Option::is_none));
                let mut it = keep.iter();
                self.routes[u].retain(|_| it.next().is_some_and(Option::is_none));
                let mut it = keep.iter();
                self.cand_loads[u].retain(|_| it.next().is_some_and(Option::is_none));
                self.pruned += before - self.candidates[u].len();
                removed_any = true;
            }
            if !removed_any {
                break;
            }
        }
        self.drop_rows_that_cannot_bind();
    }

    /// Drops capacity rows that even the most loading candidate of every
    /// unit fits (after pruning), renumbering the rest.
    fn drop_rows_that_cannot_bind(&mut self) {
        let mut worst = vec![0.0f64; self.rows.len()];
        for loads in &self.cand_loads {
            let mut unit_worst: Vec<(u32, f64)> = Vec::new();
            for ls in loads {
                for &(r, x) in ls {
                    match unit_worst.iter_mut().find(|(rr, _)| *rr == r) {
                        Some(e) => e.1 = e.1.max(x),
                        None => unit_worst.push((r, x)),
                    }
                }
            }
            for (r, x) in unit_worst {
                worst[r as usize] += x;
            }
        }
        let mut row_of = vec![u32::MAX; self.rows.len()];
        let mut rows = Vec::new();
        for (r, row) in self.rows.iter().enumerate() {
            if !fits_capacity(worst[r], row.capacity) {
                row_of[r] = rows.len() as u32;
                rows.push(*row);
            }
        }
        if rows.len() == self.rows.len() {
            return;
        }
        for loads in &mut self.cand_loads {
            for ls in loads {
                ls.retain(|&(r, _)| row_of[r as usize] != u32::MAX);
                for e in ls.iter_mut() {
                    e.0 = row_of[e.0 as usize];
                }
            }
        }
        self.rows = rows;
    }

    /// [`PlaceError::CapacityInfeasible`] when building proved that no
    /// placement fits (see [`PlacementProblem::proven_infeasible`]); every
    /// algorithm answers it before searching.
    pub fn infeasibility(&self) -> Option<PlaceError> {
        self.proven_infeasible
            .as_ref()
            .map(|first| PlaceError::CapacityInfeasible {
                binding_rows: self.rows.len(),
                first: first.clone(),
            })
    }

    /// Candidates removed by capacity pruning: no placement that fits the
    /// capacities can contain them.
    pub fn pruned_candidates(&self) -> usize {
        self.pruned
    }

    /// `Some(resource)` when building proved that no placement fits the
    /// capacities (the capacity that shows it, e.g. `link "a-b"`). Every
    /// algorithm then answers [`PlaceError::CapacityInfeasible`].
    pub fn proven_infeasible(&self) -> Option<&str> {
        self.proven_infeasible.as_deref()
    }

    /// Total link and node loads of a full assignment (`choice[u]` is a
    /// candidate index of unit `u`): `(link loads, node loads)`.
    pub fn total_loads(&self, choice: &[usize]) -> (Vec<f64>, Vec<f64>) {
        let nl = self.topo.links.len();
        let mut scratch = LoadScratch::new(nl + self.topo.nodes.len());
        let mut links = vec![0.0; nl];
        let mut nodes = vec![0.0; self.topo.nodes.len()];
        for (u, &k) in choice.iter().enumerate() {
            self.accumulate(
                u,
                self.candidates[u][k].node,
                &self.routes[u][k],
                &mut scratch,
            );
            for (r, x) in scratch.take(|_| true) {
                let r = r as usize;
                if r < nl {
                    links[r] += x;
                } else {
                    nodes[r - nl] += x;
                }
            }
        }
        (links, nodes)
    }

    /// Human name of a capacity row's resource, e.g. `link "a"`.
    pub fn resource_name(&self, r: Resource) -> String {
        match r {
            Resource::Link(l) => format!("link {:?}", self.topo.links[l].name),
            Resource::Node(n) => format!("node {:?} CPU", self.topo.nodes[n].name),
        }
    }
}

/// Whether sorted sparse loads `a` are ≤ `b` on every row.
fn loads_le(a: &[(u32, f64)], b: &[(u32, f64)]) -> bool {
    let mut j = 0;
    for &(r, x) in a {
        while j < b.len() && b[j].0 < r {
            j += 1;
        }
        if j == b.len() || b[j].0 != r || x > b[j].1 {
            return false;
        }
    }
    true
}

/// Whether column `a` (at index ia) dominates column `b` (at index ib):
/// no worse in bandwidth, CPU and every load, and strictly cheaper in
/// bandwidth or CPU or earlier.
fn dominates(a: &Column, ia: usize, b: &Column, ib: usize) -> bool {
    let (ca, cb) = (&a.cand, &b.cand);
    ca.bandwidth <= cb.bandwidth
        && ca.cpu <= cb.cpu
        && (ca.bandwidth < cb.bandwidth || ca.cpu < cb.cpu || ia < ib)
        && loads_le(&a.loads, &b.loads)
}

/// Which columns of one unit to keep: drop those dominated by a column on
/// the same node, and (when `coupled`) those dominated by a column that
/// loads no capacity row.
fn undominated(cols: &[Column], coupled: bool) -> Vec<bool> {
    let mut keep = vec![true; cols.len()];
    let mut start = 0;
    while start < cols.len() {
        let mut end = start;
        while end < cols.len() && cols[end].cand.node == cols[start].cand.node {
            end += 1;
        }
        for b in start..end {
            keep[b] =
                !(start..end).any(|a| a != b && keep[a] && dominates(&cols[a], a, &cols[b], b));
        }
        start = end;
    }
    if coupled {
        // Pareto set (bandwidth, CPU) of the load-free columns, then drop
        // everything one of them dominates.
        let free: Vec<usize> = (0..cols.len())
            .filter(|&k| keep[k] && cols[k].loads.is_empty())
            .collect();
        let front: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&b| {
                !free
                    .iter()
                    .any(|&a| a != b && dominates(&cols[a], a, &cols[b], b))
            })
            .collect();
        for b in 0..cols.len() {
            if keep[b]
                && front
                    .iter()
                    .any(|&a| a != b && dominates(&cols[a], a, &cols[b], b))
            {
                keep[b] = false;
            }
        }
    }
    keep
}

/// Largest excess of a delay over its bound at one node: (excess, position).
fn worst_excess(delays: &[f64], unit: &Unit, tag: &crate::model::Tag) -> (f64, usize) {
    let mut worst = (f64::NEG_INFINITY, 0);
    for (pos, &s) in unit.subscribers.iter().enumerate() {
        let bound = tag.subscribers[s].max_delay_ms.unwrap_or(f64::INFINITY);
        let excess = delays[pos] - bound;
        if excess > worst.0 {
            worst = (excess, pos);
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objectives_parse_and_print_round_trip() {
        for s in ["bandwidth", "cpu", "mixed:0.5", "mixed:0"] {
            let o: Objective = s.parse().expect("valid objective");
            assert_eq!(o.to_string(), s);
        }
        assert_eq!(
            "mixed:2".parse::<Objective>().ok(),
            Some(Objective::Mixed(2.0))
        );
    }

    #[test]
    fn bad_objectives_are_refused_with_the_text() {
        for s in [
            "",
            "bw",
            "mixed:",
            "mixed:x",
            "mixed:-1",
            "mixed:inf",
            "mixed:NaN",
        ] {
            match s.parse::<Objective>() {
                Err(PlaceError::InvalidObjective { value }) => assert_eq!(value, s),
                other => panic!("{s:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn mixed_objective_weights_cpu() {
        assert_eq!(Objective::Mixed(3.0).value(10.0, 2.0), 16.0);
        assert_eq!(Objective::Bandwidth.value(10.0, 2.0), 10.0);
        assert_eq!(Objective::Cpu.value(10.0, 2.0), 2.0);
    }
}
