//! Frames: the unit of the wire protocol. Each frame is
//! `u32 length (LE) | u8 type | body`, where `length` counts the type byte and
//! the body. [`FrameDecoder`] splits a byte stream into [`Frame`]s without
//! copying event bodies; [`Frame::encode`] writes one.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError, ErrorCode};
use crate::event::Event;
use crate::excerpt::truncate;
use crate::handshake::{TokenTag, NONCE_LEN, PROOF_LEN};
use crate::limits::{HARD_MAX_FRAME, MAX_TEXT_LEN, MIN_MAX_FRAME};
use crate::pull::{Pull, PullReply};
use crate::reader::Reader;
use crate::writer::{patch_len, put_short_str, put_str16, FRAME_HEADER_LEN};

/// The newest protocol version this crate speaks (version 2 adds the
/// credentials to `Hello`; version 3 proves a token instead of sending it,
/// the server first: `Challenge` and `Proof`; version 4 adds acknowledged
/// publishing: `PublishReliable` and `PublishAck`, with a `Hello` laid out
/// as version 3's; version 5 adds pieces: `PublishPiece`, `DeliverPiece`
/// and `PieceResume`, for events larger than the frame; version 6 adds
/// `DeliverReliablePiece`, pieces for acknowledged subscriptions; version 7
/// adds `Healed`, the network healed; versions 1 to 6 are still
/// understood).
pub const PROTOCOL_VERSION: u16 = 7;
/// The first protocol version told that the network healed
/// ([`Frame::Healed`]).
pub const HEALED_PROTOCOL_VERSION: u16 = 7;
/// The first protocol version with events in pieces
/// ([`Frame::PublishPiece`], [`Frame::DeliverPiece`], [`Frame::PieceResume`]).
pub const PIECES_PROTOCOL_VERSION: u16 = 5;
/// The first protocol version whose acknowledged subscriptions get events
/// larger than the frame in pieces ([`Frame::DeliverReliablePiece`]).
pub const RELIABLE_PIECES_PROTOCOL_VERSION: u16 = 6;
/// The largest event a client connection carries in pieces: 4 GiB (the
/// offsets are `u64`; the bound is the protocol's).
pub const MAX_PIECED_EVENT: u64 = 1 << 32;
/// Bytes of a `PublishPiece` frame before its data: header, endpoint id,
/// sequence number, event id, total, checksum and offset.
pub const PUBLISH_PIECE_PREFIX_LEN: usize = FRAME_HEADER_LEN + 40;
/// Bytes of a `DeliverPiece` frame before its data: header, subscription
/// id, event id, total, checksum and offset.
pub const DELIVER_PIECE_PREFIX_LEN: usize = FRAME_HEADER_LEN + 32;
/// Bytes of a `DeliverReliablePiece` frame before its data: header,
/// subscription id, delivery sequence number, event id, total, checksum
/// and offset.
pub const DELIVER_RELIABLE_PIECE_PREFIX_LEN: usize = FRAME_HEADER_LEN + 40;
/// The first protocol version with acknowledged publishing
/// ([`Frame::PublishReliable`], [`Frame::PublishAck`]).
pub const ACK_PROTOCOL_VERSION: u16 = 4;
/// The oldest protocol version this crate still understands.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
/// Bytes of the session id a version-2 `Hello` carries.
pub const SESSION_ID_LEN: usize = 16;
/// The four bytes every `Hello` starts with.
pub const MAGIC: [u8; 4] = *b"TAGW";
/// Bytes of a `Deliver` frame before its event: header plus subscription id.
pub const DELIVER_PREFIX_LEN: usize = FRAME_HEADER_LEN + 4;
/// Bytes of a `DeliverReliable` frame before its event: header,
/// subscription id and delivery sequence number.
pub const DELIVER_RELIABLE_PREFIX_LEN: usize = FRAME_HEADER_LEN + 12;

