//! The `[cluster]` section and why it cannot be used ([`ClusterError`]):
//! the data the configuration holds. Applying it is the `cluster` module's.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `[cluster]` section: a shared secret and the daemons to join.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// A file holding the cluster's shared secret (16..=255 bytes,
    /// surrounding whitespace ignored; mode 0600). Relative paths in a
    /// configuration file are relative to that file's directory.
    pub secret_file: Option<PathBuf>,
    /// Daemons to join, `HOST:PORT` or `tcp://HOST:PORT` (added to
    /// `[federation] peers`; `tagwired --join`, repeatable).
    pub join: Vec<String>,
}

/// Why the `[cluster]` settings cannot be used. Each message names the
/// setting and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The secret file cannot be read.
    #[error("--cluster-secret-file {}: {source} (make one with `tagwired --new-cluster-secret {}` and copy it to every host)", path.display(), path.display())]
    ReadSecret {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Group or others may read the secret file.
    #[error("--cluster-secret-file {}: its mode is {mode:o}; it must give no access to group or others (chmod 600 {})", path.display(), path.display())]
    SecretPermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secret is too short or too long, or not text.
    #[error("--cluster-secret-file {}: {reason}", path.display())]
    BadSecret {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `tagwired --new-cluster-secret` found the file already there.
    #[error("--new-cluster-secret {}: the file exists; remove it first (every daemon of the cluster needs the same secret)", path.display())]
    SecretExists {
        /// The file.
        path: PathBuf,
    },
    /// Writing a new secret failed.
    #[error("--new-cluster-secret {}: {source}", path.display())]
    WriteSecret {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A join target is not `HOST:PORT`, or its host does not resolve.
    #[error("--join {target}: {reason}")]
    BadJoin {
        /// The target as given.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// `--join` without a secret: the daemons could not authenticate each other.
    #[error("--join {target} needs --cluster-secret-file (or [cluster] secret_file): daemons of a cluster authenticate each other with it")]
    JoinWithoutSecret {
        /// The first join target.
        target: String,
    },
    /// The cluster section contradicts another setting.
    #[error("{0}")]
    Conflict(String),
    /// The daemon listens on loopback but joins a daemon on another host.
    #[error("--listen {listen} cannot be reached by {target}: use --listen 0.0.0.0:{port} or the interface address")]
    LoopbackListen {
        /// The TCP listen address.
        listen: SocketAddr,
        /// The join target that could not reach it.
        target: String,
        /// The listen port, for the fix.
        port: u16,
    },
    /// Listening on every interface, and no route says which address peers reach.
    #[error("--listen {listen}: cannot tell which address other hosts reach this daemon at (no join target and no default route): use --listen IP:{port} with the interface address, or set [federation] gossip = \"IP:{port}\"")]
    NoAdvertisedAddress {
        /// The TCP listen address.
        listen: SocketAddr,
        /// The listen port, for the fix.
        port: u16,
    },
}
