//! Branch and bound with Lagrangian bounds: the default algorithm when
//! capacities couple many proxies (see `docs/placement.md`, "Algorithm 3").
//!
//! 1. **Lower bound.** Relaxing the capacity rows with multipliers λ ≥ 0
//!    splits the problem per unit: L(λ) = Σ_u min_k (c_uk + λ·a_uk) − λ·b
//!    is a lower bound on the optimum for every λ. Subgradient steps
//!    (Polyak, deterministic) raise it.
//! 2. **Upper bound.** A repair heuristic turns the relaxed choice into a
//!    feasible placement: units in decreasing regret take their cheapest
//!    (in reduced cost) candidate that still fits, then each unit moves to
//!    its cheapest candidate that fits.
//! 3. **Fixing.** A candidate whose reduced cost exceeds its unit's least by
//!    more than UB − LB cannot be in a better placement: removed.
//! 4. **Search.** Depth first over the remaining candidates (cheapest
//!    reduced cost first), pruned by the Lagrangian bound of the fixed
//!    part plus the relaxation of the rest. It ends with a proof of
//!    optimality, or at the time or visit limit with the best placement
//!    and the proven gap (UB − LB) / UB.
//!
//! Deterministic: the same input gives the same steps; only the time limit
//! can cut a run short, and then the answer says so.

use std::time::Duration;

use crate::error::PlaceError;
use crate::exhaustive::Assignment;
use crate::problem::{value_slack, Objective, PlacementProblem, CAPACITY_TOLERANCE};

/// Limits of the branch and bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchAndBoundOptions {
    /// Stop the search after this long (measured by the `elapsed` clock
    /// given to [`solve_branch_and_bound`]) with the best placement and
    /// its proven gap.
    pub time_limit: Duration,
    /// Stop after this many search nodes (a deterministic limit).
    pub max_visits: u64,
    /// Subgradient iterations at the root.
    pub subgradient_iterations: u32,
}

impl Default for BranchAndBoundOptions {
    fn default() -> Self {
        BranchAndBoundOptions {
            time_limit: Duration::from_secs(10),
            max_visits: 1_000_000_000,
            subgradient_iterations: 300,
        }
    }
}

/// The outcome of the Lagrangian phase: multipliers, the bound they give,
/// and the best feasible placement found (if any) with its value.
pub(crate) struct Relaxation {
    pub(crate) lambda: Vec<f64>,
    pub(crate) lower_bound: f64,
    pub(crate) incumbent: Option<(f64, Vec<usize>)>,
}

fn reduced_costs(
    problem: &PlacementProblem<'_>,
    values: &[Vec<f64>],
    lambda: &[f64],
) -> Vec<Vec<f64>> {
    values
        .iter()
        .enumerate()
        .map(|(u, vs)| {
            vs.iter()
                .enumerate()
                .map(|(k, &v)| {
                    v + problem
                        .candidate_loads(u, k)
                        .iter()
                        .map(|&(r, x)| lambda[r as usize] * x)
                        .sum::<f64>()
                })
                .collect()
        })
        .collect()
}

fn argmin(xs: &[f64]) -> usize {
    let mut best = 0;
    for (k, &x) in xs.iter().enumerate() {
        if x < xs[best] {
            best = k;
        }
    }
    best
}

/// Greedy repair: a feasible placement from reduced costs, or `None`.
/// Tries units in decreasing regret, then in declaration order, then in
/// reverse, and keeps the cheapest success.
fn repair(
    problem: &PlacementProblem<'_>,
    values: &[Vec<f64>],
    rc: &[Vec<f64>],
    caps: &[f64],
    out_of_time: &mut dyn FnMut() -> bool,
) -> Option<(f64, Vec<usize>)> {
    let mut best: Option<(f64, Vec<usize>)> = None;
    for attempt in 0..3 {
        if out_of_time() {
            break;
        }
        if let Some((v, c)) = repair_in_order(problem, values, rc, caps, attempt, out_of_time) {
            if best.as_ref().map_or(true, |(b, _)| v < *b) {
                best = Some((v, c));
            }
        }
        if best.is_some() && attempt == 0 {
            break;
        }
    }
    best
}

