//! Random placement problems for the benchmarks and the scaling run:
//! a random tree plus extra links (connected, low diameter), some links and
//! nodes with capacities, tags of ten subscribers each (alternately one
//! shared proxy and one proxy per subscriber), delay bounds that some
//! placement can always meet but that rule out part of the nodes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use tagwire_place::model::{
    LinkSpec, NodeSpec, ProxySharing, SubscriberSpec, TagSpec, TopologySpec,
};

/// Parameters of a random problem.
#[derive(Debug, Clone, Copy)]
pub struct RandomParams {
    /// Nodes.
    pub nodes: usize,
    /// Subscribers in all (tags of up to `per_tag`).
    pub subscribers: usize,
    /// Subscribers per tag.
    pub per_tag: usize,
    /// Fraction of links with a bandwidth capacity.
    pub capped_links: f64,
    /// Fraction of nodes with a CPU capacity.
    pub capped_nodes: f64,
    /// Seed.
    pub seed: u64,
}

/// Builds one random topology spec.
pub fn random_topology(p: RandomParams) -> TopologySpec {
    let mut rng = StdRng::seed_from_u64(p.seed);
    let n = p.nodes.max(2);
    // Capacities grow with the traffic so that they bind without making
    // every instance infeasible.
    let scale = (p.subscribers as f64 / 100.0).max(1.0);
    let name = |i: usize| format!("n{i}");
    let mut adj = vec![Vec::new(); n];
    let mut pairs = Vec::new();
    for i in 1..n {
        let parent = rng.gen_range(0..i);
        pairs.push((parent, i));
    }
    for _ in 0..n / 2 {
        let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
        if a != b {
            pairs.push((a.min(b), a.max(b)));
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    for &(a, b) in &pairs {
        adj[a].push(b);
        adj[b].push(a);
    }
    let hops = |from: usize| {
        let mut d = vec![u32::MAX; n];
        d[from] = 0;
        let mut q = VecDeque::from([from]);
        while let Some(v) = q.pop_front() {
            for &w in &adj[v] {
                if d[w] == u32::MAX {
                    d[w] = d[v] + 1;
                    q.push_back(w);
                }
            }
        }
        d
    };
    let nodes = (0..n)
        .map(|i| NodeSpec {
            name: name(i),
            cpu: rng
                .gen_bool(p.capped_nodes)
                .then(|| scale * rng.gen_range(2_000.0..20_000.0)),
            label: None,
        })
        .collect();
    let links = pairs
        .iter()
        .enumerate()
        .map(|(k, &(a, b))| LinkSpec {
            name: Some(format!("l{k}")),
            between: [name(a), name(b)],
            bandwidth: rng
                .gen_bool(p.capped_links)
                .then(|| scale * rng.gen_range(300_000.0..3_000_000.0)),
            latency_ms: None,
        })
        .collect();
    let mut tags = Vec::new();
    let mut left = p.subscribers;
    while left > 0 {
        let t = tags.len();
        let count = left.min(p.per_tag.max(1));
        left -= count;
        let publisher = rng.gen_range(0..n);
        let dist = hops(publisher);
        let period = 10.0;
        let shared = t % 2 == 0;
        let subscribers = (0..count)
            .map(|s| {
                let node = rng.gen_range(0..n);
                let mult = [1.0, 2.0, 4.0, 8.0][rng.gen_range(0..4)];
                let tp = period * mult;
                let d = f64::from(dist[node]);
                let r: f64 = rng.gen_range(0.3..1.0);
                SubscriberSpec {
                    name: format!("s{s}"),
                    node: name(node),
                    period_ms: Some(tp),
                    message_bytes: None,
                    // One proxy per subscriber: between d·T (proxy at the
                    // subscriber) and d·T' (at the publisher). Shared: at
                    // least d·T', so the publisher's node always serves all.
                    max_delay_ms: (d > 0.0 && rng.gen_bool(0.7)).then_some(if shared {
                        d * tp * (1.0 + r / 3.0) + 0.5
                    } else {
                        d * (period + (tp - period) * r) + 0.5
                    }),
                }
            })
            .collect();
        tags.push(TagSpec {
            name: format!("/t{t}"),
            publisher: name(publisher),
            period_ms: period,
            message_bytes: Some(1000.0),
            proxy: if t % 2 == 0 {
                ProxySharing::Shared
            } else {
                ProxySharing::PerSubscriber
            },
            scale_cpu: None,
            forward_cpu: None,
            subscribers,
        });
    }
    TopologySpec { nodes, links, tags }
}
