//! Acknowledged delivery to a subscriber (issue 25, `DeliverReliable`/
//! `DeliverAck`) against a model: a daemon's `SendWindow` (the writer holds
//! what it writes, bounded, and stops at the bound), a subscriber's
//! `DeliveryAcks` (batched cumulative acknowledgements) and `Dedupe` (the
//! copies sent again after a reconnect), over a connection that keeps order
//! and is cut at any moment — losing what is in flight both ways — after
//! which the daemon parks its window and queue and sends them again, first,
//! on the next connection. Whatever the interleaving, the subscriber takes
//! every event exactly once, in order, and the window never passes its
//! bound.

use std::collections::VecDeque;

use proptest::prelude::*;
use tagwire_core::reliable::{
    Ack, AckBatching, Dedupe, DeliveryAcks, Seen, SendWindow, WindowFull, WindowLimits,
};

#[derive(Debug, Clone)]
enum Op {
    /// The publisher publishes the next event (into the daemon's queue).
    Publish,
    /// The daemon's writer writes what its window lets it.
    Write,
    /// The next frame in flight reaches the subscriber.
    Arrive,
    /// Time passes (ns): acknowledgements due by time go out.
    Tick(u64),
    /// The next acknowledgement in flight reaches the daemon.
    AckArrives,
    /// The connection is cut: everything in flight is lost; the daemon
    /// parks window + queue; the subscriber reconnects.
    Cut,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Publish),
        3 => Just(Op::Write),
        5 => Just(Op::Arrive),
        1 => (0u64..50).prop_map(Op::Tick),
        3 => Just(Op::AckArrives),
        1 => Just(Op::Cut),
    ]
}

struct Model {
    /// Event numbers (its publisher's sequence numbers, from 1).
    next_event: u64,
    events: u64,
    queue: VecDeque<u64>,
    window: SendWindow<u64>,
    bound: usize,
    every: u64,
    /// Frames on the wire to the subscriber: (delivery seq, event).
    down: VecDeque<(u64, u64)>,
    /// Acknowledgements on the wire to the daemon.
    up: VecDeque<Ack>,
    acks: DeliveryAcks,
    seen: Dedupe,
    taken: Vec<u64>,
    now: u64,
}

impl Model {
    fn new(events: u64, bound: usize, every: u64) -> Self {
        Model {
            next_event: 1,
            events,
            queue: VecDeque::new(),
            window: Self::window(bound),
            bound,
            every,
            down: VecDeque::new(),
            up: VecDeque::new(),
            acks: Self::acks(every),
            seen: Dedupe::new(16),
            taken: Vec::new(),
            now: 0,
        }
    }

    fn window(bound: usize) -> SendWindow<u64> {
        SendWindow::new(
            WindowLimits {
                max_events: bound,
                max_bytes: usize::MAX,
            },
            WindowFull::Block,
        )
    }

    fn acks(every: u64) -> DeliveryAcks {
        DeliveryAcks::new(AckBatching { every, after: 100 })
    }

    fn apply(&mut self, op: &Op) {
        self.now += 1;
        match op {
            Op::Publish => {
                if self.next_event <= self.events {
                    self.queue.push_back(self.next_event);
                    self.next_event += 1;
                }
            }
            Op::Write => {
                while !self.window.is_full() {
                    let Some(e) = self.queue.pop_front() else {
                        break;
                    };
                    let seq = self.window.hold(e, 1, self.now);
                    self.down.push_back((seq, e));
                }
            }
            Op::Arrive => {
                if let Some((seq, e)) = self.down.pop_front() {
                    self.acks
                        .on_frame(seq, self.now)
                        .expect("a connection keeps order");
                    // Source time: the event number (a copy keeps it).
                    if self.seen.check(1, 0, e, e) == Seen::New {
                        self.taken.push(e);
                    }
                    if let Some(a) = self.acks.poll_ack(self.now) {
                        self.up.push_back(a);
                    }
                }
            }
            Op::Tick(d) => {
                self.now += d;
                if let Some(a) = self.acks.poll_ack(self.now) {
                    self.up.push_back(a);
                }
            }
            Op::AckArrives => {
                if let Some(a) = self.up.pop_front() {
                    self.window.on_ack(&a).expect("a sent number");
                }
            }
            Op::Cut => {
                self.down.clear();
                self.up.clear();
                // Parked: the window (in order), then the queue; sent again
                // first on the new connection, numbered anew.
                let mut parked: VecDeque<u64> = self.window.drain().into();
                parked.extend(self.queue.drain(..));
                self.queue = parked;
                self.window = Self::window(self.bound);
                self.acks = Self::acks(self.every);
            }
        }
    }

    /// No more faults: runs until everything is taken and acknowledged.
    fn finish(&mut self) {
        for _ in 0..10 * (self.events as usize + self.bound + 10) {
            self.apply(&Op::Publish);
            self.apply(&Op::Write);
            self.apply(&Op::Arrive);
            self.apply(&Op::Tick(100));
            self.apply(&Op::AckArrives);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cuts_at_any_moment_deliver_each_event_once_in_order_within_the_window(
        events in 1u64..300,
        bound in 1usize..40,
        every in 1u64..20,
        ops in prop::collection::vec(op(), 0..600),
    ) {
        let mut m = Model::new(events, bound, every);
        for op in &ops {
            m.apply(op);
            prop_assert!(m.window.len() <= bound, "window bound held");
        }
        m.finish();
        let expected: Vec<u64> = (1..=events).collect();
        prop_assert_eq!(&m.taken, &expected);
        prop_assert!(m.window.is_empty(), "everything acknowledged");
    }
}
