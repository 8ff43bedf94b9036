//! Content filters end to end, on every transport: channel (proxy) filters
//! given at subscribe time, session (admin) filters added by admin requests,
//! TAO's AND/OR between the levels, and mapping filters.

mod common;

use std::time::Duration;

use common::{all_servers, Server, WAIT};
use tagwire::{AdminRequest, Error, ErrorCode, FilterLevel, Publisher, Subscriber};

/// Publishes the events, then a marker that every subscriber in these tests
/// accepts, and returns the payloads `sub` got before the marker.
fn received(p: &Publisher, sub: &Subscriber, events: &[(&str, u8, i64)]) -> Vec<String> {
    for (payload, priority, severity) in events {
        p.event("/alarms/a", payload.to_string())
            .priority(*priority)
            .field("severity", *severity)
            .send()
            .expect("publish");
    }
    p.event("/alarms/a", "end")
        .priority(0)
        .field("severity", 99)
        .field("marker", true)
        .send()
        .expect("marker");
    received_after(sub)
}

fn publisher(server: &Server, name: &str) -> Publisher {
    server.session().declare_publisher(name).expect("declare")
}

#[test]
fn channel_filter_passes_only_matching_events() {
    for (name, server) in all_servers() {
        let s = server.session();
        let sub = s
            .subscribe("/alarms/**")
            .filter("$priority < 2 and $.severity > 3 or exist $.marker")
            .receiver()
            .expect("subscribe");
        let p = publisher(&server, "/f/pub");
        let got = received(
            &p,
            &sub,
            &[("low-sev", 1, 2), ("match", 1, 5), ("high-prio", 5, 9)],
        );
        assert_eq!(got, vec!["match"], "{name}");
    }
}

#[test]
fn filter_that_does_not_compile_is_refused_at_subscribe_time_with_its_position() {
    for (name, server) in all_servers() {
        let s = server.session();
        match s
            .subscribe("/a")
            .filter("$priority == and $seq > 1")
            .receiver()
        {
            Err(Error::Refused { code, message }) => {
                assert_eq!(code, ErrorCode::InvalidFilter, "{name}");
                assert!(
                    message.contains("at 13") && message.contains("expected a value"),
                    "{name}: {message}"
                );
            }
            other => panic!("{name}: expected InvalidFilter, got {other:?}"),
        }
        match s.subscribe("/a").filter("$priority == 'x'").receiver() {
            Err(Error::Refused { message, .. }) => {
                assert!(message.contains("type mismatch"), "{name}: {message}")
            }
            other => panic!("{name}: expected a type error, got {other:?}"),
        }
    }
}

#[test]
fn mapping_filter_rewrites_only_its_channels_copy() {
    for (name, server) in all_servers() {
        let s = server.session();
        let mapped = s
            .subscribe("/alarms/a")
            .map("map priority=high when $.severity > 3")
            .receiver()
            .expect("mapped");
        let plain = s.subscribe("/alarms/a").receiver().expect("plain");
        let p = publisher(&server, "/m/pub");
        p.event("/alarms/a", "x")
            .priority(1)
            .field("severity", 7)
            .send()
            .expect("publish");
        let m = mapped
            .recv_timeout(WAIT)
            .expect("recv")
            .expect("mapped event");
        let o = plain
            .recv_timeout(WAIT)
            .expect("recv")
            .expect("plain event");
        assert_eq!(m.event().priority, 128, "{name}: 'high' is 128");
        assert_eq!(
            o.event().priority,
            1,
            "{name}: the other channel keeps the original"
        );
        assert_eq!(m.payload(), o.payload(), "{name}");
    }
}

#[test]
fn mapping_filter_lifetime_drops_events_already_too_old_for_that_channel() {
    for (name, server) in all_servers() {
        let s = server.session();
        let short = s
            .subscribe("/alarms/a")
            .map("map timeout=1ms when not exist $.marker")
            .receiver()
            .expect("short");
        let p = publisher(&server, "/t/pub");
        // A source timestamp one second in the past: already 999 ms over a 1 ms lifetime.
        let past = std::time::SystemTime::now() - Duration::from_secs(1);
        let ns = past
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after epoch")
            .as_nanos() as u64;
        p.event("/alarms/a", "stale")
            .source_time_ns(ns)
            .field("severity", 1)
            .send()
            .expect("publish");
        let got = received(&p, &short, &[]);
        assert!(got.is_empty(), "{name}: {got:?}");
    }
}

