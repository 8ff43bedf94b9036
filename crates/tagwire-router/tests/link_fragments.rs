//! Large reliable events across links in pieces (issue 25 item 5, link
//! version 4; docs/reliability.md "Large payloads"): a reliable event larger
//! than `federation.fragment_size` crosses a version-4 link as `Fragment`s
//! that put together give it byte for byte; a `FragmentResume` moves the
//! sender on; a receiver that held part of an event before its link was cut
//! asks the sender to resume there and delivers the whole; a bad checksum
//! closes the link naming it; a version-3 peer still gets the event whole.
//! A best-effort event larger than the piece size crosses reliably, so in
//! pieces too (a small one still goes as a `Forward`).
//! The "peers" are raw clients speaking link frames.

mod common;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::{event, link_frame, link_peer as peer, publish_frame, recv_link, tcp_config, Raw};
use tagwire_core::fragment::{checksum, Outgoing, Progress, Reassembler, ReassemblyLimits};
use tagwire_proto::{Ack, Event, FragmentOf, Frame, Interest, LinkFrame};
use tagwire_router::{FederationConfig, Limits, Router, RouterConfig, RouterHandle};

const PIECE: usize = 4096;

fn router(max_control: usize) -> RouterHandle {
    router_with(max_control, "reliable")
}

/// A router whose daemon layer says `reliability = {reliability}`.
fn router_with(max_control: usize, reliability: &str) -> RouterHandle {
    Router::start(RouterConfig {
        federation: FederationConfig {
            fragment_size: PIECE,
            ..FederationConfig::default()
        },
        limits: Limits {
            max_control_bytes: max_control,
            ..Limits::default()
        },
        qos: [("reliability".to_string(), reliability.to_string())]
            .into_iter()
            .collect(),
        ..tcp_config()
    })
    .expect("start")
}

/// Links a raw peer as daemon `node` saying `version`; returns it, the
/// version the router answered and the router's node id.
fn try_link(h: &RouterHandle, version: u16, node: u64) -> Result<(Raw, u16, u64), String> {
    let mut raw = Raw::hello(h);
    raw.send_bytes(&link_frame(&peer(version, node)));
    match recv_link(&mut raw) {
        Ok(LinkFrame::Peer {
            version, node: r, ..
        }) => Ok((raw, version, r)),
        other => Err(format!("{other:?}")),
    }
}

fn linked(h: &RouterHandle, version: u16, node: u64) -> (Raw, u16, u64) {
    try_link(h, version, node).expect("the router's Peer")
}

/// The next frame `pick` accepts (others skipped), bounded.
fn next_matching<T>(raw: &mut Raw, mut pick: impl FnMut(LinkFrame) -> Option<T>) -> T {
    for _ in 0..100_000 {
        match recv_link(raw) {
            Ok(f) => {
                if let Some(t) = pick(f) {
                    return t;
                }
            }
            Err(Some(_)) => {}
            Err(None) => panic!("the link closed"),
        }
    }
    panic!("no such frame in 100,000");
}

fn link_ping(raw: &mut Raw, nonce: u64) {
    raw.send(&Frame::Ping { nonce });
    loop {
        match recv_link(raw) {
            Ok(_) => continue,
            Err(Some(Frame::Pong { nonce: n })) if n == nonce => return,
            Err(Some(_)) => continue,
            Err(None) => panic!("the link closed"),
        }
    }
}

fn closing_message(raw: &mut Raw) -> String {
    loop {
        match recv_link(raw) {
            Ok(_) => continue,
            Err(Some(Frame::Error { message, .. }))
            | Err(Some(Frame::Close {
                reason: message, ..
            })) => return message,
            Err(Some(_)) => continue,
            Err(None) => panic!("closed without a message"),
        }
    }
}

fn big_event(publisher: &str, seq: u64, len: usize) -> Event {
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
    let mut e = event(publisher, "/r/x", payload);
    e.header.seq = seq;
    e
}

fn encoded(e: &Event) -> Bytes {
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("encodable");
    b.freeze()
}

/// A raw peer `node` (version 4) that wants `/r/**`.
fn interested_peer(h: &RouterHandle, node: u64) -> Raw {
    let (mut a, v, me) = linked(h, 4, node);
    assert_eq!(v, 4);
    a.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: node,
        version: 1,
        name: format!("raw{node}"),
        neighbors: vec![me],
        interest: vec![Interest::pattern("/r/**")],
    }));
    link_ping(&mut a, 1);
    a
}

