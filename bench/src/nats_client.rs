//! NATS baseline: a real `nats-server` (a separate process the script
//! starts) driven by `async-nats`, the maintained Rust client.
//!
//! Every publisher, subscriber, pinger and echo has its own client
//! connection; they run as tasks of one multi-threaded tokio runtime in
//! this process. async-nats buffers and flushes writes itself, so the
//! publisher issues no syscall per message.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;

use crate::measure::{self, Mode, RttRecorder, RunParams, SubCounter, REPLY_TIMEOUT};
use crate::BenchError;

const NAME: &str = "nats";
const STREAM_SUBJECT: &str = "bench.stream";
const PING_SUBJECT: &str = "bench.ping";
const PONG_SUBJECT: &str = "bench.pong";
/// Bytes a subscription's client-side queue may hold at most; its message
/// capacity is derived from it (async-nats drops, as a slow consumer, what
/// does not fit).
const SUBSCRIPTION_QUEUE_BYTES: usize = 256 * 1024 * 1024;

/// Runs one measurement against the nats-server at `server`
/// (`nats://127.0.0.1:4222`) and returns its JSON.
pub fn run(server: &str, mode: Mode, params: RunParams) -> Result<serde_json::Value, BenchError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::io("starting the tokio runtime"))?;
    rt.block_on(async {
        match mode {
            Mode::Latency => {
                let rtt = latency(server, params).await?;
                Ok(measure::latency_report(NAME, params.size, &rtt))
            }
            Mode::Throughput | Mode::Fanout => {
                let subs = stream(server, params).await?;
                Ok(measure::stream_report(NAME, mode, params.size, &subs))
            }
        }
    })
}

async fn connect(server: &str, size: usize) -> Result<async_nats::Client, BenchError> {
    let capacity = (SUBSCRIPTION_QUEUE_BYTES / (size + 64)).clamp(1024, 65_536);
    async_nats::ConnectOptions::new()
        .subscription_capacity(capacity)
        .connect(server)
        .await
        .map_err(BenchError::nats("connecting"))
}

async fn stream(server: &str, params: RunParams) -> Result<Vec<measure::SubSnapshot>, BenchError> {
    let counters = measure::counters(params.subscribers);
    let mut tasks = Vec::new();
    for counter in &counters {
        let client = connect(server, params.size).await?;
        let mut sub = client
            .subscribe(STREAM_SUBJECT)
            .await
            .map_err(BenchError::nats("subscribing"))?;
        // The PING/PONG of a flush proves the server has the SUB.
        client
            .flush()
            .await
            .map_err(BenchError::nats("flushing a SUB"))?;
        let counter: Arc<SubCounter> = Arc::clone(counter);
        tasks.push(tokio::spawn(async move {
            let _client = client;
            while sub.next().await.is_some() {
                counter.record(1);
            }
        }));
    }
    let publisher = connect(server, params.size).await?;
    let payload = params.payload();
    let start = Instant::now();
    let mut sent: u64 = 0;
    loop {
        publisher
            .publish(STREAM_SUBJECT, payload.clone())
            .await
            .map_err(BenchError::nats("publishing"))?;
        sent += 1;
        if sent.is_multiple_of(64) && start.elapsed() >= params.duration {
            break;
        }
    }
    publisher
        .flush()
        .await
        .map_err(BenchError::nats("flushing the publisher"))?;
    let publisher_done = Instant::now();
    let waiting = counters.clone();
    let snapshots =
        tokio::task::spawn_blocking(move || measure::wait_drained(&waiting, publisher_done))
            .await
            .map_err(|e| BenchError::Worker(e.to_string()))?;
    for t in tasks {
        t.abort();
    }
    Ok(snapshots)
}

async fn latency(server: &str, params: RunParams) -> Result<RttRecorder, BenchError> {
    // The echo may be on another server of a cluster (BASELINE_ECHO_SERVER):
    // the pings then cross one cluster route each way.
    let echo_server = std::env::var("BASELINE_ECHO_SERVER").unwrap_or_else(|_| server.to_owned());
    let across = echo_server != server;
    let echo = connect(&echo_server, params.size).await?;
    let mut echo_in = echo
        .subscribe(PING_SUBJECT)
        .await
        .map_err(BenchError::nats("subscribing the echo"))?;
    echo.flush()
        .await
        .map_err(BenchError::nats("flushing a SUB"))?;
    let echo_task = tokio::spawn(async move {
        while let Some(msg) = echo_in.next().await {
            if echo.publish(PONG_SUBJECT, msg.payload).await.is_err() {
                return;
            }
        }
    });
    if across {
        // Let the subscription cross the route before the first ping.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let pinger = connect(server, params.size).await?;
    let mut pong = pinger
        .subscribe(PONG_SUBJECT)
        .await
        .map_err(BenchError::nats("subscribing the pinger"))?;
    pinger
        .flush()
        .await
        .map_err(BenchError::nats("flushing a SUB"))?;
    let payload = params.payload();
    let mut rtt = RttRecorder::new();
    let start = Instant::now();
    let result = loop {
        if start.elapsed() >= params.duration {
            break Ok(());
        }
        let t0 = Instant::now();
        if let Err(e) = pinger.publish(PING_SUBJECT, payload.clone()).await {
            break Err(BenchError::nats("sending a ping")(e));
        }
        match tokio::time::timeout(REPLY_TIMEOUT, pong.next()).await {
            Ok(Some(_)) => rtt.record(t0.elapsed()),
            Ok(None) => {
                break Err(BenchError::Nats {
                    context: "waiting for a pong",
                    message: "subscription closed".into(),
                })
            }
            Err(_) => {
                break Err(BenchError::ReplyTimeout {
                    system: NAME,
                    timeout_ms: REPLY_TIMEOUT.as_millis() as u64,
                    round_trips: rtt.round_trips(),
                })
            }
        }
    };
    echo_task.abort();
    result.map(|()| rtt)
}
