//! Admin requests and replies: JSON documents carried by `Admin` and
//! `AdminReply` frames (listed in `docs/admin.md`). Admin work runs on the
//! lane like everything else for now; the priority-lanes work moves it to the
//! lowest-priority lane.

use serde::{Deserialize, Serialize};

/// An admin request, tagged by `op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum AdminRequest {
    /// Lists connections, endpoints, subscriptions and tags.
    List,
}

/// The reply to [`AdminRequest::List`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The router's name.
    pub server: String,
    /// Open client connections.
    pub connections: Vec<ConnectionInfo>,
    /// Registered endpoints.
    pub endpoints: Vec<EndpointEntry>,
    /// Subscriptions with their queue state.
    pub subscriptions: Vec<SubscriptionInfo>,
    /// Tags published so far (up to the tracking limit).
    pub tags: Vec<TagInfo>,
    /// Publishes on tags beyond the tracking limit.
    pub untracked_publishes: u64,
    /// Events dropped because they had expired on arrival.
    pub expired: u64,
}

/// One client connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionInfo {
    /// Router-local id.
    pub id: u64,
    /// The client's name from `Hello`.
    pub name: String,
    /// Peer address.
    pub peer: String,
}

/// One endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointEntry {
    /// Its name.
    pub name: String,
    /// `publisher` or `subscriber`.
    pub kind: String,
    /// Owning connection id.
    pub connection: u64,
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionInfo {
    /// The subscriber endpoint.
    pub endpoint: String,
    /// The pattern.
    pub pattern: String,
    /// Events waiting in its queue.
    pub queue_depth: usize,
    /// Its queue bound.
    pub queue_bound: usize,
    /// Its discard policy.
    pub discard: String,
    /// Events dropped by the discard policy.
    pub dropped: u64,
    /// Events written to the subscriber.
    pub delivered: u64,
}

/// One tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagInfo {
    /// The tag.
    pub tag: String,
    /// Events published on it.
    pub published: u64,
    /// The last publisher endpoint.
    pub last_publisher: String,
}