#[test]
fn a_large_reliable_event_crosses_a_version_4_link_in_pieces_that_reassemble_byte_exact() {
    let h = router(4 << 20);
    let mut a = interested_peer(&h, 81);
    let ev = big_event("/pub", 1, 100_000);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    publisher.send_bytes(&publish_frame(1, &ev));
    publisher.ping(2);
    let mut r = Reassembler::new(ReassemblyLimits::default());
    let mut pieces = 0;
    let (seq, whole) = loop {
        let got = next_matching(&mut a, |f| match f {
            LinkFrame::Fragment {
                id,
                total,
                checksum,
                offset,
                of: FragmentOf::Reliable { seq, .. },
                data,
            } => Some((seq, id, total, checksum, offset, data)),
            LinkFrame::Reliable { .. } => panic!("a large event went whole"),
            _ => None,
        });
        let (seq, id, total, sum, offset, data) = got;
        assert!(data.len() <= PIECE, "a piece of {} bytes", data.len());
        pieces += 1;
        let piece = tagwire_core::fragment::Piece {
            blob: tagwire_core::fragment::BlobId {
                id,
                total,
                checksum: sum,
            },
            offset,
            data,
        };
        if let Progress::Complete(b) = r.on_piece(0u8, &piece).expect("valid piece").progress {
            break (seq, b);
        }
    };
    assert_eq!(seq, 1);
    assert_eq!(
        whole,
        encoded(&ev),
        "the pieces give the event byte for byte"
    );
    assert_eq!(pieces, encoded(&ev).len().div_ceil(PIECE));
    a.send_bytes(&link_frame(&LinkFrame::Ack(Ack {
        done: 1,
        ranges: vec![],
    })));
    link_ping(&mut a, 3);
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.reliable.pieces_sent, pieces as u64, "{:?}", f.reliable);
    assert!(f.links.iter().all(|l| l.unacked == 0), "{:?}", f.links);
}

/// Issue 25 item 5 for best effort: an event whose tag is not reliable but
/// which is larger than the link's piece size crosses the link as pieces of
/// a reliable event (resumable, acknowledged), not refused as too large;
/// a small one still goes as a plain `Forward`.
#[test]
fn a_large_best_effort_event_crosses_a_link_in_pieces_and_a_small_one_as_a_forward() {
    let h = router_with(4 << 20, "best_effort");
    let mut a = interested_peer(&h, 85);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    let small = big_event("/pub", 1, 100);
    publisher.send_bytes(&publish_frame(1, &small));
    let got = next_matching(&mut a, |f| match f {
        LinkFrame::Forward { event, .. } => Some(event),
        LinkFrame::Reliable { .. } | LinkFrame::Fragment { .. } => {
            panic!("a small best-effort event crossed reliably")
        }
        _ => None,
    });
    assert_eq!(got, encoded(&small));
    let large = big_event("/pub", 2, 50_000);
    publisher.send_bytes(&publish_frame(1, &large));
    publisher.ping(3);
    let mut r = Reassembler::new(ReassemblyLimits::default());
    let whole = loop {
        let piece = next_matching(&mut a, |f| match f {
            LinkFrame::Fragment {
                id,
                total,
                checksum,
                offset,
                of: FragmentOf::Reliable { .. },
                data,
            } => Some(tagwire_core::fragment::Piece {
                blob: tagwire_core::fragment::BlobId {
                    id,
                    total,
                    checksum,
                },
                offset,
                data,
            }),
            LinkFrame::Forward { .. } => panic!("a large event went whole as a Forward"),
            _ => None,
        });
        if let Progress::Complete(b) = r.on_piece(0u8, &piece).expect("valid piece").progress {
            break b;
        }
    };
    assert_eq!(
        whole,
        encoded(&large),
        "the pieces give the event byte for byte"
    );
}

