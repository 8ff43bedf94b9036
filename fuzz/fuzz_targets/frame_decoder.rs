//! Fuzz target: arbitrary bytes through the streaming `FrameDecoder`, then
//! `Frame::decode` on every split frame and `EventRef::parse` on the event of
//! every `Publish`/`Deliver`. Any panic is a bug; errors are expected.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_proto::{limits::MIN_MAX_FRAME, EventRef, Frame, FrameDecoder};

fuzz_target!(|data: &[u8]| {
    // A small limit so that length checks are exercised as well as splitting.
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        match Frame::decode(kind, body) {
            Ok(Frame::Publish { event, .. }) | Ok(Frame::Deliver { event, .. }) => {
                if let Ok(ev) = EventRef::parse(&event) {
                    // Walk the fields: the iterator must agree with parse.
                    for (name, _value) in ev.fields() {
                        let _ = ev.field(name);
                    }
                }
            }
            Ok(frame) => {
                // A decoded frame must re-encode.
                let mut out = BytesMut::new();
                let _ = frame.encode(&mut out);
            }
            Err(_) => {}
        }
    }
});
