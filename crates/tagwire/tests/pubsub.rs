//! End-to-end publish/subscribe through a real router, on every transport.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{all_servers, WAIT};
use tagwire::{DiscardPolicy, Error, ErrorCode, Value, ValueRef};

#[test]
fn wildcard_subscriber_receives_event_with_header_and_fields() {
    for (name, server) in all_servers() {
        let s = server.session();
        let sub = s.subscribe("/demo/**").receiver().expect("subscribe");
        let p = server
            .session()
            .declare_publisher("/test/pub")
            .expect("declare");
        p.event("/demo/x", "hi")
            .field("severity", 4)
            .field("where", "lab")
            .priority(7)
            .type_name("CommunicationsAlarm")
            .send()
            .expect("publish");
        let got = sub
            .recv_timeout(WAIT)
            .expect("recv")
            .unwrap_or_else(|| panic!("{name}: nothing received"));
        assert_eq!(got.tag(), "/demo/x", "{name}");
        assert_eq!(&got.payload()[..], b"hi", "{name}");
        let ev = got.event();
        assert_eq!(ev.publisher, "/test/pub", "{name}");
        assert_eq!(ev.seq, 1, "{name}");
        assert_eq!(ev.priority, 7, "{name}");
        assert_eq!(ev.type_name, Some("CommunicationsAlarm"), "{name}");
        assert_eq!(ev.field("severity"), Some(ValueRef::Int(4)), "{name}");
        assert_eq!(
            got.to_event().field("where"),
            Some(&Value::Str("lab".into())),
            "{name}"
        );
    }
}

#[test]
fn plain_publishes_interleaved_with_built_events_carry_their_own_headers() {
    for (name, server) in all_servers() {
        let s = server.session();
        let sub = s.subscribe("/plain/**").receiver().expect("subscribe");
        let p = s.declare_publisher("/plain/pub").expect("declare");
        p.publish("/plain/a-longer-tag", "one").expect("publish");
        p.event("/plain/b", "two")
            .priority(9)
            .type_name("T")
            .send()
            .expect("send");
        p.publish("/plain/c", "three").expect("publish");
        for (seq, tag, payload, priority) in [
            (1, "/plain/a-longer-tag", "one", 0),
            (2, "/plain/b", "two", 9),
            (3, "/plain/c", "three", 0),
        ] {
            let got = sub.recv_timeout(WAIT).expect("recv").expect("event");
            let ev = got.event();
            assert_eq!(
                (ev.seq, ev.tag, ev.priority),
                (seq, tag, priority),
                "{name}"
            );
            assert_eq!(&got.payload()[..], payload.as_bytes(), "{name}");
            assert_eq!(ev.publisher, "/plain/pub", "{name}");
            assert!(ev.source_time_ns > 0, "{name}");
            assert_eq!(ev.type_name.is_some(), seq == 2, "{name}");
        }
    }
}

#[test]
fn an_event_with_a_start_time_is_held_until_then() {
    for (name, server) in all_servers() {
        let s = server.session();
        let sub = s.subscribe("/later/**").receiver().expect("subscribe");
        let p = s.declare_publisher("/later/pub").expect("declare");
        // Far enough ahead that even a slow machine defers it rather than
        // finding the start time already passed on arrival.
        let start = std::time::SystemTime::now() + Duration::from_secs(1);
        p.event("/later/x", "later")
            .start_time(start)
            .send()
            .expect("publish");
        p.publish("/later/x", "now").expect("publish");
        let first = sub.recv_timeout(WAIT).expect("recv").expect("event");
        assert_eq!(
            &first.payload()[..],
            b"now",
            "{name}: the held event comes second"
        );
        assert_eq!(s.list().expect("list").deferred, 1, "{name}");
        let second = sub.recv_timeout(WAIT).expect("recv").expect("event");
        assert_eq!(&second.payload()[..], b"later", "{name}");
        assert!(
            std::time::SystemTime::now() >= start,
            "{name}: delivered before its start time"
        );
        assert_eq!(s.list().expect("list").deferred, 0, "{name}");
    }
}

