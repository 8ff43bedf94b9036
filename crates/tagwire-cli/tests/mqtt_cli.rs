//! `tagwired --mqtt` with the real mosquitto clients (Debian's
//! `mosquitto-clients`; `.ci/run` installs it): `mosquitto_sub` receives
//! `tagwire pub`, `mosquitto_pub` reaches `tagwire sub`, a wrong password is
//! refused, and the ACL applies to the MQTT client's token identity.

mod common;

use common::{free_port, temp_dir, wait_output};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);
const ALICE: &str = "alice-token-0123456789abcdef";

/// Fails (never skips) when a mosquitto client is missing.
fn mosquitto(tool: &str) -> Command {
    let found = Command::new(tool)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "{tool} not found: this test needs the mosquitto clients (apt-get install mosquitto-clients)"
    );
    Command::new(tool)
}

struct Daemon {
    child: Child,
    dir: PathBuf,
    mqtt: u16,
}

impl Daemon {
    fn start(dir: &Path, config: Option<&str>) -> Daemon {
        std::fs::create_dir_all(dir).expect("runtime dir");
        let (tcp, mqtt) = (free_port(), free_port());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tagwired"));
        cmd.args(["--tcp", &format!("127.0.0.1:{tcp}")])
            .args(["--mqtt", &format!("127.0.0.1:{mqtt}")])
            .env("XDG_RUNTIME_DIR", dir)
            .stderr(Stdio::null());
        if let Some(text) = config {
            let path = dir.join("tagwired.toml");
            std::fs::write(&path, text).expect("write config");
            cmd.arg("--config").arg(path);
        }
        let child = cmd.spawn().expect("spawn tagwired");
        let d = Daemon {
            child,
            dir: dir.to_owned(),
            mqtt,
        };
        let deadline = Instant::now() + WAIT;
        while !d.dir.join("tagwire").join("tagwire.sock").exists()
            || std::net::TcpStream::connect(("127.0.0.1", mqtt)).is_err()
        {
            assert!(Instant::now() < deadline, "tagwired did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn tagwire(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tagwire"));
        c.env("XDG_RUNTIME_DIR", &self.dir)
            .env_remove("TAGWIRE_SERVER")
            .env_remove("TAGWIRE_TOKEN");
        c
    }

    /// The owner's token: what `TAGWIRE_TOKEN` would be.
    fn owner_token(&self) -> String {
        let dir = self.dir.join("tagwire");
        let file = std::fs::read_dir(&dir)
            .expect("runtime dir")
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("token-"))
            .expect("the daemon's token file");
        std::fs::read_to_string(file.path())
            .expect("token")
            .trim()
            .to_owned()
    }

    /// `mosquitto_sub`/`mosquitto_pub` aimed at this daemon with `password`.
    fn client(&self, tool: &str, password: &str) -> Command {
        let mut c = mosquitto(tool);
        c.args(["-h", "127.0.0.1", "-p", &self.mqtt.to_string()])
            .args(["-u", "tester", "-P", password]);
        c
    }

    /// Waits until `tagwire list` mentions `what`.
    fn wait_listed(&self, what: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = self.tagwire().arg("list").output().expect("tagwire list");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains(what) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "`tagwire list` never showed {what}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn mosquitto_sub_receives_tagwire_pub() {
    let d = Daemon::start(&temp_dir("mqtt", "sub"), None);
    let token = d.owner_token();
    let sub = d
        .client("mosquitto_sub", &token)
        .args(["-t", "demo/#", "-C", "1", "-v", "-W", "15"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mosquitto_sub");
    // The MQTT subscription is a tagwire subscription to /demo/**.
    d.wait_listed("/demo/**");
    let out = d
        .tagwire()
        .args(["pub", "/demo/x", "hi"])
        .output()
        .expect("tagwire pub");
    assert!(out.status.success(), "{}", text(&out));
    let out = wait_output(sub, WAIT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "demo/x hi\n");
}

#[test]
fn mosquitto_pub_reaches_tagwire_sub_in_both_versions() {
    let d = Daemon::start(&temp_dir("mqtt", "pub"), None);
    let token = d.owner_token();
    let sub = d
        .tagwire()
        .args([
            "sub",
            "/m/**",
            "--count",
            "2",
            "--endpoint",
            "/mqtt-test/viewer",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tagwire sub");
    d.wait_listed("/mqtt-test/viewer");
    for (version, payload) in [("mqttv311", "hello"), ("mqttv5", "five")] {
        let out = d
            .client("mosquitto_pub", &token)
            .args(["-V", version, "-q", "1", "-t", "m/x", "-m", payload])
            .output()
            .expect("mosquitto_pub");
        assert!(out.status.success(), "{version}: {}", text(&out));
    }
    let out = wait_output(sub, WAIT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "/m/x hello\n/m/x five\n"
    );
}

#[test]
fn a_wrong_password_is_refused() {
    let d = Daemon::start(&temp_dir("mqtt", "wrong"), None);
    for version in ["mqttv311", "mqttv5"] {
        let out = d
            .client("mosquitto_pub", "not-the-token-0123456789")
            .args(["-V", version, "-t", "m/x", "-m", "x"])
            .output()
            .expect("mosquitto_pub");
        assert!(!out.status.success(), "{version}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(
            err.contains("bad user name or password"),
            "{version}: {}",
            text(&out)
        );
    }
}

#[test]
fn the_acl_applies_to_the_mqtt_token_identity() {
    let config = format!(
        r#"
[[auth.tokens]]
name = "alice"
token = "{ALICE}"

[[acl]]
identity = "token:alice"
publish = ["/alice/**"]
subscribe = ["/alice/**"]
"#
    );
    let d = Daemon::start(&temp_dir("mqtt", "acl"), Some(&config));
    // Subscribing outside alice's rules: the SUBACK refuses it.
    let out = d
        .client("mosquitto_sub", ALICE)
        .args(["-V", "mqttv5", "-t", "bob/#", "-C", "1", "-W", "5"])
        .output()
        .expect("mosquitto_sub");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("All subscription requests were denied"),
        "{}",
        text(&out)
    );
    // Publishing outside them: refused with the reason (MQTT 5 PUBACK).
    let out = d
        .client("mosquitto_pub", ALICE)
        .args(["-V", "mqttv5", "-q", "1", "-t", "bob/x", "-m", "no", "-d"])
        .output()
        .expect("mosquitto_pub");
    let all = text(&out);
    assert!(
        all.contains("not authorized") || all.contains("135") || !out.status.success(),
        "{all}"
    );
    // Within them, it works.
    let sub = d
        .client("mosquitto_sub", ALICE)
        .args(["-t", "alice/#", "-C", "1", "-v", "-W", "15"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mosquitto_sub");
    d.wait_listed("/alice/**");
    let out = d
        .client("mosquitto_pub", ALICE)
        .args(["-q", "1", "-t", "alice/x", "-m", "yes"])
        .output()
        .expect("mosquitto_pub");
    assert!(out.status.success(), "{}", text(&out));
    let out = wait_output(sub, WAIT);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alice/x yes\n");
}
