//! The `[udp]` section: the UDP listener (`udp://HOST:PORT` clients) and its
//! bounds. Running it is [`crate::udp`]'s.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::error::ConfigError;

/// The `[udp]` section. Off unless `listen` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpConfig {
    /// Listen address of the default band (`tagwired --udp ADDR`); the
    /// other bands listen on the same IP, port chosen by the OS (`tagwire
    /// list` shows them). `None`: no UDP.
    pub listen: Option<SocketAddr>,
    /// Largest datagram sent or taken (header and frames), bytes: a frame
    /// larger than fits is not sent (a publish is refused by the client, a
    /// delivery dropped and counted in `too_large`).
    pub max_datagram: usize,
    /// Most UDP sessions at once (per band); an `Open` past it is dropped
    /// and counted, and the client's connect times out.
    pub max_sessions: usize,
    /// Datagrams queued from the socket to one session's connection; past
    /// it a datagram is dropped and counted (`overrun`).
    pub queue: usize,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            listen: None,
            max_datagram: tagwire_proto::datagram::DEFAULT_MAX_DATAGRAM,
            max_sessions: 1024,
            queue: 256,
        }
    }
}

impl UdpConfig {
    /// Checks the bounds and, without authentication, the loopback rule.
    pub fn validate(&self, auth_enabled: bool) -> Result<(), ConfigError> {
        let Some(addr) = self.listen else {
            return Ok(());
        };
        tagwire_proto::datagram::validate_max_datagram(self.max_datagram)
            .map_err(|m| ConfigError::Invalid(format!("udp.{m}")))?;
        for (name, v) in [("max_sessions", self.max_sessions), ("queue", self.queue)] {
            if v == 0 {
                return Err(ConfigError::Invalid(format!(
                    "udp.{name} = 0: it must be at least 1"
                )));
            }
        }
        if !auth_enabled && !addr.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "udp.listen = {addr} is not a loopback address, and [auth] enabled = false: \
                 without authentication the daemon listens on loopback only"
            )));
        }
        Ok(())
    }
}
