//! `tagwire admin filter add|list|remove|op`: content filters at the session
//! (TAO admin) and channel (TAO proxy) levels, through an endpoint's name;
//! `tagwire admin qos` and `show`: QoS at run time (YARP's `prop set`).

use serde_json::json;
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
                Level::Session => "session",
                Level::Channel => "channel",
                Level::Publisher => "publisher",
            };
            let key = if map { "map" } else { "filter" };
            let reply = session.admin(
                &json!({"op": "filter_add", "endpoint": endpoint, "level": level, key: text}),
            )?;
            outln!("filter {} added", reply["id"]);
        }
        FilterCommand::List { json } => {
            let filters = session.filter_list()?;
            if json {
                let all = json!({ "filters": filters });
                outln!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(());
            }
            let reply = json!({ "filters": filters });
            outln!(
                "{:>4}  {:<24} {:<8} {:<7} {:<4} TEXT",
                "ID",
                "ENDPOINT",
                "LEVEL",
                "KIND",
                "OP"
            );
            for f in reply["filters"].as_array().into_iter().flatten() {
                outln!(
                    "{:>4}  {:<24} {:<8} {:<7} {:<4} {}",
                    f["id"],
                    f["endpoint"].as_str().unwrap_or_default(),
                    f["level"].as_str().unwrap_or_default(),
                    f["kind"].as_str().unwrap_or_default(),
                    f["interfilter"].as_str().unwrap_or_default(),
                    f["text"].as_str().unwrap_or_default()
                );
            }
        }
        FilterCommand::Remove { id } => {
            session.admin(&json!({"op": "filter_remove", "id": id}))?;
            outln!("filter {id} removed");
        }
        FilterCommand::Op {
            endpoint,
            interfilter,
        } => {
            session.admin(
                &json!({"op": "filter_op", "endpoint": endpoint, "interfilter": interfilter}),
            )?;
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
    let mut set = serde_json::Map::new();
    let mut unset = Vec::new();
    for item in items {
        if let Some((k, v)) = item.split_once('=') {
            set.insert(k.to_owned(), v.into());
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
    let reply =
        session.admin(&json!({"op": "qos", "target": target, "set": set, "unset": unset}))?;
    outln!(
        "{} {}: {} channel(s) changed{}",
        reply["level"].as_str().unwrap_or_default(),
        target.join(" "),
        reply["channels"],
        match reply["dropped"].as_u64() {
            Some(n) if n > 0 => format!(", {n} queued event(s) dropped by a smaller queue"),
            _ => String::new(),
        }
    );
    Ok(())
}

/// `tagwire admin show TARGET`.
fn show(session: &Session, target: &str, as_json: bool) -> CmdResult {
    let r = session.admin(&json!({"op": "show", "target": target}))?;
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let s = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    if r.get("reservations").is_some() {
        outln!("{}", serde_json::to_string_pretty(&r["reservations"])?);
        return Ok(());
    }
    if let Some(links) = r["links"].as_array() {
        for l in links {
            outln!(
                "link to {} ({}), node {}",
                s(&l["peer"]),
                s(&l["addr"]),
                s(&l["node"])
            );
            for key in [
                "dialed",
                "connection",
                "up_secs",
                "rtt_us",
                "clock_offset_us",
                "events_in",
                "bytes_in",
                "events_out",
                "bytes_out",
                "queue_depth",
                "dropped",
            ] {
                outln!("  {key:<16} {}", s(&l[key]));
            }
        }
        return Ok(());
    }
    if let Some(tag) = r["tag"].as_str() {
        outln!("tag {tag} (tag level)");
        for p in r["set"].as_array().into_iter().flatten() {
            outln!("  {:<24} {}", s(&p["property"]), s(&p["value"]));
        }
        let h = &r["history"];
        if h.is_object() {
            outln!(
                "  history holds {} event(s), {} bytes (history={})",
                h["events"],
                h["bytes"],
                h["history"]
            );
            for p in h["publishers"].as_array().into_iter().flatten() {
                outln!(
                    "    {} sequence numbers {}..={} ({} held)",
                    s(&p["publisher"]),
                    p["oldest"],
                    p["newest"],
                    p["held"]
                );
            }
        }
        return Ok(());
    }
    outln!(
        "{} {} on connection {}: band {}, lane {} (running {}{}), DSCP {}",
        s(&r["kind"]),
        s(&r["endpoint"]),
        r["connection"],
        s(&r["band"]),
        s(&r["lane"]["sched"]),
        s(&r["lane"]["sched_applied"]),
        r["lane"]["fell_back"]
            .as_str()
            .map(|w| format!(": {w}"))
            .unwrap_or_default(),
        r["dscp"]
    );
    for ch in r["channels"].as_array().into_iter().flatten() {
        outln!(
            "  channel {}: queue {}/{}, delivered {}, dropped {}, expired {}, too large {}",
            s(&ch["pattern"]),
            ch["queue_depth"],
            ch["queue_bound"],
            ch["delivered"],
            ch["dropped"],
            ch["expired"],
            ch["too_large"]
        );
        for p in ch["qos"].as_array().into_iter().flatten() {
            outln!(
                "    {:<24} {:<16} ({})",
                s(&p["property"]),
                s(&p["value"]),
                s(&p["from"])
            );
        }
    }
    if r["truncated"] == true {
        outln!("  … more channels than fit one reply");
    }
    Ok(())
}
