//! Fuzz target: arbitrary bytes as a peer daemon's `ForwardCompressed` and
//! `ReliableCompressed` frames (link version 5), decompressed as the router
//! does (tagwire-core's compress module) under a small limit. Every frame
//! that decodes re-encodes to exactly its bytes; errors are expected; a
//! panic, an output longer or shorter than the declared length, or one
//! over the limit is a bug. A decompressed event compresses again and
//! round-trips.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::compress::{compress, decompress};
use tagwire_proto::{limits::MIN_MAX_FRAME, link_kind, FrameDecoder, LinkFrame};

/// The receiver's limit here: small, so declared lengths over it are common.
const MAX: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        if kind != link_kind::FORWARD_COMPRESSED && kind != link_kind::RELIABLE_COMPRESSED {
            continue;
        }
        let Ok(frame) = LinkFrame::decode(kind, body) else {
            continue;
        };
        let mut enc = BytesMut::new();
        frame
            .encode(&mut enc)
            .expect("a decoded link frame encodes");
        assert_eq!(&enc[..], raw, "re-encoding {frame:?}");
        let LinkFrame::Compressed {
            codec,
            raw_len,
            data,
            ..
        } = frame
        else {
            unreachable!("only compressed frames are decoded here");
        };
        if let Ok(event) = decompress(codec, raw_len, &data, MAX) {
            assert_eq!(event.len(), raw_len as usize);
            assert!(event.len() <= MAX);
            if let Some(again) = compress(codec, &event) {
                let back = decompress(codec, raw_len, &again, MAX).expect("a round trip");
                assert_eq!(back, event);
            }
        }
    }
});
