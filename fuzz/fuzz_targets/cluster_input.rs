//! Fuzz target: arbitrary bytes as a `--join` target and as the contents of
//! a `--cluster-secret-file` (`tagwire_router::cluster`). Errors are
//! expected; a panic is a bug. Properties checked:
//! - an accepted join target is `HOST:PORT` with a non-empty host and a port
//!   in 1..=65535, and parses again to itself;
//! - an accepted secret is 16..=255 bytes of trimmed text without control
//!   characters, and parses again to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_router::cluster::{parse_join, parse_secret, SECRET_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(hp) = parse_join(text) {
            let (host, port) = hp.rsplit_once(':').expect("HOST:PORT");
            assert!(!host.is_empty());
            assert!(port.parse::<u16>().is_ok_and(|p| p != 0));
            assert_eq!(parse_join(&hp), Ok(hp.clone()));
        }
    }
    if let Ok(s) = parse_secret(data) {
        assert!(SECRET_LEN.contains(&s.len()));
        assert_eq!(s.trim(), s);
        assert!(!s.chars().any(char::is_control));
        assert_eq!(parse_secret(s.as_bytes()), Ok(s.clone()));
    }
});
