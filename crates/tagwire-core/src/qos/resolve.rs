//! Resolution: from the layers of one channel to its effective QoS
//! ([`Resolved`]), with the level each value came from.

use std::fmt;

use super::layer::{EventQos, QosLayer};
use super::property::{Level, PriorityModel, Property, QosSet, ShowValue};
use super::{ChannelQos, QosError};
use crate::queue::NEVER;

/// Where an effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// No layer sets it: the built-in default.
    Default,
    /// The layer of this level set it.
    Level(Level),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Level(l) => l.fmt(f),
        }
    }
}

/// The effective QoS of a channel (or of one event on it) and, for each
/// property, the level it came from. Made by [`resolve`] or [`change`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    values: QosSet,
    sources: [Source; Property::COUNT],
}

impl Default for Resolved {
    /// The built-in defaults, every one from [`Source::Default`].
    fn default() -> Self {
        Resolved {
            values: QosSet::default(),
            sources: [Source::Default; Property::COUNT],
        }
    }
}

/// Resolves layers into the effective QoS. Never fails: every layer holds
/// only valid values for its level.
///
/// **The rule.** For each property, the most specific level that sets it
/// wins (event > channel > session > tag > daemon > built-in default).
/// Layers of the same level apply in the order given, the later winning (so
/// several tag layers can be given from the least to the most specific
/// pattern). The event level may set only `priority`, `timeout`, `stop_time`
/// and `start_time`, and only as follows:
/// - its `priority` wins only when the resolved `priority_model` is
///   `client_propagated`; under `server_declared` it is ignored;
/// - it can only tighten timing: its `timeout` or `stop_time` wins only if
///   smaller than the resolved one (or there is none), its `start_time` only
///   if later.
///
/// Cost: O(number of layers × number of properties), no allocation beyond
/// cloning one band name.
pub fn resolve(layers: &[&QosLayer]) -> Resolved {
    let mut r = Resolved::default();
    for level in Level::ALL {
        for layer in layers.iter().filter(|l| l.level() == level) {
            if level == Level::Event {
                r.apply_event(&layer.event_qos());
                continue;
            }
            for p in layer.properties() {
                r.values.copy_from(layer.values(), p);
                r.sources[p as usize] = Source::Level(level);
            }
        }
    }
    r
}

/// Changes one layer: applies `props` (as users type them) to a copy of the
/// last layer of `level` in `layers` (or to a new empty one if there is
/// none) and resolves again. Returns the new layer and QoS, or an error; the
/// inputs are only read, so on error the old layer and QoS stand.
///
/// Besides the errors of [`QosLayer::set`], refuses a change that sets
/// `start_time` or `stop_time` so that the resolved `start_time` is after the
/// resolved `stop_time` ([`QosError::StartAfterStop`]).
pub fn change<'a>(
    layers: &[&QosLayer],
    level: Level,
    props: impl IntoIterator<Item = (&'a str, &'a str)>,
    bands: &[String],
) -> Result<(QosLayer, Resolved), QosError> {
    let at = layers.iter().rposition(|l| l.level() == level);
    let layer = match at {
        Some(i) => layers[i].with(props, bands)?,
        None => QosLayer::parse(level, props, bands)?,
    };
    let mut all: Vec<&QosLayer> = layers.to_vec();
    match at {
        Some(i) => all[i] = &layer,
        None => all.push(&layer),
    }
    let resolved = resolve(&all);
    if layer.is_set(Property::StartTime) || layer.is_set(Property::StopTime) {
        if let (Some(start_time), Some(stop_time)) =
            (resolved.values.start_time, resolved.values.stop_time)
        {
            if start_time > stop_time {
                return Err(QosError::StartAfterStop {
                    start_time,
                    stop_time,
                });
            }
        }
    }
    Ok((layer, resolved))
}

/// The QoS of one event on a channel: what [`Resolved::for_event`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventEffective {
    /// Its priority (picks the lane).
    pub priority: u8,
    /// Its DSCP marking (the channel's `dscp`, or its priority class's).
    pub dscp: u8,
    /// Lifetime after its source time, ns; `None`: no limit.
    pub timeout: Option<u64>,
    /// Absolute expiry, ns since the Unix epoch; `None`: none.
    pub stop_time: Option<u64>,
    /// Earliest delivery, ns since the Unix epoch; `None`: at once.
    pub start_time: Option<u64>,
}

impl EventEffective {
    /// When the event expires, ns since the Unix epoch, given its source time
    /// (`None` if it has none: then `timeout` does not apply); [`NEVER`] if it
    /// does not expire. This is the deadline a [`QueueItem`](crate::queue::QueueItem)
    /// reports.
    pub fn deadline(&self, source_time: Option<u64>) -> u64 {
        let by_timeout = match (self.timeout, source_time) {
            (Some(t), Some(at)) => at.saturating_add(t),
            _ => NEVER,
        };
        by_timeout.min(self.stop_time.unwrap_or(NEVER))
    }
}

