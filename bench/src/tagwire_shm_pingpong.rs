//! tagwire-shm's side of the same-host ping-pong ([`crate::shm_pingpong`]).
//!
//! Two streams, each in a region (memfd) of its own, both created by the
//! ping process: `a2b` (ping produces, pong consumes) and `b2a`. A region
//! has 8 descriptor slots, one consumer entry and chunks of the payload
//! size (rounded up to 64 B), reserved at creation. The pong process opens
//! the two memfds through `/proc/PING_PID/fd/N` (the benchmark's stand-in
//! for the daemon passing them over its Unix socket; set-up is not timed).
//! A message is `Producer::loan` + tag + `Loan::publish`; a receive is
//! `Consumer::next` (spin, yield) or `Consumer::next_blocking` (futex wait
//! while the ring is empty). Each operation reads the clock once, as an
//! application passing `now` would.
//!
//! The pong announces itself with one hello packet on `b2a`, so that ping
//! never publishes before the pong's consumer entry exists (a consumer
//! starts at the stream's head and would not see earlier packets).

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use tagwire_shm::{
    Consumer, ConsumerConfig, Error as ShmError, Producer, ProducerConfig, Region, RegionConfig,
    NO_DEADLINE,
};

use crate::measure::RttRecorder;
use crate::shm_pingpong::{
    check_payload, run_ping, run_pong, tag_payload, BusyWait, PingPongEndpoint, PingPongParams,
    PongProcess, WaitMode, ATTACH_TIMEOUT,
};
use crate::BenchError;

const NAME: &str = "tagwire-shm";
/// Descriptor slots per stream (one message is in flight at a time).
const SLOTS: u32 = 8;
/// The tag of the pong's hello packet.
const HELLO: u64 = u64::MAX;

fn shm(context: &'static str) -> impl FnOnce(ShmError) -> BenchError {
    move |e| BenchError::TagwireShm {
        context,
        message: e.to_string(),
    }
}

fn region_config(size: usize) -> RegionConfig {
    RegionConfig {
        streams: 1,
        slots: SLOTS,
        consumers_max: 1,
        // Every slot, the consumer's held sample and one loan.
        chunks: SLOTS + 2,
        chunk_bytes: (size as u64).div_ceil(64) * 64,
        ..RegionConfig::default()
    }
}

/// One side: the producer of its outgoing stream, the consumer of the other.
pub struct TagwireShmEndpoint {
    producer: Producer,
    consumer: Consumer,
    params: PingPongParams,
    clock: Instant,
}

impl TagwireShmEndpoint {
    fn new(out: &Region, inp: &Region, params: PingPongParams) -> Result<Self, BenchError> {
        Ok(TagwireShmEndpoint {
            producer: out
                .producer(0, ProducerConfig::default())
                .map_err(shm("taking the producer role"))?,
            consumer: inp
                .consumer(0, ConsumerConfig::default())
                .map_err(shm("taking a consumer entry"))?,
            params,
            clock: Instant::now(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    fn publish(&mut self, tag: u64) -> Result<(), BenchError> {
        let now = self.now_ns();
        let mut loan = self
            .producer
            .loan(self.params.size, now)
            .map_err(shm("loaning a buffer"))?;
        tag_payload(&mut loan, tag);
        // Virtual time = the message's sequence number (0 for the hello).
        loan.publish(if tag == HELLO { 0 } else { tag }, NO_DEADLINE);
        Ok(())
    }

    /// Waits for the next packet and checks its tag; `Ok(false)` on timeout.
    fn receive(&mut self, tag: u64) -> Result<bool, BenchError> {
        let size = self.params.size;
        let mut idle = BusyWait::new(self.params.wait);
        let now = self.now_ns();
        loop {
            let got = match self.params.wait {
                WaitMode::Blocking => {
                    let clock = self.clock;
                    self.consumer
                        .next_blocking(idle.remaining(), || clock.elapsed().as_nanos() as u64)
                }
                WaitMode::Spin | WaitMode::Yield => self.consumer.next(now),
            };
            match got {
                Ok(sample) => {
                    check_payload(NAME, &sample, size, tag)?;
                    return Ok(true);
                }
                Err(ShmError::Timeout) => return Ok(false),
                Err(ShmError::Empty) => {
                    if !idle.pause() {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(shm("receiving")(e)),
            }
        }
    }
}

impl PingPongEndpoint for TagwireShmEndpoint {
    fn send(&mut self, seq: u64) -> Result<(), BenchError> {
        self.publish(seq)
    }

    fn recv(&mut self, seq: u64) -> Result<bool, BenchError> {
        self.receive(seq)
    }
}

/// Ping side: creates both streams, starts the pong, waits for its hello,
/// measures.
pub fn ping(
    params: PingPongParams,
    pong_args: impl Fn(&str) -> Vec<String>,
    pong_cpu: Option<&str>,
) -> Result<RttRecorder, BenchError> {
    let a2b = Region::create(region_config(params.size)).map_err(shm("creating a2b"))?;
    let b2a = Region::create(region_config(params.size)).map_err(shm("creating b2a"))?;
    let mut ep = TagwireShmEndpoint::new(&a2b, &b2a, params)?;
    let rendezvous = format!(
        "{}:{}:{}",
        std::process::id(),
        a2b.fd().as_raw_fd(),
        b2a.fd().as_raw_fd()
    );
    let mut pong = PongProcess::spawn(&pong_args(&rendezvous), pong_cpu)?;
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    loop {
        pong.check_alive()?;
        if ep.receive(HELLO)? {
            break;
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Worker(
                "tagwire-shm: the pong process never said hello".into(),
            ));
        }
    }
    let rtt = run_ping(NAME, &mut ep, params)?;
    pong.finish()?;
    Ok(rtt)
}

fn open_peer_fd(pid: &str, fd: &str) -> Result<OwnedFd, BenchError> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(BenchError::io("opening the ping's memfd under /proc"))?;
    Ok(OwnedFd::from(file))
}

/// Pong side: opens the ping's two memfds, says hello, answers.
pub fn pong(params: PingPongParams, rendezvous: &str) -> Result<(), BenchError> {
    let parts: Vec<&str> = rendezvous.split(':').collect();
    let [pid, a2b_fd, b2a_fd] = parts[..] else {
        return Err(BenchError::InvalidArgument {
            name: "pong",
            value: rendezvous.to_string(),
            reason: "expected PID:FD:FD",
        });
    };
    let a2b = Region::attach(open_peer_fd(pid, a2b_fd)?).map_err(shm("attaching a2b"))?;
    let b2a = Region::attach(open_peer_fd(pid, b2a_fd)?).map_err(shm("attaching b2a"))?;
    let mut ep = TagwireShmEndpoint::new(&b2a, &a2b, params)?;
    ep.publish(HELLO)?;
    run_pong(NAME, &mut ep, params)
}
