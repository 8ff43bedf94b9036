//! The subscription index: Narada's subscription formats (integer and string
//! keys, `<tag,value>` sets, regular expressions) and the constraint language
//! in one matching engine.
//!
//! Every subscription compiles to a [`Filter`]. At insert, one conjunct of the
//! filter's top-level `and` is chosen as its *access predicate*:
//! - an equality (`$x == lit`, `$x in (lits)`, every key format and every
//!   `<tag,value>` pair) goes into a hash index keyed by (field, value);
//! - otherwise a regular expression, substring or prefix test with a
//!   required literal goes into a gram index keyed by (field, up to 7 bytes
//!   of that literal);
//! - otherwise the subscription is *unindexed* and evaluated for every event
//!   (bounded by [`FilterLimits::max_unindexed`]).
//!
//! Per event the index probes the hash index once per field the event
//! carries, slides the gram index over the indexed string fields, and fully
//! evaluates only the candidates found, so the result is always exactly that
//! of evaluating every filter (a property test checks this).

use std::hash::{Hash, Hasher};

use hashbrown::{Equivalent, HashMap};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use smallvec::SmallVec;
use tagwire_proto::{EventRef, Value};

use super::ast::{CmpOp, HeaderField, Lit, Node, HEADER_FIELDS};
use super::budget::{self, Meter};
use super::eval::{header_value, Ctx, FieldSource, Val};
use super::parser::compile_regex;
use super::{Filter, FilterError, FilterLimits};

/// Which string a regular-expression subscription reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegexTarget {
    /// The event's tag (`$tag`).
    Tag,
    /// A string body field (`$.name`); absent or non-string never matches.
    Field(String),
}

/// A subscription in one of the formats the index accepts (NaradaBrokering's
/// formats plus the constraint language). How each reads the event:
#[derive(Debug, Clone)]
pub enum SubscriptionSpec {
    /// Every event (a tag-only subscription): never evaluated.
    All,
    /// Integer key: body field `field` equals `key` (an integral float equal
    /// to `key` matches too). Same as `$.field == key`.
    IntKey {
        /// Name of the body field holding the key.
        field: String,
        /// The key.
        key: i64,
    },
    /// String key: string body field `field` equals `key`.
    StrKey {
        /// Name of the body field holding the key.
        field: String,
        /// The key.
        key: String,
    },
    /// `<tag,value>` set: the event has **every** pair as a body field
    /// (name == tag) with an equal value; other fields do not matter.
    TagValues(Vec<(String, Value)>),
    /// Regular expression, searched (unanchored; use `^…$` to anchor) in the
    /// tag or a string body field.
    Regex {
        /// What the expression reads.
        target: RegexTarget,
        /// The pattern (regex crate syntax, linear-time matching).
        pattern: String,
    },
    /// A constraint in the filter language, compiled with the index's limits.
    Constraint(String),
    /// An already compiled filter.
    Filter(Filter),
}

fn lit_of(v: &Value) -> Lit {
    match v {
        Value::Int(i) => Lit::Int((*i).into()),
        Value::Float(f) => Lit::Float(*f),
        Value::Bool(b) => Lit::Bool(*b),
        Value::Str(s) => Lit::Str(s.as_str().into()),
        Value::Bytes(b) => Lit::Bytes(b.to_vec().into()),
    }
}

fn field_eq(field: &str, lit: Lit) -> Node {
    Node::Cmp(
        CmpOp::Eq,
        Box::new(Node::Field {
            name: field.into(),
            slot: 0,
        }),
        Box::new(Node::Lit(lit)),
    )
}

impl SubscriptionSpec {
    /// Compiles the subscription to the filter it stands for; evaluating that
    /// filter on an event is the reference ("naive") meaning of the format.
    pub fn compile(&self, limits: &FilterLimits) -> Result<Filter, FilterError> {
        let nonempty = |f: &str| {
            if f.is_empty() {
                Err(FilterError::EmptySubscription {
                    what: "key field name",
                })
            } else {
                Ok(())
            }
        };
        Ok(match self {
            SubscriptionSpec::All => {
                Filter::from_node("true".into(), Node::Lit(Lit::Bool(true)), limits)
            }
            SubscriptionSpec::IntKey { field, key } => {
                nonempty(field)?;
                Filter::from_node(
                    format!("<int {field}={key}>"),
                    field_eq(field, Lit::Int((*key).into())),
                    limits,
                )
            }
            SubscriptionSpec::StrKey { field, key } => {
                nonempty(field)?;
                Filter::from_node(
                    format!("<string {field}={key:?}>"),
                    field_eq(field, Lit::Str(key.as_str().into())),
                    limits,
                )
            }
            SubscriptionSpec::TagValues(pairs) => {
                if pairs.is_empty() {
                    return Err(FilterError::EmptySubscription {
                        what: "<tag,value> set",
                    });
                }
                let nodes = pairs.len() * 3;
                if nodes > limits.max_nodes {
                    return Err(FilterError::LimitExceeded {
                        limit: "max_nodes",
                        value: nodes,
                        max: limits.max_nodes,
                        at: None,
                    });
                }
                let mut text = String::from("<tag,value>{");
                let mut conj = Vec::with_capacity(pairs.len());
                for (i, (tag, v)) in pairs.iter().enumerate() {
                    nonempty(tag)?;
                    if i > 0 {
                        text.push_str(", ");
                    }
                    text.push_str(&format!("{tag}={v:?}"));
                    conj.push(field_eq(tag, lit_of(v)));
                }
                text.push('}');
                let root = if conj.len() == 1 {
                    conj.pop().unwrap_or(Node::Lit(Lit::Bool(false)))
                } else {
                    Node::And(conj)
                };
                Filter::from_node(text, root, limits)
            }
            SubscriptionSpec::Regex { target, pattern } => {
                super::check_len(pattern.len(), limits)?;
                let re = compile_regex(pattern, 0, limits)?;
                let (subject, text) = match target {
                    RegexTarget::Tag => (
                        Node::Header(HeaderField::Tag),
                        format!("$tag =~ {pattern:?}"),
                    ),
                    RegexTarget::Field(f) => {
                        nonempty(f)?;
                        (
                            Node::Field {
                                name: f.as_str().into(),
                                slot: 0,
                            },
                            format!("$.{f} =~ {pattern:?}"),
                        )
                    }
                };
                Filter::from_node(text, Node::Regex(Box::new(subject), re), limits)
            }
            SubscriptionSpec::Constraint(text) => Filter::compile(text, limits)?,
            SubscriptionSpec::Filter(f) => f.clone(),
        })
    }
}

