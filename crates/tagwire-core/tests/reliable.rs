//! The reliability windows (`tagwire_core::reliable`) against simple models:
//! over a transport that loses, duplicates and reorders frames and acks,
//! every event is delivered exactly once and in order; custody
//! acknowledgements settle each event exactly once, as done or failed; the
//! dedupe window agrees with a set of what was seen; full windows do what
//! their policy says and count it.

use proptest::prelude::*;
use tagwire_core::reliable::{
    Ack, AckRange, Dedupe, Push, RecvWindow, Seen, SendWindow, WindowFull, WindowLimits,
    DEDUPE_WINDOW,
};

#[derive(Debug, Clone)]
enum Op {
    /// The sender takes events into its window and sends what is unsent.
    Pump,
    /// The frame at this index (mod the in-flight count) arrives.
    Deliver(usize),
    /// It is lost.
    Drop(usize),
    /// It is duplicated (stays in flight, and arrives once now).
    Dup(usize),
    /// The ack at this index arrives.
    DeliverAck(usize),
    /// It is lost.
    DropAck(usize),
    /// Time passes by `rto`: unacknowledged frames are sent again.
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Pump),
        4 => any::<usize>().prop_map(Op::Deliver),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Dup),
        3 => any::<usize>().prop_map(Op::DeliverAck),
        1 => any::<usize>().prop_map(Op::DropAck),
        1 => Just(Op::Tick),
    ]
}

const RTO: u64 = 100;

struct Model {
    send: SendWindow<u32>,
    recv: RecvWindow<u32>,
    /// Events not yet offered to the sender.
    next_event: u32,
    events: u32,
    data: Vec<(u64, u32)>,
    acks: Vec<Ack>,
    delivered: Vec<u32>,
    now: u64,
}

impl Model {
    fn new(events: u32, window: usize) -> Self {
        Model {
            send: SendWindow::new(
                WindowLimits {
                    max_events: window,
                    max_bytes: usize::MAX,
                },
                WindowFull::Block,
            ),
            recv: RecvWindow::new(window),
            next_event: 0,
            events,
            data: Vec::new(),
            acks: Vec::new(),
            delivered: Vec::new(),
            now: 0,
        }
    }

    fn pump(&mut self) {
        while self.next_event < self.events {
            match self.send.push(self.next_event, 8) {
                Push::Held { ref evicted, .. } if evicted.is_empty() => self.next_event += 1,
                Push::WouldBlock(_) => break,
                other => panic!("a Block window answered {other:?}"),
            }
        }
        while let Some((seq, e)) = self.send.peek_unsent() {
            self.data.push((seq, *e));
            self.send.mark_sent(seq, self.now);
        }
    }

    fn arrive(&mut self, seq: u64, e: u32) {
        let ready = self.recv.on_frame(seq, e).expect("within the window");
        for (seq, e) in ready {
            self.delivered.push(e);
            self.recv.settle(seq, 0).expect("just delivered");
        }
        if let Some(ack) = self.recv.ack() {
            self.acks.push(ack);
        }
    }

    fn tick(&mut self) {
        self.now += RTO;
        for seq in self.send.poll_retransmit(self.now, RTO, usize::MAX) {
            let e = *self.send.get(seq).expect("held");
            self.data.push((seq, e));
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Pump => self.pump(),
            Op::Deliver(i) if !self.data.is_empty() => {
                let (seq, e) = self.data.remove(i % self.data.len());
                self.arrive(seq, e);
            }
            Op::Drop(i) if !self.data.is_empty() => {
                self.data.remove(i % self.data.len());
            }
            Op::Dup(i) if !self.data.is_empty() => {
                let (seq, e) = self.data[i % self.data.len()];
                self.arrive(seq, e);
            }
            Op::DeliverAck(i) if !self.acks.is_empty() => {
                let ack = self.acks.remove(i % self.acks.len());
                let r = self.send.on_ack(&ack).expect("a valid ack");
                assert!(r.failed.is_empty(), "nothing fails in this model");
            }
            Op::DropAck(i) if !self.acks.is_empty() => {
                self.acks.remove(i % self.acks.len());
            }
            Op::Tick => self.tick(),
            _ => {}
        }
    }

