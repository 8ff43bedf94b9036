//! Pratt parser from tokens to a typed [`Node`] tree, with the limits checked
//! before every recursive step so no input can exhaust the stack.

use super::ast::{ArithOp, CmpOp, HeaderField, Lit, Node, Ty, HEADER_FIELDS};
use super::lexer::{Tok, Token};
use super::regex_dfa::CompiledRegex;
use super::{FilterError, FilterLimits};

/// A parsed sub-expression: the node, its static type, where it starts and
/// how deep its tree is.
pub(crate) struct Typed {
    pub node: Node,
    pub ty: Ty,
    pub at: usize,
    pub depth: usize,
}

/// Recursive-descent state over a token slice.
pub(crate) struct Parser<'t> {
    toks: &'t [Token],
    pos: usize,
    limits: &'t FilterLimits,
    nodes: usize,
    regexes: usize,
    max_depth: usize,
}

// Binding powers (higher binds tighter).
const BP_OR: u8 = 1;
const BP_AND: u8 = 2;
const BP_NOT: u8 = 3;
const BP_CMP: u8 = 4;
const BP_ADD: u8 = 5;
const BP_MUL: u8 = 6;
const BP_NEG: u8 = 7;

fn infix_bp(t: &Tok) -> Option<u8> {
    Some(match t {
        Tok::Or => BP_OR,
        Tok::And => BP_AND,
        Tok::EqEq
        | Tok::Ne
        | Tok::Lt
        | Tok::Le
        | Tok::Gt
        | Tok::Ge
        | Tok::Tilde
        | Tok::TildeCaret
        | Tok::RegexMatch
        | Tok::In => BP_CMP,
        Tok::Plus | Tok::Minus => BP_ADD,
        Tok::Star | Tok::Slash | Tok::Percent => BP_MUL,
        _ => return None,
    })
}

impl<'t> Parser<'t> {
    pub(crate) fn new(toks: &'t [Token], limits: &'t FilterLimits) -> Self {
        Parser {
            toks,
            pos: 0,
            limits,
            nodes: 0,
            regexes: 0,
            max_depth: limits.effective_max_depth(),
        }
    }

    pub(crate) fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    pub(crate) fn peek_at(&self) -> usize {
        self.toks[self.pos.min(self.toks.len() - 1)].at
    }

