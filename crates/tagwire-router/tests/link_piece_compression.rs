//! Compression of pieces on links (issue 25 item 5, link version 7;
//! docs/reliability.md "Compression on links"): an event of a tag with
//! `compression=lz4|zstd` that is larger than `federation.fragment_size`
//! crosses a version-7 link as pieces each compressed on its own
//! (`FragmentCompressed`), whose data decompress to the event's bytes at
//! their offsets, counted in the `compression` counters and in the link's
//! `bytes_out` as what went on the wire; a version-6 peer gets plain
//! `Fragment`s; a `FragmentCompressed` on a version-6 link, or a bad one,
//! closes the link naming why; compressed pieces from a peer, resumed after
//! a cut, are delivered whole; and between two routers a large event of a
//! compressed tag arrives intact. The "peers" are raw clients speaking link
//! frames, except in the last test.

mod common;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::{event, link_frame, link_peer as peer, publish_frame, recv_link, tcp_config, Raw};
use tagwire_core::compress::{compress, decompress};
use tagwire_core::fragment::{checksum, BlobId, Piece, Progress, Reassembler, ReassemblyLimits};
use tagwire_proto::{Ack, Codec, Event, FragmentOf, Frame, Interest, LinkFrame};
use tagwire_router::{FederationConfig, Limits, Router, RouterConfig, RouterHandle};

const PIECE: usize = 64 << 10;
const MAX_FRAME: u32 = 8 << 20;

/// A router whose daemon layer says `compression = {compression}` and
/// `reliability = reliable`, with pieces of [`PIECE`] bytes.
fn router(compression: &str, max_control: usize) -> RouterHandle {
    Router::start(RouterConfig {
        federation: FederationConfig {
            fragment_size: PIECE,
            ..FederationConfig::default()
        },
        limits: Limits {
            max_frame: MAX_FRAME,
            max_control_bytes: max_control,
            ..Limits::default()
        },
        qos: [
            ("compression".to_string(), compression.to_string()),
            ("reliability".to_string(), "reliable".to_string()),
        ]
        .into_iter()
        .collect(),
        ..tcp_config()
    })
    .expect("start")
}

/// JSON-like telemetry of `len` bytes: compresses well.
fn telemetry(len: usize) -> Vec<u8> {
    let mut s = String::with_capacity(len + 64);
    let mut i = 0u64;
    while s.len() < len {
        s.push_str(&format!(
            "{{\"sensor\":\"temp-{}\",\"value\":{}.{},\"unit\":\"C\"}}\n",
            i % 8,
            20 + i % 5,
            i % 10
        ));
        i += 1;
    }
    s.truncate(len);
    s.into_bytes()
}

fn encoded(e: &Event) -> Bytes {
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("encodable");
    b.freeze()
}

