//! Pair tests: a client engine and a server engine wired in memory, with
//! simulated time. The server side drives core's node engine, as the router
//! does: the node decides what is expired, held until its start time, and
//! which subscriptions get an event; the harness writes the deliveries.
//! Nothing here sleeps or reads a clock.

use bytes::{Bytes, BytesMut};
use tagwire_core::connection::{ClientHello, Config, Connection, Input, Reply, TagCache};
use tagwire_core::filter::Overrides;
use tagwire_core::history::{HistoryLimits, HistoryTable};
use tagwire_core::node::{Node, NodeLimits, Sink, Verdict};
use tagwire_core::tags::Pattern;
use tagwire_proto::{
    deliver_prefix, EndpointKind, ErrorCode, Event, Expiry, Frame, PullQuery, PullReply,
    PullStatus, SESSION_ID_LEN,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// Wall-clock origin of the simulation (an arbitrary date, ns since epoch).
const T0: u64 = 1_700_000_000 * SEC;

/// The server's application: a node engine and what the router keeps
/// beside it.
struct App {
    /// The daemon's decisions; a channel's value is its subscription id.
    node: Node<u32>,
    too_large: u64,
    refused_tokens: Vec<String>,
    admin_requests: Vec<String>,
    /// Pull buffers: tags under `/hist` keep 4 events.
    history: Option<HistoryTable>,
}

impl Default for App {
    fn default() -> Self {
        let limits = NodeLimits {
            max_deferred_events: 16,
            max_deferred_bytes: 1 << 20,
            ..NodeLimits::default()
        };
        App {
            node: Node::new(1, "router", limits, 0),
            too_large: 0,
            refused_tokens: Vec::new(),
            admin_requests: Vec::new(),
            history: None,
        }
    }
}

impl App {
    /// Forgets every subscription (a new connection).
    fn clear_subs(&mut self) {
        self.node.routes_mut().remove_session(1);
    }
}

/// The subscriptions the node routes an event to.
#[derive(Default)]
struct Subs(Vec<u32>);

impl Sink<u32> for Subs {
    fn channel(&mut self, sub: &u32, _overrides: Overrides) {
        self.0.push(*sub);
    }
    fn link(&mut self, to: u64, _origin: u64, _hops: u8) {
        panic!("a daemon without links routed an event to link {to}");
    }
}

struct Pair {
    client: Connection,
    server: Connection,
    app: App,
    c2s: BytesMut,
    s2c: BytesMut,
    now: u64,
    /// What the client was handed, in order.
    got: Vec<Input>,
}

fn hello(name: &str) -> ClientHello {
    ClientHello {
        name: name.into(),
        token: String::new(),
        session: [7; SESSION_ID_LEN],
        nonce: [1; 32],
        proof: None,
    }
}

impl Pair {
    fn new(client: Config, server: Config) -> Pair {
        Pair {
            client: Connection::client(client, hello("app"), T0),
            server: Connection::server(server, T0),
            app: App::default(),
            c2s: BytesMut::new(),
            s2c: BytesMut::new(),
            now: T0,
            got: Vec::new(),
        }
    }

    /// Moves bytes both ways until nothing moves.
    fn run(&mut self) {
        loop {
            let mut moved = false;
            while let Some(b) = self.client.poll_transmit() {
                self.c2s.extend_from_slice(&b);
            }
            if !self.c2s.is_empty() {
                self.server.received(self.now);
            }
            while let Some(input) = self.server.poll_input(&mut self.c2s) {
                moved = true;
                self.serve(input);
            }
            self.release_held();
            while let Some(b) = self.server.poll_transmit() {
                self.s2c.extend_from_slice(&b);
            }
            if !self.s2c.is_empty() {
                self.client.received(self.now);
            }
            while let Some(input) = self.client.poll_input(&mut self.s2c) {
                moved = true;
                self.got.push(input);
            }
            if !moved && self.client.transmit_len() == 0 {
                return;
            }
        }
    }

    /// Advances simulated time, firing both engines' timers on the way.
    fn advance(&mut self, by: u64) {
        let end = self.now + by;
        loop {
            let next = [self.client.poll_timeout(), self.server.poll_timeout()]
                .into_iter()
                .flatten()
                .filter(|t| *t <= end)
                .min();
            let Some(t) = next else { break };
            self.now = t.max(self.now);
            self.client.handle_timeout(self.now);
            self.server.handle_timeout(self.now);
            self.run();
        }
        self.now = end;
        self.run();
    }

    fn serve(&mut self, input: Input) {
        let s = &mut self.server;
        match input {
            Input::Hello { hello, .. } => {
                // The tokens this server knows; a version-3 Hello names one
                // by its tag, never by the token itself.
                let named = hello
                    .proof
                    .and_then(|t| ["bad", "fresh"].into_iter().find(|k| t.names(k)));
                match named {
                    Some("bad") => {
                        self.app.refused_tokens.push("bad".into());
                        s.refuse(ErrorCode::Unauthenticated, "unknown token".into());
                    }
                    Some(token) => s.challenge("router", token, [3; 32]),
                    None => s.accept_hello("router"),
                }
            }
            Input::Declare { .. } | Input::Undeclare { .. } => s.accept(),
            Input::Unsubscribe { sub, .. } => {
                self.app.node.routes_mut().remove_channel(u64::from(sub));
                s.accept()
            }
            Input::Subscribe { sub, pattern, .. } => match Pattern::parse(&pattern) {
                Ok(p) => {
                    let routes = self.app.node.routes_mut();
                    match routes.add_channel(u64::from(sub), 1, p, sub, Vec::new(), None) {
                        Ok(()) => s.accept(),
                        Err(e) => s.refuse(ErrorCode::DuplicateSubscription, e.to_string()),
                    }
                }
                Err(e) => s.refuse(ErrorCode::InvalidPattern, e.to_string()),
            },
            Input::Publish(p) => {
                let mut cache = TagCache::default();
                let ev = match s.publish_event(&p, &mut cache) {
                    Ok(ev) => ev,
                    Err((code, message)) => return s.refuse(code, message),
                };
                let now = self.now;
                let mut subs = Subs::default();
                match self.app.node.publish(&ev, || now, &mut subs) {
                    Verdict::Expired | Verdict::HopLimited => {}
                    Verdict::Hold { until, .. } => {
                        if let Err(e) = self.app.node.hold(until, p.bytes.clone()) {
                            s.refuse(ErrorCode::LimitReached, e.to_string());
                        }
                    }
                    Verdict::Routed { .. } => {
                        if ev.tag.starts_with("/hist") {
                            let h = self
                                .app
                                .history
                                .get_or_insert_with(|| HistoryTable::new(HistoryLimits::default()));
                            let (seq, time) = (ev.seq, ev.source_time_ns);
                            let cost = p.bytes.len();
                            h.record(ev.tag, ev.publisher, seq, time, p.bytes.clone(), 4, cost);
                        }
                        self.deliver(&subs.0, &p.bytes.clone());
                    }
                }
            }
            Input::Admin { body, .. } => {
                self.app.admin_requests.push(body);
                s.answer_admin("{\"ok\":true}".into());
            }
            Input::Pull(pull) => {
                let pull = *pull;
                let table = self
                    .app
                    .history
                    .get_or_insert_with(|| HistoryTable::new(HistoryLimits::default()));
                match table.query(&pull.tag, &pull.publisher, &pull.query) {
                    Ok(a) => s.answer_pull(PullReply {
                        req: 0,
                        status: a.status,
                        oldest: a.oldest,
                        newest: a.newest,
                        held: a.held as u32,
                        events: a.events,
                    }),
                    Err(e) => s.refuse_pull(ErrorCode::NoHistory, e.to_string()),
                }
            }
            Input::Handled | Input::Refused { .. } | Input::Closed | Input::PeerError { .. } => {}
            other => panic!("a server engine handed over a client input: {other:?}"),
        }
    }

    /// Writes a `Deliver` per subscription the node chose, as the router's
    /// writer does, unless the event is longer than the client accepts.
    fn deliver(&mut self, subs: &[u32], event: &Bytes) {
        while let Some(b) = self.server.poll_transmit() {
            self.s2c.extend_from_slice(&b);
        }
        for sub in subs {
            if event.len() > self.server.max_delivered_event() {
                self.app.too_large += 1;
                continue;
            }
            self.s2c
                .extend_from_slice(&deliver_prefix(*sub, event.len()));
            self.s2c.extend_from_slice(event);
        }
    }

    fn release_held(&mut self) {
        for b in self.app.node.handle_timeout(self.now) {
            let ev =
                tagwire_proto::EventRef::parse(&b).expect("held events were parsed on arrival");
            let mut subs = Subs::default();
            if let Verdict::Routed { .. } = self.app.node.release(&ev, self.now, &mut subs) {
                self.deliver(&subs.0, &b);
            }
        }
    }

    fn publish(&mut self, endpoint: u32, event: &Event) {
        let mut out = BytesMut::new();
        tagwire_proto::encode_publish(endpoint, event, &mut out).expect("encodable event");
        self.c2s.extend_from_slice(&out);
        self.run();
    }

    fn deliveries(&mut self) -> Vec<(u32, Event)> {
        let got = std::mem::take(&mut self.got);
        let mut out = Vec::new();
        for i in got {
            match i {
                Input::Deliver { sub, event } => {
                    out.push((sub, Event::decode(&event).expect("a valid event")))
                }
                other => self.got.push(other),
            }
        }
        out
    }

    fn replies(&mut self) -> Vec<(u32, Reply)> {
        let got = std::mem::take(&mut self.got);
        let mut out = Vec::new();
        for i in got {
            match i {
                Input::Reply { req, reply } => out.push((req, reply)),
                other => self.got.push(other),
            }
        }
        out
    }

    /// Handshake, a publisher and a subscriber on `pattern`.
    fn ready(&mut self, pattern: &str) -> (u32, u32) {
        self.run();
        assert!(self.client.is_established() && self.server.is_established());
        let (publisher, _) = self.client.declare(EndpointKind::Publisher, "/cam");
        let (viewer, _) = self.client.declare(EndpointKind::Subscriber, "/viewer");
        let (sub, _) = self.client.subscribe(viewer, pattern, vec![]);
        self.run();
        let replies = self.replies();
        assert_eq!(replies.len(), 3, "three requests, three replies");
        assert!(replies.iter().all(|(_, r)| *r == Reply::Ok), "{replies:?}");
        (publisher, sub)
    }
}

fn event(tag: &str, payload: &'static [u8]) -> Event {
    let mut e = Event::new(tag, Bytes::from_static(payload));
    e.header.publisher = "/cam".into();
    e
}

#[test]
fn handshake_settles_on_the_smaller_frame_limit_and_names_both_ends() {
    let mut p = Pair::new(
        Config {
            max_frame: 8192,
            ..Config::default()
        },
        Config::default(),
    );
    p.run();
    assert!(p.client.is_established());
    assert_eq!(p.client.max_frame(), 8192);
    assert_eq!(p.server.max_frame(), 8192);
    assert_eq!(p.client.peer_name(), "router");
    assert_eq!(p.server.peer_name(), "app");
    assert!(matches!(
        p.got.as_slice(),
        [Input::Welcome {
            max_frame: 8192,
            ..
        }]
    ));
}

#[test]
fn a_refused_hello_ends_the_client_with_the_servers_reason() {
    let mut p = Pair::new(Config::default(), Config::default());
    p.client = Connection::client(
        Config::default(),
        ClientHello {
            token: "bad".into(),
            ..hello("app")
        },
        T0,
    );
    p.run();
    assert_eq!(p.app.refused_tokens, ["bad"]);
    assert!(!p.client.is_established());
    let closed = p.client.closed().expect("closed by the refusal");
    assert_eq!(closed.code, ErrorCode::Unauthenticated.code());
    assert!(closed.reason.contains("unknown token"));
    assert!(p.server.closed().is_some(), "the server ends it too");
}

#[test]
fn publish_is_delivered_once_per_matching_subscription() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (publisher, sub) = p.ready("/cam/**");
    let viewer = p.client.subscriptions()[&sub].endpoint;
    let (second, _) = p.client.subscribe(viewer, "/cam/left", vec![]);
    p.run();
    p.publish(publisher, &event("/cam/left", b"frame"));
    p.publish(publisher, &event("/mic", b"nope"));
    let got = p.deliveries();
    let mut subs: Vec<u32> = got.iter().map(|(s, _)| *s).collect();
    subs.sort_unstable();
    assert_eq!(subs, [sub, second]);
    assert!(got
        .iter()
        .all(|(_, e)| e.payload == Bytes::from_static(b"frame")));
}

