//! The producer side of a stream: loans of data chunks, publishing a
//! descriptor, the overload policies, reclaiming chunks whose consumers are
//! gone.
#![allow(unsafe_code)]

use super::*;

impl Region {
    /// Takes the producer role of `stream` (free, or held by a dead process: then
    /// an abandoned loan is reclaimed and never delivered).
    pub fn producer(&self, stream: u32, cfg: ProducerConfig) -> Result<Producer, Error> {
        if stream >= self.map.layout.stream_count {
            return Err(Error::Unavailable {
                what: "stream",
                index: stream as u64,
            });
        }
        let me = my_pid();
        let ctl = self.map.ctl(stream);
        let mut holder = ctl.owner.0.pid.load(SeqCst);
        loop {
            if holder != 0 && !pid_gone(holder) {
                return Err(Error::Unavailable {
                    what: "producer of a stream held by pid",
                    index: holder as u64,
                });
            }
            match ctl.owner.0.pid.compare_exchange(holder, me, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(h) => holder = h,
            }
        }
        ctl.owner.0.closed.store(0, SeqCst);
        Ok(Producer::new(self.map.clone(), stream, cfg))
    }
}

/// How a producer behaves at the limits.
#[derive(Clone, Copy, Debug)]
pub struct ProducerConfig {
    /// Drop the oldest packet or block when the ring is full of unconsumed valid packets.
    pub overload: Overload,
    /// With `Block`: how long a loan waits before `Timeout` (zero: report `Full` at once).
    pub block_timeout: Duration,
    /// How often (ns of the caller's clock) to look for dead consumers while blocked.
    pub liveness_interval_ns: u64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            overload: Overload::DropOldest,
            block_timeout: Duration::ZERO,
            liveness_interval_ns: 100_000_000,
        }
    }
}

/// Counters of a producer (this handle's view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Published, dropped, expired, retracted packets.
    pub counts: ProducerCounts,
    /// Futex waits (ring full, `Block`).
    pub futex_waits: u64,
    /// Futex wakes issued (a consumer was asleep).
    pub futex_wakes: u64,
    /// Dead consumers whose entries were freed.
    pub reaped: u64,
}

#[derive(Clone, Copy, Debug)]
struct Shadow {
    seq: u64,
    state: SlotState,
    chunk: u32,
    deadline: u64,
}

impl Shadow {
    /// Whether the slot holds a reference to `chunk` (a packet or a loan in it).
    #[inline]
    fn holds_chunk(&self) -> bool {
        matches!(self.state, SlotState::Published | SlotState::Writing)
    }
}

/// The producer of one stream (one per stream at a time).
pub struct Producer {
    map: Arc<Mapping>,
    stream: u32,
    at: StreamAt,
    cfg: ProducerConfig,
    head: u64,
    /// What this producer wrote into each slot: never re-read from shared memory.
    shadow: Vec<Shadow>,
    min_cursor_cache: u64,
    hint: u32,
    last_reap: Option<u64>,
    stats: ProducerStats,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("stream", &self.stream)
            .field("head", &self.head)
            .finish()
    }
}

impl Producer {
    fn new(map: Arc<Mapping>, stream: u32, cfg: ProducerConfig) -> Self {
        let g = map.layout.geometry;
        let head = map.ctl(stream).head.0.load(SeqCst).min(MAX_SEQ);
        let mut shadow = Vec::with_capacity(g.slots as usize);
        // Take over what a previous producer left: published packets stay
        // (their chunks referenced), an abandoned Writing slot is retracted.
        for i in 0..g.slots {
            let s = map.slot(stream, i);
            let d = snapshot(s);
            let mut sh = Shadow {
                seq: 0,
                state: SlotState::Free,
                chunk: 0,
                deadline: 0,
            };
            if let (Some(st), Ok(chunk)) = (Stamp::unpack(d.stamp), g.chunk_of(&d)) {
                if g.slot_of(st.seq) == i as u64 && st.seq <= head {
                    sh = Shadow {
                        seq: st.seq,
                        state: st.state,
                        chunk,
                        deadline: d.deadline,
                    };
                    if st.state == SlotState::Writing {
                        s.stamp.store(
                            Stamp {
                                seq: st.seq,
                                state: SlotState::Retracted,
                            }
                            .pack(),
                            SeqCst,
                        );
                        release_ref(map.chunk_meta(chunk));
                        sh.state = SlotState::Retracted;
                    }
                }
            }
            shadow.push(sh);
        }
        Self {
            at: map.stream_at(stream),
            map,
            stream,
            cfg,
            head,
            shadow,
            min_cursor_cache: 0,
            hint: 0,
            last_reap: None,
            stats: ProducerStats::default(),
        }
    }

