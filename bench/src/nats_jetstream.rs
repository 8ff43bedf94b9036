//! NATS JetStream baseline for `durable` (issue 25): a real
//! `nats-server -js` with a file-backed stream, driven by `async-nats`.
//!
//! One run: a fresh stream `BENCH` (file storage, one replica) on subject
//! `bench.js`, one core-NATS subscriber on that subject counting arrivals
//! (as `tagwire bench throughput`'s subscriber does), and one publisher
//! that publishes through JetStream for `duration` with up to
//! [`ACK_WINDOW`] acknowledgements outstanding (it awaits the oldest when
//! the window is full). JetStream acknowledges a publish once the event is
//! in the stream's file store, so `acked_per_sec` is the rate at which
//! events were made durable *and the publisher knew it*. The server's
//! fsync policy is the server's (its configuration, not this client).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use async_nats::jetstream;
use futures_util::StreamExt;

use crate::measure::{self, Mode, RunParams, SubCounter};
use crate::BenchError;

const STREAM: &str = "BENCH";
const SUBJECT: &str = "bench.js";
/// Publishes awaiting their acknowledgement at most (below async-nats's
/// default in-flight bound of 5,000, so `publish` never fails on it).
pub const ACK_WINDOW: usize = 4_096;

/// Runs one throughput measurement against the JetStream-enabled
/// nats-server at `server` and returns its JSON.
pub fn run(server: &str, mode: Mode, params: RunParams) -> Result<serde_json::Value, BenchError> {
    if mode != Mode::Throughput {
        return Err(BenchError::Nats {
            context: "nats-js",
            message: "only throughput is measured against JetStream".into(),
        });
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::io("starting the tokio runtime"))?;
    rt.block_on(throughput(server, params))
}

async fn throughput(server: &str, params: RunParams) -> Result<serde_json::Value, BenchError> {
    let client = async_nats::connect(server)
        .await
        .map_err(BenchError::nats("connecting"))?;
    let js = jetstream::new(client.clone());
    // A fresh stream per run (an absent one is fine).
    let _ = js.delete_stream(STREAM).await;
    js.create_stream(jetstream::stream::Config {
        name: STREAM.into(),
        subjects: vec![SUBJECT.into()],
        storage: jetstream::stream::StorageType::File,
        num_replicas: 1,
        ..Default::default()
    })
    .await
    .map_err(BenchError::nats("creating the file-backed stream"))?;

    let counters = measure::counters(1);
    let sub_client = async_nats::connect(server)
        .await
        .map_err(BenchError::nats("connecting the subscriber"))?;
    let mut sub = sub_client
        .subscribe(SUBJECT)
        .await
        .map_err(BenchError::nats("subscribing"))?;
    sub_client
        .flush()
        .await
        .map_err(BenchError::nats("flushing a SUB"))?;
    let counter: Arc<SubCounter> = Arc::clone(&counters[0]);
    let sub_task = tokio::spawn(async move {
        let _client = sub_client;
        while sub.next().await.is_some() {
            counter.record(1);
        }
    });

    let payload = params.payload();
    let mut pending = VecDeque::with_capacity(ACK_WINDOW);
    let start = Instant::now();
    let (mut sent, mut acked) = (0u64, 0u64);
    loop {
        if pending.len() >= ACK_WINDOW {
            let ack: jetstream::context::PublishAckFuture =
                pending.pop_front().expect("the window is not empty");
            ack.await
                .map_err(BenchError::nats("awaiting a publish acknowledgement"))?;
            acked += 1;
        }
        let ack = js
            .publish(SUBJECT, payload.clone())
            .await
            .map_err(BenchError::nats("publishing to the stream"))?;
        pending.push_back(ack);
        sent += 1;
        if sent.is_multiple_of(64) && start.elapsed() >= params.duration {
            break;
        }
    }
    for ack in pending {
        ack.await
            .map_err(BenchError::nats("awaiting a publish acknowledgement"))?;
        acked += 1;
    }
    let acked_secs = start.elapsed().as_secs_f64();
    let publisher_done = Instant::now();
    let waiting = counters.clone();
    let snapshots =
        tokio::task::spawn_blocking(move || measure::wait_drained(&waiting, publisher_done))
            .await
            .map_err(|e| BenchError::Worker(e.to_string()))?;
    sub_task.abort();
    let mut stream = js
        .get_stream(STREAM)
        .await
        .map_err(BenchError::nats("looking up the stream"))?;
    let stored = stream
        .info()
        .await
        .map_err(BenchError::nats("reading the stream's info"))?
        .state
        .messages;
    let mut report =
        measure::stream_report("nats-jetstream", Mode::Throughput, params.size, &snapshots);
    if let Some(o) = report.as_object_mut() {
        o.insert("sent".into(), sent.into());
        o.insert("acked".into(), acked.into());
        o.insert("acked_per_sec".into(), (acked as f64 / acked_secs).into());
        o.insert("stored".into(), stored.into());
    }
    let _ = js.delete_stream(STREAM).await;
    Ok(report)
}
