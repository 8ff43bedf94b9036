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
//! baseline zenoh-mcast sub --group 'udp/224.0.5.1:7450#iface=eth0' &   # one per host
//! baseline zenoh-mcast pub --group 'udp/224.0.5.1:7450#iface=eth0' --duration 3
//! baseline shm-pingpong iceoryx2 --wait spin --size 1048576 --pong-cpu 1
//! ```

use clap::{Args, Parser, Subcommand};
use tagwire_bench::measure::{Mode, RunParams};
use tagwire_bench::shm_pingpong::{self, PingPongParams, PingPongSystem, WaitMode};
use tagwire_bench::{
    iceoryx2_pingpong, nats_client, nats_jetstream, raw_relay, tagwire_shm_pingpong, zenoh_client,
    zenoh_mcast, BenchError,
};

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
    /// Measure a running JetStream-enabled nats-server (`nats-server -js`):
    /// throughput of acknowledged publishes to a fresh file-backed stream.
    NatsJs {
        #[command(flatten)]
        run: RunArgs,
        /// nats-server URL.
        #[arg(long, default_value = "nats://127.0.0.1:4222")]
        server: String,
    },
    /// Run a Zenoh router on tcp/HOST:PORT (default 127.0.0.1) until killed.
    ZenohRouter {
        /// TCP port on HOST.
        #[arg(long, default_value_t = 7447)]
        port: u16,
        /// The address to listen on (a namespace host's, for
        /// `udp-compare.sh --lan`).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Also listen on udp/HOST:PORT (the same number), for client
        /// sessions that connect over UDP.
        #[arg(long)]
        udp: bool,
    },
    /// Measure Zenoh: client sessions through a running router, or (with
    /// --peer-base-port) peer sessions connected to each other directly.
    Zenoh {
        #[command(flatten)]
        run: RunArgs,
        /// Router endpoint.
        #[arg(long, default_value = "tcp/127.0.0.1:7447")]
        server: String,
        /// Peer mode, no router: receiver i listens on 127.0.0.1:PORT+i
        /// (0: a port range picked from the process id, so runs in a row
        /// never meet a previous run's sockets in TIME_WAIT).
        #[arg(long)]
        peer_base_port: Option<u16>,
    },
    /// One role on Zenoh's multicast transport (a peer session whose only
    /// listener is the group; no scouting, no unicast session): run each
    /// role in its own process, receivers (sub, pong) first.
    ZenohMcast(McastArgs),
    /// Same-host ping-pong RTT between two processes (this one pings and
    /// starts the pong process itself).
    ShmPingpong(PingPongArgs),
}

