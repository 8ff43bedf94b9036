//! The protocol engine: one connection's protocol state machine, written
//! once for both ends (quinn-proto's shape). Bytes go in with
//! [`Connection::poll_input`], `now` (monotonic nanoseconds, any origin) is
//! an argument, and what must happen comes out as values: [`Input`]s for the
//! application to decide, encoded control frames from
//! [`Connection::poll_transmit`], and a deadline from
//! [`Connection::poll_timeout`]. No socket, no thread, no clock: the router's
//! tasks and the client library's threads drive it, and the pair tests in
//! `tests/engine_pair.rs` wire a client and a server engine in memory with
//! simulated time.
//!
//! What the engine owns: framing and the negotiated frame limit, the
//! handshake (version and frame size, the server's pre-handshake limit), the
//! handshake deadline and the idle probe (`Ping`, then close), protocol-error
//! counting, the connection's tables of endpoints and subscriptions (ids in
//! use, publisher or subscriber, what a reconnect must declare again),
//! request ids and the pairing of replies with requests.
//!
//! What the application decides: who the peer is and whether it may do what
//! it asks. The server answers each request it is handed with
//! [`Connection::accept`] or [`Connection::refuse`]; a table change (declare,
//! subscribe) takes effect only when accepted.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tagwire_proto::handshake::{
    client_proof, same_proof, server_proof, TokenTag, NONCE_LEN, PROOF_LEN,
};
use tagwire_proto::{
    is_link_kind, kind, validate_max_frame, DecodeError, EndpointKind, ErrorCode, EventRef, Frame,
    FrameDecoder, LinkFrame, NamedError, StreamError, FRAME_HEADER_LEN, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION, SESSION_ID_LEN,
};

use crate::tags::validate_tag;

/// The endpoint table's hasher: looked up on every publish, keyed by a
/// small id the client picks (foldhash: several times cheaper than SipHash;
/// seeded per process, so ids cannot be chosen to collide).
type Fast = foldhash::fast::RandomState;

/// Which end of the connection this engine plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The application's end: says `Hello`, sends requests, gets deliveries.
    Client,
    /// The router's end: answers `Hello`, serves requests, sends deliveries.
    Server,
}

/// Nanoseconds of a monotonic clock chosen by the driver.
pub type Nanos = u64;

/// The engine's bounds. The defaults are the router's documented defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// The largest frame this end accepts; the handshake settles on the
    /// smaller of both ends' values.
    pub max_frame: u32,
    /// Server: the largest frame accepted before the handshake (a `Hello`).
    pub handshake_max_frame: u32,
    /// Time allowed from the start to the end of the handshake.
    pub handshake_timeout: Nanos,
    /// After this long without input, a `Ping`; after as long again, close.
    /// 0: never.
    pub idle_timeout: Nanos,
    /// Protocol errors tolerated before the connection is closed.
    pub max_protocol_errors: u32,
    /// Server: endpoints one connection may declare.
    pub max_endpoints: usize,
    /// Server: subscriptions one connection may hold.
    pub max_subscriptions: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_frame: tagwire_proto::limits::DEFAULT_MAX_FRAME,
            handshake_max_frame: tagwire_proto::limits::MIN_MAX_FRAME,
            handshake_timeout: 5_000_000_000,
            idle_timeout: 60_000_000_000,
            max_protocol_errors: 64,
            max_endpoints: 1024,
            max_subscriptions: 4096,
        }
    }
}

/// What a client says in its `Hello`.
#[derive(Debug, Clone, Default)]
pub struct ClientHello {
    /// Client name, for logs and listings.
    pub name: String,
    /// Client: the token it proves (version 3: never sent; empty: the
    /// transport identifies the client). Server: a version-2 client's
    /// bearer token, sent in clear.
    pub token: String,
    /// Session id kept across reconnects (all zero: none).
    pub session: [u8; SESSION_ID_LEN],
    /// Client: the fresh random nonce of this connection's token proof
    /// (set anew by [`Connection::reconnect`]). Unused by the server.
    pub nonce: [u8; NONCE_LEN],
    /// Server: a version-3 client's token tag, naming the token it will
    /// prove; answer it with [`Connection::challenge`]. Unused by the client.
    pub proof: Option<TokenTag>,
}

/// An endpoint declared on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its name (router-wide unique).
    pub name: Arc<str>,
    /// Publisher or subscriber.
    pub kind: EndpointKind,
}

/// A subscription held on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The subscriber endpoint's id.
    pub endpoint: u32,
    /// The tag pattern.
    pub pattern: String,
    /// QoS properties as given.
    pub qos: Vec<(String, String)>,
}

/// Why the connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The code sent or received (0: a normal close).
    pub code: u16,
    /// What happened, for logs.
    pub reason: String,
    /// Whether the peer said `Close` (its endpoint names are then released).
    pub by_peer: bool,
}

