//! Test certificates made with rcgen in a temporary directory, shared by
//! the TLS integration tests (`#[path]`-included: not a test target).

#![allow(dead_code)]

use std::path::PathBuf;

/// A certificate authority that signs leaf certificates into `dir`.
pub struct Ca {
    pub issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    pub pem: PathBuf,
}

/// A certificate and its key on disk.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn new_ca(dir: &tempfile::TempDir, name: &str) -> Ca {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} test CA"));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let key = rcgen::KeyPair::generate().expect("CA key");
    let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("self-sign CA");
    let pem = dir.path().join(format!("{name}-ca.pem"));
    std::fs::write(&pem, issuer.pem()).expect("write CA");
    Ca { issuer, pem }
}

impl Ca {
    /// Signs a certificate with subject CN `cn` and these subject alternative
    /// names, for a server or a client.
    pub fn sign(&self, dir: &tempfile::TempDir, cn: &str, sans: &[&str], server: bool) -> Leaf {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("leaf params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        let leaf = Leaf {
            cert: dir.path().join(format!("{cn}.pem")),
            key: dir.path().join(format!("{cn}.key")),
        };
        std::fs::write(&leaf.cert, cert.pem()).expect("write cert");
        std::fs::write(&leaf.key, key.serialize_pem()).expect("write key");
        leaf
    }
}

/// A CA, a server certificate for 127.0.0.1/localhost, a client
/// certificate for alice, and a second, unrelated CA.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub server: Leaf,
    pub alice: Leaf,
    pub other_ca: Ca,
}

pub fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = new_ca(&dir, "main");
    let server = ca.sign(&dir, "server", &["localhost", "127.0.0.1"], true);
    let alice = ca.sign(&dir, "alice", &[], false);
    let other_ca = new_ca(&dir, "other");
    Pki {
        dir,
        ca,
        server,
        alice,
        other_ca,
    }
}

/// An ACL letting the client certificate's identity, `cert:alice`, publish
/// and subscribe anywhere (other identities have no rights).
pub fn alice_acl() -> Vec<tagwire::router::config::AclRule> {
    vec![tagwire::router::config::AclRule {
        identity: "cert:alice".into(),
        publish: vec!["/**".into()],
        subscribe: vec!["/**".into()],
        admin: false,
    }]
}
