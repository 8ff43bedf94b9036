//! Evaluation of a compiled filter over an [`EventRef`], in Kleene
//! three-valued logic (true, false, unknown). Recursion follows the filter's
//! tree, whose depth the compiler bounded; nothing recurses on event data.

use std::cell::{Cell, OnceCell};
use std::cmp::Ordering;

use tagwire_proto::{EventRef, Expiry, RawValueRef};

use super::ast::{ArithOp, CmpOp, HeaderField, Lit, Node};
use super::budget::{self, Meter};

/// A run-time value: literals, header fields and body fields all become one.
/// A string is held as its bytes: valid UTF-8 (a literal, a header field or
/// a body field that `EventRef::parse` checked), compared byte by byte,
/// which orders it as `str` does, and never checked again.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'x> {
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(&'x [u8]),
    Bytes(&'x [u8]),
}

impl<'x> From<RawValueRef<'x>> for Val<'x> {
    fn from(v: RawValueRef<'x>) -> Self {
        match v {
            RawValueRef::Int(i) => Val::Int(i.into()),
            RawValueRef::Float(f) => Val::Float(f),
            RawValueRef::Bool(b) => Val::Bool(b),
            RawValueRef::Str(s) => Val::Str(s),
            RawValueRef::Bytes(b) => Val::Bytes(b),
        }
    }
}

impl<'x> From<&'x Lit> for Val<'x> {
    fn from(l: &'x Lit) -> Self {
        match l {
            Lit::Int(i) => Val::Int(*i),
            Lit::Float(f) => Val::Float(*f),
            Lit::Bool(b) => Val::Bool(*b),
            Lit::Str(s) => Val::Str(s.as_bytes()),
            Lit::Bytes(b) => Val::Bytes(b),
        }
    }
}

/// Where body fields come from: a stand-alone filter scans the event; the
/// subscription index reads a per-event table filled once.
pub(crate) trait FieldSource<'x> {
    fn get(&self, name: &str, slot: u32) -> Option<Val<'x>>;
}

/// Events with at most this many fields keep them in an inline array (no
/// allocation); larger ones in a table sorted by name.
const FEW_FIELDS: usize = 8;

type FieldEntry<'x> = (&'x [u8], RawValueRef<'x>);

/// An event's fields, decoded once.
// The inline variant is the point (no allocation for small events); one
// table lives on the stack per evaluation, never in a collection.
#[allow(clippy::large_enum_variant)]
enum Table<'x> {
    /// At most [`FEW_FIELDS`], in event order: a read scans them.
    Few([Option<FieldEntry<'x>>; FEW_FIELDS]),
    /// More, sorted by name: a read is a binary search.
    Many(Vec<FieldEntry<'x>>),
}

/// One event's evaluation context for stand-alone filters, filter levels
/// and mapping filters: its body fields, decoded on the first read only, so
/// a filter of `max_nodes` field reads on an event of 256 fields costs one
/// decode and `max_nodes` lookups (issue 12 item 4: re-decoding per read
/// cost 41 ms for one subscription at the limits), and the work [`Meter`]
/// of the event. [`Routes::route`](crate::route::Routes::route) shares one
/// across all of an event's subscriptions, so the fields are decoded once
/// per event; the decode reads no string's contents (the event's parse
/// checked its UTF-8), so an unread 15 MiB field costs nothing (issue 24
/// item 9: it was checked again per filtered subscription, 37.6 ms each).
pub(crate) struct EventFields<'x> {
    ev: EventRef<'x>,
    table: OnceCell<Table<'x>>,
    pub(crate) meter: Meter,
    /// How many times the fields were decoded (tests count it).
    decodes: Cell<u32>,
}

impl<'x> EventFields<'x> {
    /// Fields of `ev`, with a meter that never runs out (stand-alone
    /// filters: the per-event budget is [`Routes`](crate::route::Routes)'s).
    pub(crate) fn new(ev: EventRef<'x>) -> Self {
        Self::metered(ev, Meter::new(budget::UNLIMITED))
    }

    /// Fields of `ev`, its evaluations drawing on `meter`.
    pub(crate) fn metered(ev: EventRef<'x>, meter: Meter) -> Self {
        EventFields {
            ev,
            table: OnceCell::new(),
            meter,
            decodes: Cell::new(0),
        }
    }

    /// How many times the fields were decoded (0 or 1).
    pub(crate) fn decodes(&self) -> u32 {
        self.decodes.get()
    }

    fn table(&self) -> &Table<'x> {
        self.table.get_or_init(|| {
            self.decodes.set(self.decodes.get() + 1);
            let mut few = [None; FEW_FIELDS];
            let mut it = self.ev.raw_fields();
            for slot in few.iter_mut() {
                match it.next() {
                    Some(f) => *slot = Some(f),
                    None => return Table::Few(few),
                }
            }
            if it.next().is_none() {
                return Table::Few(few);
            }
            // Names are unique (`EventRef::parse` refuses duplicates).
            let mut t: Vec<_> = self.ev.raw_fields().collect();
            t.sort_unstable_by(|a, b| a.0.cmp(b.0));
            Table::Many(t)
        })
    }
}

