//! Fuzz target: arbitrary bytes as the `PublishReliable` frames of a client
//! and the `PublishAck` frames of a daemon (protocol version 4), handed to
//! the windows as the router and the client library do: every
//! `PublishReliable` to a receiver window (the router takes only the next
//! expected sequence number, then settles it with 0–2 link obligations,
//! completed done or failed by the event's first byte), every `PublishAck`
//! to a sender window that sent 64 events (the library's). Every frame
//! that decodes re-encodes to exactly its bytes; every acknowledgement the
//! receiver builds encodes as a `PublishAck` and decodes back; errors are
//! expected; a panic or a window over its bound is a bug.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::reliable::{Push, RecvWindow, SendWindow, WindowFull, WindowLimits};
use tagwire_proto::{kind, limits::MIN_MAX_FRAME, Frame, FrameDecoder};

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let mut send = SendWindow::new(
        WindowLimits {
            max_events: 64,
            max_bytes: 1 << 20,
        },
        WindowFull::Block,
    );
    for i in 0..64u32 {
        let Push::Held { seq, .. } = send.push(i, 16) else {
            panic!("an empty window of 64 takes 64 events");
        };
        send.mark_sent(seq, 0);
    }
    let mut recv = RecvWindow::new(tagwire_proto::MAX_RELIABLE_WINDOW);
    let mut pending: Vec<(u64, bool)> = Vec::new();
    while let Ok(Some((k, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        if k != kind::PUBLISH_RELIABLE && k != kind::PUBLISH_ACK {
            continue;
        }
        let Ok(frame) = Frame::decode(k, body) else {
            continue;
        };
        let mut out = BytesMut::new();
        frame.encode(&mut out).expect("a decoded frame encodes");
        assert_eq!(&out[..], raw, "re-encoding {frame:?}");
        match frame {
            Frame::PublishReliable { seq, event, .. } => {
                // The router refuses any other number (the connection keeps order).
                if seq != recv.expected() {
                    continue;
                }
                let ready = recv
                    .on_frame(seq, ())
                    .expect("the expected number is taken");
                assert_eq!(ready.len(), 1);
                let first = event.first().copied().unwrap_or(0);
                let n = u32::from(first % 3);
                recv.settle(seq, n)
                    .expect("a delivered frame awaits settlement");
                for b in 0..n {
                    pending.push((seq, first & (1 << b) != 0));
                }
                let keep = pending.len() / 2;
                for (seq, failed) in pending.drain(keep..) {
                    recv.complete(seq, failed).expect("pending");
                }
                if let Some(ack) = recv.ack() {
                    let mut out = BytesMut::new();
                    Frame::PublishAck(ack.clone())
                        .encode(&mut out)
                        .expect("a built ack encodes");
                    let (k, b) = FrameDecoder::new(MIN_MAX_FRAME)
                        .next_raw(&mut out)
                        .expect("framed")
                        .expect("whole");
                    assert_eq!(
                        Frame::decode(k, b).expect("decodes"),
                        Frame::PublishAck(ack)
                    );
                }
            }
            Frame::PublishAck(ack) => {
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
