//! `baseline`: the comparison systems of tagwire's benchmark (raw TCP relay,
//! nats-server through async-nats, Zenoh), measured exactly as
//! `tagwire bench` measures tagwire; each run prints one JSON line.
//!
//! ```text
//! baseline raw-relay-server --port 7801 &
//! baseline raw throughput --size 64 --duration 3 --server 127.0.0.1:7801
//! baseline nats latency --size 1024 --server nats://127.0.0.1:7802
//! baseline zenoh-router --port 7803 &
//! baseline zenoh fanout --subscribers 10 --server tcp/127.0.0.1:7803
//! ```

use clap::{Args, Parser, Subcommand};
use tagwire_bench::measure::{Mode, RunParams};
use tagwire_bench::{nats_client, raw_relay, zenoh_client, BenchError};

#[derive(Parser)]
#[command(
    name = "baseline",
    about = "Baseline systems for tagwire's benchmark comparison"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the raw TCP relay on 127.0.0.1:PORT until killed.
    RawRelayServer {
        /// TCP port on 127.0.0.1.
        #[arg(long, default_value_t = 7801)]
        port: u16,
    },
    /// Measure the raw TCP relay.
    Raw {
        #[command(flatten)]
        run: RunArgs,
        /// Relay address.
        #[arg(long, default_value = "127.0.0.1:7801")]
        server: String,
    },
    /// Measure a running nats-server.
    Nats {
        #[command(flatten)]
        run: RunArgs,
        /// nats-server URL.
        #[arg(long, default_value = "nats://127.0.0.1:4222")]
        server: String,
    },
    /// Run a Zenoh router on tcp/127.0.0.1:PORT until killed.
    ZenohRouter {
        /// TCP port on 127.0.0.1.
        #[arg(long, default_value_t = 7447)]
        port: u16,
    },
    /// Measure Zenoh, client sessions through a running router.
    Zenoh {
        #[command(flatten)]
        run: RunArgs,
        /// Router endpoint.
        #[arg(long, default_value = "tcp/127.0.0.1:7447")]
        server: String,
    },
}

/// The measurement and its parameters, the same flags as `tagwire bench`.
#[derive(Args)]
struct RunArgs {
    /// throughput, latency or fanout.
    #[arg(value_enum)]
    mode: Mode,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Seconds the publisher (or pinger) runs.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Subscribers of a fanout run, each on its own connection.
    #[arg(long, default_value_t = 10)]
    subscribers: usize,
    /// Accepted for symmetry with `tagwire bench`; output is always JSON.
    #[arg(long)]
    json: bool,
}

impl RunArgs {
    fn params(&self) -> Result<RunParams, BenchError> {
        RunParams::new(self.mode, self.size, self.duration, self.subscribers)
    }
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::RawRelayServer { port } => raw_relay::serve(port).map(|()| None),
        Command::ZenohRouter { port } => zenoh_client::serve_router(port).map(|()| None),
        Command::Raw { run, server } => run
            .params()
            .and_then(|p| raw_relay::run(&server, run.mode, p))
            .map(Some),
        Command::Nats { run, server } => run
            .params()
            .and_then(|p| nats_client::run(&server, run.mode, p))
            .map(Some),
        Command::Zenoh { run, server } => run
            .params()
            .and_then(|p| zenoh_client::run(&server, run.mode, p))
            .map(Some),
    };
    match result {
        Ok(Some(json)) => println!("{json}"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("baseline: {e}");
            std::process::exit(1);
        }
    }
}
