//! Fuzz target: arbitrary bytes as the version-5 and -6 client frames
//! `PublishPiece`, `DeliverPiece`, `DeliverReliablePiece` and
//! `PieceResume`, the pieces handed to a
//! reassembler as the daemon and the library do (keyed by endpoint or
//! subscription and id, small bounds). Every frame that decodes re-encodes
//! to exactly its bytes; errors are expected; a panic, a piece reaching past
//! its event, a reassembly over its bounds, or a completed event whose
//! checksum is not the one its pieces declared is a bug.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::fragment::{checksum, BlobId, Piece, Progress, Reassembler, ReassemblyLimits};
use tagwire_proto::{kind, limits::MIN_MAX_FRAME, Frame, FrameDecoder};

fuzz_target!(|data: &[u8]| {
    let dec = FrameDecoder::new(MIN_MAX_FRAME);
    let mut buf = BytesMut::from(data);
    let mut at = 0;
    let limits = ReassemblyLimits {
        max_payload: 1 << 16,
        max_blobs: 4,
        max_bytes: 1 << 17,
    };
    let mut reasm: Reassembler<(u32, u64)> = Reassembler::new(limits);
    while let Ok(Some((k, body))) = dec.next_raw(&mut buf) {
        let end = data.len() - buf.len();
        let raw = &data[at..end];
        at = end;
        if ![
            kind::PUBLISH_PIECE,
            kind::DELIVER_PIECE,
            kind::DELIVER_RELIABLE_PIECE,
            kind::PIECE_RESUME,
        ]
        .contains(&k)
        {
            continue;
        }
        let Ok(frame) = Frame::decode(k, body) else {
            continue;
        };
        let mut enc = BytesMut::new();
        frame.encode(&mut enc).expect("a decoded frame encodes");
        assert_eq!(&enc[..], raw, "re-encoding {frame:?}");
        let (key, of, data) = match frame {
            Frame::PublishPiece {
                endpoint, of, data, ..
            } => (endpoint, of, data),
            Frame::DeliverPiece { sub, of, data }
            | Frame::DeliverReliablePiece { sub, of, data, .. } => (sub, of, data),
            _ => continue,
        };
        assert!(of.offset + data.len() as u64 <= of.total);
        let blob = BlobId {
            id: of.id,
            total: of.total,
            checksum: of.checksum,
        };
        let piece = Piece {
            blob,
            offset: of.offset,
            data,
        };
        if let Ok(a) = reasm.on_piece((key, of.id), &piece) {
            if let Progress::Complete(b) = a.progress {
                assert_eq!(b.len() as u64, of.total);
                assert_eq!(checksum(&b), of.checksum);
            }
        }
        assert!(reasm.held_bytes() <= limits.max_bytes);
        assert!(reasm.len() <= limits.max_blobs);
    }
});
