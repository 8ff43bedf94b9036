//! Resuming a subscription of a durable tag after a reconnect, from the
//! last event it handed to the application (issue 25, item 4;
//! docs/reliability.md, "Resumed after a restart of the daemon").
//!
//! A daemon that restarted (or was killed with SIGKILL) has lost what it
//! held for the subscription in memory — the events it had not had
//! acknowledged, those parked while the connection was down — and nothing
//! published between its restart and the library's new `Subscribe`
//! reaches the subscription. Its durable store has them all. So after
//! every reconnect the library replays the tag from the store, from a
//! little before the last event it delivered, through the replay seam
//! (`seam.rs`; the replay itself is `replay.rs`'s, handed in): the new subscription's live events are held while
//! the replay runs, and what was already delivered is dropped by a dedupe
//! of everything handed over (per publisher: sequence number and source
//! time, core's [`Dedupe`]). Whether the daemon restarted or resumed the
//! parked subscription does not matter: in both cases the store and the
//! held events hold everything not yet delivered, and the dedupe drops
//! the rest.
//!
//! Where the replay starts: the earliest, over the publishers remembered,
//! of the source time of the last event delivered of each (every event not
//! delivered yet of such a publisher is later: source times grow per
//! publisher), less [`RESUME_MARGIN`]; when nothing was delivered yet,
//! where the application's own replay started, or the time the
//! subscription was made less the margin.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tagwire_core::reliable::{Dedupe, Seen};
use tagwire_core::store::ReplayFrom;

use crate::deliver::Deliver;
use crate::error::Error;
use crate::sample::Sample;
use crate::seam::Seam;
use crate::spacing::Spacing;
use crate::sync::lock;

/// How far before the last delivered event's source time a resume replay
/// starts (clock differences between publishers, events published in the
/// same nanosecond).
pub const RESUME_MARGIN: Duration = Duration::from_secs(1);

/// Publishers a resumable subscription remembers (about 160 bytes each:
/// ~650 KB at the bound; at the bound the least recently heard half is
/// forgotten, and an event of a forgotten publisher replayed again is
/// delivered again).
pub(crate) const RESUME_PUBLISHERS: usize = 4096;

struct State<D> {
    /// Everything handed to the application, per publisher.
    delivered: Dedupe,
    /// Bumped by each replay started: a replay thread of an older one
    /// (its connection was lost) delivers nothing more.
    generation: u64,
    /// The seam of the replay under way (or the last one, live).
    seam: Option<Arc<Seam<Resumed<D>>>>,
    /// Where the application's replay started (until something is delivered).
    first: Option<ReplayFrom>,
    /// Wall-clock ns when the subscription was made.
    made_at: u64,
}

/// Where a replay that resumes from `point` starts.
pub(crate) fn start_of(point: &ResumePoint) -> Option<ReplayFrom> {
    let margin = RESUME_MARGIN.as_nanos() as u64;
    point
        .oldest_time()
        .map(|t| ReplayFrom::Time(t.saturating_sub(margin)))
}

/// Runs one replay of the resumed tag into a seam, on the replay's own
/// thread, and says how it ended; consumed by the call, it lets go of the
/// session when the replay is done.
pub(crate) type ReplayRun<D> =
    Box<dyn FnOnce(&str, ReplayFrom, Spacing, &Seam<Resumed<D>>) -> Result<(), Error> + Send>;

/// Opens the session for one replay (`None`: the session is closing).
/// Handed in by the subscription (`replay.rs`'s `opener`): the
/// session's sinks hold the resume, so the resume holds its session only
/// weakly, inside this function, and this file needs no session.
pub(crate) type OpenReplay<D> = Box<dyn Fn() -> Option<ReplayRun<D>> + Send + Sync>;

/// A resumable subscription's state; the reader thread's sink for it is
/// `Sink::Resume`, and it hands on to `D` (the application's sink).
pub(crate) struct Resume<D> {
    tag: String,
    /// The session's replays (not a `Session`: the session's sinks hold this).
    open: OpenReplay<D>,
    /// The application's sink.
    pub(crate) inner: Arc<D>,
    state: Mutex<State<D>>,
    /// Itself, for the seams' sinks (a seam is held by this).
    me: Weak<Resume<D>>,
}

