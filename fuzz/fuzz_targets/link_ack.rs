//! Fuzz target: arbitrary bytes as the `Reliable` and `Ack` frames of a peer
//! daemon (link version 3), handed to the reliability windows as the router
//! does: every `Reliable` to a receiver window (its frames settled with 0–2
//! obligations, completed done or failed by the event's first byte), every
//! `Ack` to a sender window that sent 64 events. Every frame that decodes
//! re-encodes to exactly its bytes; every acknowledgement the receiver
//! builds encodes and decodes back; errors are expected; a panic or a
//! window over its bound is a bug.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::reliable::{Push, RecvWindow, SendWindow, WindowFull, WindowLimits};
use tagwire_proto::{limits::MIN_MAX_FRAME, link_kind, FrameDecoder, LinkFrame};

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let mut send = SendWindow::new(
        WindowLimits {
            max_events: 64,
            max_bytes: 1 << 20,
        },
        WindowFull::Reject,
    );
    for i in 0..64u32 {
        let Push::Held { seq, .. } = send.push(i, 16) else {
            panic!("an empty window of 64 takes 64 events");
        };
        send.mark_sent(seq, 0);
    }
    let mut recv = RecvWindow::new(32);
    let mut pending: Vec<(u64, bool)> = Vec::new();
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        if kind != link_kind::RELIABLE && kind != link_kind::ACK {
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
        match frame {
            LinkFrame::Reliable { seq, event, .. } => {
                let Ok(ready) = recv.on_frame(seq, event) else {
                    continue;
                };
                for (seq, event) in ready {
                    let first = event.first().copied().unwrap_or(0);
                    let n = u32::from(first % 3);
                    recv.settle(seq, n)
                        .expect("a delivered frame awaits settlement");
                    for k in 0..n {
                        pending.push((seq, first & (1 << k) != 0));
                    }
                }
                // Half the obligations complete at once, the rest later.
                let keep = pending.len() / 2;
                for (seq, failed) in pending.drain(keep..) {
                    recv.complete(seq, failed).expect("pending");
                }
                if let Some(ack) = recv.ack() {
                    let mut out = BytesMut::new();
                    LinkFrame::Ack(ack.clone())
                        .encode(&mut out)
                        .expect("a built ack encodes");
                    let (k, b) = FrameDecoder::new(MIN_MAX_FRAME)
                        .next_raw(&mut out)
                        .expect("framed")
                        .expect("whole");
                    assert_eq!(
                        LinkFrame::decode(k, b).expect("decodes"),
                        LinkFrame::Ack(ack)
                    );
                }
            }
            LinkFrame::Ack(ack) => {
                let before = send.len();
                if let Ok(r) = send.on_ack(&ack) {
                    assert_eq!(before - send.len(), r.done.len() + r.failed.len());
                } else {
                    assert_eq!(before, send.len(), "a refused ack releases nothing");
                }
            }
            _ => {}
        }
        assert!(send.len() <= 64);
    }
});