/// Frame type codes.
pub mod kind {
    /// Client → server: open the session.
    pub const HELLO: u8 = 0x01;
    /// Server → client: session accepted.
    pub const WELCOME: u8 = 0x02;
    /// Client → server: register a named endpoint.
    pub const DECLARE_ENDPOINT: u8 = 0x03;
    /// Client → server: subscribe to a pattern.
    pub const SUBSCRIBE: u8 = 0x04;
    /// Client → server: drop a subscription.
    pub const UNSUBSCRIBE: u8 = 0x05;
    /// Client → server: publish an event.
    pub const PUBLISH: u8 = 0x06;
    /// Server → client: an event for a subscription.
    pub const DELIVER: u8 = 0x07;
    /// Server → client: a request succeeded.
    pub const OK: u8 = 0x08;
    /// Either way: something failed.
    pub const ERROR: u8 = 0x09;
    /// Either way: liveness probe.
    pub const PING: u8 = 0x0a;
    /// Either way: answer to `Ping`.
    pub const PONG: u8 = 0x0b;
    /// Either way: orderly close.
    pub const CLOSE: u8 = 0x0c;
    /// Client → server: admin request (JSON).
    pub const ADMIN: u8 = 0x0d;
    /// Server → client: admin reply (JSON).
    pub const ADMIN_REPLY: u8 = 0x0e;
    /// Client → server: unregister an endpoint (and its subscriptions).
    pub const UNDECLARE_ENDPOINT: u8 = 0x0f;
    /// Client → server: read a tag's history (pull buffer).
    pub const PULL: u8 = 0x10;
    /// Server → client: the events a `Pull` asked for, or "gone".
    pub const PULL_REPLY: u8 = 0x11;
    /// Server → client: names the shared-memory region whose memfd travels
    /// with it (SCM_RIGHTS on a Unix socket); see `docs/shm.md`.
    pub const SHM_REGION: u8 = 0x12;
    /// Server → client (version 3): the server's nonce and its proof that
    /// it knows the token the client's `Hello` named.
    pub const CHALLENGE: u8 = 0x13;
    /// Client → server (version 3): the client's proof that it knows the
    /// token, sent only after the server's proof checked out.
    pub const PROOF: u8 = 0x14;
    /// Client → server (version 4): publish an event the server
    /// acknowledges (`PublishAck`) once it has custody of it.
    pub const PUBLISH_RELIABLE: u8 = 0x15;
    /// Server → client (version 4): which `PublishReliable` frames are
    /// settled.
    pub const PUBLISH_ACK: u8 = 0x16;
    /// Server → client (version 4): an event for a subscription with
    /// acknowledged delivery, under the subscription's delivery sequence
    /// number; the client settles it with `DeliverAck`.
    pub const DELIVER_RELIABLE: u8 = 0x17;
    /// Client → server (version 4): which `DeliverReliable` frames of a
    /// subscription the client has taken.
    pub const DELIVER_ACK: u8 = 0x18;
    /// Client → server (version 5): one piece of an event larger than the
    /// connection's frame.
    pub const PUBLISH_PIECE: u8 = 0x19;
    /// Server → client (version 5): one piece of an event for a
    /// subscription, larger than the connection's frame.
    pub const DELIVER_PIECE: u8 = 0x1a;
    /// Server → client (version 5): the bytes the server already holds of
    /// an event the client sends again in pieces (continue there).
    pub const PIECE_RESUME: u8 = 0x1b;
    /// Server → client (version 6): one piece of an event larger than the
    /// connection's frame, for a subscription with acknowledged delivery;
    /// the whole event is settled with `DeliverAck` under its sequence
    /// number, like a `DeliverReliable`.
    pub const DELIVER_RELIABLE_PIECE: u8 = 0x1c;
    /// Server → client (version 7): daemons the server could not reach
    /// are reachable again (a partition healed, a daemon on the path came
    /// back): what was published there meanwhile did not come; a client
    /// resumes its durable subscriptions from the stores.
    pub const HEALED: u8 = 0x1d;
}

/// What every piece of one event says about it (versions 5's
/// `PublishPiece` and `DeliverPiece`, version 6's `DeliverReliablePiece`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PieceOf {
    /// The sender's id of the event (the same when it sends it again).
    pub id: u64,
    /// The event's encoded length (1 ..= [`MAX_PIECED_EVENT`]).
    pub total: u64,
    /// CRC-32 (IEEE) of the whole encoded event.
    pub checksum: u32,
    /// Where this piece's data starts in the event.
    pub offset: u64,
}

impl PieceOf {
    fn encode(&self, out: &mut impl BufMut) {
        out.put_u64_le(self.id);
        out.put_u64_le(self.total);
        out.put_u32_le(self.checksum);
        out.put_u64_le(self.offset);
    }

    /// Reads the fields and checks them against the piece's `data_len`:
    /// a total of 0 or over [`MAX_PIECED_EVENT`], an empty piece, or one
    /// reaching past the total is a decode error.
    fn decode(r: &mut Reader<'_>, data_len: usize) -> Result<PieceOf, DecodeError> {
        let p = PieceOf {
            id: r.u64("piece event id")?,
            total: r.u64("piece total")?,
            checksum: r.u32("piece checksum")?,
            offset: r.u64("piece offset")?,
        };
        if p.total == 0 || p.total > MAX_PIECED_EVENT {
            return Err(DecodeError::BadValue {
                what: "piece total (1 to 4 GiB)",
                value: p.total,
            });
        }
        if data_len == 0 {
            return Err(DecodeError::BadValue {
                what: "piece length (an empty piece)",
                value: 0,
            });
        }
        if p.offset > p.total || data_len as u64 > p.total - p.offset {
            return Err(DecodeError::BadValue {
                what: "piece offset (its data reaches past the total)",
                value: p.offset,
            });
        }
        Ok(p)
    }
}

/// What a declared endpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointKind {
    /// Publishes events (code 1).
    Publisher,
    /// Holds subscriptions (code 2).
    Subscriber,
}

impl EndpointKind {
    fn code(self) -> u8 {
        match self {
            EndpointKind::Publisher => 1,
            EndpointKind::Subscriber => 2,
        }
    }
    fn from_code(c: u8) -> Result<Self, DecodeError> {
        match c {
            1 => Ok(EndpointKind::Publisher),
            2 => Ok(EndpointKind::Subscriber),
            v => Err(DecodeError::BadValue {
                what: "endpoint kind",
                value: v as u64,
            }),
        }
    }
}

