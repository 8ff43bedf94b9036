//! Priority bands from the client: `Session::on_band` opens a connection to
//! the band's listener (served by its lane), and its reader thread, which
//! runs subscriber callbacks, takes the band's scheduling.

mod common;

use std::sync::mpsc::channel;

use common::{all_servers, tcp_server, WAIT};
use tagwire::{Error, Session};
use tagwire_router::priority::{current_sched, SchedPolicy};

fn band_of_connection(s: &Session, name: &str) -> String {
    let l = s.list().expect("list");
    let endpoint = l
        .endpoints
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} not listed"));
    l.connections
        .iter()
        .find(|c| c.id == endpoint.connection)
        .expect("its connection")
        .band
        .clone()
}

fn publish_on_high_and_receive_on_normal(session: Session) {
    let high = session.on_band("high").expect("high band");
    assert_eq!(high.band(), Some("high"));
    assert!(
        session.on_band("high").expect("again").band() == Some("high"),
        "the band session is shared"
    );
    let sub = session
        .subscribe("/bands/**")
        .receiver()
        .expect("subscribe");
    let publisher = high.declare_publisher("/bands/alarm").expect("publisher");
    publisher.publish("/bands/x", "urgent").expect("publish");
    let got = sub.recv_timeout(WAIT).expect("recv").expect("a sample");
    assert_eq!(&got.payload()[..], b"urgent");
    assert_eq!(band_of_connection(&session, "/bands/alarm"), "high");
}

#[test]
fn a_band_session_reaches_the_same_router_on_every_transport() {
    for (name, server) in all_servers() {
        eprintln!("transport {name}");
        publish_on_high_and_receive_on_normal(server.session());
    }
}

#[test]
fn an_unknown_band_is_refused_naming_the_bands() {
    let server = tcp_server();
    match server.session().on_band("express") {
        Err(Error::UnknownBand { band, known }) => {
            assert_eq!(band, "express");
            assert!(known.contains("critical"), "{known}");
        }
        other => panic!("expected UnknownBand, got {other:?}"),
    }
}

#[test]
fn callbacks_of_a_band_session_run_with_the_bands_scheduling() {
    let server = tcp_server();
    let session = server.session();
    let critical = session.on_band("critical").expect("critical band");
    let (tx, rx) = channel();
    let tx = std::sync::Mutex::new(tx);
    let _cb = critical
        .subscribe("/sched/**")
        .callback(move |_| {
            let _ = tx.lock().map(|t| t.send(current_sched()));
        })
        .expect("subscribe");
    session
        .declare_publisher("/sched/pub")
        .expect("publisher")
        .publish("/sched/x", "x")
        .expect("publish");
    let sched = rx.recv_timeout(WAIT).expect("callback ran").expect("sched");
    let root = rustix::process::geteuid().is_root();
    if root {
        assert_eq!(sched, SchedPolicy::Fifo(20), "critical is fifo:20");
    } else {
        // Without the right to a real-time policy: a favoured nice, or the
        // thread's own (documented fallback), never a real-time policy.
        assert!(matches!(sched, SchedPolicy::Other { .. }), "{sched:?}");
    }
    drop(server);
}

#[test]
fn follow_priority_sends_each_event_on_the_band_of_its_priority() {
    let server = tcp_server();
    let url = match &server {
        common::Server::Daemon(_, url, _) => url.clone(),
        common::Server::Embedded(_) => unreachable!("tcp_server is a daemon"),
    };
    let watcher = server.session();
    let sub = watcher.subscribe("/fp/**").receiver().expect("subscribe");
    let session = Session::builder()
        .follow_priority(true)
        .connect(&url)
        .expect("session");
    let publisher = session.declare_publisher("/fp/pub").expect("publisher");
    for p in [10u8, 100, 150, 250] {
        publisher
            .event("/fp/x", vec![p])
            .priority(p)
            .send()
            .expect("publish");
    }
    let mut got: Vec<u8> = (0..4)
        .map(|_| {
            let s = sub.recv_timeout(WAIT).expect("recv").expect("a sample");
            assert_eq!(s.event().publisher, "/fp/pub", "one name on every band");
            s.payload()[0]
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [10, 100, 150, 250]);
    // The session now has a connection on each band; the name is
    // registered once.
    let l = watcher.list().expect("list");
    let mut bands: Vec<&str> = l.connections.iter().map(|c| c.band.as_str()).collect();
    bands.sort_unstable();
    bands.dedup();
    assert_eq!(bands, ["critical", "high", "low", "normal"]);
    assert_eq!(
        l.endpoints.iter().filter(|e| e.name == "/fp/pub").count(),
        1
    );
    // Another session may not use the name, on any band.
    let other = server.session().on_band("high").expect("high");
    assert!(other.declare_publisher("/fp/pub").is_err());
}