#[test]
fn a_fragment_resume_moves_the_sender_on_to_the_peers_point() {
    // A small control buffer: a few pieces per tick, so the resume arrives
    // while most pieces are still to be sent.
    let h = router(8192);
    let mut a = interested_peer(&h, 82);
    let ev = big_event("/pub", 1, 400_000);
    let total = encoded(&ev).len() as u64;
    let mut publisher = Raw::hello(&h).publisher("/pub");
    publisher.send_bytes(&publish_frame(1, &ev));
    publisher.ping(2);
    let mut offsets = Vec::new();
    let mut resumed = false;
    let have = total - 3 * PIECE as u64;
    loop {
        let (id, sum, offset, len) = next_matching(&mut a, |f| match f {
            LinkFrame::Fragment {
                id,
                checksum,
                offset,
                data,
                ..
            } => Some((id, checksum, offset, data.len() as u64)),
            _ => None,
        });
        offsets.push(offset);
        if !resumed {
            resumed = true;
            a.send_bytes(&link_frame(&LinkFrame::FragmentResume {
                id,
                total,
                checksum: sum,
                have,
            }));
        }
        if offset + len == total {
            break;
        }
    }
    assert!(
        offsets.contains(&have),
        "sending went on at the resume point {have}: {offsets:?}"
    );
    assert!(
        (offsets.len() as u64) < total / PIECE as u64 / 2,
        "most pieces were skipped: {} sent of {}",
        offsets.len(),
        total.div_ceil(PIECE as u64)
    );
    link_ping(&mut a, 3);
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.reliable.resumes_taken, 1, "{:?}", f.reliable);
    assert!(f.reliable.bytes_skipped > total / 2, "{:?}", f.reliable);
}

fn fragment(ev: &Bytes, id: u64, seq: u64, origin: u64, from: u64, to: u64) -> LinkFrame {
    LinkFrame::Fragment {
        id,
        total: ev.len() as u64,
        checksum: checksum(ev),
        offset: from,
        of: FragmentOf::Reliable {
            seq,
            origin,
            hops: 0,
        },
        data: ev.slice(from as usize..to as usize),
    }
}

#[test]
fn a_receiver_that_held_part_of_an_event_before_its_link_was_cut_asks_to_resume_there() {
    let h = router(4 << 20);
    let mut sub = Raw::hello(&h).subscriber("/s", "/r/**", &[]);
    sub.ping(1);
    let ev = big_event("/far", 1, 100_000);
    let bytes = encoded(&ev);
    let total = bytes.len() as u64;
    // The first connection carries the first 40,000 bytes, then is cut.
    let (mut a, _, _) = linked(&h, 4, 91);
    for from in (0..40_000).step_by(10_000) {
        a.send_bytes(&link_frame(&fragment(
            &bytes,
            0x5a,
            1,
            91,
            from,
            from + 10_000,
        )));
    }
    link_ping(&mut a, 1);
    a.drop_without_close();
    // The same daemon links again (once the router noticed the loss).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut b, _, _) = loop {
        match try_link(&h, 4, 91) {
            Ok(l) => break l,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("could not link again: {e}"),
        }
    };
    // The sender starts the event again from 0 (sequence 1 on this
    // connection); the router says it holds 40,000 bytes.
    b.send_bytes(&link_frame(&fragment(&bytes, 0x5a, 1, 91, 0, 10_000)));
    let have = next_matching(&mut b, |f| match f {
        LinkFrame::FragmentResume {
            id, total: t, have, ..
        } if id == 0x5a && t == total => Some(have),
        _ => None,
    });
    assert_eq!(have, 40_000);
    b.send_bytes(&link_frame(&fragment(&bytes, 0x5a, 1, 91, have, total)));
    let done = next_matching(&mut b, |f| match f {
        LinkFrame::Ack(Ack { done, .. }) => Some(done),
        _ => None,
    });
    assert_eq!(done, 1, "the event is acknowledged");
    let got = loop {
        match sub.recv() {
            // A version-4 subscriber of a reliable tag is delivered
            // acknowledged (`DeliverReliable`, issue 25).
            Some(Frame::Deliver { event, .. } | Frame::DeliverReliable { event, .. }) => {
                break event
            }
            Some(_) => continue,
            None => panic!("no delivery"),
        }
    };
    assert_eq!(
        Event::decode(&got).expect("event"),
        ev,
        "delivered byte for byte"
    );
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.reliable.resumes_sent, 1, "{:?}", f.reliable);
    assert_eq!(f.reliable.reassembled, 1, "{:?}", f.reliable);
}

#[test]
fn a_fragment_whose_checksum_does_not_match_closes_the_link_naming_it() {
    let h = router(4 << 20);
    let (mut a, _, _) = linked(&h, 4, 95);
    let bytes = encoded(&big_event("/far", 1, 20_000));
    let mut bad = fragment(&bytes, 7, 1, 95, 0, bytes.len() as u64);
    if let LinkFrame::Fragment { checksum, .. } = &mut bad {
        *checksum ^= 1;
    }
    a.send_bytes(&link_frame(&bad));
    let m = closing_message(&mut a);
    assert!(m.contains("checksum"), "{m}");
}