/// Number of header operands; body field slot `s` is operand `HDR + s`.
const HDR: u32 = HEADER_FIELDS.len() as u32;
/// Most literal alternatives a regex may have and still be gram-indexed.
const MAX_ALTERNATIVES: usize = 64;

/// A normalized value for equality hashing: integral floats become ints, so
/// `$.x == 3` finds an event whose `x` is `3.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Int(i128),
    Float(u64),
    Bool(bool),
    /// A string's bytes.
    Str(Box<[u8]>),
    Bytes(Box<[u8]>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRef<'a> {
    Int(i128),
    Float(u64),
    Bool(bool),
    /// A string's bytes.
    Str(&'a [u8]),
    Bytes(&'a [u8]),
}

fn norm_float(f: f64) -> KeyRef<'static> {
    if f.fract() == 0.0 && f.abs() < 1.7014118346046923e38 {
        KeyRef::Int(f as i128)
    } else {
        KeyRef::Float(f.to_bits())
    }
}

impl<'a> KeyRef<'a> {
    fn of(v: Val<'a>) -> KeyRef<'a> {
        match v {
            Val::Int(i) => KeyRef::Int(i),
            Val::Float(f) => norm_float(f),
            Val::Bool(b) => KeyRef::Bool(b),
            Val::Str(s) => KeyRef::Str(s),
            Val::Bytes(b) => KeyRef::Bytes(b),
        }
    }

    fn to_key(self) -> Key {
        match self {
            KeyRef::Int(i) => Key::Int(i),
            KeyRef::Float(f) => Key::Float(f),
            KeyRef::Bool(b) => Key::Bool(b),
            KeyRef::Str(s) => Key::Str(s.into()),
            KeyRef::Bytes(b) => Key::Bytes(b.into()),
        }
    }

    fn hash_into<H: Hasher>(self, op: u32, h: &mut H) {
        h.write_u32(op);
        match self {
            KeyRef::Int(i) => {
                h.write_u8(0);
                h.write_i128(i);
            }
            KeyRef::Float(f) => {
                h.write_u8(1);
                h.write_u64(f);
            }
            KeyRef::Bool(b) => {
                h.write_u8(2);
                h.write_u8(b as u8);
            }
            KeyRef::Str(s) => {
                h.write_u8(3);
                h.write(s);
                h.write_usize(s.len());
            }
            KeyRef::Bytes(b) => {
                h.write_u8(4);
                h.write(b);
                h.write_usize(b.len());
            }
        }
    }
}

impl Key {
    fn as_ref(&self) -> KeyRef<'_> {
        match self {
            Key::Int(i) => KeyRef::Int(*i),
            Key::Float(f) => KeyRef::Float(*f),
            Key::Bool(b) => KeyRef::Bool(*b),
            Key::Str(s) => KeyRef::Str(s),
            Key::Bytes(b) => KeyRef::Bytes(b),
        }
    }
}

/// Hash-index key: (operand, normalized value).
#[derive(Debug, Clone, PartialEq, Eq)]
struct EqKey {
    op: u32,
    key: Key,
}

impl Hash for EqKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key.as_ref().hash_into(self.op, h)
    }
}

/// Borrowed probe for [`EqKey`], so lookups do not allocate.
struct EqProbe<'a> {
    op: u32,
    key: KeyRef<'a>,
}

impl Hash for EqProbe<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key.hash_into(self.op, h)
    }
}

impl Equivalent<EqKey> for EqProbe<'_> {
    fn equivalent(&self, k: &EqKey) -> bool {
        self.op == k.op && self.key == k.key.as_ref()
    }
}

/// Hash-index key on two equalities at once: (operand, value) twice, the
/// operands in increasing order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PairKey {
    a: EqKey,
    b: EqKey,
}

impl Hash for PairKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.a.key.as_ref().hash_into(self.a.op, h);
        self.b.key.as_ref().hash_into(self.b.op, h);
    }
}

/// Borrowed probe for [`PairKey`].
struct PairProbe<'a> {
    a: EqProbe<'a>,
    b: EqProbe<'a>,
}

