//! Memory as the OS counts it (issue 12 item 2): small events queued to a
//! stalled subscriber must not keep the publisher's 64 KiB read buffers
//! alive. Each small event here shares its read buffer with a large event
//! nobody subscribes to, so a queued slice would pin a whole buffer per
//! event (about 64 MB for the 1,024 events the queue holds); the router
//! copies such events out instead. Its own test binary, so that the
//! process's resident memory is this test's alone.

mod common;

use common::{stalled_subscriber, start, Raw};
use tagwire_router::Limits;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

#[test]
fn small_events_queued_to_a_stalled_subscriber_do_not_keep_read_buffers_alive() {
    let max_queue_bytes = 1024 * 1024;
    let h = start(Limits {
        max_queue_bytes,
        ..Limits::default()
    });
    let _stalled = stalled_subscriber(&h, "/stalled", "/small/**");
    let mut publisher = Raw::hello(&h).publisher("/pub");
    // Warm up: the allocator's arenas and the sockets' buffers.
    for _ in 0..64 {
        publisher.publish_many(1, "/pub", "/small/x", 4, 1);
        publisher.publish_many(1, "/pub", "/other/x", 60 * 1024, 1);
    }
    let _ = publisher.list();
    let before = rss_bytes();
    // 4,096 pairs: one small event the stalled subscriber gets, then a
    // 60 KiB one for nobody, so every read buffer holds one small event.
    for _ in 0..4096 {
        publisher.publish_many(1, "/pub", "/small/x", 4, 1);
        publisher.publish_many(1, "/pub", "/other/x", 60 * 1024, 1);
    }
    let l = publisher.list();
    let after = rss_bytes();
    let sub = &l.subscriptions[0];
    assert!(sub.queue_depth >= 1000, "the queue filled: {sub:?}");
    assert!(l.memory.buffered_bytes as usize <= max_queue_bytes);
    let grown = after.saturating_sub(before);
    assert!(
        grown < 16 * 1024 * 1024,
        "resident memory grew by {grown} bytes for {} queued small events",
        sub.queue_depth
    );
}
