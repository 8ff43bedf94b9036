//! Tags, patterns and the tag table that maps a published tag to the
//! subscriptions whose pattern matches it.
//!
//! A tag is `/`-separated levels (`/conf/room1/audio`); a pattern may use `*`
//! for exactly one level and `**` for any number of levels, zero included
//! (`/conf/**` matches `/conf`, `/conf/a` and `/conf/a/b`). The [`TagTable`] is
//! a trie over levels (as in nats-server's sublist: literal children plus one
//! slot each for `*` and `**`), walked as a set of states so that matching
//! costs O(levels × live states) even with many `**`, plus a bounded result
//! cache. A subscription change forgets only the cached results it can
//! change: the one tag a literal pattern names (O(1)), or the cached tags a
//! wildcard pattern matches (a scan of the bounded cache), so thousands of
//! distinct subscriptions do not each throw away every other tag's result.

use std::collections::HashMap;
use std::sync::Arc;

use tagwire_proto::limits::MAX_TAG_LEN;
use thiserror::Error;

/// Why a tag or pattern is invalid; the message names the offending text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TagError {
    /// Empty string.
    #[error("empty {what}")]
    Empty {
        /// "tag" or "pattern".
        what: &'static str,
    },
    /// Does not start with `/`.
    #[error("{what} {text:?} must start with '/'")]
    NoLeadingSlash {
        /// "tag" or "pattern".
        what: &'static str,
        /// The text.
        text: String,
    },
    /// Two consecutive slashes or a trailing slash.
    #[error("{what} {text:?} has an empty level at byte {at}")]
    EmptyLevel {
        /// "tag" or "pattern".
        what: &'static str,
        /// The text.
        text: String,
        /// Byte offset of the empty level.
        at: usize,
    },
    /// A wildcard in a tag, or a wildcard mixed with other characters in a level.
    #[error(
        "{what} {text:?}: invalid wildcard in level {level:?} (a level is '*', '**' or has no '*')"
    )]
    BadWildcard {
        /// "tag" or "pattern".
        what: &'static str,
        /// The text.
        text: String,
        /// The offending level.
        level: String,
    },
    /// A level that is MQTT's wildcard (`#` or `+`): tagwire's are `**` and
    /// `*`. Taken as a literal it would silently match nothing anyone
    /// publishes, so it is refused with the level to write instead.
    #[error(
        "{what} {text:?}: level {level:?} is an MQTT wildcard; tagwire writes it {instead:?} \
         ('*' one level, '**' any depth), e.g. {suggestion:?}"
    )]
    MqttWildcard {
        /// "pattern".
        what: &'static str,
        /// The text.
        text: String,
        /// The offending level (`#` or `+`).
        level: String,
        /// The tagwire wildcard to write instead.
        instead: &'static str,
        /// The pattern with the wildcard replaced.
        suggestion: String,
    },
    /// Longer than the protocol allows.
    #[error("{what} is {len} bytes, over the limit of {max}")]
    TooLong {
        /// "tag" or "pattern".
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A control character or whitespace.
    #[error("{what} {text:?} contains a control or whitespace character")]
    BadCharacter {
        /// "tag" or "pattern".
        what: &'static str,
        /// The text.
        text: String,
    },
}

/// Whether `tag` is a valid wildcard-free ASCII tag: the common case, checked
/// byte by byte without decoding characters. Anything else takes the full path.
fn is_plain_ascii_tag(tag: &[u8]) -> bool {
    if tag.len() < 2 || tag.len() > MAX_TAG_LEN || tag[0] != b'/' || tag[tag.len() - 1] == b'/' {
        return false;
    }
    let mut prev = 0u8;
    for &b in tag {
        if b <= b' ' || b >= 0x7f || b == b'*' || (b == b'/' && prev == b'/') {
            return false;
        }
        prev = b;
    }
    true
}

