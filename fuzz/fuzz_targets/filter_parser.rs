//! Fuzz target: arbitrary bytes as a filter and as a mapping filter. Compiling
//! must never panic or overflow the stack; whatever compiles is evaluated on
//! a fixed event, standalone and through a `SubscriptionIndex`, and the two
//! must agree. Errors are expected.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::filter::{
    Filter, FilterLimits, MappingFilter, MatchScratch, SubscriptionIndex, SubscriptionSpec,
};
use tagwire_proto::{Event, EventRef, Expiry, Value};

fn event() -> BytesMut {
    let mut ev = Event::new("/alarms/net/router1", &b"payload"[..]);
    ev.header.priority = 1;
    ev.header.seq = 42;
    ev.header.type_name = Some("CommunicationsAlarm".into());
    ev.header.expiry = Expiry::AfterNs(1_000);
    ev.fields = vec![
        ("severity".into(), Value::Int(5)),
        ("ratio".into(), Value::Float(0.5)),
        ("host".into(), Value::Str("router1".into())),
        ("urgent".into(), Value::Bool(true)),
        ("a".into(), Value::Int(i64::MIN)),
    ];
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("fixed event encodes");
    buf
}

fuzz_target!(|data: &[u8]| {
    let buf = event();
    let ev = EventRef::parse(&buf).expect("fixed event parses");
    // Relaxed text and node limits so deep inputs reach the depth checks.
    let limits = FilterLimits {
        max_text_len: 1 << 16,
        max_nodes: 1 << 12,
        ..FilterLimits::default()
    };
    if let Ok(f) = Filter::compile_bytes(data, &limits) {
        let naive = f.matches(&ev);
        let mut idx = SubscriptionIndex::new(limits.clone());
        if idx.insert(1, SubscriptionSpec::Filter(f), ()).is_ok() {
            let mut out = Vec::new();
            idx.matching_ids(&ev, &mut MatchScratch::new(), &mut out);
            assert_eq!(naive, out == [1], "index and filter disagree");
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(m) = MappingFilter::compile(text, &limits) {
            let _ = m.apply(&ev);
        }
    }
});
