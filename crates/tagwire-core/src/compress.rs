//! Compression of events on links (`compression=lz4|zstd[:MIN]`, issue 25
//! item 5): the QoS value ([`Compression`]), the compressor a sending daemon
//! runs ([`compress`]) and the bounded decompressor a receiving one runs
//! ([`decompress`]).
//!
//! Which to pick: `lz4` costs little CPU (~1.5-2.5 GB/s compressing) and
//! makes JSON-like telemetry 3-5x smaller; `zstd` makes it 4-23x smaller at
//! ~5 µs for a 1 KiB event and about lz4's cost from 64 KiB up
//! (BENCHMARKS.md, "Compression on links"). Neither pays on random or
//! already-compressed bytes: an event that does not shrink is sent as it is
//! ([`compress`] returns `None`).
//!
//! Bounds: the receiver refuses a declared length over its limit before it
//! allocates anything, then decompresses into exactly that many bytes; a
//! stream that would produce more, or fewer, fails with
//! [`DecompressError`] naming why.

use std::fmt;
use std::str::FromStr;

pub use tagwire_proto::Codec;

/// The zstd level a daemon compresses at: the library's default, a few
/// hundred MB/s on telemetry.
pub const ZSTD_LEVEL: i32 = 3;
/// Default smallest event compressed when `compression` names no minimum:
/// below this the codecs' headers and the CPU rarely pay.
pub const DEFAULT_MIN_BYTES: u32 = 1024;

/// A tag's `compression`: the codec its events cross links with (none: as
/// they are) and the smallest encoded event worth compressing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Compression {
    /// The codec, or `None` (`compression=none`, the default).
    pub codec: Option<Codec>,
    /// Events whose encoding is shorter than this go uncompressed.
    pub min_bytes: u32,
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            codec: None,
            min_bytes: DEFAULT_MIN_BYTES,
        }
    }
}

impl Compression {
    /// The codec to compress an encoded event of `len` bytes with, if any.
    pub fn codec_for(&self, len: usize) -> Option<Codec> {
        self.codec.filter(|_| len >= self.min_bytes as usize)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.codec {
            None => f.write_str("none"),
            Some(c) if self.min_bytes == DEFAULT_MIN_BYTES => f.write_str(c.name()),
            Some(c) => {
                let n = self.min_bytes;
                if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
                    write!(f, "{}:{}MiB", c.name(), n >> 20)
                } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
                    write!(f, "{}:{}KiB", c.name(), n >> 10)
                } else {
                    write!(f, "{}:{n}", c.name())
                }
            }
        }
    }
}

/// Why a `compression` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected none, lz4, zstd, lz4:MIN or zstd:MIN (MIN a byte count up to 256MiB, with B, KiB or MiB), e.g. zstd:4KiB")]
pub struct CompressionSyntax;

impl FromStr for Compression {
    type Err = CompressionSyntax;
    fn from_str(s: &str) -> Result<Self, CompressionSyntax> {
        if s == "none" {
            return Ok(Compression::default());
        }
        let (name, min) = match s.split_once(':') {
            Some((n, m)) => (n, Some(m)),
            None => (s, None),
        };
        let codec = match name {
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            _ => return Err(CompressionSyntax),
        };
        let min_bytes = match min {
            None => DEFAULT_MIN_BYTES,
            Some(m) => parse_min(m).ok_or(CompressionSyntax)?,
        };
        Ok(Compression {
            codec: Some(codec),
            min_bytes,
        })
    }
}

/// A byte count up to 256 MiB: digits, then nothing, `B`, `KiB` or `MiB`.
fn parse_min(s: &str) -> Option<u32> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: u32 = n.parse().ok()?;
    let scale = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        _ => return None,
    };
    n.checked_mul(scale).filter(|n| *n <= 256 << 20)
}

thread_local! {
    /// This thread's zstd contexts, made once: a new context per call cost
    /// ~16 µs, more than compressing a 1 KiB event.
    static ZSTD: std::cell::RefCell<Option<ZstdContexts>> = const { std::cell::RefCell::new(None) };
}

struct ZstdContexts {
    compressor: zstd::bulk::Compressor<'static>,
    decompressor: zstd::bulk::Decompressor<'static>,
}

