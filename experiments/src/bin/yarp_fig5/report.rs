//! Tables, the BENCHMARKS.md section and the SVG chart of `yarp_fig5`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::experiment::{Mode, Outcome, Place, Spec, Transport};

/// The markers around the section this program owns in BENCHMARKS.md.
const BEGIN: &str = "<!-- BEGIN yarp-fig5 -->";
const END: &str = "<!-- END yarp-fig5 -->";

fn begin(section: &str) -> String {
    format!("<!-- BEGIN {section} -->")
}

fn end(section: &str) -> String {
    format!("<!-- END {section} -->")
}

/// The issue's targets at the highest load.
const MEAN_TARGET: f64 = 1.3;

/// What the run was asked to do.
pub struct Settings {
    pub command: String,
    pub rate_kbit: u32,
    pub load_size: usize,
    pub load_burst: u32,
    pub ping_size: usize,
    pub ping_hz: f64,
    pub warmup: f64,
    pub secs: f64,
    pub rounds: u32,
    /// The load publisher on a host of its own (Fig. 5b as the paper ran it).
    pub separate_load_host: bool,
}

/// The machine and the moment.
pub struct Machine {
    date: String,
    revision: String,
    nproc: usize,
    cpu: String,
    kernel: String,
    load_before: String,
    load_after: String,
    took: Duration,
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "?".into())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

impl Machine {
    /// What can be known before the runs.
    pub fn now() -> Machine {
        let dirty =
            !command_output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
        let mut revision = command_output("git", &["rev-parse", "--short", "HEAD"]);
        if dirty {
            revision.push_str(" (with uncommitted changes)");
        }
        Machine {
            date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            revision,
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|c| {
                    c.lines()
                        .find(|l| l.starts_with("model name"))
                        .and_then(|l| l.split_once(':'))
                        .map(|(_, m)| m.trim().to_owned())
                })
                .unwrap_or_else(|| "?".into()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|k| k.trim().to_owned())
                .unwrap_or_else(|_| "?".into()),
            load_before: load_average(),
            load_after: String::new(),
            took: Duration::ZERO,
        }
    }

    /// Adds what is known after the runs.
    pub fn finish(mut self, took: Duration) -> Machine {
        self.load_after = load_average();
        self.took = took;
        self
    }
}

/// One run, summarised.
pub struct Row {
    pub place: Place,
    pub measured: Transport,
    pub load_transport: Transport,
    pub load: u32,
    pub mode: Mode,
    pub samples: usize,
    pub mean: f64,
    pub std: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub pings: u64,
    pub pongs: u64,
    /// Link load measured by tc in the window, percent.
    pub utilization: f64,
    /// Packets of the high class (AF42/VA) in the window.
    pub high_packets: u64,
    pub bands: (String, String),
    pub client_sched: String,
    pub high_lane: String,
    pub load_bytes: u64,
}

/// The `q`-quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

impl Row {
    /// The summary of a place, load and channel's segments (at least one).
    pub fn new(segments: &[&(Spec, Outcome)], high_lane: &str) -> Row {
        let (spec, first) = &segments[0];
        let mut v: Vec<f64> = segments
            .iter()
            .flat_map(|(_, o)| o.rtts_us.iter().copied())
            .collect();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let sum = |f: &dyn Fn(&Outcome) -> u64| segments.iter().map(|(_, o)| f(o)).sum::<u64>();
        let window: f64 = segments.iter().map(|(_, o)| o.window.as_secs_f64()).sum();
        let link_bytes = sum(&|o| o.sent.link.bytes) as f64;
        let capacity = f64::from(spec.link_kbit) * 1000.0 / 8.0 * window;
        let mut bands: Vec<(String, String)> =
            segments.iter().map(|(_, o)| o.bands.clone()).collect();
        bands.dedup();
        let mut scheds: Vec<String> = segments
            .iter()
            .map(|(_, o)| o.client_sched.clone())
            .collect();
        scheds.dedup();
        Row {
            place: spec.place,
            measured: spec.measured,
            load_transport: spec.load_transport,
            load: spec.load_percent,
            mode: spec.mode,
            samples: v.len(),
            mean,
            std: var.sqrt(),
            p50: quantile(&v, 0.5),
            p99: quantile(&v, 0.99),
            max: v.last().copied().unwrap_or(f64::NAN),
            pings: sum(&|o| o.pings),
            pongs: sum(&|o| o.pongs),
            utilization: 100.0 * link_bytes / capacity,
            high_packets: sum(&|o| o.sent.high.packets),
            bands: if bands.len() == 1 {
                first.bands.clone()
            } else {
                ("mixed".into(), format!("{bands:?}"))
            },
            client_sched: scheds.join(" | "),
            high_lane: high_lane.to_owned(),
            load_bytes: sum(&|o| o.load_bytes),
        }
    }

