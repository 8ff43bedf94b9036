//! Why a configuration could not be used: [`ConfigError`].

use std::path::PathBuf;

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Reading failed.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Larger than [`MAX_CONFIG_BYTES`](super::MAX_CONFIG_BYTES).
    #[error("config file {path} is {len} bytes, over the limit of {max}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Not valid TOML, or an unknown key or bad value.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A value outside its range.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// `[federation] advertise` does not name an address other daemons can
    /// reach.
    #[error("federation.advertise = {value:?}: {reason}; give the HOST:PORT other daemons reach this one at, e.g. advertise = \"10.0.0.1:7700\"")]
    BadAdvertise {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Gossip on every interface with peers to reach, and nothing says
    /// which address they reach this daemon at.
    #[error("federation: gossip listens on {bind} (every interface) and no route to a peer or default route tells which address other daemons reach this one at: set [federation] advertise = \"IP:{port}\" (or listen on the interface address)")]
    NoAdvertisedAddress {
        /// The gossip socket's address.
        bind: std::net::SocketAddr,
        /// Its port, for the fix.
        port: u16,
    },
    /// The `[cluster]` settings (`--cluster-secret-file`, `--join`) cannot
    /// be used; the message names the setting and the fix.
    #[error(transparent)]
    Cluster(#[from] super::cluster::ClusterError),
}
