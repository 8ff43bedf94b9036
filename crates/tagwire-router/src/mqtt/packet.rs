//! MQTT packets in one shape for both protocol versions: [`decode_connect`]
//! reads the first packet and tells the version; [`decode`] and [`encode`]
//! then speak that version. The bytes are parsed by rumqttc's `mqttbytes`
//! codec (v4 = MQTT 3.1.1, v5); this module only maps its types to the
//! few the gateway acts on, and names what was wrong in a [`PacketError`].

use bytes::{Bytes, BytesMut};
use rumqttc::mqttbytes as m4;
use rumqttc::v5::mqttbytes as m5;

/// The MQTT protocol version of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// MQTT 3.1.1 (protocol level 4).
    V311,
    /// MQTT 5.
    V5,
}

/// Why a packet could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// The peer's bytes are not a valid packet.
    #[error("malformed MQTT packet: {0}")]
    Malformed(String),
    /// Larger than the listener accepts.
    #[error("MQTT packet of {len} bytes is over the limit of {max} ([mqtt] max_packet)")]
    TooLarge {
        /// Its remaining length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The first packet is not a CONNECT.
    #[error("the first MQTT packet must be CONNECT, got packet type {0}")]
    NotConnect(u8),
    /// A protocol level other than 4 (3.1.1) or 5.
    #[error("MQTT protocol level {0} is not supported (3.1.1 = 4 and 5 are)")]
    UnsupportedVersion(u8),
}

/// A client's last will.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// Topic name as sent.
    pub topic: String,
    /// Payload.
    pub payload: Bytes,
    /// QoS asked (0..=2).
    pub qos: u8,
    /// Retain flag.
    pub retain: bool,
}

/// What a CONNECT says, in either version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol version.
    pub version: Version,
    /// Client identifier (may be empty).
    pub client_id: String,
    /// Keep alive, seconds (0: none asked).
    pub keep_alive: u16,
    /// Clean session (3.1.1) / clean start (5).
    pub clean: bool,
    /// User name, if given (logged only).
    pub username: Option<String>,
    /// Password, if given: the tagwire token.
    pub password: Option<String>,
    /// Last will.
    pub will: Option<Will>,
    /// MQTT 5: the client's receive maximum (QoS 1/2 in flight to it).
    pub receive_max: Option<u16>,
    /// MQTT 5: the largest packet the client accepts.
    pub max_packet: Option<u32>,
    /// MQTT 5: an extended authentication method (not supported).
    pub auth_method: Option<String>,
}

/// A packet from an established client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// PUBLISH.
    Publish {
        /// Topic name as sent.
        topic: String,
        /// QoS (0..=2).
        qos: u8,
        /// Retain flag.
        retain: bool,
        /// Packet id (0 for QoS 0).
        pkid: u16,
        /// Payload.
        payload: Bytes,
        /// MQTT 5 topic alias, if any (not offered, so refused).
        topic_alias: Option<u16>,
    },
    /// PUBACK of a QoS 1 delivery.
    PubAck(u16),
    /// PUBREL of a QoS 2 publish.
    PubRel(u16),
    /// PUBREC or PUBCOMP: the gateway never sends QoS 2, so unexpected.
    UnexpectedAck(&'static str),
    /// SUBSCRIBE: packet id and `(filter, qos)` pairs.
    Subscribe {
        /// Packet id.
        pkid: u16,
        /// Filters with their maximum QoS.
        filters: Vec<(String, u8)>,
    },
    /// UNSUBSCRIBE.
    Unsubscribe {
        /// Packet id.
        pkid: u16,
        /// Filters.
        filters: Vec<String>,
    },
    /// PINGREQ.
    PingReq,
    /// DISCONNECT; MQTT 5 reason 0x04 asks for the will anyway.
    Disconnect {
        /// Whether the will is to be published (MQTT 5 reason 0x04).
        with_will: bool,
    },
    /// A packet a client must not send now (a second CONNECT, a server
    /// packet, AUTH): the connection fails naming it.
    Unexpected(&'static str),
}

/// Why the gateway refuses something, mapped to each version's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Accepted.
    Success,
    /// The identity may not do this (ACL).
    NotAuthorized,
    /// No or wrong password (token).
    BadCredentials,
    /// The topic has no tag equivalent.
    TopicInvalid,
    /// The filter has no pattern equivalent.
    FilterInvalid,
    /// Over a limit (subscriptions, queue).
    QuotaExceeded,
    /// Too large.
    PacketTooLarge,
    /// Malformed or out of order.
    ProtocolError,
    /// The daemon refused for another reason.
    Unspecified,
    /// Too many connections.
    ServerBusy,
    /// The daemon is stopping.
    ShuttingDown,
    /// No packet within 1.5 × keep alive.
    KeepAliveTimeout,
    /// Another connection took this client id.
    SessionTakenOver,
    /// Protocol level not supported.
    UnsupportedVersion,
    /// MQTT 5 retained messages are not offered.
    RetainNotSupported,
    /// MQTT 5 topic aliases are not offered.
    TopicAliasInvalid,
    /// MQTT 5 extended authentication is not offered.
    BadAuthMethod,
}

