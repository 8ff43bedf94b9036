//! A cluster in one step (`[cluster]`, `tagwired --cluster-secret-file F
//! [--join HOST:PORT]`): one shared secret sets authentication, the
//! daemon-to-daemon ACL, the federation token and the gossip address
//! together, instead of five sections found by trial (docs/federation.md).
//!
//! [`apply`] turns the section into the settings it stands for:
//! - `[[auth.tokens]] name = "cluster"` with the secret, and an `[[acl]]`
//!   rule giving `token:cluster` every right (a daemon holding the secret is
//!   a full member: it may link, publish and subscribe everywhere);
//! - `[federation] token` = the secret, so this daemon presents it when it
//!   dials;
//! - `[federation] peers` += the join targets;
//! - `[federation] gossip`: the address peers reach this daemon at. A
//!   listener on `0.0.0.0` advertises the address of the interface routing
//!   to the first join target (or to the default route); a loopback listener
//!   with a remote join target is refused with the fix named
//!   ([`advertised_ip`]).
//!
//! The secret is read from a file only this user may read (mode 0600, as
//! `tagwired --new-cluster-secret F` writes it); it is never logged.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use crate::config::{AclRule, RouterConfig, TokenConfig};

pub use crate::config::cluster::{ClusterConfig, ClusterError};

/// The identity name a daemon holding the cluster secret gets
/// (`token:cluster`).
pub const CLUSTER_TOKEN_NAME: &str = "cluster";
/// Shortest and longest secret accepted, bytes (as any token).
pub const SECRET_LEN: std::ops::RangeInclusive<usize> = 16..=255;
/// Random bytes in a generated secret (written as hex).
const GENERATED_BYTES: usize = 32;
/// Largest secret file read, bytes.
const MAX_SECRET_FILE: u64 = 4096;
/// Where the default route is looked up when there is no join target:
/// TEST-NET-1 (RFC 5737), never answered; no packet is sent.
const DEFAULT_ROUTE_PROBE: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));

/// What [`apply`] set up, for the start-up log (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSetup {
    /// Where the secret came from.
    pub secret_file: PathBuf,
    /// The daemons joined.
    pub join: Vec<String>,
    /// The gossip address peers reach this daemon at (`None`: the TCP
    /// listen address itself).
    pub advertised: Option<SocketAddr>,
}

impl std::fmt::Display for ClusterSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cluster: secret from {} (daemons holding it link as token:{CLUSTER_TOKEN_NAME})",
            self.secret_file.display()
        )?;
        if !self.join.is_empty() {
            write!(f, ", joining {}", self.join.join(", "))?;
        }
        if let Some(a) = self.advertised {
            write!(f, ", reachable at {a}")?;
        }
        Ok(())
    }
}

/// Turns `cfg.cluster` into the authentication, ACL, federation and gossip
/// settings it stands for (see the module documentation), and empties it,
/// so applying twice is harmless. `None`: no cluster section.
pub fn apply(cfg: &mut RouterConfig) -> Result<Option<ClusterSetup>, ClusterError> {
    apply_with(cfg, &route_to)
}

