//! The channel's queue and its outbox's writer together: priorities,
//! expiry, timing, consumer bounds, ownership and memory accounting.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use tagwire_core::qos::QosLayer;
use tagwire_core::queue::{BoundedQueue, DiscardPolicy, OrderPolicy};
use tagwire_proto::DELIVER_PREFIX_LEN;

use super::event::{COPY_BELOW, QUEUED_OVERHEAD};
use super::outbox::Batch;
use super::{Channel, EventMeta, Offer, Outbox, Outgoing, READ_CHUNK};
use crate::budget::MemoryBudget;
use crate::sync::Count;
use crate::timing::{now_ns, NEVER};

const NO_META: EventMeta = EventMeta {
    deadline: NEVER,
    source_time: 0,
    priority: 64,
    origin: 0,
    hops: 0,
    seq: 0,
    publisher: 0,
};

fn channel(budget: &Arc<MemoryBudget>) -> (Arc<Outbox>, Arc<Channel>) {
    let outbox = Arc::new(Outbox::default());
    let queue = BoundedQueue::with_policies(
        1 << 20,
        1 << 30,
        OrderPolicy::Fifo,
        DiscardPolicy::DropOldest,
    );
    let ch = Arc::new(Channel::new(
        1,
        "/sub".into(),
        "/**".into(),
        queue,
        outbox.clone(),
        budget.clone(),
    ));
    (outbox, ch)
}

/// The subscription ids of one batch the writer gathers, in order.
fn gathered_subs(outbox: &Outbox) -> Vec<u32> {
    let mut batch = Batch::default();
    let _ = outbox.gather(&mut batch, 0);
    batch
        .iter()
        .map(|(p, _)| u32::from_le_bytes([p[5], p[6], p[7], p[8]]))
        .collect()
}

#[test]
fn the_writer_serves_a_higher_priority_channel_first_and_follows_a_change() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, low) = channel(&budget);
    let queue = BoundedQueue::with_policies(
        1 << 20,
        1 << 30,
        OrderPolicy::Fifo,
        DiscardPolicy::DropOldest,
    );
    let high = Arc::new(Channel::new(
        2,
        "/sub2".into(),
        "/**".into(),
        queue,
        outbox.clone(),
        budget.clone(),
    ));
    low.set_priority(0);
    high.set_priority(200);
    for ch in [&low, &high] {
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
    }
    let subs = gathered_subs(&outbox);
    assert_eq!(subs, [2, 1], "high (sub 2) before low (sub 1)");
    // Swap the priorities: the next turn follows them.
    low.set_priority(255);
    high.set_priority(0);
    for ch in [&high, &low] {
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
    }
    let subs = gathered_subs(&outbox);
    assert_eq!(subs, [1, 2]);
}

/// What the router test that slept 2.5 s for events to expire in a
/// stalled subscriber's queue checked, with deadlines instead of sleep:
/// an event whose deadline passes while queued is dropped and counted,
/// its neighbours are delivered, and a channel `timeout` tightens the
/// deadline an event brings.
#[test]
fn events_that_expire_while_queued_are_dropped_and_counted_not_delivered() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    let past = EventMeta {
        deadline: 1,
        ..NO_META
    };
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"keep1")), &NO_META);
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"stale")), &past);
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"keep2")), &NO_META);
    // A channel timeout of 1 ns after a source time long past.
    let mut layer = QosLayer::new(tagwire_core::qos::Level::Channel);
    layer = layer
        .with([("timeout", "1ns")], &[])
        .expect("a valid timeout");
    let resolved = tagwire_core::qos::resolve(&[&layer]);
    ch.apply_qos(layer, resolved);
    let old = EventMeta {
        source_time: 1,
        ..NO_META
    };
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"timed")), &old);
    let mut batch = Batch::default();
    let _ = outbox.gather(&mut batch, 0);
    let got: Vec<&[u8]> = batch.iter().map(|(_, b)| b).collect();
    assert_eq!(got, [&b"keep1"[..], b"keep2"]);
    assert_eq!(ch.expired.get(), 2);
    assert_eq!(ch.delivered.get(), 2);
}