/// Runs `f` with this thread's zstd contexts (`None` if they cannot be made).
fn with_zstd<T>(f: impl FnOnce(&mut ZstdContexts) -> T) -> Option<T> {
    ZSTD.with(|z| {
        let mut z = z.try_borrow_mut().ok()?;
        if z.is_none() {
            *z = Some(ZstdContexts {
                compressor: zstd::bulk::Compressor::new(ZSTD_LEVEL).ok()?,
                decompressor: zstd::bulk::Decompressor::new().ok()?,
            });
        }
        z.as_mut().map(f)
    })
}

/// Compresses an encoded event with `codec`; `None` if that does not make
/// its frame shorter (random or already-compressed bytes, counting the
/// [`COMPRESSED_HEADER_LEN`](tagwire_proto::COMPRESSED_HEADER_LEN) bytes a
/// compressed frame adds): then it goes as it is.
pub fn compress(codec: Codec, event: &[u8]) -> Option<Vec<u8>> {
    if u32::try_from(event.len()).is_err() {
        return None;
    }
    let out = match codec {
        Codec::Lz4 => lz4_flex::block::compress(event),
        Codec::Zstd => with_zstd(|z| z.compressor.compress(event).ok())??,
    };
    (out.len() + tagwire_proto::COMPRESSED_HEADER_LEN < event.len()).then_some(out)
}

/// Why a compressed event could not be decompressed (the peer sent bad
/// bytes, or more than the receiver takes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecompressError {
    /// The declared length is over the receiver's limit: refused before
    /// anything was allocated.
    #[error("a compressed event declares {declared} bytes, over the limit of {max}")]
    TooLarge {
        /// The declared (decompressed) length.
        declared: u64,
        /// The receiver's limit.
        max: u64,
    },
    /// The stream is not valid for its codec, or decompresses to more than
    /// it declared.
    #[error("a {codec} stream that does not decompress into its declared {declared} bytes: {why}")]
    Corrupt {
        /// The codec's name.
        codec: &'static str,
        /// The declared length.
        declared: u64,
        /// The codec's complaint.
        why: String,
    },
    /// The stream decompresses to fewer bytes than it declared.
    #[error("a {codec} stream declares {declared} bytes but holds {got}")]
    Short {
        /// The codec's name.
        codec: &'static str,
        /// The declared length.
        declared: u64,
        /// What it held.
        got: u64,
    },
}