impl Reason {
    fn v5_code(self) -> u8 {
        match self {
            Reason::Success => 0x00,
            Reason::Unspecified => 0x80,
            Reason::ProtocolError => 0x82,
            Reason::NotAuthorized => 0x87,
            Reason::BadCredentials => 0x86,
            Reason::ServerBusy => 0x89,
            Reason::ShuttingDown => 0x8B,
            Reason::BadAuthMethod => 0x8C,
            Reason::KeepAliveTimeout => 0x8D,
            Reason::SessionTakenOver => 0x8E,
            Reason::FilterInvalid => 0x8F,
            Reason::TopicInvalid => 0x90,
            Reason::TopicAliasInvalid => 0x94,
            Reason::PacketTooLarge => 0x95,
            Reason::QuotaExceeded => 0x97,
            Reason::RetainNotSupported => 0x9A,
            Reason::UnsupportedVersion => 0x84,
        }
    }
}

/// A packet to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// CONNACK.
    ConnAck {
        /// Accepted, or why not.
        reason: Reason,
        /// MQTT 5: what the server offers (ignored for 3.1.1).
        offer: Offer,
        /// MQTT 5: a human-readable reason.
        text: Option<String>,
    },
    /// PUBLISH of a delivery.
    Publish {
        /// Topic name.
        topic: String,
        /// 0 or 1.
        qos: u8,
        /// Packet id (QoS 1).
        pkid: u16,
        /// Payload (shared, not copied until encoded).
        payload: Bytes,
    },
    /// PUBACK (MQTT 5: with a reason).
    PubAck {
        /// Packet id.
        pkid: u16,
        /// Outcome.
        reason: Reason,
        /// MQTT 5 reason string.
        text: Option<String>,
    },
    /// PUBREC of a QoS 2 publish.
    PubRec {
        /// Packet id.
        pkid: u16,
        /// Outcome.
        reason: Reason,
        /// MQTT 5 reason string.
        text: Option<String>,
    },
    /// PUBCOMP.
    PubComp(u16),
    /// SUBACK: per filter, the granted QoS or why not.
    SubAck {
        /// Packet id.
        pkid: u16,
        /// Per filter.
        codes: Vec<Result<u8, Reason>>,
        /// MQTT 5 reason string (the first refusal's).
        text: Option<String>,
    },
    /// UNSUBACK.
    UnsubAck {
        /// Packet id.
        pkid: u16,
        /// Number of filters.
        count: usize,
    },
    /// PINGRESP.
    PingResp,
    /// MQTT 5 DISCONNECT from the server (nothing is sent for 3.1.1).
    Disconnect {
        /// Why.
        reason: Reason,
        /// Reason string.
        text: String,
    },
}

/// What the gateway tells an MQTT 5 client in CONNACK.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Offer {
    /// QoS 1/2 publishes it may have unacknowledged.
    pub receive_max: u16,
    /// Largest packet accepted.
    pub max_packet: u32,
    /// Keep alive the server imposes, if it differs from the client's.
    pub server_keep_alive: Option<u16>,
    /// The client id given to a client that sent none.
    pub assigned_client_id: Option<String>,
}

