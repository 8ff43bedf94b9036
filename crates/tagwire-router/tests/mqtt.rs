//! The MQTT listener (issue 28, item 4) driven by a library client
//! (rumqttc): QoS 1 both ways in MQTT 3.1.1, MQTT 5 reason codes, tokens as
//! passwords, the ACL on the MQTT client's identity, and bad input failing
//! its own connection only. The real mosquitto clients are in
//! `crates/tagwire-cli/tests/mqtt_cli.rs`.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use common::{alice_and_bob, ALICE, BOB};
use rumqttc::v5::mqttbytes::v5::{
    ConnectReturnCode as Code5, Packet as P5, PubAckReason, SubscribeReasonCode as Sub5,
};
use rumqttc::{ConnectReturnCode, Packet, QoS, SubscribeReasonCode};
use tagwire_router::mqtt::MqttConfig;
use tagwire_router::{Router, RouterConfig, RouterHandle};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);

fn router(mqtt: MqttConfig) -> RouterHandle {
    Router::start(RouterConfig {
        mqtt: MqttConfig {
            listen: "127.0.0.1:0".parse().ok(),
            ..mqtt
        },
        ..alice_and_bob()
    })
    .expect("start router")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// An MQTT 3.1.1 client whose events (or its final error) arrive on a channel.
fn client4(
    addr: SocketAddr,
    id: &str,
    password: Option<&str>,
) -> (
    rumqttc::AsyncClient,
    mpsc::UnboundedReceiver<Result<Packet, String>>,
) {
    let mut o = rumqttc::MqttOptions::new(id, addr.ip().to_string(), addr.port());
    o.set_keep_alive(Duration::from_secs(30));
    o.set_max_packet_size(1 << 20, 1 << 20);
    if let Some(p) = password {
        o.set_credentials("user", p);
    }
    let (client, mut el) = rumqttc::AsyncClient::new(o, 64);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(rumqttc::Event::Incoming(p)) => {
                    if tx.send(Ok(p)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(format!("{e:?}")));
                    return;
                }
            }
        }
    });
    (client, rx)
}

/// An MQTT 5 client, likewise.
fn client5(
    addr: SocketAddr,
    id: &str,
    password: Option<&str>,
) -> (
    rumqttc::v5::AsyncClient,
    mpsc::UnboundedReceiver<Result<P5, String>>,
) {
    let mut o = rumqttc::v5::MqttOptions::new(id, addr.ip().to_string(), addr.port());
    o.set_keep_alive(Duration::from_secs(30));
    if let Some(p) = password {
        o.set_credentials("user", p);
    }
    let (client, mut el) = rumqttc::v5::AsyncClient::new(o, 64);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(rumqttc::v5::Event::Incoming(p)) => {
                    if tx.send(Ok(p)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(format!("{e:?}")));
                    return;
                }
            }
        }
    });
    (client, rx)
}

/// The next item that `pick` accepts (others are skipped), within `WAIT`.
async fn next<T: std::fmt::Debug, R>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    mut pick: impl FnMut(&T) -> Option<R>,
) -> R {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let item = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("nothing expected arrived in time")
            .expect("the client's event loop ended");
        if let Some(r) = pick(&item) {
            return r;
        }
    }
}

