//! Baseline systems for tagwire's system benchmark comparison (issue 3).
//!
//! Three systems are driven with one measurement contract, the same one
//! `tagwire bench` implements, so their JSON lines can be compared row by
//! row in `BENCHMARKS.md`:
//!
//! - [`raw_relay`]: a minimal TCP relay process — the best a daemon hop can do;
//! - [`nats_client`]: a real `nats-server` driven by the `async-nats` client;
//!   [`nats_jetstream`]: the same with a file-backed JetStream stream, the
//!   baseline of `durable` (`scripts/durable-jetstream.sh`);
//! - [`zenoh_client`]: a Zenoh router process and client-mode sessions;
//!   [`zenoh_mcast`]: peer sessions on Zenoh's multicast transport, one role
//!   per process (`bench/udp-compare.sh --lan`).
//!
//! Same-host transports (issue 16) have their own two-process ping-pong,
//! [`shm_pingpong`]: tagwire-shm ([`tagwire_shm_pingpong`]) against
//! iceoryx2 ([`iceoryx2_pingpong`]) and a Unix socket, run by
//! `bench/shm-compare.sh`.
//!
//! [`measure`] holds what every system shares: subscriber counters, the rule
//! that ends a run, the RTT histogram and the JSON report. `bench/compare.sh`
//! runs them all and `bench/report.py` turns the JSON into markdown; the
//! method is in `docs/benchmarks.md`.

pub mod error;
pub mod iceoryx2_pingpong;
pub mod measure;
pub mod nats_client;
pub mod nats_jetstream;
pub mod raw_relay;
pub mod shm_pingpong;
pub mod tagwire_shm_pingpong;
pub mod zenoh_client;
pub mod zenoh_mcast;

pub use error::BenchError;
