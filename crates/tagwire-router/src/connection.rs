//! One client connection: the handshake, then frames in (decode → check →
//! route) and the writer task that drains the connection's outbox.
//!
//! Bad input fails alone: a frame that decodes badly gets an `Error` frame
//! naming the problem and the connection carries on; a stream that cannot be
//! split into frames any more (oversized or zero length) gets an `Error` and
//! is closed. Nothing here panics on peer input.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tagwire_core::filter::FilterList;
use tagwire_core::qos::ChannelQos;
use tagwire_core::queue::BoundedQueue;
use tagwire_core::tags::{validate_tag, Pattern};
use tagwire_proto::{
    kind, EndpointKind, ErrorCode, EventRef, Frame, FrameDecoder, StreamError, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::admin::Reply;
use crate::channel::{Channel, Outbox};
use crate::config::Limits;
use crate::dispatch::deliver;
use crate::filters::{op_name, FilterInfo, FilterLevel, FilterRecord, SourceFilters};
use crate::state::{ConnEntry, State};
use crate::timing::{deadline, expired, now_ns};

/// How long a closing connection's writer may take to flush its last frames.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Read buffer growth step.
const READ_CHUNK: usize = 64 * 1024;

struct Endpoint {
    name: Rc<str>,
    kind: EndpointKind,
    /// A publisher's own filters (empty: everything passes).
    filters: SourceFilters,
}

/// Per-connection protocol state.
struct Conn {
    id: u64,
    state: Rc<RefCell<State>>,
    outbox: Rc<Outbox>,
    welcomed: bool,
    endpoints: HashMap<u32, Endpoint>,
    /// Client subscription id → router-wide subscription id.
    subs: HashMap<u32, u64>,
    max_control: usize,
}

/// A compiled `filter` or `map` subscription property.
enum Compiled {
    Filter(tagwire_core::filter::Filter),
    Mapping(tagwire_core::filter::MappingFilter),
}

/// Whether to keep reading after a frame.
enum Next {
    Continue,
    Close,
}

/// Serves one accepted connection until it closes. `peer` is for logs.
pub(crate) async fn serve<R, W>(state: Rc<RefCell<State>>, peer: String, mut reader: R, writer: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    let outbox = Rc::new(Outbox::default());
    let admitted = register(&state, &peer, &outbox);
    let Ok((id, limits)) = admitted else {
        // Over the connection limit: say so, flush, and close.
        let _ = tokio::time::timeout(CLOSE_GRACE, outbox.run_writer(writer)).await;
        return;
    };
    tracing::debug!(conn = id, %peer, "connection opened");
    let writer_box = outbox.clone();
    let writer_task = tokio::task::spawn_local(async move { writer_box.run_writer(writer).await });

    let mut conn = Conn {
        id,
        state: state.clone(),
        outbox: outbox.clone(),
        welcomed: false,
        endpoints: HashMap::new(),
        subs: HashMap::new(),
        max_control: limits.max_control_bytes,
    };
    // Until the handshake, only a Hello-sized frame is accepted, so a peer
    // that has not said Hello cannot make the router reserve a large buffer.
    let mut decoder = FrameDecoder::new(tagwire_proto::limits::MIN_MAX_FRAME);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    'read: loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => {
                if !buf.is_empty() {
                    tracing::warn!(conn = id, %peer, "connection closed in the middle of a frame ({} bytes pending)", buf.len());
                }
                break;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(conn = id, %peer, "read error: {e}");
                break;
            }
        }
        loop {
            match decoder.next_raw(&mut buf) {
                Ok(Some((k, body))) => {
                    if let Next::Close = conn.handle(k, body, &mut decoder) {
                        break 'read;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let code = match e {
                        StreamError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
                        _ => ErrorCode::Malformed,
                    };
                    conn.fail(code, 0, format!("{e}; closing the connection"));
                    break 'read;
                }
            }
        }
        if writer_task.is_finished() {
            break;
        }
        // Let writers drain what this chunk queued before reading more, so a
        // burst from one publisher does not overrun fast subscribers' queues.
        tokio::task::yield_now().await;
    }
    conn.cleanup();
    outbox.close();
    match tokio::time::timeout(CLOSE_GRACE, writer_task).await {
        Ok(_) => {}
        Err(_) => tracing::debug!(
            conn = id,
            "writer did not flush within {:?}; dropping it",
            CLOSE_GRACE
        ),
    }
    tracing::debug!(conn = id, %peer, "connection closed");
}

