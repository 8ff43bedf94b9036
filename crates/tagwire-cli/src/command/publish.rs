//! `tagwire pub TAG [DATA] [--count N] [--rate HZ] [--size B] [--field K=V]`.

use std::io::BufRead;
use std::time::{Duration, Instant};

use tagwire::{Session, Value};

use super::CmdResult;
use crate::cli::PubArgs;

/// Parses `NAME=VALUE`: integer, float, true/false, else string.
pub fn parse_field(s: &str) -> Result<(String, Value), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("invalid --field {s:?}: expected NAME=VALUE"))?;
    if name.is_empty() {
        return Err(format!("invalid --field {s:?}: empty name"));
    }
    let v = if let Ok(i) = value.parse::<i64>() {
        Value::Int(i)
    } else if let Ok(f) = value.parse::<f64>() {
        Value::Float(f)
    } else if let Ok(b) = value.parse::<bool>() {
        Value::Bool(b)
    } else {
        Value::Str(value.to_owned())
    };
    Ok((name.to_owned(), v))
}

/// Room left in a frame for the header of an event published from a file
/// (tag, publisher name, fields).
const FILE_HEADER_ROOM: u64 = 64 * 1024;

/// The frame size `pub --file FILE` offers: the file's size plus room for
/// the header (at least `asked`), at most the protocol's 256 MiB (a larger
/// file goes in pieces, protocol version 5), or an error naming the file and
/// the 4 GiB bound of an event in pieces.
pub fn frame_for_file(
    file: &std::path::Path,
    asked: Option<u32>,
) -> Result<u32, Box<dyn std::error::Error>> {
    let len = std::fs::metadata(file)
        .map_err(|e| format!("--file {}: {e}", file.display()))?
        .len();
    let hard = u64::from(tagwire_proto::limits::HARD_MAX_FRAME);
    let need = len + FILE_HEADER_ROOM;
    if need > tagwire_proto::MAX_PIECED_EVENT {
        return Err(format!(
            "--file {}: {len} bytes, over the {} bytes one event may have (4 GiB, in pieces, \
             less {FILE_HEADER_ROOM} for its header; docs/reliability.md \"Pieces on client connections\")",
            file.display(),
            tagwire_proto::MAX_PIECED_EVENT - FILE_HEADER_ROOM
        )
        .into());
    }
    Ok((need.min(hard) as u32).max(asked.unwrap_or(0)))
}

pub fn run(session: &Session, a: PubArgs) -> CmdResult {
    let fields = a
        .fields
        .iter()
        .map(|f| parse_field(f))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(r) = a.rate {
        if !(r > 0.0 && r.is_finite()) {
            return Err(format!(
                "invalid --rate {r}: must be a positive number of events per second"
            )
            .into());
        }
    }
    let mut reliability = tagwire::Reliability::BestEffort;
    for kv in &a.qos {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            format!("--qos {kv:?}: expected NAME=VALUE, e.g. --qos reliability=durable")
        })?;
        if k != "reliability" {
            return Err(format!(
                "--qos {k}: tagwire pub takes only reliability today (set other QoS of a tag with `tagwire admin qos TAG {k}=…`)"
            )
            .into());
        }
        let wanted: tagwire::Reliability = v.parse()?;
        if wanted == tagwire::Reliability::Durable {
            session.stored(&a.tag)?;
        }
        reliability = wanted;
    }
    let name = a
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("/cli/pub/{}", std::process::id()));
    let publisher = session.declare_publisher(&name)?;
    // reliable, exactly_once, durable: each event is acknowledged by the
    // daemon, sent again after a reconnect (docs/reliability.md).
    publisher.set_reliability(reliability);
    // `Bytes`: each send shares the one payload (a 2 GiB `--file` is held
    // once here, not copied per event).
    let send = |payload: bytes::Bytes| -> Result<(), tagwire::Error> {
        let mut ev = publisher.event(&a.tag, payload).priority(a.priority);
        for (k, v) in &fields {
            ev = ev.field(k, v.clone());
        }
        ev.send()
    };
    if a.data.as_deref() == Some("-") {
        let mut sent = 0u64;
        for line in std::io::stdin().lock().lines() {
            send(line?.into_bytes().into())?;
            sent += 1;
        }
        session.flush()?;
        return check_refusals(session, sent);
    }
    let base = a.data.clone().unwrap_or_default().into_bytes();
    let payload = bytes::Bytes::from(match (&a.file, a.size) {
        (Some(f), _) => std::fs::read(f).map_err(|e| format!("--file {}: {e}", f.display()))?,
        (None, size) => sized(base, size),
    });
    let period = a.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let start = Instant::now();
    for i in 0..a.count {
        if let Some(p) = period {
            let due = start + p.mul_f64(i as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        send(payload.clone())?;
    }
    session.flush()?;
    check_refusals(session, a.count)?;
    if a.count > 1 || a.file.is_some() {
        eprintln!(
            "published {} events on {} in {:.3} s",
            a.count,
            a.tag,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// How long `tagwire pub` waits at the end for the daemon to acknowledge
/// a reliable publisher's events.
const ACK_WAIT: Duration = Duration::from_secs(30);
/// DATA repeated (or zeros) to `size` bytes.
fn sized(base: Vec<u8>, size: Option<usize>) -> Vec<u8> {
    match size {
        Some(n) if base.is_empty() => vec![0u8; n],
        Some(n) => base.iter().copied().cycle().take(n).collect(),
        None => base,
    }
}

/// Waits until the router has handled every publish (a round trip), then
/// fails naming what it refused: publishing is fire-and-forget, and a
/// refused event (ACL, full queue, bad tag) must not exit 0 in silence.
fn check_refusals(session: &Session, sent: u64) -> CmdResult {
    session.wait_acknowledged(ACK_WAIT)?;
    session.ping()?;
    let r = session.take_refusals();
    let Some((code, message)) = r.first else {
        return Ok(());
    };
    let last = match r.last {
        Some((c, m)) if r.count > 1 => format!("; last: {c:?}: {m}"),
        _ => String::new(),
    };
    Err(format!(
        "the router refused {} of {sent} event(s): {code:?}: {message}{last}",
        r.count
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_values_get_the_narrowest_type_and_bad_ones_are_named() {
        assert_eq!(parse_field("n=3"), Ok(("n".into(), Value::Int(3))));
        assert_eq!(parse_field("x=2.5"), Ok(("x".into(), Value::Float(2.5))));
        assert_eq!(parse_field("ok=true"), Ok(("ok".into(), Value::Bool(true))));
        assert_eq!(
            parse_field("s=a=b"),
            Ok(("s".into(), Value::Str("a=b".into())))
        );
        assert!(parse_field("novalue").unwrap_err().contains("novalue"));
        assert!(parse_field("=1").unwrap_err().contains("empty name"));
    }
}