/// One protocol frame. Event bodies are [`Bytes`] slices of the input buffer:
/// decoding a `Publish` copies nothing.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Frame {
    /// Opens a session: magic, version, the largest frame the client accepts.
    Hello {
        /// Protocol version the client speaks.
        version: u16,
        /// Largest frame the client accepts.
        max_frame: u32,
        /// Client name (for logs and `tagwire list`).
        name: String,
        /// A bearer token proving the client's identity (version 2 only;
        /// empty: none, the transport identifies the client, e.g. Unix peer
        /// credentials or a TLS client certificate).
        token: String,
        /// Version 3: the tag naming the token the client will prove
        /// (`None`: no token, the transport identifies the client). The
        /// token itself is never sent. Boxed: a `Hello` is rare, and every
        /// other frame stays small.
        proof: Option<Box<TokenTag>>,
        /// A random id the client keeps across reconnects (version 2; all
        /// zero: none), so that it can reclaim its endpoint names.
        session: [u8; SESSION_ID_LEN],
    },
    /// Version 3, server → client: the server's nonce and its proof that it
    /// knows the token the client's `Hello` named (see [`crate::handshake`]).
    Challenge {
        /// The server's fresh random nonce (`Ns`).
        nonce: [u8; NONCE_LEN],
        /// `HMAC(token, "tagwire-v3 server proof" | Nc | Ns)`.
        proof: [u8; PROOF_LEN],
    },
    /// Version 3, client → server: the client's proof that it knows the
    /// token, after the server proved it first.
    Proof {
        /// `HMAC(token, "tagwire-v3 client proof" | Nc | Ns)`.
        proof: [u8; PROOF_LEN],
    },
    /// Accepts a session; `max_frame` is the negotiated limit for both ways.
    Welcome {
        /// Protocol version chosen.
        version: u16,
        /// Negotiated maximum frame size.
        max_frame: u32,
        /// Server name.
        name: String,
    },
    /// Registers a named endpoint under a connection-local id.
    DeclareEndpoint {
        /// Request id echoed in the `Ok`/`Error` reply.
        req: u32,
        /// Connection-local endpoint id.
        id: u32,
        /// Publisher or subscriber.
        kind: EndpointKind,
        /// Globally unique endpoint name.
        name: String,
    },
    /// Unregisters endpoint `id`, freeing its name; its subscriptions go with it.
    UndeclareEndpoint {
        /// Request id echoed in the reply (0: no reply wanted on success).
        req: u32,
        /// Connection-local endpoint id.
        id: u32,
    },
    /// Subscribes endpoint `endpoint` to `pattern` under id `sub`.
    Subscribe {
        /// Request id echoed in the reply.
        req: u32,
        /// Connection-local subscription id, used in `Deliver`.
        sub: u32,
        /// The subscriber endpoint's id.
        endpoint: u32,
        /// Tag pattern.
        pattern: String,
        /// QoS properties (`name`, `value`) as users type them.
        qos: Vec<(String, String)>,
    },
    /// Drops subscription `sub`.
    Unsubscribe {
        /// Request id.
        req: u32,
        /// Subscription id.
        sub: u32,
    },
    /// Publishes an encoded event from endpoint `endpoint`.
    Publish {
        /// The publisher endpoint's id.
        endpoint: u32,
        /// The encoded event (see [`crate::EventRef::parse`]).
        event: Bytes,
    },
    /// Version 4: publishes an encoded event from endpoint `endpoint` under
    /// the connection's acknowledgement sequence number `seq` (1, 2, … on
    /// each connection); the server answers with [`Frame::PublishAck`].
    PublishReliable {
        /// The publisher endpoint's id.
        endpoint: u32,
        /// Its per-connection sequence number.
        seq: u64,
        /// The encoded event.
        event: Bytes,
    },
    /// Version 4: settles `PublishReliable` frames of this connection
    /// (cumulatively, with selective and failed ranges, as a link `Ack`).
    PublishAck(crate::link::Ack),
    /// Version 4: delivers an encoded event to subscription `sub` (one
    /// with acknowledged delivery) under its delivery sequence number
    /// `seq` (1, 2, … per subscription on each connection); the client
    /// answers with [`Frame::DeliverAck`].
    DeliverReliable {
        /// Subscription id.
        sub: u32,
        /// Its per-subscription delivery sequence number.
        seq: u64,
        /// The encoded event.
        event: Bytes,
    },
    /// Version 4: settles `DeliverReliable` frames of subscription `sub`
    /// (cumulatively, with selective ranges, as a link `Ack`; the client
    /// sends no failed range, and the server takes one as done).
    DeliverAck {
        /// Subscription id.
        sub: u32,
        /// What it settles.
        ack: crate::link::Ack,
    },
    /// Version 5: one piece of an event larger than the connection's frame,
    /// published by endpoint `endpoint`. `seq` 0: the event is a plain
    /// `Publish`; else it is the `PublishReliable` of that sequence number
    /// (checked when the event is whole).
    PublishPiece {
        /// The publisher endpoint's id.
        endpoint: u32,
        /// 0, or the acknowledgement sequence number of the whole event.
        seq: u64,
        /// Which event, and where this piece goes in it.
        of: PieceOf,
        /// The piece's bytes.
        data: Bytes,
    },
    /// Version 5: one piece of an event for subscription `sub`, larger
    /// than the connection's frame.
    DeliverPiece {
        /// Subscription id.
        sub: u32,
        /// Which event, and where this piece goes in it.
        of: PieceOf,
        /// The piece's bytes.
        data: Bytes,
    },
    /// Version 6: one piece of an event for subscription `sub` (acknowledged
    /// delivery), larger than the connection's frame; the whole event is
    /// delivery `seq`, settled with `DeliverAck` like a `DeliverReliable`.
    DeliverReliablePiece {
        /// Subscription id.
        sub: u32,
        /// The whole event's delivery sequence number.
        seq: u64,
        /// Which event, and where this piece goes in it.
        of: PieceOf,
        /// The piece's bytes.
        data: Bytes,
    },
    /// Version 5: the server holds the first `have` bytes of event `id` of
    /// publisher endpoint `endpoint` (a resend after a reconnect): the
    /// client continues its pieces there.
    PieceResume {
        /// The publisher endpoint's id.
        endpoint: u32,
        /// The event's id (its pieces' `id`).
        id: u64,
        /// Bytes held from the start.
        have: u64,
    },
    /// Version 7: daemons the server could not reach are reachable again;
    /// it now reaches `daemons` (itself included). Events published at them
    /// meanwhile did not come: the client library resumes its durable
    /// subscriptions (a replay from the stores, as after a reconnect).
    Healed {
        /// Daemons the server reaches now, itself included.
        daemons: u32,
    },
    /// Delivers an encoded event to subscription `sub`.
    Deliver {
        /// Subscription id.
        sub: u32,
        /// The encoded event.
        event: Bytes,
    },
    /// Request `req` succeeded.
    Ok {
        /// Request id.
        req: u32,
    },
    /// Something failed. `req` is the failed request, or 0 for the connection.
    Error {
        /// Request id, 0 if none.
        req: u32,
        /// Stable error code.
        code: ErrorCode,
        /// Human-readable message naming what was wrong.
        message: String,
    },
    /// Liveness probe.
    Ping {
        /// Echoed in the `Pong`.
        nonce: u64,
    },
    /// Answer to `Ping`.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// Orderly close.
    Close {
        /// Why (an [`ErrorCode`], or 0 for a normal close).
        code: u16,
        /// Human-readable reason.
        reason: String,
    },
    /// Admin request, a JSON document (see `docs/protocol.md`).
    Admin {
        /// Request id.
        req: u32,
        /// JSON text.
        body: String,
    },
    /// Admin reply, a JSON document.
    AdminReply {
        /// Request id.
        req: u32,
        /// JSON text.
        body: String,
    },
    /// Reads a tag's history (see [`Pull`]).
    Pull(Pull),
    /// Answers a `Pull` (see [`PullReply`]).
    PullReply(PullReply),
    /// Names the shared-memory region whose memfd was passed with it
    /// (SCM_RIGHTS, attached at or before this frame's first byte).
    ShmRegion {
        /// The daemon's id of the region (never reused while it runs).
        region: u64,
        /// What the client may do with it.
        role: ShmRole,
        /// With [`ShmRole::Producer`]: the client's publisher endpoint id.
        /// With [`ShmRole::Consumer`]: the ticket of the pin row the daemon
        /// keeps for this connection (`tagwire_shm::PinRow::ticket`), under
        /// which the connection adopts and gives back delivered payloads.
        endpoint: u32,
    },
}

