//! The result of a placement: [`PlacementReport`] (serialised as the JSON
//! that the daemon's `proxy=auto` consumes, format `tagwire-placement/1`),
//! its plain-text rendering, and the Appendix A style per-node table that
//! `--explain` prints.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::exhaustive::Assignment;
use crate::limits;
use crate::model::ProxySharing;
use crate::problem::{Objective, PlacementProblem};

/// Format identifier written in every report.
pub const REPORT_FORMAT: &str = "tagwire-placement/1";

/// Which algorithm produced a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Appendix A exhaustive search.
    Exhaustive,
    /// Lagrangian branch and bound.
    BranchAndBound,
    /// Mixed-integer programme.
    Mip,
}

impl Algorithm {
    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Exhaustive => "exhaustive",
            Algorithm::BranchAndBound => "branch_and_bound",
            Algorithm::Mip => "mip",
        }
    }
}

/// Where one subscriber's channel goes and what delay it gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriberPlacement {
    /// Subscriber name.
    pub subscriber: String,
    /// Its node.
    pub node: String,
    /// Predicted end-to-end delay δ in ms.
    pub delay_ms: f64,
    /// Its bound δʳ in ms, if any.
    pub max_delay_ms: Option<f64>,
    /// Hops publisher → proxy (at rate f).
    pub hops_from_publisher: u32,
    /// Hops proxy → subscriber (at rate f').
    pub hops_to_subscriber: u32,
    /// Links of the route proxy → subscriber, in order.
    pub route: Vec<String>,
}

/// One proxy: the node it runs on and the subscribers it serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyPlacement {
    /// Tag name.
    pub tag: String,
    /// Publisher node.
    pub publisher_node: String,
    /// The node chosen for the proxy.
    pub proxy_node: String,
    /// Whether the proxy is shared by all subscribers of the tag.
    pub shared: bool,
    /// Bandwidth of these channels, bytes/s summed over links.
    pub bandwidth: f64,
    /// CPU of these channels, units/s summed over nodes.
    pub cpu: f64,
    /// Links of the route publisher → proxy, in order.
    pub route_from_publisher: Vec<String>,
    /// The subscribers served.
    pub subscribers: Vec<SubscriberPlacement>,
}

/// Load of one link (only links that carry traffic are listed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkUsage {
    /// Link name.
    pub link: String,
    /// Load in bytes/s.
    pub load: f64,
    /// Capacity in bytes/s, if limited.
    pub capacity: Option<f64>,
}

/// CPU load of one node (only nodes with load are listed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeUsage {
    /// Node name.
    pub node: String,
    /// Load in CPU units/s.
    pub cpu_load: f64,
    /// Capacity, if limited.
    pub capacity: Option<f64>,
}

/// Size of the search, for the curious and for benchmarks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchStats {
    /// Placement units (proxies to place).
    pub units: usize,
    /// Delay-feasible (unit, node) pairs = MIP binary variables.
    pub candidates: usize,
    /// Capacity constraints that can bind.
    pub capacity_rows: usize,
    /// Combinations a naive enumeration would visit.
    pub combinations: f64,
    /// Search nodes the exhaustive search visited (0 for the MIP).
    pub visited: u64,
}

/// A complete answer: one proxy node per unit, costs, delays and loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementReport {
    /// Always [`REPORT_FORMAT`].
    pub format: String,
    /// The algorithm used.
    pub algorithm: Algorithm,
    /// The objective, as given on the command line (`bandwidth`, `cpu`,
    /// `mixed:W`).
    pub objective: String,
    /// Its value.
    pub objective_value: f64,
    /// `"optimal"` when proven optimal, `"gap"` when the time limit cut the
    /// search short (then `gap` says how far from optimal it may be).
    pub status: String,
    /// Proven relative gap (objective − lower bound) / objective; 0 when
    /// optimal.
    pub gap: f64,
    /// Proven lower bound on the optimal objective value.
    pub lower_bound: f64,
    /// Total bandwidth, bytes/s.
    pub total_bandwidth: f64,
    /// Total CPU, units/s.
    pub total_cpu: f64,
    /// One entry per proxy, in tag then subscriber order.
    pub proxies: Vec<ProxyPlacement>,
    /// Loaded links.
    pub links: Vec<LinkUsage>,
    /// Loaded nodes.
    pub nodes: Vec<NodeUsage>,
    /// Search size.
    pub search: SearchStats,
}

