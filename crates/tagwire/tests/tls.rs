//! TLS and mutual TLS on TCP: a router with `[tls]` (and `client_ca`) and
//! sessions on `tls://` URLs. Every certificate is made at test time with
//! rcgen in a temporary directory.

#[path = "tls_pki/mod.rs"]
mod tls_pki;

use tagwire::router::{Router, RouterConfig, RouterError, RouterHandle, TlsConfig};
use tagwire::{Error, Session, TlsOptions};
use tls_pki::{pki, Ca, Leaf, Pki};

const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts a TLS router; with `mtls` it requires client certificates from
/// the main CA. Returns it and its `tls://` URL.
fn tls_router(pki: &Pki, mtls: bool) -> (RouterHandle, String) {
    let cfg = RouterConfig {
        acl: tls_pki::alice_acl(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        tls: Some(TlsConfig {
            cert: pki.server.cert.clone(),
            key: pki.server.key.clone(),
            client_ca: mtls.then(|| pki.ca.pem.clone()),
        }),
        ..RouterConfig::default()
    };
    let h = Router::start(cfg).expect("start TLS router");
    let url = format!("tls://{}", h.tcp_addr().expect("tcp addr"));
    (h, url)
}

fn options(ca: &Ca, client: Option<&Leaf>) -> TlsOptions {
    TlsOptions {
        ca: Some(ca.pem.clone()),
        cert: client.map(|l| l.cert.clone()),
        key: client.map(|l| l.key.clone()),
        server_name: None,
    }
}

fn round_trip(s: &Session, tag: &str, payload: &[u8]) -> Vec<u8> {
    let sub = s.subscribe(tag).receiver().expect("subscribe");
    let p = s.declare_publisher(&format!("{tag}/pub")).expect("declare");
    p.event(tag, payload.to_vec()).send().expect("publish");
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("an event within the wait");
    got.payload().to_vec()
}

#[test]
fn publish_and_subscribe_work_over_tls_with_client_certificates() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, true);
    let s = Session::connect_with_tls(&url, &options(&pki.ca, Some(&pki.alice))).expect("connect");
    assert_eq!(round_trip(&s, "/tls/hello", b"hi"), b"hi");
}

#[test]
fn large_events_and_many_events_arrive_whole_and_in_order_over_tls() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, true);
    let opts = options(&pki.ca, Some(&pki.alice));
    let subscriber = Session::connect_with_tls(&url, &opts).expect("connect subscriber");
    let publisher = Session::connect_with_tls(&url, &opts).expect("connect publisher");
    let sub = subscriber
        .subscribe("/tls/bulk")
        .max_queue_length(1000)
        .receiver()
        .expect("subscribe");
    let p = publisher
        .declare_publisher("/tls/bulk/pub")
        .expect("declare");
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    p.event("/tls/bulk", big.clone())
        .send()
        .expect("publish big");
    for i in 0..500u32 {
        p.event("/tls/bulk", i.to_be_bytes().to_vec())
            .send()
            .expect("publish small");
    }
    let first = sub.recv_timeout(WAIT).expect("recv").expect("big event");
    assert_eq!(first.payload().len(), big.len());
    assert!(first.payload()[..] == big[..], "big payload corrupted");
    for i in 0..500u32 {
        let got = sub
            .recv_timeout(WAIT)
            .expect("recv")
            .unwrap_or_else(|| panic!("event {i} missing"));
        assert_eq!(&got.payload()[..], &i.to_be_bytes(), "event {i}");
    }
}

#[test]
fn tls_without_client_ca_needs_no_client_certificate() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, false);
    let s = Session::connect_with_tls(&url, &options(&pki.ca, None)).expect("connect");
    assert_eq!(round_trip(&s, "/tls/plain", b"x"), b"x");
}

#[test]
fn a_client_without_a_certificate_is_refused_when_client_ca_is_set() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, true);
    let e = Session::connect_with_tls(&url, &options(&pki.ca, None))
        .expect_err("refused without a client certificate")
        .to_string();
    assert!(e.contains("certificate"), "{e}");
}

#[test]
fn a_client_certificate_from_another_ca_is_refused() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, true);
    let mallory = pki.other_ca.sign(&pki.dir, "mallory", &[], false);
    let e = Session::connect_with_tls(&url, &options(&pki.ca, Some(&mallory)))
        .expect_err("refused with a certificate from another CA")
        .to_string();
    assert!(e.contains("certificate"), "{e}");
}