/// What a client may do with a region named by [`Frame::ShmRegion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShmRole {
    /// It is the producer of the region's stream 0 (code 1).
    Producer,
    /// It reads payloads that deliveries point at (code 2).
    Consumer,
}

impl ShmRole {
    fn code(self) -> u8 {
        match self {
            ShmRole::Producer => 1,
            ShmRole::Consumer => 2,
        }
    }
    fn from_code(c: u8) -> Result<Self, DecodeError> {
        match c {
            1 => Ok(ShmRole::Producer),
            2 => Ok(ShmRole::Consumer),
            v => Err(DecodeError::BadValue {
                what: "shared-memory role",
                value: v as u64,
            }),
        }
    }
}

impl Frame {
    /// The frame's type code.
    pub fn kind(&self) -> u8 {
        match self {
            Frame::Hello { .. } => kind::HELLO,
            Frame::Welcome { .. } => kind::WELCOME,
            Frame::Challenge { .. } => kind::CHALLENGE,
            Frame::Proof { .. } => kind::PROOF,
            Frame::DeclareEndpoint { .. } => kind::DECLARE_ENDPOINT,
            Frame::UndeclareEndpoint { .. } => kind::UNDECLARE_ENDPOINT,
            Frame::Subscribe { .. } => kind::SUBSCRIBE,
            Frame::Unsubscribe { .. } => kind::UNSUBSCRIBE,
            Frame::Publish { .. } => kind::PUBLISH,
            Frame::PublishReliable { .. } => kind::PUBLISH_RELIABLE,
            Frame::PublishAck(_) => kind::PUBLISH_ACK,
            Frame::DeliverReliable { .. } => kind::DELIVER_RELIABLE,
            Frame::DeliverAck { .. } => kind::DELIVER_ACK,
            Frame::Deliver { .. } => kind::DELIVER,
            Frame::PublishPiece { .. } => kind::PUBLISH_PIECE,
            Frame::DeliverPiece { .. } => kind::DELIVER_PIECE,
            Frame::DeliverReliablePiece { .. } => kind::DELIVER_RELIABLE_PIECE,
            Frame::PieceResume { .. } => kind::PIECE_RESUME,
            Frame::Healed { .. } => kind::HEALED,
            Frame::Ok { .. } => kind::OK,
            Frame::Error { .. } => kind::ERROR,
            Frame::Ping { .. } => kind::PING,
            Frame::Pong { .. } => kind::PONG,
            Frame::Close { .. } => kind::CLOSE,
            Frame::Admin { .. } => kind::ADMIN,
            Frame::AdminReply { .. } => kind::ADMIN_REPLY,
            Frame::Pull(_) => kind::PULL,
            Frame::PullReply(_) => kind::PULL_REPLY,
            Frame::ShmRegion { .. } => kind::SHM_REGION,
        }
    }