impl PlacementReport {
    /// Builds the report of an assignment.
    pub fn new(
        problem: &PlacementProblem<'_>,
        objective: Objective,
        algorithm: Algorithm,
        assignment: &Assignment,
    ) -> Self {
        let topo = problem.topology();
        let mut proxies = Vec::with_capacity(problem.units().len());
        let mut total_bandwidth = 0.0;
        let mut total_cpu = 0.0;
        for (u, unit) in problem.units().iter().enumerate() {
            let cand = problem.candidates()[u][assignment.choice[u]];
            let eval = problem.evaluate_candidate(u, assignment.choice[u]);
            let link_names = |ls: &[usize]| -> Vec<String> {
                ls.iter().map(|&l| topo.links[l].name.clone()).collect()
            };
            let tag = &topo.tags[unit.tag];
            total_bandwidth += cand.bandwidth;
            total_cpu += cand.cpu;
            let subscribers = unit
                .subscribers
                .iter()
                .enumerate()
                .map(|(pos, &s)| {
                    let sub = &tag.subscribers[s];
                    SubscriberPlacement {
                        subscriber: sub.name.clone(),
                        node: topo.nodes[sub.node].name.clone(),
                        delay_ms: eval.delays_ms[pos],
                        max_delay_ms: sub.max_delay_ms,
                        hops_from_publisher: eval.hops_from_publisher,
                        hops_to_subscriber: eval.hops_to_subscriber[pos],
                        route: link_names(&eval.routes_to_subscriber[pos]),
                    }
                })
                .collect();
            proxies.push(ProxyPlacement {
                tag: tag.name.clone(),
                publisher_node: topo.nodes[tag.publisher].name.clone(),
                proxy_node: topo.nodes[cand.node].name.clone(),
                shared: tag.proxy == ProxySharing::Shared,
                bandwidth: cand.bandwidth,
                cpu: cand.cpu,
                route_from_publisher: link_names(&eval.route_from_publisher),
                subscribers,
            });
        }
        let (link_loads, node_loads) = problem.total_loads(&assignment.choice);
        let links = topo
            .links
            .iter()
            .zip(link_loads)
            .filter(|(_, load)| *load > 0.0)
            .map(|(l, load)| LinkUsage {
                link: l.name.clone(),
                load,
                capacity: l.bandwidth,
            })
            .collect();
        let nodes = topo
            .nodes
            .iter()
            .zip(node_loads)
            .filter(|(_, load)| *load > 0.0)
            .map(|(n, load)| NodeUsage {
                node: n.name.clone(),
                cpu_load: load,
                capacity: n.cpu,
            })
            .collect();
        PlacementReport {
            format: REPORT_FORMAT.to_owned(),
            algorithm,
            objective: objective.to_string(),
            objective_value: assignment.objective,
            status: if assignment.optimal { "optimal" } else { "gap" }.to_owned(),
            gap: assignment.gap(),
            lower_bound: assignment.lower_bound,
            total_bandwidth,
            total_cpu,
            proxies,
            links,
            nodes,
            search: SearchStats {
                units: problem.units().len(),
                candidates: problem.candidates().iter().map(Vec::len).sum(),
                capacity_rows: problem.capacity_rows().len(),
                combinations: problem.combinations(),
                visited: assignment.visited,
            },
        }
    }