    pub(crate) fn bump(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    pub(crate) fn syntax(&self, expected: impl Into<String>) -> FilterError {
        FilterError::Syntax {
            at: self.peek_at(),
            expected: expected.into(),
            found: self.peek().describe(),
        }
    }

    fn count_node(&mut self, at: usize) -> Result<(), FilterError> {
        self.nodes += 1;
        if self.nodes > self.limits.max_nodes {
            return Err(FilterError::LimitExceeded {
                limit: "max_nodes",
                value: self.nodes,
                max: self.limits.max_nodes,
                at: Some(at),
            });
        }
        Ok(())
    }

    fn check_depth(&self, depth: usize, at: usize) -> Result<(), FilterError> {
        if depth > self.max_depth {
            return Err(FilterError::LimitExceeded {
                limit: "max_depth",
                value: depth,
                max: self.max_depth,
                at: Some(at),
            });
        }
        Ok(())
    }

    /// Parses a whole boolean expression (a filter, or a mapping's `when`).
    pub(crate) fn boolean(&mut self) -> Result<Typed, FilterError> {
        let e = self.expr(0, 1, None)?;
        if !e.ty.booly() {
            return Err(FilterError::TypeMismatch {
                at: e.at,
                op: "filter".to_owned(),
                left: e.ty.name().to_owned(),
                right: "boolean (a filter must be a condition)".to_owned(),
            });
        }
        Ok(e)
    }

    /// Pratt loop. `depth` is the recursion depth, checked before recursing.
    ///
    /// The recursive path (`expr` -> `prefix`/`infix` -> `expr`) is kept to
    /// small functions; the work with large temporaries happens in
    /// `#[inline(never)]` helpers, so one nesting level costs little stack
    /// even in debug builds.
    fn expr(
        &mut self,
        min_bp: u8,
        depth: usize,
        after: Option<&'static str>,
    ) -> Result<Typed, FilterError> {
        self.check_depth(depth, self.peek_at())?;
        let mut lhs = self.prefix(depth, after)?;
        while let Some(bp) = infix_bp(self.peek()) {
            if bp <= min_bp {
                break;
            }
            lhs = self.infix(lhs, bp, depth)?;
        }
        Ok(lhs)
    }

    fn infix(&mut self, lhs: Typed, bp: u8, depth: usize) -> Result<Typed, FilterError> {
        let op_tok = self.bump();
        match op_tok.tok {
            Tok::In => self.in_list(lhs, op_tok.at),
            Tok::RegexMatch => self.regex(lhs, op_tok.at),
            op => {
                let rhs = self.expr(bp, depth + 1, Some(op.symbol()))?;
                self.combine(op, lhs, rhs, op_tok.at)
            }
        }
    }

    #[inline(never)]
    fn combine(
        &mut self,
        op: Tok,
        lhs: Typed,
        rhs: Typed,
        at: usize,
    ) -> Result<Typed, FilterError> {
        let sym = op.symbol();
        match op {
            Tok::And | Tok::Or => self.logical(&op, lhs, rhs, at),
            Tok::EqEq | Tok::Ne | Tok::Lt | Tok::Le | Tok::Gt | Tok::Ge => {
                let t = self.compare(&op, lhs, rhs, at)?;
                self.no_chain()?;
                Ok(t)
            }
            Tok::Tilde | Tok::TildeCaret => {
                if !lhs.ty.stringy() || !rhs.ty.stringy() {
                    return Err(mismatch(at, sym, &lhs, &rhs));
                }
                let d = self.bin_depth(&lhs, &rhs, at)?;
                let lat = lhs.at;
                let node = if op == Tok::Tilde {
                    Node::Contains(Box::new(lhs.node), Box::new(rhs.node))
                } else {
                    Node::StartsWith(Box::new(lhs.node), Box::new(rhs.node))
                };
                self.no_chain()?;
                Ok(Typed {
                    node,
                    ty: Ty::Bool,
                    at: lat,
                    depth: d,
                })
            }
            _ => self.arith(&op, lhs, rhs, at),
        }
    }

    /// Comparisons do not chain: `a < b < c` is refused.
    fn no_chain(&self) -> Result<(), FilterError> {
        if infix_bp(self.peek()) == Some(BP_CMP) {
            return Err(self.syntax("'and', 'or', ')' or end of input (comparisons do not chain)"));
        }
        Ok(())
    }

    fn bin_depth(&self, l: &Typed, r: &Typed, at: usize) -> Result<usize, FilterError> {
        let d = l.depth.max(r.depth) + 1;
        self.check_depth(d, at)?;
        Ok(d)
    }

    fn prefix(&mut self, depth: usize, after: Option<&'static str>) -> Result<Typed, FilterError> {
        let at = self.peek_at();
        match self.peek() {
            Tok::LParen => {
                self.bump();
                self.count_node(at)?;
                let inner = self.expr(0, depth + 1, Some("("))?;
                self.close_paren(inner, at)
            }
            Tok::Not => {
                self.bump();
                self.count_node(at)?;
                let e = self.expr(BP_NOT, depth + 1, Some("not"))?;
                self.finish_not(e, at)
            }
            Tok::Minus => {
                self.bump();
                self.count_node(at)?;
                let e = self.expr(BP_NEG, depth + 1, Some("-"))?;
                self.finish_neg(e, at)
            }
            _ => self.leaf(after),
        }
    }

    #[inline(never)]
    fn close_paren(&mut self, inner: Typed, at: usize) -> Result<Typed, FilterError> {
        if *self.peek() != Tok::RParen {
            return Err(self.syntax(format!("')' to close the '(' at {at}")));
        }
        self.bump();
        Ok(Typed { at, ..inner })
    }

    #[inline(never)]
    fn finish_not(&mut self, e: Typed, at: usize) -> Result<Typed, FilterError> {
        if !e.ty.booly() {
            return Err(FilterError::TypeMismatch {
                at,
                op: "not".to_owned(),
                left: e.ty.name().to_owned(),
                right: "boolean".to_owned(),
            });
        }
        let d = e.depth + 1;
        self.check_depth(d, at)?;
        Ok(Typed {
            node: Node::Not(Box::new(e.node)),
            ty: Ty::Bool,
            at,
            depth: d,
        })
    }

    #[inline(never)]
    fn finish_neg(&mut self, e: Typed, at: usize) -> Result<Typed, FilterError> {
        if !e.ty.numeric() {
            return Err(FilterError::TypeMismatch {
                at,
                op: "-".to_owned(),
                left: e.ty.name().to_owned(),
                right: "number".to_owned(),
            });
        }
        // Fold a negated literal so that `-3` is a literal (indexable).
        let node = match e.node {
            Node::Lit(Lit::Int(v)) => Node::Lit(Lit::Int(-v)),
            Node::Lit(Lit::Float(v)) => Node::Lit(Lit::Float(-v)),
            other => Node::Neg(Box::new(other)),
        };
        let ty = if e.ty == Ty::Any { Ty::Num } else { e.ty };
        let d = e.depth + 1;
        self.check_depth(d, at)?;
        Ok(Typed {
            node,
            ty,
            at,
            depth: d,
        })
    }

    /// A value, a field, `exist FIELD`, or an error naming what was found.
    #[inline(never)]
    fn leaf(&mut self, after: Option<&'static str>) -> Result<Typed, FilterError> {
        let tok = self.bump();
        let at = tok.at;
        self.count_node(at)?;
        let leaf = |node, ty| {
            Ok(Typed {
                node,
                ty,
                at,
                depth: 1,
            })
        };
        match tok.tok {
            Tok::Int(v) => leaf(Node::Lit(Lit::Int(v)), Ty::Int),
            Tok::Float(v) => leaf(Node::Lit(Lit::Float(v)), Ty::Float),
            Tok::Str(s) => leaf(Node::Lit(Lit::Str(s.into())), Ty::Str),
            Tok::True => leaf(Node::Lit(Lit::Bool(true)), Ty::Bool),
            Tok::False => leaf(Node::Lit(Lit::Bool(false)), Ty::Bool),
            Tok::Header(name) => {
                let (h, ty) = header(&name, at)?;
                leaf(Node::Header(h), ty)
            }
            Tok::Field(name) => leaf(
                Node::Field {
                    name: name.into(),
                    slot: 0,
                },
                Ty::Any,
            ),
            Tok::Exist => {
                let t = self.bump();
                self.count_node(t.at)?;
                let node = match t.tok {
                    Tok::Header(name) => Node::Header(header(&name, t.at)?.0),
                    Tok::Field(name) => Node::Field {
                        name: name.into(),
                        slot: 0,
                    },
                    other => {
                        return Err(FilterError::Syntax {
                            at: t.at,
                            expected: "a field ('$name' or '$.name') after 'exist'".to_owned(),
                            found: other.describe(),
                        })
                    }
                };
                Ok(Typed { node: Node::Exist(Box::new(node)), ty: Ty::Bool, at, depth: 2 })
            }
            Tok::Ident(w) => Err(FilterError::Syntax {
                at,
                expected: expected_value(after),
                found: format!(
                    "'{w}' (write a header field as '${w}' and a body field as '$.{w}', a string as '\\'{w}\\'')"
                ),
            }),
            Tok::RParen if after.is_none() => Err(FilterError::Syntax {
                at,
                expected: expected_value(after),
                found: "')' with no matching '('".to_owned(),
            }),
            other => Err(FilterError::Syntax {
                at,
                expected: expected_value(after),
                found: other.describe(),
            }),
        }
    }

    #[inline(never)]
    fn logical(
        &mut self,
        op: &Tok,
        lhs: Typed,
        rhs: Typed,
        at: usize,
    ) -> Result<Typed, FilterError> {
        for side in [&lhs, &rhs] {
            if !side.ty.booly() {
                return Err(mismatch(at, op.symbol(), &lhs, &rhs));
            }
        }
        // n-ary: `a and b and c` is one node, so long conjunctions stay shallow.
        let is_and = *op == Tok::And;
        let (node, depth) = match (lhs.node, is_and) {
            (Node::And(mut v), true) => {
                v.push(rhs.node);
                (Node::And(v), lhs.depth.max(rhs.depth + 1))
            }
            (Node::Or(mut v), false) => {
                v.push(rhs.node);
                (Node::Or(v), lhs.depth.max(rhs.depth + 1))
            }
            (l, true) => (Node::And(vec![l, rhs.node]), lhs.depth.max(rhs.depth) + 1),
            (l, false) => (Node::Or(vec![l, rhs.node]), lhs.depth.max(rhs.depth) + 1),
        };
        self.check_depth(depth, at)?;
        Ok(Typed {
            node,
            ty: Ty::Bool,
            at: lhs.at,
            depth,
        })
    }

    #[inline(never)]
    fn compare(
        &mut self,
        op: &Tok,
        lhs: Typed,
        rhs: Typed,
        at: usize,
    ) -> Result<Typed, FilterError> {
        let cmp = match op {
            Tok::EqEq => CmpOp::Eq,
            Tok::Ne => CmpOp::Ne,
            Tok::Lt => CmpOp::Lt,
            Tok::Le => CmpOp::Le,
            Tok::Gt => CmpOp::Gt,
            _ => CmpOp::Ge,
        };
        let ok = if matches!(cmp, CmpOp::Eq | CmpOp::Ne) {
            equatable(lhs.ty, rhs.ty)
        } else {
            (lhs.ty.numeric() && rhs.ty.numeric()) || (lhs.ty.stringy() && rhs.ty.stringy())
        };
        if !ok {
            return Err(mismatch(at, op.symbol(), &lhs, &rhs));
        }
        let depth = self.bin_depth(&lhs, &rhs, at)?;
        Ok(Typed {
            node: Node::Cmp(cmp, Box::new(lhs.node), Box::new(rhs.node)),
            ty: Ty::Bool,
            at: lhs.at,
            depth,
        })
    }

    #[inline(never)]
    fn arith(&mut self, op: &Tok, lhs: Typed, rhs: Typed, at: usize) -> Result<Typed, FilterError> {
        if !lhs.ty.numeric() || !rhs.ty.numeric() {
            return Err(mismatch(at, op.symbol(), &lhs, &rhs));
        }
        let ty = match (lhs.ty, rhs.ty) {
            (Ty::Int, Ty::Int) => Ty::Int,
            (Ty::Float, Ty::Int | Ty::Float) | (Ty::Int, Ty::Float) => Ty::Float,
            _ => Ty::Num,
        };
        let a = match op {
            Tok::Plus => ArithOp::Add,
            Tok::Minus => ArithOp::Sub,
            Tok::Star => ArithOp::Mul,
            Tok::Slash => ArithOp::Div,
            _ => ArithOp::Rem,
        };
        let depth = self.bin_depth(&lhs, &rhs, at)?;
        Ok(Typed {
            node: Node::Arith(a, Box::new(lhs.node), Box::new(rhs.node)),
            ty,
            at: lhs.at,
            depth,
        })
    }

    /// `lhs in (lit, lit, ...)`.
    #[inline(never)]
    fn in_list(&mut self, lhs: Typed, at: usize) -> Result<Typed, FilterError> {
        if *self.peek() != Tok::LParen {
            return Err(self.syntax("'(' and a list of values after 'in'"));
        }
        let open = self.bump().at;
        let mut list = Vec::new();
        loop {
            let neg = if *self.peek() == Tok::Minus {
                self.bump();
                true
            } else {
                false
            };
            let t = self.bump();
            self.count_node(t.at)?;
            let lit = match (t.tok, neg) {
                (Tok::Int(v), _) => Lit::Int(if neg { -v } else { v }),
                (Tok::Float(v), _) => Lit::Float(if neg { -v } else { v }),
                (Tok::Str(s), false) => Lit::Str(s.into()),
                (Tok::True, false) => Lit::Bool(true),
                (Tok::False, false) => Lit::Bool(false),
                (other, _) => {
                    return Err(FilterError::Syntax {
                        at: t.at,
                        expected:
                            "a literal value (number, string, true or false) in the 'in' list"
                                .to_owned(),
                        found: other.describe(),
                    })
                }
            };
            if !equatable(lhs.ty, lit.ty()) {
                return Err(FilterError::TypeMismatch {
                    at: t.at,
                    op: "in".to_owned(),
                    left: lhs.ty.name().to_owned(),
                    right: lit.ty().name().to_owned(),
                });
            }
            list.push(lit);
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RParen => {
                    self.bump();
                    break;
                }
                _ => {
                    return Err(
                        self.syntax(format!("',' or ')' to close the list opened at {open}"))
                    )
                }
            }
        }
        self.no_chain()?;
        let depth = lhs.depth + 1;
        self.check_depth(depth, at)?;
        Ok(Typed {
            node: Node::In(Box::new(lhs.node), list),
            ty: Ty::Bool,
            at: lhs.at,
            depth,
        })
    }

