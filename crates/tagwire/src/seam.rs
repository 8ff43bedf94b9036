//! The seam between a replay and live events (see `replay`): while a
//! replay runs, the subscription's live events are held here (at most
//! [`MAX_HELD`]); when the replay is done, those it did not replay go out
//! and the seam passes events through.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::deliver::Deliver;
use crate::sample::Sample;
use crate::sync::lock;

/// Live events held while a replay runs; past it they are dropped and
/// read back from the store.
pub const MAX_HELD: usize = 65_536;

struct SeamState {
    live: bool,
    held: VecDeque<Sample>,
    overflowed: bool,
}

/// The sink of a subscription while it replays: holds live events until
/// the replay is done, then hands on to `D` (the application's sink, or a
/// resume).
pub(crate) struct Seam<D> {
    state: Mutex<SeamState>,
    pub(crate) inner: Arc<D>,
}

impl<D: Deliver> Seam<D> {
    pub(crate) fn new(inner: Arc<D>) -> Arc<Seam<D>> {
        Arc::new(Seam {
            state: Mutex::new(SeamState {
                live: false,
                held: VecDeque::new(),
                overflowed: false,
            }),
            inner,
        })
    }

    /// A live event.
    pub(crate) fn offer(&self, sample: Sample) {
        let mut st = lock(&self.state);
        if st.live {
            drop(st);
            return self.inner.deliver_sample(sample);
        }
        if st.held.len() >= MAX_HELD {
            st.held.clear();
            st.overflowed = true;
        }
        st.held.push_back(sample);
    }

    /// Ends the replay: the held events newer than `last` (per publisher)
    /// go out, and the seam passes events through from now on. False if
    /// held events were dropped since the last call (read on from the
    /// store first).
    pub(crate) fn finish(&self, last: &HashMap<String, u64>) -> bool {
        let mut st = lock(&self.state);
        if std::mem::take(&mut st.overflowed) {
            return false;
        }
        self.go_live(&mut st, last);
        true
    }

    /// Ends the replay whatever it got: the held events go out (the
    /// dedupe behind a resume drops what was delivered already).
    pub(crate) fn force_live(&self) {
        let mut st = lock(&self.state);
        st.overflowed = false;
        self.go_live(&mut st, &HashMap::new());
    }

    /// Hands over the held events newer than `last` (per publisher), then
    /// passes events through (`st` locked, so no live one comes between).
    fn go_live(&self, st: &mut SeamState, last: &HashMap<String, u64>) {
        for s in st.held.drain(..) {
            let ev = s.event();
            if last.get(ev.publisher).is_some_and(|l| ev.seq <= *l) {
                continue; // replayed already
            }
            self.inner.deliver_sample(s);
        }
        st.live = true;
    }
}
