//! Writes a seeded random placement instance with **tight** capacities as
//! TOML (the "tight" instances of BENCHMARKS.md's "Proxy placement: answers
//! within the time limit" table): every link and node listed below gets a
//! capacity equal to FACTOR × its load under one random placement (picked
//! among each unit's cheapest FRACTION of candidates), so with FACTOR = 1
//! that placement fits exactly and few others do.
//!
//! ```sh
//! cargo run --release -p tagwire-place --example generate_tight -- 100 100 1 > tight.toml
//! tagwire place tight.toml --time-limit 1
//! ```
//!
//! Arguments: NODES SUBSCRIBERS SEED [FACTOR FRACTION CAPPED_LINKS CAPPED_NODES]
//! (defaults 100 100 1 1.0 1.0 1.0 1.0).

use tagwire_place::generate::{random_instance, InstanceParams};
use tagwire_place::{Objective, PlacementProblem};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(text) => {
            print!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let defaults = [100.0, 100.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let mut a = defaults;
    for (i, x) in a.iter_mut().enumerate() {
        if let Some(s) = args.get(i) {
            *x = s
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("argument {} must be a number >= 0, got {s:?}", i + 1))?;
        }
    }
    let mut spec = random_instance(InstanceParams {
        nodes: (a[0] as usize).clamp(2, 100_000),
        subscribers: (a[1] as usize).clamp(1, 100_000),
        seed: a[2] as u64,
        capped_links: a[5],
        capped_nodes: a[6],
        binding: false,
        ..InstanceParams::default()
    });
    let (factor, fraction) = (a[3], a[4].clamp(0.0, 1.0));
    for n in &mut spec.nodes {
        n.cpu = n.cpu.map(|_| f64::MAX / 4.0);
    }
    for l in &mut spec.links {
        l.bandwidth = l.bandwidth.map(|_| f64::MAX / 4.0);
    }
    let topo = spec.validate().map_err(|e| e.to_string())?;
    let problem = PlacementProblem::new(&topo).map_err(|e| e.to_string())?;
    let values = problem
        .objective_values(Objective::Bandwidth)
        .map_err(|e| e.to_string())?;
    let mut state = (a[2] as u64).wrapping_mul(7919).wrapping_add(1);
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
            n.cpu = Some((factor * load).ceil().max(1.0));
        }
    }
    for (l, load) in spec.links.iter_mut().zip(links) {
        if l.bandwidth.is_some() {
            l.bandwidth = Some((factor * load).ceil().max(1.0));
        }
    }
    toml::to_string(&spec).map_err(|e| e.to_string())
}
