//! A [`Snapshot`] in the Prometheus text exposition format, through the
//! `prometheus-client` crate: every series listed in `docs/metrics.md`.
//! Keys beyond `[metrics] max_series` of a kind are summed into one series
//! whose labels are `other`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::snapshot::{delivered, published, ChannelKey, Snapshot};

/// A series' labels.
type Labels = Vec<(&'static str, String)>;

/// The label value of keys without their own series.
pub(crate) const OTHER: &str = "other";

/// Registers families filled with fixed values.
struct Out {
    reg: Registry,
}

impl Out {
    fn counter(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        rows: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        let fam = Family::<Labels, Counter>::default();
        for (l, v) in rows {
            fam.get_or_create(&l).inc_by(v);
        }
        self.register(name, help, unit, fam);
    }

    fn counter_f64(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        rows: impl IntoIterator<Item = (Labels, f64)>,
    ) {
        let fam = Family::<Labels, Counter<f64, AtomicU64>>::default();
        for (l, v) in rows {
            fam.get_or_create(&l).inc_by(v);
        }
        self.register(name, help, unit, fam);
    }

    fn gauge(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        rows: impl IntoIterator<Item = (Labels, i64)>,
    ) {
        let fam = Family::<Labels, Gauge>::default();
        for (l, v) in rows {
            fam.get_or_create(&l).inc_by(v);
        }
        self.register(name, help, unit, fam);
    }

    fn gauge_f64(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        rows: impl IntoIterator<Item = (Labels, f64)>,
    ) {
        let fam = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        for (l, v) in rows {
            fam.get_or_create(&l).inc_by(v);
        }
        self.register(name, help, unit, fam);
    }

    fn register<M: prometheus_client::registry::Metric>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        m: M,
    ) {
        match unit {
            Some(u) => self.reg.register_with_unit(name, help, u, m),
            None => self.reg.register(name, help, m),
        }
    }
}

fn one(v: u64) -> [(Labels, u64); 1] {
    [(Vec::new(), v)]
}

fn gauge_one(v: impl TryInto<i64>) -> [(Labels, i64); 1] {
    [(Vec::new(), v.try_into().unwrap_or(i64::MAX))]
}

fn count(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `key` itself when it has its own series, else `other`.
fn label<'a>(chosen: &BTreeSet<String>, key: &'a str) -> std::borrow::Cow<'a, str> {
    if chosen.contains(key) {
        key.into()
    } else {
        OTHER.into()
    }
}

