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

use tagwire_place::generate::{tight_instance, TightParams};

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
    let (spec, _) = tight_instance(TightParams {
        nodes: (a[0] as usize).clamp(2, 100_000),
        subscribers: (a[1] as usize).clamp(1, 100_000),
        seed: a[2] as u64,
        factor: a[3],
        fraction: a[4],
        capped_links: a[5],
        capped_nodes: a[6],
    })
    .map_err(|e| e.to_string())?;
    toml::to_string(&spec).map_err(|e| e.to_string())
}
