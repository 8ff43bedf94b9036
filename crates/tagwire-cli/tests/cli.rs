//! The real binaries end to end: `tagwired` with defaults (in a private
//! runtime directory and port), `tagwire sub`, `tagwire pub`, `tagwire list`,
//! bad command lines, and a client reconnecting across a daemon restart.

mod common;

use common::{free_port, temp_dir, wait_output};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The bound of every wait for a condition (a daemon listening, a client
/// listed, a child's exit): a bound on a hang, not a timing, so generous —
/// under load (every test at once beside busy loops on 2 CPUs) a debug
/// client took over 10 s to be listed.
const WAIT: Duration = Duration::from_secs(60);

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    /// Starts tagwired with its default Unix socket in `dir` and a free TCP
    /// port, its log appended to `dir/tagwired.log`; returns once it
    /// listens on both and has written its token file (it binds its sockets
    /// before it writes the token, so a client that only waits for the port
    /// can find no token yet).
    fn start(dir: &Path, port: u16) -> Daemon {
        std::fs::create_dir_all(dir).expect("runtime dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("tagwired.log"))
            .expect("daemon log");
        let child = Command::new(env!("CARGO_BIN_EXE_tagwired"))
            .args(["--tcp", &format!("127.0.0.1:{port}")])
            .env("XDG_RUNTIME_DIR", dir)
            .stderr(log)
            .spawn()
            .expect("spawn tagwired");
        let d = Daemon {
            child,
            dir: dir.to_owned(),
        };
        let runtime = d.dir.join("tagwire");
        let deadline = Instant::now() + WAIT;
        while !runtime.join("tagwire.sock").exists()
            || !runtime.join(format!("token-{port}")).exists()
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "tagwired did not start listening; its log:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// What the daemon (and any earlier one in this directory) logged.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tagwired.log")).unwrap_or_default()
    }

    fn tagwire(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tagwire"));
        c.env("XDG_RUNTIME_DIR", &self.dir)
            .env_remove("TAGWIRE_SERVER");
        c
    }

    fn stop(mut self) {
        // SIGTERM for a clean shutdown; the test only needs the process gone.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed if the test ends before it does.
struct Reap(Option<Child>);

impl Reap {
    fn new(child: Child) -> Reap {
        Reap(Some(child))
    }

    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child is reaped only by finish")
    }

    /// Waits (bounded) for the child to exit and returns its output.
    fn finish(mut self) -> Output {
        wait_output(
            self.0.take().expect("the child is reaped only by finish"),
            WAIT,
        )
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until `tagwire list` mentions `what`.
fn wait_listed(d: &Daemon, what: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = d.tagwire().arg("list").output().expect("tagwire list");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains(what) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "`tagwire list` never showed {what}:\n{text}\ndaemon log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sub_receives_what_pub_sends_and_list_shows_both_endpoints() {
    let dir = temp_dir("cli", "tour");
    let d = Daemon::start(&dir, free_port());
    let sub = d
        .tagwire()
        .args([
            "sub",
            "/demo/**",
            "--count",
            "2",
            "--endpoint",
            "/tour/viewer",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    wait_listed(&d, "/tour/viewer");
    // A long-lived publisher so that `list` can see it; 8 KiB payloads,
    // over `shm=auto`'s 4 KiB threshold, so that they go through shared
    // memory.
    let slow_pub = d
        .tagwire()
        .args([
            "pub",
            "/demo/x",
            "hi",
            "--size",
            "8192",
            "--count",
            "2",
            "--rate",
            "2",
            "--endpoint",
            "/tour/pub",
        ])
        .spawn()
        .expect("tagwire pub");
    let listing = wait_listed(&d, "/tour/pub");
    assert!(
        listing.contains("/tour/viewer") && listing.contains("/demo/**"),
        "{listing}"
    );
    // Who is connected, and how the daemon authenticates them.
    let me = format!("uid:{}", tagwire::router::local::current_uid());
    assert!(
        listing.contains("authentication on") && listing.contains(&me),
        "{listing}"
    );
    let out = wait_output(sub, WAIT);
    assert!(out.status.success());
    let line = format!("/demo/x {}\n", "hi".repeat(4096));
    assert_eq!(String::from_utf8_lossy(&out.stdout), line.repeat(2));
    // Both on the daemon's Unix socket: the payloads went through shared memory.
    let listing = wait_listed(&d, "shared memory");
    let by_ref = listing
        .split(" deliveries by reference")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no shared-memory line in:\n{listing}"));
    assert!(by_ref >= 2, "{listing}");
    assert!(wait_output(slow_pub, WAIT).status.success());
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sub_json_prints_header_fields_and_payload() {
    let dir = temp_dir("cli", "json");
    let d = Daemon::start(&dir, free_port());
    let sub = d
        .tagwire()
        .args([
            "sub",
            "/j/*",
            "--count",
            "1",
            "--json",
            "--endpoint",
            "/json/viewer",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    wait_listed(&d, "/json/viewer");
    let status = d
        .tagwire()
        .args([
            "pub",
            "/j/a",
            "payload",
            "-f",
            "severity=4",
            "-f",
            "site=lab",
            "--priority",
            "3",
        ])
        .status()
        .expect("pub");
    assert!(status.success());
    let out = wait_output(sub, WAIT);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["tag"], "/j/a");
    assert_eq!(v["payload"], "payload");
    assert_eq!(v["priority"], 3);
    assert_eq!(v["fields"]["severity"], 4);
    assert_eq!(v["fields"]["site"], "lab");
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sub_json_prints_every_header_field_the_event_carries() {
    let dir = temp_dir("cli", "json-header");
    let d = Daemon::start(&dir, free_port());
    let sub = d
        .tagwire()
        .args([
            "sub",
            "/jh/*",
            "--count",
            "2",
            "--json",
            "--endpoint",
            "/jh/viewer",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    wait_listed(&d, "/jh/viewer");
    // `tagwire pub` sets none of the optional header fields: the library does.
    let sock = dir.join("tagwire").join("tagwire.sock");
    let session = tagwire::Session::connect(&format!("unix://{}", sock.display()))
        .expect("connect to the daemon");
    let publisher = session.declare_publisher("/jh/pub").expect("publisher");
    let start_ns = 1_700_000_000_000_000_000; // in the past: delivered at once
    let mut full = tagwire::Event::new("/jh/full", "all");
    full.header.virtual_time = Some(42);
    full.header.expiry = tagwire::Expiry::AfterNs(3_600_000_000_000);
    full.header.start_time_ns = Some(start_ns);
    full.header.type_name = Some("Alarm".into());
    full.header.event_name = Some("lost".into());
    full.header.flags = 0x0103; // the application's bits, 0x0001 included (issue 24 item 12)
    publisher.send(full).expect("publish");
    let stop_ns = 4_000_000_000_000_000_000; // 2096
    let mut bare = tagwire::Event::new("/jh/bare", "stop");
    bare.header.expiry = tagwire::Expiry::AtNs(stop_ns);
    publisher.send(bare).expect("publish");

    let out = wait_output(sub, WAIT);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let [full, bare] = &lines[..] else {
        panic!("two events expected, got {lines:?}");
    };
    assert_eq!(full["tag"], "/jh/full");
    assert_eq!(full["publisher"], "/jh/pub");
    assert_eq!(full["virtual_time"], 42);
    assert_eq!(full["timeout_ns"], 3_600_000_000_000u64);
    assert_eq!(full["start_time_ns"], start_ns);
    assert_eq!(full["type_name"], "Alarm");
    assert_eq!(full["event_name"], "lost");
    assert_eq!(full["flags"], 0x0103);
    assert!(full.get("stop_time_ns").is_none(), "{full}");
    assert_eq!(bare["stop_time_ns"], stop_ns);
    assert_eq!(bare["flags"], 0, "flags are printed even when 0");
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort();
        k
    };
    // Absent optional parts are left out, not printed as null.
    assert_eq!(
        keys(bare),
        [
            "fields",
            "flags",
            "payload",
            "priority",
            "publisher",
            "seq",
            "source_time_ns",
            "stop_time_ns",
            "tag"
        ]
    );
    drop(publisher);
    drop(session);
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_command_lines_fail_with_a_message_naming_the_problem() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
            .args(args)
            .env_remove("TAGWIRE_SERVER")
            .output()
            .expect("run tagwire");
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(run(&["pub", "/x", "--server", "http://nope"]).contains("http://nope"));
    assert!(run(&["sub", "/x", "--server", "tcp://127.0.0.1:1"]).contains("cannot connect"));
    let e = run(&["bench", "latency", "--duration=-1", "--embedded"]);
    assert!(e.contains("--duration"), "{e}");
    let out = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--config", "/nonexistent/tagwired.toml"])
        .output()
        .expect("run tagwired");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tagwired.toml"));
}

#[test]
fn bench_latency_writes_its_histogram_for_pooling() {
    let dir = temp_dir("cli", "histogram");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("rtt.hist");
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args([
            "bench",
            "latency",
            "--embedded",
            "--duration",
            // 1,000 warm-up round trips come first: a debug build beside
            // other tests makes ~1,000 a second.
            "3",
            "--json",
            "--histogram",
        ])
        .arg(&file)
        .output()
        .expect("run tagwire bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(out.stdout.trim_ascii()).expect("one JSON object");
    let text = std::fs::read_to_string(&file).expect("the histogram file");
    let mut total = 0u64;
    let mut last = 0u64;
    for line in text.lines() {
        let (ns, count) = line.split_once(' ').expect("`NANOSECONDS COUNT`");
        let ns: u64 = ns.parse().expect("nanoseconds");
        assert!(ns > last, "values ascend: {line}");
        last = ns;
        total += count.parse::<u64>().expect("count");
    }
    assert_eq!(
        total,
        json["samples"].as_u64().expect("samples"),
        "the file's counts are the run's round trips"
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["bench", "throughput", "--embedded", "--histogram"])
        .arg(&file)
        .output()
        .expect("run tagwire bench");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--histogram"));
}

#[test]
fn second_daemon_on_the_same_socket_is_refused() {
    let dir = temp_dir("cli", "twice");
    let d = Daemon::start(&dir, free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--no-tcp"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .expect("second tagwired");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already listening"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn client_reconnects_and_resubscribes_after_a_daemon_restart() {
    let dir = temp_dir("cli", "restart");
    let port = free_port();
    let d = Daemon::start(&dir, port);
    // The Unix socket: the kernel's peer credentials identify this process
    // (over TCP it would need the daemon's token from `dir`).
    let url = format!(
        "unix://{}",
        dir.join("tagwire").join("tagwire.sock").display()
    );
    let session = tagwire::Session::connect(&url).expect("connect");
    let sub = session
        .subscribe("/restart/**")
        .receiver()
        .expect("subscribe");
    d.stop();
    let d = Daemon::start(&dir, port);
    let deadline = Instant::now() + WAIT;
    while session.reconnects() == 0 {
        assert!(Instant::now() < deadline, "the session did not reconnect");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The re-subscription travels before anything else on the new
    // connection, so an event published now reaches the old subscriber.
    let publisher = tagwire::Session::connect(&url)
        .expect("connect")
        .declare_publisher("/restart/pub")
        .expect("declare");
    let deadline = Instant::now() + WAIT;
    loop {
        publisher.publish("/restart/x", "again").expect("publish");
        if let Some(s) = sub.recv_timeout(Duration::from_millis(200)).expect("recv") {
            assert_eq!(&s.payload()[..], b"again");
            break;
        }
        assert!(Instant::now() < deadline, "no event after the restart");
    }
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sub_filter_and_admin_filter_commands_work_end_to_end() {
    let dir = temp_dir("cli", "filter");
    let d = Daemon::start(&dir, free_port());
    let sub = d
        .tagwire()
        .args([
            "sub",
            "/alarms/**",
            "--count",
            "1",
            "--endpoint",
            "/cli/alarms",
            "--filter",
            "$priority < 2 and $.severity > 3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    wait_listed(&d, "/cli/alarms");
    let out = d
        .tagwire()
        .args(["admin", "filter", "list"])
        .output()
        .expect("filter list");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("/cli/alarms") && text.contains("$.severity > 3"),
        "{text}"
    );
    let out = d
        .tagwire()
        .args([
            "admin",
            "filter",
            "add",
            "--endpoint",
            "/cli/alarms",
            "$prority > 1",
        ])
        .output()
        .expect("add");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("$prority"));
    for (payload, prio, sev) in [("skip", "5", "9"), ("skip2", "1", "1"), ("take", "1", "7")] {
        let st = d
            .tagwire()
            .args([
                "pub",
                "/alarms/x",
                payload,
                "--priority",
                prio,
                "-f",
                &format!("severity={sev}"),
            ])
            .status()
            .expect("pub");
        assert!(st.success());
    }
    let out = wait_output(sub, WAIT);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/alarms/x take\n");
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- Trespass (issue 12, items 10 and 11). These switch uid, so they need
// root, as CI has; run them with `sudo -E cargo test -p tagwire-cli`.

/// The unprivileged user the trespass tests act as.
const NOBODY: u32 = 65534;

fn require_root() {
    assert_eq!(
        tagwire::router::local::current_uid(),
        0,
        "this test acts as another user (uid {NOBODY}) and needs root: run it as root, as CI does"
    );
}

/// A directory anyone may enter (for a socket another user must reach).
fn open_dir(tag: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = temp_dir("cli", tag);
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// A child process killed when the test ends, even by a failed assertion.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts tagwired on a Unix socket only, as `uid`, with `config` (TOML).
fn daemon_on_socket(dir: &Path, uid: u32, config: &str) -> (Killed, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let sock = dir.join("d.sock");
    let cfg = dir.join("tagwired.toml");
    std::fs::write(&cfg, config).expect("config");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let child = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--no-tcp", "--unix"])
        .arg(&sock)
        .arg("--config")
        .arg(&cfg)
        .env("XDG_RUNTIME_DIR", dir)
        .uid(uid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tagwired");
    let child = Killed(child);
    // Accepting, not just bound: the file appears at bind(), a moment before
    // listen(), and a connect in between is refused.
    let deadline = Instant::now() + WAIT;
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "tagwired did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, sock)
}

/// Runs `tagwire --server unix://SOCK ARGS…` as `uid`.
fn tagwire_as(uid: u32, sock: &Path, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .arg("--server")
        .arg(format!("unix://{}", sock.display()))
        .args(args)
        .env_remove("TAGWIRE_SERVER")
        .env_remove("XDG_RUNTIME_DIR")
        .uid(uid)
        .output()
        .expect("run tagwire")
}

#[test]
fn another_user_is_refused_unless_an_acl_rule_names_it() {
    require_root();
    let dir = open_dir("stranger");
    let (d, sock) = daemon_on_socket(&dir, 0, "");
    let out = tagwire_as(NOBODY, &sock, &["list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("uid:{NOBODY} has no rights")),
        "{err}"
    );
    // Nor may it publish.
    let out = tagwire_as(NOBODY, &sock, &["pub", "/victim/x", "hi"]);
    assert!(!out.status.success());
    drop(d);

    // With a rule it may subscribe within /pub/**, and its listing shows
    // only what it holds.
    let rule = format!("[[acl]]\nidentity = \"uid:{NOBODY}\"\nsubscribe = [\"/pub/**\"]\n");
    let _ = std::fs::remove_file(&sock);
    let (_d, sock) = daemon_on_socket(&dir, 0, &rule);
    let out = tagwire_as(NOBODY, &sock, &["list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tagwire_as(NOBODY, &sock, &["sub", "/**", "--count", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("may not subscribe"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_refuses_a_daemon_socket_served_by_another_user() {
    require_root();
    let dir = open_dir("planted");
    std::os::unix::fs::chown(&dir, Some(NOBODY), None).expect("chown");
    let (_d, sock) = daemon_on_socket(&dir, NOBODY, "");
    let out = tagwire_as(0, &sock, &["pub", "/secret", "password"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("runs as uid {NOBODY}")), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_runtime_directory_made_by_another_user_is_refused() {
    require_root();
    let dir = open_dir("squatted");
    let runtime = dir.join("tagwire");
    std::fs::create_dir(&runtime).expect("dir");
    std::os::unix::fs::chown(&runtime, Some(NOBODY), None).expect("chown");
    let out = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--no-tcp"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .expect("run tagwired");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("owned by uid {NOBODY}")), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `tagwire ARGS` with its stdout a pipe whose reader goes away at
/// once; returns how it ended. The commands used print more than a pipe
/// holds (64 KiB), so a write fails with EPIPE whatever the timing.
fn run_into_closed_pipe(d: &Daemon, args: &[&str]) -> Output {
    let mut child = d
        .tagwire()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagwire");
    drop(child.stdout.take());
    // A bound on a hang, not a timing: a listing of 1,000 subscriptions from
    // a debug daemon under a loaded machine's parallel tests took over 10 s.
    wait_output(child, HANG)
}

/// How long a command may take before it counts as hung (generous: the
/// machine may be running every other test at once).
const HANG: Duration = Duration::from_secs(120);

#[test]
fn commands_whose_stdout_is_closed_exit_quietly_without_panicking() {
    let dir = temp_dir("cli", "epipe");
    let d = Daemon::start(&dir, free_port());
    let session = tagwire::Session::connect(&format!(
        "unix://{}",
        dir.join("tagwire").join("tagwire.sock").display()
    ))
    .unwrap_or_else(|e| panic!("connect: {e}; daemon log:\n{}", d.log()));
    // ~1,000 subscriptions: a listing of well over 64 KiB.
    let subs: Vec<_> = (0..1000)
        .map(|i| {
            session
                .subscribe(&format!("/epipe/{i}/**"))
                .endpoint(&format!("/epipe/subscriber/with/a/long/name/{i}"))
                .receiver()
                .expect("subscribe")
        })
        .collect();
    for args in [
        &["list"][..],
        &["list", "--json"],
        &["ping", "--count", "5000", "--interval", "0"],
    ] {
        let out = run_into_closed_pipe(&d, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "tagwire {args:?}: {:?}, stderr: {stderr}",
            out.status
        );
    }
    drop(subs);
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pub_rides_through_a_daemon_restart_and_a_new_subscriber_gets_later_events() {
    use std::io::Write;
    let dir = temp_dir("cli", "ride");
    let port = free_port();
    let d = Daemon::start(&dir, port);
    let server = format!("tcp://127.0.0.1:{port}");
    // One event per stdin line, so the test decides when each is published.
    let mut publisher = Reap::new(
        d.tagwire()
            .args([
                "pub",
                "/ride/x",
                "-",
                "--endpoint",
                "/ride/pub",
                "--server",
                &server,
            ])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tagwire pub"),
    );
    let mut lines = publisher.child().stdin.take().expect("stdin");
    writeln!(lines, "before").expect("write");
    wait_listed(&d, "/ride/pub");
    d.stop();
    writeln!(lines, "while down").expect("write");
    let d = Daemon::start(&dir, port);
    let mut sub = Reap::new(
        d.tagwire()
            .args(["sub", "/ride/**", "--count", "1", "--server", &server])
            .stdout(Stdio::piped())
            .spawn()
            .expect("tagwire sub"),
    );
    let deadline = Instant::now() + WAIT;
    let mut n = 0;
    while sub.child().try_wait().expect("sub status").is_none() && Instant::now() < deadline {
        n += 1;
        // A failed write means `tagwire pub` exited: its stderr says why.
        if writeln!(lines, "after {n}").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(lines);
    let publisher = publisher.finish();
    assert!(
        publisher.status.success(),
        "tagwire pub failed across the restart: {}",
        String::from_utf8_lossy(&publisher.stderr)
    );
    let sub = sub.finish();
    let got = String::from_utf8_lossy(&sub.stdout);
    assert!(
        got.starts_with("/ride/x after") || got.starts_with("/ride/x while down"),
        "the new daemon's subscriber got {got:?}"
    );
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn connect_timeout_bounds_the_wait_for_a_server_that_never_answers() {
    // A listener nobody accepts from: the handshake's Welcome never comes.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("tcp://{}", silent.local_addr().expect("addr"));
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["list", "--connect-timeout", "0.3", "--server", &url])
        .env_remove("TAGWIRE_SERVER")
        .output()
        .expect("run tagwire");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&url) && stderr.contains("no answer within 300ms"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["list", "--connect-timeout=-1", "--server", &url])
        .output()
        .expect("run tagwire");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--connect-timeout -1"));
}

#[test]
fn sub_json_reports_what_the_client_dropped_while_its_stdout_was_stuck() {
    use std::io::BufRead;
    let dir = temp_dir("cli", "drops");
    let d = Daemon::start(&dir, free_port());
    let mut sub = Reap::new(
        d.tagwire()
            .args([
                "sub",
                "/flood/**",
                "--json",
                "--local-queue",
                "16",
                "--max-queue",
                "100000",
                "--endpoint",
                "/flood/viewer",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tagwire sub"),
    );
    wait_listed(&d, "/flood/viewer");
    // Nobody reads the subscriber's stdout yet: once the pipe is full its
    // printing blocks and its 16-event queue overflows.
    let published = 2000;
    let status = d
        .tagwire()
        .args([
            "pub",
            "/flood/x",
            "--count",
            &published.to_string(),
            "--size",
            "1024",
        ])
        .stderr(Stdio::null())
        .status()
        .expect("pub");
    assert!(status.success());
    // A marker after the flood: once it is printed, every flood event has
    // been printed or dropped.
    assert!(d
        .tagwire()
        .args(["pub", "/flood/end", "."])
        .status()
        .expect("pub")
        .success());
    let pid = sub.child().id().to_string();
    let stdout = sub.child().stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("/flood/end") {
                let _ = Command::new("kill").args(["-TERM", &pid]).status();
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let out = sub.finish();
    // The child has exited, so its stdout is at EOF and the reader ends.
    reader.join().expect("stdout reader");
    let lines: Vec<serde_json::Value> = rx
        .try_iter()
        .map(|l| serde_json::from_str(&l).expect("a JSON line"))
        .collect();
    let printed = lines.iter().filter(|v| v["tag"] == "/flood/x").count() as u64;
    let summary = lines.last().expect("a summary line");
    let dropped = summary["dropped_in_client"]
        .as_u64()
        .expect("dropped_in_client");
    assert!(dropped > 0, "nothing dropped: {summary}");
    assert_eq!(
        printed + dropped,
        published,
        "printed + dropped == published"
    );
    assert_eq!(summary["received"].as_u64(), Some(printed + 1), "{summary}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("dropped {dropped} events in the client")),
        "{stderr}"
    );
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn admin_qos_changes_a_live_channel_and_show_reports_it_with_its_level() {
    let dir = temp_dir("cli", "qos");
    let d = Daemon::start(&dir, free_port());
    let sub = d
        .tagwire()
        .args([
            "sub",
            "/qos/**",
            "--count",
            "1",
            "--endpoint",
            "/cli/viewer",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    let sub = Reap::new(sub);
    wait_listed(&d, "/cli/viewer");
    let out = d
        .tagwire()
        .args([
            "admin",
            "qos",
            "/cli/viewer",
            "priority=high",
            "dscp=af42",
            "max_queue_length=100",
        ])
        .output()
        .expect("admin qos");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = d
        .tagwire()
        .args(["admin", "show", "/cli/viewer"])
        .output()
        .expect("admin show");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("band normal"), "{text}");
    assert!(text.contains("DSCP 36"), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line: {text}"))
            .to_owned()
    };
    assert!(line("priority ").contains("high") && line("priority ").contains("(channel)"));
    assert!(line("max_queue_length").contains("100"));
    assert!(line("order").contains("(default)"));
    // A bad value is refused by name, and the old value stays.
    let out = d
        .tagwire()
        .args(["admin", "qos", "/cli/viewer", "sched=fifo:200"])
        .output()
        .expect("admin qos");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("fifo:200"));
    let out = d
        .tagwire()
        .args(["admin", "show", "/cli/viewer", "--json"])
        .output()
        .expect("admin show --json");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["channels"][0]["queue_bound"], 100);
    drop(sub);
    d.stop();
}

#[test]
fn bench_av_reports_latency_jitter_and_counts_for_each_listener_count() {
    let dir = temp_dir("cli", "bench-av");
    let port = free_port();
    let d = Daemon::start(&dir, port);
    let out = d
        .tagwire()
        .args(["-s", &format!("tcp://127.0.0.1:{port}")])
        .args([
            "bench",
            "av",
            "--listeners",
            "3,6",
            "--duration",
            "0.5",
            "--warmup",
            "3",
            "--runs",
            "2",
            "--json",
        ])
        .output()
        .expect("run tagwire bench av");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let points: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let points = points.as_array().expect("an array of points");
    assert_eq!(points.len(), 4, "two runs of each count");
    for (p, (n, run)) in points.iter().zip([(3u64, 1u64), (3, 2), (6, 1), (6, 2)]) {
        assert_eq!(p["listeners"], n);
        assert_eq!(p["run"], run);
        // The first 3 packets of each listener are received, not measured.
        assert_eq!(p["warmup_per_listener"], 3);
        let (received, measured) = (
            p["packets_received"].as_u64().expect("received"),
            p["packets_measured"].as_u64().expect("measured"),
        );
        if received == p["packets_expected"].as_u64().expect("expected") {
            assert_eq!(measured, received - 3 * n, "{p}");
        }
        assert_eq!(p["kind"], "audio");
        let sent = p["packets_sent"].as_u64().expect("sent");
        assert!(sent >= 10, "a packet every 30 ms for 0.5 s: {p}");
        assert_eq!(p["packets_expected"].as_u64(), Some(sent * n));
        assert!(p["packets_received"].as_u64().expect("received") > 0, "{p}");
        assert!(p["mean_latency_ms"].as_f64().is_some() && p["mean_jitter_ms"].as_f64().is_some());
    }
    let bad = d
        .tagwire()
        .args(["-s", &format!("tcp://127.0.0.1:{port}")])
        .args(["bench", "av", "--listeners", "0"])
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--listeners"));
    d.stop();
}

#[test]
fn pull_prints_history_and_exits_with_a_code_for_gone_and_no_history() {
    let dir = temp_dir("cli", "pull");
    let d = Daemon::start(&dir, free_port());
    let run = |args: &[&str]| d.tagwire().args(args).output().expect("tagwire");
    let out = run(&["admin", "qos", "/pull/**", "history=3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&[
        "pub",
        "/pull/a",
        "v",
        "-n",
        "5",
        "--endpoint",
        "/cli/pullpub",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["pull", "/pull/a", "--latest"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/pull/a v\n");
    let out = run(&["pull", "/pull/a", "--range", "3..5", "--json"]);
    let seqs: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            v["seq"].as_u64().expect("seq")
        })
        .collect();
    assert_eq!(seqs, [3, 4, 5]);
    let out = run(&["pull", "/pull/a", "--seq", "1"]);
    assert_eq!(out.status.code(), Some(3), "gone");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gone") && err.contains("3..=5"), "{err}");
    let out = run(&["pull", "/elsewhere", "--latest"]);
    assert_eq!(out.status.code(), Some(4), "no history");
    assert!(String::from_utf8_lossy(&out.stderr).contains("keeps no history"));
    let out = run(&["pull", "/pull/a", "--range", "1..9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than the buffer"));
    let out = run(&["pull", "/pull/a", "--latest", "--at", "node:edge"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no daemon of this network is named so"));
    let out = run(&["pull", "/pull/a", "--since", "2"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("with a unit"));
    let out = run(&["pull", "/pull/a"]);
    assert!(!out.status.success(), "a query is required");
    let out = run(&["admin", "show", "/pull/a"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("history holds 3 event(s)"), "{text}");
    assert!(
        text.contains("/cli/pullpub sequence numbers 3..=5"),
        "{text}"
    );
    d.stop();
}

/// `tagwire place` as docs/placement.md says: the answer on stdout and
/// exit 0; any error on stderr after `tagwire: ` and exit 2.
#[test]
fn place_answers_with_status_0_and_fails_with_status_2() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/appendix-a.toml"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["place", example])
        .output()
        .expect("run tagwire place");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("proxy on node \"1\""), "{stdout}");
    assert!(stdout.contains("(optimal;"), "{stdout}");

    let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["place", "/nonexistent/topology.toml"])
        .output()
        .expect("run tagwire place");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tagwire: cannot read topology file /nonexistent/topology.toml"),
        "{stderr}"
    );
}

/// The band of the connection that owns endpoint `endpoint`, from the
/// daemon's listing (`None`: not listed).
fn band_of_endpoint(d: &Daemon, endpoint: &str) -> Option<String> {
    let out = d
        .tagwire()
        .args(["list", "--json"])
        .output()
        .expect("tagwire list --json");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let conn = v["endpoints"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == endpoint)?["connection"]
        .clone();
    v["connections"]
        .as_array()?
        .iter()
        .find(|c| c["id"] == conn)
        .and_then(|c| c["band"].as_str().map(str::to_owned))
}

#[test]
fn bench_honours_the_global_band_and_reports_band_and_transport() {
    let dir = temp_dir("cli", "bench-band");
    let port = free_port();
    let d = Daemon::start(&dir, port);
    // Over the Unix socket: the pinger's connection is on the high lane
    // while the run goes on.
    let mut bench = Reap::new(
        d.tagwire()
            .args(["--band", "high", "bench", "latency", "--duration", "1.5"])
            .args(["--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tagwire bench"),
    );
    let pinger = format!("/bench/{}/pinger", bench.child().id());
    let deadline = Instant::now() + WAIT;
    let band = loop {
        if let Some(b) = band_of_endpoint(&d, &pinger) {
            break b;
        }
        assert!(
            Instant::now() < deadline,
            "the listing never showed {pinger}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(band, "high", "the bench's pinger connection");
    let out = bench.finish();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["band"], "high", "{r}");
    assert_eq!(r["transport"], "unix", "{r}");

    // Over TCP, in text: the band and transport are printed.
    let out = d
        .tagwire()
        .args(["-s", &format!("tcp://127.0.0.1:{port}")])
        .args(["--band", "high", "bench", "throughput", "--duration", "0.3"])
        .output()
        .expect("run tagwire bench throughput");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("band high, transport tcp"), "{text}");

    // Without --band: the daemon's default band, reported as such.
    let out = d
        .tagwire()
        .args(["bench", "throughput", "--duration", "0.3", "--json"])
        .output()
        .expect("run tagwire bench throughput");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["band"], "normal", "{r}");

    // Without --band, straight to a band's own listener (its Unix socket,
    // its TCP port): the band that listener serves, as the listing names it.
    let high_sock = format!("unix://{}/tagwire/tagwire-high.sock", dir.display());
    let high_tcp = format!("tcp://127.0.0.1:{}", port + 2);
    for server in [high_sock, high_tcp] {
        let out = d
            .tagwire()
            .args([
                "-s",
                &server,
                "bench",
                "throughput",
                "--duration",
                "0.3",
                "--json",
            ])
            .output()
            .expect("run tagwire bench throughput");
        assert!(
            out.status.success(),
            "{server}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(r["band"], "high", "{server}: {r}");
    }

    // bench av: its listeners connect to the band's listener.
    let out = d
        .tagwire()
        .args(["-s", &format!("tcp://127.0.0.1:{port}")])
        .args(["--band", "high", "bench", "av", "--listeners", "2"])
        .args(["--duration", "0.3", "--json"])
        .output()
        .expect("run tagwire bench av");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let points: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(points[0]["band"], "high", "{points}");
    assert_eq!(points[0]["transport"], "tcp", "{points}");
    assert!(
        points[0]["packets_received"].as_u64().unwrap_or(0) > 0,
        "{points}"
    );
    let unknown = d
        .tagwire()
        .args(["-s", &format!("tcp://127.0.0.1:{port}")])
        .args(["--band", "turbo", "bench", "av", "--listeners", "1"])
        .output()
        .expect("run tagwire bench av");
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("turbo"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    d.stop();
}

/// Issue 24 item 16: a log that goes to a file or a pipe (stderr not a
/// terminal) carries no ANSI colour escape codes, from the daemon or the CLI.
#[test]
fn logs_written_to_a_pipe_carry_no_colour_escape_codes() {
    let dir = temp_dir("cli", "ansi");
    std::fs::create_dir_all(&dir).expect("runtime dir");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--tcp", &format!("127.0.0.1:{port}")])
        .env("XDG_RUNTIME_DIR", &dir)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagwired");
    let mut daemon = Reap::new(child);
    // Listening, and its token written (after it binds).
    let token = dir.join("tagwire").join(format!("token-{port}"));
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() || !token.exists() {
        assert!(
            Instant::now() < deadline,
            "tagwired did not start listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The CLI logs too: with RUST_LOG=debug a publisher over TCP says why
    // its payloads go over the socket.
    let cli = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args([
            "-s",
            &format!("tcp://127.0.0.1:{port}"),
            "pub",
            "/ansi",
            "hi",
        ])
        .env("XDG_RUNTIME_DIR", &dir)
        .env("RUST_LOG", "debug")
        .env_remove("TAGWIRE_SERVER")
        .output()
        .expect("run tagwire");
    let _ = Command::new("kill")
        .arg(daemon.child().id().to_string())
        .status();
    let log = String::from_utf8_lossy(&daemon.finish().stderr).into_owned();
    assert!(log.contains("INFO"), "the daemon logged nothing: {log}");
    assert!(
        !log.contains('\x1b'),
        "the daemon's log into a pipe has escape codes: {log:?}"
    );
    let cli_log = String::from_utf8_lossy(&cli.stderr);
    assert!(cli.status.success(), "tagwire pub: {cli_log}");
    assert!(
        cli_log.contains("DEBUG"),
        "the CLI logged nothing: {cli_log}"
    );
    assert!(
        !cli_log.contains('\x1b'),
        "the CLI's stderr into a pipe has escape codes: {cli_log:?}"
    );
}

/// Issue 24 item 16: the workspace says `MIT OR Apache-2.0`, and the
/// repository carries both licence texts.
#[test]
fn the_repository_carries_the_text_of_each_licence_the_workspace_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        manifest.contains(r#"license = "MIT OR Apache-2.0""#),
        "the workspace's licence changed: update this test and the LICENSE files"
    );
    for (file, says) in [
        ("LICENSE-MIT", "Permission is hereby granted"),
        ("LICENSE-APACHE", "Apache License"),
    ] {
        let text = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{file} is missing: {e}"));
        assert!(text.contains(says), "{file} is not that licence's text");
    }
}

/// `tagwire pub --file` publishes a file as one event and `tagwire sub
/// --save` writes it back byte for byte (issue 25 item 5); a file larger
/// than one client frame can carry is refused naming the file and the bound,
/// before connecting.
#[test]
fn pub_file_and_sub_save_carry_a_file_byte_for_byte_and_a_too_large_file_is_refused_by_name() {
    let dir = temp_dir("cli", "file");
    let d = Daemon::start(&dir, free_port());
    let sent = dir.join("sent.bin");
    let got = dir.join("got.bin");
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&sent, &bytes).expect("write the file");
    let sub = d
        .tagwire()
        .args(["sub", "/files/x", "--count", "1", "--endpoint", "/file/sub"])
        .arg("--save")
        .arg(&got)
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    wait_listed(&d, "/file/sub");
    let out = d
        .tagwire()
        .args(["pub", "/files/x", "--file"])
        .arg(&sent)
        .output()
        .expect("tagwire pub");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = wait_output(sub, WAIT);
    assert!(printed.status.success());
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout),
        format!("/files/x: 3000000 bytes saved to {}\n", got.display())
    );
    assert!(
        std::fs::read(&got).expect("saved") == bytes,
        "the saved payload is the file"
    );
    // 4 GiB + 1 (sparse): over what one event may have, even in pieces
    // (refused from the file's size, before reading it).
    let big = dir.join("big.bin");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len((4 << 30) + 1))
        .expect("sparse file");
    let out = d
        .tagwire()
        .args(["pub", "/files/x", "--file"])
        .arg(&big)
        .output()
        .expect("tagwire pub");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--file") && err.contains("4294967297 bytes") && err.contains("over"),
        "{err}"
    );
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
