//! MQTT topic names and filters ↔ tagwire tags and patterns.
//!
//! `a/b` ↔ `/a/b`; in filters `+` ↔ `*` and `#` ↔ `**`. What a tag cannot
//! hold is refused with a [`TopicError`] that says why, never rewritten:
//! a leading `/` or an empty level (`a//b`, `a/`), whitespace or control
//! characters, `*` (a tag wildcard), topics beginning with `$` (`$SYS`,
//! `$share`: reserved, tagwire has neither), and topics longer than a tag.

use tagwire_core::tags::{validate_tag, Pattern};
use tagwire_proto::limits::MAX_TAG_LEN;

/// Why an MQTT topic name or filter has no tagwire equivalent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// The empty topic (MQTT 5 topic aliases are not offered).
    #[error("empty topic")]
    Empty,
    /// `/a`: MQTT reads a leading `/` as an empty first level.
    #[error("topic {topic:?} starts with '/': MQTT reads that as an empty first level, which a tag cannot have (use {suggest:?}, tag /{suggest})")]
    LeadingSlash {
        /// The topic.
        topic: String,
        /// The topic without its leading slashes.
        suggest: String,
    },
    /// `a//b`, `a/`.
    #[error("topic {topic:?} has an empty level: a tag cannot have one")]
    EmptyLevel {
        /// The topic.
        topic: String,
    },
    /// `$SYS/...`, `$share/...`.
    #[error("topic {topic:?} starts with '$': reserved by MQTT ($SYS, $share), and tagwire offers neither")]
    Reserved {
        /// The topic.
        topic: String,
    },
    /// A wildcard in a topic name, or a misplaced one in a filter.
    #[error("topic {topic:?}: {why}")]
    Wildcard {
        /// The topic.
        topic: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `*`, whitespace or a control character.
    #[error("topic {topic:?} holds {what}, which a tag cannot hold")]
    BadCharacter {
        /// The topic.
        topic: String,
        /// What it holds.
        what: &'static str,
    },
    /// Longer than a tag may be.
    #[error("topic is {len} bytes; a tag is at most {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

fn check_common(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::Empty);
    }
    if topic.len() + 1 > MAX_TAG_LEN {
        return Err(TopicError::TooLong {
            len: topic.len(),
            max: MAX_TAG_LEN - 1,
        });
    }
    if topic.starts_with('$') {
        return Err(TopicError::Reserved {
            topic: topic.to_owned(),
        });
    }
    if topic.starts_with('/') {
        return Err(TopicError::LeadingSlash {
            topic: topic.to_owned(),
            suggest: topic.trim_start_matches('/').to_owned(),
        });
    }
    if topic.split('/').any(str::is_empty) {
        return Err(TopicError::EmptyLevel {
            topic: topic.to_owned(),
        });
    }
    let bad = |what| TopicError::BadCharacter {
        topic: topic.to_owned(),
        what,
    };
    if topic.contains('*') {
        return Err(bad("'*' (a tag wildcard)"));
    }
    if topic.chars().any(char::is_whitespace) {
        return Err(bad("whitespace"));
    }
    if topic.chars().any(char::is_control) {
        return Err(bad("a control character"));
    }
    Ok(())
}

/// The tag an MQTT client publishes on with topic name `topic`.
pub fn topic_to_tag(topic: &str) -> Result<String, TopicError> {
    check_common(topic)?;
    if topic.contains(['+', '#']) {
        return Err(TopicError::Wildcard {
            topic: topic.to_owned(),
            why: "a topic name cannot hold '+' or '#' (they are filter wildcards)",
        });
    }
    let tag = format!("/{topic}");
    debug_assert!(validate_tag(&tag).is_ok(), "checked above: {tag:?}");
    Ok(tag)
}

/// The pattern an MQTT subscription filter `filter` stands for.
pub fn filter_to_pattern(filter: &str) -> Result<Pattern, TopicError> {
    check_common(filter)?;
    let levels: Vec<&str> = filter.split('/').collect();
    let mut out = String::with_capacity(filter.len() + 2);
    for (i, level) in levels.iter().enumerate() {
        out.push('/');
        match *level {
            "+" => out.push('*'),
            "#" if i + 1 == levels.len() => out.push_str("**"),
            "#" => {
                return Err(TopicError::Wildcard {
                    topic: filter.to_owned(),
                    why: "'#' must be the last level",
                })
            }
            l if l.contains(['+', '#']) => {
                return Err(TopicError::Wildcard {
                    topic: filter.to_owned(),
                    why: "a wildcard ('+', '#') must be a whole level",
                })
            }
            l => out.push_str(l),
        }
    }
    Pattern::parse(&out).map_err(|_| TopicError::TooLong {
        len: out.len(),
        max: MAX_TAG_LEN,
    })
}