impl Hash for PairProbe<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.a.key.hash_into(self.a.op, h);
        self.b.key.hash_into(self.b.op, h);
    }
}

impl Equivalent<PairKey> for PairProbe<'_> {
    fn equivalent(&self, k: &PairKey) -> bool {
        self.a.equivalent(&k.a) && self.b.equivalent(&k.b)
    }
}

/// Most distinct operand pairs used by pair access; each costs one probe
/// per event, so beyond this new subscriptions use single equalities.
const MAX_PAIR_SHAPES: usize = 32;

/// Longest gram (bytes of a required literal) the literal index uses.
const MAX_GRAM: usize = 7;

/// Gram-index key: operand, and the gram's length (top byte) and bytes.
type GramKey = (u32, u64);

fn gram_key(op: u32, g: &[u8]) -> GramKey {
    let mut v = (g.len() as u64) << 56;
    for (i, b) in g.iter().enumerate() {
        v |= (*b as u64) << (8 * i);
    }
    (op, v)
}

fn gram_len(k: &GramKey) -> usize {
    (k.1 >> 56) as usize
}

/// How a subscription is found.
#[derive(Debug, Clone)]
enum Access {
    /// Matches every event, never evaluated.
    All,
    /// Evaluated for every event.
    Scan,
    /// Candidate when operand `op` equals one of `keys`.
    Eq { op: u32, keys: Vec<Key> },
    /// Candidate when both equalities hold (two conjuncts `$x == lit`).
    Pair(Box<PairKey>),
    /// Candidate when operand `op` contains one of these grams.
    Gram { op: u32, grams: Vec<GramKey> },
}

/// What the index keeps of a subscription besides its [`Head`]: read at
/// insert and removal, and per event only for candidates that must be
/// evaluated.
#[derive(Debug, Clone)]
struct Entry {
    filter: Filter,
    access: Access,
    /// Body-field slots this entry holds a reference on.
    slots: Vec<u32>,
}

/// What a match hands back, in a dense array of its own: with 100,000
/// subscriptions, a candidate costs one cache line here rather than a walk
/// through its compiled filter.
#[derive(Debug, Clone)]
struct Head<T> {
    id: u64,
    /// The access predicate is the whole filter and agrees with evaluation
    /// on every value (see [`exact_access`]): a candidate is a match.
    exact: bool,
    value: T,
}

/// Counts of the index's subscriptions by how they are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    /// All subscriptions.
    pub subscriptions: usize,
    /// Match-everything subscriptions (no evaluation).
    pub all: usize,
    /// Found through the equality hash index.
    pub equality_indexed: usize,
    /// Found through the literal gram index (regex, `~`, `~^`).
    pub literal_indexed: usize,
    /// Evaluated for every event.
    pub unindexed: usize,
    /// Distinct body-field names referenced.
    pub field_names: usize,
}

/// Per-caller scratch space for [`SubscriptionIndex::matching`]: keep one per
/// thread (lane) and reuse it, so matching allocates nothing once warm.
#[derive(Debug, Default)]
pub struct MatchScratch {
    epoch: u32,
    /// For each body slot: (epoch when set, index into `vals`).
    slot_map: Vec<(u32, u32)>,
    /// Per entry: epoch when last made a candidate (dedup of gram hits).
    stamps: Vec<u32>,
    vals: Vec<Val<'static>>,
    filled: Vec<u32>,
    cands: Vec<u32>,
}

/// Reuses a vector's allocation for another lifetime (it is emptied first;
/// the in-place `collect` keeps the buffer).
#[allow(clippy::unnecessary_filter_map)] // `filter` cannot change the lifetime.
fn recycle<'b>(mut v: Vec<Val<'_>>) -> Vec<Val<'b>> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

impl MatchScratch {
    /// Empty scratch space; it grows to fit the index on first use.
    pub fn new() -> Self {
        Self::default()
    }

    fn prepare(&mut self, slots: usize, entries: usize) {
        if self.epoch == u32::MAX {
            self.epoch = 0;
            self.slot_map.iter_mut().for_each(|s| s.0 = 0);
            self.stamps.iter_mut().for_each(|s| *s = 0);
        }
        self.epoch += 1;
        if self.slot_map.len() < slots {
            self.slot_map.resize(slots, (0, 0));
        }
        if self.stamps.len() < entries {
            self.stamps.resize(entries, 0);
        }
        self.filled.clear();
        self.cands.clear();
    }
}

struct SlotFields<'s, 'x> {
    map: &'s [(u32, u32)],
    epoch: u32,
    vals: &'s [Val<'x>],
}

impl<'x> FieldSource<'x> for SlotFields<'_, 'x> {
    fn get(&self, _name: &str, slot: u32) -> Option<Val<'x>> {
        match self.map.get(slot as usize) {
            Some(&(e, i)) if e == self.epoch => self.vals.get(i as usize).copied(),
            _ => None,
        }
    }
}

