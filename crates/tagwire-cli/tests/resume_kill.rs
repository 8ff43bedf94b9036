//! Issue 25, item 4: a subscriber reconnecting after a restart of its
//! daemon resumes from its last delivered event. A real `tagwired` with
//! `--state-dir` and `[store] tags = ["/durable/**"]`; a library
//! subscription of `/durable/x` with `reliability=durable` (through a TCP
//! proxy that can keep it away) receives the stream of `tagwire pub --qos
//! reliability=durable`; the daemon is killed with SIGKILL mid-stream and
//! started again on the same state directory, and the publisher goes on
//! publishing to it (its unacknowledged events sent again first) while the
//! subscriber is kept away for a while. The subscriber must get every
//! event exactly once, in order: the test counts the missing and duplicate
//! sequence numbers.

mod common;
#[path = "../../tagwire/tests/common/proxy.rs"]
mod proxy;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{daemon_with_state, free_port, temp_dir, Killed as Proc};

const WAIT: Duration = Duration::from_secs(20);
const EVENTS: u64 = 3000;
const RATE: &str = "500";

fn daemon(dir: &Path, state: &Path, port: u16) -> Proc {
    // No token: the in-process subscriber reaches it through the proxy.
    daemon_with_state(
        dir,
        state,
        port,
        "[auth]\nenabled = false\n[store]\ntags = [\"/durable/**\"]\n",
    )
}

/// Starts `tagwire ARGS` with its stdout in `dir/NAME.out` and its stderr
/// in `dir/NAME.err` (the token of a restarted daemon is read again from
/// `XDG_RUNTIME_DIR` at each reconnect).
fn tagwire(dir: &Path, port: u16, name: &str, args: &[&str]) -> Proc {
    let out = std::fs::File::create(dir.join(format!("{name}.out"))).expect("stdout file");
    let err = std::fs::File::create(dir.join(format!("{name}.err"))).expect("stderr file");
    let child = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .arg("-s")
        .arg(format!("tcp://127.0.0.1:{port}"))
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .env_remove("TAGWIRE_SERVER")
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn tagwire");
    Proc(child)
}

fn stderr(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.err"))).unwrap_or_default()
}