    /// This handle's counters.
    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// Sequence number the next packet gets.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The region this stream lives in (to create more streams' handles over its data area).
    pub fn region(&self) -> Region {
        Region {
            map: self.map.clone(),
        }
    }

    fn ctl(&self) -> &StreamCtl {
        self.map.ctl_at(&self.at)
    }

    fn scan_min_cursor(&mut self) -> Option<u64> {
        let mut min = None::<u64>;
        for i in 0..self.map.layout.consumers_max {
            let e = self.map.entry(self.stream, i);
            if e.active.load(SeqCst) == 1 {
                let c = e.cursor.load(SeqCst);
                min = Some(min.map_or(c, |m| m.min(c)));
            }
        }
        self.min_cursor_cache = min.unwrap_or(self.head);
        min
    }

    /// Frees the entries of consumers whose process is gone; returns how many.
    pub fn reap_dead_consumers(&mut self) -> u64 {
        let mut n = 0;
        for i in 0..self.map.layout.consumers_max {
            let e = self.map.entry(self.stream, i);
            let pid = e.pid.load(SeqCst);
            if pid != 0 && e.active.load(SeqCst) == 1 && pid_gone(pid) {
                e.active.store(0, SeqCst);
                e.hazard.store(0, SeqCst);
                if e.pid.compare_exchange(pid, 0, SeqCst, SeqCst).is_ok() {
                    n += 1;
                }
            }
        }
        self.stats.reaped += n;
        n
    }

    /// Decides whether the slot of `self.head`, holding `old`, may be
    /// reused; waits (Block) as configured. The caller counts the decision
    /// ([`Producer::count`]) once the slot is really taken.
    #[inline]
    fn make_room(&mut self, old: Shadow, now: u64) -> Result<Reuse, Error> {
        let stamp = Stamp {
            seq: old.seq,
            state: old.state,
        };
        // Cached lower bound first: the well-synchronised path reads no
        // consumer line (and never has to wait: every cursor is past it).
        if self.min_cursor_cache > old.seq {
            let m = Some(self.min_cursor_cache);
            return Ok(reuse(stamp, old.deadline, m, now, self.cfg.overload));
        }
        self.make_room_scan(stamp, old.deadline, now)
    }

    #[inline(never)]
    fn make_room_scan(&mut self, stamp: Stamp, deadline: u64, now: u64) -> Result<Reuse, Error> {
        let m = self.scan_min_cursor();
        match reuse(stamp, deadline, m, now, self.cfg.overload) {
            Reuse::Wait => self.wait_for_room(stamp, deadline, now),
            decision => Ok(decision),
        }
    }

    /// Accounts for the old packet of a slot just taken.
    #[inline]
    fn count(counts: &mut ProducerCounts, decision: Reuse) {
        match decision {
            Reuse::Dropped => counts.dropped += 1,
            Reuse::Expired => counts.expired += 1,
            Reuse::Vacant | Reuse::Consumed | Reuse::Wait => {}
        }
    }

