//! The UDP transport end to end on loopback (issue 27): sessions over
//! `udp://` publish and subscribe with the token proof of TCP; a client
//! with no token is refused; an event too large for one datagram is
//! refused naming its size and the limit (and one delivered by the daemon
//! is counted, not sent); garbage and spoofed datagrams are counted and
//! dropped, the daemon never answers an unproven address with more bytes
//! than it sent; `list` shows the transport and the counters.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tagwire::router::config::{AclRule, AuthConfig, TokenConfig, UdpConfig};
use tagwire::router::{Router, RouterConfig, RouterHandle};
use tagwire::{Error, Session};
use tagwire_proto::datagram::{encode_open, Datagram, DatagramKind, Header, MIN_OPEN_LEN};

const TOKEN: &str = "udp-test-token-0123456789";
const WAIT: Duration = Duration::from_secs(5);

fn router() -> RouterHandle {
    router_with(RouterConfig::default())
}

/// The test daemon with `base`'s name and daemon-level QoS.
fn router_with(base: RouterConfig) -> RouterHandle {
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
            admin: true,
        }],
        udp: UdpConfig {
            listen: "127.0.0.1:0".parse().ok(),
            ..UdpConfig::default()
        },
        ..base
    })
    .expect("start router")
}

fn udp_url(h: &RouterHandle) -> String {
    format!("udp://{}", h.udp_addr().expect("udp listener"))
}

fn session(url: &str) -> Session {
    Session::builder()
        .token(TOKEN)
        .connect(url)
        .expect("udp session")
}

