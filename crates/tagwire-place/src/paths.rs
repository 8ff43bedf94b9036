//! Candidate routes from one endpoint (a publisher's or subscriber's node)
//! to every node: the route model of `docs/placement.md`.
//!
//! For each target node the candidates are, in this order (at most
//! [`crate::limits::MAX_ROUTES_PER_LEG`]):
//! 1. the *default* route: among the fewest-hop paths, the one with the
//!    least summed link latency (ties: the breadth-first tree, i.e. the link
//!    declared first);
//! 2. when links have latencies, further points of the (hops, latency)
//!    Pareto frontier: a path with more hops but strictly less latency (the
//!    least-latency ones first) — every delay bound that any path can meet,
//!    one of these meets, since delay = hops·T + latency;
//! 3. when capacities exist, other fewest-hop paths in increasing latency
//!    (same cost, other links and nodes): where the default route is full.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use crate::model::Topology;

const NONE: u32 = u32::MAX;

/// One route: its hop count, summed latency and links (from the target
/// node back to the root).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Route {
    pub(crate) hops: u32,
    pub(crate) latency_ms: f64,
    pub(crate) links: Vec<u32>,
}

/// A further Pareto point of a node: a path with more hops and strictly
/// less latency than every path with fewer hops.
#[derive(Debug, Clone, Copy)]
struct ParetoPoint {
    latency_ms: f64,
    /// Predecessor node and which of its points (0 = its default route,
    /// k ≥ 1 = `extra[pred][k - 1]`).
    pred: u32,
    pred_point: u32,
    link: u32,
}

/// A partial path in the equal-hop search's heap.
#[derive(PartialEq)]
struct Entry {
    f: f64,
    /// Hops still to go: among equal f, the deepest first, so that
    /// ties complete a path instead of widening the search.
    to_go: u32,
    seq: u64,
    at: u32,
    g: f64,
    path: u32, // index into `paths`
}
impl Eq for Entry {}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        o.f.total_cmp(&self.f)
            .then(o.to_go.cmp(&self.to_go))
            .then(o.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Buffers of the equal-hop search, reused across [`RouteTree::routes`]
/// calls (a placement build makes one per (tree, node) pair).
#[derive(Default)]
pub(crate) struct RouteScratch {
    /// Partial paths as (link, parent path) chains.
    paths: Vec<(u32, u32)>,
    heap: BinaryHeap<Entry>,
}

/// Routes from one root to every node (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct RouteTree {
    root: usize,
    dist: Vec<u32>,
    latency_ms: Vec<f64>,
    parent_link: Vec<u32>,
    parent_node: Vec<u32>,
    extra: Vec<Vec<ParetoPoint>>,
}

/// Relative tolerance under which two latencies count as equal.
fn less(a: f64, b: f64) -> bool {
    a < b - 1e-12 * b.abs().max(1.0)
}

impl RouteTree {
    /// Breadth-first search from `root`, then the least latency among
    /// fewest-hop paths, then (if any link has a latency) the frontier.
    pub(crate) fn new(topo: &Topology, root: usize) -> Self {
        let n = topo.nodes.len();
        let mut dist = vec![NONE; n];
        let mut parent_link = vec![NONE; n];
        let mut parent_node = vec![NONE; n];
        let mut order = Vec::with_capacity(n);
        let mut queue = VecDeque::with_capacity(n);
        dist[root] = 0;
        queue.push_back(root);
        while let Some(v) = queue.pop_front() {
            order.push(v);
            for &(w, link) in &topo.adjacency[v] {
                if dist[w] == NONE {
                    dist[w] = dist[v] + 1;
                    parent_link[w] = link as u32;
                    parent_node[w] = v as u32;
                    queue.push_back(w);
                }
            }
        }
        let mut latency_ms = vec![0.0; n];
        let has_latency = topo.links.iter().any(|l| l.latency_ms > 0.0);
        let mut extra = vec![Vec::new(); n];
        if has_latency {
            // Least latency over the breadth-first DAG, in BFS order; the
            // BFS parent is kept unless another is strictly better.
            for &v in order.iter().skip(1) {
                let (p, l) = (parent_node[v] as usize, parent_link[v] as usize);
                latency_ms[v] = latency_ms[p] + topo.links[l].latency_ms;
                for &(w, link) in &topo.adjacency[v] {
                    if dist[w] != NONE && dist[w] + 1 == dist[v] {
                        let cand = latency_ms[w] + topo.links[link].latency_ms;
                        if less(cand, latency_ms[v]) {
                            latency_ms[v] = cand;
                            parent_node[v] = w as u32;
                            parent_link[v] = link as u32;
                        }
                    }
                }
            }
            Self::frontier(topo, &dist, &latency_ms, &mut extra);
        }
        RouteTree {
            root,
            dist,
            latency_ms,
            parent_link,
            parent_node,
            extra,
        }
    }

