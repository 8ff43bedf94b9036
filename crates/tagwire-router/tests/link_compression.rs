//! Compression of events on links (issue 25 item 5, link version 5;
//! docs/reliability.md "Compression on links"): an event of a tag with
//! `compression=lz4|zstd` crosses a version-5 link as a `ForwardCompressed`
//! that decompresses to the event byte for byte; a version-4 peer, an event
//! under the minimum and one that does not shrink get a plain `Forward`; a
//! compressed event from a peer is delivered whole; one declaring more than
//! the frame limit, or a bad stream, closes the link naming why and is
//! counted. An event larger than the piece size goes in pieces, not
//! compressed whole first. The "peers" are raw clients speaking link frames.

mod common;

use bytes::{Bytes, BytesMut};
use common::{event, link_frame, link_peer as peer, publish_frame, recv_link, tcp_config, Raw};
use tagwire_core::compress::{compress, decompress};
use tagwire_proto::{Codec, Event, FragmentOf, Frame, Interest, LinkFrame};
use tagwire_router::{FederationConfig, Limits, Router, RouterConfig, RouterHandle};

const MAX_FRAME: u32 = 1 << 20;

fn router(compression: &str) -> RouterHandle {
    Router::start(RouterConfig {
        limits: Limits {
            max_frame: MAX_FRAME,
            ..Limits::default()
        },
        qos: [("compression".to_string(), compression.to_string())]
            .into_iter()
            .collect(),
        ..tcp_config()
    })
    .expect("start")
}

/// JSON-like telemetry of `len` bytes: compresses well.
fn telemetry(len: usize) -> Vec<u8> {
    let mut s = String::new();
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

/// `len` bytes of an xorshift stream: does not compress.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn encoded(e: &Event) -> Bytes {
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("encodable");
    b.freeze()
}

/// A raw peer `node` saying link `version` that wants `/c/**`, past a
/// ping (its advert is in force).
fn interested_peer(h: &RouterHandle, version: u16, node: u64) -> Raw {
    let mut a = Raw::hello(h);
    a.send_bytes(&link_frame(&peer(version, node)));
    let me = match recv_link(&mut a) {
        Ok(LinkFrame::Peer {
            version: v, node, ..
        }) => {
            assert_eq!(v, version, "the router answers the version said");
            node
        }
        other => panic!("no Peer: {other:?}"),
    };
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

/// Publishes `payloads` on `/c/x` and returns the event frames the peer
/// gets for them, in order.
fn route(h: &RouterHandle, peer: &mut Raw, payloads: &[Vec<u8>]) -> Vec<(Event, LinkFrame)> {
    let mut publisher = Raw::hello(h).publisher("/pub");
    let mut sent = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let mut e = event("/pub", "/c/x", p.clone());
        e.header.seq = i as u64 + 1;
        publisher.send_bytes(&publish_frame(1, &e));
        sent.push(e);
    }
    publisher.ping(2);
    let mut got = Vec::new();
    while got.len() < sent.len() {
        match recv_link(peer) {
            Ok(f @ (LinkFrame::Forward { .. } | LinkFrame::Compressed { .. })) => got.push(f),
            Ok(_) | Err(Some(_)) => {}
            Err(None) => panic!("the link closed"),
        }
    }
    sent.into_iter().zip(got).collect()
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

#[test]
fn an_event_of_a_compressed_tag_crosses_a_version_5_link_compressed_and_decompresses_to_itself() {
    for (setting, want) in [("lz4", Codec::Lz4), ("zstd", Codec::Zstd)] {
        let h = router(setting);
        let mut a = interested_peer(&h, 5, 91);
        let got = route(&h, &mut a, &[telemetry(64 << 10)]);
        let (sent, frame) = &got[0];
        let LinkFrame::Compressed {
            of: FragmentOf::Forward { hops: 0, .. },
            codec,
            raw_len,
            data,
        } = frame
        else {
            panic!("{setting}: not a ForwardCompressed: {frame:?}");
        };
        assert_eq!(*codec, want);
        let whole = decompress(*codec, *raw_len, data, MAX_FRAME as usize).expect("decompresses");
        assert_eq!(
            Bytes::from(whole),
            encoded(sent),
            "{setting}: byte for byte"
        );
        assert!(
            data.len() * 3 < *raw_len as usize,
            "{setting}: telemetry shrinks: {} of {raw_len}",
            data.len()
        );
        let f = Raw::hello(&h).list().federation.unwrap_or_default();
        assert_eq!(f.compression.compressed, 1, "{:?}", f.compression);
        assert_eq!(f.compression.raw_bytes, *raw_len as u64);
        assert_eq!(f.compression.wire_bytes, data.len() as u64 + 5);
        let link = &f.links[0];
        assert!(
            link.bytes_out < *raw_len as u64 / 3,
            "the link counts the compressed bytes: {}",
            link.bytes_out
        );
    }
}

#[test]
fn a_version_4_peer_gets_events_of_a_compressed_tag_uncompressed() {
    let h = router("lz4");
    let mut a = interested_peer(&h, 4, 92);
    let got = route(&h, &mut a, &[telemetry(64 << 10)]);
    let (sent, frame) = &got[0];
    match frame {
        LinkFrame::Forward { event, .. } => assert_eq!(event, &encoded(sent)),
        other => panic!("a version-4 peer got {other:?}"),
    }
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.compressed, 0, "{:?}", f.compression);
}

