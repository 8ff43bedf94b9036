//! Zenoh baseline: client → router → client, or peer → peer (no router).
//!
//! In peer mode ([`Meet::Peers`]) each receiving session (a subscriber,
//! the echo) listens on its own loopback port and the sending session (the
//! publisher, the pinger) connects to all of them: events go straight from
//! peer to peer, as in a Zenoh deployment without routers.
//!
//! `baseline zenoh-router` is a zenohd-equivalent router (the `zenoh` crate
//! opened in router mode, its default configuration apart from listening on
//! loopback only, with multicast scouting off). Publishers, subscribers,
//! pinger and echo each open their own client-mode session to it. Throughput
//! publishers use `CongestionControl::Block` (nothing is dropped, as in
//! Zenoh's own `z_pub_thr`) with batching on; latency publishers are
//! `express` (no batching), as in Zenoh's `z_ping`/`z_pong`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zenoh::qos::CongestionControl;
use zenoh::{Session, Wait};

use crate::measure::{self, Mode, RttRecorder, RunParams, SubCounter, REPLY_TIMEOUT};
use crate::BenchError;

/// Where the sessions meet.
#[derive(Debug, Clone)]
pub enum Meet {
    /// Client sessions of the router at this endpoint.
    Router(String),
    /// Peer sessions: receiver `i` listens on `tcp/127.0.0.1:base_port+i`.
    Peers {
        /// The first receiver's port.
        base_port: u16,
    },
}

impl Meet {
    fn name(&self) -> &'static str {
        match self {
            Meet::Router(_) => "zenoh",
            Meet::Peers { .. } => "zenoh-peer",
        }
    }

    fn endpoint(base_port: u16, i: usize) -> String {
        format!("tcp/127.0.0.1:{}", usize::from(base_port) + i)
    }

    /// The session of receiver `i` (a subscriber, the echo).
    fn receiver(&self, i: usize) -> Result<Session, BenchError> {
        match self {
            Meet::Router(r) => open_client(r),
            Meet::Peers { base_port } => {
                let cfg = config("peer", "listen/endpoints", &[Self::endpoint(*base_port, i)])?;
                zenoh::open(cfg)
                    .wait()
                    .map_err(BenchError::zenoh("opening a listening peer session"))
            }
        }
    }

    /// The sending session, reaching receivers `0..receivers`.
    fn sender(&self, receivers: usize) -> Result<Session, BenchError> {
        match self {
            Meet::Router(r) => open_client(r),
            Meet::Peers { base_port } => {
                let eps: Vec<String> = (0..receivers)
                    .map(|i| Self::endpoint(*base_port, i))
                    .collect();
                let cfg = config("peer", "connect/endpoints", &eps)?;
                zenoh::open(cfg)
                    .wait()
                    .map_err(BenchError::zenoh("opening a connecting peer session"))
            }
        }
    }
}
const STREAM_KEY: &str = "bench/stream";
const PING_KEY: &str = "bench/ping";
const PONG_KEY: &str = "bench/pong";
/// How long a publisher waits for the router to report a matching
/// subscriber before it starts anyway.
const MATCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Extra settling after the first match, so every subscriber's declaration
/// has reached the router (declarations are not acknowledged).
const SETTLE: Duration = Duration::from_millis(300);

fn config(
    mode: &str,
    endpoints_key: &str,
    endpoints: &[String],
) -> Result<zenoh::Config, BenchError> {
    let mut c = zenoh::Config::default();
    let set = |c: &mut zenoh::Config, k: &str, v: String| {
        c.insert_json5(k, &v)
            .map_err(BenchError::zenoh("configuring a session"))
    };
    set(&mut c, "mode", format!("{mode:?}"))?;
    let list: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
    set(&mut c, endpoints_key, format!("[{}]", list.join(",")))?;
    set(&mut c, "scouting/multicast/enabled", "false".into())?;
    Ok(c)
}