    /// Bellman–Ford by hop layers: a point for node v at h hops whenever
    /// the least latency with at most h hops drops strictly.
    fn frontier(topo: &Topology, dist: &[u32], lat0: &[f64], extra: &mut [Vec<ParetoPoint>]) {
        let n = dist.len();
        let max_dist = dist
            .iter()
            .copied()
            .filter(|&d| d != NONE)
            .max()
            .unwrap_or(0);
        let cap = max_dist.saturating_add(crate::limits::MAX_EXTRA_HOPS);
        // (latency, point index) of every node as of the previous layer.
        let mut prev: Vec<(f64, u32)> = vec![(f64::INFINITY, 0); n];
        let mut cur = prev.clone();
        for h in 0..=cap {
            let mut changed = false;
            for v in 0..n {
                if dist[v] == h {
                    cur[v] = (lat0[v], 0);
                    changed = true;
                } else if dist[v] < h && h > 0 {
                    let mut best: Option<ParetoPoint> = None;
                    let mut best_lat = cur[v].0;
                    for &(w, link) in &topo.adjacency[v] {
                        let (lw, pw) = prev[w];
                        if lw.is_finite() {
                            let cand = lw + topo.links[link].latency_ms;
                            if less(cand, best_lat) {
                                best_lat = cand;
                                best = Some(ParetoPoint {
                                    latency_ms: cand,
                                    pred: w as u32,
                                    pred_point: pw,
                                    link: link as u32,
                                });
                            }
                        }
                    }
                    if let Some(p) = best {
                        extra[v].push(p);
                        cur[v] = (p.latency_ms, extra[v].len() as u32);
                        changed = true;
                    }
                }
            }
            if !changed && h >= max_dist {
                break;
            }
            prev.copy_from_slice(&cur);
        }
    }

    /// The root node.
    pub(crate) fn root(&self) -> usize {
        self.root
    }

    /// The first node the search did not reach, if any.
    pub(crate) fn first_unreached(&self) -> Option<usize> {
        self.dist.iter().position(|&d| d == NONE)
    }

    /// Hops of the default route to `node` (the fewest).
    pub(crate) fn hops(&self, node: usize) -> u32 {
        self.dist[node]
    }

    /// Summed latency of the default route to `node`.
    pub(crate) fn latency_ms(&self, node: usize) -> f64 {
        self.latency_ms[node]
    }

    /// Calls `f(link)` for every link of the default route to `node`.
    pub(crate) fn for_each_default_link(&self, mut node: usize, mut f: impl FnMut(usize)) {
        while self.parent_link[node] != NONE {
            f(self.parent_link[node] as usize);
            node = self.parent_node[node] as usize;
        }
    }

    fn default_route(&self, node: usize) -> Route {
        let mut links = Vec::with_capacity(self.dist[node] as usize);
        self.for_each_default_link(node, |l| links.push(l as u32));
        Route {
            hops: self.dist[node],
            latency_ms: self.latency_ms[node],
            links,
        }
    }

    fn pareto_route(&self, node: usize, point: usize) -> Route {
        let p = self.extra[node][point];
        let mut links = vec![p.link];
        let (mut v, mut k) = (p.pred as usize, p.pred_point as usize);
        while k != 0 {
            let q = self.extra[v][k - 1];
            links.push(q.link);
            (v, k) = (q.pred as usize, q.pred_point as usize);
        }
        self.for_each_default_link(v, |l| links.push(l as u32));
        Route {
            hops: links.len() as u32,
            latency_ms: p.latency_ms,
            links,
        }
    }

    /// The candidate routes to `node` (see the module doc); with
    /// `alternatives`, also other fewest-hop paths. At most `max` routes.
    pub(crate) fn routes(
        &self,
        topo: &Topology,
        node: usize,
        alternatives: bool,
        max: usize,
        scratch: &mut RouteScratch,
    ) -> Vec<Route> {
        let mut out = vec![self.default_route(node)];
        // Least-latency Pareto points first (the last ones found).
        let points = &self.extra[node];
        for k in (0..points.len())
            .rev()
            .take(crate::limits::MAX_PARETO_ROUTES)
        {
            if out.len() >= max {
                break;
            }
            out.push(self.pareto_route(node, k));
        }
        if alternatives && out.len() < max && self.dist[node] > 1 {
            self.equal_hop_alternatives(topo, node, max, scratch, &mut out);
        }
        out
    }

