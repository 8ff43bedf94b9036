//! `tagwire-core` — the pure logic of tagwire: no sockets, no threads, no
//! clocks (time, where needed, is an argument).
//!
//! - [`datagram`]: the UDP transport's sequence window (loss, reordering)
//!   and the packer that cuts frames into datagrams.
//! - [`tags`]: tag and pattern syntax, and the [`TagTable`](tags::TagTable)
//!   trie that finds the subscriptions matching a tag.
//! - [`queue`]: bounded per-subscriber queues with order, discard and
//!   expiry policies.
//! - [`defer`]: events held until their start time.
//! - [`endpoint`]: the registry of named endpoints.
//! - [`qos`]: the QoS properties, their levels (daemon, tag, session,
//!   channel, event) and their resolution into a channel's effective QoS.
//! - [`filter`]: the content-filter language, mapping filters, TAO's filter
//!   levels and the indexed matcher for many content subscriptions.
//! - [`proxy`]: temporal scaling proxies (1 of n events, a minimum interval).
//! - [`node`]: the node engine — what one daemon decides (routing to local
//!   channels and links, adverts, start times, pulls over links), as values.
//! - [`route`]: where an event goes — patterns, filter levels and the index
//!   in one table, used by the router for every publish.
//! - [`bandwidth`]: bandwidth reservations (`reserve=RATE`): rate parsing,
//!   admission (sum ≤ capacity, bounded count) and traffic-class ids.
//! - [`reliable`]: hop-by-hop acknowledgement windows over links (sender
//!   retransmit buffer, receiver reorder and custody acknowledgements) and
//!   the dedupe window of `reliability=reliable`.
//! - [`compress`]: per-tag compression of events on links (lz4, zstd) and
//!   the bounded decompressor.
//! - [`fragment`]: fragmentation and resumable, bounded reassembly of
//!   payloads larger than a frame.
//! - [`store`]: the durable store's record format, retention rule and
//!   replay start (`reliability=durable`).
//! - [`tds`]: time services — the buffering service (time-ordering by
//!   source time) and the time-differential playout that keeps spacing.
//!
//! ```
//! use tagwire_core::tags::{Pattern, TagTable};
//! let mut table = TagTable::default();
//! table.insert(1, Pattern::parse("/demo/**").unwrap(), "viewer");
//! assert_eq!(&*table.matches("/demo/x"), &["viewer"]);
//! ```

pub mod bandwidth;
pub mod bytelog;
pub mod compress;
pub mod connection;
pub mod datagram;
pub mod defer;
pub mod endpoint;
pub mod federation;
pub mod filter;
pub mod fragment;
pub mod history;
pub mod multicast;
pub mod node;
pub mod proxy;
pub mod qos;
pub mod queue;
pub mod reliable;
pub mod route;
pub mod store;
pub mod tags;
pub mod tds;
