//! Issue 12, filter engine: the bounded cost of one event against one
//! subscription (item 4), float division by zero (16), regex size limits and
//! their messages (17), the documented corners of the language (18) and the
//! memory estimate of a compiled filter (7).

use bytes::{Bytes, BytesMut};
use tagwire_core::filter::{
    Filter, FilterError, FilterLimits, FilterList, MappingFilter, MatchScratch, SubscriptionIndex,
    SubscriptionSpec,
};
use tagwire_proto::{Event, EventRef, Value};

fn encode(ev: &Event) -> BytesMut {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf
}

fn event_with(fields: Vec<(&str, Value)>) -> BytesMut {
    let mut ev = Event::new("/t", &b""[..]);
    ev.fields = fields.into_iter().map(|(n, v)| (n.into(), v)).collect();
    encode(&ev)
}

fn truth(text: &str, buf: &[u8]) -> Option<bool> {
    let f = Filter::compile(text, &FilterLimits::default())
        .unwrap_or_else(|e| panic!("{text:?} should compile: {e}"));
    f.truth(&EventRef::parse(buf).expect("valid event"))
}

/// `n` lowercase letters then a space, repeated up to `len` bytes: no run is
/// `n` letters long, so `[a-z]{n}` never matches, and an unanchored lazy
/// DFA meets a new state on almost every byte (the issue's attack).
fn runs(n: usize, len: usize) -> String {
    let mut s = String::with_capacity(len);
    while s.len() < len {
        for i in 0..n.saturating_sub(1) {
            s.push((b'a' + (i % 26) as u8) as char);
        }
        s.push(' ');
    }
    s.truncate(len);
    s
}

const ATTACK: &str =
    "$.s =~ '[a-z]{300}' or $.s =~ '[a-z]{500}' or $.s =~ '[a-z]{700}' or $.s =~ '[a-z]{900}'";

/// The attack of item 4 at the default limits: one subscription's 16
/// filters of four `[a-z]{N}` regexes each (N in the hundreds, all within
/// the limits) and a 44 KB string field. The mechanism that bounds its cost:
/// no regex reads a subject longer than `max_match_input`, which makes the
/// comparison unknown; within that length every regex is a DFA and answers.
#[test]
fn regex_attack_reads_at_most_max_match_input_bytes() {
    let limits = FilterLimits::default();
    let f = Filter::compile(ATTACK, &limits).expect("the attack filter is within the limits");
    let mut list = FilterList::new(&limits);
    for id in 0..limits.max_filters_per_channel as u64 {
        list.add(id, f.clone()).expect("16 filters fit");
    }

    let long = event_with(vec![("s", Value::Str(runs(300, 44_000)))]);
    let long = EventRef::parse(&long).expect("valid");
    assert_eq!(f.truth(&long), None, "a 44 KB subject is not examined");
    assert!(!list.passes(&long));

    // At exactly `max_match_input` bytes the regexes do run, and answer.
    let at_limit = runs(300, limits.max_match_input);
    assert_eq!(at_limit.len(), limits.max_match_input);
    let buf = event_with(vec![("s", Value::Str(at_limit))]);
    assert_eq!(truth(ATTACK, &buf), Some(false), "no run of 300 letters");
    let mut hit = runs(300, limits.max_match_input - 900);
    hit.push_str(&"q".repeat(900));
    let buf = event_with(vec![("s", Value::Str(hit))]);
    assert_eq!(truth(ATTACK, &buf), Some(true), "a run of 900 letters");

    // One byte more and it is unknown again.
    let over = runs(300, limits.max_match_input + 1);
    let buf = event_with(vec![("s", Value::Str(over))]);
    assert_eq!(truth(ATTACK, &buf), None);
}

#[test]
fn substring_search_reads_at_most_max_match_input_bytes() {
    let limits = FilterLimits::default();
    let s = |n: usize| Value::Str(format!("{}needle", "x".repeat(n - 6)));
    let at = event_with(vec![("s", s(limits.max_match_input))]);
    assert_eq!(truth("$.s ~ 'needle'", &at), Some(true));
    let over = event_with(vec![("s", s(limits.max_match_input + 1))]);
    assert_eq!(truth("$.s ~ 'needle'", &over), None);
    // A needle longer than the haystack is decided without reading either.
    let short = event_with(vec![
        ("s", Value::Str("abc".into())),
        ("t", Value::Str("x".repeat(100_000))),
    ]);
    assert_eq!(truth("$.s ~ $.t", &short), Some(false));
}

