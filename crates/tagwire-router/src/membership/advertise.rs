//! Which address a daemon gossips as its own — its SWIM identity, and the
//! address its links are dialed at — when its gossip socket listens on every
//! interface (`0.0.0.0`), where the bound address says nothing others can
//! reach. Decided once, when the router starts ([`resolve`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use crate::config::{ConfigError, RouterConfig};

/// Where the default route is looked up when no peer says which interface
/// to use: TEST-NET-1 (RFC 5737), never answered; no packet is sent.
const DEFAULT_ROUTE_PROBE: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));

/// What [`choose`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Gossip this address (port 0: the gossip socket's port).
    Advertise(SocketAddr),
    /// The bound address is specific: gossip it as it is.
    Bound,
    /// Nothing is known to reach this daemon and it reaches out to nobody
    /// (no peers, no discovery): membership stays off, with a warning.
    Nobody,
}

/// Chooses the address to gossip, for a gossip socket bound to `bind`:
/// `advertise` if given; the bound address if it is specific; else the
/// local address routing to the first peer (`peers`, resolved), else to the
/// default route. With neither, a daemon that has peers (or discovery) to
/// reach is refused with the fix named; one that has none runs without
/// membership. `route(ip)` is the local address the kernel sends to `ip`
/// from.
pub(crate) fn choose(
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
    peers: &[SocketAddr],
    reaches_out: bool,
    route: &dyn Fn(IpAddr) -> Option<IpAddr>,
) -> Result<Choice, ConfigError> {
    if let Some(a) = advertise {
        return Ok(Choice::Advertise(a));
    }
    if !bind.ip().is_unspecified() {
        return Ok(Choice::Bound);
    }
    let toward_peer = peers
        .iter()
        .filter(|p| !p.ip().is_unspecified())
        .find_map(|p| route(p.ip()));
    let local = toward_peer.or_else(|| route(DEFAULT_ROUTE_PROBE).filter(|ip| !ip.is_loopback()));
    match local.filter(|ip| !ip.is_unspecified()) {
        Some(ip) => Ok(Choice::Advertise(SocketAddr::new(ip, 0))),
        None if reaches_out => Err(ConfigError::NoAdvertisedAddress {
            bind,
            port: bind.port(),
        }),
        None => Ok(Choice::Nobody),
    }
}

/// Parses and resolves `[federation] advertise` (`HOST:PORT`), refusing an
/// address nobody can dial (unspecified, port 0).
pub(crate) fn parse(value: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |reason: String| ConfigError::BadAdvertise {
        value: tagwire_proto::excerpt(value).to_string(),
        reason,
    };
    let addr = value
        .to_socket_addrs()
        .map_err(|e| bad(format!("not a resolvable HOST:PORT ({e})")))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))?;
    if addr.ip().is_unspecified() {
        return Err(bad(format!(
            "{} is every interface, not an address others can reach",
            addr.ip()
        )));
    }
    if addr.port() == 0 {
        return Err(bad("port 0 cannot be reached".into()));
    }
    Ok(addr)
}

/// Decides `config.federation.advertised` when the router starts (see
/// [`choose`]); a no-op without gossip or a TCP listener.
pub(crate) fn resolve(config: &mut RouterConfig) -> Result<(), ConfigError> {
    resolve_with(config, &crate::cluster::route_to)
}