#[test]
fn events_on_unmatched_tags_are_not_delivered() {
    for (name, server) in all_servers() {
        let s = server.session();
        let sub = s.subscribe("/a/*").receiver().expect("subscribe");
        let p = s.declare_publisher("/p").expect("declare");
        p.publish("/a/b/c", "deep").expect("publish");
        p.publish("/b/x", "other").expect("publish");
        p.publish("/a/ok", "match").expect("publish");
        let got = sub
            .recv_timeout(WAIT)
            .expect("recv")
            .expect("the matching event arrives");
        assert_eq!(
            got.tag(),
            "/a/ok",
            "{name}: only the matching event, and in order"
        );
        assert!(sub.try_recv().expect("try_recv").is_none(), "{name}");
    }
}

#[test]
fn every_event_of_a_burst_arrives_in_order() {
    for (name, server) in all_servers() {
        let s = server.session();
        let sub = s
            .subscribe("/burst")
            .max_queue_length(100_000)
            .receiver()
            .expect("subscribe");
        let p = server
            .session()
            .declare_publisher("/burster")
            .expect("declare");
        let n = 20_000u64;
        for i in 0..n {
            p.publish("/burst", i.to_le_bytes().to_vec())
                .expect("publish");
        }
        p.session().flush().expect("flush");
        for i in 0..n {
            let got = sub
                .recv_timeout(WAIT)
                .expect("recv")
                .unwrap_or_else(|| panic!("{name}: event {i} missing"));
            assert_eq!(got.event().seq, i + 1, "{name}");
            assert_eq!(&got.payload()[..], &i.to_le_bytes(), "{name}");
        }
    }
}