fn with_qos(ch: &Channel, props: &[(&str, &str)]) {
    let layer = QosLayer::new(tagwire_core::qos::Level::Channel)
        .with(props.iter().copied(), &[])
        .expect("valid properties");
    let resolved = tagwire_core::qos::resolve(&[&layer]);
    ch.apply_qos(layer, resolved);
}

#[test]
fn a_channel_start_time_or_pacing_holds_its_events_until_then() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    let later = now_ns() + 3_600_000_000_000;
    with_qos(&ch, &[("start_time", &later.to_string())]);
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
    let mut batch = Batch::default();
    let wake = outbox.gather(&mut batch, 0);
    assert!(batch.is_empty(), "nothing before the start time");
    assert_eq!(wake, Some(later), "the writer wakes at the start time");
    // A start time in the past: delivered at once.
    with_qos(&ch, &[("start_time", "1")]);
    ch.not_before.set(1);
    assert_eq!(gathered_subs(&outbox), [1]);
    // Pacing: an event that finds the channel idle waits the interval.
    with_qos(&ch, &[("start_time", "none"), ("pacing_interval", "60s")]);
    let before = now_ns();
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"p")), &NO_META);
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"q")), &NO_META);
    let mut batch = Batch::default();
    let wake = outbox.gather(&mut batch, 0).expect("a wake time");
    assert!(batch.is_empty());
    assert!(wake >= before + 60_000_000_000, "{wake} vs {before}");
    // When the interval is over, both go in one batch.
    ch.not_before.set(1);
    assert_eq!(gathered_subs(&outbox), [1, 1]);
}

#[test]
fn max_events_per_consumer_bounds_all_channels_of_an_endpoint_together() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let consumer = Arc::new(Count::new(0));
    let outbox = Arc::new(Outbox::default());
    let make = |sub| {
        let queue = BoundedQueue::with_policies(
            1 << 20,
            1 << 30,
            OrderPolicy::Fifo,
            DiscardPolicy::DropOldest,
        );
        let ch = Arc::new(
            Channel::new(
                sub,
                "/sub".into(),
                "/**".into(),
                queue,
                outbox.clone(),
                budget.clone(),
            )
            .for_consumer(consumer.clone()),
        );
        with_qos(&ch, &[("max_events_per_consumer", "3")]);
        ch
    };
    let (a, b) = (make(1), make(2));
    for _ in 0..5 {
        for ch in [&a, &b] {
            let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
        }
    }
    assert_eq!(consumer.get(), 3, "three queued across both channels");
    assert_eq!(a.queue.borrow().len() + b.queue.borrow().len(), 3);
    assert_eq!(a.over_consumer.get() + b.over_consumer.get(), 7);
    assert_eq!(gathered_subs(&outbox).len(), 3);
    assert_eq!(consumer.get(), 0, "the writer took them: room again");
    assert_eq!(
        a.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META),
        Offer::Queued
    );
    drop(a);
    assert_eq!(consumer.get(), 0, "a dropped channel gives its count back");
}

#[test]
fn a_dropped_channel_frees_its_queue_although_its_outbox_lists_it() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
    for _ in 0..10 {
        let slice = chunk.slice(0..40_000);
        let mut ev = Outgoing::in_chunk(&slice, 1);
        assert_eq!(ch.offer(&mut ev, &NO_META), Offer::Queued);
    }
    assert!(budget.used() > 0);
    assert_eq!(
        outbox
            .ready
            .borrow()
            .iter()
            .map(VecDeque::len)
            .sum::<usize>(),
        1,
        "scheduled on its outbox"
    );
    let weak = Arc::downgrade(&ch);
    // The router's tables let go of the channel (its subscriber left).
    drop(ch);
    assert!(
        weak.upgrade().is_none(),
        "the outbox does not keep it alive"
    );
    assert_eq!(budget.used(), 0, "its queued bytes are given back");
    // The outbox's (dead) entry is skipped by the writer.
    let mut batch = Batch::default();
    let _ = outbox.gather(&mut batch, 0);
    assert!(batch.is_empty());
    assert_eq!(Arc::strong_count(&outbox), 1);
}

