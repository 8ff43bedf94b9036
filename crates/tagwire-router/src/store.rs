//! The durable store (issue 25; docs/reliability.md): events of
//! `reliability=durable` tags kept in an embedded database (redb, one file
//! in the daemon's state directory) so that a late or recovering
//! subscriber can replay them, across a restart or a `kill -9` of the
//! daemon.
//!
//! **Off the lanes.** A lane that delivers an event of a durable tag
//! queues `(tag, event bytes, now)` on a bounded channel and goes on; one
//! store thread takes what is queued (up to [`MAX_BATCH`] events), writes it
//! in one transaction, applies the retention rule
//! ([`tagwire_core::store::TagLog`]) and commits (synced per `fsync`). When
//! no tag is durable, a delivery costs one flag test. A full queue (count
//! or bytes) does not block the lane: the event is delivered but not
//! stored, counted in `not_stored`, and a warning is logged at most once a
//! second.
//!
//! **Custody** (acknowledged publishing, docs/reliability.md): an event
//! that arrives with an upstream obligation (a client's `PublishReliable`,
//! a `Reliable` over a link) takes one more obligation when it is queued
//! here; the store thread settles it after the commit that holds it (with
//! `fsync = "batch"` a synced commit) by putting `(connection, sequence)`
//! on [`Settled`] and waking the router's timers task, which completes it
//! under the state lock (the store thread never takes that lock, and
//! nothing is locked across the fsync). When the queue is full such an
//! event is refused instead: not delivered, failed in the acknowledgement
//! (the publisher learns it; a link's sender routes it again).
//!
//! **Replay reads** (`Pull` query 6, `Stored`) go through the same queue,
//! so a read sees every event queued before it: a subscriber that
//! subscribes and then replays misses nothing between what the store holds
//! and what it receives live (the client library removes the overlap). The
//! store thread answers on the connection's outbox — or, for a pull that
//! came over a link from another daemon's replay (`Pull.node` naming this
//! one), as a `PullAnswer` on that link's outbox.
//!
//! **Origins.** Each record keeps the [`origin_key`] of the daemon the
//! event was published at, so that a replay that reads several daemons'
//! stores takes each daemon's own publications from that daemon's store
//! and everything else from its own (`Origins`), and no event comes from
//! two stores.
//!
//! This module is the database and its thread ([`RouterStore`], the
//! store thread's writer); which tags are durable and what the lanes queue
//! and ask of it are the `durable` module's.
//!
//! Layout: one table `events`, key `(tag, position)`, value a
//! [`StoreRecord`]. Positions rise across the whole store, in the order
//! events were queued; they survive restarts (the next one is the largest
//! held plus one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use tagwire_core::federation::NodeId;
use tagwire_core::store::{origin_key, Retention, StoreRecord, TagLog};
use tagwire_core::tags::Pattern;
use tagwire_proto::{
    ErrorCode, EventRef, Frame, LinkFrame, Pull, PullOutcome, PullQuery, PullReply, PullStatus,
};

use crate::channel::Outbox;
use crate::config::{Fsync, StoreConfig};
use crate::state::reliable::Upstream;

/// Most events written in one transaction.
pub const MAX_BATCH: usize = 4096;

const EVENTS: TableDefinition<'static, (&'static str, u64), &'static [u8]> =
    TableDefinition::new("events");

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database file could not be opened or created.
    #[error("cannot open the durable store {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// What redb said.
        source: Box<redb::Error>,
    },
    /// `[store] tags` without a database file.
    #[error("store.tags is set but the daemon has no store: durable tags need a database file (tagwired --state-dir DIR, or [store] path)")]
    NoPath,
    /// The store thread could not be started.
    #[error("cannot start the store thread: {0}")]
    Thread(std::io::Error),
}

/// Counters of the store (`tagwire admin show` and the metrics).
#[derive(Debug, Default)]
pub(crate) struct StoreCounters {
    /// Events written.
    pub stored: AtomicU64,
    /// Events not stored: queue full, too many tags, a write error.
    pub not_stored: AtomicU64,
    /// Events removed by retention.
    pub evicted: AtomicU64,
    /// Records that did not decode when the store was opened (deleted).
    pub corrupt: AtomicU64,
    /// Commits.
    pub commits: AtomicU64,
    /// Bytes queued for the store thread now.
    pub queued_bytes: AtomicU64,
    /// Acknowledged events refused because the queue was full (not
    /// delivered; failed in the publisher's acknowledgement).
    pub refused: AtomicU64,
}