#[test]
fn a_publish_on_a_subscriber_endpoint_or_naming_another_publisher_is_refused() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (publisher, sub) = p.ready("/**");
    let viewer = p.client.subscriptions()[&sub].endpoint;
    p.publish(viewer, &event("/a", b"x"));
    let mut other = event("/a", b"x");
    other.header.publisher = "/someone-else".into();
    p.publish(publisher, &other);
    let errors: Vec<ErrorCode> = p
        .got
        .iter()
        .filter_map(|i| match i {
            Input::PeerError { code, .. } => Some(*code),
            _ => None,
        })
        .collect();
    assert_eq!(
        errors,
        [ErrorCode::UnknownEndpoint, ErrorCode::PublisherMismatch]
    );
    assert!(p.deliveries().is_empty());
}

#[test]
fn endpoint_limits_refuse_without_counting_as_protocol_errors() {
    let mut p = Pair::new(
        Config::default(),
        Config {
            max_endpoints: 1,
            max_protocol_errors: 2,
            ..Config::default()
        },
    );
    p.run();
    let (_, ok) = p.client.declare(EndpointKind::Publisher, "/a");
    let (refused_id, refused) = p.client.declare(EndpointKind::Publisher, "/b");
    let (_, again) = p.client.declare(EndpointKind::Publisher, "/c");
    p.run();
    let replies = p.replies();
    assert_eq!(replies[0], (ok, Reply::Ok));
    assert!(matches!(&replies[1], (r, Reply::Err(ErrorCode::LimitReached, _)) if *r == refused));
    assert!(matches!(&replies[2], (r, Reply::Err(ErrorCode::LimitReached, _)) if *r == again));
    assert!(
        !p.client.endpoints().contains_key(&refused_id),
        "a refused declaration is not kept for replay"
    );
    assert!(
        p.server.closed().is_none(),
        "want of room is not a protocol error"
    );
    assert_eq!(p.server.protocol_errors(), 0);
}