/// Subscriptions of every format, indexed so that the subscriptions an event
/// matches are found without evaluating all of them. `T` is the caller's
/// handle (a channel id, a sender), returned for each match.
///
/// Bounded: at most [`FilterLimits::max_subscriptions`] entries, of which at
/// most [`FilterLimits::max_unindexed`] may be unindexed; inserts beyond
/// either limit fail with [`FilterError::LimitExceeded`].
#[derive(Debug, Clone)]
pub struct SubscriptionIndex<T> {
    limits: FilterLimits,
    entries: Vec<Option<Entry>>,
    /// Kept in step with `entries`.
    heads: Vec<Option<Head<T>>>,
    free_entries: Vec<u32>,
    by_id: HashMap<u64, u32>,
    names: HashMap<Box<str>, (u32, u32)>,
    free_slots: Vec<u32>,
    next_slot: u32,
    eq: HashMap<EqKey, EntryList>,
    /// Per operand: entries using the equality index on it.
    eq_ops: Vec<u32>,
    pairs: HashMap<PairKey, EntryList>,
    /// Operand pairs in use by pair access, with their entry counts.
    pair_ops: HashMap<(u32, u32), u32>,
    grams: HashMap<GramKey, EntryList>,
    /// Per operand: grams registered of each length 1..=MAX_GRAM.
    gram_ops: Vec<[u32; MAX_GRAM]>,
    all: EntryList,
    scan: EntryList,
    stats: IndexStats,
    /// How far into an event string the literal (gram) index looks: the
    /// largest `max_match_input` among the entries ever added. A `~` or
    /// `=~` on a longer subject is unknown, and so is a `~^` whose literal
    /// is longer too (a shorter literal lies within this reach), so a gram
    /// further in can make no candidate (issue 24 item 9: a 15 MiB field
    /// was scanned whole, ~300 ms per event).
    gram_reach: usize,
}

impl<T: Clone> Default for SubscriptionIndex<T> {
    fn default() -> Self {
        Self::new(FilterLimits::default())
    }
}

/// Entries sharing one index key. Removing one costs O(1) however many
/// share the key (thousands of subscriptions with the same filter): past
/// [`EntryList::SCAN_MAX`] entries the list keeps each entry's position.
/// Up to two entries live inline, in the hash table's slot: a key held by
/// one subscription (`$.k == 17` among 100,000 distinct keys) costs no
/// second cache miss per probe.
#[derive(Debug, Clone, Default)]
struct EntryList {
    items: SmallVec<[u32; 2]>,
    positions: Option<Box<HashMap<u32, usize>>>,
}

impl EntryList {
    /// Up to this many entries a removal scans the list.
    const SCAN_MAX: usize = 16;

    fn push(&mut self, e: u32) {
        self.items.push(e);
        if let Some(p) = &mut self.positions {
            p.insert(e, self.items.len() - 1);
        } else if self.items.len() > Self::SCAN_MAX {
            let p = self
                .items
                .iter()
                .enumerate()
                .map(|(i, &x)| (x, i))
                .collect();
            self.positions = Some(Box::new(p));
        }
    }

    fn remove(&mut self, e: u32) {
        let at = match &mut self.positions {
            Some(p) => p.remove(&e),
            None => self.items.iter().position(|&x| x == e),
        };
        let Some(at) = at else { return };
        self.items.swap_remove(at);
        if let (Some(p), Some(&moved)) = (&mut self.positions, self.items.get(at)) {
            p.insert(moved, at);
        }
    }
}

impl std::ops::Deref for EntryList {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        &self.items
    }
}

impl<'a> IntoIterator for &'a EntryList {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

fn remove_from(list: &mut EntryList, e: u32) {
    list.remove(e);
}

fn bump(v: &mut Vec<u32>, op: u32, up: bool) {
    let i = op as usize;
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    if up {
        v[i] += 1;
    } else {
        v[i] = v[i].saturating_sub(1);
    }
}

/// Operand id of a field node, if it is a plain header or body field.
fn operand(n: &Node) -> Option<u32> {
    match n {
        Node::Header(h) => Some(h.index()),
        Node::Field { slot, .. } => Some(HDR + slot),
        _ => None,
    }
}

/// Literals, one of which every match of `pattern` contains; `None` when
/// there is no such finite, non-empty set.
fn regex_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .ok()?;
    let mut best: Option<Vec<Vec<u8>>> = None;
    for kind in [ExtractKind::Prefix, ExtractKind::Suffix] {
        let seq = Extractor::new().kind(kind).extract(&hir);
        let Some(lits) = seq.literals() else { continue };
        if lits.is_empty()
            || lits.len() > MAX_ALTERNATIVES
            || lits.iter().any(|l| l.as_bytes().is_empty())
        {
            continue;
        }
        let cand: Vec<Vec<u8>> = lits.iter().map(|l| l.as_bytes().to_vec()).collect();
        let min = |v: &Vec<Vec<u8>>| v.iter().map(Vec::len).min().unwrap_or(0);
        if best.as_ref().is_none_or(|b| min(&cand) > min(b)) {
            best = Some(cand);
        }
    }
    best
}