/// [`resolve`] with the route lookup given (tests pass a fake one).
pub(crate) fn resolve_with(
    config: &mut RouterConfig,
    route: &dyn Fn(IpAddr) -> Option<IpAddr>,
) -> Result<(), ConfigError> {
    let f = &config.federation;
    let advertise = f.advertise.as_deref().map(parse).transpose()?;
    let Some(bind) = f.gossip.or(config.tcp) else {
        config.federation.advertised = advertise;
        return Ok(());
    };
    if !f.gossip_enabled {
        return Ok(());
    }
    // Peers that do not resolve now are skipped here (their dialer keeps
    // trying); the first that does picks the interface.
    let peers: Vec<SocketAddr> = f
        .peers
        .iter()
        .filter_map(|p| {
            p.trim_start_matches("tcp://")
                .to_socket_addrs()
                .ok()?
                .next()
        })
        .collect();
    let reaches_out = !f.peers.is_empty() || f.discovery;
    config.federation.advertised = match choose(bind, advertise, &peers, reaches_out, route)? {
        Choice::Advertise(a) => Some(a),
        Choice::Bound | Choice::Nobody => None,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ip_port_values_parse_iff_dialable(ip in any::<[u8; 4]>(), port in any::<u16>()) {
            let ip = Ipv4Addr::from(ip);
            let r = parse(&format!("{ip}:{port}"));
            if ip.is_unspecified() || port == 0 {
                let m = r.expect_err("not dialable").to_string();
                prop_assert!(m.contains(&format!("{ip}:{port}")), "{}", m);
            } else {
                prop_assert_eq!(r.ok(), Some(SocketAddr::from((ip, port))));
            }
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("test address")
    }

    /// A host with 10.0.0.1 toward 10.0.0.0/8, 192.168.1.5 toward the
    /// default route, and loopback to itself.
    fn routes(ip: IpAddr) -> Option<IpAddr> {
        match ip {
            IpAddr::V4(v4) if v4.is_loopback() => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            IpAddr::V4(v4) if v4.octets()[0] == 10 => Some("10.0.0.1".parse().ok()?),
            _ => Some("192.168.1.5".parse().ok()?),
        }
    }

    fn no_routes(_: IpAddr) -> Option<IpAddr> {
        None
    }

    #[test]
    fn every_interface_advertises_the_address_routing_to_the_first_peer() {
        let c = choose(
            sa("0.0.0.0:7700"),
            None,
            &[sa("10.0.0.9:7700")],
            true,
            &routes,
        );
        assert_eq!(c.ok(), Some(Choice::Advertise(sa("10.0.0.1:0"))));
        // A peer on loopback: a cluster on one host gossips loopback.
        let c = choose(
            sa("0.0.0.0:7700"),
            None,
            &[sa("127.0.0.1:7710")],
            true,
            &routes,
        );
        assert_eq!(c.ok(), Some(Choice::Advertise(sa("127.0.0.1:0"))));
    }

    #[test]
    fn every_interface_without_peers_advertises_the_default_route_address() {
        let c = choose(sa("0.0.0.0:7700"), None, &[], false, &routes);
        assert_eq!(c.ok(), Some(Choice::Advertise(sa("192.168.1.5:0"))));
    }

    #[test]
    fn advertise_wins_and_a_specific_bind_is_kept() {
        let c = choose(
            sa("0.0.0.0:7700"),
            Some(sa("203.0.113.7:9000")),
            &[sa("10.0.0.9:7700")],
            true,
            &routes,
        );
        assert_eq!(c.ok(), Some(Choice::Advertise(sa("203.0.113.7:9000"))));
        let c = choose(
            sa("10.0.0.1:7700"),
            None,
            &[sa("10.0.0.9:7700")],
            true,
            &routes,
        );
        assert_eq!(c.ok(), Some(Choice::Bound));
    }

    #[test]
    fn no_address_with_peers_to_reach_is_refused_naming_advertise() {
        let e = choose(
            sa("0.0.0.0:7700"),
            None,
            &[sa("10.0.0.9:7700")],
            true,
            &no_routes,
        )
        .expect_err("nothing to advertise");
        let m = e.to_string();
        assert!(m.contains("[federation] advertise = \"IP:7700\""), "{m}");
        // Nobody to reach: membership stays off, the daemon starts.
        let c = choose(sa("0.0.0.0:7700"), None, &[], false, &no_routes);
        assert_eq!(c.ok(), Some(Choice::Nobody));
    }

    #[test]
    fn bad_advertise_values_are_named() {
        for (v, why) in [
            ("0.0.0.0:7700", "every interface"),
            ("10.0.0.1:0", "port 0"),
            ("no-port", "HOST:PORT"),
        ] {
            let m = parse(v).expect_err(v).to_string();
            assert!(m.contains(v) && m.contains(why), "{v}: {m}");
        }
        assert_eq!(parse("10.0.0.1:7700").ok(), Some(sa("10.0.0.1:7700")));
    }

    #[test]
    fn resolve_sets_the_chosen_address_for_a_daemon_on_every_interface() {
        let mut cfg = RouterConfig {
            tcp: Some(sa("0.0.0.0:7700")),
            ..RouterConfig::default()
        };
        cfg.federation.peers = vec!["tcp://10.0.0.9:7700".into()];
        resolve_with(&mut cfg, &routes).expect("resolves");
        assert_eq!(cfg.federation.advertised, Some(sa("10.0.0.1:0")));
        cfg.federation.advertise = Some("10.0.0.2:7800".into());
        resolve_with(&mut cfg, &routes).expect("resolves");
        assert_eq!(cfg.federation.advertised, Some(sa("10.0.0.2:7800")));
        cfg.federation.advertise = Some("0.0.0.0:7800".into());
        assert!(resolve_with(&mut cfg, &routes).is_err());
    }
}
