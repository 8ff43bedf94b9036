//! The TLS pump thread (`tagwire-tls`) ends when either side closes. One
//! test in its own binary, so that no other test's sessions add pump
//! threads while it counts them.

#[path = "tls_pki/mod.rs"]
mod tls_pki;

use std::time::{Duration, Instant};

use tagwire::router::{Router, RouterConfig, TlsConfig};
use tagwire::{Session, TlsOptions};

/// Threads of this process named `tagwire-tls`.
fn pump_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "tagwire-tls")
        .count()
}

/// Waits (bounded) until the number of pump threads is `n`.
fn wait_for_pumps(n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while pump_threads() != n {
        assert!(
            Instant::now() < deadline,
            "{what}: {} pump threads, expected {n}",
            pump_threads()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_pump_thread_ends_when_the_session_closes_and_when_the_router_goes_away() {
    let pki = tls_pki::pki();
    let router = Router::start(RouterConfig {
        acl: tls_pki::alice_acl(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        tls: Some(TlsConfig {
            cert: pki.server.cert.clone(),
            key: pki.server.key.clone(),
            client_ca: Some(pki.ca.pem.clone()),
        }),
        ..RouterConfig::default()
    })
    .expect("start TLS router");
    let url = format!("tls://{}", router.tcp_addr().expect("tcp addr"));
    let opts = TlsOptions {
        ca: Some(pki.ca.pem.clone()),
        cert: Some(pki.alice.cert.clone()),
        key: Some(pki.alice.key.clone()),
        server_name: None,
    };
    assert_eq!(pump_threads(), 0);

    let s = Session::connect_with_tls(&url, &opts).expect("connect");
    s.ping().expect("ping");
    assert_eq!(pump_threads(), 1);
    drop(s);
    wait_for_pumps(0, "after the session closed");

    let s = Session::connect_with_tls(&url, &opts).expect("connect again");
    s.ping().expect("ping");
    assert_eq!(pump_threads(), 1);
    router.shutdown();
    wait_for_pumps(0, "after the router shut down");
    drop(s);
}