fn check_levels(text: &str, what: &'static str, wildcards: bool) -> Result<(), TagError> {
    if text.is_empty() {
        return Err(TagError::Empty { what });
    }
    if text.len() > MAX_TAG_LEN {
        return Err(TagError::TooLong {
            what,
            len: text.len(),
            max: MAX_TAG_LEN,
        });
    }
    if !text.starts_with('/') {
        return Err(TagError::NoLeadingSlash {
            what,
            text: text.to_owned(),
        });
    }
    if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(TagError::BadCharacter {
            what,
            text: text.to_owned(),
        });
    }
    let mut at = 1;
    for level in text[1..].split('/') {
        if level.is_empty() {
            return Err(TagError::EmptyLevel {
                what,
                text: text.to_owned(),
                at,
            });
        }
        let ok = if wildcards {
            level == "*" || level == "**" || !level.contains('*')
        } else {
            !level.contains('*')
        };
        if wildcards && (level == "#" || level == "+") {
            let instead = if level == "#" { "**" } else { "*" };
            let suggestion = text[1..]
                .split('/')
                .map(|l| match l {
                    "#" => "**",
                    "+" => "*",
                    l => l,
                })
                .fold(String::new(), |acc, l| acc + "/" + l);
            return Err(TagError::MqttWildcard {
                what,
                text: text.to_owned(),
                level: level.to_owned(),
                instead,
                suggestion,
            });
        }
        if !ok {
            return Err(TagError::BadWildcard {
                what,
                text: text.to_owned(),
                level: level.to_owned(),
            });
        }
        at += level.len() + 1;
    }
    Ok(())
}

/// Checks that `tag` is a valid tag (not a pattern).
pub fn validate_tag(tag: &str) -> Result<(), TagError> {
    if is_plain_ascii_tag(tag.as_bytes()) {
        return Ok(());
    }
    check_levels(tag, "tag", false)
}

/// One level of a [`Pattern`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Level {
    /// Matches exactly this text.
    Literal(Box<str>),
    /// `*`: any one level.
    One,
    /// `**`: any number of levels, zero included.
    Any,
}

/// A parsed subscription pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    text: Box<str>,
    levels: Vec<Level>,
}

