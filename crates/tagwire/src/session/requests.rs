//! The session's requests to its router: declaring endpoints, subscribing
//! and unsubscribing, and a request's round trip (sent with the publishes,
//! its reply awaited, bounded by [`REQUEST_TIMEOUT`]).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;

use tagwire_core::connection::{Connection, Reply};
use tagwire_core::reliable::AckBatching;
use tagwire_proto::EndpointKind;

use super::Inner;
use crate::error::{Error, Result};
use crate::options::REQUEST_TIMEOUT;
use crate::sink::Sink;
use crate::sync::lock;

/// How an acknowledged subscription batches its `DeliverAck`s, if its QoS
/// names a `max_queue_length` (the daemon's window for it): one per
/// sixteenth of that queue, 64 to 4,096 events (a large queue asked for
/// throughput; each acknowledgement costs a write here and a read and a
/// turn of its lane in the daemon). `None`: the default (64 events, which
/// is a sixteenth of the daemon's default queue of 1,024). A queue made
/// smaller later by `tagwire admin qos` may leave acknowledgements to the
/// batching's timer (20 ms).
fn ack_batching_for(qos: &[(String, String)]) -> Option<AckBatching> {
    let (_, v) = qos.iter().rev().find(|(k, _)| k == "max_queue_length")?;
    let n: u64 = v.trim().parse().ok()?;
    let every = (n / 16).clamp(AckBatching::default().every, 4096);
    Some(AckBatching {
        every,
        ..AckBatching::default()
    })
}

impl Inner {
    /// Declares an endpoint and waits for the router's answer.
    pub(crate) fn declare_endpoint(&self, kind: EndpointKind, name: &str) -> Result<u32> {
        let (id, reply) = self.request("endpoint declaration", |e| e.declare(kind, name))?;
        // The engine forgets a refused endpoint itself; one whose answer
        // never came is forgotten here (and freed, should the router have it).
        reply
            .and_then(expect_ok)
            .inspect_err(|_| self.undeclare_endpoint(id))?;
        Ok(id)
    }
    /// Subscribes endpoint `endpoint` and waits for the router's answer;
    /// returns the subscription id. The sink is in place before the
    /// `Subscribe` is written, so that no delivery can arrive before it.
    pub(crate) fn add_subscription(
        &self,
        endpoint: u32,
        pattern: &str,
        mut qos: Vec<(String, String)>,
        sink: Arc<Sink>,
    ) -> Result<u32> {
        if self.options.shm != crate::shm::ShmMode::Auto && !qos.iter().any(|(k, _)| k == "shm") {
            // The session's default, unless the subscription says.
            qos.push(("shm".into(), self.options.shm.to_string()));
        }
        let batching = ack_batching_for(&qos);
        let (sub, reply) = self.request("subscription", |e| {
            let (sub, req) = e.subscribe(endpoint, pattern, qos);
            if let Some(b) = batching {
                lock(&self.ack_batching).insert(sub, b);
            }
            lock(&self.sinks).insert(sub, sink);
            self.subs_generation.fetch_add(1, Ordering::Release);
            (sub, req)
        })?;
        reply.and_then(expect_ok).inspect_err(|_| {
            lock(&self.ack_batching).remove(&sub);
            lock(&self.sinks).remove(&sub);
            self.subs_generation.fetch_add(1, Ordering::Release);
            self.control(|e| e.unsubscribe(sub));
        })?;
        Ok(sub)
    }
    /// Drops a subscription and its endpoint without waiting for replies.
    pub(crate) fn remove_subscription(&self, sub: u32) {
        lock(&self.ack_batching).remove(&sub);
        lock(&self.sinks).remove(&sub);
        self.subs_generation.fetch_add(1, Ordering::Release);
        self.control(|e| {
            if let Some(endpoint) = e.subscriptions().get(&sub).map(|s| s.endpoint) {
                e.unsubscribe(sub);
                e.undeclare(endpoint);
            }
        });
    }
    /// Frees an endpoint's name without waiting for the reply.
    pub(crate) fn undeclare_endpoint(&self, id: u32) {
        self.control(|e| e.undeclare(id));
    }
    /// Sends a request made by `make` (which returns its result and the
    /// request id) and waits for its reply. Fails if the request could not
    /// be sent; once it is, returns `make`'s result and the reply, or why
    /// none came ([`Error::Timeout`], [`Error::Disconnected`]).
    pub(crate) fn request<T>(
        &self,
        what: &'static str,
        make: impl FnOnce(&mut Connection) -> (T, u32),
    ) -> Result<(T, Result<Reply>)> {
        if *lock(&self.reader_thread) == Some(std::thread::current().id()) {
            return Err(Error::BadReply(format!(
                "cannot make a {what} from inside a subscription callback (it would wait for itself)"
            )));
        }
        let (t, req, rx) = self.send_request(make)?;
        let reply = match rx.recv_timeout(REQUEST_TIMEOUT) {
            Ok(r) => Ok(r),
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.waiters).remove(&req);
                lock(&self.engine).forget(req);
                Err(Error::Timeout {
                    what,
                    secs: REQUEST_TIMEOUT.as_secs(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(Error::Disconnected),
        };
        Ok((t, reply))
    }
    /// Sends a request and returns, without waiting, where its reply will
    /// come (from any thread, a subscription callback's included).
    pub(crate) fn send_request<T>(
        &self,
        make: impl FnOnce(&mut Connection) -> (T, u32),
    ) -> Result<(T, u32, Receiver<Reply>)> {
        let mut w = self.wait_connected(lock(&self.writer))?;
        let (t, req) = make(&mut lock(&self.engine));
        let (tx, rx) = sync_channel(1);
        lock(&self.waiters).insert(req, tx);
        self.take_control(&mut w);
        self.flush_locked(w)?;
        Ok((t, req, rx))
    }
}

fn expect_ok(r: Reply) -> Result<()> {
    match r {
        Reply::Ok => Ok(()),
        Reply::Err(code, message) => Err(Error::Refused { code, message }),
        Reply::Admin(_) => Err(Error::BadReply("unexpected admin reply".into())),
        Reply::Pulled(_) => Err(Error::BadReply("unexpected pull reply".into())),
    }
}