/// One repair pass; `attempt` picks the order of the units.
fn repair_in_order(
    problem: &PlacementProblem<'_>,
    values: &[Vec<f64>],
    rc: &[Vec<f64>],
    caps: &[f64],
    attempt: u32,
    out_of_time: &mut dyn FnMut() -> bool,
) -> Option<(f64, Vec<usize>)> {
    let units = values.len();
    // Regret: second least reduced cost minus the least.
    let mut order: Vec<(f64, usize)> = rc
        .iter()
        .enumerate()
        .map(|(u, r)| {
            let (mut a, mut b) = (f64::INFINITY, f64::INFINITY);
            for &x in r {
                if x < a {
                    b = a;
                    a = x;
                } else if x < b {
                    b = x;
                }
            }
            (if b.is_finite() { b - a } else { f64::INFINITY }, u)
        })
        .collect();
    match attempt {
        0 => order.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1))),
        1 => {}
        _ => order.reverse(),
    }
    let mut loads = vec![0.0; caps.len()];
    let mut choice = vec![usize::MAX; units];
    let fits = |loads: &[f64], ls: &[(u32, f64)]| {
        ls.iter()
            .all(|&(r, x)| loads[r as usize] + x <= caps[r as usize])
    };
    // Overload a candidate would add: Σ_r (load + x − cap)⁺ − (load − cap)⁺.
    let added_overload = |loads: &[f64], ls: &[(u32, f64)]| -> f64 {
        ls.iter()
            .map(|&(r, x)| {
                let (l, c) = (loads[r as usize], caps[r as usize]);
                (l + x - c).max(0.0) - (l - c).max(0.0)
            })
            .sum()
    };
    let mut idx: Vec<usize> = Vec::new();
    let mut overloaded = false;
    for &(_, u) in &order {
        idx.clear();
        idx.extend(0..rc[u].len());
        idx.sort_by(|&a, &b| rc[u][a].total_cmp(&rc[u][b]).then(a.cmp(&b)));
        let k = match idx
            .iter()
            .find(|&&k| fits(&loads, problem.candidate_loads(u, k)))
        {
            Some(&k) => k,
            None => {
                // Nothing fits: the least overload for now, fixed below.
                overloaded = true;
                *idx.iter()
                    .min_by(|&&a, &&b| {
                        added_overload(&loads, problem.candidate_loads(u, a))
                            .total_cmp(&added_overload(&loads, problem.candidate_loads(u, b)))
                            .then(a.cmp(&b))
                    })
                    .expect("every unit has a candidate")
            }
        };
        for &(r, x) in problem.candidate_loads(u, k) {
            loads[r as usize] += x;
        }
        choice[u] = k;
    }
    if overloaded {
        // Local search on (total overload, cost): move one unit at a time
        // to the candidate that removes the most overload (ties: cheapest).
        let mut rounds = 0;
        loop {
            let total: f64 = loads.iter().zip(caps).map(|(l, c)| (l - c).max(0.0)).sum();
            if total <= 0.0 {
                break;
            }
            rounds += 1;
            // Each round scans every candidate: check the clock each time.
            if rounds > 8 * units + 64 || out_of_time() {
                return None;
            }
            let mut best: Option<(f64, f64, usize, usize)> = None;
            for u in 0..units {
                let old = choice[u];
                let old_ls = problem.candidate_loads(u, old);
                if !old_ls
                    .iter()
                    .any(|&(r, _)| loads[r as usize] > caps[r as usize])
                {
                    continue;
                }
                for &(r, x) in old_ls {
                    loads[r as usize] -= x;
                }
                let removed = added_overload(&loads, old_ls);
                for k in 0..values[u].len() {
                    if k == old {
                        continue;
                    }
                    let gain = removed - added_overload(&loads, problem.candidate_loads(u, k));
                    let dc = values[u][k] - values[u][old];
                    if gain > 0.0
                        && best.map_or(true, |(g, c, _, _)| gain > g || (gain == g && dc < c))
                    {
                        best = Some((gain, dc, u, k));
                    }
                }
                for &(r, x) in old_ls {
                    loads[r as usize] += x;
                }
            }
            let (_, _, u, k) = best?;
            for &(r, x) in problem.candidate_loads(u, choice[u]) {
                loads[r as usize] -= x;
            }
            for &(r, x) in problem.candidate_loads(u, k) {
                loads[r as usize] += x;
            }
            choice[u] = k;
        }
    }
    // Improvement: each unit to its cheapest candidate that fits.
    for _ in 0..3 {
        let mut improved = false;
        for u in 0..units {
            let old = choice[u];
            for &(r, x) in problem.candidate_loads(u, old) {
                loads[r as usize] -= x;
            }
            let mut best = old;
            for k in 0..values[u].len() {
                if values[u][k] < values[u][best] - value_slack(values[u][best])
                    && fits(&loads, problem.candidate_loads(u, k))
                {
                    best = k;
                }
            }
            for &(r, x) in problem.candidate_loads(u, best) {
                loads[r as usize] += x;
            }
            if best != old {
                choice[u] = best;
                improved = true;
            }
        }
        if !improved {
            break;
        }
    }
    let value = choice.iter().enumerate().map(|(u, &k)| values[u][k]).sum();
    Some((value, choice))
}

