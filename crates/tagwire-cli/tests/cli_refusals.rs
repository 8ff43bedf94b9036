//! Issue 24, item 15: what the command line says when something is refused
//! or mistaken — a publish the ACL refuses exits non-zero naming it, an
//! MQTT wildcard in a pattern is refused with tagwire's, a second daemon on
//! the default socket names `--unix`/`--no-unix`, and `tagwire pull --help`
//! tells the truth about links.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, temp_dir, wait_output};

const WAIT: Duration = Duration::from_secs(10);
const RIG: &str = "the-rig-token-0123456789";

/// Kills the daemon when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tagwired` in runtime directory `dir` on TCP `port`, with `config` (TOML)
/// if given; waits until the port answers.
fn daemon(dir: &Path, port: u16, config: Option<&str>, unix: bool) -> Killed {
    std::fs::create_dir_all(dir).expect("dir");
    let mut c = Command::new(env!("CARGO_BIN_EXE_tagwired"));
    c.args(["--tcp", &format!("127.0.0.1:{port}")])
        .env("XDG_RUNTIME_DIR", dir)
        .stderr(Stdio::null());
    if !unix {
        c.arg("--no-unix");
    }
    if let Some(text) = config {
        let path = dir.join(format!("tagwired-{port}.toml"));
        std::fs::write(&path, text).expect("config");
        c.arg("--config").arg(path);
    }
    let child = Killed(c.spawn().expect("spawn tagwired"));
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "tagwired did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn tagwire(dir: &Path, port: u16, args: &[&str]) -> (bool, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .arg("-s")
        .arg(format!("tcp://127.0.0.1:{port}"))
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .env("TAGWIRE_TOKEN", RIG)
        .env_remove("TAGWIRE_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagwire");
    let out = wait_output(child, WAIT * 2);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const ACL: &str = r#"
[[auth.tokens]]
name = "rig"
token = "the-rig-token-0123456789"

[[acl]]
identity = "token:rig"
publish = ["/allowed/**"]
subscribe = ["/allowed/**", "/demo/**"]
"#;

#[test]
fn a_publish_the_acl_refuses_exits_non_zero_naming_the_refusal() {
    let dir = temp_dir("cli-refusals", "acl");
    let port = free_port();
    let _d = daemon(&dir, port, Some(ACL), false);
    let (ok, stderr) = tagwire(&dir, port, &["pub", "/allowed/x", "fine"]);
    assert!(ok, "an allowed publish succeeds: {stderr}");
    let (ok, stderr) = tagwire(&dir, port, &["pub", "/denied/x", "no", "--count", "3"]);
    assert!(!ok, "a refused publish exited 0: {stderr}");
    assert!(
        stderr.contains("refused 3 of 3")
            && stderr.contains("PermissionDenied")
            && stderr.contains("/denied/x"),
        "the refusal is named: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_mqtt_wildcard_in_a_pattern_is_refused_with_tagwires() {
    let dir = temp_dir("cli-refusals", "hash");
    let port = free_port();
    let _d = daemon(&dir, port, Some(ACL), false);
    let (ok, stderr) = tagwire(&dir, port, &["sub", "/demo/#", "-n", "1"]);
    assert!(!ok, "'/demo/#' was accepted: {stderr}");
    assert!(
        stderr.contains("MQTT wildcard") && stderr.contains("\"/demo/**\""),
        "the error says what to write: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_daemon_on_the_default_socket_names_unix_and_no_unix() {
    let dir = temp_dir("cli-refusals", "two");
    let first = free_port();
    let _a = daemon(&dir, first, None, true);
    let deadline = Instant::now() + WAIT;
    // Accepting, not just bound (the file appears a moment before listen()).
    while std::os::unix::net::UnixStream::connect(dir.join("tagwire").join("tagwire.sock")).is_err()
    {
        assert!(Instant::now() < deadline, "no default socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--tcp", &format!("127.0.0.1:{}", free_port())])
        .env("XDG_RUNTIME_DIR", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the second tagwired");
    let out = wait_output(second, WAIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second daemon started: {stderr}");
    assert!(
        stderr.contains("already listening")
            && stderr.contains("--unix PATH")
            && stderr.contains("--no-unix"),
        "the error names the way out: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pull_help_says_pulls_cross_daemon_links() {
    let out = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args(["pull", "--help"])
        .output()
        .expect("tagwire pull --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(!help.contains("not forwarded"), "{help}");
    assert!(help.contains("forwarded over the daemon links"), "{help}");
}