    /// Runs fairly (everything in flight arrives, time passes) until the
    /// sender has nothing left; bounded.
    fn finish(&mut self) {
        for _ in 0..100_000 {
            if self.next_event == self.events && self.send.is_empty() {
                return;
            }
            self.pump();
            while !self.data.is_empty() {
                let (seq, e) = self.data.remove(0);
                self.arrive(seq, e);
            }
            while !self.acks.is_empty() {
                let ack = self.acks.remove(0);
                self.send.on_ack(&ack).expect("a valid ack");
            }
            self.tick();
        }
        panic!("the model did not finish");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any interleaving of loss, duplication and reordering of frames and
    /// acks delivers each event exactly once, in order.
    #[test]
    fn loss_dup_and_reorder_deliver_each_event_once_in_order(
        events in 1u32..200,
        window in 1usize..40,
        ops in prop::collection::vec(op(), 0..400),
    ) {
        let mut m = Model::new(events, window);
        for op in &ops {
            m.apply(op);
            prop_assert!(m.send.len() <= window, "window bound held");
        }
        m.finish();
        let expected: Vec<u32> = (0..events).collect();
        prop_assert_eq!(&m.delivered, &expected);
        prop_assert_eq!(m.send.stats().done, u64::from(events));
        prop_assert_eq!(m.send.bytes(), 0);
    }

    /// With custody (each event waits for acknowledgements downstream,
    /// which come in any order, some failed), the sender releases every
    /// event exactly once: as failed exactly when one of its obligations
    /// failed, else as done.
    #[test]
    fn custody_settles_each_event_once_done_or_failed(
        obligations in prop::collection::vec(prop::collection::vec(any::<bool>(), 0..4), 1..120),
        order in prop::collection::vec(any::<usize>(), 0..600),
        ack_every in 1usize..20,
    ) {
        let n = obligations.len();
        let mut send = SendWindow::new(WindowLimits { max_events: n, max_bytes: usize::MAX }, WindowFull::Reject);
        let mut recv = RecvWindow::new(n);
        // (seq, failed) completions still to come.
        let mut todo: Vec<(u64, bool)> = Vec::new();
        for (i, obl) in obligations.iter().enumerate() {
            let Push::Held { seq, .. } = send.push(i, 1) else { panic!("room for all") };
            send.mark_sent(seq, 0);
            let ready = recv.on_frame(seq, i).expect("in order");
            prop_assert_eq!(ready.len(), 1);
            recv.settle(seq, obl.len() as u32).expect("delivered");
            todo.extend(obl.iter().map(|f| (seq, *f)));
        }
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        let mut k = 0;
        let mut order = order.into_iter();
        while !todo.is_empty() {
            let i = order.next().unwrap_or(0) % todo.len();
            let (seq, f) = todo.swap_remove(i);
            recv.complete(seq, f).expect("pending");
            k += 1;
            if k % ack_every == 0 {
                if let Some(ack) = recv.ack() {
                    let r = send.on_ack(&ack).expect("valid");
                    done.extend(r.done);
                    failed.extend(r.failed);
                }
            }
        }
        // Acks until nothing changes (each carries at most MAX_ACK_RANGES).
        for _ in 0..(2 * n + 2) {
            if let Some(ack) = recv.ack() {
                let r = send.on_ack(&ack).expect("valid");
                done.extend(r.done);
                failed.extend(r.failed);
            }
            if send.is_empty() { break; }
        }
        prop_assert!(send.is_empty(), "everything released");
        let mut want_failed: Vec<usize> = obligations.iter().enumerate().filter(|(_, o)| o.iter().any(|f| *f)).map(|(i, _)| i).collect();
        let mut want_done: Vec<usize> = obligations.iter().enumerate().filter(|(_, o)| !o.iter().any(|f| *f)).map(|(i, _)| i).collect();
        done.sort_unstable();
        failed.sort_unstable();
        want_done.sort_unstable();
        want_failed.sort_unstable();
        prop_assert_eq!(done, want_done);
        prop_assert_eq!(failed, want_failed);
    }

    /// The dedupe window agrees with a model that remembers every event:
    /// new iff never seen, unless older than the window below the highest.
    #[test]
    fn dedupe_agrees_with_a_set_of_what_was_seen(
        events in prop::collection::vec((0u64..3, 0u64..3000), 1..800),
    ) {
        let mut d = Dedupe::new(16);
        let mut seen = std::collections::HashSet::new();
        let mut highest = std::collections::HashMap::new();
        for (key, seq) in events {
            let got = d.check(7, key, seq, seq);
            let h: Option<&u64> = highest.get(&key);
            let want = if h == Some(&seq) {
                Seen::Duplicate
            } else if h.is_some_and(|h| seq + DEDUPE_WINDOW < *h) {
                Seen::TooOld
            } else if seen.contains(&(key, seq)) {
                Seen::Duplicate
            } else {
                Seen::New
            };
            prop_assert_eq!(got, want, "key {} seq {} highest {:?}", key, seq, h);
            if want == Seen::New {
                seen.insert((key, seq));
                let e = highest.entry(key).or_insert(seq);
                *e = (*e).max(seq);
            }
        }
    }
}

#[test]
fn a_full_window_blocks_drops_the_oldest_or_rejects_as_its_policy_says() {
    let limits = WindowLimits {
        max_events: 2,
        max_bytes: 100,
    };
    let mut w = SendWindow::new(limits, WindowFull::Block);
    assert!(matches!(w.push('a', 1), Push::Held { seq: 1, .. }));
    assert!(matches!(w.push('b', 1), Push::Held { seq: 2, .. }));
    assert_eq!(w.push('c', 1), Push::WouldBlock('c'));
    assert_eq!(w.stats().blocked, 1);

    let mut w = SendWindow::new(limits, WindowFull::Reject);
    w.push('a', 1);
    w.push('b', 1);
    assert_eq!(w.push('c', 1), Push::Rejected('c'));
    assert_eq!(w.stats().rejected, 1);
    assert_eq!(w.len(), 2);

    let mut w = SendWindow::new(limits, WindowFull::DropOldest);
    w.push('a', 1);
    w.push('b', 1);
    assert_eq!(
        w.push('c', 1),
        Push::Held {
            seq: 3,
            evicted: vec!['a']
        }
    );
    assert_eq!(w.stats().evicted, 1);
    // The byte bound: a 99-byte event pushes out both small ones.
    assert!(matches!(
        w.push('d', 99),
        Push::Held {
            ref evicted,
            ..
        } if evicted == &['b']
    ));
    assert_eq!((w.len(), w.bytes(), w.stats().evicted), (2, 100, 2));
    // One larger than the rest of the bound pushes out everything else.
    assert!(matches!(
        w.push('e', 100),
        Push::Held {
            ref evicted,
            ..
        } if evicted == &['c', 'd']
    ));
    assert_eq!((w.len(), w.bytes(), w.stats().evicted), (1, 100, 4));
}

#[test]
fn an_ack_of_something_never_sent_is_refused_and_releases_nothing() {
    let mut w = SendWindow::new(WindowLimits::default(), WindowFull::Reject);
    w.push(1, 1);
    w.push(2, 1);
    w.mark_sent(1, 0);
    let e = w
        .on_ack(&Ack {
            done: 2,
            ranges: vec![],
        })
        .unwrap_err();
    assert!(e.to_string().contains("only up to 1 were sent"), "{e}");
    let e = w
        .on_ack(&Ack {
            done: 0,
            ranges: vec![AckRange {
                first: 5,
                last: 3,
                failed: false,
            }],
        })
        .unwrap_err();
    assert!(e.to_string().contains("backwards"), "{e}");
    assert_eq!(w.len(), 2);
}

#[test]
fn a_frame_beyond_the_window_is_refused_and_a_lost_connection_drains_in_order() {
    let mut r = RecvWindow::<u8>::new(4);
    assert!(r.on_frame(5, 0).is_err());
    assert!(r.on_frame(4, 0).unwrap().is_empty(), "held for the gap");
    let mut w = SendWindow::new(WindowLimits::default(), WindowFull::Reject);
    for i in 0..5 {
        w.push(i, 1);
    }
    assert_eq!(w.drain(), vec![0, 1, 2, 3, 4]);
    assert!(w.is_empty() && w.bytes() == 0);
    assert!(matches!(w.push(9, 1), Push::Held { seq: 6, .. }));
}

#[test]
fn dedupe_forgets_the_least_recently_used_keys_at_its_bound() {
    let mut d = Dedupe::new(4);
    for k in 0..4 {
        assert_eq!(d.check(1, k, 10, 10), Seen::New);
    }
    assert_eq!(d.check(1, 3, 10, 10), Seen::Duplicate);
    assert_eq!(d.check(1, 9, 10, 10), Seen::New);
    assert!(d.len() <= 4 && d.stats().forgotten >= 2);
    // Key 3 was used last before the bound: still remembered.
    assert_eq!(d.check(1, 3, 10, 10), Seen::Duplicate);
}

#[test]
fn a_publisher_that_starts_again_under_its_name_is_not_taken_for_copies() {
    let mut d = Dedupe::new(16);
    for seq in 1..=100 {
        assert_eq!(d.check(1, 7, seq, 1_000 + seq), Seen::New);
    }
    // A copy of 50 (its original source time) is one.
    assert_eq!(d.check(1, 7, 50, 1_050), Seen::Duplicate);
    // The publisher starts again: numbers from 1, later source times.
    for seq in 1..=100 {
        assert_eq!(d.check(1, 7, seq, 5_000 + seq), Seen::New, "seq {seq}");
    }
    assert_eq!(d.check(1, 7, 60, 5_060), Seen::Duplicate);
    assert_eq!(d.stats().restarts, 1);
}

proptest! {
    /// `on_next` (the in-order path that allocates nothing) acknowledges
    /// exactly as `on_frame` does for frames that come in order, and
    /// refuses a frame out of order naming both numbers.
    #[test]
    fn on_next_acknowledges_as_on_frame_does_in_order(
        settles in prop::collection::vec((0u32..2, any::<bool>()), 1..60),
        window in 1usize..80,
    ) {
        let mut a = RecvWindow::<()>::new(window);
        let mut b = RecvWindow::<()>::new(window);
        for (i, (obligations, ack_now)) in settles.into_iter().enumerate() {
            let seq = i as u64 + 1;
            let fa = a.on_frame(seq, ());
            let fb = b.on_next(seq);
            prop_assert_eq!(fa.is_ok(), fb.is_ok(), "seq {}", seq);
            if fa.is_err() {
                break;
            }
            a.settle(seq, obligations).unwrap();
            b.settle(seq, obligations).unwrap();
            if obligations > 0 {
                a.complete(seq, false).unwrap();
                b.complete(seq, false).unwrap();
            }
            if ack_now {
                prop_assert_eq!(a.ack(), b.ack());
            }
        }
        prop_assert_eq!(a.ack(), b.ack());
        let next = b.expected();
        let err = b.on_next(next + 1).unwrap_err().to_string();
        prop_assert!(err.contains(&format!("{}", next + 1)) && err.contains(&format!("{next}")), "{}", err);
    }
}
