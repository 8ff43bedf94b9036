//! The discovery beacon: what a daemon multicasts on the local network so
//! that others find it, its wire form and its parser.

use std::net::{Ipv4Addr, SocketAddrV4};

/// A discovery beacon: `TWB1`, u8 version 1, u64 node id, the gossip and
/// link addresses (IPv4 + port each), str8 cluster name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beacon {
    /// The sender's node id.
    pub node: u64,
    /// Its gossip address.
    pub gossip: SocketAddrV4,
    /// Its link (TCP) address.
    pub link: SocketAddrV4,
    /// Its cluster name.
    pub cluster: String,
}

/// Why a datagram is not a beacon.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BeaconError {
    /// Not `TWB1`.
    #[error("not a tagwire beacon (bad magic)")]
    Magic,
    /// A version this daemon does not know.
    #[error("beacon version {0} (this daemon knows 1)")]
    Version(u8),
    /// Shorter than its fields.
    #[error("truncated beacon ({0} bytes)")]
    Truncated(usize),
    /// Bytes after the cluster name, or a name that is not UTF-8.
    #[error("malformed beacon: {0}")]
    Malformed(&'static str),
}

impl Beacon {
    /// The datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.cluster.len());
        b.extend_from_slice(b"TWB1");
        b.push(1);
        b.extend_from_slice(&self.node.to_le_bytes());
        for a in [self.gossip, self.link] {
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&a.port().to_le_bytes());
        }
        let name = &self.cluster.as_bytes()[..self.cluster.len().min(255)];
        b.push(name.len() as u8);
        b.extend_from_slice(name);
        b
    }

    /// Parses a datagram; anything else is an error naming what was wrong.
    pub fn decode(d: &[u8]) -> Result<Beacon, BeaconError> {
        const FIXED: usize = 4 + 1 + 8 + 6 + 6 + 1;
        if d.len() < 5 {
            return Err(BeaconError::Truncated(d.len()));
        }
        if &d[..4] != b"TWB1" {
            return Err(BeaconError::Magic);
        }
        if d[4] != 1 {
            return Err(BeaconError::Version(d[4]));
        }
        if d.len() < FIXED {
            return Err(BeaconError::Truncated(d.len()));
        }
        let mut node = [0u8; 8];
        node.copy_from_slice(&d[5..13]);
        let addr = |at: usize| {
            SocketAddrV4::new(
                Ipv4Addr::new(d[at], d[at + 1], d[at + 2], d[at + 3]),
                u16::from_le_bytes([d[at + 4], d[at + 5]]),
            )
        };
        let n = d[25] as usize;
        let name = d.get(26..26 + n).ok_or(BeaconError::Truncated(d.len()))?;
        if d.len() != 26 + n {
            return Err(BeaconError::Malformed("bytes after the cluster name"));
        }
        let cluster = std::str::from_utf8(name)
            .map_err(|_| BeaconError::Malformed("cluster name is not UTF-8"))?
            .to_owned();
        Ok(Beacon {
            node: u64::from_le_bytes(node),
            gossip: addr(13),
            link: addr(19),
            cluster,
        })
    }
}
