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
    /// The `[cluster]` settings (`--cluster-secret-file`, `--join`) cannot
    /// be used; the message names the setting and the fix.
    #[error(transparent)]
    Cluster(#[from] super::cluster::ClusterError),
}