    /// Appends this frame, header included, to `out`. On error `out` is left
    /// as it was (no partial frame is ever left behind to be sent).
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        let result = self.encode_inner(out, start);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_inner(&self, out: &mut BytesMut, start: usize) -> Result<(), EncodeError> {
        out.put_u32_le(0); // patched below
        out.put_u8(self.kind());
        match self {
            Frame::Hello {
                version,
                max_frame,
                name,
                token,
                proof,
                session,
            } => {
                out.put_slice(&MAGIC);
                out.put_u16_le(*version);
                out.put_u32_le(*max_frame);
                put_short_str(out, "client name", name)?;
                match *version {
                    2 => {
                        put_short_str(out, "token", token)?;
                        out.put_slice(session);
                    }
                    // Versions 4 and later lay their Hello out as version 3's.
                    3..=PROTOCOL_VERSION => {
                        if !token.is_empty() {
                            return Err(EncodeError::BearerToken { version: 3 });
                        }
                        match proof {
                            None => out.put_u8(CREDENTIAL_NONE),
                            Some(t) => {
                                out.put_u8(CREDENTIAL_TOKEN);
                                out.put_slice(&t.nonce);
                                out.put_slice(&t.tag);
                            }
                        }
                        out.put_slice(session);
                    }
                    // Version 1, and versions this crate does not speak:
                    // the frozen prefix only.
                    _ => {}
                }
            }
            Frame::Challenge { nonce, proof } => {
                out.put_slice(nonce);
                out.put_slice(proof);
            }
            Frame::Proof { proof } => out.put_slice(proof),
            Frame::Welcome {
                version,
                max_frame,
                name,
            } => {
                out.put_u16_le(*version);
                out.put_u32_le(*max_frame);
                put_short_str(out, "server name", name)?;
            }
            Frame::DeclareEndpoint {
                req,
                id,
                kind,
                name,
            } => {
                out.put_u32_le(*req);
                out.put_u32_le(*id);
                out.put_u8(kind.code());
                put_short_str(out, "endpoint name", name)?;
            }
            Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos,
            } => {
                out.put_u32_le(*req);
                out.put_u32_le(*sub);
                out.put_u32_le(*endpoint);
                put_str16(out, "pattern", pattern)?;
                if qos.len() > u8::MAX as usize {
                    return Err(EncodeError::TooLong {
                        what: "QoS property list",
                        len: qos.len(),
                        max: u8::MAX as usize,
                    });
                }
                out.put_u8(qos.len() as u8);
                for (k, v) in qos {
                    put_short_str(out, "QoS property name", k)?;
                    put_str16(out, "QoS property value", v)?;
                }
            }
            Frame::Unsubscribe { req, sub } | Frame::UndeclareEndpoint { req, id: sub } => {
                out.put_u32_le(*req);
                out.put_u32_le(*sub);
            }
            Frame::Publish { endpoint, event } => {
                out.put_u32_le(*endpoint);
                out.put_slice(event);
            }
            Frame::PublishReliable {
                endpoint,
                seq,
                event,
            } => {
                out.put_u32_le(*endpoint);
                out.put_u64_le(*seq);
                out.put_slice(event);
            }
            Frame::PublishAck(ack) => ack.encode_body(out)?,
            Frame::DeliverReliable { sub, seq, event } => {
                out.put_u32_le(*sub);
                out.put_u64_le(*seq);
                out.put_slice(event);
            }
            Frame::DeliverAck { sub, ack } => {
                out.put_u32_le(*sub);
                ack.encode_body(out)?;
            }
            Frame::Deliver { sub, event } => {
                out.put_u32_le(*sub);
                out.put_slice(event);
            }
            Frame::PublishPiece {
                endpoint,
                seq,
                of,
                data,
            } => {
                out.put_u32_le(*endpoint);
                out.put_u64_le(*seq);
                of.encode(out);
                out.put_slice(data);
            }
            Frame::DeliverPiece { sub, of, data } => {
                out.put_u32_le(*sub);
                of.encode(out);
                out.put_slice(data);
            }
            Frame::DeliverReliablePiece { sub, seq, of, data } => {
                out.put_u32_le(*sub);
                out.put_u64_le(*seq);
                of.encode(out);
                out.put_slice(data);
            }
            Frame::PieceResume { endpoint, id, have } => {
                out.put_u32_le(*endpoint);
                out.put_u64_le(*id);
                out.put_u64_le(*have);
            }
            Frame::Healed { daemons } => out.put_u32_le(*daemons),
            Frame::Ok { req } => out.put_u32_le(*req),
            Frame::Error { req, code, message } => {
                out.put_u32_le(*req);
                out.put_u16_le(code.code());
                put_str16(out, "error message", truncate(message, MAX_TEXT_LEN))?;
            }
            Frame::Ping { nonce } | Frame::Pong { nonce } => out.put_u64_le(*nonce),
            Frame::Close { code, reason } => {
                out.put_u16_le(*code);
                put_str16(out, "close reason", truncate(reason, MAX_TEXT_LEN))?;
            }
            Frame::Admin { req, body } | Frame::AdminReply { req, body } => {
                out.put_u32_le(*req);
                out.put_slice(body.as_bytes());
            }
            Frame::Pull(pull) => pull.encode(out)?,
            Frame::PullReply(reply) => reply.encode(out)?,
            Frame::ShmRegion {
                region,
                role,
                endpoint,
            } => {
                out.put_u64_le(*region);
                out.put_u8(role.code());
                out.put_u32_le(*endpoint);
            }
        }
        patch_len(out, start)
    }

    /// Decodes one frame from `kind` and `body` (the bytes after the header).
    pub fn decode(kind_code: u8, body: Bytes) -> Result<Frame, DecodeError> {
        let mut r = Reader::new(&body);
        let frame = match kind_code {
            kind::HELLO => {
                let m = r.bytes(4, "magic")?;
                if m != MAGIC {
                    let mut a = [0u8; 4];
                    a.copy_from_slice(m);
                    return Err(DecodeError::BadMagic(a));
                }
                let version = r.u16("version")?;
                let max_frame = r.u32("max frame")?;
                let name = r.short_str("client name")?.to_owned();
                let mut session = [0u8; SESSION_ID_LEN];
                let (token, proof) = match version {
                    2 => {
                        let token = r.short_str("token")?.to_owned();
                        session.copy_from_slice(r.bytes(SESSION_ID_LEN, "session id")?);
                        (token, None)
                    }
                    3..=PROTOCOL_VERSION => {
                        let proof = match r.u8("credential kind")? {
                            CREDENTIAL_NONE => None,
                            CREDENTIAL_TOKEN => Some(Box::new(TokenTag {
                                nonce: array(&mut r, "token nonce")?,
                                tag: array(&mut r, "token tag")?,
                            })),
                            v => {
                                return Err(DecodeError::BadValue {
                                    what: "credential kind",
                                    value: v as u64,
                                })
                            }
                        };
                        session.copy_from_slice(r.bytes(SESSION_ID_LEN, "session id")?);
                        (String::new(), proof)
                    }
                    _ => (String::new(), None),
                };
                let hello = Frame::Hello {
                    version,
                    max_frame,
                    name,
                    token,
                    proof,
                    session,
                };
                // This prefix of `Hello` is frozen across versions; another
                // version may append to it. Skip that, so the server can
                // answer `UnsupportedVersion` instead of `Malformed`.
                if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
                    return Ok(hello);
                }
                hello
            }
            kind::CHALLENGE => Frame::Challenge {
                nonce: array(&mut r, "server nonce")?,
                proof: array(&mut r, "server proof")?,
            },
            kind::PROOF => Frame::Proof {
                proof: array(&mut r, "client proof")?,
            },
            kind::WELCOME => Frame::Welcome {
                version: r.u16("version")?,
                max_frame: r.u32("max frame")?,
                name: r.short_str("server name")?.to_owned(),
            },
            kind::DECLARE_ENDPOINT => Frame::DeclareEndpoint {
                req: r.u32("request id")?,
                id: r.u32("endpoint id")?,
                kind: EndpointKind::from_code(r.u8("endpoint kind")?)?,
                name: r.short_str("endpoint name")?.to_owned(),
            },
            kind::SUBSCRIBE => {
                let req = r.u32("request id")?;
                let sub = r.u32("subscription id")?;
                let endpoint = r.u32("endpoint id")?;
                let pattern = r.str16(MAX_TEXT_LEN, "pattern")?.to_owned();
                let n = r.u8("QoS property count")? as usize;
                let mut qos = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = r.short_str("QoS property name")?.to_owned();
                    let v = r.str16(MAX_TEXT_LEN, "QoS property value")?.to_owned();
                    qos.push((k, v));
                }
                Frame::Subscribe {
                    req,
                    sub,
                    endpoint,
                    pattern,
                    qos,
                }
            }
            kind::UNSUBSCRIBE => Frame::Unsubscribe {
                req: r.u32("request id")?,
                sub: r.u32("subscription id")?,
            },
            kind::UNDECLARE_ENDPOINT => Frame::UndeclareEndpoint {
                req: r.u32("request id")?,
                id: r.u32("endpoint id")?,
            },
            kind::PUBLISH => {
                let endpoint = r.u32("endpoint id")?;
                return Ok(Frame::Publish {
                    endpoint,
                    event: body.slice(4..),
                });
            }
            kind::PUBLISH_RELIABLE => {
                let endpoint = r.u32("endpoint id")?;
                let seq = r.u64("publish sequence number")?;
                return Ok(Frame::PublishReliable {
                    endpoint,
                    seq,
                    event: body.slice(12..),
                });
            }
            kind::PUBLISH_ACK => Frame::PublishAck(crate::link::Ack::decode_body(&mut r)?),
            kind::DELIVER_RELIABLE => {
                let sub = r.u32("subscription id")?;
                let seq = r.u64("delivery sequence number")?;
                return Ok(Frame::DeliverReliable {
                    sub,
                    seq,
                    event: body.slice(12..),
                });
            }
            kind::DELIVER_ACK => Frame::DeliverAck {
                sub: r.u32("subscription id")?,
                ack: crate::link::Ack::decode_body(&mut r)?,
            },
            kind::DELIVER => {
                let sub = r.u32("subscription id")?;
                return Ok(Frame::Deliver {
                    sub,
                    event: body.slice(4..),
                });
            }
            kind::PUBLISH_PIECE => {
                let endpoint = r.u32("endpoint id")?;
                let seq = r.u64("publish sequence number")?;
                let data_len = body
                    .len()
                    .saturating_sub(PUBLISH_PIECE_PREFIX_LEN - FRAME_HEADER_LEN);
                let of = PieceOf::decode(&mut r, data_len)?;
                return Ok(Frame::PublishPiece {
                    endpoint,
                    seq,
                    of,
                    data: body.slice(PUBLISH_PIECE_PREFIX_LEN - FRAME_HEADER_LEN..),
                });
            }
            kind::DELIVER_PIECE => {
                let sub = r.u32("subscription id")?;
                let data_len = body
                    .len()
                    .saturating_sub(DELIVER_PIECE_PREFIX_LEN - FRAME_HEADER_LEN);
                let of = PieceOf::decode(&mut r, data_len)?;
                return Ok(Frame::DeliverPiece {
                    sub,
                    of,
                    data: body.slice(DELIVER_PIECE_PREFIX_LEN - FRAME_HEADER_LEN..),
                });
            }
            kind::DELIVER_RELIABLE_PIECE => {
                let sub = r.u32("subscription id")?;
                let seq = r.u64("delivery sequence number")?;
                let data_len = body
                    .len()
                    .saturating_sub(DELIVER_RELIABLE_PIECE_PREFIX_LEN - FRAME_HEADER_LEN);
                let of = PieceOf::decode(&mut r, data_len)?;
                return Ok(Frame::DeliverReliablePiece {
                    sub,
                    seq,
                    of,
                    data: body.slice(DELIVER_RELIABLE_PIECE_PREFIX_LEN - FRAME_HEADER_LEN..),
                });
            }
            kind::PIECE_RESUME => Frame::PieceResume {
                endpoint: r.u32("endpoint id")?,
                id: r.u64("piece event id")?,
                have: r.u64("bytes held")?,
            },
            kind::HEALED => Frame::Healed {
                daemons: r.u32("daemons reached")?,
            },
            kind::OK => Frame::Ok {
                req: r.u32("request id")?,
            },
            kind::ERROR => Frame::Error {
                req: r.u32("request id")?,
                code: ErrorCode::from_code(r.u16("error code")?),
                message: r.str16(MAX_TEXT_LEN, "error message")?.to_owned(),
            },
            kind::PING => Frame::Ping {
                nonce: r.u64("nonce")?,
            },
            kind::PONG => Frame::Pong {
                nonce: r.u64("nonce")?,
            },
            kind::CLOSE => Frame::Close {
                code: r.u16("close code")?,
                reason: r.str16(MAX_TEXT_LEN, "close reason")?.to_owned(),
            },
            kind::ADMIN | kind::ADMIN_REPLY => {
                let req = r.u32("request id")?;
                let n = body.len() - 4;
                let text = r.str(n, "admin body")?.to_owned();
                if kind_code == kind::ADMIN {
                    Frame::Admin { req, body: text }
                } else {
                    Frame::AdminReply { req, body: text }
                }
            }
            kind::PULL => Frame::Pull(Pull::decode(&mut r)?),
            kind::PULL_REPLY => return Ok(Frame::PullReply(PullReply::decode(&body)?)),
            kind::SHM_REGION => Frame::ShmRegion {
                region: r.u64("region id")?,
                role: ShmRole::from_code(r.u8("shared-memory role")?)?,
                endpoint: r.u32("endpoint id")?,
            },
            other => return Err(DecodeError::UnknownFrameType(other)),
        };
        r.finish(frame_name(kind_code))?;
        Ok(frame)
    }
}

