//! A [`QosLayer`]: the properties set at one level (a partial QoS set).

use super::property::{Level, Property, QosSet, ShowValue};
use super::QosError;

/// The QoS an event itself carries (its header): each field `None` when the
/// event does not set it. Times are ns (durations) or ns since the Unix
/// epoch (absolute times).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct EventQos {
    /// The event's priority, 0..=255.
    pub priority: Option<u8>,
    /// Its lifetime after its source time (the wire's `Expiry::AfterNs`).
    pub timeout: Option<u64>,
    /// Its absolute expiry (the wire's `Expiry::AtNs`).
    pub stop_time: Option<u64>,
    /// Its earliest delivery time.
    pub start_time: Option<u64>,
}

/// The properties set at one [`Level`]; every other property is unset and
/// comes from a less specific level (or the default).
///
/// A layer only ever holds valid values for properties settable at its
/// level: [`set`](Self::set) refuses anything else, so resolving layers
/// cannot fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosLayer {
    level: Level,
    /// Bit `Property::bit()` set: that property is set; its value is in
    /// `values` (unset properties hold their defaults there).
    set: u32,
    values: QosSet,
}

impl QosLayer {
    /// An empty layer at `level`.
    pub fn new(level: Level) -> Self {
        QosLayer {
            level,
            set: 0,
            values: QosSet::default(),
        }
    }

