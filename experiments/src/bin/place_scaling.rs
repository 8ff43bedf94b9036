//! How placement time grows with nodes and subscribers — first with
//! capacities that bind (the Lagrangian branch and bound, 1 s budget, against
//! the MIP and the exhaustive search where they finish), then on the older
//! mostly-slack instances — and where the exhaustive search stops being
//! feasible. Prints Markdown tables (pasted into BENCHMARKS.md) and writes
//! an SVG plot.
//!
//! Run: `cargo run --release --manifest-path experiments/Cargo.toml --bin place_scaling -- [OUT.svg]`
//! (default `docs/placement-scaling.svg`; add `--features highs` for HiGHS).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tagwire_place::{
    solve_exhaustive, ExhaustiveOptions, Objective, PlaceError, PlacementProblem, Topology,
};

#[path = "../../../crates/tagwire-place/benches/random_topology.rs"]
mod random_topology;
use random_topology::{random_topology, RandomParams};

/// Median wall time of `f` over `reps` runs (at least one).
fn time<T>(reps: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    times.sort();
    (times[times.len() / 2], last.expect("ran at least once"))
}

fn feasible(mut p: RandomParams) -> Topology {
    for _ in 0..50 {
        let topo = random_topology(p).validate().expect("valid");
        let result = PlacementProblem::new(&topo).and_then(|problem| {
            if problem.capacity_rows().is_empty() || problem.combinations() < 1e12 {
                solve_exhaustive(
                    &problem,
                    Objective::Bandwidth,
                    ExhaustiveOptions::default(),
                    &mut |_, _| {},
                )
            } else {
                tagwire_place::solve_mip(&problem, Objective::Bandwidth)
            }
        });
        match result {
            Ok(_) => return topo,
            Err(e) => eprintln!("seed {} infeasible: {e}", p.seed),
        }
        p.seed += 1;
    }
    panic!("no feasible random topology for {p:?}");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Point {
    x: f64,
    exhaustive_ms: Option<f64>,
    mip_ms: Option<f64>,
    bnb_ms: Option<f64>,
}

/// Binding capacities: `generate::random_instance` with `binding: true`.
/// Total time = validate + build + solve, with a 1 s budget for all of it.
fn binding_sweep(
    label: &str,
    params: &[(usize, usize)],
    x_of: impl Fn(usize, usize) -> f64,
    md: &mut String,
) -> Vec<Point> {
    use tagwire_place::generate::{random_instance, InstanceParams};
    use tagwire_place::{solve_branch_and_bound, BranchAndBoundOptions};
    let _ = writeln!(md, "\n{label}\n");
    let _ = writeln!(
        md,
        "| nodes | subscribers | proxies | candidates generated / kept | capacity rows | build ms | branch and bound ms (total) | answer | search nodes | MIP (microlp) ms | exhaustive ms | B&B / MIP |"
    );
    let _ = writeln!(
        md,
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
    );
    let mut points = Vec::new();
    for &(nodes, subscribers) in params {
        let mut seed = 1;
        let spec = loop {
            let spec = random_instance(InstanceParams {
                nodes,
                subscribers,
                seed,
                ..InstanceParams::default()
            });
            let ok = spec
                .validate()
                .is_ok_and(|t| PlacementProblem::new(&t).is_ok());
            if ok || seed > 20 {
                break spec;
            }
            seed += 1;
        };
        let limit = Duration::from_secs(1);
        let mut runs = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            let topo = spec.validate().expect("valid");
            let problem = PlacementProblem::new(&topo).expect("delay-feasible");
            let build = t0.elapsed();
            let r = solve_branch_and_bound(
                &problem,
                Objective::Bandwidth,
                BranchAndBoundOptions {
                    time_limit: limit,
                    ..BranchAndBoundOptions::default()
                },
                &mut || t0.elapsed(),
            );
            let total = t0.elapsed();
            let stats = (
                problem.units().len(),
                problem.generated_candidates(),
                problem.candidates().iter().map(Vec::len).sum::<usize>(),
                problem.capacity_rows().len(),
            );
            runs.push((total, build, r.map_err(|e| e.to_string()), stats));
        }
        runs.sort_by_key(|r| r.0);
        let (total, build, result, (units, generated, kept, rows)) = runs.swap_remove(1);
        let topo = spec.validate().expect("valid");
        let problem = PlacementProblem::new(&topo).expect("delay-feasible");
        let mip = (nodes <= 50).then(|| {
            let t = Instant::now();
            let m = tagwire_place::solve_mip(&problem, Objective::Bandwidth);
            (ms(build + t.elapsed()), m)
        });
        let t = Instant::now();
        let ex = solve_exhaustive(
            &problem,
            Objective::Bandwidth,
            ExhaustiveOptions::default(),
            &mut |_, _| {},
        );
        let ex_ms = ms(build + t.elapsed());
        let (answer, visited) = match &result {
            Ok(a) if a.optimal => ("optimal".to_owned(), a.visited.to_string()),
            Ok(a) => (
                format!("gap {:.2} %", a.gap() * 100.0),
                a.visited.to_string(),
            ),
            Err(e) => (e.clone(), "-".to_owned()),
        };
        if let (Ok(a), Some((_, Ok(m)))) = (&result, &mip) {
            if a.optimal {
                assert!(
                    (a.objective - m.objective).abs() <= 1e-6 * a.objective.max(1.0),
                    "branch and bound and MIP agree"
                );
            }
        }
        let mip_s = mip.as_ref().map_or_else(
            || "not run (> 60 s from 100 nodes)".to_owned(),
            |(t, m)| match m {
                Ok(_) => format!("{t:.1}"),
                Err(e) => e.to_string(),
            },
        );
        let ratio = mip
            .as_ref()
            .and_then(|(t, m)| m.as_ref().ok().map(|_| format!("{:.3}", ms(total) / t)))
            .unwrap_or_else(|| "-".to_owned());
        let ex_s = match &ex {
            Ok(_) => format!("{ex_ms:.1}"),
            Err(PlaceError::ExhaustiveLimit { .. }) => format!("gave up after {ex_ms:.0}"),
            Err(e) => e.to_string(),
        };
        let _ = writeln!(
            md,
            "| {nodes} | {subscribers} | {units} | {generated} / {kept} | {rows} | {:.1} | {:.1} | {answer} | {visited} | {mip_s} | {ex_s} | {ratio} |",
            ms(build),
            ms(total),
        );
        eprintln!("{label}: {nodes} x {subscribers} done");
        points.push(Point {
            x: x_of(nodes, subscribers),
            exhaustive_ms: None,
            mip_ms: None,
            bnb_ms: Some(ms(total)),
        });
    }
    points
}

