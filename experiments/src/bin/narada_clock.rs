//! Narada Fig. 12–14 on the netns testbed: three linked daemons, two of
//! them with a software-skewed clock (the namespaces share one kernel
//! clock, which is the "true" time here), sampled once a second. Without
//! correction a skewed daemon's clock is off by its offset plus its drift;
//! with correction (its network time) it is off by the estimate's error.
//! Needs root. `scripts/narada-fig12-14.sh` runs it and draws the plot.
//!
//! ```text
//! cargo run --release --manifest-path experiments/Cargo.toml --bin narada_clock -- --seconds 60 --csv out.csv --svg out.svg
//! ```

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::Session;
use tagwire_testbed::{Testbed, TestbedConfig};

const TOKEN: &str = "narada-clock-experiment-token-0123456789";
const PORT: u16 = 7700;

/// Each daemon's software clock: (name, offset ms, drift ppm). The first,
/// unskewed and with the smallest node id, is the time reference (Fig. 14:
/// a machine whose clock is already right); the others start 19,235 ms and
/// 544,461 ms off, as Narada's Cardiff (Fig. 12) and Indiana (Fig. 13)
/// machines did, and drift.
const CLOCKS: [(&str, i64, i64); 3] = [
    ("reference", 0, 0),
    ("cardiff", -19_235, 150),
    ("indiana", -544_461, -80),
];

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn config(
    i: usize,
    peers: &[String],
    addr: std::net::Ipv4Addr,
    dir: &std::path::Path,
) -> RouterConfig {
    let (name, offset_ms, ppm) = CLOCKS[i];
    let peers: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
    let text = format!(
        r#"name = "{name}"
tcp = "{addr}:{PORT}"
[auth]
local_token = false
[[auth.tokens]]
name = "fed"
token = "{TOKEN}"
[[acl]]
identity = "token:fed"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[federation]
peers = [{}]
token = "{TOKEN}"
clock_offset_ms = {offset_ms}
clock_skew_ppm = {ppm}
node_id = {}
"#,
        peers.join(", "),
        i + 1
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut cfg = RouterConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    cfg.unix = None;
    cfg
}

fn main() {
    let seconds: u64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(60);
    let csv_path = arg("--csv");
    let svg_path = arg("--svg");
    let dir = tempfile::tempdir().expect("temp dir");
    let tb = Testbed::new(TestbedConfig {
        hosts: 3,
        bottleneck: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // A chain: cardiff dials the reference, indiana dials cardiff (two
    // hops from the reference: its offset is chained through cardiff).
    let url = |i: usize| format!("tcp://{}:{PORT}", tb.host(i).addr());
    let mut routers: Vec<RouterHandle> = Vec::new();
    let mut sessions: Vec<Session> = Vec::new();
    for i in 0..3 {
        let peers = if i == 0 { vec![] } else { vec![url(i - 1)] };
        let cfg = config(i, &peers, tb.host(i).addr(), dir.path());
        let target = url(i);
        let (r, s) = tb
            .host(i)
            .run_in(move || {
                let r = Router::start(cfg).unwrap_or_else(|e| panic!("start: {e}"));
                let s = Session::builder()
                    .token(TOKEN)
                    .connect(&target)
                    .unwrap_or_else(|e| panic!("connect: {e}"));
                (r, s)
            })
            .unwrap_or_else(|e| panic!("{e}"));
        routers.push(r);
        sessions.push(s);
    }
    let mut csv = String::from("t_s,daemon,uncorrected_ms,corrected_ms,error_ms,hops\n");
    let start = Instant::now();
    let mut rows: Vec<(f64, usize, f64, f64, f64)> = Vec::new();
    while start.elapsed() < Duration::from_secs(seconds) {
        for (i, s) in sessions.iter().enumerate() {
            let before = now_ns();
            let t = s.network_time().unwrap_or_else(|e| panic!("time: {e}"));
            let after = now_ns();
            let truth = (before + after) / 2;
            let uncorrected = (t.local_time_ns as i128 - truth) as f64 / 1e6;
            let corrected = if t.synced {
                (t.network_time_ns as i128 - truth) as f64 / 1e6
            } else {
                f64::NAN
            };
            let secs = start.elapsed().as_secs_f64();
            rows.push((secs, i, uncorrected, corrected, t.error_ns as f64 / 1e6));
            csv.push_str(&format!(
                "{secs:.3},{},{uncorrected:.3},{corrected:.3},{:.3},{i}\n",
                CLOCKS[i].0,
                t.error_ns as f64 / 1e6
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // Summary: per daemon, the corrected offset's spread after the first
    // sync, beside the uncorrected one's change.
    println!("daemon      hops  initial uncorrected ms  change over run ms  corrected min/max ms  mean |corrected| ms  error bound ms");
    for (i, (name, ..)) in CLOCKS.iter().enumerate() {
        let mine: Vec<&(f64, usize, f64, f64, f64)> = rows.iter().filter(|r| r.1 == i).collect();
        let synced: Vec<f64> = mine
            .iter()
            .map(|r| r.3)
            .filter(|c| !c.is_nan())
            .skip(2)
            .collect();
        let (first, last) = (
            mine.first().map_or(0.0, |r| r.2),
            mine.last().map_or(0.0, |r| r.2),
        );
        let min = synced.iter().copied().fold(f64::INFINITY, f64::min);
        let max = synced.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = synced.iter().map(|c| c.abs()).sum::<f64>() / synced.len().max(1) as f64;
        let err = mine.last().map_or(0.0, |r| r.4);
        println!(
            "{name:<11} {i:>4}  {first:>22.1}  {:>18.3}  {min:>9.3} / {max:<9.3} {mean:>19.3}  {err:>14.3}",
            last - first
        );
    }
    if let Some(p) = csv_path {
        std::fs::File::create(&p)
            .and_then(|mut f| f.write_all(csv.as_bytes()))
            .unwrap_or_else(|e| panic!("{p}: {e}"));
    }
    if let Some(p) = svg_path {
        std::fs::write(&p, svg(&rows, seconds as f64)).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
    drop(sessions);
    drop(routers);
}

/// Two panels: the uncorrected change of offset (clock drift, as Narada's
/// figures plot "change of offset") and the corrected offset, per daemon.
fn svg(rows: &[(f64, usize, f64, f64, f64)], seconds: f64) -> String {
    let colors = ["#555", "#d62728", "#1f77b4"];
    let (w, h, pad) = (760.0, 260.0, 50.0);
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{}' font-family='sans-serif' font-size='12'>\n",
        2.0 * h + 20.0
    );
    for (panel, title) in [
        (
            0,
            "without correction: change of offset since the start (ms)",
        ),
        (1, "with correction: network time − true time (ms)"),
    ] {
        let y0 = panel as f64 * (h + 10.0);
        let values: Vec<(f64, usize, f64)> = rows
            .iter()
            .map(|r| {
                let first = rows.iter().find(|x| x.1 == r.1).map_or(0.0, |x| x.2);
                (r.0, r.1, if panel == 0 { r.2 - first } else { r.3 })
            })
            .filter(|v| v.2.is_finite())
            .collect();
        let lo = values.iter().map(|v| v.2).fold(0.0f64, f64::min);
        let hi = values.iter().map(|v| v.2).fold(0.0f64, f64::max);
        let span = (hi - lo).max(1e-3);
        let x = |t: f64| pad + (w - 2.0 * pad) * t / seconds.max(1.0);
        let y = |v: f64| y0 + h - pad / 2.0 - (h - pad) * (v - lo) / span;
        out.push_str(&format!(
            "<text x='{pad}' y='{}'>{title}</text>\n<line x1='{pad}' y1='{}' x2='{}' y2='{}' stroke='#999'/>\n",
            y0 + 15.0,
            y(0.0),
            w - pad,
            y(0.0)
        ));
        out.push_str(&format!(
            "<text x='5' y='{}'>{hi:.2}</text><text x='5' y='{}'>{lo:.2}</text>\n",
            y(hi) + 4.0,
            y(lo) + 4.0
        ));
        for (i, (name, ..)) in CLOCKS.iter().enumerate() {
            let pts: Vec<String> = values
                .iter()
                .filter(|v| v.1 == i)
                .map(|v| format!("{:.1},{:.1}", x(v.0), y(v.2)))
                .collect();
            out.push_str(&format!(
                "<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>\n<text x='{}' y='{}' fill='{}'>{name}</text>\n",
                colors[i],
                pts.join(" "),
                w - pad + 4.0 - 60.0,
                y0 + 35.0 + 14.0 * i as f64,
                colors[i]
            ));
        }
    }
    out.push_str("</svg>\n");
    out
}
