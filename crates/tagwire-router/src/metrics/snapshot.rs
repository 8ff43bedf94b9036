//! Snapshots of the router's listing for `/metrics` and the dashboard: the
//! admin `list` pages merged (each page taken under the state lock, the lock
//! handed back to a waiting lane between pages), the lanes' CPU time, the
//! rates since the previous snapshot, and which keys get their own series.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use crate::admin::{list_page, Requester};
use crate::state::State;
use crate::sync::Locked;
use tagwire_proto::admin::{Listing, MAX_PAGE_ITEMS};

/// Bytes of one listing page (the admin frame limit does not apply here).
const PAGE_BUDGET: usize = 1 << 20;
/// Most items (connections, endpoints, subscriptions, tags) in a snapshot;
/// past it the snapshot is marked truncated (`tagwire_metrics_truncated`).
pub const MAX_SNAPSHOT_ITEMS: usize = 200_000;
/// Most listing pages in a snapshot (a page may skip items without taking any).
const MAX_PAGES: usize = 2_000;
/// A previous snapshot closer than this gives no rates (too short a window).
const MIN_RATE_WINDOW_SECS: f64 = 0.05;

/// A channel's series key: its subscriber endpoint and pattern.
pub(crate) type ChannelKey = (String, String);

/// The listing at one instant, with what the metrics derive from it.
pub(crate) struct Snapshot {
    /// When it was taken.
    pub taken: Instant,
    /// The merged listing pages.
    pub listing: Listing,
    /// Whether the listing stopped at [`MAX_SNAPSHOT_ITEMS`].
    pub truncated: bool,
    /// CPU time each lane's thread has run, seconds, by band (Linux
    /// `/proc/self/task/TID/schedstat`; absent elsewhere).
    pub lane_cpu: HashMap<String, f64>,
    /// The identity of each endpoint's connection.
    pub endpoint_identity: HashMap<String, String>,
    /// Rates over the window since the previous snapshot.
    pub rates: Rates,
    /// The keys that get their own series; the rest go to `other`.
    pub labelled: Labelled,
    /// `[metrics] max_series`.
    pub max_series: usize,
}

/// Per-second rates between two snapshots (empty for the first one).
#[derive(Debug, Default)]
pub(crate) struct Rates {
    /// The window, seconds (`None`: no previous snapshot to compare with).
    pub window_secs: Option<f64>,
    /// Events published per second, by tag.
    pub tags: HashMap<String, f64>,
    /// Events delivered per second, by channel.
    pub channels: HashMap<ChannelKey, f64>,
    /// Share of one CPU each lane used, by band.
    pub lane_busy: HashMap<String, f64>,
    /// Events published per second on every tag (untracked included).
    pub published: f64,
    /// Events delivered per second to every channel.
    pub delivered: f64,
}

/// The keys with their own series, at most `max_series` of each kind.
#[derive(Debug, Default, Clone)]
pub(crate) struct Labelled {
    pub tags: BTreeSet<String>,
    pub channels: BTreeSet<ChannelKey>,
    pub identities: BTreeSet<String>,
    pub links: BTreeSet<String>,
}

impl Labelled {
    /// Keeps the keys still present, then adds new ones in key order while
    /// fewer than `max` are chosen: a key keeps its series while it exists,
    /// so a labelled counter does not jump into `other` and back.
    fn update(&mut self, now: &Labelled, max: usize) {
        fn keep<K: Ord + Clone>(chosen: &mut BTreeSet<K>, present: &BTreeSet<K>, max: usize) {
            chosen.retain(|k| present.contains(k));
            for k in present {
                if chosen.len() >= max {
                    break;
                }
                if !chosen.contains(k) {
                    chosen.insert(k.clone());
                }
            }
        }
        keep(&mut self.tags, &now.tags, max);
        keep(&mut self.channels, &now.channels, max);
        keep(&mut self.identities, &now.identities, max);
        keep(&mut self.links, &now.links, max);
    }
}

