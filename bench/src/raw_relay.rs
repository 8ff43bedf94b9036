//! The raw TCP relay: the best a daemon hop can do.
//!
//! A client connects and sends a header: one role byte ([`ROLE_PUBLISHER`] or
//! [`ROLE_SUBSCRIBER`]), one topic-length byte, the topic. A subscriber then
//! gets one [`SUBSCRIBED_ACK`] byte once it is registered. A publisher sends
//! length-prefixed messages (u32 little endian + payload); the relay does not
//! parse them: it reads big chunks and writes each chunk to every subscriber
//! of the topic, in order, blocking (TCP back-pressure reaches the
//! publisher). One publisher per topic, since chunks of two publishers would
//! interleave. One OS thread per connection, `TCP_NODELAY` everywhere.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::measure::{self, Mode, RttRecorder, RunParams, SubCounter, MAX_SIZE, REPLY_TIMEOUT};
use crate::BenchError;

/// Role byte of a publisher connection.
pub const ROLE_PUBLISHER: u8 = b'P';
/// Role byte of a subscriber connection.
pub const ROLE_SUBSCRIBER: u8 = b'S';
/// Byte the relay sends a subscriber once it is registered.
pub const SUBSCRIBED_ACK: u8 = 0x01;
/// Bytes the relay reads from a publisher at once, and the client's buffers.
pub const CHUNK: usize = 256 * 1024;
/// Connections the relay serves at once; more are closed at accept.
pub const MAX_CONNECTIONS: usize = 1024;

const NAME: &str = "raw-relay";
const STREAM_TOPIC: &str = "bench/stream";
const PING_TOPIC: &str = "bench/ping";
const PONG_TOPIC: &str = "bench/pong";

type Subscribers = Vec<(u64, Arc<TcpStream>)>;

/// Topic → subscribers, with a generation that publishers compare to know
/// when to refresh their copy of the list.
#[derive(Default)]
struct TopicTable {
    generation: AtomicU64,
    next_id: AtomicU64,
    topics: Mutex<HashMap<Vec<u8>, Subscribers>>,
}

impl TopicTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Subscribers>> {
        // A panicking holder cannot leave the map half-updated (each update
        // is one push or retain), so a poisoned lock is still usable.
        self.topics.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, topic: &[u8], stream: Arc<TcpStream>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock()
            .entry(topic.to_vec())
            .or_default()
            .push((id, stream));
        self.generation.fetch_add(1, Ordering::Release);
        id
    }

    fn remove(&self, topic: &[u8], id: u64) {
        let mut map = self.lock();
        if let Some(subs) = map.get_mut(topic) {
            subs.retain(|(i, _)| *i != id);
            if subs.is_empty() {
                map.remove(topic);
            }
        }
        drop(map);
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn snapshot(&self, topic: &[u8]) -> Subscribers {
        self.lock().get(topic).cloned().unwrap_or_default()
    }
}