fn try_link(h: &RouterHandle, version: u16, node: u64) -> Result<(Raw, u64), String> {
    let mut raw = Raw::hello(h);
    raw.send_bytes(&link_frame(&peer(version, node)));
    match recv_link(&mut raw) {
        Ok(LinkFrame::Peer {
            version: v,
            node: r,
            ..
        }) => {
            assert_eq!(v, version, "the router answers the version said");
            Ok((raw, r))
        }
        other => Err(format!("{other:?}")),
    }
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

/// A raw peer `node` saying link `version` that wants `/c/**`.
fn interested_peer(h: &RouterHandle, version: u16, node: u64) -> Raw {
    let (mut a, me) = try_link(h, version, node).expect("the router's Peer");
    a.send_bytes(&link_frame(&LinkFrame::Advert {
        origin: node,
        version: 1,
        name: format!("raw{node}"),
        neighbors: vec![me],
        interest: vec![Interest::pattern("/c/**")],
    }));
    link_ping(&mut a, 1);
    a
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

/// 1 if event `raw`'s last piece is shorter than the default `MIN` (1 KiB,
/// so sent plain without trying), else 0.
fn short_tail(raw: &[u8]) -> usize {
    let tail = raw.len() % PIECE;
    usize::from(tail > 0 && tail < 1024)
}

/// What a peer got of one event in pieces.
struct Received {
    whole: Bytes,
    compressed: usize,
    plain: usize,
    /// Bytes of piece data on the wire (compressed data with its 5-byte
    /// codec header, or plain data).
    wire: u64,
    /// Of `wire`, the plain pieces' bytes.
    plain_bytes: u64,
}

/// Reads pieces from `a` until one event is whole, decompressing the
/// compressed ones (each checked to give exactly its `raw_len`).
fn receive_pieces(a: &mut Raw) -> Received {
    let mut r = Reassembler::new(ReassemblyLimits::default());
    let (mut compressed, mut plain, mut wire, mut plain_bytes) = (0, 0, 0u64, 0u64);
    for _ in 0..1_000_000 {
        let frame = match recv_link(a) {
            Ok(f) => f,
            Err(Some(_)) => continue,
            Err(None) => panic!("the link closed"),
        };
        let (blob, offset, data) = match frame {
            LinkFrame::FragmentCompressed {
                id,
                total,
                checksum,
                offset,
                codec,
                raw_len,
                data,
                ..
            } => {
                assert!(raw_len as usize <= PIECE, "a piece of {raw_len} bytes");
                compressed += 1;
                wire += data.len() as u64 + 5;
                let piece = decompress(codec, raw_len, &data, PIECE).expect("decompresses");
                (
                    BlobId {
                        id,
                        total,
                        checksum,
                    },
                    offset,
                    Bytes::from(piece),
                )
            }
            LinkFrame::Fragment {
                id,
                total,
                checksum,
                offset,
                data,
                ..
            } => {
                plain += 1;
                wire += data.len() as u64;
                plain_bytes += data.len() as u64;
                (
                    BlobId {
                        id,
                        total,
                        checksum,
                    },
                    offset,
                    data,
                )
            }
            LinkFrame::Reliable { .. } | LinkFrame::Compressed { .. } => {
                panic!("a large event went whole")
            }
            _ => continue,
        };
        let piece = Piece { blob, offset, data };
        if let Progress::Complete(whole) = r.on_piece(0u8, &piece).expect("valid").progress {
            return Received {
                whole,
                compressed,
                plain,
                wire,
                plain_bytes,
            };
        }
    }
    panic!("the event never completed");
}

#[test]
fn a_large_event_of_a_compressed_tag_crosses_a_version_7_link_in_compressed_pieces() {
    for setting in ["lz4", "zstd"] {
        let h = router(setting, 4 << 20);
        let mut a = interested_peer(&h, 7, 71);
        let mut publisher = Raw::hello(&h).publisher("/pub");
        let mut e = event("/pub", "/c/x", telemetry(2 << 20));
        e.header.seq = 1;
        publisher.send_bytes(&publish_frame(1, &e));
        publisher.ping(2);
        let got = receive_pieces(&mut a);
        let raw = encoded(&e);
        assert_eq!(got.whole, raw, "{setting}: byte for byte");
        assert_eq!(
            got.compressed,
            raw.len().div_ceil(PIECE) - short_tail(&raw),
            "{setting}: every piece of at least MIN (1 KiB) compressed ({} plain)",
            got.plain
        );
        assert!(
            got.wire * 5 < raw.len() as u64,
            "{setting}: {} bytes on the wire for {}",
            got.wire,
            raw.len()
        );
        a.send_bytes(&link_frame(&LinkFrame::Ack(Ack {
            done: 1,
            ranges: vec![],
        })));
        link_ping(&mut a, 3);
        let f = Raw::hello(&h).list().federation.unwrap_or_default();
        let c = &f.compression;
        assert_eq!(c.compressed, got.compressed as u64, "{setting}: {c:?}");
        assert_eq!(c.pieces, got.compressed as u64, "{setting}: {c:?}");
        let tried = raw.len() - short_tail(&raw) * (raw.len() % PIECE);
        assert_eq!(c.raw_bytes, tried as u64, "{setting}: {c:?}");
        assert_eq!(c.wire_bytes, got.wire - got.plain_bytes, "{setting}: {c:?}");
        let link = &f.links[0];
        assert!(
            link.bytes_out < raw.len() as u64 / 5,
            "{setting}: the link counts the compressed bytes: {} of {}",
            link.bytes_out,
            raw.len()
        );
    }
}

#[test]
fn a_version_6_peer_gets_plain_pieces_of_a_compressed_tag() {
    let h = router("lz4", 4 << 20);
    let mut a = interested_peer(&h, 6, 72);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    let mut e = event("/pub", "/c/x", telemetry(512 << 10));
    e.header.seq = 1;
    publisher.send_bytes(&publish_frame(1, &e));
    publisher.ping(2);
    let got = receive_pieces(&mut a);
    assert_eq!(got.whole, encoded(&e));
    assert_eq!(got.compressed, 0, "a version-6 peer got compressed pieces");
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.compressed, 0, "{:?}", f.compression);
}

/// Pieces that do not shrink go plain, counted `not_smaller`, and the
/// event still arrives whole (a mix of both frames is one event).
#[test]
fn pieces_that_do_not_shrink_go_as_plain_fragments_counted_not_smaller() {
    let h = router("zstd", 4 << 20);
    let mut a = interested_peer(&h, 7, 73);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    // Half telemetry, half noise: the noise's pieces do not shrink.
    let mut payload = telemetry(256 << 10);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    payload.extend((0..256 << 10).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    let mut e = event("/pub", "/c/x", payload);
    e.header.seq = 1;
    publisher.send_bytes(&publish_frame(1, &e));
    publisher.ping(2);
    let got = receive_pieces(&mut a);
    assert_eq!(got.whole, encoded(&e));
    assert!(got.compressed >= 3, "{} compressed", got.compressed);
    assert!(got.plain >= 3, "{} plain", got.plain);
    link_ping(&mut a, 3);
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    // The last piece, if under MIN (1 KiB), is not tried.
    assert_eq!(
        f.compression.not_smaller,
        (got.plain - short_tail(&encoded(&e))) as u64,
        "{:?}",
        f.compression
    );
}

/// A `FragmentCompressed` of the event `ev` (id 0x5a, sequence 1 from
/// daemon `origin`): its bytes `from..to` compressed with `codec` (a plain
/// `Fragment` if they do not shrink: a short last piece).
fn compressed_piece(ev: &Bytes, origin: u64, codec: Codec, from: usize, to: usize) -> LinkFrame {
    let of = FragmentOf::Reliable {
        seq: 1,
        origin,
        hops: 0,
    };
    match compress(codec, &ev[from..to]) {
        Some(data) => LinkFrame::FragmentCompressed {
            id: 0x5a,
            total: ev.len() as u64,
            checksum: checksum(ev),
            offset: from as u64,
            of,
            codec,
            raw_len: (to - from) as u32,
            data: Bytes::from(data),
        },
        None => LinkFrame::Fragment {
            id: 0x5a,
            total: ev.len() as u64,
            checksum: checksum(ev),
            offset: from as u64,
            of,
            data: ev.slice(from..to),
        },
    }
}

/// The receiving side with a cut: a peer sends the first compressed
/// pieces, its link is cut, it links again and starts the event over; the
/// router says how much it holds (raw coordinates), the rest comes
/// compressed, and the subscriber gets the event byte for byte.
#[test]
fn compressed_pieces_resumed_after_a_cut_are_delivered_whole() {
    for codec in [Codec::Lz4, Codec::Zstd] {
        let h = router("none", 4 << 20);
        let mut sub = Raw::hello(&h).subscriber("/s", "/c/**", &[]);
        sub.ping(1);
        let node = if codec == Codec::Lz4 { 74 } else { 75 };
        let ev = event("/far", "/c/x", telemetry(600 << 10));
        let bytes = encoded(&ev);
        let step = 100 << 10;
        let (mut a, _) = try_link(&h, 7, node).expect("linked");
        for from in (0..3 * step).step_by(step) {
            a.send_bytes(&link_frame(&compressed_piece(
                &bytes,
                node,
                codec,
                from,
                from + step,
            )));
        }
        link_ping(&mut a, 1);
        a.drop_without_close();
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut b, _) = loop {
            match try_link(&h, 7, node) {
                Ok(l) => break l,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("could not link again: {e}"),
            }
        };
        b.send_bytes(&link_frame(&compressed_piece(&bytes, node, codec, 0, step)));
        let have = loop {
            match recv_link(&mut b) {
                Ok(LinkFrame::FragmentResume { id: 0x5a, have, .. }) => break have,
                Ok(_) | Err(Some(_)) => continue,
                Err(None) => panic!("the link closed"),
            }
        };
        assert_eq!(have, 3 * step as u64, "{codec:?}: held in raw bytes");
        let mut from = have as usize;
        while from < bytes.len() {
            let to = (from + step).min(bytes.len());
            b.send_bytes(&link_frame(&compressed_piece(
                &bytes, node, codec, from, to,
            )));
            from = to;
        }
        let got = loop {
            match sub.recv() {
                Some(Frame::Deliver { event, .. } | Frame::DeliverReliable { event, .. }) => {
                    break event
                }
                Some(_) => continue,
                None => panic!("no delivery"),
            }
        };
        assert_eq!(Event::decode(&got).expect("event"), ev, "{codec:?}");
        let f = Raw::hello(&h).list().federation.unwrap_or_default();
        // 3 before the cut, the first again, then the rest (a short last
        // one may go plain).
        assert!(
            f.compression.pieces_decompressed >= 6,
            "{:?}",
            f.compression
        );
        assert_eq!(f.reliable.resumes_sent, 1, "{:?}", f.reliable);
    }
}

#[test]
fn a_compressed_piece_on_a_version_6_link_or_a_bad_one_closes_the_link_naming_why() {
    let h = router("none", 4 << 20);
    let _keeper = interested_peer(&h, 7, 79);
    let bytes = encoded(&event("/far", "/c/x", telemetry(200 << 10)));
    let (mut a, _) = try_link(&h, 6, 76).expect("linked");
    a.send_bytes(&link_frame(&compressed_piece(
        &bytes,
        76,
        Codec::Lz4,
        0,
        PIECE,
    )));
    let m = closing_message(&mut a);
    assert!(
        m.contains("FragmentCompressed") && m.contains("version 6"),
        "{m}"
    );
    // Declaring more than the frame limit: refused before decompressing.
    let (mut b, _) = try_link(&h, 7, 77).expect("linked");
    let mut bomb = compressed_piece(&bytes, 77, Codec::Zstd, 0, PIECE);
    if let LinkFrame::FragmentCompressed { total, raw_len, .. } = &mut bomb {
        *total = 64 << 20;
        *raw_len = 32 << 20;
    }
    b.send_bytes(&link_frame(&bomb));
    let m = closing_message(&mut b);
    assert!(
        m.contains("compressed piece") && m.contains("over the limit"),
        "{m}"
    );
    // A stream that is not what it says.
    let (mut c, _) = try_link(&h, 7, 78).expect("linked");
    let mut bad = compressed_piece(&bytes, 78, Codec::Lz4, 0, PIECE);
    if let LinkFrame::FragmentCompressed { data, .. } = &mut bad {
        *data = Bytes::from_static(b"\xff\xff\xff\xff not lz4");
    }
    c.send_bytes(&link_frame(&bad));
    let m = closing_message(&mut c);
    assert!(m.contains("compressed piece") && m.contains("lz4"), "{m}");
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.failed, 2, "{:?}", f.compression);
}

