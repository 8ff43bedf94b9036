//! A channel's spatial scaling plug-in: the transform it runs on each
//! event's payload before queueing (`transform=downscale:2`).

use std::sync::Arc;

/// A channel's spatial scaling plug-in and its parameters.
#[derive(Debug, Clone)]
pub(crate) struct ChannelTransform {
    /// The plug-in.
    pub plugin: Arc<dyn tagwire_core::proxy::Transform>,
    /// Its parameters.
    pub params: Arc<str>,
    /// The whole spec (`downscale:2`): events transformed for one spec are
    /// shared by every channel with that spec.
    pub spec: Arc<str>,
}