#[test]
fn a_small_event_to_a_queue_that_keeps_up_stays_a_slice_and_holds_one_chunk() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, a) = channel(&budget);
    let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
    for i in 0..10 {
        let slice = chunk.slice(i * 44..(i + 1) * 44);
        let mut ev = Outgoing::in_chunk(&slice, 1);
        a.offer(&mut ev, &NO_META);
    }
    let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
    {
        let q = a.queue.borrow();
        let first = &q.iter().next().expect("queued").event;
        assert_eq!(first.as_ptr(), chunk.as_ptr(), "a slice, not a copy");
        assert_eq!(q.bytes(), 10 * per_event);
    }
    assert_eq!(budget.used(), 10 * per_event + READ_CHUNK, "plus the chunk");
    let mut batch = Batch::default();
    let _ = outbox.gather(&mut batch, 0);
    assert_eq!(batch.len(), 10);
    assert_eq!(budget.used(), 0, "an empty queue pins nothing");
}

#[test]
fn a_small_event_to_queues_that_are_behind_is_copied_once_for_all_of_them() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (_o1, a) = channel(&budget);
    let (_o2, b) = channel(&budget);
    let old = Bytes::from(vec![1u8; READ_CHUNK]);
    // Both hold an event of an earlier read (epoch 1): they are behind.
    a.offer(&mut Outgoing::in_chunk(&old.slice(0..44), 1), &NO_META);
    b.offer(&mut Outgoing::in_chunk(&old.slice(0..44), 1), &NO_META);
    let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
    let range = chunk.as_ptr_range();
    let slice = chunk.slice(100..144);
    let mut ev = Outgoing::in_chunk(&slice, 2);
    a.offer(&mut ev, &NO_META);
    b.offer(&mut ev, &NO_META);
    let qa = a.queue.borrow();
    let qb = b.queue.borrow();
    let ea = &qa.iter().nth(1).expect("queued").event;
    let eb = &qb.iter().nth(1).expect("queued").event;
    assert!(
        !range.contains(&ea.as_ptr()),
        "not a slice of the new chunk"
    );
    assert_eq!(ea.as_ptr(), eb.as_ptr(), "one copy shared by both channels");
    let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
    assert_eq!(qa.bytes(), 2 * per_event);
    assert_eq!(budget.used(), 2 * (2 * per_event + READ_CHUNK));
}

#[test]
fn a_large_event_stays_in_its_chunk_and_is_counted_at_the_chunk() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (_o, a) = channel(&budget);
    let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
    let slice = chunk.slice(0..COPY_BELOW);
    let mut ev = Outgoing::in_chunk(&slice, 1);
    a.offer(&mut ev, &NO_META);
    let q = a.queue.borrow();
    assert_eq!(
        q.iter().next().expect("queued").event.as_ptr(),
        chunk.as_ptr()
    );
    assert_eq!(q.bytes(), READ_CHUNK + QUEUED_OVERHEAD);
}

#[test]
fn queues_stop_at_the_memory_budget_with_their_discard_policy() {
    let per_event = 1000 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
    let budget = Arc::new(MemoryBudget::new(3 * per_event));
    let (_o1, a) = channel(&budget);
    let (_o2, b) = channel(&budget);
    let ev = || Outgoing::owned(Bytes::from(vec![1u8; 1000]));
    for _ in 0..3 {
        assert_eq!(a.offer(&mut ev(), &NO_META), Offer::Queued);
    }
    // b has nothing to drop: the event is dropped and counted.
    assert_eq!(b.offer(&mut ev(), &NO_META), Offer::Dropped);
    // a (drop_oldest) makes room from its own queue.
    assert_eq!(a.offer(&mut ev(), &NO_META), Offer::Queued);
    assert_eq!(a.queue.borrow().dropped(), 1);
    assert_eq!(budget.used(), 3 * per_event);
    assert_eq!(budget.discards(), 2);
}

