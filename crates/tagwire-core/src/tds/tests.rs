//! Time services in simulated time: every `now` is chosen by the test.

use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn buffer(max_events: usize, max_bytes: usize, max_delay_ns: u64, permille: u16) -> BufferConfig {
    BufferConfig {
        max_events,
        max_bytes,
        max_delay_ns,
        release_permille: permille,
    }
}

fn playout(delay_ns: u64, late: LatePolicy) -> PlayoutConfig {
    PlayoutConfig { delay_ns, late }
}

/// Everything `svc` releases at `now`.
fn drain<T>(svc: &mut TimeService<T>, now: u64) -> Vec<T> {
    std::iter::from_fn(|| svc.poll(now)).take(1 << 20).collect()
}

/// Runs `svc` over `events` (id, source time, arrival time, bytes), waking
/// exactly when it asks; returns (id, release time) in release order.
fn simulate(svc: &mut TimeService<u32>, events: &[(u32, u64, u64, usize)]) -> Vec<(u32, u64)> {
    let mut by_arrival: Vec<_> = events.to_vec();
    by_arrival.sort_by_key(|e| e.2);
    let mut out = Vec::new();
    let mut next = 0;
    let mut now = 0u64;
    for _ in 0..(4 * events.len() + 16) {
        let arrival = by_arrival.get(next).map(|e| e.2);
        let wake = svc.next_wake().map(|w| w.max(now));
        match (arrival, wake) {
            (Some(a), Some(w)) if w < a => now = w,
            (Some(a), _) => {
                now = a;
                let (id, src, _, bytes) = by_arrival[next];
                next += 1;
                svc.push(id, src, bytes, now);
            }
            (None, Some(w)) => now = w,
            (None, None) => break,
        }
        out.extend(drain(svc, now).into_iter().map(|id| (id, now)));
    }
    out
}

#[test]
fn the_buffer_releases_in_source_time_order() {
    let mut svc = TimeService::new(Some(buffer(4, 1 << 20, MS, 1000)), None, 64, 1 << 20);
    for (i, src) in [30u64, 10, 40, 20].into_iter().enumerate() {
        assert!(drain(&mut svc, i as u64).is_empty(), "held until 4 events");
        svc.push(src, src, 1, i as u64);
    }
    assert_eq!(drain(&mut svc, 3), [10, 20, 30, 40]);
    assert!(svc.is_empty());
}

#[test]
fn the_count_criterion_releases_the_release_factor_of_the_buffer() {
    let mut svc = TimeService::new(Some(buffer(4, 1 << 20, MS, 500)), None, 64, 1 << 20);
    for src in [40u64, 30, 20, 10] {
        svc.push(src, src, 1, 0);
    }
    assert_eq!(drain(&mut svc, 0), [10, 20], "0.5 × 4 earliest");
    assert_eq!(svc.len(), 2);
    let mut svc = TimeService::new(Some(buffer(3, 1 << 20, MS, 600)), None, 64, 1 << 20);
    for src in [3u64, 2, 1] {
        svc.push(src, src, 1, 0);
    }
    assert_eq!(drain(&mut svc, 0), [1, 2], "⌈0.6 × 3⌉ = 2");
}

#[test]
fn the_bytes_criterion_releases_before_the_buffer_overflows() {
    let mut svc = TimeService::new(Some(buffer(100, 100, MS, 1000)), None, 64, 1 << 20);
    svc.push(2u64, 2, 40, 0);
    svc.push(1, 1, 40, 0);
    assert!(drain(&mut svc, 0).is_empty());
    assert_eq!(svc.bytes(), 80);
    svc.push(3, 3, 40, 0);
    assert_eq!(drain(&mut svc, 0), [1, 2, 3]);
    assert_eq!(svc.bytes(), 0);
}

#[test]
fn the_time_criterion_releases_after_max_delay_in_the_buffer() {
    let mut svc = TimeService::new(Some(buffer(100, 1 << 20, 50, 1000)), None, 64, 1 << 20);
    svc.push(1u64, 1000, 1, 7);
    svc.push(2, 900, 1, 20);
    assert_eq!(svc.next_wake(), Some(57), "oldest arrival + max_delay");
    assert!(drain(&mut svc, 56).is_empty());
    assert_eq!(drain(&mut svc, 57), [2, 1], "by source time");
    assert_eq!(svc.next_wake(), None);
}

#[test]
fn a_late_event_is_delivered_at_once_and_counted_or_dropped_and_counted() {
    for (late, want) in [
        (LatePolicy::Deliver, vec![2u32]),
        (LatePolicy::Drop, vec![]),
    ] {
        let mut svc = TimeService::new(None, Some(playout(10, late)), 64, 1 << 20);
        svc.push(1u32, 100, 1, 105); // transit 5: the anchor
        assert_eq!(drain(&mut svc, 115), [1], "on time: 105 + delay");
        svc.push(2, 110, 1, 126); // transit 16: 11 > 10, late
        assert_eq!(drain(&mut svc, 126), want, "{late:?}");
        let s = svc.stats();
        assert_eq!(
            (s.late, s.late_dropped),
            (want.len() as u64, 1 - want.len() as u64)
        );
    }
}

