//! The metrics and dashboard listener (issue 28, items 2 and 3;
//! docs/metrics.md): `/metrics` under traffic, the label bound, who may
//! read it, requests that must fail alone, and the dashboard in a real
//! headless Chromium (`apt-get install chromium`).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{owner_token, tcp_config, Raw, WAIT};
use tagwire_router::config::{AclRule, AuthConfig, MetricsConfig, TokenConfig};
use tagwire_router::{Router, RouterConfig, RouterHandle};

const ALICE: &str = "alice-token-0123456789abcdef";
const OPS: &str = "ops-token-0123456789abcdef";

/// A router on loopback TCP with a metrics listener, tokens for `alice`
/// (no admin right) and `ops` (admin).
fn config(metrics: MetricsConfig) -> RouterConfig {
    let token = |name: &str, secret: &str| TokenConfig {
        name: name.into(),
        token: Some(secret.into()),
        file: None,
    };
    RouterConfig {
        auth: AuthConfig {
            tokens: vec![token("alice", ALICE), token("ops", OPS)],
            ..AuthConfig::default()
        },
        acl: vec![
            AclRule {
                identity: "token:alice".into(),
                publish: vec!["/**".into()],
                subscribe: vec!["/**".into()],
                admin: false,
            },
            AclRule {
                identity: "token:ops".into(),
                publish: vec![],
                subscribe: vec![],
                admin: true,
            },
        ],
        metrics: MetricsConfig {
            listen: "127.0.0.1:0".parse().ok(),
            ..metrics
        },
        ..tcp_config()
    }
}

fn start(metrics: MetricsConfig) -> (RouterHandle, SocketAddr) {
    let h = Router::start(config(metrics)).expect("start router");
    let addr = h.metrics_addr().expect("metrics listener");
    (h, addr)
}

/// An HTTP response: status, head (lower-cased) and body.
struct Reply {
    status: u16,
    head: String,
    body: String,
}

/// Sends raw request bytes and reads the whole answer (the request says
/// `Connection: close`, or the server closes).
fn exchange(addr: SocketAddr, request: &[u8]) -> Option<Reply> {
    let mut s = TcpStream::connect(addr).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    // The server may close before taking everything (a refused request).
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Reply {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    })
}

/// `GET path` with an optional bearer token.
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Reply {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n");
    exchange(addr, req.as_bytes()).unwrap_or_else(|| panic!("no HTTP answer to GET {path}"))
}