#[test]
fn events_under_the_minimum_or_that_do_not_shrink_go_as_forwards() {
    let h = router("zstd:4KiB");
    let mut a = interested_peer(&h, 5, 93);
    let got = route(
        &h,
        &mut a,
        &[telemetry(3000), noise(64 << 10), telemetry(8 << 10)],
    );
    for (i, (sent, frame)) in got.iter().enumerate().take(2) {
        match frame {
            LinkFrame::Forward { event, .. } => assert_eq!(event, &encoded(sent), "{i}"),
            other => panic!("event {i} went as {other:?}"),
        }
    }
    assert!(
        matches!(got[2].1, LinkFrame::Compressed { .. }),
        "{:?}",
        got[2].1
    );
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.compressed, 1, "{:?}", f.compression);
    assert_eq!(f.compression.not_smaller, 1, "{:?}", f.compression);
}

#[test]
fn a_tag_without_compression_is_not_compressed_when_another_tag_is() {
    let h = router("none");
    let mut admin = Raw::hello(&h);
    admin.admin(&serde_json::json!({
        "op": "qos", "target": ["/z/**"], "set": {"compression": "lz4"}
    }));
    let mut a = interested_peer(&h, 5, 94);
    let got = route(&h, &mut a, &[telemetry(64 << 10)]);
    assert!(
        matches!(got[0].1, LinkFrame::Forward { .. }),
        "{:?}",
        got[0].1
    );
}

#[test]
fn a_compressed_event_from_a_peer_is_delivered_to_local_subscribers_whole() {
    let h = router("none");
    let mut sub = Raw::hello(&h).subscriber("/s", "/c/**", &[]);
    sub.ping(1);
    let mut a = interested_peer(&h, 5, 95);
    for codec in [Codec::Lz4, Codec::Zstd] {
        let ev = event("/far", "/c/x", telemetry(32 << 10));
        let bytes = encoded(&ev);
        let data = compress(codec, &bytes).expect("shrinks");
        a.send_bytes(&link_frame(&LinkFrame::Compressed {
            of: FragmentOf::Forward {
                origin: 95,
                hops: 0,
            },
            codec,
            raw_len: bytes.len() as u32,
            data: Bytes::from(data),
        }));
        let got = loop {
            match sub.recv() {
                Some(Frame::Deliver { event, .. }) => break event,
                Some(_) => continue,
                None => panic!("no delivery"),
            }
        };
        assert_eq!(Event::decode(&got).expect("event"), ev, "{codec:?}");
    }
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.decompressed, 2, "{:?}", f.compression);
}

#[test]
fn a_compressed_event_declaring_more_than_the_frame_limit_closes_the_link_naming_it() {
    let h = router("none");
    // Linked throughout: the listing shows the federation while a link lives.
    let _keeper = interested_peer(&h, 5, 98);
    let mut a = interested_peer(&h, 5, 96);
    // A bomb: 64 bytes of zstd that declare 256 MiB.
    let zeros = vec![0u8; 4 << 20];
    let data = compress(Codec::Zstd, &zeros).expect("zeros shrink");
    a.send_bytes(&link_frame(&LinkFrame::Compressed {
        of: FragmentOf::Forward {
            origin: 96,
            hops: 0,
        },
        codec: Codec::Zstd,
        raw_len: 256 << 20,
        data: Bytes::from(data),
    }));
    let m = closing_message(&mut a);
    assert!(
        m.contains("compressed event") && m.contains("over the limit"),
        "{m}"
    );
    // A stream that is not what it says.
    let mut b = interested_peer(&h, 5, 97);
    b.send_bytes(&link_frame(&LinkFrame::Compressed {
        of: FragmentOf::Forward {
            origin: 97,
            hops: 0,
        },
        codec: Codec::Lz4,
        raw_len: 1000,
        data: Bytes::from_static(b"\xff\xff\xff\xff not lz4"),
    }));
    let m = closing_message(&mut b);
    assert!(m.contains("lz4"), "{m}");
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.failed, 2, "{:?}", f.compression);
}

