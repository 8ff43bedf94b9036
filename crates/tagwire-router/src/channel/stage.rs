//! A publish batch's deliveries ([`Staging`]): events routed while the
//! router's state is locked once for several publishes are queued per
//! channel afterwards, each channel's share under one lock of its queue.
//!
//! Per event, a channel's queue costs a lock, an unlock, a memory-budget
//! charge and a consumer count (each a locked instruction shared with the
//! subscriber's writer, on another lane perhaps); staged, each channel pays
//! them once per batch.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::event::{EventMeta, Outgoing};
use super::queue::{Channel, Offer, Staged};

/// Deliveries routed but not yet queued, grouped by channel in the order
/// they were routed. Bounded by its user: a batch ends after
/// [`MAX_STAGED`] deliveries at most (see `connection.rs`).
#[derive(Debug, Default)]
pub(crate) struct Staging {
    /// The channels of this batch, each with its events in order.
    channels: Vec<(Arc<Channel>, Vec<Staged>)>,
    /// Where each channel is in `channels` (by address).
    index: HashMap<usize, usize, foldhash::fast::RandomState>,
    /// The channel after the last one staged: consecutive events to one tag
    /// go to the same channels in the same order, so this is the usual hit.
    next: usize,
    /// Deliveries staged.
    len: usize,
    /// Emptied event lists, reused.
    spare: Vec<Vec<Staged>>,
    /// Refusals outside the channels' queues to report with the batch's
    /// (a full reliable window of a link, see `crate::reliable`).
    also_rejected: Vec<String>,
    /// The item staged last for a handed-over event (see
    /// [`Outgoing::hand_over`]), which waits for its bytes
    /// ([`hand_over`](Self::hand_over)): its channel and place in
    /// `channels`, and whether it was staged with the caller's bytes (not
    /// a copy made for an earlier channel).
    waiting: Option<(usize, usize, bool)>,
    /// When the events staged now arrived: the time of the read that
    /// brought them, ns since the Unix epoch (0: not known), for the
    /// channels' input jitter. Set by the caller per read.
    pub(crate) arrived: u64,
    /// An acknowledged publish was staged since the last flush: the flush
    /// looks whether a reliable subscription it fed is half full (see
    /// [`Channel::hold_back`]). Set by the caller.
    pub(crate) keep_all: bool,
    /// A reliable subscription the last flush found half full: the
    /// publisher waits for it before it reads on ([`take_held_back`](Self::take_held_back)).
    held_back: Option<Arc<Channel>>,
}

/// Deliveries a batch may stage before it must be flushed.
pub(crate) const MAX_STAGED: usize = 4096;

impl Staging {
    /// Prepares `event` for `ch` (see [`Channel::prepare`]) and stages it.
    pub(crate) fn offer(&mut self, ch: &Arc<Channel>, event: &mut Outgoing, meta: &EventMeta) {
        if event.hand_over {
            if let Some((c, i, _)) = self.waiting.take() {
                // A handed-over event staged again: the item before takes a
                // reference of its own now, before this channel may replace
                // the event's bytes with a copy. (Another event staged
                // meanwhile — a channel's transformed or re-encoded copy —
                // leaves it waiting.)
                self.channels[c].1[i].set_event(event.bytes().clone());
            }
        }
        let Some(staged) = ch.prepare(event, meta) else {
            return;
        };
        let key = Arc::as_ptr(ch) as usize;
        let at = match self.channels.get(self.next) {
            Some((c, _)) if Arc::as_ptr(c) as usize == key => self.next,
            _ => match self.index.get(&key) {
                Some(&i) => i,
                None => {
                    let i = self.channels.len();
                    self.index.insert(key, i);
                    let list = self.spare.pop().unwrap_or_default();
                    self.channels.push((ch.clone(), list));
                    i
                }
            },
        };
        self.channels[at].1.push(staged);
        if event.hand_over {
            self.waiting = Some((at, self.channels[at].1.len() - 1, event.is_borrowed()));
        }
        self.next = if at + 1 == self.channels.len() {
            0
        } else {
            at + 1
        };
        self.len += 1;
    }

    /// Ends the routing of a handed-over event (see
    /// [`Outgoing::hand_over`]): the item staged last for it gets the
    /// caller's bytes (`original`, taken) if it was staged with them, else
    /// the copy the event made of them (`copy`, from
    /// [`Outgoing::into_owned`]). No reference is taken or dropped. With no
    /// such item (no channel took the event), nothing happens.
    #[inline(always)]
    pub(crate) fn hand_over(&mut self, copy: Option<Bytes>, original: &mut Bytes) {
        let Some((c, i, borrowed)) = self.waiting.take() else {
            return;
        };
        let bytes = match copy {
            Some(copy) if !borrowed => copy,
            _ => std::mem::take(original),
        };
        self.channels[c].1[i].set_event(bytes);
    }

    /// Reports `who` to the publisher with this batch's refusals.
    pub(crate) fn also_rejected(&mut self, who: String) {
        if self.also_rejected.len() < 16 {
            self.also_rejected.push(who);
        }
    }

    /// The reliable subscription an acknowledged publisher must wait for
    /// before it reads on (DDS's `KEEP_ALL`: held back, not dropped), if
    /// the last flush found one half full.
    pub(crate) fn take_held_back(&mut self) -> Option<Arc<Channel>> {
        self.held_back.take()
    }

    /// Deliveries staged and not yet queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Queues every staged delivery, one lock per channel; returns the
    /// subscribers whose full `reject` queue refused one and should be
    /// reported to the publisher ("endpoint (pattern)").
    pub(crate) fn flush(&mut self) -> Option<Vec<String>> {
        if let Some((c, i, _)) = self.waiting.take() {
            // A caller that handed an event over did not give its bytes (a
            // bug): that item is not queued empty.
            debug_assert!(false, "a handed-over event's bytes were not given");
            self.channels[c].1.remove(i);
            self.len -= 1;
        }
        let mut reject: Option<Vec<String>> =
            (!self.also_rejected.is_empty()).then(|| std::mem::take(&mut self.also_rejected));
        let keep_all = std::mem::take(&mut self.keep_all);
        for (ch, mut list) in self.channels.drain(..) {
            if let Offer::Rejected { report: true } = ch.push_staged(list.drain(..), self.arrived) {
                reject
                    .get_or_insert_with(Vec::new)
                    .push(format!("{} ({})", ch.endpoint, ch.pattern));
            }
            if keep_all && self.held_back.is_none() && ch.hold_back() {
                self.held_back = Some(ch.clone());
            }
            if self.spare.len() < 64 {
                self.spare.push(list);
            }
        }
        self.index.clear();
        self.next = 0;
        self.len = 0;
        reject
    }
}
