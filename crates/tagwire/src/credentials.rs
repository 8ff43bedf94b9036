//! What a session presents to prove who it is, and what it checks about the
//! daemon before trusting it (see `docs/security.md`).
//!
//! - Over a Unix socket the kernel tells the daemon our uid; we check the
//!   daemon's in turn: it must run as us or as root (or as the uid in
//!   `TAGWIRE_DAEMON_UID`), so a socket planted by another user is refused.
//! - Over TCP we present a token: `TAGWIRE_TOKEN` if set, else, for a daemon
//!   on loopback, the token it wrote for its port in our private runtime
//!   directory (`token-PORT`). Over TLS with a client certificate, the
//!   certificate identifies us: no local token is presented (only an explicit
//!   `TAGWIRE_TOKEN`, with a warning that it then wins).
//! - Every session has a random id it keeps across reconnects, so that it
//!   gets its endpoint names back after a connection drop or a daemon
//!   restart and nobody else can take them meanwhile.

use std::os::unix::net::UnixStream;

use tagwire_proto::SESSION_ID_LEN;
use tagwire_router::local;

use crate::url::ServerUrl;

/// The token to present to a daemon at `HOST:PORT` over TCP or TLS
/// (empty: none).
pub(crate) fn token_for(addr: &str) -> String {
    token_from(addr, local::token_path)
}

/// As [`token_for`], for a daemon's UDP port (`udp://`): its token file is
/// `token-udp-PORT`.
pub(crate) fn token_for_udp(addr: &str) -> String {
    token_from(addr, local::udp_token_path)
}

fn token_from(addr: &str, path: fn(u16) -> std::path::PathBuf) -> String {
    if let Ok(t) = std::env::var("TAGWIRE_TOKEN") {
        return t.trim().to_owned();
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return String::new();
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match port.parse::<u16>() {
        Ok(port) if loopback => match local::read_token(&path(port)) {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!("no local token for port {port}: {e}");
                String::new()
            }
        },
        _ => String::new(),
    }
}

/// The token to present beside a TLS client certificate: none, so that
/// the certificate's identity (`cert:NAME`) is the session's, even on the
/// daemon owner's host where its local token is readable. Only an explicit
/// `TAGWIRE_TOKEN` is presented, and then the session says that the token,
/// not the certificate, identifies it.
pub(crate) fn token_beside_cert() -> String {
    match std::env::var("TAGWIRE_TOKEN") {
        Ok(t) if !t.trim().is_empty() => {
            tracing::warn!(
                "TAGWIRE_TOKEN is set as well as a client certificate: the daemon identifies \
                 this session by the token, not by the certificate (unset TAGWIRE_TOKEN to be \
                 cert:NAME)"
            );
            t.trim().to_owned()
        }
        _ => String::new(),
    }
}

/// Refuses a daemon socket served by another user (unless that uid is
/// trusted through `TAGWIRE_DAEMON_UID`).
pub(crate) fn check_daemon(s: &UnixStream, url: &ServerUrl) -> std::io::Result<()> {
    let cred = rustix::net::sockopt::socket_peercred(s)?;
    let uid = cred.uid.as_raw();
    let me = local::current_uid();
    let trusted = std::env::var("TAGWIRE_DAEMON_UID")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok());
    if uid == me || uid == 0 || Some(uid) == trusted {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "the daemon on {url} runs as uid {uid}, not as you (uid {me}) or root; refusing it \
             (set TAGWIRE_DAEMON_UID={uid} to trust it)"
        ),
    ))
}

/// A fresh random session id.
pub(crate) fn new_session_id() -> [u8; SESSION_ID_LEN] {
    let mut id = [0u8; SESSION_ID_LEN];
    if local::random_bytes(&mut id).is_err() {
        // No /dev/urandom: a weaker id from the clock and pid still keeps
        // sessions apart; reclaiming needs the identity to match as well.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        id[..8].copy_from_slice(&(t as u64).to_le_bytes());
        id[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    id
}
