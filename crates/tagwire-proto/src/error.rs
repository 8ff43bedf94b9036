//! Errors: [`DecodeError`] (the peer sent bad bytes), [`EncodeError`] (the
//! caller built something that cannot be encoded) and [`ErrorCode`], the
//! stable numeric codes carried by `Error` frames.

use thiserror::Error;

/// The peer sent bytes that are not a valid frame. Each variant names what
/// was being read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the field needs.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A length over its limit.
    #[error("{what} is {len} bytes, over the limit of {max}")]
    TooLong {
        /// What was too long.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A count over its limit.
    #[error("{count} {what}, over the limit of {max}")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// The count.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A string that is not UTF-8.
    #[error("{what} is not valid UTF-8 (invalid byte at offset {at})")]
    NotUtf8 {
        /// Which string.
        what: &'static str,
        /// Offset of the first invalid byte within the string.
        at: usize,
    },
    /// An enumerated value out of range.
    #[error("invalid {what}: {value}")]
    BadValue {
        /// Which value.
        what: &'static str,
        /// The value read.
        value: u64,
    },
    /// Reserved bits set.
    #[error("unknown bits set in {what}: {bits:#x}")]
    UnknownBits {
        /// Which bit set.
        what: &'static str,
        /// The unknown bits.
        bits: u32,
    },
    /// A frame type this version does not know.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrameType(u8),
    /// A frame with bytes left over after its last field.
    #[error("{count} trailing bytes after {what}")]
    TrailingBytes {
        /// The frame.
        what: &'static str,
        /// Bytes left over.
        count: usize,
    },
    /// A bearer token in a `Hello` of a version that proves tokens instead
    /// of sending them.
    #[error("a version-{version} Hello never carries a bearer token: the token is proven (TokenTag, Challenge, Proof), never sent")]
    BearerToken {
        /// The `Hello`'s version.
        version: u16,
    },
    /// An empty name where one is required.
    #[error("empty {what}")]
    Empty {
        /// Which name.
        what: &'static str,
    },
    /// The same field name twice in one event.
    #[error("duplicate field {name:?}")]
    DuplicateField {
        /// The repeated name.
        name: String,
    },
    /// The handshake did not start with the protocol magic.
    #[error("not a tagwire peer (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
}

/// Something the caller built cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A string over its limit.
    #[error("{what} is {len} bytes, over the limit of {max}")]
    TooLong {
        /// Which string.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Too many fields.
    #[error("{count} fields, over the limit of {max}")]
    TooManyFields {
        /// Number of fields.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A field value over 4 GiB.
    #[error("field value over 4 GiB")]
    ValueTooLong,
    /// A number the format does not allow.
    #[error("{what} may not be {value}")]
    BadValue {
        /// Which number.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// A bearer token in a `Hello` of a version that proves tokens instead
    /// of sending them.
    #[error("a version-{version} Hello never carries a bearer token: the token is proven (TokenTag, Challenge, Proof), never sent")]
    BearerToken {
        /// The `Hello`'s version.
        version: u16,
    },
    /// An empty name where one is required.
    #[error("empty {what}")]
    EmptyName {
        /// Which name.
        what: &'static str,
    },
    /// The same field name twice in one event (the receiver would refuse it).
    #[error("duplicate field {name:?}")]
    DuplicateField {
        /// The repeated name.
        name: String,
    },
    /// The frame would exceed the negotiated maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Frame length.
        len: usize,
        /// The maximum.
        max: usize,
    },
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:expr, )*) => {
        /// Stable numeric error codes carried by `Error` frames; documented in
        /// `docs/protocol.md`. Codes never change meaning once released.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* $name, )*
            /// A code this version does not know (kept, not rejected).
            Other(u16),
        }
        impl ErrorCode {
            /// The numeric code.
            pub fn code(self) -> u16 {
                match self { $( ErrorCode::$name => $code, )* ErrorCode::Other(c) => c }
            }
            /// The code for a number.
            pub fn from_code(c: u16) -> Self {
                match c { $( $code => ErrorCode::$name, )* c => ErrorCode::Other(c) }
            }
        }
    };
}

error_codes! {
    /// The bytes were not a valid frame (garbage, truncated, bad UTF-8, ...).
    Malformed = 1,
    /// A frame longer than the negotiated maximum.
    FrameTooLarge = 2,
    /// A frame type the receiver does not know.
    UnknownFrameType = 3,
    /// The peer's protocol version is not supported.
    UnsupportedVersion = 4,
    /// A frame other than `Hello` before the handshake completed.
    HandshakeRequired = 5,
    /// A tag that is not a valid tag.
    InvalidTag = 6,
    /// A pattern that is not a valid pattern.
    InvalidPattern = 7,
    /// An endpoint name already registered.
    DuplicateEndpoint = 8,
    /// A reference to an endpoint this connection has not declared.
    UnknownEndpoint = 9,
    /// A reference to a subscription this connection does not hold.
    UnknownSubscription = 10,
    /// A subscription id already in use on this connection.
    DuplicateSubscription = 11,
    /// A subscriber's queue is full and its policy is `reject`.
    QueueFull = 12,
    /// A table or per-connection limit was reached.
    LimitReached = 13,
    /// An invalid admin request.
    BadRequest = 14,
    /// The event names a different publisher than the endpoint it was sent on.
    PublisherMismatch = 15,
    /// The server is shutting down.
    ShuttingDown = 16,
    /// An internal error (a bug); the connection is closed.
    Internal = 17,
    /// A content filter or mapping filter that does not compile (syntax,
    /// type or limit); the message gives the position and what was expected.
    InvalidFilter = 18,
    /// The client did not prove an identity the server accepts (no token,
    /// a wrong token, or a transport that identifies nobody); the connection
    /// is closed.
    Unauthenticated = 19,
    /// The client's identity may not do this: publish or subscribe on a tag
    /// its ACL does not grant, change or remove another identity's endpoint,
    /// or use an admin request that needs the admin right.
    PermissionDenied = 20,
    /// A `Pull` on a tag that keeps no history (its `history` is 0), or on
    /// a publisher the tag's history does not know.
    NoHistory = 21,
    /// A `Pull` naming a node no daemon of the network has (or one it
    /// cannot reach).
    UnknownNode = 22,
    /// A request forwarded to another daemon was not answered in time.
    Timeout = 23,
}
