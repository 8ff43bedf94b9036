//! The QoS properties: their names, the levels where each may be set, their
//! values ([`QosSet`]), and how each value is parsed and shown.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::filter::priority_by_name;
use crate::history::MAX_HISTORY;
use crate::queue::{DiscardPolicy, OrderPolicy};
use crate::tds::{BufferConfig, LatePolicy, PlayoutConfig, MAX_BYTES, MAX_EVENTS, MAX_HOLD_NS};

use super::{QosError, DEFAULT_QUEUE_LENGTH, MAX_QUEUE_LENGTH};

/// Default `priority`: `normal`.
pub const DEFAULT_PRIORITY: u8 = 64;
/// Largest `max_events_per_consumer` other than `unlimited`.
pub const MAX_EVENTS_PER_CONSUMER: usize = 1 << 24;
/// Largest `max_batch`.
pub const MAX_BATCH: usize = 4096;
/// Default `max_batch`: events taken from one channel per write.
pub const DEFAULT_MAX_BATCH: usize = 64;
/// Largest `pacing_interval`, ns (60 s).
pub const MAX_PACING_INTERVAL_NS: u64 = 60_000_000_000;
/// Largest `max_consumers` / `max_suppliers` other than `unlimited`.
pub const MAX_CLIENTS: usize = 1_000_000;

/// Where a QoS property is set, from the least to the most specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// The daemon's defaults (its configuration file).
    Daemon,
    /// A tag pattern (TAO's event channel).
    Tag,
    /// A session: one client connection (TAO's admin).
    Session,
    /// An endpoint's subscription: one channel (TAO's proxy).
    Channel,
    /// One event (its header).
    Event,
}

impl Level {
    /// Every level, least specific first.
    pub const ALL: [Level; 5] = [
        Level::Daemon,
        Level::Tag,
        Level::Session,
        Level::Channel,
        Level::Event,
    ];

    /// The name (`daemon`, `tag`, `session`, `channel`, `event`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Daemon => "daemon",
            Level::Tag => "tag",
            Level::Session => "session",
            Level::Channel => "channel",
            Level::Event => "event",
        }
    }

    /// The level with this name (`endpoint` is an alias of `channel`).
    pub fn from_name(name: &str) -> Option<Level> {
        Some(match name {
            "daemon" => Level::Daemon,
            "tag" => Level::Tag,
            "session" => Level::Session,
            "channel" | "endpoint" => Level::Channel,
            "event" => Level::Event,
            _ => return None,
        })
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A QoS property, named as users type it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Property {
    /// `priority`: 0–255 or `low`, `normal`, `high`, `critical`.
    Priority,
    /// `priority_model`: `client_propagated` or `server_declared`.
    PriorityModel,
    /// `sched`: the serving lane's OS scheduling policy and priority.
    Sched,
    /// `dscp`: the DiffServ code point of the links that carry the events.
    Dscp,
    /// `timeout`: an event expires this long after its source time.
    Timeout,
    /// `stop_time`: an event expires at this absolute time.
    StopTime,
    /// `start_time`: no event is delivered before this absolute time.
    StartTime,
    /// `order`: which queued event is delivered next.
    Order,
    /// `discard`: what a full queue drops.
    Discard,
    /// `max_queue_length`: a channel's queue bound, in events.
    MaxQueueLength,
    /// `max_events_per_consumer`: events queued for one consumer across its
    /// channels.
    MaxEventsPerConsumer,
    /// `max_batch`: most events of one channel per write.
    MaxBatch,
    /// `pacing_interval`: how long events are collected before a write.
    PacingInterval,
    /// `max_consumers`: subscribing endpoints a tag may have.
    MaxConsumers,
    /// `max_suppliers`: publishing endpoints a tag may have.
    MaxSuppliers,
    /// `band`: the configured priority band (lane) that serves the events.
    Band,
    /// `history`: events of a tag kept per publisher for pulls (0: none).
    History,
    /// `scale`: a subscriber gets 1 of every n events (temporal scaling).
    Scale,
    /// `min_interval`: a subscriber gets events at least this far apart in
    /// source time, per publisher (temporal scaling).
    MinInterval,
    /// `proxy`: where a subscriber's scaling proxy runs (at_subscriber,
    /// at_publisher, node:NAME, auto).
    Proxy,
    /// `max_delay`: the subscriber's end-to-end delay bound, which
    /// `proxy=auto` placement keeps (none: unbounded).
    MaxDelay,
    /// `shm`: whether same-host payloads travel in shared memory (off,
    /// auto, require).
    Shm,
    /// `reliability`: what the delivery promises (best_effort, reliable,
    /// exactly_once, durable; see docs/reliability.md for what each one
    /// guarantees today).
    Reliability,
    /// `buffer`: the buffering service (Narada §3.3): time-orders a
    /// channel's events by source time and releases them by count, bytes,
    /// time in buffer and release factor (`count:N,bytes:B,max_delay:D,release:F`;
    /// none: off).
    Buffer,
    /// `playout`: the time-differential service (Narada §3.4): releases a
    /// channel's events keeping their original spacing after a playout
    /// delay (`tds:DELAY`, `tds:DELAY:drop`; none: off).
    Playout,
    /// `compression`: how a tag's events cross daemon links (`none`, `lz4`,
    /// `zstd`, with an optional smallest size, `zstd:4KiB`); set on a tag or
    /// the daemon (docs/reliability.md, "Compression on links").
    Compression,
}

const UP_TO_CHANNEL: &[Level] = &[Level::Daemon, Level::Tag, Level::Session, Level::Channel];

impl Property {
    /// Number of properties.
    pub const COUNT: usize = 26;

    /// Every property, in the order `tagwire admin show` lists them.
    pub const ALL: [Property; Property::COUNT] = [
        Property::Priority,
        Property::PriorityModel,
        Property::Sched,
        Property::Dscp,
        Property::Timeout,
        Property::StopTime,
        Property::StartTime,
        Property::Order,
        Property::Discard,
        Property::MaxQueueLength,
        Property::MaxEventsPerConsumer,
        Property::MaxBatch,
        Property::PacingInterval,
        Property::MaxConsumers,
        Property::MaxSuppliers,
        Property::Band,
        Property::History,
        Property::Scale,
        Property::MinInterval,
        Property::Proxy,
        Property::MaxDelay,
        Property::Shm,
        Property::Reliability,
        Property::Buffer,
        Property::Playout,
        Property::Compression,
    ];

    /// The name users type (`priority`, `max_queue_length`, …).
    pub fn name(self) -> &'static str {
        match self {
            Property::Priority => "priority",
            Property::PriorityModel => "priority_model",
            Property::Sched => "sched",
            Property::Dscp => "dscp",
            Property::Timeout => "timeout",
            Property::StopTime => "stop_time",
            Property::StartTime => "start_time",
            Property::Order => "order",
            Property::Discard => "discard",
            Property::MaxQueueLength => "max_queue_length",
            Property::MaxEventsPerConsumer => "max_events_per_consumer",
            Property::MaxBatch => "max_batch",
            Property::PacingInterval => "pacing_interval",
            Property::MaxConsumers => "max_consumers",
            Property::MaxSuppliers => "max_suppliers",
            Property::Band => "band",
            Property::History => "history",
            Property::Scale => "scale",
            Property::MinInterval => "min_interval",
            Property::Proxy => "proxy",
            Property::MaxDelay => "max_delay",
            Property::Shm => "shm",
            Property::Reliability => "reliability",
            Property::Buffer => "buffer",
            Property::Playout => "playout",
            Property::Compression => "compression",
        }
    }

    /// The property with this name (case-sensitive; `pacing` is an alias of
    /// `pacing_interval`).
    pub fn from_name(name: &str) -> Option<Property> {
        if name == "pacing" {
            return Some(Property::PacingInterval);
        }
        Property::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The levels where it may be set.
    ///
    /// An event sets only its priority and timing; an absolute time is not a
    /// daemon default; how many clients a tag may have is a daemon or tag
    /// matter.
    pub fn levels(self) -> &'static [Level] {
        match self {
            Property::Priority | Property::Timeout => &Level::ALL,
            Property::StopTime | Property::StartTime => {
                &[Level::Tag, Level::Session, Level::Channel, Level::Event]
            }
            Property::MaxConsumers
            | Property::MaxSuppliers
            | Property::History
            | Property::Compression => &[Level::Daemon, Level::Tag],
            _ => UP_TO_CHANNEL,
        }
    }

    /// Whether it may be set at `level`.
    pub fn settable_at(self, level: Level) -> bool {
        self.levels().contains(&level)
    }

    pub(crate) fn bit(self) -> u32 {
        1 << self as u32
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a subscriber's scaling proxy runs (push-pull paper §2.1, §3.1):
/// the daemons before it carry the full stream, those after it the scaled
/// one.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub enum ProxyMode {
    /// At the subscriber's daemon (the default).
    #[default]
    AtSubscriber,
    /// At the publisher's daemon.
    AtPublisher,
    /// At the named daemon.
    Node(Arc<str>),
    /// Where the placement optimiser puts it (`tagwire place`'s model).
    Auto,
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyMode::AtSubscriber => f.write_str("at_subscriber"),
            ProxyMode::AtPublisher => f.write_str("at_publisher"),
            ProxyMode::Node(n) => write!(f, "node:{n}"),
            ProxyMode::Auto => f.write_str("auto"),
        }
    }
}

