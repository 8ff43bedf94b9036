//! What compressing an event's pieces costs (issue 25 item 5, link version
//! 7; docs/reliability.md "Compression on links"): the time to compress one
//! piece (the work a daemon does per step under its state lock) and to
//! decompress it, and the bytes a 64 MiB telemetry event takes on the wire
//! in 1 MiB pieces (the default `fragment_size`), lz4 and zstd. A timing
//! run, not a test: build it optimised, e.g.
//!
//! ```sh
//! CARGO_PROFILE_DEV_OPT_LEVEL=3 CARGO_TARGET_DIR=target/o3 \
//!   cargo test -p tagwire-core --test piece_compression_cost -- --ignored --nocapture
//! ```

use std::time::Instant;

use tagwire_core::compress::{compress, decompress, Codec};

/// JSON-like telemetry of `len` bytes (as the router tests send).
fn telemetry(len: usize) -> Vec<u8> {
    let mut s = String::with_capacity(len + 64);
    let mut i = 0u64;
    while s.len() < len {
        s.push_str(&format!(
            "{{\"sensor\":\"temp-{}\",\"value\":{}.{},\"unit\":\"C\",\"seq\":{i}}}\n",
            i % 16,
            20 + i % 7,
            i % 10
        ));
        i += 1;
    }
    s.truncate(len);
    s.into_bytes()
}

#[test]
#[ignore = "a timing run for the report, not a test"]
fn cost_of_compressing_a_64_mib_event_in_1_mib_pieces() {
    const PIECE: usize = 1 << 20;
    let event = telemetry(64 << 20);
    for codec in [Codec::Lz4, Codec::Zstd] {
        // Warm the thread's zstd contexts.
        let _ = compress(codec, &event[..PIECE]);
        let (mut wire, mut worst, mut sum) = (0usize, 0f64, 0f64);
        let (mut dworst, mut dsum) = (0f64, 0f64);
        for piece in event.chunks(PIECE) {
            let t = Instant::now();
            let c = compress(codec, piece).expect("telemetry shrinks");
            let ms = t.elapsed().as_secs_f64() * 1e3;
            worst = worst.max(ms);
            sum += ms;
            wire += c.len() + 5;
            let t = Instant::now();
            let back = decompress(codec, piece.len() as u32, &c, PIECE).expect("round trip");
            let ms = t.elapsed().as_secs_f64() * 1e3;
            dworst = dworst.max(ms);
            dsum += ms;
            assert_eq!(back, piece);
        }
        let n = event.len().div_ceil(PIECE) as f64;
        println!(
            "{}: 64 MiB event ({} bytes) -> {wire} bytes of piece data on the wire ({:.1}x); \
             per 1 MiB piece: compress mean {:.2} ms, worst {:.2} ms; decompress mean {:.2} ms, \
             worst {:.2} ms",
            codec.name(),
            event.len(),
            event.len() as f64 / wire as f64,
            sum / n,
            worst,
            dsum / n,
            dworst
        );
    }
}