/// Runs a Zenoh router listening on `tcp/HOST:port` (and with `udp`
/// on `udp/HOST:port` too) until the process is killed.
pub fn serve_router(host: &str, port: u16, udp: bool) -> Result<(), BenchError> {
    let mut endpoints = vec![format!("tcp/{host}:{port}")];
    if udp {
        endpoints.push(format!("udp/{host}:{port}"));
    }
    let mut cfg = config("router", "listen/endpoints", &endpoints)?;
    // Another router to connect to (a router pair for the hop comparison).
    if let Ok(peer) = std::env::var("BASELINE_ZENOH_CONNECT") {
        cfg.insert_json5("connect/endpoints", &format!("[\"{peer}\"]"))
            .map_err(|e| BenchError::Zenoh {
                context: "setting connect/endpoints",
                message: e.to_string(),
            })?;
    }
    let _session = zenoh::open(cfg)
        .wait()
        .map_err(BenchError::zenoh("opening the router"))?;
    eprintln!("zenoh router listening on {}", endpoints.join(", "));
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn open_client(router: &str) -> Result<Session, BenchError> {
    let cfg = config("client", "connect/endpoints", &[router.to_owned()])?;
    zenoh::open(cfg)
        .wait()
        .map_err(BenchError::zenoh("opening a client session"))
}

/// Runs one measurement with the sessions meeting as `meet` says and
/// returns its JSON (system `zenoh` or `zenoh-peer`).
pub fn run(meet: &Meet, mode: Mode, params: RunParams) -> Result<serde_json::Value, BenchError> {
    match mode {
        Mode::Latency => {
            let rtt = latency(meet, params)?;
            Ok(measure::latency_report(meet.name(), params.size, &rtt))
        }
        Mode::Throughput | Mode::Fanout => {
            let subs = stream(meet, params)?;
            Ok(measure::stream_report(
                meet.name(),
                mode,
                params.size,
                &subs,
            ))
        }
    }
}

/// Puts `payload` as fast as `publisher` takes it (it blocks on
/// congestion) for `duration`; returns how many it put.
pub(crate) fn flood(
    publisher: &zenoh::pubsub::Publisher<'_>,
    payload: &zenoh::bytes::ZBytes,
    duration: Duration,
) -> Result<u64, BenchError> {
    let start = Instant::now();
    let mut sent: u64 = 0;
    loop {
        publisher
            .put(payload.clone())
            .wait()
            .map_err(BenchError::zenoh("publishing"))?;
        sent += 1;
        if sent.is_multiple_of(64) && start.elapsed() >= duration {
            return Ok(sent);
        }
    }
}

fn wait_matching(publisher: &zenoh::pubsub::Publisher<'_>) -> Result<(), BenchError> {
    let until = Instant::now() + MATCH_TIMEOUT;
    while Instant::now() < until {
        let status = publisher
            .matching_status()
            .wait()
            .map_err(BenchError::zenoh("asking the matching status"))?;
        if status.matching() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(SETTLE);
    Ok(())
}

fn stream(meet: &Meet, params: RunParams) -> Result<Vec<measure::SubSnapshot>, BenchError> {
    let counters = measure::counters(params.subscribers);
    let mut sessions = Vec::new();
    for (i, counter) in counters.iter().enumerate() {
        let session = meet.receiver(i)?;
        let counter: Arc<SubCounter> = Arc::clone(counter);
        let sub = session
            .declare_subscriber(STREAM_KEY)
            .callback(move |_sample| counter.record(1))
            .wait()
            .map_err(BenchError::zenoh("declaring a subscriber"))?;
        sessions.push((session, sub));
    }
    let session = meet.sender(counters.len())?;
    let publisher = session
        .declare_publisher(STREAM_KEY)
        .congestion_control(CongestionControl::Block)
        .wait()
        .map_err(BenchError::zenoh("declaring the publisher"))?;
    wait_matching(&publisher)?;
    let payload = zenoh::bytes::ZBytes::from(params.payload());
    flood(&publisher, &payload, params.duration)?;
    let publisher_done = Instant::now();
    let snapshots = measure::wait_drained(&counters, publisher_done);
    drop(publisher);
    let _ = session.close().wait();
    for (s, sub) in sessions {
        drop(sub);
        let _ = s.close().wait();
    }
    Ok(snapshots)
}

fn latency(meet: &Meet, params: RunParams) -> Result<RttRecorder, BenchError> {
    // The echo may be a client of the other router of a pair
    // (BASELINE_ECHO_SERVER): the pings then cross the routers' link.
    let echo = match (meet, std::env::var("BASELINE_ECHO_SERVER")) {
        (Meet::Router(_), Ok(other)) => open_client(&other)?,
        _ => meet.receiver(0)?,
    };
    let pong_pub = echo
        .declare_publisher(PONG_KEY)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .wait()
        .map_err(BenchError::zenoh("declaring the echo publisher"))?;
    let echo_sub = echo
        .declare_subscriber(PING_KEY)
        .callback(move |sample| {
            let _ = pong_pub.put(sample.payload().clone()).wait();
        })
        .wait()
        .map_err(BenchError::zenoh("declaring the echo subscriber"))?;

    // Pinger: as in `tagwire bench`, the pong callback records the round
    // trip and sends the next ping itself, so no thread hand-off is timed.
    let pinger = meet.sender(1)?;
    let ping_pub = Arc::new(
        pinger
            .declare_publisher(PING_KEY)
            .congestion_control(CongestionControl::Block)
            .express(true)
            .wait()
            .map_err(BenchError::zenoh("declaring the ping publisher"))?,
    );
    let payload = zenoh::bytes::ZBytes::from(params.payload());
    let state = Arc::new(Mutex::new(PingState {
        rtt: RttRecorder::new(),
        sent_at: Instant::now(),
    }));
    let rounds = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pong_sub = {
        let (state, rounds, stop) = (Arc::clone(&state), Arc::clone(&rounds), Arc::clone(&stop));
        let (ping_pub, payload) = (Arc::clone(&ping_pub), payload.clone());
        pinger
            .declare_subscriber(PONG_KEY)
            .callback(move |_sample| {
                let now = Instant::now();
                let mut s = lock(&state);
                let rtt = now.saturating_duration_since(s.sent_at);
                s.rtt.record(rtt);
                rounds.fetch_add(1, Ordering::Release);
                if !stop.load(Ordering::Acquire) {
                    s.sent_at = Instant::now();
                    drop(s);
                    let _ = ping_pub.put(payload.clone()).wait();
                }
            })
            .wait()
            .map_err(BenchError::zenoh("declaring the pinger subscriber"))?
    };
    wait_matching(&ping_pub)?;
    lock(&state).sent_at = Instant::now();
    ping_pub
        .put(payload.clone())
        .wait()
        .map_err(BenchError::zenoh("sending the first ping"))?;
    let start = Instant::now();
    let mut seen = 0;
    let mut moved_at = Instant::now();
    let mut result = Ok(());
    while start.elapsed() < params.duration {
        std::thread::sleep(Duration::from_millis(20));
        let r = rounds.load(Ordering::Acquire);
        if r != seen {
            seen = r;
            moved_at = Instant::now();
        } else if moved_at.elapsed() >= REPLY_TIMEOUT {
            result = Err(BenchError::ReplyTimeout {
                system: meet.name(),
                timeout_ms: REPLY_TIMEOUT.as_millis() as u64,
                round_trips: r,
            });
            break;
        }
    }
    stop.store(true, Ordering::Release);
    std::thread::sleep(Duration::from_millis(50));
    drop(pong_sub);
    drop(echo_sub);
    let _ = pinger.close().wait();
    let _ = echo.close().wait();
    let rtt = std::mem::take(&mut lock(&state).rtt);
    result.map(|()| rtt)
}

/// The pinger's state, shared with its pong callback.
struct PingState {
    rtt: RttRecorder,
    sent_at: Instant,
}

fn lock(state: &Mutex<PingState>) -> MutexGuard<'_, PingState> {
    // The callback cannot leave the state half-written (plain stores), so a
    // poisoned lock is still usable.
    state.lock().unwrap_or_else(|p| p.into_inner())
}
