//! Hop-by-hop reliability over links, as the federation state
//! ([`Federation`](super::federation::Federation)) holds it: each
//! connection's windows ([`ConnRel`]), the events they hold ([`Held`]) and
//! the daemon's [`Reliable`] (dedupe, counters, reassemblies). Offering,
//! sending, acknowledging and routing again are `reliable`'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tagwire_core::compress::Compression;
use tagwire_core::federation::NodeId;
use tagwire_core::reliable::{Dedupe, RecvWindow, SendWindow, WindowFull, WindowLimits};

use crate::channel::Outbox;
use crate::config::ReliableWindowFull;

/// Most peer addresses remembered as speaking link version 2.
const MAX_DOWNGRADED: usize = 1024;

/// Where an event came from on a reliable connection: its obligation there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Upstream {
    /// The connection it arrived on.
    pub conn: u64,
    /// Its sequence number there.
    pub seq: u64,
}

/// A reliable event held in a connection's window.
#[derive(Debug)]
pub(crate) struct Held {
    pub event: Bytes,
    pub origin: NodeId,
    /// The hops to write in its frame (links crossed before this one).
    pub hops: u8,
    /// The neighbour it came from (not sent back there when routed again).
    pub from: Option<NodeId>,
    pub upstream: Option<Upstream>,
    /// Times it was routed again (at most `reliable`'s `MAX_REROUTES`).
    pub tries: u8,
    /// The event compressed for this link connection (a `ForwardCompressed`
    /// body after origin and hops: codec, raw length, data), when its tag
    /// says `compression` and the peer speaks link version 5: it goes as
    /// `ReliableCompressed` (not when it goes in pieces).
    pub packed: Option<Bytes>,
    /// A `ReliableTo`: the daemon it is addressed to (held for it while it
    /// was away, docs/reliability.md "A partition"), and the band it goes
    /// on. It goes whole and uncompressed, toward that daemon only.
    pub to: Option<(NodeId, Arc<str>)>,
    /// Its tag's `compression`, for when it goes in pieces: each piece is
    /// compressed on its own when it is sent, on a connection whose peer
    /// speaks link version 7 (`ConnRel::compress_pieces`).
    pub compression: Compression,
}

/// One link connection's windows (link version 3 only), or a client
/// connection's receive window (protocol version 4, `PublishReliable`).
#[derive(Debug)]
pub(crate) struct ConnRel {
    /// The peer (0 for a client connection).
    pub peer: NodeId,
    /// A client connection: its acknowledgements go out as `PublishAck`,
    /// and its send window stays empty.
    pub client: bool,
    pub outbox: Arc<Outbox>,
    pub send: SendWindow<Held>,
    /// Frames ahead of a gap wait here with their event (lossy transports
    /// only; over TCP a gap closes the link, and nothing waits).
    pub recv: RecvWindow<Option<Parked>>,
    /// Over a transport that loses frames (a UDP link): frames ahead of a
    /// gap wait for it, and what is not acknowledged within `reliable`'s
    /// `LOSSY_RTO_NS` is sent again.
    pub lossy: bool,
    /// Piece size for events larger than it (link version 4), else 0: the
    /// connection does not carry `Fragment`s.
    pub piece: usize,
    /// The held event being sent in pieces (the next unsent one).
    pub sending: Option<super::fragment::Sending>,
    /// The peer speaks link version 7: it takes `ReliableTo`.
    pub reliable_to: bool,
    /// The peer speaks link version 7: pieces may go compressed
    /// (`FragmentCompressed`), and it may send them.
    pub compress_pieces: bool,
}

/// A `Reliable` frame that arrived ahead of a gap on a lossy connection.
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) origin: NodeId,
    pub(crate) hops: u8,
    pub(crate) event: Bytes,
    /// A `ReliableTo`'s daemon.
    pub(crate) to: Option<NodeId>,
}

/// A `ReliableTo` this daemon is to pass on toward `to` but has no way to
/// yet (the daemon before it already sees one: its adverts crossed first),
/// waiting in arrival order for this daemon's routes to catch up
/// (`reliable::retry_pending_to`). It holds one obligation on `upstream`.
#[derive(Debug)]
pub(crate) struct PendingTo {
    pub(crate) upstream: Upstream,
    pub(crate) from: NodeId,
    pub(crate) origin: NodeId,
    /// The hops to write in its frame.
    pub(crate) hops: u8,
    pub(crate) to: NodeId,
    pub(crate) band: Arc<str>,
    pub(crate) event: Bytes,
    /// When it began to wait, ns.
    pub(crate) since: u64,
}

/// Most `ReliableTo` events waiting for a way on; at the bound the oldest
/// is failed back to its sender (which routes it again).
pub(crate) const MAX_PENDING_TO: usize = 65_536;
/// How long a `ReliableTo` waits for a way on before it is failed back to
/// its sender, ns.
pub(crate) const PENDING_TO_NS: u64 = 2_000_000_000;

type Fast = foldhash::fast::RandomState;

/// Counters shown with the links (`tagwire list --links --json`,
/// `federation.reliable`): kept in the listing's own type.
pub(crate) type Counters = tagwire_proto::admin::ReliableInfo;