    fn wait_for_room(&mut self, stamp: Stamp, deadline: u64, now: u64) -> Result<Reuse, Error> {
        if self
            .last_reap
            .is_none_or(|t| now.saturating_sub(t) >= self.cfg.liveness_interval_ns)
        {
            self.last_reap = Some(now);
            if self.reap_dead_consumers() > 0 {
                let m = self.scan_min_cursor();
                let d = reuse(stamp, deadline, m, now, self.cfg.overload);
                if d != Reuse::Wait {
                    return Ok(d);
                }
            }
        }
        if self.cfg.block_timeout.is_zero() {
            return Err(Error::Full);
        }
        let start = Instant::now();
        let slice = Duration::from_nanos(self.cfg.liveness_interval_ns.max(1_000_000));
        loop {
            let map = self.map.clone();
            let w = &map.ctl(self.stream).producer_wait.0;
            let seen = w.epoch.load(SeqCst);
            w.waiters.fetch_add(1, SeqCst);
            let m = self.scan_min_cursor();
            let d = reuse(stamp, deadline, m, now, self.cfg.overload);
            if d != Reuse::Wait {
                w.waiters.fetch_sub(1, SeqCst);
                return Ok(d);
            }
            let elapsed = start.elapsed();
            if elapsed >= self.cfg.block_timeout {
                w.waiters.fetch_sub(1, SeqCst);
                return Err(Error::Timeout);
            }
            futex_wait(w, seen, (self.cfg.block_timeout - elapsed).min(slice));
            self.stats.futex_waits += 1;
            w.waiters.fetch_sub(1, SeqCst);
            if start.elapsed() >= slice {
                self.reap_dead_consumers();
            }
        }
    }

    #[inline]
    fn check_seq(&self) -> Result<(), Error> {
        if self.head >= MAX_SEQ {
            return Err(Error::InvalidConfig {
                what: "sequence numbers exhausted at",
                value: self.head,
            });
        }
        Ok(())
    }

    /// Stamps `slot` `(seq, Writing)`. SeqCst: this store must be ordered
    /// before the loads that follow (the old chunk's reference drop, the
    /// allocator's or `exclusive`'s hazard loads), so a consumer that still
    /// reads the old packet either fails its stamp re-check or is seen.
    #[inline]
    fn stamp_writing(slot: &Slot, seq: u64) {
        slot.stamp.store(
            Stamp {
                seq,
                state: SlotState::Writing,
            }
            .pack(),
            SeqCst,
        );
    }

    /// Records slot `i` as Writing packet `seq` in `chunk` (its offset in
    /// the descriptor, and the shadow).
    #[inline]
    fn claimed(shadow: &mut [Shadow], map: &Mapping, slot: &Slot, i: u32, seq: u64, chunk: u32) {
        slot.offset
            .store(chunk as u64 * map.layout.geometry.chunk_bytes, Relaxed);
        shadow[i as usize] = Shadow {
            seq,
            state: SlotState::Writing,
            chunk,
            deadline: 0,
        };
    }

    /// Claims the slot of `self.head` for `chunk` (reference already held): state Writing.
    fn claim(&mut self, chunk: u32, now: u64) -> Result<(), Error> {
        self.check_seq()?;
        let (seq, i) = (
            self.head,
            self.map.layout.geometry.slot_of(self.head) as u32,
        );
        let old = self.shadow[i as usize];
        let decision = self.make_room(old, now)?;
        // The new stamp goes out before the old chunk's reference is dropped:
        // a reader of the old packet then fails its check, or the allocator sees its hazard.
        Self::stamp_writing(self.map.slot_at(&self.at, i), seq);
        self.claimed_fresh(old, decision, chunk);
        Ok(())
    }

