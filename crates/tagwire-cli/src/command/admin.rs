//! `tagwire admin filter add|list|remove|op`: content filters at the session
//! (TAO admin) and channel (TAO proxy) levels, through an endpoint's name.

use serde_json::json;
use tagwire::Session;

use super::CmdResult;
use crate::cli::{AdminArgs, AdminCommand, FilterCommand, Level};

pub fn run(session: &Session, a: AdminArgs) -> CmdResult {
    let AdminCommand::Filter(cmd) = a.command;
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