#[test]
fn protocol_errors_close_the_connection_at_their_bound() {
    let mut p = Pair::new(
        Config::default(),
        Config {
            max_protocol_errors: 3,
            ..Config::default()
        },
    );
    p.run();
    for _ in 0..3 {
        // Unsubscribing an unknown subscription is the client's mistake.
        let mut out = BytesMut::new();
        Frame::Unsubscribe { req: 9, sub: 99 }
            .encode(&mut out)
            .expect("encodable");
        p.c2s.extend_from_slice(&out);
    }
    p.run();
    let closed = p.server.closed().expect("closed at the third error");
    assert_eq!(closed.code, ErrorCode::LimitReached.code());
    assert!(closed.reason.contains("max_protocol_errors"));
}

#[test]
fn an_expired_event_is_dropped_and_a_future_one_waits_for_its_start_time() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (publisher, sub) = p.ready("/**");
    let mut old = event("/a", b"stale");
    old.header.source_time_ns = p.now - 2 * SEC;
    old.header.expiry = Expiry::AfterNs(SEC);
    p.publish(publisher, &old);
    assert_eq!(p.app.node.counters().expired, 1);
    let mut later = event("/a", b"later");
    later.header.start_time_ns = Some(p.now + 3 * SEC);
    p.publish(publisher, &later);
    assert!(p.deliveries().is_empty(), "held until its start time");
    p.advance(2 * SEC);
    assert!(p.deliveries().is_empty(), "still a second to go");
    p.advance(SEC + MS);
    let got = p.deliveries();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, sub);
    assert_eq!(got[0].1.payload, Bytes::from_static(b"later"));
}

