//! Pulls from a tag's history (its pull buffer): [`Pull`] says what to read,
//! [`PullOptions`] whose history and where it is kept, and [`PullError`]
//! what can go wrong — above all [`PullError::Gone`], the answer for an
//! event no longer held, with the oldest sequence number that still is.
//!
//! A tag keeps history when its `history` QoS property is above 0
//! (`tagwire admin qos /some/tag history=100`, or `[qos] history` in the
//! daemon's configuration). See `docs/configuration.md`, "History and pull".

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tagwire_proto::{ErrorCode, PullQuery, PullStatus};

use crate::error::Error;
use crate::sample::Sample;
use crate::session::Session;

/// What to read from a tag's history. Sequence numbers are the publisher's
/// own (per publisher); times are source timestamps, ns since the Unix
/// epoch; ranges include both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pull {
    /// The most recent event.
    Latest,
    /// The n-th most recent event, 0 being the latest.
    Nth(u32),
    /// The event with this sequence number.
    Seq(u64),
    /// Events with sequence numbers `first..=last` (at most the tag's
    /// `history` of them).
    SeqRange {
        /// First sequence number.
        first: u64,
        /// Last sequence number.
        last: u64,
    },
    /// Events whose source time is in `from_ns..=to_ns`.
    TimeRange {
        /// Earliest source time, ns since the Unix epoch.
        from_ns: u64,
        /// Latest source time, ns since the Unix epoch.
        to_ns: u64,
    },
}

impl Pull {
    /// Events of the last `d` (source time from now − `d` on).
    pub fn since(d: Duration) -> Pull {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Pull::TimeRange {
            from_ns: now.saturating_sub(d),
            to_ns: u64::MAX,
        }
    }

    fn query(self) -> PullQuery {
        match self {
            Pull::Latest => PullQuery::Latest,
            Pull::Nth(n) => PullQuery::Nth(n),
            Pull::Seq(s) => PullQuery::Seq(s),
            Pull::SeqRange { first, last } => PullQuery::SeqRange { first, last },
            Pull::TimeRange { from_ns, to_ns } => PullQuery::TimeRange {
                from_ns,
                to_ns,
                from_seq: 0,
            },
        }
    }
}

/// Where the history a pull reads is kept (the paper's three modes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HistoryAt {
    /// At the subscriber's daemon: the one this session is connected to
    /// (`at_subscriber`, the default).
    #[default]
    Subscriber,
    /// At the publisher's daemon (`at_publisher`): the daemon the tag's
    /// last event came from over the links, asked over the links; the
    /// connected daemon when the tag is published there or no event of it
    /// has arrived yet.
    Publisher,
    /// At a named node (`node:NAME`), asked over the daemon links; a name no
    /// daemon of the network has gets [`PullError::UnknownNode`].
    Node(String),
}

impl FromStr for HistoryAt {
    type Err = PullError;
    /// `at_subscriber`, `at_publisher` or `node:NAME` (NAME 1–255 bytes,
    /// no whitespace).
    fn from_str(s: &str) -> Result<Self, PullError> {
        match s {
            "at_subscriber" => Ok(HistoryAt::Subscriber),
            "at_publisher" => Ok(HistoryAt::Publisher),
            _ => match s.strip_prefix("node:") {
                Some(name)
                    if !name.is_empty()
                        && name.len() <= 255
                        && !name.chars().any(char::is_whitespace) =>
                {
                    Ok(HistoryAt::Node(name.to_owned()))
                }
                _ => Err(PullError::Invalid {
                    what: "history location",
                    reason: format!(
                        "{}: expected at_subscriber, at_publisher or node:NAME (NAME 1-255 bytes, no spaces)",
                        tagwire_proto::excerpt(s)
                    ),
                }),
            },
        }
    }
}

/// Whose history a pull reads, and where.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullOptions {
    /// The publisher endpoint (sequence numbers are per publisher); `None`:
    /// the tag's publisher that published last.
    pub publisher: Option<String>,
    /// Where the history is kept.
    pub at: HistoryAt,
}

/// Why a pull gave no events.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The event (or every event of the range) is no longer held: it was
    /// overwritten, or never recorded. `oldest`..=`newest` is what is held
    /// (`held` events; 0: nothing yet).
    #[error("gone: not held any more (the history holds {held} event(s), sequence numbers {oldest}..={newest})")]
    Gone {
        /// The oldest sequence number still held.
        oldest: u64,
        /// The newest held.
        newest: u64,
        /// Events held.
        held: u32,
    },
    /// The tag keeps no history (`history` is 0), or none of that publisher.
    #[error("{message}")]
    NoHistory {
        /// The daemon's message, naming the tag.
        message: String,
    },
    /// A sequence number after the newest held, an `Nth` beyond the tag's
    /// `history`, a backwards range, or a range larger than the buffer.
    #[error("{message}")]
    OutOfRange {
        /// The daemon's message, naming the value and the bound.
        message: String,
    },
    /// The history is kept at a node no daemon of the network is named, or
    /// one not reachable now.
    #[error("{message}")]
    UnknownNode {
        /// The daemon's message.
        message: String,
    },
    /// An argument refused before anything was sent.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// Any other refusal, or the session's own error (not connected, ...).
    #[error(transparent)]
    Session(#[from] Error),
}

