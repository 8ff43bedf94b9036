//! Issue 25 item 6: a subscriber whose endpoint name another session took
//! while its connection was down (what a `kill -9` of the daemon allows:
//! its reservations were never written) learns it — `recv` returns
//! `Error::EndpointLost` — instead of staying connected and deaf.

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::tempdir::Dir;
use tagwire::router::{Router, RouterConfig};
use tagwire::{Error, Session};

const WAIT: Duration = Duration::from_secs(10);

/// A Unix-socket relay to `to` (same uid, so the daemon authenticates the
/// relayed client as its owner) that the test can cut and keep closed.
struct Relay {
    addr: String,
    open: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<UnixStream>>>,
}

impl Relay {
    fn start(at: PathBuf, to: PathBuf) -> Relay {
        let l = UnixListener::bind(&at).expect("bind relay");
        let addr = format!("unix://{}", at.display());
        let open = Arc::new(AtomicBool::new(true));
        let live: Arc<Mutex<Vec<UnixStream>>> = Arc::default();
        let (o, lv) = (open.clone(), live.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                if !o.load(Ordering::Acquire) {
                    let _ = c.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(s) = UnixStream::connect(&to) else {
                    continue;
                };
                let pipe = |mut a: UnixStream, mut b: UnixStream| {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = a.read(&mut buf) {
                            if n == 0 || b.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = a.shutdown(Shutdown::Both);
                        let _ = b.shutdown(Shutdown::Both);
                    });
                };
                let mut l = lv.lock().expect("relay list");
                l.push(c.try_clone().expect("clone"));
                l.push(s.try_clone().expect("clone"));
                pipe(c.try_clone().expect("clone"), s.try_clone().expect("clone"));
                pipe(s, c);
            }
        });
        Relay { addr, open, live }
    }

    /// Cuts every connection and refuses new ones until `reopen`.
    fn cut(&self) {
        self.open.store(false, Ordering::Release);
        for s in self.live.lock().expect("relay list").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn reopen(&self) {
        self.open.store(true, Ordering::Release);
    }
}

/// A daemon on a Unix socket with no endpoint reservation (the name is
/// free as soon as the connection drops: what a daemon restarted by
/// `kill -9` has, its reservations never written), its direct URL, and a
/// relay to it that a victim connects through.
fn setup(name: &str) -> (Dir, tagwire::router::RouterHandle, String, Relay) {
    let dir = Dir::new(name);
    let socket = dir.0.join("d.sock");
    let mut cfg = RouterConfig {
        tcp: None,
        unix: Some(socket.clone()),
        ..RouterConfig::default()
    };
    cfg.limits.endpoint_reservation_secs = 0;
    let h = Router::start(cfg).expect("router");
    let direct = format!("unix://{}", socket.display());
    let relay = Relay::start(dir.0.join("relay.sock"), socket);
    (dir, h, direct, relay)
}

/// Another session takes `endpoint` once the daemon has seen the victim's
/// connection drop (retried until [`WAIT`]).
fn take_name(direct: &str, endpoint: &str) -> (Session, tagwire::Subscriber) {
    let squatter = Session::connect(direct).expect("connect");
    let deadline = Instant::now() + WAIT;
    loop {
        match squatter.subscribe("/v/**").endpoint(endpoint).receiver() {
            Ok(s) => return (squatter, s),
            Err(e) => {
                assert!(Instant::now() < deadline, "the name never came free: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_subscriber_whose_name_was_taken_while_disconnected_gets_endpoint_lost() {
    let (_dir, _h, direct, relay) = setup("squat");
    let victim = Session::connect(&relay.addr).expect("connect via relay");
    let sub = victim
        .subscribe("/v/**")
        .endpoint("/viewer")
        .receiver()
        .expect("subscribe as /viewer");
    relay.cut();
    let (_squatter, _taken) = take_name(&direct, "/viewer");
    relay.reopen();
    // The victim reconnects, is refused its name, and learns it.
    match sub.recv_timeout(WAIT) {
        Err(Error::EndpointLost { name, reason }) => {
            assert_eq!(name, "/viewer");
            assert!(reason.contains("viewer"), "{reason}");
        }
        other => panic!("expected EndpointLost, got {other:?}"),
    }
}

#[test]
fn a_callback_subscription_whose_name_was_taken_gets_on_error() {
    let (_dir, _h, direct, relay) = setup("squat");
    let victim = Session::connect(&relay.addr).expect("connect via relay");
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let _sub = victim
        .subscribe("/v/**")
        .endpoint("/viewer-cb")
        .on_error(move |e| {
            let _ = tx.lock().expect("sender").send(e);
        })
        .callback(|_| {})
        .expect("subscribe as /viewer-cb");
    relay.cut();
    let (_squatter, _taken) = take_name(&direct, "/viewer-cb");
    relay.reopen();
    match rx.recv_timeout(WAIT) {
        Ok(Error::EndpointLost { name, .. }) => assert_eq!(name, "/viewer-cb"),
        other => panic!("expected on_error(EndpointLost), got {other:?}"),
    }
}