#[test]
fn a_client_that_does_not_trust_the_servers_ca_fails_with_a_certificate_error() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, true);
    let e = Session::connect_with_tls(&url, &options(&pki.other_ca, Some(&pki.alice)))
        .expect_err("server certificate not trusted");
    assert!(matches!(e, Error::Tls { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("server's certificate") && e.contains("UnknownIssuer"),
        "{e}"
    );
}

#[test]
fn the_server_name_is_checked_and_can_be_overridden() {
    let pki = pki();
    let (_router, url) = tls_router(&pki, true);
    let mut opts = options(&pki.ca, Some(&pki.alice));
    opts.server_name = Some("localhost".into());
    let s = Session::connect_with_tls(&url, &opts).expect("connect as localhost");
    assert_eq!(round_trip(&s, "/tls/name", b"n"), b"n");
    opts.server_name = Some("elsewhere.example".into());
    let e = Session::connect_with_tls(&url, &opts)
        .expect_err("wrong server name")
        .to_string();
    assert!(
        e.contains("server's certificate") && e.contains("NotValidForName"),
        "{e}"
    );
}

#[test]
fn client_tls_settings_that_cannot_be_used_are_named() {
    let pki = pki();
    let url = "tls://127.0.0.1:1";
    let e = Session::connect_with_tls(url, &TlsOptions::default())
        .expect_err("no CA")
        .to_string();
    assert!(e.contains("TAGWIRE_TLS_CA"), "{e}");
    let mut opts = options(&pki.ca, None);
    opts.cert = Some(pki.alice.cert.clone());
    let e = Session::connect_with_tls(url, &opts)
        .expect_err("cert without key")
        .to_string();
    assert!(e.contains("--tls-key"), "{e}");
    let missing = pki.dir.path().join("missing-ca.pem");
    opts = options(&pki.ca, None);
    opts.ca = Some(missing.clone());
    let e = Session::connect_with_tls(url, &opts)
        .expect_err("missing CA file")
        .to_string();
    assert!(e.contains(&missing.display().to_string()), "{e}");
}

#[test]
fn router_start_names_a_missing_tls_file() {
    let pki = pki();
    let missing = pki.dir.path().join("no-such-ca.pem");
    let cfg = RouterConfig {
        acl: tls_pki::alice_acl(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        tls: Some(TlsConfig {
            cert: pki.server.cert.clone(),
            key: pki.server.key.clone(),
            client_ca: Some(missing.clone()),
        }),
        ..RouterConfig::default()
    };
    let e = Router::start(cfg).expect_err("missing client CA");
    assert!(matches!(e, RouterError::Tls(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("client CA") && e.contains(&missing.display().to_string()),
        "{e}"
    );
}

#[test]
fn router_start_refuses_a_key_that_does_not_match_the_certificate() {
    let pki = pki();
    let cfg = RouterConfig {
        acl: tls_pki::alice_acl(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        tls: Some(TlsConfig {
            cert: pki.server.cert.clone(),
            key: pki.alice.key.clone(),
            client_ca: None,
        }),
        ..RouterConfig::default()
    };
    let e = Router::start(cfg).expect_err("mismatched key").to_string();
    assert!(
        e.contains(&pki.server.cert.display().to_string())
            && e.contains(&pki.alice.key.display().to_string()),
        "{e}"
    );
}

#[test]
fn a_tls_session_reconnects_and_resubscribes_after_a_router_restart() {
    let pki = pki();
    let (router, url) = tls_router(&pki, true);
    let addr = router.tcp_addr().expect("tcp addr");
    let s = Session::connect_with_tls(&url, &options(&pki.ca, Some(&pki.alice))).expect("connect");
    let sub = s.subscribe("/tls/again").receiver().expect("subscribe");
    let p = s.declare_publisher("/tls/again/pub").expect("declare");
    router.shutdown();
    let restarted = Router::start(RouterConfig {
        acl: tls_pki::alice_acl(),
        tcp: Some(addr),
        unix: None,
        tls: Some(TlsConfig {
            cert: pki.server.cert.clone(),
            key: pki.server.key.clone(),
            client_ca: Some(pki.ca.pem.clone()),
        }),
        ..RouterConfig::default()
    })
    .expect("restart the router on the same port");
    let deadline = std::time::Instant::now() + WAIT;
    while s.reconnects() == 0 || !s.is_connected() {
        assert!(
            std::time::Instant::now() < deadline,
            "no reconnect over TLS"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    p.event("/tls/again", "back").send().expect("publish");
    let got = sub
        .recv_timeout(WAIT)
        .expect("recv")
        .expect("an event after the reconnect");
    assert_eq!(&got.payload()[..], b"back");
    drop(restarted);
}