impl std::str::FromStr for ProxyMode {
    type Err = QosError;
    fn from_str(s: &str) -> Result<Self, QosError> {
        let bad = |why: &str| invalid(Property::Proxy, s, why);
        match s {
            "at_subscriber" => Ok(ProxyMode::AtSubscriber),
            "at_publisher" => Ok(ProxyMode::AtPublisher),
            "auto" => Ok(ProxyMode::Auto),
            _ => match s.strip_prefix("node:") {
                Some(n)
                    if n.is_empty()
                        || n.len() > 255
                        || n.chars().any(|c| c.is_whitespace() || c.is_control()) =>
                {
                    Err(bad(
                        "node:NAME needs a daemon name of 1..=255 bytes without spaces",
                    ))
                }
                Some(n) => Ok(ProxyMode::Node(Arc::from(n))),
                None => Err(bad(
                    "expected at_subscriber, at_publisher, node:NAME or auto",
                )),
            },
        }
    }
}

/// Whether a same-host channel carries its payloads in shared memory
/// (`docs/shm.md`, "Negotiated by the daemon").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ShmMode {
    /// Never: payloads travel over the socket.
    Off,
    /// Where the client is on the daemon's host (Unix socket, embedded) and
    /// a region can be had; else the socket, with the reason logged (the default).
    #[default]
    Auto,
    /// Shared memory or a refusal naming why not.
    Require,
}

impl fmt::Display for ShmMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShmMode::Off => "off",
            ShmMode::Auto => "auto",
            ShmMode::Require => "require",
        })
    }
}

impl std::str::FromStr for ShmMode {
    type Err = QosError;
    fn from_str(s: &str) -> Result<Self, QosError> {
        match s {
            "off" => Ok(ShmMode::Off),
            "auto" => Ok(ShmMode::Auto),
            "require" => Ok(ShmMode::Require),
            _ => Err(invalid(Property::Shm, s, "expected off, auto or require")),
        }
    }
}

/// What a channel's delivery promises (issue 25; docs/reliability.md).
/// On a tag or the daemon layer, `reliable`, `exactly_once` and `durable`
/// make the tag's events cross daemon links with hop-by-hop
/// acknowledgement (link version 3); a single daemon keeps `durable` tags'
/// events in its store and replays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub enum Reliability {
    /// Delivered at most once, dropped by a full queue or a lost link (the
    /// default).
    #[default]
    BestEffort,
    /// No gap and no duplicate across daemon links while both ends and a
    /// path live (acknowledged hop by hop, routed again when a link or a
    /// daemon is lost); on a subscription of a version-4 client, also the
    /// daemon → subscriber connection (acknowledged, resumed after the
    /// subscriber's reconnect; docs/reliability.md).
    Reliable,
    /// As `reliable` across links (not yet deduplicated across a
    /// publisher's retry after it reconnects).
    ExactlyOnce,
    /// Kept in the daemon's durable store (set on a tag or the daemon), so
    /// a late or recovering subscriber can replay it, across a restart or
    /// `kill -9` of the daemon.
    Durable,
}

impl Reliability {
    /// The name (`best_effort`, `reliable`, `exactly_once`, `durable`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reliability::BestEffort => "best_effort",
            Reliability::Reliable => "reliable",
            Reliability::ExactlyOnce => "exactly_once",
            Reliability::Durable => "durable",
        }
    }
}

impl fmt::Display for Reliability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Reliability {
    type Err = QosError;
    fn from_str(s: &str) -> Result<Self, QosError> {
        match s {
            "best_effort" => Ok(Reliability::BestEffort),
            "reliable" => Ok(Reliability::Reliable),
            "exactly_once" => Ok(Reliability::ExactlyOnce),
            "durable" => Ok(Reliability::Durable),
            _ => Err(invalid(
                Property::Reliability,
                s,
                "expected best_effort, reliable, exactly_once or durable",
            )),
        }
    }
}

/// Whose priority picks the lane (RT-CORBA's priority models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum PriorityModel {
    /// The event's own priority (the publisher's), when it carries one.
    #[default]
    ClientPropagated,
    /// The priority configured for the channel; the event's is ignored.
    ServerDeclared,
}

impl PriorityModel {
    /// The name (`client_propagated`, `server_declared`).
    pub fn as_str(self) -> &'static str {
        match self {
            PriorityModel::ClientPropagated => "client_propagated",
            PriorityModel::ServerDeclared => "server_declared",
        }
    }
}

impl fmt::Display for PriorityModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PriorityModel {
    type Err = QosError;
    fn from_str(s: &str) -> Result<Self, QosError> {
        match s {
            "client_propagated" => Ok(PriorityModel::ClientPropagated),
            "server_declared" => Ok(PriorityModel::ServerDeclared),
            _ => Err(invalid(
                Property::PriorityModel,
                s,
                "expected client_propagated or server_declared",
            )),
        }
    }
}