/// Something the application must act on, taken from the input.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// A frame the engine handled itself (a `Ping`, a `Pong`).
    Handled,
    /// A request or frame the engine refused itself (an unknown id, a bad
    /// frame, no room): the `Error` is on its way; this is for the log.
    Refused {
        /// Request id (0: none).
        req: u32,
        /// The code sent.
        code: ErrorCode,
        /// The message sent.
        message: String,
    },
    /// Server: a client's `Hello` (version and frame size already checked).
    /// Answer with [`Connection::accept_hello`] or [`Connection::refuse`].
    Hello {
        /// The client's `Hello` (boxed: it is 168 bytes, and every
        /// `Input` of every frame would be moved at its size).
        hello: Box<ClientHello>,
        /// The version it speaks.
        version: u16,
    },
    /// Server: declare endpoint `id` (the id is free on this connection and
    /// the connection has room). Answer with accept or refuse.
    Declare {
        /// Request id.
        req: u32,
        /// Connection-local id.
        id: u32,
        /// Publisher or subscriber.
        kind: EndpointKind,
        /// Name.
        name: String,
    },
    /// Server: endpoint `id` was undeclared (removed from the tables now,
    /// with its subscriptions, listed in `subs`); accept to acknowledge.
    Undeclare {
        /// Request id.
        req: u32,
        /// The endpoint.
        endpoint: Endpoint,
        /// Its subscriptions on this connection, gone with it.
        subs: Vec<u32>,
    },
    /// Server: subscribe (the endpoint is this connection's subscriber and
    /// the subscription id is free). Answer with accept or refuse.
    Subscribe {
        /// Request id.
        req: u32,
        /// Subscription id.
        sub: u32,
        /// The subscriber endpoint.
        endpoint: Arc<str>,
        /// Tag pattern (not yet parsed).
        pattern: String,
        /// QoS properties.
        qos: Vec<(String, String)>,
    },
    /// Server: subscription `sub` was dropped (removed from the tables now);
    /// accept to acknowledge.
    Unsubscribe {
        /// Request id.
        req: u32,
        /// Subscription id.
        sub: u32,
    },
    /// Server: an event from publisher `endpoint`. Check it with
    /// [`Publish::event`]; refuse it, or route it and move on.
    Publish(Publish),
    /// Server: an admin request. Answer with [`Connection::answer_admin`] or
    /// refuse (or answer later, see [`Connection::defer`]).
    Admin {
        /// Request id.
        req: u32,
        /// JSON text.
        body: String,
    },
    /// Client: the server passed a shared-memory region (its memfd came
    /// with the frame's bytes, SCM_RIGHTS); see `docs/shm.md`.
    ShmRegion {
        /// The daemon's region id.
        region: u64,
        /// Producer (for publisher `endpoint`) or consumer.
        role: tagwire_proto::ShmRole,
        /// The publisher endpoint id for a producer region, else 0.
        endpoint: u32,
    },
    /// Client: the server welcomed us.
    Welcome {
        /// Negotiated frame limit.
        max_frame: u32,
        /// Server name.
        name: String,
    },
    /// Client: after a reconnect, the server refused to give endpoint
    /// `endpoint` back (another session took its name while the connection
    /// was down). It and its subscriptions `subs` are gone from the tables:
    /// they receive nothing more.
    EndpointLost {
        /// The endpoint id.
        endpoint: u32,
        /// Its name.
        name: Arc<str>,
        /// Its subscriptions.
        subs: Vec<u32>,
        /// The refusal's code.
        code: ErrorCode,
        /// The refusal's message.
        message: String,
    },
    /// Client: the reply to request `req`.
    Reply {
        /// Request id.
        req: u32,
        /// The outcome.
        reply: Reply,
    },
    /// Client (version 4): the server settled `PublishReliable` frames of
    /// this connection.
    PublishAck(tagwire_proto::Ack),
    /// Client (version 4): an event for subscription `sub`, which has
    /// acknowledged delivery, under its delivery sequence number `seq`;
    /// settle it with a `DeliverAck` (see [`tagwire_proto::Frame::DeliverAck`]).
    DeliverReliable {
        /// Subscription id.
        sub: u32,
        /// Its delivery sequence number on this connection.
        seq: u64,
        /// The encoded event.
        event: Bytes,
    },
    /// Server (version 4): the client settled `DeliverReliable` frames of
    /// subscription `sub`.
    DeliverAck {
        /// Subscription id.
        sub: u32,
        /// What it settles.
        ack: tagwire_proto::Ack,
    },
    /// Server (version 5): one piece of an event larger than the frame,
    /// from publisher endpoint `endpoint` (declared on this connection as a
    /// publisher). The router puts the pieces together (bounded) and routes
    /// the whole as a `Publish` (`seq` 0) or `PublishReliable` (`seq`).
    PublishPiece {
        /// The publisher endpoint's id.
        endpoint: u32,
        /// 0, or the acknowledgement sequence number of the whole event.
        seq: u64,
        /// Which event, and where the piece goes.
        of: tagwire_proto::PieceOf,
        /// The piece's bytes.
        data: Bytes,
    },
    /// Client (version 5): one piece of an event for subscription `sub`.
    DeliverPiece {
        /// Subscription id.
        sub: u32,
        /// Which event, and where the piece goes.
        of: tagwire_proto::PieceOf,
        /// The piece's bytes.
        data: Bytes,
    },
    /// Client (version 6): one piece of acknowledged delivery `seq` of
    /// subscription `sub` (settled with `DeliverAck` once whole).
    DeliverReliablePiece {
        /// Subscription id.
        sub: u32,
        /// The whole event's delivery sequence number.
        seq: u64,
        /// Which event, and where the piece goes.
        of: tagwire_proto::PieceOf,
        /// The piece's bytes.
        data: Bytes,
    },
    /// Client (version 5): the server holds the first `have` bytes of
    /// event `id` of publisher endpoint `endpoint`: continue there.
    PieceResume {
        /// The publisher endpoint's id.
        endpoint: u32,
        /// The event's id.
        id: u64,
        /// Bytes held from the start.
        have: u64,
    },
    /// Client (version 7): daemons the server could not reach are
    /// reachable again; it reaches `daemons` now (see `Frame::Healed`).
    Healed {
        /// Daemons the server reaches now, itself included.
        daemons: u32,
    },
    /// Client: an event for subscription `sub`.
    Deliver {
        /// Subscription id.
        sub: u32,
        /// The encoded event.
        event: Bytes,
    },
    /// An `Error` from the peer that answers no pending request.
    PeerError {
        /// Request id it names (0: the connection).
        req: u32,
        /// Code.
        code: ErrorCode,
        /// Message.
        message: String,
    },
    /// The connection is over (see [`Connection::closed`]); flush what
    /// [`Connection::poll_transmit`] still has and close the transport.
    Closed,
    /// Either side, established: a link frame from another daemon (decoded,
    /// not yet trusted: the router decides whether this is a peer link).
    /// Boxed, as [`Input::Pull`]: every frame's `Input` is moved out of
    /// [`Connection::poll_input`], so the enum stays as small as a publish.
    Link(Box<LinkFrame>),
    /// Server: a pull from a tag's history. Answer with
    /// [`Connection::answer_pull`] or [`Connection::refuse_pull`] (e.g.
    /// `NoHistory`; not counted as a protocol error).
    Pull(Box<tagwire_proto::Pull>),
}

/// A client request's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `Ok` (or the `Pong` of a ping).
    Ok,
    /// `AdminReply` with its JSON text.
    Admin(String),
    /// `Error`.
    Err(ErrorCode, String),
    /// `PullReply`: the events a pull asked for, or "gone".
    Pulled(tagwire_proto::PullReply),
}

/// A `Publish` frame, split but not yet parsed: [`Publish::event`] parses
/// it once and checks it against its endpoint; the router routes that view.
#[derive(Debug)]
pub struct Publish {
    /// The publisher endpoint's id on this connection (its name:
    /// [`Connection::endpoint_name`]). An id, not the name: a publish is
    /// the hot path, and a shared name would be reference-counted twice per
    /// event.
    pub endpoint: u32,
    /// The encoded event (a slice of the read buffer).
    pub bytes: Bytes,
    /// The whole frame's length on the wire.
    pub frame_len: usize,
    /// A `PublishReliable` (version 4): its acknowledgement sequence number
    /// on this connection (`None`: a plain `Publish`).
    pub reliable: Option<u64>,
}

/// The tag a connection's publisher last used, already validated: a
/// publisher usually publishes on one tag, so
/// [`Connection::publish_event`] compares instead of validating it again.
#[derive(Debug, Default)]
pub struct TagCache(String);

impl Publish {
    /// The event parsed and checked against its endpoint's name
    /// (`publisher`): the event must name the endpoint it was sent on, and
    /// its tag must be valid (checked only when it differs from the one
    /// `cache` holds). The names are compared, not validated again: the
    /// event's tag and publisher are `cache`'s and `publisher`'s strings.
    /// The error is what to send back (`refuse` it).
    #[inline]
    fn event_checked<'c>(
        &'c self,
        publisher: &'c str,
        cache: &'c mut TagCache,
    ) -> Result<EventRef<'c>, (ErrorCode, String)> {
        let malformed = |e: DecodeError| (ErrorCode::Malformed, format!("bad Publish frame: {e}"));
        let utf8 = |bytes, what| {
            std::str::from_utf8(bytes).map_err(|e| {
                malformed(DecodeError::NotUtf8 {
                    what,
                    at: e.valid_up_to(),
                })
            })
        };
        EventRef::parse_named(&self.bytes, move |tag, named| {
            if named != publisher.as_bytes() {
                return Err((
                    ErrorCode::PublisherMismatch,
                    format!(
                        "event names publisher {:?} but was sent on endpoint {publisher:?}",
                        utf8(named, "publisher")?
                    ),
                ));
            }
            if tag != cache.0.as_bytes() {
                let tag = utf8(tag, "tag")?;
                check_tag(tag)?;
                tag.clone_into(&mut cache.0);
            }
            Ok((&cache.0, publisher))
        })
        .map_err(|e| match e {
            NamedError::Decode(e) => malformed(e),
            NamedError::Names(e) => e,
        })
    }
}

