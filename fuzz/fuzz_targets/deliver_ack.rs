//! Fuzz target: arbitrary bytes as the `DeliverReliable` frames of a daemon
//! and the `DeliverAck` frames of a subscriber (protocol version 4), handed
//! to the windows as the client library and the router do: every
//! `DeliverReliable` to a subscription's `DeliveryAcks` (checked in order,
//! acknowledged by its batching rule) and a `Dedupe` (the resend filter),
//! every `DeliverAck` to a daemon's window that wrote 64 events and holds
//! more as it goes (the router's `hold`, bounded by `is_full`). Every frame
//! that decodes re-encodes to exactly its bytes; every acknowledgement the
//! receiver builds encodes as a `DeliverAck` and decodes back; errors are
//! expected; a panic or a window over its bound is a bug.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::reliable::{
    AckBatching, Dedupe, DeliveryAcks, SendWindow, WindowFull, WindowLimits,
};
use tagwire_proto::{kind, limits::MIN_MAX_FRAME, Frame, FrameDecoder};

const BOUND: usize = 64;

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let mut window = SendWindow::new(
        WindowLimits {
            max_events: BOUND,
            max_bytes: 1 << 20,
        },
        WindowFull::Block,
    );
    let mut recv = DeliveryAcks::new(AckBatching {
        every: 8,
        after: 1_000,
    });
    let mut seen = Dedupe::new(16);
    let mut now = 0u64;
    while let Ok(Some((k, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        now += 100;
        // The daemon writes while its window has room.
        while !window.is_full() {
            window.hold((), 16, now);
        }
        if k != kind::DELIVER_RELIABLE && k != kind::DELIVER_ACK {
            continue;
        }
        let Ok(frame) = Frame::decode(k, body) else {
            continue;
        };
        let mut out = BytesMut::new();
        frame.encode(&mut out).expect("a decoded frame encodes");
        assert_eq!(&out[..], raw, "re-encoding {frame:?}");
        match frame {
            Frame::DeliverReliable { sub, seq, event } => {
                if recv.on_frame(seq, now).is_err() {
                    continue;
                }
                if let Ok(ev) = tagwire_proto::EventRef::parse(&event) {
                    let _ = seen.check(
                        tagwire_core::proxy::publisher_key(ev.publisher),
                        0,
                        ev.seq,
                        ev.source_time_ns,
                    );
                }
                if let Some(ack) = recv.poll_ack(now) {
                    let f = Frame::DeliverAck { sub, ack };
                    let mut out = BytesMut::new();
                    f.encode(&mut out).expect("a built ack encodes");
                    let (k, b) = FrameDecoder::new(MIN_MAX_FRAME)
                        .next_raw(&mut out)
                        .expect("framed")
                        .expect("whole");
                    assert_eq!(Frame::decode(k, b).expect("decodes"), f);
                }
                assert!(seen.len() <= 16);
            }
            Frame::DeliverAck { ack, .. } => {
                let before = window.len();
                if let Ok(r) = window.on_ack(&ack) {
                    assert_eq!(before - window.len(), r.done.len() + r.failed.len());
                } else {
                    assert_eq!(before, window.len(), "a refused ack releases nothing");
                }
            }
            _ => {}
        }
        assert!(window.len() <= BOUND);
    }
});