/// Subgradient optimisation of the Lagrangian bound, with the repair
/// heuristic run along the way. Stops early when the bound proves the
/// incumbent optimal or `out_of_time()` says so.
pub(crate) fn relax(
    problem: &PlacementProblem<'_>,
    values: &[Vec<f64>],
    iterations: u32,
    out_of_time: &mut dyn FnMut() -> bool,
) -> Relaxation {
    let rows = problem.capacity_rows();
    let caps: Vec<f64> = rows
        .iter()
        .map(|r| r.capacity * (1.0 + CAPACITY_TOLERANCE))
        .collect();
    let mut lambda = vec![0.0; rows.len()];
    let mut best = Relaxation {
        lambda: lambda.clone(),
        lower_bound: f64::NEG_INFINITY,
        incumbent: None,
    };
    let mut theta = 2.0;
    let mut stall = 0;
    let mut g = vec![0.0; rows.len()];
    for it in 0..iterations.max(1) {
        let rc = reduced_costs(problem, values, &lambda);
        let choice: Vec<usize> = rc.iter().map(|r| argmin(r)).collect();
        let lb: f64 = choice
            .iter()
            .enumerate()
            .map(|(u, &k)| rc[u][k])
            .sum::<f64>()
            - lambda.iter().zip(&caps).map(|(l, c)| l * c).sum::<f64>();
        if lb > best.lower_bound + value_slack(best.lower_bound.abs().min(1e300)) {
            best.lower_bound = lb;
            best.lambda.clone_from(&lambda);
            stall = 0;
        } else {
            stall += 1;
            if stall >= 10 {
                theta /= 2.0;
                stall = 0;
            }
        }
        g.iter_mut().zip(&caps).for_each(|(gr, c)| *gr = -c);
        for (u, &k) in choice.iter().enumerate() {
            for &(r, x) in problem.candidate_loads(u, k) {
                g[r as usize] += x;
            }
        }
        let relaxed_fits = g.iter().all(|&x| x <= 0.0);
        let offer = |cand: Option<(f64, Vec<usize>)>, best: &mut Relaxation| {
            if let Some((v, c)) = cand {
                if best
                    .incumbent
                    .as_ref()
                    .map_or(true, |(b, _)| v < *b - value_slack(*b))
                {
                    best.incumbent = Some((v, c));
                }
            }
        };
        if relaxed_fits {
            let v = choice.iter().enumerate().map(|(u, &k)| values[u][k]).sum();
            offer(Some((v, choice.clone())), &mut best);
        }
        if it % 10 == 0 || relaxed_fits {
            offer(repair(problem, values, &rc, &caps, out_of_time), &mut best);
        }
        let target = match &best.incumbent {
            Some((ub, _)) => {
                if *ub - best.lower_bound <= value_slack(*ub) {
                    break; // proven optimal
                }
                *ub
            }
            None => lb + 0.05 * lb.abs().max(1.0),
        };
        let norm: f64 = g
            .iter()
            .zip(&lambda)
            .map(|(&gr, &l)| if gr > 0.0 || l > 0.0 { gr * gr } else { 0.0 })
            .sum();
        if norm <= 0.0 || theta < 1e-6 || out_of_time() {
            break;
        }
        let step = theta * (target - lb).max(value_slack(target)) / norm;
        for (l, &gr) in lambda.iter_mut().zip(&g) {
            *l = (*l + step * gr).max(0.0);
        }
    }
    if best.incumbent.is_none() && !out_of_time() {
        let rc = reduced_costs(problem, values, &best.lambda);
        best.incumbent = repair(problem, values, &rc, &caps, out_of_time);
    }
    best
}

