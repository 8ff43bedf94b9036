//! QoS at run time: the router keeps the layers of each level (daemon from
//! `[qos]`, tag layers from `tagwire admin qos /tag/**`, one session layer
//! per connection, one channel layer per subscription), resolves a
//! channel's effective QoS with core's [`resolve`], and puts it in force:
//! the channel's queue, priority and timing ([`Channel::apply_qos`]), the
//! DSCP of the subscriber's connection, and the scheduling of the lane that
//! serves it.
//!
//! Which tag layers apply to a channel: those whose pattern covers the
//! channel's pattern ([`Pattern::covers`]), the shorter (less specific)
//! pattern first so that the more specific one wins.
//!
//! A channel that does not set `dscp` (or sets `auto`) keeps its band's
//! DSCP on its connection; an explicit `dscp` marks the connection's socket.
//! A socket carries one marking, so the channels of one connection that set
//! `dscp` must agree: a different value is refused naming the channel that
//! holds the marking ([`check_dscp`]), never "the last one wins". A
//! connection's socket carries only its own identity's deliveries; a link's
//! carries every identity's, so its QoS needs the admin right
//! ([`check_link`]).
//! `sched` is a lane property (TAO's lanes): an explicit `sched` on a
//! channel re-schedules the lane of its connection's band, and so every
//! connection of that band.

use std::sync::Arc;

use tagwire_core::qos::{resolve, Level, Property, QosLayer, Resolved, Source};
use tagwire_core::tags::Pattern;
use tagwire_proto::admin::{
    ChannelShow, EndpointShow, LaneShow, QosChanged, QosResolved, QosSetting, Show, TagShow,
};
use tagwire_proto::ErrorCode;

use crate::channel::Channel;
use crate::priority::SchedPolicy;
use crate::state::lanes::LaneCommand;
use crate::state::State;

use crate::state::qos::{explicit_dscp, TagQos, MAX_TAG_LAYERS};

/// The layers above a channel's own: daemon, the tag layers covering
/// `pattern`, and its connection's session layer.
pub(crate) fn upper_layers<'a>(st: &'a State, conn: u64, pattern: &Pattern) -> Vec<&'a QosLayer> {
    let mut tags: Vec<&TagQos> = st
        .qos_tags
        .iter()
        .filter(|t| t.pattern.covers(pattern))
        .collect();
    tags.sort_by_key(|t| t.text.len());
    let mut layers = vec![&st.qos_daemon];
    layers.extend(tags.into_iter().map(|t| &t.layer));
    if let Some(c) = st.connections.get(&conn) {
        layers.push(&c.qos);
    }
    layers
}

/// Resolves a channel's QoS from the router's layers and its own.
pub(crate) fn resolve_channel(
    st: &State,
    conn: u64,
    pattern: &Pattern,
    own: &QosLayer,
) -> Resolved {
    let mut layers = upper_layers(st, conn, pattern);
    layers.push(own);
    resolve(&layers)
}

