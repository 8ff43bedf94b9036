//! Issue 25: acknowledgement on the subscriber's connection (protocol
//! version 4, `DeliverReliable`/`DeliverAck`) and resume after a
//! subscriber's reconnect. A TCP proxy in the test sits between the
//! subscriber and the daemon; twice in the middle of a 2,000-event stream
//! it swallows what the daemon writes to the subscriber (500 events each
//! time: written by the daemon, never read by the subscriber) and then cuts
//! the connection (not the process). A `reliable` subscription gets 1..=2000
//! once, in order (the daemon sends again what was not acknowledged, the
//! library drops what it had already taken); a `best_effort` one through
//! the same faults loses the 1,000 swallowed events.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::Session;

const WAIT: Duration = Duration::from_secs(20);

/// A TCP proxy that can swallow what the daemon sends and cut its
/// connections.
struct Proxy {
    addr: String,
    swallow_down: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let swallow_down = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<(TcpStream, TcpStream)>>> = Arc::default();
        let (m, c) = (swallow_down.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let clone = |s: &TcpStream| s.try_clone().expect("clone");
                c.lock()
                    .expect("conns")
                    .push((clone(&client), clone(&server)));
                let (c2, s2) = (clone(&client), clone(&server));
                let never = Arc::new(AtomicBool::new(false));
                let down = m.clone();
                std::thread::spawn(move || pump(client, server, never));
                std::thread::spawn(move || pump(s2, c2, down));
            }
        });
        Proxy {
            addr,
            swallow_down,
            conns,
        }
    }

    fn url(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// Swallows what the daemon sends from now until the next cut.
    fn swallow_down(&self) {
        self.swallow_down.store(true, Ordering::SeqCst);
    }

    /// Cuts every connection now; new ones pass everything.
    fn cut(&self) {
        let mut conns = self.conns.lock().expect("conns");
        for (c, s) in conns.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
        self.swallow_down.store(false, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, swallow: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if swallow.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The daemon's local token (the proxy's port has none of its own).
fn token(url: &str) -> String {
    let port: u16 = url
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("port in the router's url");
    tagwire::router::local::read_token(&tagwire::router::local::token_path(port))
        .expect("the router's local token")
}

fn router() -> (RouterHandle, String) {
    let cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    let h = Router::start(cfg).expect("start router");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp addr"));
    (h, url)
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The daemon's one subscription to `/r/x` (none while the subscriber is
/// away): events it wrote, and whether it delivers acknowledged.
fn listed(admin: &Session) -> Option<(u64, bool)> {
    let l = admin.list().expect("list");
    l.subscriptions
        .iter()
        .find(|s| s.pattern == "/r/x")
        .map(|s| (s.delivered, s.acked.is_some()))
}

/// Publishes 1..=2000 to a subscriber behind the proxy: twice, 500 events
/// are written by the daemon and swallowed by the proxy, then the
/// subscriber's connection is cut. Returns what the subscriber got once it
/// went quiet, and its session.
fn run_faults(reliability: &str) -> (Vec<u64>, Session) {
    let (_h, url) = router();
    let proxy = Proxy::start(url.trim_start_matches("tcp://").to_owned());
    let s = Session::builder()
        .token(token(&url))
        .reconnect_wait(WAIT)
        .connect(&proxy.url())
        .expect("subscriber session through the proxy");
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let g = got.clone();
    let sub = s
        .subscribe("/r/x")
        .max_queue_length(100_000)
        .qos("reliability", reliability)
        .callback(move |sample| {
            let n = std::str::from_utf8(&sample.payload())
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            g.lock().expect("got").push(n);
        })
        .expect("subscribe");
    let count = || got.lock().expect("got").len();
    let publisher = Session::connect(&url).expect("publisher session");
    let p = publisher.declare_publisher("/r/pub").expect("publisher");
    p.set_express(true);
    let publish = |range: std::ops::RangeInclusive<u64>| {
        for i in range {
            p.publish("/r/x", i.to_string()).expect("publish");
        }
    };
    let acked = reliability != "best_effort";
    wait_until("the subscription", || listed(&publisher).is_some());
    assert_eq!(
        listed(&publisher).map(|(_, a)| a),
        Some(acked),
        "acknowledged delivery exactly when the subscription is reliable"
    );
    publish(1..=500);
    wait_until("the first 500 delivered", || count() >= 500);

    for (round, range) in [(1, 501..=1000), (2, 1001..=1500)] {
        let (written, _) = listed(&publisher).expect("listed");
        // The daemon writes these; the subscriber never reads them.
        proxy.swallow_down();
        publish(range);
        wait_until("the daemon to write the swallowed events", || {
            listed(&publisher).is_some_and(|(d, _)| d >= written + 500)
        });
        let before = s.reconnects();
        proxy.cut();
        wait_until("the subscriber's reconnect", || s.reconnects() > before);
        // Its subscription is made again (a new channel: its count starts
        // over, with what is sent again).
        wait_until("the subscription made again", || {
            listed(&publisher).is_some_and(|(d, _)| d < written + 500)
        });
        if acked {
            wait_until("what was swallowed, sent again", || {
                count() >= 500 * (round + 1)
            });
        }
    }
    publish(1501..=2000);
    // Quiet for a while: nothing more comes (no late duplicate).
    let mut last = (usize::MAX, Instant::now());
    let deadline = Instant::now() + WAIT;
    loop {
        let n = count();
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(500) && n >= 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "the subscriber never went quiet");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(sub);
    let out = got.lock().expect("got").clone();
    (out, s)
}

#[test]
fn reliable_subscriber_gets_every_event_once_in_order_when_its_connection_is_cut_twice() {
    let (got, s) = run_faults("reliable");
    let expected: Vec<u64> = (1..=2000).collect();
    if got != expected {
        let mut seen = std::collections::HashSet::new();
        let dups = got.iter().filter(|n| !seen.insert(**n)).count();
        let lost = expected.iter().filter(|n| !seen.contains(n)).count();
        panic!(
            "got {} events: {lost} lost, {dups} duplicated, in order: {}",
            got.len(),
            got.windows(2).all(|w| w[0] < w[1])
        );
    }
    assert!(s.reconnects() >= 2);
}

#[test]
fn best_effort_subscriber_loses_what_its_cut_connection_swallowed() {
    let (got, _s) = run_faults("best_effort");
    let lost = (1..=2000).filter(|n| !got.contains(n)).count();
    assert_eq!(
        lost,
        1000,
        "best effort: the 2 x 500 events the cut connections swallowed are lost (got {})",
        got.len()
    );
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "no duplicate, in order"
    );
}