    /// Plain-text rendering: one line per proxy and per subscriber, then
    /// the totals.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let alg = self.algorithm.name();
        for p in &self.proxies {
            let _ = writeln!(
                out,
                "tag {:?}: proxy on node {:?} ({}; publisher on node {:?}), bandwidth {} B/s, cpu {}/s",
                p.tag,
                p.proxy_node,
                if p.shared { "shared" } else { "per subscriber" },
                p.publisher_node,
                num(p.bandwidth),
                num(p.cpu)
            );
            for s in &p.subscribers {
                let bound = s.max_delay_ms.map_or_else(
                    || "unbounded".to_owned(),
                    |b| format!("bound {} ms", num(b)),
                );
                let _ = writeln!(
                    out,
                    "  subscriber {:?} on node {:?}: delay {} ms ({}), hops {} + {}, route {}",
                    s.subscriber,
                    s.node,
                    num(s.delay_ms),
                    bound,
                    s.hops_from_publisher,
                    s.hops_to_subscriber,
                    route_text(&p.route_from_publisher, &s.route)
                );
            }
        }
        let status = if self.status == "optimal" {
            "optimal".to_owned()
        } else {
            format!(
                "gap {}%, lower bound {}",
                num(self.gap * 100.0),
                num(self.lower_bound)
            )
        };
        let _ = writeln!(
            out,
            "objective {} = {} ({status}; bandwidth {} B/s, cpu {}/s); algorithm {alg}; {} proxies, {} candidates, {} capacity rows",
            self.objective,
            num(self.objective_value),
            num(self.total_bandwidth),
            num(self.total_cpu),
            self.search.units,
            self.search.candidates,
            self.search.capacity_rows
        );
        out
    }
}

/// `a, b | c` : publisher → proxy links, then proxy → subscriber links.
fn route_text(from_publisher: &[String], to_subscriber: &[String]) -> String {
    let side = |ls: &[String]| {
        if ls.is_empty() {
            "-".to_owned()
        } else {
            ls.join(",")
        }
    };
    format!("{} | {}", side(from_publisher), side(to_subscriber))
}

