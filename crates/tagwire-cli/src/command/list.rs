//! `tagwire list`: tags, endpoints and subscriptions with queue depth and drops.

use tagwire::Session;

use super::CmdResult;
use crate::cli::ListArgs;

pub fn run(session: &Session, a: ListArgs) -> CmdResult {
    let l = session.list()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&l)?);
        return Ok(());
    }
    println!(
        "server {} — {} connection(s)",
        l.server,
        l.connections.len()
    );
    println!("\nENDPOINTS");
    println!("  {:<32} {:<11} {:>5}", "NAME", "KIND", "CONN");
    for e in &l.endpoints {
        println!("  {:<32} {:<11} {:>5}", e.name, e.kind, e.connection);
    }
    println!("\nSUBSCRIPTIONS");
    println!(
        "  {:<32} {:<24} {:>7} {:>7} {:<12} {:>10} {:>8} {:>8}  ROUTE",
        "ENDPOINT", "PATTERN", "DEPTH", "BOUND", "DISCARD", "DELIVERED", "DROPPED", "EXPIRED"
    );
    for s in &l.subscriptions {
        println!(
            "  {:<32} {:<24} {:>7} {:>7} {:<12} {:>10} {:>8} {:>8}  {}",
            s.endpoint,
            s.pattern,
            s.queue_depth,
            s.queue_bound,
            s.discard,
            s.delivered,
            s.dropped,
            s.expired,
            s.route
        );
    }
    println!("\nTAGS");
    println!("  {:<40} {:>10}  LAST PUBLISHER", "TAG", "PUBLISHED");
    for t in &l.tags {
        println!("  {:<40} {:>10}  {}", t.tag, t.published, t.last_publisher);
    }
    if l.untracked_publishes > 0 {
        println!(
            "  ({} publishes on tags beyond the tracking limit)",
            l.untracked_publishes
        );
    }
    if l.expired > 0 {
        println!("\n{} event(s) dropped as expired on arrival", l.expired);
    }
    if l.deferred > 0 {
        println!("\n{} event(s) waiting for their start time", l.deferred);
    }
    if l.filtered_at_source > 0 {
        println!(
            "\n{} event(s) dropped by their publisher's filters",
            l.filtered_at_source
        );
    }
    Ok(())
}