/// Adds a connection to the router's table, or queues a `LimitReached`
/// refusal on `outbox` (and closes it) when the table is full.
fn register(state: &RefCell<State>, peer: &str, outbox: &Rc<Outbox>) -> Result<(u64, Limits), ()> {
    let mut st = state.borrow_mut();
    let limits = st.config.limits.clone();
    if st.connections.len() >= limits.max_connections {
        tracing::warn!(%peer, "refusing connection: {} connections already open", limits.max_connections);
        outbox.send(
            &Frame::Error {
                req: 0,
                code: ErrorCode::LimitReached,
                message: format!(
                    "connection limit reached ({} connections)",
                    limits.max_connections
                ),
            },
            usize::MAX,
        );
        outbox.close();
        return Err(());
    }
    let id = st.next_connection_id();
    st.connections.insert(
        id,
        ConnEntry {
            name: String::new(),
            peer: peer.to_owned(),
            outbox: outbox.clone(),
        },
    );
    Ok((id, limits))
}

impl Conn {
    /// Sends an error frame and logs it.
    fn fail(&self, code: ErrorCode, req: u32, message: String) -> Next {
        tracing::warn!(conn = self.id, ?code, "{message}");
        self.reply(Frame::Error { req, code, message })
    }

    fn reply(&self, frame: Frame) -> Next {
        if self.outbox.send(&frame, self.max_control) {
            Next::Continue
        } else {
            tracing::warn!(
                conn = self.id,
                "client does not read its replies ({} bytes pending); closing",
                self.max_control
            );
            Next::Close
        }
    }

    fn handle(&mut self, k: u8, body: Bytes, decoder: &mut FrameDecoder) -> Next {
        if k == kind::PUBLISH && self.welcomed {
            return self.publish(body);
        }
        let frame = match Frame::decode(k, body) {
            Ok(f) => f,
            Err(e) => {
                let code = match e {
                    tagwire_proto::DecodeError::UnknownFrameType(_) => ErrorCode::UnknownFrameType,
                    _ => ErrorCode::Malformed,
                };
                let message = format!("bad {} frame: {e}", tagwire_proto::frame_name(k));
                // Before the handshake nothing about the peer can be trusted.
                let next = self.fail(code, 0, message);
                return if self.welcomed { next } else { Next::Close };
            }
        };
        if !self.welcomed {
            return self.handshake(frame, decoder);
        }
        match frame {
            Frame::DeclareEndpoint {
                req,
                id,
                kind,
                name,
            } => self.declare(req, id, kind, name),
            Frame::Subscribe {
                req,
                sub,
                endpoint,
                pattern,
                qos,
            } => self.subscribe(req, sub, endpoint, &pattern, &qos),
            Frame::Unsubscribe { req, sub } => match self.subs.remove(&sub) {
                Some(global) => {
                    self.drop_channel(global);
                    self.ack(req)
                }
                None => self.fail(
                    ErrorCode::UnknownSubscription,
                    req,
                    format!("no subscription with id {sub}"),
                ),
            },
            Frame::UndeclareEndpoint { req, id } => match self.endpoints.remove(&id) {
                Some(e) => {
                    // The endpoint's channels stop receiving now; the lane's
                    // housekeeping removes them in slices.
                    let mut st = self.state.borrow_mut();
                    let mut gone = st.channels.of_endpoint(&e.name);
                    // A router-wide id is (connection id << 32) | client id.
                    gone.retain(|g| self.subs.remove(&(*g as u32)) == Some(*g));
                    st.retire_endpoint(gone);
                    st.endpoints.remove(&e.name);
                    if st.sources.remove(&e.name).is_some() {
                        st.filters.forget_publisher(&e.name);
                    }
                    drop(st);
                    self.ack(req)
                }
                None => self.fail(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("no endpoint with id {id} on this connection"),
                ),
            },
            Frame::Ping { nonce } => self.reply(Frame::Pong { nonce }),
            Frame::Pong { .. } => Next::Continue,
            Frame::Close { .. } => Next::Close,
            Frame::Admin { req, body } => self.admin(req, &body, decoder.max_frame()),
            Frame::Hello { .. } => {
                self.fail(ErrorCode::Malformed, 0, "Hello after the handshake".into())
            }
            other => self.fail(
                ErrorCode::Malformed,
                0,
                format!(
                    "a client may not send {} frames",
                    tagwire_proto::frame_name(other.kind())
                ),
            ),
        }
    }