#[test]
fn the_handshake_must_finish_in_time() {
    let mut p = Pair::new(Config::default(), Config::default());
    // The client never sends its Hello.
    let _ = p.client.poll_transmit();
    p.advance(4 * SEC);
    assert!(p.server.closed().is_none());
    p.advance(2 * SEC);
    let closed = p.server.closed().expect("closed after handshake_timeout");
    assert_eq!(closed.code, ErrorCode::HandshakeRequired.code());
}

#[test]
fn an_idle_peer_is_pinged_then_closed_unless_it_answers() {
    let idle = Config {
        idle_timeout: 10 * SEC,
        ..Config::default()
    };
    // A client that answers: the ping round trip keeps the connection.
    let mut p = Pair::new(
        Config {
            idle_timeout: 0,
            ..idle.clone()
        },
        idle.clone(),
    );
    p.run();
    p.advance(35 * SEC);
    assert!(
        p.server.closed().is_none(),
        "a client that answers Ping stays"
    );
    // A client that is silent after its Hello: Ping, then close.
    let mut server = Connection::server(idle, T0);
    let mut client = Connection::client(Config::default(), hello("deaf"), T0);
    let mut wire = BytesMut::from(&client.poll_transmit().expect("Hello")[..]);
    assert!(matches!(
        server.poll_input(&mut wire),
        Some(Input::Hello { .. })
    ));
    server.accept_hello("router");
    let _welcome = server.poll_transmit();
    server.handle_timeout(T0 + 10 * SEC - 1);
    assert!(server.poll_transmit().is_none(), "not idle yet");
    server.handle_timeout(T0 + 10 * SEC);
    let mut ping = BytesMut::from(&server.poll_transmit().expect("a Ping")[..]);
    assert!(matches!(
        tagwire_proto::FrameDecoder::new(4096).next_raw(&mut ping),
        Ok(Some((tagwire_proto::kind::PING, _)))
    ));
    assert!(server.closed().is_none());
    server.handle_timeout(T0 + 20 * SEC);
    let closed = server.closed().expect("closed after an unanswered Ping");
    assert_eq!(closed.code, ErrorCode::LimitReached.code());
}

