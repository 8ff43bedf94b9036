//! TLS on the TCP listener, with optional client certificates (mTLS).
//!
//! [`server_config`] loads the `[tls]` files of a [`TlsConfig`] into a rustls
//! server configuration (ring provider) and names the file and the step at
//! fault when it cannot; [`cert_identity`] turns a verified client
//! certificate into the connection's identity, `cert:<subject CN>` (else
//! `cert:<first DNS name>`). The PEM loaders are shared with the client
//! library.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{PeerTlsConfig, TlsConfig};

/// A TLS file that could not be used, or a set of files that do not fit
/// together. Each variant names the file and what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read TLS {what} file {path}: {source}")]
    Read {
        /// Which file: "certificate", "private key", "client CA", "CA".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid PEM, or holds no item of the kind wanted.
    #[error("TLS {what} file {path}: {reason}")]
    Pem {
        /// Which file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was wrong ("no CERTIFICATE block found", a PEM parse error).
        reason: String,
    },
    /// rustls refused the certificate chain and key (e.g. the key does not
    /// belong to the certificate, or an unsupported key type).
    #[error("TLS certificate {cert} with key {key}: {reason}")]
    CertAndKey {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        reason: String,
    },
    /// A CA certificate could not be used as a trust anchor, or no
    /// verifier could be built from it.
    #[error("TLS {what} file {path}: {reason}")]
    Anchor {
        /// Which file: "client CA" or "CA".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The crypto provider everything here uses (ring: quick to build).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads every certificate of a PEM file; `what` names the file's role in
/// errors. An empty file (no `CERTIFICATE` block) is an error.
pub fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, what, e))?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: "no CERTIFICATE block found".into(),
        });
    }
    Ok(certs)
}

/// Loads the first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let what = "private key";
    let pem = read_file(path, what)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: "no PRIVATE KEY block found (PKCS#8, RSA or EC)".into(),
        },
        e => pem_error(path, what, e),
    })
}