/// Solves by Lagrangian branch and bound (see the module doc).
/// `elapsed()` says how long the caller has been working, so the time
/// limit covers building the problem too; pass a fake clock to test.
pub fn solve_branch_and_bound(
    problem: &PlacementProblem<'_>,
    objective: Objective,
    options: BranchAndBoundOptions,
    elapsed: &mut dyn FnMut() -> Duration,
) -> Result<Assignment, PlaceError> {
    let values = problem.objective_values(objective)?;
    if let Some(e) = problem.infeasibility() {
        return Err(e);
    }
    let units = values.len();
    let rows = problem.capacity_rows();
    let limit = options.time_limit;
    if rows.is_empty() || units == 0 {
        return crate::exhaustive::solve_exhaustive(
            problem,
            objective,
            crate::ExhaustiveOptions {
                deadline: crate::Deadline::after(limit.saturating_sub(elapsed())),
                ..crate::ExhaustiveOptions::default()
            },
            &mut |_, _| {},
        );
    }
    // The root may spend at most a third of the time.
    let root_budget = elapsed() + limit.saturating_sub(elapsed()) / 3;
    let mut root_clock = || elapsed() >= root_budget;
    let relaxation = relax(
        problem,
        &values,
        options.subgradient_iterations,
        &mut root_clock,
    );
    let lambda = relaxation.lambda;
    let lb = relaxation.lower_bound;
    let caps: Vec<f64> = rows
        .iter()
        .map(|r| r.capacity * (1.0 + CAPACITY_TOLERANCE))
        .collect();
    let lambda_b: f64 = lambda.iter().zip(&caps).map(|(l, c)| l * c).sum();
    let rc = reduced_costs(problem, &values, &lambda);
    let rc_min: Vec<f64> = rc
        .iter()
        .map(|r| r.iter().copied().fold(f64::INFINITY, f64::min))
        .collect();
    let mut incumbent = relaxation.incumbent;

    // Fixing and ordering: candidates that can still beat the incumbent,
    // cheapest reduced cost first; units with the fewest left first.
    let ub0 = incumbent.as_ref().map_or(f64::INFINITY, |(v, _)| *v);
    let mut lists: Vec<(usize, Vec<usize>)> = (0..units)
        .map(|u| {
            let mut ks: Vec<usize> = (0..rc[u].len())
                .filter(|&k| lb - rc_min[u] + rc[u][k] <= ub0 + value_slack(ub0))
                .collect();
            ks.sort_by(|&a, &b| rc[u][a].total_cmp(&rc[u][b]).then(a.cmp(&b)));
            (u, ks)
        })
        .collect();
    lists.sort_by(|a, b| a.1.len().cmp(&b.1.len()).then(a.0.cmp(&b.0)));
    let order: Vec<usize> = lists.iter().map(|(u, _)| *u).collect();
    let mut suffix = vec![0.0; units + 1];
    for d in (0..units).rev() {
        suffix[d] = suffix[d + 1] + rc_min[order[d]];
    }

    let mut loads = vec![0.0; rows.len()];
    let mut pos = vec![0usize; units];
    let mut chosen = vec![0usize; units]; // by depth: candidate index
    let mut cur_rc = 0.0;
    let mut depth = 0usize;
    let mut visited = 0u64;
    let mut complete = true;
    loop {
        let list = &lists[depth].1;
        if pos[depth] < list.len() {
            let k = list[pos[depth]];
            pos[depth] += 1;
            visited += 1;
            if visited > options.max_visits || (visited % 4096 == 0 && elapsed() >= limit) {
                complete = false;
                break;
            }
            let u = order[depth];
            let bound = cur_rc + rc[u][k] + suffix[depth + 1] - lambda_b;
            if let Some((ub, _)) = &incumbent {
                if bound >= *ub - value_slack(*ub) {
                    // Sorted by reduced cost: the rest of the list is no better.
                    pos[depth] = list.len();
                    continue;
                }
            }
            if !problem.candidate_fits(u, k, &loads) {
                continue;
            }
            chosen[depth] = k;
            if depth + 1 == units {
                let mut choice = vec![0; units];
                for (d, &uu) in order.iter().enumerate() {
                    choice[uu] = chosen[d];
                }
                let v = choice.iter().enumerate().map(|(u, &k)| values[u][k]).sum();
                if incumbent
                    .as_ref()
                    .map_or(true, |(b, _)| v < *b - value_slack(*b))
                {
                    incumbent = Some((v, choice));
                }
                continue;
            }
            for &(r, x) in problem.candidate_loads(u, k) {
                loads[r as usize] += x;
            }
            cur_rc += rc[u][k];
            depth += 1;
            pos[depth] = 0;
        } else {
            if depth == 0 {
                break;
            }
            depth -= 1;
            let u = order[depth];
            let k = chosen[depth];
            for &(r, x) in problem.candidate_loads(u, k) {
                loads[r as usize] -= x;
            }
            cur_rc -= rc[u][k];
        }
    }
    let Some((value, choice)) = incumbent else {
        if complete {
            return Err(PlaceError::CapacityInfeasible {
                binding_rows: rows.len(),
                first: problem.resource_name(rows[0].resource),
            });
        }
        return Err(PlaceError::NoPlacementInTime {
            seconds: limit.as_secs_f64(),
            lower_bound: lb,
        });
    };
    if complete {
        let mut ticks = 0u32;
        Ok(crate::tiebreak::optimal_assignment(
            problem,
            &values,
            value,
            &lambda,
            options.max_visits,
            (choice, visited),
            &mut || {
                ticks = ticks.wrapping_add(1);
                ticks % 4096 == 0 && elapsed() >= limit
            },
        ))
    } else {
        Ok(Assignment {
            choice,
            objective: value,
            visited,
            lower_bound: lb.min(value),
            optimal: false,
        })
    }
}