/// Runs the relay on `127.0.0.1:port` until the process is killed.
pub fn serve(port: u16) -> Result<(), BenchError> {
    let listener =
        TcpListener::bind(("127.0.0.1", port)).map_err(BenchError::io("binding the relay"))?;
    eprintln!("raw relay listening on 127.0.0.1:{port}");
    let table = Arc::new(TopicTable::default());
    let live = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                eprintln!("raw relay: accept failed: {e}");
                continue;
            }
        };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            eprintln!("raw relay: refusing a connection: {MAX_CONNECTIONS} already open");
            continue;
        }
        let table = Arc::clone(&table);
        let live = Arc::clone(&live);
        thread::spawn(move || {
            if let Err(e) = serve_connection(stream, &table) {
                eprintln!("raw relay: connection closed: {e}");
            }
            live.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

fn serve_connection(mut stream: TcpStream, table: &TopicTable) -> Result<(), BenchError> {
    stream
        .set_nodelay(true)
        .map_err(BenchError::io("setting TCP_NODELAY"))?;
    let mut head = [0u8; 2];
    stream
        .read_exact(&mut head)
        .map_err(BenchError::io("reading the connect header"))?;
    let mut topic = vec![0u8; usize::from(head[1])];
    stream
        .read_exact(&mut topic)
        .map_err(BenchError::io("reading the topic"))?;
    match head[0] {
        ROLE_SUBSCRIBER => {
            let stream = Arc::new(stream);
            let id = table.add(&topic, Arc::clone(&stream));
            let result = (&*stream)
                .write_all(&[SUBSCRIBED_ACK])
                .map_err(BenchError::io("acknowledging a subscription"))
                .and_then(|()| wait_for_close(&stream));
            table.remove(&topic, id);
            result
        }
        ROLE_PUBLISHER => relay_publisher(stream, &topic, table),
        other => Err(BenchError::RelayProtocol(format!(
            "unknown role byte 0x{other:02x} (expected 'P' or 'S')"
        ))),
    }
}

/// A subscriber sends nothing after its header; reading only tells when it
/// goes away.
fn wait_for_close(stream: &TcpStream) -> Result<(), BenchError> {
    let mut sink = [0u8; 64];
    loop {
        match (&*stream).read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Ok(()),
        }
    }
}

fn relay_publisher(
    mut stream: TcpStream,
    topic: &[u8],
    table: &TopicTable,
) -> Result<(), BenchError> {
    let mut buf = vec![0u8; CHUNK];
    let mut seen_generation = u64::MAX;
    let mut subs: Subscribers = Vec::new();
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(BenchError::io("reading from a publisher")(e)),
        };
        let generation = table.generation.load(Ordering::Acquire);
        if generation != seen_generation {
            seen_generation = generation;
            subs = table.snapshot(topic);
        }
        for (id, sub) in &subs {
            if (&**sub).write_all(&buf[..n]).is_err() {
                // A gone subscriber is dropped; the others keep their stream.
                let _ = sub.shutdown(Shutdown::Both);
                table.remove(topic, *id);
            }
        }
    }
}

/// Connects to the relay at `server` as `role` on `topic`; a subscriber
/// returns once the relay has registered it.
pub fn connect(server: &str, role: u8, topic: &str) -> Result<TcpStream, BenchError> {
    let mut stream =
        TcpStream::connect(server).map_err(BenchError::io("connecting to the relay"))?;
    stream
        .set_nodelay(true)
        .map_err(BenchError::io("setting TCP_NODELAY"))?;
    let topic_len = u8::try_from(topic.len())
        .map_err(|_| BenchError::RelayProtocol(format!("topic {topic:?} is over 255 bytes")))?;
    let mut head = vec![role, topic_len];
    head.extend_from_slice(topic.as_bytes());
    stream
        .write_all(&head)
        .map_err(BenchError::io("sending the connect header"))?;
    if role == ROLE_SUBSCRIBER {
        let mut ack = [0u8; 1];
        stream
            .read_exact(&mut ack)
            .map_err(BenchError::io("waiting for the subscription ack"))?;
        if ack[0] != SUBSCRIBED_ACK {
            return Err(BenchError::RelayProtocol(format!(
                "expected ack byte 0x01, got 0x{:02x}",
                ack[0]
            )));
        }
    }
    Ok(stream)
}

/// Counts length-prefixed messages in a byte stream cut at arbitrary places.
#[derive(Debug, Default)]
pub struct FrameCounter {
    header: [u8; 4],
    header_have: usize,
    skip: usize,
}

impl FrameCounter {
    /// Consumes `data` and returns how many messages it completed.
    pub fn consume(&mut self, mut data: &[u8]) -> Result<u64, BenchError> {
        let mut done = 0;
        while !data.is_empty() {
            if self.skip > 0 {
                let k = self.skip.min(data.len());
                self.skip -= k;
                data = &data[k..];
                if self.skip == 0 {
                    done += 1;
                }
                continue;
            }
            let k = (4 - self.header_have).min(data.len());
            self.header[self.header_have..self.header_have + k].copy_from_slice(&data[..k]);
            self.header_have += k;
            data = &data[k..];
            if self.header_have == 4 {
                self.header_have = 0;
                let len = u32::from_le_bytes(self.header) as usize;
                if len > MAX_SIZE {
                    return Err(BenchError::RelayProtocol(format!(
                        "message length {len} over the {MAX_SIZE}-byte limit"
                    )));
                }
                if len == 0 {
                    done += 1;
                } else {
                    self.skip = len;
                }
            }
        }
        Ok(done)
    }
}

