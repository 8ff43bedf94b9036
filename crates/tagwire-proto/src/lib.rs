//! `tagwire-proto` — the tagwire wire protocol, version 1, with no I/O.
//!
//! A connection is a stream of length-prefixed [`Frame`]s. The client opens
//! with `Hello`, the server answers `Welcome` (negotiating the maximum frame
//! size); then endpoints are declared, subscriptions made, events published
//! and delivered. Events ([`Event`], [`EventRef`]) carry a header, typed
//! filterable fields and an opaque payload; `docs/protocol.md` documents every
//! byte, and its hex test vectors are loaded by this crate's tests. Admin
//! requests and replies are typed in [`admin`] ([`AdminRequest`],
//! [`AdminReply`]); their JSON wire form is documented in `docs/admin.md`.
//!
//! ```
//! use bytes::BytesMut;
//! use tagwire_proto::{Frame, FrameDecoder};
//! let mut buf = BytesMut::new();
//! Frame::Ping { nonce: 7 }.encode(&mut buf).unwrap();
//! let (kind, body) = FrameDecoder::new(1 << 20).next_raw(&mut buf).unwrap().unwrap();
//! assert_eq!(Frame::decode(kind, body).unwrap(), Frame::Ping { nonce: 7 });
//! ```

pub mod admin;
pub mod datagram;
mod error;
mod event;
mod excerpt;
mod frame;
pub mod handshake;
pub mod limits;
mod link;
mod pull;
mod reader;
mod writer;

pub use admin::{AdminError, AdminOp, AdminReply, AdminRequest};
pub use error::{DecodeError, EncodeError, ErrorCode};
pub use event::{
    Event, EventRef, Expiry, FieldIter, Header, NamedError, RawFieldIter, RawValueRef, ShmRef,
    Value, ValueRef,
};
pub use excerpt::{excerpt, truncate, Excerpt, EXCERPT_CHARS};
pub use frame::{
    deliver_piece_prefix, deliver_prefix, deliver_reliable_piece_prefix, deliver_reliable_prefix,
    encode_publish, encode_publish_reliable, frame_name, kind, validate_max_frame, EndpointKind,
    Frame, FrameDecoder, PieceOf, ShmRole, StreamError, ACK_PROTOCOL_VERSION,
    DELIVER_PIECE_PREFIX_LEN, DELIVER_PREFIX_LEN, DELIVER_RELIABLE_PIECE_PREFIX_LEN,
    DELIVER_RELIABLE_PREFIX_LEN, HEALED_PROTOCOL_VERSION, MAGIC, MAX_PIECED_EVENT,
    MIN_PROTOCOL_VERSION, PIECES_PROTOCOL_VERSION, PROTOCOL_VERSION, PUBLISH_PIECE_PREFIX_LEN,
    RELIABLE_PIECES_PROTOCOL_VERSION, SESSION_ID_LEN,
};
pub use handshake::TokenTag;
pub use link::{
    forward_prefix, is_link_kind, link_frame_name, link_kind, Ack, AckRange, Codec, FragmentOf,
    Interest, LinkFrame, ProxyAt, PullOutcome, COMPRESSED_HEADER_LEN, COMPRESS_LINK_VERSION,
    FORWARD_PREFIX_LEN, FRAGMENT_COMPRESSED_PREFIX_LEN, FRAGMENT_LINK_VERSION, FRAGMENT_PREFIX_LEN,
    LINK_VERSION, MAX_ACK_RANGES, MAX_ADVERT_INTEREST, MAX_ADVERT_NEIGHBORS, MAX_FRAGMENTED_EVENT,
    MAX_PEER_BANDS, MAX_RELIABLE_WINDOW, MIN_LINK_VERSION, PIECE_COMPRESS_LINK_VERSION,
    RELIABLE_LINK_VERSION, RELIABLE_TO_FIELDS_LEN, RELIABLE_TO_LINK_VERSION,
    UDP_BANDS_LINK_VERSION,
};
pub use pull::{
    Origins, Pull, PullQuery, PullReply, PullStatus, MAX_ORIGINS, MAX_PULL_REPLY_EVENTS,
};
pub use writer::FRAME_HEADER_LEN;