impl<'x> FieldSource<'x> for EventFields<'x> {
    fn get(&self, name: &str, _slot: u32) -> Option<Val<'x>> {
        let name = name.as_bytes();
        match self.table() {
            Table::Few(few) => few
                .iter()
                .map_while(|f| *f)
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.into()),
            Table::Many(t) => t
                .binary_search_by(|(n, _)| (*n).cmp(name))
                .ok()
                .map(|i| t[i].1.into()),
        }
    }
}

/// The value of a header field; `None` when an optional part is absent.
pub(crate) fn header_value<'x>(ev: &EventRef<'x>, h: HeaderField) -> Option<Val<'x>> {
    let int = |v: u64| Some(Val::Int(v.into()));
    match h {
        HeaderField::Tag => Some(Val::Str(ev.tag.as_bytes())),
        HeaderField::Publisher => Some(Val::Str(ev.publisher.as_bytes())),
        HeaderField::Seq => int(ev.seq),
        HeaderField::SourceTime => int(ev.source_time_ns),
        HeaderField::VirtualTime => ev.virtual_time.and_then(int),
        HeaderField::Priority => int(ev.priority.into()),
        HeaderField::Timeout => match ev.expiry {
            Expiry::AfterNs(ns) => int(ns),
            _ => None,
        },
        HeaderField::StopTime => match ev.expiry {
            Expiry::AtNs(ns) => int(ns),
            _ => None,
        },
        HeaderField::StartTime => ev.start_time_ns.and_then(int),
        HeaderField::TypeName => ev.type_name.map(|s| Val::Str(s.as_bytes())),
        HeaderField::EventName => ev.event_name.map(|s| Val::Str(s.as_bytes())),
        HeaderField::Flags => int(ev.flags.into()),
        HeaderField::PayloadSize => int(ev.payload.len() as u64),
    }
}

/// Exact comparison of an integer with a float (no rounding of the integer).
fn cmp_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    const LIM: f64 = 1.7014118346046923e38; // 2^127
    if f >= LIM {
        return Some(Ordering::Less);
    }
    if f < -LIM {
        return Some(Ordering::Greater);
    }
    let t = f.trunc();
    // `t` is integral and within i128, so the cast is exact.
    match i.cmp(&(t as i128)) {
        Ordering::Equal => Some(if f > t {
            Ordering::Less
        } else if f < t {
            Ordering::Greater
        } else {
            Ordering::Equal
        }),
        o => Some(o),
    }
}

/// How two values compare.
enum Cmp3 {
    /// Ordered (or equal).
    Ord(Ordering),
    /// Both numeric but unordered (a NaN), or booleans/bytes that differ.
    Unordered,
    /// Different kinds (string vs number, ...): the comparison is unknown.
    Mismatch,
}

