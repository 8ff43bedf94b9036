//! iceoryx2's side of the same-host ping-pong ([`crate::shm_pingpong`]).
//!
//! Two publish-subscribe services of `[u8]` slices (`ipc::Service`: shared
//! memory between processes), `RENDEZVOUS/a2b` and `RENDEZVOUS/b2a`, set up
//! as iceoryx2's own publish-subscribe benchmark sets them (history 0, a
//! subscriber buffer of 1 with safe overflow, `initial_max_slice_len` =
//! the payload size). A message is `loan_slice_uninit` + tag + `send`; a
//! receive is `Subscriber::receive`. In blocking mode each direction also
//! has an event service: the sender calls `Notifier::notify` after `send`,
//! the receiver waits on its `Listener` whenever `receive` finds nothing —
//! iceoryx2's documented way to block on a publish-subscribe service.

use std::time::{Duration, Instant};

use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::*;
use iceoryx2::service::port_factory::{event, publish_subscribe};

use crate::measure::RttRecorder;
use crate::shm_pingpong::{
    check_payload, run_ping, run_pong, BusyWait, PingPongEndpoint, PingPongParams, PongProcess,
    WaitMode, ATTACH_TIMEOUT,
};
use crate::BenchError;

const NAME: &str = "iceoryx2";

type PubSubService = publish_subscribe::PortFactory<ipc::Service, [u8], ()>;
type EventService = event::PortFactory<ipc::Service>;

fn ice<E: std::fmt::Debug>(context: &'static str) -> impl FnOnce(E) -> BenchError {
    move |e| BenchError::Iceoryx2 {
        context,
        message: format!("{e:?}"),
    }
}

/// One side: a publisher to the peer, a subscriber from it, and in blocking
/// mode a notifier and a listener beside them.
pub struct IceoryxEndpoint {
    publisher: Publisher<ipc::Service, [u8], ()>,
    subscriber: Subscriber<ipc::Service, [u8], ()>,
    notifier: Option<Notifier<ipc::Service>>,
    listener: Option<Listener<ipc::Service>>,
    params: PingPongParams,
    // The services stay open as long as the ports (and the node).
    out_service: PubSubService,
    in_service: PubSubService,
    events: Option<(EventService, EventService)>,
    _node: Node<ipc::Service>,
}

fn open_pubsub(node: &Node<ipc::Service>, name: &str) -> Result<PubSubService, BenchError> {
    let name = ServiceName::new(name).map_err(ice("naming the service"))?;
    node.service_builder(&name)
        .publish_subscribe::<[u8]>()
        .max_publishers(1)
        .max_subscribers(1)
        .history_size(0)
        .subscriber_max_buffer_size(1)
        .enable_safe_overflow(true)
        .open_or_create()
        .map_err(ice("opening the publish-subscribe service"))
}

fn open_event(node: &Node<ipc::Service>, name: &str) -> Result<EventService, BenchError> {
    let name = ServiceName::new(name).map_err(ice("naming the event service"))?;
    node.service_builder(&name)
        .event()
        .max_notifiers(1)
        .max_listeners(1)
        .open_or_create()
        .map_err(ice("opening the event service"))
}

impl IceoryxEndpoint {
    /// Opens (or creates) the services of `rendezvous` and this side's
    /// ports; the ping side sends on `a2b`, the pong side on `b2a`.
    pub fn open(rendezvous: &str, ping: bool, params: PingPongParams) -> Result<Self, BenchError> {
        let node = NodeBuilder::new()
            .signal_handling_mode(SignalHandlingMode::Disabled)
            .create::<ipc::Service>()
            .map_err(ice("creating the node"))?;
        let (out_name, in_name) = if ping { ("a2b", "b2a") } else { ("b2a", "a2b") };
        let out = open_pubsub(&node, &format!("{rendezvous}/{out_name}"))?;
        let inp = open_pubsub(&node, &format!("{rendezvous}/{in_name}"))?;
        let publisher = out
            .publisher_builder()
            .initial_max_slice_len(params.size)
            .create()
            .map_err(ice("creating the publisher"))?;
        let subscriber = inp
            .subscriber_builder()
            .create()
            .map_err(ice("creating the subscriber"))?;
        let (events, notifier, listener) = if params.wait == WaitMode::Blocking {
            let out_ev = open_event(&node, &format!("{rendezvous}/{out_name}.event"))?;
            let in_ev = open_event(&node, &format!("{rendezvous}/{in_name}.event"))?;
            let notifier = out_ev
                .notifier_builder()
                .create()
                .map_err(ice("creating the notifier"))?;
            let listener = in_ev
                .listener_builder()
                .create()
                .map_err(ice("creating the listener"))?;
            (Some((out_ev, in_ev)), Some(notifier), Some(listener))
        } else {
            (None, None, None)
        };
        Ok(IceoryxEndpoint {
            publisher,
            subscriber,
            notifier,
            listener,
            params,
            out_service: out,
            in_service: inp,
            events,
            _node: node,
        })
    }

