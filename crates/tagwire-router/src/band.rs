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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::error::ConfigError;
use crate::config::RouterConfig;
use crate::priority::{CpuList, SchedPolicy};
use tagwire_core::qos::Dscp;

/// The name of the band the main listeners serve.
pub const DEFAULT_BAND: &str = "normal";

/// Most bands a router runs (each is a thread and up to two listeners).
pub const MAX_BANDS: usize = 16;

/// One band in the configuration (`[[bands]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandConfig {
    /// Its name (`low`, `normal`, `high`, `critical`, or your own).
    pub name: String,
    /// The lane's scheduling: `other`, `other:NICE`, `fifo:N` or `rr:N`
    /// (N 1..=99). Without the right to a real-time policy the lane runs
    /// `other` with a nice level instead, and says so.
    #[serde(default = "default_sched")]
    pub sched: String,
    /// DSCP of the band's sockets: a class (`af11`..`af43`, `cs0`..`cs7`,
    /// `ef`, `va`, or the band names `low`/`normal`/`high`/`critical`) or
    /// 0..=63.
    #[serde(default = "default_dscp")]
    pub dscp: String,
    /// TCP listen address (default: derived from the main `tcp`).
    #[serde(default)]
    pub tcp: Option<SocketAddr>,
    /// Unix socket path (default: derived from the main `unix`).
    #[serde(default)]
    pub unix: Option<PathBuf>,
    /// CPUs the lane runs on, as `taskset -c` takes them (`"1"`, `"0,2-3"`);
    /// clients apply it to the band's threads too. Default: any CPU.
    #[serde(default)]
    pub cpus: Option<String>,
}

fn default_sched() -> String {
    "other".into()
}

fn default_dscp() -> String {
    "cs0".into()
}

/// The default bands.
pub fn default_bands() -> Vec<BandConfig> {
    [
        // Not niced: every lane takes the shared table lock, and a niced
        // holder that a busy machine preempts stalls the lanes above it
        // (measured: 200 ms stalls with `other:10` under load).
        ("low", "other", "af11"),
        ("normal", "other", "cs0"),
        ("high", "fifo:10", "af42"),
        ("critical", "fifo:20", "va"),
    ]
    .into_iter()
    .map(|(name, sched, dscp)| BandConfig {
        name: name.into(),
        sched: sched.into(),
        dscp: dscp.into(),
        tcp: None,
        unix: None,
        cpus: None,
    })
    .collect()
}

/// A band as the router runs it: parsed and with its listeners decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    /// Its name.
    pub name: String,
    /// Its position (0: the lowest priority, which also serves admin work).
    pub rank: usize,
    /// The lane's scheduling policy as configured.
    pub sched: SchedPolicy,
    /// The DSCP of its sockets.
    pub dscp: u8,
    /// Its TCP listener, if any.
    pub tcp: Option<SocketAddr>,
    /// Whether `tcp` was derived from the main port (then, if that port is
    /// taken, the band listens on a free one and says so).
    pub tcp_derived: bool,
    /// Its Unix listener, if any.
    pub unix: Option<PathBuf>,
    /// The CPUs its lane is pinned to (`None`: any).
    pub cpus: Option<CpuList>,
}

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

/// Parses a band's DSCP with core's [`Dscp`] (a class name, a band name or
/// 0..=63); `auto` is the DSCP of the band's rank (low, normal, high,
/// critical, then critical for any further band).
pub fn parse_dscp(text: &str, rank: usize) -> Result<u8, String> {
    let d: Dscp = text
        .parse()
        .map_err(|e: tagwire_core::qos::QosError| e.to_string())?;
    let class_priority = [0u8, 64, 128, 192][rank.min(3)];
    Ok(d.code(class_priority))
}

/// Decides every band's lane policy, DSCP and listeners from `config`.
/// The bands keep their configured order, lowest priority first.
pub fn plan(config: &RouterConfig) -> Result<Vec<Band>, ConfigError> {
    let bad = |m: String| ConfigError::Invalid(m);
    if config.bands.is_empty() || config.bands.len() > MAX_BANDS {
        return Err(bad(format!(
            "{} [[bands]] configured: between 1 and {MAX_BANDS} are needed",
            config.bands.len()
        )));
    }
    let default = config
        .bands
        .iter()
        .position(|b| b.name == config.default_band)
        .ok_or_else(|| {
            bad(format!(
                "default_band = {:?} is not one of the configured bands ({})",
                config.default_band,
                names(config)
            ))
        })?;
    let mut out: Vec<Band> = Vec::new();
    let mut offset = 0u16;
    for (rank, b) in config.bands.iter().enumerate() {
        if b.name.is_empty()
            || !b
                .name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            return Err(bad(format!(
                "band name {:?}: use letters, digits, '-' and '_'",
                b.name
            )));
        }
        if out.iter().any(|o| o.name == b.name) {
            return Err(bad(format!("band {:?} is configured twice", b.name)));
        }
        let sched: SchedPolicy = b
            .sched
            .parse()
            .map_err(|e| bad(format!("band {:?}: sched {:?}: {e}", b.name, b.sched)))?;
        let dscp = parse_dscp(&b.dscp, rank).map_err(|e| bad(format!("band {:?}: {e}", b.name)))?;
        let cpus = match &b.cpus {
            None => None,
            Some(text) => Some(
                text.parse::<CpuList>()
                    .map_err(|e| bad(format!("band {:?}: cpus {:?}: {e}", b.name, text)))?,
            ),
        };
        let tcp_derived = rank != default && b.tcp.is_none();
        let (tcp, unix) = if rank == default {
            (b.tcp.or(config.tcp), b.unix.clone().or(config.unix.clone()))
        } else {
            offset += 1;
            let tcp = b.tcp.or_else(|| {
                config.tcp.map(|mut a| {
                    if a.port() != 0 {
                        a.set_port(a.port().saturating_add(offset));
                    }
                    a
                })
            });
            let unix = b
                .unix
                .clone()
                .or_else(|| config.unix.as_deref().map(|p| band_socket(p, &b.name)));
            (tcp, unix)
        };
        out.push(Band {
            name: b.name.clone(),
            rank,
            sched,
            dscp,
            tcp,
            tcp_derived,
            unix,
            cpus,
        });
    }
    Ok(out)
}

fn names(config: &RouterConfig) -> String {
    config
        .bands
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `dir/tagwire.sock` → `dir/tagwire-NAME.sock`.
pub fn band_socket(main: &Path, name: &str) -> PathBuf {
    let stem = main
        .file_stem()
        .map_or_else(|| "tagwire".into(), |s| s.to_string_lossy().into_owned());
    let file = match main.extension() {
        Some(ext) => format!("{stem}-{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{name}"),
    };
    main.with_file_name(file)
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
