//! The `[metrics]` section and its checks: the data the configuration
//! holds. Serving it is the `metrics` module's.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::error::ConfigError;

/// The `[metrics]` section: the HTTP listener for Prometheus and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where to listen (`tagwired --metrics ADDR`); `None` (the default): no
    /// listener. Plain HTTP: a token sent to a non-loopback address crosses
    /// the network in clear.
    pub listen: Option<SocketAddr>,
    /// Serve `/metrics` without a token. Default `false`: a token with the
    /// admin right, like the dashboard.
    pub public: bool,
    /// Serve the dashboard (`/` and `/api/listing`). Default `true`.
    pub dashboard: bool,
    /// Most series per label kind (tags, channels, identities, links) and
    /// rows per dashboard table; the rest are summed into one `other`
    /// series. Default 50, at most 10,000.
    pub max_series: usize,
    /// Most HTTP connections at once; more are closed when accepted.
    /// Default 16, at most 1024.
    pub max_connections: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: None,
            public: false,
            dashboard: true,
            max_series: 50,
            max_connections: 16,
        }
    }
}

impl MetricsConfig {
    /// Checks ranges; `auth_enabled` is `[auth] enabled`.
    pub fn validate(&self, auth_enabled: bool) -> Result<(), ConfigError> {
        if !(1..=10_000).contains(&self.max_series) {
            return Err(ConfigError::Invalid(format!(
                "metrics.max_series = {} is outside 1..=10000",
                self.max_series
            )));
        }
        if !(1..=1024).contains(&self.max_connections) {
            return Err(ConfigError::Invalid(format!(
                "metrics.max_connections = {} is outside 1..=1024",
                self.max_connections
            )));
        }
        if let Some(addr) = self.listen.filter(|a| !a.ip().is_loopback()) {
            if !auth_enabled {
                return Err(ConfigError::Invalid(format!(
                    "metrics.listen = {addr} is not a loopback address, and [auth] enabled = false: \
                     without authentication the metrics listener serves loopback only"
                )));
            }
        }
        Ok(())
    }
}