fn frame(payload: &[u8]) -> Result<Vec<u8>, BenchError> {
    let len = u32::try_from(payload.len()).map_err(|_| BenchError::InvalidArgument {
        name: "size",
        value: payload.len().to_string(),
        reason: "does not fit a u32 length prefix",
    })?;
    let mut f = Vec::with_capacity(4 + payload.len());
    f.extend_from_slice(&len.to_le_bytes());
    f.extend_from_slice(payload);
    Ok(f)
}

/// Runs one measurement against the relay at `server` and returns its JSON.
pub fn run(server: &str, mode: Mode, params: RunParams) -> Result<serde_json::Value, BenchError> {
    match mode {
        Mode::Latency => {
            let rtt = latency(server, params)?;
            Ok(measure::latency_report(NAME, params.size, &rtt))
        }
        Mode::Throughput | Mode::Fanout => {
            let subs = stream(server, params)?;
            Ok(measure::stream_report(NAME, mode, params.size, &subs))
        }
    }
}

fn stream(server: &str, params: RunParams) -> Result<Vec<measure::SubSnapshot>, BenchError> {
    let counters = measure::counters(params.subscribers);
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for counter in &counters {
        let conn = connect(server, ROLE_SUBSCRIBER, STREAM_TOPIC)?;
        conn.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(BenchError::io("setting a read timeout"))?;
        let counter = Arc::clone(counter);
        let stop = Arc::clone(&stop);
        workers.push(thread::spawn(move || subscribe_loop(conn, &counter, &stop)));
    }
    let frame = frame(&params.payload())?;
    let publisher = connect(server, ROLE_PUBLISHER, STREAM_TOPIC)?;
    // Small frames are gathered into CHUNK-sized writes; a frame of a
    // quarter chunk or more goes straight to the socket (BufWriter passes
    // writes at least its capacity through), saving a copy per message.
    let capacity = if frame.len() >= CHUNK / 4 {
        frame.len()
    } else {
        CHUNK
    };
    let mut out = BufWriter::with_capacity(capacity, publisher);
    let start = Instant::now();
    let mut sent: u64 = 0;
    loop {
        out.write_all(&frame)
            .map_err(BenchError::io("publishing to the relay"))?;
        sent += 1;
        if sent.is_multiple_of(64) && start.elapsed() >= params.duration {
            break;
        }
    }
    out.flush()
        .map_err(BenchError::io("flushing the publisher"))?;
    let publisher_done = Instant::now();
    let snapshots = measure::wait_drained(&counters, publisher_done);
    stop.store(true, Ordering::Release);
    for w in workers {
        w.join()
            .map_err(|_| BenchError::Worker("a raw-relay subscriber panicked".into()))??;
    }
    drop(out);
    Ok(snapshots)
}

fn subscribe_loop(
    mut conn: TcpStream,
    counter: &SubCounter,
    stop: &AtomicBool,
) -> Result<(), BenchError> {
    let mut buf = vec![0u8; CHUNK];
    let mut frames = FrameCounter::default();
    while !stop.load(Ordering::Acquire) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => counter.record(frames.consume(&buf[..n])?),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(BenchError::io("reading from the relay")(e)),
        }
    }
    Ok(())
}

