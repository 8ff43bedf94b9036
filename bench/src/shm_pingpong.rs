//! Same-host ping-pong RTT between two processes (issue 16): iceoryx2,
//! tagwire-shm and a raw Unix socket, measured with one driver.
//!
//! The ping process spawns the pong process (this binary again, with
//! `--pong RENDEZVOUS`), so every number is a real cross-process round
//! trip. Each round trip: ping sends message `seq`, pong waits for it and
//! sends `seq` back, ping waits for it; the time from before the send to
//! after the receive goes in an hdrhistogram ([`RttRecorder`], the first
//! [`WARMUP_ROUND_TRIPS`] dropped). A run has a fixed number of round trips.
//!
//! Payload: the shared-memory systems loan a buffer of `size` bytes in
//! shared memory and write only the sequence number into its first and
//! last 8 bytes (zero copy: the application would produce its data in
//! place); the receiver checks both and the length. The Unix socket has no
//! loan, so it copies all `size` bytes through the kernel each way — that
//! copy is what zero copy saves.
//!
//! How a side waits for the next message ([`WaitMode`]): `spin` polls
//! without pause (only sensible with the two processes on two cores),
//! `yield` polls and calls `sched_yield` between polls (busy polling that
//! works with both processes on one core), `blocking` sleeps in the kernel
//! (iceoryx2: publish + event notifier, the subscriber waits on its
//! listener; Unix socket: a blocking `read`; tagwire-shm: its futex wait).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::measure::{RttRecorder, MAX_SIZE, REPLY_TIMEOUT, WARMUP_ROUND_TRIPS};
use crate::BenchError;

/// Smallest payload: room for the sequence number at both ends.
pub const MIN_SIZE: usize = 16;
/// Most measured round trips in one run (bounded, so a typo cannot hold the
/// machine for hours).
pub const MAX_ITERATIONS: u64 = 10_000_000;
/// How long the ping side waits for the pong process to attach.
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(20);
/// Polls between two looks at the clock while busy waiting.
const POLLS_PER_CLOCK_CHECK: u32 = 1024;

/// The transport measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PingPongSystem {
    /// tagwire-shm streams (descriptor ring + data area in a memfd), loan + publish, next.
    TagwireShm,
    /// iceoryx2 publish-subscribe (`ipc::Service`), loan + send, receive.
    Iceoryx2,
    /// A Unix stream socket: the socket path tagwire uses without shm.
    Unix,
}

impl PingPongSystem {
    /// The name used in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            PingPongSystem::TagwireShm => "tagwire-shm",
            PingPongSystem::Iceoryx2 => "iceoryx2",
            PingPongSystem::Unix => "unix-socket",
        }
    }
}

/// How a side waits for the next message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitMode {
    /// Poll without pause (busy poll; needs a core per process).
    Spin,
    /// Poll, `sched_yield` between polls (busy poll sharing one core).
    Yield,
    /// Sleep in the kernel until the peer wakes us.
    Blocking,
}

impl WaitMode {
    /// The name used in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitMode::Spin => "spin",
            WaitMode::Yield => "yield",
            WaitMode::Blocking => "blocking",
        }
    }
}

/// The parameters of one ping-pong run, checked.
#[derive(Clone, Copy, Debug)]
pub struct PingPongParams {
    /// Payload bytes per message.
    pub size: usize,
    /// Measured round trips (warm-up comes on top).
    pub iterations: u64,
    /// How each side waits.
    pub wait: WaitMode,
}

impl PingPongParams {
    /// Checks the command-line values.
    pub fn new(size: usize, iterations: u64, wait: WaitMode) -> Result<Self, BenchError> {
        if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
            return Err(BenchError::InvalidArgument {
                name: "size",
                value: size.to_string(),
                reason: "must be between 16 B and 16 MiB",
            });
        }
        if iterations == 0 || iterations > MAX_ITERATIONS {
            return Err(BenchError::InvalidArgument {
                name: "iterations",
                value: iterations.to_string(),
                reason: "must be between 1 and 10,000,000",
            });
        }
        Ok(PingPongParams {
            size,
            iterations,
            wait,
        })
    }

    /// Round trips in all, warm-up included.
    pub fn total(&self) -> u64 {
        self.iterations + WARMUP_ROUND_TRIPS
    }
}