#[test]
fn qos1_round_trip_in_mqtt_311() {
    let h = router(MqttConfig::default());
    let addr = h.mqtt_addr().expect("mqtt listener");
    rt().block_on(async {
        let (sub, mut sub_rx) = client4(addr, "sub311", Some(BOB));
        next(&mut sub_rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        sub.subscribe("demo/+/temp", QoS::AtLeastOnce)
            .await
            .expect("queue subscribe");
        let granted = next(&mut sub_rx, |p| match p {
            Ok(Packet::SubAck(a)) => Some(a.return_codes.clone()),
            _ => None,
        })
        .await;
        assert_eq!(
            granted,
            vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
        );

        let (publ, mut pub_rx) = client4(addr, "pub311", Some(BOB));
        next(&mut pub_rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        publ.publish("demo/room1/temp", QoS::AtLeastOnce, false, "21.5")
            .await
            .expect("queue publish");
        // The gateway acknowledges the QoS 1 publish...
        next(&mut pub_rx, |p| {
            matches!(p, Ok(Packet::PubAck(_))).then_some(())
        })
        .await;
        // ...and the subscriber gets it at QoS 1 on the same topic.
        let got = next(&mut sub_rx, |p| match p {
            Ok(Packet::Publish(p)) => Some(p.clone()),
            _ => None,
        })
        .await;
        assert_eq!(got.topic, "demo/room1/temp");
        assert_eq!(&got.payload[..], b"21.5");
        assert_eq!(got.qos, QoS::AtLeastOnce);
        assert_ne!(got.pkid, 0);
    });
}

#[test]
fn mqtt5_reason_codes_name_acl_refusals() {
    let h = router(MqttConfig::default());
    let addr = h.mqtt_addr().expect("mqtt listener");
    rt().block_on(async {
        let (alice, mut rx) = client5(addr, "alice5", Some(ALICE));
        next(&mut rx, |p| matches!(p, Ok(P5::ConnAck(_))).then_some(())).await;
        alice
            .subscribe_many([
                rumqttc::v5::mqttbytes::v5::Filter::new(
                    "alice/#",
                    rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                ),
                rumqttc::v5::mqttbytes::v5::Filter::new(
                    "bob/#",
                    rumqttc::v5::mqttbytes::QoS::AtMostOnce,
                ),
                rumqttc::v5::mqttbytes::v5::Filter::new(
                    "a//b",
                    rumqttc::v5::mqttbytes::QoS::AtMostOnce,
                ),
            ])
            .await
            .expect("queue subscribe");
        let codes = next(&mut rx, |p| match p {
            Ok(P5::SubAck(a)) => Some(a.return_codes.clone()),
            _ => None,
        })
        .await;
        assert_eq!(
            codes,
            vec![
                Sub5::Success(rumqttc::v5::mqttbytes::QoS::AtLeastOnce),
                Sub5::NotAuthorized,
                Sub5::TopicFilterInvalid
            ]
        );
        // A publish outside alice's rules: a negative PUBACK, connection kept.
        alice
            .publish(
                "bob/x",
                rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                false,
                "no",
            )
            .await
            .expect("queue publish");
        let (reason, text) = next(&mut rx, |p| match p {
            Ok(P5::PubAck(a)) => Some((
                a.reason,
                a.properties.as_ref().and_then(|p| p.reason_string.clone()),
            )),
            _ => None,
        })
        .await;
        assert_eq!(reason, PubAckReason::NotAuthorized);
        let text = text.expect("a reason string");
        assert!(
            text.contains("token:alice") && text.contains("/bob/x"),
            "{text}"
        );
        // Within the rules, it flows back to alice's own subscription.
        alice
            .publish(
                "alice/x",
                rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                false,
                "yes",
            )
            .await
            .expect("queue publish");
        let got = next(&mut rx, |p| match p {
            Ok(P5::Publish(p)) => Some(p.clone()),
            _ => None,
        })
        .await;
        assert_eq!(&got.topic[..], b"alice/x");
        assert_eq!(&got.payload[..], b"yes");
    });
}

#[test]
fn a_wrong_or_missing_password_is_refused_in_connack() {
    let h = router(MqttConfig::default());
    let addr = h.mqtt_addr().expect("mqtt listener");
    rt().block_on(async {
        let (_c, mut rx) = client4(addr, "wrong", Some("not-a-token-0123456789"));
        let e = next(&mut rx, |p| p.as_ref().err().cloned()).await;
        assert!(
            e.contains(&format!("{:?}", ConnectReturnCode::BadUserNamePassword)),
            "{e}"
        );
        let (_c, mut rx) = client4(addr, "none", None);
        let e = next(&mut rx, |p| p.as_ref().err().cloned()).await;
        assert!(
            e.contains(&format!("{:?}", ConnectReturnCode::NotAuthorized)),
            "{e}"
        );
        let (_c, mut rx) = client5(addr, "none5", None);
        let e = next(&mut rx, |p| p.as_ref().err().cloned()).await;
        assert!(e.contains(&format!("{:?}", Code5::NotAuthorized)), "{e}");
    });
}

#[test]
fn anonymous_clients_get_the_configured_identity_only() {
    let h = router(MqttConfig {
        anonymous: Some("alice".into()),
        ..MqttConfig::default()
    });
    let addr = h.mqtt_addr().expect("mqtt listener");
    rt().block_on(async {
        let (c, mut rx) = client4(addr, "anon", None);
        next(&mut rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        c.subscribe_many([
            rumqttc::SubscribeFilter::new("alice/#".into(), QoS::AtMostOnce),
            rumqttc::SubscribeFilter::new("#".into(), QoS::AtMostOnce),
        ])
        .await
        .expect("queue subscribe");
        let codes = next(&mut rx, |p| match p {
            Ok(Packet::SubAck(a)) => Some(a.return_codes.clone()),
            _ => None,
        })
        .await;
        assert_eq!(
            codes,
            vec![
                SubscribeReasonCode::Success(QoS::AtMostOnce),
                SubscribeReasonCode::Failure
            ]
        );
    });
}

#[test]
fn an_mqtt_311_publish_outside_the_acl_closes_that_connection_only() {
    let h = router(MqttConfig::default());
    let addr = h.mqtt_addr().expect("mqtt listener");
    rt().block_on(async {
        let (bob, mut bob_rx) = client4(addr, "bob", Some(BOB));
        next(&mut bob_rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        let (alice, mut rx) = client4(addr, "alice", Some(ALICE));
        next(&mut rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        alice
            .publish("bob/x", QoS::AtLeastOnce, false, "no")
            .await
            .expect("queue publish");
        // 3.1.1 has no negative PUBACK: the connection is closed.
        next(&mut rx, |p| p.as_ref().err().cloned()).await;
        // Bob is still served.
        bob.subscribe("x", QoS::AtMostOnce).await.expect("queue");
        next(&mut bob_rx, |p| {
            matches!(p, Ok(Packet::SubAck(_))).then_some(())
        })
        .await;
    });
}

/// Garbage, a non-CONNECT first packet and an oversized packet each end
/// their own connection; the listener keeps serving.
#[test]
fn garbage_fails_its_connection_alone() {
    let h = router(MqttConfig {
        max_packet: 4096,
        connect_timeout: 2,
        ..MqttConfig::default()
    });
    let addr = h.mqtt_addr().expect("mqtt listener");
    let inputs: Vec<Vec<u8>> = vec![
        vec![0xff; 64],
        vec![0xC0, 0x00],                   // PINGREQ before CONNECT
        vec![0x10, 0xff, 0xff, 0xff, 0x7f], // a 256 MiB CONNECT
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0x10, 0x0a, 0, 4, b'M', b'Q', b'T', b'T', 9, 2, 0, 30], // level 9
    ];
    for bytes in inputs {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        s.write_all(&bytes).expect("write");
        let mut rest = Vec::new();
        // Closed by the gateway (EOF), perhaps after a CONNACK refusal.
        s.read_to_end(&mut rest)
            .unwrap_or_else(|e| panic!("{bytes:?}: not closed: {e}"));
        assert!(rest.len() <= 4, "{bytes:?}: {rest:?}");
    }
    rt().block_on(async {
        let (_c, mut rx) = client4(addr, "after", Some(BOB));
        next(&mut rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
    });
}

/// A subscriber that never reads does not stop a publisher or another
/// subscriber: its own queue drops the oldest QoS 0 deliveries.
#[test]
fn a_client_that_never_reads_hurts_only_itself() {
    let h = router(MqttConfig {
        queue_length: 16,
        ..MqttConfig::default()
    });
    let addr = h.mqtt_addr().expect("mqtt listener");
    // The stuck subscriber: CONNECT and SUBSCRIBE by hand, then never read.
    let mut stuck = std::net::TcpStream::connect(addr).expect("connect");
    let mut connect = rumqttc::Connect::new("stuck");
    connect.set_login("u", BOB);
    let mut b = bytes::BytesMut::new();
    rumqttc::Packet::Connect(connect)
        .write(&mut b, usize::MAX)
        .expect("encode");
    rumqttc::Packet::Subscribe(rumqttc::Subscribe::new("flood/#", QoS::AtMostOnce))
        .write(&mut b, usize::MAX)
        .expect("encode");
    stuck.write_all(&b).expect("write");
    rt().block_on(async {
        let (sub, mut sub_rx) = client4(addr, "reader", Some(BOB));
        next(&mut sub_rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        sub.subscribe("flood/#", QoS::AtMostOnce)
            .await
            .expect("queue");
        next(&mut sub_rx, |p| {
            matches!(p, Ok(Packet::SubAck(_))).then_some(())
        })
        .await;
        let (publ, mut pub_rx) = client4(addr, "flooder", Some(BOB));
        next(&mut pub_rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        let payload = vec![7u8; 16 * 1024];
        // 32 MiB in total: far more than the stuck socket's buffers.
        for i in 0..2048u32 {
            publ.publish("flood/x", QoS::AtMostOnce, false, payload.clone())
                .await
                .expect("queue publish");
            if i % 64 == 63 {
                // Let the publisher's own loop drain.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        publ.publish("flood/last", QoS::AtLeastOnce, false, "end")
            .await
            .expect("queue publish");
        // The reading subscriber sees the end of the flood.
        next(&mut sub_rx, |p| match p {
            Ok(Packet::Publish(p)) if p.topic == "flood/last" => Some(()),
            _ => None,
        })
        .await;
    });
    drop(stuck);
}

#[test]
fn with_authentication_off_a_password_is_ignored_and_the_client_is_served() {
    // The in-process connection would otherwise hold a token that a router
    // with authentication off cannot prove (docs/protocol.md, "Token proof").
    let h = Router::start(RouterConfig {
        mqtt: MqttConfig {
            listen: "127.0.0.1:0".parse().ok(),
            ..MqttConfig::default()
        },
        auth: tagwire_router::auth::AuthConfig {
            enabled: false,
            ..Default::default()
        },
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    })
    .expect("start router");
    let addr = h.mqtt_addr().expect("mqtt listener");
    rt().block_on(async {
        let (c, mut rx) = client4(addr, "open311", Some("any-password-at-all"));
        next(&mut rx, |p| {
            matches!(p, Ok(Packet::ConnAck(_))).then_some(())
        })
        .await;
        c.subscribe("open/x", QoS::AtLeastOnce)
            .await
            .expect("queue subscribe");
        let granted = next(&mut rx, |p| match p {
            Ok(Packet::SubAck(a)) => Some(a.return_codes.clone()),
            _ => None,
        })
        .await;
        assert_eq!(
            granted,
            vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
        );
    });
}
