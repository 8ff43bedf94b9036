//! The clap types of the `tagwire` command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Default `--local-queue` of `tagwire sub`: four times the router's default
/// queue, so a burst that the terminal or pipe takes slowly is absorbed, not
/// dropped.
pub const LOCAL_QUEUE: usize = 4096;

/// The tagwire command line.
#[derive(Debug, Parser)]
#[command(
    name = "tagwire",
    version,
    about = "tagwire: real-time publish/subscribe from the command line"
)]
pub struct Cli {
    /// Router to talk to: tcp://HOST:PORT, tls://HOST:PORT or unix:///PATH
    /// [default: the local daemon's Unix socket if present, else
    /// tcp://127.0.0.1:7700].
    #[arg(long, short, global = true, env = "TAGWIRE_SERVER")]
    pub server: Option<String>,
    /// Seconds to wait for the router to accept the connection and answer
    /// the handshake before giving up.
    #[arg(
        long,
        global = true,
        env = "TAGWIRE_CONNECT_TIMEOUT",
        default_value_t = 5.0,
        value_name = "SECS"
    )]
    pub connect_timeout: f64,
    /// Seconds a publish or request waits for a lost connection to come
    /// back (a daemon restart) before failing.
    #[arg(
        long,
        global = true,
        env = "TAGWIRE_RECONNECT_WAIT",
        default_value_t = 5.0,
        value_name = "SECS"
    )]
    pub reconnect_wait: f64,
    /// Priority band to use (low, normal, high, critical by default): the
    /// connection goes to the band's listener, carries its DSCP, and its
    /// reader thread runs with the band's scheduling. `auto`: each event
    /// travels on the band of its --priority (client-propagated priority).
    /// Default: the server's default band.
    #[arg(long, global = true, env = "TAGWIRE_BAND", value_name = "BAND")]
    pub band: Option<String>,
    /// The largest frame this client offers the daemon, in bytes (4096 to
    /// 268435456; default 16777216): events larger than 16 MiB need it, and
    /// the daemon's `limits.max_frame`, raised. `pub --file` raises it to fit.
    #[arg(long, global = true, value_name = "BYTES")]
    pub max_frame: Option<u32>,
    /// TLS settings for a tls:// server.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// TLS settings for `tls://` servers (see docs/security.md).
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// CA certificates (PEM) the server's certificate must chain to.
    #[arg(long, global = true, env = "TAGWIRE_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for a router that requires one (mTLS).
    #[arg(long, global = true, env = "TAGWIRE_TLS_CERT", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, global = true, env = "TAGWIRE_TLS_KEY", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Name the server's certificate must carry [default: the URL's host].
    #[arg(
        long,
        global = true,
        env = "TAGWIRE_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    /// The library's TLS settings.
    pub fn options(&self) -> tagwire::TlsOptions {
        tagwire::TlsOptions {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
        }
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Publish events on a tag.
    Pub(PubArgs),
    /// Subscribe to a tag pattern and print events.
    Sub(SubArgs),
    /// Read a tag's history (events kept by its `history` QoS property).
    Pull(PullArgs),
    /// List tags, endpoints and subscriptions (with queue depth and drops).
    List(ListArgs),
    /// Measure round trips to the router.
    Ping(PingArgs),
    /// Show the daemon's network time: its clock corrected by its offset to
    /// the network's reference daemon (docs/federation.md, "Time").
    Time(TimeArgs),
    /// Benchmark throughput, latency or fan-out against a router.
    Bench(BenchArgs),
    /// Administer the router (QoS, filters).
    Admin(AdminArgs),
    /// Choose proxy placement for a topology (exhaustive search, branch and bound or MIP).
    Place(tagwire_place::cli::PlaceArgs),
}

/// `tagwire pub`.
#[derive(Debug, Args)]
pub struct PubArgs {
    /// Tag to publish on, e.g. /demo/x.
    pub tag: String,
    /// Payload text; `-` reads stdin and publishes one event per line.
    pub data: Option<String>,
    /// Number of events to publish.
    #[arg(long, short = 'n', default_value_t = 1)]
    pub count: u64,
    /// Events per second (default: as fast as possible).
    #[arg(long, short)]
    pub rate: Option<f64>,
    /// Payload size in bytes (the payload is DATA repeated, or zeros).
    #[arg(long)]
    pub size: Option<usize>,
    /// Publish the contents of FILE as the payload (up to 256 MiB less the
    /// header: one frame on the client connection; links carry it in
    /// pieces, docs/reliability.md "Large payloads").
    #[arg(long, value_name = "FILE", conflicts_with_all = ["data", "size"])]
    pub file: Option<std::path::PathBuf>,
    /// A filterable field NAME=VALUE (integer, float, true/false, else string); repeatable.
    #[arg(long = "field", short = 'f', value_name = "NAME=VALUE")]
    pub fields: Vec<String>,
    /// Event priority 0-255.
    #[arg(long, default_value_t = 0)]
    pub priority: u8,
    /// Publisher endpoint name [default: /cli/pub/PID].
    #[arg(long)]
    pub endpoint: Option<String>,
    /// QoS this publisher asks for, NAME=VALUE (repeatable). Today only
    /// `reliability` (best_effort, reliable, exactly_once, durable): with
    /// any but best_effort each event is acknowledged by the daemon and
    /// sent again after a reconnect, and the command waits for the last
    /// acknowledgement; with `durable` it checks first that the daemon
    /// keeps the tag in its durable store and exits non-zero naming why if
    /// not (docs/reliability.md).
    #[arg(long = "qos", value_name = "NAME=VALUE")]
    pub qos: Vec<String>,
}