/// One side of a ping-pong: sends message `seq`, waits for message `seq`.
pub trait PingPongEndpoint {
    /// Sends message `seq` (`size` bytes, tagged with `seq`).
    fn send(&mut self, seq: u64) -> Result<(), BenchError>;
    /// Waits for the peer's next message and checks it is `seq`.
    /// `Ok(false)` means nothing came within [`REPLY_TIMEOUT`].
    fn recv(&mut self, seq: u64) -> Result<bool, BenchError>;
}

/// Writes `seq` into the first and last 8 bytes of a payload.
pub fn tag_payload(payload: &mut [u8], seq: u64) {
    let tag = seq.to_le_bytes();
    let n = payload.len();
    payload[..8].copy_from_slice(&tag);
    payload[n - 8..].copy_from_slice(&tag);
}

/// Checks a received payload: its length and the tag at both ends.
pub fn check_payload(
    system: &str,
    payload: &[u8],
    size: usize,
    seq: u64,
) -> Result<(), BenchError> {
    let n = payload.len();
    if n != size {
        return Err(BenchError::Worker(format!(
            "{system}: message {seq} has {n} bytes, expected {size}"
        )));
    }
    let head = u64::from_le_bytes(payload[..8].try_into().expect("8-byte slice"));
    let tail = u64::from_le_bytes(payload[n - 8..].try_into().expect("8-byte slice"));
    if head != seq || tail != seq {
        return Err(BenchError::Worker(format!(
            "{system}: expected message {seq}, got tags {head}/{tail}"
        )));
    }
    Ok(())
}

/// Busy waiting with a deadline: spin or yield between polls, and look at
/// the clock every [`POLLS_PER_CLOCK_CHECK`] polls.
pub struct BusyWait {
    mode: WaitMode,
    deadline: Instant,
    polls: u32,
}

impl BusyWait {
    /// Starts a wait that gives up [`REPLY_TIMEOUT`] from now.
    pub fn new(mode: WaitMode) -> Self {
        BusyWait {
            mode,
            deadline: Instant::now() + REPLY_TIMEOUT,
            polls: 0,
        }
    }

    /// Pauses between two polls; `false` once the deadline has passed.
    pub fn pause(&mut self) -> bool {
        match self.mode {
            WaitMode::Yield => std::thread::yield_now(),
            WaitMode::Spin | WaitMode::Blocking => std::hint::spin_loop(),
        }
        self.polls += 1;
        if self.polls.is_multiple_of(POLLS_PER_CLOCK_CHECK) {
            return Instant::now() < self.deadline;
        }
        true
    }

    /// Time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// The ping side: `params.total()` round trips, each timed.
pub fn run_ping<E: PingPongEndpoint>(
    system: &'static str,
    ep: &mut E,
    params: PingPongParams,
) -> Result<RttRecorder, BenchError> {
    let mut rtt = RttRecorder::new();
    for seq in 0..params.total() {
        let t0 = Instant::now();
        ep.send(seq)?;
        if !ep.recv(seq)? {
            return Err(BenchError::ReplyTimeout {
                system,
                timeout_ms: REPLY_TIMEOUT.as_millis() as u64,
                round_trips: seq,
            });
        }
        rtt.record(t0.elapsed());
    }
    Ok(rtt)
}

/// The pong side: answers `params.total()` messages.
pub fn run_pong<E: PingPongEndpoint>(
    system: &'static str,
    ep: &mut E,
    params: PingPongParams,
) -> Result<(), BenchError> {
    for seq in 0..params.total() {
        if !ep.recv(seq)? {
            return Err(BenchError::ReplyTimeout {
                system,
                timeout_ms: REPLY_TIMEOUT.as_millis() as u64,
                round_trips: seq,
            });
        }
        ep.send(seq)?;
    }
    Ok(())
}

/// The JSON line of a ping-pong run.
pub fn report(
    system: &str,
    params: PingPongParams,
    rtt: &RttRecorder,
    pong_cpu: Option<&str>,
) -> serde_json::Value {
    json!({
        "system": system,
        "mode": "pingpong",
        "wait": params.wait.as_str(),
        "size": params.size,
        "processes": 2,
        "pong_cpu": pong_cpu,
        "rtt_p50_us": rtt.quantile_us(0.50),
        "rtt_p99_us": rtt.quantile_us(0.99),
        "rtt_max_us": rtt.quantile_us(1.0),
        "samples": rtt.samples(),
    })
}

/// The pong process, killed if the ping side fails before it ends.
pub struct PongProcess {
    child: Option<Child>,
}

impl PongProcess {
    /// Starts this binary again as the pong side, with `args` (which must
    /// include `--pong RENDEZVOUS`), under `taskset -c CPUS` if given.
    pub fn spawn(args: &[String], cpus: Option<&str>) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(BenchError::io("finding this executable"))?;
        let mut cmd = match cpus {
            Some(list) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(list).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(BenchError::io("starting the pong process"))?;
        Ok(PongProcess { child: Some(child) })
    }

