//! Fuzz target: arbitrary bytes as a UDP datagram (`docs/protocol.md`,
//! "Datagrams"), handled as the daemon does: parsed and checked, a `Data`
//! datagram's sequence number judged by a window and its frames decoded,
//! an `Open`'s cookie checked, a `Report` or `Gaps` decoded (and a
//! decoded `Gaps` encodes back to the same bytes, as does a `DataAck`,
//! which a sender's window takes or refuses, and an `AckedData` goes
//! through a receiver's window); and as a multicast
//! group's receiver does ("Multicast datagrams"): MAC checked, sender's
//! window, membership. Errors are expected; a panic, frames that do not
//! cover the frame bytes, or an event accepted without the key's MAC, is a
//! bug.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tagwire_core::datagram::{AckedReceiver, AckedSender, Packer, SeqWindow};
use tagwire_core::multicast::{Group, Received};
use tagwire_proto::datagram::{check_cookie, DataAck, Datagram, DatagramKind, Gaps, Report};
use tagwire_proto::Frame;

fuzz_target!(|data: &[u8]| {
    let key = tagwire_proto::datagram::group_key(b"token", "239.1.2.3:7800");
    let mut group = Group::new(Vec::new(), key, 1, 1, 1400);
    match group.on_datagram(data, 0, 0) {
        Received::Event { event, .. } => {
            // Only with the key's MAC (the fuzzer cannot forge one).
            let d = Datagram::parse(data).expect("an accepted event parses");
            assert_eq!(d.group_event(&key, data), Ok(event));
        }
        Received::Member { .. } | Received::Own | Received::Dropped => {}
    }
    let mut window = SeqWindow::default();
    let Ok(d) = Datagram::parse(data) else {
        window.note_bad();
        return;
    };
    match d.header.kind {
        DatagramKind::Data => {
            window.on_seq(d.header.seq);
            let mut covered = 0;
            for (kind, body) in d.frames().expect("a parsed Data datagram splits") {
                covered += 5 + body.len();
                let _ = Frame::decode(kind, Bytes::copy_from_slice(body));
            }
            assert_eq!(covered, d.frame_bytes().len());
        }
        DatagramKind::Open => {
            if let Some(c) = d.open_cookie() {
                let _ = check_cookie(&[7; 32], b"127.0.0.1:1", 5, &c);
            }
        }
        DatagramKind::Report => {
            Report::decode(d.body).expect("a parsed Report decodes");
        }
        DatagramKind::Gaps => {
            let g = Gaps::decode(d.body).expect("a parsed Gaps decodes");
            let mut again = Vec::new();
            g.encode(&mut again);
            assert_eq!(again, d.body, "Gaps encode(decode(b)) == b");
        }
        DatagramKind::AckedData => {
            let mut rx = AckedReceiver::default();
            let _ = rx.on_datagram(d.header.seq, d.frame_bytes());
            let _ = rx.on_datagram(1, d.frame_bytes());
            if let Some(a) = rx.take_ack() {
                let mut b = Vec::new();
                a.encode(&mut b);
                DataAck::decode(&b).expect("an ack the receiver made decodes");
            }
        }
        DatagramKind::DataAck => {
            let a = DataAck::decode(d.body).expect("a parsed DataAck decodes");
            let mut again = Vec::new();
            a.encode(&mut again);
            assert_eq!(again, d.body, "DataAck encode(decode(b)) == b");
            // A sender with 10 in flight takes it or refuses it, no panic.
            let mut tx = AckedSender::default();
            let mut stream = bytes::BytesMut::new();
            for n in 0..10u64 {
                let _ = Frame::Ping { nonce: n }.encode(&mut stream);
            }
            let mut made = Vec::new();
            Packer::acked(1, 64).pack(&mut stream, 0, &mut made);
            let _ = tx.push(made, 0);
            let _ = tx.on_ack(&a, 1);
            let _ = tx.poll_timeout(u64::MAX / 2, 64);
        }
        _ => {}
    }
});
