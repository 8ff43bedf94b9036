//! Zenoh's multicast transport: peer sessions that meet on a UDP multicast
//! group, one role per process (for `bench/udp-compare.sh --lan`, where each
//! role runs in a namespace host of its own).
//!
//! Every session is a peer whose only listener is the group locator
//! (`udp/224.x.y.z:PORT#iface=eth0`): Zenoh then opens a multicast transport
//! on it (`TransportManager::add_listener` → `open_transport_multicast`).
//! Multicast scouting and gossip are off and nothing is in `connect`, so no
//! unicast session can form between the peers: every byte of data goes to
//! the group. Zenoh's multicast transport is best effort (no
//! retransmission) and takes a peer's data only after its JOIN (sent when
//! the transport opens, then every `transport/multicast/join_interval`,
//! 2.5 s by default), so:
//!
//! - `sub` counts what arrives, per second from its first sample, and ends
//!   after a second with nothing ([`sub`]); `pub` sends back to back for the
//!   run's duration and reports what it sent ([`publish`]).
//! - `ping` numbers its pings, resends a ping unanswered for [`RESEND`] with
//!   the next number (counted `lost`), ignores late pongs, and starts its
//!   clock at the first pong, so the wait for the pong's JOIN is not timed;
//!   the first second after that is warm-up ([`ping`]). `pong` echoes
//!   ([`pong`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;
use zenoh::qos::CongestionControl;
use zenoh::{Session, Wait};

use crate::measure::{RttRecorder, MAX_DURATION_S, MAX_SIZE, PAYLOAD_BYTE};
use crate::BenchError;

const STREAM_KEY: &str = "bench/mcast/stream";
const PING_KEY: &str = "bench/mcast/ping";
const PONG_KEY: &str = "bench/mcast/pong";
/// The system name in the JSON lines.
const SYSTEM: &str = "zenoh-mcast";
/// A ping unanswered for this long is taken as lost and the next one sent.
pub const RESEND: Duration = Duration::from_millis(200);
/// Round trips in the first second after the first pong are not recorded.
pub const WARMUP: Duration = Duration::from_secs(1);
/// How long the publisher waits after opening its session before it sends,
/// so its JOIN has reached the group's receivers.
const SETTLE: Duration = Duration::from_millis(500);
/// A subscriber or echo that got nothing for this long (after a first
/// message) is done.
const IDLE_END: Duration = Duration::from_secs(1);

/// A checked multicast group locator.
#[derive(Debug, Clone)]
pub struct Group(String);

impl Group {
    /// Checks that `locator` is `udp/<multicast address>:<port>[#…]`: any
    /// other address would give Zenoh a unicast listener and the run would
    /// measure something else.
    pub fn parse(locator: &str) -> Result<Self, BenchError> {
        let bad = |reason| BenchError::InvalidArgument {
            name: "group",
            value: locator.to_owned(),
            reason,
        };
        let rest = locator
            .strip_prefix("udp/")
            .ok_or_else(|| bad("must start with udp/ (a UDP multicast locator)"))?;
        let addr = rest.split(['#', '?']).next().unwrap_or(rest);
        let addr: SocketAddr = addr
            .parse()
            .map_err(|_| bad("the address is not IP:PORT (e.g. udp/224.0.5.1:7450#iface=eth0)"))?;
        if !addr.ip().is_multicast() {
            return Err(bad(
                "not a multicast address (IPv4 224.0.0.0/4 or IPv6 ff00::/8)",
            ));
        }
        if addr.port() == 0 {
            return Err(bad("port 0: every peer must use the same, fixed port"));
        }
        Ok(Group(locator.to_owned()))
    }