/// The OS scheduling policy and priority of the lane serving the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sched {
    /// `SCHED_OTHER` with a nice value, -20..=19 (`other`, `other:NICE`).
    Other {
        /// The nice value.
        nice: i8,
    },
    /// `SCHED_FIFO` with a real-time priority, 1..=99 (`fifo:N`).
    Fifo {
        /// The real-time priority.
        priority: u8,
    },
    /// `SCHED_RR` with a real-time priority, 1..=99 (`rr:N`).
    RoundRobin {
        /// The real-time priority.
        priority: u8,
    },
}

impl Default for Sched {
    fn default() -> Self {
        Sched::Other { nice: 0 }
    }
}

impl fmt::Display for Sched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sched::Other { nice: 0 } => f.write_str("other"),
            Sched::Other { nice } => write!(f, "other:{nice}"),
            Sched::Fifo { priority } => write!(f, "fifo:{priority}"),
            Sched::RoundRobin { priority } => write!(f, "rr:{priority}"),
        }
    }
}

impl FromStr for Sched {
    type Err = QosError;
    fn from_str(s: &str) -> Result<Self, QosError> {
        let bad = |reason: &str| invalid(Property::Sched, s, reason);
        let (policy, arg) = match s.split_once(':') {
            Some((p, a)) => (p, Some(a)),
            None => (s, None),
        };
        let rt = |name: &str| -> Result<u8, QosError> {
            let reason = format!("{name} priority must be 1..=99");
            let Some(arg) = arg else {
                return Err(bad(&format!(
                    "{name} needs a priority: {name}:N with N 1..=99"
                )));
            };
            match arg.parse::<u8>() {
                Ok(n) if (1..=99).contains(&n) => Ok(n),
                _ => Err(bad(&reason)),
            }
        };
        match policy {
            "other" => match arg {
                None => Ok(Sched::Other { nice: 0 }),
                Some(a) => match a.parse::<i8>() {
                    Ok(nice) if (-20..=19).contains(&nice) => Ok(Sched::Other { nice }),
                    _ => Err(bad("nice must be -20..=19")),
                },
            },
            "fifo" => Ok(Sched::Fifo {
                priority: rt("fifo")?,
            }),
            "rr" => Ok(Sched::RoundRobin {
                priority: rt("rr")?,
            }),
            _ => Err(bad(
                "expected other, other:NICE (NICE -20..=19), fifo:N or rr:N (N 1..=99)",
            )),
        }
    }
}

/// The four priority classes: each a quarter of 0–255, named as the
/// `priority` values `low` (0), `normal` (64), `high` (128), `critical` (192).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PriorityClass {
    /// 0..=63.
    Low,
    /// 64..=127.
    Normal,
    /// 128..=191.
    High,
    /// 192..=255.
    Critical,
}

impl PriorityClass {
    /// The class of a priority.
    pub fn of(priority: u8) -> PriorityClass {
        match priority {
            0..=63 => PriorityClass::Low,
            64..=127 => PriorityClass::Normal,
            128..=191 => PriorityClass::High,
            _ => PriorityClass::Critical,
        }
    }

    /// Its DSCP: low AF11 (10), normal CS0 (0), high AF42 (36), critical VA (44).
    pub fn dscp(self) -> u8 {
        match self {
            PriorityClass::Low => 10,
            PriorityClass::Normal => 0,
            PriorityClass::High => 36,
            PriorityClass::Critical => 44,
        }
    }
}

/// The DSCP marking of the links that carry a channel's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Dscp {
    /// The DSCP of the effective priority's class ([`PriorityClass::dscp`]).
    #[default]
    Auto,
    /// A fixed code point, 0..=63.
    Code(u8),
}

impl Dscp {
    /// The code point for events of `priority`.
    pub fn code(self, priority: u8) -> u8 {
        match self {
            Dscp::Auto => PriorityClass::of(priority).dscp(),
            Dscp::Code(c) => c,
        }
    }
}

impl fmt::Display for Dscp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dscp::Auto => f.write_str("auto"),
            Dscp::Code(46) => f.write_str("ef"),
            Dscp::Code(44) => f.write_str("va"),
            Dscp::Code(c) if c.is_multiple_of(8) && c < 64 => write!(f, "cs{}", c / 8),
            Dscp::Code(c) if (1..=4).contains(&(c / 8)) && matches!(c % 8, 2 | 4 | 6) => {
                write!(f, "af{}{}", c / 8, (c % 8) / 2)
            }
            Dscp::Code(c) => write!(f, "{c}"),
        }
    }
}

impl FromStr for Dscp {
    type Err = QosError;
    /// Case-insensitive: `auto`, a class (`low`, `normal`, `high`,
    /// `critical`), a name (`cs0`..`cs7`, `af11`..`af43`, `ef`, `va`) or 0..=63.
    fn from_str(s: &str) -> Result<Self, QosError> {
        let bad = || {
            invalid(
                Property::Dscp,
                s,
                "expected 0..=63, auto, a class (low, normal, high, critical) or a name (cs0..cs7, af11..af43, ef, va)",
            )
        };
        let lower = s.to_ascii_lowercase();
        let code = match lower.as_str() {
            "auto" => return Ok(Dscp::Auto),
            "low" => PriorityClass::Low.dscp(),
            "normal" => PriorityClass::Normal.dscp(),
            "high" => PriorityClass::High.dscp(),
            "critical" => PriorityClass::Critical.dscp(),
            "ef" => 46,
            "va" => 44,
            l => {
                let digit = |c: u8, range: std::ops::RangeInclusive<u8>| {
                    let d = c.wrapping_sub(b'0');
                    range.contains(&d).then_some(d)
                };
                match l.as_bytes() {
                    [b'c', b's', x] => digit(*x, 0..=7).map(|x| 8 * x).ok_or_else(bad)?,
                    [b'a', b'f', x, y] => match (digit(*x, 1..=4), digit(*y, 1..=3)) {
                        (Some(x), Some(y)) => 8 * x + 2 * y,
                        _ => return Err(bad()),
                    },
                    _ if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => {
                        match l.parse::<u8>() {
                            Ok(c) if c <= 63 => c,
                            _ => return Err(invalid(Property::Dscp, s, "must be 0..=63")),
                        }
                    }
                    _ => return Err(bad()),
                }
            }
        };
        Ok(Dscp::Code(code))
    }
}

/// Parses a `priority`: 0..=255 or `low` (0), `normal` (64), `high` (128),
/// `critical` (192) — the names mapping filters use
/// ([`priority_by_name`]).
pub fn parse_priority(s: &str) -> Result<u8, QosError> {
    priority_by_name(s)
        .or_else(|| s.parse().ok())
        .ok_or_else(|| {
            invalid(
                Property::Priority,
                s,
                "expected 0..=255, low, normal, high or critical",
            )
        })
}

/// A priority as shown: its name if it has one, else the number.
fn show_priority(p: u8, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match ["low", "normal", "high", "critical"]
        .into_iter()
        .find(|n| priority_by_name(n) == Some(p))
    {
        Some(name) => f.write_str(name),
        None => write!(f, "{p}"),
    }
}

