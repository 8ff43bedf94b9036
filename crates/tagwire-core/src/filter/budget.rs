//! The work budget of one event's filter evaluations (issue 24 item 9):
//! every node a filter visits and every byte a matcher reads is counted in
//! *work units*, summed over all the filters [`Routes::route`] evaluates for
//! one event, and bounded by [`FilterLimits::max_event_work`]. Counting
//! units, not time, keeps the bound deterministic (and testable); the units
//! are weighted so that one unit costs about a nanosecond or less in the
//! worst case measured for its kind (BENCHMARKS.md, "Filter cost under
//! adversarial filters").
//!
//! [`Routes::route`]: crate::route::Routes::route
//! [`FilterLimits::max_event_work`]: super::FilterLimits::max_event_work

use std::cell::Cell;

/// A meter that never runs out (stand-alone filter evaluation).
pub(crate) const UNLIMITED: u64 = u64::MAX;

/// Units per node visited (a literal, a field lookup — a binary search of
/// at most 256 names —, an operator): a node of a filter tree that no
/// cache holds is a cache miss (~60 ns measured here with 16,000 filters of
/// 60 comparisons each, BENCHMARKS.md `node_heavy`).
pub(crate) const NODE_UNITS: u64 = 64;

/// Units per byte a regex's DFA reads: one transition from a table row
/// the cache holds.
pub(crate) const REGEX_BYTE_UNITS: u64 = 2;

/// Units per cache miss a regex's DFA may take: a transition to a row no
/// cache holds (DRAM, and a TLB miss: ~400 ns measured here with 128 DFAs
/// of 131 KB each, 16 MB in all). One search takes at most one miss per
/// byte it reads and one per cache line of the DFA's tables.
pub(crate) const REGEX_MISS_UNITS: u64 = 512;

/// Units per byte of subject and needle of `~` (memchr's `memmem`: building
/// the searcher reads the needle a few times, searching reads the subject;
/// 3.4–5.6 ns per byte measured here with 1 KiB needles that almost
/// match, under load).
pub(crate) const FIND_BYTE_UNITS: u64 = 8;

/// Units per `~` besides its bytes: building the searcher for its needle.
pub(crate) const FIND_CALL_UNITS: u64 = 64;

/// Units per window the literal index looks up in an event string (a hash
/// probe).
pub(crate) const GRAM_PROBE_UNITS: u64 = 16;

/// Bytes of a string comparison (or `~^`) per unit.
pub(crate) const COMPARE_BYTES_PER_UNIT: usize = 8;

/// Units of a regex search of `len` bytes in a DFA whose tables span
/// `lines` cache lines.
pub(crate) fn regex_units(len: usize, lines: usize) -> u64 {
    let misses = len.min(lines) as u64;
    (len as u64)
        .saturating_mul(REGEX_BYTE_UNITS)
        .saturating_add(misses.saturating_mul(REGEX_MISS_UNITS))
}

/// Units of a `~` of a needle of `needle` bytes in `len` bytes.
pub(crate) fn find_units(len: usize, needle: usize) -> u64 {
    (len as u64)
        .saturating_add(needle as u64)
        .saturating_mul(FIND_BYTE_UNITS)
        .saturating_add(FIND_CALL_UNITS)
}

/// Units of `windows` probes of the literal index.
pub(crate) fn gram_units(windows: usize) -> u64 {
    (windows as u64).saturating_mul(GRAM_PROBE_UNITS)
}

/// Units of a comparison that reads `len` bytes of each side.
pub(crate) fn compare_units(len: usize) -> u64 {
    len.div_ceil(COMPARE_BYTES_PER_UNIT) as u64
}

/// What one event's evaluations may still spend.
#[derive(Debug)]
pub(crate) struct Meter {
    left: Cell<u64>,
    used: Cell<u64>,
    over: Cell<bool>,
}

impl Meter {
    /// A meter holding `budget` units.
    pub(crate) fn new(budget: u64) -> Self {
        Meter {
            left: Cell::new(budget),
            used: Cell::new(0),
            over: Cell::new(false),
        }
    }

    /// Takes `units` for work about to be done: false, and the meter is
    /// over from then on, if fewer are left (the work is then not done).
    #[inline]
    pub(crate) fn take(&self, units: u64) -> bool {
        let left = self.left.get();
        if units > left || self.over.get() {
            self.over.set(true);
            return false;
        }
        self.left.set(left - units);
        self.used.set(self.used.get() + units);
        true
    }

    /// Whether some work was refused: the budget is spent.
    pub(crate) fn is_over(&self) -> bool {
        self.over.get()
    }

    /// Units taken so far.
    pub(crate) fn used(&self) -> u64 {
        self.used.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_refuses_what_exceeds_it_and_stays_over() {
        let m = Meter::new(10);
        assert!(m.take(4));
        assert!(m.take(6));
        assert!(!m.is_over());
        assert!(!m.take(1), "nothing is left");
        assert!(m.is_over());
        assert!(!m.take(0), "once over, even free work is refused");
        assert_eq!(m.used(), 10);
        let m = Meter::new(5);
        assert!(!m.take(6), "work larger than what is left is not started");
        assert_eq!(m.used(), 0);
    }

    #[test]
    fn units_saturate_instead_of_overflowing() {
        assert_eq!(regex_units(usize::MAX, usize::MAX), u64::MAX);
        assert_eq!(
            regex_units(1024, 10),
            1024 * REGEX_BYTE_UNITS + 10 * REGEX_MISS_UNITS
        );
        assert_eq!(
            regex_units(100, 1 << 20),
            100 * (REGEX_BYTE_UNITS + REGEX_MISS_UNITS)
        );
        assert_eq!(find_units(usize::MAX, 1), u64::MAX);
        assert_eq!(compare_units(17), 3);
        assert_eq!(
            find_units(1024, 18),
            (1024 + 18) * FIND_BYTE_UNITS + FIND_CALL_UNITS
        );
    }
}
