//! `tagwire sub PATTERN [--count N] [--json]`: prints `TAG PAYLOAD` per event
//! (like `mosquitto_sub -v`), or one JSON object per line. Events the client
//! library dropped because printing fell behind are reported on stderr while
//! they grow and at exit (also as a last JSON line with `--json`).

use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tagwire::{DiscardPolicy, Expiry, Sample, Session, Subscriber, ValueRef};

use super::CmdResult;
use crate::cli::SubArgs;

/// While drops grow, at most one stderr warning this often.
const WARN_EVERY: Duration = Duration::from_secs(1);
/// The longest one wait for an event, so that a stop signal is noticed.
const POLL: Duration = Duration::from_millis(100);

pub fn run(session: &Session, a: SubArgs) -> CmdResult {
    let name = a
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("/cli/sub/{}", std::process::id()));
    let mut b = session
        .subscribe(&a.pattern)
        .endpoint(&name)
        .local_queue_length(a.local_queue);
    if let Some(n) = a.max_queue {
        b = b.max_queue_length(n);
    }
    if let Some(d) = &a.discard {
        b = b.discard(d.parse::<DiscardPolicy>()?);
    }
    if let Some(n) = &a.scale {
        b = b.qos("scale", n);
    }
    if let Some(d) = &a.min_interval {
        b = b.qos("min_interval", d);
    }
    for kv in &a.qos {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--qos {kv:?}: expected NAME=VALUE, e.g. --qos scale=4"))?;
        b = b.qos(k, v);
    }
    for f in &a.filters {
        b = b.filter(f);
    }
    if let Some(m) = &a.mapping {
        b = b.map(m);
    }
    if let Some(from) = &a.replay_from {
        let from: tagwire::ReplayFrom = from.parse()?;
        let spacing = match a.spacing.as_deref() {
            None | Some("fast") => tagwire::Spacing::Fast,
            Some("original") => tagwire::Spacing::Original,
            Some(other) => {
                return Err(format!("--spacing {other:?}: expected fast or original").into())
            }
        };
        b = b.replay_from(from, spacing);
    }
    if let Some(cfg) = a.playout {
        b = b.playout(cfg);
    }
    let mut resume = match &a.resume_file {
        Some(path) => {
            let r = ResumeFile::open(path.clone())?;
            b = b.resume_from(r.point.clone());
            Some(r)
        }
        None => None,
    };
    let sub = b.receiver()?;
    let stop = stop_on_signal();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut drops = DropReport::default();
    let mut result = print_events(&sub, &a, &stop, &mut out, &mut drops, &mut resume);
    if let Some(r) = &mut resume {
        // What was printed is flushed: the point covers it.
        if out.flush().is_ok() {
            if let Err(e) = r.save() {
                result = result.and(Err(e));
            }
        }
    }
    if let Some(p) = sub.playout_stats() {
        let c = p.counters;
        eprintln!(
            "tagwire: playout: released {}, held {}, late {} (dropped {}), forced {}, re-anchored {}; jitter in {:.1} µs, out {:.1} µs (RFC 3550)",
            c.released,
            p.held,
            c.late,
            c.late_dropped,
            c.forced + c.overflowed,
            c.reanchored,
            p.input_jitter_ns as f64 / 1e3,
            p.output_jitter_ns as f64 / 1e3
        );
    }
    // Report drops however the loop ended (count reached, signal, error).
    let dropped = sub.dropped();
    if dropped > 0 {
        eprintln!(
            "tagwire: dropped {dropped} events in the client (slow consumer; received {}); \
             a larger --local-queue absorbs longer bursts",
            drops.received
        );
        if a.json {
            let summary = serde_json::json!({
                "dropped_in_client": dropped,
                "received": drops.received,
            });
            // Best effort: stdout may be the closed pipe that ended the loop.
            let _ = writeln!(out, "{summary}").and_then(|()| out.flush());
        }
    }
    // Over udp:// loss is counted, never silent: say what the network lost.
    if let Some(c) = session.udp_counters() {
        let r = c.received;
        if r.lost > 0 || r.reordered > 0 || r.bad > 0 {
            eprintln!(
                "tagwire: over udp the daemon's datagrams were lost {} reordered {} duplicate {} bad {} (received {}); the events they carried are gone",
                r.lost, r.reordered, r.duplicate, r.bad, r.received
            );
        }
    }
    result
}

/// Counts events printed and warns on stderr while the client drops.
#[derive(Default)]
struct DropReport {
    received: u64,
    warned: u64,
    last_check: Option<Instant>,
}

impl DropReport {
    /// Warns if drops grew since the last warning, at most every `WARN_EVERY`.
    fn check(&mut self, sub: &Subscriber) {
        let now = Instant::now();
        if self
            .last_check
            .is_some_and(|t| now.duration_since(t) < WARN_EVERY)
        {
            return;
        }
        self.last_check = Some(now);
        let dropped = sub.dropped();
        if dropped > self.warned {
            eprintln!(
                "tagwire: {dropped} events dropped in the client so far ({} since the last warning; slow consumer)",
                dropped - self.warned
            );
            self.warned = dropped;
        }
    }
}