/// Formats a number without needless decimals.
pub(crate) fn num(x: f64) -> String {
    if x.is_finite() && x == x.round() && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// `aX + bY` with unit coefficients and zero terms left out.
fn linear(terms: &[(u64, &str)]) -> String {
    let parts: Vec<String> = terms
        .iter()
        .filter(|(c, _)| *c != 0)
        .map(|(c, s)| {
            if *c == 1 {
                (*s).to_owned()
            } else {
                format!("{c}{s}")
            }
        })
        .collect();
    if parts.is_empty() {
        "0".to_owned()
    } else {
        parts.join(" + ")
    }
}

/// The per-node table of the paper's Appendix A for every unit: hops,
/// δ(i,j) symbolic and in ms, TotalCost_j symbolic and numeric, CPU, and
/// which node was chosen.
pub fn explain(problem: &PlacementProblem<'_>, assignment: Option<&Assignment>) -> String {
    let topo = problem.topology();
    let mut out = String::new();
    for (u, unit) in problem.units().iter().enumerate() {
        let tag = &topo.tags[unit.tag];
        let subs: Vec<_> = unit
            .subscribers
            .iter()
            .map(|&s| &tag.subscribers[s])
            .collect();
        let _ = writeln!(
            out,
            "tag {:?}: publisher on node {:?}, T = {} ms (f = {}/s), K = {} B; {} for {} subscriber(s)",
            tag.name,
            topo.nodes[tag.publisher].name,
            num(tag.period_ms),
            num(tag.rate()),
            num(tag.message_bytes),
            if tag.proxy == ProxySharing::Shared { "one shared proxy" } else { "own proxy" },
            subs.len()
        );
        for (i, s) in subs.iter().enumerate() {
            let _ = writeln!(
                out,
                "  subscriber {} = {:?} on node {:?}: T' = {} ms (f' = {}/s), {} B/message, bound δʳ = {}",
                i + 1,
                s.name,
                topo.nodes[s.node].name,
                num(s.period_ms),
                num(s.rate()),
                num(s.message_bytes),
                s.max_delay_ms.map_or_else(|| "none".to_owned(), |b| format!("{} ms", num(b)))
            );
        }
        // Symbolic costs only when all subscribers share T' and K.
        let uniform = subs
            .iter()
            .all(|s| s.period_ms == subs[0].period_ms && s.message_bytes == tag.message_bytes);
        let mut header = vec!["node".to_owned(), "d_pub".to_owned()];
        for i in 1..=subs.len() {
            header.push(format!("d_sub{i}"));
        }
        for i in 1..=subs.len() {
            header.push(format!("δ{i}"));
        }
        header.extend([
            "TotalCost_j (B/s)".to_owned(),
            "cpu/s".to_owned(),
            "feasible".to_owned(),
        ]);
        let chosen = assignment.map(|a| problem.candidates()[u][a.choice[u]].node);
        let mut rows: Vec<(bool, f64, Vec<String>)> = Vec::new();
        for j in 0..topo.nodes.len() {
            let e = match assignment {
                Some(a) if chosen == Some(j) => problem.evaluate_candidate(u, a.choice[u]),
                _ => problem.evaluate(u, j),
            };
            let mut row = vec![
                topo.nodes[j].name.clone(),
                e.hops_from_publisher.to_string(),
            ];
            row.extend(e.hops_to_subscriber.iter().map(u32::to_string));
            for (pos, s) in subs.iter().enumerate() {
                let sym = linear(&[
                    (u64::from(e.hops_from_publisher), "T"),
                    (u64::from(e.hops_to_subscriber[pos]), "T'"),
                ]);
                let lat = e.delays_ms[pos]
                    - f64::from(e.hops_from_publisher) * tag.period_ms
                    - f64::from(e.hops_to_subscriber[pos]) * s.period_ms;
                let sym = if lat > 1e-9 {
                    format!("{sym} + {} ms", num(lat))
                } else {
                    sym
                };
                row.push(format!("{sym} = {} ms", num(e.delays_ms[pos])));
            }
            let cost = if uniform {
                let a = u64::from(e.hops_from_publisher) * subs.len() as u64;
                let b: u64 = e.hops_to_subscriber.iter().map(|&d| u64::from(d)).sum();
                let sym = linear(&[(a, "f"), (b, "f'")]);
                let sym = if a != 0 && b != 0 {
                    format!("K·({sym})")
                } else {
                    format!("K·{sym}")
                };
                format!("{sym} = {}", num(e.bandwidth))
            } else {
                num(e.bandwidth)
            };
            row.push(cost);
            row.push(num(e.cpu));
            let mut feas = if e.feasible {
                "yes".to_owned()
            } else {
                let bad: Vec<String> = subs
                    .iter()
                    .enumerate()
                    .filter(|(pos, s)| {
                        s.max_delay_ms
                            .is_some_and(|b| e.delays_ms[*pos] > b * (1.0 + 1e-12))
                    })
                    .map(|(pos, _)| format!("δ{} > δʳ", pos + 1))
                    .collect();
                format!("no ({})", bad.join(", "))
            };
            if chosen == Some(j) {
                feas.push_str("  <= chosen");
            }
            row.push(feas);
            rows.push((e.feasible, e.bandwidth, row));
        }
        let total = rows.len();
        if total > limits::MAX_EXPLAIN_ROWS {
            rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)));
            rows.truncate(limits::MAX_EXPLAIN_ROWS);
        }
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for (_, _, r) in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::from("  ");
            for (c, w) in cells.iter().zip(&widths) {
                let pad = w.saturating_sub(c.chars().count());
                s.push_str(c);
                s.push_str(&" ".repeat(pad + 2));
            }
            s.trim_end().to_owned()
        };
        let _ = writeln!(out, "{}", line(&header));
        for (_, _, r) in &rows {
            let _ = writeln!(out, "{}", line(r));
        }
        if total > rows.len() {
            let _ = writeln!(
                out,
                "  … {} more nodes not shown (the {} cheapest feasible are)",
                total - rows.len(),
                rows.len()
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_drop_needless_decimals() {
        assert_eq!(num(200.0), "200");
        assert_eq!(num(89.507412), "89.507");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(f64::INFINITY), "inf");
    }

    #[test]
    fn symbolic_sums_leave_out_zero_and_unit_coefficients() {
        assert_eq!(linear(&[(0, "T"), (2, "T'")]), "2T'");
        assert_eq!(linear(&[(1, "T"), (1, "T'")]), "T + T'");
        assert_eq!(linear(&[(0, "T"), (0, "T'")]), "0");
    }
}
