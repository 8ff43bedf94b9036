//! Proxy placement for tagwire: where to run the temporal/spatial scaling
//! proxy of each channel so that every subscriber's delay bound holds, link
//! bandwidth and node CPU limits are respected, and total bandwidth, CPU or a
//! mix of both is least (push-pull paper, §2.2–2.4 and Appendix A).
//!
//! Pure computation: no I/O except [`TopologySpec::read_file`] and the
//! [`cli`] layer. Main types: [`TopologySpec`] (the file) → [`Topology`]
//! (validated) → [`PlacementProblem`] (routes, candidates, binding
//! capacities) → [`solve_exhaustive`], [`solve_branch_and_bound`] or
//! [`solve_mip`] → [`PlacementReport`] (the JSON the daemon's `proxy=auto`
//! reads). [`place`] does it all. Which algorithm when: the exhaustive
//! search when proxies are independent or few; the Lagrangian branch and
//! bound (default for coupled problems, time-limited, reports its gap);
//! the MIP to cross-check.
//!
//! ```
//! use tagwire_place::{place, PlaceOptions, TopologySpec};
//! let spec = TopologySpec::from_toml_str(r#"
//!     nodes = [{ name = "pub" }, { name = "mid" }, { name = "sub" }]
//!     links = [{ between = ["pub", "mid"] }, { between = ["mid", "sub"] }]
//!     [[tags]]
//!     name = "/cam"
//!     publisher = "pub"
//!     period_ms = 10
//!     subscribers = [{ name = "viewer", node = "sub", period_ms = 40, max_delay_ms = 100 }]
//! "#).unwrap();
//! let report = place(&spec.validate().unwrap(), &PlaceOptions::default()).unwrap();
//! assert_eq!(report.proxies[0].proxy_node, "pub"); // scale early: least bandwidth
//! ```

pub mod cli;
mod error;
pub mod exhaustive;
pub mod generate;
pub mod lagrangian;
pub mod limits;
pub mod mip;
pub mod model;
mod paths;
pub mod problem;
pub mod report;
mod tiebreak;

pub use error::PlaceError;
pub use exhaustive::{solve_exhaustive, Assignment, ExhaustiveOptions};
pub use lagrangian::{solve_branch_and_bound, BranchAndBoundOptions};
pub use mip::{solve_mip, MIP_AVAILABLE};
pub use model::{ProxySharing, Topology, TopologySpec};
pub use problem::{Objective, PlacementProblem};
pub use report::{explain, Algorithm, PlacementReport};

/// Which algorithm [`place`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AlgorithmChoice {
    /// Exhaustive when the units are independent (no capacity can bind) or
    /// the combinations are few (≤ [`AUTO_EXHAUSTIVE_COMBINATIONS`]),
    /// otherwise the Lagrangian branch and bound.
    #[default]
    Auto,
    /// Always the exhaustive search.
    Exhaustive,
    /// Always the Lagrangian branch and bound.
    BranchAndBound,
    /// Always the MIP.
    Mip,
}

/// Largest number of combinations for which [`AlgorithmChoice::Auto`]
/// picks the exhaustive search on a coupled problem.
pub const AUTO_EXHAUSTIVE_COMBINATIONS: f64 = 1e6;

/// Options of [`place`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PlaceOptions {
    /// What to minimise.
    pub objective: Objective,
    /// Which algorithm.
    pub algorithm: AlgorithmChoice,
    /// Limits of the exhaustive search.
    pub exhaustive: ExhaustiveOptions,
    /// Limits of the branch and bound (its time limit counts from the
    /// start of [`place`]).
    pub branch_and_bound: BranchAndBoundOptions,
}

/// Resolves [`AlgorithmChoice::Auto`] for a problem.
pub fn pick_algorithm(problem: &PlacementProblem<'_>, choice: AlgorithmChoice) -> Algorithm {
    match choice {
        AlgorithmChoice::Exhaustive => Algorithm::Exhaustive,
        AlgorithmChoice::BranchAndBound => Algorithm::BranchAndBound,
        AlgorithmChoice::Mip => Algorithm::Mip,
        AlgorithmChoice::Auto => {
            if problem.capacity_rows().is_empty()
                || problem.combinations() <= AUTO_EXHAUSTIVE_COMBINATIONS
            {
                Algorithm::Exhaustive
            } else {
                Algorithm::BranchAndBound
            }
        }
    }
}

/// Solves a built problem with the given algorithm. `elapsed()` is the
/// time spent so far (the branch and bound's time limit counts it);
/// `progress(done, total)` drives a progress bar.
pub fn solve(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    algorithm: Algorithm,
    options: &PlaceOptions,
    elapsed: &mut dyn FnMut() -> std::time::Duration,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Assignment, PlaceError> {
    match algorithm {
        Algorithm::Exhaustive => solve_exhaustive(problem, objective, options.exhaustive, progress),
        Algorithm::BranchAndBound => {
            solve_branch_and_bound(problem, objective, options.branch_and_bound, elapsed)
        }
        Algorithm::Mip => solve_mip(problem, objective),
    }
}

/// Builds the problem for a validated topology, solves it and reports.
/// Reads the clock only for the branch and bound's time limit.
pub fn place(topology: &Topology, options: &PlaceOptions) -> Result<PlacementReport, PlaceError> {
    let started = std::time::Instant::now();
    let problem = PlacementProblem::new(topology)?;
    let algorithm = pick_algorithm(&problem, options.algorithm);
    let assignment = solve(
        &problem,
        options.objective,
        algorithm,
        options,
        &mut || started.elapsed(),
        &mut |_, _| {},
    )?;
    Ok(PlacementReport::new(
        &problem,
        options.objective,
        algorithm,
        &assignment,
    ))
}
