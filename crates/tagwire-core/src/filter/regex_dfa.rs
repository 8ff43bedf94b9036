//! Regular expressions compiled, when the filter is compiled, to a full DFA
//! under a size limit, so that matching one subject costs one table lookup
//! per byte whatever the pattern (issue 12 item 4: a lazy DFA whose cache
//! thrashes falls back to an NFA simulation costing the pattern's size per
//! byte, ~10 µs per byte for `[a-z]{700}`).

use std::fmt;
use std::sync::Arc;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson::{self, WhichCaptures, NFA};
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind};

use super::{FilterError, FilterLimits};

/// How much larger than `max_regex_size` a refused regex may be compiled
/// again to report its actual size; past this the error says "more than".
const SIZE_PROBE_FACTOR: usize = 2;

/// Longest part of a pattern an error message repeats.
const PATTERN_IN_ERROR: usize = 64;

/// A compiled `=~` pattern: its text (for the index's literal extraction and
/// for messages) and its unanchored forward DFA, shared between clones.
#[derive(Clone)]
pub(crate) struct CompiledRegex {
    pattern: Box<str>,
    dfa: Arc<dense::DFA<Vec<u32>>>,
    /// Cache lines the DFA's tables span: the most cache misses one search
    /// can take, whatever the subject's length (the per-event budget counts
    /// them).
    lines: usize,
}

impl fmt::Debug for CompiledRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledRegex")
            .field("pattern", &self.pattern)
            .field("dfa_bytes", &self.dfa.memory_usage())
            .finish()
    }
}

/// Why a pattern did not compile under a size limit.
enum Refusal {
    /// The NFA or the DFA is larger than the limit.
    TooBig,
    /// The pattern is invalid (the regex parser's reason).
    Invalid(String),
}

/// Compiles `pattern` to an NFA and then an unanchored DFA, each at most
/// `limit` bytes (determinization may use twice that while it works).
fn build(pattern: &str, limit: usize) -> Result<(NFA, dense::DFA<Vec<u32>>), Refusal> {
    let nfa = thompson::Compiler::new()
        .syntax(syntax::Config::new().nest_limit(64))
        .configure(
            thompson::Config::new()
                .which_captures(WhichCaptures::None)
                .nfa_size_limit(Some(limit)),
        )
        .build(pattern)
        .map_err(|e| match e.size_limit() {
            Some(_) => Refusal::TooBig,
            None => Refusal::Invalid(e.to_string()),
        })?;
    let dfa = dense::Builder::new()
        .configure(
            dense::Config::new()
                .start_kind(StartKind::Unanchored)
                .match_kind(MatchKind::LeftmostFirst)
                // A Unicode `\b` is supported on ASCII subjects; the DFA
                // stops on a non-ASCII byte and the match is unknown.
                .unicode_word_boundary(true)
                .dfa_size_limit(Some(limit))
                .determinize_size_limit(Some(limit.saturating_mul(2))),
        )
        .build_from_nfa(&nfa)
        .map_err(|e| {
            if e.is_size_limit_exceeded() {
                Refusal::TooBig
            } else {
                Refusal::Invalid(e.to_string())
            }
        })?;
    Ok((nfa, dfa))
}

impl CompiledRegex {
    /// Compiles `pattern` (regex crate syntax) under `limits.max_regex_size`;
    /// `at` is the pattern's offset in the filter text, for errors.
    pub(crate) fn compile(
        pattern: &str,
        at: usize,
        limits: &FilterLimits,
    ) -> Result<CompiledRegex, FilterError> {
        let max = limits.max_regex_size;
        match build(pattern, max) {
            Ok((_, dfa)) => Ok(CompiledRegex {
                pattern: pattern.into(),
                lines: dfa.memory_usage().div_ceil(64),
                dfa: Arc::new(dfa),
            }),
            Err(Refusal::Invalid(reason)) => Err(FilterError::Regex {
                at,
                pattern: shorten(pattern),
                reason,
            }),
            Err(Refusal::TooBig) => {
                // Compiled again under a larger limit, only to say how big.
                let probed = max.saturating_mul(SIZE_PROBE_FACTOR);
                // The compiled size, when that is what is over the limit (it
                // may instead be the working memory of the DFA construction,
                // bounded to twice the limit, with a small result).
                let size = build(pattern, probed)
                    .ok()
                    .map(|(n, d)| n.memory_usage().max(d.memory_usage()))
                    .filter(|&s| s > max);
                Err(FilterError::RegexTooBig {
                    at,
                    pattern: shorten(pattern),
                    size,
                    probed,
                    max,
                })
            }
        }
    }

    /// The pattern as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern matches somewhere in `s` (UTF-8: a string's
    /// bytes): one DFA transition per byte at most, stopping at the first
    /// match. `None` (unknown) when a
    /// Unicode `\b` meets a non-ASCII byte, which the DFA cannot decide.
    pub(crate) fn is_match(&self, s: &[u8]) -> Option<bool> {
        self.dfa
            .try_search_fwd(&Input::new(s).earliest(true))
            .ok()
            .map(|m| m.is_some())
    }

    /// Work units of one search of `len` bytes (see `filter::budget`).
    pub(crate) fn units(&self, len: usize) -> u64 {
        super::budget::regex_units(len, self.lines)
    }

    /// Heap bytes of the DFA's tables and the pattern text.
    pub(crate) fn memory_usage(&self) -> usize {
        self.dfa.memory_usage() + self.pattern.len()
    }
}

/// A pattern cut to [`PATTERN_IN_ERROR`] characters for an error message.
fn shorten(pattern: &str) -> String {
    let mut s: String = pattern.chars().take(PATTERN_IN_ERROR).collect();
    if s.len() < pattern.len() {
        s.push_str("...");
    }
    s
}