/// `tag` is a valid tag, or the error a publisher gets for it.
fn check_tag(tag: &str) -> Result<(), (ErrorCode, String)> {
    validate_tag(tag).map_err(|e| (ErrorCode::InvalidTag, e.to_string()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Server: waiting for `Hello`. Client: `Hello` sent, waiting for `Welcome`.
    Handshake,
    /// Server: `Hello` handed to the application, waiting for its decision.
    Authenticating {
        version: u16,
        max_frame: u32,
    },
    /// Server: `Challenge` sent, waiting for the client's `Proof`.
    Proving {
        version: u16,
        max_frame: u32,
    },
    Established,
    Closed,
}

/// What the request the application was last handed changes, once accepted.
#[derive(Debug)]
enum Pending {
    None,
    Ack(u32),
    Declare {
        req: u32,
        id: u32,
        endpoint: Endpoint,
    },
    Subscribe {
        req: u32,
        sub: u32,
        entry: Subscription,
    },
    Admin(u32),
    Pull(u32),
}

/// What a client's outstanding request will change when it succeeds.
#[derive(Debug)]
enum Outstanding {
    Plain,
    Declare(u32),
    Subscribe(u32),
    /// An endpoint declared again after a reconnect.
    Redeclare(u32),
}

/// One connection's protocol state. See the module doc.
#[derive(Debug)]
pub struct Connection {
    side: Side,
    config: Config,
    phase: Phase,
    decoder: FrameDecoder,
    transmit: BytesMut,
    started: Nanos,
    last_heard: Nanos,
    pinged: bool,
    protocol_errors: u32,
    endpoints: HashMap<u32, Endpoint, Fast>,
    subs: HashMap<u32, Subscription>,
    pending: Pending,
    closed: Option<Closed>,
    /// Client: what we said in `Hello`, said again on a reconnect.
    hello: ClientHello,
    /// Client: outstanding requests.
    outstanding: HashMap<u32, Outstanding>,
    next_id: u32,
    peer_name: String,
    version: u16,
    /// Server, while proving: the client proof expected and the name to
    /// welcome it with. Client: whether the server proved the token.
    proving: Option<([u8; PROOF_LEN], String)>,
    server_proved: bool,
    /// Server: the token tag of the `Hello` being decided.
    hello_proof: Option<TokenTag>,
    /// Client: the protocol version its `Hello` offers (see
    /// [`Connection::set_offered_version`]).
    offered: u16,
}

impl Connection {
    /// A server engine for a connection accepted at `now`.
    pub fn server(config: Config, now: Nanos) -> Connection {
        let decoder = FrameDecoder::new(config.handshake_max_frame);
        Connection::new(Side::Server, config, decoder, ClientHello::default(), now)
    }

    /// A client engine for a transport opened at `now`; its `Hello` is
    /// waiting in [`poll_transmit`](Self::poll_transmit).
    pub fn client(config: Config, hello: ClientHello, now: Nanos) -> Connection {
        Connection::client_offering(config, hello, now, PROTOCOL_VERSION)
    }

    /// [`client`](Self::client) whose `Hello` offers protocol `version`
    /// (see [`set_offered_version`](Self::set_offered_version)): a daemon's
    /// link offers 3, which daemons from before version 4 accept.
    pub fn client_offering(
        config: Config,
        hello: ClientHello,
        now: Nanos,
        version: u16,
    ) -> Connection {
        let decoder = FrameDecoder::new(config.max_frame);
        let mut c = Connection::new(Side::Client, config, decoder, hello, now);
        c.set_offered_version(version);
        c.say_hello();
        c
    }

    fn new(
        side: Side,
        config: Config,
        decoder: FrameDecoder,
        hello: ClientHello,
        now: Nanos,
    ) -> Connection {
        Connection {
            side,
            config,
            phase: Phase::Handshake,
            decoder,
            transmit: BytesMut::new(),
            started: now,
            last_heard: now,
            pinged: false,
            protocol_errors: 0,
            endpoints: HashMap::default(),
            subs: HashMap::new(),
            pending: Pending::None,
            closed: None,
            hello,
            outstanding: HashMap::new(),
            next_id: 1,
            peer_name: String::new(),
            version: 0,
            proving: None,
            server_proved: false,
            hello_proof: None,
            offered: PROTOCOL_VERSION,
        }
    }

    /// Says `Hello`: a token is never sent, only its tag (version 3); the
    /// server must prove the token (`Challenge`) before we prove it.
    fn say_hello(&mut self) {
        let proof = (!self.hello.token.is_empty())
            .then(|| Box::new(TokenTag::new(&self.hello.token, self.hello.nonce)));
        self.server_proved = false;
        self.send(&Frame::Hello {
            version: self.offered,
            max_frame: self.config.max_frame,
            name: self.hello.name.clone(),
            token: String::new(),
            proof,
            session: self.hello.session,
        });
    }

    /// Client: starts over on a new transport opened at `now` (after the
    /// old one broke). Endpoints and subscriptions are kept: once welcomed,
    /// the engine declares and subscribes them again (requests with id 0)
    /// before anything else. Outstanding requests are forgotten; their
    /// callers learn it from the broken transport. `nonce` must be fresh
    /// random bytes: a nonce used twice would let a stranger replay a
    /// server's recorded proof.
    pub fn reconnect(&mut self, now: Nanos, nonce: [u8; NONCE_LEN]) {
        debug_assert_eq!(self.side, Side::Client, "only a client reconnects");
        self.hello.nonce = nonce;
        self.phase = Phase::Handshake;
        self.decoder.set_max_frame(self.config.max_frame);
        self.transmit.clear();
        self.outstanding.clear();
        self.started = now;
        self.last_heard = now;
        self.pinged = false;
        self.protocol_errors = 0;
        self.closed = None;
        self.say_hello();
    }

    /// Client: the token the next `Hello` presents (from the next
    /// [`reconnect`](Self::reconnect) on). A daemon that restarted may have
    /// written a new token; the client reads it again before reconnecting.
    pub fn set_token(&mut self, token: String) {
        debug_assert_eq!(self.side, Side::Client, "only a client says Hello");
        self.hello.token = token;
    }

    /// Which end this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Whether the handshake is done and the connection still open.
    pub fn is_established(&self) -> bool {
        self.phase == Phase::Established
    }

    /// Why the connection ended, once it has.
    pub fn closed(&self) -> Option<&Closed> {
        self.closed.as_ref()
    }

    /// The frame limit in force (before the handshake: the server's
    /// pre-handshake limit, or the client's offer).
    pub fn max_frame(&self) -> u32 {
        self.decoder.max_frame()
    }

    /// The largest encoded event a `Deliver` to this peer may carry.
    pub fn max_delivered_event(&self) -> usize {
        (self.max_frame() as usize).saturating_sub(1 + 4)
    }

    /// The largest encoded event a `Publish` to this peer may carry.
    pub fn max_published_event(&self) -> usize {
        self.max_delivered_event()
    }

    /// The peer's name from its `Hello` or `Welcome`.
    pub fn peer_name(&self) -> &str {
        &self.peer_name
    }

    /// Client: the session id this engine presents in `Hello`.
    pub fn session_id(&self) -> [u8; SESSION_ID_LEN] {
        self.hello.session
    }

    /// Client: offers protocol `version` (clamped to 3 ..=
    /// [`PROTOCOL_VERSION`]: this engine's client says only the version-3
    /// layout) in the next `Hello`, the one [`reconnect`](Self::reconnect)
    /// says, e.g. 3 to a daemon that refused version 4 as unsupported.
    pub fn set_offered_version(&mut self, version: u16) {
        self.offered = version.clamp(MIN_PROTOCOL_VERSION.max(3), PROTOCOL_VERSION);
    }

    /// Client: the protocol version the next `Hello` offers.
    pub fn offered_version(&self) -> u16 {
        self.offered
    }

    /// Whether this connection speaks acknowledged publishing
    /// (`PublishReliable`/`PublishAck`, protocol version 4).
    pub fn acknowledges(&self) -> bool {
        self.version >= tagwire_proto::ACK_PROTOCOL_VERSION
    }

    /// Whether this connection carries events larger than its frame in
    /// pieces (`PublishPiece`/`DeliverPiece`, protocol version 5).
    pub fn pieces(&self) -> bool {
        self.version >= tagwire_proto::PIECES_PROTOCOL_VERSION
    }

    /// Whether this connection's acknowledged subscriptions get events
    /// larger than its frame in pieces (`DeliverReliablePiece`, version 6).
    pub fn reliable_pieces(&self) -> bool {
        self.version >= tagwire_proto::RELIABLE_PIECES_PROTOCOL_VERSION
    }

    /// The protocol version agreed (0 before the handshake).
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The endpoints declared on this connection.
    pub fn endpoints(&self) -> &HashMap<u32, Endpoint, Fast> {
        &self.endpoints
    }

    /// The name of endpoint `id` of this connection, if it is declared.
    #[inline]
    pub fn endpoint_name(&self, id: u32) -> Option<&Arc<str>> {
        self.endpoints.get(&id).map(|e| &e.name)
    }

    /// Server: the event of publish `p` (handed over by
    /// [`poll_input`](Self::poll_input)), parsed and checked: it names the
    /// endpoint it was sent on, and its tag is valid (validated again only
    /// when it differs from the one `cache` holds). The error is what to
    /// send back ([`refuse`](Self::refuse) it).
    #[inline]
    pub fn publish_event<'c>(
        &'c self,
        p: &'c Publish,
        cache: &'c mut TagCache,
    ) -> Result<EventRef<'c>, (ErrorCode, String)> {
        let Some(name) = self.endpoint_name(p.endpoint) else {
            return Err((
                ErrorCode::UnknownEndpoint,
                format!(
                    "publish on endpoint id {}, which is not declared",
                    p.endpoint
                ),
            ));
        };
        p.event_checked(name, cache)
    }

    /// The subscriptions held on this connection.
    pub fn subscriptions(&self) -> &HashMap<u32, Subscription> {
        &self.subs
    }

    /// Protocol errors counted so far.
    pub fn protocol_errors(&self) -> u32 {
        self.protocol_errors
    }

    /// The encoded frames waiting to be written (control frames only;
    /// deliveries and publishes are written by the driver in between).
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        (!self.transmit.is_empty()).then(|| self.transmit.split().freeze())
    }

    /// Bytes waiting in [`poll_transmit`](Self::poll_transmit).
    pub fn transmit_len(&self) -> usize {
        self.transmit.len()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        match self.phase {
            Phase::Closed => None,
            Phase::Handshake | Phase::Authenticating { .. } | Phase::Proving { .. } => {
                Some(self.started.saturating_add(self.config.handshake_timeout))
            }
            Phase::Established if self.config.idle_timeout == 0 => None,
            Phase::Established => {
                let n = if self.pinged { 2 } else { 1 };
                Some(self.last_heard.saturating_add(n * self.config.idle_timeout))
            }
        }
    }

    /// Handles the deadline of [`poll_timeout`](Self::poll_timeout): the
    /// handshake ran out of time, or the idle probe is due or unanswered.
    pub fn handle_timeout(&mut self, now: Nanos) {
        let Some(deadline) = self.poll_timeout() else {
            return;
        };
        if now < deadline {
            return;
        }
        match self.phase {
            Phase::Handshake | Phase::Authenticating { .. } | Phase::Proving { .. } => {
                let message = match self.side {
                    Side::Server => format!(
                        "no Hello within {} ms (limits.handshake_timeout); closing the connection",
                        self.config.handshake_timeout / 1_000_000
                    ),
                    Side::Client => format!(
                        "no Welcome within {} ms; closing the connection",
                        self.config.handshake_timeout / 1_000_000
                    ),
                };
                self.close_with(ErrorCode::HandshakeRequired, message);
            }
            Phase::Established if self.pinged => {
                let message = format!(
                    "nothing received for {} ms, Ping unanswered (idle_timeout = {} ms); closing the connection",
                    2 * self.config.idle_timeout / 1_000_000,
                    self.config.idle_timeout / 1_000_000
                );
                self.close_with(ErrorCode::LimitReached, message);
            }
            Phase::Established => {
                self.pinged = true;
                self.send(&Frame::Ping { nonce: 0 });
            }
            Phase::Closed => {}
        }
    }

    /// Notes that bytes arrived at `now` (any bytes: the peer is alive).
    pub fn received(&mut self, now: Nanos) {
        self.last_heard = now;
        self.pinged = false;
    }

    /// Takes the next whole frame from `buf` (bytes read from the transport)
    /// and handles it. `None`: `buf` holds no whole frame (read more), or
    /// the connection is closed. The server must answer each request it is
    /// handed before polling again.
    pub fn poll_input(&mut self, buf: &mut BytesMut) -> Option<Input> {
        if self.phase == Phase::Closed {
            return None;
        }
        debug_assert!(
            matches!(self.pending, Pending::None),
            "the previous request was not answered"
        );
        let (k, body) = match self.decoder.next_raw(buf) {
            Ok(Some(f)) => f,
            Ok(None) => return None,
            Err(e) => {
                let (code, message) = self.stream_error(&e, buf);
                self.close_with(code, message);
                return Some(Input::Closed);
            }
        };
        let frame_len = FRAME_HEADER_LEN + body.len();
        let input = match self.side {
            Side::Server => self.server_frame(k, body, frame_len),
            Side::Client => self.client_frame(k, body),
        };
        Some(input)
    }

    /// The error for a stream that cannot be split any more. A `Hello`
    /// longer than the pre-handshake limit from a version this server does
    /// not speak gets `UnsupportedVersion`: its version is in the frozen
    /// prefix, before anything a later version may add.
    fn stream_error(&self, e: &StreamError, buf: &BytesMut) -> (ErrorCode, String) {
        match e {
            StreamError::FrameTooLarge { .. } => {
                if self.side == Side::Server && self.phase == Phase::Handshake {
                    if let Some(v) = hello_version(buf) {
                        if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&v) {
                            return unsupported(v);
                        }
                    }
                    return (
                        ErrorCode::FrameTooLarge,
                        format!("{e} allowed before the handshake; closing the connection"),
                    );
                }
                (
                    ErrorCode::FrameTooLarge,
                    format!("{e}; closing the connection"),
                )
            }
            _ => (ErrorCode::Malformed, format!("{e}; closing the connection")),
        }
    }

    fn server_frame(&mut self, k: u8, body: Bytes, frame_len: usize) -> Input {
        if k == kind::PUBLISH && self.phase == Phase::Established {
            return self.publish(body, frame_len, false);
        }
        if k == kind::PUBLISH_RELIABLE && self.phase == Phase::Established {
            if !self.acknowledges() {
                return self.protocol_error(
                    ErrorCode::Malformed,
                    0,
                    format!(
                        "a PublishReliable frame on a connection of protocol version {} (it needs version {})",
                        self.version,
                        tagwire_proto::ACK_PROTOCOL_VERSION
                    ),
                );
            }
            return self.publish(body, frame_len, true);
        }
        if is_link_kind(k) && self.phase == Phase::Established {
            return match LinkFrame::decode(k, body) {
                Ok(f) => Input::Link(Box::new(f)),
                Err(e) => {
                    let message = decode_message(k, &e, "");
                    self.protocol_error(decode_code(&e), 0, message)
                }
            };
        }
        let frame = match Frame::decode(k, body) {
            Ok(f) => f,
            Err(e) => {
                let code = decode_code(&e);
                let message = decode_message(k, &e, "");
                if self.phase != Phase::Established {
                    // Before the handshake nothing about the peer can be trusted.
                    self.close_with(code, message);
                    return Input::Closed;
                }
                return self.protocol_error(code, 0, message);
            }
        };
        if self.phase != Phase::Established {
            return self.server_handshake(frame);
        }
        match frame {
            Frame::DeclareEndpoint {
                req,
                id,
                kind,
                name,
            } => {
                let (used, len) = (self.endpoints.contains_key(&id), self.endpoints.len());
                let in_use = || {
                    (
                        ErrorCode::BadRequest,
                        format!("endpoint id {id} is already used on this connection"),
                    )
                };
                if let Some(refused) = self.check_table(
                    req,
                    used,
                    in_use,
                    len,
                    self.config.max_endpoints,
                    "endpoints (limits.max_endpoints_per_connection)",
                ) {
                    return refused;
                }
                self.pending = Pending::Declare {
                    req,
                    id,
                    endpoint: Endpoint {
                        name: Arc::from(name.as_str()),
                        kind,
                    },
                };
                Input::Declare {
                    req,
                    id,
                    kind,
                    name,
                }
            }
            Frame::UndeclareEndpoint { req, id } => match self.endpoints.remove(&id) {
                Some(endpoint) => {
                    let subs = self.forget_subscriptions_of(id);
                    self.pending = Pending::Ack(req);
                    Input::Undeclare {
                        req,
                        endpoint,
                        subs,
                    }
                }
                None => self.protocol_error(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("no endpoint with id {id} on this connection"),
                ),
            },
            Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos,
            } => {
                let name = match self.endpoints.get(&endpoint) {
                    Some(e) if e.kind == EndpointKind::Subscriber => e.name.clone(),
                    Some(e) => {
                        let message =
                            format!("endpoint {:?} is a publisher, not a subscriber", e.name);
                        return self.protocol_error(ErrorCode::UnknownEndpoint, req, message);
                    }
                    None => {
                        return self.protocol_error(
                            ErrorCode::UnknownEndpoint,
                            req,
                            format!("no endpoint with id {endpoint} on this connection"),
                        )
                    }
                };
                let (used, len) = (self.subs.contains_key(&sub), self.subs.len());
                let in_use = || {
                    (
                        ErrorCode::DuplicateSubscription,
                        format!("subscription id {sub} is already used"),
                    )
                };
                if let Some(refused) = self.check_table(
                    req,
                    used,
                    in_use,
                    len,
                    self.config.max_subscriptions,
                    "subscriptions (limits.max_subscriptions_per_connection)",
                ) {
                    return refused;
                }
                self.pending = Pending::Subscribe {
                    req,
                    sub,
                    entry: Subscription {
                        endpoint,
                        pattern: pattern.clone(),
                        qos: qos.clone(),
                    },
                };
                Input::Subscribe {
                    req,
                    sub,
                    endpoint: name,
                    pattern,
                    qos,
                }
            }
            Frame::Unsubscribe { req, sub } => match self.subs.remove(&sub) {
                Some(_) => {
                    self.pending = Pending::Ack(req);
                    Input::Unsubscribe { req, sub }
                }
                None => self.protocol_error(
                    ErrorCode::UnknownSubscription,
                    req,
                    format!("no subscription with id {sub}"),
                ),
            },
            Frame::Admin { req, body } => {
                self.pending = Pending::Admin(req);
                Input::Admin { req, body }
            }
            Frame::Pull(pull) => {
                self.pending = Pending::Pull(pull.req);
                Input::Pull(Box::new(pull))
            }
            Frame::Ping { nonce } => {
                self.send(&Frame::Pong { nonce });
                Input::Handled
            }
            Frame::Pong { .. } => Input::Handled,
            Frame::Close { code, reason } => {
                self.phase = Phase::Closed;
                self.closed = Some(Closed {
                    code,
                    reason,
                    by_peer: true,
                });
                Input::Closed
            }
            Frame::Error { req, code, message } => Input::PeerError { req, code, message },
            Frame::DeliverAck { sub, ack } if self.acknowledges() => Input::DeliverAck { sub, ack },
            Frame::PublishPiece {
                endpoint,
                seq,
                of,
                data,
            } if self.pieces() => match self.endpoints.get(&endpoint) {
                Some(e) if e.kind == EndpointKind::Publisher => Input::PublishPiece {
                    endpoint,
                    seq,
                    of,
                    data,
                },
                _ => self.protocol_error(
                    ErrorCode::UnknownEndpoint,
                    0,
                    format!("a piece published on endpoint id {endpoint}, which this connection has not declared as a publisher"),
                ),
            },
            Frame::PublishPiece { .. } => self.protocol_error(
                ErrorCode::Malformed,
                0,
                format!(
                    "a PublishPiece frame on a connection of protocol version {} (it needs version {})",
                    self.version,
                    tagwire_proto::PIECES_PROTOCOL_VERSION
                ),
            ),
            Frame::DeliverAck { .. } => self.protocol_error(
                ErrorCode::Malformed,
                0,
                format!(
                    "a DeliverAck frame on a connection of protocol version {} (it needs version {})",
                    self.version,
                    tagwire_proto::ACK_PROTOCOL_VERSION
                ),
            ),
            Frame::Hello { .. } => {
                self.protocol_error(ErrorCode::Malformed, 0, "Hello after the handshake".into())
            }
            other => {
                let message = format!(
                    "a client may not send {} frames",
                    tagwire_proto::frame_name(other.kind())
                );
                self.protocol_error(ErrorCode::Malformed, 0, message)
            }
        }
    }

    fn server_handshake(&mut self, frame: Frame) -> Input {
        if let Phase::Proving { version, max_frame } = self.phase {
            return self.check_proof(frame, version, max_frame);
        }
        if let Phase::Authenticating { .. } = self.phase {
            let message = format!(
                "{} frame before the Welcome",
                tagwire_proto::frame_name(frame.kind())
            );
            self.close_with(ErrorCode::HandshakeRequired, message);
            return Input::Closed;
        }
        let Frame::Hello {
            version,
            max_frame,
            name,
            token,
            proof,
            session,
        } = frame
        else {
            let message = format!(
                "expected Hello, got {} before the handshake",
                tagwire_proto::frame_name(frame.kind())
            );
            self.close_with(ErrorCode::HandshakeRequired, message);
            return Input::Closed;
        };
        if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
            let (code, message) = unsupported(version);
            self.close_with(code, message);
            return Input::Closed;
        }
        let max_frame = match validate_max_frame(max_frame) {
            Ok(m) => m.min(self.config.max_frame),
            Err(e) => {
                self.close_with(ErrorCode::Malformed, format!("bad Hello: {e}"));
                return Input::Closed;
            }
        };
        self.phase = Phase::Authenticating { version, max_frame };
        self.peer_name = name.clone();
        let proof = proof.map(|p| *p);
        self.hello_proof = proof;
        Input::Hello {
            hello: Box::new(ClientHello {
                name,
                token,
                session,
                nonce: proof.map_or([0; NONCE_LEN], |p| p.nonce),
                proof,
            }),
            version,
        }
    }

    /// Server, proving: the client's `Proof` is the one expected, or the
    /// connection closes with `Unauthenticated`.
    fn check_proof(&mut self, frame: Frame, version: u16, max_frame: u32) -> Input {
        let Some((expected, server_name)) = self.proving.take() else {
            debug_assert!(false, "proving without an expected proof");
            self.close_with(ErrorCode::Unauthenticated, "no proof expected".into());
            return Input::Closed;
        };
        match frame {
            Frame::Proof { proof } if same_proof(&proof, &expected) => {
                self.phase = Phase::Authenticating { version, max_frame };
                self.accept_hello(&server_name);
                Input::Handled
            }
            Frame::Proof { .. } => {
                self.close_with(
                    ErrorCode::Unauthenticated,
                    "the client's token proof is wrong (a replayed Hello, or a token this daemon \
                     does not know); closing the connection"
                        .into(),
                );
                Input::Closed
            }
            other => {
                let message = format!(
                    "expected Proof, got {} before the Welcome",
                    tagwire_proto::frame_name(other.kind())
                );
                self.close_with(ErrorCode::HandshakeRequired, message);
                Input::Closed
            }
        }
    }

    /// Server: answers a version-3 `Hello` whose token tag named `token`
    /// (a token the application knows): sends `Challenge` with the fresh
    /// random `nonce` and the proof that this server knows `token`, and
    /// welcomes the client as `server_name` once its `Proof` checks out
    /// (else closes with `Unauthenticated`). Until then the connection is
    /// not established.
    pub fn challenge(&mut self, server_name: &str, token: &str, nonce: [u8; NONCE_LEN]) {
        let Phase::Authenticating { version, max_frame } = self.phase else {
            debug_assert!(false, "challenge without a Hello");
            return;
        };
        let Some(tag) = self.hello_proof.take() else {
            debug_assert!(false, "challenge for a Hello without a token tag");
            return;
        };
        self.phase = Phase::Proving { version, max_frame };
        self.proving = Some((
            client_proof(token, &tag.nonce, &nonce),
            server_name.to_owned(),
        ));
        self.send(&Frame::Challenge {
            nonce,
            proof: server_proof(token, &tag.nonce, &nonce),
        });
    }

    /// Checks an id for a connection table: in use is the peer's protocol
    /// error (`in_use` says which), a full table (`len` of `max` `what`) a
    /// refusal for want of room. `None`: go ahead.
    fn check_table(
        &mut self,
        req: u32,
        used: bool,
        in_use: impl FnOnce() -> (ErrorCode, String),
        len: usize,
        max: usize,
        what: &str,
    ) -> Option<Input> {
        if used {
            let (code, message) = in_use();
            return Some(self.protocol_error(code, req, message));
        }
        (len >= max).then(|| {
            self.refusal(
                ErrorCode::LimitReached,
                req,
                format!("this connection already has {max} {what}"),
            )
        })
    }

    /// Server: welcomes the client whose `Hello` was handed over, naming
    /// this server `server_name`.
    pub fn accept_hello(&mut self, server_name: &str) {
        let Phase::Authenticating { version, max_frame } = self.phase else {
            debug_assert!(false, "accept_hello without a Hello");
            return;
        };
        self.phase = Phase::Established;
        self.version = version;
        self.decoder.set_max_frame(max_frame);
        self.send(&Frame::Welcome {
            version,
            max_frame,
            name: server_name.to_owned(),
        });
    }

    fn publish(&mut self, mut body: Bytes, frame_len: usize, acked: bool) -> Input {
        let prefix = if acked { 12 } else { 4 };
        if body.len() < prefix {
            let what = if acked {
                "bad PublishReliable frame: truncated endpoint id or sequence number"
            } else {
                "bad Publish frame: truncated endpoint id"
            };
            return self.protocol_error(ErrorCode::Malformed, 0, what.into());
        }
        let id = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        let reliable = acked.then(|| {
            let mut s = [0u8; 8];
            s.copy_from_slice(&body[4..12]);
            u64::from_le_bytes(s)
        });
        if reliable == Some(0) {
            return self.protocol_error(
                ErrorCode::Malformed,
                0,
                "bad PublishReliable frame: sequence number 0 (they start at 1)".into(),
            );
        }
        match self.endpoints.get(&id) {
            Some(e) if e.kind == EndpointKind::Publisher => {
                // Advanced, not sliced: no reference count taken and given back.
                bytes::Buf::advance(&mut body, prefix);
                Input::Publish(Publish {
                    endpoint: id,
                    bytes: body,
                    frame_len,
                    reliable,
                })
            }
            _ => self.protocol_error(
                ErrorCode::UnknownEndpoint,
                0,
                format!("publish on endpoint id {id}, which this connection has not declared as a publisher"),
            ),
        }
    }

    /// Server: the request last handed over succeeded: its change to the
    /// connection's tables takes effect and the client gets `Ok` (nothing
    /// for request id 0, a fire-and-forget request).
    pub fn accept(&mut self) {
        let req = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => return,
            Pending::Ack(req) | Pending::Admin(req) | Pending::Pull(req) => req,
            Pending::Declare { req, id, endpoint } => {
                self.endpoints.insert(id, endpoint);
                req
            }
            Pending::Subscribe { req, sub, entry } => {
                self.subs.insert(sub, entry);
                req
            }
        };
        if req != 0 {
            self.send(&Frame::Ok { req });
        }
    }

    /// Server: answers the admin request last handed over with `body`.
    pub fn answer_admin(&mut self, body: String) {
        let req = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Admin(req) => req,
            other => {
                debug_assert!(false, "answer_admin without an admin request: {other:?}");
                return;
            }
        };
        self.send(&Frame::AdminReply { req, body });
    }

    /// Server: answers the pull last handed over with `reply` (its request
    /// id is set here). A reply that cannot be encoded (more events than a
    /// frame's count field holds) is refused as `Internal` instead.
    pub fn answer_pull(&mut self, mut reply: tagwire_proto::PullReply) {
        let req = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Pull(req) => req,
            other => {
                debug_assert!(false, "answer_pull without a pull: {other:?}");
                return;
            }
        };
        reply.req = req;
        let frame = Frame::PullReply(reply);
        if let Err(e) = frame.encode(&mut self.transmit) {
            self.send(&Frame::Error {
                req,
                code: ErrorCode::Internal,
                message: format!("cannot encode the pull reply: {e}"),
            });
        }
    }

    /// Server: answers the pull last handed over with an `Error` that does
    /// not count toward `max_protocol_errors`: a pull of something not held,
    /// out of range or not readable is an answer, not a protocol mistake (a
    /// polling client asks for the next sequence number before it exists).
    pub fn refuse_pull(&mut self, code: ErrorCode, message: String) {
        let req = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Pull(req) => req,
            other => {
                debug_assert!(false, "refuse_pull without a pull: {other:?}");
                return;
            }
        };
        let _ = self.refusal(code, req, message);
    }

    /// Server: the request last handed over will be answered later (by a
    /// frame the driver encodes itself, e.g. an admin reply that waits for
    /// housekeeping). Returns its request id.
    pub fn defer(&mut self) -> u32 {
        self.take_pending_req()
    }

    /// Forgets the request last handed over (its table change does not
    /// happen) and returns its id (0: none).
    fn take_pending_req(&mut self) -> u32 {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => 0,
            Pending::Ack(req) | Pending::Admin(req) | Pending::Pull(req) => req,
            Pending::Declare { req, .. } | Pending::Subscribe { req, .. } => req,
        }
    }

    /// Refuses the request (or event) last handed over with `code`: the
    /// peer gets an `Error` naming it, the tables stay as they were. A
    /// protocol error (not a want of room) counts
    /// toward `max_protocol_errors`; at the bound the connection closes. A
    /// refused `Hello` closes it at once.
    pub fn refuse(&mut self, code: ErrorCode, message: String) {
        if let Phase::Authenticating { .. } = self.phase {
            // A refused Hello ends the connection.
            return self.close_with(code, message);
        }
        let req = self.take_pending_req();
        let _ = self.protocol_error(code, req, message);
    }

    /// Server: refuses a publish handed over earlier (`Error` with request
    /// id 0, as publishes have none). Unlike [`refuse`](Self::refuse) it
    /// leaves the pending request alone: a router that routes several
    /// publishes at once refuses them after it has polled the next frame,
    /// which may be a request waiting for its own answer.
    pub fn refuse_publish(&mut self, code: ErrorCode, message: String) {
        let _ = self.protocol_error(code, 0, message);
    }

    /// Sends `Error` for `req`; counts it if it is the peer's protocol mistake.
    fn protocol_error(&mut self, code: ErrorCode, req: u32, message: String) -> Input {
        self.send(&Frame::Error {
            req,
            code,
            message: message.clone(),
        });
        let refused = Input::Refused { req, code, message };
        if !is_protocol_error(code) {
            return refused;
        }
        self.protocol_errors += 1;
        if self.protocol_errors < self.config.max_protocol_errors {
            return refused;
        }
        let n = self.protocol_errors;
        self.close_with(
            ErrorCode::LimitReached,
            format!("{n} protocol errors on this connection (limits.max_protocol_errors); closing the connection"),
        );
        Input::Closed
    }

    /// Sends `Error` for `req` without counting it (a want of room).
    fn refusal(&mut self, code: ErrorCode, req: u32, message: String) -> Input {
        self.send(&Frame::Error {
            req,
            code,
            message: message.clone(),
        });
        Input::Refused { req, code, message }
    }

    /// Sends a last `Error` (server) or `Close` (client) and ends the
    /// connection.
    fn close_with(&mut self, code: ErrorCode, message: String) {
        match self.side {
            Side::Server => self.send(&Frame::Error {
                req: 0,
                code,
                message: message.clone(),
            }),
            Side::Client => self.send(&Frame::Close {
                code: code.code(),
                reason: message.clone(),
            }),
        }
        self.phase = Phase::Closed;
        self.pending = Pending::None;
        self.closed = Some(Closed {
            code: code.code(),
            reason: message,
            by_peer: false,
        });
    }

    /// Ends the connection from this side with `Close` (`code` 0: normal;
    /// the router says `ShuttingDown` when it stops).
    pub fn close(&mut self, code: u16, reason: &str) {
        if self.phase == Phase::Closed {
            return;
        }
        self.send(&Frame::Close {
            code,
            reason: reason.to_owned(),
        });
        self.phase = Phase::Closed;
        self.pending = Pending::None;
        self.closed = Some(Closed {
            code,
            reason: reason.to_owned(),
            by_peer: false,
        });
    }

    /// The transport ended without a `Close` (end of stream, error).
    pub fn transport_lost(&mut self, reason: &str) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Closed;
            self.pending = Pending::None;
            self.closed = Some(Closed {
                code: ErrorCode::Internal.code(),
                reason: reason.to_owned(),
                by_peer: false,
            });
        }
    }

    /// Queues a link frame (see `tagwire_proto::LinkFrame`); only a daemon
    /// on a peer link sends these, on either side.
    pub fn send_link(&mut self, frame: &LinkFrame) {
        if let Err(e) = frame.encode(&mut self.transmit) {
            debug_assert!(false, "cannot encode {frame:?}: {e}");
        }
    }

    fn send(&mut self, frame: &Frame) {
        if let Err(e) = frame.encode(&mut self.transmit) {
            // Only over-long text can fail to encode; cut it and say so.
            debug_assert!(false, "cannot encode {frame:?}: {e}");
        }
    }

    // ---- client side ----

    /// Forgets the subscriptions of endpoint `id` (undeclared, or lost to
    /// another session), returning their ids in order.
    fn forget_subscriptions_of(&mut self, id: u32) -> Vec<u32> {
        let mut subs: Vec<u32> = self
            .subs
            .iter()
            .filter(|(_, s)| s.endpoint == id)
            .map(|(sub, _)| *sub)
            .collect();
        subs.sort_unstable();
        for s in &subs {
            self.subs.remove(s);
        }
        subs
    }

    fn client_frame(&mut self, k: u8, body: Bytes) -> Input {
        if k == kind::DELIVER && self.phase == Phase::Established {
            if body.len() < 4 {
                return self.client_error("truncated Deliver frame from the server".into());
            }
            let sub = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
            // In place: `slice` would take a reference and drop this one.
            let mut event = body;
            bytes::Buf::advance(&mut event, 4);
            return Input::Deliver { sub, event };
        }
        if k == kind::DELIVER_RELIABLE && self.phase == Phase::Established && self.acknowledges() {
            // As `Deliver`, in place (`Frame::decode` would slice: a
            // reference taken and one dropped per acknowledged delivery).
            if body.len() < 12 {
                return self.client_error("truncated DeliverReliable frame from the server".into());
            }
            let sub = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
            let seq = u64::from_le_bytes(body[4..12].try_into().expect("8 bytes"));
            let mut event = body;
            bytes::Buf::advance(&mut event, 12);
            return Input::DeliverReliable { sub, seq, event };
        }
        if is_link_kind(k) && self.phase == Phase::Established {
            return match LinkFrame::decode(k, body) {
                Ok(f) => Input::Link(Box::new(f)),
                Err(e) => self.client_error(decode_message(k, &e, " from the server")),
            };
        }
        let frame = match Frame::decode(k, body) {
            Ok(f) => f,
            Err(e) => {
                let message = decode_message(k, &e, " from the server");
                return self.client_error(message);
            }
        };
        if self.phase == Phase::Handshake {
            return match frame {
                Frame::Challenge { nonce, proof } => self.answer_challenge(nonce, proof),
                Frame::Welcome { .. } if !self.hello.token.is_empty() && !self.server_proved => {
                    self.close_with(
                        ErrorCode::Unauthenticated,
                        format!(
                            "the server did not prove it knows the token: it answered Welcome \
                             without a Challenge, so the token was not sent and this server is \
                             not trusted (is another program listening on this port? a daemon \
                             with [auth] enabled = false, or older than protocol version \
                             {PROTOCOL_VERSION}, cannot prove a token: unset TAGWIRE_TOKEN for it)"
                        ),
                    );
                    Input::Closed
                }
                Frame::Welcome {
                    version,
                    max_frame,
                    name,
                } => {
                    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version)
                        || validate_max_frame(max_frame).is_err()
                        || max_frame > self.config.max_frame
                    {
                        self.close_with(
                            ErrorCode::Malformed,
                            format!("bad Welcome: version {version}, max frame {max_frame} (we offered version {PROTOCOL_VERSION}, max frame {})", self.config.max_frame),
                        );
                        return Input::Closed;
                    }
                    self.phase = Phase::Established;
                    self.version = version;
                    self.peer_name = name.clone();
                    self.decoder.set_max_frame(max_frame);
                    self.replay();
                    Input::Welcome { max_frame, name }
                }
                Frame::Error { code, message, .. } => {
                    self.phase = Phase::Closed;
                    self.closed = Some(Closed {
                        code: code.code(),
                        reason: message.clone(),
                        by_peer: true,
                    });
                    Input::PeerError {
                        req: 0,
                        code,
                        message,
                    }
                }
                other => {
                    let message = format!(
                        "expected Welcome, got {}",
                        tagwire_proto::frame_name(other.kind())
                    );
                    self.close_with(ErrorCode::HandshakeRequired, message);
                    Input::Closed
                }
            };
        }
        match frame {
            Frame::Ok { req } => self.reply(req, Reply::Ok),
            Frame::PublishAck(ack) if self.acknowledges() => Input::PublishAck(ack),
            Frame::DeliverReliable { sub, seq, event } if self.acknowledges() => {
                Input::DeliverReliable { sub, seq, event }
            }
            Frame::DeliverPiece { sub, of, data } if self.pieces() => {
                Input::DeliverPiece { sub, of, data }
            }
            Frame::DeliverReliablePiece { sub, seq, of, data } if self.reliable_pieces() => {
                Input::DeliverReliablePiece { sub, seq, of, data }
            }
            Frame::PieceResume { endpoint, id, have } if self.pieces() => {
                Input::PieceResume { endpoint, id, have }
            }
            Frame::Healed { daemons } if self.version >= tagwire_proto::HEALED_PROTOCOL_VERSION => {
                Input::Healed { daemons }
            }
            Frame::AdminReply { req, body } => self.reply(req, Reply::Admin(body)),
            Frame::PullReply(r) => self.reply(r.req, Reply::Pulled(r)),
            Frame::ShmRegion {
                region,
                role,
                endpoint,
            } => Input::ShmRegion {
                region,
                role,
                endpoint,
            },
            Frame::Error { req, code, message } => {
                if req != 0 && self.outstanding.contains_key(&req) {
                    self.reply(req, Reply::Err(code, message))
                } else {
                    Input::PeerError { req, code, message }
                }
            }
            Frame::Pong { nonce } => match u32::try_from(nonce) {
                Ok(req) if req != 0 => self.reply(req, Reply::Ok),
                _ => Input::Handled,
            },
            Frame::Ping { nonce } => {
                self.send(&Frame::Pong { nonce });
                Input::Handled
            }
            Frame::Close { code, reason } => {
                self.phase = Phase::Closed;
                self.closed = Some(Closed {
                    code,
                    reason,
                    by_peer: true,
                });
                Input::Closed
            }
            other => self.client_error(format!(
                "a server may not send {} frames",
                tagwire_proto::frame_name(other.kind())
            )),
        }
    }

    /// A bad frame from the server: reported, counted, and at the bound the
    /// connection is closed (the client reconnects).
    fn client_error(&mut self, message: String) -> Input {
        self.protocol_errors += 1;
        if self.protocol_errors >= self.config.max_protocol_errors {
            self.close_with(ErrorCode::Malformed, message);
            return Input::Closed;
        }
        Input::PeerError {
            req: 0,
            code: ErrorCode::Malformed,
            message,
        }
    }

    fn reply(&mut self, req: u32, reply: Reply) -> Input {
        match self.outstanding.remove(&req) {
            None => match reply {
                Reply::Err(code, message) => Input::PeerError { req, code, message },
                _ => Input::Handled,
            },
            Some(Outstanding::Redeclare(id)) => match reply {
                Reply::Err(code, message) => {
                    let name = match self.endpoints.remove(&id) {
                        Some(e) => e.name,
                        None => return Input::Handled,
                    };
                    let subs = self.forget_subscriptions_of(id);
                    Input::EndpointLost {
                        endpoint: id,
                        name,
                        subs,
                        code,
                        message,
                    }
                }
                _ => Input::Handled,
            },
            Some(what) => {
                if let Reply::Err(..) = reply {
                    match what {
                        Outstanding::Declare(id) => {
                            self.endpoints.remove(&id);
                        }
                        Outstanding::Subscribe(sub) => {
                            self.subs.remove(&sub);
                        }
                        Outstanding::Plain | Outstanding::Redeclare(_) => {}
                    }
                }
                Input::Reply { req, reply }
            }
        }
    }

    /// Client: checks the server's proof that it knows our token; only then
    /// proves it in turn (`Proof`). A wrong proof closes the connection
    /// with `Unauthenticated` and nothing derived from the token is sent.
    fn answer_challenge(&mut self, nonce: [u8; NONCE_LEN], proof: [u8; PROOF_LEN]) -> Input {
        if self.hello.token.is_empty() || self.server_proved {
            self.close_with(
                ErrorCode::Malformed,
                "unexpected Challenge from the server (this client presented no token, or was \
                 already challenged)"
                    .into(),
            );
            return Input::Closed;
        }
        let expected = server_proof(&self.hello.token, &self.hello.nonce, &nonce);
        if !same_proof(&proof, &expected) {
            self.close_with(
                ErrorCode::Unauthenticated,
                "the server did not prove it knows the token: its Challenge proof is wrong, so the \
                 token was not sent and this server is not trusted (is another program listening \
                 on this port?)"
                    .into(),
            );
            return Input::Closed;
        }
        self.server_proved = true;
        self.send(&Frame::Proof {
            proof: client_proof(&self.hello.token, &self.hello.nonce, &nonce),
        });
        Input::Handled
    }

    /// After a `Welcome`: declares every endpoint and subscribes every
    /// subscription again (the server gives the names back to our session).
    fn replay(&mut self) {
        let mut endpoints: Vec<_> = self
            .endpoints
            .iter()
            .map(|(i, e)| (*i, e.clone()))
            .collect();
        endpoints.sort_by_key(|(id, _)| *id);
        for (id, e) in endpoints {
            // A request id of its own: a refusal (the name taken meanwhile)
            // comes back as `Input::EndpointLost`, not as an anonymous error.
            let req = self.next_id();
            self.outstanding.insert(req, Outstanding::Redeclare(id));
            self.send(&Frame::DeclareEndpoint {
                req,
                id,
                kind: e.kind,
                name: e.name.to_string(),
            });
        }
        let mut subs: Vec<_> = self.subs.iter().map(|(i, s)| (*i, s.clone())).collect();
        subs.sort_by_key(|(id, _)| *id);
        for (sub, s) in subs {
            self.send(&Frame::Subscribe {
                req: 0,
                sub,
                endpoint: s.endpoint,
                pattern: s.pattern,
                qos: s.qos,
            });
        }
    }

    /// Client: a fresh id for an endpoint, subscription or request (never 0).
    pub fn next_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    fn request(&mut self, what: Outstanding, make: impl FnOnce(u32) -> Frame) -> u32 {
        let req = self.next_id();
        self.outstanding.insert(req, what);
        self.send(&make(req));
        req
    }

    /// Client: declares an endpoint; returns `(endpoint id, request id)`.
    /// It is kept (and declared again after a reconnect) unless refused.
    pub fn declare(&mut self, kind: EndpointKind, name: &str) -> (u32, u32) {
        let id = self.next_id();
        self.endpoints.insert(
            id,
            Endpoint {
                name: Arc::from(name),
                kind,
            },
        );
        let req = self.request(Outstanding::Declare(id), |req| Frame::DeclareEndpoint {
            req,
            id,
            kind,
            name: name.to_owned(),
        });
        (id, req)
    }

    /// Client: subscribes endpoint `endpoint`; returns `(subscription id,
    /// request id)`. Kept (and made again after a reconnect) unless refused.
    pub fn subscribe(
        &mut self,
        endpoint: u32,
        pattern: &str,
        qos: Vec<(String, String)>,
    ) -> (u32, u32) {
        let sub = self.next_id();
        self.subs.insert(
            sub,
            Subscription {
                endpoint,
                pattern: pattern.to_owned(),
                qos: qos.clone(),
            },
        );
        let req = self.request(Outstanding::Subscribe(sub), |req| Frame::Subscribe {
            req,
            sub,
            endpoint,
            pattern: pattern.to_owned(),
            qos,
        });
        (sub, req)
    }

    /// Client: drops a subscription (no reply wanted).
    pub fn unsubscribe(&mut self, sub: u32) {
        if self.subs.remove(&sub).is_some() && self.phase == Phase::Established {
            self.send(&Frame::Unsubscribe { req: 0, sub });
        }
    }

    /// Client: undeclares an endpoint and its subscriptions (no reply wanted).
    pub fn undeclare(&mut self, id: u32) {
        if self.endpoints.remove(&id).is_some() {
            self.subs.retain(|_, s| s.endpoint != id);
            if self.phase == Phase::Established {
                self.send(&Frame::UndeclareEndpoint { req: 0, id });
            }
        }
    }

    /// Client: sends an admin request; returns its id.
    pub fn admin(&mut self, body: String) -> u32 {
        self.request(Outstanding::Plain, |req| Frame::Admin { req, body })
    }

    /// Client: pulls from `tag`'s history (`node` empty: the daemon
    /// connected to; `publisher` empty: the tag's last publisher); returns
    /// the request id its [`Reply::Pulled`] (or [`Reply::Err`]) answers.
    pub fn pull(
        &mut self,
        node: &str,
        publisher: &str,
        tag: &str,
        query: tagwire_proto::PullQuery,
    ) -> u32 {
        self.request(Outstanding::Plain, |req| {
            Frame::Pull(tagwire_proto::Pull {
                req,
                node: node.to_owned(),
                publisher: publisher.to_owned(),
                tag: tag.to_owned(),
                query,
            })
        })
    }

    /// Client: sends a `Ping` answered as request `req` (its `Pong`).
    pub fn ping(&mut self) -> u32 {
        self.request(Outstanding::Plain, |req| Frame::Ping { nonce: req as u64 })
    }

    /// Client: forgets an outstanding request (its caller stopped waiting).
    pub fn forget(&mut self, req: u32) {
        self.outstanding.remove(&req);
    }
}

