//! The one error type of the baseline binary.

/// Everything that can make a baseline run fail; each variant names the
/// thing that went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A command-line value is out of range.
    #[error("invalid --{name} {value}: {reason}")]
    InvalidArgument {
        /// The flag, without dashes.
        name: &'static str,
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A socket operation failed.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the baseline was doing.
        context: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A raw-relay peer broke the relay's small connect protocol.
    #[error("raw relay protocol: {0}")]
    RelayProtocol(String),
    /// The NATS client reported an error.
    #[error("nats: {context}: {message}")]
    Nats {
        /// What the baseline was doing.
        context: &'static str,
        /// The client's error text.
        message: String,
    },
    /// The Zenoh session reported an error.
    #[error("zenoh: {context}: {message}")]
    Zenoh {
        /// What the baseline was doing.
        context: &'static str,
        /// Zenoh's error text.
        message: String,
    },
    /// iceoryx2 reported an error.
    #[error("iceoryx2: {context}: {message}")]
    Iceoryx2 {
        /// What the baseline was doing.
        context: &'static str,
        /// iceoryx2's error, debug-formatted.
        message: String,
    },
    /// A tagwire-shm stream reported an error.
    #[error("tagwire-shm: {context}: {message}")]
    TagwireShm {
        /// What the baseline was doing.
        context: &'static str,
        /// The stream's error text.
        message: String,
    },
    /// The echo did not answer a ping in time.
    #[error("{system}: no echo within {timeout_ms} ms after {round_trips} round trips")]
    ReplyTimeout {
        /// The system measured.
        system: &'static str,
        /// How long the pinger waited.
        timeout_ms: u64,
        /// Round trips completed before the timeout.
        round_trips: u64,
    },
    /// A worker thread or task of the benchmark died.
    #[error("benchmark worker failed: {0}")]
    Worker(String),
}

impl BenchError {
    /// Wraps an I/O error with what the baseline was doing.
    pub fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> BenchError {
        move |source| BenchError::Io { context, source }
    }

    /// Wraps a NATS client error with what the baseline was doing.
    pub fn nats<E: std::fmt::Display>(context: &'static str) -> impl FnOnce(E) -> BenchError {
        move |e| BenchError::Nats {
            context,
            message: e.to_string(),
        }
    }

    /// Wraps a Zenoh error with what the baseline was doing.
    pub fn zenoh<E: std::fmt::Display>(context: &'static str) -> impl FnOnce(E) -> BenchError {
        move |e| BenchError::Zenoh {
            context,
            message: e.to_string(),
        }
    }
}