/// The `list` entry of the connection named `name`.
fn connection(s: &Session, name: &str) -> tagwire::admin::ConnectionInfo {
    let deadline = Instant::now() + WAIT;
    loop {
        let l = s.list().expect("list");
        if let Some(c) = l.connections.into_iter().find(|c| c.name == name) {
            return c;
        }
        assert!(Instant::now() < deadline, "no connection named {name}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn events_flow_over_udp_with_the_token_proof_and_list_shows_the_transport() {
    let h = router();
    let url = udp_url(&h);
    let sub_s = session(&url);
    let sub = sub_s.subscribe("/udp/**").receiver().expect("subscribe");
    let pub_s = session(&url);
    let p = pub_s.declare_publisher("/udp/pub").expect("publisher");
    for i in 0..50u32 {
        p.publish("/udp/a", i.to_le_bytes().to_vec())
            .expect("publish");
    }
    pub_s.flush().expect("flush");
    let mut got = Vec::new();
    while got.len() < 50 {
        match sub.recv_timeout(WAIT) {
            Ok(Some(s)) => got.push(u32::from_le_bytes(
                s.payload()[..4].try_into().expect("4 bytes"),
            )),
            other => panic!("after {} events: {other:?}", got.len()),
        }
    }
    // Loopback loses nothing: all 50, in order.
    assert_eq!(got, (0..50).collect::<Vec<_>>());
    let me = connection(&sub_s, sub_s.name());
    assert_eq!(me.transport, "udp");
    let udp = me.udp.expect("udp counters in list");
    // Deliveries share datagrams: fewer datagrams than events. The
    // subscriber's requests went acknowledged (AckedData), the publisher's
    // events in Data datagrams.
    assert!(udp.sent > 0 && udp.acknowledged, "{udp:?}");
    assert_eq!((udp.lost, udp.bad, udp.too_large), (0, 0, 0), "{udp:?}");
    let pub_udp = connection(&sub_s, pub_s.name()).udp.expect("udp");
    assert!(pub_udp.received > 0, "{pub_udp:?}");
    let c = sub_s.udp_counters().expect("client counters");
    assert!(c.received.received > 0 && c.sent > 0, "{c:?}");
    assert_eq!(c.received.lost, 0);
    // The TCP listing shows its own transport.
    let tcp = Session::builder()
        .token(TOKEN)
        .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
        .expect("tcp session");
    assert_eq!(connection(&tcp, tcp.name()).transport, "tcp");
    assert!(tcp.udp_counters().is_none());
}

#[test]
fn a_udp_client_without_a_token_is_refused() {
    let h = router();
    let e = Session::builder()
        .token("")
        .connect(&udp_url(&h))
        .expect_err("no token over udp");
    let msg = e.to_string();
    assert!(msg.contains("over UDP a client presents a token"), "{msg}");
}

#[test]
fn an_event_too_large_for_a_datagram_is_refused_and_a_delivery_counted() {
    let h = router();
    let url = udp_url(&h);
    let s = session(&url);
    let p = s.declare_publisher("/big/pub").expect("publisher");
    let e = p
        .publish("/big/a", vec![0u8; 2000])
        .expect_err("2000 bytes do not fit in a 1400-byte datagram");
    assert!(matches!(e, Error::EventTooLarge { max: 1384, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("does not fit in one udp datagram") && msg.contains("1384"),
        "{msg}"
    );
    // Published over TCP, delivered to a UDP subscriber: not sent, counted.
    let sub = s.subscribe("/big/**").receiver().expect("subscribe");
    let tcp = Session::builder()
        .token(TOKEN)
        .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
        .expect("tcp session");
    let tp = tcp.declare_publisher("/big/tcp").expect("publisher");
    tp.publish("/big/b", vec![1u8; 2000])
        .expect("publish over tcp");
    tp.publish("/big/b", b"small".to_vec())
        .expect("publish over tcp");
    tcp.flush().expect("flush");
    let got = sub
        .recv_timeout(WAIT)
        .expect("receive")
        .expect("the small one arrives");
    assert_eq!(&got.payload()[..], b"small");
    let udp = connection(&s, s.name()).udp.expect("udp counters");
    assert_eq!(udp.too_large, 1, "{udp:?}");
}

fn recv_within(sock: &UdpSocket, d: Duration) -> Option<Vec<u8>> {
    sock.set_read_timeout(Some(d)).expect("timeout");
    let mut buf = vec![0u8; 65536];
    sock.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
}

#[test]
fn garbage_and_spoofed_datagrams_are_counted_and_dropped_and_never_amplified() {
    let h = router();
    let addr = h.udp_addr().expect("udp");
    let url = udp_url(&h);
    let s = session(&url);
    let sub = s.subscribe("/spoof/**").receiver().expect("subscribe");
    let p = s.declare_publisher("/spoof/pub").expect("publisher");
    let raw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    raw.connect(addr).expect("connect");
    // Garbage: no answer.
    for g in [
        &b"hello"[..],
        &[0u8; 300][..],
        &b"TD\x01\x00garbage-garbage"[..],
    ] {
        raw.send(g).expect("send");
    }
    assert_eq!(recv_within(&raw, Duration::from_millis(200)), None);
    // An Open shorter than 1,200 bytes: no answer (it could be spoofed).
    let mut open = BytesMut::new();
    encode_open(None, &mut open);
    raw.send(&open[..MIN_OPEN_LEN - 1]).expect("send");
    assert_eq!(recv_within(&raw, Duration::from_millis(200)), None);
    // A full Open: a cookie, smaller than what was sent.
    raw.send(&open).expect("send");
    let answer = recv_within(&raw, WAIT).expect("a cookie");
    assert!(
        answer.len() <= open.len(),
        "{} bytes for {}",
        answer.len(),
        open.len()
    );
    assert_eq!(
        Datagram::parse(&answer).expect("parse").header.kind,
        DatagramKind::Cookie
    );
    // A forged cookie: another cookie, no session.
    let mut forged = BytesMut::new();
    encode_open(Some(&[9u8; 24]), &mut forged);
    raw.send(&forged).expect("send");
    let again = recv_within(&raw, WAIT).expect("answer");
    assert_eq!(
        Datagram::parse(&again).expect("parse").header.kind,
        DatagramKind::Cookie
    );
    // A spoofed Data datagram with the real session id, from another
    // address, carrying a Publish: counted bad on that session, not taken.
    let me = connection(&s, s.name());
    let id = me.udp.expect("udp").session;
    let mut d = BytesMut::new();
    Header {
        kind: DatagramKind::Data,
        session: id,
        seq: 1000,
    }
    .encode(&mut d);
    let ev = tagwire::Event::new("/spoof/x", b"forged".to_vec());
    tagwire_proto::encode_publish(1, &ev, &mut d).expect("encode");
    raw.send(&d).expect("send");
    // An unknown session id: a 16-byte Reset, no more than what was sent.
    let mut unknown = d.clone();
    unknown[4..12].copy_from_slice(&id.wrapping_add(1).to_le_bytes());
    raw.send(&unknown).expect("send");
    let reset = recv_within(&raw, WAIT).expect("reset");
    assert_eq!(reset.len(), 16);
    assert_eq!(
        Datagram::parse(&reset).expect("parse").header.kind,
        DatagramKind::Reset
    );
    // The real session still works, and never saw the forged event.
    p.publish("/spoof/real", b"real".to_vec()).expect("publish");
    s.flush().expect("flush");
    let got = sub
        .recv_timeout(WAIT)
        .expect("receive")
        .expect("real event");
    assert_eq!(&got.payload()[..], b"real");
    assert!(
        sub.recv_timeout(Duration::from_millis(200))
            .expect("receive")
            .is_none(),
        "the forged event arrived"
    );
    let udp = connection(&s, s.name()).udp.expect("udp");
    assert!(udp.bad >= 1, "the spoofed datagram is counted: {udp:?}");
    assert_eq!(
        udp.lost, 0,
        "the spoofed seq 1000 did not count as a gap: {udp:?}"
    );
}

/// A UDP relay between a client and the daemon that drops datagrams by
/// rule: `drop_up(i)` / `drop_down(i)` for the i-th datagram (from 1) of
/// each direction while `lossy` is set or always for the handshake rules.
/// While `reorder` is set, every 7th datagram down (not dropped) is held
/// and sent after the next one; while `lossy_up` is set, every 5th
/// datagram up is dropped; while `first_copies` is set, the first copy of
/// every numbered datagram (`Data` or `AckedData`, by kind and sequence
/// number) is dropped both ways.
struct Relay {
    addr: std::net::SocketAddr,
    first_copies: std::sync::Arc<std::sync::atomic::AtomicBool>,
    lossy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    lossy_up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reorder: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn start(
        daemon: std::net::SocketAddr,
        drop_down_handshake: &'static [u64],
        drop_up_handshake: &'static [u64],
    ) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let back = UdpSocket::bind("127.0.0.1:0").expect("bind");
        back.connect(daemon).expect("connect");
        // Short waits: a burst one way is not held up by silence the other.
        front
            .set_read_timeout(Some(Duration::from_millis(1)))
            .expect("timeout");
        back.set_read_timeout(Some(Duration::from_millis(1)))
            .expect("timeout");
        let addr = front.local_addr().expect("addr");
        let lossy = Arc::new(AtomicBool::new(false));
        let reorder = Arc::new(AtomicBool::new(false));
        let lossy_up = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let first_copies = Arc::new(AtomicBool::new(false));
        let (l, r, lu, st, fc) = (
            lossy.clone(),
            reorder.clone(),
            lossy_up.clone(),
            stop.clone(),
            first_copies.clone(),
        );
        std::thread::spawn(move || {
            // (up, kind, seq) of the numbered datagrams seen.
            let mut seen = std::collections::HashSet::new();
            let mut first = move |up: bool, d: &[u8]| -> bool {
                if !fc.load(Ordering::Relaxed) || d.len() < 16 || !matches!(d[3], 0 | 9) {
                    return false;
                }
                seen.insert((up, d[3], u32::from_le_bytes([d[12], d[13], d[14], d[15]])))
            };
            let mut held: Option<Vec<u8>> = None;
            let mut client = None;
            let (mut up, mut down) = (0u64, 0u64);
            let mut buf = vec![0u8; 65536];
            while !st.load(Ordering::Relaxed) {
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    client = Some(from);
                    up += 1;
                    let lose = drop_up_handshake.contains(&up)
                        || (lu.load(Ordering::Relaxed) && up % 5 == 0)
                        || first(true, &buf[..n]);
                    if !lose {
                        let _ = back.send(&buf[..n]);
                    }
                }
                if let (Ok(n), Some(c)) = (back.recv(&mut buf), client) {
                    down += 1;
                    let lose = drop_down_handshake.contains(&down)
                        || (l.load(Ordering::Relaxed) && down % 4 == 0)
                        || first(false, &buf[..n]);
                    if lose {
                    } else if r.load(Ordering::Relaxed) && down % 7 == 0 && held.is_none() {
                        held = Some(buf[..n].to_vec());
                    } else {
                        let _ = front.send_to(&buf[..n], c);
                        if let Some(h) = held.take() {
                            let _ = front.send_to(&h, c);
                        }
                    }
                }
            }
        });
        Relay {
            addr,
            first_copies,
            lossy,
            lossy_up,
            reorder,
            stop,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn over_a_lossy_path_the_handshake_retries_and_loss_is_counted_on_both_sides() {
    let h = router();
    // Lost: the client's Hello (its 3rd datagram: Open, Open, Hello), the
    // daemon's Challenge (its 3rd: Cookie, Accept, Challenge) and, after
    // the Challenge sent again (4th), its Welcome (5th).
    let relay = Relay::start(h.udp_addr().expect("udp"), &[3, 5], &[3]);
    let s = Session::builder()
        .token(TOKEN)
        .connect(&format!("udp://{}", relay.addr))
        .expect("the handshake survives a lost Hello, Challenge and Welcome");
    let sub = s.subscribe("/lossy/**").receiver().expect("subscribe");
    let tcp = Session::builder()
        .token(TOKEN)
        .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
        .expect("tcp session");
    let p = tcp.declare_publisher("/lossy/pub").expect("publisher");
    relay
        .lossy
        .store(true, std::sync::atomic::Ordering::Relaxed);
    const N: u32 = 400;
    for i in 0..N {
        p.publish("/lossy/a", i.to_le_bytes().to_vec())
            .expect("publish");
        // One event per datagram, mostly: the daemon sends as they come.
        std::thread::sleep(Duration::from_micros(500));
    }
    tcp.flush().expect("flush");
    let mut got = Vec::new();
    while let Ok(Some(sample)) = sub.recv_timeout(Duration::from_millis(500)) {
        got.push(u32::from_le_bytes(
            sample.payload()[..4].try_into().expect("4 bytes"),
        ));
    }
    relay
        .lossy
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(
        !got.is_empty() && got.len() < N as usize,
        "{} of {N} arrived",
        got.len()
    );
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
    let c = s.udp_counters().expect("client counters");
    assert!(c.received.lost > 0, "the client counts the loss: {c:?}");
    // The client reports its counters each second: the daemon shows them.
    let deadline = Instant::now() + WAIT;
    loop {
        let udp = connection(&tcp, s.name()).udp.expect("udp");
        if udp.peer_lost > 0 {
            assert!(udp.peer_received > 0, "{udp:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon never heard the loss: {udp:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_daemon_links_to_another_over_udp_and_events_cross_it() {
    use tagwire::router::FederationConfig;
    let a = router();
    let b = Router::start(RouterConfig {
        name: "udp-b".into(),
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
            admin: true,
        }],
        federation: FederationConfig {
            peers: vec![udp_url(&a)],
            token: TOKEN.into(),
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    })
    .expect("start b");
    let tcp = |h: &RouterHandle| {
        Session::builder()
            .token(TOKEN)
            .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
            .expect("tcp session")
    };
    let (sa, sb) = (tcp(&a), tcp(&b));
    let sub = sb.subscribe("/link/**").receiver().expect("subscribe on b");
    let p = sa.declare_publisher("/link/pub").expect("publisher on a");
    let start = Instant::now();
    loop {
        p.publish("/link/x", b"over udp".to_vec()).expect("publish");
        if let Some(s) = sub
            .recv_timeout(Duration::from_millis(100))
            .expect("receive")
        {
            assert_eq!(&s.payload()[..], b"over udp");
            break;
        }
        assert!(start.elapsed() < WAIT * 2, "nothing crossed the UDP link");
    }
    let link = connection(&sa, "link:udp-b");
    assert_eq!(link.transport, "udp", "{link:?}");
    assert!(link.udp.is_some_and(|u| u.received > 0));
}

/// The links a session's daemon lists.
fn links_of(s: &Session) -> Vec<tagwire::router::LinkInfo> {
    s.list()
        .expect("list")
        .federation
        .map(|f| f.links)
        .unwrap_or_default()
}

#[test]
fn a_udp_link_opens_a_session_per_band_and_each_band_crosses_on_its_own() {
    use tagwire::router::FederationConfig;
    let a = router();
    let b = router_with(RouterConfig {
        name: "udp-b".into(),
        federation: FederationConfig {
            peers: vec![udp_url(&a)],
            token: TOKEN.into(),
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    });
    let tcp = |h: &RouterHandle| {
        Session::builder()
            .token(TOKEN)
            .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
            .expect("tcp session")
    };
    let (sa, sb) = (tcp(&a), tcp(&b));
    // b dialed a band session for each of a's other bands (link version 6
    // or later).
    let deadline = Instant::now() + WAIT * 2;
    loop {
        let l = links_of(&sb);
        if l.first()
            .is_some_and(|l| l.bands == ["critical", "high", "low"] && l.version >= 6)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no band sessions: {l:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // At a they are UDP connections of the bands' lanes, with their DSCP.
    let conns: Vec<_> = sa
        .list()
        .expect("list")
        .connections
        .into_iter()
        .filter(|c| c.name == "link:udp-b")
        .collect();
    for (band, dscp) in [("normal", 0), ("low", 10), ("high", 36), ("critical", 44)] {
        assert!(
            conns
                .iter()
                .any(|c| c.band == band && c.transport == "udp" && c.dscp == Some(dscp)),
            "band {band}: {conns:?}"
        );
    }
    // A high-band and a low-band event from b cross on their bands.
    let sub = sa
        .subscribe("/bands/**")
        .receiver()
        .expect("subscribe on a");
    let high = sb.on_band("high").expect("high band");
    let low = sb.on_band("low").expect("low band");
    let ph = high.declare_publisher("/bands/h").expect("publisher");
    let pl = low.declare_publisher("/bands/l").expect("publisher");
    let start = Instant::now();
    loop {
        ph.publish("/bands/h", b"probe".to_vec()).expect("publish");
        if sub
            .recv_timeout(Duration::from_millis(100))
            .expect("receive")
            .is_some()
        {
            break;
        }
        assert!(start.elapsed() < WAIT * 2, "nothing crossed the UDP link");
    }
    while let Ok(Some(_)) = sub.recv_timeout(Duration::from_millis(300)) {}
    let before = links_of(&sb)[0].events_out_by_band.clone();
    const N: u64 = 20;
    for _ in 0..N {
        ph.publish("/bands/h", b"h".to_vec()).expect("publish");
        pl.publish("/bands/l", b"l".to_vec()).expect("publish");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut got = 0;
    while got < 2 * N {
        match sub.recv_timeout(WAIT).expect("receive") {
            Some(_) => got += 1,
            None => panic!("{got} of {} events crossed", 2 * N),
        }
    }
    let after = links_of(&sb)[0].events_out_by_band.clone();
    let n =
        |band: &str| after.get(band).copied().unwrap_or(0) - before.get(band).copied().unwrap_or(0);
    assert_eq!(
        (n("high"), n("low"), n("normal")),
        (N, N, 0),
        "{before:?} → {after:?}"
    );
}

/// The subscription of the listing whose pattern is `pattern`, once its
/// network counters satisfy `done` (the client reports each second).
fn subscription_net(
    s: &Session,
    pattern: &str,
    done: impl Fn(&tagwire::admin::NetLossInfo) -> bool,
) -> tagwire::admin::NetLossInfo {
    let deadline = Instant::now() + WAIT;
    loop {
        let l = s.list().expect("list");
        let sub = l
            .subscriptions
            .into_iter()
            .find(|x| x.pattern == pattern)
            .expect("subscription listed");
        let net = sub.net.expect("a udp subscription has network counters");
        if done(&net) || Instant::now() >= deadline {
            return net;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn loss_and_reordering_are_counted_per_channel_in_list_and_show() {
    let h = router();
    let relay = Relay::start(h.udp_addr().expect("udp"), &[], &[]);
    let s = Session::builder()
        .token(TOKEN)
        .connect(&format!("udp://{}", relay.addr))
        .expect("udp session");
    let sub_a = s
        .subscribe("/pc/a/**")
        .endpoint("/viewer/a")
        .receiver()
        .expect("subscribe a");
    let sub_b = s
        .subscribe("/pc/b/**")
        .endpoint("/viewer/b")
        .receiver()
        .expect("subscribe b");
    let tcp = Session::builder()
        .token(TOKEN)
        .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
        .expect("tcp session");
    let p = tcp.declare_publisher("/pc/pub").expect("publisher");
    use std::sync::atomic::Ordering::Relaxed;
    relay.lossy.store(true, Relaxed);
    relay.reorder.store(true, Relaxed);
    // Only channel a's events cross the lossy, reordering path.
    const N: u32 = 300;
    for i in 0..N {
        p.publish("/pc/a/x", i.to_le_bytes().to_vec())
            .expect("publish");
        std::thread::sleep(Duration::from_micros(500));
    }
    tcp.flush().expect("flush");
    let mut got_a = 0u64;
    while let Ok(Some(_)) = sub_a.recv_timeout(Duration::from_millis(500)) {
        got_a += 1;
    }
    relay.lossy.store(false, Relaxed);
    relay.reorder.store(false, Relaxed);
    // Then channel b's, cleanly: they move the client's window on, so it
    // gives up a's last gaps and reports them.
    for i in 0..200u32 {
        p.publish("/pc/b/x", i.to_le_bytes().to_vec())
            .expect("publish");
        std::thread::sleep(Duration::from_micros(500));
    }
    tcp.flush().expect("flush");
    let mut got_b = 0u64;
    while let Ok(Some(_)) = sub_b.recv_timeout(Duration::from_millis(500)) {
        got_b += 1;
    }
    assert_eq!(got_b, 200, "b's path was clean");
    // An event of a the relay held back (reordering) or the loaded machine
    // delayed past the first drain arrives during b's phase: it was not
    // lost, so it counts as received.
    while let Ok(Some(_)) = sub_a.recv_timeout(Duration::from_millis(100)) {
        got_a += 1;
    }
    let lost_a = u64::from(N) - got_a;
    assert!(lost_a > 0, "the relay dropped some of a's datagrams");
    let a = subscription_net(&tcp, "/pc/a/**", |n| n.lost >= lost_a && n.reordered > 0);
    assert_eq!(a.lost, lost_a, "every event of a the client missed, on a");
    assert!(
        a.reordered > 0,
        "the relay's held datagrams count on a: {a:?}"
    );
    let b = subscription_net(&tcp, "/pc/b/**", |_| true);
    assert_eq!(b, tagwire::admin::NetLossInfo::default(), "nothing on b");
    // `admin show` of the endpoint shows the same.
    match tcp.show("/viewer/a").expect("show") {
        tagwire::admin::Show::Endpoint(e) => {
            let net = e.channels[0].net.expect("udp channel");
            assert_eq!(net.lost, lost_a, "{net:?}");
        }
        other => panic!("not an endpoint: {other:?}"),
    }
    // A TCP subscriber's channel has no network counters.
    let _t = tcp.subscribe("/pc/tcp/**").receiver().expect("subscribe");
    let l = tcp.list().expect("list");
    let t = l
        .subscriptions
        .iter()
        .find(|x| x.pattern == "/pc/tcp/**")
        .expect("listed");
    assert!(t.net.is_none(), "{t:?}");
}

/// Daemon b links to daemon a over UDP through a relay that drops every
/// 4th datagram from a to b and every 5th from b to a (acknowledgements)
/// while lossy; a publishes 300 events of
/// `/rel/x` with a's daemon-level `reliability` set to `reliability`.
/// Returns the sequence numbers b's subscriber got, in arrival order, and
/// a's `retransmitted` counter.
fn link_run(reliability: &str) -> (Vec<u32>, u64) {
    if std::env::var_os("UDP_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("tagwire_router=debug")
            .try_init();
    }
    use std::sync::atomic::Ordering::Relaxed;
    use tagwire::router::FederationConfig;
    let a = router_with(RouterConfig {
        name: "rel-a".into(),
        qos: [("reliability".to_string(), reliability.to_string())]
            .into_iter()
            .collect(),
        ..RouterConfig::default()
    });
    let relay = Relay::start(a.udp_addr().expect("udp"), &[], &[]);
    let b = router_with(RouterConfig {
        name: "rel-b".into(),
        federation: FederationConfig {
            peers: vec![format!("udp://{}", relay.addr)],
            token: TOKEN.into(),
            ..FederationConfig::default()
        },
        ..RouterConfig::default()
    });
    let tcp = |h: &RouterHandle| {
        Session::builder()
            .token(TOKEN)
            .connect(&format!("tcp://{}", h.tcp_addr().expect("tcp")))
            .expect("tcp session")
    };
    let (sa, sb) = (tcp(&a), tcp(&b));
    let sub = sb.subscribe("/rel/**").receiver().expect("subscribe on b");
    let p = sa.declare_publisher("/rel/pub").expect("publisher on a");
    // The link is up and b's interest known at a once a probe crosses.
    let start = Instant::now();
    loop {
        p.publish("/rel/probe", b"probe".to_vec()).expect("publish");
        if sub
            .recv_timeout(Duration::from_millis(100))
            .expect("receive")
            .is_some()
        {
            break;
        }
        assert!(start.elapsed() < WAIT * 2, "nothing crossed the UDP link");
    }
    while let Ok(Some(_)) = sub.recv_timeout(Duration::from_millis(300)) {}
    relay.lossy.store(true, Relaxed);
    relay.lossy_up.store(true, Relaxed);
    const N: u32 = 300;
    for i in 0..N {
        p.publish("/rel/x", i.to_le_bytes().to_vec())
            .expect("publish");
        std::thread::sleep(Duration::from_micros(500));
    }
    sa.flush().expect("flush");
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until && got.len() < N as usize {
        if let Ok(Some(s)) = sub.recv_timeout(Duration::from_millis(200)) {
            if s.payload().len() == 4 {
                got.push(u32::from_le_bytes(
                    s.payload()[..4].try_into().expect("4 bytes"),
                ));
            }
        }
    }
    relay.lossy.store(false, Relaxed);
    relay.lossy_up.store(false, Relaxed);
    // Anything still coming (nothing should, beyond N).
    while let Ok(Some(s)) = sub.recv_timeout(Duration::from_millis(300)) {
        if s.payload().len() == 4 {
            got.push(u32::from_le_bytes(
                s.payload()[..4].try_into().expect("4 bytes"),
            ));
        }
    }
    let fed = sa.list().expect("list").federation.unwrap_or_default();
    (got, fed.reliable.retransmitted)
}

#[test]
fn a_reliable_tag_over_a_lossy_udp_link_loses_nothing_and_best_effort_does() {
    let (best, _) = link_run("best_effort");
    assert!(
        !best.is_empty() && best.len() < 300,
        "best effort over the lossy link loses some: {} of 300",
        best.len()
    );
    let (rel, retransmitted) = link_run("reliable");
    assert_eq!(
        rel,
        (0..300).collect::<Vec<_>>(),
        "reliable: every event once, in order"
    );
    assert!(retransmitted > 0, "the lost ones were sent again");
}

/// (scheduling policy, real-time priority) of this process's threads named
/// `name`, from `/proc/self/task/*/stat` (fields 41 and 40).
fn threads_sched(name: &str) -> Vec<(u32, u32)> {
    // The kernel keeps 15 bytes of a thread's name.
    let name = &name[..name.len().min(15)];
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the command's closing parenthesis start at field 3.
        let rest: Vec<&str> = stat[stat.rfind(')').expect("stat") + 2..]
            .split(' ')
            .collect();
        let field = |n: usize| rest[n - 3].parse::<u32>().expect("a number");
        out.push((field(41), field(40)));
    }
    out
}

#[test]
fn a_band_sessions_udp_pump_threads_run_at_the_bands_scheduling() {
    let h = router();
    let session = session(&udp_url(&h));
    let critical = session.on_band("critical").expect("critical band over udp");
    // The band session is connected: publish through it so it is in use.
    critical
        .declare_publisher("/udp/sched")
        .expect("publisher")
        .publish("/udp/sched", "x")
        .expect("publish");
    critical.flush().expect("flush");
    for name in ["tagwire-udp-up", "tagwire-udp-down"] {
        let threads = threads_sched(name);
        // One pair for the default band's session, one for critical's.
        assert!(threads.len() >= 2, "{name}: {threads:?}");
        let fifo20 = threads.iter().filter(|&&t| t == (1, 20)).count();
        if rustix::process::geteuid().is_root() {
            assert_eq!(
                fifo20, 1,
                "{name}: critical's pump runs fifo:20: {threads:?}"
            );
        } else {
            // Without the right to a real-time policy: never one (the
            // documented fallback is a favoured nice).
            assert_eq!(fifo20, 0, "{name}: {threads:?}");
        }
    }
}

/// A session over a relay that drops the first copy of every numbered
/// datagram both ways once the session is up: its subscribe and declare
/// requests, their replies and the events of a reliable publisher and
/// subscriber are each lost once and sent again; all arrive.
#[test]
fn requests_and_replies_lost_after_the_welcome_are_sent_again() {
    use std::sync::atomic::Ordering::Relaxed;
    let h = router();
    let relay = Relay::start(h.udp_addr().expect("udp"), &[], &[]);
    let s = Session::builder()
        .token(TOKEN)
        .connect(&format!("udp://{}", relay.addr))
        .expect("udp session");
    relay.first_copies.store(true, Relaxed);
    let sub = s
        .subscribe("/again/**")
        .qos("reliability", "reliable")
        .receiver()
        .expect("a subscribe whose request and reply are each lost once");
    let p = s
        .declare_publisher("/again/pub")
        .expect("a declare whose request and reply are each lost once");
    p.set_reliability(tagwire::Reliability::Reliable);
    for i in 0..20u32 {
        p.publish("/again/x", i.to_le_bytes().to_vec())
            .expect("publish");
    }
    s.wait_acknowledged(WAIT).expect("every event acknowledged");
    let mut got = Vec::new();
    while got.len() < 20 {
        match sub.recv_timeout(WAIT).expect("receive") {
            Some(x) => got.push(u32::from_le_bytes(
                x.payload()[..4].try_into().expect("4 bytes"),
            )),
            None => break,
        }
    }
    assert_eq!(
        got,
        (0..20).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let c = s.udp_counters().expect("counters");
    assert!(c.acknowledged, "{c:?}");
    assert!(c.resent > 0, "the client sent lost datagrams again: {c:?}");
    let udp = connection(&s, s.name()).udp.expect("udp");
    assert!(
        udp.acknowledged && udp.resent > 0,
        "and so did the daemon: {udp:?}"
    );
}

/// A publisher and a subscriber, each over its own relay that drops every
/// 4th datagram down and every 5th up; 300 events of `/lossy2/x` with both
/// ends at `reliability`. Returns what the subscriber got (in order of
/// arrival) and its session's counters.
fn client_run(reliability: &str) -> (Vec<u32>, tagwire::UdpCounters) {
    use std::sync::atomic::Ordering::Relaxed;
    let h = router();
    let (rp, rs) = (
        Relay::start(h.udp_addr().expect("udp"), &[], &[]),
        Relay::start(h.udp_addr().expect("udp"), &[], &[]),
    );
    let connect = |r: &Relay| {
        Session::builder()
            .token(TOKEN)
            .connect(&format!("udp://{}", r.addr))
            .expect("udp session")
    };
    let (ps, ss) = (connect(&rp), connect(&rs));
    for r in [&rp, &rs] {
        r.lossy.store(true, Relaxed);
        r.lossy_up.store(true, Relaxed);
    }
    let sub = ss
        .subscribe("/lossy2/**")
        .qos("reliability", reliability)
        .max_queue_length(10_000)
        .receiver()
        .expect("subscribe over the lossy path");
    const N: u32 = 300;
    // Read as the events come, as an application does (an acknowledged
    // subscription is acknowledged as it is read, so its acknowledgements
    // cross the lossy path during the stream).
    // A reliable stream over this path can pause for over a second while a
    // lost datagram is sent again: the reader waits longer for it.
    let patience = if reliability == "reliable" {
        WAIT
    } else {
        Duration::from_millis(1500)
    };
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        while got.len() < N as usize {
            match sub.recv_timeout(patience) {
                Ok(Some(x)) => got.push(u32::from_le_bytes(
                    x.payload()[..4].try_into().expect("4 bytes"),
                )),
                _ => break,
            }
        }
        // Anything late (nothing should come: no copy).
        while let Ok(Some(x)) = sub.recv_timeout(Duration::from_millis(300)) {
            got.push(u32::from_le_bytes(
                x.payload()[..4].try_into().expect("4 bytes"),
            ));
        }
        got
    });
    let p = ps.declare_publisher("/lossy2/pub").expect("publisher");
    if reliability == "reliable" {
        p.set_reliability(tagwire::Reliability::Reliable);
    }
    // The subscription is known to the daemon once its reply came; give
    // the route a moment, then publish.
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..N {
        p.publish("/lossy2/x", i.to_le_bytes().to_vec())
            .expect("publish");
        std::thread::sleep(Duration::from_micros(500));
    }
    if reliability == "reliable" {
        ps.wait_acknowledged(WAIT * 2)
            .expect("every event acknowledged");
    } else {
        ps.flush().expect("flush");
    }
    let got = reader.join().expect("reader");
    (got, ss.udp_counters().expect("counters"))
}

#[test]
fn a_reliable_publisher_and_subscriber_over_lossy_udp_get_every_event_once_and_best_effort_counts_the_loss(
) {
    let (best, c) = client_run("best_effort");
    assert!(
        !best.is_empty() && best.len() < 300,
        "best effort over the lossy path loses some: {} of 300",
        best.len()
    );
    assert!(best.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
    assert!(c.received.lost > 0, "the loss is counted: {c:?}");
    let (rel, c) = client_run("reliable");
    assert_eq!(
        rel,
        (0..300).collect::<Vec<_>>(),
        "reliable: every event once, in order"
    );
    assert!(
        c.resent > 0,
        "the subscriber's acknowledgements were sent again: {c:?}"
    );
}
