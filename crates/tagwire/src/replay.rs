//! Replay from the daemon's durable store, then live, with no gap and no
//! duplicate at the seam (issue 25; docs/reliability.md, "Replay").
//!
//! How: the subscription is made first; while the replay runs, its live
//! events are held here (at most [`MAX_HELD`](crate::seam::MAX_HELD)). A replay thread pulls the
//! tag's stored events (pull query 6, `Stored`) from the daemon and hands
//! them to the subscription's sink; the daemon's store thread answers a
//! read only after writing every event queued before it, so everything
//! published before the subscription was made is in the store, and
//! everything after it is held. When the store has no more, the held
//! events whose publisher sequence number is above the last one replayed
//! for that publisher go out, and the subscription is live.
//!
//! At the bound of held events, the held events are dropped and the replay
//! reads on from the store (they were stored before they were delivered),
//! so a fast publisher makes the replay longer, never gapped — as long as
//! the store keeps them (its retention) and stored them (its queue).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tagwire_core::connection::Reply;
use tagwire_core::store::origin_key;
use tagwire_proto::{Origins, PullQuery, PullStatus, MAX_ORIGINS};

pub use tagwire_core::store::ReplayFrom;

use crate::deliver::Deliver;
use crate::error::Error;
use crate::resume::{OpenReplay, ReplayRun, Resumed};
use crate::sample::Sample;
use crate::seam::Seam;
use crate::session::Session;
use crate::spacing::{Spacing, MAX_GAP};

/// What the daemon's durable store holds of a tag
/// ([`Session::stored`]). Positions are the store's, in the order it
/// stored the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Events held.
    pub held: u32,
    /// Oldest position held (0 when none).
    pub oldest: u64,
    /// Newest position held (0 when none).
    pub newest: u64,
}

impl Session {
    /// What the daemon's durable store holds of `tag` (a `Stored` pull
    /// that asks for no event). Fails with [`Error::Replay`] when the tag
    /// is not durable and nothing of it is held, or the daemon has no store:
    /// what a publisher that wants `reliability=durable` checks first.
    pub fn stored(&self, tag: &str) -> Result<Stored, Error> {
        tagwire_core::tags::validate_tag(tag)?;
        let fail = |reason: String| Error::Replay {
            tag: tag.to_owned(),
            reason,
        };
        let query = PullQuery::Stored {
            from_pos: u64::MAX,
            from_seq: 0,
            from_ns: 0,
            origins: Origins::all(),
        };
        let ((), reply) = self
            .inner()
            .request("stored", |e| ((), e.pull("", "", tag, query)))?;
        match reply? {
            Reply::Pulled(r) => Ok(Stored {
                held: r.held,
                oldest: r.oldest,
                newest: r.newest,
            }),
            Reply::Err(code, message) => Err(fail(format!("{message} (code {code:?})"))),
            other => Err(fail(format!("expected a pull reply, got {other:?}"))),
        }
    }
}

/// Most steps (an event handed over, or a pass over the stores) one replay
/// takes before it gives up: a bound against a store that never says it
/// has no more.
const MAX_STEPS: u64 = 1 << 32;

/// How long a replay that reads other daemons' stores waits, from its
/// start, before its last pass over them: time for the subscription's
/// interest to reach them (one advert round is 50 ms per link), so that an
/// event they routed before they knew of the subscription — not sent here
/// live — is in that pass.
pub const INTEREST_SETTLE: Duration = Duration::from_millis(500);

/// How long a replay waits for its daemon's configured links
/// (`[federation] peers`) to come up (a daemon that just restarted) before
/// it reads the stores of the daemons it knows.
pub const LINK_WAIT: Duration = Duration::from_secs(2);

/// Runs the replay of `tag` from `from` into `seam` (on its own thread).
pub(crate) fn run<D: Deliver>(
    session: Session,
    tag: String,
    from: ReplayFrom,
    spacing: Spacing,
    seam: Arc<Seam<D>>,
) {
    if let Err(e) = replay(&session, &tag, from, spacing, &seam) {
        tracing::warn!("{e}");
        seam.inner.fail(e);
    }
}