#[test]
fn callback_and_async_stream_receive_like_the_blocking_receiver() {
    for (name, server) in all_servers() {
        let s = server.session();
        let (tx, rx) = mpsc::channel();
        let _cb = s
            .subscribe("/cb")
            .callback(move |sample| {
                let _ = tx.send(sample.payload());
            })
            .expect("callback subscription");
        let stream_sub = s.subscribe("/cb").receiver().expect("subscribe");
        let p = s.declare_publisher("/cbpub").expect("declare");
        p.publish("/cb", "x").expect("publish");
        assert_eq!(
            &rx.recv_timeout(WAIT).expect("callback ran")[..],
            b"x",
            "{name}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let got = rt
            .block_on(async { tokio::time::timeout(WAIT, stream_sub.recv_async()).await })
            .expect("async recv in time")
            .expect("async recv");
        assert_eq!(&got.payload()[..], b"x", "{name}");
    }
}

#[test]
fn duplicate_endpoint_name_is_refused_naming_it_and_freed_on_drop() {
    for (name, server) in all_servers() {
        let a = server.session();
        let b = server.session();
        let p = a.declare_publisher("/cam/left").expect("first declare");
        match b.declare_publisher("/cam/left") {
            Err(Error::Refused { code, message }) => {
                assert_eq!(code, ErrorCode::DuplicateEndpoint, "{name}");
                assert!(message.contains("/cam/left"), "{name}: {message}");
            }
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
        drop(p);
        // The name is freed asynchronously; a bounded retry waits for it.
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match b.declare_publisher("/cam/left") {
                Ok(_) => break,
                Err(e) if std::time::Instant::now() > deadline => {
                    panic!("{name}: name never freed: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

#[test]
fn closed_publisher_name_is_free_to_another_session_at_once() {
    for (name, server) in all_servers() {
        let a = server.session();
        let b = server.session();
        // Many rounds: a close that returned before the router undeclared
        // would lose the race to b's declare on another connection.
        for round in 0..50 {
            let p = a.declare_publisher("/cam/close").expect("declare");
            p.close().expect("close");
            let q = b
                .declare_publisher("/cam/close")
                .unwrap_or_else(|e| panic!("{name} round {round}: name not free: {e}"));
            q.close().expect("close");
        }
    }
}

#[test]
fn closed_subscriber_endpoint_is_free_to_another_session_at_once() {
    for (name, server) in all_servers() {
        let a = server.session();
        let b = server.session();
        for round in 0..50 {
            let s = a
                .subscribe("/close/**")
                .endpoint("/viewer/close")
                .receiver()
                .expect("subscribe");
            s.close().expect("close");
            let t = b
                .subscribe("/close/**")
                .endpoint("/viewer/close")
                .receiver()
                .unwrap_or_else(|e| panic!("{name} round {round}: name not free: {e}"));
            t.close().expect("close");
        }
    }
}

#[test]
fn list_shows_endpoints_subscriptions_and_tags() {
    for (name, server) in all_servers() {
        let s = server.session();
        let _sub = s
            .subscribe("/demo/**")
            .endpoint("/viewer3")
            .receiver()
            .expect("subscribe");
        let p = s.declare_publisher("/cam/left").expect("declare");
        p.publish("/demo/x", "hi").expect("publish");
        s.flush().expect("flush");
        // The listing is answered after the publish on the same connection.
        let l = s.list().expect("list");
        let names: Vec<_> = l.endpoints.iter().map(|e| e.name.as_str()).collect();
        assert!(
            names.contains(&"/viewer3") && names.contains(&"/cam/left"),
            "{name}: {names:?}"
        );
        let sub = l
            .subscriptions
            .iter()
            .find(|x| x.endpoint == "/viewer3")
            .expect("subscription listed");
        assert_eq!(sub.pattern, "/demo/**", "{name}");
        assert_eq!(sub.discard, "drop_oldest", "{name}");
        assert!(
            l.tags
                .iter()
                .any(|t| t.tag == "/demo/x" && t.published == 1),
            "{name}: {:?}",
            l.tags
        );
    }
}

#[test]
fn slow_subscriber_drops_by_its_policy_while_others_get_everything() {
    for (name, server) in all_servers() {
        let s = server.session();
        // A subscriber that never reads, with a tiny queue in the router and here.
        let slow = server.session();
        let stalled = slow
            .subscribe("/flood")
            .max_queue_length(4)
            .discard(DiscardPolicy::DropOldest)
            .receiver()
            .expect("slow subscribe");
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let n = 5_000;
        let _fast = s
            .subscribe("/flood")
            .max_queue_length(n)
            .callback(move |_| {
                c.fetch_add(1, Ordering::Relaxed);
            })
            .expect("fast subscribe");
        let p = server
            .session()
            .declare_publisher("/flooder")
            .expect("declare");
        let payload = vec![7u8; 1024];
        for _ in 0..n {
            p.publish("/flood", payload.clone()).expect("publish");
        }
        p.session().flush().expect("flush");
        let deadline = std::time::Instant::now() + WAIT * 2;
        while count.load(Ordering::Relaxed) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            count.load(Ordering::Relaxed),
            n,
            "{name}: the fast subscriber got every event"
        );
        let deadline = std::time::Instant::now() + WAIT;
        let mut dropped_somewhere = 0;
        while std::time::Instant::now() < deadline {
            let l = s.list().expect("list");
            let router_drops: u64 = l
                .subscriptions
                .iter()
                .filter(|x| x.queue_bound == 4)
                .map(|x| x.dropped)
                .sum();
            dropped_somewhere = router_drops + stalled.dropped();
            if dropped_somewhere > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            dropped_somewhere > 0,
            "{name}: the stalled subscriber's queue discarded events"
        );
    }
}

#[test]
fn invalid_pattern_and_tag_are_refused_with_clear_errors() {
    for (name, server) in all_servers() {
        let s = server.session();
        let e = s.subscribe("/a/**b").receiver().unwrap_err();
        assert!(e.to_string().contains("**b"), "{name}: {e}");
        let e = s.subscribe("/a//b").receiver().unwrap_err();
        assert!(e.to_string().contains("empty level"), "{name}: {e}");
        let p = s.declare_publisher("/bad").expect("declare");
        let e = p.publish("/a/*", "x").unwrap_err();
        assert!(e.to_string().contains("wildcard"), "{name}: {e}");
        let e = s
            .subscribe("/ok")
            .qos("colour", "red")
            .receiver()
            .unwrap_err();
        assert!(e.to_string().contains("colour"), "{name}: {e}");
    }
}

#[test]
fn public_handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<tagwire::Session>();
    assert_send_sync::<tagwire::Publisher>();
    assert_send_sync::<tagwire::Subscriber>();
    assert_send_sync::<tagwire::CallbackSubscription>();
    assert_send_sync::<tagwire::EmbeddedRouter>();
}
