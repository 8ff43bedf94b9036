//! Hostile and careless clients against the router's memory budget, timeouts
//! and error bounds (issue 12): a stalled subscriber that dies gives its
//! queue back, small queued events stay within the byte bound, frames past
//! the memory budget are refused, sockets that never say `Hello` are closed
//! and cannot lock out real clients, idle peers are pinged then closed, and
//! a stream of bad frames closes its connection. In every case a healthy
//! client is still served.
//!
//! Clients here are in-process sockets (Unix socket pairs with small kernel
//! buffers), so a client that does not read stalls its queue quickly.

mod common;

use std::time::{Duration, Instant};

use common::{stalled_subscriber, start, wait_for, Raw, WAIT};
use tagwire_proto::{ErrorCode, Frame};
use tagwire_router::Limits;

#[test]
fn a_stalled_subscriber_that_dies_gives_its_queued_bytes_back() {
    let h = start(Limits::default());
    let stalled = stalled_subscriber(&h, "/stalled", "/big/**");
    let mut publisher = Raw::hello(&h).publisher("/pub");
    // 64 KiB events until the stalled queue holds some (the kernel buffers
    // of the in-process socket take the first few).
    let l = {
        let deadline = Instant::now() + WAIT;
        loop {
            publisher.publish_many(1, "/pub", "/big/x", 64 * 1024, 16);
            let l = publisher.list();
            if l.memory.buffered_bytes > 8 * 64 * 1024 {
                break l;
            }
            assert!(Instant::now() < deadline, "the queue never filled: {l:?}");
        }
    };
    assert!(l.subscriptions.iter().any(|s| s.queue_depth > 0));
    // The subscriber dies with a full queue.
    drop(stalled);
    let l = wait_for(&mut publisher, "the queue to be freed", |l| {
        l.memory.buffered_bytes == 0
    });
    assert!(l.subscriptions.is_empty(), "{:?}", l.subscriptions);
    assert_eq!(l.connections.len(), 1, "only the publisher is left");
}

#[test]
fn small_events_queued_to_a_stalled_subscriber_stay_within_the_byte_bound() {
    let max_queue_bytes = 256 * 1024;
    let h = start(Limits {
        max_queue_bytes,
        ..Limits::default()
    });
    let _stalled = stalled_subscriber(&h, "/stalled", "/small/**");
    let mut publisher = Raw::hello(&h).publisher("/pub");
    // 65,536 small events (about 44 bytes each, 1,000+ per read chunk).
    for _ in 0..16 {
        publisher.publish_many(1, "/pub", "/small/x", 4, 4096);
    }
    let l = publisher.list();
    let sub = &l.subscriptions[0];
    assert!(sub.dropped > 0, "the queue reached its bound: {sub:?}");
    assert!(sub.queue_depth > 0);
    // What the queue counts is what it keeps alive (each event in a buffer
    // of its own size, not a slice of a 64 KiB read chunk), and it stays
    // within the byte bound.
    assert!(
        l.memory.buffered_bytes as usize <= max_queue_bytes,
        "{} > {max_queue_bytes}",
        l.memory.buffered_bytes
    );
    assert!(
        l.memory.buffered_bytes as usize >= sub.queue_depth * 40,
        "counted at least the events' own size"
    );
}

#[test]
fn queues_share_the_memory_budget_and_drop_at_it() {
    let max_buffered_bytes = 256 * 1024;
    let h = start(Limits {
        max_frame: 64 * 1024,
        max_buffered_bytes,
        max_queue_bytes: 1 << 30,
        ..Limits::default()
    });
    let _a = stalled_subscriber(&h, "/a", "/data/**");
    let _b = stalled_subscriber(&h, "/b", "/data/**");
    let mut publisher = Raw::hello(&h).publisher("/pub");
    for _ in 0..8 {
        publisher.publish_many(1, "/pub", "/data/x", 1000, 1000);
    }
    let l = publisher.list();
    assert!(l.memory.buffered_bytes as usize <= max_buffered_bytes);
    assert!(l.memory.discarded_events > 0, "{:?}", l.memory);
    assert!(l.subscriptions.iter().all(|s| s.dropped > 0));
    publisher.expect_alive();
}