#[test]
fn a_reconnect_declares_and_subscribes_again_then_delivery_resumes() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (publisher, sub) = p.ready("/cam/**");
    // The transport breaks; a new server engine stands for the new connection.
    p.client.transport_lost("reset by peer");
    p.c2s.clear();
    p.s2c.clear();
    p.app.clear_subs();
    p.server = Connection::server(Config::default(), p.now);
    p.client.reconnect(p.now, [p.now as u8; 32]);
    p.run();
    assert!(p.client.is_established());
    assert_eq!(
        p.server.endpoints().len(),
        2,
        "both endpoints declared again"
    );
    assert!(p.server.subscriptions().contains_key(&sub));
    assert!(p.replies().is_empty(), "replays ask for no reply");
    p.publish(publisher, &event("/cam/x", b"again"));
    assert_eq!(p.deliveries().len(), 1);
}

#[test]
fn a_reconnect_presents_the_token_set_since() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (_, sub) = p.ready("/cam/**");
    // A daemon restart: the new server knows another token.
    fn restart(p: &mut Pair, token: &str) {
        p.client.transport_lost("reset by peer");
        p.c2s.clear();
        p.s2c.clear();
        p.app.clear_subs();
        p.server = Connection::server(Config::default(), p.now);
        p.client.set_token(token.into());
        p.client.reconnect(p.now, [p.now as u8; 32]);
        p.run();
    }
    restart(&mut p, "bad");
    assert_eq!(p.app.refused_tokens, ["bad"], "the new token is presented");
    assert!(!p.client.is_established());
    restart(&mut p, "fresh");
    assert_eq!(p.app.refused_tokens, ["bad"], "the next token replaces it");
    assert!(p.client.is_established());
    assert!(
        p.server.subscriptions().contains_key(&sub),
        "the tables survive a refused attempt"
    );
}

#[test]
fn deliveries_longer_than_the_clients_frame_limit_are_not_sent() {
    let mut p = Pair::new(
        Config {
            max_frame: 4096,
            ..Config::default()
        },
        Config::default(),
    );
    let (publisher, _) = p.ready("/**");
    // The server accepts up to 4096 from this client too, so the publish
    // must fit as well: use the largest event that fits a Publish and show
    // the Deliver (one byte of type, four of subscription id, like Publish)
    // is bounded by the same limit.
    let big: &'static [u8] = Box::leak(vec![1u8; 4000].into_boxed_slice());
    p.publish(publisher, &event("/a", big));
    assert_eq!(p.deliveries().len(), 1, "fits: delivered");
    let mut q = Pair::new(
        Config {
            max_frame: 4096,
            ..Config::default()
        },
        Config::default(),
    );
    let (publisher, sub) = q.ready("/**");
    // Deliver an event that was accepted elsewhere (another client's
    // larger limit) straight through the server's data path.
    let mut e = event("/a", Box::leak(vec![2u8; 8000].into_boxed_slice()));
    e.header.seq = 1;
    let mut bytes = BytesMut::new();
    e.encode(&mut bytes).expect("encodable");
    q.deliver(&[sub], &bytes.freeze());
    q.run();
    assert!(q.deliveries().is_empty());
    assert_eq!(q.app.too_large, 1);
    let _ = publisher;
}

#[test]
fn an_oversized_hello_of_an_unknown_version_gets_unsupported_version() {
    let mut server = Connection::server(Config::default(), T0);
    let mut buf = BytesMut::new();
    // A version-9 Hello with 8 KiB of extension bytes.
    let len: u32 = 1 + 4 + 2 + 8192;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&[tagwire_proto::kind::HELLO]);
    buf.extend_from_slice(&tagwire_proto::MAGIC);
    buf.extend_from_slice(&9u16.to_le_bytes());
    assert!(matches!(server.poll_input(&mut buf), Some(Input::Closed)));
    let closed = server.closed().expect("closed");
    assert_eq!(closed.code, ErrorCode::UnsupportedVersion.code());
    // A supported version that is too long is refused for its length.
    let mut server = Connection::server(Config::default(), T0);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&[tagwire_proto::kind::HELLO]);
    buf.extend_from_slice(&tagwire_proto::MAGIC);
    buf.extend_from_slice(&2u16.to_le_bytes());
    assert!(matches!(server.poll_input(&mut buf), Some(Input::Closed)));
    assert_eq!(
        server.closed().expect("closed").code,
        ErrorCode::FrameTooLarge.code()
    );
}