/// Whether every event that finds an entry through `access` matches
/// `filter`, so that the entry needs no evaluation: the filter is nothing
/// but its equality access predicate (`$x == lit` or `$x in (lits)`), and
/// equal keys mean equal values to evaluation too. That holds for integers,
/// booleans, integral floats (keyed as integers, and evaluation compares
/// integers with floats exactly) and other floats but NaN (never equal to
/// itself), and for strings and bytes evaluation may read in full (at most
/// `max_match_input` bytes; longer ones compare as unknown).
fn exact_access(filter: &Filter, access: &Access) -> bool {
    let Access::Eq { op, keys } = access else {
        return false;
    };
    let whole = match &filter.root {
        Node::Cmp(CmpOp::Eq, a, b) => match (&**a, &**b) {
            (x, Node::Lit(_)) | (Node::Lit(_), x) => operand(x) == Some(*op),
            _ => false,
        },
        Node::In(a, _) => operand(a) == Some(*op),
        _ => false,
    };
    let max = filter.max_match_input;
    whole
        && keys.iter().all(|k| match k {
            Key::Int(_) | Key::Bool(_) => true,
            Key::Float(bits) => !f64::from_bits(*bits).is_nan(),
            Key::Str(s) => s.len() <= max,
            Key::Bytes(b) => b.len() <= max,
        })
}

impl<T: Clone> SubscriptionIndex<T> {
    /// An empty index; subscriptions are compiled and bounded by `limits`.
    pub fn new(limits: FilterLimits) -> Self {
        SubscriptionIndex {
            limits,
            entries: Vec::new(),
            heads: Vec::new(),
            free_entries: Vec::new(),
            by_id: HashMap::new(),
            names: HashMap::new(),
            free_slots: Vec::new(),
            next_slot: 0,
            eq: HashMap::new(),
            eq_ops: Vec::new(),
            pairs: HashMap::new(),
            pair_ops: HashMap::new(),
            grams: HashMap::new(),
            gram_ops: Vec::new(),
            all: EntryList::default(),
            scan: EntryList::default(),
            stats: IndexStats::default(),
            gram_reach: 0,
        }
    }

