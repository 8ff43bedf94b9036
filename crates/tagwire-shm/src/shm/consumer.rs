//! The consumer side of a stream: an entry in the stream's control area,
//! reading descriptors in order under a hazard, blocking and non-blocking
//! waits, and the samples it hands out.
#![allow(unsafe_code)]

use super::*;

impl Region {
    /// Takes a consumer entry of `stream` (free, or held by a dead process).
    pub fn consumer(&self, stream: u32, cfg: ConsumerConfig) -> Result<Consumer, Error> {
        if stream >= self.map.layout.stream_count {
            return Err(Error::Unavailable {
                what: "stream",
                index: stream as u64,
            });
        }
        let me = my_pid();
        for i in 0..self.map.layout.consumers_max {
            let e = self.map.entry(stream, i);
            let holder = e.pid.load(SeqCst);
            if holder != 0 && !pid_gone(holder) {
                continue;
            }
            if e.pid.compare_exchange(holder, me, SeqCst, SeqCst).is_err() {
                continue;
            }
            // Inactive while the cursor is set, so the producer never sees a stale one.
            e.active.store(0, SeqCst);
            e.hazard.store(0, SeqCst);
            e.spool_to.store(0, SeqCst);
            let head = self.map.ctl(stream).head.0.load(SeqCst);
            e.cursor.store(head, SeqCst);
            e.active.store(1, SeqCst);
            return Ok(Consumer {
                map: self.map.clone(),
                stream,
                at: self.map.stream_at(stream),
                entry: i,
                cursor: head,
                spool_to: 0,
                liveness_ns: cfg.liveness_interval_ns,
                last_check: None,
                broken: None,
                stats: ConsumerStats::default(),
            });
        }
        Err(Error::Unavailable {
            what: "consumer entry (all taken), consumers_max",
            index: self.map.layout.consumers_max as u64,
        })
    }
}

/// How a consumer behaves.
#[derive(Clone, Copy, Debug)]
pub struct ConsumerConfig {
    /// How often (ns of the caller's clock) an idle consumer checks that the producer lives.
    pub liveness_interval_ns: u64,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            liveness_interval_ns: 100_000_000,
        }
    }
}

/// Counters of a consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Delivered and skipped packets, by reason.
    pub counts: ConsumerCounts,
    /// Packets reclaimed while being read (`Expired` returned).
    pub torn: u64,
    /// Futex waits (ring empty, blocking receive).
    pub futex_waits: u64,
    /// Futex wakes issued (the producer was asleep).
    pub futex_wakes: u64,
}

/// One consumer of a stream: reads packets in place, in order.
pub struct Consumer {
    pub(super) map: Arc<Mapping>,
    stream: u32,
    at: StreamAt,
    entry: u32,
    cursor: u64,
    spool_to: u64,
    liveness_ns: u64,
    last_check: Option<u64>,
    broken: Option<(u32, state::Corruption)>,
    stats: ConsumerStats,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("stream", &self.stream)
            .field("cursor", &self.cursor)
            .finish()
    }
}

/// A packet ready to hand out (plain values, no borrow).
#[derive(Clone, Copy)]
struct Ready {
    seq: u64,
    chunk: u32,
    len: u64,
    vtime: u64,
    deadline: u64,
}

impl Consumer {
    /// Attaches to stream 0 of the region in `fd` (checks size, header and seals).
    pub fn attach(fd: OwnedFd, cfg: ConsumerConfig) -> Result<Self, Error> {
        Region::attach(fd)?.consumer(0, cfg)
    }