    /// Fails if the pong process has already exited (it died early).
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        if let Some(child) = self.child.as_mut() {
            if let Some(status) = child
                .try_wait()
                .map_err(BenchError::io("polling the pong process"))?
            {
                return Err(BenchError::Worker(format!(
                    "the pong process exited early ({status})"
                )));
            }
        }
        Ok(())
    }

    /// Waits for the pong process to end and checks it succeeded.
    pub fn finish(mut self) -> Result<(), BenchError> {
        let mut child = self.child.take().expect("finish is called once");
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(status) = child
                .try_wait()
                .map_err(BenchError::io("waiting for the pong process"))?
            {
                return if status.success() {
                    Ok(())
                } else {
                    Err(BenchError::Worker(format!(
                        "the pong process failed ({status})"
                    )))
                };
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Worker(
                    "the pong process did not end after the last round trip".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for PongProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A name unique to this ping process, for sockets and service names.
pub fn rendezvous_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("tagwire-pingpong-{}-{nanos}", std::process::id())
}

// ------------------------------------------------------------ Unix socket

/// A Unix stream socket endpoint: `size` bytes copied each way.
pub struct UnixEndpoint {
    stream: UnixStream,
    buf: Vec<u8>,
    wait: WaitMode,
}

impl UnixEndpoint {
    fn new(stream: UnixStream, params: PingPongParams) -> Result<Self, BenchError> {
        let blocking = params.wait == WaitMode::Blocking;
        stream
            .set_nonblocking(!blocking)
            .map_err(BenchError::io("setting the socket mode"))?;
        if blocking {
            stream
                .set_read_timeout(Some(REPLY_TIMEOUT))
                .map_err(BenchError::io("setting the read timeout"))?;
            stream
                .set_write_timeout(Some(REPLY_TIMEOUT))
                .map_err(BenchError::io("setting the write timeout"))?;
        }
        Ok(UnixEndpoint {
            stream,
            buf: vec![crate::measure::PAYLOAD_BYTE; params.size],
            wait: params.wait,
        })
    }
}

impl PingPongEndpoint for UnixEndpoint {
    fn send(&mut self, seq: u64) -> Result<(), BenchError> {
        tag_payload(&mut self.buf, seq);
        let mut off = 0;
        let mut idle = BusyWait::new(self.wait);
        while off < self.buf.len() {
            match self.stream.write(&self.buf[off..]) {
                Ok(0) => return Err(BenchError::Worker("unix socket: peer closed".into())),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.wait == WaitMode::Blocking || !idle.pause() {
                        return Err(BenchError::Worker(
                            "unix socket: send blocked past the reply timeout".into(),
                        ));
                    }
                }
                Err(e) => return Err(BenchError::io("writing to the unix socket")(e)),
            }
        }
        Ok(())
    }

    fn recv(&mut self, seq: u64) -> Result<bool, BenchError> {
        let mut off = 0;
        let mut idle = BusyWait::new(self.wait);
        while off < self.buf.len() {
            match self.stream.read(&mut self.buf[off..]) {
                Ok(0) => return Err(BenchError::Worker("unix socket: peer closed".into())),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    if self.wait == WaitMode::Blocking || !idle.pause() {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(BenchError::io("reading from the unix socket")(e)),
            }
        }
        check_payload("unix-socket", &self.buf, self.buf.len(), seq)?;
        Ok(true)
    }
}

fn unix_socket_path(rendezvous: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{rendezvous}.sock"))
}

/// Ping side over a Unix socket: listens, starts the pong, measures.
pub fn unix_ping(
    params: PingPongParams,
    pong_args: impl Fn(&str) -> Vec<String>,
    pong_cpu: Option<&str>,
) -> Result<RttRecorder, BenchError> {
    let rendezvous = rendezvous_name();
    let path = unix_socket_path(&rendezvous);
    let listener = UnixListener::bind(&path).map_err(BenchError::io("binding the unix socket"))?;
    let _unlink = RemoveOnDrop(path.clone());
    listener
        .set_nonblocking(true)
        .map_err(BenchError::io("setting the listener non-blocking"))?;
    let mut pong = PongProcess::spawn(&pong_args(&rendezvous), pong_cpu)?;
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                pong.check_alive()?;
                if Instant::now() >= deadline {
                    return Err(BenchError::Worker(
                        "the pong process never connected to the unix socket".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(BenchError::io("accepting the pong connection")(e)),
        }
    };
    let mut ep = UnixEndpoint::new(stream, params)?;
    let rtt = run_ping("unix-socket", &mut ep, params)?;
    pong.finish()?;
    Ok(rtt)
}

/// Pong side over a Unix socket.
pub fn unix_pong(params: PingPongParams, rendezvous: &str) -> Result<(), BenchError> {
    let stream = UnixStream::connect(unix_socket_path(rendezvous))
        .map_err(BenchError::io("connecting to the ping's unix socket"))?;
    let mut ep = UnixEndpoint::new(stream, params)?;
    run_pong("unix-socket", &mut ep, params)
}

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_payload_passes_its_check_and_no_other() {
        let mut p = vec![0u8; 64];
        tag_payload(&mut p, 42);
        assert!(check_payload("x", &p, 64, 42).is_ok());
        assert!(check_payload("x", &p, 64, 41).is_err());
        assert!(check_payload("x", &p[..32], 64, 42).is_err());
        p[63] ^= 1;
        assert!(check_payload("x", &p, 64, 42).is_err());
    }

    #[test]
    fn bad_parameters_are_refused_with_their_name() {
        let e = PingPongParams::new(8, 10, WaitMode::Spin).unwrap_err();
        assert!(e.to_string().contains("--size"), "{e}");
        let e = PingPongParams::new(64, 0, WaitMode::Spin).unwrap_err();
        assert!(e.to_string().contains("--iterations"), "{e}");
        let e = PingPongParams::new(64, MAX_ITERATIONS + 1, WaitMode::Spin).unwrap_err();
        assert!(e.to_string().contains("--iterations"), "{e}");
    }

    /// An in-process pair over a socketpair: the driver's round trips all
    /// arrive in order, in each wait mode.
    #[test]
    fn unix_ping_and_pong_complete_every_round_trip() {
        for wait in [WaitMode::Spin, WaitMode::Yield, WaitMode::Blocking] {
            let params = PingPongParams::new(4096, 50, wait).unwrap();
            let (a, b) = UnixStream::pair().unwrap();
            let pong = std::thread::spawn(move || {
                let mut ep = UnixEndpoint::new(b, params).unwrap();
                run_pong("unix-socket", &mut ep, params)
            });
            let mut ep = UnixEndpoint::new(a, params).unwrap();
            let rtt = run_ping("unix-socket", &mut ep, params).unwrap();
            pong.join().unwrap().unwrap();
            assert_eq!(rtt.samples(), 50, "{wait:?}");
        }
    }
}
