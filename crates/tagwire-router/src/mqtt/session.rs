//! One MQTT connection: CONNECT and authentication, then a loop that moves
//! MQTT packets to the router's client engine and deliveries back, with
//! every buffer bounded (see the constants and `docs/mqtt.md`, "Limits").

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tagwire_core::connection::{ClientHello, Config, Connection, Input, Reply};
use tagwire_proto::{EndpointKind, ErrorCode, Event, EventRef};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::packet::{self, Connect, Incoming, Offer, Outgoing, Reason, Version};
use super::topic::{filter_to_pattern, starts_with_wildcard, tag_to_topic, topic_to_tag};
use super::Shared;
use crate::auth::{Rights, Transport};

/// Encoded bytes waiting for the MQTT client past which the gateway stops
/// reading that client's packets (its acks would pile up) and stops
/// encoding queued deliveries.
const MQTT_OUT_HIGH: usize = 256 * 1024;
/// Bytes waiting for the router past which the client's packets wait.
const ROUTER_OUT_HIGH: usize = 1024 * 1024;
/// How long the handshake with the router and the goodbye writes may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// Read size.
const READ_CHUNK: usize = 16 * 1024;

/// Why the connection ends, and what to tell the client (MQTT 5).
struct End {
    reason: Reason,
    text: String,
    /// Whether the will is published (any end but a normal DISCONNECT).
    will: bool,
}

impl End {
    fn fail(reason: Reason, text: impl Into<String>) -> End {
        End {
            reason,
            text: text.into(),
            will: true,
        }
    }
}

/// A delivery waiting for the client.
struct Queued {
    topic: String,
    payload: Bytes,
    qos: u8,
}

/// A subscription held for the client.
struct Sub {
    qos: u8,
    wildcard_first: bool,
}

/// A SUBACK waiting for the router's replies.
struct PendingSubAck {
    pkid: u16,
    codes: Vec<Option<Result<u8, Reason>>>,
    text: Option<String>,
}

/// Serves one accepted MQTT connection to its end; never panics on input.
pub(super) async fn serve(shared: &Arc<Shared>, tcp: TcpStream, peer: SocketAddr) {
    let _ = tcp.set_nodelay(true);
    let conn_no = shared
        .next_conn
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut c = Conn {
        shared: shared.clone(),
        tcp,
        peer,
        conn_no,
        version: Version::V311,
        mqtt_in: BytesMut::with_capacity(READ_CHUNK),
        mqtt_out: BytesMut::new(),
    };
    let connect = match c.read_connect().await {
        Ok(connect) => connect,
        Err(e) => {
            tracing::debug!(%peer, "mqtt: {e}");
            return;
        }
    };
    c.version = connect.version;
    let client_id = connect.client_id.clone();
    match c.run(connect).await {
        Ok(()) => tracing::debug!(%peer, client = %client_id, "mqtt: client disconnected"),
        Err(end) => {
            tracing::info!(%peer, client = %client_id, "mqtt: connection closed: {}", end.text)
        }
    }
}

struct Conn {
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    conn_no: u64,
    version: Version,
    mqtt_in: BytesMut,
    mqtt_out: BytesMut,
}