#[test]
fn comparing_two_long_strings_is_unknown() {
    let limits = FilterLimits::default();
    let long = "x".repeat(limits.max_match_input + 1);
    let buf = event_with(vec![
        ("a", Value::Str(long.clone())),
        ("b", Value::Str(long.clone())),
        ("c", Value::Str("x".into())),
        ("p", Value::Bytes(Bytes::from(long.clone().into_bytes()))),
        ("q", Value::Bytes(Bytes::from(long.into_bytes()))),
    ]);
    for text in [
        "$.a == $.b",
        "$.a != $.b",
        "$.a < $.b",
        "$.a ~^ $.b",
        "$.p == $.q",
    ] {
        assert_eq!(truth(text, &buf), None, "{text}");
    }
    // One long side is compared as usual (it reads at most the short side).
    assert_eq!(truth("$.a ~^ $.c", &buf), Some(true));
    assert_eq!(truth("$.a > $.c", &buf), Some(true));
    assert_eq!(truth("$.a == 'x'", &buf), Some(false));
}

/// Raising the limit lets longer subjects through (and multiplies the
/// documented worst case by the same factor).
#[test]
fn max_match_input_is_configurable() {
    let limits = FilterLimits {
        max_match_input: 64 * 1024,
        ..FilterLimits::default()
    };
    let f = Filter::compile("$.s =~ 'q{5}'", &limits).expect("compiles");
    let mut s = runs(300, 44_000);
    s.push_str("qqqqq");
    let buf = event_with(vec![("s", Value::Str(s))]);
    assert!(f.matches(&EventRef::parse(&buf).expect("valid")));
}

#[test]
fn index_agrees_with_evaluation_on_long_subjects() {
    let limits = FilterLimits::default();
    let mut idx = SubscriptionIndex::<u64>::new(limits.clone());
    idx.insert(1, SubscriptionSpec::Constraint("$.s ~ 'needle'".into()), 1)
        .expect("inserts");
    idx.insert(
        2,
        SubscriptionSpec::Constraint("$.s =~ 'needle[0-9]'".into()),
        2,
    )
    .expect("inserts");
    let mut scratch = MatchScratch::new();
    for n in [limits.max_match_input, limits.max_match_input + 1] {
        let buf = event_with(vec![(
            "s",
            Value::Str(format!("{}needle7", "x".repeat(n - 7))),
        )]);
        let ev = EventRef::parse(&buf).expect("valid");
        let mut got = Vec::new();
        idx.matching(&ev, &mut scratch, &mut got);
        got.sort_unstable();
        let want: Vec<u64> = if n <= limits.max_match_input {
            vec![1, 2]
        } else {
            vec![]
        };
        assert_eq!(got, want, "subject of {n} bytes");
    }
}

// ---- item 16: float division or remainder by zero is unknown ----

#[test]
fn float_division_by_zero_is_unknown() {
    let buf = event_with(vec![
        ("ratio", Value::Float(2.5)),
        ("zero", Value::Float(0.0)),
        ("big", Value::Float(f64::MAX)),
        ("nan", Value::Float(f64::NAN)),
    ]);
    for text in [
        "$.ratio / 0 > 1000",
        "$.ratio / 0 < 1000",
        "$.ratio / 0.0 > 1000",
        "$.ratio / $.zero > 1000",
        "$.ratio % 0 == 0",
        "$.ratio % 0.0 != 0",
        "0.0 / $.zero == 0",
        "$.big * 10 > 0",
        "$.nan + 1 != 0",
        "-($.big * 2) < 0",
    ] {
        assert_eq!(truth(text, &buf), None, "{text}");
        assert_eq!(truth(&format!("not ({text})"), &buf), None, "not ({text})");
    }
    // Finite float arithmetic is unchanged.
    assert_eq!(truth("$.ratio / 2 == 1.25", &buf), Some(true));
    assert_eq!(truth("$.ratio % 2 == 0.5", &buf), Some(true));
}

