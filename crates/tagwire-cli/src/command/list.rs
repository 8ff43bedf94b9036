//! `tagwire list`: tags, endpoints and subscriptions with queue depth and drops.

use tagwire::Session;

use super::CmdResult;
use crate::cli::ListArgs;

pub fn run(session: &Session, a: ListArgs) -> CmdResult {
    let l = session.list()?;
    if a.links {
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&l.federation)?);
        } else {
            print_links(l.federation.as_ref())?;
        }
        return Ok(());
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&l)?);
        return Ok(());
    }
    outln!(
        "server {} — {} connection(s)",
        l.server,
        l.connections.len()
    );
    if !l.auth.is_empty() {
        outln!("authentication {}", l.auth);
    }
    outln!(
        "memory {} of {} bytes buffered; {} events discarded and {} connections refused at the budget",
        l.memory.buffered_bytes,
        l.memory.max_buffered_bytes,
        l.memory.discarded_events,
        l.memory.refused_connections
    );
    let m = &l.shm;
    if m.regions_created > 0 {
        outln!(
            "shared memory {} region(s) open ({} bytes), {} subscriber row(s) ({} parked); {} deliveries by reference, {} copied out, {} unreadable, {} refused regions",
            m.regions_open,
            m.bytes_open,
            m.rows_open,
            m.rows_parked,
            m.by_reference,
            m.copied_out,
            m.unreadable,
            m.regions_refused
        );
    }
    if !l.lanes.is_empty() {
        outln!("\nLANES");
        outln!(
            "  {:<10} {:<10} {:<10} {:>4} {:<6} {:<20} LISTENERS",
            "BAND",
            "SCHED",
            "RUNNING",
            "DSCP",
            "CPUS",
            "TABLE WAITS"
        );
        for lane in &l.lanes {
            let listeners: Vec<String> = [
                lane.tcp.as_ref().map(|a| format!("tcp://{a}")),
                lane.unix.as_ref().map(|p| format!("unix://{p}")),
                lane.udp.as_ref().map(|a| format!("udp://{a}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let waits: u64 = lane.table_waits_us.iter().sum();
            let waits = if waits == 0 {
                "0".to_owned()
            } else {
                format!("{waits} (max {} µs)", lane.table_wait_max_us)
            };
            outln!(
                "  {:<10} {:<10} {:<10} {:>4} {:<6} {:<20} {}",
                lane.band,
                lane.sched,
                lane.sched_applied,
                lane.dscp,
                if lane.cpus.is_empty() {
                    "any"
                } else {
                    &lane.cpus
                },
                waits,
                listeners.join(" ")
            );
        }
    }
    if l.federation.is_some() {
        print_links(l.federation.as_ref())?;
    }
    if !l.multicast.is_empty() {
        outln!("\nMULTICAST");
        for g in &l.multicast {
            outln!(
                "  {} band {} ttl {}{} tags {} members [{}]",
                g.group,
                g.band,
                g.ttl,
                g.interface
                    .as_ref()
                    .map_or_else(String::new, |i| format!(" on {i}")),
                g.tags.join(","),
                g.members.join(" ")
            );
            outln!(
                "    sent {} too_large {} send_dropped {} | received {} lost {} reordered {} duplicate {} bad {} refused {}",
                g.sent, g.too_large, g.send_dropped, g.received, g.lost, g.reordered, g.duplicate, g.bad, g.refused
            );
        }
    }
    outln!("\nCONNECTIONS");
    outln!(
        "  {:>5} {:<24} {:<22} {:<9} {:<10} PEER",
        "ID",
        "NAME",
        "IDENTITY",
        "BAND",
        "TRANSPORT"
    );
    for c in &l.connections {
        outln!(
            "  {:>5} {:<24} {:<22} {:<9} {:<10} {}",
            c.id,
            c.name,
            c.identity,
            c.band,
            if c.transport.is_empty() {
                "?"
            } else {
                &c.transport
            },
            c.peer
        );
        if let Some(u) = &c.udp {
            // Loss over UDP is counted, never silent: both directions.
            outln!(
                "        udp in: received {} lost {} reordered {} duplicate {} bad {} overrun {}; out: sent {} too_large {} send_dropped {}; client saw: received {} lost {} reordered {} dropped {}",
                u.received,
                u.lost,
                u.reordered,
                u.duplicate,
                u.bad,
                u.overrun,
                u.sent,
                u.too_large,
                u.send_dropped,
                u.peer_received,
                u.peer_lost,
                u.peer_reordered,
                u.peer_dropped
            );
        }
    }
    outln!("\nENDPOINTS");
    outln!("  {:<32} {:<11} {:>5}", "NAME", "KIND", "CONN");
    for e in &l.endpoints {
        outln!("  {:<32} {:<11} {:>5}", e.name, e.kind, e.connection);
    }
    outln!("\nSUBSCRIPTIONS");
    outln!(
        "  {:<32} {:<24} {:>7} {:>7} {:<12} {:>10} {:>8} {:>8}  ROUTE",
        "ENDPOINT",
        "PATTERN",
        "DEPTH",
        "BOUND",
        "DISCARD",
        "DELIVERED",
        "DROPPED",
        "EXPIRED"
    );
    for s in &l.subscriptions {
        outln!(
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
        if let Some(j) = &s.jitter {
            outln!("    jitter (RFC 3550): {}", super::admin::jitter_line(j));
        }
        if let Some(n) = &s.net {
            outln!(
                "    udp: lost {} reordered {} (this channel's events, as the client reported)",
                n.lost,
                n.reordered
            );
        }
        if let Some(t) = &s.time {
            outln!(
                "    time services: held {}, released {}, late {}, jitter in {:.1} µs, out {:.1} µs",
                t.held,
                t.released,
                t.late + t.late_dropped,
                t.input_jitter_ns as f64 / 1e3,
                t.output_jitter_ns as f64 / 1e3
            );
        }
        if let Some(p) = &s.proxy {
            outln!(
                "    proxy={} runs at {}: {} ({} events scaled out here)",
                p.mode,
                p.runs_at,
                p.reason,
                s.scaled_out
            );
        }
    }
    outln!("\nTAGS");
    outln!("  {:<40} {:>10}  LAST PUBLISHER", "TAG", "PUBLISHED");
    for t in &l.tags {
        outln!("  {:<40} {:>10}  {}", t.tag, t.published, t.last_publisher);
    }
    if l.untracked_publishes > 0 {
        outln!(
            "  ({} publishes on tags beyond the tracking limit)",
            l.untracked_publishes
        );
    }
    if l.expired > 0 {
        outln!("\n{} event(s) dropped as expired on arrival", l.expired);
    }
    if l.deferred > 0 {
        outln!("\n{} event(s) waiting for their start time", l.deferred);
    }
    if l.filtered_at_source > 0 {
        outln!(
            "\n{} event(s) dropped by their publisher's filters",
            l.filtered_at_source
        );
    }
    let h = &l.history;
    if h.tags > 0 || h.recorded > 0 {
        outln!(
            "\nhistory: {} tag(s), {} bytes held; {} recorded, {} evicted, {} not recorded (a bound)",
            h.tags,
            h.bytes,
            h.recorded,
            h.evicted,
            h.not_recorded
        );
    }
    if let Some(st) = &l.store {
        outln!(
            "
durable store: {} stored, {} not stored (queue full or a bound), {} evicted, {} commits",
            st.stored,
            st.not_stored,
            st.evicted,
            st.commits
        );
    }
    if let Some(p) = &l.parked {
        outln!(
            "\nparked (acknowledged subscribers away): {} subscription(s), {} events ({} bytes) held now; {} parked, {} resumed, {} events sent again, {} dropped; published while away: {} held, {} dropped at the queue's bound",
            p.subscriptions,
            p.events,
            p.bytes,
            p.parked,
            p.resumed,
            p.resent,
            p.dropped,
            p.held_total,
            p.held_dropped
        );
    }
    Ok(())
}

/// The LINKS section: one line per link to another daemon.
fn print_links(f: Option<&tagwire::router::FederationInfo>) -> CmdResult {
    let Some(f) = f else {
        outln!("no links: this daemon is alone (see `tagwired --join` or `--peer`)");
        return Ok(());
    };
    outln!(
        "\nLINKS — node {}, {} daemon(s) known; {} unwanted and {} hop-limited events dropped, {} adverts refused",
        f.node,
        f.daemons,
        f.unwanted,
        f.hop_limited,
        f.refused_adverts
    );
    outln!(
        "  {:<16} {:<22} {:>5} {:>9} {:>11} {:>10} {:>10} {:>9} {:>9} {:>7} {:>7}",
        "PEER",
        "ADDRESS",
        "UP s",
        "RTT µs",
        "OFFSET µs",
        "EVENTS IN",
        "EVENTS OUT",
        "IN B/s",
        "OUT B/s",
        "QUEUED",
        "DROPPED"
    );
    let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    for l in &f.links {
        outln!(
            "  {:<16} {:<22} {:>5} {:>9} {:>11} {:>10} {:>10} {:>9} {:>9} {:>7} {:>7}",
            l.peer,
            l.addr,
            l.up_secs,
            opt(l.rtt_us.map(|r| r as i64)),
            opt(l.clock_offset_us),
            l.events_in,
            l.events_out,
            l.rate_in_bps,
            l.rate_out_bps,
            l.queue_depth,
            l.dropped
        );
        let bands = if l.bands.is_empty() {
            "none (every band on the first)".to_string()
        } else {
            l.bands.join(", ")
        };
        // 0: a daemon too old to say.
        let version = match l.version {
            0 => "?".to_string(),
            v => v.to_string(),
        };
        outln!("    link version {version}; band connections: {bands}");
    }
    Ok(())
}