    /// The well-synchronised loan, all in registers: the slot of `head`
    /// holds a packet every consumer has read (the cached lower bound of the
    /// cursors says so: `reuse` would say Consumed, nothing to count) whose
    /// chunk nothing else holds; the slot keeps that chunk for the new
    /// packet (see [`Producer::claim_for_loan`]). Returns the chunk's offset
    /// in the mapping, or `None` for the general path (which finds the slot
    /// as it was, or retracted if no chunk was left for it).
    #[inline]
    fn claim_kept(&mut self, len: usize) -> Option<usize> {
        let map = &*self.map;
        let g = map.layout.geometry;
        let (seq, i) = (self.head, g.slot_of(self.head) as u32);
        let old = *self.shadow.get(i as usize)?;
        if len as u64 > g.chunk_bytes
            || seq >= MAX_SEQ
            || old.state != SlotState::Published
            || self.min_cursor_cache <= old.seq
            || map.layout.stream_count != 1
            || map.chunk_meta(old.chunk).refs.load(Relaxed) != 1
            || map.hazard_held(old.chunk)
        {
            return None;
        }
        let slot = map.slot_at(&self.at, i);
        Self::stamp_writing(slot, seq);
        if !map.exclusive(old.chunk) {
            let chunk = self.claim_stamped(old, Reuse::Consumed).ok()?;
            return Some(self.map.chunk_off(chunk));
        }
        Self::claimed(&mut self.shadow, map, slot, i, seq, old.chunk);
        Some(map.chunk_off(old.chunk))
    }

    /// A loan in the general case ([`Producer::claim_for_loan`]); returns the chunk's offset.
    #[inline(never)]
    fn claim_loan(&mut self, len: usize, now: u64) -> Result<usize, Error> {
        let max = self.map.layout.geometry.chunk_bytes;
        if len as u64 > max {
            return Err(Error::PacketTooLarge {
                len: len as u64,
                max,
            });
        }
        let chunk = self.claim_for_loan(now)?;
        Ok(self.map.chunk_off(chunk))
    }

    /// Claims the slot of `self.head` for a loan; returns the chunk to write.
    ///
    /// The well-synchronised path keeps the slot's own chunk: once the slot
    /// is stamped Writing nobody can start reading the old packet, and if no
    /// consumer still reads it and no pin holds it ([`Mapping::exclusive`])
    /// the slot's reference becomes the loan's. That saves the two locked
    /// read-modify-writes of dropping the old reference and allocating.
    /// Only in a region of one stream: there every descriptor naming the
    /// chunk is this producer's, so none can be made (by `forward`) while
    /// the check runs. Otherwise, or if the chunk is visibly in use, a free
    /// chunk is allocated first, so a loan refused with `OutOfChunks`
    /// leaves the ring as it was (unless a reader took the chunk between the
    /// look before the stamp and the one after: [`Producer::claim_stamped`]).
    fn claim_for_loan(&mut self, now: u64) -> Result<u32, Error> {
        self.check_seq()?;
        let (seq, i) = (
            self.head,
            self.map.layout.geometry.slot_of(self.head) as u32,
        );
        let old = self.shadow[i as usize];
        let decision = self.make_room(old, now)?;
        let map = &*self.map;
        let slot = map.slot_at(&self.at, i);
        if old.holds_chunk()
            && map.layout.stream_count == 1
            && map.chunk_meta(old.chunk).refs.load(Relaxed) == 1
            && !map.hazard_held(old.chunk)
        {
            Self::stamp_writing(slot, seq);
            if !map.exclusive(old.chunk) {
                return self.claim_stamped(old, decision);
            }
            // The slot's reference is the loan's now: nothing to drop.
            Self::count(&mut self.stats.counts, decision);
            Self::claimed(&mut self.shadow, map, slot, i, seq, old.chunk);
            return Ok(old.chunk);
        }
        let chunk = map.alloc_chunk(&mut self.hint).ok_or(Error::OutOfChunks)?;
        Self::stamp_writing(slot, seq);
        self.claimed_fresh(old, decision, chunk);
        Ok(chunk)
    }

    /// The slot of `head` is stamped Writing and holds `chunk` (a reference
    /// the caller took); `old` was there before. The descriptor names the
    /// new chunk before the old one's reference goes: a producer that takes
    /// over after a crash here drops the reference of the chunk the
    /// descriptor names, never one twice.
    fn claimed_fresh(&mut self, old: Shadow, decision: Reuse, chunk: u32) {
        let map = &*self.map;
        let (seq, i) = (self.head, map.layout.geometry.slot_of(self.head) as u32);
        Self::count(&mut self.stats.counts, decision);
        Self::claimed(
            &mut self.shadow,
            map,
            map.slot_at(&self.at, i),
            i,
            seq,
            chunk,
        );
        if old.holds_chunk() {
            release_ref(map.chunk_meta(old.chunk));
        }
    }