/// Obligations the store thread settled (after the commit that holds
/// their events), waiting for the router's timers task: `(upstream,
/// failed)`. Bounded by the queue: one entry per queued write at most.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    done: Mutex<Vec<(Upstream, bool)>>,
    /// Wakes the timers task (`node_io::timers`).
    wake: Arc<tokio::sync::Notify>,
}

impl Settled {
    fn push(&self, items: impl IntoIterator<Item = (Upstream, bool)>) {
        let mut any = false;
        {
            let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
            for i in items {
                d.push(i);
                any = true;
            }
        }
        if any {
            self.wake.notify_one();
        }
    }

    /// What was settled since the last call.
    pub(crate) fn take(&self) -> Vec<(Upstream, bool)> {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What a lane queues for the store thread: an event to write, or a
/// replay read to answer.
pub(crate) enum Job {
    Write {
        tag: Box<str>,
        event: Bytes,
        at_ns: u64,
        /// The [`origin_key`] of the daemon it was published at.
        origin: u64,
        /// The obligation the store settles once the event is committed.
        upstream: Option<Upstream>,
    },
    Read {
        pull: Pull,
        /// Whether the tag is durable now (a tag that is not, and of which
        /// nothing is held, is refused with `NoHistory`).
        durable: bool,
        to: AnswerTo,
        max_events: usize,
        max_bytes: usize,
    },
}

/// Where the store thread sends a replay read's answer.
pub(crate) enum AnswerTo {
    /// A client connection: a `PullReply` (or an `Error`) with the pull's
    /// request id.
    Client {
        outbox: Arc<Outbox>,
        max_control: usize,
    },
    /// A neighbour's `PullRequest` `id` (another daemon's replay): a
    /// `PullAnswer` on the link.
    Link {
        outbox: Arc<Outbox>,
        id: u32,
        max_control: usize,
    },
}

impl AnswerTo {
    fn send(self, req: u32, answer: Result<PullReply, (ErrorCode, String)>) {
        match self {
            AnswerTo::Client {
                outbox,
                max_control,
            } => {
                let frame = match answer {
                    Ok(reply) => Frame::PullReply(reply),
                    Err((code, message)) => Frame::Error { req, code, message },
                };
                outbox.send(&frame, max_control);
            }
            AnswerTo::Link {
                outbox,
                id,
                max_control,
            } => {
                let outcome = match answer {
                    Ok(reply) => PullOutcome::Reply(reply),
                    Err((code, message)) => PullOutcome::Refused { code, message },
                };
                // A link that does not take it: the asker's pull times out.
                let _ = outbox.send_link(&LinkFrame::PullAnswer { id, outcome }, max_control);
            }
        }
    }
}

/// The router's side of the store: which tags are durable, and the queue
/// to the store thread.
#[derive(Debug, Default)]
pub(crate) struct RouterStore {
    /// Whether any tag can be durable (a `[store] tags` pattern, or a
    /// daemon or tag layer with `reliability=durable`).
    pub enabled: bool,
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) cache: HashMap<Box<str>, bool>,
    pub(crate) queue: Option<SyncSender<Job>>,
    pub counters: Arc<StoreCounters>,
    queue_bytes: u64,
    last_warning: Option<Instant>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Obligations settled by the store thread (drained by the timers task).
    pub settled: Arc<Settled>,
    /// Why the last event with an upstream obligation was refused (the
    /// queue was full): taken by the publishing connection to answer.
    pub refused: Option<&'static str>,
    /// This daemon's [`origin_key`], and other daemons' by node id (node
    /// ids are per start; names are what a store keeps). Cleared at
    /// `durable`'s `CACHE_ORIGINS` entries.
    pub(crate) own_origin: u64,
    pub(crate) origins: HashMap<NodeId, u64>,
}

impl RouterStore {
    /// Whether a warning about an event the store could not take may be
    /// logged now: at most one a second (the counters count every one).
    pub(crate) fn may_warn(&mut self) -> bool {
        let now = Instant::now();
        let due = self
            .last_warning
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
        if due {
            self.last_warning = Some(now);
        }
        due
    }

