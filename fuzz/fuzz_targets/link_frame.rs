//! Fuzz target: arbitrary bytes as frames from a peer daemon. Every link
//! frame that decodes re-encodes to exactly its bytes; every `Advert` is
//! applied to a routing table (core's `Topology`), which then computes next
//! hops for the events of every `Forward`. Errors are expected; a panic is a
//! bug.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::federation::{Limits, Topology};
use tagwire_proto::{is_link_kind, limits::MIN_MAX_FRAME, EventRef, FrameDecoder, LinkFrame};

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let mut topo = Topology::new(
        1,
        "fuzz",
        Limits {
            max_nodes: 16,
            max_interest: 16,
            ..Limits::default()
        },
    );
    let _ = topo.set_neighbors(vec![2, 3]);
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        if !is_link_kind(kind) {
            continue;
        }
        let Ok(frame) = LinkFrame::decode(kind, body) else {
            continue;
        };
        let mut out = BytesMut::new();
        frame.encode(&mut out).expect("a decoded link frame encodes");
        assert_eq!(&out[..], raw, "re-encoding {frame:?}");
        match frame {
            LinkFrame::Advert { .. } => {
                let _ = topo.apply(frame);
                topo.prune();
            }
            LinkFrame::Forward { origin, event, .. } => {
                if let Ok(ev) = EventRef::parse(&event) {
                    let _ = topo.next_hops(origin, &ev);
                }
            }
            _ => {}
        }
    }
});
