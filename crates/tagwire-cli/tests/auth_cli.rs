//! Issue 24, item 2, as the issue tells it: the owner's daemon is killed
//! with `kill -9`, its `token-PORT` stays in the runtime directory, someone
//! else binds the freed port; the owner's `tagwire -s tcp://127.0.0.1:PORT
//! pub …` must fail, saying that the server did not prove the token, and
//! the one holding the port must never see the token.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, temp_dir, wait_output};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_stale_token_file_is_not_sent_to_whoever_holds_the_port_and_pub_fails() {
    let dir = temp_dir("auth-cli", "stale-token");
    std::fs::create_dir_all(&dir).expect("dir");
    let port = free_port();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--tcp", &format!("127.0.0.1:{port}"), "--no-unix"])
        .env("XDG_RUNTIME_DIR", &dir)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tagwired");
    let token_file = dir.join("tagwire").join(format!("token-{port}"));
    let deadline = Instant::now() + WAIT;
    while !token_file.exists() || std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "tagwired did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let token = std::fs::read_to_string(&token_file).expect("token file");
    // kill -9: the daemon cannot remove its token file.
    daemon.kill().expect("kill -9");
    daemon.wait().expect("reaped");
    assert!(token_file.exists(), "kill -9 leaves token-{port} behind");

    // Another program takes the port and plays a server that welcomes
    // anyone; it records every byte it gets.
    let listener = {
        let deadline = Instant::now() + WAIT;
        loop {
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(e) => {
                    assert!(Instant::now() < deadline, "port not freed: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    };
    let impostor = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut seen = vec![0u8; 11];
        s.read_exact(&mut seen).expect("a Hello header");
        let version = u16::from_le_bytes([seen[9], seen[10]]);
        let mut welcome = bytes::BytesMut::new();
        tagwire_proto::Frame::Welcome {
            version,
            max_frame: 1 << 16,
            name: "impostor".into(),
        }
        .encode(&mut welcome)
        .expect("encode");
        let _ = s.write_all(&welcome);
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        seen
    });

    let child = Command::new(env!("CARGO_BIN_EXE_tagwire"))
        .args([
            "-s",
            &format!("tcp://127.0.0.1:{port}"),
            "pub",
            "/secret/x",
            "payload-for-the-owner-only",
        ])
        .env("XDG_RUNTIME_DIR", &dir)
        .env_remove("TAGWIRE_TOKEN")
        .env_remove("TAGWIRE_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagwire pub");
    let out = wait_output(child, WAIT * 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "pub exited 0: {stderr}");
    assert!(
        stderr.contains("did not prove it knows the token"),
        "the error names the unproven server: {stderr}"
    );
    let seen = impostor.join().expect("impostor");
    let has = |needle: &[u8]| seen.windows(needle.len()).any(|w| w == needle);
    assert!(
        !has(token.trim().as_bytes()),
        "the token reached the impostor"
    );
    assert!(
        !has(b"payload-for-the-owner-only"),
        "the event reached the impostor"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
