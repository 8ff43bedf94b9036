//! The `[store]` section: the durable store of `reliability=durable` tags
//! (docs/reliability.md, "The durable store").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// When the store's commits reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fsync {
    /// Every batch's commit is synced before the next batch is taken (the
    /// default): an event is durable within one batch of being published.
    #[default]
    Batch,
    /// Commits are synced at most every `fsync_interval_ms`: a `kill -9`
    /// or power loss loses up to that much; much cheaper per event.
    Interval,
}

/// The `[store]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// The database file (redb). `None`: no store (`tagwired` sets
    /// `store.redb` in its state directory, see `--state-dir`).
    pub path: Option<PathBuf>,
    /// Tag patterns whose events are durable from the start, besides tags
    /// whose `reliability` QoS (daemon `[qos]` or a tag layer) is `durable`.
    pub tags: Vec<String>,
    /// Most events kept per tag; at the bound the oldest go.
    pub max_events_per_tag: u64,
    /// Most event bytes kept per tag; at the bound the oldest go.
    pub max_bytes_per_tag: u64,
    /// Events older than this (seconds since they were stored) go; 0: no
    /// age bound.
    pub max_age_secs: u64,
    /// Most tags with stored events; an event of one more tag is not
    /// stored (counted in `not_stored`).
    pub max_tags: usize,
    /// Events waiting for the store thread; past it an event is not stored
    /// (counted in `not_stored`, warned once a second).
    pub queue_length: usize,
    /// Bytes of events waiting for the store thread; the same at the bound.
    pub queue_bytes: u64,
    /// When commits are synced to disk.
    pub fsync: Fsync,
    /// With `fsync = "interval"`: the most time between syncs, ms.
    pub fsync_interval_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: None,
            tags: Vec::new(),
            max_events_per_tag: 1_000_000,
            max_bytes_per_tag: 256 * 1024 * 1024,
            max_age_secs: 7 * 24 * 3600,
            max_tags: 1024,
            queue_length: 65_536,
            queue_bytes: 64 * 1024 * 1024,
            fsync: Fsync::Batch,
            fsync_interval_ms: 1000,
        }
    }
}

impl StoreConfig {
    /// Checks the bounds and the tag patterns.
    pub(crate) fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("max_events_per_tag", self.max_events_per_tag),
            ("max_bytes_per_tag", self.max_bytes_per_tag),
            ("max_tags", self.max_tags as u64),
            ("queue_length", self.queue_length as u64),
            ("queue_bytes", self.queue_bytes),
            ("fsync_interval_ms", self.fsync_interval_ms),
        ] {
            if v == 0 {
                return Err(format!("store.{name} = 0: must be at least 1"));
            }
        }
        if self.queue_length > 1 << 24 {
            return Err(format!(
                "store.queue_length = {} is over the bound of {}",
                self.queue_length,
                1 << 24
            ));
        }
        for t in &self.tags {
            tagwire_core::tags::Pattern::parse(t)
                .map_err(|e| format!("store.tags: {}: {e}", tagwire_proto::excerpt(t)))?;
        }
        Ok(())
    }
}

/// Refuses a daemon or tag layer that makes tags durable on a daemon
/// without a store: their events would not be kept, silently.
pub(crate) fn check_layer(
    config: &super::RouterConfig,
    layer: &tagwire_core::qos::QosLayer,
) -> Result<(), (tagwire_proto::ErrorCode, String)> {
    use tagwire_core::qos::{resolve, Property, Reliability};
    if config.store.path.is_some() || !layer.is_set(Property::Reliability) {
        return Ok(());
    }
    if resolve(&[layer]).values().reliability != Reliability::Durable {
        return Ok(());
    }
    Err((
        tagwire_proto::ErrorCode::BadRequest,
        "reliability=durable needs this daemon's durable store, and it has none: start \
         tagwired with --state-dir DIR (or set [store] path)"
            .into(),
    ))
}
