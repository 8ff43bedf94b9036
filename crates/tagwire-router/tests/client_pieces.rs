//! Issue 25 item 5: events larger than a client connection's frame, in
//! pieces (protocol version 5, `PublishPiece`/`DeliverPiece`/`PieceResume`;
//! docs/reliability.md, "Pieces on client connections"). Raw clients with
//! a small configured frame: a publisher sends an event in pieces, the
//! daemon puts it together (bounded, charged to the memory budget) and
//! delivers it in pieces; a session that reconnects resumes where the
//! daemon stands; bad pieces close that connection alone.

mod common;

use bytes::{Bytes, BytesMut};
use common::{event, owner_token, start_tcp, Raw};
use tagwire_core::fragment::checksum;
use tagwire_proto::{EndpointKind, ErrorCode, Frame, PieceOf};
use tagwire_router::config::Limits;

const FRAME: u32 = 16 * 1024;
const PIECE: usize = 8 * 1024;

fn limits() -> Limits {
    Limits {
        max_frame: FRAME,
        ..Limits::default()
    }
}

/// An encoded event of about `len` bytes from publisher `/big/pub`.
fn big_event(len: usize) -> Bytes {
    let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let ev = event("/big/pub", "/big/x", payload);
    let mut b = BytesMut::new();
    ev.encode(&mut b).expect("encode");
    b.freeze()
}

/// The piece at `at` of an event of `len` bytes whose checksum is `sum`
/// (computed once per event: per piece, a 32 MiB event's test was quadratic).
fn piece_of(len: usize, sum: u32, at: usize) -> PieceOf {
    PieceOf {
        id: 0x51,
        total: len as u64,
        checksum: sum,
        offset: at as u64,
    }
}

/// Sends the pieces of `ev` covering `range` (in `PIECE`-byte steps).
fn send_pieces(p: &mut Raw, ev: &Bytes, seq: u64, range: std::ops::Range<usize>) {
    let sum = checksum(ev);
    let mut at = range.start;
    while at < range.end {
        let end = (at + PIECE).min(range.end);
        p.send(&Frame::PublishPiece {
            endpoint: 1,
            seq,
            of: piece_of(ev.len(), sum, at),
            data: ev.slice(at..end),
        });
        at = end;
    }
}

/// Reads the pieces of one event of subscription 1 until it is whole:
/// `DeliverPiece`s, or with `seq` the `DeliverReliablePiece`s of that
/// delivery number; `None` after `first` pieces if that many are read first
/// (the caller stops reading there).
fn receive_pieces(s: &mut Raw, seq: Option<u64>, first: Option<usize>) -> Option<Bytes> {
    let mut buf: Option<Vec<u8>> = None;
    let (mut got, mut pieces) = (0u64, 0usize);
    loop {
        if first.is_some_and(|n| pieces == n) {
            return None;
        }
        let (sub, of, data, prefix) = match (s.recv(), seq) {
            (Some(Frame::DeliverPiece { sub, of, data }), None) => (sub, of, data, 32),
            (
                Some(Frame::DeliverReliablePiece {
                    sub,
                    seq: n,
                    of,
                    data,
                }),
                Some(want),
            ) => {
                assert_eq!(n, want, "delivery {want}");
                (sub, of, data, 40)
            }
            (Some(f @ (Frame::Deliver { .. } | Frame::DeliverReliable { .. })), _) => {
                panic!(
                    "a whole {} of an event over the frame",
                    tagwire_proto::frame_name(f.kind())
                )
            }
            (Some(Frame::DeliverPiece { .. } | Frame::DeliverReliablePiece { .. }), _) => {
                panic!("pieces of the other kind (wanted delivery number {seq:?})")
            }
            (Some(_), _) => continue,
            (None, _) => panic!("the subscriber's connection ended before the event was whole"),
        };
        assert_eq!(sub, 1);
        assert!(
            1 + prefix + data.len() <= FRAME as usize,
            "a piece fits the frame"
        );
        let b = buf.get_or_insert_with(|| vec![0; of.total as usize]);
        b[of.offset as usize..of.offset as usize + data.len()].copy_from_slice(&data);
        got += data.len() as u64;
        pieces += 1;
        if got == of.total {
            let whole = Bytes::from(buf.take().expect("buffer"));
            assert_eq!(checksum(&whole), of.checksum, "the pieces' checksum");
            return Some(whole);
        }
    }
}

/// Reads `DeliverPiece`s of subscription 1 until one event is whole.
fn receive_in_pieces(s: &mut Raw) -> Bytes {
    receive_pieces(s, None, None).expect("read to the end")
}