/// A router whose daemon layer says `compression` and `reliability`.
fn reliable_router(compression: &str) -> RouterHandle {
    Router::start(RouterConfig {
        limits: Limits {
            max_frame: MAX_FRAME,
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

#[test]
fn a_reliable_event_of_a_compressed_tag_crosses_a_version_5_link_as_reliable_compressed() {
    for (setting, want) in [("lz4", Codec::Lz4), ("zstd", Codec::Zstd)] {
        let h = reliable_router(setting);
        let mut a = interested_peer(&h, 5, 93);
        let mut publisher = Raw::hello(&h).publisher("/pub");
        let mut e = event("/pub", "/c/x", telemetry(64 << 10));
        e.header.seq = 1;
        publisher.send_bytes(&publish_frame(1, &e));
        publisher.ping(2);
        let frame = loop {
            match recv_link(&mut a) {
                Ok(
                    f @ (LinkFrame::Forward { .. }
                    | LinkFrame::Reliable { .. }
                    | LinkFrame::Compressed { .. }),
                ) => break f,
                Ok(_) | Err(Some(_)) => {}
                Err(None) => panic!("the link closed"),
            }
        };
        let LinkFrame::Compressed {
            of: FragmentOf::Reliable {
                seq: 1, hops: 0, ..
            },
            codec,
            raw_len,
            data,
        } = &frame
        else {
            panic!(
                "{setting}: not a ReliableCompressed: {}",
                tagwire_proto::link_frame_name(frame.kind())
            );
        };
        assert_eq!(*codec, want);
        let whole = decompress(*codec, *raw_len, data, MAX_FRAME as usize).expect("decompresses");
        assert_eq!(Bytes::from(whole), encoded(&e), "{setting}: byte for byte");
        assert!(data.len() * 3 < *raw_len as usize, "{setting}: it shrinks");
    }
}

#[test]
fn a_reliable_compressed_event_from_a_peer_is_delivered_whole_and_acknowledged() {
    let h = reliable_router("none");
    let mut sub = Raw::hello(&h).subscriber("/sub", "/c/**", &[]);
    let mut a = interested_peer(&h, 5, 94);
    let e = event("/far", "/c/x", telemetry(8 << 10));
    let raw = encoded(&e);
    let data = compress(Codec::Zstd, &raw).expect("telemetry shrinks");
    a.send_bytes(&link_frame(&LinkFrame::Compressed {
        of: FragmentOf::Reliable {
            seq: 1,
            origin: 94,
            hops: 0,
        },
        codec: Codec::Zstd,
        raw_len: raw.len() as u32,
        data: Bytes::from(data),
    }));
    match sub.recv() {
        Some(Frame::Deliver { event, .. } | Frame::DeliverReliable { event, .. }) => {
            assert!(event == raw, "delivered as it was")
        }
        _ => panic!("expected the event"),
    }
    let ack = loop {
        match recv_link(&mut a) {
            Ok(LinkFrame::Ack(ack)) => break ack,
            Ok(_) | Err(Some(_)) => {}
            Err(None) => panic!("the link closed"),
        }
    };
    assert_eq!(ack.done, 1, "{ack:?}");
}

/// An event of a compressed tag that is larger than the link's piece size
/// crosses in (uncompressed) pieces: the daemon does not compress it whole
/// on its lane only to send it raw (the compression counters stay at 0).
#[test]
fn an_event_larger_than_the_piece_size_goes_in_pieces_and_is_not_compressed_whole() {
    let h = Router::start(RouterConfig {
        federation: FederationConfig {
            fragment_size: 16 << 10,
            ..FederationConfig::default()
        },
        limits: Limits {
            max_frame: MAX_FRAME,
            ..Limits::default()
        },
        qos: [("compression".to_string(), "lz4".to_string())]
            .into_iter()
            .collect(),
        ..tcp_config()
    })
    .expect("start");
    let mut a = interested_peer(&h, 5, 95);
    let mut publisher = Raw::hello(&h).publisher("/pub");
    let e = event("/pub", "/c/x", telemetry(64 << 10));
    publisher.send_bytes(&publish_frame(1, &e));
    publisher.ping(2);
    let total = encoded(&e).len() as u64;
    let mut got = 0u64;
    while got < total {
        match recv_link(&mut a) {
            Ok(LinkFrame::Fragment { data, .. }) => got += data.len() as u64,
            Ok(f @ (LinkFrame::Compressed { .. } | LinkFrame::Forward { .. })) => {
                panic!("a large event went whole: {f:?}")
            }
            Ok(_) | Err(Some(_)) => {}
            Err(None) => panic!("the link closed"),
        }
    }
    let f = Raw::hello(&h).list().federation.unwrap_or_default();
    assert_eq!(f.compression.compressed, 0, "{:?}", f.compression);
}