#[test]
fn a_staged_batch_queues_each_channels_events_in_order_with_exact_budget() {
    use super::Staging;
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (_o1, fresh) = channel(&budget);
    let (_o2, behind) = channel(&budget);
    // `behind` holds an event of an earlier read (epoch 1).
    let old = Bytes::from(vec![1u8; READ_CHUNK]);
    behind.offer(&mut Outgoing::in_chunk(&old.slice(0..44), 1), &NO_META);
    let chunk = Bytes::from((0..=255u8).cycle().take(READ_CHUNK).collect::<Vec<u8>>());
    let mut stage = Staging::default();
    for i in 0..10usize {
        let slice = chunk.slice(i * 44..(i + 1) * 44);
        let mut ev = Outgoing::in_chunk(&slice, 2);
        stage.offer(&fresh, &mut ev, &NO_META);
        stage.offer(&behind, &mut ev, &NO_META);
    }
    assert_eq!(stage.len(), 20);
    assert_eq!(
        fresh.queue.borrow().len(),
        0,
        "nothing queued before the flush"
    );
    assert_eq!(stage.flush(), None);
    assert_eq!(stage.len(), 0);
    let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
    {
        let q = fresh.queue.borrow();
        assert_eq!(q.len(), 10);
        for (i, item) in q.iter().enumerate() {
            assert_eq!(&item.event[..], &chunk[i * 44..(i + 1) * 44], "in order");
            assert_eq!(item.event.as_ptr(), chunk[i * 44..].as_ptr(), "a slice");
        }
        let q = behind.queue.borrow();
        assert_eq!(q.len(), 11);
        for (i, item) in q.iter().skip(1).enumerate() {
            assert_eq!(&item.event[..], &chunk[i * 44..(i + 1) * 44], "in order");
            assert!(
                !chunk.as_ptr_range().contains(&item.event.as_ptr()),
                "a copy"
            );
        }
    }
    // Each queue's events, plus the chunk each pins (epoch 2 and epoch 1).
    assert_eq!(budget.used(), 21 * per_event + 2 * READ_CHUNK);
    let mut batch = Batch::default();
    let _ = _o1.gather(&mut batch, 0);
    let _ = _o2.gather(&mut batch, 0);
    assert_eq!(batch.len(), 21);
    assert_eq!(budget.used(), 0, "empty queues pin nothing");
}