impl Conn {
    async fn read_connect(&mut self) -> Result<Connect, String> {
        let deadline = Instant::now() + Duration::from_secs(self.shared.config.connect_timeout);
        loop {
            match packet::decode_connect(&mut self.mqtt_in, self.shared.config.max_packet) {
                Ok(Some(c)) => return Ok(c),
                Ok(None) => {}
                Err(packet::PacketError::UnsupportedVersion(v)) => {
                    // 3.1.1 §3.1.2.2: answer 0x01 and close.
                    self.send_now(&Outgoing::ConnAck {
                        reason: Reason::UnsupportedVersion,
                        offer: Offer::default(),
                        text: None,
                    })
                    .await;
                    return Err(format!("protocol level {v} refused"));
                }
                Err(e) => return Err(e.to_string()),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            self.mqtt_in.reserve(READ_CHUNK);
            match tokio::time::timeout(left, self.tcp.read_buf(&mut self.mqtt_in)).await {
                Err(_) => return Err("no CONNECT within mqtt.connect_timeout".into()),
                Ok(Ok(0)) => return Err("closed before CONNECT".into()),
                Ok(Err(e)) => return Err(format!("read: {e}")),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Encodes and writes one packet now (bounded by `STEP_TIMEOUT`).
    async fn send_now(&mut self, p: &Outgoing) {
        let mut b = BytesMut::new();
        if packet::encode(self.version, p, &mut b).is_ok() {
            self.mqtt_out.extend_from_slice(&b);
        }
        let _ = tokio::time::timeout(STEP_TIMEOUT, self.tcp.write_all(&self.mqtt_out)).await;
        self.mqtt_out.clear();
    }

    async fn refuse_connect(&mut self, reason: Reason, text: String) -> Result<(), End> {
        self.send_now(&Outgoing::ConnAck {
            reason,
            offer: Offer::default(),
            text: Some(text.clone()),
        })
        .await;
        Err(End {
            reason,
            text: format!("refused: {text}"),
            will: false,
        })
    }

    async fn run(&mut self, connect: Connect) -> Result<(), End> {
        let shared = self.shared.clone();
        let cfg = &shared.config;
        if let Some(m) = &connect.auth_method {
            return self
                .refuse_connect(
                    Reason::BadAuthMethod,
                    format!("authentication method {m:?} is not supported; send the token as the password"),
                )
                .await;
        }
        // The token: the password, else the configured anonymous token.
        // With authentication off, none: the router would not prove one
        // (docs/protocol.md, "Token proof"), and everyone is anonymous.
        let token = match connect.password.as_deref() {
            _ if !shared.auth.enabled() => String::new(),
            Some(p) if !p.is_empty() => p.to_owned(),
            _ => match &shared.anonymous {
                Some(t) => t.clone(),
                None => {
                    return self
                        .refuse_connect(
                            Reason::NotAuthorized,
                            "no password: the password is a tagwire token (an [[auth.tokens]] secret, or the daemon's token file); see docs/mqtt.md".into(),
                        )
                        .await
                }
            },
        };
        let (identity, rights) = match shared
            .auth
            .authenticate(&Transport::Tcp { cert: None }, &token)
        {
            Ok(ok) => ok,
            Err((code, message)) => {
                let reason = if code == ErrorCode::Unauthenticated {
                    Reason::BadCredentials
                } else {
                    Reason::NotAuthorized
                };
                let message = if code == ErrorCode::Unauthenticated {
                    "the password is not a valid token for this daemon".to_owned()
                } else {
                    message
                };
                return self.refuse_connect(reason, message).await;
            }
        };
        let will = match &connect.will {
            None => None,
            Some(w) => match topic_to_tag(&w.topic) {
                Err(e) => {
                    return self
                        .refuse_connect(Reason::TopicInvalid, format!("will: {e}"))
                        .await
                }
                Ok(tag) if !rights.may_publish(&tag) => {
                    return self
                        .refuse_connect(
                            Reason::NotAuthorized,
                            format!("will: identity {identity} may not publish on {tag}"),
                        )
                        .await
                }
                Ok(tag) => Some((tag, w.payload.clone())),
            },
        };
        let mut assigned = None;
        let client_id = if connect.client_id.is_empty() {
            if !connect.clean && self.version == Version::V311 {
                return self
                    .refuse_connect(
                        Reason::ProtocolError,
                        "an empty client id needs clean session".into(),
                    )
                    .await;
            }
            let id = format!("tagwire-{}", self.conn_no);
            assigned = Some(id.clone());
            id
        } else {
            connect.client_id.clone()
        };
        let keep_alive = if connect.keep_alive == 0 || connect.keep_alive > cfg.max_keep_alive {
            cfg.max_keep_alive
        } else {
            connect.keep_alive
        };

        // The router connection, authenticated with the same token.
        let mut router = match self.open_router(&client_id, &token).await {
            Ok(r) => r,
            Err((reason, text)) => return self.refuse_connect(reason, text).await,
        };
        // Take over an older connection with the same client id.
        let takeover = Arc::new(tokio::sync::Notify::new());
        if let Ok(mut clients) = shared.clients.lock() {
            if let Some((_, old)) =
                clients.insert(client_id.clone(), (self.conn_no, takeover.clone()))
            {
                old.notify_one();
            }
        }
        let name = endpoint_base(&client_id, self.conn_no);
        let (pub_id, pub_req) = router
            .engine
            .declare(EndpointKind::Publisher, &format!("{name}/pub"));
        let (sub_id, sub_req) = router
            .engine
            .declare(EndpointKind::Subscriber, &format!("{name}/sub"));
        let window = connect
            .receive_max
            .unwrap_or(u16::MAX)
            .min(cfg.inflight)
            .max(1);
        self.queue_packet(&Outgoing::ConnAck {
            reason: Reason::Success,
            offer: Offer {
                receive_max: cfg.inflight,
                max_packet: u32::try_from(cfg.max_packet).unwrap_or(u32::MAX),
                server_keep_alive: (keep_alive != connect.keep_alive).then_some(keep_alive),
                assigned_client_id: assigned,
            },
            text: None,
        });
        tracing::debug!(peer = %self.peer, client = %client_id, %identity, "mqtt: connected");
        let mut s = State {
            identity,
            rights,
            pub_id,
            pub_name: format!("{name}/pub"),
            sub_id,
            declare_reqs: [pub_req, sub_req],
            seq: 0,
            client_max_packet: connect.max_packet.map_or(usize::MAX, |m| m as usize),
            queue: VecDeque::new(),
            queued_bytes: 0,
            inflight: HashSet::new(),
            window: window as usize,
            next_pkid: 1,
            subs: HashMap::new(),
            by_filter: HashMap::new(),
            sub_reqs: HashMap::new(),
            subacks: VecDeque::new(),
            qos2: HashSet::new(),
        };
        let result = self
            .serve_loop(&mut router, &mut s, keep_alive, &takeover)
            .await;
        if let Ok(mut clients) = shared.clients.lock() {
            if clients
                .get(&client_id)
                .is_some_and(|(n, _)| *n == self.conn_no)
            {
                clients.remove(&client_id);
            }
        }
        let end = match result {
            Ok(with_will) => End {
                reason: Reason::Success,
                text: String::new(),
                will: with_will,
            },
            Err(end) => end,
        };
        if end.will {
            if let Some((tag, payload)) = will {
                s.publish_to_router(&mut router, tag, payload);
            }
        }
        router.engine.close(0, "mqtt client gone");
        router.flush().await;
        if end.reason != Reason::Success {
            if self.version == Version::V5 {
                let p = Outgoing::Disconnect {
                    reason: end.reason,
                    text: end.text.clone(),
                };
                self.queue_packet(&p);
            }
            let _ = tokio::time::timeout(STEP_TIMEOUT, self.tcp.write_all(&self.mqtt_out)).await;
            return Err(end);
        }
        Ok(())
    }

    fn queue_packet(&mut self, p: &Outgoing) {
        if let Err(e) = packet::encode(self.version, p, &mut self.mqtt_out) {
            tracing::warn!(peer = %self.peer, "mqtt: {e}");
        }
    }

    async fn open_router(
        &mut self,
        client_id: &str,
        token: &str,
    ) -> Result<RouterSide, (Reason, String)> {
        let unavailable = |e: std::io::Error| {
            (
                Reason::ShuttingDown,
                format!("cannot reach the router: {e}"),
            )
        };
        let std = self.shared.connector.connect().map_err(unavailable)?;
        std.set_nonblocking(true).map_err(unavailable)?;
        let stream = UnixStream::from_std(std).map_err(unavailable)?;
        let hello = ClientHello {
            name: format!("mqtt:{}", sanitize(client_id, 200)),
            token: token.to_owned(),
            session: [0; tagwire_proto::SESSION_ID_LEN],
            nonce: crate::local::random_nonce(),
            proof: None,
        };
        let config = Config {
            idle_timeout: 0,
            ..Config::default()
        };
        let mut r = RouterSide {
            stream,
            engine: Connection::client(config, hello, 0),
            input: BytesMut::with_capacity(READ_CHUNK),
            output: BytesMut::new(),
            origin: Instant::now(),
        };
        let welcome = async {
            loop {
                r.flush().await;
                r.input.reserve(READ_CHUNK);
                match r.stream.read_buf(&mut r.input).await {
                    Ok(0) | Err(_) => {
                        return Err((Reason::ShuttingDown, "the router closed".to_owned()))
                    }
                    Ok(_) => {}
                }
                while let Some(input) = r.engine.poll_input(&mut r.input) {
                    match input {
                        Input::Welcome { .. } => return Ok(()),
                        Input::PeerError { code, message, .. } => {
                            let reason = match code {
                                ErrorCode::Unauthenticated => Reason::BadCredentials,
                                ErrorCode::PermissionDenied => Reason::NotAuthorized,
                                ErrorCode::LimitReached => Reason::ServerBusy,
                                _ => Reason::Unspecified,
                            };
                            return Err((reason, message));
                        }
                        Input::Closed => {
                            let why = r
                                .engine
                                .closed()
                                .map(|c| c.reason.clone())
                                .unwrap_or_default();
                            return Err((
                                Reason::Unspecified,
                                format!("the router refused: {why}"),
                            ));
                        }
                        _ => {}
                    }
                }
            }
        };
        match tokio::time::timeout(STEP_TIMEOUT, welcome).await {
            Ok(Ok(())) => Ok(r),
            Ok(Err(e)) => Err(e),
            Err(_) => Err((
                Reason::ServerBusy,
                "the router did not answer in time".into(),
            )),
        }
    }

    /// The main loop: `Ok(with_will)` after a DISCONNECT, `Err` otherwise.
    async fn serve_loop(
        &mut self,
        r: &mut RouterSide,
        s: &mut State,
        keep_alive: u16,
        takeover: &tokio::sync::Notify,
    ) -> Result<bool, End> {
        let cfg = self.shared.config.clone();
        let mut shutdown = self.shared.shutdown.clone();
        let idle = Duration::from_millis(u64::from(keep_alive) * 1500);
        let mut deadline = tokio::time::Instant::now() + idle;
        loop {
            // Deliveries the router sent while the queue was full.
            s.take_router_inputs(r, self.version, &mut self.mqtt_out, &cfg)?;
            s.fill(&mut self.mqtt_out, self.version);
            while let Some(b) = r.engine.poll_transmit() {
                r.output.extend_from_slice(&b);
            }
            let read_mqtt = self.mqtt_out.len() < MQTT_OUT_HIGH && r.output.len() < ROUTER_OUT_HIGH;
            let read_router = s.has_room(&cfg);
            let (mut mqtt_rd, mut mqtt_wr) = self.tcp.split();
            let (mut router_rd, mut router_wr) = r.stream.split();
            self.mqtt_in.reserve(READ_CHUNK);
            r.input.reserve(READ_CHUNK);
            tokio::select! {
                n = mqtt_rd.read_buf(&mut self.mqtt_in), if read_mqtt => {
                    match n {
                        Ok(0) => return Err(End::fail(Reason::Success, "the client closed the connection without DISCONNECT")),
                        Err(e) => return Err(End::fail(Reason::Success, format!("read: {e}"))),
                        Ok(_) => {}
                    }
                    deadline = tokio::time::Instant::now() + idle;
                    loop {
                        let p = match packet::decode(self.version, &mut self.mqtt_in, cfg.max_packet) {
                            Ok(Some(p)) => p,
                            Ok(None) => break,
                            Err(e @ packet::PacketError::TooLarge { .. }) => {
                                return Err(End::fail(Reason::PacketTooLarge, e.to_string()))
                            }
                            Err(e) => return Err(End::fail(Reason::ProtocolError, e.to_string())),
                        };
                        if let Some(with_will) = s.handle(p, r, self.version, &mut self.mqtt_out, &cfg)? {
                            return Ok(with_will);
                        }
                    }
                }
                n = mqtt_wr.write(&self.mqtt_out), if !self.mqtt_out.is_empty() => {
                    match n {
                        Ok(0) | Err(_) => return Err(End::fail(Reason::Success, "the client stopped reading (write failed)")),
                        Ok(n) => { let _ = self.mqtt_out.split_to(n); }
                    }
                }
                n = router_rd.read_buf(&mut r.input), if read_router => {
                    match n {
                        Ok(0) | Err(_) => return Err(End::fail(Reason::ShuttingDown, "the router closed the connection")),
                        Ok(_) => r.engine.received(r.now()),
                    }
                }
                n = router_wr.write(&r.output), if !r.output.is_empty() => {
                    match n {
                        Ok(0) | Err(_) => return Err(End::fail(Reason::ShuttingDown, "the router closed the connection")),
                        Ok(n) => { let _ = r.output.split_to(n); }
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(End::fail(Reason::KeepAliveTimeout, format!("no packet within 1.5 x keep alive ({keep_alive} s)")));
                }
                _ = takeover.notified() => {
                    return Err(End::fail(Reason::SessionTakenOver, "another connection took this client id"));
                }
                _ = shutdown.changed() => {
                    return Err(End::fail(Reason::ShuttingDown, "the daemon is stopping"));
                }
            }
        }
    }
}

/// The in-process connection into the router.
struct RouterSide {
    stream: UnixStream,
    engine: Connection,
    input: BytesMut,
    output: BytesMut,
    origin: Instant,
}

impl RouterSide {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Writes what is pending (bounded by `STEP_TIMEOUT`).
    async fn flush(&mut self) {
        while let Some(b) = self.engine.poll_transmit() {
            self.output.extend_from_slice(&b);
        }
        let _ = tokio::time::timeout(STEP_TIMEOUT, self.stream.write_all(&self.output)).await;
        self.output.clear();
    }
}

/// One connection's tables and queues.
struct State {
    identity: Arc<str>,
    rights: Rights,
    pub_id: u32,
    pub_name: String,
    sub_id: u32,
    declare_reqs: [u32; 2],
    seq: u64,
    client_max_packet: usize,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    inflight: HashSet<u16>,
    window: usize,
    next_pkid: u16,
    subs: HashMap<u32, Sub>,
    by_filter: HashMap<String, u32>,
    /// Subscribe request id → (SUBACK it answers, filter index, sub id, granted QoS).
    sub_reqs: HashMap<u32, (u16, usize, u32, u8)>,
    subacks: VecDeque<PendingSubAck>,
    /// QoS 2 packet ids received and not yet released (PUBREL).
    qos2: HashSet<u16>,
}

impl State {
    fn has_room(&self, cfg: &super::MqttConfig) -> bool {
        self.queue.len() < cfg.queue_length && self.queued_bytes < cfg.queue_bytes
    }

    /// Encodes queued deliveries while the client's window and the write
    /// buffer allow.
    fn fill(&mut self, out: &mut BytesMut, version: Version) {
        while out.len() < MQTT_OUT_HIGH {
            let Some(front) = self.queue.front() else {
                return;
            };
            if front.qos == 1 && self.inflight.len() >= self.window {
                return;
            }
            let Some(q) = self.queue.pop_front() else {
                return;
            };
            self.queued_bytes -= q.payload.len();
            let mut pkid = 0;
            if q.qos == 1 {
                while pkid == 0 || self.inflight.contains(&pkid) {
                    pkid = self.next_pkid;
                    self.next_pkid = self.next_pkid.wrapping_add(1).max(1);
                }
                self.inflight.insert(pkid);
            }
            let p = Outgoing::Publish {
                topic: q.topic,
                qos: q.qos,
                pkid,
                payload: q.payload,
            };
            if let Err(e) = packet::encode(version, &p, out) {
                tracing::debug!("mqtt: delivery not encoded: {e}");
                self.inflight.remove(&pkid);
            }
        }
    }

    /// Queues a delivery; at the bound the oldest QoS 0 one goes.
    fn enqueue(&mut self, q: Queued, cfg: &super::MqttConfig) {
        self.queued_bytes += q.payload.len();
        self.queue.push_back(q);
        while self.queue.len() > cfg.queue_length || self.queued_bytes > cfg.queue_bytes {
            let Some(i) = self.queue.iter().position(|q| q.qos == 0) else {
                // All QoS 1: kept; `has_room` stops reading the router.
                return;
            };
            if let Some(old) = self.queue.remove(i) {
                self.queued_bytes -= old.payload.len();
            }
        }
    }

    fn take_router_inputs(
        &mut self,
        r: &mut RouterSide,
        version: Version,
        out: &mut BytesMut,
        cfg: &super::MqttConfig,
    ) -> Result<(), End> {
        while self.has_room(cfg) {
            let Some(input) = r.engine.poll_input(&mut r.input) else {
                return Ok(());
            };
            match input {
                Input::Deliver { sub, event } => {
                    let Some(s) = self.subs.get(&sub) else {
                        continue;
                    };
                    let Ok(ev) = EventRef::parse(&event) else {
                        continue;
                    };
                    let Some(topic) = tag_to_topic(ev.tag, s.wildcard_first) else {
                        tracing::debug!(
                            tag = ev.tag,
                            "mqtt: tag has no MQTT topic name; not delivered"
                        );
                        continue;
                    };
                    if ev.payload.len() + topic.len() + 16 > self.client_max_packet {
                        tracing::debug!(
                            tag = ev.tag,
                            "mqtt: event larger than the client's maximum packet; not delivered"
                        );
                        continue;
                    }
                    let q = Queued {
                        topic: topic.to_owned(),
                        payload: Bytes::copy_from_slice(ev.payload),
                        qos: s.qos,
                    };
                    self.enqueue(q, cfg);
                }
                Input::Reply { req, reply } => {
                    if self.declare_reqs.contains(&req) {
                        if let Reply::Err(code, message) = reply {
                            return Err(End::fail(
                                Reason::Unspecified,
                                format!("the router refused the endpoint: {code:?}: {message}"),
                            ));
                        }
                        continue;
                    }
                    let Some((pkid, index, sub, qos)) = self.sub_reqs.remove(&req) else {
                        continue;
                    };
                    let Some(ack) = self.subacks.iter_mut().find(|a| a.pkid == pkid) else {
                        continue;
                    };
                    ack.codes[index] = Some(match reply {
                        Reply::Err(code, message) => {
                            self.subs.remove(&sub);
                            self.by_filter.retain(|_, v| *v != sub);
                            ack.text.get_or_insert(message);
                            Err(match code {
                                ErrorCode::PermissionDenied => Reason::NotAuthorized,
                                ErrorCode::LimitReached | ErrorCode::QueueFull => {
                                    Reason::QuotaExceeded
                                }
                                ErrorCode::InvalidTag => Reason::FilterInvalid,
                                _ => Reason::Unspecified,
                            })
                        }
                        _ => Ok(qos),
                    });
                    self.flush_subacks(version, out);
                }
                Input::PeerError { code, message, .. } => {
                    if tagwire_core::connection::is_protocol_error(code)
                        || code == ErrorCode::PermissionDenied
                    {
                        tracing::warn!(identity = %self.identity, "mqtt: the router refused: {code:?}: {message}");
                    } else {
                        return Err(End::fail(
                            Reason::Unspecified,
                            format!("router: {code:?}: {message}"),
                        ));
                    }
                }
                Input::Closed => {
                    let why = r
                        .engine
                        .closed()
                        .map(|c| c.reason.clone())
                        .unwrap_or_default();
                    return Err(End::fail(
                        Reason::ShuttingDown,
                        format!("the router closed the connection: {why}"),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Sends the SUBACKs whose every filter has its answer, in order.
    fn flush_subacks(&mut self, version: Version, out: &mut BytesMut) {
        while self
            .subacks
            .front()
            .is_some_and(|a| a.codes.iter().all(Option::is_some))
        {
            let Some(a) = self.subacks.pop_front() else {
                return;
            };
            let p = Outgoing::SubAck {
                pkid: a.pkid,
                codes: a.codes.into_iter().flatten().collect(),
                text: a.text,
            };
            let _ = packet::encode(version, &p, out);
        }
    }

    fn publish_to_router(&mut self, r: &mut RouterSide, tag: String, payload: Bytes) {
        self.seq += 1;
        let mut ev = Event::new(tag, payload);
        ev.header.publisher = self.pub_name.clone();
        ev.header.seq = self.seq;
        ev.header.source_time_ns = crate::timing::now_ns();
        if let Err(e) = tagwire_proto::encode_publish(self.pub_id, &ev, &mut r.output) {
            tracing::debug!("mqtt: cannot encode an event: {e}");
        }
    }

    /// Acts on one packet; `Some(with_will)` when the client disconnected.
    fn handle(
        &mut self,
        p: Incoming,
        r: &mut RouterSide,
        version: Version,
        out: &mut BytesMut,
        cfg: &super::MqttConfig,
    ) -> Result<Option<bool>, End> {
        let encode = |out: &mut BytesMut, p: Outgoing| {
            let _ = packet::encode(version, &p, out);
        };
        match p {
            Incoming::Publish {
                topic,
                qos,
                retain,
                pkid,
                payload,
                topic_alias,
            } => {
                if topic_alias.is_some() {
                    return Err(End::fail(
                        Reason::TopicAliasInvalid,
                        "topic aliases are not offered (topic alias maximum 0)",
                    ));
                }
                if retain && version == Version::V5 {
                    return Err(End::fail(
                        Reason::RetainNotSupported,
                        "retained messages are not offered (retain available 0); tagwire's pull history keeps the latest events instead",
                    ));
                }
                if qos == 2 && self.qos2.contains(&pkid) {
                    // A resent QoS 2 publish: already routed once.
                    encode(
                        out,
                        Outgoing::PubRec {
                            pkid,
                            reason: Reason::Success,
                            text: None,
                        },
                    );
                    return Ok(None);
                }
                let refusal = match topic_to_tag(&topic) {
                    Err(e) => Some((Reason::TopicInvalid, e.to_string())),
                    Ok(tag) if !self.rights.may_publish(&tag) => Some((
                        Reason::NotAuthorized,
                        format!(
                            "identity {} may not publish on {tag} (no [[acl]] publish pattern matches it)",
                            self.identity
                        ),
                    )),
                    Ok(tag) => {
                        let len = 1 + 4 + 64 + tag.len() + self.pub_name.len() + payload.len();
                        if len > r.engine.max_frame() as usize {
                            Some((
                                Reason::PacketTooLarge,
                                format!(
                                    "the event would be {len} bytes, over the daemon's frame limit {}",
                                    r.engine.max_frame()
                                ),
                            ))
                        } else {
                            self.publish_to_router(r, tag, payload);
                            None
                        }
                    }
                };
                match (refusal, qos) {
                    (None, 0) => {}
                    (None, 1) => encode(
                        out,
                        Outgoing::PubAck {
                            pkid,
                            reason: Reason::Success,
                            text: None,
                        },
                    ),
                    (None, _) => {
                        if self.qos2.len() >= usize::from(cfg.inflight) {
                            return Err(End::fail(
                                Reason::QuotaExceeded,
                                "more QoS 2 publishes unreleased than the receive maximum",
                            ));
                        }
                        self.qos2.insert(pkid);
                        encode(
                            out,
                            Outgoing::PubRec {
                                pkid,
                                reason: Reason::Success,
                                text: None,
                            },
                        );
                    }
                    // MQTT 5 can say no to a QoS 1/2 publish.
                    (Some((reason, text)), 1) if version == Version::V5 => encode(
                        out,
                        Outgoing::PubAck {
                            pkid,
                            reason,
                            text: Some(text),
                        },
                    ),
                    (Some((reason, text)), 2) if version == Version::V5 => encode(
                        out,
                        Outgoing::PubRec {
                            pkid,
                            reason,
                            text: Some(text),
                        },
                    ),
                    // QoS 0, and MQTT 3.1.1 (which has no negative ack):
                    // the connection fails, naming the reason.
                    (Some((reason, text)), _) => return Err(End::fail(reason, text)),
                }
            }
            Incoming::PubAck(pkid) => {
                self.inflight.remove(&pkid);
            }
            Incoming::PubRel(pkid) => {
                self.qos2.remove(&pkid);
                encode(out, Outgoing::PubComp(pkid));
            }
            Incoming::UnexpectedAck(what) => {
                return Err(End::fail(
                    Reason::ProtocolError,
                    format!("{what} for a QoS 2 delivery, but deliveries are QoS 0 or 1"),
                ))
            }
            Incoming::Subscribe { pkid, filters } => {
                let mut ack = PendingSubAck {
                    pkid,
                    codes: Vec::with_capacity(filters.len()),
                    text: None,
                };
                for (index, (filter, qos)) in filters.into_iter().enumerate() {
                    let granted = qos.min(1);
                    let code = match filter_to_pattern(&filter) {
                        Err(e) => {
                            ack.text.get_or_insert(e.to_string());
                            Some(Err(Reason::FilterInvalid))
                        }
                        Ok(p) if !self.rights.may_subscribe(&p) => {
                            ack.text.get_or_insert(format!(
                                "identity {} may not subscribe to {} (no [[acl]] subscribe pattern covers it)",
                                self.identity,
                                p.as_str()
                            ));
                            Some(Err(Reason::NotAuthorized))
                        }
                        Ok(_) if self.by_filter.contains_key(&filter) => {
                            // MQTT: a subscription to the same filter replaces it.
                            if let Some(s) = self
                                .by_filter
                                .get(&filter)
                                .and_then(|id| self.subs.get_mut(id))
                            {
                                s.qos = granted;
                            }
                            Some(Ok(granted))
                        }
                        Ok(_) if self.subs.len() >= cfg.max_subscriptions => {
                            ack.text.get_or_insert(format!(
                                "{} subscriptions already (mqtt.max_subscriptions)",
                                cfg.max_subscriptions
                            ));
                            Some(Err(Reason::QuotaExceeded))
                        }
                        Ok(p) => {
                            let (sub, req) = r.engine.subscribe(
                                self.sub_id,
                                p.as_str(),
                                // Payload bytes, not shared-memory references
                                // (the in-process socket counts as same host).
                                vec![("shm".to_owned(), "off".to_owned())],
                            );
                            self.subs.insert(
                                sub,
                                Sub {
                                    wildcard_first: starts_with_wildcard(&filter),
                                    qos: granted,
                                },
                            );
                            self.by_filter.insert(filter, sub);
                            self.sub_reqs.insert(req, (pkid, index, sub, granted));
                            None
                        }
                    };
                    ack.codes.push(code);
                }
                self.subacks.push_back(ack);
                self.flush_subacks(version, out);
            }
            Incoming::Unsubscribe { pkid, filters } => {
                let count = filters.len();
                for f in filters {
                    if let Some(sub) = self.by_filter.remove(&f) {
                        self.subs.remove(&sub);
                        r.engine.unsubscribe(sub);
                    }
                }
                encode(out, Outgoing::UnsubAck { pkid, count });
            }
            Incoming::PingReq => encode(out, Outgoing::PingResp),
            Incoming::Disconnect { with_will } => return Ok(Some(with_will)),
            Incoming::Unexpected(what) => {
                return Err(End::fail(
                    Reason::ProtocolError,
                    format!("unexpected {what} from a client"),
                ))
            }
        }
        Ok(None)
    }
}

/// Endpoint names of a connection: `mqtt:CLIENT:N` (whitespace and
/// control characters dropped, bounded).
fn endpoint_base(client_id: &str, conn_no: u64) -> String {
    format!("mqtt:{}:{conn_no}", sanitize(client_id, 180))
}

fn sanitize(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars().filter(|c| !c.is_whitespace() && !c.is_control()) {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_names_are_valid_for_any_client_id() {
        for id in ["", "a b\u{1}c", &"é".repeat(500)] {
            let n = format!("{}/pub", endpoint_base(id, 7));
            assert!(tagwire_core::endpoint::validate_name(&n).is_ok(), "{n:?}");
        }
    }
}
