//! The web dashboard: one HTML page with its script and style built into
//! the binary (`dashboard/`), and the JSON it polls (`/api/listing`): the
//! snapshot's tables, each cut at `[metrics] max_series` rows (the count of
//! the rest in `more`), with the rates since the previous snapshot.

use std::sync::OnceLock;

use serde_json::{json, Value};

use super::snapshot::{delivered, published, Snapshot};

const HTML: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The page, script and style inlined (so one authenticated request brings
/// everything, and no other path needs serving).
pub(crate) fn page() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        HTML.replace("/*STYLE*/", STYLE)
            .replace("/*SCRIPT*/", SCRIPT)
    })
}

/// A table cut at `max` rows: `{"rows": [...], "more": N}`.
fn table(rows: impl Iterator<Item = Value>, total: usize, max: usize) -> Value {
    let rows: Vec<Value> = rows.take(max).collect();
    let more = total.saturating_sub(rows.len());
    json!({ "rows": rows, "more": more })
}

/// Rounds a rate for display (two decimals).
fn rate(r: Option<&f64>) -> Value {
    match r {
        Some(r) => json!((r * 100.0).round() / 100.0),
        None => Value::Null,
    }
}

/// The JSON of `/api/listing`.
pub(crate) fn listing_json(s: &Snapshot) -> Value {
    let l = &s.listing;
    let max = s.max_series;
    let r = &s.rates;
    let tags = table(
        l.tags.iter().map(|t| {
            json!({
                "tag": t.tag,
                "published": t.published,
                "last_publisher": t.last_publisher,
                "rate": rate(r.tags.get(&t.tag)),
            })
        }),
        l.tags.len(),
        max,
    );
    let endpoints = table(
        l.endpoints.iter().map(|e| {
            json!({
                "name": e.name,
                "kind": e.kind,
                "connection": e.connection,
                "identity": s.endpoint_identity.get(&e.name),
            })
        }),
        l.endpoints.len(),
        max,
    );
    let channels = table(
        l.subscriptions.iter().map(|c| {
            let key = (c.endpoint.clone(), c.pattern.clone());
            json!({
                "endpoint": c.endpoint,
                "pattern": c.pattern,
                "queue_depth": c.queue_depth,
                "queue_bound": c.queue_bound,
                "discard": c.discard,
                "route": c.route,
                "delivered": c.delivered,
                "dropped": c.dropped,
                "expired": c.expired,
                "too_large": c.too_large,
                "scaled_out": c.scaled_out,
                "transform": c.transform,
                "proxy": c.proxy.as_ref().map(|p| format!("{} at {}", p.mode, p.runs_at)),
                "rate": rate(r.channels.get(&key)),
            })
        }),
        l.subscriptions.len(),
        max,
    );
    let connections = table(
        l.connections.iter().map(|c| {
            json!({
                "id": c.id, "name": c.name, "peer": c.peer,
                "identity": c.identity, "band": c.band,
            })
        }),
        l.connections.len(),
        max,
    );
    let lanes: Vec<Value> = l
        .lanes
        .iter()
        .map(|lane| {
            json!({
                "band": lane.band,
                "sched": lane.sched,
                "sched_applied": lane.sched_applied,
                "fell_back": lane.fell_back,
                "dscp": lane.dscp,
                "tcp": lane.tcp,
                "unix": lane.unix,
                "connections": l.connections.iter().filter(|c| c.band == lane.band).count(),
                "cpu_seconds": s.lane_cpu.get(&lane.band),
                "busy": rate(r.lane_busy.get(&lane.band)),
            })
        })
        .collect();
    let links: Vec<Value> = l
        .federation
        .iter()
        .flat_map(|f| f.links.iter())
        .take(max)
        .map(|k| {
            json!({
                "peer": k.peer, "addr": k.addr, "up_secs": k.up_secs,
                "rtt_us": k.rtt_us, "clock_offset_us": k.clock_offset_us,
                "events_in": k.events_in, "events_out": k.events_out,
                "rate_in_bps": k.rate_in_bps, "rate_out_bps": k.rate_out_bps,
                "queue_depth": k.queue_depth, "dropped": k.dropped,
            })
        })
        .collect();
    json!({
        "server": l.server,
        "auth": l.auth,
        "default_band": l.default_band,
        "truncated": s.truncated,
        "window_secs": r.window_secs,
        "totals": {
            "connections": l.connections.len(),
            "endpoints": l.endpoints.len(),
            "subscriptions": l.subscriptions.len(),
            "tags": l.tags.len(),
            "published": published(l),
            "delivered": delivered(l),
            "publish_rate": r.window_secs.map(|_| r.published),
            "deliver_rate": r.window_secs.map(|_| r.delivered),
            "deferred": l.deferred,
            "buffered_bytes": l.memory.buffered_bytes,
            "max_buffered_bytes": l.memory.max_buffered_bytes,
            "daemons": l.federation.as_ref().map_or(1, |f| f.daemons),
        },
        "lanes": lanes,
        "tags": tags,
        "endpoints": endpoints,
        "channels": channels,
        "connections": connections,
        "links": links,
    })
}
