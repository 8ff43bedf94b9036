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
pub mod deadline;
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

pub use deadline::{Deadline, TestClock};
pub use error::PlaceError;
pub use exhaustive::{solve_exhaustive, Assignment, ExhaustiveOptions};
pub use lagrangian::{solve_branch_and_bound, BranchAndBoundOptions};
pub use mip::{solve_mip, solve_mip_within, MIP_AVAILABLE};
pub use model::{ProxySharing, Topology, TopologySpec};
pub use problem::{BuildOptions, Objective, PlacementProblem};
pub use report::{explain, Algorithm, PlacementReport};

/// Which algorithm [`place`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AlgorithmChoice {
    /// The best for the instance: the exhaustive search when the units are
    /// independent (no capacity can bind) or the combinations are few
    /// (≤ [`AUTO_EXHAUSTIVE_COMBINATIONS`]); otherwise a portfolio: the
    /// Lagrangian branch and bound for [`AUTO_BRANCH_AND_BOUND_SHARE`] of
    /// the time left, then, unless it proved its answer optimal, the MIP
    /// with the rest (started from the branch and bound's placement); the
    /// better feasible answer is kept, with the better lower bound. Where
    /// the MIP is not expected to win (microlp above
    /// [`AUTO_MICROLP_MAX_BINARIES`]) the branch and bound gets
    /// [`AUTO_BRANCH_AND_BOUND_SHARE_ALONE`] and the MIP runs only if it
    /// found no placement.
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

/// Share of the time left after building the problem that
/// [`AlgorithmChoice::Auto`] gives the branch and bound before the MIP gets
/// the rest (the branch and bound finds good placements fast on loose
/// instances; the MIP closes the gap, and is the one that finds a placement
/// at all on tight ones).
pub const AUTO_BRANCH_AND_BOUND_SHARE: f64 = 0.3;

/// Share of the time left that [`AlgorithmChoice::Auto`] gives the branch
/// and bound when the MIP is not expected to win (microlp on a large
/// model); the MIP then gets the rest only if the branch and bound found no
/// placement.
pub const AUTO_BRANCH_AND_BOUND_SHARE_ALONE: f64 = 0.7;

/// Largest model (binaries = candidates) on which the default `microlp`
/// backend is expected to beat the branch and bound's gap. Measured on the
/// pruned models (capacity pruning, `docs/placement.md`): it proved the
/// binding 1,000-node instances optimal at 1,114–2,023 binaries in
/// 0.1–0.8 s, where the branch and bound kept a 1.5–5 % gap; unpruned it
/// needed 39–45 s from 3,363 binaries up. With HiGHS there is no such cap.
pub const AUTO_MICROLP_MAX_BINARIES: usize = 3_000;

/// Options of [`place`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PlaceOptions {
    /// What to minimise.
    pub objective: Objective,
    /// Which algorithm.
    pub algorithm: AlgorithmChoice,
    /// Limits of the exhaustive search (its deadline is set by [`place`]).
    pub exhaustive: ExhaustiveOptions,
    /// Limits of the branch and bound. Its `time_limit` is the wall-clock
    /// budget of the whole [`place`] call: building the problem, every
    /// search and the MIP.
    pub branch_and_bound: BranchAndBoundOptions,
}

/// Resolves [`AlgorithmChoice::Auto`] for a problem: the exhaustive search
/// or, for the portfolio, [`Algorithm::BranchAndBound`] (the algorithm that
/// runs first).
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

/// The branch and bound until `deadline` (its own clock starts now).
fn branch_and_bound_until(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    options: &PlaceOptions,
    deadline: Deadline,
) -> Result<Assignment, PlaceError> {
    let mut elapsed = deadline.stopwatch();
    let time_limit = deadline
        .remaining()
        .unwrap_or(options.branch_and_bound.time_limit);
    solve_branch_and_bound(
        problem,
        objective,
        BranchAndBoundOptions {
            time_limit,
            ..options.branch_and_bound
        },
        &mut elapsed,
    )
    .map_err(|e| match e {
        // Name the whole budget, not the share.
        PlaceError::NoPlacementInTime { lower_bound, .. } => PlaceError::NoPlacementInTime {
            seconds: deadline.limit_secs(),
            lower_bound,
        },
        e => e,
    })
}

