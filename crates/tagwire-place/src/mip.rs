//! The mixed-integer programme of the paper's §2.4.1, solved with HiGHS
//! through `good_lp` (or the pure-Rust `microlp` backend when built without
//! the `highs` feature).
//!
//! Variables: one binary `x[u][j]` per unit u and node j ("proxy of u is on
//! j"), with `Σ_j x[u][j] = 1`. This one-hot encoding replaces the paper's
//! bit encoding (X, Y, Z for 7 nodes) and needs no linearisation, because
//! every delay, cost and load is a constant per (u, j):
//! - delay: `Σ_j δ(i,j)·x[u][j] ≤ δʳ_i` for each subscriber i of u; with
//!   one-hot x this is exactly `x[u][j] = 0` wherever `δ(i,j) > δʳ_i`, so
//!   those variables are never created (a presolve step);
//! - link bandwidth: `Σ_{u,j} load(u,j,e)·x[u][j] ≤ BW(e)` for each link e;
//! - node processing: `Σ_{u,j} cpu(u,j,n)·x[u][j] ≤ CPU(n)` for each node n;
//!   capacity rows that no choice can violate are left out;
//! - objective: `Σ_{u,j} c(u,j)·x[u][j]` with c the bandwidth, the CPU or
//!   bandwidth + w·CPU.

use crate::deadline::Deadline;
#[cfg(any(feature = "highs", feature = "microlp"))]
use crate::deadline::Ticker;
use crate::error::PlaceError;
use crate::exhaustive::Assignment;
use crate::problem::{Objective, PlacementProblem};

/// Whether a MIP backend is compiled in.
pub const MIP_AVAILABLE: bool = cfg!(any(feature = "highs", feature = "microlp"));

/// Above this many binaries HiGHS runs without its own presolve (see
/// `solve_mip`); measured on the benchmark instances.
#[cfg(feature = "highs")]
const HIGHS_PRESOLVE_MAX_BINARIES: usize = 5_000;

/// Solves the placement MIP to optimality, without a time limit.
pub fn solve_mip(
    problem: &PlacementProblem<'_>,
    objective: Objective,
) -> Result<Assignment, PlaceError> {
    solve_mip_within(problem, objective, Deadline::none(), None)
}