    /// One progress line.
    pub fn line(&self) -> String {
        format!(
            "{:<6} {}/{} load {:>2} % {:<6}  RTT mean {:>8.0} µs  std {:>8.0} µs  p99 {:>8.0} µs  n {:>4}  link {:>5.1} %  bands {}/{}  sched {}",
            self.place.name(),
            self.measured.name(),
            self.load_transport.name(),
            self.load,
            self.mode.label(),
            self.mean,
            self.std,
            self.p99,
            self.samples,
            self.utilization,
            self.bands.0,
            self.bands.1,
            self.client_sched
        )
    }
}

fn find(rows: &[Row], place: Place, load: u32, mode: Mode) -> Option<&Row> {
    rows.iter()
        .find(|r| r.place == place && r.load == load && r.mode == mode)
}

/// "The unloaded RTT" of a place: the lower of the two unloaded means
/// (normal and qos), so that neither channel's own overhead or noise
/// when idle makes the loaded qos channel look better than it is.
fn unloaded(rows: &[Row], place: Place) -> f64 {
    [Mode::Normal, Mode::Qos]
        .into_iter()
        .filter_map(|m| find(rows, place, 0, m))
        .map(|r| r.mean)
        .fold(f64::NAN, f64::min)
}

fn places(rows: &[Row]) -> Vec<Place> {
    let mut out: Vec<Place> = Vec::new();
    for r in rows {
        if !out.contains(&r.place) {
            out.push(r.place);
        }
    }
    out
}

fn loads(rows: &[Row]) -> Vec<u32> {
    let mut out: Vec<u32> = rows.iter().map(|r| r.load).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The plain-text table printed at the end.
pub fn text_table(rows: &[Row]) -> String {
    let mut s = String::from(
        "place  meas/load  load  channel   mean µs    std µs    p50 µs    p99 µs  samples  link %\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<6} {:<10} {:>3} %  {:<7} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>8} {:>7.1}",
            r.place.name(),
            format!("{}/{}", r.measured.name(), r.load_transport.name()),
            r.load,
            r.mode.label(),
            r.mean,
            r.std,
            r.p50,
            r.p99,
            r.samples,
            r.utilization
        );
    }
    s
}

fn fig(place: Place) -> &'static str {
    match place {
        Place::Sender => "(a) congestion at the sender's interface (Fig. 4a/5a)",
        Place::Router => "(b) congestion at the router, the switch of Fig. 4b/5b",
    }
}

/// What the paper's text says about each case (its bar values are only in
/// the figure, not in the text).
fn paper_says(place: Place) -> &'static str {
    match place {
        Place::Sender => {
            "\"channel prioritization produces slightly lower (in average) and more \
             deterministic (smaller standard deviation) packet trip time. This effect is \
             more remarkable when the network is loaded at the 70% of the maximum \
             bandwidth\""
        }
        Place::Router => {
            "\"channel prioritization greatly improved the performance (resulting in lower \
             latency) especially when the network is highly loaded (70%)\"; trip times \
             \"slightly higher than in the previous case\""
        }
    }
}

fn us(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else {
        format!("{v:.0}")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**not met**"
    }
}