/// [`apply`] with the route lookup given (tests pass a fake one).
pub fn apply_with(
    cfg: &mut RouterConfig,
    route: &dyn Fn(IpAddr) -> Option<IpAddr>,
) -> Result<Option<ClusterSetup>, ClusterError> {
    let cluster = std::mem::take(&mut cfg.cluster);
    let Some(secret_file) = cluster.secret_file else {
        return match cluster.join.first() {
            Some(t) => Err(ClusterError::JoinWithoutSecret { target: t.clone() }),
            None => Ok(None),
        };
    };
    let secret = read_secret(&secret_file)?;
    let Some(listen) = cfg.tcp else {
        return Err(ClusterError::Conflict(
            "--cluster-secret-file needs a TCP listener (links are TCP): remove --no-tcp / give tcp".into(),
        ));
    };
    if !cfg.auth.enabled {
        return Err(ClusterError::Conflict(
            "--cluster-secret-file with [auth] enabled = false: a cluster authenticates its daemons; remove enabled = false".into(),
        ));
    }
    if cfg.tls.is_some() {
        return Err(ClusterError::Conflict(
            "--cluster-secret-file with TLS on the listener: links between daemons do not speak TLS yet (docs/security.md); serve TLS to clients on another daemon or drop [tls]".into(),
        ));
    }
    if !cfg.federation.token.is_empty() && cfg.federation.token != secret {
        return Err(ClusterError::Conflict(
            "[federation] token is set and differs from the cluster secret: remove one of them"
                .into(),
        ));
    }
    if cfg.auth.tokens.iter().any(|t| t.name == CLUSTER_TOKEN_NAME) {
        return Err(ClusterError::Conflict(format!(
            "[[auth.tokens]] already names a token {CLUSTER_TOKEN_NAME:?}, which --cluster-secret-file defines: rename it"
        )));
    }
    let mut targets = Vec::new();
    let mut join = Vec::new();
    for t in &cluster.join {
        let (hostport, addr) = resolve_join(t)?;
        targets.push((t.clone(), addr));
        join.push(hostport);
    }
    if listen.ip().is_loopback() && targets.is_empty() {
        tracing::warn!(
            "cluster: listening on {listen} only, which daemons on other hosts cannot reach; \
             to let them join, use --listen 0.0.0.0:{} or the interface address",
            listen.port()
        );
    }
    let advertised = if cfg.federation.gossip.is_some() {
        None
    } else {
        advertised_ip(listen, &targets, route)?.map(|ip| SocketAddr::new(ip, listen.port()))
    };
    cfg.auth.tokens.push(TokenConfig {
        name: CLUSTER_TOKEN_NAME.into(),
        token: Some(secret.clone()),
        file: None,
    });
    cfg.acl.push(AclRule {
        identity: format!("token:{CLUSTER_TOKEN_NAME}"),
        publish: vec!["/**".into()],
        subscribe: vec!["/**".into()],
        admin: true,
    });
    cfg.federation.token = secret;
    for p in &join {
        let known = cfg
            .federation
            .peers
            .iter()
            .any(|q| q.trim_start_matches("tcp://") == p);
        if !known {
            cfg.federation.peers.push(p.clone());
        }
    }
    if advertised.is_some() {
        cfg.federation.gossip = advertised;
    }
    Ok(Some(ClusterSetup {
        secret_file,
        join,
        advertised,
    }))
}

/// The IP other daemons reach this one at, when it differs from the
/// listen address (`Ok(None)`: the listen address will do).
///
/// - Listening on loopback: fine for join targets on loopback (a cluster on
///   one host); a target elsewhere could never reach it, so refused with
///   the fix named.
/// - Listening on a specific address: that address.
/// - Listening on every interface (`0.0.0.0`, `::`): the address of the
///   interface routing to the first join target, else to the default
///   route; with neither, refused with the fix named.
///
/// `targets` are the join targets as given, with their resolved address;
/// `route(ip)` is the local address the kernel would send to `ip` from.
pub fn advertised_ip(
    listen: SocketAddr,
    targets: &[(String, SocketAddr)],
    route: &dyn Fn(IpAddr) -> Option<IpAddr>,
) -> Result<Option<IpAddr>, ClusterError> {
    let ip = listen.ip();
    if ip.is_loopback() {
        return match targets.iter().find(|(_, a)| !a.ip().is_loopback()) {
            Some((t, _)) => Err(ClusterError::LoopbackListen {
                listen,
                target: host_of(t).to_owned(),
                port: listen.port(),
            }),
            None => Ok(None),
        };
    }
    if !ip.is_unspecified() {
        return Ok(None);
    }
    let probe = targets.first().map_or(DEFAULT_ROUTE_PROBE, |(_, a)| a.ip());
    match route(probe) {
        Some(local) if !local.is_unspecified() => {
            if local.is_loopback() && targets.is_empty() {
                // A default route through loopback says nothing useful.
                return Err(ClusterError::NoAdvertisedAddress {
                    listen,
                    port: listen.port(),
                });
            }
            Ok(Some(local))
        }
        _ => Err(ClusterError::NoAdvertisedAddress {
            listen,
            port: listen.port(),
        }),
    }
}