#[test]
fn a_handed_over_event_goes_to_its_last_item_without_a_reference_of_its_own() {
    use super::Staging;
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (o1, fresh) = channel(&budget);
    let (o2, behind) = channel(&budget);
    // `behind` holds an event of an earlier read (epoch 1): it gets copies.
    let old = Bytes::from(vec![1u8; READ_CHUNK]);
    behind.offer(&mut Outgoing::in_chunk(&old.slice(0..44), 1), &NO_META);
    let chunk = Bytes::from((0..=255u8).cycle().take(READ_CHUNK).collect::<Vec<u8>>());
    let mut stage = Staging::default();
    // One channel: the caller's bytes themselves (taken from it).
    let mut one = chunk.slice(0..44);
    let mut ev = Outgoing::in_chunk(&one, 2);
    ev.hand_over();
    stage.offer(&fresh, &mut ev, &NO_META);
    stage.hand_over(ev.into_owned(), &mut one);
    assert!(one.is_empty(), "handed over");
    // Fresh, then behind (which copies): fresh keeps a reference to the
    // slice, behind gets the copy; the caller keeps its bytes.
    let mut two = chunk.slice(44..88);
    let mut ev = Outgoing::in_chunk(&two, 2);
    ev.hand_over();
    stage.offer(&fresh, &mut ev, &NO_META);
    stage.offer(&behind, &mut ev, &NO_META);
    stage.hand_over(ev.into_owned(), &mut two);
    assert_eq!(&two[..], &chunk[44..88], "still the caller's");
    // Behind first: the copy serves both.
    let mut three = chunk.slice(88..132);
    let mut ev = Outgoing::in_chunk(&three, 2);
    ev.hand_over();
    stage.offer(&behind, &mut ev, &NO_META);
    stage.offer(&fresh, &mut ev, &NO_META);
    stage.hand_over(ev.into_owned(), &mut three);
    assert_eq!(&three[..], &chunk[88..132], "still the caller's");
    // Another event staged between (a channel's transformed copy): the
    // handed-over event's item still gets the caller's bytes.
    let mut four = chunk.slice(176..220);
    let mut ev = Outgoing::in_chunk(&four, 2);
    ev.hand_over();
    stage.offer(&fresh, &mut ev, &NO_META);
    stage.offer(
        &behind,
        &mut Outgoing::owned(Bytes::from(vec![5u8; 44])),
        &NO_META,
    );
    stage.hand_over(ev.into_owned(), &mut four);
    assert!(four.is_empty(), "handed over");
    // No channel took it: nothing is taken from the caller.
    let mut none = chunk.slice(132..176);
    let mut ev = Outgoing::in_chunk(&none, 2);
    ev.hand_over();
    stage.hand_over(ev.into_owned(), &mut none);
    assert_eq!(none.len(), 44);
    assert_eq!(stage.len(), 7);
    assert_eq!(stage.flush(), None);
    {
        let q = fresh.queue.borrow();
        let events: Vec<&Bytes> = q.iter().map(|item| &item.event).collect();
        assert_eq!(events.len(), 4);
        for (i, e) in events.iter().take(3).enumerate() {
            assert_eq!(&e[..], &chunk[i * 44..(i + 1) * 44], "in order, whole");
        }
        assert_eq!(&events[3][..], &chunk[176..220]);
        assert_eq!(events[0].as_ptr(), chunk[..].as_ptr(), "the slice itself");
        assert_eq!(events[1].as_ptr(), chunk[44..].as_ptr(), "a slice");
        assert!(
            !chunk.as_ptr_range().contains(&events[2].as_ptr()),
            "the copy"
        );
        assert_eq!(
            events[3].as_ptr(),
            chunk[176..].as_ptr(),
            "the slice itself"
        );
        let q = behind.queue.borrow();
        let events: Vec<&Bytes> = q.iter().skip(1).map(|item| &item.event).collect();
        assert_eq!(events.len(), 3);
        assert_eq!(&events[0][..], &chunk[44..88]);
        assert_eq!(&events[1][..], &chunk[88..132]);
        assert_eq!(&events[2][..], &[5u8; 44][..], "the other event's");
        for e in &events {
            assert!(!chunk.as_ptr_range().contains(&e.as_ptr()), "a copy");
        }
    }
    // Budget as for events staged the usual way: 7 events besides the one
    // `behind` held, and the chunks `fresh` (epoch 2) and `behind` (epoch
    // 1) pin.
    let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
    assert_eq!(budget.used(), 8 * per_event + 2 * READ_CHUNK);
    let mut batch = Batch::default();
    let _ = o1.gather(&mut batch, 0);
    let _ = o2.gather(&mut batch, 0);
    assert_eq!(batch.len(), 8);
    assert_eq!(budget.used(), 0);
    // A frame read into a buffer of its own, to one channel: the queued
    // event is the only reference to it (none taken and left behind).
    let mut own = Bytes::from(vec![9u8; 44]);
    let mut ev = Outgoing::own_buffer(&own);
    ev.hand_over();
    stage.offer(&fresh, &mut ev, &NO_META);
    stage.hand_over(ev.into_owned(), &mut own);
    assert_eq!(stage.flush(), None);
    let q = fresh.queue.borrow();
    let queued = &q.iter().next().expect("queued").event;
    assert_eq!(&queued[..], &[9u8; 44][..]);
    assert!(queued.is_unique(), "the caller's reference, moved");
}

#[test]
fn a_staged_slice_whose_queue_was_drained_meanwhile_pins_its_chunk_again() {
    use super::Staging;
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    let chunk = Bytes::from(vec![7u8; READ_CHUNK]);
    ch.offer(&mut Outgoing::in_chunk(&chunk.slice(0..44), 3), &NO_META);
    let mut stage = Staging::default();
    stage.offer(
        &ch,
        &mut Outgoing::in_chunk(&chunk.slice(44..88), 3),
        &NO_META,
    );
    // The writer empties the queue (and gives the chunk back) before the flush.
    assert_eq!(gathered_subs(&outbox).len(), 1);
    assert_eq!(budget.used(), 0);
    let _ = stage.flush();
    let per_event = 44 + DELIVER_PREFIX_LEN + QUEUED_OVERHEAD;
    assert_eq!(
        budget.used(),
        per_event + READ_CHUNK,
        "the chunk is held again"
    );
    assert_eq!(
        ch.queue
            .borrow()
            .iter()
            .next()
            .expect("queued")
            .event
            .as_ptr(),
        chunk[44..].as_ptr()
    );
}