/// Prints events until `--count`, `--timeout`, a stop signal, or an error.
/// Output is buffered and flushed whenever no event is waiting, so a flood
/// is written in large blocks and a trickle appears at once.
fn print_events(
    sub: &Subscriber,
    a: &SubArgs,
    stop: &AtomicBool,
    out: &mut impl Write,
    drops: &mut DropReport,
    resume: &mut Option<ResumeFile>,
) -> CmdResult {
    let timeout = a.timeout.map(Duration::from_secs_f64);
    let mut last_event = Instant::now();
    while a.count.is_none_or(|n| drops.received < n) {
        drops.check(sub);
        let sample = match sub.try_recv()? {
            Some(s) => s,
            None => {
                out.flush()?;
                if let Some(r) = resume {
                    r.flushed()?;
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let mut wait = POLL;
                if let Some(t) = timeout {
                    let left = t.saturating_sub(last_event.elapsed());
                    if left.is_zero() {
                        return Err(format!(
                            "no event on {} within {:.1} s",
                            a.pattern,
                            t.as_secs_f64()
                        )
                        .into());
                    }
                    wait = wait.min(left);
                }
                match sub.recv_timeout(wait)? {
                    Some(s) => s,
                    None => continue,
                }
            }
        };
        last_event = Instant::now();
        if let Some(path) = &a.save {
            let payload = sample.payload();
            std::fs::write(path, &payload[..])
                .map_err(|e| format!("--save {}: {e}", path.display()))?;
            writeln!(
                out,
                "{}: {} bytes saved to {}",
                sample.tag(),
                payload.len(),
                path.display()
            )?;
        } else if a.json {
            writeln!(out, "{}", to_json(&sample))?;
        } else {
            writeln!(
                out,
                "{} {}",
                sample.tag(),
                String::from_utf8_lossy(&sample.payload())
            )?;
        }
        drops.received += 1;
        if let Some(r) = resume {
            if r.note(&sample) {
                // In a flood the queue is never empty: flush, then save.
                out.flush()?;
                r.flushed()?;
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

/// `--resume-file`: the point this subscription stopped at, and when it
/// was last written.
struct ResumeFile {
    path: std::path::PathBuf,
    point: tagwire::ResumePoint,
    /// Events noted since the last write.
    dirty: bool,
    written: Instant,
}

/// At most one write of the resume file this often.
const RESUME_EVERY: Duration = Duration::from_millis(100);

impl ResumeFile {
    /// Reads `path` if it exists (a missing file: start from now).
    fn open(path: std::path::PathBuf) -> Result<ResumeFile, Box<dyn std::error::Error>> {
        let point = match std::fs::read_to_string(&path) {
            Ok(text) => tagwire::ResumePoint::parse(&text)
                .map_err(|e| format!("--resume-file {}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => tagwire::ResumePoint::new(),
            Err(e) => return Err(format!("--resume-file {}: {e}", path.display()).into()),
        };
        Ok(ResumeFile {
            path,
            point,
            dirty: false,
            written: Instant::now(),
        })
    }

    /// Notes a printed event; whether a write is due (the interval passed).
    fn note(&mut self, sample: &tagwire::Sample) -> bool {
        self.point.note(sample);
        self.dirty = true;
        self.written.elapsed() >= RESUME_EVERY
    }

    /// Stdout was flushed: writes the point if due.
    fn flushed(&mut self) -> CmdResult {
        if self.dirty && self.written.elapsed() >= RESUME_EVERY {
            self.save()?;
        }
        Ok(())
    }

    /// Writes the point: a new file, synced, renamed over the old one, so a
    /// reader (or the next start after a kill) sees the old point or the
    /// new one.
    fn save(&mut self) -> CmdResult {
        if !self.dirty {
            return Ok(());
        }
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".new");
        let tmp = std::path::PathBuf::from(tmp);
        // Synced before the rename: after a power loss the file holds the
        // old point or the new one, not an empty file (at most 10 syncs a
        // second).
        std::fs::File::create(&tmp)
            .and_then(|mut f| {
                f.write_all(self.point.encode().as_bytes())?;
                f.sync_data()
            })
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .map_err(|e| format!("--resume-file {}: {e}", self.path.display()))?;
        self.dirty = false;
        self.written = Instant::now();
        Ok(())
    }
}

/// A flag set by SIGINT or SIGTERM, so that `tagwire sub` stopped by Ctrl-C
/// or `kill` still reports its drops; a second signal exits at once (130).
/// If the handler cannot be installed the signals keep their default action.
fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("tagwire-signals".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::debug!("no signal handler: {e}");
                    let _ = ready_tx.send(());
                    return;
                }
            };
            rt.block_on(async {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                ) else {
                    let _ = ready_tx.send(());
                    return;
                };
                let _ = ready_tx.send(());
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                flag.store(true, Ordering::Relaxed);
                // A second signal exits at once, even if printing is stuck
                // on a pipe nobody reads.
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                std::process::exit(130);
            });
        });
    if spawned.is_ok() {
        // Installed before the first event is printed, so a test or script
        // that signals after seeing output is always handled.
        let _ = ready_rx.recv();
    }
    stop
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

/// The JSON form of a received event: every header field it carries (the
/// optional ones only when present; `flags` always, 0 when none), its
/// fields and its payload. The keys are listed in the README.
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
        "flags": ev.flags,
        "fields": fields,
    });
    match std::str::from_utf8(ev.payload) {
        Ok(text) => o["payload"] = text.into(),
        Err(_) => o["payload_hex"] = hex(ev.payload).into(),
    }
    let (timeout_ns, stop_time_ns) = match ev.expiry {
        Expiry::Never => (None, None),
        Expiry::AfterNs(ns) => (Some(ns), None),
        Expiry::AtNs(ns) => (None, Some(ns)),
    };
    for (k, v) in [
        ("virtual_time", ev.virtual_time),
        ("timeout_ns", timeout_ns),
        ("stop_time_ns", stop_time_ns),
        ("start_time_ns", ev.start_time_ns),
    ] {
        if let Some(v) = v {
            o[k] = v.into();
        }
    }
    for (k, v) in [("type_name", ev.type_name), ("event_name", ev.event_name)] {
        if let Some(v) = v {
            o[k] = v.into();
        }
    }
    o
}