/// The value of the series whose name and labels are exactly `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `/metrics` until `series` has a value for which `done` holds.
fn wait_metric(addr: SocketAddr, token: &str, series: &str, done: impl Fn(f64) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = get(addr, "/metrics", Some(token));
        assert_eq!(r.status, 200, "{}", r.body);
        if value(&r.body, series).is_some_and(&done) {
            return r.body;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {series}: {}",
            r.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A subscriber `/viewer` on `/demo/**` and a publisher `/cam` (in-process).
fn traffic(h: &RouterHandle) -> (Raw, Raw) {
    let sub = Raw::hello(h).subscriber("/viewer", "/demo/**", &[]);
    let publisher = Raw::hello(h).publisher("/cam");
    (sub, publisher)
}

/// The metric names docs/metrics.md lists (first column of its tables).
fn documented_names() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/metrics.md"
    ))
    .expect("docs/metrics.md");
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `tagwire_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("tagwire_{n}"))
        .collect()
}

#[test]
fn metrics_show_every_documented_name_and_move_under_traffic() {
    let (h, addr) = start(MetricsConfig::default());
    let token = owner_token(&h);
    let (_sub, mut publisher) = traffic(&h);
    publisher.publish_many(1, "/cam", "/demo/x", 100, 10);
    let tag = r#"tagwire_tag_events_published_total{tag="/demo/x"}"#;
    let chan = r#"tagwire_channel_events_delivered_total{endpoint="/viewer",pattern="/demo/**"}"#;
    let text = wait_metric(addr, &token, chan, |v| v == 10.0);
    assert_eq!(value(&text, tag), Some(10.0), "{text}");

    let r = get(addr, "/metrics", Some(&token));
    assert!(
        r.head.contains("content-type: text/plain; version=0.0.4"),
        "{}",
        r.head
    );
    let names = documented_names();
    assert!(names.len() >= 30, "docs/metrics.md lists {names:?}");
    // Link series appear once a link is up; this router is alone.
    for n in names.iter().filter(|n| !n.starts_with("tagwire_link_")) {
        assert!(
            r.body.contains(&format!("# TYPE {n} ")),
            "{n} is documented but not served:\n{}",
            r.body
        );
    }
    for line in r.body.lines().filter(|l| l.starts_with("# TYPE ")) {
        let n = line.split(' ').nth(2).unwrap_or_default();
        assert!(
            names.iter().any(|d| d == n),
            "{n} is served but not documented"
        );
    }
    assert!(value(&r.body, "tagwire_subscriptions").is_some_and(|v| v >= 1.0));
    assert!(
        value(&r.body, r#"tagwire_lane_cpu_seconds_total{band="normal"}"#).is_some_and(|v| v > 0.0),
        "{}",
        r.body
    );
    let owner = format!(
        r#"tagwire_identity_connections{{identity="uid:{}"}}"#,
        tagwire_router::local::current_uid()
    );
    assert_eq!(value(&r.body, &owner), Some(2.0), "{}", r.body);

    // More traffic: the counters follow.
    publisher.publish_many(1, "/cam", "/demo/x", 100, 5);
    let text = wait_metric(addr, &token, chan, |v| v == 15.0);
    assert_eq!(value(&text, tag), Some(15.0), "{text}");
    assert_eq!(value(&text, "tagwire_events_published_total"), Some(15.0));
}

#[test]
fn tags_beyond_max_series_are_summed_into_other() {
    let (h, addr) = start(MetricsConfig {
        max_series: 2,
        ..MetricsConfig::default()
    });
    let token = owner_token(&h);
    let (_sub, mut publisher) = traffic(&h);
    for (i, tag) in ["/demo/a", "/demo/b", "/demo/c", "/demo/d", "/demo/e"]
        .iter()
        .enumerate()
    {
        publisher.publish_many(1, "/cam", tag, 10, i + 1);
    }
    let text = wait_metric(addr, &token, "tagwire_events_published_total", |v| {
        v == 15.0
    });
    let tag_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tagwire_tag_events_published_total{"))
        .collect();
    assert_eq!(tag_lines.len(), 3, "two tags and other: {tag_lines:?}");
    // The first two in name order keep their series; the rest sum up.
    let v = |t: &str| {
        value(
            &text,
            &format!(r#"tagwire_tag_events_published_total{{tag="{t}"}}"#),
        )
    };
    assert_eq!(v("/demo/a"), Some(1.0));
    assert_eq!(v("/demo/b"), Some(2.0));
    assert_eq!(v("other"), Some(3.0 + 4.0 + 5.0));
    assert_eq!(value(&text, "tagwire_metrics_max_series"), Some(2.0));
}

#[test]
fn requests_without_a_valid_admin_token_are_refused() {
    let (h, addr) = start(MetricsConfig::default());
    for path in ["/metrics", "/", "/api/listing"] {
        let r = get(addr, path, None);
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert!(r.head.contains("www-authenticate: bearer"), "{}", r.head);
        assert!(r.body.contains("present a token"), "{}", r.body);
        let r = get(addr, path, Some("not-a-token-0123456789abcdef"));
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        let r = get(addr, path, Some(ALICE));
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(
            r.body.contains("token:alice") && r.body.contains("admin = true"),
            "{}",
            r.body
        );
        assert_eq!(get(addr, path, Some(OPS)).status, 200, "{path} as ops");
        assert_eq!(
            get(addr, path, Some(&owner_token(&h))).status,
            200,
            "{path} as owner"
        );
    }
    // ?token= works like the header (the dashboard is opened that way).
    let r = get(addr, &format!("/api/listing?token={OPS}"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = get(addr, &format!("/?token={OPS}"), None);
    assert!(
        r.body.contains("<title>tagwired dashboard</title>"),
        "{}",
        r.body
    );
    assert_eq!(get(addr, "/nothing", Some(OPS)).status, 404);
}

#[test]
fn public_metrics_need_no_token_but_the_dashboard_still_does() {
    let (_h, addr) = start(MetricsConfig {
        public: true,
        ..MetricsConfig::default()
    });
    let r = get(addr, "/metrics", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("# TYPE tagwire_connections gauge"),
        "{}",
        r.body
    );
    assert_eq!(get(addr, "/api/listing", None).status, 401);
    assert_eq!(get(addr, "/", None).status, 401);
}

#[test]
fn garbage_oversized_bodied_and_idle_requests_fail_alone() {
    let (h, addr) = start(MetricsConfig {
        max_connections: 4,
        ..MetricsConfig::default()
    });
    let token = owner_token(&h);
    let mut client = Raw::hello(&h);

    // Garbage: an HTTP error or a close, nothing else.
    let r = exchange(addr, b"\x00\x01\x02 hello\r\n\r\n");
    assert!(
        r.is_none_or(|r| r.status == 400),
        "garbage answered otherwise"
    );
    // A head far over the limit.
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let r = exchange(addr, big.as_bytes());
    assert!(
        r.is_none_or(|r| r.status == 431 || r.status == 400),
        "oversized head accepted"
    );
    // A body, and a method other than GET.
    let r = exchange(
        addr,
        format!("POST /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 5\r\n\r\nhello").as_bytes(),
    )
    .expect("an answer to POST");
    assert_eq!(r.status, 405, "{}", r.body);
    let r = exchange(
        addr,
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 5\r\n\r\nhello").as_bytes(),
    )
    .expect("an answer to a GET with a body");
    assert_eq!(r.status, 413, "{}", r.body);

    // Idle connections take the slots; one past the limit is closed at
    // once, and the daemon's clients are not affected.
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(addr).expect("connect");
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    assert!(
        matches!(extra.read(&mut buf), Ok(0) | Err(_)),
        "a connection past max_connections is closed"
    );
    client.expect_alive();
    // The idle ones are closed after the head timeout; then GETs work again.
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut rest = Vec::new();
        match s.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e)
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("an idle connection was not closed within 20 s: {e}"),
        }
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let r = exchange(
            addr,
            format!("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes(),
        );
        if r.as_ref().is_some_and(|r| r.status == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "the listener did not recover");
        std::thread::sleep(Duration::from_millis(100));
    }
    client.expect_alive();
}

#[test]
fn the_listing_json_carries_tables_and_rates() {
    let (h, addr) = start(MetricsConfig::default());
    let token = owner_token(&h);
    let (_sub, mut publisher) = traffic(&h);
    let rate = wait_rate(addr, &token, &mut publisher);
    assert!(rate > 0.0);
    let r = get(addr, "/api/listing", Some(&token));
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(v["channels"]["rows"][0]["endpoint"], "/viewer");
    assert_eq!(v["channels"]["rows"][0]["discard"], "drop_oldest");
    assert!(v["lanes"].as_array().is_some_and(|l| l.len() == 4), "{v}");
    assert_eq!(v["totals"]["subscriptions"], 1);
}

/// Publishes on `/demo/x` until `/api/listing` shows it a non-zero rate.
fn wait_rate(addr: SocketAddr, token: &str, publisher: &mut Raw) -> f64 {
    let deadline = Instant::now() + WAIT;
    loop {
        publisher.publish_many(1, "/cam", "/demo/x", 100, 20);
        let r = get(addr, "/api/listing", Some(token));
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
        let rate = v["tags"]["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|t| t["tag"] == "/demo/x"))
            .and_then(|t| t["rate"].as_f64());
        if let Some(r) = rate.filter(|r| *r > 0.0) {
            return r;
        }
        assert!(Instant::now() < deadline, "no rate for /demo/x: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Debian's Chromium, or a failure saying how to get it.
fn chromium() -> String {
    for name in ["chromium", "chromium-browser"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if found {
            return name.to_owned();
        }
    }
    panic!("the dashboard test needs a headless Chromium: apt-get install chromium");
}

#[test]
fn the_dashboard_shows_tags_and_live_rates_in_headless_chromium() {
    let browser = chromium();
    let (h, addr) = start(MetricsConfig::default());
    let token = owner_token(&h);
    let (_sub, mut publisher) = traffic(&h);
    wait_rate(addr, &token, &mut publisher);
    // Traffic goes on while the browser loads and polls.
    let stop = Arc::new(AtomicBool::new(false));
    let pump = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                publisher.publish_many(1, "/cam", "/demo/x", 100, 20);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let profile = tempfile::tempdir().expect("temp dir");
    let url = format!("http://{addr}/?token={token}");
    let run = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(&browser);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(&url);
        let out = cmd.output().expect("run chromium");
        assert!(
            out.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dom = run(&["--dump-dom"]);
    assert!(
        dom.contains(r#"<td class="tag">/demo/x</td>"#),
        "no tag row:\n{dom}"
    );
    assert!(
        dom.contains("status live"),
        "the script did not update the page:\n{dom}"
    );
    let rate = dom
        .split(r#"data-tag="/demo/x" data-rate=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|r| r.parse::<f64>().ok());
    assert!(
        rate.is_some_and(|r| r > 0.0),
        "no non-zero rate for /demo/x:\n{dom}"
    );

    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").into());
    let shot = std::path::Path::new(&target).join("dashboard.png");
    run(&[&format!("--screenshot={}", shot.display())]);
    let len = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(len > 10_000, "screenshot {} is {len} bytes", shot.display());
    stop.store(true, Ordering::Relaxed);
    let _ = pump.join();
}
