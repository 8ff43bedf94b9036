//! Which tags keep pull buffers, and how many events (the `history` QoS
//! property): a node's decision, from the daemon's and the tag layers.

use std::collections::HashMap;

use crate::qos::{layer_for, resolve, Property, QosLayer, TagQos};

/// Most tags whose `history` value [`HistoryPolicy`] caches; at the bound
/// the cache is cleared and refilled as events arrive.
pub const POLICY_CACHE_TAGS: usize = 65_536;

/// The `history` a tag keeps under `daemon` and `tags`: the most specific
/// tag layer whose pattern matches the tag and sets `history` (the longest
/// pattern text), else the daemon layer if it sets it, else 0 (none).
pub fn capacity_of(daemon: &QosLayer, tags: &[TagQos], tag: &str) -> usize {
    layer_for(daemon, tags, tag, Property::History).map_or(0, |l| resolve(&[l]).values().history)
}

/// [`capacity_of`] per published tag, cheaply: a publish costs one flag
/// test when no layer sets `history` above 0, else one lookup in a bounded
/// cache of each tag's value. Call [`layers_changed`](Self::layers_changed)
/// whenever a layer changes.
#[derive(Debug, Default)]
pub struct HistoryPolicy {
    enabled: bool,
    cache: HashMap<Box<str>, usize>,
}

impl HistoryPolicy {
    /// Whether any layer sets `history` above 0 (else no tag keeps any).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// After the daemon or a tag layer changed: whether history is on
    /// anywhere; forgets every cached value.
    pub fn layers_changed(&mut self, daemon: &QosLayer, tags: &[TagQos]) {
        let on = |l: &QosLayer| l.is_set(Property::History) && resolve(&[l]).values().history > 0;
        self.enabled = on(daemon) || tags.iter().any(|t| on(&t.layer));
        self.cache.clear();
    }

    /// The `history` of `tag` ([`capacity_of`]), cached.
    pub fn capacity(&mut self, daemon: &QosLayer, tags: &[TagQos], tag: &str) -> usize {
        if !self.enabled {
            return 0;
        }
        if let Some(c) = self.cache.get(tag) {
            return *c;
        }
        let c = capacity_of(daemon, tags, tag);
        if self.cache.len() >= POLICY_CACHE_TAGS {
            self.cache.clear();
        }
        self.cache.insert(Box::from(tag), c);
        c
    }

    /// How many tags' values are cached (at most [`POLICY_CACHE_TAGS`]).
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::Level;
    use crate::tags::Pattern;

    fn layer(level: Level, history: Option<&str>) -> QosLayer {
        let props: Vec<(&str, &str)> = history.map(|h| ("history", h)).into_iter().collect();
        QosLayer::parse(level, props, &[]).expect("layer")
    }

    fn tag(pattern: &str, history: Option<&str>) -> TagQos {
        TagQos {
            pattern: Pattern::parse(pattern).expect("pattern"),
            text: pattern.into(),
            layer: layer(Level::Tag, history),
        }
    }

    #[test]
    fn the_most_specific_tag_layer_that_sets_history_wins_then_the_daemons() {
        let daemon = layer(Level::Daemon, Some("5"));
        let tags = [
            tag("/cam/**", Some("10")),
            tag("/cam/front/**", Some("20")),
            // More specific but silent on history: does not hide the others.
            tag("/cam/front/raw", None),
        ];
        assert_eq!(capacity_of(&daemon, &tags, "/cam/front/raw"), 20);
        assert_eq!(capacity_of(&daemon, &tags, "/cam/back"), 10);
        assert_eq!(capacity_of(&daemon, &tags, "/lidar"), 5);
        let silent = layer(Level::Daemon, None);
        assert_eq!(capacity_of(&silent, &tags, "/lidar"), 0);
        // A tag layer of 0 turns a tag's history off under a daemon default.
        let off = [tag("/lidar/**", Some("0"))];
        assert_eq!(capacity_of(&daemon, &off, "/lidar/x"), 0);
    }

    #[test]
    fn a_policy_answers_from_its_cache_until_the_layers_change() {
        let daemon = layer(Level::Daemon, None);
        let mut tags = vec![tag("/a/**", Some("3"))];
        let mut p = HistoryPolicy::default();
        assert_eq!(p.capacity(&daemon, &tags, "/a/x"), 0, "off until told");
        p.layers_changed(&daemon, &tags);
        assert!(p.enabled());
        assert_eq!(p.capacity(&daemon, &tags, "/a/x"), 3);
        // Changed without telling the policy: the cached value stands.
        tags[0] = tag("/a/**", Some("7"));
        assert_eq!(p.capacity(&daemon, &tags, "/a/x"), 3);
        p.layers_changed(&daemon, &tags);
        assert_eq!(p.capacity(&daemon, &tags, "/a/x"), 7);
        // Every layer at 0: off, and nothing cached.
        tags[0] = tag("/a/**", Some("0"));
        p.layers_changed(&daemon, &tags);
        assert!(!p.enabled());
        assert_eq!((p.capacity(&daemon, &tags, "/a/x"), p.cached()), (0, 0));
    }

    #[test]
    fn the_cache_is_bounded() {
        let daemon = layer(Level::Daemon, Some("1"));
        let mut p = HistoryPolicy::default();
        p.layers_changed(&daemon, &[]);
        for i in 0..POLICY_CACHE_TAGS + 10 {
            assert_eq!(p.capacity(&daemon, &[], &format!("/t/{i}")), 1);
            assert!(p.cached() <= POLICY_CACHE_TAGS);
        }
    }
}
