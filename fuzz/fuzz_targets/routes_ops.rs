//! Fuzz target: bytes as a sequence of changes to a `Routes<u64>` (add and
//! remove channels, channel filters, session filters, operators, mapping
//! filters, sessions) interleaved with events to route. After every change
//! the channel count, and for every event the destinations and their
//! overrides, must equal a reference model that evaluates each channel with
//! `levels_pass` (the model of `crates/tagwire-core/tests/route.rs`). At the
//! end every tag is routed with a few fixed events as well.
//!
//! Filters and mapping filters come from small fixed lists, so the target
//! explores the routing table (index vs tag path, moves between them), not
//! the filter parser (that is `filter_parser`'s job).
#![no_main]

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tagwire_core::filter::{
    levels_pass, Filter, FilterLimits, FilterList, InterFilterOp, MappingFilter, Overrides,
};
use tagwire_core::route::{RouteError, Routes};
use tagwire_core::tags::Pattern;
use tagwire_proto::{Event, EventRef, Value};

const PATTERNS: &[&str] = &["/a/**", "/a/*", "/a/b", "/**", "/c/*", "/a/*/c", "/x"];
const TAGS: &[&str] = &["/a/b", "/a/c", "/a/b/c", "/c/d", "/x", "/a"];
const FILTERS: &[&str] = &[
    "$.k == 1",
    "$.k == 2",
    "$.s == 'x'",
    "$.s ~ 'yy'",
    "$type_name == 'T' and $priority < 3",
    "$.k in (1, 3)",
    "$priority < 2",
    "$.k > 1",
    "true",
    "not ($.k == 1)",
    "$.s =~ '^a.*b$'",
    "$.s ~^ 'ay'",
    "$tag == '/a/b'",
    "$.k == 1 and $.s == 'x'",
    "exist $.s",
    "$.k == 3 or $.s == 'z'",
];
const MAPS: &[&str] = &[
    "map priority=high when $.k == 1",
    "map timeout=5ms",
    "map priority=low when $.s ~ 'y'; map lifetime=1s",
];
const STRINGS: &[&str] = &["x", "ayyb", "z", "ab"];
/// A small bound so that adding filters also hits the limit.
const MAX_FILTERS: usize = 3;
const MAX_OPS: usize = 128;
const SESSIONS: u8 = 3;

fn limits() -> FilterLimits {
    FilterLimits {
        max_filters_per_channel: MAX_FILTERS,
        // The model evaluates every channel: no per-event budget (issue 24
        // item 9; the budget has its own tests).
        max_event_work: u64::MAX,
        ..FilterLimits::default()
    }
}

struct Compiled {
    filters: Vec<Filter>,
    maps: Vec<MappingFilter>,
    patterns: Vec<Pattern>,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| {
        let l = FilterLimits::default();
        Compiled {
            filters: FILTERS
                .iter()
                .map(|t| Filter::compile(t, &l).expect("fixed filter compiles"))
                .collect(),
            maps: MAPS
                .iter()
                .map(|t| MappingFilter::compile(t, &l).expect("fixed mapping compiles"))
                .collect(),
            patterns: PATTERNS
                .iter()
                .map(|t| Pattern::parse(t).expect("fixed pattern parses"))
                .collect(),
        }
    })
}

/// Reads the input a byte at a time; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn pick(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
    fn session(&mut self) -> u64 {
        u64::from(self.byte() % SESSIONS)
    }
}

/// A channel in the model: session, pattern, own filters, mapping filter.
type ModelChannel = (u64, Pattern, FilterList, Option<(u64, MappingFilter)>);

#[derive(Default)]
struct Model {
    channels: BTreeMap<u64, ModelChannel>,
    sessions: HashMap<u64, (FilterList, InterFilterOp)>,
}

impl Model {
    fn session(&mut self, s: u64) -> &mut (FilterList, InterFilterOp) {
        self.sessions
            .entry(s)
            .or_insert_with(|| (FilterList::new(&limits()), InterFilterOp::And))
    }

    fn route(&self, ev: &EventRef<'_>) -> Vec<(u64, Overrides)> {
        let empty = (FilterList::new(&limits()), InterFilterOp::And);
        let mut out = Vec::new();
        for (&id, (s, pattern, proxy, map)) in &self.channels {
            if !pattern.matches(ev.tag) {
                continue;
            }
            let (admin, op) = self.sessions.get(s).unwrap_or(&empty);
            if levels_pass(*op, admin, proxy, ev) {
                let o = map
                    .as_ref()
                    .map_or_else(Overrides::default, |(_, m)| m.apply(ev));
                out.push((id, o));
            }
        }
        out
    }