/// Solves the placement MIP by `deadline`: the backend gets the time left
/// as its own time limit, and `start` (a feasible placement, e.g. the
/// branch and bound's) as its initial solution. At the deadline the
/// backend's best placement is returned, not proven optimal (its lower
/// bound is then the sum of every unit's cheapest candidate); with none,
/// [`PlaceError::NoPlacementInTime`].
#[cfg(any(feature = "highs", feature = "microlp"))]
pub fn solve_mip_within(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    deadline: Deadline,
    start: Option<&[usize]>,
) -> Result<Assignment, PlaceError> {
    use good_lp::{
        variable, Expression, ProblemVariables, ResolutionError, SolverModel, WithInitialSolution,
        WithTimeLimit,
    };

    let cands = problem.candidates();
    let rows = problem.capacity_rows();
    let values = problem.objective_values(objective)?;
    if let Some(e) = problem.infeasibility() {
        return Err(e);
    }
    // Sum of every unit's cheapest candidate: a lower bound on any placement.
    let trivial_bound: f64 = values
        .iter()
        .map(|vs| vs.iter().copied().fold(f64::INFINITY, f64::min))
        .sum();
    let out_of_time = |stage: &'static str| PlaceError::TimeLimit {
        seconds: deadline.limit_secs(),
        stage,
    };
    #[cfg(feature = "highs")]
    let binaries: usize = cands.iter().map(Vec::len).sum();
    let mut vars = ProblemVariables::new();
    let x: Vec<Vec<good_lp::Variable>> = cands
        .iter()
        .map(|cs| vars.add_vector(variable().binary(), cs.len()))
        .collect();
    // Building the model is interruptible: the clock is read every
    // MODEL_TICK candidates (a 2·10⁶-candidate model takes seconds).
    let mut ticker = Ticker::new(deadline, MODEL_TICK);
    let mut obj = Expression::with_capacity(cands.iter().map(Vec::len).sum());
    for (vs, xs) in values.iter().zip(&x) {
        for (&v, &var) in vs.iter().zip(xs) {
            if ticker.expired() {
                return Err(out_of_time(MODEL_STAGE));
            }
            obj.add_mul(v, var);
        }
    }
    let mut row_exprs: Vec<Expression> = rows.iter().map(|_| Expression::default()).collect();
    for (u, xs) in x.iter().enumerate() {
        for (k, &var) in xs.iter().enumerate() {
            if ticker.expired() {
                return Err(out_of_time(MODEL_STAGE));
            }
            for &(r, load) in problem.candidate_loads(u, k) {
                // Rows scaled to capacity 1: loads of 10⁵–10⁸ B/s next to
                // the one-hot rows' 1s left microlp with singular bases
                // ("Singular matrix") on tight instances.
                row_exprs[r as usize].add_mul(load / rows[r as usize].capacity, var);
            }
        }
    }

    #[cfg(feature = "highs")]
    let mut model = {
        let mut m = vars.minimise(obj).using(good_lp::solvers::highs::highs);
        m.set_verbose(false);
        // Our own presolve already removed delay-infeasible variables and
        // capacity rows that cannot bind. HiGHS's presolve solves small
        // models outright (vBNS: 0.3 ms with it, 9 ms without) but spends
        // ~1 s on dominated-column checks for a 10,000-variable model that
        // it otherwise solves in ~0.12 s (1,000 nodes/100 subscribers).
        let m = if binaries > HIGHS_PRESOLVE_MAX_BINARIES {
            m.set_presolve(good_lp::solvers::highs::HighsPresolveType::Off)
        } else {
            m
        };
        m.set_threads(1)
            .set_mip_rel_gap(1e-9)
            .map_err(|e| PlaceError::Solver {
                message: e.to_string(),
            })?
            .set_mip_abs_gap(1e-9)
            .map_err(|e| PlaceError::Solver {
                message: e.to_string(),
            })?
    };
    #[cfg(all(not(feature = "highs"), feature = "microlp"))]
    let mut model = vars.minimise(obj).using(good_lp::solvers::microlp::microlp);

    for xs in &x {
        if ticker.expired() {
            return Err(out_of_time(MODEL_STAGE));
        }
        let one: Expression = xs.iter().copied().sum();
        model.add_constraint(one.eq(1.0));
    }
    // The same relative slack as every other algorithm.
    for expr in row_exprs {
        if ticker.expired() {
            return Err(out_of_time(MODEL_STAGE));
        }
        model.add_constraint(expr.leq(1.0 + crate::problem::CAPACITY_TOLERANCE));
    }
    if let Some(choice) = start.filter(|c| c.len() == x.len() && problem.fits(c)) {
        model = model.with_initial_solution(x.iter().zip(choice).flat_map(|(xs, &k)| {
            xs.iter()
                .enumerate()
                .map(move |(i, &v)| (v, if i == k { 1.0 } else { 0.0 }))
        }));
    }
    if let Some(left) = deadline.remaining() {
        if left.is_zero() {
            return Err(out_of_time("building the MIP"));
        }
        model = model.with_time_limit(left.mul_f64(BACKEND_TIME_SHARE).as_secs_f64());
    }
    // The branch and bound settles what the backend cannot, by the same
    // deadline (never a time budget of its own).
    let settle = || {
        let mut elapsed = deadline.stopwatch();
        let limit = deadline
            .remaining()
            .unwrap_or(crate::lagrangian::BranchAndBoundOptions::default().time_limit);
        crate::lagrangian::solve_branch_and_bound(
            problem,
            objective,
            crate::lagrangian::BranchAndBoundOptions {
                time_limit: limit,
                ..crate::lagrangian::BranchAndBoundOptions::default()
            },
            &mut elapsed,
        )
        .map(|a| Assignment { visited: 0, ..a })
        .map_err(|e| match e {
            PlaceError::NoPlacementInTime { lower_bound, .. } => PlaceError::NoPlacementInTime {
                seconds: deadline.limit_secs(),
                lower_bound,
            },
            e => e,
        })
    };
    let no_answer_in_time = || PlaceError::NoPlacementInTime {
        seconds: deadline.limit_secs(),
        lower_bound: trivial_bound,
    };
    let outcome = match run_backend(model, x.clone(), deadline) {
        Some(outcome) => outcome,
        // The backend overran the deadline; its thread is left to finish.
        None => return Err(no_answer_in_time()),
    };
    let (proven, picks) = match outcome {
        Ok(x) => x,
        Err(ResolutionError::Infeasible) => {
            return Err(PlaceError::CapacityInfeasible {
                binding_rows: rows.len(),
                first: rows
                    .first()
                    .map_or_else(|| "none".to_owned(), |r| problem.resource_name(r.resource)),
            })
        }
        // The time limit ran out before the backend found a placement.
        Err(ResolutionError::Other(_) | ResolutionError::Str(_)) if deadline.expired() => {
            return Err(no_answer_in_time())
        }
        // A numerical failure of the backend (microlp: "exactly integral
        // solution failed feasibility validation" at a capacity within
        // 1e-9 of a load, or "Singular matrix"): the branch and bound
        // settles it.
        Err(ResolutionError::Other(_) | ResolutionError::Str(_)) => return settle(),
        Err(other) => {
            return Err(PlaceError::Solver {
                message: other.to_string(),
            })
        }
    };
    let mut choice = Vec::with_capacity(x.len());
    let mut total = 0.0;
    for pick in picks {
        // At a time limit HiGHS may return a non-integral point.
        let Some(k) = pick else {
            return if proven {
                settle()
            } else {
                Err(no_answer_in_time())
            };
        };
        total += values[choice.len()][k];
        choice.push(k);
    }
    // The solver judges capacities with its own (absolute) tolerance; the
    // shared relative one is the judge here. A placement that breaks it
    // leaves the question to the branch and bound, which uses it.
    if !problem.fits(&choice) {
        return if proven || !deadline.expired() {
            settle()
        } else {
            Err(no_answer_in_time())
        };
    }
    if !proven {
        return Ok(Assignment {
            choice,
            objective: total,
            visited: 0,
            lower_bound: trivial_bound.min(total),
            optimal: false,
        });
    }
    // The deterministic tie-break of every algorithm.
    let mut ticker = Ticker::new(deadline, 4096);
    let lambda = crate::lagrangian::relax(problem, &values, 100, &mut || deadline.expired()).lambda;
    let choice = crate::tiebreak::canonical(
        problem,
        &values,
        total,
        &lambda,
        crate::limits::DEFAULT_EXHAUSTIVE_VISITS,
        &mut || ticker.expired(),
    )
    .unwrap_or(choice);
    let objective_value = choice.iter().enumerate().map(|(u, &k)| values[u][k]).sum();
    Ok(Assignment {
        choice,
        objective: objective_value,
        visited: 0,
        lower_bound: objective_value,
        optimal: true,
    })
}

