//! Mapping filters (TAO/CORBA Notification): rules that set a channel's
//! delivery priority or lifetime for the events that meet a condition.

use std::sync::Arc;

use tagwire_proto::EventRef;

use super::ast::Node;
use super::eval::{Ctx, EventFields};
use super::lexer::{tokenize, Tok};
use super::parser::Parser;
use super::{check_len, FilterError, FilterLimits};

/// What a mapping filter changes for one event on one channel; `None`
/// leaves the event's own value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overrides {
    /// Delivery priority, 0 (lowest) to 255 (highest).
    pub priority: Option<u8>,
    /// Lifetime: the event expires this many nanoseconds after its source
    /// timestamp (TAO `timeout`).
    pub timeout_ns: Option<u64>,
}

impl Overrides {
    /// True when nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.priority.is_none() && self.timeout_ns.is_none()
    }
}

#[derive(Debug, Clone)]
struct Rule {
    set: Overrides,
    when: Option<Node>,
}

/// A compiled mapping filter: `map priority=high when $.severity > 3`.
///
/// Text: one or more rules separated by `;`, each
/// `map PROP=VALUE[, PROP=VALUE] [when CONDITION]`, with PROP `priority`
/// (0–255 or `low`, `normal`, `high`, `critical`) or `timeout` (alias
/// `lifetime`; a duration such as `500ms`). For each property the first rule
/// that sets it and whose condition is true gives its value, as in CORBA
/// mapping filters; a rule without `when` always applies.
#[derive(Debug, Clone)]
pub struct MappingFilter {
    text: Arc<str>,
    rules: Vec<Rule>,
    max_match_input: usize,
}

/// The priority a name stands for: `low` 0, `normal` 64, `high` 128,
/// `critical` 192 — the lowest priority of each quarter of the 0–255 range.
pub fn priority_by_name(name: &str) -> Option<u8> {
    Some(match name {
        "low" => 0,
        "normal" => 64,
        "high" => 128,
        "critical" => 192,
        _ => return None,
    })
}

impl MappingFilter {
    /// Compiles a mapping filter under the same limits as a [`Filter`](super::Filter)
    /// (the whole text counts once against each).
    pub fn compile(text: &str, limits: &FilterLimits) -> Result<MappingFilter, FilterError> {
        check_len(text.len(), limits)?;
        let toks = tokenize(text)?;
        let mut p = Parser::new(&toks, limits);
        let mut rules = Vec::new();
        loop {
            match p.peek() {
                Tok::Ident(w) if w == "map" => {
                    p.bump();
                }
                _ => return Err(p.syntax("'map'")),
            }
            let mut set = Overrides::default();
            loop {
                let name_tok = p.bump();
                let Tok::Ident(name) = name_tok.tok else {
                    return Err(super::FilterError::Syntax {
                        at: name_tok.at,
                        expected: "a property name (priority, timeout or lifetime)".to_owned(),
                        found: name_tok.tok.describe(),
                    });
                };
                if *p.peek() != Tok::Assign {
                    return Err(p.syntax(format!("'=' after '{name}'")));
                }
                p.bump();
                let v = p.bump();
                match name.as_str() {
                    "priority" => {
                        let pr = match &v.tok {
                            Tok::Int(i) if (0..=255).contains(i) => *i as u8,
                            Tok::Ident(w) if priority_by_name(w).is_some() => {
                                priority_by_name(w).unwrap_or_default()
                            }
                            other => {
                                return Err(FilterError::BadMappingValue {
                                    at: v.at,
                                    property: "priority",
                                    value: other.describe(),
                                    expected: "0..=255, low, normal, high or critical",
                                })
                            }
                        };
                        set.priority = Some(pr);
                    }
                    "timeout" | "lifetime" => match v.tok {
                        Tok::Int(ns) if ns > 0 && ns <= u64::MAX as i128 => {
                            set.timeout_ns = Some(ns as u64)
                        }
                        other => {
                            return Err(FilterError::BadMappingValue {
                                at: v.at,
                                property: "timeout",
                                value: other.describe(),
                                expected: "a positive duration such as 500ms, 2s or 10us",
                            })
                        }
                    },
                    _ => {
                        return Err(FilterError::UnknownMappingProperty {
                            at: name_tok.at,
                            name,
                        })
                    }
                }
                if *p.peek() == Tok::Comma {
                    p.bump();
                } else {
                    break;
                }
            }
            let when = match p.peek() {
                Tok::Ident(w) if w == "when" => {
                    p.bump();
                    Some(p.boolean()?.node)
                }
                _ => None,
            };
            p.expect_end(&[Tok::Semi])
                .map_err(|_| p.syntax("',', 'when', ';' or end of input"))?;
            rules.push(Rule { set, when });
            if *p.peek() == Tok::Semi {
                p.bump();
                if *p.peek() == Tok::Eof {
                    break;
                }
            } else {
                break;
            }
        }
        Ok(MappingFilter {
            text: text.into(),
            rules,
            max_match_input: limits.max_match_input,
        })
    }

    /// The overrides for `event`: per property, the first rule that sets it
    /// and whose condition is true (unknown counts as false).
    pub fn apply(&self, event: &EventRef<'_>) -> Overrides {
        self.apply_in(event, &EventFields::new(*event))
    }

    /// [`MappingFilter::apply`] with the event's fields (and work budget)
    /// shared with the event's other evaluations.
    pub(crate) fn apply_in<'x>(
        &'x self,
        event: &EventRef<'x>,
        fields: &EventFields<'x>,
    ) -> Overrides {
        let ctx = Ctx {
            ev: event,
            fields,
            max_input: self.max_match_input,
            meter: &fields.meter,
        };
        let mut out = Overrides::default();
        for r in &self.rules {
            let needed = (r.set.priority.is_some() && out.priority.is_none())
                || (r.set.timeout_ns.is_some() && out.timeout_ns.is_none());
            if !needed {
                continue;
            }
            if let Some(c) = &r.when {
                if ctx.decide(c) != Some(true) {
                    continue;
                }
            }
            out.priority = out.priority.or(r.set.priority);
            out.timeout_ns = out.timeout_ns.or(r.set.timeout_ns);
        }
        out
    }

    /// The text the mapping filter was compiled from.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// An estimate, in bytes, of the heap memory this mapping filter holds,
    /// counted as [`Filter::memory_estimate`](super::Filter::memory_estimate)
    /// counts it (regex DFAs exactly, the rest from lengths), over all rules.
    pub fn memory_estimate(&self) -> usize {
        std::mem::size_of::<MappingFilter>()
            + self.text.len()
            + self.rules.capacity() * std::mem::size_of::<Rule>()
            + self
                .rules
                .iter()
                .filter_map(|r| r.when.as_ref())
                .map(Node::heap_bytes)
                .sum::<usize>()
    }
}