impl<D: Deliver> Resume<D> {
    pub(crate) fn new(tag: &str, inner: Arc<D>, open: OpenReplay<D>) -> Arc<Resume<D>> {
        Arc::new_cyclic(|me| Resume {
            me: me.clone(),
            tag: tag.to_owned(),
            open,
            inner,
            state: Mutex::new(State {
                delivered: Dedupe::new(RESUME_PUBLISHERS),
                generation: 0,
                seam: None,
                first: None,
                made_at: crate::clock::now_ns(),
            }),
        })
    }

    /// A live event from the reader thread: held by the seam while a
    /// replay runs, else handed over unless already delivered.
    pub(crate) fn offer(&self, sample: Sample) {
        let st = lock(&self.state);
        match &st.seam {
            Some(seam) => {
                let seam = seam.clone();
                drop(st);
                seam.offer(sample);
            }
            None => {
                let generation = st.generation;
                drop(st);
                self.pass(sample, generation);
            }
        }
    }

    /// Hands `sample` to the application unless it was delivered already
    /// or it comes from a replay that a newer one replaced.
    pub(crate) fn pass(&self, sample: Sample, generation: u64) {
        let mut st = lock(&self.state);
        if st.generation != generation {
            return;
        }
        let ev = sample.event();
        let key = tagwire_core::proxy::publisher_key(ev.publisher);
        if st.delivered.check(0, key, ev.seq, ev.source_time_ns) != Seen::New {
            return;
        }
        // Under the lock: two replay threads (or a replay and the reader)
        // never interleave their hand-overs.
        self.inner.deliver_sample(sample);
    }

    /// Takes what `point` says the application took as delivered.
    pub(crate) fn seed(&self, point: &ResumePoint) {
        let mut st = lock(&self.state);
        for (publisher, seq, time) in point.publishers() {
            let key = tagwire_core::proxy::publisher_key(publisher);
            st.delivered.seed(0, key, seq, time);
        }
    }

    /// Holds live events from now on, for the application's replay
    /// (`SubscriptionBuilder::replay_from`): before the subscription is
    /// made. Then [`start`](Self::start) once it is.
    pub(crate) fn prepare(&self, from: ReplayFrom) -> (Arc<Seam<Resumed<D>>>, u64) {
        lock(&self.state).first = Some(from);
        self.install()
    }

    /// Runs the application's replay (after [`prepare`](Self::prepare) and
    /// the subscription); its failure ends the subscription.
    pub(crate) fn start(
        self: &Arc<Self>,
        (seam, generation): (Arc<Seam<Resumed<D>>>, u64),
        from: ReplayFrom,
        spacing: Spacing,
    ) -> std::io::Result<()> {
        self.spawn(seam, generation, from, spacing, true)
    }

    /// The session reconnected, or the network healed (on the reader
    /// thread, before it reads on): replay from the last delivered event.
    pub(crate) fn resync(self: &Arc<Self>, why: &str) {
        let from = {
            let st = lock(&self.state);
            let margin = RESUME_MARGIN.as_nanos() as u64;
            match (st.delivered.oldest_highest_time(), st.first) {
                (Some(t), _) => ReplayFrom::Time(t.saturating_sub(margin)),
                (None, Some(first)) => first,
                (None, None) => ReplayFrom::Time(st.made_at.saturating_sub(margin)),
            }
        };
        tracing::info!("resuming {} after {why}: replay from {from:?}", self.tag);
        if let Err(e) = self.replay(from, Spacing::Fast) {
            tracing::warn!("cannot start the resume replay of {}: {e}", self.tag);
            self.go_live();
        }
    }

    /// A new seam: live events are held from now on; a replay of an
    /// older one hands over nothing more.
    fn install(&self) -> (Arc<Seam<Resumed<D>>>, u64) {
        let mut st = lock(&self.state);
        st.generation += 1;
        let out = Arc::new(Resumed {
            resume: self.me.clone(),
            generation: st.generation,
        });
        let seam = Seam::new(out);
        st.seam = Some(seam.clone());
        (seam, st.generation)
    }

