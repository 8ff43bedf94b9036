//! Issue 25 item 5: the library publishes and receives events larger than
//! the connection's frame in pieces (protocol version 5; docs/reliability.md,
//! "Pieces on client connections"), and a reliable one whose pieces were
//! lost with a cut connection is sent again after the reconnect.

#[path = "common/proxy.rs"]
mod proxy;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proxy::{token, Proxy, DROP_UP, PASS};
use tagwire::router::{Limits, Router, RouterConfig, RouterHandle};
use tagwire::{Reliability, Session};

const WAIT: Duration = Duration::from_secs(30);
const FRAME: u32 = 64 * 1024;

fn router() -> (RouterHandle, String) {
    let cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        limits: Limits {
            max_frame: FRAME,
            ..Limits::default()
        },
        ..RouterConfig::default()
    };
    let h = Router::start(cfg).expect("start router");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp addr"));
    (h, url)
}

fn payload(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 7 % 253) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn collector(url: &str) -> (Session, Arc<Mutex<Vec<Bytes>>>) {
    let s = Session::connect(url).expect("subscriber session");
    let got: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let g = got.clone();
    let sub = s
        .subscribe("/big/**")
        .callback(move |sample| g.lock().expect("got").push(sample.payload()))
        .expect("subscribe");
    std::mem::forget(sub);
    (s, got)
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_session_publishes_and_receives_an_event_larger_than_its_frame() {
    let (_h, url) = router();
    let (_s, got) = collector(&url);
    let p_session = Session::connect(&url).expect("publisher session");
    let p = p_session.declare_publisher("/big/pub").expect("publisher");
    let big = payload(1 << 20);
    p.publish("/big/x", big.clone())
        .expect("a 1 MiB event over a 64 KiB frame");
    wait_until("the event", || !got.lock().expect("got").is_empty());
    let got = got.lock().expect("got");
    assert_eq!(got.len(), 1);
    assert!(got[0] == big, "the payload arrives as published");
}

#[test]
fn a_reliable_event_in_pieces_lost_with_its_connection_is_sent_again() {
    let (_h, url) = router();
    let (_s, got) = collector(&url);
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let s = Session::builder()
        .token(token(&url))
        .reconnect_wait(WAIT)
        .connect(&proxy.url())
        .expect("publisher session through the proxy");
    let p = s.declare_publisher("/big/pub").expect("publisher");
    p.set_reliability(Reliability::Reliable);
    // Its pieces are swallowed, then the connection is cut.
    proxy.set(DROP_UP);
    let big = payload(512 * 1024);
    p.publish("/big/x", big.clone()).expect("publish");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        got.lock().expect("got").is_empty(),
        "nothing passed the proxy"
    );
    proxy.set(PASS);
    let before = s.reconnects();
    proxy.cut();
    wait_until("the reconnect", || s.reconnects() > before);
    s.wait_acknowledged(WAIT)
        .expect("the event acknowledged after the resend");
    wait_until("the event", || !got.lock().expect("got").is_empty());
    std::thread::sleep(Duration::from_millis(200));
    let got = got.lock().expect("got");
    assert_eq!(got.len(), 1, "delivered once");
    assert!(got[0] == big, "the payload arrives as published");
}

/// Protocol version 6: a `reliable` subscription gets an event larger than
/// its frame in numbered pieces (`DeliverReliablePiece`), the library puts
/// it together and acknowledges it; the small event after it is delivered
/// too, and the daemon holds nothing unacknowledged.
#[test]
fn a_reliable_subscription_receives_and_acknowledges_an_event_larger_than_its_frame() {
    let (_h, url) = router();
    let s = Session::connect(&url).expect("subscriber session");
    let got: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let g = got.clone();
    let _sub = s
        .subscribe("/big/**")
        .qos("reliability", "reliable")
        .callback(move |sample| g.lock().expect("got").push(sample.payload()))
        .expect("subscribe");
    let p_session = Session::connect(&url).expect("publisher session");
    let p = p_session.declare_publisher("/big/pub").expect("publisher");
    let big = payload(1 << 20);
    p.publish("/big/x", big.clone()).expect("a 1 MiB event");
    p.publish("/big/x", Bytes::from_static(b"small"))
        .expect("a small one");
    wait_until("both events", || got.lock().expect("got").len() == 2);
    {
        let got = got.lock().expect("got");
        assert!(got[0] == big, "the large payload arrives as published");
        assert_eq!(&got[1][..], b"small");
    }
    wait_until("the acknowledgements", || {
        let l = p_session.list().expect("list");
        l.subscriptions
            .iter()
            .filter_map(|s| s.acked.as_ref())
            .any(|a| a.unacked == 0)
    });
}
