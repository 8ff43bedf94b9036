//! What an admin request answers: a reply to send at once, or once the
//! routes have settled.

/// An admin reply, as the JSON body of its frame: to send at once, or once
/// the routes have settled (a session-level change re-places the session's
/// channels in slices first).
#[derive(Debug)]
pub(crate) enum Reply {
    Now(String),
    WhenSettled(String),
}