#[test]
fn a_staged_batch_to_a_full_reject_queue_is_reported_once_by_the_flush() {
    use super::Staging;
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let outbox = Arc::new(Outbox::default());
    let queue = BoundedQueue::with_policies(2, 1 << 30, OrderPolicy::Fifo, DiscardPolicy::Reject);
    let ch = Arc::new(Channel::new(
        1,
        "/viewer".into(),
        "/cam/**".into(),
        queue,
        outbox,
        budget.clone(),
    ));
    let mut stage = Staging::default();
    for _ in 0..5 {
        stage.offer(
            &ch,
            &mut Outgoing::owned(Bytes::from_static(b"e")),
            &NO_META,
        );
    }
    assert_eq!(stage.flush(), Some(vec!["/viewer (/cam/**)".to_owned()]));
    assert_eq!(ch.queue.borrow().len(), 2, "the first two, then refusals");
    for _ in 0..2 {
        stage.offer(
            &ch,
            &mut Outgoing::owned(Bytes::from_static(b"e")),
            &NO_META,
        );
    }
    assert_eq!(
        stage.flush(),
        None,
        "reported once until the queue accepts again"
    );
}

/// The bodies `outbox` writes now, and when it asks to be woken.
fn gathered_bodies(outbox: &Outbox) -> (Vec<Vec<u8>>, Option<u64>) {
    let mut batch = Batch::default();
    let wake = outbox.gather(&mut batch, 0);
    (batch.iter().map(|(_, b)| b.to_vec()).collect(), wake)
}

fn at(source_time: u64) -> EventMeta {
    EventMeta {
        source_time,
        ..NO_META
    }
}

#[test]
fn a_playout_channel_holds_its_events_until_their_playout_time() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    with_qos(&ch, &[("playout", "tds:60s")]);
    let t = now_ns();
    let before = budget.used();
    for (body, src) in [(&b"a"[..], t), (b"b", t + 1000)] {
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(body)), &at(src));
    }
    assert!(budget.used() > before, "held events count in the budget");
    let (got, wake) = gathered_bodies(&outbox);
    assert!(got.is_empty(), "held for the playout delay");
    let wake = wake.expect("the writer wakes at the first playout time");
    assert!(wake >= t + 60_000_000_000, "{wake} vs {t}");
    let info = ch.time_info().expect("a channel with a playout");
    assert_eq!(info.held, 2);
    // Turning the playout off hands the held events over at once, in order.
    with_qos(&ch, &[("playout", "none")]);
    let (got, _) = gathered_bodies(&outbox);
    assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
    assert!(ch.time_info().is_none());
    assert_eq!(budget.used(), before, "nothing left charged");
}

#[test]
fn a_buffer_channel_releases_by_count_in_source_time_order() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    with_qos(&ch, &[("buffer", "count:3,max_delay:60s")]);
    let t = now_ns();
    for (body, src) in [(&b"c"[..], t + 30), (b"a", t + 10)] {
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(body)), &at(src));
    }
    let (got, wake) = gathered_bodies(&outbox);
    assert!(got.is_empty(), "two of three");
    assert!(wake.expect("max_delay wake") >= t + 60_000_000_000);
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"b")), &at(t + 20));
    let (got, _) = gathered_bodies(&outbox);
    assert_eq!(got, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(ch.time_info().expect("buffered").released, 3);
    // Idle again: unscheduled, and the next event schedules it again.
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"d")), &at(t + 40));
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &at(t + 50));
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"f")), &at(t + 60));
    let (got, _) = gathered_bodies(&outbox);
    assert_eq!(got.len(), 3);
}