    /// This consumer's counters.
    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }

    /// Sequence number of the next packet it will look at.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The region this stream lives in (to open a relay's producer on another stream).
    pub fn region(&self) -> Region {
        Region {
            map: self.map.clone(),
        }
    }

    /// Asks the producer not to produce before virtual time `vtime`, and skips
    /// packets before it meanwhile (DSI's "spool forward").
    pub fn spool_forward(&mut self, vtime: u64) {
        self.spool_to = vtime;
        self.map
            .entry(self.stream, self.entry)
            .spool_to
            .store(vtime, SeqCst);
    }

    fn publish_cursor(&self) {
        let e = self.map.entry(self.stream, self.entry);
        e.cursor.store(self.cursor, SeqCst);
        let w = &self.map.ctl(self.stream).producer_wait.0;
        if w.waiters.load(SeqCst) > 0 {
            wake_all(w);
        }
    }

    fn idle_error(&mut self, now: u64) -> Error {
        let owner = &self.map.ctl(self.stream).owner.0;
        if owner.closed.load(SeqCst) == 1 {
            return Error::Closed;
        }
        if self
            .last_check
            .is_none_or(|t| now.saturating_sub(t) >= self.liveness_ns)
        {
            self.last_check = Some(now);
            let pid = owner.pid.load(SeqCst);
            if pid != 0 && pid_gone(pid) {
                return Error::ProducerGone { pid };
            }
        }
        Error::Empty
    }

    /// The next packet to deliver (its hazard set), or why there is none.
    #[inline]
    fn advance(&mut self, now: u64) -> Result<Ready, Error> {
        // The well-synchronised case first: the packet under the cursor is
        // published, valid and wanted. Anything else (nothing published, lag,
        // skips, corruption, a stream broken before) goes to `advance_steps`,
        // which reads the descriptor afresh and applies `consumer_step`.
        let map = &*self.map;
        let g = map.layout.geometry;
        let cursor = self.cursor;
        let head = map.ctl_at(&self.at).head.0.load(SeqCst);
        if self.broken.is_none() && cursor < head && head - cursor <= g.slots as u64 {
            let i = g.slot_of(cursor) as u32;
            let slot = map.slot_at(&self.at, i);
            let d = snapshot(slot);
            if d.stamp >> 8 == cursor
                && d.stamp & 0xff == SlotState::Published as u64
                && now < d.deadline
                && d.vtime >= self.spool_to
            {
                if let Ok(chunk) = g.chunk_of(&d) {
                    let e = map.entry_at(&self.at, self.entry);
                    // SeqCst store, then the stamp again: the consumer's half
                    // of the hazard hand-shake (the producer stamps, SeqCst,
                    // then loads hazards), so either the producer sees the
                    // hazard or this re-check sees its new stamp.
                    e.hazard.store(chunk as u64 + 1, SeqCst);
                    fence(Acquire);
                    if slot.stamp.load(SeqCst) == d.stamp {
                        self.stats.counts.delivered += 1;
                        return Ok(Ready {
                            seq: cursor,
                            chunk,
                            len: d.len,
                            vtime: d.vtime,
                            deadline: d.deadline,
                        });
                    }
                    // Reclaimed under us: never hand out what may be torn.
                    e.hazard.store(0, SeqCst);
                    return Err(self.torn());
                }
            }
        }
        self.advance_steps(now)
    }

    /// The packet under the cursor was reclaimed while its hazard was set:
    /// counted, passed over, `Expired`.
    #[cold]
    fn torn(&mut self) -> Error {
        self.stats.torn += 1;
        let seq = self.cursor;
        self.cursor += 1;
        self.publish_cursor();
        Error::Expired { seq }
    }

    /// `advance` in the general case: steps through the ring with `consumer_step`.
    #[inline(never)]
    fn advance_steps(&mut self, now: u64) -> Result<Ready, Error> {
        if let Some((slot, c)) = self.broken {
            let (what, value) = c.describe();
            return Err(Error::Corrupt { slot, what, value });
        }
        let g = self.map.layout.geometry;
        let start = self.cursor;
        for _ in 0..2 * g.slots as u64 + 2 {
            let head = self.map.ctl(self.stream).head.0.load(SeqCst);
            let i = g.slot_of(self.cursor) as u32;
            let slot = self.map.slot(self.stream, i);
            let d = snapshot(slot);
            match consumer_step(&g, self.cursor, head, &d, now, self.spool_to) {
                Step::Empty => {
                    if self.cursor != start {
                        self.publish_cursor();
                    }
                    return Err(self.idle_error(now));
                }
                Step::Lagged { to } => {
                    self.stats.counts.lost += to - self.cursor;
                    self.cursor = to;
                }
                Step::Skip(why) => {
                    self.stats.counts.skip(why);
                    self.cursor += 1;
                }
                Step::Corrupt(c) => {
                    self.broken = Some((i, c));
                    let e = self.map.entry(self.stream, self.entry);
                    e.active.store(0, SeqCst);
                    e.hazard.store(0, SeqCst);
                    let (what, value) = c.describe();
                    return Err(Error::Corrupt {
                        slot: i,
                        what,
                        value,
                    });
                }
                Step::Deliver { chunk } => {
                    let e = self.map.entry(self.stream, self.entry);
                    // The hazard hand-shake, as in `advance`.
                    e.hazard.store(chunk as u64 + 1, SeqCst);
                    fence(Acquire);
                    if slot.stamp.load(SeqCst) != d.stamp {
                        // Reclaimed under us: never hand out what may be torn.
                        e.hazard.store(0, SeqCst);
                        return Err(self.torn());
                    }
                    self.stats.counts.delivered += 1;
                    return Ok(Ready {
                        seq: self.cursor,
                        chunk,
                        len: d.len,
                        vtime: d.vtime,
                        deadline: d.deadline,
                    });
                }
            }
        }
        // Bounded: a consumer passes at most two rings per call; the rest waits for the next call.
        self.publish_cursor();
        Err(Error::Empty)
    }

    #[inline]
    fn sample(&mut self, r: Ready) -> Sample<'_> {
        // SAFETY: chunk < chunks and len <= chunk_bytes (Geometry::chunk_of);
        // the hazard set in `advance` keeps the chunk from being reallocated
        // and written until the sample is dropped; the producer finished
        // writing before publishing (Release/Acquire on the stamp).
        let data =
            unsafe { std::slice::from_raw_parts(self.map.chunk_ptr(r.chunk), r.len as usize) };
        Sample {
            seq: r.seq,
            chunk: r.chunk,
            vtime: r.vtime,
            deadline: r.deadline,
            data,
            consumer: self,
        }
    }

    /// The next valid packet, without blocking: `Empty` when there is none,
    /// `Expired` if one was reclaimed while being read (call again for the next).
    #[inline(always)]
    pub fn next(&mut self, now_ns: u64) -> Result<Sample<'_>, Error> {
        let r = self.advance(now_ns)?;
        Ok(self.sample(r))
    }

    /// Like [`Consumer::next`], but sleeps on a futex while the ring is empty,
    /// up to `timeout`; `now` reads the caller's clock (ns) for deadlines.
    pub fn next_blocking(
        &mut self,
        timeout: Duration,
        now: impl Fn() -> u64,
    ) -> Result<Sample<'_>, Error> {
        let start = Instant::now();
        let map = self.map.clone();
        let ctl = map.ctl(self.stream);
        let w = &ctl.consumers_wait.0;
        loop {
            let seen = w.epoch.load(SeqCst);
            match self.advance(now()) {
                Ok(r) => return Ok(self.sample(r)),
                Err(Error::Empty) => {}
                Err(e) => return Err(e),
            }
            w.waiters.fetch_add(1, SeqCst);
            if ctl.head.0.load(SeqCst) > self.cursor || ctl.owner.0.closed.load(SeqCst) == 1 {
                w.waiters.fetch_sub(1, SeqCst);
                continue;
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                w.waiters.fetch_sub(1, SeqCst);
                return Err(Error::Timeout);
            }
            let slice = Duration::from_nanos(self.liveness_ns.max(1_000_000));
            let slept = Instant::now();
            futex_wait(w, seen, (timeout - elapsed).min(slice));
            self.stats.futex_waits += 1;
            w.waiters.fetch_sub(1, SeqCst);
            // A whole slice asleep (not woken by a packet): look at the
            // producer's pid on the next pass even if the caller's clock did
            // not move. After a wake-up, the pid check keeps its own pace.
            if slept.elapsed() >= slice {
                self.last_check = None;
            }
        }
    }

    /// Reads packet `seq` in place, out of order (random access by a
    /// descriptor that travelled elsewhere, e.g. over the daemon's socket):
    /// `Expired` if it was reclaimed, retracted, overwritten or is past its
    /// deadline (never torn data); `Empty` if it is not published yet;
    /// `Corrupt` for a malformed descriptor. The cursor only moves forward.
    pub fn read_at(&mut self, seq: u64, now_ns: u64) -> Result<Sample<'_>, Error> {
        let r = self.pin(seq, now_ns)?;
        Ok(self.sample(r))
    }

    /// Sets the hazard on packet `seq`'s chunk if it is deliverable; see [`Consumer::read_at`].
    fn pin(&mut self, seq: u64, now: u64) -> Result<Ready, Error> {
        let g = self.map.layout.geometry;
        let head = self.map.ctl(self.stream).head.0.load(SeqCst);
        if seq >= head {
            return Err(Error::Empty);
        }
        if head - seq > g.slots as u64 {
            self.stats.counts.lost += 1;
            return Err(Error::Expired { seq });
        }
        let i = g.slot_of(seq) as u32;
        let slot = self.map.slot(self.stream, i);
        let d = snapshot(slot);
        let Some(stamp) = Stamp::unpack(d.stamp) else {
            return Err(Error::Corrupt {
                slot: i,
                what: "unknown state",
                value: d.stamp & 0xff,
            });
        };
        if stamp.seq != seq || stamp.state != SlotState::Published || now >= d.deadline {
            self.stats.counts.expired += 1;
            return Err(Error::Expired { seq });
        }
        let chunk = g.chunk_of(&d).map_err(|c| {
            let (what, value) = c.describe();
            Error::Corrupt {
                slot: i,
                what,
                value,
            }
        })?;
        let e = self.map.entry(self.stream, self.entry);
        e.hazard.store(chunk as u64 + 1, SeqCst);
        fence(Acquire);
        if slot.stamp.load(SeqCst) != d.stamp {
            e.hazard.store(0, SeqCst);
            self.stats.torn += 1;
            return Err(Error::Expired { seq });
        }
        self.stats.counts.delivered += 1;
        Ok(Ready {
            seq,
            chunk,
            len: d.len,
            vtime: d.vtime,
            deadline: d.deadline,
        })
    }

    #[inline]
    fn release(&mut self, seq: u64) {
        let map = &*self.map;
        let e = map.entry_at(&self.at, self.entry);
        e.hazard.store(0, Release);
        self.cursor = self.cursor.max(seq + 1);
        // SeqCst store, then the producer's waiter count: the consumer's half
        // of the futex hand-shake (a producer going to sleep counts itself,
        // SeqCst, then re-reads the cursors), so one of the two sees the other.
        e.cursor.store(self.cursor, SeqCst);
        let w = &map.ctl_at(&self.at).producer_wait.0;
        if w.waiters.load(SeqCst) > 0 {
            wake_all(w);
            self.stats.futex_wakes += 1;
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let e = self.map.entry(self.stream, self.entry);
        e.active.store(0, SeqCst);
        e.hazard.store(0, SeqCst);
        e.pid.store(0, SeqCst);
        let w = &self.map.ctl(self.stream).producer_wait.0;
        if w.waiters.load(SeqCst) > 0 {
            wake_all(w);
        }
    }
}

/// A packet read in place; it stays valid (its chunk is not reused) until
/// dropped, and is then marked consumed.
pub struct Sample<'a> {
    seq: u64,
    pub(super) chunk: u32,
    vtime: u64,
    deadline: u64,
    pub(super) data: &'a [u8],
    pub(super) consumer: &'a mut Consumer,
}

impl Sample<'_> {
    /// The packet's sequence number in its stream.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// Its virtual time.
    pub fn vtime(&self) -> u64 {
        self.vtime
    }
    /// Its validity deadline (ns).
    pub fn deadline(&self) -> u64 {
        self.deadline
    }
}

impl Sample<'_> {
    /// Pins this packet in `row` (under the sample's hazard): its bytes stay
    /// readable through the returned [`Pin`] after the sample is dropped and
    /// its slot reused.
    pub fn pin_to(&self, row: &PinRow) -> Result<Pin, Error> {
        Pin::record(&self.consumer.map, row, self.chunk, self.data.len())
    }
}

impl std::ops::Deref for Sample<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.data
    }
}

impl Drop for Sample<'_> {
    #[inline]
    fn drop(&mut self) {
        self.consumer.release(self.seq);
    }
}