#[test]
fn an_event_larger_than_the_frame_is_published_and_delivered_in_pieces() {
    let h = start_tcp(limits());
    let mut sub = Raw::hello_tcp_with(&h, FRAME).subscriber("/big/sub", "/big/**", &[]);
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(100 * 1024);
    assert!(ev.len() > FRAME as usize);
    send_pieces(&mut p, &ev, 0, 0..ev.len());
    let got = receive_in_pieces(&mut sub);
    assert_eq!(got, ev, "the subscriber gets the event as published");
    p.expect_alive();
}

/// The 2 GiB run's dropped subscriber (BENCHMARKS.md, "2 GiB through two
/// cuts"): the daemon wrote every piece of an event in one go, so its idle
/// probe's `Ping` (or any control frame) waited for the whole event and the
/// subscriber could not answer in time. A control frame now goes between
/// pieces: a `Pong` reaches a subscriber that is part-way through a 32 MiB
/// delivery before the event's last piece, and the event still arrives whole.
#[test]
fn a_pong_goes_between_the_pieces_of_a_large_delivery() {
    let h = start_tcp(limits());
    let mut sub = Raw::hello_tcp_with(&h, FRAME).subscriber("/big/sub", "/big/**", &[]);
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(32 << 20);
    send_pieces(&mut p, &ev, 0, 0..ev.len());
    let mut whole = vec![0u8; ev.len()];
    let mut got = 0usize;
    let take = |whole: &mut Vec<u8>, got: &mut usize, of: PieceOf, data: Bytes| {
        assert_eq!(of.total, whole.len() as u64);
        whole[of.offset as usize..of.offset as usize + data.len()].copy_from_slice(&data);
        *got += data.len();
    };
    // The delivery has begun, and the kernel's buffers are full of it.
    match sub.recv() {
        Some(Frame::DeliverPiece { of, data, .. }) => take(&mut whole, &mut got, of, data),
        other => panic!("expected the first piece, got {other:?}"),
    };
    sub.send(&Frame::Ping { nonce: 7 });
    let mut pong_at = None;
    while got < ev.len() {
        match sub.recv() {
            Some(Frame::DeliverPiece { of, data, .. }) => take(&mut whole, &mut got, of, data),
            Some(Frame::Pong { nonce }) => {
                assert_eq!(nonce, 7);
                pong_at = Some(got);
            }
            other => panic!("expected pieces and a Pong, got {other:?}"),
        }
    }
    let pong_at = pong_at.unwrap_or_else(|| {
        match sub.recv() {
            Some(Frame::Pong { nonce: 7 }) => {}
            other => panic!("expected the Pong, got {other:?}"),
        }
        ev.len()
    });
    assert!(
        pong_at < ev.len(),
        "the Pong came after all {} bytes of the event: control frames wait for a whole delivery",
        ev.len()
    );
    assert_eq!(
        Bytes::from(whole),
        ev,
        "the event arrives whole around the Pong"
    );
}

#[test]
fn a_session_that_reconnects_resumes_its_reliable_event_where_the_daemon_stands() {
    let h = start_tcp(limits());
    let token = owner_token(&h);
    let session = [7u8; 16];
    let mut sub = Raw::hello_tcp_with(&h, FRAME).subscriber("/big/sub", "/big/**", &[]);
    let ev = big_event(64 * 1024);
    let half = 4 * PIECE;
    let mut p = Raw::welcomed_as(&h, &token, session);
    p.declare(1, EndpointKind::Publisher, "/big/pub");
    send_pieces(&mut p, &ev, 1, 0..half);
    p.expect_alive();
    p.drop_without_close();

    // The session's next connection sends the event again from its start.
    let mut p = Raw::welcomed_as(&h, &token, session);
    p.declare(1, EndpointKind::Publisher, "/big/pub");
    send_pieces(&mut p, &ev, 1, 0..PIECE);
    match p.recv_control() {
        Some(Frame::PieceResume { endpoint, id, have }) => {
            assert_eq!((endpoint, id), (1, 0x51));
            assert_eq!(
                have, half as u64,
                "the daemon holds what the first connection sent"
            );
        }
        other => panic!("expected PieceResume, got {other:?}"),
    }
    send_pieces(&mut p, &ev, 1, half..ev.len());
    match p.recv_control() {
        Some(Frame::PublishAck(ack)) => assert_eq!(ack.done, 1, "{ack:?}"),
        other => panic!("expected the PublishAck of the event, got {other:?}"),
    }
    assert_eq!(receive_in_pieces(&mut sub), ev);
}

