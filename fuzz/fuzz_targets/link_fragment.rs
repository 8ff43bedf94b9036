//! Fuzz target: arbitrary bytes as the `Fragment`, `FragmentCompressed`
//! (link version 7) and `FragmentResume` frames of a peer daemon (link
//! version 4), handed to a reassembler as the router does (keyed by origin
//! and id, small bounds; a compressed piece decompressed first, bounded,
//! into exactly its `raw_len` bytes) and the resume points to an outgoing
//! event. Every frame that decodes re-encodes to exactly its bytes; errors
//! are expected; a panic, a decompressed piece of another length than it
//! declared or over the limit, a reassembly over its bounds, or a
//! completed event whose checksum is not the one its pieces declared is a
//! bug.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::compress::decompress;
use tagwire_core::fragment::{
    checksum, BlobId, Outgoing, Piece, Progress, Reassembler, ReassemblyLimits,
};
use tagwire_proto::{limits::MIN_MAX_FRAME, link_kind, FragmentOf, FrameDecoder, LinkFrame};

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let limits = ReassemblyLimits {
        max_payload: 1 << 16,
        max_blobs: 4,
        max_bytes: 1 << 17,
    };
    let mut reasm: Reassembler<(u64, u64)> = Reassembler::new(limits);
    let mut out = Outgoing::new(1, bytes::Bytes::from_static(&[7; 3000]), 512)
        .expect("a 3,000-byte blob in 512-byte pieces");
    while let Ok(Some((kind, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        if kind != link_kind::FRAGMENT
            && kind != link_kind::FRAGMENT_RESUME
            && kind != link_kind::FRAGMENT_COMPRESSED
        {
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
        // A compressed piece is decompressed (bounded by the frame limit, as
        // the router does) and taken as the `Fragment` it stands for.
        let frame = match frame {
            LinkFrame::FragmentCompressed {
                id,
                total,
                checksum,
                offset,
                of,
                codec,
                raw_len,
                data,
            } => {
                let Ok(piece) = decompress(codec, raw_len, &data, MIN_MAX_FRAME as usize) else {
                    continue;
                };
                assert_eq!(piece.len(), raw_len as usize);
                assert!(
                    offset + piece.len() as u64 <= total,
                    "decode checked the raw bounds"
                );
                LinkFrame::Fragment {
                    id,
                    total,
                    checksum,
                    offset,
                    of,
                    data: bytes::Bytes::from(piece),
                }
            }
            f => f,
        };
        match frame {
            LinkFrame::Fragment {
                id,
                total,
                checksum: sum,
                offset,
                of,
                data,
            } => {
                let origin = match of {
                    FragmentOf::Forward { origin, .. } | FragmentOf::Reliable { origin, .. } => {
                        origin
                    }
                };
                let blob = BlobId {
                    id,
                    total,
                    checksum: sum,
                };
                if let Ok(a) = reasm.on_piece((origin, id), &Piece { blob, offset, data }) {
                    if let Progress::Complete(b) = a.progress {
                        assert_eq!(b.len() as u64, total);
                        assert_eq!(checksum(&b), sum);
                    }
                }
                assert!(reasm.held_bytes() <= limits.max_bytes);
                assert!(reasm.len() <= limits.max_blobs);
            }
            LinkFrame::FragmentResume { have, .. } => {
                out.resume(have);
                assert!(out.cursor() <= 3000);
                if let Some(p) = out.peek() {
                    assert!(p.offset + p.data.len() as u64 <= 3000);
                }
            }
            _ => unreachable!("only fragment frames are decoded here"),
        }
    }
});