    /// The slot of `head` is stamped Writing, but its old chunk turned out
    /// to be read or pinned after all (since the look before the stamp): a
    /// free chunk then, or, with none left, the slot stays retracted (its
    /// old packet is gone anyway; `decision` is counted) and `OutOfChunks`.
    #[cold]
    #[inline(never)]
    fn claim_stamped(&mut self, old: Shadow, decision: Reuse) -> Result<u32, Error> {
        if let Some(chunk) = self.map.alloc_chunk(&mut self.hint) {
            self.claimed_fresh(old, decision, chunk);
            return Ok(chunk);
        }
        let map = &*self.map;
        let (seq, i) = (self.head, map.layout.geometry.slot_of(self.head) as u32);
        map.slot_at(&self.at, i).stamp.store(
            Stamp {
                seq,
                state: SlotState::Retracted,
            }
            .pack(),
            SeqCst,
        );
        release_ref(map.chunk_meta(old.chunk));
        self.shadow[i as usize] = Shadow {
            seq,
            state: SlotState::Retracted,
            chunk: old.chunk,
            deadline: 0,
        };
        Self::count(&mut self.stats.counts, decision);
        Err(Error::OutOfChunks)
    }

    /// Makes the claimed packet visible and wakes sleeping consumers.
    #[inline]
    fn finish(&mut self, len: u64, vtime: u64, deadline: u64) -> u64 {
        let seq = self.head;
        let i = self.map.layout.geometry.slot_of(seq) as u32;
        let map = &*self.map;
        let slot = map.slot_at(&self.at, i);
        slot.len.store(len, Relaxed);
        slot.vtime.store(vtime, Relaxed);
        slot.deadline.store(deadline, Relaxed);
        slot.stamp.store(
            Stamp {
                seq,
                state: SlotState::Published,
            }
            .pack(),
            Release,
        );
        let sh = &mut self.shadow[i as usize];
        sh.state = SlotState::Published;
        sh.deadline = deadline;
        self.head = seq + 1;
        let ctl = map.ctl_at(&self.at);
        // SeqCst store, then the waiter count: the producer's half of the
        // futex hand-shake (a consumer going to sleep counts itself, SeqCst,
        // then re-reads the head), so one of the two sees the other.
        ctl.head.0.store(self.head, SeqCst);
        if ctl.consumers_wait.0.waiters.load(SeqCst) > 0 {
            wake_all(&ctl.consumers_wait.0);
            self.stats.futex_wakes += 1;
        }
        self.stats.counts.published += 1;
        seq
    }

