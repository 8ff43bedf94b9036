//! Bandwidth reservations on the daemon's egress interface (`reserve=RATE`
//! on a subscription; push-pull §3.2.2's guaranteed bandwidth). Admission
//! and class ids are decided in core ([`tagwire_core::bandwidth`]); this
//! module runs `tc` and marks sockets.
//!
//! Rule: a reservation is per **band** of this daemon's egress: the sum of
//! the reservations of the channels on band B is B's guaranteed rate on
//! `[bandwidth] interface`, and every socket of band B (client and link
//! connections) is put in B's htb class by `SO_PRIORITY` = class id (htb
//! classifies on `skb->priority` directly, no filter). At the first
//! reservation the daemon replaces the interface's root qdisc with
//! `htb default 2`: class `1:1` at `link_rate`, best effort `1:2`, and one
//! class `1:1xx` per reserved band (prio 0, ceil = the link). Needs
//! `CAP_NET_ADMIN`; without it, or without the section, `reserve=` is
//! refused with a message naming what is missing, never ignored.

use std::io::Read;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tagwire_core::bandwidth::{parse_rate, ClassChange, Reservations};

use crate::state::State;

use crate::config::bandwidth::BandwidthConfig;
use crate::state::bandwidth::Bandwidth;

/// How long one `tc` command may take.
const TC_TIMEOUT: Duration = Duration::from_secs(3);

/// Has this process `CAP_NET_ADMIN` (effective)?
fn has_net_admin() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 12) != 0)
}

