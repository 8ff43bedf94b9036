//! Bad filter input: every case is refused at compile time with an error that
//! says where and what, and nothing panics or overflows the stack.

use tagwire_core::filter::{Filter, FilterError, FilterLimits, MappingFilter, MAX_DEPTH_CAP};

fn err(text: &str) -> FilterError {
    match Filter::compile(text, &FilterLimits::default()) {
        Ok(_) => panic!("{text:?} should not compile"),
        Err(e) => e,
    }
}

#[test]
fn missing_value_reports_position_expected_and_found() {
    let e = err("$type_name == 'Alarm' and $priority == and $seq > 1");
    assert_eq!(
        e.to_string(),
        "at 39: expected a value after '==', found 'and'"
    );
}

#[test]
fn unbalanced_open_paren() {
    let e = err("($priority < 2 and ($seq > 1)");
    match e {
        FilterError::Syntax {
            at,
            expected,
            found,
        } => {
            assert_eq!(at, 29);
            assert!(expected.contains("')'"), "{expected}");
            assert_eq!(found, "end of input");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn unbalanced_close_paren() {
    let e = err("$priority < 2)");
    match e {
        FilterError::Syntax { at, found, .. } => {
            assert_eq!(at, 13);
            assert!(found.contains("no matching '('"), "{found}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn unknown_header_field_is_a_compile_error() {
    let e = err("$prority < 2");
    assert_eq!(
        e,
        FilterError::UnknownHeaderField {
            at: 0,
            name: "prority".into()
        }
    );
    assert!(
        e.to_string().contains("'$.prority'"),
        "the message says how to reach a body field"
    );
}

#[test]
fn bare_word_suggests_field_syntax() {
    let e = err("severity > 3");
    assert!(e.to_string().contains("$.severity"), "{e}");
}

#[test]
fn type_mismatch_priority_vs_string() {
    let e = err("$priority == 'x'");
    match e {
        FilterError::TypeMismatch {
            at,
            op,
            left,
            right,
        } => {
            assert_eq!(at, 10);
            assert_eq!(op, "==");
            assert!(left.starts_with("int"), "{left}");
            assert!(right.starts_with("string"), "{right}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn type_mismatch_cases() {
    for text in [
        "$tag + 1 > 2",
        "$tag < 3",
        "not $seq",
        "$priority ~ 'x'",
        "$seq =~ 'x'",
        "$seq in ('a')",
        "true < false",
        "$tag",
    ] {
        assert!(
            matches!(err(text), FilterError::TypeMismatch { .. }),
            "{text}: {}",
            err(text)
        );
    }
}

#[test]
fn one_megabyte_expression_is_refused_by_length() {
    let text = "$seq == 1 or ".repeat((1 << 20) / 13 + 1) + "$seq == 1";
    assert!(text.len() >= 1 << 20);
    let e = err(&text);
    assert_eq!(
        e,
        FilterError::LimitExceeded {
            limit: "max_text_len",
            value: text.len(),
            max: 4096,
            at: None
        }
    );
}

#[test]
fn long_expression_within_raised_length_limit_hits_node_limit() {
    let text = "$seq == 1 or ".repeat(1000) + "$seq == 1";
    let limits = FilterLimits {
        max_text_len: 1 << 20,
        ..FilterLimits::default()
    };
    let e = Filter::compile(&text, &limits).expect_err("too many nodes");
    assert!(
        matches!(
            e,
            FilterError::LimitExceeded {
                limit: "max_nodes",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn ten_thousand_nested_parens_are_refused_without_stack_overflow() {
    let text = "(".repeat(10_000) + "$seq == 1" + &")".repeat(10_000);
    let limits = FilterLimits {
        max_text_len: 1 << 20,
        ..FilterLimits::default()
    };
    let e = Filter::compile(&text, &limits).expect_err("too deep");
    assert!(
        matches!(
            e,
            FilterError::LimitExceeded {
                limit: "max_depth",
                max: 32,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn deep_not_chain_is_refused() {
    let text = "not ".repeat(10_000) + "true";
    let limits = FilterLimits {
        max_text_len: 1 << 20,
        ..FilterLimits::default()
    };
    let e = Filter::compile(&text, &limits).expect_err("too deep");
    assert!(
        matches!(
            e,
            FilterError::LimitExceeded {
                limit: "max_depth",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn depth_limit_is_capped_and_the_cap_fits_a_small_stack() {
    // Even a configured depth of a million is capped, and parsing at the cap
    // fits in a 512 KiB thread stack (debug build).
    let limits = FilterLimits {
        max_text_len: 1 << 20,
        max_depth: 1_000_000,
        max_nodes: 1 << 20,
        ..FilterLimits::default()
    };
    let handle = std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(move || {
            let ok = "(".repeat(MAX_DEPTH_CAP - 2) + "$seq == 1" + &")".repeat(MAX_DEPTH_CAP - 2);
            let ok_result = Filter::compile(&ok, &limits).map(|_| ());
            let deep = "(".repeat(100_000) + "$seq == 1" + &")".repeat(100_000);
            let deep_result = Filter::compile(&deep, &limits).map(|_| ());
            (ok_result, deep_result)
        })
        .expect("spawn");
    let (ok, deep) = handle.join().expect("no stack overflow");
    assert_eq!(ok, Ok(()));
    assert!(matches!(
        deep,
        Err(FilterError::LimitExceeded {
            limit: "max_depth",
            max: MAX_DEPTH_CAP,
            ..
        })
    ));
}

#[test]
fn catastrophic_regex_compiles_and_runs_in_linear_time() {
    // `(a+)+$` backtracks exponentially in backtracking engines; the regex
    // crate is linear, so this is allowed and cheap.
    let f =
        Filter::compile("$tag =~ '(a+)+$'", &FilterLimits::default()).expect("linear-time engine");
    let tag = format!("/{}!", "a".repeat(1000));
    let mut ev = tagwire_proto::Event::new(tag, &b""[..]);
    ev.header.seq = 1;
    let mut buf = bytes::BytesMut::new();
    ev.encode(&mut buf).expect("encodes");
    assert!(!f.matches(&tagwire_proto::EventRef::parse(&buf).expect("valid")));
}

#[test]
fn oversized_regex_is_refused_by_size_limit() {
    let limits = FilterLimits {
        max_regex_size: 1024,
        ..FilterLimits::default()
    };
    let e = Filter::compile("$tag =~ '\\w{50}'", &limits).expect_err("too big");
    assert!(
        matches!(e, FilterError::RegexTooBig { max: 1024, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("max_regex_size 1024"), "{e}");
}

#[test]
fn invalid_regex_is_refused() {
    let e = err("$tag =~ '(unclosed'");
    assert!(matches!(e, FilterError::Regex { at: 8, .. }), "{e}");
}

#[test]
fn too_many_regexes_are_refused() {
    let e = err("$tag =~ 'a' and $tag =~ 'b' and $tag =~ 'c' and $tag =~ 'd' and $tag =~ 'e'");
    assert!(
        matches!(
            e,
            FilterError::LimitExceeded {
                limit: "max_regexes",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn invalid_utf8_is_refused_with_its_offset() {
    let e = Filter::compile_bytes(b"$tag == '\xff\xfe'", &FilterLimits::default())
        .expect_err("not UTF-8");
    assert_eq!(e, FilterError::InvalidUtf8 { at: 9 });
}

#[test]
fn unterminated_string() {
    assert!(matches!(
        err("$tag == 'abc"),
        FilterError::Syntax { at: 8, .. }
    ));
}

#[test]
fn chained_comparison_is_refused() {
    assert!(matches!(err("1 < $seq < 3"), FilterError::Syntax { .. }));
}

#[test]
fn integer_literal_out_of_range() {
    assert!(matches!(
        err("$seq == 99999999999999999999999"),
        FilterError::Syntax { at: 8, .. }
    ));
}

#[test]
fn empty_filter_is_refused() {
    assert!(matches!(err(""), FilterError::Syntax { at: 0, .. }));
    assert!(matches!(err("   "), FilterError::Syntax { .. }));
}

#[test]
fn mapping_errors_name_the_property() {
    let l = FilterLimits::default();
    let e = MappingFilter::compile("map colour=red", &l).expect_err("unknown property");
    assert!(
        matches!(e, FilterError::UnknownMappingProperty { at: 4, ref name } if name == "colour"),
        "{e}"
    );
    let e = MappingFilter::compile("map priority=300", &l).expect_err("out of range");
    assert!(
        matches!(
            e,
            FilterError::BadMappingValue {
                property: "priority",
                ..
            }
        ),
        "{e}"
    );
    let e = MappingFilter::compile("map timeout=0s", &l).expect_err("zero");
    assert!(
        matches!(
            e,
            FilterError::BadMappingValue {
                property: "timeout",
                ..
            }
        ),
        "{e}"
    );
    let e = MappingFilter::compile("map priority=high when $.x ==", &l).expect_err("syntax");
    assert!(matches!(e, FilterError::Syntax { .. }), "{e}");
}