    /// The locator as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The parameters of one role.
#[derive(Debug, Clone, Copy)]
pub struct RoleParams {
    /// Payload bytes (pub, ping).
    pub size: usize,
    /// How long pub sends, or ping measures (warm-up included).
    pub duration: Duration,
    /// How long a receiver (sub, pong) or the pinger waits for its first
    /// message before it gives up.
    pub wait: Duration,
}

impl RoleParams {
    /// Checks the command-line values.
    pub fn new(size: usize, duration_s: f64, wait_s: f64) -> Result<Self, BenchError> {
        if !(8..=MAX_SIZE).contains(&size) {
            return Err(BenchError::InvalidArgument {
                name: "size",
                value: size.to_string(),
                reason: "must be 8 bytes (the ping's sequence number) to 16 MiB",
            });
        }
        for (name, v) in [("duration", duration_s), ("wait", wait_s)] {
            if !(v > 0.0 && v <= MAX_DURATION_S) {
                return Err(BenchError::InvalidArgument {
                    name,
                    value: v.to_string(),
                    reason: "must be more than 0 and at most 600 seconds",
                });
            }
        }
        Ok(RoleParams {
            size,
            duration: Duration::from_secs_f64(duration_s),
            wait: Duration::from_secs_f64(wait_s),
        })
    }
}

/// A peer session whose one listener is the group.
fn open(group: &Group) -> Result<Session, BenchError> {
    let mut c = zenoh::Config::default();
    let settings = [
        ("mode", "\"peer\"".to_owned()),
        ("listen/endpoints", format!("[{:?}]", group.as_str())),
        ("connect/endpoints", "[]".to_owned()),
        ("scouting/multicast/enabled", "false".to_owned()),
        ("scouting/gossip/enabled", "false".to_owned()),
    ];
    for (k, v) in settings {
        c.insert_json5(k, &v)
            .map_err(BenchError::zenoh("configuring a multicast peer session"))?;
    }
    zenoh::open(c)
        .wait()
        .map_err(BenchError::zenoh("opening a multicast peer session"))
}

/// Sends back to back on the group for the run's duration; returns
/// `{"sent": N, ...}`.
pub fn publish(group: &Group, p: RoleParams) -> Result<serde_json::Value, BenchError> {
    let session = open(group)?;
    let publisher = session
        .declare_publisher(STREAM_KEY)
        .congestion_control(CongestionControl::Block)
        .wait()
        .map_err(BenchError::zenoh("declaring the publisher"))?;
    std::thread::sleep(SETTLE);
    let payload = zenoh::bytes::ZBytes::from(vec![PAYLOAD_BYTE; p.size]);
    let start = Instant::now();
    let sent = crate::zenoh_client::flood(&publisher, &payload, p.duration)?;
    let secs = start.elapsed().as_secs_f64();
    drop(publisher);
    let _ = session.close().wait();
    Ok(json!({
        "system": SYSTEM,
        "role": "pub",
        "size": p.size,
        "group": group.as_str(),
        "sent": sent,
        "seconds": secs,
        "sent_per_sec": sent as f64 / secs,
    }))
}

/// The median of the non-zero per-second counts (0 when there are none).
pub fn median_rate(per_second: &[u64]) -> f64 {
    let mut r: Vec<u64> = per_second.iter().copied().filter(|&n| n > 0).collect();
    if r.is_empty() {
        return 0.0;
    }
    r.sort_unstable();
    let m = r.len() / 2;
    if r.len() % 2 == 1 {
        r[m] as f64
    } else {
        (r[m - 1] + r[m]) as f64 / 2.0
    }
}

/// Counts the group's stream: per second from the first sample until a
/// second with nothing (or the wait for a first sample runs out); returns
/// `{"received": N, "per_second": [...], "msgs_per_sec": median}`.
pub fn sub(group: &Group, p: RoleParams) -> Result<serde_json::Value, BenchError> {
    let session = open(group)?;
    let count = Arc::new(AtomicU64::new(0));
    let subscriber = {
        let count = Arc::clone(&count);
        session
            .declare_subscriber(STREAM_KEY)
            .callback(move |_sample| {
                count.fetch_add(1, Ordering::Relaxed);
            })
            .wait()
            .map_err(BenchError::zenoh("declaring the subscriber"))?
    };
    let opened = Instant::now();
    while count.load(Ordering::Relaxed) == 0 && opened.elapsed() < p.wait {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut per_second = Vec::new();
    let bound = Duration::from_secs_f64(MAX_DURATION_S);
    if count.load(Ordering::Relaxed) > 0 {
        let first = Instant::now();
        let mut seen = count.load(Ordering::Relaxed);
        for k in 1.. {
            let tick = first + IDLE_END * k;
            std::thread::sleep(tick.saturating_duration_since(Instant::now()));
            let now = count.load(Ordering::Relaxed);
            if now == seen || first.elapsed() > bound {
                break;
            }
            per_second.push(now - seen);
            seen = now;
        }
    }
    drop(subscriber);
    let _ = session.close().wait();
    Ok(json!({
        "system": SYSTEM,
        "role": "sub",
        "group": group.as_str(),
        "received": count.load(Ordering::Relaxed),
        "per_second": per_second,
        "msgs_per_sec": median_rate(&per_second),
    }))
}

/// Echoes every ping back to the group until pings stop for a second
/// (or none came within the wait).
pub fn pong(group: &Group, p: RoleParams) -> Result<serde_json::Value, BenchError> {
    let session = open(group)?;
    let pong_pub = session
        .declare_publisher(PONG_KEY)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .wait()
        .map_err(BenchError::zenoh("declaring the echo publisher"))?;
    let echoed = Arc::new(AtomicU64::new(0));
    let echo_sub = {
        let echoed = Arc::clone(&echoed);
        session
            .declare_subscriber(PING_KEY)
            .callback(move |sample| {
                let _ = pong_pub.put(sample.payload().clone()).wait();
                echoed.fetch_add(1, Ordering::Relaxed);
            })
            .wait()
            .map_err(BenchError::zenoh("declaring the echo subscriber"))?
    };
    let opened = Instant::now();
    while echoed.load(Ordering::Relaxed) == 0 && opened.elapsed() < p.wait {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut seen = echoed.load(Ordering::Relaxed);
    if seen > 0 {
        let bound = Instant::now() + Duration::from_secs_f64(MAX_DURATION_S);
        loop {
            std::thread::sleep(IDLE_END);
            let now = echoed.load(Ordering::Relaxed);
            if now == seen || Instant::now() > bound {
                break;
            }
            seen = now;
        }
    }
    drop(echo_sub);
    let _ = session.close().wait();
    Ok(json!({
        "system": SYSTEM,
        "role": "pong",
        "group": group.as_str(),
        "echoed": echoed.load(Ordering::Relaxed),
    }))
}

/// The pinger's state, shared with its pong callback.
struct PingState {
    rtt: RttRecorder,
    /// The number of the ping in flight.
    seq: u64,
    sent_at: Instant,
    /// When the first pong came (the clock starts there).
    first_pong: Option<Instant>,
    /// Pings resent after [`RESEND`] once round trips were flowing.
    lost: u64,
    /// Set when the run is over: the callback sends no more pings.
    stop: bool,
}

fn lock(state: &Mutex<PingState>) -> MutexGuard<'_, PingState> {
    // The callback cannot leave the state half-written (plain stores), so a
    // poisoned lock is still usable.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The ping's payload: its number, then the payload byte up to `size`.
fn ping_payload(seq: u64, size: usize) -> zenoh::bytes::ZBytes {
    let mut v = vec![PAYLOAD_BYTE; size];
    v[..8].copy_from_slice(&seq.to_le_bytes());
    zenoh::bytes::ZBytes::from(v)
}

/// The number in a pong's payload (None when it is too short).
fn pong_seq(payload: &zenoh::bytes::ZBytes) -> Option<u64> {
    let bytes = payload.to_bytes();
    let head: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(head))
}

/// One ping in flight through the group and the echo; returns the RTT
/// report (`rtt_p50_us`, `rtt_p99_us`, `samples`, `lost`).
pub fn ping(group: &Group, p: RoleParams) -> Result<serde_json::Value, BenchError> {
    let session = open(group)?;
    let ping_pub = Arc::new(
        session
            .declare_publisher(PING_KEY)
            .congestion_control(CongestionControl::Block)
            .express(true)
            .wait()
            .map_err(BenchError::zenoh("declaring the ping publisher"))?,
    );
    let size = p.size;
    let state = Arc::new(Mutex::new(PingState {
        rtt: RttRecorder::with_warmup(0),
        seq: 0,
        sent_at: Instant::now(),
        first_pong: None,
        lost: 0,
        stop: false,
    }));
    let pong_sub = {
        let (state, ping_pub) = (Arc::clone(&state), Arc::clone(&ping_pub));
        session
            .declare_subscriber(PONG_KEY)
            .callback(move |sample| {
                let now = Instant::now();
                let mut s = lock(&state);
                if pong_seq(sample.payload()) != Some(s.seq) {
                    return; // a late answer to a ping already given up
                }
                let first = *s.first_pong.get_or_insert(now);
                if now.saturating_duration_since(first) >= WARMUP {
                    let rtt = now.saturating_duration_since(s.sent_at);
                    s.rtt.record(rtt);
                }
                if s.stop {
                    return;
                }
                s.seq += 1;
                let seq = s.seq;
                s.sent_at = Instant::now();
                drop(s);
                let _ = ping_pub.put(ping_payload(seq, size)).wait();
            })
            .wait()
            .map_err(BenchError::zenoh("declaring the pong subscriber"))?
    };
    let opened = Instant::now();
    lock(&state).sent_at = Instant::now();
    ping_pub
        .put(ping_payload(0, size))
        .wait()
        .map_err(BenchError::zenoh("sending the first ping"))?;
    let mut result = Ok(());
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let mut s = lock(&state);
        match s.first_pong {
            Some(first) if first.elapsed() >= p.duration => break,
            None if opened.elapsed() >= p.wait => {
                result = Err(BenchError::ReplyTimeout {
                    system: SYSTEM,
                    timeout_ms: p.wait.as_millis() as u64,
                    round_trips: 0,
                });
                break;
            }
            _ => {}
        }
        if s.sent_at.elapsed() >= RESEND {
            if s.first_pong.is_some() {
                s.lost += 1;
            }
            s.seq += 1;
            let seq = s.seq;
            s.sent_at = Instant::now();
            drop(s);
            ping_pub
                .put(ping_payload(seq, size))
                .wait()
                .map_err(BenchError::zenoh("resending a ping"))?;
        }
    }
    lock(&state).stop = true;
    std::thread::sleep(Duration::from_millis(50));
    drop(pong_sub);
    let _ = session.close().wait();
    result?;
    let s = lock(&state);
    Ok(json!({
        "system": SYSTEM,
        "role": "ping",
        "mode": "latency",
        "size": size,
        "group": group.as_str(),
        "rtt_p50_us": s.rtt.quantile_us(0.50),
        "rtt_p99_us": s.rtt.quantile_us(0.99),
        "samples": s.rtt.samples(),
        "lost": s.lost,
        "warmup_s": WARMUP.as_secs_f64(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_must_be_a_udp_multicast_locator() {
        assert!(Group::parse("udp/224.0.5.1:7450#iface=eth0").is_ok());
        assert!(Group::parse("udp/[ff02::1:5]:7450").is_ok());
        for (bad, why) in [
            ("udp/10.0.0.1:7450", "not a multicast"),
            ("tcp/224.0.5.1:7450", "must start with udp/"),
            ("udp/224.0.5.1", "not IP:PORT"),
            ("udp/224.0.5.1:0", "port 0"),
        ] {
            let e = Group::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--group") && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn median_rate_ignores_empty_seconds() {
        assert_eq!(median_rate(&[]), 0.0);
        assert_eq!(median_rate(&[0, 0]), 0.0);
        assert_eq!(median_rate(&[5, 0, 1, 9]), 5.0);
        assert_eq!(median_rate(&[4, 2, 0]), 3.0);
    }

    #[test]
    fn ping_numbers_round_trip_through_the_payload() {
        let z = ping_payload(0x0102_0304_0506_0708, 64);
        assert_eq!(z.len(), 64);
        assert_eq!(pong_seq(&z), Some(0x0102_0304_0506_0708));
        assert_eq!(pong_seq(&zenoh::bytes::ZBytes::from(vec![1u8; 7])), None);
    }

    #[test]
    fn role_params_refuse_a_size_without_room_for_the_number() {
        let e = RoleParams::new(7, 3.0, 10.0).unwrap_err().to_string();
        assert!(e.contains("--size 7"), "{e}");
        let e = RoleParams::new(64, 0.0, 10.0).unwrap_err().to_string();
        assert!(e.contains("--duration"), "{e}");
    }
}
