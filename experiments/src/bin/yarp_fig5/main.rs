//! YARP Fig. 5 as a benchmark: the round trip time of a small event on a
//! measured channel, unloaded and with a bulk load channel filling 20 % and
//! 70 % of a rate-limited link, without ("normal") and with ("qos") channel
//! prioritization, congested (a) at the sender's interface and (b) at the
//! router's port — the two test cases of the paper's Fig. 4.
//!
//! Run it with `scripts/yarp-fig5.sh` (as root: it builds network
//! namespaces), which builds everything in release mode and calls
//!
//! ```sh
//! experiments/target/release/yarp_fig5 --tagwired target/release/tagwired \
//!     --markdown BENCHMARKS.md --svg docs/yarp-fig5.svg
//! ```
//!
//! It prints one line per run (mean and standard deviation of the RTT, the
//! link load measured by tc) and a table at the end; with `--markdown` it
//! rewrites the `yarp-fig5` section of BENCHMARKS.md, with `--svg` it draws
//! the paper-style bar chart. About 2.5 minutes with the defaults.
//! Method and caveats: docs/benchmarks.md, "Channel prioritization".

mod experiment;
mod report;

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use tagwire_testbed::{Shaping, Testbed, TestbedConfig};

use experiment::{Mode, Place, Spec, Transport, SENDER};
use report::{Machine, Row};