    /// True once the peer's ports are there: a subscriber on our outgoing
    /// service and a publisher on our incoming one (and, in blocking mode,
    /// a listener for our notifications).
    fn peer_attached(&self) -> bool {
        let pubsub = self.out_service.dynamic_config().number_of_subscribers() == 1
            && self.in_service.dynamic_config().number_of_publishers() == 1;
        let ev = match &self.events {
            Some((out_ev, in_ev)) => {
                out_ev.dynamic_config().number_of_listeners() == 1
                    && in_ev.dynamic_config().number_of_notifiers() == 1
            }
            None => true,
        };
        pubsub && ev
    }

    /// Waits until the peer's ports are there (checking `alive` between
    /// looks), so that no message goes to a subscriber not yet connected.
    pub fn wait_for_peer(
        &self,
        mut alive: impl FnMut() -> Result<(), BenchError>,
    ) -> Result<(), BenchError> {
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        while !self.peer_attached() {
            alive()?;
            if Instant::now() >= deadline {
                return Err(BenchError::Worker(
                    "iceoryx2: the peer's ports never appeared".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Waits (bounded) until the peer has closed its publisher, so that the
    /// last message is read before its sender's memory goes away.
    pub fn wait_for_peer_gone(&self) {
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        while self.in_service.dynamic_config().number_of_publishers() > 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl PingPongEndpoint for IceoryxEndpoint {
    fn send(&mut self, seq: u64) -> Result<(), BenchError> {
        let mut sample = self
            .publisher
            .loan_slice_uninit(self.params.size)
            .map_err(ice("loaning a sample"))?;
        let payload = sample.payload_mut();
        let n = payload.len();
        let tag = seq.to_le_bytes();
        for (dst, src) in payload[..8].iter_mut().zip(tag) {
            dst.write(src);
        }
        for (dst, src) in payload[n - 8..].iter_mut().zip(tag) {
            dst.write(src);
        }
        // SAFETY: the slice lies in iceoryx2's data segment, a shared-memory
        // mapping whose pages the kernel zero-fills and which afterwards only
        // holds bytes that earlier samples wrote, so every byte has a value;
        // the bytes the receiver reads (first and last 8) were written just
        // above. Not filling the rest is the point of a zero-copy loan, and
        // what iceoryx2's own publish-subscribe benchmark does.
        let sample = unsafe { sample.assume_init() };
        sample.send().map_err(ice("sending a sample"))?;
        if let Some(notifier) = &self.notifier {
            notifier.notify().map_err(ice("notifying the listener"))?;
        }
        Ok(())
    }

    fn recv(&mut self, seq: u64) -> Result<bool, BenchError> {
        let mut idle = BusyWait::new(self.params.wait);
        loop {
            if let Some(sample) = self
                .subscriber
                .receive()
                .map_err(ice("receiving a sample"))?
            {
                check_payload(NAME, sample.payload(), self.params.size, seq)?;
                return Ok(true);
            }
            match &self.listener {
                Some(listener) => {
                    let left = idle.remaining();
                    if left.is_zero() {
                        return Ok(false);
                    }
                    listener
                        .timed_wait(|_| {}, left)
                        .map_err(ice("waiting on the listener"))?;
                }
                None => {
                    if !idle.pause() {
                        return Ok(false);
                    }
                }
            }
        }
    }
}

/// Ping side: opens the services, starts the pong, measures.
pub fn ping(
    params: PingPongParams,
    pong_args: impl Fn(&str) -> Vec<String>,
    pong_cpu: Option<&str>,
) -> Result<RttRecorder, BenchError> {
    set_log_level(LogLevel::Error);
    let rendezvous = crate::shm_pingpong::rendezvous_name();
    let mut ep = IceoryxEndpoint::open(&rendezvous, true, params)?;
    let mut pong = PongProcess::spawn(&pong_args(&rendezvous), pong_cpu)?;
    ep.wait_for_peer(|| pong.check_alive())?;
    let rtt = run_ping(NAME, &mut ep, params)?;
    drop(ep);
    pong.finish()?;
    Ok(rtt)
}

/// Pong side: opens the ping's services and answers.
pub fn pong(params: PingPongParams, rendezvous: &str) -> Result<(), BenchError> {
    set_log_level(LogLevel::Error);
    let mut ep = IceoryxEndpoint::open(rendezvous, false, params)?;
    ep.wait_for_peer(|| Ok(()))?;
    run_pong(NAME, &mut ep, params)?;
    ep.wait_for_peer_gone();
    Ok(())
}