/// The last snapshot and the label choice, owned by the metrics thread.
pub(crate) struct Cache {
    max_series: usize,
    last: Option<Rc<Snapshot>>,
    chosen: Labelled,
}

impl Cache {
    pub(crate) fn new(max_series: usize) -> Self {
        Cache {
            max_series,
            last: None,
            chosen: Labelled::default(),
        }
    }

    /// The last snapshot if younger than [`super::SNAPSHOT_MAX_AGE`], else a new one.
    pub(crate) fn get(
        &mut self,
        state: &Arc<Locked<State>>,
        now: Instant,
    ) -> Result<Rc<Snapshot>, String> {
        if let Some(s) = self
            .last
            .as_ref()
            .filter(|s| now.duration_since(s.taken) < super::SNAPSHOT_MAX_AGE)
        {
            return Ok(s.clone());
        }
        let (listing, truncated, tids) = collect(state)?;
        let taken = Instant::now();
        let lane_cpu: HashMap<String, f64> = tids
            .into_iter()
            .filter_map(|(band, tid)| Some((band, thread_cpu_seconds(tid?)?)))
            .collect();
        let endpoint_identity = endpoint_identities(&listing);
        let present = present_keys(&listing, &endpoint_identity);
        self.chosen.update(&present, self.max_series);
        let rates = match &self.last {
            Some(prev) => rates(prev, &listing, &lane_cpu, taken),
            None => Rates::default(),
        };
        let snap = Rc::new(Snapshot {
            taken,
            listing,
            truncated,
            lane_cpu,
            endpoint_identity,
            rates,
            labelled: self.chosen.clone(),
            max_series: self.max_series,
        });
        self.last = Some(snap.clone());
        Ok(snap)
    }
}

/// The listing, page by page; the lanes' thread ids from the first page's lock.
#[allow(clippy::type_complexity)]
fn collect(state: &Locked<State>) -> Result<(Listing, bool, Vec<(String, Option<i32>)>), String> {
    let who = Requester {
        identity: "metrics",
        admin: true,
    };
    let mut merged: Option<Listing> = None;
    let mut tids = Vec::new();
    let mut after: Option<String> = None;
    let mut items = 0;
    let mut truncated = false;
    let mut ended = false;
    for _ in 0..MAX_PAGES {
        let page = state
            .with_fair(|st| {
                if after.is_none() {
                    tids = st.lanes.iter().map(|l| (l.band.clone(), l.tid)).collect();
                }
                list_page(st, after.as_deref(), MAX_PAGE_ITEMS, PAGE_BUDGET, &who)
            })
            .map_err(|(_, m)| format!("cannot list the router's state: {m}"))?;
        items += page.connections.len()
            + page.endpoints.len()
            + page.subscriptions.len()
            + page.tags.len();
        let next = page.next.clone();
        match &mut merged {
            None => merged = Some(page),
            Some(m) => {
                m.connections.extend(page.connections);
                m.endpoints.extend(page.endpoints);
                m.subscriptions.extend(page.subscriptions);
                m.tags.extend(page.tags);
            }
        }
        match next {
            None => {
                ended = true;
                break;
            }
            Some(_) if items >= MAX_SNAPSHOT_ITEMS => {
                truncated = true;
                break;
            }
            Some(n) => after = Some(n),
        }
    }
    // Ran out of pages before the listing ended.
    truncated |= !ended;
    let mut listing = merged.ok_or("the listing returned no page")?;
    listing.next = None;
    Ok((listing, truncated, tids))
}