    /// `lhs =~ 'pattern'`: the pattern must be a literal, compiled now.
    #[inline(never)]
    fn regex(&mut self, lhs: Typed, at: usize) -> Result<Typed, FilterError> {
        if !lhs.ty.stringy() {
            return Err(FilterError::TypeMismatch {
                at,
                op: "=~".to_owned(),
                left: lhs.ty.name().to_owned(),
                right: "string (a regular expression matches strings)".to_owned(),
            });
        }
        let t = self.bump();
        self.count_node(t.at)?;
        let Tok::Str(pattern) = t.tok else {
            return Err(FilterError::Syntax {
                at: t.at,
                expected: "a quoted regular expression after '=~'".to_owned(),
                found: t.tok.describe(),
            });
        };
        let re = self.compile_regex(&pattern, t.at)?;
        self.no_chain()?;
        let depth = lhs.depth + 1;
        self.check_depth(depth, at)?;
        Ok(Typed {
            node: Node::Regex(Box::new(lhs.node), re),
            ty: Ty::Bool,
            at: lhs.at,
            depth,
        })
    }

    pub(crate) fn compile_regex(
        &mut self,
        pattern: &str,
        at: usize,
    ) -> Result<CompiledRegex, FilterError> {
        self.regexes += 1;
        if self.regexes > self.limits.max_regexes {
            return Err(FilterError::LimitExceeded {
                limit: "max_regexes",
                value: self.regexes,
                max: self.limits.max_regexes,
                at: Some(at),
            });
        }
        compile_regex(pattern, at, self.limits)
    }