    /// Opens the database of `config` (if it names one) and starts the
    /// store thread.
    /// `wake` is the router's timers task's (it drains [`Settled`]).
    pub(crate) fn open(
        config: &StoreConfig,
        daemon: &str,
        now_ns: u64,
        wake: Arc<tokio::sync::Notify>,
    ) -> Result<RouterStore, StoreError> {
        let patterns = config
            .tags
            .iter()
            .filter_map(|t| Pattern::parse(t).ok())
            .collect();
        let mut store = RouterStore {
            patterns,
            own_origin: origin_key(daemon),
            queue_bytes: config.queue_bytes,
            settled: Arc::new(Settled {
                done: Mutex::default(),
                wake,
            }),
            ..RouterStore::default()
        };
        let Some(path) = &config.path else {
            if !config.tags.is_empty() {
                return Err(StoreError::NoPath);
            }
            return Ok(store);
        };
        let mut writer = Writer::open(path, config, store.counters.clone(), now_ns)?;
        writer.settled = store.settled.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(config.queue_length);
        let thread = std::thread::Builder::new()
            .name("tagwire-store".into())
            .spawn(move || writer.run(rx))
            .map_err(StoreError::Thread)?;
        store.queue = Some(tx);
        store.thread = Some(thread);
        Ok(store)
    }

    /// Stops the store thread after it wrote what is queued.
    pub(crate) fn close(&mut self) {
        self.queue = None;
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the store thread panicked");
            }
        }
    }

    /// Queues `job` (`bytes` long) for the store thread; `Err` says why
    /// it could not be (no store, a full queue, a stopped thread).
    pub(crate) fn submit(&mut self, job: Job, bytes: u64) -> Result<(), &'static str> {
        let Some(q) = &self.queue else {
            return Err("this daemon has no durable store ([store] path, tagwired --state-dir)");
        };
        let c = &self.counters;
        if c.queued_bytes.load(Ordering::Relaxed) + bytes > self.queue_bytes {
            return Err("the store's queue is full (store.queue_bytes)");
        }
        c.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        match q.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                c.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                Err(match e {
                    TrySendError::Full(_) => "the store's queue is full (store.queue_length)",
                    TrySendError::Disconnected(_) => "the store thread has stopped",
                })
            }
        }
    }
}

/// An event to write: its tag, bytes, time, origin key and obligation.
type Write = (Box<str>, Bytes, u64, u64, Option<Upstream>);

/// The store thread's state: the database and each tag's records as the
/// retention rule sees them.
struct Writer {
    db: Database,
    tags: HashMap<Box<str>, TagLog>,
    next_pos: u64,
    retention: Retention,
    max_tags: usize,
    fsync: Fsync,
    fsync_interval: Duration,
    last_sync: Instant,
    unsynced: bool,
    counters: Arc<StoreCounters>,
    last_error_log: Option<Instant>,
    settled: Arc<Settled>,
}

