//! Fuzz target: the token a metrics/dashboard request presents
//! (`tagwire_router::metrics::credential`): arbitrary `Authorization` header
//! bytes and query strings give a non-empty token or none, never a panic;
//! a token from the header is trimmed and has no leading scheme.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_router::metrics::credential;

fuzz_target!(|data: &[u8]| {
    // First byte: where the header ends (and whether there is one).
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (header, query) = rest.split_at(at);
    let query = String::from_utf8_lossy(query);
    let header = (split & 1 == 1).then_some(header);
    if let Some(t) = credential(header, Some(&query)) {
        assert!(!t.is_empty());
        if header.is_some() {
            assert_eq!(t, t.trim(), "header token not trimmed");
        }
    }
});