/// Two routers: the one the event is published at compresses its pieces
/// for the other (both speak link version 7), which delivers it intact.
#[test]
fn between_two_daemons_a_large_event_of_a_compressed_tag_arrives_intact_in_compressed_pieces() {
    for setting in ["lz4", "zstd"] {
        let a = router(setting, 4 << 20);
        let addr = a.tcp_addr().expect("tcp");
        let b = Router::start(RouterConfig {
            federation: FederationConfig {
                peers: vec![format!("tcp://{addr}")],
                fragment_size: PIECE,
                ..FederationConfig::default()
            },
            limits: Limits {
                max_frame: MAX_FRAME,
                ..Limits::default()
            },
            ..tcp_config()
        })
        .expect("start the peer");
        let mut sub = Raw::hello(&b).subscriber("/s", "/c/**", &[]);
        sub.ping(1);
        // Until a knows b's interest.
        let mut admin = Raw::hello(&a);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let f = admin.list().federation.unwrap_or_default();
            if !f.links.is_empty() && f.known.iter().any(|d| d.interest > 0) {
                break;
            }
            assert!(Instant::now() < deadline, "b's interest never reached a");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut publisher = Raw::hello(&a).publisher("/pub");
        let mut e = event("/pub", "/c/x", telemetry(4 << 20));
        e.header.seq = 1;
        publisher.send_bytes(&publish_frame(1, &e));
        publisher.ping(2);
        let got = loop {
            match sub.recv() {
                Some(Frame::Deliver { event, .. } | Frame::DeliverReliable { event, .. }) => {
                    break event
                }
                Some(_) => continue,
                None => panic!("{setting}: no delivery"),
            }
        };
        assert!(got == encoded(&e), "{setting}: delivered byte for byte");
        let fa = admin.list().federation.unwrap_or_default();
        let raw = encoded(&e).len() as u64;
        assert!(fa.compression.pieces > 0, "{setting}: {:?}", fa.compression);
        let out: u64 = fa.links.iter().map(|l| l.bytes_out).sum();
        assert!(
            out < raw / 5,
            "{setting}: {out} bytes out for an event of {raw}"
        );
        let fb = Raw::hello(&b).list().federation.unwrap_or_default();
        assert_eq!(
            fb.compression.pieces_decompressed, fa.compression.pieces,
            "{setting}: b decompressed every piece a compressed"
        );
        println!(
            "{setting}: event of {raw} bytes, {} on the wire in {} compressed pieces",
            fa.compression.wire_bytes, fa.compression.pieces
        );
    }
}

