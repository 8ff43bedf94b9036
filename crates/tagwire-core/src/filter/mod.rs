//! Content filters: the constraint language, mapping filters, TAO's filter
//! levels and the indexed subscription matcher (issue 6). Pure logic: nothing
//! here does I/O, reads a clock or spawns a thread.
//!
//! Which type to pick:
//! - One condition on one channel: [`Filter`] (`$type_name == 'Alarm' and
//!   $priority < 2`), compiled once at subscribe time, then
//!   [`Filter::matches`] per event.
//! - Session (admin) and channel (proxy) filters together, with TAO's AND/OR
//!   between the two levels: [`FilterSet`].
//! - Rewriting a channel's priority or timeout: [`MappingFilter`]
//!   (`map priority=high when $.severity > 3`).
//! - Many content subscriptions (integer and string keys, `<tag,value>` sets,
//!   regular expressions, constraints) matched against each event:
//!   [`SubscriptionIndex`], whose equality predicates live in hash indexes and
//!   whose regular expressions are pre-filtered by required literals, so only
//!   candidates are evaluated.
//!
//! The grammar, the semantics of absent fields and the cost bounds are in
//! `docs/filters.md`.
//!
//! ```
//! use tagwire_core::filter::{Filter, FilterLimits};
//! use tagwire_proto::{Event, EventRef};
//! let f = Filter::compile("$priority < 2 and $.severity > 3", &FilterLimits::default()).unwrap();
//! let mut ev = Event::new("/alarms/a", &b""[..]);
//! ev.fields.push(("severity".into(), tagwire_proto::Value::Int(5)));
//! let mut buf = bytes::BytesMut::new();
//! ev.encode(&mut buf).unwrap();
//! assert!(f.matches(&EventRef::parse(&buf).unwrap()));
//! ```

mod ast;
mod budget;
mod eval;
mod index;
mod levels;
mod lexer;
mod mapping;
mod parser;
mod regex_dfa;

use std::fmt;
use std::sync::Arc;

use tagwire_proto::EventRef;

pub(crate) use budget::Meter;
pub(crate) use eval::EventFields;
pub use index::{IndexStats, MatchScratch, RegexTarget, SubscriptionIndex, SubscriptionSpec};
pub(crate) use levels::levels_pass_in;
pub use levels::{levels_pass, FilterList, FilterSet, InterFilterOp};
pub use mapping::{priority_by_name, MappingFilter, Overrides};

/// Everything that can go wrong with a filter: the text is wrong (syntax,
/// unknown header field, type mismatch, bad regular expression, bad UTF-8), a
/// limit was reached, or the caller misused an index or filter list.
///
/// Positions (`at`) are 0-based byte offsets into the filter text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// The text does not follow the grammar.
    #[error("at {at}: expected {expected}, found {found}")]
    Syntax {
        /// Byte offset of the offending token.
        at: usize,
        /// What the grammar allows here.
        expected: String,
        /// What the text has instead.
        found: String,
    },
    /// `$name` where `name` is not a header field.
    #[error("at {at}: unknown header field '${name}' (header fields: {}; a body field is written '$.{name}')", header_names())]
    UnknownHeaderField {
        /// Byte offset of the `$`.
        at: usize,
        /// The name after `$`.
        name: String,
    },
    /// An operator applied to values of types it does not accept.
    #[error("at {at}: type mismatch: '{op}' cannot be applied to {left} and {right}")]
    TypeMismatch {
        /// Byte offset of the operator.
        at: usize,
        /// The operator.
        op: String,
        /// Type (and operand) on the left.
        left: String,
        /// Type (and operand) on the right, or what was required.
        right: String,
    },
    /// A regular expression that does not compile.
    #[error("at {at}: invalid regular expression '{pattern}': {reason}")]
    Regex {
        /// Byte offset of the pattern literal.
        at: usize,
        /// The pattern.
        pattern: String,
        /// Why the regex crate refused it.
        reason: String,
    },
    /// A regular expression that needs more than
    /// [`FilterLimits::max_regex_size`]: its NFA or DFA is larger, or
    /// building the DFA needs more than twice that in working memory.
    #[error("at {at}: regular expression '{pattern}' {}, more than max_regex_size {max} (Unicode classes such as \\w and \\d are large; (?-u:\\w) is ASCII only)", match size { Some(s) => format!("compiles to {s} bytes"), None => format!("needs more than {max} bytes to compile (measured up to {probed})") })]
    RegexTooBig {
        /// Byte offset of the pattern literal.
        at: usize,
        /// The pattern (its first 64 characters).
        pattern: String,
        /// Its compiled size in bytes (NFA or DFA, the larger), when that is
        /// what exceeds `max` and it compiles within `probed`; `None` when it
        /// is larger still, or when the DFA construction's working memory
        /// was what exceeded the limit.
        size: Option<usize>,
        /// The limit it was compiled again under to measure it (twice `max`).
        probed: usize,
        /// The configured `max_regex_size`.
        max: usize,
    },
    /// The filter text is not UTF-8.
    #[error("at {at}: invalid UTF-8 in filter text")]
    InvalidUtf8 {
        /// Offset of the first invalid byte.
        at: usize,
    },
    /// A [`FilterLimits`] (or index) limit was exceeded.
    #[error("{}limit {limit} exceeded: {value} > {max}", at.map(|a| format!("at {a}: ")).unwrap_or_default())]
    LimitExceeded {
        /// Name of the limit, as in [`FilterLimits`].
        limit: &'static str,
        /// The value that exceeded it.
        value: usize,
        /// The configured maximum.
        max: usize,
        /// Byte offset in the text, where the limit is about the text.
        at: Option<usize>,
    },
    /// A mapping filter sets a property it cannot set.
    #[error("at {at}: unknown mapping property '{name}' (expected priority, timeout or lifetime)")]
    UnknownMappingProperty {
        /// Byte offset of the property name.
        at: usize,
        /// The name.
        name: String,
    },
    /// A mapping filter gives a property a value out of range.
    #[error("at {at}: bad value for {property}: {value} ({expected})")]
    BadMappingValue {
        /// Byte offset of the value.
        at: usize,
        /// The property.
        property: &'static str,
        /// The value as written.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// A subscription or filter id is already present.
    #[error("duplicate id {id}")]
    DuplicateId {
        /// The id.
        id: u64,
    },
    /// A `<tag,value>` subscription with no pairs, or a key subscription
    /// with an empty field name.
    #[error("empty subscription: {what}")]
    EmptySubscription {
        /// What was empty.
        what: &'static str,
    },
}

