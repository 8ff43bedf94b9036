//! Opening a session (its engine, its first connection, its reader and
//! flusher threads) and closing it when the last handle is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use bytes::BytesMut;
use tagwire_core::connection::{ClientHello, Config, Connection};

use super::connect::connect;
use super::reader::reader_main;
use super::write_state::WriteState;
use super::writer::flusher_main;
use super::{Guard, Inner, Refusals, Session, Target};
use crate::deliver::Deliver;
use crate::error::Result;
use crate::options::Options;
use crate::sync::lock;

static SESSION_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Session {
    pub(crate) fn open(target: Target, options: Options) -> Result<Session> {
        Session::open_any(vec![target], options)
    }

    /// A session that uses the first of `targets` that answers, and on a
    /// lost connection reconnects to whichever answers next (failover
    /// between daemons, which keeps the subscriptions: they are made again).
    pub(crate) fn open_any(targets: Vec<Target>, options: Options) -> Result<Session> {
        let name = format!(
            "{}-{}.{}",
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "client".into()),
            std::process::id(),
            SESSION_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let config = Config {
            handshake_timeout: u64::try_from(options.connect_timeout.as_nanos())
                .unwrap_or(u64::MAX),
            // The router probes an idle client and the engine answers; the
            // reader thread blocks in `read` and keeps no timer of its own.
            idle_timeout: 0,
            max_frame: options.max_frame,
            ..Config::default()
        };
        let hello = ClientHello {
            name: name.clone(),
            token: String::new(), // `connect` reads it before each attempt
            // Kept across reconnects, so the router gives our endpoint names back.
            session: options
                .session_id
                .unwrap_or_else(crate::credentials::new_session_id),
            // `connect` draws a fresh one before each attempt.
            nonce: [0; tagwire_proto::handshake::NONCE_LEN],
            proof: None,
        };
        let ack_window = options.ack_window;
        let inner = Arc::new(Inner {
            targets,
            current: AtomicUsize::new(0),
            name,
            options,
            origin: Instant::now(),
            writer: Mutex::new(WriteState::new(ack_window)),
            engine: Mutex::new(Connection::client(config, hello, 0)),
            socket: Mutex::new(None),
            udp: Mutex::new(None),
            replay: Mutex::new(BytesMut::new()),
            flush_cv: Condvar::new(),
            acked_cv: Condvar::new(),
            connected_cv: Condvar::new(),
            waiters: Mutex::new(HashMap::new()),
            sinks: Mutex::new(HashMap::new()),
            ack_batching: Mutex::new(HashMap::new()),
            subs_generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            reader_thread: Mutex::new(None),
            reconnects: AtomicU64::new(0),
            delivery_duplicates: AtomicU64::new(0),
            piece_resume: Mutex::new(Default::default()),
            pieces_sent: AtomicU64::new(0),
            pieces_skipped: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            refusals: Mutex::new(Refusals::default()),
            net_offset: std::sync::atomic::AtomicI64::new(0),
            net_offset_at: AtomicU64::new(0),
            bands: Mutex::new(HashMap::new()),
            router_bands: Mutex::new(None),
            shm: Default::default(),
        });
        let (stream, leftover) = connect(&inner)?;
        let r = inner.clone();
        let reader = std::thread::Builder::new()
            .name("tagwire-reader".into())
            .spawn(move || reader_main(r, stream, leftover))?;
        *lock(&inner.reader_thread) = Some(reader.thread().id());
        let f = inner.clone();
        std::thread::Builder::new()
            .name("tagwire-flusher".into())
            .spawn(move || flusher_main(f))?;
        Ok(Session {
            guard: Arc::new(Guard(inner)),
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Inner {
    fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // The batched publishes, then the engine's `Close` (a reconnect
        // under way stops at it).
        let mut w = lock(&self.writer);
        lock(&self.engine).close(0, "client closed");
        if w.connected {
            self.take_control(&mut w);
        }
        let _ = self.flush_locked(w);
        let mut w = lock(&self.writer);
        w.connected = false;
        if let Some(s) = lock(&self.socket).take() {
            if self.shm.reads_in_place() {
                // The reader thread reads on until the daemon closes, to
                // give back the pins of payloads still on their way (`drain`).
                s.shutdown_write();
            } else {
                s.shutdown();
            }
        }
        drop(w);
        self.flush_cv.notify_all();
        self.connected_cv.notify_all();
        let sinks = std::mem::take(&mut *lock(&self.sinks));
        for sink in sinks.values() {
            sink.close();
        }
    }
}
