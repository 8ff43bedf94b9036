//! What the daemon knows of compression on its links
//! ([`LinkCompression`]), as the federation state
//! ([`Federation`](super::federation::Federation)) holds it. Choosing a
//! tag's codec, compressing and decompressing are `compress`'s.

use std::collections::{HashMap, HashSet};

use tagwire_core::compress::Compression;
use tagwire_proto::admin::CompressionInfo;

/// What the daemon knows of compression on its links.
#[derive(Debug, Default)]
pub(crate) struct LinkCompression {
    /// Whether any tag or the daemon sets a codec (else one flag test per
    /// routed event).
    pub(crate) enabled: bool,
    /// Each tag's compression, as the layers give it.
    pub(crate) cache: HashMap<Box<str>, Compression>,
    /// Link connections whose peer speaks link version 5.
    pub conns: HashSet<u64>,
    /// What was compressed and decompressed.
    pub counters: CompressionInfo,
}
