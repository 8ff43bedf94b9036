//! Priority bands (RT-CORBA's priority-banded connections, TAO's lanes).
//!
//! Each band has its own **lane** (an OS thread with its own event loop and
//! scheduling policy) and its own **listeners**, so a client opens one
//! connection per band it uses and the kernel, the NIC queue and the network
//! see each band separately: the band's sockets carry its DSCP both ways.
//! The main `tcp` / `unix` listeners serve the default band (`normal`); the
//! others listen, unless configured, on the next TCP ports and on sockets
//! named after the band beside the main one:
//!
//! | band | sched | DSCP | TCP (main 7700) | Unix |
//! |---|---|---|---|---|
//! | `low` | `other` | AF11 (10) | 7701 | `tagwire-low.sock` |
//! | `normal` | `other` | CS0 (0) | 7700 | `tagwire.sock` |
//! | `high` | `fifo:10` | AF42 (36) | 7702 | `tagwire-high.sock` |
//! | `critical` | `fifo:20` | VA (44) | 7703 | `tagwire-critical.sock` |
//!
//! The lowest band's lane also serves admin work and housekeeping (TAO
//! §3.4: admin at the lowest priority).

use crate::config::band::plan_bands;
pub use crate::config::band::{
    band_socket, default_bands, parse_dscp, Band, BandConfig, DEFAULT_BAND, MAX_BANDS,
};
use crate::config::error::ConfigError;
use crate::config::RouterConfig;
use std::net::SocketAddr;