#[test]
fn late_events_in_a_row_reanchor_the_stream() {
    let mut svc = TimeService::new(None, Some(playout(10, LatePolicy::Drop)), 64, 1 << 20);
    svc.push(0u32, 0, 1, 5);
    assert_eq!(drain(&mut svc, 15), [0]);
    // The path becomes 100 ns slower for good.
    for i in 1..=REANCHOR_AFTER_LATE {
        let src = i as u64 * 10;
        svc.push(i, src, 1, src + 105);
    }
    let s = svc.stats();
    assert_eq!(s.late_dropped, REANCHOR_AFTER_LATE as u64 - 1);
    assert_eq!(s.reanchored, 1);
    let last = REANCHOR_AFTER_LATE as u64 * 10 + 105;
    assert_eq!(
        svc.next_wake(),
        Some(last + 10),
        "on time again, after the delay"
    );
}

#[test]
fn a_stalled_start_is_corrected_by_reanchoring_keeping_order_and_spacing() {
    let mut svc = TimeService::new(
        None,
        Some(playout(30 * MS, LatePolicy::Deliver)),
        64,
        1 << 20,
    );
    // Source times 0, 5, 10, … ms; the first 13 are stuck until 65 ms (a
    // slow first publish), the rest arrive 1 ms after their source time.
    let events: Vec<_> = (0..30u32)
        .map(|i| {
            let src = i as u64 * 5 * MS;
            (i, src, (src + MS).max(65 * MS), 10)
        })
        .collect();
    let out = simulate(&mut svc, &events);
    let ids: Vec<u32> = out.iter().map(|o| o.0).collect();
    assert_eq!(ids, (0..30).collect::<Vec<_>>(), "source order");
    assert!(svc.stats().reanchored >= 1);
    assert_eq!(svc.stats().late, 0);
    for (id, at) in &out {
        let arrived = events[*id as usize].2;
        assert!(
            *at - arrived <= 60 * MS,
            "event {id} waits at most 2 × delay"
        );
    }
    // Past the stall, the original spacing.
    for w in out[13..].windows(2) {
        assert_eq!(w[1].1 - w[0].1, 5 * MS);
    }
}

#[test]
fn at_its_bound_the_playout_releases_its_earliest_event_early() {
    let mut svc = TimeService::new(None, Some(playout(MS, LatePolicy::Deliver)), 3, 1 << 20);
    let mut out = Vec::new();
    for i in 0..5u32 {
        let now = i as u64 * 10;
        svc.push(i, now, 1, now);
        out.extend(drain(&mut svc, now).into_iter().map(|id| (id, now)));
        assert!(svc.len() <= 3, "never more than the bound held");
    }
    assert_eq!(svc.stats().forced, 2);
    assert_eq!(out, [(0, 30), (1, 40)], "the earliest, forced out early");
    // The bytes bound likewise.
    let mut svc = TimeService::new(None, Some(playout(MS, LatePolicy::Deliver)), 100, 100);
    svc.push(0u32, 0, 60, 0);
    svc.push(1, 1, 60, 1);
    assert_eq!(svc.stats().forced, 1);
    assert_eq!(drain(&mut svc, 1), [0]);
}

#[test]
fn released_events_the_caller_never_takes_are_bounded_and_counted() {
    let mut svc = TimeService::new(None, Some(playout(MS, LatePolicy::Deliver)), 2, 1 << 20);
    for i in 0..10u32 {
        svc.push(i, i as u64, 1, i as u64);
    }
    assert!(svc.len() <= 4, "2 held + 2 due");
    let s = svc.stats();
    assert_eq!(s.forced, 8);
    assert_eq!(s.overflowed, 6);
}

#[test]
fn the_rfc3550_estimator_is_zero_for_constant_transit_and_tracks_jitter() {
    let mut j = Jitter::default();
    for i in 0..100u64 {
        j.observe(i * 1000 + 500, i * 1000);
    }
    assert_eq!(j.ns(), 0);
    // Transit alternating 0 and 1000: |D| = 1000 each time; J → 1000.
    let mut j = Jitter::default();
    for i in 0..1000u64 {
        j.observe(i * 10_000 + (i % 2) * 1000, i * 10_000);
    }
    assert!((990..=1000).contains(&j.ns()), "{}", j.ns());
}

