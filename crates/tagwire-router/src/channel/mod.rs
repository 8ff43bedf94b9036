//! Channels (one subscription's delivery path) and the per-connection outbox
//! that batches their frames into vectored writes.
//!
//! A channel owns a bounded queue of encoded events. The outbox lists
//! channels with queued events and control frames (replies, errors); the
//! connection's writer drains it round-robin, at most
//! [`BATCH_EVENTS`](outbox::BATCH_EVENTS) events or
//! [`BATCH_BYTES`](outbox::BATCH_BYTES) bytes per `writev`.
//!
//! **Ownership.** The router's tables (`State::channels`, the routes) are the
//! only strong owners of a channel; an outbox's ready list holds it weakly.
//! So a channel, and every event in its queue, is freed the moment it leaves
//! the tables, whatever its connection's writer is doing — there is no
//! channel → outbox → channel cycle for a forgotten path to leave behind.
//!
//! **What a queued event keeps alive.** Events arrive as slices of a
//! connection's read buffer ([`READ_CHUNK`] bytes, shared by every frame read
//! into it), and a queued slice keeps that whole buffer alive. The rules:
//! - A channel whose queue is empty, or holds only slices of the read being
//!   handled now, queues a small event as a slice (no copy: the hot path of
//!   a subscriber that keeps up), and holds one [`READ_CHUNK`] of the
//!   memory budget for that read's buffer until its queue is empty again.
//!   So a queue's slices of small events pin at most one read buffer.
//! - A channel that is behind (its queue holds events from earlier reads)
//!   gets a copy: the event smaller than [`COPY_BELOW`](event::COPY_BELOW)
//!   is copied once into a buffer of its own size, and the copy is shared
//!   by every other channel that gets the event (no per-subscriber copy).
//! - An event of [`COPY_BELOW`](event::COPY_BELOW) bytes or more stays a
//!   slice and is counted at what it can keep alive: the whole chunk (at
//!   most twice its size), or, for a frame read into a buffer of its own,
//!   its own size.
//!
//! Each queue counts every event it holds at that size plus
//! [`QUEUED_OVERHEAD`](event::QUEUED_OVERHEAD), against its own byte bound
//! and the router-wide memory budget.
//!
//! **Layout.** One concept a file:
//! - `event`: an event on its way to channels ([`Outgoing`]), what a channel
//!   needs to know of it ([`EventMeta`]) and the queued item, with the
//!   memory-accounting constants above;
//! - `queue`: the [`Channel`] itself: its bounded queue, QoS, scaling and
//!   what [`Channel::offer`] does with an event;
//! - `jitter`: the RFC 3550 jitter of each channel's input and output;
//! - `stage`: a publish batch's deliveries ([`Staging`]), queued per
//!   channel under one lock;
//! - `transform`: a channel's spatial scaling plug-in ([`ChannelTransform`]);
//! - `outbox`: a connection's [`Outbox`] and its writer, which drains the
//!   ready channels into vectored writes.

mod acked;
pub(crate) mod event;
mod jitter;
mod outbox;
mod queue;
mod stage;
#[cfg(test)]
mod tests;
mod transform;

pub(crate) use event::{EventMeta, Outgoing, READ_CHUNK};
pub(crate) use outbox::Outbox;
#[cfg(test)]
pub(crate) use queue::Offer;
pub(crate) use queue::{Channel, Destination};
pub(crate) use stage::{Staging, MAX_STAGED};
pub(crate) use transform::ChannelTransform;