/// Compares `a` and `b`. Two strings (or byte strings) both longer than
/// `max_input` bytes are not compared (unknown), so no comparison reads more
/// than `max_input` bytes of each side.
fn compare(a: Val<'_>, b: Val<'_>, max_input: usize) -> Cmp3 {
    use Val::*;
    let num = |o: Option<Ordering>| o.map_or(Cmp3::Unordered, Cmp3::Ord);
    let long = |x: usize, y: usize| x > max_input && y > max_input;
    match (a, b) {
        (Str(x), Str(y)) if long(x.len(), y.len()) => Cmp3::Mismatch,
        (Bytes(x), Bytes(y)) if long(x.len(), y.len()) => Cmp3::Mismatch,
        (Int(x), Int(y)) => Cmp3::Ord(x.cmp(&y)),
        (Float(x), Float(y)) => num(x.partial_cmp(&y)),
        (Int(x), Float(y)) => num(cmp_int_float(x, y)),
        (Float(x), Int(y)) => num(cmp_int_float(y, x).map(Ordering::reverse)),
        (Str(x), Str(y)) => Cmp3::Ord(x.cmp(y)),
        (Bool(x), Bool(y)) => {
            if x == y {
                Cmp3::Ord(Ordering::Equal)
            } else {
                Cmp3::Unordered
            }
        }
        (Bytes(x), Bytes(y)) => {
            if x == y {
                Cmp3::Ord(Ordering::Equal)
            } else {
                Cmp3::Unordered
            }
        }
        _ => Cmp3::Mismatch,
    }
}

/// `a == b` in three-valued logic: unknown when the kinds differ (or both
/// are strings longer than `max_input`).
pub(crate) fn equals(a: Val<'_>, b: Val<'_>, max_input: usize) -> Option<bool> {
    match compare(a, b, max_input) {
        Cmp3::Ord(o) => Some(o == Ordering::Equal),
        Cmp3::Unordered => Some(false),
        Cmp3::Mismatch => None,
    }
}

fn cmp_op(op: CmpOp, a: Val<'_>, b: Val<'_>, max_input: usize) -> Option<bool> {
    if let (Val::Bool(_) | Val::Bytes(_), _) = (a, b) {
        if !matches!(op, CmpOp::Eq | CmpOp::Ne) {
            return None;
        }
    }
    match compare(a, b, max_input) {
        Cmp3::Mismatch => None,
        Cmp3::Unordered => Some(op == CmpOp::Ne),
        Cmp3::Ord(o) => Some(match op {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }),
    }
}

fn arith<'x>(op: ArithOp, a: Val<'x>, b: Val<'x>) -> Option<Val<'x>> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => match op {
            ArithOp::Add => x.checked_add(y),
            ArithOp::Sub => x.checked_sub(y),
            ArithOp::Mul => x.checked_mul(y),
            ArithOp::Div => x.checked_div(y),
            ArithOp::Rem => x.checked_rem(y),
        }
        .map(Val::Int),
        (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
            let f = |v| match v {
                Val::Int(i) => i as f64,
                Val::Float(f) => f,
                _ => 0.0,
            };
            let (x, y) = (f(a), f(b));
            let r = match op {
                ArithOp::Add => x + y,
                ArithOp::Sub => x - y,
                ArithOp::Mul => x * y,
                ArithOp::Div => x / y,
                ArithOp::Rem => x % y,
            };
            // Division or remainder by zero, overflow to infinity, and any
            // NaN are unknown, as integer overflow and division by zero are.
            r.is_finite().then_some(Val::Float(r))
        }
        _ => None,
    }
}

/// The evaluation context of one event.
pub(crate) struct Ctx<'e, 'x, F> {
    pub ev: &'e EventRef<'x>,
    pub fields: &'e F,
    /// [`FilterLimits::max_match_input`](super::FilterLimits::max_match_input)
    /// of the filter being evaluated.
    pub max_input: usize,
    /// The event's work budget: every node visited and every byte a
    /// matcher reads is taken from it first; once it is spent, every node
    /// is unknown (see [`Ctx::decide`]).
    pub meter: &'e Meter,
}

/// Work units of a comparison or prefix test of two strings (or byte
/// strings) that reads `n` bytes of each.
fn compare_units(a: Val<'_>, b: Val<'_>) -> u64 {
    match (a, b) {
        (Val::Str(x), Val::Str(y)) | (Val::Bytes(x), Val::Bytes(y)) => {
            budget::compare_units(x.len().min(y.len()))
        }
        _ => 0,
    }
}