fn header_names() -> String {
    ast::HEADER_FIELDS
        .iter()
        .map(|(n, _, _)| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Largest `max_depth` honoured, whatever the configuration says. The
/// parser and evaluator recurse once per nesting level; at this cap they
/// stay within 512 KiB of stack even in an unoptimized build (a few KiB per
/// level there, far less in release), a quarter of a default thread stack.
pub const MAX_DEPTH_CAP: usize = 64;

/// Default [`FilterLimits::max_event_work`].
pub const DEFAULT_MAX_EVENT_WORK: u64 = 4_000_000;

/// Bounds on what a filter may cost (TAO §3.1). Every compile checks them;
/// each violation is a [`FilterError::LimitExceeded`] naming the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterLimits {
    /// Longest filter or mapping text, in bytes (default 4096).
    pub max_text_len: usize,
    /// Most nodes (values, fields, operators) in one filter (default 256).
    pub max_nodes: usize,
    /// Deepest nesting of parentheses and operators (default 32, capped at
    /// [`MAX_DEPTH_CAP`]).
    pub max_depth: usize,
    /// Most regular expressions in one filter (default 4).
    pub max_regexes: usize,
    /// Largest compiled regular expression, in bytes (default 512 KiB): the
    /// size of its DFA (and of the NFA it is built from). Each regex is
    /// compiled to a full DFA when the filter is compiled, so matching costs
    /// one table lookup per subject byte whatever the pattern; this limit
    /// bounds the memory and the compile time that takes.
    pub max_regex_size: usize,
    /// Longest event string, in bytes, that `=~` or `~` examine (default
    /// 1024, the longest tag): on a longer subject they are unknown, as is a
    /// comparison (`==`, `<`, `~^`, ...) of two strings or byte strings that
    /// are both longer. This bounds the bytes any string operator reads.
    pub max_match_input: usize,
    /// Most filters on one level of one channel ([`FilterList`]; default 16).
    pub max_filters_per_channel: usize,
    /// Most subscriptions in one [`SubscriptionIndex`] (default 1,000,000).
    pub max_subscriptions: usize,
    /// Most subscriptions of an index that no index can narrow down, so are
    /// evaluated for every event (default 10,000).
    pub max_unindexed: usize,
    /// Most work, in work units, that evaluating filters may cost for one
    /// event in [`Routes::route`](crate::route::Routes::route), summed over
    /// all its filtered subscriptions (default 4,000,000, a few ms at
    /// worst; see `docs/filters.md`, "Budget per event"). A node visited
    /// costs 64 units; a regex 2 per subject byte plus 512 per cache miss it
    /// may take (one per byte, at most one per 64 bytes of its DFA); `~` 8
    /// per byte of subject and needle plus 64; a string comparison 1 per 8
    /// bytes. When
    /// an event's evaluations would exceed it, that evaluation and every
    /// later one for the event answer unknown: the remaining filtered
    /// subscriptions do not get the event, and `Routes::budget_stats`
    /// counts it.
    pub max_event_work: u64,
}

impl Default for FilterLimits {
    fn default() -> Self {
        FilterLimits {
            max_text_len: 4096,
            max_nodes: 256,
            max_depth: 32,
            max_regexes: 4,
            max_regex_size: 512 * 1024,
            max_match_input: 1024,
            max_filters_per_channel: 16,
            max_subscriptions: 1_000_000,
            max_unindexed: 10_000,
            max_event_work: DEFAULT_MAX_EVENT_WORK,
        }
    }
}

impl FilterLimits {
    pub(crate) fn effective_max_depth(&self) -> usize {
        self.max_depth.min(MAX_DEPTH_CAP)
    }
}

/// A compiled filter: a condition over an event's header and fields.
///
/// Compiling checks syntax, field names, types, regular expressions and
/// limits, so a filter that compiles never fails at evaluation: per event it
/// only answers match or no match.
#[derive(Debug, Clone)]
pub struct Filter {
    text: Arc<str>,
    pub(crate) root: ast::Node,
    /// [`FilterLimits::max_match_input`] when it was compiled.
    pub(crate) max_match_input: usize,
}

impl Filter {
    /// Compiles a filter from its text. See `docs/filters.md` for the grammar.
    pub fn compile(text: &str, limits: &FilterLimits) -> Result<Filter, FilterError> {
        check_len(text.len(), limits)?;
        let toks = lexer::tokenize(text)?;
        let mut p = parser::Parser::new(&toks, limits);
        let e = p.boolean()?;
        p.expect_end(&[])?;
        Ok(Filter {
            text: text.into(),
            root: e.node,
            max_match_input: limits.max_match_input,
        })
    }

    /// Compiles a filter from bytes that should be UTF-8 (as read from the
    /// network or a file): the length limit first, then UTF-8, then the text.
    pub fn compile_bytes(text: &[u8], limits: &FilterLimits) -> Result<Filter, FilterError> {
        check_len(text.len(), limits)?;
        let s = std::str::from_utf8(text).map_err(|e| FilterError::InvalidUtf8 {
            at: e.valid_up_to(),
        })?;
        Filter::compile(s, limits)
    }

    /// Whether `event` passes: true only when the condition is definitely
    /// true (an unknown, e.g. from an absent field, does not pass).
    pub fn matches(&self, event: &EventRef<'_>) -> bool {
        self.truth(event) == Some(true)
    }

    /// The three-valued result: `Some(true)`, `Some(false)`, or `None` when
    /// unknown (an absent field or a value of the wrong kind decided it).
    pub fn truth(&self, event: &EventRef<'_>) -> Option<bool> {
        self.truth_in(event, &eval::EventFields::new(*event))
    }

    /// [`Filter::truth`] with the event's fields decoded by the caller, so
    /// that several filters on one event (a level) decode them once.
    pub(crate) fn truth_in<'x>(
        &'x self,
        event: &EventRef<'x>,
        fields: &eval::EventFields<'x>,
    ) -> Option<bool> {
        eval::Ctx {
            ev: event,
            fields,
            max_input: self.max_match_input,
            meter: &fields.meter,
        }
        .decide(&self.root)
    }

    /// The text the filter was compiled from.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// An estimate, in bytes, of the heap memory this filter holds: each
    /// regular expression's DFA tables (exact, as the DFA reports them: the
    /// bulk of a filter with regexes, up to
    /// [`FilterLimits::max_regex_size`] each), plus the expression tree's
    /// nodes, lists and strings and the filter text, counted from their
    /// lengths without allocator overhead. Clones share the text and the
    /// DFAs, so each clone reports the whole. Cost: one walk of the tree
    /// (at most [`FilterLimits::max_nodes`] nodes).
    pub fn memory_estimate(&self) -> usize {
        std::mem::size_of::<Filter>() + self.text.len() + self.root.heap_bytes()
    }

    /// A filter built by the engine from a node (subscription formats).
    pub(crate) fn from_node(text: String, root: ast::Node, limits: &FilterLimits) -> Filter {
        Filter {
            text: text.into(),
            root,
            max_match_input: limits.max_match_input,
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn check_len(len: usize, limits: &FilterLimits) -> Result<(), FilterError> {
    if len > limits.max_text_len {
        return Err(FilterError::LimitExceeded {
            limit: "max_text_len",
            value: len,
            max: limits.max_text_len,
            at: None,
        });
    }
    Ok(())
}
