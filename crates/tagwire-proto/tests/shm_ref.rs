//! The shared-memory reference an event with presence bit `SHM_REF` (0x80)
//! carries instead of its payload (docs/protocol.md): it round-trips, and
//! any other bytes are a named error, never a panic.

use proptest::prelude::*;
use tagwire_proto::{DecodeError, ShmRef};

proptest! {
    #[test]
    fn decode_of_encode_is_the_reference(region: u64, seq: u64, len: u32, chunk: u32) {
        let r = ShmRef { region, seq, len, chunk };
        let back = ShmRef::decode(&r.encode()).expect("24 bytes decode");
        prop_assert_eq!((back.region, back.seq, back.len, back.chunk), (region, seq, len, chunk));
    }

    #[test]
    fn any_other_length_is_refused_naming_it(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        match ShmRef::decode(&bytes) {
            Ok(r) => {
                prop_assert_eq!(bytes.len(), ShmRef::LEN);
                prop_assert_eq!(&r.encode()[..], &bytes[..]);
            }
            Err(DecodeError::BadValue { what, value }) => {
                prop_assert!(what.contains("reference length"));
                prop_assert_eq!(value, bytes.len() as u64);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}
