//! Writes a seeded random placement instance with binding capacities as
//! TOML (the instances of BENCHMARKS.md's "Binding capacities" table), to
//! try `tagwire place` on:
//!
//! ```sh
//! cargo run --release -p tagwire-place --example generate -- 1000 100 1 > big.toml
//! tagwire place big.toml --time-limit 1      # prints "gap 3.51 %" or "optimal"
//! ```
//!
//! Arguments: NODES SUBSCRIBERS SEED (defaults 1000 100 1).

use tagwire_place::generate::{random_instance, InstanceParams};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |a| {
            a.parse()
                .map_err(|_| format!("argument {} must be a whole number, got {a:?}", i + 1))
        })
    };
    let parsed = (|| Ok::<_, String>((arg(0, 1000)?, arg(1, 100)?, arg(2, 1)?)))();
    let (nodes, subscribers, seed) = match parsed {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let spec = random_instance(InstanceParams {
        nodes: nodes.clamp(2, 100_000) as usize,
        subscribers: subscribers.clamp(1, 100_000) as usize,
        seed,
        ..InstanceParams::default()
    });
    match toml::to_string(&spec) {
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