/// Loads the CA certificates of a PEM file as trust anchors.
pub fn load_roots(path: &Path, what: &'static str) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(path, what)? {
        roots.add(cert).map_err(|e| TlsError::Anchor {
            what,
            path: path.to_owned(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn read_file(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn pem_error(path: &Path, what: &'static str, e: rustls::pki_types::pem::Error) -> TlsError {
    TlsError::Pem {
        what,
        path: path.to_owned(),
        reason: format!("not valid PEM: {e}"),
    }
}

/// Builds the listener's TLS configuration from the `[tls]` files: the
/// server's certificate chain and key and, when `client_ca` is set, a
/// verifier that **requires** a client certificate signed by that CA.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = load_certs(&tls.cert, "certificate")?;
    let key = load_private_key(&tls.key)?;
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::CertAndKey {
            cert: tls.cert.clone(),
            key: tls.key.clone(),
            reason: e.to_string(),
        })?;
    let builder = match &tls.client_ca {
        Some(ca) => {
            let roots = load_roots(ca, "client CA")?;
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| TlsError::Anchor {
                        what: "client CA",
                        path: ca.clone(),
                        reason: e.to_string(),
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::CertAndKey {
            cert: tls.cert.clone(),
            key: tls.key.clone(),
            reason: e.to_string(),
        })?;
    Ok(Arc::new(config))
}

/// What a daemon needs to dial `tls://` peers: a client configuration that
/// verifies them against `[federation.tls] ca` (and presents this daemon's
/// client certificate, if one is configured), and the name to expect.
#[derive(Clone)]
pub struct LinkTls {
    connector: tokio_rustls::TlsConnector,
    server_name: Option<rustls::pki_types::ServerName<'static>>,
    ca: PathBuf,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTls")
            .field("server_name", &self.server_name)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl LinkTls {
    /// Loads the `[federation.tls]` files, naming the one at fault.
    pub fn new(t: &PeerTlsConfig) -> Result<LinkTls, TlsError> {
        let roots = load_roots(&t.ca, "CA")?;
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Anchor {
                what: "CA",
                path: t.ca.clone(),
                reason: e.to_string(),
            })?
            .with_root_certificates(roots);
        let config = match (&t.cert, &t.key) {
            (Some(cert), Some(key)) => {
                let chain = load_certs(cert, "certificate")?;
                let k = load_private_key(key)?;
                builder
                    .with_client_auth_cert(chain, k)
                    .map_err(|e| TlsError::CertAndKey {
                        cert: cert.clone(),
                        key: key.clone(),
                        reason: e.to_string(),
                    })?
            }
            _ => builder.with_no_client_auth(),
        };
        let server_name =
            match &t.server_name {
                Some(n) => Some(rustls::pki_types::ServerName::try_from(n.clone()).map_err(
                    |e| TlsError::Anchor {
                        what: "CA",
                        path: t.ca.clone(),
                        reason: format!("invalid [federation.tls] server_name {n:?}: {e}"),
                    },
                )?),
                None => None,
            };
        Ok(LinkTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
            ca: t.ca.clone(),
        })
    }

    /// Completes the TLS handshake with the peer at `addr` (`HOST:PORT`) on
    /// `tcp`; the error says what failed and names the CA file.
    pub(crate) async fn connect(
        &self,
        addr: &str,
        tcp: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => {
                let host = addr
                    .rsplit_once(':')
                    .map_or(addr, |(h, _)| h)
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|e| format!("{host:?} is not a TLS server name: {e}"))?
            }
        };
        self.connector.connect(name, tcp).await.map_err(|e| {
            format!(
                "TLS handshake failed: {e} (the peer's certificate must chain to {} and name the \
                 host dialed, or [federation.tls] server_name)",
                self.ca.display()
            )
        })
    }
}

/// The identity a verified client certificate gives: `cert:<subject CN>`,
/// else `cert:<first DNS subject alternative name>`; `None` if the
/// certificate cannot be parsed or names neither.
pub fn cert_identity(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = x509
        .subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok().map(str::to_owned));
    let name = cn.or_else(|| {
        let san = x509.subject_alternative_name().ok()??;
        san.value.general_names.iter().find_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
            _ => None,
        })
    })?;
    Some(format!("cert:{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(cn: Option<&str>, dns: &[&str]) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("valid SANs");
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        let key = rcgen::KeyPair::generate().expect("key generation");
        params.self_signed(&key).expect("self-signed").der().clone()
    }

    #[test]
    fn identity_is_the_subject_common_name() {
        let cert = cert_with(Some("alice"), &["alice.example"]);
        assert_eq!(cert_identity(&cert).as_deref(), Some("cert:alice"));
    }

    #[test]
    fn identity_falls_back_to_the_first_dns_name_without_a_common_name() {
        let cert = cert_with(None, &["bob.example", "other.example"]);
        assert_eq!(cert_identity(&cert).as_deref(), Some("cert:bob.example"));
    }

    #[test]
    fn garbage_gives_no_identity() {
        let cert = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01]);
        assert_eq!(cert_identity(&cert), None);
    }

    #[test]
    fn missing_files_are_named_with_their_role() {
        let tls = TlsConfig {
            cert: "/nonexistent/server.pem".into(),
            key: "/nonexistent/server.key".into(),
            client_ca: None,
        };
        let e = server_config(&tls).expect_err("missing cert").to_string();
        assert!(
            e.contains("certificate") && e.contains("/nonexistent/server.pem"),
            "{e}"
        );
    }

    #[test]
    fn a_file_without_certificates_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, "not pem at all\n").expect("write");
        let e = load_certs(&path, "certificate")
            .expect_err("no certificate")
            .to_string();
        assert!(
            e.contains("no CERTIFICATE") && e.contains("empty.pem"),
            "{e}"
        );
        let e = load_private_key(&path).expect_err("no key").to_string();
        assert!(
            e.contains("no PRIVATE KEY") && e.contains("empty.pem"),
            "{e}"
        );
    }
}
