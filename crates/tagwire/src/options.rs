//! What a session is opened with ([`SessionBuilder`](crate::SessionBuilder)
//! fills it in), the defaults of its bounds, and the priority band a
//! session's connection may belong to: data that every layer of the
//! library reads and none changes.

use std::time::Duration;

use crate::tls::TlsOptions;

/// How long a request (declare, subscribe, admin) waits for its reply.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Default bound of the acknowledged-publishing window: events held unacknowledged.
pub const DEFAULT_ACK_WINDOW_EVENTS: usize = 65_536;
/// Default bound of the acknowledged-publishing window: bytes of the events held.
pub const DEFAULT_ACK_WINDOW_BYTES: usize = 64 << 20;
/// Default longest wait of a publish for room in a full acknowledged-publishing window.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings fixed when a session opens.
#[derive(Clone)]
pub(crate) struct Options {
    pub connect_timeout: Duration,
    pub reconnect_wait: Duration,
    /// The token to present; `None`: `TAGWIRE_TOKEN`, or the local token
    /// file for a daemon on loopback (see `docs/security.md`).
    pub token: Option<String>,
    /// TLS settings for a `tls://` URL; `None`: from the environment.
    pub tls: Option<TlsOptions>,
    /// The priority band this session's connection belongs to (`None`: the
    /// listener's own, the router's default band).
    pub band: Option<ClientBand>,
    /// The session id to present (band sessions share their parent's, so
    /// the router lets them publish under the parent's endpoint names).
    pub session_id: Option<[u8; tagwire_proto::SESSION_ID_LEN]>,
    /// Client-propagated priority: each event travels on the band of its
    /// priority (see [`SessionBuilder::follow_priority`](crate::SessionBuilder::follow_priority)).
    pub follow_priority: bool,
    /// Stamp events with the daemons' network time (see
    /// [`SessionBuilder::network_clock`](crate::SessionBuilder::network_clock)).
    pub network_clock: bool,
    /// The default `shm` mode of this session's publishers and subscriptions.
    pub shm: tagwire_core::qos::ShmMode,
    /// Under `shm=auto`: payloads smaller than this go over the socket.
    pub shm_threshold: usize,
    /// Acknowledged publishing: the window's bounds and the longest wait
    /// for room in it (see [`SessionBuilder::ack_window`](crate::SessionBuilder::ack_window)).
    pub ack_window: tagwire_core::reliable::WindowLimits,
    pub ack_timeout: Duration,
    /// The largest frame this session offers the daemon (see
    /// [`SessionBuilder::max_frame`](crate::SessionBuilder::max_frame)).
    pub max_frame: u32,
}

/// A session on a priority band: its connection is marked with the band's
/// DSCP and read by a thread with the band's scheduling.
#[derive(Debug, Clone)]
pub(crate) struct ClientBand {
    pub name: String,
    pub dscp: u8,
    pub sched: tagwire_router::priority::SchedPolicy,
    /// The CPUs the band's lane is pinned to (`[[bands]] cpus`): the
    /// band's reader thread is pinned to them too.
    pub cpus: Option<tagwire_router::priority::CpuList>,
}

impl ClientBand {
    /// Runs the calling thread at the band's scheduling and on its CPUs, as
    /// the router's lane does (TAO §4.2): the reader thread, and the UDP
    /// pump threads that carry the band's datagrams. `what` names the
    /// thread in the warning when the policy cannot be had.
    pub(crate) fn apply_to_current_thread(&self, what: &str) {
        use tagwire_router::priority::{apply_affinity, apply_sched, Applied};
        match apply_sched(self.sched) {
            Ok(Applied::FellBack { reason, got, .. }) => tracing::warn!(
                "band {}: the {what} cannot run {} ({reason}); running {got}",
                self.name,
                self.sched
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "band {}: scheduling {} not applied: {e}",
                self.name,
                self.sched
            ),
        }
        // On the band's CPUs too, so a real-time band's client work stays
        // off the CPUs that carry bulk traffic.
        if let Some(cpus) = &self.cpus {
            if let Err(e) = apply_affinity(cpus) {
                tracing::warn!(
                    "band {}: the {what} cannot be pinned to CPUs {cpus} ({e})",
                    self.name
                );
            }
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_wait", &self.reconnect_wait)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("tls", &self.tls)
            .finish()
    }
}