    /// Installs a new seam and runs a replay into it.
    fn replay(self: &Arc<Self>, from: ReplayFrom, spacing: Spacing) -> std::io::Result<()> {
        let (seam, generation) = self.install();
        self.spawn(seam, generation, from, spacing, false)
    }

    /// Runs a replay into `seam` on a thread of its own.
    fn spawn(
        self: &Arc<Self>,
        seam: Arc<Seam<Resumed<D>>>,
        generation: u64,
        from: ReplayFrom,
        spacing: Spacing,
        first: bool,
    ) -> std::io::Result<()> {
        let Some(run) = (self.open)() else {
            return Ok(()); // the session is closing
        };
        let me = self.clone();
        std::thread::Builder::new()
            .name("tagwire-resume".into())
            .spawn(move || {
                // The call consumes `run`: the session is let go here.
                let result = run(&me.tag, from, spacing, &seam);
                let current = lock(&me.state).generation == generation;
                match result {
                    Ok(()) => {}
                    Err(_) if !current => {} // a newer replay took over
                    Err(e) if first => {
                        tracing::warn!("{e}");
                        me.inner.fail(e);
                    }
                    Err(e) => {
                        // Not the subscription's end: it goes on live (a
                        // gap is possible; the warning says so).
                        tracing::warn!(
                            "the resume of {} after a reconnect failed, events published \
                             meanwhile may be missing: {e}",
                            me.tag
                        );
                        seam.force_live();
                    }
                }
            })?;
        Ok(())
    }

    fn go_live(&self) {
        let seam = lock(&self.state).seam.clone();
        if let Some(s) = seam {
            s.force_live();
        }
    }
}

/// What a resume's seam hands over, for the resume's replay number
/// `generation` (an older replay's hand-overs are dropped).
pub(crate) struct Resumed<D> {
    resume: Weak<Resume<D>>,
    generation: u64,
}

impl<D: Deliver> Deliver for Resumed<D> {
    fn deliver_sample(&self, sample: Sample) {
        if let Some(r) = self.resume.upgrade() {
            r.pass(sample, self.generation)
        }
    }

    fn wait_for_room(&self) {
        if let Some(r) = self.resume.upgrade() {
            r.inner.wait_for_room()
        }
    }

    fn close(&self) {
        if let Some(r) = self.resume.upgrade() {
            r.inner.close()
        }
    }

    fn fail(&self, error: Error) {
        match self.resume.upgrade() {
            Some(r) => r.inner.fail(error),
            None => tracing::error!("subscription ended: {error}"),
        }
    }
}

/// Where a subscription stopped: per publisher, the sequence number and
/// source time of the last event the application took. Kept by a process
/// across its own restart (`tagwire sub --resume-file`), and given back
/// with [`SubscriptionBuilder::resume_from`](crate::SubscriptionBuilder::resume_from):
/// the new subscription replays the store from a little before it and
/// drops what the point says was taken.
///
/// Bounded: at most [`RESUME_PUBLISHERS`] publishers; at the bound the
/// one whose last event is the oldest is forgotten (an event of it replayed
/// again is then delivered again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumePoint {
    publishers: std::collections::HashMap<String, (u64, u64)>,
}

/// The first line of [`ResumePoint::encode`]'s text.
const RESUME_HEADER: &str = "tagwire-resume 1";