/// Checks what a resolved QoS asks of the connection and lane: the band it
/// names must be the connection's own (a live connection cannot move to
/// another lane; the client connects to that band's listener instead).
pub(crate) fn check_band(
    st: &State,
    conn: u64,
    resolved: &Resolved,
) -> Result<(), (ErrorCode, String)> {
    let Some(band) = &resolved.values().band else {
        return Ok(());
    };
    let here = st.connections.get(&conn).map(|c| c.band.clone());
    match here {
        Some(h) if *h != **band => Err((
            ErrorCode::BadRequest,
            format!(
                "band={band}: this channel's connection is served by band {h}; a connection cannot change lanes (connect to band {band}'s listener to use it)"
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses `sched` to an identity without the admin right: a lane serves
/// every connection of its band, so a channel's `sched` re-schedules what
/// others share (a non-admin could otherwise raise the `normal` lane above
/// `critical`, and it would stay so after the identity left).
pub(crate) fn check_lane_change(admin: bool, sets_sched: bool) -> Result<(), (ErrorCode, String)> {
    if admin || !sets_sched {
        return Ok(());
    }
    Err((
        ErrorCode::PermissionDenied,
        "sched changes the scheduling of the band's lane, which serves every connection of the band: it needs the admin right (an admin can set it with `tagwire admin qos`, or `[[bands]] sched` in the configuration)".into(),
    ))
}

/// Refuses a channel's `dscp` that differs from the one another channel of
/// the same connection set: both would mark one socket, and a per-channel
/// marking cannot be honoured per channel (issue 24 item 3). `global`: the
/// channel's router-wide id (its own claim, if any, does not count).
pub(crate) fn check_dscp(
    st: &State,
    conn: u64,
    global: u64,
    resolved: &Resolved,
) -> Result<(), (ErrorCode, String)> {
    let Some(code) = explicit_dscp(resolved) else {
        return Ok(());
    };
    // The claims of one connection agree (this check and the admin one keep
    // them so), so the first other one decides: O(1) per subscribe.
    match st.channels.dscp_claims(conn).find(|(g, _)| *g != global) {
        Some((other, held)) if held != code => {
            Err(dscp_conflict(st, conn, global, code, other, held))
        }
        _ => Ok(()),
    }
}

/// Checks the DSCP claims of the channels of every connection an admin
/// change reaches, as they will be once `plans` are in force (each plan:
/// the channel and its new claim): one connection's claims must agree.
fn check_planned_dscp(
    st: &State,
    plans: &[(u64, u64, Option<u8>)],
) -> Result<(), (ErrorCode, String)> {
    let mut by_conn: std::collections::BTreeMap<u64, std::collections::BTreeMap<u64, Option<u8>>> =
        Default::default();
    for &(conn, global, code) in plans {
        by_conn.entry(conn).or_default().insert(global, code);
    }
    for (conn, planned) in by_conn {
        let mut merged: std::collections::BTreeMap<u64, u8> =
            st.channels.dscp_claims(conn).collect();
        for (global, code) in planned {
            match code {
                Some(c) => merged.insert(global, c),
                None => merged.remove(&global),
            };
        }
        let mut claims = merged.into_iter();
        let Some((first, held)) = claims.next() else {
            continue;
        };
        if let Some((global, code)) = claims.find(|(_, c)| *c != held) {
            return Err(dscp_conflict(st, conn, global, code, first, held));
        }
    }
    Ok(())
}

/// The refusal of DSCP `code` for channel `global` of connection `conn`,
/// whose socket channel `other` marks with `held`.
fn dscp_conflict(
    st: &State,
    conn: u64,
    global: u64,
    code: u8,
    other: u64,
    held: u8,
) -> (ErrorCode, String) {
    let name = |g: u64| {
        let sub = g & u64::from(u32::MAX);
        match st.channels.get(g) {
            Some(ch) => format!("subscription {sub} of {}", excerpt(&ch.endpoint)),
            None => format!("subscription {sub}"),
        }
    };
    (
        ErrorCode::BadRequest,
        format!(
            "dscp={code} for {}: connection {conn}'s socket is marked DSCP {held} for {}, and a socket carries one DSCP, so channels of one connection cannot differ (use the same value, subscribe over a connection of another band, or set dscp for the whole session: `tagwire admin qos connection:{conn} dscp=…`)",
            name(global),
            name(other)
        ),
    )
}

/// The linked daemon whose link connection `conn` is, if it is one.
fn link_of(st: &State, conn: u64) -> Option<String> {
    st.fed
        .links
        .values()
        .find(|l| l.conn == conn || l.bands.values().any(|b| b.conn == conn))
        .map(|l| l.name.clone())
}

/// Refuses a QoS change of a link connection to an identity without the
/// admin right: a link carries the events of every identity whose
/// channels cross it, so its DSCP marks others' traffic.
fn check_link(st: &State, conn: u64, admin: bool) -> Result<(), (ErrorCode, String)> {
    match link_of(st, conn) {
        Some(name) if !admin => Err((
            ErrorCode::PermissionDenied,
            format!(
                "connection {conn} is the link to daemon {}: it carries the events of every identity whose channels cross it, so changing its QoS (its DSCP) needs the admin right",
                excerpt(&name)
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses `proxy=node:NAME` naming a daemon this network does not have
/// (a proxy must run somewhere events pass).
pub(crate) fn check_proxy(st: &State, resolved: &Resolved) -> Result<(), (ErrorCode, String)> {
    let tagwire_core::qos::ProxyMode::Node(name) = &resolved.values().proxy else {
        return Ok(());
    };
    crate::state::federation::Federation::daemon_named(st.node.topology(), name, "proxy=node:")
        .map(drop)
}

/// Puts `resolved` in force on `ch` and on its connection and lane.
/// Returns the events a smaller queue dropped.
pub(crate) fn put_in_force(
    st: &mut State,
    ch: &Arc<Channel>,
    layer: QosLayer,
    resolved: Resolved,
) -> usize {
    let dscp = explicit_dscp(&resolved);
    let sched = (resolved.source(Property::Sched) != Source::Default)
        .then(|| SchedPolicy::from(resolved.values().sched));
    let dropped = ch.apply_qos(layer, resolved);
    // A channel already in the table changes its claim here; a new one
    // makes it when it is inserted.
    let global = (ch.conn << 32) | u64::from(ch.sub);
    if st.channels.holds(global, ch) {
        st.channels.claim_dscp(ch.conn, global, dscp);
    }
    // Its scaling and proxy place are part of the interest links advertise.
    st.channels.touch();
    if let Some(code) = dscp {
        set_connection_dscp(st, ch.conn, code);
    }
    if let Some(policy) = sched {
        let band = st.connections.get(&ch.conn).map(|c| c.band.to_string());
        if let Some(band) = band {
            reschedule_lane(st, &band, policy);
        }
    }
    dropped
}

/// Puts connection `conn`'s session-level `dscp` (if it sets one
/// explicitly) on its socket.
fn mark_session(st: &mut State, conn: u64) {
    let Some(c) = st.connections.get(&conn) else {
        return;
    };
    // A channel's own explicit marking (which the checks made agree) stays.
    if !c.qos.is_set(Property::Dscp) || st.channels.dscp_claims(conn).next().is_some() {
        return;
    }
    let code = explicit_dscp(&resolve(&[&st.qos_daemon, &c.qos]));
    if let Some(code) = code {
        set_connection_dscp(st, conn, code);
    }
}

/// Marks a connection's socket with `dscp` (TCP; nothing for others).
pub(crate) fn set_connection_dscp(st: &mut State, conn: u64, dscp: u8) {
    if let Some(c) = st.connections.get_mut(&conn) {
        if let Some(fd) = &c.socket {
            if let Err(e) = crate::priority::set_dscp(fd, dscp) {
                tracing::warn!(conn, "cannot set DSCP {dscp}: {e}");
                return;
            }
        }
        c.dscp = Some(dscp);
    }
    crate::bandwidth::mark_connection(st, conn);
}

/// Asks band `band`'s lane to run `policy` from now on (if it does not).
pub(crate) fn reschedule_lane(st: &mut State, band: &str, policy: SchedPolicy) {
    let wanted = policy.to_string();
    let Some(info) = st.lanes.iter_mut().find(|l| l.band == band) else {
        return;
    };
    if info.sched_wanted == wanted {
        return;
    }
    info.sched_wanted = wanted;
    if let Some((_, tx)) = st.lane_commands.iter().find(|(b, _)| b == band) {
        if let Err(tokio::sync::mpsc::error::TrySendError::Full(_)) =
            tx.try_send(LaneCommand::Sched(policy))
        {
            tracing::warn!(
                "band {band}'s lane has {} commands waiting; its scheduling change was dropped",
                crate::state::lanes::MAX_LANE_COMMANDS
            );
        }
    }
}

/// What `tagwire admin qos` names.
enum Target {
    Daemon,
    Connection(u64),
    /// A subscriber endpoint's channels (`/sub`, or `/pub /sub`).
    Endpoint(String),
    Tag(Pattern, String),
}

fn bad(message: String) -> (ErrorCode, String) {
    (ErrorCode::BadRequest, message)
}

fn excerpt(s: &str) -> String {
    tagwire_proto::excerpt(s).to_string()
}

/// Reads the target: `daemon`, `connection:N`, an endpoint name (with an
/// optional publisher before it, YARP's `/pub /sub` channel form), or a tag
/// pattern (a name that is no endpoint's).
fn target(st: &State, names: &[String]) -> Result<Target, (ErrorCode, String)> {
    let unknown = |n: &str| {
        (
            ErrorCode::UnknownEndpoint,
            format!("no endpoint named {}", excerpt(n)),
        )
    };
    match names {
        [one] if one == "daemon" => Ok(Target::Daemon),
        [one] if one.starts_with("connection:") => {
            let id = one["connection:".len()..]
                .parse()
                .map_err(|_| bad(format!("bad connection target {}: expected connection:ID", excerpt(one))))?;
            if st.connections.contains_key(&id) {
                Ok(Target::Connection(id))
            } else {
                Err(bad(format!("no connection with id {id}")))
            }
        }
        [one] => match st.endpoints.get(one) {
            Some(e) if e.kind == tagwire_proto::EndpointKind::Subscriber => {
                Ok(Target::Endpoint(one.clone()))
            }
            Some(_) => Err(bad(format!(
                "{} is a publisher: QoS belongs to channels, named by their subscriber endpoint (or `/pub /sub`)",
                excerpt(one)
            ))),
            None => {
                let p = Pattern::parse(one).map_err(|e| {
                    (
                        ErrorCode::UnknownEndpoint,
                        format!(
                            "{} is neither an endpoint nor a tag pattern ({e})",
                            excerpt(one)
                        ),
                    )
                })?;
                Ok(Target::Tag(p, one.clone()))
            }
        },
        [publisher, subscriber] => {
            match st.endpoints.get(publisher) {
                Some(e) if e.kind == tagwire_proto::EndpointKind::Publisher => {}
                Some(_) => return Err(bad(format!("{} is not a publisher", excerpt(publisher)))),
                None => return Err(unknown(publisher)),
            }
            match st.endpoints.get(subscriber) {
                Some(e) if e.kind == tagwire_proto::EndpointKind::Subscriber => {
                    Ok(Target::Endpoint(subscriber.clone()))
                }
                Some(_) => Err(bad(format!("{} is not a subscriber", excerpt(subscriber)))),
                None => Err(unknown(subscriber)),
            }
        }
        _ => Err(bad(format!(
            "qos target: expected daemon, connection:ID, an endpoint, `/publisher /subscriber` or a tag pattern; got {} names",
            names.len()
        ))),
    }
}

/// `layer` with `unset` removed and `set` applied; the error names the
/// property and value (the old layer stays).
fn edited(
    layer: &QosLayer,
    set: &std::collections::BTreeMap<String, String>,
    unset: &[String],
    bands: &[String],
) -> Result<QosLayer, (ErrorCode, String)> {
    let mut l = layer.clone();
    for name in unset {
        let p = Property::from_name(name)
            .ok_or_else(|| bad(format!("unknown QoS property {}", excerpt(name))))?;
        l.unset(p);
    }
    l.with(set.iter().map(|(k, v)| (k.as_str(), v.as_str())), bands)
        .map_err(|e| bad(e.to_string()))
}

/// `tagwire admin qos`: changes one level's layer and puts the result in
/// force on every channel it reaches, or changes nothing and says why.
/// Cost: one resolution per channel reached (all of them for `daemon`).
pub(crate) fn admin_qos(
    st: &mut State,
    names: &[String],
    set: &std::collections::BTreeMap<String, String>,
    unset: &[String],
    admin: bool,
    may_touch: impl Fn(&State, u64) -> bool,
) -> Result<QosChanged, (ErrorCode, String)> {
    if set.is_empty() && unset.is_empty() {
        return Err(bad(
            "qos: nothing to change (give property=value or unset)".into()
        ));
    }
    let sets_sched = set
        .keys()
        .any(|k| Property::from_name(k) == Some(Property::Sched));
    check_lane_change(admin, sets_sched)?;
    let target = target(st, names)?;
    if let Target::Connection(id) = &target {
        check_link(st, *id, admin)?;
    }
    let denied = |what: &str| {
        (
            ErrorCode::PermissionDenied,
            format!("changing QoS of {what} needs the admin right"),
        )
    };
    let bands = st.band_names.clone();
    // Which channels the change reaches, and the new layer of that level.
    let (reached, level_name): (Vec<Arc<Channel>>, String) = match &target {
        Target::Endpoint(name) => {
            let owner = st.endpoints.get(name).map_or(0, |e| e.owner);
            if !may_touch(st, owner) {
                return Err((
                    ErrorCode::PermissionDenied,
                    format!("endpoint {} belongs to another identity", excerpt(name)),
                ));
            }
            let chans = channels_of(st, name);
            (chans, "channel".into())
        }
        Target::Daemon if !admin => return Err(denied("the daemon")),
        Target::Tag(_, text) if !admin => return Err(denied(&format!("tag {}", excerpt(text)))),
        Target::Connection(id) if !may_touch(st, *id) => {
            return Err(denied(&format!("connection {id}")))
        }
        Target::Daemon => (all_channels(st), "daemon".into()),
        Target::Connection(id) => (
            all_channels(st)
                .into_iter()
                .filter(|c| c.conn == *id)
                .collect(),
            "session".into(),
        ),
        Target::Tag(p, _) => (
            all_channels(st)
                .into_iter()
                .filter(|c| Pattern::parse(&c.pattern).is_ok_and(|cp| p.covers(&cp)))
                .collect(),
            "tag".into(),
        ),
    };
    // First compute everything (any error leaves the old QoS in force)...
    let upper_change = match &target {
        Target::Daemon => Some(edited(&st.qos_daemon, set, unset, &bands)?),
        Target::Connection(id) => Some(edited(&st.connections[id].qos, set, unset, &bands)?),
        Target::Tag(_, text) => {
            let old = match st.qos_tags.iter().find(|t| t.text == *text) {
                Some(t) => t.layer.clone(),
                None if st.qos_tags.len() >= MAX_TAG_LAYERS => {
                    return Err((
                        ErrorCode::LimitReached,
                        format!("{MAX_TAG_LAYERS} tag QoS layers already set"),
                    ))
                }
                None => QosLayer::new(Level::Tag),
            };
            Some(edited(&old, set, unset, &bands)?)
        }
        Target::Endpoint(_) => None,
    };
    if let Some(l) = &upper_change {
        crate::config::history::check_layer(&st.config, l)?;
        crate::config::store::check_layer(&st.config, l)?;
    }
    // Install the upper layer tentatively, resolve every channel, and roll
    // back on the first refusal.
    let saved = install(st, &target, upper_change);
    let mut plans = Vec::with_capacity(reached.len());
    for ch in &reached {
        let own = match &target {
            Target::Endpoint(_) => match edited(&ch.qos.borrow().layer, set, unset, &bands) {
                Ok(l) => l,
                Err(e) => {
                    install(st, &target, saved);
                    return Err(e);
                }
            },
            _ => ch.qos.borrow().layer.clone(),
        };
        let Ok(pattern) = Pattern::parse(&ch.pattern) else {
            continue;
        };
        let resolved = resolve_channel(st, ch.conn, &pattern, &own);
        if let Err(e) = check_band(st, ch.conn, &resolved).and_then(|()| check_proxy(st, &resolved))
        {
            install(st, &target, saved);
            return Err(e);
        }
        plans.push((ch.clone(), own, resolved));
    }
    let claims: Vec<(u64, u64, Option<u8>)> = plans
        .iter()
        .map(|(ch, _, r)| {
            (
                ch.conn,
                (ch.conn << 32) | u64::from(ch.sub),
                explicit_dscp(r),
            )
        })
        .collect();
    if let Err(e) = check_planned_dscp(st, &claims) {
        install(st, &target, saved);
        return Err(e);
    }
    // ...then put it in force.
    st.refresh_supplier_limit();
    if set.contains_key("history") || unset.iter().any(|u| u == "history") {
        crate::history::layers_changed(st);
    }
    if set.contains_key("reliability") || unset.iter().any(|u| u == "reliability") {
        crate::durable::layers_changed(st);
        crate::reliable::layers_changed(st);
    }
    if set.contains_key("compression") || unset.iter().any(|u| u == "compression") {
        crate::compress::layers_changed(st);
    }
    let mut dropped = 0;
    let changed = plans.len();
    for (ch, own, resolved) in plans {
        dropped += put_in_force(st, &ch, own, resolved);
    }
    if let Target::Connection(id) = &target {
        // A session's DSCP marks its socket even with no channel on it (a
        // publisher's connection, a link's).
        mark_session(st, *id);
    }
    Ok(QosChanged {
        level: level_name,
        target: names.to_vec(),
        channels: changed,
        dropped,
    })
}

/// Puts `layer` (if any) in place for the target's level; returns the
/// previous one, to undo.
fn install(st: &mut State, target: &Target, layer: Option<QosLayer>) -> Option<QosLayer> {
    let layer = layer?;
    match target {
        Target::Daemon => Some(std::mem::replace(&mut st.qos_daemon, layer)),
        Target::Connection(id) => st
            .connections
            .get_mut(id)
            .map(|c| std::mem::replace(&mut c.qos, layer)),
        Target::Tag(p, text) => {
            let at = st.qos_tags.iter().position(|t| t.text == *text);
            let old = match at {
                // A tag layer that sets nothing is no layer: it goes, and
                // frees its place under MAX_TAG_LAYERS.
                Some(i) if layer.is_empty() => st.qos_tags.remove(i).layer,
                Some(i) => std::mem::replace(&mut st.qos_tags[i].layer, layer),
                None if layer.is_empty() => QosLayer::new(Level::Tag),
                None => {
                    st.qos_tags.push(TagQos {
                        pattern: p.clone(),
                        text: text.clone(),
                        layer,
                    });
                    QosLayer::new(Level::Tag)
                }
            };
            // Undoing a new tag layer installs this empty one: it goes again.
            Some(old)
        }
        Target::Endpoint(_) => None,
    }
}

fn channels_of(st: &State, endpoint: &str) -> Vec<Arc<Channel>> {
    let mut ids = st.channels.of_endpoint(endpoint);
    ids.sort_unstable();
    ids.into_iter()
        .filter_map(|g| st.channels.get(g).cloned())
        .collect()
}

fn all_channels(st: &State) -> Vec<Arc<Channel>> {
    st.channels.after(None).map(|(_, c)| c.clone()).collect()
}

/// `tagwire admin show`: each channel of an endpoint with its effective QoS
/// and the level each value came from, its band, lane and queue; or a tag
/// pattern's layer. At most `max_channels` channels (then `truncated`).
pub(crate) fn admin_show(
    st: &State,
    target_name: &str,
    max_channels: usize,
    may_touch: impl Fn(&State, u64) -> bool,
) -> Result<Show, (ErrorCode, String)> {
    if let Some(t) = st.qos_tags.iter().find(|t| t.text == target_name) {
        let set = t
            .layer
            .properties()
            .filter_map(|p| {
                t.layer.show(p).map(|v| QosSetting {
                    property: p.name().to_owned(),
                    value: v.to_string(),
                })
            })
            .collect();
        return Ok(Show::Tag(TagShow {
            tag: target_name.to_owned(),
            level: "tag".to_owned(),
            set,
            history: crate::history::show(st, target_name),
        }));
    }
    if let Some(h) = crate::history::show(st, target_name) {
        return Ok(Show::Tag(TagShow {
            tag: target_name.to_owned(),
            level: "tag".to_owned(),
            set: Vec::new(),
            history: Some(h),
        }));
    }
    let Some(e) = st.endpoints.get(target_name) else {
        return Err((
            ErrorCode::UnknownEndpoint,
            format!("no endpoint or tag QoS named {}", excerpt(target_name)),
        ));
    };
    if !may_touch(st, e.owner) {
        return Err((
            ErrorCode::PermissionDenied,
            format!(
                "endpoint {} belongs to another identity",
                excerpt(target_name)
            ),
        ));
    }
    let conn = st.connections.get(&e.owner);
    let band = conn.map(|c| c.band.to_string()).unwrap_or_default();
    let lane = st.lanes.iter().find(|l| l.band == band);
    let chans = channels_of(st, target_name);
    let truncated = chans.len() > max_channels;
    let channels = chans
        .iter()
        .take(max_channels)
        .map(|ch| {
            let q = ch.queue.borrow();
            let qos = ch.qos.borrow();
            let props = qos
                .resolved
                .iter()
                .map(|(p, v, from)| QosResolved {
                    property: p.name().to_owned(),
                    value: v.to_string(),
                    from: from.to_string(),
                })
                .collect();
            ChannelShow {
                pattern: ch.pattern.clone(),
                qos: props,
                queue_depth: q.len(),
                queue_bound: q.bound(),
                dropped: q.dropped(),
                expired: ch.expired.get() + q.expired(),
                too_large: ch.too_large.get(),
                over_consumer: ch.over_consumer.get(),
                delivered: ch.delivered.get(),
                time: ch.time_info(),
                jitter: ch.jitter_info(),
                net: st.channel_net_loss(ch.conn, ch.sub),
            }
        })
        .collect();
    Ok(Show::Endpoint(Box::new(EndpointShow {
        endpoint: target_name.to_owned(),
        kind: match e.kind {
            tagwire_proto::EndpointKind::Publisher => "publisher",
            _ => "subscriber",
        }
        .to_owned(),
        connection: e.owner,
        band,
        lane: lane.map(|l| LaneShow {
            sched: l.sched_wanted.clone(),
            sched_applied: l.sched_applied.clone(),
            fell_back: l.fell_back.clone(),
            cpus: l.cpus.clone(),
        }),
        dscp: conn.map(|c| c.dscp.unwrap_or_else(|| lane.map_or(0, |l| l.dscp))),
        channels,
        truncated,
    })))
}

/// Refuses a new subscriber endpoint on a tag beyond its `max_consumers`
/// (TAO's `MaxConsumers` with reject-new): counts the other subscriber
/// endpoints whose channels the limiting layer's pattern covers (all of
/// them for a daemon-level limit). Cost: one pass over the channels, only
/// when a limit is set.
pub(crate) fn check_consumers(
    st: &State,
    endpoint: &str,
    pattern: &Pattern,
    resolved: &Resolved,
) -> Result<(), (ErrorCode, String)> {
    let Some(max) = resolved.values().max_consumers else {
        return Ok(());
    };
    let scope: Option<&TagQos> = match resolved.source(Property::MaxConsumers) {
        Source::Level(Level::Tag) => st
            .qos_tags
            .iter()
            .filter(|t| t.layer.is_set(Property::MaxConsumers) && t.pattern.covers(pattern))
            .max_by_key(|t| t.text.len()),
        _ => None,
    };
    let mut others = std::collections::HashSet::new();
    for (_, ch) in st.channels.after(None) {
        if &*ch.endpoint == endpoint {
            return Ok(()); // already a consumer there
        }
        let inside = match scope {
            None => true,
            Some(t) => Pattern::parse(&ch.pattern).is_ok_and(|p| t.pattern.covers(&p)),
        };
        if inside {
            others.insert(ch.endpoint.clone());
        }
    }
    if others.len() >= max {
        let what = scope.map_or_else(|| "this router".to_owned(), |t| t.text.clone());
        return Err((
            ErrorCode::LimitReached,
            format!(
                "max_consumers={max} reached for {what}: {} subscriber endpoints already",
                others.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses an event from a new publisher on a tag beyond its
/// `max_suppliers` (TAO's `MaxSuppliers`, reject-new). Costs a flag test
/// unless a daemon or tag layer sets the limit; then one pass over the tag
/// layers.
pub(crate) fn check_suppliers(
    st: &mut State,
    tag: &str,
    publisher: &Arc<str>,
) -> Result<(), (ErrorCode, String)> {
    if !st.suppliers.limited {
        return Ok(());
    }
    // The most specific layer that sets it: its pattern is the scope
    // counted ("" for the daemon's).
    let Some((from, layer)) =
        tagwire_core::qos::source_for(&st.qos_daemon, &st.qos_tags, tag, Property::MaxSuppliers)
    else {
        return Ok(());
    };
    let Some(max) = resolve(&[layer]).values().max_suppliers else {
        return Ok(());
    };
    let scope = from.map_or_else(String::new, |t| t.text.clone());
    let set = st.suppliers.scopes.entry(scope.clone()).or_default();
    if set.contains(publisher) {
        return Ok(());
    }
    if set.len() >= max {
        let what = if scope.is_empty() {
            "this router".to_owned()
        } else {
            scope
        };
        return Err((
            ErrorCode::LimitReached,
            format!("max_suppliers={max} reached for {what}: publisher {publisher} refused"),
        ));
    }
    set.insert(publisher.clone());
    Ok(())
}
