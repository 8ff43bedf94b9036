//! Server addresses: `tcp://HOST:PORT`, `tls://HOST:PORT` (TCP with TLS;
//! settings in [`crate::TlsOptions`]), `udp://HOST:PORT` (datagrams, best
//! effort; docs/transports.md) and `unix:///PATH`.

use std::path::PathBuf;

use crate::error::Error;

/// Where a session connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerUrl {
    /// A TCP address, `tcp://HOST:PORT`.
    Tcp(String),
    /// A TCP address spoken to with TLS, `tls://HOST:PORT`.
    Tls(String),
    /// A Unix socket path, `unix:///PATH`.
    Unix(PathBuf),
    /// A daemon's UDP listener, `udp://HOST:PORT` (`tagwired --udp`):
    /// datagrams, best effort, loss counted.
    Udp(String),
}

impl ServerUrl {
    /// Parses `tcp://HOST:PORT`, `tls://HOST:PORT` or `unix:///PATH` (also
    /// `unix:PATH`).
    pub fn parse(url: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let host_port = |scheme: &str, rest: &str| {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad(&format!("expected {scheme}://HOST:PORT")))?;
            if host.is_empty() {
                return Err(bad("missing host"));
            }
            port.parse::<u16>()
                .map_err(|_| bad("port must be a number 0-65535"))?;
            Ok(rest.to_owned())
        };
        if let Some(rest) = url.strip_prefix("tcp://") {
            Ok(ServerUrl::Tcp(host_port("tcp", rest)?))
        } else if let Some(rest) = url.strip_prefix("tls://") {
            Ok(ServerUrl::Tls(host_port("tls", rest)?))
        } else if let Some(rest) = url.strip_prefix("udp://") {
            Ok(ServerUrl::Udp(host_port("udp", rest)?))
        } else if let Some(rest) = url
            .strip_prefix("unix://")
            .or_else(|| url.strip_prefix("unix:"))
        {
            if rest.is_empty() {
                return Err(bad("missing socket path"));
            }
            Ok(ServerUrl::Unix(PathBuf::from(rest)))
        } else {
            Err(bad(
                "expected tcp://HOST:PORT, tls://HOST:PORT, udp://HOST:PORT or unix:///PATH",
            ))
        }
    }

    /// The local daemon: its Unix socket if that exists in the user's
    /// private runtime directory, else `tcp://127.0.0.1:7700`. A runtime
    /// directory that is not private (another user made it) is not used.
    pub fn local_default() -> Self {
        let path = tagwire_router::config::default_unix_path();
        let private = path.parent().map(tagwire_router::local::check_private_dir);
        match private {
            Some(Ok(())) if path.exists() => return ServerUrl::Unix(path),
            Some(Err(e)) if path.exists() => tracing::warn!("not using the local socket: {e}"),
            _ => {}
        }
        ServerUrl::Tcp(tagwire_router::config::DEFAULT_TCP.to_owned())
    }
}

impl std::fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerUrl::Tcp(a) => write!(f, "tcp://{a}"),
            ServerUrl::Tls(a) => write!(f, "tls://{a}"),
            ServerUrl::Udp(a) => write!(f, "udp://{a}"),
            ServerUrl::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_say_why() {
        assert_eq!(
            ServerUrl::parse("tcp://127.0.0.1:7700").ok(),
            Some(ServerUrl::Tcp("127.0.0.1:7700".into()))
        );
        assert_eq!(
            ServerUrl::parse("tls://broker.lan:7701").ok(),
            Some(ServerUrl::Tls("broker.lan:7701".into()))
        );
        assert_eq!(
            ServerUrl::parse("udp://10.0.0.1:7710").ok(),
            Some(ServerUrl::Udp("10.0.0.1:7710".into()))
        );
        assert_eq!(
            ServerUrl::parse("unix:///run/t.sock").ok(),
            Some(ServerUrl::Unix("/run/t.sock".into()))
        );
        for (bad, why) in [
            ("http://x", "expected"),
            ("tcp://x", "HOST:PORT"),
            ("tcp://x:99999", "port"),
            ("tls://x", "tls://HOST:PORT"),
            ("tls://:7701", "host"),
            ("udp://x", "udp://HOST:PORT"),
            ("udp://x:port", "port"),
            ("unix://", "path"),
        ] {
            let e = ServerUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }
}
