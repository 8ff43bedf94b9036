//! The tag and pattern vectors of `docs/protocol.md` (each valid or refused
//! with the error the document names; each match result), and property
//! tests of the tag and pattern parsers on arbitrary text (the
//! `tag_pattern` fuzz target does the same with arbitrary bytes; the trie
//! is checked against the naive matcher in `tags.rs`'s unit tests).

mod common;

use std::collections::BTreeSet;

use proptest::prelude::*;
use tagwire_core::tags::{validate_tag, Level, Pattern, TagError, TagTable};

/// The text a vector's cell stands for: `(empty)` is the empty string,
/// `\t` a tab, `\u{a0}` U+00A0, and `c×N` N copies of `c`.
fn unescape(cell: &str) -> String {
    if cell == "(empty)" {
        return String::new();
    }
    let cell = cell.replace("\\t", "\t").replace("\\u{a0}", "\u{a0}");
    let mut out = String::new();
    let mut chars = cell.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'×') {
            chars.next();
            let mut n = String::new();
            while let Some(d) = chars.next_if(char::is_ascii_digit) {
                n.push(d);
            }
            let n: usize = n.parse().expect("a count after ×");
            out.extend(std::iter::repeat_n(c, n));
        } else {
            out.push(c);
        }
    }
    out
}

/// The variant name the document uses for an error.
fn variant(e: &TagError) -> &'static str {
    match e {
        TagError::Empty { .. } => "Empty",
        TagError::NoLeadingSlash { .. } => "NoLeadingSlash",
        TagError::EmptyLevel { .. } => "EmptyLevel",
        TagError::BadWildcard { .. } => "BadWildcard",
        TagError::TooLong { .. } => "TooLong",
        TagError::BadCharacter { .. } => "BadCharacter",
        TagError::MqttWildcard { .. } => "MqttWildcard",
        _ => "a variant the document does not know",
    }
}

#[test]
fn tags_and_patterns_are_valid_or_refused_as_the_protocol_document_says() {
    let mut refused_with = BTreeSet::new();
    let (mut tags, mut patterns) = (0, 0);
    for row in common::table_rows("### Tag and pattern vectors") {
        let [kind, text, result, message] = &row[..] else {
            continue;
        };
        let text = unescape(text);
        let got = match kind.as_str() {
            "tag" => {
                tags += 1;
                validate_tag(&text)
            }
            "pattern" => {
                patterns += 1;
                Pattern::parse(&text).map(|p| assert_eq!(p.as_str(), text))
            }
            other => panic!("unknown vector kind {other:?}"),
        };
        match (result.as_str(), got) {
            ("valid", Ok(())) => assert!(message.is_empty(), "{kind} {text:?}: {message}"),
            ("valid", Err(e)) => panic!("{kind} {text:?} should be valid, got {e}"),
            (want, Ok(())) => panic!("{kind} {text:?} should be refused with {want}"),
            (want, Err(e)) => {
                assert_eq!(variant(&e), want, "{kind} {text:?}: {e}");
                assert_eq!(&e.to_string(), message, "{kind} {text:?}");
                refused_with.insert((kind.clone(), want.to_owned()));
            }
        }
    }
    assert!(tags > 0 && patterns > 0, "no vectors found");
    assert!(
        refused_with.contains(&("pattern".to_owned(), "MqttWildcard".to_owned())),
        "no pattern vector refused with MqttWildcard"
    );
    for kind in ["tag", "pattern"] {
        for v in [
            "Empty",
            "NoLeadingSlash",
            "EmptyLevel",
            "BadWildcard",
            "TooLong",
            "BadCharacter",
        ] {
            assert!(
                refused_with.contains(&(kind.to_owned(), v.to_owned())),
                "no {kind} vector refused with {v}"
            );
        }
    }
}

#[test]
fn patterns_match_tags_as_the_protocol_document_says() {
    let mut n = 0;
    for row in common::table_rows("### Tag and pattern vectors") {
        let [pattern, tag, matches] = &row[..] else {
            continue;
        };
        n += 1;
        let want = match matches.as_str() {
            "yes" => true,
            "no" => false,
            other => panic!("matches must be yes or no, not {other:?}"),
        };
        let p = Pattern::parse(pattern).unwrap_or_else(|e| panic!("vector pattern: {e}"));
        validate_tag(tag).unwrap_or_else(|e| panic!("vector tag: {e}"));
        assert_eq!(p.matches(tag), want, "{pattern} on {tag}");
        let mut table = TagTable::new(4);
        table.insert(1, p, ());
        assert_eq!(
            table.matches(tag).len(),
            usize::from(want),
            "trie: {pattern} on {tag}"
        );
    }
    assert!(n > 0, "no match vectors found");
}

fn check(text: &str) {
    let pattern = Pattern::parse(text);
    let tag_ok = validate_tag(text).is_ok();
    // Tags are patterns without wildcards: the ASCII fast path of
    // validate_tag must agree with the full check Pattern::parse makes.
    assert_eq!(
        tag_ok,
        pattern.is_ok() && !text.contains('*'),
        "{text:?}: validate_tag {:?}, Pattern::parse {pattern:?}",
        validate_tag(text)
    );
    if let Ok(p) = pattern {
        assert_eq!(p.as_str(), text);
        assert_eq!(Pattern::parse(p.as_str()), Ok(p.clone()));
        assert!(!p.levels().is_empty());
        assert!(
            !p.levels()
                .windows(2)
                .any(|w| w[0] == Level::Any && w[1] == Level::Any),
            "consecutive '**' not folded in {text:?}"
        );
        if tag_ok {
            assert!(p.matches(text), "tag {text:?} does not match itself");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tag_and_pattern_parsers_agree_on_tag_like_text(text in "[/a*b. \\x00\\x7fé]{0,10}") {
        check(&text);
    }

    #[test]
    fn tag_and_pattern_parsers_agree_on_any_text(text in "\\PC{0,24}|.{0,8}") {
        check(&text);
    }
}