#[test]
fn a_late_event_on_a_playout_channel_is_delivered_at_once() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    with_qos(&ch, &[("playout", "tds:60s")]);
    let t = now_ns();
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"anchor")), &at(t));
    // Two minutes more transit than the anchor's: late by far.
    let late = t - 120_000_000_000;
    let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"late")), &at(late));
    let (got, _) = gathered_bodies(&outbox);
    assert_eq!(got, [b"late".to_vec()]);
    assert_eq!(ch.time_info().expect("timed").late, 1);
}

#[test]
fn events_without_a_source_time_are_timed_by_their_arrival() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    with_qos(&ch, &[("playout", "tds:60s")]);
    // A stream anchored by an event stamped a second ago, then events with
    // no source time (0): timed as if stamped on arrival, not as 56 years
    // late.
    let second_ago = now_ns() - 1_000_000_000;
    let _ = ch.offer(
        &mut Outgoing::owned(Bytes::from_static(b"a")),
        &at(second_ago),
    );
    for _ in 0..20 {
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"x")), &NO_META);
    }
    let (got, wake) = gathered_bodies(&outbox);
    assert!(got.is_empty(), "held, not late");
    assert!(wake.is_some());
    let info = ch.time_info().expect("timed");
    assert_eq!((info.held, info.late, info.reanchored), (21, 0, 0));
}

/// An encoded event with source time `src` (the output jitter reads it from
/// the bytes the writer takes).
fn encoded(src: u64) -> Bytes {
    let mut ev = tagwire_proto::Event::new("/t", Bytes::from_static(b"x"));
    ev.header.publisher = "/p".into();
    ev.header.source_time_ns = src;
    let mut out = bytes::BytesMut::new();
    ev.encode(&mut out).expect("a valid event");
    out.freeze()
}

#[test]
fn a_channel_without_time_services_measures_its_input_jitter_at_the_reads_time() {
    use super::Staging;
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (_outbox, ch) = channel(&budget);
    assert_eq!(ch.jitter_info(), None, "no event seen");
    let mut expected = tagwire_core::tds::Jitter::default();
    let mut stage = Staging::default();
    for read in 0..40u64 {
        // One read of an event with no source time (not observed) and two
        // events every ms; every other read 300 µs late. The first event
        // with a source time of each read is observed (the events of a
        // read share its arrival time).
        stage.arrived = 5_000_000_000 + read * 1_000_000 + (read % 2) * 300_000;
        let mut untimed = Outgoing::owned(encoded(0));
        stage.offer(&ch, &mut untimed, &NO_META);
        for k in 0..2u64 {
            let src = 1_000_000_000 + read * 1_000_000 + k * 1000;
            let mut ev = Outgoing::owned(encoded(src));
            stage.offer(&ch, &mut ev, &at(src));
            if k == 0 {
                expected.observe(stage.arrived, src);
            }
        }
        assert_eq!(stage.flush(), None);
    }
    // Events of a read without a known arrival (a deferred release) are
    // not observed.
    let mut other = Staging::default();
    other.offer(&ch, &mut Outgoing::owned(encoded(7)), &at(7));
    let _ = other.flush();
    let info = ch.jitter_info().expect("events with source times seen");
    assert_eq!(info.input_ns, Some(expected.ns()));
    assert!(expected.ns() > 100_000, "{}", expected.ns());
    assert_eq!(info.output_ns, None, "nothing written yet");
}

#[test]
fn the_output_jitter_samples_one_write_batch_in_sixteen_unless_the_batch_reads_the_clock() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    let t = now_ns();
    // Best effort, no deadline: the writer reads no clock for 15 batches
    // of one event, then one for the 16th.
    for i in 0..super::jitter::OUTPUT_SAMPLE {
        let _ = ch.offer(&mut Outgoing::owned(encoded(t + i)), &at(t + i));
        assert_eq!(gathered_bodies(&outbox).0.len(), 1);
        let seen = ch.jitter_info().and_then(|j| j.output_ns);
        if i + 1 < super::jitter::OUTPUT_SAMPLE {
            assert_eq!(seen, None, "batch {i} read no clock for it");
        } else {
            assert!(seen.is_some(), "the 16th batch is the sample");
        }
    }
    // An event that can expire makes the batch read the clock anyway:
    // observed in every batch.
    let (_o, timed) = channel(&budget);
    let meta = EventMeta {
        deadline: t + 3_600_000_000_000,
        ..at(t)
    };
    let _ = timed.offer(&mut Outgoing::owned(encoded(t)), &meta);
    let mut batch = Batch::default();
    let _ = _o.gather(&mut batch, 0);
    assert_eq!(batch.len(), 1);
    assert!(timed.jitter_info().and_then(|j| j.output_ns).is_some());
}

