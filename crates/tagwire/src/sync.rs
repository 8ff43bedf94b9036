//! The mutex helper every layer uses: a poisoned lock (a thread panicked
//! while holding it) is taken anyway, since the data it guards stays
//! consistent between the library's own steps.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the
/// state it guards stays consistent: every critical section is short).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
