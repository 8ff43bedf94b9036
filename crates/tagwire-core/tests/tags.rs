//! Property tests of the tag and pattern parsers on arbitrary text (the
//! `tag_pattern` fuzz target does the same with arbitrary bytes; the trie
//! is checked against the naive matcher in `tags.rs`'s unit tests).

use proptest::prelude::*;
use tagwire_core::tags::{validate_tag, Level, Pattern};

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
