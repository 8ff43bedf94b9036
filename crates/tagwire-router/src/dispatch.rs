//! Handing an accepted event to the channels that get it, now or, for an
//! event with a future start time, when that time comes.

use std::sync::Arc;

use bytes::Bytes;
use std::time::Duration;

use tagwire_proto::EventRef;

use crate::channel::{EventMeta, Offer, Outgoing};
use crate::filters::rewrite;
use crate::state::State;
use crate::sync::Locked;
use crate::timing::{deadline, expired, now_ns};

/// Where an event comes from, for the links it may go on.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Route<'a> {
    /// The daemon it was published at (0: this one).
    pub origin: u64,
    /// Links it has crossed.
    pub hops: u8,
    /// The neighbour it came from (never sent back there).
    pub from: Option<u64>,
    /// The band of the connection it arrived on: it crosses links on that
    /// band's connection, so a publisher's band holds end to end (`None`:
    /// the band its priority falls in).
    pub band: Option<&'a str>,
}

/// Offers an event published here to local channels and to the links that
/// lead to interested daemons; see [`deliver_routed`].
pub(crate) fn deliver(
    st: &mut State,
    event: &mut Outgoing,
    ev: &EventRef<'_>,
    deadline: u64,
    band: Option<&str>,
) -> Option<Vec<String>> {
    let route = Route {
        band,
        ..Route::default()
    };
    deliver_routed(st, event, ev, deadline, route).0
}

/// Offers `event` (already checked, with its `deadline`) to every channel
/// its routes give, applying mapping filters, then to the links its origin's
/// tree and the other daemons' interest pick (see [`crate::link::forward`]).
/// A small event read into a shared chunk is copied once, when the first
/// channel queues it (see [`Outgoing`]). Returns the subscribers whose full
/// `reject` queue refused it and should be reported to the publisher, and
/// how many links took it.
pub(crate) fn deliver_routed(
    st: &mut State,
    event: &mut Outgoing,
    ev: &EventRef<'_>,
    deadline: u64,
    route: Route<'_>,
) -> (Option<Vec<String>>, usize) {
    if crate::shm::is_shm(ev) {
        // Only a local publisher's checked event may point into shared
        // memory ([`deliver_shm`]); from anywhere else it is dropped.
        st.shm.counters.stray += 1;
        return (None, 0);
    }
    deliver_with(st, event, None, ev, deadline, route)
}

/// Offers an event whose payload is in a shared-memory region (checked by
/// [`crate::shm::ShmEvent::check`]): channels of same-host subscribers get
/// the reference, everything else (other channels, pull buffers, links) the
/// payload copied out once.
pub(crate) fn deliver_shm(
    st: &mut State,
    event: &mut crate::shm::ShmEvent,
    ev: &EventRef<'_>,
    deadline: u64,
    band: Option<&str>,
) -> Option<Vec<String>> {
    let route = Route {
        band,
        ..Route::default()
    };
    let mut none = Outgoing::owned(Bytes::new());
    deliver_with(st, &mut none, Some(event), ev, deadline, route).0
}