/// The name of a frame type, for messages.
pub fn frame_name(kind_code: u8) -> &'static str {
    match kind_code {
        kind::HELLO => "Hello",
        kind::WELCOME => "Welcome",
        kind::CHALLENGE => "Challenge",
        kind::PROOF => "Proof",
        kind::DECLARE_ENDPOINT => "DeclareEndpoint",
        kind::SUBSCRIBE => "Subscribe",
        kind::UNSUBSCRIBE => "Unsubscribe",
        kind::PUBLISH => "Publish",
        kind::DELIVER => "Deliver",
        kind::OK => "Ok",
        kind::ERROR => "Error",
        kind::PING => "Ping",
        kind::PONG => "Pong",
        kind::CLOSE => "Close",
        kind::ADMIN => "Admin",
        kind::ADMIN_REPLY => "AdminReply",
        kind::UNDECLARE_ENDPOINT => "UndeclareEndpoint",
        kind::PULL => "Pull",
        kind::PULL_REPLY => "PullReply",
        kind::SHM_REGION => "ShmRegion",
        kind::PUBLISH_RELIABLE => "PublishReliable",
        kind::PUBLISH_ACK => "PublishAck",
        kind::DELIVER_RELIABLE => "DeliverReliable",
        kind::DELIVER_ACK => "DeliverAck",
        kind::PUBLISH_PIECE => "PublishPiece",
        kind::DELIVER_PIECE => "DeliverPiece",
        kind::PIECE_RESUME => "PieceResume",
        kind::DELIVER_RELIABLE_PIECE => "DeliverReliablePiece",
        kind::HEALED => "Healed",
        k if crate::link::is_link_kind(k) => crate::link::link_frame_name(k),
        _ => "unknown frame",
    }
}

