//! Fuzz target: a shared-memory region whose header and control area a
//! misbehaving peer overwrote (the bytes of `data`, written from offset 0
//! into a valid region's memfd). Attaching gives a region or a named error;
//! a consumer of an attached region reads packets or gets a named error —
//! never a panic, never a read outside the region. Pin rows scribbled over
//! the same way: adopting a pin by a ticket and chunk taken from the input,
//! giving pins back and dropping the row give a named error or nothing,
//! never a panic (no count underflows). Also: arbitrary bytes as an event's
//! shared-memory reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_shm::{ConsumerConfig, Region, Stream, StreamConfig};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = tagwire_proto::ShmRef::decode(data) {
        assert_eq!(&r.encode()[..], data);
    }
    let Ok((mut producer, fd)) = Stream::create(StreamConfig {
        slots: 4,
        max_packet: 256,
        ..StreamConfig::default()
    }) else {
        return;
    };
    // A consumer attached before the packets, so it has some to read.
    let Ok(mut consumer) = fd
        .try_clone()
        .map_err(drop)
        .and_then(|f| tagwire_shm::Consumer::attach(f, ConsumerConfig::default()).map_err(drop))
    else {
        return;
    };
    for i in 0..6u8 {
        let _ = producer.publish_copy(&[i; 100], u64::from(i), tagwire_shm::NO_DEADLINE, 0);
    }
    // A relay's pin row with a pin handed over and one kept.
    let region = producer.region();
    let row = region.pin_row().ok();
    let mut kept = None;
    if let Some(row) = &row {
        if let Ok(sample) = consumer.read_at(producer.head() - 1, 0) {
            if let Ok(pin) = sample.pin_to(row) {
                kept = pin.pin_to(row).ok();
                let _ = pin.hand_over();
            }
        }
    }
    // The peer's scribble over the header and control area.
    let n = data.len().min(8192);
    if rustix::io::pwrite(&fd, &data[..n], 0).is_err() {
        return;
    }
    for _ in 0..8 {
        match consumer.next(0) {
            Ok(s) => drop(s),
            Err(_) => break,
        }
    }
    // A holder named by the input adopts a chunk named by the input.
    let word = |i: usize| {
        let mut b = [0u8; 4];
        for (k, x) in b.iter_mut().enumerate() {
            *x = data.get(i + k).copied().unwrap_or(0);
        }
        u32::from_le_bytes(b)
    };
    if let Ok(holder) = region.pin_holder(word(0)) {
        if let Ok(pin) = holder.adopt(word(4), u64::from(word(8))) {
            let _ = pin.len();
        }
    }
    drop(kept);
    drop(row);
    let _ = Region::attach(fd).map(|r| r.layout().total_bytes);
});