    /// Further fewest-hop paths in increasing latency (best-first search
    /// back from `node` over the breadth-first DAG; the least latency from
    /// the root to each node is an exact heuristic). Ties: discovery order.
    fn equal_hop_alternatives(
        &self,
        topo: &Topology,
        node: usize,
        max: usize,
        scratch: &mut RouteScratch,
        out: &mut Vec<Route>,
    ) {
        // Partial paths as (link, parent path) chains.
        let RouteScratch { paths, heap } = scratch;
        paths.clear();
        heap.clear();
        let mut seq = 0u64;
        heap.push(Entry {
            f: self.latency_ms[node],
            to_go: self.dist[node],
            seq,
            at: node as u32,
            g: 0.0,
            path: NONE,
        });
        let mut pops = 0usize;
        let pop_limit = 8 * max * (self.dist[node] as usize + 1);
        while let Some(e) = heap.pop() {
            pops += 1;
            if pops > pop_limit {
                break;
            }
            let v = e.at as usize;
            if v == self.root {
                let mut links = Vec::with_capacity(self.dist[node] as usize);
                let mut p = e.path;
                while p != NONE {
                    links.push(paths[p as usize].0);
                    p = paths[p as usize].1;
                }
                // The chain was built from the node outwards, so walking it
                // gives the root side first; routes list node → root.
                links.reverse();
                let route = Route {
                    hops: self.dist[node],
                    latency_ms: e.g,
                    links,
                };
                if !out.iter().any(|r| r.links == route.links) {
                    out.push(route);
                    if out.len() >= max {
                        return;
                    }
                }
                continue;
            }
            for &(w, link) in &topo.adjacency[v] {
                if self.dist[w] != NONE && self.dist[w] + 1 == self.dist[v] {
                    let g = e.g + topo.links[link].latency_ms;
                    paths.push((link as u32, e.path));
                    seq += 1;
                    heap.push(Entry {
                        f: g + self.latency_ms[w],
                        to_go: self.dist[w],
                        seq,
                        at: w as u32,
                        g,
                        path: paths.len() as u32 - 1,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TopologySpec;

    fn square() -> Topology {
        // A square p-a-s / p-b-s: both routes are two hops; p-a is declared
        // first but slower.
        TopologySpec::from_toml_str(
            r#"
            nodes = [{ name = "p" }, { name = "a" }, { name = "b" }, { name = "s" }]
            links = [
              { name = "pa", between = ["p", "a"], latency_ms = 1 },
              { name = "pb", between = ["p", "b"] },
              { name = "as", between = ["a", "s"], latency_ms = 2 },
              { name = "bs", between = ["b", "s"] },
            ]
            [[tags]]
            name = "/t"
            publisher = "p"
            period_ms = 1
            subscribers = [{ name = "x", node = "s" }]
            "#,
        )
        .and_then(|s| s.validate())
        .expect("valid")
    }

    fn names(topo: &Topology, r: &Route) -> Vec<String> {
        r.links
            .iter()
            .map(|&l| topo.links[l as usize].name.clone())
            .collect()
    }

    #[test]
    fn default_route_is_the_least_latency_fewest_hop_path() {
        let topo = square();
        let tree = RouteTree::new(&topo, 0);
        assert_eq!(tree.hops(3), 2);
        assert_eq!(tree.latency_ms(3), 0.0);
        let routes = tree.routes(&topo, 3, true, 4, &mut RouteScratch::default());
        assert_eq!(names(&topo, &routes[0]), vec!["bs", "pb"]);
        // The other equal-hop path is the alternative, with its latency.
        assert_eq!(routes.len(), 2);
        assert_eq!(names(&topo, &routes[1]), vec!["as", "pa"]);
        assert_eq!(routes[1].latency_ms, 3.0);
    }

    #[test]
    fn without_latencies_ties_go_to_the_link_declared_first() {
        let mut spec = TopologySpec::from_toml_str(
            r#"
            nodes = [{ name = "p" }, { name = "a" }, { name = "b" }, { name = "s" }]
            links = [
              { name = "pa", between = ["p", "a"] },
              { name = "pb", between = ["p", "b"] },
              { name = "as", between = ["a", "s"] },
              { name = "bs", between = ["b", "s"] },
            ]
            [[tags]]
            name = "/t"
            publisher = "p"
            period_ms = 1
            subscribers = [{ name = "x", node = "s" }]
            "#,
        )
        .expect("toml");
        spec.links[0].latency_ms = None;
        let topo = spec.validate().expect("valid");
        let tree = RouteTree::new(&topo, 0);
        let routes = tree.routes(&topo, 3, false, 4, &mut RouteScratch::default());
        assert_eq!(routes.len(), 1);
        assert_eq!(names(&topo, &routes[0]), vec!["as", "pa"]);
    }

    #[test]
    fn a_longer_path_with_less_latency_is_a_pareto_route() {
        // p-s directly (latency 50) or p-a-b-s (latency 1 each).
        let topo = TopologySpec::from_toml_str(
            r#"
            nodes = [{ name = "p" }, { name = "a" }, { name = "b" }, { name = "s" }]
            links = [
              { name = "ps", between = ["p", "s"], latency_ms = 50 },
              { name = "pa", between = ["p", "a"], latency_ms = 1 },
              { name = "ab", between = ["a", "b"], latency_ms = 1 },
              { name = "bs", between = ["b", "s"], latency_ms = 1 },
            ]
            [[tags]]
            name = "/t"
            publisher = "p"
            period_ms = 1
            subscribers = [{ name = "x", node = "s" }]
            "#,
        )
        .and_then(|s| s.validate())
        .expect("valid");
        let tree = RouteTree::new(&topo, 0);
        let routes = tree.routes(&topo, 3, false, 4, &mut RouteScratch::default());
        assert_eq!(routes.len(), 2);
        assert_eq!((routes[0].hops, routes[0].latency_ms), (1, 50.0));
        assert_eq!((routes[1].hops, routes[1].latency_ms), (3, 3.0));
        assert_eq!(names(&topo, &routes[1]), vec!["bs", "ab", "pa"]);
    }
}
