//! Fuzz target: arbitrary bytes as a durable store record
//! (`tagwire_core::store::StoreRecord::decode`, what the daemon reads back
//! from its database after a restart or a disk error). Errors are expected;
//! a panic is a bug. Checked: an accepted record encodes back to the same
//! bytes, and its event parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_core::store::StoreRecord;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = StoreRecord::decode(data) {
        assert_eq!(
            r.encode(),
            data,
            "an accepted record re-encodes differently"
        );
        tagwire_proto::EventRef::parse(&r.event).expect("a decoded record's event parses");
    }
});