/// The daemon's reliability state (in [`Federation`](super::federation::Federation)).
#[derive(Debug)]
pub(crate) struct Reliable {
    /// Whether any tag can be reliable (a daemon or tag layer says so).
    pub enabled: bool,
    /// Per tag (foldhash, seeded per process, like the windows: both are
    /// looked up per reliable event).
    pub(crate) cache: HashMap<Box<str>, bool, Fast>,
    /// Windows per link connection of version 3, and receive windows per
    /// client connection that publishes acknowledged (but see
    /// `checked_out`).
    pub conns: HashMap<u64, ConnRel, Fast>,
    /// The window of the client connection whose publish batch is being
    /// routed, taken out of `conns` by its first `PublishReliable` and put
    /// back at the batch's end (`reliable::client_batch_end`): the batch looks it
    /// up once, not two or three times per event. Only a client's window
    /// is ever here, and only while that connection's batch holds the
    /// state lock; what looks a connection up by id (acknowledgements,
    /// obligations settled) finds it with [`Reliable::conn_mut`].
    pub(crate) checked_out: Option<(u64, ConnRel)>,
    pub dedupe: Dedupe,
    /// Drops the events a client's library sends again after a reconnect
    /// that this daemon already routed: keyed by (session, publisher).
    pub publish_dedupe: Dedupe,
    pub(crate) limits: WindowLimits,
    pub(crate) full: WindowFull,
    pub counters: Counters,
    /// Dialed addresses that refused a link version: the version to say
    /// to each next time.
    pub downgraded: HashMap<String, u16>,
    /// Obligations the event being routed took on (dispatch's sink adds).
    pub obligations: u32,
    /// Upstream obligations to settle once the current event is routed.
    pub completions: Vec<(Upstream, bool)>,
    /// Large events in pieces: reassemblies and counters.
    pub fragments: super::fragment::Fragments,
    /// `ReliableTo` events waiting for a way on toward their daemon.
    pub(crate) pending_to: std::collections::VecDeque<PendingTo>,
    last_warning: Option<Instant>,
}

impl Reliable {
    /// Empty, with `[federation]`'s window bounds.
    pub(crate) fn new(config: &crate::config::FederationConfig) -> Self {
        Reliable {
            enabled: false,
            cache: HashMap::default(),
            conns: HashMap::default(),
            checked_out: None,
            dedupe: Dedupe::new(config.reliable_dedupe_keys),
            publish_dedupe: Dedupe::new(config.reliable_dedupe_keys),
            limits: WindowLimits {
                max_events: config.reliable_window_events,
                max_bytes: config.reliable_window_bytes,
            },
            full: match config.reliable_window_full {
                ReliableWindowFull::DropOldest => WindowFull::DropOldest,
                ReliableWindowFull::Reject => WindowFull::Reject,
            },
            counters: Counters::default(),
            downgraded: HashMap::new(),
            obligations: 0,
            completions: Vec::new(),
            fragments: super::fragment::Fragments::new(config),
            pending_to: std::collections::VecDeque::new(),
            last_warning: None,
        }
    }

    /// A link connection of version 3 or later came up: its windows (and,
    /// from version 4, pieces for large events).
    /// `lossy`: the connection loses frames (a UDP link): gaps wait and
    /// unacknowledged events are sent again.
    pub(crate) fn conn_up(
        &mut self,
        conn: u64,
        peer: NodeId,
        outbox: Arc<Outbox>,
        version: u16,
        lossy: bool,
    ) {
        // Pieces are for stream links: over UDP an event must fit one
        // datagram anyway.
        let piece = if version >= tagwire_proto::FRAGMENT_LINK_VERSION && !lossy {
            self.fragments.piece
        } else {
            0
        };
        self.conns.insert(
            conn,
            ConnRel {
                peer,
                client: false,
                outbox,
                send: SendWindow::new(self.limits, self.full),
                recv: RecvWindow::new(tagwire_proto::MAX_RELIABLE_WINDOW),
                lossy,
                piece,
                sending: None,
                reliable_to: version >= tagwire_proto::RELIABLE_TO_LINK_VERSION,
                compress_pieces: piece > 0 && version >= tagwire_proto::PIECE_COMPRESS_LINK_VERSION,
            },
        );
    }

    /// Remembers that the peer dialed at `addr` refused the version said
    /// to it: the next dial says one less (not below the oldest spoken).
    /// Returns (the refused version, the next).
    pub(crate) fn downgrade(&mut self, addr: &str) -> (u16, u16) {
        if self.downgraded.len() >= MAX_DOWNGRADED && !self.downgraded.contains_key(addr) {
            self.downgraded.clear();
        }
        let said = self
            .downgraded
            .get(addr)
            .copied()
            .unwrap_or(tagwire_proto::LINK_VERSION);
        let next = said.saturating_sub(1).max(tagwire_proto::MIN_LINK_VERSION);
        self.downgraded.insert(addr.to_owned(), next);
        (said, next)
    }

    /// Connection `conn`'s windows: the client connection checked out for
    /// its publish batch (one comparison), else from `conns`.
    pub(crate) fn conn_mut(&mut self, conn: u64) -> Option<&mut ConnRel> {
        match &mut self.checked_out {
            Some((c, cr)) if *c == conn => Some(cr),
            _ => self.conns.get_mut(&conn),
        }
    }

    /// Puts the checked-out client window (if any) back in `conns`.
    pub(crate) fn check_in(&mut self) {
        if let Some((conn, cr)) = self.checked_out.take() {
            self.conns.insert(conn, cr);
        }
    }

    /// At most one warning a second.
    pub(crate) fn warn_allowed(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last_warning
            .is_some_and(|t| now.duration_since(t).as_secs() < 1)
        {
            return false;
        }
        self.last_warning = Some(now);
        true
    }
}