impl ResumePoint {
    /// Nothing taken yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes that the application took `sample`.
    pub fn note(&mut self, sample: &Sample) {
        let ev = sample.event();
        if let Some(p) = self.publishers.get_mut(ev.publisher) {
            *p = (ev.seq, ev.source_time_ns);
            return;
        }
        if self.publishers.len() >= RESUME_PUBLISHERS {
            let oldest = self
                .publishers
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.publishers.remove(&k);
            }
        }
        self.publishers
            .insert(ev.publisher.to_owned(), (ev.seq, ev.source_time_ns));
    }

    /// Whether nothing was noted.
    pub fn is_empty(&self) -> bool {
        self.publishers.is_empty()
    }

    /// Publishers noted, with the sequence number and source time (ns) of
    /// the last event taken of each.
    pub fn publishers(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        self.publishers
            .iter()
            .map(|(k, (s, t))| (k.as_str(), *s, *t))
    }

    /// The earliest of the publishers' last source times.
    fn oldest_time(&self) -> Option<u64> {
        self.publishers.values().map(|(_, t)| *t).min()
    }

    /// As text: a header line, then a line `SEQ SOURCE_TIME_NS PUBLISHER`
    /// per publisher.
    pub fn encode(&self) -> String {
        let mut out = format!("{RESUME_HEADER}\n");
        let mut rows: Vec<_> = self.publishers().collect();
        rows.sort_unstable();
        for (p, s, t) in rows {
            out.push_str(&format!("{s} {t} {p}\n"));
        }
        out
    }

    /// Reads [`encode`](Self::encode)'s text; the error names the line
    /// that is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        if lines.next() != Some(RESUME_HEADER) {
            return Err(format!("the first line is not {RESUME_HEADER:?}"));
        }
        let mut point = ResumePoint::new();
        for (i, line) in lines.enumerate() {
            let bad = || {
                format!(
                    "line {}: expected SEQ SOURCE_TIME_NS PUBLISHER, got {line:?}",
                    i + 2
                )
            };
            let mut parts = line.splitn(3, ' ');
            let seq = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let time = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            // (An empty name is one: `SEQ TIME ` with the space.)
            let publisher = parts.next().ok_or_else(bad)?;
            if point.publishers.len() >= RESUME_PUBLISHERS {
                return Err(format!("more than {RESUME_PUBLISHERS} publishers"));
            }
            point.publishers.insert(publisher.to_owned(), (seq, time));
        }
        Ok(point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(publisher: &str, seq: u64, time: u64) -> Sample {
        let mut e = tagwire_proto::Event::new("/t", "x");
        e.header.publisher = publisher.into();
        e.header.seq = seq;
        e.header.source_time_ns = time;
        let mut b = bytes::BytesMut::new();
        e.encode(&mut b).expect("encode");
        Sample::new(b.freeze()).expect("sample")
    }

    #[test]
    fn a_resume_point_keeps_the_last_event_of_each_publisher_and_round_trips() {
        let mut p = ResumePoint::new();
        p.note(&sample("/a", 1, 10));
        p.note(&sample("/a", 2, 20));
        p.note(&sample("/b c", 7, 15));
        let text = p.encode();
        assert_eq!(text, "tagwire-resume 1\n2 20 /a\n7 15 /b c\n");
        assert_eq!(ResumePoint::parse(&text), Ok(p.clone()));
        assert_eq!(p.oldest_time(), Some(15));
    }

    #[test]
    fn a_bad_resume_point_is_refused_naming_the_line() {
        let e = ResumePoint::parse("nonsense\n").expect_err("no header");
        assert!(e.contains("first line"), "{e}");
        let e = ResumePoint::parse("tagwire-resume 1\n2 20 /a\n2 x /b\n").expect_err("bad time");
        assert!(e.contains("line 3"), "{e}");
        let e = ResumePoint::parse("tagwire-resume 1\n2 20\n").expect_err("no publisher");
        assert!(e.contains("line 2"), "{e}");
    }

    proptest::proptest! {
        /// Any text is read or refused, never a panic; any point (names
        /// without a line break) is read back as it was written.
        #[test]
        fn resume_points_round_trip_and_bad_text_is_refused(
            text in ".{0,200}",
            rows in proptest::collection::vec(("[^\n\r]{0,12}", proptest::num::u64::ANY, proptest::num::u64::ANY), 0..8),
        ) {
            let _ = ResumePoint::parse(&text);
            let mut p = ResumePoint::new();
            for (name, seq, time) in &rows {
                p.note(&sample(name, *seq, *time));
            }
            proptest::prop_assert_eq!(ResumePoint::parse(&p.encode()), Ok(p));
        }
    }

    #[test]
    fn a_resume_point_is_bounded_and_forgets_the_oldest_publisher() {
        let mut p = ResumePoint::new();
        for i in 0..RESUME_PUBLISHERS as u64 + 10 {
            p.note(&sample(&format!("/p{i}"), 1, 1000 + i));
        }
        assert_eq!(p.publishers().count(), RESUME_PUBLISHERS);
        assert!(p.publishers().all(|(name, _, _)| name != "/p0"));
    }
}