/// Seconds thread `tid` of this process has run on a CPU, from
/// `/proc/self/task/TID/schedstat` (its first field, nanoseconds).
fn thread_cpu_seconds(tid: i32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

fn endpoint_identities(l: &Listing) -> HashMap<String, String> {
    let by_conn: HashMap<u64, &str> = l
        .connections
        .iter()
        .map(|c| (c.id, c.identity.as_str()))
        .collect();
    l.endpoints
        .iter()
        .filter_map(|e| Some((e.name.clone(), by_conn.get(&e.connection)?.to_string())))
        .collect()
}

fn present_keys(l: &Listing, endpoint_identity: &HashMap<String, String>) -> Labelled {
    Labelled {
        tags: l.tags.iter().map(|t| t.tag.clone()).collect(),
        channels: l
            .subscriptions
            .iter()
            .map(|s| (s.endpoint.clone(), s.pattern.clone()))
            .collect(),
        identities: l
            .connections
            .iter()
            .map(|c| c.identity.clone())
            .chain(endpoint_identity.values().cloned())
            .collect(),
        links: l
            .federation
            .iter()
            .flat_map(|f| f.links.iter().map(|k| k.peer.clone()))
            .collect(),
    }
}

/// Events published in a listing: every tracked tag plus the untracked ones.
pub(crate) fn published(l: &Listing) -> u64 {
    l.tags.iter().map(|t| t.published).sum::<u64>() + l.untracked_publishes
}

/// Events delivered to every channel of a listing.
pub(crate) fn delivered(l: &Listing) -> u64 {
    l.subscriptions.iter().map(|s| s.delivered).sum()
}

fn rates(prev: &Snapshot, now: &Listing, lane_cpu: &HashMap<String, f64>, at: Instant) -> Rates {
    let dt = at.duration_since(prev.taken).as_secs_f64();
    if dt < MIN_RATE_WINDOW_SECS {
        return Rates::default();
    }
    let per_sec = |now: u64, before: u64| now.saturating_sub(before) as f64 / dt;
    let before: HashMap<&str, u64> = prev
        .listing
        .tags
        .iter()
        .map(|t| (t.tag.as_str(), t.published))
        .collect();
    let tags = now
        .tags
        .iter()
        .map(|t| {
            let b = before.get(t.tag.as_str()).copied().unwrap_or(0);
            (t.tag.clone(), per_sec(t.published, b))
        })
        .collect();
    let mut before: HashMap<ChannelKey, u64> = HashMap::new();
    for s in &prev.listing.subscriptions {
        *before
            .entry((s.endpoint.clone(), s.pattern.clone()))
            .or_default() += s.delivered;
    }
    let mut delivered_now: HashMap<ChannelKey, u64> = HashMap::new();
    for s in &now.subscriptions {
        *delivered_now
            .entry((s.endpoint.clone(), s.pattern.clone()))
            .or_default() += s.delivered;
    }
    let channels = delivered_now
        .into_iter()
        .map(|(k, n)| {
            let b = before.get(&k).copied().unwrap_or(0);
            (k, per_sec(n, b))
        })
        .collect();
    let lane_busy = lane_cpu
        .iter()
        .filter_map(|(band, cpu)| {
            let b = prev.lane_cpu.get(band)?;
            Some((band.clone(), ((cpu - b) / dt).max(0.0)))
        })
        .collect();
    Rates {
        window_secs: Some(dt),
        tags,
        channels,
        lane_busy,
        published: per_sec(published(now), published(&prev.listing)),
        delivered: per_sec(delivered(now), delivered(&prev.listing)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn labelled_keys_stay_while_present_and_new_ones_fill_free_slots() {
        let mut chosen = Labelled::default();
        let now = |tags: &[&str]| Labelled {
            tags: set(tags),
            ..Labelled::default()
        };
        chosen.update(&now(&["/b", "/c", "/d"]), 2);
        assert_eq!(chosen.tags, set(&["/b", "/c"]));
        // "/a" sorts first but the chosen keep their series.
        chosen.update(&now(&["/a", "/b", "/c", "/d"]), 2);
        assert_eq!(chosen.tags, set(&["/b", "/c"]));
        // "/b" went away: its slot goes to the first unchosen key.
        chosen.update(&now(&["/a", "/c", "/d"]), 2);
        assert_eq!(chosen.tags, set(&["/a", "/c"]));
    }
}