    /// Lends a writable buffer of `len` bytes in the data area (a slot in state
    /// Writing); publish it with [`Loan::publish`]. Dropping the loan retracts it.
    #[inline(always)]
    pub fn loan(&mut self, len: usize, now_ns: u64) -> Result<Loan<'_>, Error> {
        let off = match self.claim_kept(len) {
            Some(off) => off,
            None => self.claim_loan(len, now_ns)?,
        };
        let seq = self.head;
        Ok(Loan {
            producer: self,
            off,
            len,
            seq,
            published: false,
        })
    }

    /// Copies `bytes` into a loan and publishes it; returns its sequence number.
    pub fn publish_copy(
        &mut self,
        bytes: &[u8],
        vtime: u64,
        deadline_ns: u64,
        now_ns: u64,
    ) -> Result<u64, Error> {
        let mut loan = self.loan(bytes.len(), now_ns)?;
        loan.copy_from_slice(bytes);
        Ok(loan.publish(vtime, deadline_ns))
    }

    /// Forwards a sample of another stream of the same region without copying
    /// (DSI memory chaining): the new descriptor points at the same chunk.
    pub fn forward(
        &mut self,
        sample: &Sample<'_>,
        vtime: u64,
        deadline_ns: u64,
        now_ns: u64,
    ) -> Result<u64, Error> {
        if !Arc::ptr_eq(&self.map, &sample.consumer.map) {
            return Err(Error::OtherRegion);
        }
        // The sample's hazard keeps the chunk from being reallocated meanwhile.
        self.map.chunk_meta(sample.chunk).refs.fetch_add(1, SeqCst);
        if let Err(e) = self.claim(sample.chunk, now_ns) {
            release_ref(self.map.chunk_meta(sample.chunk));
            return Err(e);
        }
        Ok(self.finish(sample.data.len() as u64, vtime, deadline_ns))
    }

    /// Retracts packet `seq` if it is still published (consumers skip it, one
    /// reading it gets `Expired`); says whether it was.
    pub fn retract(&mut self, seq: u64) -> bool {
        let i = self.map.layout.geometry.slot_of(seq) as usize;
        let sh = self.shadow[i];
        if seq >= self.head || sh.seq != seq || sh.state != SlotState::Published {
            return false;
        }
        self.set_gone(i as u32, SlotState::Retracted);
        self.stats.counts.retracted += 1;
        true
    }

    /// Reclaims every published packet whose deadline passed (frees its chunk); returns how many.
    pub fn reclaim_expired(&mut self, now_ns: u64) -> u64 {
        let mut n = 0;
        for i in 0..self.shadow.len() {
            let sh = self.shadow[i];
            if sh.state == SlotState::Published && now_ns >= sh.deadline {
                self.set_gone(i as u32, SlotState::Expired);
                n += 1;
            }
        }
        self.stats.counts.expired += n;
        n
    }

    fn set_gone(&mut self, i: u32, state: SlotState) {
        let sh = &mut self.shadow[i as usize];
        let slot = self.map.slot(self.stream, i);
        slot.stamp
            .store(Stamp { seq: sh.seq, state }.pack(), SeqCst);
        release_ref(self.map.chunk_meta(sh.chunk));
        sh.state = state;
    }

    /// The lowest spool-forward target of the attached consumers (virtual time):
    /// packets before it need not be produced (DSI §4.1). 0 when none asked.
    pub fn spool_target(&self) -> u64 {
        (0..self.map.layout.consumers_max)
            .map(|i| self.map.entry(self.stream, i))
            .filter(|e| e.active.load(SeqCst) == 1)
            .map(|e| e.spool_to.load(SeqCst))
            .min()
            .unwrap_or(0)
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let ctl = self.ctl();
        ctl.owner.0.closed.store(1, SeqCst);
        ctl.owner.0.pid.store(0, SeqCst);
        wake_all(&ctl.consumers_wait.0);
    }
}

/// A writable packet buffer in the data area, not yet visible to consumers.
pub struct Loan<'a> {
    producer: &'a mut Producer,
    /// The chunk's offset in the mapping (`Mapping::chunk_off`).
    off: usize,
    len: usize,
    seq: u64,
    published: bool,
}

impl Loan<'_> {
    /// The sequence number the packet will have.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Publishes the packet with its virtual time and validity deadline; returns its sequence number.
    #[inline(always)]
    pub fn publish(mut self, vtime: u64, deadline_ns: u64) -> u64 {
        self.published = true;
        self.producer.finish(self.len as u64, vtime, deadline_ns)
    }
}

impl std::ops::Deref for Loan<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `off` is chunk_off of a checked chunk index, len <=
        // chunk_bytes, so the bytes lie inside the mapping; the chunk is this
        // loan's alone (its one reference taken by alloc_chunk or kept from
        // the slot under `exclusive`, no hazard, not published).
        unsafe { std::slice::from_raw_parts(self.producer.map.base.add(self.off), self.len) }
    }
}

impl std::ops::DerefMut for Loan<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.producer.map.base.add(self.off), self.len) }
    }
}

impl Drop for Loan<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.published {
            let i = self.producer.map.layout.geometry.slot_of(self.seq) as u32;
            self.producer.set_gone(i, SlotState::Retracted);
        }
    }
}
