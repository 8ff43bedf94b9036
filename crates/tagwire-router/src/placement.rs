//! `proxy=auto` at run time: where each such subscription's scaling proxy
//! runs, chosen by `tagwire place`'s optimiser (crate `tagwire-place`) over
//! the live topology, and applied by advertising the chosen daemon in this
//! daemon's interest (see [`tagwire_core::federation`]: the links after the
//! proxy carry only the scaled stream).
//!
//! **The problem built** (one per subscription, proxies per subscriber):
//! the daemons this one knows and their confirmed links, with the measured
//! round trip / 2 as the latency of this daemon's own links (others: 0, not
//! measured here); one tag published at the daemon the channel's events
//! come from, with the period measured from their sequence numbers and
//! source times and the mean event size; the subscriber on this daemon at
//! period `scale` × T, with its `max_delay` bound. Objective: least
//! bandwidth. See docs/placement.md, "At run time".
//!
//! **When.** On the federation tick, at most once a second, for channels
//! with `proxy=auto` and `scale` above 1. A changed choice re-advertises
//! the interest, so the new proxy takes over within one advert flood. No
//! event is lost in the change: scaling keeps the events whose sequence
//! number is a multiple of `scale`, the same rule at every daemon, so the
//! old and the new proxy keep the same events.
//!
//! **When it cannot.** No event seen yet, or published on this daemon:
//! scaled here. No feasible placement (a delay bound no node meets): the
//! previous choice is kept and the reason shown by `tagwire admin show`.
//! Cost: one solve per auto channel per second; the problem has the known
//! daemons (at most `federation.max_nodes`) and one unit.

use tagwire_core::qos::ProxyMode;

use crate::state::State;
use crate::timing::now_ns;

use crate::state::placement::{Placed, StreamSeen};

/// How often placements are recomputed.
const EVERY_NS: u64 = 1_000_000_000;

/// Recomputes the placements when due. Returns whether one changed (the
/// interest is then re-advertised).
pub(crate) fn run(st: &mut State) -> bool {
    let now = now_ns();
    if now < st.placement.next_run {
        return false;
    }
    st.placement.next_run = now + EVERY_NS;
    if st.fed.links.is_empty() {
        // No other daemon: every proxy runs here, nothing to place (and no
        // walk over every channel under the table lock, which at 100,000
        // channels stalled every lane's publishes for ~100 ms a second).
        let had = !st.placement.chosen.is_empty();
        st.placement.chosen.clear();
        return had;
    }
    // The `proxy=auto` channels, found again only when channels or their
    // QoS changed (every change bumps the table's generation).
    let generation = st.channels.generation();
    if st.placement.auto_of != Some(generation) {
        st.placement.auto = st
            .channels
            .after(None)
            .filter(|(_, ch)| ch.proxy.borrow().1 == ProxyMode::Auto)
            .map(|(global, _)| *global)
            .collect();
        st.placement.auto_of = Some(generation);
    }
    let auto: Vec<(u64, u32, Option<u64>, StreamSeen)> = st
        .placement
        .auto
        .iter()
        .filter_map(|global| {
            let ch = st.channels.get(*global)?;
            let (scale, mode) = ch.proxy.borrow().clone();
            (mode == ProxyMode::Auto).then(|| (*global, scale, ch.max_delay(), ch.seen()))
        })
        .collect();
    let live: std::collections::HashSet<u64> = auto.iter().map(|a| a.0).collect();
    let mut changed = false;
    st.placement.chosen.retain(|g, _| live.contains(g));
    for (global, scale, max_delay, seen) in auto {
        let previous = st.placement.chosen.get(&global).cloned();
        let next = match decide(st, scale, max_delay, &seen) {
            Ok(p) => p,
            Err(why) => {
                st.placement.infeasible += 1;
                match previous.clone() {
                    Some(mut p) => {
                        p.reason = format!("{why}; keeping the previous placement");
                        p
                    }
                    None => Placed {
                        node: st.config.name.clone(),
                        objective: None,
                        reason: format!("{why}; scaled at this daemon"),
                    },
                }
            }
        };
        changed |= previous.as_ref().map(|p| &p.node) != Some(&next.node);
        st.placement.chosen.insert(global, next);
    }
    changed
}