#[test]
fn session_filter_applies_to_every_channel_of_that_session_only() {
    for (name, server) in all_servers() {
        let a = server.session();
        let sub1 = a
            .subscribe("/alarms/**")
            .endpoint("/sess/one")
            .receiver()
            .expect("sub1");
        let sub2 = a
            .subscribe("/alarms/*")
            .endpoint("/sess/two")
            .receiver()
            .expect("sub2");
        let other = server.session();
        let sub3 = other
            .subscribe("/alarms/**")
            .endpoint("/sess/other")
            .receiver()
            .expect("sub3");
        let admin = server.session();
        let id = admin
            .filter_add(
                "/sess/one",
                FilterLevel::Session,
                "$.severity >= 5 or exist $.marker",
            )
            .expect("filter_add");
        let p = publisher(&server, "/s/pub");
        let events = [("sev2", 0, 2), ("sev6", 0, 6)];
        assert_eq!(received(&p, &sub1, &events), vec!["sev6"], "{name}");
        assert_eq!(received_after(&sub2), vec!["sev6"], "{name}: same session");
        assert_eq!(
            received_after(&sub3),
            vec!["sev2", "sev6"],
            "{name}: other session unfiltered"
        );
        let list = admin.filter_list().expect("list");
        assert!(
            list.iter()
                .any(|f| f.id == id && f.level == FilterLevel::Session),
            "{name}"
        );
        admin.filter_remove(id).expect("remove");
        assert_eq!(
            received(&p, &sub1, &events),
            vec!["sev2", "sev6"],
            "{name}: removed"
        );
    }
}

/// What `sub` got up to the marker (already published by `received`).
fn received_after(sub: &Subscriber) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let s = sub.recv_timeout(WAIT).expect("recv").expect("marker");
        let text = String::from_utf8_lossy(&s.payload()).into_owned();
        if text == "end" {
            return got;
        }
        got.push(text);
    }
}

#[test]
fn or_between_levels_passes_events_that_either_level_accepts() {
    for (name, server) in all_servers() {
        let a = server.session();
        let sub = a
            .subscribe("/alarms/a")
            .endpoint("/or/sub")
            .filter("$priority >= 5 or exist $.marker")
            .receiver()
            .expect("sub");
        let admin = server.session();
        admin
            .filter_add("/or/sub", FilterLevel::Session, "$.severity >= 5")
            .expect("add");
        let p = publisher(&server, "/or/pub");
        let events = [
            ("neither", 0, 0),
            ("prio", 6, 0),
            ("sev", 0, 6),
            ("both", 6, 6),
        ];
        assert_eq!(
            received(&p, &sub, &events),
            vec!["both"],
            "{name}: AND by default"
        );
        admin.filter_op("/or/sub", "or").expect("op");
        assert_eq!(
            received(&p, &sub, &events),
            vec!["prio", "sev", "both"],
            "{name}: OR"
        );
    }
}

#[test]
fn admin_filter_errors_name_the_problem() {
    for (name, server) in all_servers() {
        let admin = server.session();
        let e = admin
            .filter_add("/nobody", FilterLevel::Channel, "$priority > 1")
            .unwrap_err();
        assert!(e.to_string().contains("/nobody"), "{name}: {e}");
        let _sub = admin
            .subscribe("/x")
            .endpoint("/err/sub")
            .receiver()
            .expect("sub");
        let e = admin
            .filter_add("/err/sub", FilterLevel::Channel, "$prority > 1")
            .unwrap_err();
        assert!(
            matches!(&e, Error::Refused { code: ErrorCode::InvalidFilter, message } if message.contains("$prority")),
            "{name}: {e}"
        );
        let e = admin.filter_remove(999_999).unwrap_err();
        assert!(e.to_string().contains("999999"), "{name}: {e}");
    }
}

#[test]
fn many_keyed_subscriptions_are_routed_through_the_index() {
    const N: i64 = 200;
    for (name, server) in all_servers() {
        let s = server.session();
        let subs: Vec<Subscriber> = (0..N)
            .map(|i| {
                s.subscribe("/keys/**")
                    .endpoint(&format!("/keys/sub{i}"))
                    .filter(&format!("$.key == {i}"))
                    .filter("$.marker == true")
                    .receiver()
                    .expect("subscribe")
            })
            .collect();
        let listing = s.list().expect("list");
        let routes: Vec<&str> = listing
            .subscriptions
            .iter()
            .filter(|x| x.pattern == "/keys/**")
            .map(|x| x.route.as_str())
            .collect();
        assert_eq!(routes.len(), N as usize, "{name}");
        assert!(routes.iter().all(|r| *r == "indexed"), "{name}: {routes:?}");

        let p = publisher(&server, "/keys/pub");
        for i in (0..N).rev() {
            p.event("/keys/x", format!("k{i}"))
                .field("key", i)
                .send()
                .expect("publish");
        }
        p.event("/keys/x", "end")
            .field("marker", true)
            .send()
            .expect("marker");
        for (i, sub) in subs.iter().enumerate() {
            assert_eq!(
                received_after(sub),
                vec![format!("k{i}")],
                "{name}: sub {i}"
            );
        }
    }
}