/// Whether an error is the peer's protocol mistake (counted toward
/// `max_protocol_errors`) rather than a want of room (`QueueFull`,
/// `LimitReached`) or the router's own state.
pub fn is_protocol_error(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::QueueFull
            | ErrorCode::LimitReached
            | ErrorCode::ShuttingDown
            | ErrorCode::Internal
    )
}

fn decode_code(e: &DecodeError) -> ErrorCode {
    match e {
        DecodeError::UnknownFrameType(_) => ErrorCode::UnknownFrameType,
        _ => ErrorCode::Malformed,
    }
}

fn unsupported(version: u16) -> (ErrorCode, String) {
    (
        ErrorCode::UnsupportedVersion,
        format!("protocol version {version} is not supported (this server speaks {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION})"),
    )
}

/// The message for a frame of type `k` that did not decode: an unknown type
/// is named as such (`unknown frame type 0xff`), a known one with its name
/// (`bad Subscribe frame: …`); `from` says whose frame it was, if needed.
fn decode_message(k: u8, e: &DecodeError, from: &str) -> String {
    match e {
        DecodeError::UnknownFrameType(_) => format!("{e}{from}"),
        // `frame_name` names link frames too.
        _ => format!("bad {} frame{from}: {e}", tagwire_proto::frame_name(k)),
    }
}

/// The version in the frozen prefix of a `Hello` at the start of `buf`
/// (length, type, magic, version), if that much has arrived.
fn hello_version(buf: &[u8]) -> Option<u16> {
    let b = buf.get(..FRAME_HEADER_LEN + 6)?;
    (b[4] == kind::HELLO && b[5..9] == tagwire_proto::MAGIC)
        .then(|| u16::from_le_bytes([b[9], b[10]]))
}