/// The better of two answers of the same problem: the cheaper feasible
/// placement, with the larger of the proven lower bounds; a proof that
/// nothing fits wins over running out of time.
fn better(
    a: Result<(Algorithm, Assignment), PlaceError>,
    b: Result<(Algorithm, Assignment), PlaceError>,
) -> Result<(Algorithm, Assignment), PlaceError> {
    let lb = |r: &Result<(Algorithm, Assignment), PlaceError>| match r {
        Ok((_, a)) => a.lower_bound,
        Err(PlaceError::NoPlacementInTime { lower_bound, .. }) => *lower_bound,
        Err(_) => f64::NEG_INFINITY,
    };
    let bound = lb(&a).max(lb(&b));
    match (a, b) {
        (Ok(x), Ok(y)) => {
            let (alg, mut best) = if y.1.optimal
                || (!x.1.optimal
                    && y.1.objective < x.1.objective - problem::value_slack(x.1.objective))
            {
                y
            } else {
                x
            };
            if !best.optimal {
                best.lower_bound = bound.min(best.objective);
                if best.objective - best.lower_bound <= problem::value_slack(best.objective) {
                    best.optimal = true;
                    best.lower_bound = best.objective;
                }
            }
            Ok((alg, best))
        }
        (Ok((alg, mut x)), Err(_)) | (Err(_), Ok((alg, mut x))) => {
            if !x.optimal {
                x.lower_bound = bound.min(x.objective);
            }
            Ok((alg, x))
        }
        (Err(e @ PlaceError::CapacityInfeasible { .. }), Err(_))
        | (Err(_), Err(e @ PlaceError::CapacityInfeasible { .. })) => Err(e),
        (Err(PlaceError::NoPlacementInTime { seconds, .. }), Err(_))
        | (Err(_), Err(PlaceError::NoPlacementInTime { seconds, .. })) => {
            Err(PlaceError::NoPlacementInTime {
                seconds,
                lower_bound: bound,
            })
        }
        (Err(e), Err(_)) => Err(e),
    }
}

/// Solves a built problem by `deadline` with the chosen algorithm (for
/// [`AlgorithmChoice::Auto`], see there). Returns the algorithm whose
/// answer is kept. `progress(done, total)` drives a progress bar.
pub fn solve(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    choice: AlgorithmChoice,
    options: &PlaceOptions,
    deadline: Deadline,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Algorithm, Assignment), PlaceError> {
    let exhaustive = ExhaustiveOptions {
        deadline,
        ..options.exhaustive
    };
    match choice {
        AlgorithmChoice::Exhaustive => solve_exhaustive(problem, objective, exhaustive, progress)
            .map(|a| (Algorithm::Exhaustive, a)),
        AlgorithmChoice::BranchAndBound => {
            branch_and_bound_until(problem, objective, options, deadline)
                .map(|a| (Algorithm::BranchAndBound, a))
        }
        AlgorithmChoice::Mip => {
            solve_mip_within(problem, objective, deadline, None).map(|a| (Algorithm::Mip, a))
        }
        AlgorithmChoice::Auto => {
            if pick_algorithm(problem, choice) == Algorithm::Exhaustive {
                match solve_exhaustive(problem, objective, exhaustive, progress) {
                    Err(PlaceError::ExhaustiveLimit { .. }) => {}
                    other => return other.map(|a| (Algorithm::Exhaustive, a)),
                }
            }
            let mip_may_win = MIP_AVAILABLE
                && (cfg!(feature = "highs")
                    || problem.candidates().iter().map(Vec::len).sum::<usize>()
                        <= AUTO_MICROLP_MAX_BINARIES);
            let share = if !MIP_AVAILABLE {
                1.0
            } else if mip_may_win {
                AUTO_BRANCH_AND_BOUND_SHARE
            } else {
                AUTO_BRANCH_AND_BOUND_SHARE_ALONE
            };
            let bnb = branch_and_bound_until(problem, objective, options, deadline.share(share))
                .map(|a| (Algorithm::BranchAndBound, a));
            // Settled: proven optimal, or proven that nothing fits. With a
            // placement and a gap, the MIP gets the rest when it may win;
            // with no placement, always (nothing to lose).
            let settled = match &bnb {
                Ok((_, a)) => a.optimal || !mip_may_win,
                Err(e) => !matches!(e, PlaceError::NoPlacementInTime { .. }),
            };
            if settled || !MIP_AVAILABLE || deadline.expired() {
                return bnb;
            }
            let start = bnb.as_ref().ok().map(|(_, a)| a.choice.clone());
            let mip = solve_mip_within(problem, objective, deadline, start.as_deref())
                .map(|a| (Algorithm::Mip, a));
            better(bnb, mip)
        }
    }
}

