//! `tagwire sub PATTERN [--count N] [--json]`: prints `TAG PAYLOAD` per event
//! (like `mosquitto_sub -v`), or one JSON object per line.

use std::io::Write;
use std::time::Duration;

use tagwire::{DiscardPolicy, Sample, Session, ValueRef};

use super::CmdResult;
use crate::cli::SubArgs;

pub fn run(session: &Session, a: SubArgs) -> CmdResult {
    let name = a
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("/cli/sub/{}", std::process::id()));
    let mut b = session.subscribe(&a.pattern).endpoint(&name);
    if let Some(n) = a.max_queue {
        b = b.max_queue_length(n);
    }
    if let Some(d) = &a.discard {
        b = b.discard(d.parse::<DiscardPolicy>()?);
    }
    for f in &a.filters {
        b = b.filter(f);
    }
    if let Some(m) = &a.mapping {
        b = b.map(m);
    }
    let sub = b.receiver()?;
    let timeout = a.timeout.map(Duration::from_secs_f64);
    let stdout = std::io::stdout();
    let mut received = 0u64;
    while a.count.is_none_or(|n| received < n) {
        let sample = match timeout {
            Some(t) => sub.recv_timeout(t)?.ok_or_else(|| {
                format!("no event on {} within {:.1} s", a.pattern, t.as_secs_f64())
            })?,
            None => sub.recv()?,
        };
        let mut out = stdout.lock();
        if a.json {
            writeln!(out, "{}", to_json(&sample))?;
        } else {
            writeln!(
                out,
                "{} {}",
                sample.tag(),
                String::from_utf8_lossy(&sample.payload())
            )?;
        }
        out.flush()?;
        received += 1;
    }
    Ok(())
}

fn value_json(v: ValueRef<'_>) -> serde_json::Value {
    match v {
        ValueRef::Int(i) => i.into(),
        ValueRef::Float(f) => f.into(),
        ValueRef::Bool(b) => b.into(),
        ValueRef::Str(s) => s.into(),
        ValueRef::Bytes(b) => serde_json::json!({ "hex": hex(b) }),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The JSON form of a received event.
pub fn to_json(s: &Sample) -> serde_json::Value {
    let ev = s.event();
    let fields: serde_json::Map<String, serde_json::Value> = ev
        .fields()
        .map(|(k, v)| (k.to_owned(), value_json(v)))
        .collect();
    let mut o = serde_json::json!({
        "tag": ev.tag,
        "publisher": ev.publisher,
        "seq": ev.seq,
        "source_time_ns": ev.source_time_ns,
        "priority": ev.priority,
        "fields": fields,
    });
    match std::str::from_utf8(ev.payload) {
        Ok(text) => o["payload"] = text.into(),
        Err(_) => o["payload_hex"] = hex(ev.payload).into(),
    }
    for (k, v) in [("type_name", ev.type_name), ("event_name", ev.event_name)] {
        if let Some(v) = v {
            o[k] = v.into();
        }
    }
    o
}
