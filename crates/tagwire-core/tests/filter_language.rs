//! The constraint language: operators, header and body fields, types and the
//! three-valued semantics of absent fields.

use bytes::BytesMut;
use tagwire_core::filter::{Filter, FilterLimits};
use tagwire_proto::{Event, EventRef, Expiry, Value};

fn encode(ev: &Event) -> BytesMut {
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("test event encodes");
    buf
}

fn alarm() -> Event {
    let mut ev = Event::new("/alarms/net/router1", &b"payload"[..]);
    ev.header.publisher = "/probe".into();
    ev.header.seq = 42;
    ev.header.priority = 1;
    ev.header.type_name = Some("CommunicationsAlarm".into());
    ev.header.event_name = Some("lost_packet".into());
    ev.header.expiry = Expiry::AfterNs(2_000_000_000);
    ev.fields = vec![
        ("severity".into(), Value::Int(5)),
        ("ratio".into(), Value::Float(0.25)),
        ("host".into(), Value::Str("router1.lab".into())),
        ("urgent".into(), Value::Bool(true)),
        ("priority".into(), Value::Int(9)),
        (
            "blob".into(),
            Value::Bytes(bytes::Bytes::from_static(b"\x00\x01")),
        ),
    ];
    ev
}

/// Compiles `text` and evaluates it on `ev`.
fn eval(text: &str, ev: &Event) -> bool {
    let f = Filter::compile(text, &FilterLimits::default())
        .unwrap_or_else(|e| panic!("{text:?} should compile: {e}"));
    let buf = encode(ev);
    f.matches(&EventRef::parse(&buf).expect("valid event"))
}

#[test]
fn tao_example_constraint_matches_the_alarm() {
    let text =
        "$type_name == 'CommunicationsAlarm' and\n$event_name == 'lost_packet' and\n$priority < 2";
    assert!(eval(text, &alarm()));
    let mut other = alarm();
    other.header.priority = 2;
    assert!(!eval(text, &other));
}

#[test]
fn header_fields_are_addressable() {
    let ev = alarm();
    assert!(eval("$tag == '/alarms/net/router1'", &ev));
    assert!(eval("$publisher == '/probe'", &ev));
    assert!(eval("$seq == 42", &ev));
    assert!(eval("$timeout == 2s", &ev));
    assert!(eval("$payload_size == 7", &ev));
    assert!(eval(
        "not exist $stop_time and not exist $virtual_time",
        &ev
    ));
    assert!(eval("$flags == 0", &ev));
}

#[test]
fn dollar_dot_reaches_a_body_field_named_like_a_header_field() {
    let ev = alarm();
    assert!(eval("$priority == 1", &ev));
    assert!(eval("$.priority == 9", &ev));
    assert!(eval("$.'priority' == 9", &ev));
}

#[test]
fn comparisons_and_arithmetic_on_numbers() {
    let ev = alarm();
    assert!(eval(
        "$.severity > 3 and $.severity >= 5 and $.severity <= 5 and $.severity != 4",
        &ev
    ));
    assert!(eval("$.severity * 2 + 1 == 11", &ev));
    assert!(eval("$.severity % 2 == 1 and $.severity / 2 == 2", &ev));
    assert!(eval("$.ratio < 0.5 and $.ratio * 4 == 1", &ev));
    assert!(eval("-$.severity == -5", &ev));
    assert!(eval("$seq % 10 == 2", &ev));
}

#[test]
fn ints_and_floats_compare_exactly() {
    let ev = alarm();
    assert!(eval("$.severity == 5.0", &ev));
    assert!(!eval("$.severity == 5.000001", &ev));
    assert!(eval("$.severity < 5.5", &ev));
    let mut big = Event::new("/t", &b""[..]);
    // 2^53 + 1 is not representable as f64; the comparison must not round it.
    big.fields
        .push(("n".into(), Value::Int(9_007_199_254_740_993)));
    assert!(!eval("$.n == 9007199254740992.0", &big));
    assert!(eval("$.n > 9007199254740992.0", &big));
}