/// The sending side of a resume: the peer takes the first compressed
/// piece and says it holds more (as a daemon that held part of the event
/// before a cut does, in raw bytes); the router goes on at that point,
/// still compressed, and skips what the peer holds.
#[test]
fn a_fragment_resume_moves_a_compressing_sender_on_to_the_peers_raw_point() {
    for setting in ["lz4", "zstd"] {
        let h = router(setting, 256 << 10);
        let node = if setting == "lz4" { 81 } else { 82 };
        let mut a = interested_peer(&h, 7, node);
        let mut publisher = Raw::hello(&h).publisher("/pub");
        let mut e = event("/pub", "/c/x", telemetry(2 << 20));
        e.header.seq = 1;
        publisher.send_bytes(&publish_frame(1, &e));
        publisher.ping(2);
        let raw = encoded(&e);
        let total = raw.len() as u64;
        let have = 20 * PIECE as u64;
        let mut offsets = Vec::new();
        let mut resumed = false;
        loop {
            let (id, sum, offset, len, compressed) = match recv_link(&mut a) {
                Ok(LinkFrame::FragmentCompressed {
                    id,
                    checksum,
                    offset,
                    raw_len,
                    codec,
                    data,
                    ..
                }) => {
                    // Each piece is the event's bytes at its raw offset.
                    let piece = decompress(codec, raw_len, &data, PIECE).expect("decompresses");
                    assert_eq!(
                        &piece[..],
                        &raw[offset as usize..offset as usize + piece.len()],
                        "{setting}: the piece at {offset}"
                    );
                    (id, checksum, offset, u64::from(raw_len), true)
                }
                Ok(LinkFrame::Fragment {
                    id,
                    checksum,
                    offset,
                    data,
                    ..
                }) => (id, checksum, offset, data.len() as u64, false),
                Ok(_) | Err(Some(_)) => continue,
                Err(None) => panic!("the link closed"),
            };
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
            assert!(compressed, "{setting}: a piece before the last went plain");
        }
        assert!(
            offsets.contains(&have),
            "{setting}: sending went on at the resume point {have}: {offsets:?}"
        );
        assert!(
            offsets.len() < 20,
            "{setting}: the pieces the peer held were skipped: {offsets:?}"
        );
        link_ping(&mut a, 3);
        let f = Raw::hello(&h).list().federation.unwrap_or_default();
        assert_eq!(f.reliable.resumes_taken, 1, "{setting}: {:?}", f.reliable);
    }
}
