//! The `tagwire place` command: clap arguments ([`PlaceArgs`]) and the
//! runner ([`run`]). The main `tagwire` CLI embeds it as
//! `Place(tagwire_place::cli::PlaceArgs)` and calls [`run`]; the crate's own
//! `tagwire-place` binary does the same.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::model::TopologySpec;
use crate::problem::{Objective, PlacementProblem};
use crate::report::{explain, Algorithm, PlacementReport};
use crate::{
    build_and_solve, limits, AlgorithmChoice, BranchAndBoundOptions, Deadline, ExhaustiveOptions,
    PlaceError, PlaceOptions,
};

/// Choose proxy nodes for a topology (exhaustive search or MIP).
#[derive(Debug, Clone, clap::Args)]
pub struct PlaceArgs {
    /// Topology file: TOML, or JSON when the name ends in `.json`.
    pub topology: PathBuf,
    /// What to minimise: bandwidth, cpu, or mixed:W (bandwidth + W·cpu).
    #[arg(long, default_value = "bandwidth", value_parser = parse_objective)]
    pub objective: Objective,
    /// Use the exhaustive search (paper Appendix A).
    #[arg(long, conflicts_with_all = ["mip", "branch_and_bound"])]
    pub exhaustive: bool,
    /// Use the Lagrangian branch and bound (the default for coupled problems).
    #[arg(long, conflicts_with = "mip")]
    pub branch_and_bound: bool,
    /// Use the mixed-integer programme (microlp, or HiGHS when built with it).
    #[arg(long)]
    pub mip: bool,
    /// Wall-clock budget in seconds, from reading the file to the answer
    /// (building the problem, every search and the MIP): the answer is the
    /// best placement found by then with its proven gap, or an error saying
    /// none was found in time.
    #[arg(long, default_value_t = 10.0, value_parser = parse_time_limit)]
    pub time_limit: f64,
    /// Print the result as JSON (format tagwire-placement/1).
    #[arg(long)]
    pub json: bool,
    /// Also print the per-node table of delays and costs (like Appendix A);
    /// with --json it goes to stderr.
    #[arg(long)]
    pub explain: bool,
}

fn parse_objective(s: &str) -> Result<Objective, PlaceError> {
    s.parse()
}

fn parse_time_limit(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1e6 => Ok(x),
        _ => Err(format!(
            "invalid time limit {s:?}: expected a number of seconds, > 0 and at most 1000000"
        )),
    }
}

impl PlaceArgs {
    /// The algorithm the flags ask for.
    pub fn algorithm_choice(&self) -> AlgorithmChoice {
        match (self.exhaustive, self.branch_and_bound, self.mip) {
            (true, _, _) => AlgorithmChoice::Exhaustive,
            (false, true, _) => AlgorithmChoice::BranchAndBound,
            (false, false, true) => AlgorithmChoice::Mip,
            (false, false, false) => AlgorithmChoice::Auto,
        }
    }
}

/// Runs `tagwire place`, printing to stdout (progress to stderr).
pub fn run(args: &PlaceArgs) -> Result<(), PlaceError> {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    run_to(args, &mut lock)
}

/// Runs `tagwire place`, writing the result to `out`. `--time-limit` is a
/// wall-clock deadline from here: reading the file, building the problem,
/// the searches and the MIP all stop by it.
pub fn run_to(args: &PlaceArgs, out: &mut dyn Write) -> Result<(), PlaceError> {
    let started = Instant::now();
    let deadline = Deadline::from(started, Duration::from_secs_f64(args.time_limit));
    let spec = TopologySpec::read_file(&args.topology, limits::MAX_FILE_BYTES)?;
    let topology = spec.validate()?;
    let options = PlaceOptions {
        objective: args.objective,
        algorithm: args.algorithm_choice(),
        exhaustive: ExhaustiveOptions::default(),
        branch_and_bound: BranchAndBoundOptions {
            time_limit: Duration::from_secs_f64(args.time_limit),
            ..BranchAndBoundOptions::default()
        },
    };
    // Created once the problem is built (it depends on the problem).
    let bar: std::cell::RefCell<Option<indicatif::ProgressBar>> = Default::default();
    let result = build_and_solve(
        &topology,
        &options,
        deadline,
        &mut |problem, algorithm| *bar.borrow_mut() = progress_bar(problem, algorithm),
        &mut |done: u64, total: u64| {
            if let Some(b) = bar.borrow().as_ref() {
                b.set_length(total);
                b.set_position(done);
            }
        },
    );
    if let Some(b) = bar.borrow().as_ref() {
        b.finish_and_clear();
    }
    let solved = result?;
    let (problem, assignment) = (&solved.problem, &solved.assignment);
    let elapsed = started.elapsed();
    let report = PlacementReport::new(problem, args.objective, solved.algorithm, assignment);

    let w = |out: &mut dyn Write, s: &str| out.write_all(s.as_bytes()).map_err(PlaceError::Output);
    if args.explain {
        let table = explain(problem, Some(assignment));
        if args.json {
            // Keep stdout pure JSON for the daemon; the table goes to stderr.
            eprint!("{table}");
        } else {
            w(out, &table)?;
        }
    }
    if args.json {
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| PlaceError::Output(e.into()))?;
        w(out, &text)?;
        w(out, "\n")?;
    } else {
        w(out, &report.to_text())?;
        w(
            out,
            &format!("solved in {:.3} ms\n", elapsed.as_secs_f64() * 1e3),
        )?;
    }
    Ok(())
}

/// A bar for long exhaustive searches, a spinner for large MIPs; `None`
/// for quick runs. indicatif hides it when stderr is not a terminal.
fn progress_bar(
    problem: &PlacementProblem<'_>,
    algorithm: Algorithm,
) -> Option<indicatif::ProgressBar> {
    let big_search = !problem.capacity_rows().is_empty() && problem.combinations() > 1e5;
    let big_mip = problem.candidates().iter().map(Vec::len).sum::<usize>() > 5_000;
    match algorithm {
        Algorithm::Exhaustive if big_search => {
            let bar = indicatif::ProgressBar::new(
                problem.candidates().first().map_or(0, |c| c.len() as u64),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "exhaustive search {bar:40} {pos}/{len} first-level branches ({elapsed})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Some(bar)
        }
        Algorithm::Mip | Algorithm::BranchAndBound if big_mip => {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_message("solving the MIP");
            bar.enable_steady_tick(Duration::from_millis(120));
            Some(bar)
        }
        _ => None,
    }
}
