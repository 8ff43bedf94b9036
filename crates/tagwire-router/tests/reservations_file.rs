//! Property tests of the reservations file (`reservations_file`: a JSON map
//! endpoint name → `{identity, session, until_ns}`, read by the router at
//! start and written at shutdown; see docs/security.md). The `reservations`
//! fuzz target feeds it arbitrary bytes the same way.
//!
//! For any bytes in the file, a router starts, serves, stops and leaves a
//! file that parses. For a well-formed file, each reserved name is refused
//! to a stranger (`DuplicateEndpoint`, "reserved") and granted to the
//! session that holds it, and every reservation is written back at
//! shutdown with its identity and session: names survive a restart.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::Raw;
use proptest::prelude::*;
use serde::Deserialize;
use tagwire_proto::{EndpointKind, ErrorCode, Frame, PROTOCOL_VERSION, SESSION_ID_LEN};
use tagwire_router::{Router, RouterConfig, RouterHandle};

/// One entry of the file, as docs/security.md describes it (the router's
/// own type is private; this mirrors its format).
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Reservation {
    identity: String,
    session: String,
    until_ns: u64,
}

/// A session no generated file names: a stranger to every reservation.
const STRANGER: [u8; SESSION_ID_LEN] = [0xee; SESSION_ID_LEN];

/// The sessions generated files reserve names for.
const SESSIONS: [[u8; SESSION_ID_LEN]; 2] = [[0x11; SESSION_ID_LEN], [0x22; SESSION_ID_LEN]];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The identity of an in-process client: the router's owner.
fn me() -> String {
    format!("uid:{}", tagwire_router::local::current_uid())
}

/// A private directory (mode 0700, as the router requires of the
/// reservations file's directory).
fn private_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("tw-res")
        .tempdir()
        .expect("temp dir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    d
}

/// Starts a router (Unix listener only) whose reservations file is
/// `dir/reservations.json`, holding `contents` if given.
fn start(dir: &Path, contents: Option<&[u8]>) -> (RouterHandle, PathBuf) {
    let file = dir.join("reservations.json");
    if let Some(bytes) = contents {
        std::fs::write(&file, bytes).expect("write reservations file");
    }
    let config = RouterConfig {
        name: "reservations-test".into(),
        tcp: None,
        unix: Some(dir.join("s")),
        reservations_file: Some(file.clone()),
        ..RouterConfig::default()
    };
    let h = Router::start(config).expect("the router starts whatever the file holds");
    (h, file)
}

/// A raw client that said Hello with `session`.
fn hello(h: &RouterHandle, session: [u8; SESSION_ID_LEN]) -> Raw {
    let mut r = Raw::connect(h);
    r.send(&Frame::Hello {
        version: PROTOCOL_VERSION,
        max_frame: 1 << 20,
        name: "reservations-test".into(),
        token: String::new(),
        proof: None,
        session,
    });
    match r.recv() {
        Some(Frame::Welcome { .. }) => r,
        other => panic!("expected Welcome, got {other:?}"),
    }
}

/// Declares `name`; the `Error` if refused.
fn try_declare(r: &mut Raw, id: u32, name: &str) -> Result<(), (ErrorCode, String)> {
    let req = id;
    r.send(&Frame::DeclareEndpoint {
        req,
        id,
        kind: EndpointKind::Subscriber,
        name: name.into(),
    });
    match r.recv_control() {
        Some(Frame::Ok { req: got }) if got == req => Ok(()),
        Some(Frame::Error {
            req: got,
            code,
            message,
        }) if got == req => Err((code, message)),
        other => panic!("declare {name:?}: unexpected {other:?}"),
    }
}

/// The file the router left at shutdown, which must parse.
fn saved(file: &Path) -> HashMap<String, Reservation> {
    let text = std::fs::read_to_string(file).expect("the router writes the file at shutdown");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("saved file does not parse: {e}: {text}"))
}

