//! The user's private runtime directory, shared by the daemon and the local
//! clients: the Unix socket and the daemon's token files live there.
//!
//! The directory is `$XDG_RUNTIME_DIR/tagwire`, else `/tmp/tagwire-UID`. It
//! must be a real directory (not a symlink) owned by the user with no
//! access for group or others (mode 0700): otherwise another user could
//! have made it first and would receive the victim's traffic. The daemon
//! creates it that way and refuses to start if it is not; clients refuse to
//! use a socket or token inside a directory that fails the same check.
//!
//! For each TCP port it listens on, the daemon writes a random token into
//! `token-PORT` (mode 0600) and removes it when it stops; a client of the
//! same user connecting to that port on loopback reads and presents it (as
//! Jupyter does), so zero configuration stays zero configuration.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Longest token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// Something wrong with the runtime directory or a file in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// The directory or file is unsafe to use; the message says why.
    #[error("refusing to use {path}: {reason}")]
    Unsafe {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// The real uid of this process.
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// `$XDG_RUNTIME_DIR/tagwire`, else `/tmp/tagwire-UID`.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join("tagwire"),
        _ => PathBuf::from(format!("/tmp/tagwire-{}", current_uid())),
    }
}

/// The token file for a daemon's TCP `port`.
pub fn token_path(port: u16) -> PathBuf {
    runtime_dir().join(format!("token-{port}"))
}

/// Where the owner's token is written for a UDP port (`[udp] listen`): a
/// name of its own, since UDP and TCP port numbers are separate spaces.
pub fn udp_token_path(port: u16) -> PathBuf {
    runtime_dir().join(format!("token-udp-{port}"))
}

/// Creates `dir` (mode 0700) if it does not exist, then checks it.
pub fn prepare_private_dir(dir: &Path) -> Result<(), LocalError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(LocalError::Io {
                what: "cannot create the runtime directory",
                path: dir.to_owned(),
                source,
            })
        }
    }
    check_private_dir(dir)
}

/// Checks that `dir` is a directory, not a symlink, owned by this user,
/// with no access for group or others.
pub fn check_private_dir(dir: &Path) -> Result<(), LocalError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| LocalError::Io {
        what: "cannot inspect the runtime directory",
        path: dir.to_owned(),
        source,
    })?;
    let unsafe_ = |reason: String| LocalError::Unsafe {
        path: dir.to_owned(),
        reason,
    };
    if !meta.file_type().is_dir() {
        return Err(unsafe_(
            "it is not a directory (a symlink or a file)".into(),
        ));
    }
    let me = current_uid();
    if meta.uid() != me {
        return Err(unsafe_(format!(
            "it is owned by uid {}, not by you (uid {me}); another user may have created it \
             first — remove it, or set XDG_RUNTIME_DIR",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_(format!(
            "its mode is {:o}; it must give no access to group or others (chmod 700)",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// `n` random bytes from the kernel.
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// A fresh nonce for the handshake's token proof
/// (`tagwire_proto::handshake`): random bytes from the kernel, else (no
/// `/dev/urandom`) the clock, the pid and a counter, which are unique,
/// and uniqueness is what a nonce must have here: a server's recorded proof
/// answers only the nonce it was made for.
pub fn random_nonce() -> [u8; tagwire_proto::handshake::NONCE_LEN] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut n = [0u8; tagwire_proto::handshake::NONCE_LEN];
    if random_bytes(&mut n).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        n[..16].copy_from_slice(&t.to_le_bytes());
        n[16..20].copy_from_slice(&std::process::id().to_le_bytes());
        n[20..28].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    }
    n
}

/// Lower-case hex of `bytes` (tokens, session ids).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Replaces `path` with `contents`, readable by this user only (mode
/// 0600): written to a temporary file beside it, then renamed over it, so a
/// reader never sees half a file.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(contents)?;
    std::fs::rename(&tmp, path)
}

/// Writes a fresh random token to `path` (mode 0600, replacing any old
/// file) and returns it. The directory must be private.
pub fn write_token(path: &Path) -> Result<String, LocalError> {
    let io = |what, source| LocalError::Io {
        what,
        path: path.to_owned(),
        source,
    };
    let mut raw = [0u8; 32];
    random_bytes(&mut raw).map_err(|e| io("cannot read random bytes for", e))?;
    let token = hex(&raw);
    write_private(path, token.as_bytes()).map_err(|e| io("cannot write token file", e))?;
    Ok(token)
}

/// Reads a token written by [`write_token`], checking that its directory is
/// private and that the file is this user's, mode 0600.
pub fn read_token(path: &Path) -> Result<String, LocalError> {
    if let Some(dir) = path.parent() {
        check_private_dir(dir)?;
    }
    let meta = std::fs::symlink_metadata(path).map_err(|source| LocalError::Io {
        what: "cannot read token file",
        path: path.to_owned(),
        source,
    })?;
    let me = current_uid();
    if !meta.file_type().is_file()
        || meta.uid() != me
        || meta.permissions().mode() & 0o077 != 0
        || meta.len() > MAX_TOKEN_FILE
    {
        return Err(LocalError::Unsafe {
            path: path.to_owned(),
            reason: "a token file must be a regular file of yours, mode 0600, at most 4 KiB".into(),
        });
    }
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| LocalError::Io {
            what: "cannot read token file",
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tagwire-local-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_private_dir_is_created_0700_and_a_shared_one_is_refused() {
        let d = scratch("mode");
        prepare_private_dir(&d).expect("created");
        assert_eq!(std::fs::metadata(&d).expect("exists").mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let e = prepare_private_dir(&d).unwrap_err().to_string();
        assert!(e.contains("755") && e.contains("chmod 700"), "{e}");
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

    #[test]
    fn a_symlinked_runtime_dir_is_refused() {
        let d = scratch("link");
        let target = scratch("link-target");
        prepare_private_dir(&target).expect("created");
        std::os::unix::fs::symlink(&target, &d).expect("symlink");
        let e = check_private_dir(&d).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_file(&d).expect("cleanup");
        std::fs::remove_dir_all(&target).expect("cleanup");
    }

    #[test]
    fn tokens_round_trip_with_mode_0600_and_a_loose_file_is_refused() {
        let d = scratch("token");
        prepare_private_dir(&d).expect("created");
        let path = d.join("token-1");
        let t = write_token(&path).expect("written");
        assert_eq!(t.len(), 64);
        assert_eq!(
            std::fs::metadata(&path).expect("exists").mode() & 0o777,
            0o600
        );
        assert_eq!(read_token(&path).expect("read"), t);
        assert_ne!(
            write_token(&path).expect("rewritten"),
            t,
            "a new token each time"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(read_token(&path).is_err());
        std::fs::remove_dir_all(&d).expect("cleanup");
    }
}
