//! docs/federation.md's cluster quick start, run **verbatim** on the netns
//! testbed: the test reads every ```` ```console ```` block marked
//! `<!-- netns-tested -->` from the doc and runs its lines on two host
//! namespaces, so the doc and the test cannot drift. Needs root and
//! iproute2; without them it FAILS with a message saying how to get them.
//! `.ci/run` runs it.
//!
//! How a block is read (the doc's own conventions, as a reader follows them):
//! - `a$ CMD` runs `CMD` with `sh` on host `a` (`b$` on host `b`), in that
//!   host's own directory, with its own `XDG_RUNTIME_DIR` (separate hosts
//!   share no files); the host names `a` and `b` resolve to the hosts
//!   (`/etc/netns/NS/hosts`, which `ip netns exec` mounts as `/etc/hosts`).
//!   The built `tagwired` and `tagwire` are first on `PATH`.
//! - `a$ CMD &` keeps running in the background until the block ends.
//! - `a$ scp -p FILE b:` copies `FILE` from host a's directory to host b's,
//!   mode kept (there is no ssh server between namespaces).
//! - `a$ # …` is a comment.
//! - Lines after a command, up to the next command, are its expected
//!   output: each must appear in what it prints (stdout and stderr), in
//!   order; `...` in an expected line stands for any text. A foreground
//!   command must exit in time, successfully unless its expected output is
//!   an error (`tagwired: …`, `tagwire: …`).
//! - A background daemon's expected lines are awaited before the next
//!   command (else it must say it listens); a background `tagwire sub`'s are
//!   awaited at the end of the block, and before the next command the test
//!   waits until the other daemons know its interest (as a reader would wait
//!   a moment).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tagwire_testbed::{Host, NsChild, Testbed, TestbedConfig};

const DOC: &str = include_str!("../../../docs/federation.md");
const MARKER: &str = "<!-- netns-tested -->";
const WAIT: Duration = Duration::from_secs(20);
const HOSTS: [&str; 2] = ["a", "b"];

/// One command line of a block and what it should print.
#[derive(Debug)]
struct Step {
    host: usize,
    command: String,
    background: bool,
    expected: Vec<String>,
}

/// The marked console blocks of the doc, as steps.
fn blocks(doc: &str) -> Vec<Vec<Step>> {
    let mut blocks = Vec::new();
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        if l.trim() != MARKER {
            continue;
        }
        let fence = lines.next().unwrap_or_default();
        assert_eq!(
            fence.trim(),
            "```console",
            "{MARKER} must precede a ```console block"
        );
        let mut steps: Vec<Step> = Vec::new();
        for l in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            let prompt = HOSTS.iter().position(|h| l.starts_with(&format!("{h}$ ")));
            match prompt {
                Some(host) => {
                    let cmd = l[3..].trim();
                    if cmd.starts_with('#') {
                        continue;
                    }
                    let (command, background) = match cmd.strip_suffix('&') {
                        Some(c) => (c.trim().to_owned(), true),
                        None => (cmd.to_owned(), false),
                    };
                    steps.push(Step {
                        host,
                        command,
                        background,
                        expected: Vec::new(),
                    });
                }
                None if l.trim().is_empty() => {}
                None => steps
                    .last_mut()
                    .unwrap_or_else(|| panic!("expected output before any command: {l:?}"))
                    .expected
                    .push(l.trim().to_owned()),
            }
        }
        blocks.push(steps);
    }
    blocks
}

/// Whether a line of `text` holds `pattern`: its `...`-separated parts in
/// order, the first at the line's start unless the pattern starts with `...`.
fn matches(text: &str, pattern: &str) -> bool {
    let anchored = !pattern.starts_with("...");
    let parts: Vec<&str> = pattern
        .split("...")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    text.lines().any(|line| {
        let mut rest = line.trim_start();
        for (i, part) in parts.iter().enumerate() {
            match rest.find(part) {
                Some(at) if !(anchored && i == 0) || at == 0 => rest = &rest[at + part.len()..],
                _ => return false,
            }
        }
        true
    })
}

