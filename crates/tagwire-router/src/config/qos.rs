//! The daemon-level QoS layer, parsed from the configuration's `[qos]`
//! table.

use tagwire_core::qos::{Level, QosLayer};

/// The daemon layer from the `[qos]` table of the configuration.
pub(crate) fn daemon_layer(
    table: &std::collections::BTreeMap<String, String>,
    bands: &[String],
) -> Result<QosLayer, String> {
    QosLayer::parse(
        Level::Daemon,
        table.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        bands,
    )
    .map_err(|e| format!("[qos]: {e}"))
}
