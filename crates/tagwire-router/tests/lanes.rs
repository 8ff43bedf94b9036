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