/// A version-3 `Hello`'s credential kind: no token.
const CREDENTIAL_NONE: u8 = 0;
/// A version-3 `Hello`'s credential kind: a token tag (nonce, tag) follows.
const CREDENTIAL_TOKEN: u8 = 1;

/// Reads `N` bytes into an array.
fn array<const N: usize>(r: &mut Reader<'_>, what: &'static str) -> Result<[u8; N], DecodeError> {
    let mut a = [0u8; N];
    a.copy_from_slice(r.bytes(N, what)?);
    Ok(a)
}

/// Appends a `Publish` frame carrying `event`, encoding the event in place
/// (no intermediate buffer).
pub fn encode_publish(endpoint: u32, event: &Event, out: &mut BytesMut) -> Result<(), EncodeError> {
    let start = out.len();
    out.reserve(FRAME_HEADER_LEN + 4 + event.encoded_len());
    // Length (patched below), type and endpoint in one append.
    let mut head = [0u8; FRAME_HEADER_LEN + 4];
    head[4] = kind::PUBLISH;
    head[5..].copy_from_slice(&endpoint.to_le_bytes());
    out.put_slice(&head);
    if let Err(e) = event.encode(out) {
        out.truncate(start);
        return Err(e);
    }
    patch_len(out, start)
}

/// Appends a whole `PublishReliable` frame (version 4) for `event`, sent by
/// publisher endpoint `endpoint` under acknowledgement sequence number
/// `seq`, to `out` (left as it was on error).
pub fn encode_publish_reliable(
    endpoint: u32,
    seq: u64,
    event: &[u8],
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.reserve(FRAME_HEADER_LEN + 12 + event.len());
    out.put_u32_le(0);
    out.put_u8(kind::PUBLISH_RELIABLE);
    out.put_u32_le(endpoint);
    out.put_u64_le(seq);
    out.put_slice(event);
    if let Err(e) = patch_len(out, start) {
        out.truncate(start);
        return Err(e);
    }
    Ok(())
}

