//! `tagwire admin filter add|list|remove|op`: content filters at the session
//! (TAO admin) and channel (TAO proxy) levels, through an endpoint's name;
//! `tagwire admin qos` and `show`: QoS at run time (YARP's `prop set`).

use tagwire::admin::{AdminRequest, FilterLevel, FilterPage, Reservations, Show};
use tagwire::Session;

use super::CmdResult;
use crate::cli::{AdminArgs, AdminCommand, FilterCommand, Level};

pub fn run(session: &Session, a: AdminArgs) -> CmdResult {
    let cmd = match a.command {
        AdminCommand::Filter(cmd) => cmd,
        AdminCommand::Qos { items } => return qos(session, items),
        AdminCommand::Show { target, peer, json } => {
            let target = match (target.as_str(), peer) {
                ("link", Some(p)) => format!("link:{p}"),
                ("link", None) => "links".to_owned(),
                (_, Some(extra)) => {
                    return Err(format!(
                    "unexpected {extra:?} after {target}: only `show link PEER` takes two words"
                )
                    .into())
                }
                (_, None) => target,
            };
            return show(session, &target, json);
        }
    };
    match cmd {
        FilterCommand::Add {
            endpoint,
            level,
            map,
            text,
        } => {
            let level = match level {
                Level::Session => FilterLevel::Session,
                Level::Channel => FilterLevel::Channel,
                Level::Publisher => FilterLevel::Publisher,
            };
            // The level as given even for a map, so that the daemon names a
            // map at the session or publisher level as the error it is.
            let (filter, map) = if map {
                (None, Some(text))
            } else {
                (Some(text), None)
            };
            let reply = session.admin(AdminRequest::FilterAdd {
                endpoint,
                level,
                filter,
                map,
            })?;
            match reply {
                tagwire::AdminReply::FilterAdded(a) => outln!("filter {} added", a.id),
                other => return Err(format!("unexpected reply {}", other.to_json()).into()),
            }
        }
        FilterCommand::List { json } => {
            let filters = session.filter_list()?;
            if json {
                let all = FilterPage {
                    filters,
                    next: None,
                };
                outln!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(());
            }
            outln!(
                "{:>4}  {:<24} {:<8} {:<7} {:<4} TEXT",
                "ID",
                "ENDPOINT",
                "LEVEL",
                "KIND",
                "OP"
            );
            for f in &filters {
                let level = match f.level {
                    FilterLevel::Session => "session",
                    FilterLevel::Channel => "channel",
                    FilterLevel::Publisher => "publisher",
                };
                outln!(
                    "{:>4}  {:<24} {:<8} {:<7} {:<4} {}",
                    f.id,
                    f.endpoint,
                    level,
                    f.kind,
                    f.interfilter,
                    f.text
                );
            }
        }
        FilterCommand::Remove { id } => {
            session.filter_remove(id)?;
            outln!("filter {id} removed");
        }
        FilterCommand::Op {
            endpoint,
            interfilter,
        } => {
            session.filter_op(&endpoint, &interfilter)?;
            outln!(
                "{endpoint}: levels combine with {}",
                interfilter.to_uppercase()
            );
        }
    }
    Ok(())
}

/// `tagwire admin qos TARGET [TARGET] NAME=VALUE… -NAME…`.
fn qos(session: &Session, items: Vec<String>) -> CmdResult {
    let mut target = Vec::new();
    let mut set = std::collections::BTreeMap::new();
    let mut unset = Vec::new();
    for item in items {
        if let Some((k, v)) = item.split_once('=') {
            set.insert(k.to_owned(), v.to_owned());
        } else if let Some(k) = item.strip_prefix('-') {
            unset.push(k.to_owned());
        } else if set.is_empty() && unset.is_empty() {
            target.push(item);
        } else {
            return Err(
                format!("{item:?}: expected PROPERTY=VALUE or -PROPERTY after the target").into(),
            );
        }
    }
    let reply = session.admin(AdminRequest::Qos {
        target: target.clone(),
        set,
        unset,
    })?;
    let tagwire::AdminReply::Qos(reply) = reply else {
        return Err(format!("unexpected reply {}", reply.to_json()).into());
    };
    outln!(
        "{} {}: {} channel(s) changed{}",
        reply.level,
        target.join(" "),
        reply.channels,
        match reply.dropped {
            n if n > 0 => format!(", {n} queued event(s) dropped by a smaller queue"),
            _ => String::new(),
        }
    );
    Ok(())
}