/// The BENCHMARKS.md section, markers included.
pub fn markdown(rows: &[Row], s: &Settings, m: &Machine, svg: Option<&Path>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{BEGIN}");
    let _ = writeln!(
        o,
        "## Channel prioritization: YARP Fig. 5 (round trip under load)\n\n\
         Reproduces Fig. 5 of Paikan, Domenichelli, Natale, *Communication channel \
         prioritization in a publish-subscribe architecture* (YARP): the round trip time of \
         a measured channel while a load channel fills 20 % and 70 % of a link, without \
         (\"normal\") and with (\"qos\") channel prioritization, congested at the sender's \
         interface (Fig. 4a) and at a switch (Fig. 4b). Written by the command below; \
         regenerate it, do not edit it. Method: [docs/benchmarks.md](docs/benchmarks.md#channel-prioritization-yarp-fig-5).\n"
    );
    let _ = writeln!(
        o,
        "```sh\n{}      # as root (network namespaces); builds release, then about 2 min of runs\n```\n",
        s.command
    );
    let _ = writeln!(
        o,
        "Run {}, revision {}, `nproc` = {}, CPU {}, kernel {}, load average {} before → {} after \
         (the machine is shared with other builds), {:.0} s of runs.\n",
        m.date,
        m.revision,
        m.nproc,
        m.cpu,
        m.kernel,
        m.load_before,
        m.load_after,
        m.took.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "Setup: two host namespaces joined by a router namespace (`tagwire-testbed`); \
         `tagwired` on host A; the congested link is an htb of {} kbit/s with the DSCP \
         classes of the paper's Table 1 (AF42 → the high class, prio 0), on host B's \
         `veth0` egress for (a) and on the router's port toward host A for (b); TCP \
         segments of one MTU (`gso_max_segs 1`). Measured channel: a {} B event published \
         by a pinger on host B, {} per second (intervals jittered ±50 %), delivered by the \
         daemon to an echo client on host A, published back and delivered to the pinger; \
         the RTT is taken from publish to delivery; {} s per load and channel, in {} \
         segments (each after {} s of warm-up) in which normal and qos alternate. \
         Load channel: {} B events from host B to a subscriber on host A, band normal \
         (CS0), paced to the given share of the link including TCP/IP headers (\"link\" \
         is what tc counted). **normal**: the measured channel's connections on band \
         `normal` (main port, CS0, lanes and client threads SCHED_OTHER). **qos**: on \
         band `high` (port + 2): the daemon marks its sockets AF42 and its high lane runs \
         `{}`; the clients open their sessions on band `high` with `Session::on_band`, \
         which marks their sockets AF42, and run their threads with `apply_sched` \
         (`{}`).\n",
        s.rate_kbit,
        s.ping_size,
        s.ping_hz,
        s.secs,
        s.rounds,
        s.warmup,
        s.load_size,
        rows.first().map_or("?", |r| r.high_lane.as_str()),
        rows.iter()
            .find(|r| r.mode == Mode::Qos)
            .map_or("?", |r| r.client_sched.as_str()),
    );
    for place in places(rows) {
        let base = unloaded(rows, place);
        let _ = writeln!(o, "### {}\n", fig(place));
        let _ = writeln!(
            o,
            "| load | channel | RTT mean µs | std dev µs | p50 µs | p99 µs | max µs | mean / unloaded | link (tc) | pongs / pings |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for r in rows.iter().filter(|r| r.place == place) {
            let load = if r.load == 0 {
                "unloaded".to_owned()
            } else {
                format!("{} %", r.load)
            };
            let _ = writeln!(
                o,
                "| {load} | {} | {} | {} | {} | {} | {} | {:.2} | {:.1} % | {} / {} |",
                r.mode.label(),
                us(r.mean),
                us(r.std),
                us(r.p50),
                us(r.p99),
                us(r.max),
                r.mean / base,
                r.utilization,
                r.pongs,
                r.pings
            );
        }
        let _ = writeln!(o);
    }
    if let Some(svg) = svg {
        let _ = writeln!(
            o,
            "![YARP Fig. 5 reproduction: RTT mean and standard deviation per load, normal and qos]({})\n",
            svg.display()
        );
    }

    let top = loads(rows).into_iter().max().unwrap_or(0);
    let _ = writeln!(
        o,
        "Targets (from the issue), at {top} % load: the qos RTT mean at most {MEAN_TARGET} × \
         the unloaded RTT, and the qos standard deviation at most the normal one. \
         \"Unloaded RTT\" here is the lower of the two unloaded means (normal and qos), \
         the stricter reading; \"mean / unloaded\" in the tables uses it too.\n"
    );
    let _ = writeln!(
        o,
        "| place | qos mean at {top} % vs {MEAN_TARGET} × unloaded | verdict | qos std dev vs normal std dev at {top} % | verdict |\n|---|---|---|---|---|"
    );
    for place in places(rows) {
        let base = unloaded(rows, place);
        let (Some(q), Some(n)) = (
            find(rows, place, top, Mode::Qos),
            find(rows, place, top, Mode::Normal),
        ) else {
            continue;
        };
        let _ = writeln!(
            o,
            "| {} | {} µs vs {} µs ({:.2} ×) | {} | {} µs vs {} µs | {} |",
            place.name(),
            us(q.mean),
            us(MEAN_TARGET * base),
            q.mean / base,
            verdict(q.mean <= MEAN_TARGET * base),
            us(q.std),
            us(n.std),
            verdict(q.std <= n.std)
        );
    }
    let _ = writeln!(o);

    let _ = writeln!(
        o,
        "Against the paper: its Fig. 5 gives the values as bars only; the text we have \
         (`papers/yarp-channel-prioritization.txt`) holds no number of them, so the paper's \
         column quotes what its text says of each case. Its testbed: three PREEMPT-RT \
         Linux hosts, Gigabit Ethernet, a Cisco Catalyst 2960 (QoS on), communication \
         threads SCHED_FIFO 30, packets AF42, loads of 20 % and 70 % of the bandwidth, \
         TCP and UDP (here: TCP in this section, UDP in every combination and Fig. 5b's \
         third host in the sections after it; one switch port emulated by htb, a 2-CPU \
         VM, a stock kernel).\n"
    );
    let _ = writeln!(
        o,
        "| case | paper (Fig. 5, from its text) | here: qos against normal |\n|---|---|---|"
    );
    for place in places(rows) {
        let mut ours = Vec::new();
        for load in loads(rows).into_iter().filter(|l| *l > 0) {
            if let (Some(n), Some(q)) = (
                find(rows, place, load, Mode::Normal),
                find(rows, place, load, Mode::Qos),
            ) {
                ours.push(format!(
                    "{load} %: mean {} → {} µs ({:+.0} %), std dev {} → {} µs ({:+.0} %)",
                    us(n.mean),
                    us(q.mean),
                    100.0 * (q.mean / n.mean - 1.0),
                    us(n.std),
                    us(q.std),
                    100.0 * (q.std / n.std - 1.0)
                ));
            }
        }
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            fig(place),
            paper_says(place),
            ours.join("; ")
        );
    }
    let _ = writeln!(o);

    let _ = writeln!(
        o,
        "Checks made during the runs (so that \"qos\" is what it says): the daemon's lanes \
         as it lists them, the bands of the measured channel's connections as it lists them, \
         and the packets of the congested link's high class (AF42/VA) in each window:\n"
    );
    let _ = writeln!(
        o,
        "| place | load | channel | pinger / echo band | client threads | high lane | high-class packets | load bytes received |\n|---|---:|---|---|---|---|---:|---:|"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} % | {} | {} / {} | {} | {} | {} | {} |",
            r.place.name(),
            r.load,
            r.mode.label(),
            r.bands.0,
            r.bands.1,
            r.client_sched,
            r.high_lane,
            r.high_packets,
            r.load_bytes
        );
    }
    let _ = writeln!(o, "{END}");
    o
}

