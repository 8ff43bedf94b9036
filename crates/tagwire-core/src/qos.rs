//! QoS properties of a channel, parsed from the `(name, value)` pairs a
//! `Subscribe` frame carries. An unknown property or a bad value is refused
//! with an error that names it; nothing is silently ignored.

use crate::queue::DiscardPolicy;

/// Largest `max_queue_length` a subscriber may ask for.
pub const MAX_QUEUE_LENGTH: usize = 1 << 20;
/// Default bound of a subscriber's queue, in events.
pub const DEFAULT_QUEUE_LENGTH: usize = 1024;

/// A QoS property that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QosError {
    /// No such property.
    #[error("unknown QoS property {}", tagwire_proto::excerpt(.name))]
    UnknownProperty {
        /// The name given.
        name: String,
    },
    /// A value the property does not accept.
    #[error("invalid value {} for QoS property {}: {reason}", tagwire_proto::excerpt(.value), tagwire_proto::excerpt(.name))]
    InvalidValue {
        /// The property.
        name: String,
        /// The value given.
        value: String,
        /// What was expected.
        reason: String,
    },
}

/// The QoS of one subscriber channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelQos {
    /// What a full queue does.
    pub discard: DiscardPolicy,
    /// The queue bound, in events.
    pub max_queue_length: usize,
}

impl Default for ChannelQos {
    fn default() -> Self {
        ChannelQos {
            discard: DiscardPolicy::default(),
            max_queue_length: DEFAULT_QUEUE_LENGTH,
        }
    }
}

impl ChannelQos {
    /// Applies `(name, value)` properties on top of `self`. Properties this
    /// function does not own are handed to `other`, which returns `false` for
    /// names it does not know either.
    pub fn apply<'a>(
        mut self,
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
        mut other: impl FnMut(&str, &str) -> Result<bool, QosError>,
    ) -> Result<Self, QosError> {
        for (name, value) in props {
            let bad = |reason: &str| QosError::InvalidValue {
                name: name.to_owned(),
                value: value.to_owned(),
                reason: reason.to_owned(),
            };
            match name {
                "discard" => self.discard = value.parse().map_err(|e| bad(&format!("{e}")))?,
                "max_queue_length" => {
                    let n: usize = value
                        .parse()
                        .map_err(|_| bad("expected a whole number of events"))?;
                    if n == 0 || n > MAX_QUEUE_LENGTH {
                        return Err(bad(&format!("must be 1..={MAX_QUEUE_LENGTH}")));
                    }
                    self.max_queue_length = n;
                }
                _ => {
                    if !other(name, value)? {
                        return Err(QosError::UnknownProperty {
                            name: name.to_owned(),
                        });
                    }
                }
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str, _: &str) -> Result<bool, QosError> {
        Ok(false)
    }

    #[test]
    fn known_properties_apply_and_unknown_ones_are_named() {
        let q = ChannelQos::default()
            .apply([("discard", "reject"), ("max_queue_length", "8")], none)
            .expect("valid properties");
        assert_eq!(q.discard, DiscardPolicy::Reject);
        assert_eq!(q.max_queue_length, 8);
        let e = ChannelQos::default()
            .apply([("colour", "red")], none)
            .unwrap_err();
        assert_eq!(
            e,
            QosError::UnknownProperty {
                name: "colour".into()
            }
        );
        let e = ChannelQos::default()
            .apply([("max_queue_length", "0")], none)
            .unwrap_err();
        assert!(e.to_string().contains("max_queue_length"));
    }
}