    fn handshake(&mut self, frame: Frame, decoder: &mut FrameDecoder) -> Next {
        let Frame::Hello {
            version,
            max_frame,
            name,
        } = frame
        else {
            self.fail(
                ErrorCode::HandshakeRequired,
                0,
                format!(
                    "expected Hello, got {} before the handshake",
                    tagwire_proto::frame_name(frame.kind())
                ),
            );
            return Next::Close;
        };
        if version != PROTOCOL_VERSION {
            self.fail(
                ErrorCode::UnsupportedVersion,
                0,
                format!("protocol version {version} is not supported (this server speaks {PROTOCOL_VERSION})"),
            );
            return Next::Close;
        }
        let max_frame = match tagwire_proto::validate_max_frame(max_frame) {
            Ok(m) => m.min(self.state.borrow().config.limits.max_frame),
            Err(e) => {
                self.fail(ErrorCode::Malformed, 0, format!("bad Hello: {e}"));
                return Next::Close;
            }
        };
        decoder.set_max_frame(max_frame);
        self.welcomed = true;
        let server = {
            let mut st = self.state.borrow_mut();
            if let Some(c) = st.connections.get_mut(&self.id) {
                c.name = name;
            }
            st.config.name.clone()
        };
        self.reply(Frame::Welcome {
            version: PROTOCOL_VERSION,
            max_frame,
            name: server,
        })
    }

    fn declare(&mut self, req: u32, id: u32, kind: EndpointKind, name: String) -> Next {
        if self.endpoints.contains_key(&id) {
            return self.fail(
                ErrorCode::BadRequest,
                req,
                format!("endpoint id {id} is already used on this connection"),
            );
        }
        let max = self
            .state
            .borrow()
            .config
            .limits
            .max_endpoints_per_connection;
        if self.endpoints.len() >= max {
            return self.fail(
                ErrorCode::LimitReached,
                req,
                format!("this connection already has {max} endpoints"),
            );
        }
        let declared = self
            .state
            .borrow_mut()
            .endpoints
            .declare(&name, kind, self.id);
        if let Err(e) = declared {
            let code = match e {
                tagwire_core::endpoint::EndpointError::Duplicate { .. } => {
                    ErrorCode::DuplicateEndpoint
                }
                tagwire_core::endpoint::EndpointError::TableFull { .. } => ErrorCode::LimitReached,
                _ => ErrorCode::BadRequest,
            };
            return self.fail(code, req, e.to_string());
        }
        tracing::debug!(conn = self.id, endpoint = %name, ?kind, "endpoint declared");
        let name: Rc<str> = name.into();
        let filters = {
            let mut st = self.state.borrow_mut();
            let filters = Rc::new(RefCell::new(FilterList::new(&st.filters.limits)));
            if kind == EndpointKind::Publisher {
                st.sources.insert(name.clone(), filters.clone());
            }
            filters
        };
        self.endpoints.insert(
            id,
            Endpoint {
                name,
                kind,
                filters,
            },
        );
        self.ack(req)
    }