impl PullError {
    fn from_refusal(code: ErrorCode, message: String) -> PullError {
        match code {
            ErrorCode::NoHistory => PullError::NoHistory { message },
            ErrorCode::BadRequest => PullError::OutOfRange { message },
            ErrorCode::UnknownNode => PullError::UnknownNode { message },
            code => PullError::Session(Error::Refused { code, message }),
        }
    }
}

/// Most replies one [`Session::pull`] follows (each carries at least one
/// event and a range is at most the tag's `history`, so this bounds a
/// misbehaving server, not a real answer).
const MAX_CONTINUATIONS: usize = 1 << 20;

impl Session {
    /// Pulls from `tag`'s history at the daemon this session is connected
    /// to, the tag's last publisher: the events asked for, oldest first.
    /// A larger answer than one reply holds is followed to its end.
    ///
    /// ```no_run
    /// use tagwire::{Pull, PullError};
    /// let session = tagwire::Session::connect("tcp://127.0.0.1:7700")?;
    /// match session.pull("/sensors/temp", Pull::Latest) {
    ///     Ok(samples) => println!("latest: {:?}", samples[0].payload()),
    ///     Err(PullError::Gone { oldest, .. }) => println!("gone; oldest held is {oldest}"),
    ///     Err(e) => println!("{e}"),
    /// }
    /// # Ok::<(), tagwire::Error>(())
    /// ```
    pub fn pull(&self, tag: &str, pull: Pull) -> Result<Vec<Sample>, PullError> {
        self.pull_with(tag, pull, &PullOptions::default())
    }

    /// [`pull`](Self::pull) naming the publisher and where the history is
    /// kept.
    pub fn pull_with(
        &self,
        tag: &str,
        pull: Pull,
        options: &PullOptions,
    ) -> Result<Vec<Sample>, PullError> {
        tagwire_core::tags::validate_tag(tag).map_err(Error::from)?;
        let publisher = options.publisher.clone().unwrap_or_default();
        if publisher.len() > 255 {
            return Err(PullError::Invalid {
                what: "publisher name",
                reason: format!("{} bytes, over the limit of 255", publisher.len()),
            });
        }
        let node = match &options.at {
            HistoryAt::Subscriber => String::new(),
            HistoryAt::Publisher => "@publisher".to_owned(),
            HistoryAt::Node(n) => HistoryAt::from_str(&format!("node:{n}")).map(|_| n.clone())?,
        };
        let mut query = pull.query();
        let mut out = Vec::new();
        for _ in 0..MAX_CONTINUATIONS {
            let ((), reply) = self.inner().request("pull", |e| {
                ((), e.pull(&node, &publisher, tag, query.clone()))
            })?;
            let r = match reply? {
                tagwire_core::connection::Reply::Pulled(r) => r,
                tagwire_core::connection::Reply::Err(code, message) => {
                    return Err(PullError::from_refusal(code, message))
                }
                other => {
                    return Err(
                        Error::BadReply(format!("expected a pull reply, got {other:?}")).into(),
                    )
                }
            };
            if r.status == PullStatus::Gone {
                return Err(PullError::Gone {
                    oldest: r.oldest,
                    newest: r.newest,
                    held: r.held,
                });
            }
            for raw in r.events {
                let s =
                    Sample::new(raw).map_err(|e| Error::BadReply(format!("pulled event: {e}")))?;
                out.push(s);
            }
            let PullStatus::More { next } = r.status else {
                return Ok(out);
            };
            query = match query {
                PullQuery::SeqRange { first, last } if next > first && next <= last => {
                    PullQuery::SeqRange { first: next, last }
                }
                PullQuery::TimeRange {
                    from_ns,
                    to_ns,
                    from_seq,
                } if next > from_seq => PullQuery::TimeRange {
                    from_ns,
                    to_ns,
                    from_seq: next,
                },
                _ => {
                    return Err(Error::BadReply(format!(
                        "pull reply: \"more from {next}\" does not advance {query:?}"
                    ))
                    .into())
                }
            };
        }
        Err(Error::BadReply("pull: too many continuation replies".into()).into())
    }
}