#[test]
fn frames_past_the_memory_budget_are_refused_and_the_budget_comes_back() {
    let frame = 16 * 1024 * 1024;
    let h = start(Limits {
        max_frame: frame,
        max_buffered_bytes: 40 * 1024 * 1024,
        ..Limits::default()
    });
    let mut admin = Raw::hello(&h);
    // Two connections announce a 16 MiB frame each and then stall.
    let mut big = Vec::new();
    for i in 0..2 {
        let mut c = Raw::hello(&h);
        let mut header = (frame - 1).to_le_bytes().to_vec();
        header.extend_from_slice(&[0x06, 1, 0, 0, 0]);
        c.send_bytes(&header);
        big.push(c);
        wait_for(&mut admin, "the frame's reservation", |l| {
            l.memory.buffered_bytes >= (i as u64 + 1) * u64::from(frame)
        });
    }
    // The third does not fit: refused with LimitReached naming the budget.
    let mut third = Raw::hello(&h);
    third.send_bytes(&(frame - 1).to_le_bytes());
    third.expect_error(ErrorCode::LimitReached, "max_buffered_bytes");
    third.expect_closed();
    // A healthy client is still served.
    let mut healthy = Raw::hello(&h);
    healthy.expect_alive();
    let l = admin.list();
    assert_eq!(l.memory.refused_connections, 1);
    // When the two leave, the budget comes back.
    drop(big);
    wait_for(&mut admin, "the budget to come back", |l| {
        l.memory.buffered_bytes == 0
    });
}

#[test]
fn a_socket_that_never_says_hello_is_closed_after_the_handshake_timeout() {
    let h = start(Limits {
        handshake_timeout: Duration::from_millis(200),
        ..Limits::default()
    });
    let mut silent = Raw::connect(&h);
    silent.expect_error(ErrorCode::HandshakeRequired, "handshake_timeout");
    silent.expect_closed();
    Raw::hello(&h).expect_alive();
}

#[test]
fn sockets_waiting_for_their_handshake_at_their_bound_do_not_stop_a_real_client() {
    let h = start(Limits {
        max_pending_handshakes: 4,
        max_connections: 8,
        ..Limits::default()
    });
    let mut established = Raw::hello(&h);
    let mut idle: Vec<Raw> = (0..4).map(|_| Raw::connect(&h)).collect();
    wait_for(&mut established, "four waiting sockets", |l| {
        l.connections.len() == 5
    });
    // A real client connects while four sockets wait: it gets through, and
    // the oldest waiting socket is closed to make room.
    let mut client = Raw::hello(&h);
    client.expect_alive();
    idle[0].expect_error(ErrorCode::LimitReached, "max_pending_handshakes");
    idle[0].expect_closed();
    established.expect_alive();
    let l = established.list();
    assert_eq!(l.connections.len(), 2 + 3, "two established, three waiting");
}

#[test]
fn an_idle_connection_is_pinged_and_closed_if_it_does_not_answer() {
    let h = start(Limits {
        idle_timeout: Duration::from_millis(200),
        ..Limits::default()
    });
    // One that answers its Pings stays.
    let mut lively = Raw::hello(&h);
    for _ in 0..2 {
        match lively.recv_control() {
            Some(Frame::Ping { nonce }) => lively.send(&Frame::Pong { nonce }),
            other => panic!("expected a Ping, got {other:?}"),
        }
    }
    lively.expect_alive();
    // One that never sends anything is closed.
    let mut silent = Raw::hello(&h);
    assert!(matches!(silent.recv_control(), Some(Frame::Ping { .. })));
    silent.expect_error(ErrorCode::LimitReached, "idle_timeout");
    silent.expect_closed();
}

#[test]
fn a_connection_sending_bad_frames_is_closed_after_the_protocol_error_bound() {
    let h = start(Limits {
        max_protocol_errors: 5,
        ..Limits::default()
    });
    let mut healthy = Raw::hello(&h);
    let mut bad = Raw::hello(&h);
    // Frames of an unknown type (0x7f), ten of them.
    let mut junk = Vec::new();
    for _ in 0..10 {
        junk.extend_from_slice(&[2, 0, 0, 0, 0x7f, 0]);
    }
    bad.send_bytes(&junk);
    for _ in 0..5 {
        bad.expect_error(ErrorCode::UnknownFrameType, "");
    }
    bad.expect_error(ErrorCode::LimitReached, "max_protocol_errors");
    bad.expect_closed();
    healthy.expect_alive();
}
