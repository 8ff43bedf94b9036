//! Seeded random placement instances for tests, benchmarks and the scaling
//! run: a random tree plus extra links (connected, low diameter), tags of
//! [`InstanceParams::per_tag`] subscribers (alternately one shared proxy and
//! one proxy per subscriber), delay bounds that rule out part of the nodes,
//! and — with [`InstanceParams::binding`] — capacities that **bind**: the
//! placement that ignores capacities breaks them, while a known placement
//! fits them, so the instance is feasible and coupled.
//!
//! Same parameters, same instance (own SplitMix64 generator, no external
//! randomness).

use crate::error::PlaceError;
use crate::model::{LinkSpec, NodeSpec, ProxySharing, SubscriberSpec, TagSpec, TopologySpec};
use crate::problem::{BuildOptions, Objective, PlacementProblem};

/// Parameters of a random instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceParams {
    /// Nodes.
    pub nodes: usize,
    /// Subscribers in all.
    pub subscribers: usize,
    /// Subscribers per tag.
    pub per_tag: usize,
    /// Fraction of links with a bandwidth capacity.
    pub capped_links: f64,
    /// Fraction of nodes with a CPU capacity.
    pub capped_nodes: f64,
    /// Fraction of links given a latency (1–5 ms).
    pub latency_links: f64,
    /// Make the capacities bind (see the module doc); otherwise they are
    /// random and mostly slack.
    pub binding: bool,
    /// Seed.
    pub seed: u64,
}

impl Default for InstanceParams {
    fn default() -> Self {
        InstanceParams {
            nodes: 1000,
            subscribers: 100,
            per_tag: 10,
            capped_links: 0.3,
            capped_nodes: 0.2,
            latency_links: 0.0,
            binding: true,
            seed: 1,
        }
    }
}