    /// A layer at `level` with `(name, value)` properties, as users type
    /// them (a property given twice takes its last value). `bands` are the
    /// configured band names. The first bad property is the error.
    pub fn parse<'a>(
        level: Level,
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
        bands: &[String],
    ) -> Result<Self, QosError> {
        QosLayer::new(level).with(props, bands)
    }

    /// A copy of this layer with `props` applied; on error, the error (this
    /// layer is only read). Refuses a layer that sets both times with
    /// `start_time` after `stop_time`.
    pub fn with<'a>(
        &self,
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
        bands: &[String],
    ) -> Result<Self, QosError> {
        let mut layer = self.clone();
        for (name, value) in props {
            layer.set(name, value, bands)?;
        }
        if layer.is_set(Property::StartTime) && layer.is_set(Property::StopTime) {
            if let (Some(start_time), Some(stop_time)) =
                (layer.values.start_time, layer.values.stop_time)
            {
                if start_time > stop_time {
                    return Err(QosError::StartAfterStop {
                        start_time,
                        stop_time,
                    });
                }
            }
        }
        Ok(layer)
    }

    /// The layer an event's own QoS makes (level [`Level::Event`]).
    pub fn from_event(ev: &EventQos) -> Self {
        let mut layer = QosLayer::new(Level::Event);
        if let Some(p) = ev.priority {
            layer.values.priority = p;
            layer.set |= Property::Priority.bit();
        }
        if let Some(t) = ev.timeout {
            layer.values.timeout = Some(t);
            layer.set |= Property::Timeout.bit();
        }
        if let Some(t) = ev.stop_time {
            layer.values.stop_time = Some(t);
            layer.set |= Property::StopTime.bit();
        }
        if let Some(t) = ev.start_time {
            layer.values.start_time = Some(t);
            layer.set |= Property::StartTime.bit();
        }
        layer
    }

    /// What an event layer sets, as [`EventQos`] (`none` values count as
    /// unset: at the event level they could only loosen, which the rule
    /// ignores).
    pub(super) fn event_qos(&self) -> EventQos {
        let v = &self.values;
        let get = |p: Property, x: Option<u64>| if self.is_set(p) { x } else { None };
        EventQos {
            priority: self.is_set(Property::Priority).then_some(v.priority),
            timeout: get(Property::Timeout, v.timeout),
            stop_time: get(Property::StopTime, v.stop_time),
            start_time: get(Property::StartTime, v.start_time),
        }
    }

    /// Its level.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Sets property `name` to `value` (as users type both); returns which
    /// property it was. On error the layer is unchanged. Errors:
    /// [`UnknownProperty`](QosError::UnknownProperty),
    /// [`NotSettableAt`](QosError::NotSettableAt) (e.g. `order` on an event),
    /// [`InvalidValue`](QosError::InvalidValue) naming the accepted values.
    pub fn set(&mut self, name: &str, value: &str, bands: &[String]) -> Result<Property, QosError> {
        let p = Property::from_name(name).ok_or_else(|| QosError::UnknownProperty {
            name: name.to_owned(),
        })?;
        if !p.settable_at(self.level) {
            return Err(QosError::NotSettableAt {
                property: p,
                level: self.level,
            });
        }
        self.values.assign(p, value, bands).map_err(|e| match e {
            // Name the property as the user typed it (an alias stays an alias).
            QosError::InvalidValue { value, reason, .. } => QosError::InvalidValue {
                name: name.to_owned(),
                value,
                reason,
            },
            other => other,
        })?;
        self.set |= p.bit();
        Ok(p)
    }

    /// Unsets `p`: it comes from a less specific level again.
    pub fn unset(&mut self, p: Property) {
        self.set &= !p.bit();
        self.values.copy_from(&QosSet::default(), p);
    }

    /// Whether `p` is set here.
    pub fn is_set(&self, p: Property) -> bool {
        self.set & p.bit() != 0
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.set == 0
    }

    /// The properties set here, in [`Property::ALL`] order.
    pub fn properties(&self) -> impl Iterator<Item = Property> + '_ {
        Property::ALL.into_iter().filter(|p| self.is_set(*p))
    }

    /// `p`'s value as users write it, if set here.
    pub fn show(&self, p: Property) -> Option<ShowValue<'_>> {
        self.is_set(p).then(|| self.values.show(p))
    }

    /// The values, unset ones at their defaults.
    pub(super) fn values(&self) -> &QosSet {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_property_not_settable_at_the_level_is_refused_naming_both() {
        let mut event = QosLayer::new(Level::Event);
        let e = event.set("order", "priority", &[]).unwrap_err();
        assert_eq!(
            e,
            QosError::NotSettableAt {
                property: Property::Order,
                level: Level::Event
            }
        );
        assert!(e.to_string().contains("order"), "{e}");
        assert!(e.to_string().contains("event"), "{e}");
        assert!(event.is_empty());
        let e = QosLayer::parse(Level::Channel, [("max_consumers", "3")], &[]).unwrap_err();
        assert!(e.to_string().contains("daemon, tag"), "{e}");
        assert!(QosLayer::parse(Level::Daemon, [("stop_time", "5")], &[]).is_err());
    }

    #[test]
    fn unknown_names_and_bad_values_leave_the_layer_unchanged() {
        let layer = QosLayer::parse(Level::Channel, [("priority", "high")], &[]).expect("valid");
        let e = layer
            .with([("priority", "low"), ("colour", "red")], &[])
            .unwrap_err();
        assert_eq!(
            e,
            QosError::UnknownProperty {
                name: "colour".into()
            }
        );
        let e = layer.with([("pacing", "5")], &[]).unwrap_err();
        assert!(e.to_string().contains("QoS property \"pacing\":"), "{e}");
        assert_eq!(
            layer.show(Property::Priority).map(|v| v.to_string()),
            Some("high".into())
        );
        let mut l = layer.clone();
        assert!(l.set("sched", "fifo:200", &[]).is_err());
        assert_eq!(l, layer);
    }

    #[test]
    fn last_value_wins_and_unset_clears() {
        let mut l = QosLayer::parse(
            Level::Session,
            [("priority", "high"), ("priority", "7"), ("pacing", "5ms")],
            &[],
        )
        .expect("valid");
        assert_eq!(
            l.show(Property::Priority).map(|v| v.to_string()),
            Some("7".into())
        );
        assert_eq!(
            l.properties().collect::<Vec<_>>(),
            vec![Property::Priority, Property::PacingInterval]
        );
        l.unset(Property::Priority);
        l.unset(Property::PacingInterval);
        assert!(l.is_empty());
        assert_eq!(l, QosLayer::new(Level::Session));
    }

    #[test]
    fn a_layer_with_start_after_stop_is_refused() {
        let e = QosLayer::parse(
            Level::Channel,
            [("start_time", "20"), ("stop_time", "10")],
            &[],
        )
        .unwrap_err();
        assert_eq!(
            e,
            QosError::StartAfterStop {
                start_time: 20,
                stop_time: 10
            }
        );
        assert!(QosLayer::parse(
            Level::Channel,
            [("start_time", "10"), ("stop_time", "10")],
            &[]
        )
        .is_ok());
    }

    #[test]
    fn from_event_sets_what_the_event_carries() {
        let l = QosLayer::from_event(&EventQos {
            priority: Some(3),
            timeout: None,
            stop_time: Some(9),
            start_time: None,
        });
        assert_eq!(l.level(), Level::Event);
        assert_eq!(
            l.properties().collect::<Vec<_>>(),
            vec![Property::Priority, Property::StopTime]
        );
        assert_eq!(l.event_qos().stop_time, Some(9));
    }
}
