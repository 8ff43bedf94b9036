//! The compiled form of a filter: a typed expression tree whose every field
//! reference, regular expression and literal has been resolved at compile
//! time, so evaluation cannot fail, only answer true, false or unknown.

use super::regex_dfa::CompiledRegex;

/// Static type of an expression, known at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Int,
    Float,
    /// Int or float, known only at run time (arithmetic on a body field).
    Num,
    Bool,
    Str,
    /// A body field: its type is whatever the event carries.
    Any,
}

impl Ty {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Ty::Int => "int",
            Ty::Float => "float",
            Ty::Num => "number",
            Ty::Bool => "boolean",
            Ty::Str => "string",
            Ty::Any => "any",
        }
    }

    pub(crate) fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Num | Ty::Any)
    }

    pub(crate) fn stringy(self) -> bool {
        matches!(self, Ty::Str | Ty::Any)
    }

    pub(crate) fn booly(self) -> bool {
        matches!(self, Ty::Bool | Ty::Any)
    }
}

/// A header field addressable as `$name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderField {
    Tag,
    Publisher,
    Seq,
    SourceTime,
    VirtualTime,
    Priority,
    Timeout,
    StopTime,
    StartTime,
    TypeName,
    EventName,
    Flags,
    PayloadSize,
}

/// Every header field: its name after `$`, what it is and its type.
pub(crate) const HEADER_FIELDS: &[(&str, HeaderField, Ty)] = &[
    ("tag", HeaderField::Tag, Ty::Str),
    ("publisher", HeaderField::Publisher, Ty::Str),
    ("seq", HeaderField::Seq, Ty::Int),
    ("source_time", HeaderField::SourceTime, Ty::Int),
    ("virtual_time", HeaderField::VirtualTime, Ty::Int),
    ("priority", HeaderField::Priority, Ty::Int),
    ("timeout", HeaderField::Timeout, Ty::Int),
    ("stop_time", HeaderField::StopTime, Ty::Int),
    ("start_time", HeaderField::StartTime, Ty::Int),
    ("type_name", HeaderField::TypeName, Ty::Str),
    ("event_name", HeaderField::EventName, Ty::Str),
    ("flags", HeaderField::Flags, Ty::Int),
    ("payload_size", HeaderField::PayloadSize, Ty::Int),
];

impl HeaderField {
    /// Index of this field in [`HEADER_FIELDS`]; also its operand id in the
    /// subscription index.
    pub(crate) fn index(self) -> u32 {
        HEADER_FIELDS
            .iter()
            .position(|(_, h, _)| *h == self)
            .unwrap_or(0) as u32
    }

    pub(crate) fn name(self) -> &'static str {
        HEADER_FIELDS[self.index() as usize].0
    }
}

/// A literal value in a filter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(Box<str>),
    /// Only built from a `<tag,value>` subscription with a bytes value.
    Bytes(Box<[u8]>),
}

impl Lit {
    pub(crate) fn ty(&self) -> Ty {
        match self {
            Lit::Int(_) => Ty::Int,
            Lit::Float(_) => Ty::Float,
            Lit::Bool(_) => Ty::Bool,
            Lit::Str(_) => Ty::Str,
            Lit::Bytes(_) => Ty::Any,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// One node of a compiled filter.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Lit(Lit),
    Header(HeaderField),
    /// A body field; `slot` is assigned by a [`SubscriptionIndex`](super::SubscriptionIndex)
    /// (unused by a stand-alone filter, which looks the name up).
    Field {
        name: Box<str>,
        slot: u32,
    },
    Neg(Box<Node>),
    Arith(ArithOp, Box<Node>, Box<Node>),
    Cmp(CmpOp, Box<Node>, Box<Node>),
    /// `l ~ r`: string `l` contains string `r`.
    Contains(Box<Node>, Box<Node>),
    /// `l ~^ r`: string `l` starts with string `r`.
    StartsWith(Box<Node>, Box<Node>),
    /// `l =~ 'pattern'`: the pattern matches somewhere in `l`.
    Regex(Box<Node>, CompiledRegex),
    /// `l in (a, b, ...)`.
    In(Box<Node>, Vec<Lit>),
    /// `exist $x`: the field is present.
    Exist(Box<Node>),
    Not(Box<Node>),
    And(Vec<Node>),
    Or(Vec<Node>),
}

impl Node {
    /// Heap bytes below this node (not counting the node itself): boxed and
    /// listed children, strings, regex DFAs. Recursion follows the tree,
    /// whose depth the compiler bounded.
    pub(crate) fn heap_bytes(&self) -> usize {
        const NODE: usize = std::mem::size_of::<Node>();
        let lit = |l: &Lit| match l {
            Lit::Str(s) => s.len(),
            Lit::Bytes(b) => b.len(),
            _ => 0,
        };
        match self {
            Node::Lit(l) => lit(l),
            Node::Header(_) => 0,
            Node::Field { name, .. } => name.len(),
            Node::Neg(a) | Node::Not(a) | Node::Exist(a) => NODE + a.heap_bytes(),
            Node::Regex(a, re) => NODE + a.heap_bytes() + re.memory_usage(),
            Node::In(a, list) => {
                NODE + a.heap_bytes()
                    + list.capacity() * std::mem::size_of::<Lit>()
                    + list.iter().map(lit).sum::<usize>()
            }
            Node::Arith(_, a, b)
            | Node::Cmp(_, a, b)
            | Node::Contains(a, b)
            | Node::StartsWith(a, b) => 2 * NODE + a.heap_bytes() + b.heap_bytes(),
            Node::And(v) | Node::Or(v) => {
                v.capacity() * NODE + v.iter().map(Node::heap_bytes).sum::<usize>()
            }
        }
    }

    /// Calls `f` on every body-field reference, mutably (used to bind slots).
    pub(crate) fn for_each_field_mut(&mut self, f: &mut impl FnMut(&str, &mut u32)) {
        match self {
            Node::Field { name, slot } => f(name, slot),
            Node::Lit(_) | Node::Header(_) => {}
            Node::Neg(a) | Node::Not(a) | Node::Exist(a) | Node::Regex(a, _) | Node::In(a, _) => {
                a.for_each_field_mut(f)
            }
            Node::Arith(_, a, b)
            | Node::Cmp(_, a, b)
            | Node::Contains(a, b)
            | Node::StartsWith(a, b) => {
                a.for_each_field_mut(f);
                b.for_each_field_mut(f);
            }
            Node::And(v) | Node::Or(v) => v.iter_mut().for_each(|n| n.for_each_field_mut(f)),
        }
    }
}