fn deliver_with(
    st: &mut State,
    event: &mut Outgoing,
    mut shm: Option<&mut crate::shm::ShmEvent>,
    ev: &EventRef<'_>,
    deadline: u64,
    route: Route<'_>,
) -> (Option<Vec<String>>, usize) {
    match shm.as_deref_mut() {
        None => crate::history::record(st, event, ev),
        Some(s) if st.history.enabled => {
            if let Some(copy) = s.copied() {
                crate::history::record(st, copy, ev);
            }
        }
        Some(_) => {}
    }
    let mut reject = None;
    let mut expired_by_mapping = 0;
    let meta = EventMeta {
        deadline,
        source_time: ev.source_time_ns,
        priority: ev.priority,
        origin: route.origin,
        hops: route.hops,
        seq: ev.seq,
        publisher: tagwire_core::proxy::publisher_key(ev.publisher),
    };
    let max_control = st.config.limits.max_control_bytes;
    let limits = &st.config.limits;
    // Transformed copies of this event, one per spec (spatial scaling).
    let mut transformed: Vec<(Arc<str>, Result<Bytes, String>)> = Vec::new();
    let shm_table = &mut st.shm;
    st.routes.route(ev, |ch, overrides| {
        let event: &mut Outgoing = match shm.as_deref_mut() {
            None => &mut *event,
            Some(s) => {
                let inline = ch.transform.is_some() || !overrides.is_empty();
                match s.for_channel(shm_table, ch, inline, limits) {
                    Some(e) => e,
                    None => return,
                }
            }
        };
        if let Some(t) = &ch.transform {
            let done = match transformed.iter().find(|(k, _)| **k == *t.spec) {
                Some((_, r)) => r.clone(),
                None => {
                    let r = transform(event.bytes(), t);
                    transformed.push((t.spec.clone(), r.clone()));
                    r
                }
            };
            match done {
                Ok(bytes) => {
                    ch.offer(&mut Outgoing::owned(bytes), &meta);
                }
                Err(why) => ch.transform_failed(&why, max_control),
            }
            return;
        }
        let offer = if overrides.is_empty() {
            ch.offer(event, &meta)
        } else {
            let copy = rewrite(event.bytes(), overrides).and_then(|copy| {
                let m = EventRef::parse(&copy).ok().map(|e| EventMeta::of(&e))?;
                Some((copy, m))
            });
            match copy {
                Some((_, m)) if expired(m.deadline) => {
                    expired_by_mapping += 1;
                    return;
                }
                Some((copy, m)) => ch.offer(&mut Outgoing::owned(copy), &m),
                None => ch.offer(event, &meta),
            }
        };
        if let Offer::Rejected { report: true } = offer {
            reject
                .get_or_insert_with(Vec::new)
                .push(format!("{} ({})", ch.endpoint, ch.pattern));
        }
    });
    st.expired += expired_by_mapping;
    let event = match shm {
        None => event,
        Some(_) if st.fed.links.is_empty() => return (reject, 0),
        Some(s) => match s.copied() {
            Some(copy) => copy,
            None => return (reject, 0),
        },
    };
    let links = crate::link::forward(st, event, ev, &meta, route.from, route.band);
    (reject, links)
}

/// The event with its payload transformed by `t` (re-encoded once).
fn transform(event: &Bytes, t: &crate::channel::ChannelTransform) -> Result<Bytes, String> {
    let mut e = tagwire_proto::Event::decode(event).map_err(|e| e.to_string())?;
    let payload = tagwire_core::proxy::apply_isolated(&*t.plugin, &t.params, &e.payload)?;
    e.payload = Bytes::from(payload);
    let mut out = bytes::BytesMut::with_capacity(e.encoded_len());
    e.encode(&mut out).map_err(|e| e.to_string())?;
    Ok(out.freeze())
}

/// The lane task that delivers deferred events when their start time comes
/// (routing them then, so subscriptions made meanwhile get them too). It
/// sleeps until the earliest start time or until a new event is deferred.
pub(crate) async fn release_deferred(state: Arc<Locked<State>>) {
    let wake = state.borrow().deferred_wake.clone();
    loop {
        let next = {
            let mut st = state.borrow_mut();
            let now = now_ns();
            while let Some(event) = st.deferred.pop_due(now) {
                // Parsed and checked when it was published.
                let Ok(ev) = EventRef::parse(&event) else {
                    continue;
                };
                let d = deadline(&ev);
                if expired(d) {
                    st.expired += 1;
                } else {
                    // A `reject` queue's refusal has nobody to tell by now;
                    // the queue counts it.
                    let _ = deliver(&mut st, &mut Outgoing::owned(event.clone()), &ev, d, None);
                }
            }
            st.deferred.next_due()
        };
        match next {
            Some(due) => {
                let wait = Duration::from_nanos(due.saturating_sub(now_ns()));
                let _ = tokio::time::timeout(wait, wake.notified()).await;
            }
            None => wake.notified().await,
        }
    }
}