/// The 2 GiB run's dropped subscriber (BENCHMARKS.md, "2 GiB through two
/// cuts"): an event in pieces was one write, so nothing else reached the
/// connection (its idle probe's `Ping` included) until the whole event had
/// gone. Now the writer takes a batch's worth of pieces per turn: another
/// channel's event goes between them, the pieces still arrive in order and
/// whole, and the event stays in the memory budget until its last piece.
#[test]
fn an_event_in_pieces_goes_a_batch_at_a_time_with_other_channels_between() {
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let outbox = Arc::new(Outbox::default());
    let queue = || {
        BoundedQueue::with_policies(
            1 << 20,
            1 << 30,
            OrderPolicy::Fifo,
            DiscardPolicy::DropOldest,
        )
    };
    let piece = 40_000;
    let big = Arc::new(
        Channel::new(
            1,
            "/big".into(),
            "/**".into(),
            queue(),
            outbox.clone(),
            budget.clone(),
        )
        .with_pieces(1_000, piece, 1 << 30),
    );
    let small = Arc::new(Channel::new(
        2,
        "/small".into(),
        "/**".into(),
        queue(),
        outbox.clone(),
        budget.clone(),
    ));
    let event: Vec<u8> = (0..10 * piece).map(|i| (i % 251) as u8).collect();
    let before = budget.used();
    let _ = big.offer(&mut Outgoing::owned(Bytes::from(event.clone())), &NO_META);
    let _ = small.offer(&mut Outgoing::owned(Bytes::from_static(b"x")), &NO_META);
    let (mut pieces, mut batches, mut small_at) = (Vec::new(), 0, None);
    loop {
        let (got, _) = gathered_bodies(&outbox);
        if got.is_empty() {
            break;
        }
        batches += 1;
        for body in got {
            if body == b"x" {
                small_at = Some(pieces.len());
            } else {
                pieces.push(body);
            }
        }
        if pieces.len() < 10 {
            assert!(
                budget.used() >= before + event.len(),
                "the event is held in the budget while pieces are left"
            );
        }
    }
    assert_eq!(pieces.len(), 10, "one body per piece");
    assert_eq!(
        pieces.concat(),
        event,
        "the pieces, in order, are the event"
    );
    assert!(
        batches >= 5,
        "{batches} batches: at most 64 KiB of pieces each"
    );
    let small_at = small_at.expect("the small event was gathered");
    assert!(
        small_at < 10,
        "the other channel's event went before the last piece (after {small_at})"
    );
    assert_eq!(
        budget.used(),
        before,
        "everything written, the budget is free"
    );
    assert_eq!(big.pieced.get(), 1);
}

#[test]
fn a_channel_offered_on_one_thread_and_written_on_another_keeps_the_budget_exact() {
    // A channel of another lane's connection: one thread offers (the
    // publisher's lane), another gathers (the subscriber's writer).
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let (outbox, ch) = channel(&budget);
    const EVENTS: usize = 500_000;
    let writer = {
        let outbox = outbox.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while n < EVENTS {
                let mut batch = Batch::default();
                let _ = outbox.gather(&mut batch, 0);
                n += batch.len();
            }
        })
    };
    for _ in 0..EVENTS {
        let _ = ch.offer(&mut Outgoing::owned(Bytes::from_static(b"e")), &NO_META);
    }
    writer.join().expect("the writer thread");
    assert_eq!(budget.used(), 0, "everything written, nothing held");
}