const UNITS: [(&str, u64); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Parses a duration: a whole number with a unit (`ns`, `us`, `ms`, `s`,
/// `m`, `h`: `250ms`, `2s`, `1m`), or `0`. A plain number other than 0 is
/// refused: a forgotten unit is a likely mistake.
fn parse_duration(s: &str) -> Option<u64> {
    if s == "0" {
        return Some(0);
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let (_, scale) = UNITS.iter().find(|(u, _)| *u == unit)?;
    n.checked_mul(*scale)
}

/// A duration as shown: in the largest unit that divides it.
fn show_duration(ns: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if ns == 0 {
        return f.write_str("0");
    }
    let (unit, scale) = UNITS
        .iter()
        .find(|(_, scale)| ns.is_multiple_of(*scale))
        .expect("every duration is a whole number of ns");
    write!(f, "{}{unit}", ns / scale)
}

/// Parses a byte count: a whole number, optionally with `KiB`, `MiB` or
/// `GiB`.
fn parse_bytes(s: &str) -> Option<usize> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: usize = n.parse().ok()?;
    let scale = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// A byte count as shown: in the largest binary unit that divides it.
fn show_bytes(n: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (unit, scale) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= scale && n.is_multiple_of(scale) {
            return write!(f, "{}{unit}", n / scale);
        }
    }
    write!(f, "{n}")
}

const BUFFER_SYNTAX: &str = "expected none, on, or one or more of count:N (1..=1048576), bytes:B (1..=1GiB; KiB, MiB, GiB), max_delay:D (1ns..=60s, with a unit), release:F (0.5..=1.0) separated by commas, e.g. count:64,max_delay:50ms,release:0.5";

/// Parses `buffer`: `none`, `on` (the defaults), or `key:value` pairs
/// separated by commas (each key at most once; the others keep their
/// defaults, [`BufferConfig::default`]).
fn parse_buffer(s: &str) -> Result<Option<BufferConfig>, QosError> {
    let bad = |why: &str| invalid(Property::Buffer, s, why);
    match s {
        "none" => return Ok(None),
        "on" => return Ok(Some(BufferConfig::default())),
        "" => return Err(bad(BUFFER_SYNTAX)),
        _ => {}
    }
    let mut b = BufferConfig::default();
    let mut seen = [false; 4];
    for part in s.split(',') {
        let Some((key, v)) = part.split_once(':') else {
            return Err(bad(&format!("{part:?} is not key:value; {BUFFER_SYNTAX}")));
        };
        let at = match key {
            "count" => 0,
            "bytes" => 1,
            "max_delay" => 2,
            "release" => 3,
            _ => return Err(bad(&format!("unknown key {key:?}; {BUFFER_SYNTAX}"))),
        };
        if std::mem::replace(&mut seen[at], true) {
            return Err(bad(&format!("{key} is given twice")));
        }
        match at {
            0 => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_EVENTS).contains(&n) => b.max_events = n,
                _ => return Err(bad(&format!("count must be 1..={MAX_EVENTS} events"))),
            },
            1 => {
                match parse_bytes(v) {
                    Some(n) if (1..=MAX_BYTES).contains(&n) => b.max_bytes = n,
                    _ => return Err(bad(
                        "bytes must be 1..=1GiB: a whole number, optionally with KiB, MiB or GiB",
                    )),
                }
            }
            2 => match parse_duration(v) {
                Some(ns) if (1..=MAX_HOLD_NS).contains(&ns) => b.max_delay_ns = ns,
                _ => return Err(bad(
                    "max_delay must be a duration 1ns..=60s with a unit (ns, us, ms, s), e.g. 50ms",
                )),
            },
            _ => {
                b.release_permille = parse_factor(v).ok_or_else(|| {
                    bad("release must be a factor 0.5..=1.0 with at most three decimals, e.g. 0.75")
                })?
            }
        }
    }
    Ok(Some(b))
}

/// Parses a release factor `0.5`..=`1.0` (at most three decimals) into
/// thousandths.
fn parse_factor(s: &str) -> Option<u16> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if whole.is_empty()
        || frac.len() > 3
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || whole.len() > 1
    {
        return None;
    }
    let mut permille: u32 = whole.parse::<u32>().ok()? * 1000;
    for (i, d) in frac.bytes().enumerate() {
        permille += u32::from(d - b'0') * [100, 10, 1][i];
    }
    (500..=1000).contains(&permille).then_some(permille as u16)
}

fn show_buffer(b: &BufferConfig, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "count:{},bytes:", b.max_events)?;
    show_bytes(b.max_bytes, f)?;
    f.write_str(",max_delay:")?;
    show_duration(b.max_delay_ns, f)?;
    let p = b.release_permille;
    if p == 1000 {
        f.write_str(",release:1.0")
    } else {
        let frac = format!("{p:03}");
        write!(f, ",release:0.{}", frac.trim_end_matches('0'))
    }
}

const PLAYOUT_SYNTAX: &str = "expected none, tds:DELAY or tds:DELAY:drop (DELAY 1ns..=60s with a unit, e.g. tds:100ms; :drop drops late events, :deliver, the default, delivers them at once)";

/// Parses `playout`: `none`, `tds:DELAY`, `tds:DELAY:deliver` or
/// `tds:DELAY:drop`.
fn parse_playout(s: &str) -> Result<Option<PlayoutConfig>, QosError> {
    if s == "none" {
        return Ok(None);
    }
    let bad = || invalid(Property::Playout, s, PLAYOUT_SYNTAX);
    let rest = s.strip_prefix("tds:").ok_or_else(bad)?;
    let (delay, late) = match rest.split_once(':') {
        None => (rest, LatePolicy::Deliver),
        Some((d, "deliver")) => (d, LatePolicy::Deliver),
        Some((d, "drop")) => (d, LatePolicy::Drop),
        Some(_) => return Err(bad()),
    };
    match parse_duration(delay) {
        Some(ns) if (1..=MAX_HOLD_NS).contains(&ns) => {
            Ok(Some(PlayoutConfig { delay_ns: ns, late }))
        }
        _ => Err(bad()),
    }
}

impl std::str::FromStr for PlayoutConfig {
    type Err = QosError;

    /// `tds:DELAY`, `tds:DELAY:deliver` or `tds:DELAY:drop`, as the
    /// `playout` property takes them (`none` is refused: no playout is no
    /// value here).
    fn from_str(s: &str) -> Result<Self, QosError> {
        parse_playout(s)?.ok_or_else(|| invalid(Property::Playout, s, PLAYOUT_SYNTAX))
    }
}

