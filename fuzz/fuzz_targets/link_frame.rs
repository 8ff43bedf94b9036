//! Fuzz target: arbitrary bytes as frames from a peer daemon. Every link
//! frame that decodes re-encodes to exactly its bytes; every one is handed
//! to a node engine (core's `Node`, as the daemon does), from one of its
//! two neighbours: adverts, pulls and answers to `on_link_frame`, the
//! events of `Forward`s to `on_forward`, a `ReliableTo`'s to the way on
//! toward its daemon and the hold for daemons that are away. Errors are expected; a panic or a
//! frame for a link that is not up is a bug. (The same with structured
//! input runs in CI: crates/tagwire-core/tests/node_bad_input.rs.)
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::federation::Limits;
use tagwire_core::filter::Overrides;
use tagwire_core::node::{Node, NodeLimits, Output, Sink};
use tagwire_proto::{is_link_kind, limits::MIN_MAX_FRAME, EventRef, FrameDecoder, LinkFrame};

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let limits = NodeLimits {
        federation: Limits {
            max_nodes: 16,
            max_interest: 16,
            ..Limits::default()
        },
        max_pending_pulls: 8,
        ..NodeLimits::default()
    };
    let mut node: Node<u32> = Node::new(1, "fuzz", limits, 0);
    node.link_up(2);
    node.link_up(3);
    let mut now = 1_000_000_000u64;
    let mut from = 2;
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
        frame
            .encode(&mut out)
            .expect("a decoded link frame encodes");
        assert_eq!(&out[..], raw, "re-encoding {frame:?}");
        now += 1_000_000;
        from = if from == 2 { 3 } else { 2 };
        match frame {
            LinkFrame::Forward {
                origin,
                hops,
                event,
            } => {
                if let Ok(ev) = EventRef::parse(&event) {
                    let _ = node.on_forward(from, origin, hops, &ev, || now, &mut Ignore);
                }
            }
            LinkFrame::ReliableTo {
                origin, to, event, ..
            } => {
                // As the router does: the way on toward `to`, and (at the
                // origin) the hold again; neither may panic.
                if let Some(next) = node.next_hop_toward(origin, to) {
                    assert!(
                        next == 2 || next == 3,
                        "a ReliableTo for link {next}, which is not up"
                    );
                }
                if let Ok(ev) = EventRef::parse(&event) {
                    let label: std::sync::Arc<str> = "normal".into();
                    let _ = node.hold_again(to, &ev, &event, &label, now);
                    if node.has_away() {
                        let _ = node.hold_for_away(&ev, &event, &label, now);
                    }
                }
            }
            other => {
                let _ = node.on_link_frame(from, other, now);
            }
        }
        while let Some(out) = node.poll_output() {
            if let Output::Link { to, .. } = out {
                assert!(to == 2 || to == 3, "a frame for link {to}, which is not up");
            }
        }
        let _ = node.handle_timeout(now);
    }
});

/// Where routed events go: nowhere (the decisions are what is fuzzed).
struct Ignore;

impl Sink<u32> for Ignore {
    fn channel(&mut self, _: &u32, _: Overrides) {}
    fn link(&mut self, to: u64, _origin: u64, _hops: u8) {
        assert!(
            to == 2 || to == 3,
            "an event for link {to}, which is not up"
        );
    }
}
