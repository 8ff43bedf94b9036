//! The binaries over TLS: `tagwired --tls-cert/--tls-key/--tls-client-ca`
//! and `tagwire --server tls://… --tls-ca/--tls-cert/--tls-key` (or the
//! `TAGWIRE_TLS_*` variables). Certificates are made with rcgen at test time.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

/// CA, server (127.0.0.1) and client (CN=alice) certificates in a tempdir.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "cli test CA");
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).expect("CA");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write CA");
        for (name, sans) in [("server", vec!["127.0.0.1".to_owned()]), ("alice", vec![])] {
            let mut p = rcgen::CertificateParams::new(sans).expect("params");
            p.distinguished_name.push(rcgen::DnType::CommonName, name);
            let key = rcgen::KeyPair::generate().expect("key");
            let cert = p.signed_by(&key, &ca).expect("sign");
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).expect("write");
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem())
                .expect("write");
        }
        Pki { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts tagwired with mutual TLS on a free port (no Unix socket).
fn mtls_daemon(pki: &Pki) -> (Daemon, u16) {
    mtls_daemon_with(
        pki,
        "[[acl]]\nidentity = \"cert:alice\"\npublish = [\"/**\"]\nsubscribe = [\"/**\"]\n",
    )
}

/// Starts tagwired with mutual TLS and the `[[acl]]` rules `acl`.
fn mtls_daemon_with(pki: &Pki, acl: &str) -> (Daemon, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    // The client certificate's identity, cert:alice, may do everything.
    let config = pki.path("tagwired.toml");
    std::fs::write(&config, acl).expect("config");
    let child = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--tcp", &format!("127.0.0.1:{port}"), "--no-unix"])
        .arg("--config")
        .arg(&config)
        .arg("--tls-cert")
        .arg(pki.path("server.pem"))
        .arg("--tls-key")
        .arg(pki.path("server.key"))
        .arg("--tls-client-ca")
        .arg(pki.path("ca.pem"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tagwired");
    let d = Daemon(child);
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "tagwired did not start listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (d, port)
}

fn tagwire(port: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tagwire"));
    c.args(["--server", &format!("tls://127.0.0.1:{port}")]);
    for v in [
        "TAGWIRE_SERVER",
        "TAGWIRE_TLS_CA",
        "TAGWIRE_TLS_CERT",
        "TAGWIRE_TLS_KEY",
        "TAGWIRE_TLS_SERVER_NAME",
    ] {
        c.env_remove(v);
    }
    c
}

fn path_arg(flag: &str, p: &Path) -> [std::ffi::OsString; 2] {
    [flag.into(), p.as_os_str().to_owned()]
}

#[test]
fn ping_works_over_mutual_tls_with_flags_and_with_environment_variables() {
    let pki = Pki::new();
    let (_d, port) = mtls_daemon(&pki);
    let out = tagwire(port)
        .args(path_arg("--tls-ca", &pki.path("ca.pem")))
        .args(path_arg("--tls-cert", &pki.path("alice.pem")))
        .args(path_arg("--tls-key", &pki.path("alice.key")))
        .args(["ping", "-n", "1"])
        .output()
        .expect("tagwire ping");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("pong seq=1"));
    let out = tagwire(port)
        .env("TAGWIRE_TLS_CA", pki.path("ca.pem"))
        .env("TAGWIRE_TLS_CERT", pki.path("alice.pem"))
        .env("TAGWIRE_TLS_KEY", pki.path("alice.key"))
        .args(["ping", "-n", "1"])
        .output()
        .expect("tagwire ping");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
}

#[test]
fn ping_without_a_client_certificate_fails_naming_the_certificate() {
    let pki = Pki::new();
    let (_d, port) = mtls_daemon(&pki);
    let out = tagwire(port)
        .args(path_arg("--tls-ca", &pki.path("ca.pem")))
        .args(["ping", "-n", "1"])
        .output()
        .expect("tagwire ping");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--tls-cert"), "{stderr}");
}

#[test]
fn tagwired_names_a_missing_tls_file() {
    let pki = Pki::new();
    let missing = pki.path("nope.key");
    let out = Command::new(env!("CARGO_BIN_EXE_tagwired"))
        .args(["--tcp", "127.0.0.1:0", "--no-unix"])
        .args(path_arg("--tls-cert", &pki.path("server.pem")))
        .args(path_arg("--tls-key", &missing))
        .output()
        .expect("tagwired");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("private key") && stderr.contains(&missing.display().to_string()),
        "{stderr}"
    );
}

#[test]
fn a_client_certificate_is_the_identity_even_where_the_owner_token_is_readable() {
    let pki = Pki::new();
    // cert:alice may subscribe under /demo only; the owner (whose token file
    // this client can read: same user, loopback) may do everything.
    let (_d, port) = mtls_daemon_with(
        &pki,
        "[[acl]]\nidentity = \"cert:alice\"\nsubscribe = [\"/demo/**\"]\n",
    );
    let out = tagwire(port)
        .env_remove("TAGWIRE_TOKEN")
        .args(path_arg("--tls-ca", &pki.path("ca.pem")))
        .args(path_arg("--tls-cert", &pki.path("alice.pem")))
        .args(path_arg("--tls-key", &pki.path("alice.key")))
        .args(["sub", "/other/**", "--timeout", "2"])
        .output()
        .expect("tagwire sub");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("cert:alice"),
        "the owner's token masked the certificate (subscribing outside /demo was not refused to cert:alice): {stderr}"
    );
}