/// Runs `tc ARGS`, at most [`TC_TIMEOUT`]; its stderr on failure.
fn tc(args: &[String]) -> Result<(), String> {
    let line = format!("tc {}", args.join(" "));
    let mut child = Command::new("tc")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{line}`: {e} (is iproute2 installed?)"))?;
    let deadline = Instant::now() + TC_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`{line}` took over {TC_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("`{line}`: {e}")),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    Err(format!("`{line}` failed ({status}): {}", err.trim()))
}

fn words(s: String) -> Vec<String> {
    s.split(' ').map(str::to_owned).collect()
}

/// The class id a band's sockets carry in `SO_PRIORITY`: `1:minor`.
fn priority_of(minor: u16) -> u32 {
    (1 << 16) | u32::from(minor)
}

fn set_priority(fd: impl AsFd, priority: u32) -> std::io::Result<()> {
    socket2_06::SockRef::from(&fd).set_priority(priority)
}

/// Sets up the htb tree the first time; afterwards, or if it cannot be
/// made, leaves `st.bandwidth` as it is.
fn ensure_live(st: &mut State) {
    if !matches!(st.bandwidth, Bandwidth::Idle) {
        return;
    }
    let cfg = st.config.bandwidth.clone();
    st.bandwidth = match setup(&cfg) {
        Ok((iface, link_bps)) => Bandwidth::Live {
            iface,
            link_bps,
            res: Reservations::new(link_bps, cfg.max_reservations),
            conns: Vec::new(),
        },
        Err(why) => {
            tracing::warn!("bandwidth reservations are off: {why}");
            Bandwidth::Unavailable(why)
        }
    };
}

fn setup(cfg: &BandwidthConfig) -> Result<(String, u64), String> {
    let Some(iface) = cfg.interface.clone() else {
        return Err("this daemon has no [bandwidth] interface configured (the egress interface and its link_rate; see docs/configuration.md)".into());
    };
    let link_bps = parse_rate(&cfg.link_rate).map_err(|e| format!("[bandwidth] link_rate: {e}"))?;
    if !has_net_admin() {
        return Err(format!(
            "the daemon lacks CAP_NET_ADMIN, which it needs to add tc classes on {iface} and set SO_PRIORITY on its sockets: run it as root or `setcap cap_net_admin+ep tagwired`"
        ));
    }
    let best_effort = link_bps.max(8000);
    for line in [
        format!("qdisc replace dev {iface} root handle 1: htb default 2"),
        format!("class replace dev {iface} parent 1: classid 1:1 htb rate {link_bps}bit ceil {link_bps}bit"),
        format!("class replace dev {iface} parent 1:1 classid 1:2 htb rate {best_effort}bit ceil {link_bps}bit prio 1"),
    ] {
        tc(&words(line))?;
    }
    Ok((iface, link_bps))
}

/// Reserves `rate` (a `reserve=` value) on `band` for channel `holder` of
/// connection `conn`: admission, the tc class, the band's sockets. The
/// error is the refusal to send.
pub(crate) fn reserve(
    st: &mut State,
    holder: u64,
    conn: u64,
    band: &str,
    rate: &str,
) -> Result<(), String> {
    let bps = parse_rate(rate).map_err(|e| e.to_string())?;
    ensure_live(st);
    let (change, iface, link_bps) = match &mut st.bandwidth {
        Bandwidth::Idle => return Err("reservations are not set up".into()),
        Bandwidth::Unavailable(why) => return Err(format!("reserve={rate}: {why}")),
        Bandwidth::Live {
            iface,
            link_bps,
            res,
            ..
        } => (
            res.reserve(holder, band, bps).map_err(|e| e.to_string())?,
            iface.clone(),
            *link_bps,
        ),
    };
    if let Err(e) = apply(st, &iface, link_bps, &change) {
        if let Bandwidth::Live { res, .. } = &mut st.bandwidth {
            res.release(holder);
        }
        return Err(format!("reserve={rate}: {e}"));
    }
    if let Bandwidth::Live { conns, .. } = &mut st.bandwidth {
        conns.push((holder, conn));
    }
    Ok(())
}

/// Gives back channel `holder`'s reservation, if any.
pub(crate) fn release(st: &mut State, holder: u64) {
    let Bandwidth::Live {
        iface,
        link_bps,
        res,
        conns,
    } = &mut st.bandwidth
    else {
        return;
    };
    conns.retain(|(h, _)| *h != holder);
    let Some(change) = res.release(holder) else {
        return;
    };
    let (iface, link_bps) = (iface.clone(), *link_bps);
    if let Err(e) = apply(st, &iface, link_bps, &change) {
        tracing::warn!("releasing a reservation: {e}");
    }
}

/// Gives back every reservation of connection `conn` (it closed).
pub(crate) fn release_connection(st: &mut State, conn: u64) {
    let holders: Vec<u64> = match &st.bandwidth {
        Bandwidth::Live { conns, .. } => conns
            .iter()
            .filter(|(_, c)| *c == conn)
            .map(|(h, _)| *h)
            .collect(),
        _ => return,
    };
    for h in holders {
        release(st, h);
    }
}

/// The class a socket of `band` belongs in now (`None`: no reservation).
pub(crate) fn priority_for_band(st: &State, band: &str) -> Option<u32> {
    match &st.bandwidth {
        Bandwidth::Live { res, .. } => res.bands().get(band).map(|b| priority_of(b.minor)),
        _ => None,
    }
}

/// Puts connection `conn`'s socket in its band's class, if the band has a
/// reservation (a new connection, or after its DSCP changed: setting
/// IP_TOS resets the socket's priority).
pub(crate) fn mark_connection(st: &State, conn: u64) {
    let Some(c) = st.connections.get(&conn) else {
        return;
    };
    let (Some(fd), Some(p)) = (&c.socket, priority_for_band(st, &c.band)) else {
        return;
    };
    if let Err(e) = set_priority(fd, p) {
        tracing::warn!(
            conn,
            "cannot put the socket in its band's reserved class: {e}"
        );
    }
}

fn apply(st: &State, iface: &str, link_bps: u64, change: &ClassChange) -> Result<(), String> {
    let (band, priority) = match change {
        ClassChange::Create {
            band,
            minor,
            rate_bps,
        } => {
            tc(&words(format!(
                "class add dev {iface} parent 1:1 classid 1:{minor:x} htb rate {rate_bps}bit ceil {link_bps}bit prio 0"
            )))?;
            (band, priority_of(*minor))
        }
        ClassChange::Change {
            band,
            minor,
            rate_bps,
        } => {
            tc(&words(format!(
                "class change dev {iface} parent 1:1 classid 1:{minor:x} htb rate {rate_bps}bit ceil {link_bps}bit prio 0"
            )))?;
            (band, priority_of(*minor))
        }
        ClassChange::Remove { band, minor } => {
            mark_band(st, band, 0);
            tc(&words(format!("class del dev {iface} classid 1:{minor:x}")))?;
            return best_effort(st, iface, link_bps);
        }
    };
    mark_band(st, band, priority);
    best_effort(st, iface, link_bps)
}

/// Gives the best-effort class what the reservations leave (at least
/// 8 kbit/s), so that the classes' guaranteed rates add up to the link.
fn best_effort(st: &State, iface: &str, link_bps: u64) -> Result<(), String> {
    let reserved = match &st.bandwidth {
        Bandwidth::Live { res, .. } => res.reserved_bps(),
        _ => 0,
    };
    let rest = link_bps.saturating_sub(reserved).max(8000);
    tc(&words(format!(
        "class change dev {iface} parent 1:1 classid 1:2 htb rate {rest}bit ceil {link_bps}bit prio 1"
    )))
}

/// Sets `SO_PRIORITY` on every socket of `band`.
fn mark_band(st: &State, band: &str, priority: u32) {
    for (id, c) in &st.connections {
        if &*c.band != band {
            continue;
        }
        if let Some(fd) = &c.socket {
            if let Err(e) = set_priority(fd, priority) {
                tracing::warn!(conn = id, "cannot set SO_PRIORITY {priority:#x}: {e}");
            }
        }
    }
}

/// What `tagwire admin show reservations` prints.
pub(crate) fn info(st: &State) -> tagwire_proto::admin::Reservations {
    use tagwire_proto::admin::{Reservations, ReservedBand};
    match &st.bandwidth {
        Bandwidth::Idle => Reservations::NoneYet {
            interface: st.config.bandwidth.interface.clone(),
            link_rate: st.config.bandwidth.link_rate.clone(),
        },
        Bandwidth::Unavailable(why) => Reservations::Unavailable { why: why.clone() },
        Bandwidth::Live {
            iface,
            link_bps,
            res,
            ..
        } => Reservations::Live {
            interface: iface.clone(),
            link_bps: *link_bps,
            reserved_bps: res.reserved_bps(),
            bands: res
                .bands()
                .iter()
                .map(|(band, b)| ReservedBand {
                    band: band.to_string(),
                    class: format!("1:{:x}", b.minor),
                    rate_bps: b.rate_bps,
                    channels: b.holders.len(),
                })
                .collect(),
        },
    }
}