/// Replaces the section `name` between its markers in `path`, or appends it.
pub fn replace_section(path: &Path, name: &str, section: &str) -> Result<(), String> {
    let (begin_marker, end_marker) = (begin(name), end(name));
    let (begin_marker, end_marker) = (begin_marker.as_str(), end_marker.as_str());
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let new = match (text.find(begin_marker), text.find(end_marker)) {
        (Some(b), Some(e)) if b < e => {
            let after = &text[e + end_marker.len()..];
            let after = after.strip_prefix('\n').unwrap_or(after);
            format!("{}{section}{after}", &text[..b])
        }
        (None, None) => format!(
            "{}\n{section}",
            text.trim_end_matches('\n').to_owned() + "\n"
        ),
        _ => {
            return Err(format!(
                "{}: the markers {begin_marker} and {end_marker} are not in order",
                path.display()
            ))
        }
    };
    std::fs::write(path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A round axis maximum at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if step * magnitude >= v {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

/// The chart: one panel per place, as the paper's Fig. 5(a) and 5(b):
/// bars of the mean RTT per load, normal and qos side by side, with ±1
/// standard deviation, and the 1.3 × unloaded target as a dashed line.
pub fn svg(rows: &[Row], s: &Settings) -> String {
    let panels = places(rows);
    let loads = loads(rows);
    let (pw, ph) = (400.0, 300.0);
    let (left, top, bottom) = (60.0, 40.0, 50.0);
    let width = 20.0 + pw * panels.len() as f64;
    let height = ph + 56.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, place) in panels.iter().enumerate() {
        let x0 = 10.0 + pw * i as f64;
        let (plot_w, plot_h) = (pw - left - 20.0, ph - top - bottom);
        let (px, py) = (x0 + left, top);
        let in_panel: Vec<&Row> = rows.iter().filter(|r| r.place == *place).collect();
        let base = unloaded(rows, *place);
        // Scaled to the bars, not to the whiskers: one stall can make a
        // standard deviation ten times the mean. Clipped whiskers say
        // where they end.
        let ymax_us = nice_ceiling(
            1.3 * in_panel
                .iter()
                .map(|r| r.mean)
                .chain([MEAN_TARGET * base])
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max),
        );
        let y = |v_us: f64| py + plot_h - (v_us / ymax_us).clamp(0.0, 1.0) * plot_h;
        let title = match place {
            Place::Sender => "(a) congestion at the sender's interface",
            Place::Router => "(b) congestion at the router (switch)",
        };
        let _ = writeln!(
            o,
            r#"<text x="{}" y="20" text-anchor="middle" font-weight="bold">{title}</text>"#,
            px + plot_w / 2.0
        );
        // Axes and grid, in ms.
        for k in 0..=5 {
            let v = ymax_us * f64::from(k) / 5.0;
            let yy = y(v);
            let _ = writeln!(
                o,
                r##"<line x1="{px}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                px + plot_w,
                px - 5.0,
                yy + 4.0,
                format_ms(v / 1000.0)
            );
        }
        let _ = writeln!(
            o,
            r##"<line x1="{px}" y1="{py}" x2="{px}" y2="{:.1}" stroke="black"/><line x1="{px}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"##,
            py + plot_h,
            py + plot_h,
            px + plot_w,
            py + plot_h
        );
        let _ = writeln!(
            o,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">RTT (ms)</text>"#,
            x0 + 15.0,
            py + plot_h / 2.0
        );
        // Bars.
        let group_w = plot_w / loads.len() as f64;
        let bar_w = group_w * 0.3;
        for (g, load) in loads.iter().enumerate() {
            let gx = px + group_w * g as f64;
            let label = if *load == 0 {
                "unloaded".to_owned()
            } else {
                format!("{load} %")
            };
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
                gx + group_w / 2.0,
                py + plot_h + 18.0
            );
            for (b, mode) in [Mode::Normal, Mode::Qos].into_iter().enumerate() {
                let Some(r) = find(rows, *place, *load, mode) else {
                    continue;
                };
                let bx = gx + group_w * 0.2 + bar_w * b as f64;
                let fill = match mode {
                    Mode::Normal => "#b0b0b0",
                    Mode::Qos => "#2b5d8a",
                };
                let (yt, yb) = (y(r.mean), py + plot_h);
                let _ = writeln!(
                    o,
                    r#"<rect x="{bx:.1}" y="{yt:.1}" width="{bar_w:.1}" height="{:.1}" fill="{fill}"><title>{} {label}: mean {:.0} µs, std dev {:.0} µs</title></rect>"#,
                    yb - yt,
                    mode.label(),
                    r.mean,
                    r.std
                );
                let cx = bx + bar_w / 2.0;
                let (e1, e2) = (y(r.mean - r.std), y(r.mean + r.std));
                if r.mean + r.std > ymax_us {
                    let _ = writeln!(
                        o,
                        r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10">↑ {}</text>"#,
                        py - 4.0,
                        format_ms((r.mean + r.std) / 1000.0)
                    );
                }
                let _ = writeln!(
                    o,
                    r#"<line x1="{cx:.1}" y1="{e1:.1}" x2="{cx:.1}" y2="{e2:.1}" stroke="black"/><line x1="{:.1}" y1="{e2:.1}" x2="{:.1}" y2="{e2:.1}" stroke="black"/><line x1="{:.1}" y1="{e1:.1}" x2="{:.1}" y2="{e1:.1}" stroke="black"/>"#,
                    cx - 4.0,
                    cx + 4.0,
                    cx - 4.0,
                    cx + 4.0
                );
            }
        }
        if base.is_finite() {
            let yt = y(MEAN_TARGET * base);
            let _ = writeln!(
                o,
                r##"<line x1="{px}" y1="{yt:.1}" x2="{:.1}" y2="{yt:.1}" stroke="#c0392b" stroke-dasharray="5,4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#c0392b" font-size="10">target: {MEAN_TARGET} × unloaded</text>"##,
                px + plot_w,
                px + plot_w,
                yt - 4.0
            );
        }
        // Legend, under the load labels (whiskers may reach any corner).
        for (k, (mode, fill)) in [(Mode::Normal, "#b0b0b0"), (Mode::Qos, "#2b5d8a")]
            .into_iter()
            .enumerate()
        {
            let (lx, ly) = (
                px + plot_w / 2.0 - 70.0 + 80.0 * k as f64,
                py + plot_h + 28.0,
            );
            let _ = writeln!(
                o,
                r#"<rect x="{lx:.1}" y="{ly:.1}" width="12" height="10" fill="{fill}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 16.0,
                ly + 9.0,
                mode.label()
            );
        }
    }
    let _ = writeln!(
        o,
        r##"<text x="10" y="{:.1}" font-size="11" fill="#444">tagwire, TCP, htb {} kbit/s with DSCP classes, {} B pings at {}/s, {} B load events.</text>"##,
        height - 42.0,
        s.rate_kbit,
        s.ping_size,
        s.ping_hz,
        s.load_size
    );
    let _ = writeln!(
        o,
        r##"<text x="10" y="{:.1}" font-size="11" fill="#444">Bars: mean RTT; whiskers: ±1 standard deviation (↑ N: clipped, it ends at N ms).</text>"##,
        height - 26.0
    );
    let _ = writeln!(
        o,
        r##"<text x="10" y="{:.1}" font-size="11" fill="#444">The paper's Fig. 5 values are not in its text, so they are not drawn; BENCHMARKS.md quotes what it says of each case.</text>"##,
        height - 10.0
    );
    let _ = writeln!(o, "</svg>");
    o
}