/// A role of a Zenoh multicast run.
#[derive(Args)]
struct McastArgs {
    /// pub (sends for --duration, prints what it sent), sub (prints its
    /// per-second counts), ping (prints the RTT) or pong (echoes).
    #[arg(value_enum)]
    role: McastRole,
    /// The group locator, udp/ADDR:PORT with a multicast ADDR; pin the
    /// interface with #iface=NAME.
    #[arg(long)]
    group: String,
    /// Payload bytes (pub, ping; at least 8).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Seconds pub sends, or ping runs after its first pong (the first
    /// second is warm-up).
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Seconds sub, pong or ping wait for their first message.
    #[arg(long, default_value_t = 30.0)]
    wait: f64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum McastRole {
    Pub,
    Sub,
    Ping,
    Pong,
}

impl McastArgs {
    fn run(&self) -> Result<serde_json::Value, BenchError> {
        let group = zenoh_mcast::Group::parse(&self.group)?;
        let p = zenoh_mcast::RoleParams::new(self.size, self.duration, self.wait)?;
        match self.role {
            McastRole::Pub => zenoh_mcast::publish(&group, p),
            McastRole::Sub => zenoh_mcast::sub(&group, p),
            McastRole::Ping => zenoh_mcast::ping(&group, p),
            McastRole::Pong => zenoh_mcast::pong(&group, p),
        }
    }
}

/// A same-host ping-pong run.
#[derive(Args)]
struct PingPongArgs {
    /// The transport: tagwire-shm, iceoryx2 or unix.
    #[arg(value_enum)]
    system: PingPongSystem,
    /// How each side waits: spin, yield (busy poll sharing a core) or blocking.
    #[arg(long, value_enum, default_value_t = WaitMode::Spin)]
    wait: WaitMode,
    /// Payload bytes per message (at least 16).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Measured round trips (1,000 warm-up round trips come on top).
    #[arg(long, default_value_t = 100_000)]
    iterations: u64,
    /// Run the pong process under `taskset -c CPUS` (else it inherits this
    /// process's CPUs).
    #[arg(long)]
    pong_cpu: Option<String>,
    /// Internal: be the pong side of the run named RENDEZVOUS.
    #[arg(long, hide = true)]
    pong: Option<String>,
}

impl PingPongArgs {
    /// The pong process's arguments for rendezvous `name`.
    fn pong_args(&self, name: &str) -> Vec<String> {
        let system = match self.system {
            PingPongSystem::TagwireShm => "tagwire-shm",
            PingPongSystem::Iceoryx2 => "iceoryx2",
            PingPongSystem::Unix => "unix",
        };
        [
            "shm-pingpong",
            system,
            "--wait",
            self.wait.as_str(),
            "--size",
            &self.size.to_string(),
            "--iterations",
            &self.iterations.to_string(),
            "--pong",
            name,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn run(&self) -> Result<Option<serde_json::Value>, BenchError> {
        let params = PingPongParams::new(self.size, self.iterations, self.wait)?;
        let cpu = self.pong_cpu.as_deref();
        let args = |name: &str| self.pong_args(name);
        match (&self.pong, self.system) {
            (Some(name), PingPongSystem::TagwireShm) => tagwire_shm_pingpong::pong(params, name)?,
            (Some(name), PingPongSystem::Iceoryx2) => iceoryx2_pingpong::pong(params, name)?,
            (Some(name), PingPongSystem::Unix) => shm_pingpong::unix_pong(params, name)?,
            (None, system) => {
                let rtt = match system {
                    PingPongSystem::TagwireShm => tagwire_shm_pingpong::ping(params, args, cpu)?,
                    PingPongSystem::Iceoryx2 => iceoryx2_pingpong::ping(params, args, cpu)?,
                    PingPongSystem::Unix => shm_pingpong::unix_ping(params, args, cpu)?,
                };
                return Ok(Some(shm_pingpong::report(
                    system.as_str(),
                    params,
                    &rtt,
                    cpu,
                )));
            }
        }
        Ok(None)
    }
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
        Command::ZenohRouter { port, host, udp } => {
            zenoh_client::serve_router(&host, port, udp).map(|()| None)
        }
        Command::Raw { run, server } => run
            .params()
            .and_then(|p| raw_relay::run(&server, run.mode, p))
            .map(Some),
        Command::Nats { run, server } => run
            .params()
            .and_then(|p| nats_client::run(&server, run.mode, p))
            .map(Some),
        Command::NatsJs { run, server } => run
            .params()
            .and_then(|p| nats_jetstream::run(&server, run.mode, p))
            .map(Some),
        Command::Zenoh {
            run,
            server,
            peer_base_port,
        } => {
            let meet = match peer_base_port {
                Some(0) => zenoh_client::Meet::Peers {
                    base_port: 20_000 + (std::process::id() % 1500) as u16 * 16,
                },
                Some(base_port) => zenoh_client::Meet::Peers { base_port },
                None => zenoh_client::Meet::Router(server),
            };
            run.params()
                .and_then(|p| zenoh_client::run(&meet, run.mode, p))
                .map(Some)
        }
        Command::ZenohMcast(args) => args.run().map(Some),
        Command::ShmPingpong(args) => args.run(),
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
