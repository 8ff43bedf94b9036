//! Fuzz target: arbitrary pushes and polls through a channel's time
//! services (`tagwire_core::tds::TimeService`: buffer and TDS playout).
//! Input: byte 0 picks the configuration (buffer on/off, late policy,
//! bounds), then 10-byte records: a flag byte (bit 0: poll instead of
//! push), a time step (u16 µs), a source time (u32 µs, as offset from a
//! large base so it may run backwards) and a size (u16). Properties: no
//! panic; the service never holds more than its bounds; nothing is lost
//! that is not counted; every event leaves within the bound on waiting.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_core::tds::{BufferConfig, LatePolicy, PlayoutConfig, TimeService};

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let max_events = 1 + (cfg as usize & 0x0f);
    let max_bytes = 1 + ((cfg as usize >> 4) << 10);
    let delay = 1 + u64::from(cfg) * 1_000;
    let buffer = (cfg & 0x40 != 0).then_some(BufferConfig {
        max_events,
        max_bytes,
        max_delay_ns: delay,
        release_permille: 500 + (u16::from(cfg) * 2).min(500),
    });
    let late = if cfg & 0x80 != 0 {
        LatePolicy::Drop
    } else {
        LatePolicy::Deliver
    };
    let mut svc = TimeService::new(
        buffer,
        Some(PlayoutConfig {
            delay_ns: delay,
            late,
        }),
        max_events,
        max_bytes,
    );
    let (mut now, mut pushed, mut released) = (1u64 << 40, 0u64, 0u64);
    let mut last_push = now;
    for r in rest.chunks_exact(10).take(4096) {
        now += u64::from(u16::from_le_bytes([r[1], r[2]])) * 1_000;
        if r[0] & 1 == 1 {
            while svc.poll(now).is_some() {
                released += 1;
            }
        } else {
            let src =
                (1u64 << 40) + u64::from(u32::from_le_bytes([r[3], r[4], r[5], r[6]])) * 1_000;
            let size = usize::from(u16::from_le_bytes([r[7], r[8]]));
            svc.push(pushed as u32, src, size, now);
            pushed += 1;
            last_push = now;
        }
        assert!(svc.len() <= 3 * max_events + 1, "held {}", svc.len());
    }
    // Held events wait at most the buffer's max_delay (or until the last
    // poll) plus 2 x the playout delay.
    let end = now.max(last_push);
    for _ in 0..100_000 {
        let Some(w) = svc.next_wake() else { break };
        assert!(
            w <= end + 3 * delay,
            "a wake at {w} beyond the waiting bound"
        );
        now = now.max(w);
        while svc.poll(now).is_some() {
            released += 1;
        }
    }
    assert!(svc.is_empty());
    let s = svc.stats();
    assert_eq!(released, s.released);
    assert_eq!(s.released + s.late_dropped + s.overflowed, pushed);
});
