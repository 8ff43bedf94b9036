//! A client proves its token only to a server that proved it first (issue
//! 24, item 2). A program that holds the daemon's port without knowing the
//! token — the daemon killed with `kill -9`, its port bound by another user
//! — gets a refusal and never sees the token, not even once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::BytesMut;
use tagwire::router::auth::{AclRule, AuthConfig, TokenConfig};
use tagwire::router::{Router, RouterConfig};
use tagwire::Session;
use tagwire_proto::Frame;

const TOKEN: &str = "the-owners-secret-token-0123456789";

/// How the fake server answers the client's `Hello`.
#[derive(Clone, Copy)]
enum Fake {
    /// `Welcome` at once, as a server that ignores tokens would.
    Welcome,
    /// A `Challenge` whose proof is made up.
    Challenge,
}

/// A server that does not know the token: it answers the first frame as
/// `how` says and returns every byte the client sent until it hung up.
fn fake_server(how: Fake) -> (String, JoinHandle<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("tcp://{}", l.local_addr().expect("addr"));
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut seen = Vec::new();
        let mut head = [0u8; 11];
        s.read_exact(&mut head).expect("the Hello's header");
        seen.extend_from_slice(&head);
        let version = u16::from_le_bytes([head[9], head[10]]);
        let answer = match how {
            Fake::Welcome => Frame::Welcome {
                version,
                max_frame: 1 << 16,
                name: "not-the-daemon".into(),
            },
            Fake::Challenge => Frame::Challenge {
                nonce: [7; 32],
                proof: [9; 32],
            },
        };
        let mut out = BytesMut::new();
        answer.encode(&mut out).expect("encode");
        let _ = s.write_all(&out);
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        seen
    });
    (url, t)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_client_refuses_a_server_that_welcomes_it_without_proving_the_token_and_never_sends_it() {
    for how in [Fake::Welcome, Fake::Challenge] {
        let (url, server) = fake_server(how);
        let result = Session::builder()
            .token(TOKEN)
            .connect_timeout(Duration::from_secs(5))
            .connect(&url);
        let e = match result {
            Ok(_) => panic!("a session with a server that did not prove the token"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("did not prove it knows the token"),
            "the error names the unproven server: {e}"
        );
        let seen = server.join().expect("fake server");
        assert!(!seen.is_empty(), "the client did say Hello");
        assert!(
            !contains(&seen, TOKEN.as_bytes()),
            "the token reached a server that did not prove it"
        );
    }
}

fn router_with_token() -> tagwire::router::RouterHandle {
    Router::start(RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        auth: AuthConfig {
            local_token: false,
            tokens: vec![TokenConfig {
                name: "rig".into(),
                token: Some(TOKEN.into()),
                file: None,
            }],
            ..AuthConfig::default()
        },
        acl: vec![AclRule {
            identity: "token:rig".into(),
            publish: vec!["/**".into()],
            subscribe: vec!["/**".into()],
            admin: false,
        }],
        ..RouterConfig::default()
    })
    .expect("start router")
}

#[test]
fn a_daemon_that_knows_the_token_proves_it_and_the_session_works() {
    let h = router_with_token();
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp"));
    let s = Session::builder()
        .token(TOKEN)
        .connect(&url)
        .expect("the daemon proves the token, the client proves it back");
    let sub = s.subscribe("/proof/ok").receiver().expect("subscribe");
    let publisher = s.declare_publisher("/proof/pub").expect("publisher");
    publisher.publish("/proof/ok", "hi").expect("publish");
    let got = sub
        .recv_timeout(Duration::from_secs(5))
        .expect("recv")
        .expect("an event");
    assert_eq!(&got.payload()[..], b"hi");
    // A token the daemon does not know is refused as before.
    let e = match Session::builder()
        .token("not-the-token-0123456789")
        .connect(&url)
    {
        Ok(_) => panic!("an unknown token was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("not valid for this daemon"), "{e}");
}

#[test]
fn a_replayed_hello_without_the_token_gets_no_welcome() {
    // A stranger that recorded a client's Hello (tag and nonce) replays it:
    // the daemon challenges with a fresh nonce, and without the token the
    // stranger cannot answer.
    let h = router_with_token();
    let addr = h.tcp_addr().expect("tcp");
    let tag = tagwire_proto::TokenTag::new(TOKEN, [5; 32]);
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut out = BytesMut::new();
    Frame::Hello {
        version: 3,
        max_frame: 1 << 16,
        name: "replayer".into(),
        token: String::new(),
        proof: Some(Box::new(tag)),
        session: [0; 16],
    }
    .encode(&mut out)
    .expect("encode");
    Frame::Proof { proof: [1; 32] }
        .encode(&mut out)
        .expect("encode");
    s.write_all(&out).expect("send");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let mut buf = BytesMut::from(&got[..]);
    let dec = tagwire_proto::FrameDecoder::new(1 << 16);
    let mut frames = Vec::new();
    while let Ok(Some((k, body))) = dec.next_raw(&mut buf) {
        frames.push(Frame::decode(k, body).expect("a frame"));
    }
    assert!(
        matches!(frames.first(), Some(Frame::Challenge { .. })),
        "{frames:?}"
    );
    assert!(
        !frames.iter().any(|f| matches!(f, Frame::Welcome { .. })),
        "{frames:?}"
    );
    assert!(
        frames.iter().any(|f| matches!(f, Frame::Error { code: tagwire_proto::ErrorCode::Unauthenticated, message, .. } if message.contains("proof is wrong"))),
        "{frames:?}"
    );
}
