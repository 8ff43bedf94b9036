//! The deterministic tie-break every algorithm applies to its optimum, so
//! that they all return the same placement: among the placements whose
//! objective value is within [`crate::problem::VALUE_TOLERANCE`] of the
//! optimum and that fit every capacity (within
//! [`crate::problem::CAPACITY_TOLERANCE`]), the one whose candidate
//! indices, unit by unit (tag order, then subscriber order), are
//! lexicographically smallest — i.e. proxy nodes in declaration order,
//! then routes in their listed order.
//!
//! Found by a depth-first search in that order, pruned by a Lagrangian
//! lower bound; it has a visit limit and the placement's deadline, after
//! which the solver's own optimum is kept (reported by [`canonical`]
//! returning `None`).

use crate::problem::{value_slack, PlacementProblem};

/// A proven optimum `choice` of value `optimum`, found with `visited`
/// nodes, as the canonical placement of that value (see [`canonical`]; the
/// search's own `choice` if the visit limit or the deadline is reached
/// first).
pub(crate) fn optimal_assignment(
    problem: &PlacementProblem<'_>,
    values: &[Vec<f64>],
    optimum: f64,
    lambda: &[f64],
    max_visits: u64,
    (choice, visited): (Vec<usize>, u64),
    out_of_time: &mut dyn FnMut() -> bool,
) -> crate::exhaustive::Assignment {
    let choice =
        canonical(problem, values, optimum, lambda, max_visits, out_of_time).unwrap_or(choice);
    let objective = choice.iter().enumerate().map(|(u, &k)| values[u][k]).sum();
    crate::exhaustive::Assignment {
        choice,
        objective,
        visited,
        lower_bound: objective,
        optimal: true,
    }
}

/// The lexicographically smallest placement with value ≤ `optimum` +
/// slack. `lambda` (one multiplier ≥ 0 per capacity row, or empty) only
/// sharpens the pruning. `None` when the visit limit is reached or
/// `out_of_time()` (asked every visit; it should read the clock rarely)
/// says so first (or, impossibly for a true optimum, when there is no such
/// placement).
pub(crate) fn canonical(
    problem: &PlacementProblem<'_>,
    values: &[Vec<f64>],
    optimum: f64,
    lambda: &[f64],
    max_visits: u64,
    out_of_time: &mut dyn FnMut() -> bool,
) -> Option<Vec<usize>> {
    let rows = problem.capacity_rows();
    let units = values.len();
    if units == 0 {
        return Some(Vec::new());
    }
    let lam = |r: u32| lambda.get(r as usize).copied().unwrap_or(0.0);
    // Reduced costs and their suffix minima.
    let rc: Vec<Vec<f64>> = values
        .iter()
        .enumerate()
        .map(|(u, vs)| {
            vs.iter()
                .enumerate()
                .map(|(k, &v)| {
                    v + problem
                        .candidate_loads(u, k)
                        .iter()
                        .map(|&(r, x)| lam(r) * x)
                        .sum::<f64>()
                })
                .collect()
        })
        .collect();
    let mut suffix = vec![0.0; units + 1];
    for u in (0..units).rev() {
        suffix[u] = suffix[u + 1] + rc[u].iter().copied().fold(f64::INFINITY, f64::min);
    }
    let lambda_b: f64 = rows
        .iter()
        .enumerate()
        .map(|(r, row)| lam(r as u32) * row.capacity * (1.0 + crate::problem::CAPACITY_TOLERANCE))
        .sum();
    let limit = optimum + value_slack(optimum);
    let mut loads = vec![0.0; rows.len()];
    let mut pos = vec![0usize; units];
    let mut chosen = vec![0usize; units];
    let mut cur_rc = 0.0;
    let mut cur_val = 0.0;
    let mut depth = 0usize;
    let mut visited = 0u64;
    loop {
        if pos[depth] < values[depth].len() {
            let k = pos[depth];
            pos[depth] += 1;
            visited += 1;
            if visited > max_visits || out_of_time() {
                return None;
            }
            let val = values[depth][k];
            // The bound is only a bound within floating-point error: give
            // it the same slack as the limit.
            let bound = cur_rc + rc[depth][k] + suffix[depth + 1] - lambda_b;
            if bound > limit + value_slack(limit) || cur_val + val > limit {
                continue;
            }
            if !problem.candidate_fits(depth, k, &loads) {
                continue;
            }
            chosen[depth] = k;
            if depth + 1 == units {
                return Some(chosen);
            }
            for &(r, x) in problem.candidate_loads(depth, k) {
                loads[r as usize] += x;
            }
            cur_rc += rc[depth][k];
            cur_val += val;
            depth += 1;
            pos[depth] = 0;
        } else {
            if depth == 0 {
                return None;
            }
            depth -= 1;
            let k = chosen[depth];
            for &(r, x) in problem.candidate_loads(depth, k) {
                loads[r as usize] -= x;
            }
            cur_rc -= rc[depth][k];
            cur_val -= values[depth][k];
        }
    }
}