    fn subscribe(
        &mut self,
        req: u32,
        sub: u32,
        endpoint: u32,
        pattern: &str,
        qos: &[(String, String)],
    ) -> Next {
        let endpoint_name = match self.endpoints.get(&endpoint) {
            Some(e) if e.kind == EndpointKind::Subscriber => e.name.clone(),
            Some(e) => {
                return self.fail(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("endpoint {:?} is a publisher, not a subscriber", e.name),
                )
            }
            None => {
                return self.fail(
                    ErrorCode::UnknownEndpoint,
                    req,
                    format!("no endpoint with id {endpoint} on this connection"),
                )
            }
        };
        if self.subs.contains_key(&sub) {
            return self.fail(
                ErrorCode::DuplicateSubscription,
                req,
                format!("subscription id {sub} is already used"),
            );
        }
        let parsed = match Pattern::parse(pattern) {
            Ok(p) => p,
            Err(e) => return self.fail(ErrorCode::InvalidPattern, req, e.to_string()),
        };
        let (filter_props, qos): (Vec<_>, Vec<_>) =
            qos.iter().partition(|(k, _)| k == "filter" || k == "map");
        let compiled = match self.compile_filters(&filter_props) {
            Ok(c) => c,
            Err(message) => return self.fail(ErrorCode::InvalidFilter, req, message),
        };
        let channel_qos = match ChannelQos::default()
            .apply(qos.iter().map(|(k, v)| (k.as_str(), v.as_str())), |_, _| {
                Ok(false)
            }) {
            Ok(q) => q,
            Err(e) => return self.fail(ErrorCode::BadRequest, req, e.to_string()),
        };
        let mut st = self.state.borrow_mut();
        let limits = &st.config.limits;
        if self.subs.len() >= limits.max_subscriptions_per_connection
            || st.routes.len() >= limits.max_subscriptions
        {
            let msg = format!(
                "subscription limit reached ({} per connection, {} in all)",
                limits.max_subscriptions_per_connection, limits.max_subscriptions
            );
            drop(st);
            return self.fail(ErrorCode::LimitReached, req, msg);
        }
        let queue = BoundedQueue::with_byte_limit(
            channel_qos.max_queue_length,
            limits.max_queue_bytes,
            channel_qos.discard,
        );
        let channel = Rc::new(Channel::new(
            sub,
            endpoint_name.clone(),
            pattern.to_owned(),
            queue,
            self.outbox.clone(),
        ));
        let global = (self.id << 32) | sub as u64;
        let mut filters = Vec::new();
        let mut mapping = None;
        let mut records = Vec::new();
        for (kind, text, f) in compiled {
            let id = st.filters.next_id();
            match f {
                Compiled::Filter(f) => filters.push((id, f)),
                Compiled::Mapping(m) => mapping = Some((id, m)),
            }
            records.push((id, kind, text));
        }
        let added =
            st.routes
                .add_channel(global, self.id, parsed, channel.clone(), filters, mapping);
        if let Err(e) = added {
            drop(st);
            return self.fail(ErrorCode::InvalidFilter, req, e.to_string());
        }
        let interfilter = op_name(st.routes.op(self.id));
        for (id, kind, text) in records {
            st.filters.records.insert(
                id,
                FilterRecord {
                    info: FilterInfo {
                        id,
                        endpoint: endpoint_name.to_string(),
                        level: FilterLevel::Channel,
                        kind: kind.to_owned(),
                        text,
                        interfilter: interfilter.to_owned(),
                    },
                    connection: self.id,
                    channels: vec![global],
                },
            );
        }
        st.channels.insert(global, channel);
        drop(st);
        self.subs.insert(sub, global);
        self.ack(req)
    }

