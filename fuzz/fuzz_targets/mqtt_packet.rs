//! Fuzz target: arbitrary bytes as an MQTT client's stream into the MQTT
//! listener's parsing path: `decode_connect` (the first packet and its
//! version), then `decode` of the packets after it in that version (and,
//! when the first packet is not a CONNECT, in both versions), and the
//! topic and filter mapping of every PUBLISH and SUBSCRIBE that decodes.
//! Errors are expected; a panic is a bug. Seeds: fuzz/seeds/mqtt_packet/
//! (CONNECT, PUBLISH and SUBSCRIBE of both versions).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_router::mqtt::packet::{decode, decode_connect, Incoming, Version};
use tagwire_router::mqtt::topic::{filter_to_pattern, tag_to_topic, topic_to_tag};

/// Small, so the size checks are exercised too.
const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let versions: Vec<Version> = match decode_connect(&mut buf, MAX) {
        Ok(Some(c)) => vec![c.version],
        Ok(None) => return,
        Err(_) => {
            buf = BytesMut::from(data);
            vec![Version::V311, Version::V5]
        }
    };
    let rest = buf.clone();
    for v in versions {
        let mut buf = rest.clone();
        for _ in 0..64 {
            match decode(v, &mut buf, MAX) {
                Ok(Some(Incoming::Publish { topic, .. })) => {
                    if let Ok(tag) = topic_to_tag(&topic) {
                        assert_eq!(tag_to_topic(&tag, false), Some(topic.as_str()));
                    }
                }
                Ok(Some(Incoming::Subscribe { filters, .. })) => {
                    for (f, _) in filters {
                        let _ = filter_to_pattern(&f);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
});
