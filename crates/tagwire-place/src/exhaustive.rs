//! The exhaustive algorithm of the paper's Appendix A, generalised to many
//! tags and subscribers.
//!
//! For one unit (a proxy and the subscribers it serves) it is exactly the
//! paper's loop: for every node j compute δ(i,j) and cost(i,j) for every
//! subscriber i, drop j if some δ(i,j) exceeds δʳ_i, otherwise
//! TotalCost_j = Σ_i cost(i,j); pick the least TotalCost_j (ties: the node
//! declared first). Units only interact through link and node capacities;
//! when no capacity can bind (see [`PlacementProblem::capacity_rows`]) the
//! units are solved one by one, which is exact. Otherwise every combination
//! of candidates is enumerated depth first, cheapest first, skipping
//! branches that break a capacity or cannot beat the best found so far
//! (still exact). The number of combinations grows as m^units, so the
//! search has a visit limit and then fails with
//! [`PlaceError::ExhaustiveLimit`]. Ties within
//! [`crate::problem::VALUE_TOLERANCE`] are broken by [`crate::tiebreak`].

use crate::deadline::{Deadline, Ticker};
use crate::error::PlaceError;
use crate::problem::{value_slack, Objective, PlacementProblem};

/// Result of a solve: one candidate per unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// `choice[u]` is an index into `problem.candidates()[u]`.
    pub choice: Vec<usize>,
    /// Objective value of the assignment.
    pub objective: f64,
    /// Search nodes visited (exhaustive, branch and bound) or 0 (MIP).
    pub visited: u64,
    /// A proven lower bound on the optimum (= `objective` when optimal).
    pub lower_bound: f64,
    /// Whether `objective` is proven optimal; otherwise the gap is
    /// `(objective − lower_bound) / objective`.
    pub optimal: bool,
}

impl Assignment {
    /// The proven relative gap (0 when optimal).
    pub fn gap(&self) -> f64 {
        if self.optimal {
            0.0
        } else {
            ((self.objective - self.lower_bound) / self.objective.abs().max(f64::MIN_POSITIVE))
                .max(0.0)
        }
    }
}

/// Knobs of the exhaustive search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExhaustiveOptions {
    /// Give up after this many search nodes.
    pub max_visits: u64,
    /// Stop at this deadline with the best placement found so far (not
    /// proven optimal; its lower bound is the sum of every unit's cheapest
    /// candidate), or [`PlaceError::NoPlacementInTime`] when none was.
    pub deadline: Deadline,
}

impl Default for ExhaustiveOptions {
    fn default() -> Self {
        ExhaustiveOptions {
            max_visits: crate::limits::DEFAULT_EXHAUSTIVE_VISITS,
            deadline: Deadline::none(),
        }
    }
}

/// Solves by exhaustive search. `progress(done, total)` is called now and
/// then (on each top-level branch) so a caller can draw a progress bar.
pub fn solve_exhaustive(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    options: ExhaustiveOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Assignment, PlaceError> {
    let values = problem.objective_values(objective)?;
    if let Some(e) = problem.infeasibility() {
        return Err(e);
    }
    let units = values.len();
    let rows = problem.capacity_rows();

    let mut ticker = Ticker::new(options.deadline, 4096);
    if rows.is_empty() {
        // Separable: Appendix A per unit (the first cheapest candidate of
        // each unit is the canonical optimum unless ties need the search).
        let mut total = 0.0;
        let mut cheapest = Vec::with_capacity(units);
        for (u, vs) in values.iter().enumerate() {
            let k = (0..vs.len())
                .min_by(|&a, &b| vs[a].total_cmp(&vs[b]).then(a.cmp(&b)))
                .unwrap_or(0);
            total += vs.get(k).copied().unwrap_or(0.0);
            cheapest.push(k);
            progress(u as u64 + 1, units as u64);
        }
        let choice =
            crate::tiebreak::canonical(problem, &values, total, &[], u64::MAX, &mut || {
                ticker.expired()
            })
            .unwrap_or(cheapest);
        let objective_value = choice.iter().enumerate().map(|(u, &k)| values[u][k]).sum();
        return Ok(Assignment {
            choice,
            objective: objective_value,
            visited: values.iter().map(|v| v.len() as u64).sum(),
            lower_bound: objective_value,
            optimal: true,
        });
    }

    // Coupled: depth-first over units, candidates cheapest first.
    let order: Vec<Vec<usize>> = values
        .iter()
        .map(|vs| {
            let mut idx: Vec<usize> = (0..vs.len()).collect();
            idx.sort_by(|&a, &b| vs[a].total_cmp(&vs[b]).then(a.cmp(&b)));
            idx
        })
        .collect();
    let mut suffix_min = vec![0.0; units + 1];
    for u in (0..units).rev() {
        let m = order[u].first().map_or(0.0, |&k| values[u][k]);
        suffix_min[u] = suffix_min[u + 1] + m;
    }
    let mut loads = vec![0.0; rows.len()];
    let mut pos = vec![0usize; units];
    let mut chosen = vec![0usize; units];
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut cur = 0.0;
    let mut depth = 0usize;
    let mut visited = 0u64;
    let total_top = order[0].len() as u64;
    loop {
        if pos[depth] < order[depth].len() {
            let k = order[depth][pos[depth]];
            pos[depth] += 1;
            visited += 1;
            if ticker.expired() {
                return match best {
                    Some((value, choice)) => Ok(Assignment {
                        choice,
                        objective: value,
                        visited,
                        lower_bound: suffix_min[0].min(value),
                        optimal: false,
                    }),
                    None => Err(PlaceError::NoPlacementInTime {
                        seconds: options.deadline.limit_secs(),
                        lower_bound: suffix_min[0],
                    }),
                };
            }
            if visited > options.max_visits {
                return Err(PlaceError::ExhaustiveLimit {
                    visited: visited - 1,
                    limit: options.max_visits,
                    combinations: problem.combinations(),
                });
            }
            let val = values[depth][k];
            if let Some((b, _)) = &best {
                if cur + val + suffix_min[depth + 1] >= *b - value_slack(*b) {
                    // Candidates are sorted: none after this one can do better.
                    pos[depth] = order[depth].len();
                    continue;
                }
            }
            if !problem.candidate_fits(depth, k, &loads) {
                continue;
            }
            if depth + 1 == units {
                chosen[depth] = k;
                best = Some((cur + val, chosen.clone()));
                continue;
            }
            for &(r, x) in problem.candidate_loads(depth, k) {
                loads[r as usize] += x;
            }
            chosen[depth] = k;
            cur += val;
            depth += 1;
            pos[depth] = 0;
        } else {
            if depth == 0 {
                break;
            }
            depth -= 1;
            let k = chosen[depth];
            for &(r, x) in problem.candidate_loads(depth, k) {
                loads[r as usize] -= x;
            }
            cur -= values[depth][k];
            if depth == 0 {
                progress(pos[0] as u64, total_top);
            }
        }
    }
    match best {
        Some((value, choice)) => {
            let lambda =
                crate::lagrangian::relax(problem, &values, 100, &mut || options.deadline.expired())
                    .lambda;
            Ok(crate::tiebreak::optimal_assignment(
                problem,
                &values,
                value,
                &lambda,
                options.max_visits,
                (choice, visited),
                &mut || ticker.expired(),
            ))
        }
        None => Err(PlaceError::CapacityInfeasible {
            binding_rows: rows.len(),
            first: problem.resource_name(rows[0].resource),
        }),
    }
}