/// How a resume ([`crate::resume`]) replays from this session's stores:
/// holding the session weakly (its sinks hold the resume), each replay
/// opens it for the time the replay runs.
pub(crate) fn opener<D: Deliver>(session: &Session) -> OpenReplay<D> {
    let guard = Arc::downgrade(&session.guard);
    Box::new(move || {
        let session = Session {
            guard: guard.upgrade()?,
        };
        let run: ReplayRun<D> = Box::new(
            move |tag: &str, from: ReplayFrom, spacing: Spacing, seam: &Seam<Resumed<D>>| {
                replay(&session, tag, from, spacing, seam)
            },
        );
        Some(run)
    })
}

/// One store a replay reads: where (`node`, empty: the subscriber's
/// daemon), whose publications, how far it got, and its current page.
struct Source {
    node: String,
    origins: Origins,
    from_pos: u64,
    page: VecDeque<Sample>,
    /// The store said it has no more (until the next pass).
    done: bool,
}

impl Source {
    fn new(node: &str, origins: Origins) -> Source {
        Source {
            node: node.to_owned(),
            origins,
            from_pos: 0,
            page: VecDeque::new(),
            done: false,
        }
    }

    /// Reads the next page if this one is used up. `Err`: the store
    /// refused or could not be reached (its message).
    fn fill(
        &mut self,
        session: &Session,
        tag: &str,
        from_seq: u64,
        from_ns: u64,
    ) -> Result<(), String> {
        if self.done || !self.page.is_empty() {
            return Ok(());
        }
        let query = PullQuery::Stored {
            from_pos: self.from_pos,
            from_seq,
            from_ns,
            origins: self.origins.clone(),
        };
        let node = self.node.clone();
        let ((), reply) = session
            .inner()
            .request("replay", |e| ((), e.pull(&node, "", tag, query)))
            .map_err(|e| e.to_string())?;
        let r = match reply.map_err(|e| e.to_string())? {
            Reply::Pulled(r) => r,
            Reply::Err(code, message) => return Err(format!("{message} (code {code:?})")),
            other => return Err(format!("expected a pull reply, got {other:?}")),
        };
        for raw in r.events {
            let s = Sample::new(raw).map_err(|e| format!("replayed event: {e}"))?;
            self.page.push_back(s);
        }
        match r.status {
            PullStatus::More { next } if next > self.from_pos => self.from_pos = next,
            PullStatus::Complete => {
                self.from_pos = self.from_pos.max(r.newest.saturating_add(1));
                self.done = true;
            }
            other => return Err(format!("the store's reply {other:?} does not advance")),
        }
        Ok(())
    }
}

