//! Lanes under load: admin requests flooding the daemon while a stream runs
//! on a real-time band neither stall the stream nor go unanswered, and
//! bands are served by their own lanes.

mod common;

use std::thread;

use common::{event, publish_frame, start_tcp, Raw};

use tagwire_proto::Frame;
use tagwire_router::Limits;

const EVENTS: u32 = 2_000;
const LISTS: usize = 200;

#[test]
fn an_admin_flood_neither_stalls_a_critical_stream_nor_goes_unanswered() {
    let h = start_tcp(Limits::default());
    let mut sub = Raw::hello_tcp_on(&h, "critical").subscriber("/rt/sub", "/rt/**", &[]);
    let mut publisher = Raw::hello_tcp_on(&h, "critical").publisher("/rt/pub");
    let flood = {
        let mut admin = Raw::hello_tcp(&h);
        thread::spawn(move || {
            for _ in 0..LISTS {
                let l = admin.list();
                assert!(!l.lanes.is_empty());
            }
            LISTS
        })
    };
    for i in 0..EVENTS {
        let mut ev = event("/rt/pub", "/rt/x", i.to_le_bytes().to_vec());
        ev.header.seq = i as u64;
        publisher.send_bytes(&publish_frame(1, &ev));
    }
    for want in 0..EVENTS {
        match sub.recv() {
            Some(Frame::Deliver { event, .. }) => {
                let ev = tagwire_proto::EventRef::parse(&event).expect("event");
                assert_eq!(ev.seq, want as u64, "in order, none lost");
            }
            other => panic!("expected delivery {want}, got {other:?}"),
        }
    }
    assert_eq!(
        flood.join().expect("admin thread"),
        LISTS,
        "every list answered"
    );
    // The stream's connections are served by the critical lane.
    let l = Raw::hello_tcp(&h).list();
    let bands: Vec<&str> = l
        .endpoints
        .iter()
        .filter(|e| e.name.starts_with("/rt/"))
        .map(|e| {
            l.connections
                .iter()
                .find(|c| c.id == e.connection)
                .map_or("?", |c| c.band.as_str())
        })
        .collect();
    assert_eq!(bands, ["critical", "critical"]);
}

#[test]
fn one_sessions_band_connections_share_a_publisher_name_and_pass_it_on() {
    use tagwire_proto::{EndpointKind, ErrorCode};
    let h = start_tcp(Limits::default());
    let token = common::owner_token(&h);
    let mine = [5u8; 16];
    let mut a = Raw::welcomed_as(&h, &token, mine);
    a.declare(1, EndpointKind::Publisher, "/al/pub");
    let mut b = Raw::hello_tcp_on_as(&h, "high", &token, mine);
    b.declare(1, EndpointKind::Publisher, "/al/pub");
    let mut stranger = Raw::welcomed_as(&h, &token, [6u8; 16]);
    match stranger.try_declare(1, EndpointKind::Publisher, "/al/pub") {
        Frame::Error { code, .. } => assert_eq!(code, ErrorCode::DuplicateEndpoint),
        other => panic!("another session got the name: {other:?}"),
    }
    let owner = |l: &tagwire_router::Listing| {
        l.endpoints
            .iter()
            .filter(|e| e.name == "/al/pub")
            .map(|e| e.connection)
            .collect::<Vec<_>>()
    };
    let mut admin = Raw::hello_tcp(&h);
    let first = owner(&admin.list());
    assert_eq!(first.len(), 1, "listed once");
    // The owner leaves: the name passes to the session's other connection.
    a.send(&Frame::Close {
        code: 0,
        reason: "bye".into(),
    });
    a.expect_closed();
    let l = common::wait_for(&mut admin, "the name to pass on", |l| {
        let o = owner(l);
        o.len() == 1 && o != first
    });
    assert_eq!(owner(&l).len(), 1);
    let mut sub = Raw::hello_tcp(&h).subscriber("/al/sub", "/al/**", &[]);
    sub.expect_alive();
    b.publish_event(1, &event("/al/pub", "/al/x", b"still".to_vec()));
    match sub.recv() {
        Some(Frame::Deliver { .. }) => {}
        other => panic!("expected the heir's event, got {other:?}"),
    }
    match stranger.try_declare(2, EndpointKind::Publisher, "/al/pub") {
        Frame::Error { code, .. } => assert_eq!(code, ErrorCode::DuplicateEndpoint),
        other => panic!("the name leaked to another session: {other:?}"),
    }
}