#[test]
fn a_clients_error_frame_is_taken_not_refused() {
    let mut p = Pair::new(Config::default(), Config::default());
    p.run();
    let mut out = BytesMut::new();
    Frame::Error {
        req: 0,
        code: ErrorCode::Internal,
        message: "client trouble".into(),
    }
    .encode(&mut out)
    .expect("encodable");
    p.c2s.extend_from_slice(&out);
    p.run();
    assert!(p.server.closed().is_none());
    assert_eq!(p.server.protocol_errors(), 0);
    assert!(
        !p.got.iter().any(|i| matches!(i, Input::PeerError { .. })),
        "the server sent nothing back: {:?}",
        p.got
    );
}

#[test]
fn admin_requests_are_answered_by_id() {
    let mut p = Pair::new(Config::default(), Config::default());
    p.run();
    let req = p.client.admin("{\"op\":\"list\"}".into());
    p.run();
    assert_eq!(p.app.admin_requests, ["{\"op\":\"list\"}"]);
    assert_eq!(p.replies(), [(req, Reply::Admin("{\"ok\":true}".into()))]);
}

#[test]
fn a_pull_is_handed_to_the_app_and_its_reply_paired_with_the_request() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (publisher, _) = p.ready("/none");
    for seq in 1..=6u64 {
        let mut e = event("/hist/a", b"x");
        e.header.seq = seq;
        e.header.source_time_ns = T0 + seq;
        p.publish(publisher, &e);
    }
    let latest = p.client.pull("", "", "/hist/a", PullQuery::Latest);
    let gone = p.client.pull("", "/cam", "/hist/a", PullQuery::Seq(1));
    let none = p.client.pull("", "", "/other", PullQuery::Latest);
    p.run();
    let replies = p.replies();
    assert_eq!(replies.len(), 3, "{replies:?}");
    for (req, reply) in replies {
        match reply {
            Reply::Pulled(r) if req == latest => {
                assert_eq!(r.req, latest);
                assert_eq!(r.status, PullStatus::Complete);
                assert_eq!((r.oldest, r.newest, r.held), (3, 6, 4));
                let ev = Event::decode(&r.events[0]).expect("a valid event");
                assert_eq!(ev.header.seq, 6);
            }
            Reply::Pulled(r) if req == gone => {
                assert_eq!((r.status, r.oldest), (PullStatus::Gone, 3));
                assert!(r.events.is_empty());
            }
            Reply::Err(code, message) if req == none => {
                assert_eq!(code, ErrorCode::NoHistory);
                assert!(message.contains("/other"), "{message}");
            }
            other => panic!("request {req}: unexpected {other:?}"),
        }
    }
    assert_eq!(p.server.protocol_errors(), 0, "a refused pull is an answer");
}

#[test]
fn a_pull_reply_from_a_server_is_not_accepted_by_a_server() {
    let mut p = Pair::new(Config::default(), Config::default());
    p.run();
    let mut out = BytesMut::new();
    Frame::PullReply(PullReply {
        req: 1,
        status: PullStatus::Gone,
        oldest: 0,
        newest: 0,
        held: 0,
        events: vec![],
    })
    .encode(&mut out)
    .expect("encodable");
    p.c2s.extend_from_slice(&out);
    p.run();
    assert_eq!(
        p.server.protocol_errors(),
        1,
        "a client may not send PullReply"
    );
}

/// Runs a token-holding client against a server engine that answers its
/// `Hello` with `answer` (the server side of the test plays a stranger);
/// returns the client and every byte it sent.
fn against_stranger(answer: impl FnOnce(&mut Connection)) -> (Connection, Vec<u8>) {
    let mut server = Connection::server(Config::default(), T0);
    let mut client = Connection::client(
        Config::default(),
        ClientHello {
            token: "the-token-0123456789".into(),
            ..hello("app")
        },
        T0,
    );
    let hello_bytes = client.poll_transmit().expect("Hello");
    let mut sent = hello_bytes.to_vec();
    let mut wire = BytesMut::from(&hello_bytes[..]);
    assert!(matches!(
        server.poll_input(&mut wire),
        Some(Input::Hello { .. })
    ));
    answer(&mut server);
    let mut back = BytesMut::from(&server.poll_transmit().expect("an answer")[..]);
    while client.poll_input(&mut back).is_some() {}
    while let Some(b) = client.poll_transmit() {
        sent.extend_from_slice(&b);
    }
    (client, sent)
}