/// The MQTT topic name of an event on `tag`, for a subscriber whose filter
/// starts with a wildcard when `wildcard_first` (MQTT: such a filter never
/// matches a topic that starts with `$`). `None`: the tag has no MQTT
/// topic name (it holds `+` or `#`, or is `$`-reserved for this filter);
/// the event is not delivered to that subscription.
pub fn tag_to_topic(tag: &str, wildcard_first: bool) -> Option<&str> {
    let topic = tag.strip_prefix('/')?;
    if topic.is_empty() || topic.contains(['+', '#']) || (wildcard_first && topic.starts_with('$'))
    {
        return None;
    }
    Some(topic)
}

/// Whether an MQTT filter starts with a wildcard level (`+`, `#`).
pub fn starts_with_wildcard(filter: &str) -> bool {
    filter.starts_with('+') || filter.starts_with('#')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_and_filters_map_level_by_level() {
        assert_eq!(topic_to_tag("a/b").as_deref(), Ok("/a/b"));
        assert_eq!(topic_to_tag("demo").as_deref(), Ok("/demo"));
        let p = |f: &str| filter_to_pattern(f).map(|p| p.as_str().to_owned());
        assert_eq!(p("a/+/c").as_deref(), Ok("/a/*/c"));
        assert_eq!(p("demo/#").as_deref(), Ok("/demo/**"));
        assert_eq!(p("#").as_deref(), Ok("/**"));
        assert_eq!(p("+").as_deref(), Ok("/*"));
        assert_eq!(tag_to_topic("/demo/x", true), Some("demo/x"));
    }

    #[test]
    fn what_a_tag_cannot_hold_is_refused_with_the_reason() {
        for (topic, needle) in [
            ("/a/b", "starts with '/'"),
            ("a//b", "empty level"),
            ("a/", "empty level"),
            ("$SYS/broker", "reserved"),
            ("a b", "whitespace"),
            ("a/*", "'*'"),
            ("a\u{1}", "control"),
            ("a/+", "filter wildcards"),
            ("", "empty topic"),
        ] {
            let e = topic_to_tag(topic).expect_err(topic).to_string();
            assert!(e.contains(needle), "{topic:?}: {e}");
        }
        for (filter, needle) in [
            ("#/a", "last level"),
            ("a/b#", "whole level"),
            ("a+/b", "whole level"),
            ("$share/g/a", "reserved"),
            ("/a/#", "starts with '/'"),
        ] {
            let e = filter_to_pattern(filter).expect_err(filter).to_string();
            assert!(e.contains(needle), "{filter:?}: {e}");
        }
        let long = "x".repeat(MAX_TAG_LEN);
        assert!(matches!(
            topic_to_tag(&long),
            Err(TopicError::TooLong { .. })
        ));
    }

    #[test]
    fn tags_without_an_mqtt_name_are_not_delivered() {
        assert_eq!(tag_to_topic("/a+b", false), None);
        assert_eq!(tag_to_topic("/a/#", false), None);
        assert_eq!(tag_to_topic("/$x/y", true), None);
        assert_eq!(tag_to_topic("/$x/y", false), Some("$x/y"));
    }

    proptest! {
        /// Any string either maps to a valid tag that maps back to itself,
        /// or is refused; never a panic, never a different topic.
        #[test]
        fn topic_tag_round_trip(topic in "\\PC{0,40}|[a-z/+#$* ]{0,12}") {
            if let Ok(tag) = topic_to_tag(&topic) {
                prop_assert!(validate_tag(&tag).is_ok());
                prop_assert_eq!(tag_to_topic(&tag, false), Some(topic.as_str()));
            }
        }

        /// A filter either maps to a pattern that matches exactly the tags
        /// of the topics the MQTT filter matches (on a sample), or is refused.
        #[test]
        fn filter_matches_like_mqtt(filter in "[ab+#]{1,2}(/[ab+#]{1,2}){0,3}", topic in "[ab]{1,2}(/[ab]{1,2}){0,4}") {
            if let Ok(p) = filter_to_pattern(&filter) {
                let tag = topic_to_tag(&topic).expect("plain topic");
                prop_assert_eq!(p.matches(&tag), rumqttc::mqttbytes::matches(&topic, &filter), "filter {} topic {}", filter, topic);
            }
        }
    }
}
