//! Compression on links (issue 25 item 5; BENCHMARKS.md "Compression on
//! links"): for JSON-like telemetry and random bytes of 1 KiB, 64 KiB and
//! 1 MiB, the bytes a link carries per event (`Forward` against
//! `ForwardCompressed`) and the CPU the sending daemon spends compressing
//! and the receiving one decompressing, per event, for lz4 and zstd.
//!
//! Run: `cargo bench -p tagwire-core --bench compress` (release); prints a
//! Markdown table. Each cell is the median of 15 runs of a batch sized to
//! take ~20 ms.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire_core::compress::{compress, decompress, Codec};
use tagwire_proto::{Event, FORWARD_PREFIX_LEN};

fn telemetry(n: usize) -> Vec<u8> {
    let mut s = String::with_capacity(n + 128);
    let mut i = 0u64;
    while s.len() < n {
        s.push_str(&format!(
            "{{\"ts\":{},\"sensor\":\"plant/line{}/temp{}\",\"value\":{}.{:03},\"unit\":\"C\",\"status\":\"ok\"}}\n",
            1_700_000_000_000u64 + i * 1000,
            i % 4,
            i % 32,
            18 + (i * 7919) % 9,
            (i * 104_729) % 1000
        ));
        i += 1;
    }
    s.truncate(n);
    s.into_bytes()
}

fn random(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn encoded(payload: Vec<u8>) -> Vec<u8> {
    let mut e = Event::new("/plant/telemetry", payload);
    e.header.publisher = "/plant/gw1".into();
    e.header.seq = 42;
    e.header.source_time_ns = 1_700_000_000_000_000_000;
    let mut b = BytesMut::new();
    e.encode(&mut b).expect("encodable");
    b.to_vec()
}

/// Median time per call of `f` over 15 batches.
fn per_call(mut f: impl FnMut()) -> Duration {
    let t = Instant::now();
    f();
    let one = t.elapsed().max(Duration::from_nanos(50));
    let batch = (Duration::from_millis(20).as_nanos() / one.as_nanos()).clamp(1, 100_000) as u32;
    let mut runs: Vec<Duration> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            t.elapsed() / batch
        })
        .collect();
    runs.sort();
    runs[7]
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn main() {
    println!("| payload | size | codec | link bytes/event (Forward → compressed) | ratio | compress µs/event | MB/s | decompress µs/event | MB/s |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
    for (kind, make) in [
        ("JSON telemetry", telemetry as fn(usize) -> Vec<u8>),
        ("random bytes", random),
    ] {
        for size in [1usize << 10, 64 << 10, 1 << 20] {
            let event = encoded(make(size));
            let forward = FORWARD_PREFIX_LEN + event.len();
            for codec in [Codec::Lz4, Codec::Zstd] {
                let packed = compress(codec, &event);
                let c = per_call(|| {
                    black_box(compress(codec, black_box(&event)));
                });
                let mb = |d: Duration| event.len() as f64 / d.as_secs_f64() / 1e6;
                let (wire, d) = match &packed {
                    Some(p) => {
                        let d = per_call(|| {
                            black_box(
                                decompress(codec, event.len() as u32, black_box(p), 1 << 28)
                                    .expect("round trip"),
                            );
                        });
                        (FORWARD_PREFIX_LEN + 5 + p.len(), Some(d))
                    }
                    None => (forward, None),
                };
                println!(
                    "| {kind} | {} | {} | {forward} → {wire}{} | {:.2} | {} | {:.0} | {} | {} |",
                    if size >= 1 << 20 {
                        format!("{} MiB", size >> 20)
                    } else {
                        format!("{} KiB", size >> 10)
                    },
                    codec.name(),
                    if packed.is_none() {
                        " (sent as Forward: no gain)"
                    } else {
                        ""
                    },
                    forward as f64 / wire as f64,
                    us(c),
                    mb(c),
                    d.map_or("—".into(), us),
                    d.map_or("—".into(), |d| format!("{:.0}", mb(d))),
                );
            }
        }
    }
}