/// The fields the event level may touch.
#[derive(Clone, Copy)]
struct Timing {
    priority: u8,
    timeout: Option<u64>,
    stop_time: Option<u64>,
    start_time: Option<u64>,
}

/// The event rule (see [`resolve`]): which of `base` the event replaces, in
/// the order priority, timeout, stop_time, start_time.
fn event_rule(model: PriorityModel, base: &mut Timing, ev: &EventQos) -> [bool; 4] {
    let smaller = |mine: Option<u64>, theirs: Option<u64>| match (mine, theirs) {
        (Some(m), Some(t)) => m < t,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let mut won = [false; 4];
    if let (Some(p), PriorityModel::ClientPropagated) = (ev.priority, model) {
        base.priority = p;
        won[0] = true;
    }
    if smaller(ev.timeout, base.timeout) {
        base.timeout = ev.timeout;
        won[1] = true;
    }
    if smaller(ev.stop_time, base.stop_time) {
        base.stop_time = ev.stop_time;
        won[2] = true;
    }
    let later = match (ev.start_time, base.start_time) {
        (Some(e), Some(b)) => e > b,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if later {
        base.start_time = ev.start_time;
        won[3] = true;
    }
    won
}

const EVENT_PROPERTIES: [Property; 4] = [
    Property::Priority,
    Property::Timeout,
    Property::StopTime,
    Property::StartTime,
];

impl Resolved {
    fn timing(&self) -> Timing {
        Timing {
            priority: self.values.priority,
            timeout: self.values.timeout,
            stop_time: self.values.stop_time,
            start_time: self.values.start_time,
        }
    }

    fn apply_event(&mut self, ev: &EventQos) {
        let mut t = self.timing();
        let won = event_rule(self.values.priority_model, &mut t, ev);
        self.values.priority = t.priority;
        self.values.timeout = t.timeout;
        self.values.stop_time = t.stop_time;
        self.values.start_time = t.start_time;
        for (p, won) in EVENT_PROPERTIES.into_iter().zip(won) {
            if won {
                self.sources[p as usize] = Source::Level(Level::Event);
            }
        }
    }

    /// The effective values.
    pub fn values(&self) -> &QosSet {
        &self.values
    }

    /// The level `p`'s effective value came from.
    pub fn source(&self, p: Property) -> Source {
        self.sources[p as usize]
    }

    /// Every property with its effective value (as users write it) and where
    /// it came from, in [`Property::ALL`] order: what `tagwire admin show`
    /// lists.
    pub fn iter(&self) -> impl Iterator<Item = (Property, ShowValue<'_>, Source)> + '_ {
        Property::ALL
            .into_iter()
            .map(|p| (p, self.values.show(p), self.source(p)))
    }

    /// The QoS of one event on this channel: the event level of the rule in
    /// [`resolve`] applied to `ev`. O(1), no allocation: the per-event path.
    /// Equal to resolving with `QosLayer::from_event(ev)` added.
    pub fn for_event(&self, ev: &EventQos) -> EventEffective {
        let mut t = self.timing();
        event_rule(self.values.priority_model, &mut t, ev);
        EventEffective {
            priority: t.priority,
            dscp: self.values.dscp.code(t.priority),
            timeout: t.timeout,
            stop_time: t.stop_time,
            start_time: t.start_time,
        }
    }

    /// The part the router's queues use today (`discard`,
    /// `max_queue_length`).
    pub fn channel_qos(&self) -> ChannelQos {
        ChannelQos {
            discard: self.values.discard,
            max_queue_length: self.values.max_queue_length,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::OrderPolicy;

    fn layer(level: Level, props: &[(&str, &str)]) -> QosLayer {
        QosLayer::parse(level, props.iter().copied(), &["video".to_owned()]).expect("valid layer")
    }

    #[test]
    fn the_most_specific_level_wins_and_provenance_names_it() {
        let daemon = layer(Level::Daemon, &[("priority", "low"), ("order", "priority")]);
        let tag = layer(Level::Tag, &[("priority", "normal"), ("band", "video")]);
        let channel = layer(Level::Channel, &[("priority", "high")]);
        let r = resolve(&[&channel, &daemon, &tag]);
        assert_eq!(r.values().priority, 128);
        assert_eq!(r.source(Property::Priority), Source::Level(Level::Channel));
        assert_eq!(r.values().order, OrderPolicy::Priority);
        assert_eq!(r.source(Property::Order), Source::Level(Level::Daemon));
        assert_eq!(r.values().band.as_deref(), Some("video"));
        assert_eq!(r.source(Property::Band), Source::Level(Level::Tag));
        assert_eq!(r.source(Property::Sched), Source::Default);
        let shown: Vec<String> = r.iter().map(|(p, v, s)| format!("{p}={v} ({s})")).collect();
        assert_eq!(shown[0], "priority=high (channel)");
        assert!(shown.contains(&"max_queue_length=1024 (default)".to_owned()));
        assert_eq!(shown.len(), Property::COUNT);
    }

    #[test]
    fn same_level_layers_apply_in_order() {
        let a = layer(Level::Tag, &[("priority", "1"), ("max_batch", "8")]);
        let b = layer(Level::Tag, &[("priority", "2")]);
        let r = resolve(&[&a, &b]);
        assert_eq!((r.values().priority, r.values().max_batch), (2, 8));
    }

    #[test]
    fn event_priority_counts_only_when_client_propagated() {
        let ev = EventQos {
            priority: Some(200),
            ..EventQos::default()
        };
        let channel = layer(Level::Channel, &[("priority", "high")]);
        let r = resolve(&[&channel]);
        assert_eq!(r.for_event(&ev).priority, 200);
        assert_eq!(r.for_event(&ev).dscp, 44, "critical class: VA");
        let with_event = resolve(&[&channel, &QosLayer::from_event(&ev)]);
        assert_eq!(
            with_event.source(Property::Priority),
            Source::Level(Level::Event)
        );

        let server = layer(Level::Session, &[("priority_model", "server_declared")]);
        let r = resolve(&[&server, &channel]);
        assert_eq!(r.for_event(&ev).priority, 128);
        assert_eq!(r.for_event(&ev).dscp, 36, "high class: AF42");
        let with_event = resolve(&[&server, &channel, &QosLayer::from_event(&ev)]);
        assert_eq!(with_event.values().priority, 128);
        assert_eq!(
            with_event.source(Property::Priority),
            Source::Level(Level::Channel)
        );
    }

    #[test]
    fn an_event_can_only_tighten_timing() {
        let channel = layer(
            Level::Channel,
            &[
                ("timeout", "2s"),
                ("stop_time", "1000"),
                ("start_time", "100"),
            ],
        );
        let r = resolve(&[&channel]);
        let looser = EventQos {
            priority: None,
            timeout: Some(5_000_000_000),
            stop_time: Some(2000),
            start_time: Some(50),
        };
        let e = r.for_event(&looser);
        assert_eq!(
            (e.timeout, e.stop_time, e.start_time),
            (Some(2_000_000_000), Some(1000), Some(100))
        );
        let tighter = EventQos {
            priority: None,
            timeout: Some(1_000),
            stop_time: Some(900),
            start_time: Some(150),
        };
        let e = r.for_event(&tighter);
        assert_eq!(
            (e.timeout, e.stop_time, e.start_time),
            (Some(1_000), Some(900), Some(150))
        );
        assert_eq!(
            e.deadline(Some(10)),
            900,
            "stop_time before source + timeout"
        );
        let short = EventEffective {
            timeout: Some(10),
            ..e
        };
        assert_eq!(
            short.deadline(Some(5)),
            15,
            "source + timeout before stop_time"
        );
        assert_eq!(e.deadline(None), 900);
        let r2 = resolve(&[&channel, &QosLayer::from_event(&tighter)]);
        for p in [Property::Timeout, Property::StopTime, Property::StartTime] {
            assert_eq!(r2.source(p), Source::Level(Level::Event), "{p}");
        }
        // Nothing configured: the event's values stand.
        let e = Resolved::default().for_event(&looser);
        assert_eq!(e.timeout, Some(5_000_000_000));
        assert_eq!(e.deadline(Some(1)), 2000);
        assert_eq!(
            Resolved::default()
                .for_event(&EventQos::default())
                .deadline(Some(1)),
            NEVER
        );
    }

    #[test]
    fn change_returns_a_new_resolution_or_an_error_and_changes_nothing() {
        let daemon = layer(Level::Daemon, &[("max_queue_length", "64")]);
        let channel = layer(Level::Channel, &[("stop_time", "100")]);
        let layers = [&daemon, &channel];
        let before = resolve(&layers);
        let (new_channel, after) =
            change(&layers, Level::Channel, [("discard", "priority")], &[]).expect("valid");
        assert_eq!(
            after.values().discard,
            crate::queue::DiscardPolicy::Priority
        );
        assert_eq!(
            after.values().stop_time,
            Some(100),
            "the rest of the layer stays"
        );
        assert!(new_channel.is_set(Property::Discard));
        // A session layer that did not exist is made.
        let (session, r) =
            change(&layers, Level::Session, [("priority", "9")], &[]).expect("valid");
        assert_eq!(session.level(), Level::Session);
        assert_eq!(r.source(Property::Priority), Source::Level(Level::Session));
        // Errors: a bad value, and a start time after the stop time.
        assert!(change(&layers, Level::Channel, [("sched", "rr:0")], &[]).is_err());
        let e = change(&layers, Level::Session, [("start_time", "200")], &[]).unwrap_err();
        assert_eq!(
            e,
            QosError::StartAfterStop {
                start_time: 200,
                stop_time: 100
            }
        );
        assert_eq!(resolve(&layers), before);
    }

    #[test]
    fn channel_qos_carries_discard_and_queue_length() {
        let r = resolve(&[&layer(
            Level::Channel,
            &[("discard", "reject"), ("max_queue_length", "8")],
        )]);
        let c = r.channel_qos();
        assert_eq!(c.discard, crate::queue::DiscardPolicy::Reject);
        assert_eq!(c.max_queue_length, 8);
    }
}