fn sweep(
    label: &str,
    params: &[RandomParams],
    x_of: impl Fn(&RandomParams) -> f64,
    md: &mut String,
) -> Vec<Point> {
    let _ = writeln!(md, "\n{label}\n");
    let _ = writeln!(
        md,
        "| nodes | subscribers | proxies | candidates (MIP binaries) | capacity rows | combinations | build ms | exhaustive ms | MIP ms |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut points = Vec::new();
    for p in params {
        let topo = feasible(*p);
        let reps = if p.nodes * p.subscribers > 100_000 {
            3
        } else {
            7
        };
        let (build, problem) = time(reps, || PlacementProblem::new(&topo).expect("feasible"));
        let (ex, ex_res) = time(reps, || {
            solve_exhaustive(
                &problem,
                Objective::Bandwidth,
                ExhaustiveOptions::default(),
                &mut |_, _| {},
            )
        });
        let ex_ms = match &ex_res {
            Ok(_) => Some(ms(build + ex)),
            Err(PlaceError::ExhaustiveLimit { .. }) => None,
            Err(e) => panic!("exhaustive: {e}"),
        };
        let (mip, mip_res) = time(1, || {
            tagwire_place::solve_mip(&problem, Objective::Bandwidth)
        });
        let mip_ms = mip_res.as_ref().ok().map(|_| ms(build + mip));
        if let (Ok(a), Ok(b)) = (&ex_res, &mip_res) {
            assert!(
                (a.objective - b.objective).abs() <= 1e-6 * a.objective.max(1.0),
                "algorithms agree"
            );
        }
        let show =
            |v: Option<f64>, why: &str| v.map_or_else(|| why.to_owned(), |x| format!("{x:.2}"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {:.1e} | {:.2} | {} | {} |",
            p.nodes,
            p.subscribers,
            problem.units().len(),
            problem.candidates().iter().map(Vec::len).sum::<usize>(),
            problem.capacity_rows().len(),
            problem.combinations(),
            ms(build),
            show(ex_ms, "limit"),
            show(
                mip_ms,
                &format!("{:?}", mip_res.as_ref().err().map(ToString::to_string))
            ),
        );
        eprintln!("{label}: {p:?} done");
        points.push(Point {
            x: x_of(p),
            exhaustive_ms: ex_ms,
            mip_ms,
            bnb_ms: None,
        });
    }
    points
}

/// Exhaustive search on coupled problems of growing size: every subscriber
/// has its own proxy and the capacities bind, so units cannot be solved one
/// by one.
fn exhaustive_limit(md: &mut String) {
    let _ = writeln!(md, "\nExhaustive search on coupled problems (40 random nodes, one proxy per subscriber, capacities on 60 % of links and 50 % of nodes; \"capacity rows\" are those that can bind)\n");
    let _ = writeln!(md, "| proxies | candidates | capacity rows | combinations | visited | exhaustive ms | MIP ms |");
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|");
    for subs in [2usize, 4, 6, 8, 10, 12, 16, 20, 30, 40] {
        let topo = feasible(RandomParams {
            nodes: 40,
            subscribers: subs,
            per_tag: 1,
            capped_links: 0.6,
            capped_nodes: 0.5,
            seed: 7,
        });
        let problem = PlacementProblem::new(&topo).expect("feasible");
        let opts = ExhaustiveOptions {
            max_visits: 20_000_000,
            ..ExhaustiveOptions::default()
        };
        let t = Instant::now();
        let r = solve_exhaustive(&problem, Objective::Bandwidth, opts, &mut |_, _| {});
        let ex = ms(t.elapsed());
        let t = Instant::now();
        let m = tagwire_place::solve_mip(&problem, Objective::Bandwidth);
        let mip = ms(t.elapsed());
        let (visited, ex_s) = match &r {
            Ok(a) => (a.visited.to_string(), format!("{ex:.2}")),
            Err(PlaceError::ExhaustiveLimit { visited, .. }) => {
                (format!("> {visited}"), format!("gave up after {ex:.0}"))
            }
            Err(e) => (e.to_string(), "-".into()),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1e} | {} | {} | {} |",
            problem.units().len(),
            problem.candidates().iter().map(Vec::len).sum::<usize>(),
            problem.capacity_rows().len(),
            problem.combinations(),
            visited,
            ex_s,
            m.map_or_else(|e| e.to_string(), |_| format!("{mip:.2}")),
        );
        eprintln!("coupled: {subs} done");
    }
}

/// A knapsack in disguise: k tags on the vBNS chain, each wanting its proxy
/// on the publisher's node 0 (least bandwidth), whose CPU fits only about
/// half of them; rates and sizes differ per tag. The cost lower bound of the
/// search ignores capacities, so it prunes badly and the search grows
/// exponentially, which is where exhaustive search stops being feasible.
fn exhaustive_contention(md: &mut String) {
    use rand::{Rng, SeedableRng};
    use tagwire_place::model::{LinkSpec, NodeSpec, SubscriberSpec, TagSpec, TopologySpec};
    let _ = writeln!(md, "\nExhaustive search where a capacity really binds (vBNS chain, k tags contending for node 0's CPU)\n");
    let _ = writeln!(
        md,
        "| proxies | combinations (7^k) | visited | exhaustive ms | MIP ms |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|");
    for k in [4usize, 8, 12, 16, 20, 24, 28, 32, 40] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(k as u64);
        let mut tags = Vec::new();
        let mut base = 0.0;
        let mut scaling = 0.0;
        for t in 0..k {
            let period = [5.0, 10.0, 20.0, 25.0, 40.0][rng.gen_range(0..5)];
            let mult = f64::from(rng.gen_range(2u32..=5));
            base += 1000.0 / period;
            scaling += 10.0 * 1000.0 / period;
            tags.push(TagSpec {
                name: format!("/k{t}"),
                publisher: "0".into(),
                period_ms: period,
                message_bytes: Some(f64::from(rng.gen_range(100u32..2000))),
                proxy: Default::default(),
                scale_cpu: Some(10.0),
                forward_cpu: Some(1.0),
                subscribers: vec![SubscriberSpec {
                    name: "sd".into(),
                    node: "6".into(),
                    period_ms: Some(period * mult),
                    message_bytes: None,
                    max_delay_ms: None,
                }],
            });
        }
        let spec = TopologySpec {
            nodes: (0..7)
                .map(|i| NodeSpec {
                    name: i.to_string(),
                    cpu: (i == 0).then_some(base + 0.5 * scaling),
                    label: None,
                })
                .collect(),
            links: (0..6)
                .map(|i| LinkSpec {
                    name: Some(((b'a' + i as u8) as char).to_string()),
                    between: [i.to_string(), (i + 1).to_string()],
                    bandwidth: None,
                    latency_ms: None,
                })
                .collect(),
            tags,
        };
        let topo = spec.validate().expect("valid");
        let problem = PlacementProblem::new(&topo).expect("feasible");
        let t = Instant::now();
        let r = solve_exhaustive(
            &problem,
            Objective::Bandwidth,
            ExhaustiveOptions {
                max_visits: 20_000_000,
                ..ExhaustiveOptions::default()
            },
            &mut |_, _| {},
        );
        let ex = ms(t.elapsed());
        let t = Instant::now();
        let m = tagwire_place::solve_mip(&problem, Objective::Bandwidth);
        let mip = ms(t.elapsed());
        if let (Ok(a), Ok(b)) = (&r, &m) {
            assert!(
                (a.objective - b.objective).abs() <= 1e-6 * a.objective.max(1.0),
                "algorithms agree"
            );
        }
        let (visited, ex_s) = match &r {
            Ok(a) => (a.visited.to_string(), format!("{ex:.2}")),
            Err(PlaceError::ExhaustiveLimit { visited, .. }) => {
                (format!("> {visited}"), format!("gave up after {ex:.0}"))
            }
            Err(e) => (e.to_string(), "-".into()),
        };
        let _ = writeln!(
            md,
            "| {k} | {:.1e} | {visited} | {ex_s} | {} |",
            problem.combinations(),
            m.map_or_else(|e| e.to_string(), |_| format!("{mip:.2}")),
        );
        eprintln!("contention: {k} done");
    }
}