impl Writer {
    fn open(
        path: &Path,
        config: &StoreConfig,
        counters: Arc<StoreCounters>,
        now_ns: u64,
    ) -> Result<Writer, StoreError> {
        let fail = |e: redb::Error| StoreError::Open {
            path: path.to_owned(),
            source: Box::new(e),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(redb::Error::Io(e)))?;
        }
        let db = Database::create(path).map_err(|e| fail(e.into()))?;
        let mut w = Writer {
            db,
            tags: HashMap::new(),
            next_pos: 1,
            retention: Retention {
                max_events: config.max_events_per_tag,
                max_bytes: config.max_bytes_per_tag,
                max_age_ns: config.max_age_secs.saturating_mul(1_000_000_000),
            },
            max_tags: config.max_tags,
            fsync: config.fsync,
            fsync_interval: Duration::from_millis(config.fsync_interval_ms),
            last_sync: Instant::now(),
            unsynced: false,
            counters,
            last_error_log: None,
            settled: Arc::default(),
        };
        w.load(now_ns).map_err(fail)?;
        tracing::info!(
            "durable store {}: {} tags, {} events held",
            path.display(),
            w.tags.len(),
            w.tags.values().map(TagLog::len).sum::<u64>()
        );
        Ok(w)
    }

    /// Reads every record's position, size and time; deletes records that
    /// do not decode and what retention removes now.
    fn load(&mut self, now_ns: u64) -> Result<(), redb::Error> {
        let txn = self.db.begin_write()?;
        {
            let mut table = txn.open_table(EVENTS)?;
            let mut bad = Vec::new();
            for item in table.iter()? {
                let (k, v) = item?;
                let (tag, pos) = k.value();
                match StoreRecord::decode(v.value()) {
                    Ok(r) => {
                        self.tags.entry(Box::from(tag)).or_default().push(
                            pos,
                            r.event.len() as u64,
                            r.stored_at_ns,
                        );
                    }
                    Err(e) => {
                        tracing::warn!(
                            "durable store: record {pos} of {} is unreadable and is removed: {e}",
                            tagwire_proto::excerpt(tag)
                        );
                        bad.push((tag.to_owned(), pos));
                    }
                }
                self.next_pos = self.next_pos.max(pos + 1);
            }
            for (tag, pos) in &bad {
                table.remove((tag.as_str(), *pos))?;
            }
            self.counters
                .corrupt
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            self.evict_all(&mut table, now_ns)?;
        }
        txn.commit()?;
        Ok(())
    }

    fn evict_all(
        &mut self,
        table: &mut redb::Table<'_, (&'static str, u64), &'static [u8]>,
        now_ns: u64,
    ) -> Result<(), redb::Error> {
        let mut empty = Vec::new();
        for (tag, log) in self.tags.iter_mut() {
            for pos in log.evict(&self.retention, now_ns) {
                table.remove((&**tag, pos))?;
                self.counters.evicted.fetch_add(1, Ordering::Relaxed);
            }
            if log.is_empty() {
                empty.push(tag.clone());
            }
        }
        for t in empty {
            self.tags.remove(&t);
        }
        Ok(())
    }

    fn run(mut self, rx: Receiver<Job>) {
        let tick = Duration::from_secs(1).min(self.fsync_interval);
        let mut last_age_check = Instant::now();
        loop {
            let first = match rx.recv_timeout(tick) {
                Ok(j) => Some(j),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut batch: Vec<Job> = first.into_iter().collect();
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            let age_due = last_age_check.elapsed() >= Duration::from_secs(1);
            if age_due {
                last_age_check = Instant::now();
            }
            if let Err(e) = self.handle(batch, age_due) {
                self.log_error(&e);
            }
        }
        // The queue is closed: sync what was committed without a sync.
        if self.unsynced {
            if let Err(e) = self.commit_empty() {
                self.log_error(&e);
            }
        }
    }

    fn log_error(&mut self, e: &redb::Error) {
        let now = Instant::now();
        if self
            .last_error_log
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            self.last_error_log = Some(now);
            tracing::error!("durable store: {e}");
        }
    }

    /// Writes the batch's events (a read first commits what precedes it),
    /// then commits.
    fn handle(&mut self, batch: Vec<Job>, age_due: bool) -> Result<(), redb::Error> {
        let mut writes: Vec<Write> = Vec::new();
        for job in batch {
            match job {
                Job::Write {
                    tag,
                    event,
                    at_ns,
                    origin,
                    upstream,
                } => {
                    self.counters
                        .queued_bytes
                        .fetch_sub(event.len() as u64, Ordering::Relaxed);
                    writes.push((tag, event, at_ns, origin, upstream));
                }
                Job::Read {
                    pull,
                    durable,
                    to,
                    max_events,
                    max_bytes,
                } => {
                    self.write(std::mem::take(&mut writes), false)?;
                    let answer = match self.read(&pull, max_events, max_bytes) {
                        Ok(reply) if reply.held == 0 && !durable => Err((
                            ErrorCode::NoHistory,
                            format!(
                                "tag {} is not durable and the store holds nothing of it (make it durable: `tagwire admin qos TAG reliability=durable`, or [store] tags)",
                                tagwire_proto::excerpt(&pull.tag)
                            ),
                        )),
                        Ok(reply) => Ok(reply),
                        Err(e) => Err((
                            ErrorCode::Internal,
                            format!("the durable store cannot be read: {e}"),
                        )),
                    };
                    to.send(pull.req, answer);
                }
            }
        }
        if !writes.is_empty() || age_due || self.sync_due() {
            self.write(writes, age_due)?;
        }
        Ok(())
    }

    fn sync_due(&self) -> bool {
        self.unsynced && self.last_sync.elapsed() >= self.fsync_interval
    }

    fn commit_empty(&mut self) -> Result<(), redb::Error> {
        self.write(Vec::new(), false)
    }

    /// One transaction ([`Writer::commit`]), then the obligations of its
    /// events are settled: done once committed (synced with `fsync =
    /// "batch"`), failed when not stored (`max_tags`, a write error).
    fn write(&mut self, writes: Vec<Write>, age: bool) -> Result<(), redb::Error> {
        let mut settle: Vec<(Upstream, bool)> = Vec::new();
        let result = self.commit(writes, age, &mut settle);
        if result.is_err() {
            for s in &mut settle {
                s.1 = true;
            }
        }
        self.settled.push(settle);
        result
    }

    /// One transaction: the events, the retention rule, a commit synced
    /// as `fsync` says. `settle` gets each event's obligation (failed if
    /// it was not written).
    fn commit(
        &mut self,
        writes: Vec<Write>,
        age: bool,
        settle: &mut Vec<(Upstream, bool)>,
    ) -> Result<(), redb::Error> {
        // The age check commits only when a record is past its age: an
        // idle store does not sync every second.
        let now_ns = crate::timing::now_ns();
        let age = age
            && self
                .tags
                .values()
                .any(|l| l.expired(&self.retention, now_ns));
        if writes.is_empty() && !age && !self.unsynced {
            return Ok(());
        }
        settle.extend(writes.iter().filter_map(|w| w.4.map(|u| (u, false))));
        let mut txn = self.db.begin_write()?;
        let sync = match self.fsync {
            Fsync::Batch => true,
            Fsync::Interval => self.last_sync.elapsed() >= self.fsync_interval,
        };
        txn.set_durability(if sync {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
        {
            let mut table = txn.open_table(EVENTS)?;
            let mut touched: Vec<Box<str>> = Vec::new();
            for (tag, event, at_ns, origin, upstream) in writes {
                if !self.tags.contains_key(&tag) && self.tags.len() >= self.max_tags {
                    self.counters.not_stored.fetch_add(1, Ordering::Relaxed);
                    if let Some(u) = upstream {
                        if let Some(s) = settle.iter_mut().find(|s| s.0 == u) {
                            s.1 = true;
                        }
                    }
                    continue;
                }
                let pos = self.next_pos;
                self.next_pos += 1;
                let rec = StoreRecord {
                    stored_at_ns: at_ns,
                    origin,
                    event,
                }
                .encode();
                table.insert((&*tag, pos), rec.as_slice())?;
                let log = self.tags.entry(tag.clone()).or_default();
                log.push(
                    pos,
                    (rec.len() - tagwire_core::store::RECORD_HEADER_LEN) as u64,
                    at_ns,
                );
                self.counters.stored.fetch_add(1, Ordering::Relaxed);
                if !touched.contains(&tag) {
                    touched.push(tag);
                }
            }
            for tag in touched {
                if let Some(log) = self.tags.get_mut(&tag) {
                    for pos in log.evict(&self.retention, now_ns) {
                        table.remove((&*tag, pos))?;
                        self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                    if log.is_empty() {
                        self.tags.remove(&tag);
                    }
                }
            }
            if age {
                self.evict_all(&mut table, now_ns)?;
            }
        }
        txn.commit()?;
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if sync {
            self.last_sync = Instant::now();
            self.unsynced = false;
        } else {
            self.unsynced = true;
        }
        Ok(())
    }

    /// Answers a `Stored` pull from the committed records.
    fn read(
        &self,
        pull: &Pull,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<PullReply, redb::Error> {
        let PullQuery::Stored {
            from_pos,
            from_seq,
            from_ns,
            ref origins,
        } = pull.query
        else {
            return Err(redb::Error::Corrupted("not a Stored query".into()));
        };
        let log = self.tags.get(pull.tag.as_str());
        let (oldest, newest) = log.and_then(TagLog::span).unwrap_or((0, 0));
        let held = log.map_or(0, TagLog::len);
        let mut reply = PullReply {
            req: pull.req,
            status: PullStatus::Complete,
            oldest,
            newest,
            held: u32::try_from(held).unwrap_or(u32::MAX),
            events: Vec::new(),
        };
        if held == 0 {
            return Ok(reply);
        }
        let txn = self.db.begin_read()?;
        let table = txn.open_table(EVENTS)?;
        let mut bytes = 0usize;
        let tag = pull.tag.as_str();
        // Records stored long before the earliest source time asked for
        // are skipped by position (a resume asks from a moment ago).
        let from_pos = from_pos.max(log.and_then(|l| l.seek(from_ns)).unwrap_or(0));
        for item in table.range((tag, from_pos)..=(tag, u64::MAX))? {
            let (k, v) = item?;
            let (_, pos) = k.value();
            let Ok(rec) = StoreRecord::decode(v.value()) else {
                continue;
            };
            let Ok(ev) = EventRef::parse(&rec.event) else {
                continue;
            };
            if ev.seq < from_seq || ev.source_time_ns < from_ns || !origins.selects(rec.origin) {
                continue;
            }
            let cost = rec.event.len() + 4;
            if !reply.events.is_empty()
                && (reply.events.len() >= max_events || bytes + cost > max_bytes)
            {
                reply.status = PullStatus::More { next: pos };
                break;
            }
            bytes += cost;
            reply.events.push(rec.event);
        }
        Ok(reply)
    }
}
