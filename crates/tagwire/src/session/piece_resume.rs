//! Where the daemon said a publish in pieces may resume (`PieceResume`),
//! bounded; read when the publish is written again after a reconnect.

use std::collections::HashMap;

/// Resume points the daemon sent (`PieceResume`), by event id.
#[derive(Debug, Default)]
pub(crate) struct ResumePoints(HashMap<u64, u64>);

impl ResumePoints {
    /// Most remembered (a daemon cannot make the map grow).
    const MAX: usize = 64;

    pub(crate) fn set(&mut self, id: u64, have: u64) {
        if self.0.len() >= Self::MAX && !self.0.contains_key(&id) {
            self.0.clear();
        }
        self.0.insert(id, have);
    }

    pub(super) fn take(&mut self, id: u64) -> Option<u64> {
        self.0.remove(&id)
    }
}