/// Names: valid endpoint names, and ones no endpoint may have (empty,
/// spaces, control characters, over 255 bytes).
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["/viewer", "/cam/left", "cam-right", "é/ü", "/v"])
            .prop_map(str::to_owned),
        1 => Just(String::new()),
        1 => Just("two words".to_owned()),
        1 => Just("tab\there".to_owned()),
        1 => Just("x".repeat(300)),
        1 => "\\PC{0,12}",
    ]
}

/// A JSON value for one entry: mostly well formed, sometimes with a field
/// missing, of the wrong type or out of range, or an extra field.
fn entry() -> impl Strategy<Value = String> {
    let identity = prop_oneof![
        4 => Just(me()),
        1 => Just("uid:1".to_owned()),
        1 => Just("token:alice".to_owned()),
        1 => Just(String::new()),
    ];
    let session = prop_oneof![
        4 => prop::sample::select(SESSIONS.to_vec()).prop_map(|s| hex(&s)),
        1 => Just(hex(&[0; SESSION_ID_LEN])),
        1 => Just(hex(&SESSIONS[0]).to_uppercase()),
        1 => Just("not hex".to_owned()),
        1 => Just(String::new()),
    ];
    let until = prop_oneof![
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just(u64::MAX.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        Just("1.5".to_owned()),
        Just("\"1\"".to_owned()),
        Just("null".to_owned()),
    ];
    let well_formed = (
        identity,
        session,
        prop::sample::select(vec![0u64, 1, u64::MAX]),
    )
        .prop_map(|(i, s, u)| {
            serde_json::json!({ "identity": i, "session": s, "until_ns": u }).to_string()
        });
    prop_oneof![
        8 => well_formed,
        1 => (until, prop::sample::select(SESSIONS.to_vec())).prop_map(|(u, s)| format!(
            "{{\"identity\":{:?},\"session\":{:?},\"until_ns\":{u}}}",
            me(),
            hex(&s)
        )),
        1 => Just(format!("{{\"identity\":{:?},\"until_ns\":1}}", me())),
        1 => Just(format!(
            "{{\"identity\":{:?},\"session\":{:?},\"until_ns\":1,\"extra\":[1,2]}}",
            me(),
            hex(&SESSIONS[0])
        )),
        1 => Just("[]".to_owned()),
        1 => Just("7".to_owned()),
    ]
}

/// A reservations file: a JSON object of entries (names may repeat),
/// sometimes cut short or wrapped in something else.
fn file_text() -> impl Strategy<Value = String> {
    let object = prop::collection::vec((name(), entry()), 0..6).prop_map(|entries| {
        let body: Vec<String> = entries
            .iter()
            .map(|(n, e)| format!("{}:{e}", serde_json::Value::from(n.as_str())))
            .collect();
        format!("{{{}}}", body.join(","))
    });
    (object, 0u8..10, any::<prop::sample::Index>()).prop_map(|(text, shape, at)| match shape {
        0 => {
            // Cut at a character boundary (names may hold any character).
            let mut cut = at.index(text.len() + 1);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text[..cut].to_owned()
        }
        1 => format!("[{text}]"),
        2 => format!("{text} trailing"),
        _ => text,
    })
}

/// Starts a router on `contents`, checks what it reserved, stops it, and
/// checks the file it left.
fn check(contents: &[u8]) {
    let dir = private_dir();
    let (h, file) = start(dir.path(), Some(contents));
    let loaded: Option<HashMap<String, Reservation>> = std::str::from_utf8(contents)
        .ok()
        .and_then(|t| serde_json::from_str(t).ok());
    let mut stranger = hello(&h, STRANGER);
    stranger.expect_alive();
    let mut id = 0;
    let mut next_id = || {
        id += 1;
        id
    };
    match &loaded {
        None => {
            // Nothing was reserved: a name the file mentions is free.
            for n in ["/viewer", "/cam/left"] {
                try_declare(&mut stranger, next_id(), n)
                    .unwrap_or_else(|e| panic!("{n} is free after a bad file: {e:?}"));
            }
        }
        Some(map) => {
            for (n, r) in map {
                if tagwire_core::endpoint::validate_name(n).is_err() {
                    continue;
                }
                let (code, message) = try_declare(&mut stranger, next_id(), n)
                    .expect_err("a reserved name is refused to a stranger");
                assert_eq!(code, ErrorCode::DuplicateEndpoint, "{message}");
                assert!(message.contains("reserved"), "{message}");
                for s in SESSIONS {
                    if r.identity == me() && r.session == hex(&s) {
                        let mut owner = hello(&h, s);
                        try_declare(&mut owner, 1, n).unwrap_or_else(|e| {
                            panic!("the session holding {n:?} gets it back: {e:?}")
                        });
                    }
                }
            }
            try_declare(&mut stranger, next_id(), "/not-reserved").expect("a free name");
        }
    }
    stranger.expect_alive();
    drop(stranger);
    h.shutdown();
    let after = saved(&file);
    if let Some(map) = loaded {
        // Every reservation survives the restart, for the same holder.
        for (n, r) in map {
            let kept = after
                .get(&n)
                .unwrap_or_else(|| panic!("reservation of {n:?} lost at shutdown: {after:?}"));
            assert_eq!(
                (&kept.identity, &kept.session),
                (&r.identity, &r.session),
                "{n:?}"
            );
        }
    }
}

#[test]
fn a_well_formed_file_reserves_its_names_for_their_sessions_across_a_restart() {
    let text = serde_json::json!({
        "/viewer": { "identity": me(), "session": hex(&SESSIONS[0]), "until_ns": 0 },
        "/cam/left": { "identity": "uid:1", "session": hex(&SESSIONS[1]), "until_ns": 0 },
    })
    .to_string();
    check(text.as_bytes());
}

#[test]
fn a_missing_file_a_directory_or_garbage_in_its_place_never_stops_the_router() {
    let dir = private_dir();
    let (h, file) = start(dir.path(), None);
    hello(&h, STRANGER).expect_alive();
    h.shutdown();
    assert!(saved(&file).is_empty());
    let dir = private_dir();
    std::fs::create_dir(dir.path().join("reservations.json")).expect("mkdir");
    let (h, _) = start(dir.path(), None);
    hello(&h, STRANGER).expect_alive();
    h.shutdown();
    check(b"");
    check(b"\xff\xfe{");
    check(b"{\"/viewer\": 1}");
}

#[test]
fn a_missing_runtime_directory_is_made_private_at_shutdown_not_a_reason_to_lose_reservations() {
    // `tagwired --no-tcp --unix ELSEWHERE` never made its runtime directory.
    let dir = private_dir();
    let missing = dir.path().join("tagwire");
    let config = RouterConfig {
        name: "reservations-test".into(),
        tcp: None,
        unix: Some(dir.path().join("s")),
        reservations_file: Some(missing.join("reservations.json")),
        ..RouterConfig::default()
    };
    let h = Router::start(config).expect("router");
    let mut r = hello(&h, SESSIONS[0]);
    try_declare(&mut r, 1, "/kept").expect("declare");
    h.shutdown();
    let kept = saved(&missing.join("reservations.json"));
    assert!(kept.contains_key("/kept"), "{kept:?}");
    let mode = std::fs::metadata(&missing)
        .expect("made")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "the directory is private");
}

#[test]
fn a_file_in_a_directory_others_can_read_is_ignored() {
    let dir = private_dir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let text = serde_json::json!({
        "/viewer": { "identity": "uid:1", "session": hex(&SESSIONS[0]), "until_ns": 0 },
    })
    .to_string();
    let (h, _) = start(dir.path(), Some(text.as_bytes()));
    let mut stranger = hello(&h, STRANGER);
    try_declare(&mut stranger, 1, "/viewer").expect("nothing reserved from an unsafe directory");
    drop(stranger);
    h.shutdown();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn json_like_files_never_stop_the_router_and_reservations_survive(text in file_text()) {
        check(text.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_stop_the_router(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        check(&bytes);
    }
}