/// `tagwire pull`: exactly one of the queries.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("query").required(true).args(["latest", "nth", "seq", "range", "since"])))]
pub struct PullArgs {
    /// The tag (not a pattern), e.g. /sensors/temp.
    pub tag: String,
    /// The most recent event.
    #[arg(long)]
    pub latest: bool,
    /// The N-th most recent event (0: the latest).
    #[arg(long, value_name = "N")]
    pub nth: Option<u32>,
    /// The event with sequence number S.
    #[arg(long, value_name = "S")]
    pub seq: Option<u64>,
    /// Events with sequence numbers A to B, both included (A..B).
    #[arg(long, value_name = "A..B")]
    pub range: Option<String>,
    /// Events of the last DURATION by source time (e.g. 500ms, 30s, 2m, 1h).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Whose history (sequence numbers are per publisher) [default: the
    /// tag's publisher that published last].
    #[arg(long, value_name = "ENDPOINT")]
    pub publisher: Option<String>,
    /// Where the history is kept: at_subscriber (this daemon, the
    /// default), at_publisher (the daemon the tag's last event was
    /// published at) or node:NAME (any daemon of the network): a pull for
    /// another daemon is forwarded over the daemon links and its answer
    /// comes back the same way (docs/federation.md).
    #[arg(long, value_name = "MODE", default_value = "at_subscriber")]
    pub at: String,
    /// One JSON object per event (the keys of `tagwire sub --json`).
    #[arg(long)]
    pub json: bool,
}

/// `tagwire sub`.
#[derive(Debug, Args)]
pub struct SubArgs {
    /// Tag pattern: `*` matches one level, `**` any depth, e.g. '/demo/**'.
    pub pattern: String,
    /// Exit after this many events.
    #[arg(long, short = 'n')]
    pub count: Option<u64>,
    /// Print each event as a JSON object: every header field it carries
    /// (absent optional ones left out), fields, payload.
    #[arg(long)]
    pub json: bool,
    /// Subscriber endpoint name [default: /cli/sub/PID].
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Queue bound in the router, in events.
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Queue bound in this process, in events: what waits for the terminal
    /// or pipe. Each queued event holds its memory (4096 events of 64 KiB
    /// are 256 MiB); events beyond it are dropped by --discard and counted.
    #[arg(long, default_value_t = LOCAL_QUEUE)]
    pub local_queue: usize,
    /// What a full queue does: drop_oldest, drop_newest or reject.
    #[arg(long)]
    pub discard: Option<String>,
    /// Temporal scaling: 1 of every N events (by sequence number).
    #[arg(long, value_name = "N")]
    pub scale: Option<String>,
    /// Temporal scaling: events at least DURATION apart in source time
    /// (e.g. 100ms), per publisher.
    #[arg(long, value_name = "DURATION")]
    pub min_interval: Option<String>,
    /// Any other QoS property of this channel, NAME=VALUE (repeatable;
    /// docs/configuration.md, "QoS reference").
    #[arg(long = "qos", value_name = "NAME=VALUE")]
    pub qos: Vec<String>,
    /// Content filter on this channel, e.g. '$priority < 2 and $.severity > 3'
    /// (single-quote it in the shell); repeatable, any match passes.
    #[arg(long = "filter", value_name = "CONSTRAINT")]
    pub filters: Vec<String>,
    /// Mapping filter, e.g. 'map priority=high when $.severity > 3'.
    #[arg(long = "map", value_name = "MAPPING")]
    pub mapping: Option<String>,
    /// Write each event's payload to FILE (replacing what it held) and
    /// print `TAG: N bytes saved to FILE` instead of the payload.
    #[arg(long, value_name = "FILE")]
    pub save: Option<std::path::PathBuf>,
    /// Exit with an error if no event arrives within this many seconds.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Replay what the daemon's durable store holds of this tag first, then
    /// continue live with no gap and no duplicate: `start` (all it holds),
    /// a publisher sequence number SEQ (events numbered SEQ and later),
    /// `time:NS` (source time at or after NS ns since the Unix epoch) or a
    /// duration ago (`30s`, `5m`). The tag must be `reliability=durable`
    /// (docs/reliability.md).
    #[arg(long, value_name = "SEQ|TIME|start")]
    pub replay_from: Option<String>,
    /// Keep where this subscription stopped in FILE and resume from it on
    /// the next start: the events printed since are replayed from the
    /// daemon's durable store, what was printed before is not printed again
    /// (one tag, durable at the daemon). FILE is written (a new file, synced,
    /// renamed over it) after the events it covers are flushed to
    /// stdout, at most every 100 ms and at exit; after a kill the events of
    /// the last 100 ms can be printed again, never skipped
    /// (docs/reliability.md).
    #[arg(long, value_name = "FILE")]
    pub resume_file: Option<std::path::PathBuf>,
    /// With --replay-from: `fast` (as fast as they come, the default) or
    /// `original` (the publisher's spacing, from the events' source times).
    #[arg(long, value_name = "fast|original", requires = "replay_from")]
    pub spacing: Option<String>,
    /// Play the events out in this process keeping the publisher's spacing
    /// (their source times) after a playout delay: `tds:DELAY`,
    /// `tds:DELAY:drop` (late events dropped) or `tds:DELAY:deliver` (the
    /// default). The daemon-side service is `--qos playout=tds:DELAY`
    /// (docs/time.md). Its counters and jitter go to stderr at exit.
    #[arg(long, value_name = "tds:DELAY[:drop]", value_parser = parse_playout)]
    pub playout: Option<tagwire::PlayoutConfig>,
}