/// Reproduces YARP Fig. 5 on a netns testbed (needs root).
#[derive(Debug, Parser)]
#[command(name = "yarp_fig5", args_override_self = true)]
struct Args {
    /// The daemon to measure [default: the product workspace's
    /// target/release/tagwired].
    #[arg(long, value_name = "PATH")]
    tagwired: Option<PathBuf>,
    /// Rate of the congested link, kbit/s.
    #[arg(long, default_value_t = 10_000)]
    rate_kbit: u32,
    /// Loads to apply, percent of the link rate (0, the unloaded run, is
    /// always measured).
    #[arg(long, value_delimiter = ',', default_values_t = [20, 70])]
    loads: Vec<u32>,
    /// Where to congest: `sender` (Fig. 4a), `router` (Fig. 4b).
    #[arg(long, value_delimiter = ',', default_values_t = ["sender".to_owned(), "router".to_owned()])]
    places: Vec<String>,
    /// Payload bytes of each load event.
    #[arg(long, default_value_t = 8192)]
    load_size: usize,
    /// Load events published back to back per tick (the average rate
    /// stays the load's share of the link).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    load_burst: u32,
    /// With qos over UDP, also run the client library's UDP pump threads of
    /// the measured channel at fifo:10 (set with `chrt` from outside: the
    /// library leaves them SCHED_OTHER); shows what they cost.
    #[arg(long)]
    udp_pumps_fifo: bool,
    /// Payload bytes of each ping.
    #[arg(long, default_value_t = 64)]
    ping_size: usize,
    /// Pings per second.
    #[arg(long, default_value_t = 100.0)]
    ping_hz: f64,
    /// Warm-up of each segment, seconds (load on, pings not counted).
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Measured seconds per place, load and channel, split into `rounds`
    /// segments.
    #[arg(long, default_value_t = 8.0)]
    secs: f64,
    /// Segments per place, load and channel; normal and qos alternate.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Transports of the measured and the load channel, `MEASURED/LOAD`
    /// each `tcp` or `udp` (YARP measured every combination). Over UDP an
    /// event must fit one datagram (1,384 bytes of frame by default), so
    /// `--load-size` and `--ping-size` must stay below about 1,300.
    #[arg(long, value_delimiter = ',', default_values_t = ["tcp/tcp".to_owned()])]
    transports: Vec<String>,
    /// Where the load publisher runs: `same` (the pinger's host, Fig. 4a)
    /// or `separate` (a third host of its own, as the paper's Fig. 4b/5b;
    /// only with `--places router`, since a separate host does not load the
    /// sender's interface).
    #[arg(long, default_value = "same")]
    load_host: String,
    /// The name of the section of `--markdown` to rewrite
    /// (`<!-- BEGIN NAME -->` … `<!-- END NAME -->`). `yarp-fig5` with the
    /// default transports and load host writes the original section; any
    /// other run writes the transports table.
    #[arg(long, default_value = "yarp-fig5")]
    section: String,
    /// Rewrite the section `--section` of this markdown file.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Write the bar chart here (SVG).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// The command to show in the report.
    #[arg(long, default_value = "scripts/yarp-fig5.sh")]
    command: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("yarp_fig5: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let tagwired = match &args.tagwired {
        Some(p) => p.clone(),
        // The product workspace's release build, beside experiments/.
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/tagwired"
        )),
    };
    if !tagwired.is_file() {
        return Err(format!(
            "{} does not exist: build it (cargo build --release -p tagwire-cli) or give --tagwired",
            tagwired.display()
        ));
    }
    let places = args
        .places
        .iter()
        .map(|p| match p.as_str() {
            "sender" => Ok(Place::Sender),
            "router" => Ok(Place::Router),
            other => Err(format!("unknown place {other:?}: sender or router")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let transports = args
        .transports
        .iter()
        .map(|t| {
            let (m, l) = t
                .split_once('/')
                .ok_or_else(|| format!("transports {t:?}: MEASURED/LOAD, e.g. udp/tcp"))?;
            Ok((Transport::parse(m)?, Transport::parse(l)?))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let separate = match args.load_host.as_str() {
        "same" => false,
        "separate" => true,
        other => return Err(format!("unknown load host {other:?}: same or separate")),
    };
    if separate && places.contains(&Place::Sender) {
        return Err(
            "--load-host separate needs --places router: a load publisher on another host \
             does not congest the sender's interface"
                .into(),
        );
    }
    let classic = transports == [(Transport::Tcp, Transport::Tcp)] && !separate;
    if !classic && args.section == "yarp-fig5" {
        return Err(
            "UDP or a separate load host: give --section NAME (the yarp-fig5 section holds \
             the TCP/TCP run)"
                .into(),
        );
    }
    let mut loads = vec![0];
    loads.extend(args.loads.iter().copied().filter(|l| (1..=100).contains(l)));
    let machine_before = Machine::now();
    let runs = places.len() * transports.len() * loads.len() * 2 * args.rounds as usize;
    let progress = ProgressBar::new(runs as u64);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?,
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for place in places {
        rows.extend(measure_place(
            args,
            &tagwired,
            place,
            &transports,
            separate,
            &loads,
            &progress,
        )?);
    }
    progress.finish_and_clear();
    let machine = Machine::finish(machine_before, started.elapsed());
    let settings = report::Settings {
        command: args.command.clone(),
        rate_kbit: args.rate_kbit,
        load_size: args.load_size,
        load_burst: args.load_burst,
        ping_size: args.ping_size,
        ping_hz: args.ping_hz,
        warmup: args.warmup,
        secs: args.secs,
        rounds: args.rounds,
        separate_load_host: separate,
    };
    println!("{}", report::text_table(&rows));
    if let Some(path) = &args.markdown {
        let section = if classic {
            report::markdown(&rows, &settings, &machine, args.svg.as_deref())
        } else {
            report::markdown_transports(&args.section, &rows, &settings, &machine)
        };
        report::replace_section(path, &args.section, &section)?;
        eprintln!("wrote the {} section of {}", args.section, path.display());
    }
    if let Some(path) = args.svg.as_ref().filter(|_| classic) {
        std::fs::write(path, report::svg(&rows, &settings))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// All runs of one place, on a testbed and daemon of their own.
fn measure_place(
    args: &Args,
    tagwired: &std::path::Path,
    place: Place,
    transports: &[(Transport, Transport)],
    separate: bool,
    loads: &[u32],
    progress: &ProgressBar,
) -> Result<Vec<Row>, String> {
    let shaping = Shaping {
        rate_kbit: Some(args.rate_kbit),
        dscp_priority: true,
        ..Shaping::default()
    };
    // Host 0: the pinger (and the load publisher unless it has its own
    // host); the last host: the daemon, the echo and the load subscriber.
    let hosts = if separate { 3 } else { 2 };
    let daemon_host = hosts - 1;
    let load_host = if separate { 1 } else { SENDER };
    let tb = Testbed::new(TestbedConfig {
        hosts,
        bottleneck: (place == Place::Router).then_some(shaping),
    })
    .map_err(|e| e.to_string())?;
    if place == Place::Sender {
        tb.shape_egress(experiment::SENDER, &shaping)
            .map_err(|e| e.to_string())?;
    }
    tb.mtu_sized_packets().map_err(|e| e.to_string())?;

    // The daemon on host A, with its files in a private directory (so it
    // shares nothing with other daemons of this machine).
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let token = experiment::random_token().map_err(|e| format!("token: {e}"))?;
    let config = dir.path().join("tagwired.toml");
    let a = tb.host(daemon_host);
    std::fs::write(
        &config,
        experiment::daemon_config(a.addr(), &token, dir.path()),
    )
    .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let mut cmd = Command::new(tagwired);
    cmd.arg("--config")
        .arg(&config)
        .args(["--no-unix", "--log", "warn"])
        .env("XDG_RUNTIME_DIR", dir.path());
    let mut daemon = a.spawn(&cmd).map_err(|e| e.to_string())?;
    if let Err(e) = experiment::wait_for_daemon(a, Duration::from_secs(10)) {
        let exited = daemon.try_wait().ok().flatten();
        let out = daemon.finish(Duration::from_millis(100));
        return Err(format!("{e} (daemon exit: {exited:?}; output: {out:?})"));
    }
    let lanes = experiment::daemon_listing(a, &token)?.lanes;
    let high_lane = lanes
        .iter()
        .find(|l| l.band == "high")
        .map_or_else(|| "?".to_owned(), |l| l.sched_applied.clone());

    // Per load, `rounds` short segments of each channel, alternating (and
    // swapping which goes first), so that both see the same background
    // load of this shared machine.
    let mut rows = Vec::new();
    let mut run = 0;
    for &(measured, load_transport) in transports {
        for &load in loads {
            let mut segments: Vec<(Spec, experiment::Outcome)> = Vec::new();
            for round in 0..args.rounds {
                let order = if round % 2 == 0 {
                    [Mode::Normal, Mode::Qos]
                } else {
                    [Mode::Qos, Mode::Normal]
                };
                for mode in order {
                    run += 1;
                    progress.set_message(format!(
                        "{} {}/{}: {load} % load, {}, round {}/{}",
                        place.name(),
                        measured.name(),
                        load_transport.name(),
                        mode.label(),
                        round + 1,
                        args.rounds
                    ));
                    let spec = Spec {
                        run,
                        place,
                        mode,
                        load_percent: load,
                        link_kbit: args.rate_kbit,
                        load_size: args.load_size,
                        load_burst: args.load_burst,
                        ping_hz: args.ping_hz,
                        ping_size: args.ping_size,
                        measured,
                        load_transport,
                        load_host,
                        pumps_fifo: args.udp_pumps_fifo,
                        warmup: Duration::from_secs_f64(args.warmup),
                        duration: Duration::from_secs_f64(args.secs / f64::from(args.rounds)),
                    };
                    let outcome = experiment::run(&tb, &token, &spec).map_err(|e| {
                        format!(
                            "{} {}/{} {load} % {}: {e}",
                            place.name(),
                            measured.name(),
                            load_transport.name(),
                            mode.label()
                        )
                    })?;
                    progress.inc(1);
                    segments.push((spec, outcome));
                }
            }
            for mode in [Mode::Normal, Mode::Qos] {
                let mine: Vec<_> = segments.iter().filter(|(s, _)| s.mode == mode).collect();
                let row = Row::new(&mine, &high_lane);
                if progress.is_hidden() {
                    eprintln!("{}", row.line());
                } else {
                    progress.println(row.line());
                }
                rows.push(row);
            }
        }
    }
    if let Ok(Some(status)) = daemon.try_wait() {
        return Err(format!("the daemon exited during the runs: {status}"));
    }
    drop(daemon);
    drop(tb);
    Ok(rows)
}
