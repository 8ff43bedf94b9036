//! Fuzz target: arbitrary datagrams as discovery beacons. A datagram that
//! parses re-encodes to exactly its bytes; anything else is a named error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_router::Beacon;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = Beacon::decode(data) {
        assert_eq!(b.encode(), data, "re-encoding {b:?}");
    }
});