fn bad(e: impl std::fmt::Display) -> PacketError {
    PacketError::Malformed(e.to_string())
}

/// The first byte and the whole packet's length, once the packet is
/// complete in `buf`: `Ok(None)` until then.
fn frame(buf: &BytesMut, max: usize) -> Result<Option<(u8, usize)>, PacketError> {
    match m4::check(buf.iter(), max) {
        Ok(h) => Ok(Some((buf[0], h.frame_length()))),
        Err(m4::Error::InsufficientBytes(_)) => Ok(None),
        Err(m4::Error::PayloadSizeLimitExceeded(len)) => Err(PacketError::TooLarge { len, max }),
        Err(e) => Err(bad(e)),
    }
}

/// Reads the first packet, which must be CONNECT, from `buf` (at most `max`
/// bytes of remaining length): `Ok(None)` while incomplete.
pub fn decode_connect(buf: &mut BytesMut, max: usize) -> Result<Option<Connect>, PacketError> {
    // Not a CONNECT: say so at once rather than wait for the whole packet.
    if let Some(b) = buf.first().filter(|b| *b >> 4 != 1) {
        return Err(PacketError::NotConnect(b >> 4));
    }
    let Some((byte1, _)) = frame(buf, max)? else {
        return Ok(None);
    };
    if byte1 >> 4 != 1 {
        return Err(PacketError::NotConnect(byte1 >> 4));
    }
    // Fixed header, then the protocol name (2-byte length, "MQTT") and level.
    let header_len = 1
        + buf[1..]
            .iter()
            .take(4)
            .take_while(|b| *b & 0x80 != 0)
            .count()
        + 1;
    let level = match buf.get(header_len..header_len + 7) {
        Some([0, 4, b'M', b'Q', b'T', b'T', level]) => *level,
        Some([0, 6, b'M', b'Q', b'I', b's', b'd']) => {
            return Err(PacketError::UnsupportedVersion(3))
        }
        _ => return Err(bad("CONNECT without the protocol name MQTT")),
    };
    match level {
        4 => match m4::v4::Packet::read(buf, max).map_err(bad)? {
            m4::v4::Packet::Connect(c) => Ok(Some(Connect {
                version: Version::V311,
                client_id: c.client_id,
                keep_alive: c.keep_alive,
                clean: c.clean_session,
                username: c.login.as_ref().map(|l| l.username.clone()),
                password: c.login.map(|l| l.password),
                will: c.last_will.map(|w| Will {
                    topic: w.topic,
                    payload: w.message,
                    qos: w.qos as u8,
                    retain: w.retain,
                }),
                receive_max: None,
                max_packet: None,
                auth_method: None,
            })),
            _ => Err(bad("CONNECT expected")),
        },
        5 => {
            let max5 = u32::try_from(max).unwrap_or(u32::MAX);
            match m5::v5::Packet::read(buf, Some(max5)).map_err(bad)? {
                m5::v5::Packet::Connect(c, will, login) => {
                    let props = c.properties.unwrap_or_default();
                    let will = match will {
                        Some(w) => Some(Will {
                            topic: String::from_utf8(w.topic.to_vec())
                                .map_err(|_| bad("will topic is not UTF-8"))?,
                            payload: w.message,
                            qos: w.qos as u8,
                            retain: w.retain,
                        }),
                        None => None,
                    };
                    Ok(Some(Connect {
                        version: Version::V5,
                        client_id: c.client_id,
                        keep_alive: c.keep_alive,
                        clean: c.clean_start,
                        username: login.as_ref().map(|l| l.username.clone()),
                        password: login.map(|l| l.password),
                        will,
                        receive_max: props.receive_maximum,
                        max_packet: props.max_packet_size,
                        auth_method: props.authentication_method,
                    }))
                }
                _ => Err(bad("CONNECT expected")),
            }
        }
        other => Err(PacketError::UnsupportedVersion(other)),
    }
}

