//! `tagwire time`: the daemon's network time, its offset and error bound.

use tagwire::Session;

use super::CmdResult;
use crate::cli::TimeArgs;

pub fn run(session: &Session, a: TimeArgs) -> CmdResult {
    let t = session.network_time()?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&t)?);
        return Ok(());
    }
    outln!("network time {} ns", t.network_time_ns);
    outln!(
        "offset {:+.3} ms ± {:.3} ms to reference {} ({}){}",
        t.offset_ns as f64 / 1e6,
        t.error_ns as f64 / 1e6,
        t.reference,
        t.reference_node,
        if t.synced { "" } else { " — not synced yet" }
    );
    Ok(())
}
