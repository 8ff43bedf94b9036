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

use crate::error::PlaceError;
use crate::exhaustive::Assignment;
use crate::problem::{Objective, PlacementProblem};

/// Whether a MIP backend is compiled in.
pub const MIP_AVAILABLE: bool = cfg!(any(feature = "highs", feature = "microlp"));

/// Above this many binaries HiGHS runs without its own presolve (see
/// `solve_mip`); measured on the benchmark instances.
#[cfg(feature = "highs")]
const HIGHS_PRESOLVE_MAX_BINARIES: usize = 5_000;

/// Solves the placement MIP.
#[cfg(any(feature = "highs", feature = "microlp"))]
pub fn solve_mip(
    problem: &PlacementProblem<'_>,
    objective: Objective,
) -> Result<Assignment, PlaceError> {
    use good_lp::{variable, Expression, ProblemVariables, ResolutionError, Solution, SolverModel};

    let cands = problem.candidates();
    let rows = problem.capacity_rows();
    let values = problem.objective_values(objective)?;
    #[cfg(feature = "highs")]
    let binaries: usize = cands.iter().map(Vec::len).sum();
    let mut vars = ProblemVariables::new();
    let x: Vec<Vec<good_lp::Variable>> = cands
        .iter()
        .map(|cs| vars.add_vector(variable().binary(), cs.len()))
        .collect();
    let mut obj = Expression::with_capacity(cands.iter().map(Vec::len).sum());
    for (vs, xs) in values.iter().zip(&x) {
        for (&v, &var) in vs.iter().zip(xs) {
            obj.add_mul(v, var);
        }
    }
    let mut row_exprs: Vec<Expression> = rows.iter().map(|_| Expression::default()).collect();
    for (u, xs) in x.iter().enumerate() {
        for (k, &var) in xs.iter().enumerate() {
            for &(r, load) in problem.candidate_loads(u, k) {
                row_exprs[r as usize].add_mul(load, var);
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
        let one: Expression = xs.iter().copied().sum();
        model.add_constraint(one.eq(1.0));
    }
    // The same relative slack as every other algorithm.
    for (expr, row) in row_exprs.into_iter().zip(rows) {
        model.add_constraint(expr.leq(row.capacity * (1.0 + crate::problem::CAPACITY_TOLERANCE)));
    }
    let settle = || {
        crate::lagrangian::solve_branch_and_bound(
            problem,
            objective,
            crate::lagrangian::BranchAndBoundOptions::default(),
            &mut || std::time::Duration::ZERO,
        )
        .map(|a| Assignment { visited: 0, ..a })
    };
    let solution = match model.solve() {
        Ok(s) => s,
        Err(ResolutionError::Infeasible) => {
            return Err(PlaceError::CapacityInfeasible {
                binding_rows: rows.len(),
                first: rows
                    .first()
                    .map_or_else(|| "none".to_owned(), |r| problem.resource_name(r.resource)),
            })
        }
        // A numerical failure of the backend (microlp: "exactly integral
        // solution failed feasibility validation" at a capacity within
        // 1e-9 of a load): the branch and bound settles it.
        Err(ResolutionError::Other(_) | ResolutionError::Str(_)) => return settle(),
        Err(other) => {
            return Err(PlaceError::Solver {
                message: other.to_string(),
            })
        }
    };
    let mut choice = Vec::with_capacity(x.len());
    let mut total = 0.0;
    for (u, xs) in x.iter().enumerate() {
        let k = xs
            .iter()
            .position(|&v| solution.value(v) > 0.5)
            .ok_or_else(|| PlaceError::Solver {
                message: format!("no location chosen for placement unit {u}"),
            })?;
        total += values[u][k];
        choice.push(k);
    }
    // The solver judges capacities with its own (absolute) tolerance; the
    // shared relative one is the judge here. A placement that breaks it
    // leaves the question to the branch and bound, which uses it.
    if !problem.fits(&choice) {
        return settle();
    }
    // The deterministic tie-break of every algorithm.
    let lambda = crate::lagrangian::relax(problem, &values, 100, &mut || false).lambda;
    let choice = crate::tiebreak::canonical(
        problem,
        &values,
        total,
        &lambda,
        crate::limits::DEFAULT_EXHAUSTIVE_VISITS,
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

/// Solves the placement MIP (no backend compiled in: always an error).
#[cfg(not(any(feature = "highs", feature = "microlp")))]
pub fn solve_mip(
    _problem: &PlacementProblem<'_>,
    _objective: Objective,
) -> Result<Assignment, PlaceError> {
    Err(PlaceError::MipUnavailable)
}