/// Binds a band's TCP listener at `addr` with its DSCP set **before**
/// `listen`: the kernel answers a SYN with the listener's class, and an
/// accepted socket inherits it, so the SYN-ACK and the first segments of a
/// high-band connection carry the band's mark, not TOS 0 until the router
/// marks the accepted socket. A DSCP the kernel refuses is logged, not
/// fatal (the accepted sockets are marked again).
///
/// The socket is bound, not yet listening ([`listen_tcp`]): its port is
/// known (for the token file) while a client that connects is still
/// refused, so no client can be let in before the token file exists.
pub fn bind_tcp(addr: SocketAddr, dscp: u8) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    // As std's TcpListener::bind does: a restarted daemon rebinds its port
    // while old connections are in TIME_WAIT.
    socket.set_reuse_address(true)?;
    if let Err(e) = crate::priority::set_dscp(&socket, dscp) {
        tracing::warn!("cannot set DSCP {dscp} on the listener at {addr}: {e}");
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// Starts listening on a socket [`bind_tcp`] bound (non-blocking, for the
/// lane's event loop).
pub fn listen_tcp(socket: socket2::Socket) -> std::io::Result<std::net::TcpListener> {
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The address a bound socket has (its port, if bound to port 0).
pub fn bound_addr(socket: &socket2::Socket) -> Option<SocketAddr> {
    socket.local_addr().ok().and_then(|a| a.as_socket())
}

/// Decides every band's lane policy, DSCP and listeners from `config`.
/// The bands keep their configured order, lowest priority first.
pub fn plan(config: &RouterConfig) -> Result<Vec<Band>, ConfigError> {
    plan_bands(
        &config.bands,
        &config.default_band,
        config.tcp,
        config.unix.as_deref(),
    )
}

#[cfg(test)]
mod listener_tests {
    use super::*;

    #[test]
    fn a_bound_band_socket_refuses_clients_until_it_listens() {
        // The router writes the port's token file between the two steps, so
        // a client can never reach it before the file exists.
        let s = bind_tcp("127.0.0.1:0".parse().expect("address"), 0).expect("bind");
        let addr = bound_addr(&s).expect("a bound address");
        assert_ne!(addr.port(), 0, "the port is known before listening");
        let refused = std::net::TcpStream::connect(addr).expect_err("not listening yet");
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        let l = listen_tcp(s).expect("listen");
        let _client = std::net::TcpStream::connect(addr).expect("listening now");
        drop(l);
    }

    #[test]
    fn a_band_listener_and_the_sockets_it_accepts_carry_its_dscp_before_any_handshake() {
        for (ip, dscp) in [
            ("127.0.0.1", crate::priority::DSCP_AF42),
            ("[::1]", crate::priority::DSCP_VA),
        ] {
            let addr: SocketAddr = format!("{ip}:0").parse().expect("address");
            let l = match bind_tcp(addr, dscp).and_then(listen_tcp) {
                Ok(l) => l,
                // A host without IPv6 loopback: the IPv4 case still ran.
                Err(e) if addr.is_ipv6() => {
                    eprintln!("skipping IPv6: {e}");
                    continue;
                }
                Err(e) => panic!("bind {addr}: {e}"),
            };
            let tos = |s: socket2::SockRef<'_>| {
                if addr.is_ipv6() {
                    s.tclass_v6().expect("IPV6_TCLASS")
                } else {
                    s.tos().expect("IP_TOS")
                }
            };
            assert_eq!(
                tos(socket2::SockRef::from(&l)),
                u32::from(dscp) << 2,
                "listener"
            );
            let _client =
                std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
            // Accepted and read back at once: nothing marked it but the
            // listener it came from (the router marks it only after this).
            let (accepted, _) = l.accept().expect("accept");
            assert_eq!(
                tos(socket2::SockRef::from(&accepted)),
                u32::from(dscp) << 2,
                "accepted"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn band_dscp_takes_classes_raw_values_and_auto_by_rank() {
        assert_eq!(parse_dscp("AF11", 2), Ok(10));
        assert_eq!(parse_dscp("af42", 0), Ok(36));
        assert_eq!(parse_dscp("63", 0), Ok(63));
        assert_eq!(parse_dscp("auto", 2), Ok(36), "the high class");
        let e = parse_dscp("gold", 0).unwrap_err();
        assert!(e.contains("gold"), "{e}");
    }

    #[test]
    fn default_bands_derive_their_listeners_from_the_main_ones() {
        let config = RouterConfig {
            tcp: "127.0.0.1:7700".parse().ok(),
            unix: Some("/run/t/tagwire.sock".into()),
            ..RouterConfig::default()
        };
        let bands = plan(&config).expect("default bands are valid");
        let got: Vec<_> = bands
            .iter()
            .map(|b| (b.name.as_str(), b.dscp, b.tcp.map(|a| a.port())))
            .collect();
        assert_eq!(
            got,
            [
                ("low", 10, Some(7701)),
                ("normal", 0, Some(7700)),
                ("high", 36, Some(7702)),
                ("critical", 44, Some(7703))
            ]
        );
        assert_eq!(
            bands[2].unix.as_deref(),
            Some(Path::new("/run/t/tagwire-high.sock"))
        );
        assert_eq!(bands[1].unix, config.unix);
    }

    #[test]
    fn bad_bands_are_refused_naming_the_band_and_value() {
        let mut config = RouterConfig::default();
        config.bands[2].sched = "fifo:200".into();
        let e = plan(&config).unwrap_err().to_string();
        assert!(e.contains("high") && e.contains("fifo:200"), "{e}");
        let mut config = RouterConfig::default();
        config.bands[0].dscp = "gold".into();
        assert!(plan(&config).unwrap_err().to_string().contains("gold"));
        let config = RouterConfig {
            default_band: "express".into(),
            ..RouterConfig::default()
        };
        assert!(plan(&config).unwrap_err().to_string().contains("express"));
        let mut config = RouterConfig::default();
        config.bands[3].cpus = Some("1-0".into());
        let e = plan(&config).unwrap_err().to_string();
        assert!(e.contains("critical") && e.contains("1-0"), "{e}");
    }

    #[test]
    fn the_pinned_bands_example_pins_real_time_lanes_apart_from_bulk() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/bands-pinned.toml"
        ));
        let config = RouterConfig::load(path).expect("examples/bands-pinned.toml loads");
        let bands = plan(&config).expect("valid bands");
        let cpus: Vec<(&str, String)> = bands
            .iter()
            .map(|b| {
                (
                    b.name.as_str(),
                    b.cpus.as_ref().map(|c| c.to_string()).unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            cpus,
            [
                ("low", "0".to_string()),
                ("normal", "0".to_string()),
                ("high", "1".to_string()),
                ("critical", "1".to_string())
            ]
        );
    }

    #[test]
    fn a_band_takes_a_cpu_list() {
        let mut config = RouterConfig::default();
        config.bands[2].cpus = Some("1".into());
        let bands = plan(&config).expect("valid");
        assert_eq!(
            bands[2].cpus.as_ref().map(|c| c.cpus().to_vec()),
            Some(vec![1])
        );
        assert_eq!(bands[0].cpus, None);
    }
}