fn svg(series: &[(&str, &[Point])], out: &str) {
    let (w, h, left, bottom, top, right) = (720.0, 420.0, 70.0, 50.0, 30.0, 190.0);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.x))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| {
            p.iter()
                .flat_map(|q| [q.exhaustive_ms, q.mip_ms, q.bnb_ms])
                .flatten()
        })
        .collect();
    let lx = |v: f64| v.max(1e-9).log10();
    let (x0, x1) = (
        lx(xs.iter().cloned().fold(f64::MAX, f64::min)).floor(),
        lx(xs.iter().cloned().fold(0.0, f64::max)).ceil(),
    );
    let (y0, y1) = (
        lx(ys.iter().cloned().fold(f64::MAX, f64::min)).floor(),
        lx(ys.iter().cloned().fold(0.0, f64::max)).ceil(),
    );
    let px = |v: f64| left + (lx(v) - x0) / (x1 - x0).max(1.0) * (w - left - right);
    let py = |v: f64| h - bottom - (lx(v) - y0) / (y1 - y0).max(1.0) * (h - top - bottom);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    );
    for e in x0 as i32..=x1 as i32 {
        let x = px(10f64.powi(e));
        let _ = write!(
            s,
            r#"<line x1="{x}" y1="{top}" x2="{x}" y2="{}" stroke="lightgray"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            h - bottom,
            h - bottom + 16.0,
            10f64.powi(e)
        );
    }
    for e in y0 as i32..=y1 as i32 {
        let y = py(10f64.powi(e));
        let _ = write!(
            s,
            r#"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="lightgray"/><text x="{}" y="{}" text-anchor="end">{} ms</text>"#,
            w - right,
            left - 6.0,
            y + 4.0,
            10f64.powi(e)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">nodes (subscribers = 100) / subscribers (nodes = 1000)</text>"#,
        (left + w - right) / 2.0,
        h - 10.0
    );
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    ];
    let mut legend = 0;
    for (name, points) in series {
        for (kind, pick) in [("exhaustive", 0), ("MIP", 1), ("B&amp;B, binding caps", 2)] {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|p| {
                    match pick {
                        0 => p.exhaustive_ms,
                        1 => p.mip_ms,
                        _ => p.bnb_ms,
                    }
                    .map(|y| (px(p.x), py(y)))
                })
                .collect();
            if pts.is_empty() {
                continue;
            }
            let colour = colours[legend % colours.len()];
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = write!(
                s,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            for (x, y) in &pts {
                let _ = write!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#
                );
            }
            let ly = top + 20.0 * legend as f64;
            let _ = write!(
                s,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{kind}, vary {name}</text>"#,
                w - right + 10.0,
                w - right + 30.0,
                w - right + 35.0,
                ly + 4.0
            );
            legend += 1;
        }
    }
    s.push_str("</svg>\n");
    std::fs::write(out, s).expect("write the SVG");
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "docs/placement-scaling.svg".to_owned());
    let base = RandomParams {
        nodes: 1000,
        subscribers: 100,
        per_tag: 10,
        capped_links: 0.3,
        capped_nodes: 0.2,
        seed: 1,
    };
    let mut md = String::new();
    let c = binding_sweep(
        "Binding capacities, growing nodes (100 subscribers in tags of 10; 1 s budget)",
        &[
            (30, 100),
            (50, 100),
            (100, 100),
            (300, 100),
            (1000, 100),
            (3000, 100),
        ],
        |n, _| n as f64,
        &mut md,
    );
    let d = binding_sweep(
        "Binding capacities, growing subscribers (1,000 nodes; 1 s budget)",
        &[
            (1000, 10),
            (1000, 30),
            (1000, 100),
            (1000, 300),
            (1000, 1000),
        ],
        |_, s| s as f64,
        &mut md,
    );
    let by_nodes: Vec<RandomParams> = [100, 300, 1000, 3000, 10_000]
        .iter()
        .map(|&n| RandomParams { nodes: n, ..base })
        .collect();
    let by_subs: Vec<RandomParams> = [10, 30, 100, 300, 1000]
        .iter()
        .map(|&s| RandomParams {
            subscribers: s,
            ..base
        })
        .collect();
    let a = sweep(
        "Growing nodes (100 subscribers in tags of 10)",
        &by_nodes,
        |p| p.nodes as f64,
        &mut md,
    );
    let b = sweep(
        "Growing subscribers (1,000 nodes)",
        &by_subs,
        |p| p.subscribers as f64,
        &mut md,
    );
    exhaustive_limit(&mut md);
    exhaustive_contention(&mut md);
    svg(
        &[
            ("nodes", &a),
            ("subscribers", &b),
            ("nodes", &c),
            ("subscribers", &d),
        ],
        &out,
    );
    println!("{md}");
    println!("plot written to {out}");
}
