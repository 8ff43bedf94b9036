//! The client's error type.

use tagwire_proto::ErrorCode;

/// What went wrong in a client call. Server refusals carry the server's
/// stable [`ErrorCode`] and message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server URL is not one of `tcp://HOST:PORT`, `tls://HOST:PORT`,
    /// `unix:///PATH`.
    #[error("invalid server URL {url:?}: {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Could not connect.
    #[error("cannot connect to {url}: {source} (is tagwired running? start it with `tagwired`)")]
    Connect {
        /// The server.
        url: String,
        /// Why.
        source: std::io::Error,
    },
    /// No connection within the connect timeout (the server is down, not
    /// accepting, or unreachable); see [`crate::SessionBuilder::connect_timeout`].
    #[error("cannot connect to {url}: no answer within {timeout:?} (is tagwired running and accepting connections?)")]
    ConnectTimeout {
        /// The server.
        url: String,
        /// The timeout that ran out.
        timeout: std::time::Duration,
    },
    /// The connection was lost and did not come back within the reconnect
    /// wait; see [`crate::SessionBuilder::reconnect_wait`]. The session keeps
    /// trying to reconnect: a later call may succeed.
    #[error("lost the connection to {url} and it did not come back within {waited:?} (is tagwired running?)")]
    NotReconnected {
        /// The server.
        url: String,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// TLS could not be set up (a CA, certificate or key file that cannot
    /// be used) or the TLS handshake failed; the reason names the file or
    /// the verification step.
    #[error("TLS with {url}: {reason}")]
    Tls {
        /// The server.
        url: String,
        /// Why.
        reason: String,
    },
    /// A reliable publish found the window of unacknowledged events full
    /// and no acknowledgement made room within the wait (see
    /// [`crate::SessionBuilder::ack_window`] and
    /// [`crate::SessionBuilder::ack_timeout`]): the event was **not** sent.
    #[error("the window of unacknowledged events is full ({held} held) and the daemon acknowledged none within {waited:?}: the event was not sent (is the daemon or a reliable link stuck? see SessionBuilder::ack_window)")]
    AckWindowFull {
        /// Events held, unacknowledged.
        held: usize,
        /// How long the publish waited.
        waited: std::time::Duration,
    },
    /// [`crate::Session::wait_acknowledged`] ran out of time with events
    /// still unacknowledged (they stay held and are sent again after a
    /// reconnect).
    #[error("{held} reliable events still unacknowledged after {waited:?}")]
    Unacknowledged {
        /// Events held, unacknowledged.
        held: usize,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// An event too large for the transport's unit: over UDP one event
    /// travels in one datagram (`[udp] max_datagram`); fragmentation is not
    /// done, so a larger publish is refused, not sent in pieces.
    #[error("event frame of {size} bytes does not fit in one {transport} datagram (at most {max} bytes of frame; max_datagram 1400 less the 16-byte header); publish it over tcp:// or unix://, or make it smaller")]
    EventTooLarge {
        /// Bytes of its frame (length field included).
        size: usize,
        /// The most one datagram carries.
        max: usize,
        /// The transport (`udp`).
        transport: &'static str,
    },
    /// The handshake failed.
    #[error("handshake with {url} failed: {reason}")]
    Handshake {
        /// The server.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server refused a request.
    #[error("server refused: {message} (code {code:?})")]
    Refused {
        /// Stable error code.
        code: ErrorCode,
        /// The server's message.
        message: String,
    },
    /// The connection was lost while a request waited for its reply, or a
    /// subscription callback published while the session was reconnecting
    /// (the reader thread cannot wait for itself).
    #[error("not connected to the server (reconnecting)")]
    Disconnected,
    /// The session was closed.
    #[error("the session is closed")]
    Closed,
    /// A loaned payload written into shared memory could not be sent: the
    /// session reconnected before it was written (the new daemon does not
    /// know the region) and the packet had left the region meanwhile.
    #[error("publisher {publisher}: the loaned payload was lost across a reconnect: {reason}")]
    ShmPacketGone {
        /// The publisher endpoint.
        publisher: String,
        /// Why the packet could not be read back.
        reason: String,
    },
    /// No reply in time.
    #[error("no reply to {what} within {secs} s")]
    Timeout {
        /// The request.
        what: &'static str,
        /// The timeout.
        secs: u64,
    },
    /// The event cannot be encoded (a name or tag too long, ...).
    #[error("cannot encode event: {0}")]
    Encode(#[from] tagwire_proto::EncodeError),
    /// An invalid tag or pattern (checked before sending).
    #[error(transparent)]
    Tag(#[from] tagwire_core::tags::TagError),
    /// I/O error on the connection.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The embedded router could not start.
    #[error("embedded router: {0}")]
    Router(#[from] tagwire_router::RouterError),
    /// The server sent something that is not valid.
    #[error("bad reply from server: {0}")]
    BadReply(String),
    /// The router has no such priority band.
    #[error("the router has no band {band:?} (its bands: {known})")]
    UnknownBand {
        /// The band asked for.
        band: String,
        /// The router's bands, comma-separated.
        known: String,
    },
    /// A replay from the durable store failed (`replay_from`): the tag is
    /// not durable, the store is busy, or the connection was lost.
    #[error("replay of {tag}: {reason}")]
    Replay {
        /// The tag.
        tag: String,
        /// Why.
        reason: String,
    },
    /// After a reconnect, this subscriber's endpoint name was refused to
    /// it (another session took the name while the connection was down):
    /// the subscription receives nothing more.
    #[error("endpoint {name} was lost across a reconnect: {reason}")]
    EndpointLost {
        /// The endpoint name.
        name: String,
        /// The daemon's refusal.
        reason: String,
    },
}

/// Shorthand for `Result<T, tagwire::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