/// `tagwire list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the raw JSON listing.
    #[arg(long)]
    pub json: bool,
    /// Show only the links to other daemons: RTT, clock offset, traffic,
    /// queue depth and drops (with --json: the federation part only).
    #[arg(long)]
    pub links: bool,
}

/// `tagwire time`.
#[derive(Debug, Args)]
pub struct TimeArgs {
    /// Print the JSON reply.
    #[arg(long)]
    pub json: bool,
}

/// `tagwire ping`.
#[derive(Debug, Args)]
pub struct PingArgs {
    /// Number of pings.
    #[arg(long, short = 'n', default_value_t = 10)]
    pub count: u32,
    /// Milliseconds between pings.
    #[arg(long, short, default_value_t = 100)]
    pub interval: u64,
}

/// What `tagwire bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchMode {
    /// One publisher to one subscriber, as fast as possible: msgs/s and MB/s.
    Throughput,
    /// Ping-pong through an echo client: round-trip p50/p99.
    Latency,
    /// One publisher to N subscribers: per-subscriber msgs/s.
    Fanout,
    /// Narada's audio/video conferencing load (Fig. 4–5, 7–9): a speaker per
    /// meeting, N listeners; mean latency, RTP jitter, late packets.
    Av,
    /// Pull of the latest event (history=1) against the latency round trip
    /// measured in the same run: p50/p99 of each and their ratio.
    Pull,
}

/// What `tagwire bench av` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AvKind {
    /// 252 B every 30 ms (Narada's audio).
    Audio,
    /// H.263-like: 15 frames/s, ~740 B packets, 5,610 packets in 2 minutes.
    Video,
}