/// Reads the next packet of an established connection: `Ok(None)` while
/// incomplete. A decoding error ends the connection (the bytes are gone).
pub fn decode(
    version: Version,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<Incoming>, PacketError> {
    let Some((byte1, len)) = frame(buf, max)? else {
        return Ok(None);
    };
    // A DISCONNECT without a body is the normal one in both versions
    // (mqttbytes' v5 reader wants a reason code).
    if byte1 >> 4 == 14 && len == 2 {
        let _ = buf.split_to(2);
        return Ok(Some(Incoming::Disconnect { with_will: false }));
    }
    match version {
        Version::V311 => {
            use m4::v4::Packet as P;
            Ok(Some(match P::read(buf, max).map_err(bad)? {
                P::Publish(p) => Incoming::Publish {
                    topic: p.topic,
                    qos: p.qos as u8,
                    retain: p.retain,
                    pkid: p.pkid,
                    payload: p.payload,
                    topic_alias: None,
                },
                P::PubAck(a) => Incoming::PubAck(a.pkid),
                P::PubRel(r) => Incoming::PubRel(r.pkid),
                P::PubRec(_) => Incoming::UnexpectedAck("PUBREC"),
                P::PubComp(_) => Incoming::UnexpectedAck("PUBCOMP"),
                P::Subscribe(s) => Incoming::Subscribe {
                    pkid: s.pkid,
                    filters: s
                        .filters
                        .into_iter()
                        .map(|f| (f.path, f.qos as u8))
                        .collect(),
                },
                P::Unsubscribe(u) => Incoming::Unsubscribe {
                    pkid: u.pkid,
                    filters: u.topics,
                },
                P::PingReq => Incoming::PingReq,
                P::Disconnect => Incoming::Disconnect { with_will: false },
                P::Connect(_) => Incoming::Unexpected("a second CONNECT"),
                P::ConnAck(_) => Incoming::Unexpected("CONNACK"),
                P::SubAck(_) => Incoming::Unexpected("SUBACK"),
                P::UnsubAck(_) => Incoming::Unexpected("UNSUBACK"),
                P::PingResp => Incoming::Unexpected("PINGRESP"),
            }))
        }
        Version::V5 => {
            use m5::v5::Packet as P;
            let max5 = u32::try_from(max).unwrap_or(u32::MAX);
            Ok(Some(match P::read(buf, Some(max5)).map_err(bad)? {
                P::Publish(p) => Incoming::Publish {
                    topic: String::from_utf8(p.topic.to_vec())
                        .map_err(|_| bad("topic is not UTF-8"))?,
                    qos: p.qos as u8,
                    retain: p.retain,
                    pkid: p.pkid,
                    payload: p.payload,
                    topic_alias: p.properties.and_then(|p| p.topic_alias),
                },
                P::PubAck(a) => Incoming::PubAck(a.pkid),
                P::PubRel(r) => Incoming::PubRel(r.pkid),
                P::PubRec(_) => Incoming::UnexpectedAck("PUBREC"),
                P::PubComp(_) => Incoming::UnexpectedAck("PUBCOMP"),
                P::Subscribe(s) => Incoming::Subscribe {
                    pkid: s.pkid,
                    filters: s
                        .filters
                        .into_iter()
                        .map(|f| (f.path, f.qos as u8))
                        .collect(),
                },
                P::Unsubscribe(u) => Incoming::Unsubscribe {
                    pkid: u.pkid,
                    filters: u.filters,
                },
                P::PingReq(_) => Incoming::PingReq,
                P::Disconnect(d) => Incoming::Disconnect {
                    with_will: d.reason_code
                        == m5::v5::DisconnectReasonCode::DisconnectWithWillMessage,
                },
                P::Connect(..) => Incoming::Unexpected("a second CONNECT"),
                P::Auth(_) => Incoming::Unexpected("AUTH (extended authentication)"),
                P::ConnAck(_) => Incoming::Unexpected("CONNACK"),
                P::SubAck(_) => Incoming::Unexpected("SUBACK"),
                P::UnsubAck(_) => Incoming::Unexpected("UNSUBACK"),
                P::PingResp(_) => Incoming::Unexpected("PINGRESP"),
            }))
        }
    }
}

fn v4_qos(q: u8) -> m4::QoS {
    match q {
        0 => m4::QoS::AtMostOnce,
        1 => m4::QoS::AtLeastOnce,
        _ => m4::QoS::ExactlyOnce,
    }
}

fn v5_qos(q: u8) -> m5::QoS {
    match q {
        0 => m5::QoS::AtMostOnce,
        1 => m5::QoS::AtLeastOnce,
        _ => m5::QoS::ExactlyOnce,
    }
}

/// Appends `packet` in `version`'s encoding to `out`. Fails only for a
/// packet larger than MQTT can carry (the caller bounds payloads first).
pub fn encode(version: Version, packet: &Outgoing, out: &mut BytesMut) -> Result<(), PacketError> {
    let r = match version {
        Version::V311 => encode_v4(packet, out),
        Version::V5 => encode_v5(packet, out),
    };
    r.map_err(|e| PacketError::Malformed(format!("cannot encode: {e}")))
}

fn encode_v4(packet: &Outgoing, out: &mut BytesMut) -> Result<(), String> {
    use m4::v4::*;
    let p = match packet {
        Outgoing::ConnAck { reason, .. } => Packet::ConnAck(ConnAck::new(
            match reason {
                Reason::Success => ConnectReturnCode::Success,
                Reason::UnsupportedVersion => ConnectReturnCode::RefusedProtocolVersion,
                Reason::BadCredentials => ConnectReturnCode::BadUserNamePassword,
                Reason::ServerBusy | Reason::ShuttingDown => ConnectReturnCode::ServiceUnavailable,
                Reason::ProtocolError => ConnectReturnCode::BadClientId,
                _ => ConnectReturnCode::NotAuthorized,
            },
            false,
        )),
        Outgoing::Publish {
            topic,
            qos,
            pkid,
            payload,
        } => {
            let mut p = Publish::from_bytes(topic.clone(), v4_qos(*qos), payload.clone());
            p.pkid = *pkid;
            Packet::Publish(p)
        }
        Outgoing::PubAck { pkid, .. } => Packet::PubAck(PubAck::new(*pkid)),
        Outgoing::PubRec { pkid, .. } => Packet::PubRec(PubRec::new(*pkid)),
        Outgoing::PubComp(pkid) => Packet::PubComp(PubComp::new(*pkid)),
        Outgoing::SubAck { pkid, codes, .. } => Packet::SubAck(SubAck::new(
            *pkid,
            codes
                .iter()
                .map(|c| match c {
                    Ok(q) => SubscribeReasonCode::Success(v4_qos(*q)),
                    Err(_) => SubscribeReasonCode::Failure,
                })
                .collect(),
        )),
        Outgoing::UnsubAck { pkid, .. } => Packet::UnsubAck(UnsubAck::new(*pkid)),
        Outgoing::PingResp => Packet::PingResp,
        Outgoing::Disconnect { .. } => return Ok(()),
    };
    p.write(out, usize::MAX)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn encode_v5(packet: &Outgoing, out: &mut BytesMut) -> Result<(), String> {
    use m5::v5::*;
    let p = match packet {
        Outgoing::ConnAck {
            reason,
            offer,
            text,
        } => {
            use ConnectReturnCode as C;
            let code = match reason {
                Reason::Success => C::Success,
                Reason::NotAuthorized => C::NotAuthorized,
                Reason::BadCredentials => C::BadUserNamePassword,
                Reason::ServerBusy => C::ServerBusy,
                Reason::ShuttingDown => C::ServerUnavailable,
                Reason::UnsupportedVersion => C::UnsupportedProtocolVersion,
                Reason::ProtocolError => C::ProtocolError,
                Reason::BadAuthMethod => C::BadAuthenticationMethod,
                Reason::TopicInvalid => C::TopicNameInvalid,
                Reason::PacketTooLarge => C::PacketTooLarge,
                Reason::QuotaExceeded => C::QuotaExceeded,
                Reason::RetainNotSupported => C::RetainNotSupported,
                _ => C::UnspecifiedError,
            };
            let properties = (*reason == Reason::Success || text.is_some()).then(|| {
                let success = *reason == Reason::Success;
                ConnAckProperties {
                    session_expiry_interval: None,
                    receive_max: success.then_some(offer.receive_max),
                    max_qos: None,
                    retain_available: success.then_some(0),
                    max_packet_size: success.then_some(offer.max_packet),
                    assigned_client_identifier: offer.assigned_client_id.clone(),
                    topic_alias_max: None,
                    reason_string: text.clone(),
                    user_properties: Vec::new(),
                    wildcard_subscription_available: None,
                    subscription_identifiers_available: success.then_some(0),
                    shared_subscription_available: success.then_some(0),
                    server_keep_alive: offer.server_keep_alive,
                    response_information: None,
                    server_reference: None,
                    authentication_method: None,
                    authentication_data: None,
                }
            });
            Packet::ConnAck(ConnAck {
                session_present: false,
                code,
                properties,
            })
        }
        Outgoing::Publish {
            topic,
            qos,
            pkid,
            payload,
        } => {
            let mut p = Publish::new(topic.as_str(), v5_qos(*qos), payload.clone(), None);
            p.pkid = *pkid;
            Packet::Publish(p)
        }
        Outgoing::PubAck { pkid, reason, text } => Packet::PubAck(PubAck {
            pkid: *pkid,
            reason: match reason {
                Reason::Success => PubAckReason::Success,
                Reason::NotAuthorized => PubAckReason::NotAuthorized,
                Reason::TopicInvalid => PubAckReason::TopicNameInvalid,
                Reason::QuotaExceeded | Reason::PacketTooLarge => PubAckReason::QuotaExceeded,
                _ => PubAckReason::UnspecifiedError,
            },
            properties: text.as_ref().map(|t| PubAckProperties {
                reason_string: Some(t.clone()),
                user_properties: Vec::new(),
            }),
        }),
        Outgoing::PubRec { pkid, reason, text } => Packet::PubRec(PubRec {
            pkid: *pkid,
            reason: match reason {
                Reason::Success => PubRecReason::Success,
                Reason::NotAuthorized => PubRecReason::NotAuthorized,
                Reason::TopicInvalid => PubRecReason::TopicNameInvalid,
                Reason::QuotaExceeded | Reason::PacketTooLarge => PubRecReason::QuotaExceeded,
                _ => PubRecReason::UnspecifiedError,
            },
            properties: text.as_ref().map(|t| PubRecProperties {
                reason_string: Some(t.clone()),
                user_properties: Vec::new(),
            }),
        }),
        Outgoing::PubComp(pkid) => Packet::PubComp(PubComp {
            pkid: *pkid,
            reason: PubCompReason::Success,
            properties: None,
        }),
        Outgoing::SubAck { pkid, codes, text } => Packet::SubAck(SubAck {
            pkid: *pkid,
            return_codes: codes
                .iter()
                .map(|c| match c {
                    Ok(q) => SubscribeReasonCode::Success(v5_qos(*q)),
                    Err(Reason::NotAuthorized) => SubscribeReasonCode::NotAuthorized,
                    Err(Reason::FilterInvalid) => SubscribeReasonCode::TopicFilterInvalid,
                    Err(Reason::QuotaExceeded) => SubscribeReasonCode::QuotaExceeded,
                    Err(_) => SubscribeReasonCode::Unspecified,
                })
                .collect(),
            properties: text.as_ref().map(|t| SubAckProperties {
                reason_string: Some(t.clone()),
                user_properties: Vec::new(),
            }),
        }),
        Outgoing::UnsubAck { pkid, count } => Packet::UnsubAck(UnsubAck {
            pkid: *pkid,
            reasons: vec![UnsubAckReason::Success; *count],
            properties: None,
        }),
        Outgoing::PingResp => Packet::PingResp(PingResp),
        Outgoing::Disconnect { reason, text } => {
            let code = reason.v5_code();
            let reason_code = DisconnectReasonCode::try_from(code)
                .unwrap_or(DisconnectReasonCode::UnspecifiedError);
            Packet::Disconnect(Disconnect {
                reason_code,
                properties: Some(DisconnectProperties {
                    session_expiry_interval: None,
                    reason_string: Some(text.clone()),
                    user_properties: Vec::new(),
                    server_reference: None,
                }),
            })
        }
    };
    p.write(out, None).map(|_| ()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4_bytes(p: m4::v4::Packet) -> BytesMut {
        let mut b = BytesMut::new();
        p.write(&mut b, usize::MAX).expect("encode");
        b
    }

    #[test]
    fn connect_tells_the_version_and_the_password() {
        let mut c = m4::v4::Connect::new("dev1");
        c.set_login("u", "secret-token");
        let mut b = v4_bytes(m4::v4::Packet::Connect(c));
        let got = decode_connect(&mut b, 1024).expect("valid").expect("whole");
        assert_eq!(got.version, Version::V311);
        assert_eq!(got.client_id, "dev1");
        assert_eq!(got.password.as_deref(), Some("secret-token"));
        assert!(b.is_empty());

        let mut b = BytesMut::new();
        m5::v5::Packet::Connect(
            m5::v5::Connect {
                keep_alive: 30,
                client_id: "five".into(),
                clean_start: true,
                properties: None,
            },
            None,
            None,
        )
        .write(&mut b, None)
        .expect("encode");
        let whole = b.clone();
        let mut part = BytesMut::from(&whole[..whole.len() - 1]);
        assert_eq!(decode_connect(&mut part, 1024).expect("so far valid"), None);
        let got = decode_connect(&mut b, 1024).expect("valid").expect("whole");
        assert_eq!(got.version, Version::V5);
        assert_eq!(got.keep_alive, 30);
    }

    #[test]
    fn bad_first_packets_are_named() {
        let mut b = v4_bytes(m4::v4::Packet::PingReq);
        assert!(matches!(
            decode_connect(&mut b, 1024),
            Err(PacketError::NotConnect(12))
        ));
        let mut c = v4_bytes(m4::v4::Packet::Connect(m4::v4::Connect::new("x")));
        c[8] = 3; // protocol level
        assert!(matches!(
            decode_connect(&mut c, 1024),
            Err(PacketError::UnsupportedVersion(3))
        ));
        let mut big = v4_bytes(m4::v4::Packet::Connect(m4::v4::Connect::new(
            "x".repeat(300),
        )));
        assert!(matches!(
            decode_connect(&mut big, 100),
            Err(PacketError::TooLarge { max: 100, .. })
        ));
    }

    #[test]
    fn an_empty_v5_disconnect_is_the_normal_one() {
        let mut b = BytesMut::from(&[0xE0u8, 0x00][..]);
        assert_eq!(
            decode(Version::V5, &mut b, 1024).expect("valid"),
            Some(Incoming::Disconnect { with_will: false })
        );
    }

    #[test]
    fn server_packets_encode_in_both_versions() {
        for v in [Version::V311, Version::V5] {
            let mut out = BytesMut::new();
            for p in [
                Outgoing::ConnAck {
                    reason: Reason::Success,
                    offer: Offer::default(),
                    text: None,
                },
                Outgoing::Publish {
                    topic: "a/b".into(),
                    qos: 1,
                    pkid: 7,
                    payload: Bytes::from_static(b"hi"),
                },
                Outgoing::PubAck {
                    pkid: 7,
                    reason: Reason::NotAuthorized,
                    text: Some("no".into()),
                },
                Outgoing::SubAck {
                    pkid: 1,
                    codes: vec![Ok(1), Err(Reason::NotAuthorized)],
                    text: None,
                },
                Outgoing::Disconnect {
                    reason: Reason::KeepAliveTimeout,
                    text: "idle".into(),
                },
            ] {
                encode(v, &p, &mut out).expect("encodes");
            }
            assert!(!out.is_empty());
        }
    }

    proptest! {
        /// Garbage never panics the decoder, in either state or version.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut b = BytesMut::from(&bytes[..]);
            let _ = decode_connect(&mut b, 256);
            for v in [Version::V311, Version::V5] {
                let mut b = BytesMut::from(&bytes[..]);
                for _ in 0..8 {
                    match decode(v, &mut b, 256) {
                        Ok(Some(_)) => continue,
                        _ => break,
                    }
                }
            }
        }
    }
}