fn format_ms(v: f64) -> String {
    if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn find_combo(
    rows: &[Row],
    place: Place,
    combo: (Transport, Transport),
    load: u32,
    mode: Mode,
) -> Option<&Row> {
    rows.iter().find(|r| {
        r.place == place
            && (r.measured, r.load_transport) == combo
            && r.load == load
            && r.mode == mode
    })
}

fn combos(rows: &[Row]) -> Vec<(Transport, Transport)> {
    let mut out = Vec::new();
    for r in rows {
        if !out.contains(&(r.measured, r.load_transport)) {
            out.push((r.measured, r.load_transport));
        }
    }
    out
}

/// The section of a run with UDP channels or a separate load host: one
/// table per place with every transport combination, and qos against
/// normal per combination.
pub fn markdown_transports(name: &str, rows: &[Row], s: &Settings, m: &Machine) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", begin(name));
    let title = if s.separate_load_host {
        "Channel prioritization, Fig. 5b as the paper ran it: the load publisher on its own host, larger measured packets, TCP and UDP (issues 26 and 27)"
    } else {
        "Channel prioritization over TCP and UDP: YARP Fig. 5, every transport combination (issue 27)"
    };
    let _ = writeln!(
        o,
        "## {title}\n\n\
         Written by the command below (`experiments/src/bin/yarp_fig5`); regenerate it, do not \
         edit it. The TCP/TCP run with the paper's chart is the `yarp-fig5` section above; \
         method: [docs/benchmarks.md](docs/benchmarks.md#channel-prioritization-yarp-fig-5).\n"
    );
    let _ = writeln!(o, "```sh\n{}\n```\n", s.command);
    let _ = writeln!(
        o,
        "Run {}, revision {}, `nproc` = {}, CPU {}, kernel {}, load average {} before → {} after, \
         {:.0} s of runs.\n",
        m.date,
        m.revision,
        m.nproc,
        m.cpu,
        m.kernel,
        m.load_before,
        m.load_after,
        m.took.as_secs_f64()
    );
    let hosts = if s.separate_load_host {
        "three host namespaces joined by a router namespace: the pinger on host B, the load \
         publisher on host C, `tagwired`, the echo and the load subscriber on host A; both \
         channels meet only in the router's port toward host A"
    } else {
        "two host namespaces joined by a router namespace: the pinger and the load publisher \
         on host B, `tagwired`, the echo and the load subscriber on host A"
    };
    let _ = writeln!(
        o,
        "Setup: {hosts} (`tagwire-testbed`); the congested link is an htb of {} kbit/s with \
         the DSCP classes of the paper's Table 1 (AF42 → the high class), on host B's egress \
         for (a) and on the router's port toward host A for (b). Measured channel: a {} B \
         event, {} per second (intervals jittered ±50 %), pinger → daemon → echo → daemon → \
         pinger, RTT from publish to delivery, both sessions over the *measured* transport; \
         {} s per transport combination, load and channel, in {} segments (each after {} s \
         of warm-up, not counted) in which normal and qos alternate. Load channel: {} B \
         events, {} back to back per tick, over the *load* transport (UDP: one event per datagram; the daemon's \
         `[udp] listen`, default 1,400-byte datagrams), band normal (CS0), paced to the given \
         share of the link with its TCP/IP or UDP/IP headers (\"link\" is what tc counted). \
         **normal**: band `normal`. **qos**: band `high` (`Session::on_band`): AF42 on the \
         sockets both ways, the daemon's high lane and the clients' threads `fifo:10`. A \
         ping or pong lost (UDP is best effort) shows as pongs < pings; its RTT is not \
         counted.\n",
        s.rate_kbit,
        s.ping_size,
        s.ping_hz,
        s.secs,
        s.rounds,
        s.warmup,
        s.load_size,
        s.load_burst,
    );
    for place in places(rows) {
        let _ = writeln!(o, "### {}\n", fig(place));
        let _ = writeln!(
            o,
            "| measured / load | load | channel | RTT mean µs | std dev µs | p50 µs | p99 µs | max µs | mean / unloaded | link (tc) | pongs / pings | high-class packets |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for combo in combos(rows) {
            let base = [Mode::Normal, Mode::Qos]
                .into_iter()
                .filter_map(|md| find_combo(rows, place, combo, 0, md))
                .map(|r| r.mean)
                .fold(f64::NAN, f64::min);
            for r in rows
                .iter()
                .filter(|r| r.place == place && (r.measured, r.load_transport) == combo)
            {
                let load = if r.load == 0 {
                    "unloaded".to_owned()
                } else {
                    format!("{} %", r.load)
                };
                let _ = writeln!(
                    o,
                    "| {} / {} | {load} | {} | {} | {} | {} | {} | {} | {:.2} | {:.1} % | {} / {} | {} |",
                    r.measured.name(),
                    r.load_transport.name(),
                    r.mode.label(),
                    us(r.mean),
                    us(r.std),
                    us(r.p50),
                    us(r.p99),
                    us(r.max),
                    r.mean / base,
                    r.utilization,
                    r.pongs,
                    r.pings,
                    r.high_packets
                );
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "qos against normal, per combination (negative: qos lower):\n\n\
             | measured / load | load | mean normal → qos µs | change | std dev normal → qos µs | change |\n\
             |---|---:|---|---:|---|---:|"
        );
        for combo in combos(rows) {
            for load in loads(rows).into_iter().filter(|l| *l > 0) {
                let (Some(n), Some(q)) = (
                    find_combo(rows, place, combo, load, Mode::Normal),
                    find_combo(rows, place, combo, load, Mode::Qos),
                ) else {
                    continue;
                };
                let _ = writeln!(
                    o,
                    "| {} / {} | {load} % | {} → {} | {:+.0} % | {} → {} | {:+.0} % |",
                    combo.0.name(),
                    combo.1.name(),
                    us(n.mean),
                    us(q.mean),
                    100.0 * (q.mean / n.mean - 1.0),
                    us(n.std),
                    us(q.std),
                    100.0 * (q.std / n.std - 1.0)
                );
            }
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "Checks (so that \"qos\" is what it says): the bands of the measured channel's \
         connections as the daemon lists them, and the clients' threads; the daemon's high \
         lane runs `{}`.\n",
        rows.first().map_or("?", |r| r.high_lane.as_str())
    );
    let _ = writeln!(
        o,
        "| place | measured / load | load | channel | pinger / echo band | client threads | load bytes received |\n|---|---|---:|---|---|---|---:|"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} / {} | {} % | {} | {} / {} | {} | {} |",
            r.place.name(),
            r.measured.name(),
            r.load_transport.name(),
            r.load,
            r.mode.label(),
            r.bands.0,
            r.bands.1,
            r.client_sched,
            r.load_bytes
        );
    }
    let _ = writeln!(o, "{}", end(name));
    o
}