/// Waits for `p` to exit, at most `wait`; false if it had to be killed.
fn wait_exit(p: &mut Proc, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = p.0.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Makes the durable subscription; `resume: false` is the library without
/// resumes (what it did before them), for showing what they fix.
fn subscriber(url: &str, resume: bool) -> (tagwire::Session, Arc<Mutex<Vec<u64>>>) {
    let s = tagwire::Session::connect(url).expect("connect through the proxy");
    let sub = s
        .subscribe("/durable/x")
        .qos("reliability", "durable")
        .max_queue_length(EVENTS as usize)
        .resume(resume)
        .receiver()
        .expect("subscribe");
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let g = got.clone();
    std::thread::spawn(move || {
        while let Ok(sample) = sub.recv() {
            g.lock().expect("got").push(sample.event().seq);
        }
    });
    (s, got)
}

fn count(got: &Mutex<Vec<u64>>) -> usize {
    got.lock().expect("got").len()
}

fn run(resume: bool) -> (Vec<u64>, usize) {
    let dir = temp_dir("resume", if resume { "kill9" } else { "kill9-off" });
    let state = dir.join("state");
    let port = free_port();
    let mut d = daemon(&dir, &state, port);
    let proxy = proxy::Proxy::start(format!("127.0.0.1:{port}"));
    let (_session, got) = subscriber(&proxy.url(), resume);
    let n = EVENTS.to_string();
    let mut publisher = tagwire(
        &dir,
        port,
        "pub",
        &[
            "pub",
            "/durable/x",
            "hello",
            "-n",
            &n,
            "-r",
            RATE,
            "--qos",
            "reliability=durable",
        ],
    );
    // A third of the stream delivered, then SIGKILL mid-stream.
    let deadline = Instant::now() + WAIT;
    while (count(&got) as u64) < EVENTS / 3 {
        assert!(
            Instant::now() < deadline,
            "the subscriber got {} events before the kill; pub: {}",
            count(&got),
            stderr(&dir, "pub")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.refuse(true);
    d.0.kill().expect("kill -9 tagwired");
    d.0.wait().expect("reap tagwired");
    let before = count(&got);
    drop(d);
    std::thread::sleep(Duration::from_millis(200));
    let _d = daemon(&dir, &state, port);
    // The publisher reconnects and publishes to the new daemon while the
    // subscriber is kept away: those events are only in the store.
    std::thread::sleep(Duration::from_millis(1500));
    proxy.refuse(false);
    assert!(
        wait_exit(&mut publisher, WAIT),
        "the publisher did not finish"
    );
    let ok = publisher.0.wait().expect("publisher status").success();
    assert!(ok, "tagwire pub failed: {}", stderr(&dir, "pub"));
    // Until every event came, or nothing more for 3 s.
    let mut last = (count(&got), Instant::now());
    while (count(&got) as u64) < EVENTS && last.1.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        if count(&got) != last.0 {
            last = (count(&got), Instant::now());
        }
    }
    // A moment more: a copy after the last one would show here.
    std::thread::sleep(Duration::from_millis(300));
    let got = got.lock().expect("got").clone();
    (got, before)
}

/// Missing sequence numbers of 1..=EVENTS, duplicates, and whether in order.
fn tally(got: &[u64]) -> (Vec<u64>, usize, bool) {
    let mut unique = got.to_vec();
    unique.sort_unstable();
    unique.dedup();
    let duplicates = got.len() - unique.len();
    let missing: Vec<u64> = (1..=EVENTS)
        .filter(|s| unique.binary_search(s).is_err())
        .collect();
    let in_order = got.windows(2).all(|w| w[0] < w[1]);
    (missing, duplicates, in_order)
}

#[test]
fn a_subscriber_resumes_after_kill_9_of_its_daemon_with_no_gap_and_no_duplicate() {
    let (got, before) = run(true);
    let (missing, duplicates, in_order) = tally(&got);
    eprintln!(
        "resume on: {} delivered ({before} before the kill), {} missing, {duplicates} duplicates",
        got.len(),
        missing.len()
    );
    assert!(
        missing.is_empty() && duplicates == 0 && in_order,
        "{} of {EVENTS} events delivered ({before} before the kill): {} missing \
         (first {:?}), {duplicates} duplicates, in order: {in_order}",
        got.len(),
        missing.len(),
        &missing[..missing.len().min(10)],
    );
}

/// The same run with the library's resume turned off (what it did before
/// resumes): the events published while the subscriber was kept away
/// reach neither it nor its new subscription — they are only in the store.
/// This is what the test above would see without resumes.
#[test]
fn without_the_resume_the_same_run_loses_what_was_published_while_the_subscriber_was_away() {
    let (got, before) = run(false);
    let (missing, duplicates, _) = tally(&got);
    eprintln!(
        "resume off: {} delivered ({before} before the kill), {} missing, {duplicates} duplicates",
        got.len(),
        missing.len()
    );
    assert!(
        !missing.is_empty(),
        "{} of {EVENTS} delivered ({before} before the kill), {duplicates} duplicates: \
         the run did not exercise the resume",
        got.len()
    );
}

/// Runs `tagwire ARGS` to its end (at most `WAIT`); the `seq` of each JSON
/// line it printed, and whether it succeeded.
fn tagwire_seqs(dir: &Path, port: u16, name: &str, args: &[&str]) -> (Vec<u64>, bool) {
    let mut p = tagwire(dir, port, name, args);
    assert!(wait_exit(&mut p, WAIT), "tagwire {args:?} did not finish");
    let ok = p.0.wait().expect("status").success();
    let text = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap_or_default();
    let seqs = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["seq"].as_u64())
        .collect();
    (seqs, ok)
}

/// `tagwire sub --resume-file`: a subscriber that exits after 800 events
/// and starts again with the same file prints 801..=2000, once, in order;
/// a file that is not a resume point is refused naming it.
#[test]
fn a_resume_file_lets_a_restarted_subscriber_go_on_where_it_stopped() {
    let dir = temp_dir("resume", "file");
    let state = dir.join("state");
    let port = free_port();
    let _d = daemon(&dir, &state, port);
    let file = dir.join("position");
    let file_arg = file.to_str().expect("utf-8 path");
    let (_, ok) = tagwire_seqs(
        &dir,
        port,
        "pub",
        &[
            "pub",
            "/durable/x",
            "hello",
            "-n",
            "2000",
            "--qos",
            "reliability=durable",
        ],
    );
    assert!(ok, "pub: {}", stderr(&dir, "pub"));
    let sub = |name: &str, extra: &[&str], n: &str| {
        let mut args = vec![
            "sub",
            "/durable/x",
            "--resume-file",
            file_arg,
            "--json",
            "-n",
            n,
            "--timeout",
            "5",
        ];
        args.extend_from_slice(extra);
        tagwire_seqs(&dir, port, name, &args)
    };
    let (first, ok) = sub("sub1", &["--replay-from", "start"], "800");
    assert!(ok, "sub1: {}", stderr(&dir, "sub1"));
    assert_eq!(first, (1..=800).collect::<Vec<_>>());
    let saved = std::fs::read_to_string(&file).expect("the resume file");
    assert!(
        saved.starts_with("tagwire-resume 1\n800 "),
        "the file says where it stopped: {saved:?}"
    );
    let (second, ok) = sub("sub2", &[], "1200");
    assert!(ok, "sub2: {}", stderr(&dir, "sub2"));
    assert_eq!(
        second,
        (801..=2000).collect::<Vec<_>>(),
        "the second run goes on where the first stopped"
    );
    std::fs::write(&file, "not a position\n").expect("spoil the file");
    let (_, ok) = sub("sub3", &[], "1");
    let err = stderr(&dir, "sub3");
    assert!(!ok && err.contains("--resume-file"), "{err}");
}

/// `--resume-file` after a `kill -9` of `tagwire sub` itself: the next
/// start may print again what was printed since the file's last write
/// (at most ~100 ms of events), never leaves a gap.
#[test]
fn a_subscriber_killed_with_its_resume_file_goes_on_with_no_gap() {
    let dir = temp_dir("resume", "file-kill9");
    let state = dir.join("state");
    let port = free_port();
    let _d = daemon(&dir, &state, port);
    let file = dir.join("position");
    let file_arg = file.to_str().expect("utf-8 path");
    let seqs_of = |name: &str| -> Vec<u64> {
        let text = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["seq"].as_u64())
            .collect()
    };
    let sub_args = |extra: &'static [&'static str]| {
        let mut args = vec![
            "sub",
            "/durable/x",
            "--resume-file",
            file_arg,
            "--json",
            "--timeout",
            "3",
        ];
        args.extend_from_slice(extra);
        args
    };
    let mut sub1 = tagwire(&dir, port, "sub1", &sub_args(&["--replay-from", "start"]));
    let mut publisher = tagwire(
        &dir,
        port,
        "pub",
        &[
            "pub",
            "/durable/x",
            "hello",
            "-n",
            "2000",
            "-r",
            "500",
            "--qos",
            "reliability=durable",
        ],
    );
    let deadline = Instant::now() + WAIT;
    while seqs_of("sub1").len() < 600 {
        assert!(
            Instant::now() < deadline,
            "sub1 printed {}: {}",
            seqs_of("sub1").len(),
            stderr(&dir, "sub1")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    sub1.0.kill().expect("kill -9 tagwire sub");
    sub1.0.wait().expect("reap");
    let first = seqs_of("sub1");
    let mut sub2 = tagwire(&dir, port, "sub2", &sub_args(&[]));
    assert!(
        wait_exit(&mut publisher, WAIT),
        "the publisher did not finish"
    );
    // sub2 ends 3 s after the last event (--timeout).
    assert!(wait_exit(&mut sub2, WAIT), "sub2 did not finish");
    let second = seqs_of("sub2");
    let (last_first, first_second) = (
        first.last().copied().unwrap_or(0),
        second.first().copied().unwrap_or(0),
    );
    let again = last_first.saturating_sub(first_second) + 1;
    eprintln!(
        "resume file after kill -9: first run printed {} (up to {last_first}), the second \
         started at {first_second} ({again} printed again), printed {}",
        first.len(),
        second.len()
    );
    assert_eq!(first, (1..=last_first).collect::<Vec<_>>(), "the first run");
    assert!(
        first_second >= 1 && first_second <= last_first + 1,
        "a gap between the runs: the first printed up to {last_first}, the second started at {first_second}"
    );
    assert_eq!(
        second,
        (first_second..=2000).collect::<Vec<_>>(),
        "the second run: in order, once, to the end"
    );
}