    /// The limits subscriptions are compiled with.
    pub fn limits(&self) -> &FilterLimits {
        &self.limits
    }

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when there are no subscriptions.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// How the subscriptions are indexed.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            subscriptions: self.len(),
            field_names: self.names.len(),
            ..self.stats
        }
    }

    /// The handle stored under `id`.
    pub fn get(&self, id: u64) -> Option<&T> {
        let e = *self.by_id.get(&id)?;
        self.heads[e as usize].as_ref().map(|h| &h.value)
    }

    /// The handle stored under `id`, to change in place (the caller keeps
    /// what it stores there in step with its own state).
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let e = *self.by_id.get(&id)?;
        self.heads[e as usize].as_mut().map(|h| &mut h.value)
    }

    /// The filter subscription `id` compiled to.
    pub fn filter(&self, id: u64) -> Option<&Filter> {
        let e = *self.by_id.get(&id)?;
        self.entries[e as usize].as_ref().map(|en| &en.filter)
    }

    /// Compiles `spec` and adds it under `id` with handle `value`.
    ///
    /// Fails on a compile error, a duplicate id, or a full index; the index
    /// is unchanged then.
    pub fn insert(&mut self, id: u64, spec: SubscriptionSpec, value: T) -> Result<(), FilterError> {
        self.insert_with(id, spec, value, false).map(|_| ())
    }

    /// Adds `filter` under `id` only if events find it through the equality
    /// or literal index (it is neither matched by every event nor evaluated
    /// for every event); returns whether it was added. The router uses this
    /// to keep per-event cost proportional to the candidates, not to every
    /// filter held.
    pub fn insert_indexed(
        &mut self,
        id: u64,
        filter: Filter,
        value: T,
    ) -> Result<bool, FilterError> {
        self.insert_with(id, SubscriptionSpec::Filter(filter), value, true)
    }

    fn insert_with(
        &mut self,
        id: u64,
        spec: SubscriptionSpec,
        value: T,
        indexed_only: bool,
    ) -> Result<bool, FilterError> {
        if self.by_id.contains_key(&id) {
            return Err(FilterError::DuplicateId { id });
        }
        if self.len() >= self.limits.max_subscriptions {
            return Err(FilterError::LimitExceeded {
                limit: "max_subscriptions",
                value: self.len() + 1,
                max: self.limits.max_subscriptions,
                at: None,
            });
        }
        let mut filter = spec.compile(&self.limits)?;
        let reach = filter.max_match_input;
        let slots = self.bind(&mut filter);
        let access = self.choose_access(&filter.root);
        if indexed_only && matches!(access, Access::All | Access::Scan) {
            for s in slots {
                self.release_slot(s);
            }
            return Ok(false);
        }
        if matches!(access, Access::Scan) && self.stats.unindexed >= self.limits.max_unindexed {
            for s in slots {
                self.release_slot(s);
            }
            return Err(FilterError::LimitExceeded {
                limit: "max_unindexed",
                value: self.stats.unindexed + 1,
                max: self.limits.max_unindexed,
                at: None,
            });
        }
        let e = match self.free_entries.pop() {
            Some(e) => e,
            None => {
                self.entries.push(None);
                self.heads.push(None);
                (self.entries.len() - 1) as u32
            }
        };
        let exact = exact_access(&filter, &access);
        match &access {
            Access::All => {
                self.all.push(e);
                self.stats.all += 1;
            }
            Access::Scan => {
                self.scan.push(e);
                self.stats.unindexed += 1;
            }
            Access::Eq { op, keys } => {
                for k in keys {
                    self.eq
                        .entry(EqKey {
                            op: *op,
                            key: k.clone(),
                        })
                        .or_default()
                        .push(e);
                }
                bump(&mut self.eq_ops, *op, true);
                self.stats.equality_indexed += 1;
            }
            Access::Pair(k) => {
                self.pairs.entry((**k).clone()).or_default().push(e);
                *self.pair_ops.entry((k.a.op, k.b.op)).or_default() += 1;
                self.stats.equality_indexed += 1;
            }
            Access::Gram { op, grams } => {
                self.gram_reach = self.gram_reach.max(reach);
                if self.gram_ops.len() <= *op as usize {
                    self.gram_ops.resize(*op as usize + 1, [0; MAX_GRAM]);
                }
                for g in grams {
                    self.grams.entry(*g).or_default().push(e);
                    let len = gram_len(g);
                    self.gram_ops[*op as usize][len - 1] += 1;
                }
                self.stats.literal_indexed += 1;
            }
        }
        self.entries[e as usize] = Some(Entry {
            filter,
            access,
            slots,
        });
        self.heads[e as usize] = Some(Head { id, exact, value });
        self.by_id.insert(id, e);
        Ok(true)
    }

    /// Removes subscription `id`, returning its handle.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let e = self.by_id.remove(&id)?;
        let entry = self.entries[e as usize].take()?;
        let head = self.heads[e as usize].take()?;
        match &entry.access {
            Access::All => {
                remove_from(&mut self.all, e);
                self.stats.all -= 1;
            }
            Access::Scan => {
                remove_from(&mut self.scan, e);
                self.stats.unindexed -= 1;
            }
            Access::Eq { op, keys } => {
                for k in keys {
                    let probe = EqProbe {
                        op: *op,
                        key: k.as_ref(),
                    };
                    if let Some(list) = self.eq.get_mut(&probe) {
                        remove_from(list, e);
                        if list.is_empty() {
                            self.eq.remove(&probe);
                        }
                    }
                }
                bump(&mut self.eq_ops, *op, false);
                self.stats.equality_indexed -= 1;
            }
            Access::Pair(k) => {
                if let Some(list) = self.pairs.get_mut(&**k) {
                    remove_from(list, e);
                    if list.is_empty() {
                        self.pairs.remove(&**k);
                    }
                }
                let shape = (k.a.op, k.b.op);
                if let Some(c) = self.pair_ops.get_mut(&shape) {
                    *c -= 1;
                    if *c == 0 {
                        self.pair_ops.remove(&shape);
                    }
                }
                self.stats.equality_indexed -= 1;
            }
            Access::Gram { op, grams } => {
                for g in grams {
                    if let Some(list) = self.grams.get_mut(g) {
                        remove_from(list, e);
                        if list.is_empty() {
                            self.grams.remove(g);
                        }
                    }
                    let len = gram_len(g);
                    if let Some(c) = self.gram_ops.get_mut(*op as usize) {
                        c[len - 1] = c[len - 1].saturating_sub(1);
                    }
                }
                self.stats.literal_indexed -= 1;
            }
        }
        for s in &entry.slots {
            self.release_slot(*s);
        }
        self.free_entries.push(e);
        Some(head.value)
    }

    /// Gives every body field of `filter` a slot; returns the distinct slots.
    fn bind(&mut self, filter: &mut Filter) -> Vec<u32> {
        let mut held = Vec::new();
        let names = &mut self.names;
        let free = &mut self.free_slots;
        let next = &mut self.next_slot;
        filter.root.for_each_field_mut(&mut |name, slot| {
            let s = match names.get_mut(name) {
                Some((s, refs)) => {
                    if !held.contains(s) {
                        *refs += 1;
                        held.push(*s);
                    }
                    *s
                }
                None => {
                    let s = free.pop().unwrap_or_else(|| {
                        *next += 1;
                        *next - 1
                    });
                    names.insert(name.into(), (s, 1));
                    held.push(s);
                    s
                }
            };
            *slot = s;
        });
        held
    }

    fn release_slot(&mut self, s: u32) {
        let mut gone = None;
        for (name, (slot, refs)) in self.names.iter_mut() {
            if *slot == s {
                *refs -= 1;
                if *refs == 0 {
                    gone = Some(name.clone());
                }
                break;
            }
        }
        if let Some(name) = gone {
            self.names.remove(&name);
            self.free_slots.push(s);
        }
    }

    fn eq_cost(&self, op: u32, k: KeyRef<'_>) -> usize {
        self.eq.get(&EqProbe { op, key: k }).map_or(0, |l| l.len())
    }

    /// Picks the access predicate among the top-level conjuncts.
    fn choose_access(&self, root: &Node) -> Access {
        if let Node::Lit(Lit::Bool(true)) = root {
            return Access::All;
        }
        let conjuncts: &[Node] = match root {
            Node::And(v) => v,
            other => std::slice::from_ref(other),
        };
        let mut best_eq: Option<(usize, u32, Vec<Key>)> = None;
        // Single-value equalities, for pair access.
        let mut singles: Vec<(u32, Key)> = Vec::new();
        let mut best_gram: Option<(usize, u32, Vec<GramKey>)> = None;
        for c in conjuncts {
            let eq: Option<(u32, Vec<Key>)> = match c {
                Node::Cmp(CmpOp::Eq, a, b) => match (operand(a), operand(b), &**a, &**b) {
                    (Some(op), None, _, Node::Lit(l)) | (None, Some(op), Node::Lit(l), _) => {
                        Some((op, vec![KeyRef::of(l.into()).to_key()]))
                    }
                    _ => None,
                },
                Node::In(a, list) => operand(a).map(|op| {
                    let mut keys: Vec<Key> = Vec::new();
                    for l in list {
                        let k = KeyRef::of(l.into()).to_key();
                        if !keys.contains(&k) {
                            keys.push(k);
                        }
                    }
                    (op, keys)
                }),
                _ => None,
            };
            if let Some((op, keys)) = eq {
                if keys.len() == 1 && !singles.iter().any(|(o, _)| *o == op) {
                    singles.push((op, keys[0].clone()));
                }
                let cost = keys
                    .iter()
                    .map(|k| self.eq_cost(op, k.as_ref()))
                    .sum::<usize>();
                if best_eq.as_ref().is_none_or(|b| cost < b.0) {
                    best_eq = Some((cost, op, keys));
                }
                continue;
            }
            if best_eq.is_some() {
                continue;
            }
            let lits: Option<(u32, Vec<Vec<u8>>)> = match c {
                Node::Contains(a, b) | Node::StartsWith(a, b) => match (operand(a), &**b) {
                    (Some(op), Node::Lit(Lit::Str(s))) if !s.is_empty() => {
                        Some((op, vec![s.as_bytes().to_vec()]))
                    }
                    _ => None,
                },
                Node::Regex(a, re) => {
                    operand(a).and_then(|op| regex_literals(re.as_str()).map(|l| (op, l)))
                }
                _ => None,
            };
            if let Some((op, lits)) = lits {
                let mut grams = Vec::new();
                let mut cost = 0;
                for lit in &lits {
                    let g = lit.len().min(MAX_GRAM);
                    // The window whose posting list is shortest now.
                    let (c, k) = lit
                        .windows(g)
                        .map(|w| {
                            let k = gram_key(op, w);
                            (self.grams.get(&k).map_or(0, |l| l.len()), k)
                        })
                        .min()
                        .unwrap_or((0, gram_key(op, &lit[..g])));
                    if !grams.contains(&k) {
                        grams.push(k);
                        cost += c;
                    }
                }
                // Short literals (1-2 bytes) hit often: weigh them down.
                let shortest = lits.iter().map(Vec::len).min().unwrap_or(0);
                let cost = cost + if shortest < 3 { 1 << 20 } else { 0 };
                if best_gram.as_ref().is_none_or(|b| cost < b.0) {
                    best_gram = Some((cost, op, grams));
                }
            }
        }
        if singles.len() >= 2 {
            // The two lowest operands: a deterministic choice keeps the
            // number of distinct pairs (one probe each per event) small.
            singles.sort_by_key(|(o, _)| *o);
            let mut it = singles.into_iter();
            if let (Some((oa, ka)), Some((ob, kb))) = (it.next(), it.next()) {
                if self.pair_ops.contains_key(&(oa, ob)) || self.pair_ops.len() < MAX_PAIR_SHAPES {
                    return Access::Pair(Box::new(PairKey {
                        a: EqKey { op: oa, key: ka },
                        b: EqKey { op: ob, key: kb },
                    }));
                }
            }
        }
        if let Some((_, op, keys)) = best_eq {
            return Access::Eq { op, keys };
        }
        if let Some((_, op, grams)) = best_gram {
            return Access::Gram { op, grams };
        }
        Access::Scan
    }

    /// Pushes the handle of every subscription `event` matches onto `out`.
    pub fn matching(&self, event: &EventRef<'_>, scratch: &mut MatchScratch, out: &mut Vec<T>) {
        self.for_each_match(event, scratch, |_, v| out.push(v.clone()));
    }

    /// Pushes the id of every subscription `event` matches onto `out`.
    pub fn matching_ids(
        &self,
        event: &EventRef<'_>,
        scratch: &mut MatchScratch,
        out: &mut Vec<u64>,
    ) {
        self.for_each_match(event, scratch, |id, _| out.push(id));
    }

    /// Calls `f(id, handle)` once for every subscription `event` matches, in
    /// no particular order.
    pub fn for_each_match<'s>(
        &'s self,
        event: &EventRef<'_>,
        scratch: &mut MatchScratch,
        f: impl FnMut(u64, &'s T),
    ) {
        self.for_each_match_in(event, scratch, &Meter::new(budget::UNLIMITED), f)
    }

    /// Pushes the handle of every subscription `event` matches onto `out`,
    /// its evaluations drawing on `meter` (the event's budget): once it is
    /// spent, the candidates left that need an evaluation do not match.
    pub(crate) fn matching_in(
        &self,
        event: &EventRef<'_>,
        scratch: &mut MatchScratch,
        meter: &Meter,
        out: &mut Vec<T>,
    ) {
        self.for_each_match_in(event, scratch, meter, |_, v| out.push(v.clone()));
    }

    fn for_each_match_in<'s>(
        &'s self,
        event: &EventRef<'_>,
        scratch: &mut MatchScratch,
        meter: &Meter,
        mut f: impl FnMut(u64, &'s T),
    ) {
        for &e in self.all.iter() {
            if let Some(h) = &self.heads[e as usize] {
                f(h.id, &h.value);
            }
        }
        if self.all.len() == self.len() {
            return;
        }
        scratch.prepare(self.next_slot as usize, self.entries.len());
        let MatchScratch {
            epoch,
            slot_map,
            stamps,
            vals,
            filled,
            cands,
        } = scratch;
        let epoch = *epoch;
        let mut ev_vals: Vec<Val<'_>> = recycle(std::mem::take(vals));

        // 1. Body fields the index knows, into their slots (one hash each).
        // Values are not read (their UTF-8 was checked by the parse); names
        // are at most 255 bytes each.
        if !self.names.is_empty() {
            for (name, v) in event.raw_fields() {
                let Ok(name) = std::str::from_utf8(name) else {
                    continue;
                };
                if let Some(&(slot, _)) = self.names.get(name) {
                    slot_map[slot as usize] = (epoch, ev_vals.len() as u32);
                    ev_vals.push(v.into());
                    filled.push(slot);
                }
            }
        }

        // 2. Candidates: unindexed, equality hits, gram hits.
        cands.extend_from_slice(&self.scan);
        let eq_ops = &self.eq_ops;
        let has_eq = |op: u32| eq_ops.get(op as usize).is_some_and(|&c| c > 0);
        if !self.eq.is_empty() {
            for (i, (_, h, _)) in HEADER_FIELDS.iter().enumerate() {
                let op = i as u32;
                if has_eq(op) {
                    if let Some(v) = header_value(event, *h) {
                        if let Some(list) = self.eq.get(&EqProbe {
                            op,
                            key: KeyRef::of(v),
                        }) {
                            cands.extend_from_slice(list);
                        }
                    }
                }
            }
            for &slot in filled.iter() {
                let op = HDR + slot;
                if has_eq(op) {
                    let v = ev_vals[slot_map[slot as usize].1 as usize];
                    if let Some(list) = self.eq.get(&EqProbe {
                        op,
                        key: KeyRef::of(v),
                    }) {
                        cands.extend_from_slice(list);
                    }
                }
            }
        }
        if !self.pairs.is_empty() {
            let value_of = |op: u32| -> Option<Val<'_>> {
                if op < HDR {
                    header_value(event, HEADER_FIELDS[op as usize].1)
                } else {
                    match slot_map.get((op - HDR) as usize) {
                        Some(&(ep, i)) if ep == epoch => ev_vals.get(i as usize).copied(),
                        _ => None,
                    }
                }
            };
            for &(oa, ob) in self.pair_ops.keys() {
                let (Some(va), Some(vb)) = (value_of(oa), value_of(ob)) else {
                    continue;
                };
                let probe = PairProbe {
                    a: EqProbe {
                        op: oa,
                        key: KeyRef::of(va),
                    },
                    b: EqProbe {
                        op: ob,
                        key: KeyRef::of(vb),
                    },
                };
                if let Some(list) = self.pairs.get(&probe) {
                    cands.extend_from_slice(list);
                }
            }
        }
        if !self.grams.is_empty() {
            let mut scan_str = |op: u32, s: &[u8], cands: &mut Vec<u32>| {
                let Some(lens) = self.gram_ops.get(op as usize) else {
                    return;
                };
                let s = &s[..s.len().min(self.gram_reach)];
                for g in 1..=MAX_GRAM {
                    if lens[g - 1] == 0 || s.len() < g {
                        continue;
                    }
                    // Each window is a hash probe: counted, and not begun
                    // past the event's budget (the candidates not found
                    // then do not match, and the event is counted).
                    if !meter.take(budget::gram_units(s.len() + 1 - g)) {
                        return;
                    }
                    for w in s.windows(g) {
                        if let Some(list) = self.grams.get(&gram_key(op, w)) {
                            for &e in list {
                                if stamps[e as usize] != epoch {
                                    stamps[e as usize] = epoch;
                                    cands.push(e);
                                }
                            }
                        }
                    }
                }
            };
            for (i, (_, h, _)) in HEADER_FIELDS.iter().enumerate() {
                if let Some(Val::Str(s)) = header_value(event, *h) {
                    scan_str(i as u32, s, cands);
                }
            }
            for &slot in filled.iter() {
                if let Val::Str(s) = ev_vals[slot_map[slot as usize].1 as usize] {
                    scan_str(HDR + slot, s, cands);
                }
            }
        }

        // 3. Evaluate the candidates only.
        let src = SlotFields {
            map: slot_map,
            epoch,
            vals: &ev_vals,
        };
        for &e in cands.iter() {
            let Some(h) = &self.heads[e as usize] else {
                continue;
            };
            if h.exact {
                f(h.id, &h.value);
                continue;
            }
            if let Some(en) = &self.entries[e as usize] {
                let ctx = Ctx {
                    ev: event,
                    fields: &src,
                    max_input: en.filter.max_match_input,
                    meter,
                };
                if ctx.decide(&en.filter.root) == Some(true) {
                    f(h.id, &h.value);
                }
            }
        }
        *vals = recycle(ev_vals);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_literals_are_required_substrings() {
        let l = regex_literals("^/sensors/b12/room3/temp[0-9]+$").unwrap();
        assert!(l.iter().all(|x| !x.is_empty()));
        assert!(regex_literals(".*").is_none());
        assert!(regex_literals("a*").is_none());
    }

    #[test]
    fn integral_floats_hash_as_ints() {
        assert_eq!(norm_float(3.0), KeyRef::Int(3));
        assert_eq!(norm_float(-0.0), KeyRef::Int(0));
        assert!(matches!(norm_float(3.5), KeyRef::Float(_)));
    }
}
