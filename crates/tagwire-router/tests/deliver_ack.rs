//! Issue 25, the daemon's side of acknowledged delivery to subscribers
//! (protocol version 4, `DeliverReliable`/`DeliverAck`) on the wire: a
//! `reliable` subscription's events come numbered 1, 2, … and are held
//! until acknowledged; a bad acknowledgement is refused naming it and the
//! connection goes on; a subscriber that never acknowledges holds at most
//! its window and its queue in the daemon and does not hold up another
//! subscriber of the same tag.

mod common;

use common::{event, publish_frame, Raw};
use tagwire_proto::{Ack, ErrorCode, Frame};

fn qos(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn acked_of(r: &mut Raw, endpoint: &str) -> tagwire_proto::admin::SubscriptionInfo {
    r.list()
        .subscriptions
        .into_iter()
        .find(|s| s.endpoint == endpoint)
        .expect("listed")
}

#[test]
fn reliable_deliveries_are_numbered_held_until_acknowledged_and_a_bad_ack_is_refused() {
    let h = common::start_tcp(Default::default());
    let mut sub =
        Raw::hello_tcp(&h).subscriber("/s", "/a/**", &qos(&[("reliability", "reliable")]));
    let mut best = Raw::hello_tcp(&h).subscriber("/b", "/a/**", &[]);
    let mut p = Raw::hello_tcp(&h).publisher("/p");
    for i in 0..3 {
        p.publish_event(1, &event("/p", "/a/x", format!("e{i}")));
    }
    for want in 1..=3u64 {
        match sub.recv() {
            Some(Frame::DeliverReliable { sub: 1, seq, event }) => {
                assert_eq!(seq, want);
                let ev = tagwire_proto::Event::decode(&event).expect("event");
                assert_eq!(&ev.payload[..], format!("e{}", want - 1).as_bytes());
            }
            other => panic!("expected DeliverReliable {want}, got {other:?}"),
        }
        assert!(
            matches!(best.recv(), Some(Frame::Deliver { .. })),
            "a best-effort subscription gets plain Deliver frames"
        );
    }
    let s = acked_of(&mut p, "/s").acked.expect("acknowledged delivery");
    assert_eq!(s.unacked, 3);
    assert!(acked_of(&mut p, "/b").acked.is_none());

    sub.send(&Frame::DeliverAck {
        sub: 1,
        ack: Ack {
            done: 2,
            ranges: vec![],
        },
    });
    sub.ping(7);
    assert_eq!(acked_of(&mut p, "/s").acked.expect("acked").unacked, 1);
    // Never sent: refused naming it; the connection stays.
    sub.send(&Frame::DeliverAck {
        sub: 1,
        ack: Ack {
            done: 9,
            ranges: vec![],
        },
    });
    sub.expect_error(ErrorCode::Malformed, "bad DeliverAck for subscription 1");
    sub.expect_alive();
    assert_eq!(acked_of(&mut p, "/s").acked.expect("acked").unacked, 1);
}

#[test]
fn a_subscriber_that_never_acknowledges_holds_at_most_its_window_and_queue_and_holds_up_no_one() {
    let h = common::start_tcp(Default::default());
    // Reads nothing and acknowledges nothing.
    let rogue = Raw::hello_tcp(&h).subscriber(
        "/rogue",
        "/t/**",
        &qos(&[("reliability", "reliable"), ("max_queue_length", "100")]),
    );
    let mut healthy = Raw::hello_tcp(&h).subscriber(
        "/healthy",
        "/t/**",
        &qos(&[("reliability", "reliable"), ("max_queue_length", "100000")]),
    );
    let mut p = Raw::hello_tcp(&h).publisher("/p");
    let n = 5_000u64;
    let reader = std::thread::spawn(move || {
        let mut next = 1;
        while next <= n {
            match healthy.recv() {
                Some(Frame::DeliverReliable { seq, .. }) => {
                    assert_eq!(seq, next, "in order");
                    if seq % 64 == 0 || seq == n {
                        healthy.send(&Frame::DeliverAck {
                            sub: 1,
                            ack: Ack {
                                done: seq,
                                ranges: vec![],
                            },
                        });
                    }
                    next += 1;
                }
                other => panic!("healthy subscriber got {other:?} at {next}"),
            }
        }
        next - 1
    });
    let batch: Vec<u8> = (0..100)
        .flat_map(|i| publish_frame(1, &event("/p", "/t/x", format!("{i:04}"))).to_vec())
        .collect();
    for _ in 0..n / 100 {
        p.send_bytes(&batch);
    }
    assert_eq!(
        reader.join().expect("reader thread"),
        n,
        "the healthy subscriber received every event"
    );
    let s = acked_of(&mut p, "/rogue");
    let a = s.acked.clone().expect("acknowledged delivery");
    assert_eq!(a.window_events, 100, "the window is the queue's bound");
    assert_eq!(a.unacked, 100, "the window holds its bound, no more: {s:?}");
    assert!(s.queue_depth <= 100, "the queue holds its bound: {s:?}");
    assert!(a.window_full >= 1, "the full window is counted: {s:?}");
    assert!(
        s.dropped >= n - 200,
        "past window and queue, the discard policy drops (counted): {s:?}"
    );
    drop(rogue);
}
