//! Fuzz target: arbitrary bytes as a few patterns and tags, through
//! `Pattern::parse`, `validate_tag` and a `TagTable`. Input layout: the
//! first byte picks how many of the following `\n`-separated lines are
//! patterns (1 to 4); the remaining lines (at most 8) are tags. Errors are
//! expected; a panic is a bug. Properties checked:
//! - a parsed pattern keeps its text, re-parses to itself, and its levels
//!   are the text's levels (literals without `*` or `/`, no `**` twice in a
//!   row);
//! - `validate_tag(t)` accepts exactly the texts `Pattern::parse` accepts
//!   that have no `*` (so the ASCII fast path agrees with the full check),
//!   and a valid tag, as a pattern, matches itself;
//! - `Pattern::matches` (the allocation-free glob matcher) equals a dynamic
//!   programme over (pattern level, tag level), on every line as a tag;
//! - for every valid tag, the trie's `matches` equals `Pattern::matches` of
//!   every inserted pattern, before and after removing one, and when served
//!   from the (tiny) result cache;
//! - `Pattern::covers` (the ACL's subscribe check) is reflexive and sound:
//!   when `a.covers(b)`, every tag `b` matches is matched by `a` — checked
//!   on the input's tags and on tags made from `b` by filling its `*` and
//!   `**` levels with literals of both patterns (`**` with 0, 1 or 2
//!   levels).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_core::tags::{validate_tag, Level, Pattern, TagTable};

const MAX_TAGS: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let n_patterns = usize::from(first % 4) + 1;
    let mut lines = rest.split(|&b| b == b'\n');
    let patterns: Vec<&[u8]> = lines.by_ref().take(n_patterns).collect();
    let tags: Vec<&[u8]> = lines.take(MAX_TAGS).collect();

    let mut parsed: Vec<Pattern> = Vec::new();
    for text in patterns.iter().chain(&tags) {
        let Ok(text) = std::str::from_utf8(text) else {
            continue;
        };
        let pattern = Pattern::parse(text);
        let tag_ok = validate_tag(text).is_ok();
        assert_eq!(
            tag_ok,
            pattern.is_ok() && !text.contains('*'),
            "validate_tag and Pattern::parse disagree on {text:?}"
        );
        if let Ok(p) = &pattern {
            check_pattern(text, p);
            if tag_ok {
                assert!(p.matches(text), "tag {text:?} does not match itself");
            }
        }
    }
    for text in &patterns {
        if let Ok(p) = std::str::from_utf8(text).map(Pattern::parse) {
            parsed.extend(p);
        }
    }
    if parsed.is_empty() {
        return;
    }
    let tags: Vec<&str> = tags
        .iter()
        .filter_map(|t| std::str::from_utf8(t).ok())
        .collect();
    check_covers(&parsed, &tags);
    for p in &parsed {
        for tag in tags
            .iter()
            .copied()
            .chain(patterns.iter().filter_map(|t| std::str::from_utf8(t).ok()))
        {
            assert_eq!(
                p.matches(tag),
                matches_dp(p, tag),
                "pattern {:?} on {tag:?}",
                p.as_str()
            );
        }
    }

    // A cache of 2 entries so that hits, misses and clearing all happen.
    let mut table: TagTable<usize> = TagTable::new(2);
    for (i, p) in parsed.iter().enumerate() {
        assert!(table.insert(i as u64, p.clone(), i), "fresh id refused");
    }
    assert!(
        !table.insert(0, parsed[0].clone(), 99),
        "duplicate id accepted"
    );
    assert_eq!(table.len(), parsed.len());
    let mut live: Vec<bool> = vec![true; parsed.len()];
    for round in 0..3 {
        if round == 2 {
            // Remove one pattern (chosen by the input) and check again.
            let victim = usize::from(first / 4) % parsed.len();
            assert_eq!(table.remove(victim as u64), Some(victim));
            assert_eq!(table.remove(victim as u64), None);
            live[victim] = false;
        }
        for tag in &tags {
            let got = table.matches(tag);
            if validate_tag(tag).is_err() {
                continue;
            }
            let mut got = got.to_vec();
            got.sort_unstable();
            let want: Vec<usize> = (0..parsed.len())
                .filter(|&i| live[i] && parsed[i].matches(tag))
                .collect();
            assert_eq!(got, want, "tag {tag:?}, patterns {parsed:?}");
        }
    }
});

fn check_pattern(text: &str, p: &Pattern) {
    assert_eq!(p.as_str(), text);
    assert_eq!(p.to_string(), text);
    assert_eq!(Pattern::parse(p.as_str()).as_ref(), Ok(p), "re-parse");
    let written: Vec<&str> = text[1..].split('/').collect();
    let mut w = written.iter().peekable();
    let mut prev_any = false;
    for level in p.levels() {
        match level {
            Level::Literal(l) => {
                assert!(!l.is_empty() && !l.contains('*') && !l.contains('/'));
                assert_eq!(w.next().map(|s| &**s), Some(&**l));
                prev_any = false;
            }
            Level::One => {
                assert_eq!(w.next(), Some(&"*"));
                prev_any = false;
            }
            Level::Any => {
                assert!(!prev_any, "consecutive '**' not folded in {text:?}");
                assert_eq!(w.next(), Some(&"**"));
                // Folded repeats.
                while w.peek() == Some(&&"**") {
                    w.next();
                }
                prev_any = true;
            }
        }
    }
    assert_eq!(w.next(), None, "levels of {text:?} missing");
}

/// `covers` is reflexive, and sound on the given tags and on tags made from
/// the covered pattern.
fn check_covers(parsed: &[Pattern], tags: &[&str]) {
    for a in parsed {
        assert!(a.covers(a), "{:?} does not cover itself", a.as_str());
        for b in parsed {
            if !a.covers(b) {
                continue;
            }
            let made = instances(b, a);
            for tag in tags.iter().copied().chain(made.iter().map(String::as_str)) {
                if validate_tag(tag).is_err() || !b.matches(tag) {
                    continue;
                }
                assert!(
                    a.matches(tag),
                    "{:?} covers {:?}, but {tag:?} matches only the latter",
                    a.as_str(),
                    b.as_str()
                );
            }
        }
    }
}

/// Tags that `b` may match: its wildcards filled with literals of `a`, `b`
/// and one of neither, `**` with 0, 1 or 2 levels, in a few combinations.
fn instances(b: &Pattern, a: &Pattern) -> Vec<String> {
    let mut fillers: Vec<&str> = a
        .levels()
        .iter()
        .chain(b.levels())
        .filter_map(|l| match l {
            Level::Literal(s) => Some(&**s),
            _ => None,
        })
        .collect();
    fillers.push("zz");
    let mut out = Vec::new();
    for variant in 0..6usize {
        let mut tag = String::new();
        for (i, level) in b.levels().iter().enumerate() {
            let fill = fillers[(variant + i) % fillers.len()];
            match level {
                Level::Literal(l) => {
                    tag.push('/');
                    tag.push_str(l);
                }
                Level::One => {
                    tag.push('/');
                    tag.push_str(fill);
                }
                Level::Any => {
                    for k in 0..(variant + i) % 3 {
                        tag.push('/');
                        tag.push_str(fillers[(variant + i + k) % fillers.len()]);
                    }
                }
            }
        }
        out.push(tag);
    }
    out
}

/// The reference matcher (as in `tags.rs`'s unit tests): dynamic
/// programming over (pattern level, tag level).
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
