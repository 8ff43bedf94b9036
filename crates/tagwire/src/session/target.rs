//! Where a session's connection comes from: a daemon's URL, a `tls://`
//! address with its loaded settings, or an in-process router.

use std::sync::Arc;
use std::time::Duration;

use tagwire_router::RouterHandle;

use crate::error::{Error, Result};
use crate::stream::is_timeout;
use crate::stream::Stream;
use crate::tls::{TlsConnector, TlsOptions};
use crate::url::ServerUrl;

/// Where a session's connection comes from.
pub(crate) enum Target {
    Url(ServerUrl),
    Embedded(Arc<RouterHandle>),
    /// A `tls://` URL's `HOST:PORT` with its loaded TLS settings (reused on
    /// reconnect).
    Tls(String, TlsConnector),
}

impl Target {
    /// A target for `url`; `tls` gives the settings if it is `tls://`.
    pub(crate) fn new(url: ServerUrl, tls: impl FnOnce() -> TlsOptions) -> Result<Target> {
        Ok(match url {
            ServerUrl::Tls(addr) => {
                let connector = TlsConnector::new(&tls(), &format!("tls://{addr}"))?;
                Target::Tls(addr, connector)
            }
            url => Target::Url(url),
        })
    }

    pub(super) fn connect(
        &self,
        timeout: Duration,
        band: Option<&crate::options::ClientBand>,
    ) -> Result<Stream> {
        match self {
            Target::Url(url) => Stream::connect(url, timeout, band).map_err(|source| {
                if is_timeout(&source) {
                    Error::ConnectTimeout {
                        url: url.to_string(),
                        timeout,
                    }
                } else {
                    Error::Connect {
                        url: url.to_string(),
                        source,
                    }
                }
            }),
            Target::Embedded(r) => Ok(Stream::Unix(match band {
                Some(b) => r.connect_in_process_on(&b.name)?,
                None => r.connect_in_process()?,
            })),
            Target::Tls(addr, connector) => {
                Stream::connect_tls(connector, addr, &format!("tls://{addr}"), timeout)
            }
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Target::Url(u) => u.to_string(),
            Target::Tls(addr, _) => format!("tls://{addr}"),
            Target::Embedded(_) => "embedded".into(),
        }
    }

    /// The token to present in `Hello` (empty: the transport identifies us).
    pub(super) fn token(&self) -> String {
        match self {
            Target::Tls(_, c) if c.has_client_cert() => crate::credentials::token_beside_cert(),
            Target::Url(ServerUrl::Tcp(addr)) | Target::Tls(addr, _) => {
                crate::credentials::token_for(addr)
            }
            Target::Url(ServerUrl::Udp(addr)) => crate::credentials::token_for_udp(addr),
            Target::Url(_) | Target::Embedded(_) => String::new(),
        }
    }
}
