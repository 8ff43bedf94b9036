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
