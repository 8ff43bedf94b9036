//! Fuzz target: arbitrary bytes as the daemon's TOML configuration file,
//! through `RouterConfig::from_toml` (parse, then `validate`). Errors are
//! expected; a panic is a bug. Properties checked:
//! - parsing is deterministic (same config, or same error message);
//! - an accepted config validates again, and has a listener (a file can set
//!   `tcp`/`unix` but never unset them);
//! - an accepted config written back as TOML (`RouterConfig` is
//!   `Serialize`) parses to an equal config.
//!
//! Seed corpus: the file-format example of docs/configuration.md
//! (scripts/fuzz.sh).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tagwire_router::RouterConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let first = RouterConfig::from_toml(text, path);
    let second = RouterConfig::from_toml(text, path);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "parsing is not deterministic"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("parsing is not deterministic: {first:?} vs {second:?}"),
    }
    let Ok(cfg) = first else {
        return;
    };
    if let Err(e) = cfg.validate() {
        panic!("an accepted config does not validate: {e}");
    }
    assert!(
        cfg.tcp.is_some() || cfg.unix.is_some(),
        "accepted without a listener"
    );
    let written = toml::to_string(&cfg).expect("an accepted config serialises as TOML");
    match RouterConfig::from_toml(&written, path) {
        Ok(again) => assert_eq!(cfg, again, "TOML round trip changed the config:\n{written}"),
        Err(e) => panic!("re-serialised config is refused: {e}\n{written}"),
    }
});