#[test]
fn a_client_with_a_token_refuses_a_welcome_without_a_challenge_and_sends_nothing_of_it() {
    let (client, sent) = against_stranger(|s| s.accept_hello("stranger"));
    assert!(!client.is_established());
    let closed = client.closed().expect("the client closed");
    assert_eq!(closed.code, ErrorCode::Unauthenticated.code());
    assert!(
        closed.reason.contains("did not prove it knows the token"),
        "{}",
        closed.reason
    );
    assert!(!sent
        .windows(b"the-token-0123456789".len())
        .any(|w| w == b"the-token-0123456789"));
}

#[test]
fn a_client_refuses_a_challenge_made_with_another_token_and_sends_no_proof() {
    let (client, sent) =
        against_stranger(|s| s.challenge("stranger", "a-guess-0123456789", [4; 32]));
    let closed = client.closed().expect("the client closed");
    assert_eq!(closed.code, ErrorCode::Unauthenticated.code());
    assert!(
        closed.reason.contains("Challenge proof is wrong"),
        "{}",
        closed.reason
    );
    // Hello, then a Close: no Proof frame.
    let mut wire = BytesMut::from(&sent[..]);
    let dec = tagwire_proto::FrameDecoder::new(1 << 16);
    let mut kinds = Vec::new();
    while let Ok(Some((k, _))) = dec.next_raw(&mut wire) {
        kinds.push(k);
    }
    assert_eq!(
        kinds,
        [tagwire_proto::kind::HELLO, tagwire_proto::kind::CLOSE]
    );
}

#[test]
fn a_server_that_knows_the_token_is_proven_and_proves_the_client_in_turn() {
    let mut p = Pair::new(Config::default(), Config::default());
    p.client = Connection::client(
        Config::default(),
        ClientHello {
            token: "fresh".into(),
            ..hello("app")
        },
        T0,
    );
    p.run();
    assert!(p.client.is_established() && p.server.is_established());
    assert_eq!(p.client.version(), tagwire_proto::PROTOCOL_VERSION);
}

/// Issue 25: acknowledged publishing is negotiated in the `Hello`: a
/// version-4 client gets it; one that offers version 3 (to a daemon of
/// before) does not, and a `PublishReliable` on its connection is refused
/// naming the version, the connection staying open. On a version-4
/// connection the frame's sequence number reaches the router, and the
/// client takes the server's `PublishAck`.
#[test]
fn acknowledged_publishing_is_negotiated_in_the_hello_and_refused_below_version_4() {
    for offered in [3u16, 4] {
        let mut server = Connection::server(Config::default(), T0);
        let mut client = Connection::client_offering(Config::default(), hello("app"), T0, offered);
        let mut wire = BytesMut::from(&client.poll_transmit().expect("Hello")[..]);
        match server.poll_input(&mut wire) {
            Some(Input::Hello { version, .. }) => assert_eq!(version, offered),
            other => panic!("expected the Hello, got {other:?}"),
        }
        server.accept_hello("router");
        let mut wire = BytesMut::from(&server.poll_transmit().expect("Welcome")[..]);
        assert!(matches!(
            client.poll_input(&mut wire),
            Some(Input::Welcome { .. })
        ));
        assert_eq!(client.acknowledges(), offered >= 4);
        assert_eq!(server.acknowledges(), offered >= 4);
        let (id, req) = client.declare(EndpointKind::Publisher, "/p");
        let mut wire = BytesMut::from(&client.poll_transmit().expect("declare")[..]);
        assert!(matches!(
            server.poll_input(&mut wire),
            Some(Input::Declare { .. })
        ));
        server.accept();
        let mut wire = BytesMut::from(&server.poll_transmit().expect("Ok")[..]);
        assert!(matches!(
            client.poll_input(&mut wire),
            Some(Input::Reply { req: r, reply: Reply::Ok }) if r == req
        ));
        let mut event = Event::new("/t", Bytes::from_static(b"x"));
        event.header.publisher = "/p".into();
        let mut body = BytesMut::new();
        event.encode(&mut body).expect("event");
        let mut frame = BytesMut::new();
        tagwire_proto::encode_publish_reliable(id, 7, &body, &mut frame).expect("frame");
        match (offered, server.poll_input(&mut frame)) {
            (4, Some(Input::Publish(p))) => {
                assert_eq!(p.reliable, Some(7));
                assert_eq!(p.bytes, body.freeze());
            }
            (3, Some(Input::Refused { code, message, .. })) => {
                assert_eq!(code, ErrorCode::Malformed);
                assert!(message.contains("protocol version 3"), "{message}");
                assert!(server.is_established(), "the connection stays open");
            }
            (v, other) => panic!("version {v}: unexpected {other:?}"),
        }
        let ack = tagwire_proto::Ack {
            done: 7,
            ranges: vec![],
        };
        let mut wire = BytesMut::new();
        Frame::PublishAck(ack.clone())
            .encode(&mut wire)
            .expect("ack");
        match (offered, client.poll_input(&mut wire)) {
            (4, Some(Input::PublishAck(a))) => assert_eq!(a, ack),
            (3, Some(Input::PeerError { code, .. })) => assert_eq!(code, ErrorCode::Malformed),
            (v, other) => panic!("version {v}: unexpected {other:?}"),
        }
    }
}

