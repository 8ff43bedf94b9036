//! Shortest (fewest-hop) paths: one breadth-first tree per publisher or
//! subscriber node. Ties are broken by link declaration order, so every
//! algorithm sees the same routes.

use std::collections::VecDeque;

use crate::model::Topology;

const NONE: u32 = u32::MAX;

/// A breadth-first tree rooted at one node: hop distance, summed link
/// latency and parent link of every node.
#[derive(Debug, Clone)]
pub(crate) struct ShortestPathTree {
    dist: Vec<u32>,
    latency_ms: Vec<f64>,
    parent_link: Vec<u32>,
    parent_node: Vec<u32>,
}

impl ShortestPathTree {
    /// Runs BFS from `root`.
    pub(crate) fn new(topo: &Topology, root: usize) -> Self {
        let n = topo.nodes.len();
        let mut dist = vec![NONE; n];
        let mut latency_ms = vec![0.0; n];
        let mut parent_link = vec![NONE; n];
        let mut parent_node = vec![NONE; n];
        let mut queue = VecDeque::with_capacity(n);
        dist[root] = 0;
        queue.push_back(root);
        while let Some(v) = queue.pop_front() {
            for &(w, link) in &topo.adjacency[v] {
                if dist[w] == NONE {
                    dist[w] = dist[v] + 1;
                    latency_ms[w] = latency_ms[v] + topo.links[link].latency_ms;
                    parent_link[w] = link as u32;
                    parent_node[w] = v as u32;
                    queue.push_back(w);
                }
            }
        }
        ShortestPathTree {
            dist,
            latency_ms,
            parent_link,
            parent_node,
        }
    }

    /// The first node the search did not reach, if any.
    pub(crate) fn first_unreached(&self) -> Option<usize> {
        self.dist.iter().position(|&d| d == NONE)
    }

    /// Hops from the root to `node` (the graph is validated connected).
    pub(crate) fn hops(&self, node: usize) -> u32 {
        self.dist[node]
    }

    /// Summed link latency from the root to `node`.
    pub(crate) fn latency_ms(&self, node: usize) -> f64 {
        self.latency_ms[node]
    }

    /// Calls `f(link, end_a, end_b)` for every link on the path from `node`
    /// back to the root.
    pub(crate) fn for_each_link(&self, mut node: usize, mut f: impl FnMut(usize, usize, usize)) {
        while self.parent_link[node] != NONE {
            let up = self.parent_node[node] as usize;
            f(self.parent_link[node] as usize, node, up);
            node = up;
        }
    }
}