fn latency(server: &str, params: RunParams) -> Result<RttRecorder, BenchError> {
    // Echo: subscribed to ping, publishes on pong.
    let echo_in = connect(server, ROLE_SUBSCRIBER, PING_TOPIC)?;
    let echo_in_handle = echo_in
        .try_clone()
        .map_err(BenchError::io("cloning the echo socket"))?;
    let mut echo_out = connect(server, ROLE_PUBLISHER, PONG_TOPIC)?;
    let echo = thread::spawn(move || {
        let mut input = BufReader::with_capacity(CHUNK, echo_in);
        let mut msg = Vec::new();
        loop {
            if read_frame(&mut input, &mut msg).is_err() {
                return; // the pinger shut the socket down: run over
            }
            if echo_out.write_all(&msg).is_err() {
                return;
            }
        }
    });
    // Pinger: subscribed to pong, publishes on ping.
    let pong = connect(server, ROLE_SUBSCRIBER, PONG_TOPIC)?;
    pong.set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(BenchError::io("setting a read timeout"))?;
    let mut pong = BufReader::with_capacity(CHUNK, pong);
    let mut ping = connect(server, ROLE_PUBLISHER, PING_TOPIC)?;
    let ping_frame = frame(&params.payload())?;
    let mut reply = Vec::with_capacity(ping_frame.len());
    let mut rtt = RttRecorder::new();
    let start = Instant::now();
    let result = loop {
        if start.elapsed() >= params.duration {
            break Ok(());
        }
        let t0 = Instant::now();
        if let Err(e) = ping.write_all(&ping_frame) {
            break Err(BenchError::io("sending a ping")(e));
        }
        match read_frame(&mut pong, &mut reply) {
            Ok(()) => rtt.record(t0.elapsed()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break Err(BenchError::ReplyTimeout {
                    system: NAME,
                    timeout_ms: REPLY_TIMEOUT.as_millis() as u64,
                    round_trips: rtt.round_trips(),
                })
            }
            Err(e) => break Err(BenchError::io("reading a pong")(e)),
        }
    };
    let _ = echo_in_handle.shutdown(Shutdown::Both);
    let _ = echo.join();
    result.map(|()| rtt)
}

/// Reads one whole length-prefixed message (prefix included) into `msg`.
fn read_frame(input: &mut impl Read, msg: &mut Vec<u8>) -> std::io::Result<()> {
    let mut head = [0u8; 4];
    input.read_exact(&mut head)?;
    let len = u32::from_le_bytes(head) as usize;
    if len > MAX_SIZE {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("message length {len} over the {MAX_SIZE}-byte limit"),
        ));
    }
    msg.clear();
    msg.extend_from_slice(&head);
    msg.resize(4 + len, 0);
    input.read_exact(&mut msg[4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_counter_counts_frames_split_anywhere() {
        let mut stream = Vec::new();
        for len in [0usize, 1, 5, 64, 3] {
            stream.extend(frame(&vec![7u8; len]).expect("small frame"));
        }
        for cut in 1..stream.len() {
            let mut fc = FrameCounter::default();
            let mut total = 0;
            for piece in stream.chunks(cut) {
                total += fc.consume(piece).expect("valid stream");
            }
            assert_eq!(total, 5, "cut every {cut} bytes");
        }
    }

    #[test]
    fn frame_counter_refuses_an_oversized_length() {
        let mut fc = FrameCounter::default();
        let err = fc.consume(&u32::MAX.to_le_bytes()).unwrap_err();
        assert!(err.to_string().contains("4294967295"), "{err}");
    }

    #[test]
    fn relay_forwards_to_every_subscriber_and_refuses_bad_roles() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let addr = listener.local_addr().expect("local addr").to_string();
        let table = Arc::new(TopicTable::default());
        let t = Arc::clone(&table);
        thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let t = Arc::clone(&t);
                thread::spawn(move || {
                    let _ = serve_connection(s, &t);
                });
            }
        });
        let mut subs: Vec<_> = (0..3)
            .map(|_| connect(&addr, ROLE_SUBSCRIBER, "t").expect("subscribe"))
            .collect();
        let mut other = connect(&addr, ROLE_SUBSCRIBER, "other").expect("subscribe");
        let mut publisher = connect(&addr, ROLE_PUBLISHER, "t").expect("publish");
        let msg = frame(b"hello").expect("small frame");
        publisher.write_all(&msg).expect("send");
        for s in &mut subs {
            let mut got = Vec::new();
            read_frame(s, &mut got).expect("each subscriber gets the message");
            assert_eq!(got, msg);
        }
        other
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let mut buf = [0u8; 8];
        assert!(other.read(&mut buf).is_err(), "other topic got a message");

        let mut bad = TcpStream::connect(&addr).expect("connect");
        bad.write_all(&[b'X', 1, b't']).expect("send header");
        let mut rest = Vec::new();
        // The relay closes a connection with an unknown role.
        assert_eq!(bad.read_to_end(&mut rest).expect("read to close"), 0);
    }
}
