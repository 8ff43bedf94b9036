//! The placement problem both algorithms solve, precomputed from a
//! [`Topology`]: placement units (one shared proxy per tag, or one proxy per
//! subscriber), each unit's delay-feasible candidate nodes with their cost,
//! and the capacity constraints that can bind.
//!
//! Cost model (paper §2.4, unicast): subscriber i served through a proxy on
//! node j costs `d_pub(j)·L + d_sub(i,j)·L'_i` bytes/s of bandwidth (the
//! paper's `K·(d_pub f + d_sub f')` with K the message size) and has delay
//! `δ(i,j) = d_pub(j)·T + d_sub(i,j)·T' (+ link latencies)`.

use std::fmt;
use std::str::FromStr;

use crate::error::PlaceError;
use crate::limits;
use crate::model::{ProxySharing, Topology};
use crate::paths::ShortestPathTree;

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

/// A node that meets every delay bound of a unit, with its costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Node index.
    pub node: usize,
    /// Bandwidth (bytes/s over all links) of the unit's channels via this node.
    pub bandwidth: f64,
    /// CPU (units/s over all nodes) of the unit's channels via this node.
    pub cpu: f64,
}

/// One row of the Appendix A table: a unit's delays and costs at one node.
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

/// Scratch space to accumulate a unit's loads at one candidate.
struct LoadScratch {
    link: Vec<f64>,
    node: Vec<f64>,
    touched_links: Vec<usize>,
    touched_nodes: Vec<usize>,
}

impl LoadScratch {
    fn new(topo: &Topology) -> Self {
        LoadScratch {
            link: vec![0.0; topo.links.len()],
            node: vec![0.0; topo.nodes.len()],
            touched_links: Vec::new(),
            touched_nodes: Vec::new(),
        }
    }
    fn add_link(&mut self, l: usize, v: f64) {
        if self.link[l] == 0.0 {
            self.touched_links.push(l);
        }
        self.link[l] += v;
    }
    fn add_node(&mut self, n: usize, v: f64) {
        if v == 0.0 {
            return;
        }
        if self.node[n] == 0.0 {
            self.touched_nodes.push(n);
        }
        self.node[n] += v;
    }
    fn clear(&mut self) {
        for &l in &self.touched_links {
            self.link[l] = 0.0;
        }
        for &n in &self.touched_nodes {
            self.node[n] = 0.0;
        }
        self.touched_links.clear();
        self.touched_nodes.clear();
    }
}

/// A precomputed placement problem; build once, solve with any objective.
#[derive(Debug, Clone)]
pub struct PlacementProblem<'t> {
    topo: &'t Topology,
    units: Vec<Unit>,
    trees: Vec<ShortestPathTree>,
    /// Tree index of each tag's publisher.
    pub_tree: Vec<usize>,
    /// Tree index of each subscriber, per tag.
    sub_tree: Vec<Vec<usize>>,
    candidates: Vec<Vec<Candidate>>,
    rows: Vec<CapacityRow>,
    /// Per unit, per candidate: (row, load) for every row it loads.
    cand_loads: Vec<Vec<Vec<(u32, f64)>>>,
}

impl<'t> PlacementProblem<'t> {
    /// Builds the problem: routes, units, candidates and binding capacity
    /// rows. Fails if some unit has no node meeting its delay bounds.
    pub fn new(topo: &'t Topology) -> Result<Self, PlaceError> {
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

        // One BFS tree per distinct publisher/subscriber node.
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
        let trees = roots
            .iter()
            .map(|&r| ShortestPathTree::new(topo, r))
            .collect();

        let mut problem = PlacementProblem {
            topo,
            units,
            trees,
            pub_tree,
            sub_tree,
            candidates: Vec::new(),
            rows: Vec::new(),
            cand_loads: Vec::new(),
        };

        // Appendix A's loop: every node j for every unit, keep the feasible.
        let mut candidates = Vec::with_capacity(problem.units.len());
        for u in 0..problem.units.len() {
            let mut cands = Vec::new();
            for j in 0..topo.nodes.len() {
                if let Some(c) = problem.candidate(u, j) {
                    cands.push(c);
                }
            }
            if cands.is_empty() {
                return Err(problem.delay_infeasibility(u));
            }
            candidates.push(cands);
        }
        problem.candidates = candidates;
        problem.find_binding_rows();
        Ok(problem)
    }