/// The local address the kernel would send to `ip` from: a UDP socket
/// connected to it (no packet leaves; this is only a route lookup).
pub fn route_to(ip: IpAddr) -> Option<IpAddr> {
    let bind: SocketAddr = match ip {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect((ip, 9)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// `HOST:PORT` of a join target and its first resolved address.
fn resolve_join(t: &str) -> Result<(String, SocketAddr), ClusterError> {
    let bad = |reason: String| ClusterError::BadJoin {
        target: t.to_owned(),
        reason,
    };
    let hostport = parse_join(t).map_err(bad)?;
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| bad(format!("cannot resolve {}: {e}", host_of(&hostport))))?
        .next()
        .ok_or_else(|| bad(format!("{} resolves to no address", host_of(&hostport))))?;
    Ok((hostport, addr))
}

/// Checks a join target's form: `HOST:PORT` or `tcp://HOST:PORT`, port
/// 1..=65535, a host of at most 253 bytes without spaces. Returns
/// `HOST:PORT`.
pub fn parse_join(t: &str) -> Result<String, String> {
    let a = t.strip_prefix("tcp://").unwrap_or(t);
    let Some((host, port)) = a.rsplit_once(':') else {
        return Err("expected HOST:PORT (e.g. 10.0.0.1:7700)".into());
    };
    if host.is_empty()
        || host.len() > 253
        || host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(format!(
            "host {:?} is not a host name or address",
            tagwire_proto::excerpt(host)
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(a.to_owned()),
        _ => Err(format!(
            "port {:?} is not 1..=65535",
            tagwire_proto::excerpt(port)
        )),
    }
}

fn host_of(t: &str) -> &str {
    let a = t.trim_start_matches("tcp://");
    a.rsplit_once(':').map_or(a, |(h, _)| h)
}

/// Reads the cluster secret: a private file, 16..=255 bytes of text.
pub fn read_secret(path: &Path) -> Result<String, ClusterError> {
    use std::os::unix::fs::PermissionsExt;
    let read = |source| ClusterError::ReadSecret {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ClusterError::SecretPermissions {
            path: path.to_owned(),
            mode,
        });
    }
    if meta.len() > MAX_SECRET_FILE {
        return Err(ClusterError::BadSecret {
            path: path.to_owned(),
            reason: format!(
                "{} bytes; a secret is at most {}",
                meta.len(),
                SECRET_LEN.end()
            ),
        });
    }
    let bytes = std::fs::read(path).map_err(read)?;
    parse_secret(&bytes).map_err(|reason| ClusterError::BadSecret {
        path: path.to_owned(),
        reason,
    })
}

/// The secret in a file's bytes: UTF-8 text without control characters,
/// surrounding whitespace removed, 16..=255 bytes.
pub fn parse_secret(bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the secret is not UTF-8 text".to_owned())?;
    let s = text.trim();
    if s.chars().any(char::is_control) {
        return Err("the secret has control characters (it is one line of text)".into());
    }
    if !SECRET_LEN.contains(&s.len()) {
        return Err(format!(
            "a secret must be {} to {} bytes, this one is {}",
            SECRET_LEN.start(),
            SECRET_LEN.end(),
            s.len()
        ));
    }
    Ok(s.to_owned())
}

/// Writes a new random secret (32 bytes from the kernel, as hex) to
/// `path`, readable by this user only (mode 0600). Refuses to overwrite.
pub fn write_new_secret(path: &Path) -> Result<(), ClusterError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let write = |source| ClusterError::WriteSecret {
        path: path.to_owned(),
        source,
    };
    let mut bytes = [0u8; GENERATED_BYTES];
    crate::local::random_bytes(&mut bytes).map_err(write)?;
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ClusterError::SecretExists {
                path: path.to_owned(),
            })
        }
        Err(e) => return Err(write(e)),
    };
    f.write_all(format!("{}\n", crate::local::hex(&bytes)).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("valid socket address")
    }

    fn target(s: &str) -> (String, SocketAddr) {
        (s.to_owned(), sa(s))
    }

    /// A host with 10.0.0.1 toward 10.0.0.0/8, 192.168.1.5 toward the rest.
    fn routes(ip: IpAddr) -> Option<IpAddr> {
        match ip {
            IpAddr::V4(v) if v.is_loopback() => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            IpAddr::V4(v) if v.octets()[0] == 10 => "10.0.0.1".parse().ok(),
            IpAddr::V4(_) => "192.168.1.5".parse().ok(),
            IpAddr::V6(_) => None,
        }
    }

    #[test]
    fn every_interface_advertises_the_address_routing_to_the_join_target() {
        let ip = advertised_ip(sa("0.0.0.0:7700"), &[target("10.0.0.2:7700")], &routes)
            .expect("derived");
        assert_eq!(ip, "10.0.0.1".parse().ok());
        let ip = advertised_ip(sa("0.0.0.0:7700"), &[target("172.16.0.9:7700")], &routes)
            .expect("derived");
        assert_eq!(ip, "192.168.1.5".parse().ok());
    }

    #[test]
    fn every_interface_without_a_join_target_advertises_the_default_route_address() {
        let ip = advertised_ip(sa("0.0.0.0:7700"), &[], &routes).expect("derived");
        assert_eq!(ip, "192.168.1.5".parse().ok());
        let e = advertised_ip(sa("0.0.0.0:7700"), &[], &|_| None).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("--listen IP:7700") && m.contains("[federation] gossip"),
            "{m}"
        );
    }

    #[test]
    fn loopback_listen_with_a_remote_join_is_refused_with_the_fix_named() {
        let e =
            advertised_ip(sa("127.0.0.1:7700"), &[target("10.0.0.2:7700")], &routes).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--listen 127.0.0.1:7700 cannot be reached by 10.0.0.2: use --listen 0.0.0.0:7700 or the interface address"
        );
        let e = advertised_ip(
            sa("127.0.0.1:7700"),
            &[("b:7700".to_owned(), sa("10.0.0.2:7700"))],
            &routes,
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot be reached by b:"), "{e}");
    }

    #[test]
    fn loopback_listen_with_loopback_joins_and_a_specific_listen_keep_the_listen_address() {
        let same_host = advertised_ip(sa("127.0.0.1:7710"), &[target("127.0.0.1:7700")], &routes);
        assert_eq!(same_host.expect("a cluster on one host"), None);
        let specific = advertised_ip(sa("10.0.0.1:7700"), &[target("10.0.0.2:7700")], &routes);
        assert_eq!(specific.expect("listen address reachable"), None);
    }

    fn secret_file(dir: &Path, contents: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("cluster.secret");
        std::fs::write(&p, contents).expect("write secret");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    #[test]
    fn apply_sets_auth_acl_federation_token_peers_and_gossip_together() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = secret_file(dir.path(), "  s3cret-s3cret-s3cret\n", 0o600);
        let mut cfg = RouterConfig::from_toml(
            &format!(
                "tcp = \"0.0.0.0:7700\"\n[cluster]\nsecret_file = {:?}\njoin = [\"10.0.0.2:7700\", \"tcp://10.0.0.3:7700\"]\n",
                f.display().to_string()
            ),
            Path::new("x.toml"),
        )
        .expect("valid config");
        let setup = apply_with(&mut cfg, &routes)
            .expect("applied")
            .expect("a cluster");
        assert_eq!(cfg.federation.token, "s3cret-s3cret-s3cret");
        assert!(cfg
            .auth
            .tokens
            .iter()
            .any(|t| t.name == "cluster" && t.token.as_deref() == Some("s3cret-s3cret-s3cret")));
        assert!(cfg
            .acl
            .iter()
            .any(|r| r.identity == "token:cluster" && r.admin));
        assert_eq!(cfg.federation.peers, vec!["10.0.0.2:7700", "10.0.0.3:7700"]);
        assert_eq!(cfg.federation.gossip, Some(sa("10.0.0.1:7700")));
        assert_eq!(setup.advertised, Some(sa("10.0.0.1:7700")));
        assert!(!setup.to_string().contains("s3cret"), "{setup}");
        cfg.validate().expect("the result validates");
        let twice = apply_with(&mut cfg, &routes).expect("second apply");
        assert_eq!(twice, None, "the section is consumed");
        assert_eq!(cfg.auth.tokens.len(), 1);
    }

    #[test]
    fn bad_secret_files_are_named_with_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = secret_file(dir.path(), "s3cret-s3cret-s3cret", 0o644);
        let e = read_secret(&f).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && e.contains("644"), "{e}");
        let f = secret_file(dir.path(), "short", 0o600);
        let e = read_secret(&f).unwrap_err().to_string();
        assert!(e.contains("16 to 255"), "{e}");
        let e = read_secret(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--new-cluster-secret"), "{e}");
    }

    #[test]
    fn new_secrets_are_private_random_and_never_overwrite() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write_new_secret(&a).expect("written");
        write_new_secret(&b).expect("written");
        let mode = std::fs::metadata(&a).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (sa_, sb) = (
            read_secret(&a).expect("valid"),
            read_secret(&b).expect("valid"),
        );
        assert_eq!(sa_.len(), 64);
        assert_ne!(sa_, sb);
        let e = write_new_secret(&a).unwrap_err();
        assert!(matches!(e, ClusterError::SecretExists { .. }), "{e}");
        assert_eq!(read_secret(&a).expect("kept"), sa_);
    }

    #[test]
    fn join_without_secret_and_contradictions_are_refused() {
        let mut cfg = RouterConfig::default();
        cfg.cluster.join = vec!["10.0.0.2:7700".into()];
        let e = apply_with(&mut cfg, &routes).unwrap_err().to_string();
        assert!(e.contains("needs --cluster-secret-file"), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        let f = secret_file(dir.path(), "s3cret-s3cret-s3cret", 0o600);
        let mut cfg = RouterConfig::default();
        cfg.cluster.secret_file = Some(f);
        cfg.federation.token = "another-token-0123456789".into();
        let e = apply_with(&mut cfg, &routes).unwrap_err().to_string();
        assert!(e.contains("[federation] token"), "{e}");
    }

    proptest! {
        #[test]
        fn join_targets_parse_or_say_what_is_wrong(t in "\\PC{0,40}") {
            match parse_join(&t) {
                Ok(hp) => {
                    let (h, p) = hp.rsplit_once(':').expect("HOST:PORT");
                    prop_assert!(!h.is_empty());
                    prop_assert!(p.parse::<u16>().is_ok_and(|p| p != 0));
                }
                Err(m) => prop_assert!(!m.is_empty()),
            }
        }

        #[test]
        fn valid_join_targets_round_trip(host in "[a-z][a-z0-9.-]{0,30}", port in 1u16..) {
            let t = format!("{host}:{port}");
            prop_assert_eq!(parse_join(&t), Ok(t.clone()));
            prop_assert_eq!(parse_join(&format!("tcp://{t}")), Ok(t));
        }

        #[test]
        fn secrets_are_trimmed_text_of_bounded_length(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            match parse_secret(&bytes) {
                Ok(s) => {
                    prop_assert!(SECRET_LEN.contains(&s.len()));
                    prop_assert_eq!(s.trim(), s.as_str());
                    prop_assert!(!s.chars().any(char::is_control));
                }
                Err(m) => prop_assert!(!m.is_empty()),
            }
        }

        #[test]
        fn cluster_sections_parse_or_name_the_bad_key(secret in "[a-z/._-]{0,20}", join in prop::collection::vec("[a-z0-9.:]{0,20}", 0..3), extra in prop::option::of("[a-z_]{1,10}")) {
            let mut text = format!("[cluster]\nsecret_file = {secret:?}\njoin = {join:?}\n");
            if let Some(k) = &extra {
                text.push_str(&format!("{k} = 1\n"));
            }
            match toml::from_str::<RouterConfig>(&text) {
                Ok(c) => {
                    prop_assert!(extra.is_none());
                    prop_assert_eq!(c.cluster.join, join);
                }
                Err(e) => {
                    let k = extra.expect("only an unknown key fails");
                    prop_assert!(e.to_string().contains(&k), "{}", e);
                }
            }
        }
    }
}