/// A solved problem: the problem (the one whose candidates the answer
/// indexes), the algorithm whose answer was kept and the answer.
#[derive(Debug)]
pub struct Solved<'t> {
    /// The problem the answer indexes.
    pub problem: PlacementProblem<'t>,
    /// The algorithm that found the answer.
    pub algorithm: Algorithm,
    /// The answer.
    pub assignment: Assignment,
}

/// Builds and solves by `deadline` (reading nothing but the clock).
/// `on_built(problem, algorithm)` is called once the problem is built
/// (the CLI draws its progress bar then). When no candidate placement fits
/// the capacities but the candidate set was truncated (a unit had more
/// route combinations at some node than [`limits::MAX_ROUTE_COMBOS`]), the
/// problem is rebuilt with [`limits::MAX_ROUTE_COMBOS_RETRY`] and solved
/// again; if that is still truncated, the answer is
/// [`PlaceError::IncompleteSearch`], never "no placement fits".
pub fn build_and_solve<'t>(
    topology: &'t Topology,
    options: &PlaceOptions,
    deadline: Deadline,
    on_built: &mut dyn FnMut(&PlacementProblem<'_>, Algorithm),
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Solved<'t>, PlaceError> {
    let build = |max_route_combos| {
        PlacementProblem::build(
            topology,
            BuildOptions {
                max_route_combos,
                deadline,
                ..BuildOptions::default()
            },
        )
    };
    let problem = build(limits::MAX_ROUTE_COMBOS)?;
    on_built(&problem, pick_algorithm(&problem, options.algorithm));
    let first = solve(
        &problem,
        options.objective,
        options.algorithm,
        options,
        deadline,
        progress,
    );
    let incomplete = |p: &PlacementProblem<'_>, binding_rows, first| PlaceError::IncompleteSearch {
        pairs: p.truncated_route_combos(),
        max_combos: p.max_route_combos(),
        binding_rows,
        first,
    };
    match first {
        Ok((algorithm, assignment)) => Ok(Solved {
            problem,
            algorithm,
            assignment,
        }),
        Err(PlaceError::CapacityInfeasible {
            binding_rows,
            first,
        }) if problem.truncated_route_combos() > 0 => {
            let wide = match build(limits::MAX_ROUTE_COMBOS_RETRY) {
                Ok(p) => p,
                Err(PlaceError::LimitExceeded { .. }) => {
                    return Err(incomplete(&problem, binding_rows, first))
                }
                Err(e) => return Err(e),
            };
            match solve(
                &wide,
                options.objective,
                options.algorithm,
                options,
                deadline,
                progress,
            ) {
                Ok((algorithm, assignment)) => Ok(Solved {
                    problem: wide,
                    algorithm,
                    assignment,
                }),
                Err(PlaceError::CapacityInfeasible {
                    binding_rows,
                    first,
                }) if wide.truncated_route_combos() > 0 => {
                    Err(incomplete(&wide, binding_rows, first))
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Builds the problem for a validated topology, solves it and reports,
/// all within `options.branch_and_bound.time_limit` of wall-clock time.
pub fn place(topology: &Topology, options: &PlaceOptions) -> Result<PlacementReport, PlaceError> {
    let deadline = Deadline::after(options.branch_and_bound.time_limit);
    let solved = build_and_solve(topology, options, deadline, &mut |_, _| {}, &mut |_, _| {})?;
    Ok(PlacementReport::new(
        &solved.problem,
        options.objective,
        solved.algorithm,
        &solved.assignment,
    ))
}