#[test]
fn strings_substring_prefix_and_regex() {
    let ev = alarm();
    assert!(eval("$.host ~ 'er1.l'", &ev));
    assert!(!eval("$.host ~ 'router2'", &ev));
    assert!(eval("$.host ~^ 'router'", &ev));
    assert!(!eval("$.host ~^ 'lab'", &ev));
    assert!(eval("$tag =~ '^/alarms/[a-z]+/router[0-9]+$'", &ev));
    assert!(!eval("$tag =~ '^/alarms/[0-9]+'", &ev));
    assert!(eval("$.host > 'a' and $.host < 'z'", &ev));
}

#[test]
fn in_lists_and_booleans() {
    let ev = alarm();
    assert!(eval("$.severity in (1, 3, 5)", &ev));
    assert!(!eval("$.severity in (1, 3)", &ev));
    assert!(eval("$event_name in ('lost_packet', 'link_down')", &ev));
    assert!(eval("$.urgent", &ev));
    assert!(eval("$.urgent == true and not ($.urgent == false)", &ev));
    assert!(eval("true or $.missing > 1", &ev));
    assert!(eval("$.blob == $.blob", &ev));
}

#[test]
fn precedence_not_and_or() {
    let ev = alarm();
    // and binds tighter than or.
    assert!(eval("$seq == 1 and $seq == 2 or $seq == 42", &ev));
    assert!(!eval("$seq == 1 and ($seq == 2 or $seq == 42)", &ev));
    // not binds tighter than and, looser than comparisons.
    assert!(eval("not $seq == 1 and $seq == 42", &ev));
    assert!(eval("1 + 2 * 3 == 7", &ev));
}

#[test]
fn absent_field_is_unknown_and_never_matches() {
    let ev = alarm();
    for text in [
        "$.missing == 1",
        "$.missing != 1",
        "not ($.missing == 1)",
        "$.missing > 0 or $.missing <= 0",
        "$.missing in (1, 2)",
        "$.missing ~ 'x'",
        "$.missing",
    ] {
        assert!(
            !eval(text, &ev),
            "{text} must not match when the field is absent"
        );
    }
    // Unknown only decides when nothing else does.
    assert!(eval("$.missing == 1 or $seq == 42", &ev));
    assert!(!eval("$.missing == 1 and $seq == 42", &ev));
    assert!(eval("not exist $.missing or $.missing > 3", &ev));
    assert!(eval("exist $.severity", &ev));
}

#[test]
fn absent_optional_header_field_is_unknown() {
    let mut ev = alarm();
    ev.header.type_name = None;
    assert!(!eval("$type_name == 'CommunicationsAlarm'", &ev));
    assert!(!eval("$type_name != 'CommunicationsAlarm'", &ev));
    assert!(eval("not exist $type_name", &ev));
}

#[test]
fn runtime_type_mismatch_of_a_body_field_is_unknown() {
    let ev = alarm();
    assert!(!eval("$.host == 5", &ev));
    assert!(!eval("$.host != 5", &ev));
    assert!(!eval("$.severity ~ 'x'", &ev));
    assert!(!eval("$.host + 1 > 0", &ev));
}

#[test]
fn integer_overflow_and_division_by_zero_are_unknown() {
    let ev = alarm();
    assert!(!eval("$.severity / 0 == 0", &ev));
    assert!(!eval("$.severity / 0 != 0", &ev));
    assert!(!eval("$.severity % 0 == 0", &ev));
    let mut big = Event::new("/t", &b""[..]);
    big.fields.push(("n".into(), Value::Int(i64::MAX)));
    // i128 arithmetic holds i64::MAX * 2 exactly.
    assert!(eval("$.n * 2 > $.n", &big));
}

#[test]
fn durations_are_nanoseconds() {
    let ev = alarm();
    assert!(eval(
        "$timeout == 2000ms and $timeout == 2000000us and $timeout > 1s",
        &ev
    ));
}

#[test]
fn filter_keeps_its_text() {
    let f = Filter::compile("$seq > 1", &FilterLimits::default()).expect("compiles");
    assert_eq!(f.as_str(), "$seq > 1");
    assert_eq!(f.to_string(), "$seq > 1");
}

#[test]
fn backslashes_other_than_quote_escapes_reach_the_regex() {
    let mut ev = alarm();
    ev.fields.push(("id".into(), Value::Str("it's 42".into())));
    assert!(eval("$.id =~ '\\d+$'", &ev));
    assert!(eval("$.id == 'it\\'s 42'", &ev));
    assert!(eval("$.id == \"it's 42\"", &ev));
}