/// The stores a replay of `tag` reads. Alone (or when the daemons' names
/// do not tell them apart): the subscriber's daemon's, everything in it.
/// In a network: each other daemon's store for the events published there
/// (a daemon that cannot answer — unreachable, no store, the tag not
/// durable there — is left out, and what of its events reached this daemon
/// comes from this daemon's store), and this daemon's store for the rest,
/// so that each event comes from exactly one store.
fn sources(session: &Session, tag: &str, from_seq: u64, from_ns: u64) -> Vec<Source> {
    let alone = || vec![Source::new("", Origins::all())];
    let started = std::time::Instant::now();
    let listing = loop {
        let Ok(listing) = session.list_page(None, Some(1)) else {
            return alone();
        };
        // Its configured peers linked, and each linked daemon's advert in
        // (it follows the link's handshake by a moment).
        let waiting = listing.federation.as_ref().is_some_and(|f| {
            f.links.len() < f.peers
                || !f
                    .links
                    .iter()
                    .all(|l| f.known.iter().any(|k| k.name == l.peer))
        });
        if !waiting || started.elapsed() >= LINK_WAIT {
            break listing;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let Some(fed) = listing.federation else {
        return alone();
    };
    let own = listing.server;
    let mut names: Vec<&str> = fed.known.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    let remote: Vec<&str> = names.iter().copied().filter(|n| *n != own).collect();
    let distinct = names.windows(2).all(|w| w[0] != w[1]) && remote.len() + 1 == names.len();
    if remote.is_empty() || !distinct || remote.len() > MAX_ORIGINS {
        return alone();
    }
    let mut out = Vec::new();
    let mut answered = Vec::new();
    for name in remote {
        let key = origin_key(name);
        let mut s = Source::new(name, Origins::Only(key));
        match s.fill(session, tag, from_seq, from_ns) {
            Ok(()) => {
                answered.push(key);
                out.push(s);
            }
            Err(why) => {
                tracing::debug!("replay of {tag}: daemon {name}'s store is not read: {why}");
            }
        }
    }
    out.push(Source::new("", Origins::Except(answered)));
    out
}

pub(crate) fn replay<D: Deliver>(
    session: &Session,
    tag: &str,
    from: ReplayFrom,
    spacing: Spacing,
    seam: &Seam<D>,
) -> Result<(), Error> {
    let fail = |reason: String| Error::Replay {
        tag: tag.to_owned(),
        reason,
    };
    let started = std::time::Instant::now();
    let (from_seq, from_ns) = match from {
        ReplayFrom::Start => (0, 0),
        ReplayFrom::Seq(s) => (s, 0),
        ReplayFrom::Time(t) => (0, t),
        ReplayFrom::Ago(d) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |t| t.as_nanos() as u64);
            (0, now.saturating_sub(d))
        }
    };
    let mut sources = sources(session, tag, from_seq, from_ns);
    let remote = sources.len() > 1;
    let mut settled = !remote;
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut spacer = tagwire_core::tds::Spacer::default();
    let mut previous_time: Option<u64> = None;
    for _ in 0..MAX_STEPS {
        for s in &mut sources {
            s.fill(session, tag, from_seq, from_ns)
                .map_err(|why| match s.node.as_str() {
                    "" => fail(why),
                    node => fail(format!("reading daemon {node}'s store: {why}")),
                })?;
        }
        // The page heads merged by source time (per publisher, each store
        // keeps the order it stored them in, and a publisher's events are
        // in one store).
        let next = sources
            .iter_mut()
            .filter(|s| !s.page.is_empty())
            .min_by_key(|s| s.page.front().map(|e| e.event().source_time_ns));
        if let Some(s) = next.and_then(|s| s.page.pop_front()) {
            let ev = s.event();
            let (time, seq) = (ev.source_time_ns, ev.seq);
            let l = last.entry(ev.publisher.to_owned()).or_insert(seq);
            *l = (*l).max(seq);
            if spacing == Spacing::Original {
                let now = crate::clock::now_ns();
                if previous_time.is_some_and(|p| time.saturating_sub(p) > MAX_GAP.as_nanos() as u64)
                {
                    // A long gap: shortened to MAX_GAP by a new anchor.
                    spacer.anchor(now + MAX_GAP.as_nanos() as u64, time);
                }
                let at = spacer.release_at(now, time, 0);
                std::thread::sleep(Duration::from_nanos(at.saturating_sub(now)));
                previous_time = Some(time);
            }
            seam.inner.wait_for_room();
            seam.inner.deliver_sample(s);
            continue;
        }
        // Every store has no more.
        if !settled {
            // One more pass over every store once the subscription's
            // interest has had time to reach the other daemons.
            std::thread::sleep(INTEREST_SETTLE.saturating_sub(started.elapsed()));
            settled = true;
        } else if seam.finish(&last) {
            return Ok(());
        }
        // Read on from where each store stopped (held events were dropped
        // at the bound, or the settle pass).
        for s in &mut sources {
            s.done = false;
        }
    }
    Err(fail(
        "too many steps: the stores never said they had no more".into(),
    ))
}
