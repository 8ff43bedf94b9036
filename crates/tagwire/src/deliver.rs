//! What a stage of a subscription's sink chain hands events on to: the
//! application's sink (`Sink`, in `sink.rs`) or, behind a resume's
//! seam, the resume. The stages (seam, playout, resume) are generic over
//! it, so they stand below the sink that holds them; each is used with
//! one or two types only, so every call is a direct one.

use crate::error::Error;
use crate::sample::Sample;

/// The sink behind a stage.
pub(crate) trait Deliver: Send + Sync + 'static {
    /// Hands over a checked sample.
    fn deliver_sample(&self, sample: Sample);
    /// Waits until the application's queue behind this has room (a replay
    /// thread, before it hands over a stored event).
    fn wait_for_room(&self);
    /// The subscription ended.
    fn close(&self);
    /// The subscription ended with `error`.
    fn fail(&self, error: Error);
}