#[test]
fn a_fragment_on_a_version_3_link_closes_it_and_a_version_3_peer_gets_large_events_whole() {
    let h = router(4 << 20);
    let (mut old, v, me) = linked(&h, 3, 97);
    assert_eq!(v, 3);
    old.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: 97,
        version: 1,
        name: "raw97".into(),
        neighbors: vec![me],
        interest: vec![Interest::pattern("/r/**")],
    }));
    link_ping(&mut old, 1);
    let ev = big_event("/pub", 1, 100_000);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    publisher.send_bytes(&publish_frame(1, &ev));
    publisher.ping(2);
    let whole = next_matching(&mut old, |f| match f {
        LinkFrame::Reliable { event, .. } => Some(event),
        LinkFrame::Fragment { .. } => panic!("a Fragment on a version-3 link"),
        _ => None,
    });
    assert_eq!(whole, encoded(&ev));
    let bytes = encoded(&big_event("/far", 1, 20_000));
    old.send_bytes(&link_frame(&fragment(&bytes, 7, 1, 97, 0, 100)));
    let m = closing_message(&mut old);
    assert!(m.contains("version 3 or lower"), "{m}");
}

#[test]
fn a_blob_cut_by_core_and_sent_by_hand_reaches_the_subscriber() {
    // The pieces a daemon of another build would send (core's Outgoing),
    // as Reliable pieces: the subscriber gets the event.
    let h = router(4 << 20);
    let mut sub = Raw::hello(&h).subscriber("/s", "/r/**", &[]);
    sub.ping(1);
    let (mut a, _, _) = linked(&h, 4, 99);
    let ev = big_event("/far", 1, 50_000);
    let mut o = Outgoing::new(3, encoded(&ev), 1000).expect("fits");
    while let Some(p) = o.peek() {
        a.send_bytes(&link_frame(&LinkFrame::Fragment {
            id: p.blob.id,
            total: p.blob.total,
            checksum: p.blob.checksum,
            offset: p.offset,
            of: FragmentOf::Reliable {
                seq: 1,
                origin: 99,
                hops: 0,
            },
            data: p.data,
        }));
        o.advance();
    }
    let got = loop {
        match sub.recv() {
            // A version-4 subscriber of a reliable tag is delivered
            // acknowledged (`DeliverReliable`, issue 25).
            Some(Frame::Deliver { event, .. } | Frame::DeliverReliable { event, .. }) => {
                break event
            }
            Some(_) => continue,
            None => panic!("no delivery"),
        }
    };
    assert_eq!(Event::decode(&got).expect("event"), ev);
}

fn bounded_router(max_events: usize, max_bytes: usize) -> RouterHandle {
    Router::start(RouterConfig {
        federation: FederationConfig {
            fragment_size: PIECE,
            fragment_max_events: max_events,
            fragment_max_bytes: max_bytes,
            ..FederationConfig::default()
        },
        ..tcp_config()
    })
    .expect("start")
}

#[test]
fn at_the_reassembly_bound_the_oldest_incomplete_event_is_dropped_and_counted() {
    let h = bounded_router(1, 1 << 30);
    let (mut a, _, _) = linked(&h, 4, 101);
    let (mut b, _, _) = linked(&h, 4, 102);
    let x = encoded(&big_event("/far", 1, 20_000));
    let y = encoded(&big_event("/other", 1, 20_000));
    a.send_bytes(&link_frame(&fragment(&x, 1, 1, 101, 0, 5_000)));
    link_ping(&mut a, 1);
    b.send_bytes(&link_frame(&fragment(&y, 2, 1, 102, 0, 5_000)));
    link_ping(&mut b, 1);
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.reliable.reassembly_dropped, 1, "{:?}", f.reliable);
    // The newer one is still put together.
    b.send_bytes(&link_frame(&fragment(&y, 2, 1, 102, 5_000, y.len() as u64)));
    let done = next_matching(&mut b, |f| match f {
        LinkFrame::Ack(Ack { done, .. }) => Some(done),
        _ => None,
    });
    assert_eq!(done, 1);
}

#[test]
fn an_event_over_the_reassembly_memory_closes_the_link_naming_the_bound() {
    let h = bounded_router(16, 10_000);
    let (mut a, _, _) = linked(&h, 4, 103);
    let x = encoded(&big_event("/far", 1, 20_000));
    a.send_bytes(&link_frame(&fragment(&x, 1, 1, 103, 0, 5_000)));
    let m = closing_message(&mut a);
    assert!(m.contains("reassembly memory of 10000 bytes"), "{m}");
}