/// SplitMix64: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Builds one random instance (see the module doc).
pub fn random_instance(p: InstanceParams) -> TopologySpec {
    let mut rng = Rng(p.seed);
    let n = p.nodes.max(2);
    let name = |i: usize| format!("n{i}");
    let mut pairs = Vec::new();
    for i in 1..n {
        pairs.push((rng.below(i), i));
    }
    for _ in 0..n / 2 {
        let (a, b) = (rng.below(n), rng.below(n));
        if a != b {
            pairs.push((a.min(b), a.max(b)));
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in &pairs {
        adj[a].push(b);
        adj[b].push(a);
    }
    let hops = |from: usize| {
        let mut d = vec![u32::MAX; n];
        d[from] = 0;
        let mut q = std::collections::VecDeque::from([from]);
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
    // Placeholder capacities (replaced below when binding) so that the
    // problem built to size them has the same routes as the final one.
    let scale = (p.subscribers as f64 / 100.0).max(1.0);
    let nodes: Vec<NodeSpec> = (0..n)
        .map(|i| NodeSpec {
            name: name(i),
            cpu: rng
                .chance(p.capped_nodes)
                .then(|| scale * rng.range(2_000.0, 20_000.0)),
            label: None,
        })
        .collect();
    let links: Vec<LinkSpec> = pairs
        .iter()
        .enumerate()
        .map(|(k, &(a, b))| LinkSpec {
            name: Some(format!("l{k}")),
            between: [name(a), name(b)],
            bandwidth: rng
                .chance(p.capped_links)
                .then(|| scale * rng.range(300_000.0, 3_000_000.0)),
            latency_ms: rng
                .chance(p.latency_links)
                .then(|| (1.0 + 4.0 * rng.unit()).round()),
        })
        .collect();
    let mut tags = Vec::new();
    let mut left = p.subscribers;
    while left > 0 {
        let t = tags.len();
        let count = left.min(p.per_tag.max(1));
        left -= count;
        let publisher = rng.below(n);
        let dist = hops(publisher);
        let period = 10.0;
        let shared = t % 2 == 0;
        let subscribers = (0..count)
            .map(|s| {
                let node = rng.below(n);
                let mult = [1.0, 2.0, 4.0, 8.0][rng.below(4)];
                let tp = period * mult;
                let d = f64::from(dist[node]);
                let r = rng.range(0.3, 1.0);
                let bounded = d > 0.0 && rng.chance(0.7);
                SubscriberSpec {
                    name: format!("s{s}"),
                    node: name(node),
                    period_ms: Some(tp),
                    message_bytes: None,
                    // Per subscriber: between d·T (proxy at the subscriber)
                    // and d·T' (at the publisher). Shared: at least d·T', so
                    // the publisher's node serves all. Latencies (≤ 5 ms a
                    // link) get the same allowance per hop.
                    max_delay_ms: bounded.then(|| {
                        let lat = if p.latency_links > 0.0 { 5.0 * d } else { 0.0 };
                        lat + if shared {
                            d * tp * (1.0 + r / 3.0) + 0.5
                        } else {
                            d * (period + (tp - period) * r) + 0.5
                        }
                    }),
                }
            })
            .collect();
        tags.push(TagSpec {
            name: format!("/t{t}"),
            publisher: name(publisher),
            period_ms: period,
            message_bytes: Some(1000.0),
            proxy: if shared {
                ProxySharing::Shared
            } else {
                ProxySharing::PerSubscriber
            },
            scale_cpu: None,
            forward_cpu: None,
            subscribers,
        });
    }
    let mut spec = TopologySpec { nodes, links, tags };
    if p.binding {
        make_binding(&mut spec, &mut rng);
    }
    spec
}

/// Parameters of a **tight** instance ([`tight_instance`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TightParams {
    /// Nodes.
    pub nodes: usize,
    /// Subscribers in all (tags of 10, as [`random_instance`]).
    pub subscribers: usize,
    /// Seed.
    pub seed: u64,
    /// Each capacity is `factor` × the resource's load under the random
    /// placement (1: that placement fits exactly).
    pub factor: f64,
    /// The random placement picks each unit's candidate among its cheapest
    /// `fraction` (1: among all).
    pub fraction: f64,
    /// Fraction of links with a bandwidth capacity.
    pub capped_links: f64,
    /// Fraction of nodes with a CPU capacity.
    pub capped_nodes: f64,
}

impl Default for TightParams {
    fn default() -> Self {
        TightParams {
            nodes: 100,
            subscribers: 100,
            seed: 1,
            factor: 1.0,
            fraction: 1.0,
            capped_links: 1.0,
            capped_nodes: 1.0,
        }
    }
}

/// A seeded instance with **tight** capacities (BENCHMARKS.md's `tight`
/// instances, `examples/generate_tight.rs`): every capped link and node
/// gets `factor` × its load under one random placement (rounded up, at
/// least 1), so with `factor` = 1 that placement fits exactly and few
/// others do. Returns the spec and the random placement (a candidate index
/// per unit of the problem built without capacities and without pruning).
pub fn tight_instance(p: TightParams) -> Result<(TopologySpec, Vec<usize>), PlaceError> {
    let mut spec = random_instance(InstanceParams {
        nodes: p.nodes.clamp(2, 100_000),
        subscribers: p.subscribers.clamp(1, 100_000),
        seed: p.seed,
        capped_links: p.capped_links,
        capped_nodes: p.capped_nodes,
        binding: false,
        ..InstanceParams::default()
    });
    let fraction = p.fraction.clamp(0.0, 1.0);
    for n in &mut spec.nodes {
        n.cpu = n.cpu.map(|_| f64::MAX / 4.0);
    }
    for l in &mut spec.links {
        l.bandwidth = l.bandwidth.map(|_| f64::MAX / 4.0);
    }
    let topo = spec.validate()?;
    let problem = PlacementProblem::build(
        &topo,
        BuildOptions {
            prune: false,
            ..BuildOptions::default()
        },
    )?;
    let values = problem.objective_values(Objective::Bandwidth)?;
    let mut state = p.seed.wrapping_mul(7919).wrapping_add(1);
    let random: Vec<usize> = values
        .iter()
        .map(|vs| {
            let mut idx: Vec<usize> = (0..vs.len()).collect();
            idx.sort_by(|&x, &y| vs[x].total_cmp(&vs[y]).then(x.cmp(&y)));
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let among = ((idx.len() as f64 * fraction).ceil() as usize).max(1);
            idx[((state >> 33) as usize) % among]
        })
        .collect();
    let (links, nodes) = problem.total_loads(&random);
    drop(problem);
    for (n, load) in spec.nodes.iter_mut().zip(nodes) {
        if n.cpu.is_some() {
            n.cpu = Some((p.factor * load).ceil().max(1.0));
        }
    }
    for (l, load) in spec.links.iter_mut().zip(links) {
        if l.bandwidth.is_some() {
            l.bandwidth = Some((p.factor * load).ceil().max(1.0));
        }
    }
    Ok((spec, random))
}

/// Sets every capacity to max(load of a random near-optimal placement,
/// 0.7 × load of the capacity-free optimum): the random placement fits,
/// the capacity-free optimum does not wherever it loads a resource more
/// than 1/0.7 times as much as the random one (on all but the smallest
/// instances, somewhere).
fn make_binding(spec: &mut TopologySpec, rng: &mut Rng) {
    for n in &mut spec.nodes {
        n.cpu = n.cpu.map(|_| f64::MAX / 4.0);
    }
    for l in &mut spec.links {
        l.bandwidth = l.bandwidth.map(|_| f64::MAX / 4.0);
    }
    let Ok(topo) = spec.validate() else { return };
    let Ok(problem) = PlacementProblem::new(&topo) else {
        return;
    };
    let Ok(values) = problem.objective_values(Objective::Bandwidth) else {
        return;
    };
    let best: Vec<usize> = values
        .iter()
        .map(|vs| {
            (0..vs.len())
                .min_by(|&a, &b| vs[a].total_cmp(&vs[b]).then(a.cmp(&b)))
                .unwrap_or(0)
        })
        .collect();
    // A random placement among each unit's cheapest tenth.
    let random: Vec<usize> = values
        .iter()
        .map(|vs| {
            let mut idx: Vec<usize> = (0..vs.len()).collect();
            idx.sort_by(|&a, &b| vs[a].total_cmp(&vs[b]).then(a.cmp(&b)));
            idx[rng.below(idx.len().div_ceil(10))]
        })
        .collect();
    let (opt_links, opt_nodes) = problem.total_loads(&best);
    let (rnd_links, rnd_nodes) = problem.total_loads(&random);
    let cap = |opt: f64, rnd: f64| {
        let c = rnd.max(0.7 * opt);
        if c > 0.0 {
            c
        } else {
            1.0
        }
    };
    for (i, n) in spec.nodes.iter_mut().enumerate() {
        if n.cpu.is_some() {
            n.cpu = Some(cap(opt_nodes[i], rnd_nodes[i]).ceil());
        }
    }
    for (i, l) in spec.links.iter_mut().enumerate() {
        if l.bandwidth.is_some() {
            l.bandwidth = Some(cap(opt_links[i], rnd_links[i]).ceil());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_instance_and_binding_capacities_bind() {
        let p = InstanceParams {
            nodes: 200,
            subscribers: 50,
            ..InstanceParams::default()
        };
        assert_eq!(random_instance(p), random_instance(p));
        let topo = random_instance(p).validate().expect("valid");
        let problem = PlacementProblem::new(&topo).expect("delay-feasible");
        assert!(!problem.capacity_rows().is_empty(), "capacities can bind");
        // The capacity-free optimum breaks a capacity.
        let values = problem
            .objective_values(Objective::Bandwidth)
            .expect("finite");
        let best: Vec<usize> = values
            .iter()
            .map(|vs| {
                (0..vs.len())
                    .min_by(|&a, &b| vs[a].total_cmp(&vs[b]))
                    .unwrap_or(0)
            })
            .collect();
        assert!(
            !problem.fits(&best),
            "the capacity-free optimum does not fit"
        );
    }
}