#[test]
fn publisher_filter_drops_events_before_routing_for_every_subscriber() {
    for (name, server) in all_servers() {
        let s = server.session();
        let a = s.subscribe("/alarms/**").receiver().expect("sub a");
        let b = s.subscribe("/alarms/a").receiver().expect("sub b");
        let p = publisher(&server, "/src/pub");
        let admin = server.session();
        let id = admin
            .filter_add(
                "/src/pub",
                FilterLevel::Channel,
                "$.severity > 3 or exist $.marker",
            )
            .expect("add");
        let listed = admin.filter_list().expect("list");
        assert_eq!(
            listed[0].level,
            FilterLevel::Publisher,
            "{name}: {listed:?}"
        );

        let events = [("low", 0, 1), ("high", 0, 5)];
        assert_eq!(received(&p, &a, &events), vec!["high"], "{name}: a");
        assert_eq!(received_after(&b), vec!["high"], "{name}: b");
        assert_eq!(admin.list().expect("list").filtered_at_source, 1, "{name}");

        admin.filter_remove(id).expect("remove");
        assert_eq!(
            received(&p, &a, &events),
            vec!["low", "high"],
            "{name}: removed"
        );
    }
}

#[test]
fn publisher_level_errors_name_the_problem() {
    for (name, server) in all_servers() {
        let s = server.session();
        let _sub = s
            .subscribe("/x")
            .endpoint("/lvl/sub")
            .receiver()
            .expect("sub");
        let _p = publisher(&server, "/lvl/pub");
        let e = s
            .filter_add("/lvl/sub", FilterLevel::Publisher, "$priority > 1")
            .unwrap_err();
        assert!(
            matches!(&e, Error::Refused { code: ErrorCode::BadRequest, message } if message.contains("/lvl/sub") && message.contains("not a publisher")),
            "{name}: {e}"
        );
        let e = s.map_add("/lvl/pub", "map priority=high").unwrap_err();
        assert!(e.to_string().contains("not publishers"), "{name}: {e}");
    }
}

/// The longest error message these tests accept for a refused 64 KB text:
/// the router quotes at most the first 120 characters of client text.
const SHORT_ERROR: usize = 600;

#[test]
fn errors_about_64_kb_of_client_text_quote_only_its_start() {
    let long_ident = format!("$.{} >", "a".repeat(65_000));
    let long_string = format!("$.x == '{}' and", "s".repeat(65_000));
    let long_regex = format!("$.x ~~ '({}'", "r".repeat(65_000));
    let long_map = format!("map priority={}", "9".repeat(65_000));
    for (name, server) in all_servers() {
        let s = server.session();
        for (what, text) in [
            ("identifier", &long_ident),
            ("string", &long_string),
            ("regex", &long_regex),
        ] {
            let e = s.subscribe("/a").filter(text).receiver().unwrap_err();
            let Error::Refused { code, message } = &e else {
                panic!("{name} {what}: expected a refusal, got {e}");
            };
            assert_eq!(*code, ErrorCode::InvalidFilter, "{name} {what}: {message}");
            assert!(
                message.len() < SHORT_ERROR && message.contains("bytes)"),
                "{name} {what}: a {}-byte message: {}…",
                message.len(),
                &message[..SHORT_ERROR.min(message.len())]
            );
        }
        let e = s.subscribe("/a").map(&long_map).receiver().unwrap_err();
        assert!(
            e.to_string().len() < SHORT_ERROR,
            "{name} map: {} bytes",
            e.to_string().len()
        );
        let e = s
            .subscribe("/a")
            .qos("max_queue_length", &long_ident)
            .receiver()
            .unwrap_err();
        assert!(
            e.to_string().len() < SHORT_ERROR,
            "{name} qos: {} bytes",
            e.to_string().len()
        );
        let _sub = s
            .subscribe("/x")
            .endpoint("/echo/sub")
            .receiver()
            .expect("sub");
        let add = |endpoint: String, filter: Option<String>, map: Option<String>| {
            AdminRequest::FilterAdd {
                endpoint,
                level: FilterLevel::Channel,
                filter,
                map,
            }
        };
        for request in [
            add("/echo/sub".into(), Some(long_ident.clone()), None),
            add("/echo/sub".into(), None, Some(long_map.clone())),
            add("n".repeat(65_000), Some("true".into()), None),
            AdminRequest::FilterOp {
                endpoint: "/echo/sub".into(),
                interfilter: "o".repeat(65_000),
            },
        ] {
            let e = s.admin(request).unwrap_err().to_string();
            assert!(
                e.len() < SHORT_ERROR && e.contains("bytes)"),
                "{name}: a {}-byte message: {}…",
                e.len(),
                &e[..SHORT_ERROR.min(e.len())]
            );
        }
    }
}