/// `tagwire admin show TARGET`.
fn show(session: &Session, target: &str, as_json: bool) -> CmdResult {
    let shown = session.show(target)?;
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
    match shown {
        Show::Reservations { reservations } => show_reservations(&reservations)?,
        Show::Links { links } => {
            for l in links {
                outln!("link to {} ({}), node {}", l.peer, l.addr, l.node);
                let rows = [
                    ("dialed", l.dialed.to_string()),
                    ("connection", l.connection.to_string()),
                    ("up_secs", l.up_secs.to_string()),
                    ("rtt_us", opt(l.rtt_us.map(|v| v.to_string()))),
                    (
                        "clock_offset_us",
                        opt(l.clock_offset_us.map(|v| v.to_string())),
                    ),
                    ("events_in", l.events_in.to_string()),
                    ("bytes_in", l.bytes_in.to_string()),
                    ("events_out", l.events_out.to_string()),
                    ("bytes_out", l.bytes_out.to_string()),
                    ("queue_depth", l.queue_depth.to_string()),
                    ("dropped", l.dropped.to_string()),
                ];
                for (key, value) in rows {
                    outln!("  {key:<16} {value}");
                }
            }
        }
        Show::Tag(t) => {
            outln!("tag {} (tag level)", t.tag);
            for p in &t.set {
                outln!("  {:<24} {}", p.property, p.value);
            }
            if let Some(h) = &t.history {
                outln!(
                    "  history holds {} event(s), {} bytes (history={})",
                    h.events,
                    h.bytes,
                    h.history
                );
                for p in &h.publishers {
                    outln!(
                        "    {} sequence numbers {}..={} ({} held)",
                        p.publisher,
                        p.oldest,
                        p.newest,
                        p.held
                    );
                }
            }
        }
        Show::Endpoint(e) => {
            let (sched, applied, fell_back) = match &e.lane {
                Some(l) => (
                    l.sched.clone(),
                    l.sched_applied.clone(),
                    l.fell_back
                        .as_deref()
                        .map(|w| format!(": {w}"))
                        .unwrap_or_default(),
                ),
                None => ("null".to_owned(), "null".to_owned(), String::new()),
            };
            outln!(
                "{} {} on connection {}: band {}, lane {} (running {}{}), DSCP {}",
                e.kind,
                e.endpoint,
                e.connection,
                e.band,
                sched,
                applied,
                fell_back,
                opt(e.dscp.map(|d| d.to_string()))
            );
            for ch in &e.channels {
                outln!(
                    "  channel {}: queue {}/{}, delivered {}, dropped {}, expired {}, too large {}",
                    ch.pattern,
                    ch.queue_depth,
                    ch.queue_bound,
                    ch.delivered,
                    ch.dropped,
                    ch.expired,
                    ch.too_large
                );
                if let Some(j) = &ch.jitter {
                    outln!("    jitter (RFC 3550): {}", jitter_line(j));
                }
                if let Some(n) = &ch.net {
                    outln!(
                        "    udp: lost {} reordered {} (this channel's events, as the client reported)",
                        n.lost,
                        n.reordered
                    );
                }
                if let Some(t) = &ch.time {
                    outln!(
                        "    time services: held {}, released {}, late {} (dropped {}), forced {}, re-anchored {}, refused {}; jitter in {:.1} µs, out {:.1} µs (RFC 3550)",
                        t.held,
                        t.released,
                        t.late,
                        t.late_dropped,
                        t.forced,
                        t.reanchored,
                        t.refused,
                        t.input_jitter_ns as f64 / 1e3,
                        t.output_jitter_ns as f64 / 1e3
                    );
                }
                for p in &ch.qos {
                    outln!("    {:<24} {:<16} ({})", p.property, p.value, p.from);
                }
            }
            if e.truncated {
                outln!("  … more channels than fit one reply");
            }
        }
        other => outln!("{}", serde_json::to_string_pretty(&other)?),
    }
    Ok(())
}

/// `tagwire admin show reservations`: the reservations as JSON.
fn show_reservations(r: &Reservations) -> CmdResult {
    outln!("{}", serde_json::to_string_pretty(r)?);
    Ok(())
}

/// A channel's input and output jitter, in µs (`-` for a side not seen yet).
pub(crate) fn jitter_line(j: &tagwire::admin::JitterInfo) -> String {
    let us = |ns: Option<u64>| ns.map_or("-".to_owned(), |n| format!("{:.1} µs", n as f64 / 1e3));
    format!("in {}, out {}", us(j.input_ns), us(j.output_ns))
}
