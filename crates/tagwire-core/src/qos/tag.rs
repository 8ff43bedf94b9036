//! QoS set on a tag pattern (a *tag layer*, `tagwire admin qos PATTERN …`).

use super::QosLayer;
use crate::tags::Pattern;

/// A tag layer: QoS set on every tag `pattern` matches. Where several
/// match a tag, the most specific one (the longest pattern text) that sets
/// a property gives it.
#[derive(Debug, Clone)]
pub struct TagQos {
    /// The parsed pattern.
    pub pattern: Pattern,
    /// The pattern as given (its length ranks specificity).
    pub text: String,
    /// The properties it sets.
    pub layer: QosLayer,
}

/// The layer that gives `tag` property `p`: the most specific tag layer
/// (longest pattern text) whose pattern matches the tag and sets `p`, else
/// `daemon` if it sets `p`; `None`: neither does (the property's default).
pub fn layer_for<'a>(
    daemon: &'a QosLayer,
    tags: &'a [TagQos],
    tag: &str,
    p: super::Property,
) -> Option<&'a QosLayer> {
    source_for(daemon, tags, tag, p).map(|(_, layer)| layer)
}

/// As [`layer_for`], with where the layer comes from: `Some(t)` the tag
/// layer `t` (its pattern names the scope, e.g. of `max_suppliers`),
/// `None` the daemon layer.
pub fn source_for<'a>(
    daemon: &'a QosLayer,
    tags: &'a [TagQos],
    tag: &str,
    p: super::Property,
) -> Option<(Option<&'a TagQos>, &'a QosLayer)> {
    tags.iter()
        .filter(|t| t.layer.is_set(p) && t.pattern.matches(tag))
        .max_by_key(|t| t.text.len())
        .map(|t| (Some(t), &t.layer))
        .or_else(|| daemon.is_set(p).then_some((None, daemon)))
}