    /// Expects the end of the text (or of one mapping rule).
    pub(crate) fn expect_end(&self, also: &[Tok]) -> Result<(), FilterError> {
        let t = self.peek();
        if *t == Tok::Eof || also.contains(t) {
            return Ok(());
        }
        if *t == Tok::RParen {
            return Err(FilterError::Syntax {
                at: self.peek_at(),
                expected: "end of input".to_owned(),
                found: "')' with no matching '('".to_owned(),
            });
        }
        Err(self.syntax("an operator, 'and', 'or' or end of input"))
    }
}

/// Compiles a regular expression under the regex-size limit.
pub(crate) fn compile_regex(
    pattern: &str,
    at: usize,
    limits: &FilterLimits,
) -> Result<CompiledRegex, FilterError> {
    CompiledRegex::compile(pattern, at, limits)
}

fn header(name: &str, at: usize) -> Result<(HeaderField, Ty), FilterError> {
    HEADER_FIELDS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, h, t)| (*h, *t))
        .ok_or_else(|| FilterError::UnknownHeaderField {
            at,
            name: name.to_owned(),
        })
}

fn equatable(a: Ty, b: Ty) -> bool {
    a == Ty::Any || b == Ty::Any || (a.numeric() && b.numeric()) || a == b
}

fn expected_value(after: Option<&str>) -> String {
    match after {
        Some(op) => format!("a value after '{op}'"),
        None => "a value, a field or '('".to_owned(),
    }
}

fn describe_operand(t: &Typed) -> String {
    let what = match &t.node {
        Node::Header(h) => format!(" (${})", h.name()),
        Node::Field { name, .. } => format!(" ($.{name})"),
        Node::Lit(Lit::Str(s)) => format!(" ('{s}')"),
        Node::Lit(Lit::Int(v)) => format!(" ({v})"),
        Node::Lit(Lit::Float(v)) => format!(" ({v})"),
        Node::Lit(Lit::Bool(v)) => format!(" ({v})"),
        _ => String::new(),
    };
    format!("{}{what}", t.ty.name())
}

fn mismatch(at: usize, op: &str, l: &Typed, r: &Typed) -> FilterError {
    FilterError::TypeMismatch {
        at,
        op: op.to_owned(),
        left: describe_operand(l),
        right: describe_operand(r),
    }
}