/// What the backend found: whether it proved optimality, and the chosen
/// candidate of each unit (`None`: no value above 0.5).
#[cfg(any(feature = "highs", feature = "microlp"))]
type BackendOutcome = Result<(bool, Vec<Option<usize>>), good_lp::ResolutionError>;

#[cfg(any(feature = "highs", feature = "microlp"))]
fn read_solution(
    solved: Result<impl good_lp::Solution, good_lp::ResolutionError>,
    x: &[Vec<good_lp::Variable>],
) -> BackendOutcome {
    use good_lp::SolutionStatus;
    solved.map(|sol| {
        let proven = matches!(sol.status(), SolutionStatus::Optimal);
        let picks = x
            .iter()
            .map(|xs| xs.iter().position(|&v| sol.value(v) > 0.5))
            .collect();
        (proven, picks)
    })
}

/// Runs microlp on its own thread and waits for it until the deadline
/// (plus [`BACKEND_GRACE`]): microlp reads its clock only between simplex
/// phases and was measured 2.4 s past its time limit on a 34,000-column
/// model. `None` when it overran; the thread is then left to finish on its
/// own (its result is dropped; it stops at its own time limit, a few
/// seconds later at most).
#[cfg(all(not(feature = "highs"), feature = "microlp"))]
fn run_backend(
    model: good_lp::solvers::microlp::MicroLpProblem,
    x: Vec<Vec<good_lp::Variable>>,
    deadline: Deadline,
) -> Option<BackendOutcome> {
    use good_lp::SolverModel;
    let Some(left) = deadline.remaining() else {
        return Some(read_solution(model.solve(), &x));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("tagwire-place-mip".to_owned())
        .spawn(move || {
            let _ = tx.send(read_solution(model.solve(), &x));
        });
    if spawned.is_err() {
        return None;
    }
    rx.recv_timeout(left + BACKEND_GRACE).ok()
}

/// HiGHS keeps to its time limit: run it on this thread.
#[cfg(feature = "highs")]
fn run_backend(
    model: good_lp::solvers::highs::HighsProblem,
    x: Vec<Vec<good_lp::Variable>>,
    _deadline: Deadline,
) -> Option<BackendOutcome> {
    use good_lp::SolverModel;
    Some(read_solution(model.solve(), &x))
}

/// The MIP model build reads the clock every this many candidates.
#[cfg(any(feature = "highs", feature = "microlp"))]
const MODEL_TICK: u32 = 256;

/// The stage named when the deadline passes while the model is built.
#[cfg(any(feature = "highs", feature = "microlp"))]
const MODEL_STAGE: &str = "building the MIP model";

/// Share of the time left that the backend is told it has: microlp reads
/// its clock only between simplex phases and overruns its limit, and an
/// answer that comes after the deadline is dropped.
#[cfg(all(not(feature = "highs"), feature = "microlp"))]
const BACKEND_TIME_SHARE: f64 = 0.75;
/// HiGHS keeps to its limit.
#[cfg(feature = "highs")]
const BACKEND_TIME_SHARE: f64 = 0.95;

/// How long past the deadline the backend's answer is still waited for.
#[cfg(any(feature = "highs", feature = "microlp"))]
const BACKEND_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Solves the placement MIP (no backend compiled in: always an error).
#[cfg(not(any(feature = "highs", feature = "microlp")))]
pub fn solve_mip_within(
    _problem: &PlacementProblem<'_>,
    _objective: Objective,
    _deadline: Deadline,
    _start: Option<&[usize]>,
) -> Result<Assignment, PlaceError> {
    Err(PlaceError::MipUnavailable)
}