    /// The topology.
    pub fn topology(&self) -> &'t Topology {
        self.topo
    }

    /// The placement units.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// Delay-feasible candidates of each unit, in node order.
    pub fn candidates(&self) -> &[Vec<Candidate>] {
        &self.candidates
    }

    /// Capacity constraints that can bind (those that cannot are dropped:
    /// even the worst choice for every unit fits them).
    pub fn capacity_rows(&self) -> &[CapacityRow] {
        &self.rows
    }

    /// `(row, load)` pairs of unit `u` at its candidate `k`.
    pub fn candidate_loads(&self, u: usize, k: usize) -> &[(u32, f64)] {
        &self.cand_loads[u][k]
    }

    /// Number of complete combinations of candidates (as f64: it overflows
    /// integers quickly). This is what a naive exhaustive search enumerates.
    pub fn combinations(&self) -> f64 {
        self.candidates.iter().map(|c| c.len() as f64).product()
    }

    /// The objective value of every candidate, `[unit][candidate]`, for a
    /// solver. Fails if a candidate's bandwidth, CPU or objective value, or
    /// their sum over the costliest candidate of every unit, is not finite
    /// (rates, sizes or CPU costs so large that they overflow): neither
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
    /// unit's subscribers and its costs.
    pub fn evaluate(&self, u: usize, j: usize) -> NodeEvaluation {
        let unit = &self.units[u];
        let tag = &self.topo.tags[unit.tag];
        let pt = &self.trees[self.pub_tree[unit.tag]];
        let d_pub = pt.hops(j);
        let lat_pub = pt.latency_ms(j);
        let f = tag.rate();
        let l = tag.bandwidth();
        let mut hops_to_subscriber = Vec::with_capacity(unit.subscribers.len());
        let mut delays_ms = Vec::with_capacity(unit.subscribers.len());
        let mut bandwidth = 0.0;
        let mut cpu = 0.0;
        let mut feasible = true;
        for &s in &unit.subscribers {
            let sub = &tag.subscribers[s];
            let st = &self.trees[self.sub_tree[unit.tag][s]];
            let d_sub = st.hops(j);
            let delay = f64::from(d_pub) * tag.period_ms
                + f64::from(d_sub) * sub.period_ms
                + lat_pub
                + st.latency_ms(j);
            if let Some(bound) = sub.max_delay_ms {
                if delay > bound * (1.0 + 1e-12) {
                    feasible = false;
                }
            }
            bandwidth += f64::from(d_pub) * l + f64::from(d_sub) * sub.bandwidth();
            // Every hop costs forward_cpu per message at both ends; the proxy
            // scales every input message.
            cpu += 2.0 * tag.forward_cpu * (f64::from(d_pub) * f + f64::from(d_sub) * sub.rate())
                + tag.scale_cpu * f;
            hops_to_subscriber.push(d_sub);
            delays_ms.push(delay);
        }
        NodeEvaluation {
            node: j,
            hops_from_publisher: d_pub,
            hops_to_subscriber,
            delays_ms,
            bandwidth,
            cpu,
            feasible,
        }
    }

    fn candidate(&self, u: usize, j: usize) -> Option<Candidate> {
        let e = self.evaluate(u, j);
        e.feasible.then_some(Candidate {
            node: j,
            bandwidth: e.bandwidth,
            cpu: e.cpu,
        })
    }

    fn delay_infeasibility(&self, u: usize) -> PlaceError {
        let unit = &self.units[u];
        let tag = &self.topo.tags[unit.tag];
        let n = self.topo.nodes.len();
        let evals: Vec<NodeEvaluation> = (0..n).map(|j| self.evaluate(u, j)).collect();
        // A subscriber no node can serve alone?
        for (pos, &s) in unit.subscribers.iter().enumerate() {
            let sub = &tag.subscribers[s];
            let Some(bound) = sub.max_delay_ms else {
                continue;
            };
            let best = evals
                .iter()
                .min_by(|a, b| a.delays_ms[pos].total_cmp(&b.delays_ms[pos]));
            if let Some(best) = best {
                if best.delays_ms[pos] > bound * (1.0 + 1e-12) {
                    return PlaceError::DelayBoundUnsatisfiable {
                        tag: tag.name.clone(),
                        subscriber: sub.name.clone(),
                        bound_ms: bound,
                        best_node: self.topo.nodes[best.node].name.clone(),
                        best_delay_ms: best.delays_ms[pos],
                    };
                }
            }
        }
        // Otherwise the subscribers of a shared proxy disagree: report the
        // node whose worst excess over a bound is smallest.
        let mut best: Option<(f64, usize, usize)> = None;
        for e in &evals {
            let (excess, pos) = worst_excess(e, unit, tag);
            if excess > 0.0 && best.map_or(true, |(b, _, _)| excess < b) {
                best = Some((excess, e.node, pos));
            }
        }
        match best {
            Some((_, node, pos)) => {
                let sub = &tag.subscribers[unit.subscribers[pos]];
                PlaceError::NoCommonProxyNode {
                    tag: tag.name.clone(),
                    best_node: self.topo.nodes[node].name.clone(),
                    subscriber: sub.name.clone(),
                    delay_ms: evals[node].delays_ms[pos],
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

    /// Accumulates unit `u`'s link (bytes/s) and node (CPU/s) loads when its
    /// proxy is on node `j`.
    fn accumulate(&self, u: usize, j: usize, s: &mut LoadScratch) {
        let unit = &self.units[u];
        let tag = &self.topo.tags[unit.tag];
        let k = unit.subscribers.len() as f64;
        let pub_bw = tag.bandwidth() * k;
        let pub_cpu = tag.forward_cpu * tag.rate() * k;
        self.trees[self.pub_tree[unit.tag]].for_each_link(j, |l, a, b| {
            s.add_link(l, pub_bw);
            s.add_node(a, pub_cpu);
            s.add_node(b, pub_cpu);
        });
        s.add_node(j, tag.scale_cpu * tag.rate() * k);
        for &si in &unit.subscribers {
            let sub = &tag.subscribers[si];
            let (bw, cpu) = (sub.bandwidth(), tag.forward_cpu * sub.rate());
            self.trees[self.sub_tree[unit.tag][si]].for_each_link(j, |l, a, b| {
                s.add_link(l, bw);
                s.add_node(a, cpu);
                s.add_node(b, cpu);
            });
        }
    }

    /// Keeps only capacity rows that some combination could exceed, and
    /// records each candidate's load on them.
    fn find_binding_rows(&mut self) {
        let topo = self.topo;
        let mut scratch = LoadScratch::new(topo);
        let mut worst_link = vec![0.0f64; topo.links.len()];
        let mut worst_node = vec![0.0f64; topo.nodes.len()];
        let mut unit_link = vec![0.0f64; topo.links.len()];
        let mut unit_node = vec![0.0f64; topo.nodes.len()];
        let mut touched_l = Vec::new();
        let mut touched_n = Vec::new();
        for u in 0..self.units.len() {
            for c in &self.candidates[u] {
                self.accumulate(u, c.node, &mut scratch);
                for &l in &scratch.touched_links {
                    if topo.links[l].bandwidth.is_some() {
                        if unit_link[l] == 0.0 {
                            touched_l.push(l);
                        }
                        unit_link[l] = unit_link[l].max(scratch.link[l]);
                    }
                }
                for &n in &scratch.touched_nodes {
                    if topo.nodes[n].cpu.is_some() {
                        if unit_node[n] == 0.0 {
                            touched_n.push(n);
                        }
                        unit_node[n] = unit_node[n].max(scratch.node[n]);
                    }
                }
                scratch.clear();
            }
            for l in touched_l.drain(..) {
                worst_link[l] += unit_link[l];
                unit_link[l] = 0.0;
            }
            for n in touched_n.drain(..) {
                worst_node[n] += unit_node[n];
                unit_node[n] = 0.0;
            }
        }
        let mut row_of_link = vec![u32::MAX; topo.links.len()];
        let mut row_of_node = vec![u32::MAX; topo.nodes.len()];
        let mut rows = Vec::new();
        for (l, link) in topo.links.iter().enumerate() {
            if let Some(cap) = link.bandwidth {
                if worst_link[l] > cap {
                    row_of_link[l] = rows.len() as u32;
                    rows.push(CapacityRow {
                        resource: Resource::Link(l),
                        capacity: cap,
                    });
                }
            }
        }
        for (n, node) in topo.nodes.iter().enumerate() {
            if let Some(cap) = node.cpu {
                if worst_node[n] > cap {
                    row_of_node[n] = rows.len() as u32;
                    rows.push(CapacityRow {
                        resource: Resource::Node(n),
                        capacity: cap,
                    });
                }
            }
        }
        let mut cand_loads = Vec::with_capacity(self.units.len());
        for u in 0..self.units.len() {
            let mut per_cand = Vec::with_capacity(self.candidates[u].len());
            for c in &self.candidates[u] {
                let mut loads = Vec::new();
                if !rows.is_empty() {
                    self.accumulate(u, c.node, &mut scratch);
                    for &l in &scratch.touched_links {
                        if row_of_link[l] != u32::MAX {
                            loads.push((row_of_link[l], scratch.link[l]));
                        }
                    }
                    for &n in &scratch.touched_nodes {
                        if row_of_node[n] != u32::MAX {
                            loads.push((row_of_node[n], scratch.node[n]));
                        }
                    }
                    scratch.clear();
                }
                per_cand.push(loads);
            }
            cand_loads.push(per_cand);
        }
        self.rows = rows;
        self.cand_loads = cand_loads;
    }

    /// Total link and node loads of a full assignment (`choice[u]` is a
    /// candidate index of unit `u`): `(link loads, node loads)`.
    pub fn total_loads(&self, choice: &[usize]) -> (Vec<f64>, Vec<f64>) {
        let mut scratch = LoadScratch::new(self.topo);
        let mut links = vec![0.0; self.topo.links.len()];
        let mut nodes = vec![0.0; self.topo.nodes.len()];
        for (u, &k) in choice.iter().enumerate() {
            self.accumulate(u, self.candidates[u][k].node, &mut scratch);
            for &l in &scratch.touched_links {
                links[l] += scratch.link[l];
            }
            for &n in &scratch.touched_nodes {
                nodes[n] += scratch.node[n];
            }
            scratch.clear();
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

/// Largest excess of a delay over its bound at one node: (excess, position).
fn worst_excess(e: &NodeEvaluation, unit: &Unit, tag: &crate::model::Tag) -> (f64, usize) {
    let mut worst = (f64::NEG_INFINITY, 0);
    for (pos, &s) in unit.subscribers.iter().enumerate() {
        let bound = tag.subscribers[s].max_delay_ms.unwrap_or(f64::INFINITY);
        let excess = e.delays_ms[pos] - bound;
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