/// Decompresses `data` into exactly `declared` bytes, refusing a
/// `declared` over `max` before allocating: a decompression bomb costs at
/// most `max` bytes, for as long as this call.
pub fn decompress(
    codec: Codec,
    declared: u32,
    data: &[u8],
    max: usize,
) -> Result<Vec<u8>, DecompressError> {
    let len = declared as usize;
    if len > max {
        return Err(DecompressError::TooLarge {
            declared: declared.into(),
            max: max as u64,
        });
    }
    let corrupt = |why: String| DecompressError::Corrupt {
        codec: codec.name(),
        declared: declared.into(),
        why,
    };
    let (out, got) = match codec {
        Codec::Lz4 => {
            let mut out = vec![0u8; len];
            let got = lz4_flex::block::decompress_into(data, &mut out)
                .map_err(|e| corrupt(e.to_string()))?;
            (out, got)
        }
        Codec::Zstd => {
            let mut out = Vec::with_capacity(len);
            let got = with_zstd(|z| z.decompressor.decompress_to_buffer(data, &mut out))
                .ok_or_else(|| corrupt("no zstd context could be made".into()))?
                .map_err(|e| corrupt(e.to_string()))?;
            (out, got)
        }
    };
    if got != len {
        return Err(DecompressError::Short {
            codec: codec.name(),
            declared: declared.into(),
            got: got as u64,
        });
    }
    let mut out = out;
    out.truncate(got);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn telemetry(n: usize) -> Vec<u8> {
        let mut s = String::new();
        let mut i = 0u64;
        while s.len() < n {
            s.push_str(&format!(
                "{{\"sensor\":\"temp-{}\",\"value\":{}.{},\"unit\":\"C\",\"ok\":true}}\n",
                i % 16,
                20 + i % 7,
                i % 10
            ));
            i += 1;
        }
        s.truncate(n);
        s.into_bytes()
    }

    #[test]
    fn both_codecs_shrink_telemetry_and_give_it_back_whole() {
        let raw = telemetry(64 << 10);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let c = compress(codec, &raw).expect("telemetry shrinks");
            assert!(c.len() < raw.len() / 2, "{codec:?}: {}", c.len());
            let back = decompress(codec, raw.len() as u32, &c, 1 << 20).expect("decompresses");
            assert_eq!(back, raw);
        }
    }

    #[test]
    fn bytes_that_do_not_shrink_are_not_compressed() {
        // An xorshift stream: incompressible.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let raw: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(compress(Codec::Lz4, &raw), None);
        assert_eq!(compress(Codec::Zstd, &raw), None);
    }

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_decompressing() {
        let raw = vec![0u8; 1 << 20];
        for codec in [Codec::Lz4, Codec::Zstd] {
            let c = compress(codec, &raw).expect("zeros shrink");
            let e = decompress(codec, raw.len() as u32, &c, 64 << 10).unwrap_err();
            assert_eq!(
                e,
                DecompressError::TooLarge {
                    declared: 1 << 20,
                    max: 64 << 10
                }
            );
            assert!(e.to_string().contains("over the limit"), "{e}");
        }
    }

    #[test]
    fn a_stream_that_holds_more_or_less_than_declared_fails_naming_it() {
        let raw = telemetry(8 << 10);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let c = compress(codec, &raw).expect("shrinks");
            // Declared shorter than it is: the output buffer is too small.
            let e = decompress(codec, 100, &c, 1 << 20).unwrap_err();
            assert!(
                matches!(e, DecompressError::Corrupt { .. }),
                "{codec:?}: {e}"
            );
            // Declared longer than it is.
            let e = decompress(codec, raw.len() as u32 + 10, &c, 1 << 20).unwrap_err();
            assert!(
                matches!(
                    e,
                    DecompressError::Short { .. } | DecompressError::Corrupt { .. }
                ),
                "{codec:?}: {e}"
            );
            // Garbage.
            let e = decompress(codec, 1000, b"\xff\xff\xff\xff garbage", 1 << 20).unwrap_err();
            assert!(e.to_string().contains(codec.name()), "{e}");
        }
    }

    #[test]
    fn the_protocol_vectors_lz4_block_is_hello() {
        // docs/protocol.md, `link_forward_compressed`.
        assert_eq!(
            decompress(Codec::Lz4, 5, b"\x50hello", 5).expect("valid block"),
            b"hello"
        );
    }

    #[test]
    fn compression_values_parse_and_show_as_typed() {
        for (s, shown) in [
            ("none", "none"),
            ("lz4", "lz4"),
            ("zstd", "zstd"),
            ("lz4:1KiB", "lz4"),
            ("zstd:4KiB", "zstd:4KiB"),
            ("lz4:0", "lz4:0"),
            ("zstd:100B", "zstd:100"),
            ("lz4:2MiB", "lz4:2MiB"),
        ] {
            let c: Compression = s.parse().unwrap_or_else(|_| panic!("{s}"));
            assert_eq!(c.to_string(), shown, "{s}");
            assert_eq!(shown.parse::<Compression>(), Ok(c), "{s}");
        }
        for bad in [
            "",
            "gzip",
            "lz4:",
            "lz4:4k",
            "zstd:-1",
            "zstd:257MiB",
            "lz4:1:2",
        ] {
            assert_eq!(bad.parse::<Compression>(), Err(CompressionSyntax), "{bad}");
        }
        let c: Compression = "zstd:4KiB".parse().expect("valid");
        assert_eq!(c.codec_for(4095), None);
        assert_eq!(c.codec_for(4096), Some(Codec::Zstd));
        assert_eq!(Compression::default().codec_for(1 << 20), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn what_is_compressed_decompresses_to_itself(
            raw in prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 0..20_000),
            zstd in any::<bool>(),
        ) {
            let codec = if zstd { Codec::Zstd } else { Codec::Lz4 };
            if let Some(c) = compress(codec, &raw) {
                prop_assert!(c.len() + 5 < raw.len());
                let back = decompress(codec, raw.len() as u32, &c, raw.len()).expect("round trip");
                prop_assert_eq!(back, raw);
            }
        }

        #[test]
        fn arbitrary_streams_never_panic_and_never_exceed_their_declared_length(
            data in prop::collection::vec(any::<u8>(), 0..512),
            declared in 0u32..100_000,
            zstd in any::<bool>(),
        ) {
            let codec = if zstd { Codec::Zstd } else { Codec::Lz4 };
            if let Ok(out) = decompress(codec, declared, &data, 65_536) {
                prop_assert_eq!(out.len(), declared as usize);
            }
        }
    }
}