impl<'x, F: FieldSource<'x>> Ctx<'_, 'x, F> {
    /// The filter's answer: [`Ctx::truth`] of its root, but unknown if the
    /// event's budget ran out on the way (a node the budget did not cover
    /// answered unknown, which `not` or `exist` could otherwise turn into a
    /// match).
    pub(crate) fn decide(&self, root: &'x Node) -> Option<bool> {
        let t = self.truth(root);
        if self.meter.is_over() {
            None
        } else {
            t
        }
    }

    /// Truth value of a boolean node: `Some(true)`, `Some(false)` or unknown.
    pub(crate) fn truth(&self, n: &'x Node) -> Option<bool> {
        if !self.meter.take(budget::NODE_UNITS) {
            return None;
        }
        match n {
            Node::And(v) => {
                let mut all = Some(true);
                for c in v {
                    match self.truth(c) {
                        Some(false) => return Some(false),
                        None => all = None,
                        Some(true) => {}
                    }
                }
                all
            }
            Node::Or(v) => {
                let mut any = Some(false);
                for c in v {
                    match self.truth(c) {
                        Some(true) => return Some(true),
                        None => any = None,
                        Some(false) => {}
                    }
                }
                any
            }
            Node::Not(a) => self.truth(a).map(|b| !b),
            Node::Cmp(op, a, b) => {
                let (a, b) = (self.value(a)?, self.value(b)?);
                if !self.meter.take(compare_units(a, b)) {
                    return None;
                }
                cmp_op(*op, a, b, self.max_input)
            }
            Node::Exist(a) => Some(self.value(a).is_some()),
            Node::In(a, list) => {
                let v = self.value(a)?;
                let mut any = Some(false);
                for l in list {
                    let l = l.into();
                    if !self.meter.take(compare_units(v, l)) {
                        return None;
                    }
                    match equals(v, l, self.max_input) {
                        Some(true) => return Some(true),
                        None => any = None,
                        Some(false) => {}
                    }
                }
                any
            }
            // `=~` and `~` read all of their subject: at most `max_input`
            // bytes, else unknown.
            Node::Regex(a, re) => match self.value(a)? {
                Val::Str(s) if s.len() <= self.max_input => {
                    if !self.meter.take(re.units(s.len())) {
                        return None;
                    }
                    re.is_match(s)
                }
                _ => None,
            },
            Node::Contains(a, b) => match (self.value(a)?, self.value(b)?) {
                (Val::Str(s), Val::Str(_)) if s.len() > self.max_input => None,
                // Checked first so a long needle costs nothing to prepare.
                (Val::Str(s), Val::Str(t)) if t.len() > s.len() => Some(false),
                (Val::Str(s), Val::Str(t)) => {
                    if !self.meter.take(budget::find_units(s.len(), t.len())) {
                        return None;
                    }
                    Some(memchr::memmem::find(s, t).is_some())
                }
                _ => None,
            },
            // Reads at most the shorter string; unknown when both are long.
            Node::StartsWith(a, b) => match (self.value(a)?, self.value(b)?) {
                (Val::Str(s), Val::Str(t))
                    if s.len() > self.max_input && t.len() > self.max_input =>
                {
                    None
                }
                (Val::Str(s), Val::Str(t)) => {
                    if !self.meter.take(budget::compare_units(s.len().min(t.len()))) {
                        return None;
                    }
                    Some(s.starts_with(t))
                }
                _ => None,
            },
            other => match self.value(other)? {
                Val::Bool(b) => Some(b),
                _ => None,
            },
        }
    }

    /// Value of a node; `None` when unknown (absent field, wrong kind,
    /// integer overflow, division by zero, or a float result that is
    /// infinite or NaN).
    pub(crate) fn value(&self, n: &'x Node) -> Option<Val<'x>> {
        if !self.meter.take(budget::NODE_UNITS) {
            return None;
        }
        match n {
            Node::Lit(l) => Some(l.into()),
            Node::Header(h) => header_value(self.ev, *h),
            Node::Field { name, slot } => self.fields.get(name, *slot),
            Node::Neg(a) => match self.value(a)? {
                Val::Int(i) => i.checked_neg().map(Val::Int),
                Val::Float(f) => f.is_finite().then_some(Val::Float(-f)),
                _ => None,
            },
            Node::Arith(op, a, b) => arith(*op, self.value(a)?, self.value(b)?),
            boolean => self.truth(boolean).map(Val::Bool),
        }
    }
}