/// The text of `/metrics`.
pub(crate) fn encode(s: &Snapshot) -> Result<String, String> {
    let l = &s.listing;
    let mut out = Out {
        reg: Registry::with_prefix("tagwire"),
    };

    // The daemon as a whole.
    out.gauge(
        "connections",
        "Open client connections (links to other daemons included)",
        None,
        gauge_one(l.connections.len()),
    );
    let mut endpoints: BTreeMap<&str, i64> = BTreeMap::new();
    for e in &l.endpoints {
        *endpoints.entry(e.kind.as_str()).or_default() += 1;
    }
    out.gauge(
        "endpoints",
        "Registered endpoints, by kind (publisher or subscriber)",
        None,
        endpoints
            .into_iter()
            .map(|(k, n)| (vec![("kind", k.to_owned())], n)),
    );
    out.gauge(
        "subscriptions",
        "Subscriptions (channels)",
        None,
        gauge_one(l.subscriptions.len()),
    );
    out.gauge(
        "tags_tracked",
        "Tags with their own publish counter (limits.max_tracked_tags)",
        None,
        gauge_one(l.tags.len()),
    );
    out.counter(
        "events_published",
        "Events published on every tag (untracked tags included)",
        None,
        one(published(l)),
    );
    out.counter(
        "events_delivered",
        "Events written to subscribers",
        None,
        one(delivered(l)),
    );
    let sum = |f: fn(&tagwire_proto::admin::SubscriptionInfo) -> u64| -> u64 {
        l.subscriptions.iter().map(f).sum()
    };
    let fed = l.federation.as_ref();
    let drops: [(&str, u64); 11] = [
        ("expired_on_arrival", l.expired),
        ("filtered_at_source", l.filtered_at_source),
        ("memory_budget", l.memory.discarded_events),
        ("filter_budget", l.filter_budget.skipped_deliveries),
        ("queue_full", sum(|c| c.dropped)),
        ("expired_in_queue", sum(|c| c.expired)),
        ("too_large", sum(|c| c.too_large)),
        ("transform_error", sum(|c| c.transform_errors)),
        ("unwanted", fed.map_or(0, |f| f.unwanted)),
        ("hop_limit", fed.map_or(0, |f| f.hop_limited)),
        (
            "link_queue_full",
            fed.map_or(0, |f| f.links.iter().map(|k| k.dropped).sum()),
        ),
    ];
    out.counter(
        "events_dropped",
        "Events dropped, by reason",
        None,
        drops
            .iter()
            .map(|(r, n)| (vec![("reason", (*r).to_owned())], *n)),
    );
    out.counter(
        "filter_budget_events",
        "Events whose filter evaluations ran over limits.max_filter_work_per_event",
        None,
        one(l.filter_budget.events_over_budget),
    );
    out.counter(
        "filter_work",
        "Work units spent evaluating filters (filters.md, \"Budget per event\")",
        None,
        one(l.filter_budget.work),
    );
    out.gauge(
        "deferred_events",
        "Events held until their start time",
        None,
        gauge_one(l.deferred),
    );
    out.gauge(
        "memory_buffered",
        "Bytes charged to the router-wide memory budget",
        Some(Unit::Bytes),
        gauge_one(l.memory.buffered_bytes),
    );
    out.gauge(
        "memory_limit",
        "The router-wide memory budget (limits.max_buffered_bytes)",
        Some(Unit::Bytes),
        gauge_one(l.memory.max_buffered_bytes),
    );
    out.counter(
        "connections_refused",
        "Connections closed because the memory budget was spent",
        None,
        one(l.memory.refused_connections),
    );
    let h = &l.history;
    out.gauge(
        "history_tags",
        "Tags that keep a pull buffer",
        None,
        gauge_one(h.tags),
    );
    out.gauge(
        "history",
        "Bytes held by pull buffers",
        Some(Unit::Bytes),
        gauge_one(h.bytes),
    );
    out.counter(
        "history_events",
        "Pull buffer events, by outcome (recorded, evicted, not_recorded)",
        None,
        [
            ("recorded", h.recorded),
            ("evicted", h.evicted),
            ("not_recorded", h.not_recorded),
        ]
        .map(|(o, n)| (vec![("outcome", o.to_owned())], n)),
    );
    out.gauge(
        "shm_regions",
        "Shared-memory regions open",
        None,
        gauge_one(l.shm.regions_open),
    );
    out.gauge(
        "shm",
        "Bytes of shared memory reserved by open regions",
        Some(Unit::Bytes),
        gauge_one(l.shm.bytes_open),
    );
    out.counter(
        "shm_deliveries",
        "Shared-memory deliveries, by mode (reference: read in place; copy: copied out)",
        None,
        [
            ("reference", l.shm.by_reference),
            ("copy", l.shm.copied_out),
        ]
        .map(|(m, n)| (vec![("mode", m.to_owned())], n)),
    );
    out.gauge(
        "federation_daemons",
        "Daemons known in the federation (this one included; 1 when alone)",
        None,
        gauge_one(fed.map_or(1, |f| f.daemons)),
    );

    // Tags.
    let mut tags: BTreeMap<std::borrow::Cow<'_, str>, u64> = BTreeMap::new();
    for t in &l.tags {
        *tags.entry(label(&s.labelled.tags, &t.tag)).or_default() += t.published;
    }
    out.counter(
        "tag_events_published",
        "Events published, by tag",
        None,
        tags.into_iter()
            .map(|(t, n)| (vec![("tag", t.into_owned())], n)),
    );

    // Channels (subscriptions).
    #[derive(Default)]
    struct Chan {
        delivered: u64,
        dropped: [u64; 4],
        scaled_out: u64,
        depth: usize,
        bound: usize,
    }
    let other: ChannelKey = (OTHER.to_owned(), OTHER.to_owned());
    let mut chans: BTreeMap<&ChannelKey, Chan> = BTreeMap::new();
    let mut idents: BTreeMap<String, (i64, i64, u64, u64)> = BTreeMap::new();
    for c in &l.subscriptions {
        let key = (c.endpoint.clone(), c.pattern.clone());
        let k = s.labelled.channels.get(&key).unwrap_or(&other);
        let e = chans.entry(k).or_default();
        e.delivered += c.delivered;
        let drops = [c.dropped, c.expired, c.too_large, c.transform_errors];
        for (d, n) in e.dropped.iter_mut().zip(drops) {
            *d += n;
        }
        e.scaled_out += c.scaled_out;
        e.depth += c.queue_depth;
        e.bound += c.queue_bound;
        if let Some(id) = s.endpoint_identity.get(&c.endpoint) {
            let i = idents
                .entry(label(&s.labelled.identities, id).into_owned())
                .or_default();
            i.1 += 1;
            i.2 += c.delivered;
            i.3 += drops.iter().sum::<u64>();
        }
    }
    let chan_labels = |k: &ChannelKey| vec![("endpoint", k.0.clone()), ("pattern", k.1.clone())];
    out.counter(
        "channel_events_delivered",
        "Events written to the subscriber, by channel",
        None,
        chans.iter().map(|(k, c)| (chan_labels(k), c.delivered)),
    );
    out.counter(
        "channel_events_dropped",
        "Events a channel dropped, by reason (queue_full: its discard policy at the bound; expired: in its queue; too_large: over the subscriber's frame limit; transform_error)",
        None,
        chans.iter().flat_map(|(k, c)| {
            ["queue_full", "expired", "too_large", "transform_error"]
                .into_iter()
                .zip(c.dropped)
                .map(move |(r, n)| {
                    let mut l = chan_labels(k);
                    l.push(("reason", r.to_owned()));
                    (l, n)
                })
        }),
    );
    out.counter(
        "channel_events_scaled_out",
        "Events a channel's temporal scaling left out, by channel",
        None,
        chans.iter().map(|(k, c)| (chan_labels(k), c.scaled_out)),
    );
    out.gauge(
        "channel_queue_depth",
        "Events waiting in a channel's queue",
        None,
        chans.iter().map(|(k, c)| (chan_labels(k), count(c.depth))),
    );
    out.gauge(
        "channel_queue_bound",
        "A channel's queue bound (max_queue_length)",
        None,
        chans.iter().map(|(k, c)| (chan_labels(k), count(c.bound))),
    );

    // Identities.
    for c in &l.connections {
        idents
            .entry(label(&s.labelled.identities, &c.identity).into_owned())
            .or_default()
            .0 += 1;
    }
    let id_labels = |k: &String| vec![("identity", k.clone())];
    out.gauge(
        "identity_connections",
        "Open connections, by identity",
        None,
        idents.iter().map(|(k, v)| (id_labels(k), v.0)),
    );
    out.gauge(
        "identity_subscriptions",
        "Subscriptions, by identity",
        None,
        idents.iter().map(|(k, v)| (id_labels(k), v.1)),
    );
    out.counter(
        "identity_events_delivered",
        "Events written to an identity's subscriptions",
        None,
        idents.iter().map(|(k, v)| (id_labels(k), v.2)),
    );
    out.counter(
        "identity_events_dropped",
        "Events an identity's subscriptions dropped (every reason)",
        None,
        idents.iter().map(|(k, v)| (id_labels(k), v.3)),
    );

    // Lanes (one per configured band: bounded by the configuration).
    out.gauge(
        "lane_info",
        "A lane (one per band): its scheduling, wanted and applied, and its DSCP; value 1",
        None,
        l.lanes.iter().map(|lane| {
            (
                vec![
                    ("band", lane.band.clone()),
                    ("sched", lane.sched.clone()),
                    ("sched_applied", lane.sched_applied.clone()),
                    ("dscp", lane.dscp.to_string()),
                ],
                1,
            )
        }),
    );
    let mut per_band: BTreeMap<&str, i64> =
        l.lanes.iter().map(|lane| (lane.band.as_str(), 0)).collect();
    for c in &l.connections {
        if let Some(n) = per_band.get_mut(c.band.as_str()) {
            *n += 1;
        }
    }
    out.gauge(
        "lane_connections",
        "Connections a lane serves",
        None,
        per_band
            .into_iter()
            .map(|(b, n)| (vec![("band", b.to_owned())], n)),
    );
    out.counter_f64(
        "lane_cpu",
        "CPU time a lane's thread has run (its busy time)",
        Some(Unit::Seconds),
        s.lane_cpu
            .iter()
            .map(|(b, secs)| (vec![("band", b.clone())], *secs)),
    );

    // Links to other daemons.
    let links: Vec<_> = fed.map(|f| f.links.iter().collect()).unwrap_or_default();
    let peer = |p: &str| label(&s.labelled.links, p).into_owned();
    let own = |p: &str| s.labelled.links.contains(p);
    out.gauge_f64(
        "link_rtt",
        "Last measured round trip to the peer daemon",
        Some(Unit::Seconds),
        links
            .iter()
            .filter(|k| own(&k.peer))
            .filter_map(|k| Some((vec![("peer", k.peer.clone())], k.rtt_us? as f64 / 1e6))),
    );
    out.gauge_f64(
        "link_clock_offset",
        "The peer daemon's clock minus this one's (NTP-style estimate)",
        Some(Unit::Seconds),
        links.iter().filter(|k| own(&k.peer)).filter_map(|k| {
            Some((
                vec![("peer", k.peer.clone())],
                k.clock_offset_us? as f64 / 1e6,
            ))
        }),
    );
    let mut link_sums: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for k in &links {
        let e = link_sums.entry(peer(&k.peer)).or_default();
        for (d, n) in e.iter_mut().zip([
            k.events_in,
            k.events_out,
            k.bytes_in,
            k.bytes_out,
            k.dropped,
        ]) {
            *d += n;
        }
    }
    let mut link_depth: BTreeMap<String, i64> = BTreeMap::new();
    for k in &links {
        *link_depth.entry(peer(&k.peer)).or_default() += count(k.queue_depth);
    }
    let dir = |p: &String, d: &str| vec![("peer", p.clone()), ("direction", d.to_owned())];
    out.counter(
        "link_events",
        "Events over a link, by direction (in, out)",
        None,
        link_sums
            .iter()
            .flat_map(|(p, v)| [(dir(p, "in"), v[0]), (dir(p, "out"), v[1])]),
    );
    out.counter(
        "link",
        "Bytes of events over a link, by direction (in, out)",
        Some(Unit::Bytes),
        link_sums
            .iter()
            .flat_map(|(p, v)| [(dir(p, "in"), v[2]), (dir(p, "out"), v[3])]),
    );
    out.counter(
        "link_events_dropped",
        "Events a link's queues dropped at their bound",
        None,
        link_sums
            .iter()
            .map(|(p, v)| (vec![("peer", p.clone())], v[4])),
    );
    out.gauge(
        "link_queue_depth",
        "Events waiting in a link's queue",
        None,
        link_depth.into_iter().map(|(p, n)| (vec![("peer", p)], n)),
    );

    // The exporter itself.
    out.gauge(
        "metrics_max_series",
        "Most series per label kind before the rest are summed as `other` ([metrics] max_series)",
        None,
        gauge_one(s.max_series),
    );
    out.gauge(
        "metrics_truncated",
        "1 when the listing had more items than a snapshot takes (the sums then miss some)",
        None,
        gauge_one(i64::from(s.truncated)),
    );

    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &out.reg)
        .map_err(|e| format!("cannot encode the metrics: {e}"))?;
    Ok(text)
}