/// Where one channel's proxy goes, or why no placement is feasible.
fn decide(
    st: &mut State,
    scale: u32,
    max_delay: Option<u64>,
    seen: &StreamSeen,
) -> Result<Placed, String> {
    let here = |reason: &str| Placed {
        node: st.config.name.clone(),
        objective: None,
        reason: reason.to_owned(),
    };
    if scale <= 1 {
        return Ok(here("scale is 1: nothing to place"));
    }
    if seen.period_ns == 0 {
        return Ok(here(
            "no rate measured yet (two events are needed): scaled at this daemon",
        ));
    }
    if seen.origin == 0 || seen.origin == st.node.me() {
        return Ok(here("the publisher is on this daemon"));
    }
    let spec = problem(st, scale, max_delay, seen)?;
    st.placement.solves += 1;
    let topology = spec.validate().map_err(|e| e.to_string())?;
    // The solve runs on the federation's lane: bound its time (the
    // problems built here have no capacities, so the units are independent
    // and solved exactly long before this).
    let options = tagwire_place::PlaceOptions {
        branch_and_bound: tagwire_place::BranchAndBoundOptions {
            time_limit: std::time::Duration::from_millis(100),
            ..Default::default()
        },
        ..Default::default()
    };
    let report = tagwire_place::place(&topology, &options)
        .map_err(|e| format!("no feasible placement: {e}"))?;
    let node = report
        .proxies
        .first()
        .map(|p| p.proxy_node.clone())
        .ok_or("the optimiser placed no proxy")?;
    Ok(Placed {
        reason: format!(
            "tagwire place ({:?}, {}): least bandwidth {:.0} B/s over all links",
            report.algorithm, report.status, report.objective_value
        ),
        objective: Some(report.objective_value),
        node,
    })
}

/// The placement problem of one channel, in `tagwire place`'s input format.
fn problem(
    st: &State,
    scale: u32,
    max_delay: Option<u64>,
    seen: &StreamSeen,
) -> Result<tagwire_place::TopologySpec, String> {
    let names: std::collections::HashMap<u64, String> = st
        .node
        .topology()
        .nodes()
        .into_iter()
        .map(|n| (n.0, n.1))
        .collect();
    let mut sorted: Vec<&String> = names.values().collect();
    sorted.sort();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err("two daemons share a name, so the problem cannot name them".into());
    }
    let publisher = names
        .get(&seen.origin)
        .ok_or("the publisher's daemon is not known here")?;
    let me = st.node.me();
    let links: Vec<serde_json::Value> = st
        .node
        .topology()
        .links()
        .into_iter()
        .filter_map(|(a, b)| {
            let mut link = serde_json::json!({ "between": [names.get(&a)?, names.get(&b)?] });
            // Measured here only for this daemon's own links.
            let other = if a == me {
                Some(b)
            } else if b == me {
                Some(a)
            } else {
                None
            };
            let rtt = other
                .and_then(|o| st.fed.links.get(&o))
                .and_then(|l| l.rtt_ns);
            if let Some(rtt) = rtt {
                link["latency_ms"] = (rtt as f64 / 2e6).into();
            }
            Some(link)
        })
        .collect();
    let period_ms = seen.period_ns as f64 / 1e6;
    let mut sub = serde_json::json!({
        "name": "auto",
        "node": st.config.name,
        "period_ms": period_ms * f64::from(scale),
    });
    if let Some(d) = max_delay {
        sub["max_delay_ms"] = (d as f64 / 1e6).into();
    }
    let spec = serde_json::json!({
        "nodes": sorted.iter().map(|n| serde_json::json!({ "name": n })).collect::<Vec<_>>(),
        "links": links,
        "tags": [{
            "name": "/auto",
            "publisher": publisher,
            "period_ms": period_ms,
            "message_bytes": seen.bytes.max(1) as f64,
            "proxy": "per_subscriber",
            "subscribers": [sub],
        }],
    });
    serde_json::from_value(spec).map_err(|e| format!("cannot build the placement problem: {e}"))
}
