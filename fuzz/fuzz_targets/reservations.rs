//! Fuzz target: arbitrary bytes as the router's reservations file
//! (`reservations_file`, a JSON map endpoint name → `{identity, session,
//! until_ns}`, read by `State::load_reservations` at start). Each input is
//! written into a private directory (mode 0700) and a router is started on
//! it (Unix listener only), asked for a handshake and a `Ping` over an
//! in-process connection, and stopped. Properties checked:
//! - the router starts whatever the file holds (a bad file is logged and
//!   ignored, never fatal);
//! - it serves: `Hello` gets `Welcome`, `Ping` gets `Pong`;
//! - at shutdown it leaves a reservations file that is a JSON object.
//!
//! The property tests in crates/tagwire-router/tests/reservations_file.rs
//! check the semantics (who gets a reserved name back) on JSON-like files.
//! Seeds: fuzz/seeds/reservations/.
#![no_main]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_proto::{Frame, FrameDecoder, PROTOCOL_VERSION, SESSION_ID_LEN};
use tagwire_router::{Router, RouterConfig};

/// The private directory every input is written into. Also makes writes to
/// a closed socket fail with `EPIPE` instead of killing the process, as
/// they do in `tagwired` (Rust's `main` ignores `SIGPIPE`; libFuzzer's
/// `main` does not).
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // SAFETY: setting a signal's disposition to SIG_IGN installs no
        // handler code; it happens once, before any router thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let d = std::env::temp_dir().join(format!("tagwire-fuzz-res-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).expect("create the fuzz directory");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let file = dir().join("reservations.json");
    std::fs::write(&file, data).expect("write the reservations file");
    let config = RouterConfig {
        name: "fuzz".into(),
        tcp: None,
        unix: Some(dir().join("s")),
        reservations_file: Some(file.clone()),
        ..RouterConfig::default()
    };
    let h = Router::start(config).expect("the router starts whatever the file holds");
    let mut s = h.connect_in_process().expect("connect in process");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut out = BytesMut::new();
    for f in [
        Frame::Hello {
            version: PROTOCOL_VERSION,
            max_frame: 1 << 16,
            name: "fuzz".into(),
            token: String::new(),
            proof: None,
            session: [7; SESSION_ID_LEN],
        },
        Frame::Ping { nonce: 9 },
    ] {
        f.encode(&mut out).expect("encode");
    }
    s.write_all(&out).expect("send Hello and Ping");
    let dec = FrameDecoder::new(1 << 16);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    while got.len() < 2 {
        if let Some((k, body)) = dec.next_raw(&mut buf).expect("server frames split") {
            got.push(Frame::decode(k, body).expect("server frames decode"));
            continue;
        }
        let mut chunk = [0u8; 4096];
        let n = match s.read(&mut chunk) {
            // libFuzzer's timeout alarm interrupts blocking reads.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r.expect("the router answers"),
        };
        assert!(n > 0, "the router closed the connection: {got:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
    assert!(matches!(got[0], Frame::Welcome { .. }), "{got:?}");
    assert_eq!(got[1], Frame::Pong { nonce: 9 });
    drop(s);
    h.shutdown();
    let text = std::fs::read_to_string(&file).expect("the router writes the file at shutdown");
    let saved: serde_json::Value = serde_json::from_str(&text).expect("the saved file is JSON");
    assert!(saved.is_object(), "the saved file is a JSON object: {text}");
});