/// The bytes that precede an encoded event of `event_len` bytes in a
/// `Deliver` frame for subscription `sub`. The router writes this prefix and
/// the shared event bytes with one vectored write: no per-subscriber copy.
pub fn deliver_prefix(sub: u32, event_len: usize) -> [u8; DELIVER_PREFIX_LEN] {
    let mut p = [0u8; DELIVER_PREFIX_LEN];
    let len = (1 + 4 + event_len) as u32;
    p[..4].copy_from_slice(&len.to_le_bytes());
    p[4] = kind::DELIVER;
    p[5..9].copy_from_slice(&sub.to_le_bytes());
    p
}

/// The bytes that precede piece `of` (of `data_len` bytes) in a
/// `DeliverPiece` frame (version 5) for subscription `sub`, written like
/// [`deliver_prefix`] before a slice of the shared event.
pub fn deliver_piece_prefix(
    sub: u32,
    of: &PieceOf,
    data_len: usize,
) -> [u8; DELIVER_PIECE_PREFIX_LEN] {
    let mut p = [0u8; DELIVER_PIECE_PREFIX_LEN];
    let mut w = &mut p[..];
    w.put_u32_le((DELIVER_PIECE_PREFIX_LEN - 4 + data_len) as u32);
    w.put_u8(kind::DELIVER_PIECE);
    w.put_u32_le(sub);
    of.encode(&mut w);
    p
}

/// The bytes that precede piece `of` (of `data_len` bytes) in a
/// `DeliverReliablePiece` frame (version 6) for subscription `sub`, whole
/// event delivery `seq`, written like [`deliver_piece_prefix`].
pub fn deliver_reliable_piece_prefix(
    sub: u32,
    seq: u64,
    of: &PieceOf,
    data_len: usize,
) -> [u8; DELIVER_RELIABLE_PIECE_PREFIX_LEN] {
    let mut p = [0u8; DELIVER_RELIABLE_PIECE_PREFIX_LEN];
    let mut w = &mut p[..];
    w.put_u32_le((DELIVER_RELIABLE_PIECE_PREFIX_LEN - 4 + data_len) as u32);
    w.put_u8(kind::DELIVER_RELIABLE_PIECE);
    w.put_u32_le(sub);
    w.put_u64_le(seq);
    of.encode(&mut w);
    p
}

/// The bytes that precede an encoded event of `event_len` bytes in a
/// `DeliverReliable` frame (version 4) for subscription `sub` under
/// delivery sequence number `seq`, written like [`deliver_prefix`].
pub fn deliver_reliable_prefix(
    sub: u32,
    seq: u64,
    event_len: usize,
) -> [u8; DELIVER_RELIABLE_PREFIX_LEN] {
    let mut p = [0u8; DELIVER_RELIABLE_PREFIX_LEN];
    let len = (1 + 12 + event_len) as u32;
    p[..4].copy_from_slice(&len.to_le_bytes());
    p[4] = kind::DELIVER_RELIABLE;
    p[5..9].copy_from_slice(&sub.to_le_bytes());
    p[9..17].copy_from_slice(&seq.to_le_bytes());
    p
}

/// Checks a proposed maximum frame size.
pub fn validate_max_frame(max_frame: u32) -> Result<u32, DecodeError> {
    if !(MIN_MAX_FRAME..=HARD_MAX_FRAME).contains(&max_frame) {
        return Err(DecodeError::BadValue {
            what: "max frame size",
            value: max_frame as u64,
        });
    }
    Ok(max_frame)
}

/// Splits a byte stream into frames (sans-I/O: feed it the bytes you read).
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame: u32,
}

/// Why a stream could not be split into frames. After any of these the stream
/// cannot be resynchronised and the connection should be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A frame length over the negotiated maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Announced length.
        len: u32,
        /// The maximum.
        max: u32,
    },
    /// A frame length of zero (no type byte).
    #[error("empty frame (length 0)")]
    EmptyFrame,
}

impl FrameDecoder {
    /// A decoder that refuses frames over `max_frame` bytes.
    pub fn new(max_frame: u32) -> Self {
        FrameDecoder { max_frame }
    }

    /// Changes the limit (after the handshake negotiated one).
    pub fn set_max_frame(&mut self, max_frame: u32) {
        self.max_frame = max_frame;
    }

    /// The current limit.
    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// The type of the next frame in `buf`, once its header is there (the
    /// frame itself may still be incomplete or invalid): lets a reader act
    /// before [`next_raw`](Self::next_raw) takes a frame of another kind.
    pub fn next_kind(buf: &[u8]) -> Option<u8> {
        buf.get(4).copied()
    }

    /// Splits the next complete frame off `buf` as `(type, body)`; `Ok(None)`
    /// means more bytes are needed. The body shares `buf`'s allocation.
    pub fn next_raw(&self, buf: &mut BytesMut) -> Result<Option<(u8, Bytes)>, StreamError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len == 0 {
            return Err(StreamError::EmptyFrame);
        }
        if len > self.max_frame {
            return Err(StreamError::FrameTooLarge {
                len,
                max: self.max_frame,
            });
        }
        let total = 4 + len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        // The length and type are skipped in the buffer itself, and the
        // body split off: two cursor moves per frame, not three.
        let kind_code = buf[4];
        buf.advance(FRAME_HEADER_LEN);
        Ok(Some((
            kind_code,
            buf.split_to(total - FRAME_HEADER_LEN).freeze(),
        )))
    }
}
