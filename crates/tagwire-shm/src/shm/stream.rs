//! A stream in a region of its own, sized from its ring and its largest
//! packet: the common case.

use super::*;

/// A stream in a region of its own: the common case.
#[derive(Debug)]
pub struct Stream;

/// Configuration of a stream created with [`Stream::create`].
#[derive(Clone, Copy, Debug)]
pub struct StreamConfig {
    /// Descriptors in the ring.
    pub slots: u32,
    /// Consumer entries.
    pub consumers_max: u32,
    /// The largest packet (bytes, rounded up to 64).
    pub max_packet: u64,
    /// Refuse streams larger than this (bytes).
    pub max_total_bytes: u64,
    /// The producer's behaviour.
    pub producer: ProducerConfig,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            slots: 16,
            consumers_max: 4,
            max_packet: 64 * 1024,
            max_total_bytes: 1 << 30,
            producer: ProducerConfig::default(),
        }
    }
}

impl Stream {
    /// Creates a stream: data chunks = slots + consumers_max + 1, enough that a
    /// loan always finds a chunk. Returns the producer and the memfd for consumers.
    pub fn create(cfg: StreamConfig) -> Result<(Producer, OwnedFd), Error> {
        let chunks = cfg
            .slots
            .checked_add(cfg.consumers_max)
            .and_then(|n| n.checked_add(1))
            .ok_or(Error::InvalidConfig {
                what: "slots + consumers_max",
                value: u64::MAX,
            })?;
        let region = Region::create(RegionConfig {
            streams: 1,
            slots: cfg.slots,
            consumers_max: cfg.consumers_max,
            chunks,
            chunk_bytes: cfg.max_packet.max(64).div_ceil(64) * 64,
            max_total_bytes: cfg.max_total_bytes,
            reserve: true,
        })?;
        let fd = region.fd().try_clone_to_owned().map_err(|e| Error::Os {
            op: "dup",
            source: e,
        })?;
        Ok((region.producer(0, cfg.producer)?, fd))
    }
}