impl Pattern {
    /// Parses a pattern; consecutive `**` levels are folded into one.
    pub fn parse(text: &str) -> Result<Pattern, TagError> {
        check_levels(text, "pattern", true)?;
        let mut levels: Vec<Level> = Vec::new();
        for l in text[1..].split('/') {
            let level = match l {
                "*" => Level::One,
                "**" => Level::Any,
                lit => Level::Literal(lit.into()),
            };
            if level == Level::Any && levels.last() == Some(&Level::Any) {
                continue;
            }
            levels.push(level);
        }
        Ok(Pattern {
            text: text.into(),
            levels,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The levels.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// Whether this pattern matches `tag`: a direct, trie-free matcher that
    /// allocates nothing (the router checks index candidates with it).
    ///
    /// Glob matching over levels: `*` is one level, `**` any run of levels.
    /// On a mismatch the most recent `**` takes one more level and matching
    /// resumes after it; keeping only the latest `**` is enough, because a
    /// later `**` can absorb whatever an earlier one would have.
    pub fn matches(&self, tag: &str) -> bool {
        let t = tag.get(1..).unwrap_or("");
        // The level starting at byte `pos` of `t`, and where the next starts
        // (`t.len() + 1` once the tag is used up).
        let level_at = |pos: usize| {
            let end = t[pos..].find('/').map_or(t.len(), |i| pos + i);
            (&t[pos..end], end + 1)
        };
        let (mut p, mut pos) = (0, 0);
        // (pattern index after the latest `**`, tag position it resumes at)
        let mut star: Option<(usize, usize)> = None;
        loop {
            if pos > t.len() {
                return self.levels[p..].iter().all(|l| *l == Level::Any);
            }
            let (level, next) = level_at(pos);
            match self.levels.get(p) {
                Some(Level::Any) => {
                    star = Some((p + 1, pos));
                    p += 1;
                    continue;
                }
                Some(Level::One) => {
                    (p, pos) = (p + 1, next);
                    continue;
                }
                Some(Level::Literal(l)) if **l == *level => {
                    (p, pos) = (p + 1, next);
                    continue;
                }
                _ => {}
            }
            let Some((after_star, from)) = star else {
                return false;
            };
            let (_, resume) = level_at(from);
            star = Some((after_star, resume));
            (p, pos) = (after_star, resume);
        }
    }
}

impl Pattern {
    /// Whether every tag `other` matches is also matched by `self` (used to
    /// check a subscription against the patterns an ACL grants).
    ///
    /// Sound, so safe for access control: `true` only when the containment
    /// holds. Dynamic programming over (level of `self`, level of `other`):
    /// a `**` of `self` absorbs any run of `other`'s levels, wildcards
    /// included; a `*` covers one literal or `*`; a literal covers only
    /// itself; nothing but `**` covers a `**`. Cost O(levels² × levels).
    pub fn covers(&self, other: &Pattern) -> bool {
        let (a, b) = (&self.levels, &other.levels);
        // ok[i][j]: a[i..] covers b[j..]; filled from the ends.
        let mut ok = vec![vec![false; b.len() + 1]; a.len() + 1];
        ok[a.len()][b.len()] = true;
        for i in (0..a.len()).rev() {
            for j in (0..=b.len()).rev() {
                ok[i][j] = match (&a[i], b.get(j)) {
                    (Level::Any, _) => (j..=b.len()).any(|k| ok[i + 1][k]),
                    (_, None) | (_, Some(Level::Any)) => false,
                    (Level::One, Some(_)) => ok[i + 1][j + 1],
                    (Level::Literal(x), Some(Level::Literal(y))) => x == y && ok[i + 1][j + 1],
                    (Level::Literal(_), Some(Level::One)) => false,
                };
            }
        }
        ok[0][0]
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Identifies a subscription in a [`TagTable`] (unique per table).
pub type SubId = u64;

#[derive(Debug)]
struct Node<T> {
    children: HashMap<Box<str>, Node<T>>,
    one: Option<Box<Node<T>>>,
    any: Option<Box<Node<T>>>,
    /// This node was reached through a `**` edge and so may consume more levels.
    is_any: bool,
    subs: Vec<(SubId, T)>,
}

impl<T> Node<T> {
    fn new(is_any: bool) -> Self {
        Node {
            children: HashMap::new(),
            one: None,
            any: None,
            is_any,
            subs: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.subs.is_empty() && self.children.is_empty() && self.one.is_none() && self.any.is_none()
    }
}

/// Default bound on the number of cached match results.
pub const DEFAULT_CACHE_ENTRIES: usize = 4096;

/// The subscriptions of a router, indexed by pattern. `T` is the caller's
/// handle for a subscription (e.g. an `Arc` of its channel), cloned into
/// match results.
///
/// At its bound (`cache_capacity`) the result cache is cleared wholesale; an
/// insert or remove forgets only the cached results of the tags its pattern
/// matches (see [`TagTable::forget_matches`]).
#[derive(Debug)]
pub struct TagTable<T> {
    root: Node<T>,
    /// Each subscription's pattern and its position in its node's `subs`,
    /// so that removing one costs the pattern's depth, not the node's size.
    patterns: HashMap<SubId, (Pattern, usize)>,
    /// Looked up once per published event: hashbrown's default hasher
    /// (foldhash, seeded per process) is several times cheaper than SipHash.
    cache: hashbrown::HashMap<Box<str>, Arc<[T]>>,
    cache_capacity: usize,
    /// The tag [`matches`](Self::matches) last answered and its result: a
    /// publisher usually keeps to one tag, so its next event costs a
    /// comparison of the tag instead of hashing it. Forgotten by every
    /// insert and remove; the string's buffer is reused.
    last_tag: String,
    last: Option<Arc<[T]>>,
}

impl<T: Clone> Default for TagTable<T> {
    fn default() -> Self {
        Self::new(DEFAULT_CACHE_ENTRIES)
    }
}

impl<T: Clone> TagTable<T> {
    /// An empty table whose result cache holds at most `cache_capacity` tags.
    pub fn new(cache_capacity: usize) -> Self {
        TagTable {
            root: Node::new(false),
            patterns: HashMap::new(),
            cache: hashbrown::HashMap::new(),
            cache_capacity,
            last_tag: String::new(),
            last: None,
        }
    }

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    /// Whether the table holds no subscription.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Adds subscription `id` on `pattern`. Returns `false` (and changes
    /// nothing) if `id` is already present.
    pub fn insert(&mut self, id: SubId, pattern: Pattern, value: T) -> bool {
        if self.patterns.contains_key(&id) {
            return false;
        }
        let mut node = &mut self.root;
        for level in pattern.levels() {
            node = match level {
                Level::Literal(l) => node
                    .children
                    .entry(l.clone())
                    .or_insert_with(|| Node::new(false)),
                Level::One => node.one.get_or_insert_with(|| Box::new(Node::new(false))),
                Level::Any => node.any.get_or_insert_with(|| Box::new(Node::new(true))),
            };
        }
        let at = node.subs.len();
        node.subs.push((id, value));
        self.forget_matches(&pattern);
        self.patterns.insert(id, (pattern, at));
        true
    }

    /// Forgets the cached results that a subscription on `pattern` changes:
    /// those of the tags it matches. A literal pattern matches one tag, its
    /// own text, so that costs one lookup; a wildcard pattern checks each
    /// cached tag (at most `cache_capacity`), never the subscriptions.
    fn forget_matches(&mut self, pattern: &Pattern) {
        self.last = None;
        if self.cache.is_empty() {
            return;
        }
        let literal = pattern
            .levels()
            .iter()
            .all(|l| matches!(l, Level::Literal(_)));
        if literal {
            self.cache.remove(pattern.as_str());
        } else {
            self.cache.retain(|tag, _| !pattern.matches(tag));
        }
    }

    /// How many tags' results the cache holds (for tests and metrics).
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Removes subscription `id`, pruning trie nodes left empty. Costs the
    /// pattern's depth, however many subscriptions share its node.
    pub fn remove(&mut self, id: SubId) -> Option<T> {
        let (pattern, at) = self.patterns.remove(&id)?;
        self.forget_matches(&pattern);
        let (value, moved) = remove_rec(&mut self.root, pattern.levels(), id, at)?;
        if let Some(moved) = moved {
            if let Some((_, pos)) = self.patterns.get_mut(&moved) {
                *pos = at;
            }
        }
        Some(value)
    }

    /// The pattern of subscription `id`.
    pub fn pattern(&self, id: SubId) -> Option<&Pattern> {
        self.patterns.get(&id).map(|(p, _)| p)
    }

    /// The handles of every subscription whose pattern matches `tag`, in no
    /// particular order; a subscription appears once however it matches.
    /// Borrowed from the result cache: the tag of the previous call costs
    /// one comparison, another cached tag one hash lookup, and neither a
    /// reference count (this is on every routed event). A capacity of 0
    /// still keeps the last result.
    pub fn matches(&mut self, tag: &str) -> &[T] {
        if self.last.is_some() && self.last_tag == tag {
            return self.last.as_deref().unwrap_or_default();
        }
        if self.cache.len() >= self.cache_capacity.max(1) && !self.cache.contains_key(tag) {
            self.cache.clear();
        }
        let root = &self.root;
        let found = self
            .cache
            .entry_ref(tag)
            .or_insert_with(|| walk(root, tag).into());
        tag.clone_into(&mut self.last_tag);
        self.last = Some(found.clone());
        self.last.as_deref().unwrap_or_default()
    }
}

impl<T> TagTable<T> {
    /// Whether some subscription whose pattern covers `pattern` (in the
    /// sense of [`Pattern::covers`]) has a handle `pred` accepts. Walks the
    /// trie along `pattern`'s levels as [`TagTable::matches`] walks a tag's,
    /// so it costs O(levels × live states), not one `covers` per
    /// subscription: aggregating n patterns costs O(n), not O(n²).
    pub fn any_covering(&self, pattern: &Pattern, mut pred: impl FnMut(&T) -> bool) -> bool {
        let mut active: Vec<&Node<T>> = Vec::with_capacity(4);
        push_closure(&mut active, &self.root);
        let mut next: Vec<&Node<T>> = Vec::with_capacity(4);
        for level in pattern.levels() {
            next.clear();
            for node in &active {
                match level {
                    Level::Literal(l) => {
                        if let Some(c) = node.children.get(l) {
                            push_closure(&mut next, c);
                        }
                        if let Some(c) = &node.one {
                            push_closure(&mut next, c);
                        }
                    }
                    Level::One => {
                        if let Some(c) = &node.one {
                            push_closure(&mut next, c);
                        }
                    }
                    // Only a `**` covers a `**`.
                    Level::Any => {}
                }
                if node.is_any {
                    push_closure(&mut next, node);
                }
            }
            std::mem::swap(&mut active, &mut next);
            if active.is_empty() {
                return false;
            }
        }
        active.iter().any(|n| n.subs.iter().any(|(_, v)| pred(v)))
    }
}

/// The handles of every subscription under `root` whose pattern matches `tag`.
fn walk<T: Clone>(root: &Node<T>, tag: &str) -> Vec<T> {
    let mut active: Vec<&Node<T>> = Vec::with_capacity(4);
    push_closure(&mut active, root);
    let mut next: Vec<&Node<T>> = Vec::with_capacity(4);
    for level in tag.get(1..).unwrap_or("").split('/') {
        next.clear();
        for node in &active {
            if let Some(c) = node.children.get(level) {
                push_closure(&mut next, c);
            }
            if let Some(c) = &node.one {
                push_closure(&mut next, c);
            }
            if node.is_any {
                push_closure(&mut next, node);
            }
        }
        std::mem::swap(&mut active, &mut next);
        if active.is_empty() {
            return Vec::new();
        }
    }
    active
        .iter()
        .flat_map(|n| n.subs.iter().map(|(_, v)| v.clone()))
        .collect()
}

/// Adds `node` and the `**` nodes reachable from it without consuming a level.
fn push_closure<'a, T>(set: &mut Vec<&'a Node<T>>, node: &'a Node<T>) {
    let mut cur = Some(node);
    while let Some(n) = cur {
        if set.iter().any(|m| std::ptr::eq(*m, n)) {
            return;
        }
        set.push(n);
        cur = n.any.as_deref();
    }
}

/// Removes `id`, at position `at` of its node's `subs`; returns its value
/// and the id of the subscription moved into position `at`, if any.
fn remove_rec<T>(
    node: &mut Node<T>,
    levels: &[Level],
    id: SubId,
    at: usize,
) -> Option<(T, Option<SubId>)> {
    let Some((first, rest)) = levels.split_first() else {
        if node.subs.get(at).map(|(s, _)| *s) != Some(id) {
            return None;
        }
        let (_, value) = node.subs.swap_remove(at);
        return Some((value, node.subs.get(at).map(|(s, _)| *s)));
    };
    match first {
        Level::Literal(l) => {
            let child = node.children.get_mut(l)?;
            let out = remove_rec(child, rest, id, at);
            if child.is_empty() {
                node.children.remove(l);
            }
            out
        }
        Level::One | Level::Any => {
            let slot = if *first == Level::One {
                &mut node.one
            } else {
                &mut node.any
            };
            let child = slot.as_deref_mut()?;
            let out = remove_rec(child, rest, id, at);
            if child.is_empty() {
                *slot = None;
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).expect("test pattern is valid")
    }

    #[test]
    fn invalid_patterns_are_refused_with_the_offending_level() {
        let e = Pattern::parse("/a/**b").unwrap_err();
        assert!(
            matches!(&e, TagError::BadWildcard { level, .. } if level == "**b"),
            "{e}"
        );
        assert!(matches!(
            Pattern::parse("/a//b"),
            Err(TagError::EmptyLevel { at: 3, .. })
        ));
        assert!(matches!(
            Pattern::parse("/a/"),
            Err(TagError::EmptyLevel { .. })
        ));
        assert!(matches!(
            Pattern::parse("a/b"),
            Err(TagError::NoLeadingSlash { .. })
        ));
        assert!(matches!(Pattern::parse(""), Err(TagError::Empty { .. })));
        assert!(matches!(
            validate_tag("/a/*"),
            Err(TagError::BadWildcard { .. })
        ));
        assert!(matches!(
            validate_tag("/a b"),
            Err(TagError::BadCharacter { .. })
        ));
        let long = format!("/{}", "x".repeat(MAX_TAG_LEN));
        assert!(matches!(validate_tag(&long), Err(TagError::TooLong { .. })));
    }

    #[test]
    fn double_star_matches_zero_or_more_levels_and_star_exactly_one() {
        assert!(p("/demo/**").matches("/demo"));
        assert!(p("/demo/**").matches("/demo/x/y"));
        assert!(p("/demo/*").matches("/demo/x"));
        assert!(!p("/demo/*").matches("/demo"));
        assert!(!p("/demo/*").matches("/demo/x/y"));
        assert!(p("/**/z").matches("/a/b/z"));
        assert!(!p("/**/z").matches("/a/b/y"));
    }

    #[test]
    fn table_finds_exact_and_wildcard_subscribers_and_forgets_removed_ones() {
        let mut t = TagTable::new(16);
        assert!(t.insert(1, p("/a/b"), "exact"));
        assert!(t.insert(2, p("/a/*"), "one"));
        assert!(t.insert(3, p("/**"), "all"));
        assert!(!t.insert(3, p("/x"), "dup"));
        let mut got: Vec<_> = t.matches("/a/b").to_vec();
        got.sort();
        assert_eq!(got, vec!["all", "exact", "one"]);
        assert_eq!(t.remove(2), Some("one"));
        let mut got: Vec<_> = t.matches("/a/b").to_vec();
        got.sort();
        assert_eq!(got, vec!["all", "exact"]);
        t.remove(1);
        t.remove(3);
        assert!(
            t.root.is_empty(),
            "removing every subscription prunes the trie"
        );
        assert!(t.matches("/a/b").is_empty());
    }

    #[test]
    fn cache_stays_within_its_bound() {
        let mut t = TagTable::new(8);
        t.insert(1, p("/**"), 1u8);
        for i in 0..100 {
            assert_eq!(t.matches(&format!("/t{i}")).len(), 1);
            assert!(t.cache.len() <= 8);
        }
    }

    #[test]
    fn the_same_tag_again_sees_every_insert_and_remove() {
        // The previous call's answer is kept for the next call with the
        // same tag; a change of the subscriptions must not be hidden by it.
        let mut t = TagTable::new(DEFAULT_CACHE_ENTRIES);
        assert!(t.matches("/a/b").is_empty());
        t.insert(1, p("/a/b"), 1u8);
        assert_eq!(t.matches("/a/b"), &[1]);
        t.insert(2, p("/a/*"), 2);
        let mut got = t.matches("/a/b").to_vec();
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
        t.remove(1);
        assert_eq!(t.matches("/a/b"), &[2]);
        // Another tag in between, then back.
        assert!(t.matches("/c").is_empty());
        assert_eq!(t.matches("/a/b"), &[2]);
        t.remove(2);
        assert!(t.matches("/a/b").is_empty());
    }

    fn level() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(str::to_owned)
    }
    fn pattern_level() -> impl Strategy<Value = String> {
        prop_oneof![3 => level(), 1 => Just("*".to_owned()), 1 => Just("**".to_owned())]
    }
    fn join(levels: Vec<String>) -> String {
        format!("/{}", levels.join("/"))
    }

    proptest! {
        #[test]
        fn ascii_fast_path_agrees_with_the_full_tag_check(tag in "[/a*b \\x00\\x7f]{0,8}") {
            if is_plain_ascii_tag(tag.as_bytes()) {
                prop_assert!(check_levels(&tag, "tag", false).is_ok(), "{:?}", tag);
            }
        }
    }

    /// The reference matcher: dynamic programming over (pattern level, tag
    /// level), obviously correct and allocation-heavy.
    fn matches_dp(pattern: &Pattern, tag: &str) -> bool {
        let levels: Vec<&str> = tag.get(1..).unwrap_or("").split('/').collect();
        let t = levels.len();
        let mut reach = vec![false; t + 1];
        reach[0] = true;
        for level in pattern.levels() {
            let mut next = vec![false; t + 1];
            for j in 0..=t {
                next[j] = match level {
                    Level::Any => reach[j] || (j > 0 && next[j - 1]),
                    Level::One => j > 0 && reach[j - 1],
                    Level::Literal(l) => j > 0 && reach[j - 1] && *levels[j - 1] == **l,
                };
            }
            reach = next;
        }
        reach[t]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn pattern_matcher_equals_dynamic_programming(
            pattern in prop::collection::vec(pattern_level(), 1..7),
            tag in prop::collection::vec(level(), 1..8),
        ) {
            let pattern = p(&join(pattern));
            let tag = join(tag);
            prop_assert_eq!(pattern.matches(&tag), matches_dp(&pattern, &tag), "{} on {}", pattern, tag);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn trie_matching_equals_naive_matching(
            patterns in prop::collection::vec(prop::collection::vec(pattern_level(), 1..5), 1..12),
            tags in prop::collection::vec(prop::collection::vec(level(), 1..6), 1..12),
            remove in prop::collection::vec(any::<bool>(), 12),
        ) {
            let mut t = TagTable::new(4);
            let parsed: Vec<Pattern> = patterns.into_iter().map(|l| p(&join(l))).collect();
            for (i, pat) in parsed.iter().enumerate() {
                t.insert(i as u64, pat.clone(), i);
            }
            for (i, r) in remove.iter().enumerate().take(parsed.len()) {
                if *r { t.remove(i as u64); }
            }
            for tag in tags.into_iter().map(join) {
                for _round in 0..2 { // second round is served from the cache
                    let mut got = t.matches(&tag).to_vec();
                    got.sort();
                    let want: Vec<usize> = parsed.iter().enumerate()
                        .filter(|(i, pat)| !remove[*i] && pat.matches(&tag))
                        .map(|(i, _)| i).collect();
                    prop_assert_eq!(&got, &want, "tag {}", tag);
                }
            }
        }
    }

    #[test]
    fn a_distinct_subscription_keeps_the_other_tags_cached_results() {
        let mut t = TagTable::new(DEFAULT_CACHE_ENTRIES);
        t.insert(1, p("/ok/**"), 1u32);
        for i in 0..100 {
            t.matches(&format!("/ok/{i}"));
        }
        assert_eq!(t.cached(), 100);
        // Thousands of distinct patterns, none matching a cached tag: the
        // cache keeps all 100 results (it used to be cleared by each).
        for i in 0..2_000u32 {
            t.insert(10 + u64::from(i), p(&format!("/s/{i}/**")), i);
            t.insert(10_000 + u64::from(i), p(&format!("/t/{i}")), i);
        }
        assert_eq!(t.cached(), 100);
        for i in 0..2_000u64 {
            t.remove(10 + i);
            t.remove(10_000 + i);
        }
        assert_eq!(t.cached(), 100);
        // A pattern matching some of them forgets exactly those.
        t.insert(3, p("/ok/7"), 3);
        assert_eq!(t.cached(), 99);
        let mut got = t.matches("/ok/7").to_vec();
        got.sort();
        assert_eq!(got, [1, 3]);
        t.insert(4, p("/*/5"), 4);
        assert_eq!(t.cached(), 99);
        t.insert(5, p("/*/50"), 5);
        assert_eq!(t.cached(), 98);
        let mut got = t.matches("/ok/50").to_vec();
        got.sort();
        assert_eq!(got, [1, 5]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// With results cached between every change, the table answers as
        /// a naive matcher over the patterns present.
        #[test]
        fn cached_results_follow_every_insert_and_remove(
            ops in prop::collection::vec(
                (prop::collection::vec(pattern_level(), 1..5), any::<bool>(), 0u64..6),
                1..24,
            ),
            tags in prop::collection::vec(prop::collection::vec(level(), 1..6), 1..8),
        ) {
            let tags: Vec<String> = tags.into_iter().map(join).collect();
            let mut t = TagTable::new(64);
            let mut live: std::collections::BTreeMap<u64, Pattern> = Default::default();
            for (levels, insert, id) in ops {
                if insert {
                    let pat = p(&join(levels));
                    if t.insert(id, pat.clone(), id) {
                        live.insert(id, pat);
                    }
                } else if t.remove(id).is_some() {
                    live.remove(&id);
                }
                for tag in &tags {
                    let mut got = t.matches(tag).to_vec();
                    got.sort();
                    let want: Vec<u64> = live.iter()
                        .filter(|(_, pat)| pat.matches(tag))
                        .map(|(id, _)| *id).collect();
                    prop_assert_eq!(&got, &want, "tag {}", tag);
                }
            }
        }

        /// `any_covering` finds exactly the patterns `covers` says cover.
        #[test]
        fn any_covering_equals_covers(
            patterns in prop::collection::vec(prop::collection::vec(pattern_level(), 1..5), 1..12),
            query in prop::collection::vec(pattern_level(), 1..5),
        ) {
            let mut t = TagTable::new(4);
            let parsed: Vec<Pattern> = patterns.into_iter().map(|l| p(&join(l))).collect();
            for (i, pat) in parsed.iter().enumerate() {
                t.insert(i as u64, pat.clone(), i);
            }
            let q = p(&join(query));
            for (i, pat) in parsed.iter().enumerate() {
                prop_assert_eq!(
                    t.any_covering(&q, |v| *v == i),
                    pat.covers(&q),
                    "{} covers {}", pat, q
                );
            }
        }
    }

    #[test]
    fn covers_examples() {
        for (a, b, want) in [
            ("/**", "/a/*/b/**", true),
            ("/a/**", "/a", true),
            ("/a/**", "/b", false),
            ("/a/*", "/a/x", true),
            ("/a/*", "/a/*", true),
            ("/a/*", "/a/**", false),
            ("/a/x", "/a/*", false),
            ("/a/**/z", "/a/b/**/z", true),
            ("/a/**/z", "/a/b/**", false),
            ("/*/**", "/**", false),
        ] {
            assert_eq!(p(a).covers(&p(b)), want, "{a} covers {b}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// Soundness, the property access control needs: when `a` covers
        /// `b`, no tag matched by `b` escapes `a`.
        #[test]
        fn covers_is_sound(
            a in prop::collection::vec(pattern_level(), 1..5),
            b in prop::collection::vec(pattern_level(), 1..5),
            tags in prop::collection::vec(prop::collection::vec(level(), 1..7), 1..24),
        ) {
            let (a, b) = (p(&join(a)), p(&join(b)));
            if a.covers(&b) {
                for tag in tags.into_iter().map(join) {
                    prop_assert!(!b.matches(&tag) || a.matches(&tag), "{} covers {} but not {}", a, b, tag);
                }
            }
        }

        /// Every pattern covers itself and `/**` covers everything.
        #[test]
        fn covers_is_reflexive(b in prop::collection::vec(pattern_level(), 1..6)) {
            let b = p(&join(b));
            prop_assert!(b.covers(&b), "{}", b);
            prop_assert!(p("/**").covers(&b));
        }
    }
}
