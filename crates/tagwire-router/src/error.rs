//! Why a router could not start: [`RouterError`].

use std::path::PathBuf;

/// Why a router could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// A listener could not bind.
    #[error("cannot listen on {what}: {source}")]
    Listen {
        /// The address or path.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// Another daemon already serves the Unix socket. The message says how
    /// to run a second daemon beside it.
    #[error(
        "another tagwired is already listening on {0}; to run a second daemon on this host, give \
         it its own socket with --unix PATH (`unix` in its config) or none with --no-unix, and its \
         own --tcp port"
    )]
    AlreadyRunning(PathBuf),
    /// The lane thread could not start.
    #[error("cannot start the lane thread: {0}")]
    Lane(std::io::Error),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::error::ConfigError),
    /// The private runtime directory or a file in it is unsafe or unwritable.
    #[error(transparent)]
    Local(#[from] crate::local::LocalError),
    /// A `[tls]` file is missing or unusable (the error names the file).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The durable store (`[store]`) could not be opened.
    #[error(transparent)]
    Store(crate::store::StoreError),
}