    fn nth_channel(&self, i: u8) -> Option<u64> {
        let n = self.channels.len();
        (n > 0).then(|| {
            *self
                .channels
                .keys()
                .nth(usize::from(i) % n)
                .expect("in range")
        })
    }
}

fn event(tag: &str, priority: u8, type_t: bool, k: Option<i64>, s: Option<&str>) -> BytesMut {
    let mut ev = Event::new(tag, &b""[..]);
    ev.header.priority = priority;
    ev.header.type_name = type_t.then(|| "T".to_owned());
    if let Some(k) = k {
        ev.fields.push(("k".into(), Value::Int(k)));
    }
    if let Some(s) = s {
        ev.fields.push(("s".into(), Value::Str(s.into())));
    }
    let mut buf = BytesMut::new();
    ev.encode(&mut buf).expect("event encodes");
    buf
}

fn check_event(r: &mut Routes<u64>, model: &Model, buf: &BytesMut) {
    let e = EventRef::parse(buf).expect("event parses");
    let mut got = Vec::new();
    r.route(&e, |id, o| got.push((*id, o)));
    got.sort_by_key(|(id, _)| *id);
    let want = model.route(&e);
    assert_eq!(got, want, "event on {:?}", e.tag);
}

fuzz_target!(|data: &[u8]| {
    let c = compiled();
    let mut input = Input(data);
    let mut r: Routes<u64> = Routes::new(limits());
    let mut model = Model::default();
    let mut step = 0u64;
    while !input.0.is_empty() && (step as usize) < MAX_OPS {
        step += 1;
        // Ids of filters added alone; a new channel's own filters take ids
        // from a separate range (1000 + 10 * fid + i), as in tests/route.rs.
        let fid = step;
        match input.byte() % 13 {
            0 | 1 => {
                let session = input.session();
                let pattern = c.patterns[input.pick(PATTERNS.len())].clone();
                let n = input.pick(MAX_FILTERS + 2);
                let fl: Vec<(u64, Filter)> = (0..n)
                    .map(|i| {
                        let x = input.pick(FILTERS.len());
                        (1000 + fid * 10 + i as u64, c.filters[x].clone())
                    })
                    .collect();
                let map = match input.pick(MAPS.len() + 1) {
                    0 => None,
                    x => Some((1000 + fid * 10 + 9, c.maps[x - 1].clone())),
                };
                let res =
                    r.add_channel(fid, session, pattern.clone(), fid, fl.clone(), map.clone());
                if n > MAX_FILTERS {
                    assert!(matches!(res, Err(RouteError::Filter(_))), "{res:?}");
                } else {
                    res.expect("channel added");
                    let mut list = FilterList::new(&limits());
                    for (i, f) in fl {
                        list.add(i, f).expect("room");
                    }
                    model.session(session);
                    model.channels.insert(fid, (session, pattern, list, map));
                }
            }
            2 => {
                // A duplicate channel id is refused and changes nothing.
                if let Some(id) = model.nth_channel(input.byte()) {
                    let p = c.patterns[0].clone();
                    assert_eq!(
                        r.add_channel(id, 0, p, 0, vec![], None),
                        Err(RouteError::DuplicateChannel(id))
                    );
                }
            }
            3 => {
                if let Some(id) = model.nth_channel(input.byte()) {
                    assert_eq!(r.remove_channel(id), Some(id));
                    model.channels.remove(&id);
                    assert_eq!(r.remove_channel(id), None);
                }
            }
            4 => {
                let n = input.pick(3);
                let mut cs: Vec<u64> = (0..n)
                    .filter_map(|_| model.nth_channel(input.byte()))
                    .collect();
                cs.sort_unstable();
                cs.dedup();
                let x = input.pick(FILTERS.len());
                if input.byte() % 4 == 0 {
                    // An unknown channel makes the whole call fail.
                    let unknown = u64::MAX;
                    cs.push(unknown);
                    assert_eq!(
                        r.add_channel_filter(&cs, fid, &c.filters[x]),
                        Err(RouteError::UnknownChannel(unknown))
                    );
                } else {
                    let ok = r.add_channel_filter(&cs, fid, &c.filters[x]).is_ok();
                    let fits = cs.iter().all(|id| model.channels[id].2.len() < MAX_FILTERS);
                    assert_eq!(ok, fits, "all or nothing");
                    if ok {
                        for id in cs {
                            let ch = model.channels.get_mut(&id).expect("present");
                            ch.2.add(fid, c.filters[x].clone()).expect("room");
                        }
                    }
                }
            }
            5 => {
                if let Some(id) = model.nth_channel(input.byte()) {
                    let ids: Vec<u64> = model.channels[&id].2.iter().map(|(f, _)| f).collect();
                    let k = input.pick(ids.len() + 1);
                    match ids.get(k) {
                        Some(&f) => {
                            assert!(r.remove_channel_filter(id, f));
                            model.channels.get_mut(&id).expect("present").2.remove(f);
                        }
                        None => assert!(!r.remove_channel_filter(id, u64::MAX)),
                    }
                }
            }
            6 => {
                let s = input.session();
                let x = input.pick(FILTERS.len());
                let ok = r.add_session_filter(s, fid, c.filters[x].clone()).is_ok();
                let model_ok = model.session(s).0.add(fid, c.filters[x].clone()).is_ok();
                assert_eq!(ok, model_ok, "session filter limit");
            }
            7 => {
                let s = input.session();
                let ids: Vec<u64> = model.session(s).0.iter().map(|(f, _)| f).collect();
                let k = input.pick(ids.len() + 1);
                match ids.get(k) {
                    Some(&f) => {
                        assert!(r.remove_session_filter(s, f));
                        model.session(s).0.remove(f);
                    }
                    None => assert!(!r.remove_session_filter(s, u64::MAX)),
                }
            }
            8 => {
                let s = input.session();
                let op = if input.byte() % 2 == 1 {
                    InterFilterOp::Or
                } else {
                    InterFilterOp::And
                };
                r.set_op(s, op);
                model.session(s).1 = op;
                assert_eq!(r.op(s), op);
            }
            9 => {
                if let Some(id) = model.nth_channel(input.byte()) {
                    let x = input.pick(MAPS.len());
                    r.set_mapping(&[id], fid, &c.maps[x]);
                    model.channels.get_mut(&id).expect("present").3 =
                        Some((fid, c.maps[x].clone()));
                }
            }
            10 => {
                if let Some(id) = model.nth_channel(input.byte()) {
                    let have = model.channels[&id].3.as_ref().map(|(f, _)| *f);
                    // The right id removes it; any other id does not.
                    let try_id = if input.byte() % 2 == 0 { have } else { None };
                    match try_id {
                        Some(f) => {
                            assert!(r.remove_mapping(id, f));
                            model.channels.get_mut(&id).expect("present").3 = None;
                        }
                        None => assert!(!r.remove_mapping(id, u64::MAX)),
                    }
                }
            }
            11 => {
                let s = input.session();
                let mut got = r.remove_session(s);
                got.sort_unstable();
                let want: Vec<u64> = model
                    .channels
                    .iter()
                    .filter(|(_, ch)| ch.0 == s)
                    .map(|(id, _)| *id)
                    .collect();
                assert_eq!(got, want, "channels of removed session {s}");
                model.channels.retain(|_, ch| ch.0 != s);
                model.sessions.remove(&s);
                assert_eq!(r.op(s), InterFilterOp::And, "a removed session's operator");
            }
            _ => {
                let tag = TAGS[input.pick(TAGS.len())];
                let priority = input.byte() % 5;
                let flags = input.byte();
                let k = (flags & 1 != 0).then_some(i64::from((flags >> 1) % 4));
                let s = (flags & 8 != 0).then(|| STRINGS[usize::from(flags >> 4) % STRINGS.len()]);
                let buf = event(tag, priority, flags & 64 != 0, k, s);
                check_event(&mut r, &model, &buf);
            }
        }
        assert_eq!(
            r.len(),
            model.channels.len(),
            "channel count after step {step}"
        );
        let stats = r.stats();
        assert_eq!(stats.plain + stats.judged + stats.indexed, r.len());
    }
    for tag in TAGS {
        for (k, s) in [
            (None, None),
            (Some(1), Some("x")),
            (Some(2), Some("ayyb")),
            (Some(3), Some("ab")),
        ] {
            check_event(&mut r, &model, &event(tag, 1, true, k, s));
        }
    }
});