// ---- item 17: regex sizes ----

#[test]
fn ordinary_unicode_regexes_compile_at_the_default_limits() {
    for p in [
        r"\w\w",
        r"^\w+-\w+$",
        r"\d{20}",
        r"(?i)error",
        r"^/a/[^/]+/b$",
    ] {
        let text = format!("$tag =~ '{p}'");
        Filter::compile(&text, &FilterLimits::default())
            .unwrap_or_else(|e| panic!("{p} should compile: {e}"));
    }
}

#[test]
fn regex_too_big_reports_its_size_not_the_limit() {
    let limits = FilterLimits {
        max_regex_size: 10_000,
        ..FilterLimits::default()
    };
    // Unicode `\d` compiles to ~15 KB.
    let e = Filter::compile("$tag =~ '\\d'", &limits).expect_err("over 10,000 bytes");
    let FilterError::RegexTooBig {
        at,
        size: Some(size),
        max,
        ..
    } = &e
    else {
        panic!("expected RegexTooBig with a measured size, got {e:?}");
    };
    assert_eq!((*at, *max), (8, 10_000));
    assert!(*size > 10_000, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "compiles to {size} bytes, more than max_regex_size 10000"
        )),
        "{msg}"
    );
}

#[test]
fn regex_far_too_big_says_more_than_what_was_measured() {
    let limits = FilterLimits {
        max_regex_size: 1024,
        ..FilterLimits::default()
    };
    let e = Filter::compile(r"$tag =~ '\w{30}'", &limits).expect_err("far over 2 KiB");
    assert!(
        matches!(
            e,
            FilterError::RegexTooBig {
                size: None,
                probed: 2048,
                max: 1024,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("needs more than 1024 bytes to compile (measured up to 2048)"),
        "{e}"
    );
}

#[test]
fn exponential_dfa_is_refused_with_the_named_limit() {
    let e = Filter::compile("$tag =~ '(a|b)*a(a|b){20}'", &FilterLimits::default())
        .expect_err("2^20 DFA states");
    assert!(e.to_string().contains("max_regex_size"), "{e}");
}

#[test]
fn unicode_word_boundary_on_non_ascii_is_unknown() {
    let ascii = event_with(vec![("s", Value::Str("a foo b".into()))]);
    assert_eq!(truth(r"$.s =~ '\bfoo\b'", &ascii), Some(true));
    let other = event_with(vec![("s", Value::Str("é foo b".into()))]);
    assert_eq!(truth(r"$.s =~ '\bfoo\b'", &other), None);
    assert_eq!(truth(r"$.s =~ '(?-u:\b)foo(?-u:\b)'", &other), Some(true));
}

// ---- item 18: documented corners ----

#[test]
fn number_glued_to_a_word_is_a_syntax_error() {
    let e = Filter::compile("$seq == 1and $seq > 0", &FilterLimits::default())
        .expect_err("1and is not a number");
    let FilterError::Syntax { at, found, .. } = &e else {
        panic!("expected a syntax error, got {e:?}");
    };
    assert_eq!(*at, 8, "{e}");
    assert_eq!(found, "'1and'");
    assert!(e.to_string().contains("space"), "{e}");
    // With a space it is the number 1 and the keyword.
    let buf = encode(&Event::new("/t", &b""[..]));
    assert_eq!(truth("$seq == 0 and $seq >= 0", &buf), Some(true));
    assert_eq!(truth("$timeout < 1s or $seq == 0", &buf), Some(true));
}

#[test]
fn bytes_fields_compare_by_equality_only() {
    let buf = event_with(vec![
        ("a", Value::Bytes(Bytes::from_static(b"\x00\x01"))),
        ("b", Value::Bytes(Bytes::from_static(b"\x00\x01"))),
        ("c", Value::Bytes(Bytes::from_static(b"\x00\x02"))),
        ("s", Value::Str("\u{0}\u{1}".into())),
    ]);
    assert_eq!(truth("$.a == $.b", &buf), Some(true));
    assert_eq!(truth("$.a != $.c", &buf), Some(true));
    assert_eq!(truth("$.a == $.c", &buf), Some(false));
    // Not ordered, and never equal to a string (there is no bytes literal).
    assert_eq!(truth("$.a < $.c", &buf), None);
    assert_eq!(truth("$.a == $.s", &buf), None);
    assert_eq!(truth("$.a == 'x'", &buf), None);
    assert_eq!(truth("$.a ~ 'x'", &buf), None);
    assert_eq!(truth("$.a =~ 'x'", &buf), None);
    assert_eq!(truth("exist $.a", &buf), Some(true));
}

fn nodes_needed(text: &str) -> usize {
    (1..=64)
        .find(|&n| {
            let limits = FilterLimits {
                max_nodes: n,
                ..FilterLimits::default()
            };
            Filter::compile(text, &limits).is_ok()
        })
        .unwrap_or_else(|| panic!("{text:?} needs more than 64 nodes"))
}

#[test]
fn max_nodes_counts_operands_and_prefix_operators_only() {
    // Operands (literals, fields, patterns, list items) count one each;
    // `(`, `not`, unary `-` and `exist` one each; binary operators none.
    assert_eq!(nodes_needed("$seq == 1"), 2);
    assert_eq!(nodes_needed("$seq == 1 and $seq == 2 or $seq == 3"), 6);
    assert_eq!(nodes_needed("$tag =~ 'a'"), 2);
    assert_eq!(nodes_needed("$seq in (1, 2, 3)"), 4);
    assert_eq!(nodes_needed("not ($seq == 1)"), 4);
    assert_eq!(nodes_needed("-$seq < 1"), 3);
    assert_eq!(nodes_needed("exist $.x"), 2);
    // A negative literal is one node in an `in` list, two elsewhere.
    assert_eq!(nodes_needed("$seq in (-1)"), 2);
    assert_eq!(nodes_needed("$seq == -1"), 3);
}

fn depth_needed(text: &str) -> usize {
    (1..=32)
        .find(|&d| {
            let limits = FilterLimits {
                max_depth: d,
                ..FilterLimits::default()
            };
            Filter::compile(text, &limits).is_ok()
        })
        .unwrap_or_else(|| panic!("{text:?} needs depth over 32"))
}

#[test]
fn max_depth_counts_tree_levels_and_open_parentheses() {
    assert_eq!(depth_needed("true"), 1);
    assert_eq!(depth_needed("$seq == 1"), 2);
    assert_eq!(depth_needed("$seq + 1 == 2"), 3);
    // An and/or chain is one level however long.
    assert_eq!(depth_needed("$seq == 1 and $seq == 2 and $seq == 3"), 3);
    assert_eq!(depth_needed("$seq == 1 and $seq == 2 or $seq == 3"), 4);
    assert_eq!(depth_needed("not $.x"), 2);
    // While parsing, each `(` and each operator's right operand opens one
    // level: three parentheses around a comparison need 5.
    assert_eq!(depth_needed("((($seq == 1)))"), 5);
}

// ---- item 7: memory estimate ----

#[test]
fn memory_estimate_grows_with_regex_count_and_size() {
    let limits = FilterLimits::default();
    let est = |t: &str| {
        Filter::compile(t, &limits)
            .unwrap_or_else(|e| panic!("{t}: {e}"))
            .memory_estimate()
    };
    let none = est("$seq == 1");
    let one = est("$tag =~ 'ab'");
    let two = est("$tag =~ 'ab' and $.x =~ 'cd'");
    let big = est(r"$tag =~ '\w\w'");
    assert!(none < one && one < two, "{none} {one} {two}");
    assert!(big > 100 * 1024, "a Unicode \\w\\w DFA is large: {big}");
    assert!(big <= limits.max_regex_size + 4096, "{big}");
    let four = est(r"$tag =~ '\w\w' or $tag =~ '\d{20}' or $.a =~ '\w\w' or $.b =~ '\w\w'");
    assert!(four > 3 * big, "{four} vs {big}");

    let m = MappingFilter::compile("map priority=high when $tag =~ 'ab'", &limits)
        .expect("compiles")
        .memory_estimate();
    let m2 = MappingFilter::compile(
        r"map priority=high when $tag =~ '\w\w'; map timeout=1s when $.x =~ '\d{20}'",
        &limits,
    )
    .expect("compiles")
    .memory_estimate();
    assert!(m < m2 && m2 > 2 * 100 * 1024, "{m} {m2}");
}
