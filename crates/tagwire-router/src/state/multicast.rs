//! The multicast groups of a daemon ([`Multicast`]), as
//! [`State`](super::State) holds them: what core decides per group, each
//! group's socket, and [`send_event`], which sends an event being routed
//! to its group. Opening the groups and receiving from them is
//! `multicast`'s.

use std::net::{Ipv4Addr, SocketAddrV4};

use bytes::BytesMut;
use tagwire_core::federation::NodeId;
use tagwire_core::multicast::Groups;

/// The multicast groups of a daemon and their sockets.
#[derive(Debug, Default)]
pub(crate) struct Multicast {
    /// What core decides per group (same order as `io`).
    pub groups: Groups,
    /// Each group's socket and settings.
    pub io: Vec<GroupIo>,
}

/// One group's socket and settings.
#[derive(Debug)]
pub(crate) struct GroupIo {
    pub addr: SocketAddrV4,
    pub band: String,
    pub interface: Option<Ipv4Addr>,
    pub ttl: u32,
    /// The sending handle (a clone of the lane's socket), non-blocking.
    pub socket: std::net::UdpSocket,
    /// Datagrams the socket would not take.
    pub send_dropped: u64,
}

/// Routing an event: the group it goes to, if any, for the links to skip.
/// An event that came from group `from_group` goes to no group and skips
/// that group's members; otherwise one whose tag a group covers is sent to
/// it (if it fits and the socket takes it: else it takes the links).
pub(crate) fn send_event(
    mc: &mut Multicast,
    from_group: Option<usize>,
    origin: NodeId,
    hops: u8,
    tag: &str,
    event: &[u8],
) -> Option<usize> {
    if from_group.is_some() {
        return from_group;
    }
    let i = mc.groups.group_for(tag)?;
    let (g, io) = (mc.groups.get_mut(i)?, mc.io.get_mut(i)?);
    let mut d = BytesMut::with_capacity(event.len() + tagwire_proto::datagram::GROUP_OVERHEAD);
    if g.encode_event(origin, hops, event, &mut d).is_err() {
        return None;
    }
    match io.socket.send_to(&d, io.addr) {
        Ok(_) => {
            g.note_sent();
            Some(i)
        }
        Err(_) => {
            io.send_dropped += 1;
            None
        }
    }
}
