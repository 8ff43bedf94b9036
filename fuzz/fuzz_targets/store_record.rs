//! Fuzz target: arbitrary bytes as a durable store record
//! (`tagwire_core::store::StoreRecord::decode`, what the daemon reads back
//! from its database after a restart or a disk error). Errors are expected;
//! a panic is a bug. Checked: an accepted record of the version this build
//! writes encodes back to the same bytes (a version 1 record is written
//! back as version 2, origin 0, and decodes to the same record), and its
//! event parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_core::store::{StoreRecord, RECORD_VERSION};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = StoreRecord::decode(data) {
        let again = r.encode();
        if data.first() == Some(&RECORD_VERSION) {
            assert_eq!(again, data, "an accepted record re-encodes differently");
        } else {
            assert_eq!(
                StoreRecord::decode(&again).as_ref(),
                Ok(&r),
                "a version 1 record written back as version 2 decodes differently"
            );
        }
        tagwire_proto::EventRef::parse(&r.event).expect("a decoded record's event parses");
    }
});