#[test]
fn a_buffer_and_playout_together_keep_order_and_spacing() {
    let mut svc = TimeService::new(
        Some(buffer(4, 1 << 20, 2 * MS, 500)),
        Some(playout(20 * MS, LatePolicy::Deliver)),
        64,
        1 << 20,
    );
    // 10 ms spacing, jitter 0..5 ms, arrivals reordered.
    let jitter = [3, 0, 5, 1, 4, 2, 0, 5, 3, 1];
    let events: Vec<_> = (0..10u32)
        .map(|i| {
            let src = i as u64 * 10 * MS;
            (i, src, src + 7 * MS + jitter[i as usize] * MS, 100)
        })
        .collect();
    let out = simulate(&mut svc, &events);
    let ids: Vec<u32> = out.iter().map(|o| o.0).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    for w in out.windows(2) {
        assert_eq!(w[1].1 - w[0].1, 10 * MS);
    }
    assert_eq!(svc.output_jitter_ns(), 0);
    assert!(svc.input_jitter_ns() > 0);
}

proptest! {
    /// Jitter below the playout delay: every event leaves in source order
    /// exactly as far from the previous one as its source time is (0
    /// spacing error in simulated time), and waits at most 2 × delay.
    #[test]
    fn spacing_is_kept_when_jitter_is_below_the_playout_delay(
        gaps in proptest::collection::vec(0u64..5 * MS, 1..200),
        jitter in proptest::collection::vec(0u64..1_000_000_000, 200),
        delay in 1u64..50 * MS,
        transit in 0u64..100 * MS,
        start in 0u64..1_000_000_000_000,
    ) {
        let mut src = start;
        let events: Vec<(u32, u64, u64, usize)> = gaps
            .iter()
            .enumerate()
            .map(|(i, g)| {
                src += g + 1; // distinct source times
                (i as u32, src, src + transit + jitter[i] % delay, 64)
            })
            .collect();
        let mut svc = TimeService::new(None, Some(playout(delay, LatePolicy::Deliver)), 1024, 1 << 20);
        let out = simulate(&mut svc, &events);
        prop_assert_eq!(out.len(), events.len());
        for (k, (id, _)) in out.iter().enumerate() {
            prop_assert_eq!(*id as usize, k, "source order");
        }
        for w in out.windows(2) {
            let (a, b) = (&events[w[0].0 as usize], &events[w[1].0 as usize]);
            prop_assert_eq!(w[1].1 - w[0].1, b.1 - a.1, "spacing error 0");
        }
        for (id, at) in &out {
            let arrived = events[*id as usize].2;
            prop_assert!(*at >= arrived && *at - arrived <= 2 * delay);
        }
        let s = svc.stats();
        prop_assert_eq!((s.late, s.forced, s.reanchored), (0, 0, 0));
        prop_assert_eq!(svc.output_jitter_ns(), 0);
    }

    /// Whatever arrives (any source times, any arrival times), the service
    /// never holds more than its bounds, never waits longer than 2 × delay
    /// per event, and loses nothing it does not count.
    #[test]
    fn any_input_stays_within_the_bounds(
        events in proptest::collection::vec((0u64..u64::MAX / 2, 0u64..10 * MS, 1usize..5000), 1..300),
        delay in 1u64..10 * MS,
        max_events in 1usize..32,
        max_bytes in 1usize..50_000,
        with_buffer in any::<bool>(),
        drop_late in any::<bool>(),
    ) {
        let late = if drop_late { LatePolicy::Drop } else { LatePolicy::Deliver };
        let b = with_buffer.then(|| buffer(max_events, max_bytes, MS, 700));
        let mut svc = TimeService::new(b, Some(playout(delay, late)), max_events, max_bytes);
        let mut now = 0;
        let mut released = 0u64;
        for (i, (src, step, bytes)) in events.iter().enumerate() {
            now += step;
            svc.push(i as u32, *src, *bytes, now);
            prop_assert!(svc.len() <= 3 * max_events + 1);
            if i % 3 == 0 {
                released += drain(&mut svc, now).len() as u64;
            }
        }
        let last = now;
        for _ in 0..10_000 {
            match svc.next_wake() {
                Some(w) => {
                    prop_assert!(w <= last + MS + 2 * delay, "every event waits a bounded time");
                    now = now.max(w);
                    released += drain(&mut svc, now).len() as u64;
                }
                None => break,
            }
        }
        prop_assert!(svc.is_empty());
        let s = svc.stats();
        prop_assert_eq!(released, s.released);
        prop_assert_eq!(s.released + s.late_dropped + s.overflowed, events.len() as u64);
    }
}

#[test]
fn the_spacer_releases_at_the_anchor_plus_the_source_time_difference() {
    let mut s = Spacer::default();
    assert_eq!(s.offset(5, 1), 0, "no anchor yet");
    assert_eq!(s.release_at(1000, 10, 0), 1000, "anchors on the first");
    // Handed over late or early, the schedule stays that of source times.
    assert_eq!(s.release_at(1001, 15, 0), 1005);
    assert_eq!(s.release_at(2000, 20, 7), 1017);
    assert_eq!(s.offset(2000, 20), 990);
    s.anchor(5000, 100);
    assert_eq!(s.release_at(5000, 150, 0), 5050);
}