pub(super) fn invalid(p: Property, value: &str, reason: &str) -> QosError {
    QosError::InvalidValue {
        name: p.name().to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A full QoS set: a value for every property. [`QosSet::default`] holds the
/// built-in defaults (see `docs/configuration.md`, "QoS reference").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QosSet {
    /// 0 (lowest) to 255 (highest); default `normal` (64).
    pub priority: u8,
    /// Whose priority picks the lane; default client-propagated.
    pub priority_model: PriorityModel,
    /// The serving lane's scheduling; default `other`.
    pub sched: Sched,
    /// The links' marking; default `auto` (by priority class).
    pub dscp: Dscp,
    /// Lifetime after the event's source time, ns; `None`: no limit.
    pub timeout: Option<u64>,
    /// Absolute expiry, ns since the Unix epoch; `None`: none.
    pub stop_time: Option<u64>,
    /// Earliest delivery, ns since the Unix epoch; `None`: at once.
    pub start_time: Option<u64>,
    /// Delivery order of queued events; default fifo.
    pub order: OrderPolicy,
    /// What a full queue drops; default drop_oldest.
    pub discard: DiscardPolicy,
    /// A channel's queue bound, events; default 1024.
    pub max_queue_length: usize,
    /// Events queued for one consumer across its channels; `None`: no bound
    /// beyond each channel's.
    pub max_events_per_consumer: Option<usize>,
    /// Most events of one channel per write; default 64.
    pub max_batch: usize,
    /// ns to collect events before writing them; 0: write at once.
    pub pacing_interval: u64,
    /// Subscribing endpoints a tag may have; `None`: unlimited.
    pub max_consumers: Option<usize>,
    /// Publishing endpoints a tag may have; `None`: unlimited.
    pub max_suppliers: Option<usize>,
    /// The configured band serving the events; `None` (`auto`): the lane of
    /// the priority.
    pub band: Option<Arc<str>>,
    /// Events of a tag kept per publisher for pulls (its pull buffer); 0:
    /// none (the default).
    pub history: usize,
    /// Temporal scaling: 1 of every `scale` events (1: all, the default).
    pub scale: u32,
    /// Temporal scaling: least source-time gap between events, ns (0: none).
    pub min_interval: u64,
    /// Where the scaling proxy runs; default at the subscriber's daemon.
    pub proxy: ProxyMode,
    /// End-to-end delay bound for proxy placement, ns; `None`: unbounded.
    pub max_delay: Option<u64>,
    /// Shared memory for same-host payloads; default auto.
    pub shm: ShmMode,
    /// What delivery promises; default best_effort.
    pub reliability: Reliability,
    /// The buffering service (time-ordering); `None`: off (the default).
    pub buffer: Option<BufferConfig>,
    /// The time-differential service (spacing-preserving playout); `None`:
    /// off (the default).
    pub playout: Option<PlayoutConfig>,
    /// How the tag's events cross links; default none.
    pub compression: crate::compress::Compression,
}

impl Default for QosSet {
    fn default() -> Self {
        QosSet {
            priority: DEFAULT_PRIORITY,
            priority_model: PriorityModel::default(),
            sched: Sched::default(),
            dscp: Dscp::default(),
            timeout: None,
            stop_time: None,
            start_time: None,
            order: OrderPolicy::default(),
            discard: DiscardPolicy::default(),
            max_queue_length: DEFAULT_QUEUE_LENGTH,
            max_events_per_consumer: None,
            max_batch: DEFAULT_MAX_BATCH,
            pacing_interval: 0,
            max_consumers: None,
            max_suppliers: None,
            band: None,
            history: 0,
            scale: 1,
            min_interval: 0,
            proxy: ProxyMode::AtSubscriber,
            max_delay: None,
            shm: ShmMode::Auto,
            reliability: Reliability::BestEffort,
            buffer: None,
            playout: None,
            compression: crate::compress::Compression::default(),
        }
    }
}

/// Parses a count in `1..=max`, or `unlimited` when `unlimited` is allowed.
fn count(p: Property, s: &str, max: usize, unlimited: bool) -> Result<Option<usize>, QosError> {
    if unlimited && s == "unlimited" {
        return Ok(None);
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
        _ if unlimited => Err(invalid(p, s, &format!("must be 1..={max} or unlimited"))),
        _ => Err(invalid(p, s, &format!("must be 1..={max}"))),
    }
}

/// Parses an absolute time (ns since the Unix epoch) or `none`.
fn time(p: Property, s: &str) -> Result<Option<u64>, QosError> {
    match s {
        "none" => Ok(None),
        _ => match s.parse::<u64>() {
            Ok(t) if t < u64::MAX => Ok(Some(t)),
            _ => Err(invalid(
                p,
                s,
                "expected ns since the Unix epoch, 0..=18446744073709551614, or none",
            )),
        },
    }
}

impl QosSet {
    /// The DSCP of this channel's events at its own priority.
    pub fn dscp_code(&self) -> u8 {
        self.dscp.code(self.priority)
    }

    /// Parses `value` for `p` into this set. On error nothing changes.
    /// `bands` are the configured band names (for `band`).
    pub(super) fn assign(
        &mut self,
        p: Property,
        value: &str,
        bands: &[String],
    ) -> Result<(), QosError> {
        let s = value;
        match p {
            Property::Priority => self.priority = parse_priority(s)?,
            Property::PriorityModel => self.priority_model = s.parse()?,
            Property::Sched => self.sched = s.parse()?,
            Property::Dscp => self.dscp = s.parse()?,
            Property::Timeout => {
                self.timeout = match s {
                    "none" => None,
                    _ => match parse_duration(s) {
                        Some(ns) if ns > 0 && ns < u64::MAX => Some(ns),
                        _ => return Err(invalid(
                            p,
                            s,
                            "expected a positive duration with a unit (ns, us, ms, s, m, h), e.g. 250ms, or none",
                        )),
                    },
                }
            }
            Property::StopTime => self.stop_time = time(p, s)?,
            Property::StartTime => self.start_time = time(p, s)?,
            Property::Order => {
                self.order = s
                    .parse()
                    .map_err(|_| invalid(p, s, "expected fifo|any, lifo, priority or deadline"))?
            }
            Property::Discard => {
                self.discard = s.parse().map_err(|_| {
                    invalid(
                        p,
                        s,
                        "expected drop_oldest|fifo, drop_newest|lifo, priority, deadline or reject|reject_new",
                    )
                })?
            }
            Property::MaxQueueLength => {
                self.max_queue_length = count(p, s, MAX_QUEUE_LENGTH, false)?
                    .expect("a count without `unlimited` is a number")
            }
            Property::MaxEventsPerConsumer => {
                self.max_events_per_consumer = count(p, s, MAX_EVENTS_PER_CONSUMER, true)?
            }
            Property::MaxBatch => {
                self.max_batch = count(p, s, MAX_BATCH, false)?
                    .expect("a count without `unlimited` is a number")
            }
            Property::PacingInterval => {
                self.pacing_interval = match parse_duration(s) {
                    Some(ns) if ns <= MAX_PACING_INTERVAL_NS => ns,
                    _ => {
                        return Err(invalid(
                            p,
                            s,
                            "expected a duration 0..=60s with a unit (ns, us, ms, s, m), e.g. 10ms, or 0",
                        ))
                    }
                }
            }
            Property::MaxConsumers => self.max_consumers = count(p, s, MAX_CLIENTS, true)?,
            Property::MaxSuppliers => self.max_suppliers = count(p, s, MAX_CLIENTS, true)?,
            Property::Band => {
                self.band = match s {
                    "auto" => None,
                    _ => match bands.iter().find(|b| *b == s) {
                        Some(b) => Some(Arc::from(b.as_str())),
                        None => return Err(invalid(p, s, &band_reason(bands))),
                    },
                }
            }
            Property::Proxy => self.proxy = s.parse()?,
            Property::Shm => self.shm = s.parse()?,
            Property::Reliability => self.reliability = s.parse()?,
            Property::Buffer => self.buffer = parse_buffer(s)?,
            Property::Playout => self.playout = parse_playout(s)?,
            Property::Compression => {
                self.compression = s
                    .parse()
                    .map_err(|e: crate::compress::CompressionSyntax| {
                        invalid(Property::Compression, s, &e.to_string())
                    })?
            }
            Property::MaxDelay => {
                self.max_delay = match s {
                    "none" => None,
                    _ => match parse_duration(s) {
                        Some(ns) if ns <= 3_600_000_000_000 => Some(ns),
                        _ => {
                            return Err(invalid(
                                p,
                                s,
                                "expected a duration 0..=1h with a unit (ns, us, ms, s, m, h), e.g. 50ms, or none",
                            ))
                        }
                    },
                }
            }
            Property::Scale => {
                self.scale = match s.parse::<u32>() {
                    Ok(n) if (1..=crate::proxy::MAX_SCALE).contains(&n) => n,
                    _ => {
                        return Err(invalid(
                            p,
                            s,
                            &format!(
                                "must be 1..={} (1 of every n events; 1: all)",
                                crate::proxy::MAX_SCALE
                            ),
                        ))
                    }
                }
            }
            Property::MinInterval => {
                self.min_interval = match parse_duration(s) {
                    Some(ns) if ns <= 3_600_000_000_000 => ns,
                    _ => {
                        return Err(invalid(
                            p,
                            s,
                            "expected a duration 0..=1h with a unit (ns, us, ms, s, m, h), e.g. 100ms, or 0",
                        ))
                    }
                }
            }
            Property::History => {
                self.history = match s.parse::<usize>() {
                    Ok(n) if n <= MAX_HISTORY => n,
                    _ => {
                        return Err(invalid(
                            p,
                            s,
                            &format!("must be 0..={MAX_HISTORY} events (0: no history)"),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies `p`'s value from `other`.
    pub(super) fn copy_from(&mut self, other: &QosSet, p: Property) {
        match p {
            Property::Priority => self.priority = other.priority,
            Property::PriorityModel => self.priority_model = other.priority_model,
            Property::Sched => self.sched = other.sched,
            Property::Dscp => self.dscp = other.dscp,
            Property::Timeout => self.timeout = other.timeout,
            Property::StopTime => self.stop_time = other.stop_time,
            Property::StartTime => self.start_time = other.start_time,
            Property::Order => self.order = other.order,
            Property::Discard => self.discard = other.discard,
            Property::MaxQueueLength => self.max_queue_length = other.max_queue_length,
            Property::MaxEventsPerConsumer => {
                self.max_events_per_consumer = other.max_events_per_consumer
            }
            Property::MaxBatch => self.max_batch = other.max_batch,
            Property::PacingInterval => self.pacing_interval = other.pacing_interval,
            Property::MaxConsumers => self.max_consumers = other.max_consumers,
            Property::MaxSuppliers => self.max_suppliers = other.max_suppliers,
            Property::Band => self.band.clone_from(&other.band),
            Property::History => self.history = other.history,
            Property::Scale => self.scale = other.scale,
            Property::Proxy => self.proxy = other.proxy.clone(),
            Property::MaxDelay => self.max_delay = other.max_delay,
            Property::Shm => self.shm = other.shm,
            Property::Reliability => self.reliability = other.reliability,
            Property::Buffer => self.buffer = other.buffer,
            Property::Playout => self.playout = other.playout,
            Property::Compression => self.compression = other.compression,
            Property::MinInterval => self.min_interval = other.min_interval,
        }
    }

    /// `p`'s value as users write it (it parses back to the same value).
    pub fn show(&self, p: Property) -> ShowValue<'_> {
        ShowValue { set: self, p }
    }
}

/// The accepted band names, for an error message (at most 8 listed).
fn band_reason(bands: &[String]) -> String {
    if bands.is_empty() {
        return "no bands are configured; expected auto".to_owned();
    }
    let mut listed: Vec<&str> = bands.iter().take(8).map(String::as_str).collect();
    if bands.len() > 8 {
        listed.push("…");
    }
    format!(
        "not a configured band; expected auto or one of: {}",
        listed.join(", ")
    )
}

/// One property's value, displayed as users write it; see [`QosSet::show`].
#[derive(Debug, Clone, Copy)]
pub struct ShowValue<'a> {
    set: &'a QosSet,
    p: Property,
}

impl fmt::Display for ShowValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.set;
        let opt = |f: &mut fmt::Formatter<'_>, v: Option<usize>, none: &str| match v {
            Some(n) => write!(f, "{n}"),
            None => f.write_str(none),
        };
        match self.p {
            Property::Priority => show_priority(q.priority, f),
            Property::PriorityModel => q.priority_model.fmt(f),
            Property::Sched => q.sched.fmt(f),
            Property::Dscp => q.dscp.fmt(f),
            Property::Timeout => match q.timeout {
                Some(ns) => show_duration(ns, f),
                None => f.write_str("none"),
            },
            Property::StopTime | Property::StartTime => {
                let t = if self.p == Property::StopTime {
                    q.stop_time
                } else {
                    q.start_time
                };
                match t {
                    Some(t) => write!(f, "{t}"),
                    None => f.write_str("none"),
                }
            }
            Property::Order => q.order.fmt(f),
            Property::Discard => q.discard.fmt(f),
            Property::MaxQueueLength => write!(f, "{}", q.max_queue_length),
            Property::MaxEventsPerConsumer => opt(f, q.max_events_per_consumer, "unlimited"),
            Property::MaxBatch => write!(f, "{}", q.max_batch),
            Property::PacingInterval => show_duration(q.pacing_interval, f),
            Property::MaxConsumers => opt(f, q.max_consumers, "unlimited"),
            Property::MaxSuppliers => opt(f, q.max_suppliers, "unlimited"),
            Property::Band => f.write_str(q.band.as_deref().unwrap_or("auto")),
            Property::History => write!(f, "{}", q.history),
            Property::Scale => write!(f, "{}", q.scale),
            Property::Proxy => q.proxy.fmt(f),
            Property::MaxDelay => match q.max_delay {
                Some(ns) => show_duration(ns, f),
                None => f.write_str("none"),
            },
            Property::MinInterval => show_duration(q.min_interval, f),
            Property::Shm => q.shm.fmt(f),
            Property::Reliability => q.reliability.fmt(f),
            Property::Compression => q.compression.fmt(f),
            Property::Buffer => match &q.buffer {
                Some(b) => show_buffer(b, f),
                None => f.write_str("none"),
            },
            Property::Playout => match &q.playout {
                Some(p) => {
                    f.write_str("tds:")?;
                    show_duration(p.delay_ns, f)?;
                    match p.late {
                        LatePolicy::Deliver => Ok(()),
                        LatePolicy::Drop => f.write_str(":drop"),
                    }
                }
                None => f.write_str("none"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(p: Property, value: &str) -> String {
        let mut q = QosSet::default();
        q.assign(p, value, &["video".to_owned(), "control".to_owned()])
            .unwrap_or_else(|e| panic!("{p}={value}: {e}"));
        q.show(p).to_string()
    }

    /// The error for a bad value: it names the property and the value, and
    /// contains `reason`.
    #[track_caller]
    fn bad(p: Property, value: &str, reason: &str) {
        let mut q = QosSet::default();
        let before = q.clone();
        let e = q
            .assign(p, value, &["video".to_owned()])
            .expect_err("a bad value");
        assert_eq!(q, before, "a refused value changes nothing");
        let text = e.to_string();
        assert!(text.contains(p.name()), "{text}");
        assert!(text.contains(&format!("\"{value}\"")), "{text}");
        assert!(text.contains(reason), "{p}={value}: {text}");
    }

    #[test]
    fn compression_takes_a_codec_and_a_minimum_on_a_tag_or_the_daemon() {
        for v in ["none", "lz4", "zstd", "zstd:4KiB", "lz4:0"] {
            assert_eq!(ok(Property::Compression, v), v);
        }
        assert_eq!(QosSet::default().compression.codec, None);
        bad(Property::Compression, "gzip", "expected none, lz4, zstd");
        bad(Property::Compression, "lz4:4k", "MIN a byte count");
        assert!(Property::Compression.settable_at(Level::Daemon));
        assert!(Property::Compression.settable_at(Level::Tag));
        for l in [Level::Session, Level::Channel, Level::Event] {
            assert!(!Property::Compression.settable_at(l), "{l}");
        }
        assert_eq!(
            Property::from_name("compression"),
            Some(Property::Compression)
        );
    }

    #[test]
    fn reliability_takes_its_four_names_at_every_level_up_to_the_channel() {
        for v in ["best_effort", "reliable", "exactly_once", "durable"] {
            assert_eq!(ok(Property::Reliability, v), v);
        }
        assert_eq!(QosSet::default().reliability, Reliability::BestEffort);
        bad(
            Property::Reliability,
            "at_least_once",
            "best_effort, reliable, exactly_once or durable",
        );
        bad(Property::Reliability, "", "best_effort, reliable");
        for l in [Level::Daemon, Level::Tag, Level::Session, Level::Channel] {
            assert!(Property::Reliability.settable_at(l), "{l}");
        }
        assert!(!Property::Reliability.settable_at(Level::Event));
        assert_eq!(
            Property::from_name("reliability"),
            Some(Property::Reliability)
        );
    }

    #[test]
    fn buffer_takes_its_four_criteria_and_names_each_mistake() {
        assert_eq!(ok(Property::Buffer, "none"), "none");
        assert_eq!(
            ok(Property::Buffer, "on"),
            "count:1024,bytes:8MiB,max_delay:100ms,release:1.0"
        );
        assert_eq!(
            ok(
                Property::Buffer,
                "count:64,bytes:1048576,max_delay:50ms,release:0.5"
            ),
            "count:64,bytes:1MiB,max_delay:50ms,release:0.5"
        );
        assert_eq!(
            ok(Property::Buffer, "release:0.75"),
            "count:1024,bytes:8MiB,max_delay:100ms,release:0.75"
        );
        assert_eq!(
            ok(Property::Buffer, "bytes:1000,release:1"),
            "count:1024,bytes:1000,max_delay:100ms,release:1.0"
        );
        assert_eq!(QosSet::default().buffer, None);
        bad(Property::Buffer, "count:0", "count must be 1..=1048576");
        bad(
            Property::Buffer,
            "count:1048577",
            "count must be 1..=1048576",
        );
        bad(Property::Buffer, "bytes:2GiB", "bytes must be 1..=1GiB");
        bad(Property::Buffer, "bytes:1kb", "bytes must be 1..=1GiB");
        bad(Property::Buffer, "max_delay:50", "max_delay must be");
        bad(Property::Buffer, "max_delay:61s", "max_delay must be");
        bad(
            Property::Buffer,
            "release:0.4",
            "release must be a factor 0.5..=1.0",
        );
        bad(Property::Buffer, "release:1.01", "release must be a factor");
        bad(
            Property::Buffer,
            "release:0.5555",
            "release must be a factor",
        );
        bad(Property::Buffer, "release:-1", "release must be a factor");
        bad(Property::Buffer, "count:4,count:5", "count is given twice");
        bad(Property::Buffer, "size:4", "unknown key \"size\"");
        bad(Property::Buffer, "count", "is not key:value");
        bad(Property::Buffer, "", "expected none, on, or one or more");
        assert!(Property::Buffer.settable_at(Level::Channel));
        assert!(!Property::Buffer.settable_at(Level::Event));
    }

    #[test]
    fn playout_takes_tds_with_a_delay_and_a_late_policy() {
        assert_eq!(ok(Property::Playout, "none"), "none");
        assert_eq!(ok(Property::Playout, "tds:100ms"), "tds:100ms");
        assert_eq!(ok(Property::Playout, "tds:1000ms:deliver"), "tds:1s");
        assert_eq!(ok(Property::Playout, "tds:500us:drop"), "tds:500us:drop");
        assert_eq!(QosSet::default().playout, None);
        for v in [
            "tds",
            "tds:",
            "tds:0",
            "tds:100",
            "tds:61s",
            "tds:1ms:keep",
            "rtp:1ms",
            "",
        ] {
            bad(
                Property::Playout,
                v,
                "expected none, tds:DELAY or tds:DELAY:drop",
            );
        }
        assert!(Property::Playout.settable_at(Level::Session));
        assert!(!Property::Playout.settable_at(Level::Event));
    }

    #[test]
    fn priority_takes_names_and_numbers() {
        assert_eq!(ok(Property::Priority, "high"), "high");
        assert_eq!(ok(Property::Priority, "128"), "high");
        assert_eq!(ok(Property::Priority, "0"), "low");
        assert_eq!(ok(Property::Priority, "255"), "255");
        assert_eq!(ok(Property::Priority, "critical"), "critical");
        bad(Property::Priority, "256", "0..=255");
        bad(Property::Priority, "-1", "0..=255");
        bad(Property::Priority, "HIGH", "low, normal, high or critical");
        bad(Property::Priority, "", "0..=255");
    }

    #[test]
    fn priority_model_takes_its_two_names() {
        assert_eq!(
            ok(Property::PriorityModel, "server_declared"),
            "server_declared"
        );
        assert_eq!(
            ok(Property::PriorityModel, "client_propagated"),
            "client_propagated"
        );
        bad(
            Property::PriorityModel,
            "server",
            "client_propagated or server_declared",
        );
    }

    #[test]
    fn sched_checks_each_policy_range() {
        assert_eq!(ok(Property::Sched, "other"), "other");
        assert_eq!(ok(Property::Sched, "other:-20"), "other:-20");
        assert_eq!(ok(Property::Sched, "other:19"), "other:19");
        assert_eq!(ok(Property::Sched, "other:0"), "other");
        assert_eq!(ok(Property::Sched, "fifo:1"), "fifo:1");
        assert_eq!(ok(Property::Sched, "rr:99"), "rr:99");
        bad(Property::Sched, "fifo:200", "fifo priority must be 1..=99");
        bad(Property::Sched, "fifo:0", "fifo priority must be 1..=99");
        bad(Property::Sched, "rr:100", "rr priority must be 1..=99");
        bad(Property::Sched, "fifo", "fifo needs a priority: fifo:N");
        bad(Property::Sched, "other:20", "nice must be -20..=19");
        bad(Property::Sched, "other:-21", "nice must be -20..=19");
        bad(Property::Sched, "other:x", "nice must be -20..=19");
        bad(Property::Sched, "batch", "expected other, other:NICE");
    }

    #[test]
    fn dscp_takes_classes_names_and_codes_in_any_case() {
        assert_eq!(ok(Property::Dscp, "low"), "af11");
        assert_eq!(ok(Property::Dscp, "normal"), "cs0");
        assert_eq!(ok(Property::Dscp, "high"), "af42");
        assert_eq!(ok(Property::Dscp, "critical"), "va");
        assert_eq!(ok(Property::Dscp, "AF11"), "af11");
        assert_eq!(ok(Property::Dscp, "af43"), "af43");
        assert_eq!(ok(Property::Dscp, "CS7"), "cs7");
        assert_eq!(ok(Property::Dscp, "EF"), "ef");
        assert_eq!(ok(Property::Dscp, "Va"), "va");
        assert_eq!(ok(Property::Dscp, "63"), "63");
        assert_eq!(ok(Property::Dscp, "36"), "af42");
        assert_eq!(ok(Property::Dscp, "auto"), "auto");
        bad(Property::Dscp, "64", "must be 0..=63");
        bad(Property::Dscp, "af44", "af11..af43");
        bad(Property::Dscp, "af51", "af11..af43");
        bad(Property::Dscp, "cs8", "cs0..cs7");
        bad(Property::Dscp, "best", "expected 0..=63");
        assert_eq!(Dscp::Auto.code(200), 44);
        assert_eq!(Dscp::Auto.code(0), 10);
        assert_eq!(Dscp::Code(46).code(0), 46);
    }

    #[test]
    fn durations_need_a_unit_and_show_in_the_largest_one() {
        assert_eq!(ok(Property::Timeout, "250ms"), "250ms");
        assert_eq!(ok(Property::Timeout, "2000ms"), "2s");
        assert_eq!(ok(Property::Timeout, "60s"), "1m");
        assert_eq!(ok(Property::Timeout, "1h"), "1h");
        assert_eq!(ok(Property::Timeout, "7ns"), "7ns");
        assert_eq!(ok(Property::Timeout, "none"), "none");
        bad(Property::Timeout, "250", "with a unit");
        bad(Property::Timeout, "0", "positive duration");
        bad(Property::Timeout, "0ms", "positive duration");
        bad(Property::Timeout, "1.5s", "positive duration");
        bad(Property::Timeout, "2 s", "positive duration");
        bad(Property::Timeout, "99999999999h", "positive duration");
        assert_eq!(ok(Property::PacingInterval, "0"), "0");
        assert_eq!(ok(Property::PacingInterval, "10ms"), "10ms");
        assert_eq!(ok(Property::PacingInterval, "60s"), "1m");
        bad(Property::PacingInterval, "61s", "0..=60s");
        bad(Property::PacingInterval, "10", "with a unit");
    }

    #[test]
    fn times_are_ns_since_the_epoch_or_none() {
        assert_eq!(
            ok(Property::StopTime, "1700000000000000000"),
            "1700000000000000000"
        );
        assert_eq!(ok(Property::StartTime, "0"), "0");
        assert_eq!(ok(Property::StartTime, "none"), "none");
        bad(
            Property::StopTime,
            "18446744073709551615",
            "0..=18446744073709551614",
        );
        bad(Property::StartTime, "tomorrow", "ns since the Unix epoch");
        bad(Property::StartTime, "-1", "ns since the Unix epoch");
    }

    #[test]
    fn order_and_discard_take_their_policies_and_aliases() {
        assert_eq!(ok(Property::Order, "any"), "fifo");
        assert_eq!(ok(Property::Order, "deadline"), "deadline");
        assert_eq!(ok(Property::Order, "priority"), "priority");
        assert_eq!(ok(Property::Order, "lifo"), "lifo");
        bad(
            Property::Order,
            "random",
            "fifo|any, lifo, priority or deadline",
        );
        assert_eq!(ok(Property::Discard, "fifo"), "drop_oldest");
        assert_eq!(ok(Property::Discard, "lifo"), "drop_newest");
        assert_eq!(ok(Property::Discard, "reject_new"), "reject");
        assert_eq!(ok(Property::Discard, "priority"), "priority");
        assert_eq!(ok(Property::Discard, "deadline"), "deadline");
        bad(Property::Discard, "oldest", "drop_oldest|fifo");
    }

    #[test]
    fn counts_check_their_ranges() {
        assert_eq!(ok(Property::MaxQueueLength, "1"), "1");
        assert_eq!(ok(Property::MaxQueueLength, "1048576"), "1048576");
        bad(Property::MaxQueueLength, "0", "must be 1..=1048576");
        bad(Property::MaxQueueLength, "1048577", "must be 1..=1048576");
        bad(Property::MaxQueueLength, "unlimited", "must be 1..=1048576");
        assert_eq!(ok(Property::MaxEventsPerConsumer, "unlimited"), "unlimited");
        assert_eq!(ok(Property::MaxEventsPerConsumer, "5000"), "5000");
        bad(
            Property::MaxEventsPerConsumer,
            "0",
            "must be 1..=16777216 or unlimited",
        );
        assert_eq!(ok(Property::MaxBatch, "4096"), "4096");
        bad(Property::MaxBatch, "4097", "must be 1..=4096");
        assert_eq!(ok(Property::MaxConsumers, "10"), "10");
        assert_eq!(ok(Property::MaxSuppliers, "unlimited"), "unlimited");
        bad(
            Property::MaxSuppliers,
            "0",
            "must be 1..=1000000 or unlimited",
        );
        bad(
            Property::MaxConsumers,
            "1e3",
            "must be 1..=1000000 or unlimited",
        );
    }

    #[test]
    fn history_is_a_count_of_events_up_to_the_hard_bound() {
        assert_eq!(ok(Property::History, "100"), "100");
        assert_eq!(ok(Property::History, "0"), "0");
        assert_eq!(ok(Property::History, "1000000"), "1000000");
        bad(Property::History, "1000001", "must be 0..=1000000 events");
        bad(Property::History, "-1", "must be 0..=1000000 events");
        bad(Property::History, "lots", "must be 0..=1000000 events");
        assert!(!Property::History.settable_at(Level::Channel));
        assert!(Property::History.settable_at(Level::Tag));
    }

    #[test]
    fn band_must_be_configured() {
        assert_eq!(ok(Property::Band, "video"), "video");
        assert_eq!(ok(Property::Band, "auto"), "auto");
        bad(Property::Band, "bulk", "expected auto or one of: video");
        let e = QosSet::default()
            .assign(Property::Band, "video", &[])
            .expect_err("no bands");
        assert!(e.to_string().contains("no bands are configured"), "{e}");
    }

    #[test]
    fn names_and_levels() {
        for p in Property::ALL {
            assert_eq!(Property::from_name(p.name()), Some(p));
            assert!(p.settable_at(Level::Channel) || p.settable_at(Level::Tag));
        }
        assert_eq!(
            Property::from_name("pacing"),
            Some(Property::PacingInterval)
        );
        assert_eq!(Property::from_name("Priority"), None);
        assert!(Property::Priority.settable_at(Level::Event));
        assert!(!Property::Order.settable_at(Level::Event));
        assert!(!Property::MaxConsumers.settable_at(Level::Session));
        assert!(!Property::StopTime.settable_at(Level::Daemon));
        for l in Level::ALL {
            assert_eq!(Level::from_name(l.as_str()), Some(l));
        }
        assert_eq!(Level::from_name("endpoint"), Some(Level::Channel));
    }
}