#[test]
fn an_unknown_frame_type_is_named_once_not_as_a_bad_unknown_frame() {
    let mut server = Connection::server(Config::default(), T0);
    let mut client = Connection::client(Config::default(), hello("app"), T0);
    let mut wire = BytesMut::from(&client.poll_transmit().expect("Hello")[..]);
    assert!(matches!(
        server.poll_input(&mut wire),
        Some(Input::Hello { .. })
    ));
    server.accept_hello("router");
    let _welcome = server.poll_transmit();
    // 0xff: no frame; 0x2f: in the link range, but no link frame (0x27
    // and 0x28 became link version 3's `Reliable` and `Ack`).
    for k in [0xffu8, 0x2f] {
        let mut frame = BytesMut::from(&[1u8, 0, 0, 0, k][..]);
        match server.poll_input(&mut frame) {
            Some(Input::Refused { code, message, .. }) => {
                assert_eq!(code, ErrorCode::UnknownFrameType);
                assert_eq!(message, format!("unknown frame type {k:#04x}"));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// `DeliverReliable` is taken in place (like `Deliver`, without
/// `Frame::decode`): the subscription, the delivery number and the event
/// come through as written, and a body too short for its two numbers is
/// reported naming the frame (the connection stays, as for any bad frame
/// below the protocol-error bound).
#[test]
fn a_deliver_reliable_comes_through_in_place_and_a_truncated_one_is_refused() {
    let mut p = Pair::new(Config::default(), Config::default());
    let (_, sub) = p.ready("/cam/**");
    let mut encoded = BytesMut::new();
    event("/cam/x", b"held")
        .encode(&mut encoded)
        .expect("encode");
    let encoded = encoded.freeze();
    let mut wire = BytesMut::new();
    Frame::DeliverReliable {
        sub,
        seq: 7,
        event: encoded.clone(),
    }
    .encode(&mut wire)
    .expect("frame");
    match p.client.poll_input(&mut wire) {
        Some(Input::DeliverReliable { sub: s, seq, event }) => {
            assert_eq!((s, seq), (sub, 7));
            assert_eq!(event, encoded);
        }
        other => panic!("expected DeliverReliable, got {other:?}"),
    }
    // Kind and 8 bytes: no room for the sequence number.
    let mut short = BytesMut::new();
    short.extend_from_slice(&9u32.to_le_bytes());
    short.extend_from_slice(&[tagwire_proto::kind::DELIVER_RELIABLE]);
    short.extend_from_slice(&[0; 8]);
    match p.client.poll_input(&mut short) {
        Some(Input::PeerError { message, .. }) => {
            assert!(message.contains("truncated DeliverReliable"), "{message}");
        }
        other => panic!("expected an error naming the frame, got {other:?}"),
    }
    assert!(p.client.closed().is_none());
}

proptest::proptest! {
    /// The engine's in-place `DeliverReliable` agrees with `Frame::decode`
    /// on any body: the same subscription, number and event where it
    /// decodes, an error naming the frame where it does not.
    #[test]
    fn the_in_place_deliver_reliable_agrees_with_the_frame_decoder(
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
    ) {
        let mut p = Pair::new(Config::default(), Config::default());
        p.ready("/cam/**");
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&(1 + body.len() as u32).to_le_bytes());
        wire.extend_from_slice(&[tagwire_proto::kind::DELIVER_RELIABLE]);
        wire.extend_from_slice(&body);
        let decoded = Frame::decode(
            tagwire_proto::kind::DELIVER_RELIABLE,
            Bytes::copy_from_slice(&body),
        );
        match (p.client.poll_input(&mut wire), decoded) {
            (
                Some(Input::DeliverReliable { sub, seq, event }),
                Ok(Frame::DeliverReliable { sub: s, seq: q, event: e }),
            ) => {
                proptest::prop_assert_eq!((sub, seq, event), (s, q, e));
            }
            (Some(Input::PeerError { message, .. }), Err(_)) => {
                proptest::prop_assert!(message.contains("DeliverReliable"), "{}", message);
            }
            (got, want) => proptest::prop_assert!(false, "engine {:?}, decoder {:?}", got, want),
        }
    }
}
