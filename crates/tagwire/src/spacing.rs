//! How fast a replay hands its stored events over.

use std::time::Duration;

/// Longest pause `Spacing::Original` makes between two replayed events.
pub const MAX_GAP: Duration = Duration::from_secs(10);

/// How fast replayed events are handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spacing {
    /// As fast as they arrive (the default).
    #[default]
    Fast,
    /// With the publisher's spacing: each replayed event is handed over at
    /// the first one's hand-over time plus the difference of their source
    /// times (the time-differential service's rule, `tagwire_core::tds::Spacer`,
    /// with no playout delay), so the spacing does not drift; a gap over
    /// [`MAX_GAP`] is shortened to it.
    Original,
}
