//! The `[mqtt]` section and its checks: the data the configuration holds.
//! Running the listener is the `mqtt` module's.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::auth::AuthConfig;
use crate::config::error::ConfigError;

/// The `[mqtt]` section: where the MQTT listener listens and its bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// Listen address (`tagwired --mqtt ADDR`); `None`: no MQTT listener.
    pub listen: Option<SocketAddr>,
    /// Most MQTT connections at once; past it a new connection is closed
    /// at once (and logged).
    pub max_connections: usize,
    /// Largest MQTT packet accepted (remaining length, bytes); a larger one
    /// fails its connection (MQTT 5: DISCONNECT 0x95).
    pub max_packet: usize,
    /// Deliveries queued per connection for its client; at the bound the
    /// oldest QoS 0 one is dropped, and with none left the connection stops
    /// reading its deliveries from the router until the client catches up.
    pub queue_length: usize,
    /// The same bound in payload bytes.
    pub queue_bytes: usize,
    /// QoS 1 deliveries in flight (unacknowledged) per connection; an MQTT
    /// 5 client's smaller receive maximum wins.
    pub inflight: u16,
    /// Subscriptions (filters) per connection.
    pub max_subscriptions: usize,
    /// The longest keep alive, seconds: a client asking for 0 (none) or
    /// more gets this one (MQTT 5 is told so in CONNACK).
    pub max_keep_alive: u16,
    /// Seconds a new connection has to send CONNECT.
    pub connect_timeout: u64,
    /// An `[[auth.tokens]]` name: clients that send no password connect as
    /// `token:NAME`. Unset (the default): no password, no connection.
    pub anonymous: Option<String>,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            listen: None,
            max_connections: 1024,
            max_packet: 1024 * 1024,
            queue_length: 1024,
            queue_bytes: 8 * 1024 * 1024,
            inflight: 32,
            max_subscriptions: 256,
            max_keep_alive: 600,
            connect_timeout: 10,
            anonymous: None,
        }
    }
}

impl MqttConfig {
    /// Checks the bounds, the anonymous token and the loopback rule.
    pub fn validate(&self, auth: &AuthConfig) -> Result<(), ConfigError> {
        let Some(addr) = self.listen else {
            return Ok(());
        };
        for (name, v) in [
            ("max_connections", self.max_connections),
            ("max_packet", self.max_packet),
            ("queue_length", self.queue_length),
            ("queue_bytes", self.queue_bytes),
            ("inflight", self.inflight as usize),
            ("max_subscriptions", self.max_subscriptions),
            ("max_keep_alive", self.max_keep_alive as usize),
            ("connect_timeout", self.connect_timeout as usize),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid(format!(
                    "mqtt.{name} = 0: it must be at least 1"
                )));
            }
        }
        if self.max_packet > 256 * 1024 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "mqtt.max_packet = {} is over MQTT's 268435455",
                self.max_packet
            )));
        }
        if !addr.ip().is_loopback() && !auth.enabled {
            return Err(ConfigError::Invalid(format!(
                "mqtt.listen = {addr} is not a loopback address, and [auth] enabled = false: \
                 without authentication the daemon listens on loopback only"
            )));
        }
        if let Some(name) = &self.anonymous {
            if !auth.tokens.iter().any(|t| &t.name == name) {
                return Err(ConfigError::Invalid(format!(
                    "mqtt.anonymous = {name:?}: no [[auth.tokens]] entry has that name"
                )));
            }
        }
        Ok(())
    }

    /// The secret of the `anonymous` token, read like the router reads it.
    pub(crate) fn anonymous_secret(
        &self,
        auth: &AuthConfig,
    ) -> Result<Option<String>, ConfigError> {
        let Some(name) = &self.anonymous else {
            return Ok(None);
        };
        let Some(t) = auth.tokens.iter().find(|t| &t.name == name) else {
            return Err(ConfigError::Invalid(format!(
                "mqtt.anonymous = {name:?}: no [[auth.tokens]] entry has that name"
            )));
        };
        match (&t.token, &t.file) {
            (Some(s), _) => Ok(Some(s.clone())),
            (None, Some(f)) => std::fs::read_to_string(f)
                .map(|s| Some(s.trim().to_owned()))
                .map_err(|e| {
                    ConfigError::Invalid(format!(
                        "mqtt.anonymous: cannot read token file {}: {e}",
                        f.display()
                    ))
                }),
            (None, None) => Err(ConfigError::Invalid(format!(
                "mqtt.anonymous = {name:?}: the token has no secret"
            ))),
        }
    }
}
