//! Links between daemons over TLS (issue 24, item 2): `--peer
//! tls://HOST:PORT` with `[federation.tls]` links to a daemon that serves
//! TLS, events cross it, and a peer whose certificate does not chain to the
//! configured CA gets no link. Certificates are made at test time (rcgen).

#[path = "tls_pki/mod.rs"]
mod tls_pki;

use std::time::{Duration, Instant};

use tagwire::router::config::PeerTlsConfig;
use tagwire::router::{FederationConfig, Router, RouterConfig, RouterHandle, TlsConfig};
use tagwire::{Session, TlsOptions};
use tls_pki::pki;

const WAIT: Duration = Duration::from_secs(10);

/// A daemon serving TLS with the PKI's server certificate.
fn tls_daemon(p: &tls_pki::Pki, name: &str) -> RouterHandle {
    Router::start(RouterConfig {
        name: name.into(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        tls: Some(TlsConfig {
            cert: p.server.cert.clone(),
            key: p.server.key.clone(),
            client_ca: None,
        }),
        ..RouterConfig::default()
    })
    .expect("start the TLS daemon")
}

/// A daemon that dials `peer` with `[federation.tls] ca = ca`.
fn dialer(name: &str, peer: String, ca: std::path::PathBuf) -> RouterHandle {
    Router::start(RouterConfig {
        name: name.into(),
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        federation: FederationConfig {
            peers: vec![peer],
            tls: Some(PeerTlsConfig {
                ca,
                cert: None,
                key: None,
                server_name: None,
            }),
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    })
    .expect("start the dialing daemon")
}

fn peers(s: &Session) -> Vec<String> {
    s.list()
        .expect("list")
        .federation
        .map(|f| f.links.into_iter().map(|l| l.peer).collect())
        .unwrap_or_default()
}

#[test]
fn a_tls_peer_links_and_events_cross_it() {
    let p = pki();
    let b = tls_daemon(&p, "b");
    let b_addr = b.tcp_addr().expect("tcp");
    let a = dialer("a", format!("tls://{b_addr}"), p.ca.pem.clone());
    let sb = Session::connect_with_tls(
        &format!("tls://{b_addr}"),
        &TlsOptions {
            ca: Some(p.ca.pem.clone()),
            cert: None,
            key: None,
            server_name: None,
        },
    )
    .expect("connect to b over TLS");
    let sub = sb.subscribe("/tlslink/**").receiver().expect("subscribe");
    let sa = Session::connect(&format!("tcp://{}", a.tcp_addr().expect("tcp"))).expect("a");
    let publisher = sa.declare_publisher("/tlslink/pub").expect("publisher");
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < WAIT,
            "nothing crossed the TLS link within {WAIT:?} (links of a: {:?})",
            peers(&sa)
        );
        publisher
            .publish("/tlslink/x", "over tls")
            .expect("publish");
        if let Some(s) = sub
            .recv_timeout(Duration::from_millis(100))
            .expect("receive")
        {
            assert_eq!(&s.payload()[..], b"over tls");
            break;
        }
    }
    assert_eq!(peers(&sa), ["b"]);
}

#[test]
fn a_peer_whose_certificate_the_ca_did_not_sign_gets_no_link() {
    let p = pki();
    let b = tls_daemon(&p, "b");
    let b_addr = b.tcp_addr().expect("tcp");
    // The dialer trusts another CA: the handshake fails, no link comes up.
    let a = dialer("a", format!("tls://{b_addr}"), p.other_ca.pem.clone());
    let sa = Session::connect(&format!("tcp://{}", a.tcp_addr().expect("tcp"))).expect("a");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(peers(&sa).is_empty(), "{:?}", peers(&sa));
}

#[test]
fn a_tls_peer_without_a_ca_is_refused_at_start_naming_the_setting() {
    let e = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        federation: FederationConfig {
            peers: vec!["tls://127.0.0.1:7999".into()],
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    })
    .map(|_| ())
    .expect_err("a tls:// peer needs a CA")
    .to_string();
    assert!(
        e.contains("[federation.tls] ca") && e.contains("--peer-tls-ca"),
        "{e}"
    );
}

#[test]
fn a_client_certificate_and_a_valid_token_give_the_tokens_identity() {
    // docs/protocol.md, handshake checks: a token the daemon knows decides
    // the identity whatever the transport, a verified certificate included.
    use tagwire::router::auth::{AclRule, AuthConfig, TokenConfig};
    const RIG: &str = "the-rig-token-0123456789";
    let p = pki();
    let h = Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        tls: Some(TlsConfig {
            cert: p.server.cert.clone(),
            key: p.server.key.clone(),
            client_ca: Some(p.ca.pem.clone()),
        }),
        auth: AuthConfig {
            tokens: vec![TokenConfig {
                name: "rig".into(),
                token: Some(RIG.into()),
                file: None,
            }],
            ..AuthConfig::default()
        },
        acl: vec![
            AclRule {
                identity: "cert:alice".into(),
                publish: vec!["/**".into()],
                subscribe: vec!["/**".into()],
                admin: false,
            },
            AclRule {
                identity: "token:rig".into(),
                publish: vec!["/**".into()],
                subscribe: vec!["/**".into()],
                admin: false,
            },
        ],
        ..RouterConfig::default()
    })
    .expect("start");
    let s = Session::builder()
        .tls(TlsOptions {
            ca: Some(p.ca.pem.clone()),
            cert: Some(p.alice.cert.clone()),
            key: Some(p.alice.key.clone()),
            server_name: None,
        })
        .token(RIG)
        .connect(&format!("tls://{}", h.tcp_addr().expect("tcp")))
        .expect("connect with a certificate and a token");
    let identities: Vec<String> = s
        .list()
        .expect("list")
        .connections
        .into_iter()
        .map(|c| c.identity)
        .collect();
    assert_eq!(identities, ["token:rig"]);
}