/// Removes the per-namespace `/etc/netns/NS` directories, also on panic.
struct EtcNetns(Vec<PathBuf>);

impl Drop for EtcNetns {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The two hosts with their own directories and names.
struct Hosts<'tb> {
    tb: &'tb Testbed,
    dirs: Vec<tempfile::TempDir>,
    _etc: EtcNetns,
}

impl<'tb> Hosts<'tb> {
    fn new(tb: &'tb Testbed) -> Hosts<'tb> {
        let hosts_file: String = HOSTS
            .iter()
            .enumerate()
            .map(|(i, h)| format!("{} {h}\n", tb.host(i).addr()))
            .collect();
        let mut etc = EtcNetns(Vec::new());
        for i in 0..HOSTS.len() {
            let d = Path::new("/etc/netns").join(tb.host(i).ns_name());
            std::fs::create_dir_all(&d).expect("create /etc/netns/NS");
            etc.0.push(d.clone());
            std::fs::write(
                d.join("hosts"),
                format!("127.0.0.1 localhost\n{hosts_file}"),
            )
            .expect("write /etc/netns/NS/hosts");
        }
        let dirs = (0..HOSTS.len())
            .map(|_| {
                let d = tempfile::tempdir().expect("tempdir");
                let run = d.path().join("run");
                std::fs::create_dir(&run).expect("runtime dir");
                std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700))
                    .expect("chmod runtime dir");
                d
            })
            .collect();
        Hosts {
            tb,
            dirs,
            _etc: etc,
        }
    }

    fn host(&self, i: usize) -> &'tb Host {
        self.tb.host(i)
    }

    fn dir(&self, i: usize) -> &Path {
        self.dirs[i].path()
    }

    /// `sh -c CMD` on host `i`, its stdout sent to stderr (so that one
    /// stream carries everything it prints, line by line).
    fn shell(&self, i: usize, cmd: &str) -> Command {
        self.sh(i, &format!("exec {cmd} 1>&2"))
    }

    /// `sh -c SCRIPT` on host `i`, as the host's user would run it.
    fn sh(&self, i: usize, script: &str) -> Command {
        let bin = Path::new(env!("CARGO_BIN_EXE_tagwired"))
            .parent()
            .expect("binary directory")
            .to_owned();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(script)
            .current_dir(self.dir(i))
            .env("PATH", path)
            .env("HOME", self.dir(i))
            .env("XDG_RUNTIME_DIR", self.dir(i).join("run"));
        for v in ["TAGWIRE_SERVER", "TAGWIRE_TOKEN", "RUST_LOG"] {
            c.env_remove(v);
        }
        c
    }

    /// The federation listing of host `i`'s daemon.
    fn federation(&self, i: usize) -> serde_json::Value {
        let out = self
            .host(i)
            .output(&self.sh(i, "tagwire list --links --json"), WAIT)
            .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// Waits until the daemon on every host in `others` knows interest of
    /// another daemon.
    fn wait_for_interest(&self, others: &[usize]) {
        let start = Instant::now();
        for &i in others {
            loop {
                let f = self.federation(i);
                let me = f["node"].clone();
                let known = f["known"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|d| d["node"] != me && d["interest"].as_u64().unwrap_or(0) > 0);
                if known {
                    break;
                }
                assert!(
                    start.elapsed() < WAIT,
                    "the subscription's interest did not reach host {} within {WAIT:?}: {f}",
                    HOSTS[i]
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// `scp -p FILE HOST:` between host directories.
    fn scp(&self, from: usize, command: &str) {
        let args: Vec<&str> = command.split_whitespace().collect();
        let ["scp", "-p", file, dest] = args[..] else {
            panic!("only `scp -p FILE HOST:` is emulated, not {command:?}");
        };
        let to = HOSTS
            .iter()
            .position(|h| dest == format!("{h}:"))
            .unwrap_or_else(|| panic!("scp to an unknown host: {command:?}"));
        let src = self.dir(from).join(file);
        let dst = self.dir(to).join(file);
        std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{command}: {e}"));
        let mode = std::fs::metadata(&src).expect("source").permissions();
        std::fs::set_permissions(&dst, mode).expect("keep the mode");
    }
}

/// Awaits each expected line, in order, from a background process.
fn await_lines(child: &mut NsChild<'_>, step: &Step) {
    for want in &step.expected {
        if let Err(e) = child.wait_for_stderr_line(&format!("{want:?}"), |l| matches(l, want), WAIT)
        {
            panic!("{}$ {}: {e}", HOSTS[step.host], step.command);
        }
    }
}

/// Runs the doc's marked blocks in order on one testbed.
#[test]
fn the_cluster_quick_start_in_docs_runs_verbatim_across_two_namespaces() {
    let steps = blocks(DOC);
    assert!(
        steps.len() >= 2,
        "docs/federation.md should have the quick start and the troubleshooting blocks marked {MARKER}"
    );
    let tb = Testbed::new(TestbedConfig {
        hosts: HOSTS.len(),
        bottleneck: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let hosts = Hosts::new(&tb);
    for block in &steps {
        run_block(&hosts, block);
    }
}

fn run_block(hosts: &Hosts<'_>, block: &[Step]) {
    let mut background: Vec<(NsChild<'_>, &Step)> = Vec::new();
    let mut daemons: HashMap<usize, ()> = HashMap::new();
    for step in block {
        let i = step.host;
        let what = format!("{}$ {}", HOSTS[i], step.command);
        if step.command.starts_with("scp ") {
            hosts.scp(i, &step.command);
            continue;
        }
        let cmd = hosts.shell(i, &step.command);
        if !step.background {
            let out = hosts
                .host(i)
                .output(&cmd, WAIT)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let text = String::from_utf8_lossy(&out.stderr);
            let error = step
                .expected
                .first()
                .is_some_and(|l| l.starts_with("tagwired: ") || l.starts_with("tagwire: "));
            assert_eq!(
                out.status.success(),
                !error,
                "{what}: exit status {} (expected {}): {text}",
                out.status,
                if error { "failure" } else { "success" }
            );
            for want in &step.expected {
                assert!(
                    matches(&text, want),
                    "{what}: expected {want:?} in:\n{text}"
                );
            }
            continue;
        }
        let mut child = hosts
            .host(i)
            .spawn(&cmd)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let program = step.command.split_whitespace().next().unwrap_or_default();
        match program {
            "tagwired" => {
                if step.expected.is_empty() {
                    child
                        .wait_for_stderr("band normal: listening", WAIT)
                        .unwrap_or_else(|e| panic!("{what}: did not start: {e}"));
                } else {
                    await_lines(&mut child, step);
                }
                daemons.insert(i, ());
            }
            "tagwire" if step.command.starts_with("tagwire sub") => {
                let others: Vec<usize> = daemons.keys().copied().filter(|&d| d != i).collect();
                hosts.wait_for_interest(&others);
            }
            _ => {}
        }
        background.push((child, step));
    }
    // Background commands other than daemons: their output by now.
    for (child, step) in &mut background {
        if !step.command.starts_with("tagwired") {
            await_lines(child, step);
        }
    }
    // The block's background processes end with it (killed on drop).
    drop(background);
}

#[test]
fn the_doc_reader_understands_prompts_background_and_expected_output() {
    let doc = "x\n<!-- netns-tested -->\n```console\na$ tagwired --name a &\nb$ # note\nb$ tagwire pub /x hi\ntagwire: ... refused\n```\n";
    let b = blocks(doc);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].len(), 2);
    assert!(b[0][0].background && b[0][0].command == "tagwired --name a");
    assert_eq!(b[0][1].host, 1);
    assert_eq!(b[0][1].expected, vec!["tagwire: ... refused"]);
    assert!(matches(
        "tagwire: the link was refused",
        "tagwire: ... refused"
    ));
    assert!(!matches("tagwired: refused", "tagwire: ... refused"));
    assert!(matches(
        "2026-01-01T00:00:00Z  WARN tagwire_router::link: peer a:7700 refused the link: x",
        "... WARN ... peer a:7700 refused the link: ..."
    ));
    assert!(!matches(
        "peer b:7700 refused",
        "... peer a:7700 refused ..."
    ));
}