/// `tagwire bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub mode: BenchMode,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Subscribers for fanout.
    #[arg(long, default_value_t = 10)]
    pub subscribers: usize,
    /// throughput/fanout: the publisher's `reliability` (best_effort,
    /// reliable, exactly_once, durable). Acknowledged ones are paced by the
    /// daemon's acknowledgements; the run ends when all are answered. Only
    /// the publisher → daemon hop: the subscriptions stay best effort
    /// (`scripts/reliable-cost.sh` measures both hops, issue 25's "Cost").
    #[arg(long, default_value = "best_effort")]
    pub reliability: String,
    /// Run against an in-process router instead of a daemon.
    #[arg(long)]
    pub embedded: bool,
    /// Carry payloads in shared memory where the daemon is on this host
    /// (a `unix://` server; docs/shm.md): the sessions use
    /// `SessionBuilder::shm(ShmMode::Require)` (a session that cannot have
    /// it fails). Refused for other servers.
    #[arg(long)]
    pub shm: bool,
    /// latency: run the echo client on this other daemon (linked to the
    /// first), so each ping crosses the link both ways.
    #[arg(long, value_name = "URL")]
    pub echo_server: Option<String>,
    /// av: listener counts to run, comma-separated (a sweep).
    #[arg(long, default_value = "100")]
    pub listeners: String,
    /// av: audio or video.
    #[arg(long, value_enum, default_value_t = AvKind::Audio)]
    pub kind: AvKind,
    /// av: independent meetings (one speaker each); listeners split evenly.
    #[arg(long, default_value_t = 1)]
    pub meetings: usize,
    /// av: the daemons (tcp://HOST:PORT, comma-separated); listeners and
    /// speakers are spread evenly over them. Default: --server.
    #[arg(long, value_delimiter = ',')]
    pub daemons: Vec<String>,
    /// av: put every speaker on this daemon and none of the listeners
    /// (Narada's WAN setup, Fig. 10–11: the broker and the speaker at one
    /// site, listeners at the others). Default: speakers spread over --daemons.
    #[arg(long, value_name = "URL")]
    pub speaker_daemon: Option<String>,
    /// av: packets per listener left out at the start (warm-up: connection
    /// set-up, the first fan-outs' allocations); they count as received but
    /// not in latency, jitter or late. Narada left out the first 100.
    #[arg(long, default_value_t = 100)]
    pub warmup: u64,
    /// av: runs per listener count; each is printed, then the spread
    /// (min / median / max) of the runs' mean latency and late share.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// latency: also write the round trips' histogram to FILE, one
    /// `NANOSECONDS COUNT` line per recorded value (3 significant digits),
    /// so that several runs can be pooled (`scripts/isolation.sh` does).
    #[arg(long, value_name = "FILE")]
    pub histogram: Option<std::path::PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `tagwire admin`.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// What to administer.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// `tagwire admin …` subcommands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Manage content filters.
    #[command(subcommand)]
    Filter(FilterCommand),
    /// Change QoS at run time, e.g. `qos /pub /sub priority=high dscp=af42
    /// sched=fifo:30`, `qos /some/tag/** max_queue_length=100
    /// discard=priority`, `qos daemon timeout=2s`, `qos connection:7
    /// order=deadline`; `-NAME` clears NAME at that level.
    Qos {
        /// TARGET [TARGET] then PROPERTY=VALUE or -PROPERTY items. TARGET is
        /// a subscriber endpoint, `/publisher /subscriber`, a tag pattern,
        /// `daemon` or `connection:ID`.
        #[arg(required = true, num_args = 2.., allow_hyphen_values = true)]
        items: Vec<String>,
    },
    /// Show an endpoint's channels: each QoS value and the level it came
    /// from, band, lane scheduling, DSCP, queue depth, drops and expiries;
    /// or `show link PEER`: a link to another daemon (RTT, clock offset,
    /// traffic, queue, drops).
    Show {
        /// An endpoint, a tag pattern given to `qos`, or `link`.
        target: String,
        /// With `link`: the peer daemon's name, node id or address.
        peer: Option<String>,
        /// Print the JSON reply.
        #[arg(long)]
        json: bool,
    },
}

/// Which level a filter attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Level {
    /// Every subscription of the endpoint's session (TAO admin).
    Session,
    /// Each subscription of the endpoint (TAO proxy); on a publisher
    /// endpoint, the same as `publisher`.
    Channel,
    /// A publisher endpoint's own events (TAO supplier side): events no such
    /// filter accepts are dropped before routing.
    Publisher,
}

/// `tagwire admin filter …`.
#[derive(Debug, Subcommand)]
pub enum FilterCommand {
    /// Attach a filter (or, with --map, a mapping filter) through an endpoint.
    Add {
        /// The endpoint, e.g. /viewer3 (a subscriber) or /sensors/pub (a publisher).
        #[arg(long)]
        endpoint: String,
        /// session: all of the endpoint's session; channel: the endpoint's
        /// subscriptions (or, for a publisher endpoint, its events); publisher: a
        /// publisher endpoint's events.
        #[arg(long, value_enum, default_value_t = Level::Channel)]
        level: Level,
        /// The text is a mapping filter ('map priority=high when …').
        #[arg(long)]
        map: bool,
        /// The constraint or mapping text.
        text: String,
    },
    /// List filters with their ids.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a filter by id.
    Remove {
        /// The id shown by `add` or `list`.
        id: u64,
    },
    /// Set how the session and channel levels combine for the endpoint's session.
    Op {
        /// An endpoint of the session.
        #[arg(long)]
        endpoint: String,
        /// and: an event must pass both levels; or: either level.
        #[arg(value_parser = ["and", "or"])]
        interfilter: String,
    },
}

/// `--playout`: checked before connecting.
fn parse_playout(s: &str) -> Result<tagwire::PlayoutConfig, String> {
    s.parse()
        .map_err(|e: tagwire_core::qos::QosError| e.to_string())
}