#[test]
fn a_piece_whose_event_fails_its_checksum_closes_only_that_connection() {
    let h = start_tcp(limits());
    let mut other = Raw::hello_tcp_with(&h, FRAME).publisher("/big/other");
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(40 * 1024);
    let mut bad = ev.to_vec();
    bad[1000] ^= 0xff;
    let bad = Bytes::from(bad);
    let sum = checksum(&ev);
    let mut at = 0;
    while at < bad.len() {
        let end = (at + PIECE).min(bad.len());
        p.send(&Frame::PublishPiece {
            endpoint: 1,
            seq: 0,
            of: piece_of(ev.len(), sum, at),
            data: bad.slice(at..end),
        });
        at = end;
    }
    match p.recv_control() {
        Some(Frame::Close { code, reason }) => {
            assert_eq!(code, ErrorCode::Malformed.code());
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected a Close naming the checksum, got {other:?}"),
    }
    p.expect_closed();
    other.expect_alive();
}

#[test]
fn an_event_over_the_pieced_limit_closes_the_connection_naming_it() {
    let h = start_tcp(Limits {
        max_pieced_event: 32 * 1024,
        ..limits()
    });
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(40 * 1024);
    send_pieces(&mut p, &ev, 0, 0..PIECE);
    match p.recv_control() {
        Some(Frame::Close { reason, .. }) => {
            assert!(reason.contains("over the limit of 32768"), "{reason}")
        }
        other => panic!("expected a Close naming the limit, got {other:?}"),
    }
}

#[test]
fn an_event_in_pieces_over_the_memory_budget_is_refused_and_the_connection_lives() {
    let h = start_tcp(Limits {
        max_buffered_bytes: 64 * 1024,
        ..limits()
    });
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(200 * 1024);
    send_pieces(&mut p, &ev, 0, 0..ev.len());
    p.expect_error(ErrorCode::LimitReached, "max_buffered_bytes");
    p.expect_alive();
}

fn reliable() -> Vec<(String, String)> {
    vec![("reliability".into(), "reliable".into())]
}

fn unacked(p: &mut Raw, endpoint: &str) -> usize {
    p.list()
        .subscriptions
        .into_iter()
        .find(|s| s.endpoint == endpoint)
        .and_then(|s| s.acked)
        .expect("an acknowledged subscription")
        .unacked
}

/// Version 6: an acknowledged (`reliable`) subscription gets an event
/// larger than its frame as `DeliverReliablePiece`s under one delivery
/// number, held in its window until the subscriber's `DeliverAck`; the next
/// event is number 2 (before, such an event was counted `too_large` and
/// never delivered).
#[test]
fn a_reliable_subscription_gets_a_large_event_in_numbered_pieces_held_until_acknowledged() {
    let h = start_tcp(limits());
    let mut sub = Raw::hello_tcp_with(&h, FRAME).subscriber("/big/sub", "/big/**", &reliable());
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(100 * 1024);
    send_pieces(&mut p, &ev, 0, 0..ev.len());
    p.publish_event(1, &event("/big/pub", "/big/x", "small"));
    assert_eq!(receive_pieces(&mut sub, Some(1), None), Some(ev));
    match sub.recv() {
        Some(Frame::DeliverReliable { sub: 1, seq, .. }) => assert_eq!(seq, 2),
        other => panic!("expected DeliverReliable 2, got {other:?}"),
    }
    assert_eq!(
        unacked(&mut p, "/big/sub"),
        2,
        "both held until acknowledged"
    );
    sub.send(&Frame::DeliverAck {
        sub: 1,
        ack: tagwire_proto::Ack {
            done: 2,
            ranges: vec![],
        },
    });
    sub.ping(7);
    assert_eq!(unacked(&mut p, "/big/sub"), 0);
}

/// The last hop resumes too: a reliable subscriber whose connection drops
/// part-way through an event in pieces gets the whole event again, from
/// its first piece, on the subscription its session makes again.
#[test]
fn a_reliable_subscriber_cut_off_mid_pieces_gets_the_whole_event_after_its_reconnect() {
    let h = start_tcp(limits());
    let token = owner_token(&h);
    let session = [9u8; 16];
    let mut sub = Raw::welcomed_as(&h, &token, session);
    sub.declare(1, EndpointKind::Subscriber, "/big/sub");
    sub.subscribe(1, 1, "/big/**", &reliable());
    let mut p = Raw::hello_tcp_with(&h, FRAME).publisher("/big/pub");
    let ev = big_event(512 * 1024);
    send_pieces(&mut p, &ev, 0, 0..ev.len());
    assert_eq!(
        receive_pieces(&mut sub, Some(1), Some(3)),
        None,
        "three pieces read"
    );
    sub.drop_without_close();

    let mut sub = Raw::welcomed_as(&h, &token, session);
    sub.declare(1, EndpointKind::Subscriber, "/big/sub");
    sub.subscribe(1, 1, "/big/**", &reliable());
    assert_eq!(
        receive_pieces(&mut sub, Some(1), None),
        Some(ev),
        "the whole event, numbered anew on the new connection"
    );
}
