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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TopologySpec;

    #[test]
    fn equal_length_routes_take_the_link_declared_first_and_sum_latency() {
        // A square p-a-s / p-b-s: both routes are two hops; p-a is declared
        // first, so the tree from p reaches s through a.
        let topo = TopologySpec::from_toml_str(
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
        .expect("valid");
        let tree = ShortestPathTree::new(&topo, 0);
        assert_eq!(tree.hops(3), 2);
        assert_eq!(tree.latency_ms(3), 3.0);
        let mut links = Vec::new();
        tree.for_each_link(3, |l, _, _| links.push(topo.links[l].name.clone()));
        assert_eq!(links, vec!["as", "pa"]);
    }
}