    /// The hot path: check an event, then hand it (by reference) to every
    /// matching channel.
    fn publish(&mut self, body: Bytes) -> Next {
        if body.len() < 4 {
            return self.fail(
                ErrorCode::Malformed,
                0,
                "bad Publish frame: truncated endpoint id".into(),
            );
        }
        let id = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        let event = body.slice(4..);
        let ev = match EventRef::parse(&event) {
            Ok(ev) => ev,
            Err(e) => return self.fail(ErrorCode::Malformed, 0, format!("bad Publish frame: {e}")),
        };
        let (publisher, source) = match self.endpoints.get(&id) {
            Some(e) if e.kind == EndpointKind::Publisher => (&e.name, &e.filters),
            _ => return self.fail(ErrorCode::UnknownEndpoint, 0, format!("publish on endpoint id {id}, which this connection has not declared as a publisher")),
        };
        if ev.publisher != &**publisher {
            return self.fail(
                ErrorCode::PublisherMismatch,
                0,
                format!(
                    "event names publisher {:?} but was sent on endpoint {:?}",
                    ev.publisher, publisher
                ),
            );
        }
        if let Err(e) = validate_tag(ev.tag) {
            return self.fail(ErrorCode::InvalidTag, 0, e.to_string());
        }
        let mut st = self.state.borrow_mut();
        let deadline = deadline(&ev);
        if expired(deadline) {
            st.expired += 1;
            return Next::Continue;
        }
        let accepted = {
            let f = source.borrow();
            f.is_empty() || f.any_matches(&ev)
        };
        if !accepted {
            st.filtered_at_source += 1;
            return Next::Continue;
        }
        st.note_publish(ev.tag, ev.publisher);
        if let Some(start) = ev.start_time_ns.filter(|s| *s > now_ns()) {
            // Held until its start time; a copy, so the read buffer is not pinned.
            let held = Bytes::copy_from_slice(&event);
            let deferred = st.deferred.push(start, held, event.len());
            drop(st);
            return match deferred {
                Ok(()) => {
                    self.state.borrow().deferred_wake.notify_one();
                    Next::Continue
                }
                Err(e) => self.fail(
                    ErrorCode::LimitReached,
                    0,
                    format!("event on {} refused: {e}", ev.tag),
                ),
            };
        }
        let reject = deliver(&mut st, &event, &ev, deadline);
        drop(st);
        match reject {
            Some(who) => self.fail(
                ErrorCode::QueueFull,
                0,
                format!(
                    "event on {} rejected: queue full at subscriber {}",
                    ev.tag,
                    who.join(", ")
                ),
            ),
            None => Next::Continue,
        }
    }

    fn admin(&mut self, req: u32, body: &str, max_frame: u32) -> Next {
        let result = crate::admin::handle(&mut self.state.borrow_mut(), body, max_frame as usize);
        match result {
            Ok(Reply::Now(body)) => self.reply(Frame::AdminReply { req, body }),
            Ok(Reply::WhenSettled(body)) => {
                self.state
                    .borrow_mut()
                    .reply_when_settled(self.outbox.clone(), Frame::AdminReply { req, body });
                Next::Continue
            }
            Err((code, message)) => self.fail(code, req, message),
        }
    }

    /// Answers `Ok` unless the request id is 0 (fire-and-forget requests).
    fn ack(&self, req: u32) -> Next {
        if req == 0 {
            Next::Continue
        } else {
            self.reply(Frame::Ok { req })
        }
    }

    fn drop_channel(&self, global: u64) {
        let mut st = self.state.borrow_mut();
        st.routes.remove_channel(global);
        st.channels.remove(&global);
        st.filters.forget_channel(global);
    }

    /// Compiles a subscription's `filter` and `map` properties; the error
    /// names the property and says where the text is wrong.
    fn compile_filters(
        &self,
        props: &[&(String, String)],
    ) -> Result<Vec<(&'static str, String, Compiled)>, String> {
        let st = self.state.borrow();
        let mut out = Vec::new();
        let mut maps = 0;
        for (k, text) in props {
            let compiled = if k == "map" {
                maps += 1;
                if maps > 1 {
                    return Err("at most one `map` property per subscription".into());
                }
                st.filters.compile_mapping(text).map(Compiled::Mapping)
            } else {
                st.filters.compile(text).map(Compiled::Filter)
            };
            match compiled {
                Ok(c) => out.push((if k == "map" { "map" } else { "filter" }, text.clone(), c)),
                Err(e) => return Err(format!("invalid {k} {text:?}: {e}")),
            }
        }
        Ok(out)
    }

    /// Forgets this connection's subscriptions and endpoints. Its channels
    /// stop receiving at once (O(1)); the lane's housekeeping task removes
    /// them, and their filters, in slices.
    fn cleanup(&mut self) {
        let mut st = self.state.borrow_mut();
        st.routes.retire_session(self.id);
        st.housekeeping.notify_one();
        self.subs.clear();
        st.filters.forget_connection(self.id);
        for (_, e) in self.endpoints.drain() {
            st.endpoints.remove(&e.name);
            if st.sources.remove(&e.name).is_some() {
                st.filters.forget_publisher(&e.name);
            }
        }
        st.connections.remove(&self.id);
    }
}
