//! QoS: the properties users set, the levels they set them at, and how
//! they resolve into one channel's effective QoS. Pure: no I/O, no clock
//! (absolute times are values, never compared with "now" here).
//!
//! - [`Property`] and [`QosSet`]: the seventeen properties (`priority`,
//!   `priority_model`, `sched`, `dscp`, `timeout`, `stop_time`, `start_time`,
//!   `order`, `discard`, `max_queue_length`, `max_events_per_consumer`,
//!   `max_batch`, `pacing_interval`, `max_consumers`, `max_suppliers`,
//!   `band`, `history`, `reliability`, …) and their values; every bad value is refused with a
//!   [`QosError`] naming the property, the value and what is accepted.
//! - [`Level`] and [`QosLayer`]: daemon → tag → session → channel → event;
//!   a layer is what one level sets.
//! - [`resolve`] and [`Resolved`]: the most specific level that sets a
//!   property wins; the event level may set only its priority (and only
//!   under `client_propagated`) and may only tighten its timing. Each
//!   effective value keeps the level it came from ([`Source`]).
//!   [`Resolved::for_event`] is the O(1) per-event step; [`change`] edits a
//!   layer and re-resolves, or fails and changes nothing.
//! - [`ChannelQos`]: the older two-property form the router parses a
//!   `Subscribe`'s properties into; [`Resolved::channel_qos`] converts.
//!
//! Which to pick: leave everything at its default unless a channel needs
//! something else; set the daemon layer for site policy (e.g. `dscp`,
//! `sched` of the lanes), tag layers for data that is urgent wherever it
//! goes (`priority=critical` on `/alarms/**`), and channel layers for what
//! one subscriber can take (`max_queue_length`, `discard`, `order`).
//!
//! ```
//! use tagwire_core::qos::{resolve, EventQos, Level, Property, QosLayer, Source};
//! let bands = ["video".to_owned()];
//! let daemon = QosLayer::parse(Level::Daemon, [("priority", "low")], &bands).unwrap();
//! let channel = QosLayer::parse(Level::Channel, [("priority", "high"), ("band", "video")], &bands).unwrap();
//! let r = resolve(&[&daemon, &channel]);
//! assert_eq!(r.values().priority, 128);
//! assert_eq!(r.source(Property::Priority), Source::Level(Level::Channel));
//! let ev = r.for_event(&EventQos { priority: Some(200), ..EventQos::default() });
//! assert_eq!(ev.priority, 200); // client_propagated: the event's priority wins
//! ```

mod layer;
mod property;
mod resolve;
mod tag;

pub use layer::{EventQos, QosLayer};
pub use property::{
    parse_priority, Dscp, Level, PriorityClass, PriorityModel, Property, ProxyMode, QosSet,
    Reliability, Sched, ShmMode, ShowValue, DEFAULT_MAX_BATCH, DEFAULT_PRIORITY, MAX_BATCH,
    MAX_CLIENTS, MAX_EVENTS_PER_CONSUMER, MAX_PACING_INTERVAL_NS,
};
pub use resolve::{change, resolve, EventEffective, Resolved, Source};
pub use tag::{layer_for, source_for, TagQos};

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
    /// A property set at a level where it cannot be (e.g. `order` on an
    /// event).
    #[error("QoS property {property} cannot be set at {level} level (only at {})", levels(*.property))]
    NotSettableAt {
        /// The property.
        property: Property,
        /// Where it was set.
        level: Level,
    },
    /// A change that would make the start time later than the stop time, so
    /// that no event could ever be delivered.
    #[error("start_time {start_time} is after stop_time {stop_time}: no event could be delivered")]
    StartAfterStop {
        /// The resolved start time, ns since the Unix epoch.
        start_time: u64,
        /// The resolved stop time, ns since the Unix epoch.
        stop_time: u64,
    },
}

fn levels(p: Property) -> String {
    let names: Vec<&str> = p.levels().iter().map(|l| l.as_str()).collect();
    names.join(", ")
}

/// The QoS of one subscriber channel, as the router's `Subscribe` handling
/// parses it today: `discard` and `max_queue_length` only. The full set is
/// [`QosLayer`] / [`Resolved`].
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
    ///
    /// `discard=priority` and `discard=deadline` are refused here: the queue
    /// this form configures (`BoundedQueue<T>`) does not know its events'
    /// priorities or deadlines, so those policies would silently act as
    /// `drop_newest` / `drop_oldest`. They take a `BoundedQueue<T, ItemKeys>`.
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
                "discard" => {
                    self.discard = value.parse().map_err(|e| bad(&format!("{e}")))?;
                    if matches!(
                        self.discard,
                        DiscardPolicy::Priority | DiscardPolicy::Deadline
                    ) {
                        return Err(bad(
                            "priority and deadline discard need a queue that knows event priorities and deadlines; this channel accepts drop_oldest|fifo, drop_newest|lifo or reject|reject_new",
                        ));
                    }
                }
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
        let e = ChannelQos::default()
            .apply([("discard", "priority")], none)
            .unwrap_err();
        assert!(e.to_string().contains("drop_oldest|fifo"), "{e}");
    }
}
