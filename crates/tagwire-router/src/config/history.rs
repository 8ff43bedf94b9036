//! The history bounds the configuration and `tagwire admin qos` are checked
//! against (`limits.max_history` and the pull reply bounds).

use tagwire_core::qos::{resolve, Property, QosLayer};
use tagwire_proto::ErrorCode;

use super::RouterConfig;

/// Refuses a daemon or tag layer whose `history` is over
/// `limits.max_history`, naming the bound.
pub(crate) fn check_layer(
    config: &RouterConfig,
    layer: &QosLayer,
) -> Result<(), (ErrorCode, String)> {
    if !layer.is_set(Property::History) {
        return Ok(());
    }
    let n = resolve(&[layer]).values().history;
    let max = config.limits.max_history;
    if n > max {
        return Err((
            ErrorCode::BadRequest,
            format!("history={n} is over this daemon's bound of {max} events (limits.max_history)"),
        ));
    }
    Ok(())
}

/// Checks the configuration's history bounds and `[qos] history`.
pub(crate) fn validate_config(config: &RouterConfig, daemon: &QosLayer) -> Result<(), String> {
    let l = &config.limits;
    if l.max_history > tagwire_core::history::MAX_HISTORY {
        return Err(format!(
            "limits.max_history = {} is over the hard bound of {}",
            l.max_history,
            tagwire_core::history::MAX_HISTORY
        ));
    }
    if l.history_reply_events == 0
        || l.history_reply_bytes == 0
        || l.max_history_publishers_per_tag == 0
    {
        return Err("limits.history_reply_events, limits.history_reply_bytes and limits.max_history_publishers_per_tag must be at least 1".into());
    }
    check_layer(config, daemon).map_err(|(_, m)| format!("[qos]: {m}"))
}
