//! Who is on the other end of a connection (its **identity**) and what that
//! identity may do (its **rights**). See `docs/security.md`.
//!
//! Identities are strings: `uid:1000` (Unix peer credentials, or the
//! daemon's own local token), `token:alice` (a configured token),
//! `cert:alice` (a verified TLS client certificate), `anonymous` (only when
//! authentication is switched off). The daemon's **owner** — its own uid, and
//! root — has every right; other identities get what the `[[acl]]` rules of
//! the configuration grant them, and nothing when no rule names them.

use std::sync::Arc;

use tagwire_core::tags::{Level, Pattern};
use tagwire_proto::ErrorCode;

pub use crate::config::auth::{AclRule, AuthConfig, TokenConfig};
use crate::config::error::ConfigError;

/// What one identity may do.
#[derive(Debug, Clone, Default)]
pub struct Rights {
    /// May administer every endpoint.
    pub admin: bool,
    publish_all: bool,
    publish: Vec<Pattern>,
    subscribe_all: bool,
    subscribe: Vec<Pattern>,
}

impl Rights {
    /// Every right: the owner's.
    pub fn all() -> Rights {
        Rights {
            admin: true,
            publish_all: true,
            subscribe_all: true,
            ..Rights::default()
        }
    }

    /// Whether nothing at all is granted.
    pub fn is_empty(&self) -> bool {
        !self.admin
            && !self.publish_all
            && !self.subscribe_all
            && self.publish.is_empty()
            && self.subscribe.is_empty()
    }

    /// Whether it may publish on `tag` (a valid tag).
    pub fn may_publish(&self, tag: &str) -> bool {
        self.publish_all || self.publish.iter().any(|p| p.matches(tag))
    }

    /// Whether it may subscribe to `pattern`: some granted pattern covers it.
    pub fn may_subscribe(&self, pattern: &Pattern) -> bool {
        self.subscribe_all || self.subscribe.iter().any(|p| p.covers(pattern))
    }

    fn add(&mut self, rule: &CompiledRule) {
        self.admin |= rule.admin;
        for p in &rule.publish {
            if is_everything(p) {
                self.publish_all = true;
            }
            self.publish.push(p.clone());
        }
        for p in &rule.subscribe {
            if is_everything(p) {
                self.subscribe_all = true;
            }
            self.subscribe.push(p.clone());
        }
    }
}

fn is_everything(p: &Pattern) -> bool {
    matches!(p.levels(), [Level::Any])
}

/// How a connection reached the router, before any credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A Unix socket; `uid` from the peer's credentials (`SO_PEERCRED`).
    Unix {
        /// The peer's uid, if the kernel told.
        uid: Option<u32>,
    },
    /// TCP; `cert` is the identity of a verified TLS client certificate.
    Tcp {
        /// `cert:NAME` when mutual TLS verified one.
        cert: Option<String>,
    },
    /// An in-process client of an embedded router (the application itself).
    InProcess,
    /// A UDP session (`udp://`): identifies nobody, like plain TCP; the
    /// session's loss counters ride along for `tagwire list`.
    Udp {
        /// The session's counters.
        stats: crate::state::udp::StatsRef,
    },
}

impl Transport {
    /// Its name in `tagwire list` (`tcp`, `unix`, `in-process`, `udp`;
    /// the router says `tls` for TCP when its listener serves TLS).
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Unix { .. } => "unix",
            Transport::Tcp { .. } => "tcp",
            Transport::InProcess => "in-process",
            Transport::Udp { .. } => "udp",
        }
    }
}

struct CompiledRule {
    identity: String,
    publish: Vec<Pattern>,
    subscribe: Vec<Pattern>,
    admin: bool,
}

/// Checks credentials and hands out identities with their rights. Built once
/// from the configuration when the router starts.
pub struct Authenticator {
    enabled: bool,
    owner_uid: u32,
    /// `(secret, identity)`; the local token maps to the owner.
    tokens: Vec<(String, String)>,
    rules: Vec<CompiledRule>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("enabled", &self.enabled)
            .field("owner_uid", &self.owner_uid)
            .field("tokens", &self.tokens.len())
            .field("rules", &self.rules.len())
            .finish()
    }
}

/// A refusal: the `Error` code and message to send before closing.
pub type Refusal = (ErrorCode, String);

/// A `Hello` accepted by [`Authenticator::authenticate_hello`].
#[derive(Debug)]
pub struct Granted {
    /// Who the client is.
    pub identity: Arc<str>,
    /// What it may do.
    pub rights: Rights,
    /// The token its version-3 `Hello` named, which the server must prove
    /// it knows before the client proves it (`None`: welcome at once).
    pub prove: Option<String>,
}

fn unknown_token() -> Refusal {
    (
        ErrorCode::Unauthenticated,
        "the token presented is not valid for this daemon".into(),
    )
}

impl Authenticator {
    /// Compiles the ACL and loads the tokens; `local_token` is the owner's
    /// token written to the runtime directory, if any.
    pub fn new(
        auth: &AuthConfig,
        acl: &[AclRule],
        owner_uid: u32,
        local_token: Option<String>,
    ) -> Result<Authenticator, ConfigError> {
        let mut tokens = Vec::new();
        if let Some(t) = local_token {
            tokens.push((t, format!("uid:{owner_uid}")));
        }
        for (i, t) in auth.tokens.iter().enumerate() {
            let secret = load_token(i, t)?;
            // Two identities with one secret: only the first could ever
            // authenticate, silently.
            if tokens.iter().any(|(s, _)| same_secret(s, &secret)) {
                return Err(ConfigError::Invalid(format!(
                    "auth.tokens[{i}] ({}): the same secret as another token (or the local token)",
                    t.name
                )));
            }
            tokens.push((secret, format!("token:{}", t.name)));
        }
        let rules = acl
            .iter()
            .enumerate()
            .map(|(i, r)| compile_rule(i, r))
            .collect::<Result<_, _>>()?;
        Ok(Authenticator {
            enabled: auth.enabled,
            owner_uid,
            tokens,
            rules,
        })
    }

    /// An authenticator that lets everyone do everything (`[auth] enabled =
    /// false`, and embedded routers, whose only clients are in-process).
    pub fn disabled(owner_uid: u32) -> Authenticator {
        Authenticator {
            enabled: false,
            owner_uid,
            tokens: Vec::new(),
            rules: Vec::new(),
        }
    }

    /// Whether clients must authenticate.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A one-line description for the start-up log and `tagwire list`.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "off: every local client may do everything (loopback only)".into();
        }
        format!(
            "on: owner uid:{}, {} token(s), {} ACL rule(s)",
            self.owner_uid,
            self.tokens.len(),
            self.rules.len()
        )
    }

    /// The identity and rights of a client that reached the router over
    /// `transport` and presented `token` (empty: none), or why it is refused.
    pub fn authenticate(
        &self,
        transport: &Transport,
        token: &str,
    ) -> Result<(Arc<str>, Rights), Refusal> {
        if !self.enabled {
            return Ok((Arc::from("anonymous"), Rights::all()));
        }
        let identity: Arc<str> =
            if !token.is_empty() {
                match self
                    .tokens
                    .iter()
                    .find(|(secret, _)| same_secret(secret, token))
                {
                    Some((_, id)) => Arc::from(id.as_str()),
                    None => return Err(unknown_token()),
                }
            } else {
                match transport {
                    Transport::InProcess => Arc::from(format!("uid:{}", self.owner_uid)),
                    Transport::Unix { uid: Some(uid) } => Arc::from(format!("uid:{uid}")),
                    Transport::Unix { uid: None } => {
                        return Err((
                            ErrorCode::Unauthenticated,
                            "the kernel did not give the Unix peer's credentials; present a token"
                                .into(),
                        ))
                    }
                    Transport::Tcp { cert: Some(c) } => Arc::from(c.as_str()),
                    Transport::Udp { .. } => return Err((
                        ErrorCode::Unauthenticated,
                        "no credentials: over UDP a client presents a token (TAGWIRE_TOKEN, or \
                         the daemon's token file in its owner's runtime directory); see \
                         docs/security.md"
                            .into(),
                    )),
                    Transport::Tcp { cert: None } => return Err((
                        ErrorCode::Unauthenticated,
                        "no credentials: over TCP a client presents a token (TAGWIRE_TOKEN, or \
                         the daemon's token file in its owner's runtime directory) or a TLS \
                         client certificate; see docs/security.md"
                            .into(),
                    )),
                }
            };
        self.grant(identity)
    }

    /// `identity` with its rights, or refused if it has none.
    fn grant(&self, identity: Arc<str>) -> Result<(Arc<str>, Rights), Refusal> {
        let rights = self.rights(&identity);
        if rights.is_empty() {
            return Err((
                ErrorCode::PermissionDenied,
                format!(
                    "identity {identity} has no rights on this daemon (no [[acl]] rule names it; \
                     see docs/security.md)"
                ),
            ));
        }
        Ok((identity, rights))
    }

    /// [`Authenticator::authenticate`] for a `Hello`: a refused daemon
    /// (a client named `link:NAME`, as dialing daemons call themselves) is
    /// told the daemon-side setting to fix, not the client-side
    /// `TAGWIRE_TOKEN`. The name is the peer's claim; it changes only the
    /// wording.
    ///
    /// A version-3 `Hello` names its token by a tag (see
    /// `tagwire_proto::handshake`): the token it names decides the identity
    /// (as a bearer token does, whatever the transport), and is returned so
    /// that the connection can prove it knows that token
    /// (`Connection::challenge`) before the client proves it in turn.
    pub fn authenticate_hello(
        &self,
        transport: &Transport,
        hello: &tagwire_core::connection::ClientHello,
    ) -> Result<Granted, Refusal> {
        let presented = hello.proof.is_some() || !hello.token.is_empty();
        let granted = match &hello.proof {
            Some(tag) if self.enabled => {
                match self.tokens.iter().find(|(secret, _)| tag.names(secret)) {
                    Some((secret, id)) => {
                        self.grant(Arc::from(id.as_str()))
                            .map(|(identity, rights)| Granted {
                                identity,
                                rights,
                                prove: Some(secret.clone()),
                            })
                    }
                    None => Err(unknown_token()),
                }
            }
            _ => self
                .authenticate(transport, &hello.token)
                .map(|(identity, rights)| Granted {
                    identity,
                    rights,
                    prove: None,
                }),
        };
        granted.map_err(|(code, message)| match hello.name.strip_prefix("link:") {
            Some(daemon) => (code, link_refusal(daemon, code, presented, &message)),
            None => (code, message),
        })
    }

    /// The rights of `identity`: everything for the owner and root, else
    /// the union of the rules naming it or `*`.
    pub fn rights(&self, identity: &str) -> Rights {
        if !self.enabled || identity == format!("uid:{}", self.owner_uid) || identity == "uid:0" {
            return Rights::all();
        }
        let mut r = Rights::default();
        for rule in self
            .rules
            .iter()
            .filter(|rule| rule.identity == "*" || rule.identity == identity)
        {
            r.add(rule);
        }
        r
    }
}

/// The refusal of daemon `daemon`'s link, in daemon terms.
fn link_refusal(daemon: &str, code: ErrorCode, presented: bool, message: &str) -> String {
    let daemon = tagwire_proto::excerpt(daemon);
    match code {
        ErrorCode::Unauthenticated if !presented => format!(
            "daemon {daemon} presented no token: give it the same --cluster-secret-file \
             ([federation] token) as this daemon"
        ),
        ErrorCode::Unauthenticated => format!(
            "daemon {daemon} presented a token this daemon does not know: [federation] token / \
             --cluster-secret-file differs between the two daemons"
        ),
        _ => format!(
            "daemon {daemon}: {message}; between daemons, give both the same \
             --cluster-secret-file (or an [[acl]] rule with admin = true for its token)"
        ),
    }
}

/// Compares two secrets in time that depends only on their lengths.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn load_token(i: usize, t: &TokenConfig) -> Result<String, ConfigError> {
    let bad = |m: String| ConfigError::Invalid(format!("auth.tokens[{i}] ({}): {m}", t.name));
    if t.name.is_empty() || t.name.contains(char::is_whitespace) {
        return Err(bad("name must be non-empty, without spaces".into()));
    }
    let secret = match (&t.token, &t.file) {
        (Some(s), None) => s.clone(),
        (None, Some(f)) => {
            let meta = std::fs::metadata(f)
                .map_err(|e| bad(format!("cannot read token file {}: {e}", f.display())))?;
            if meta.len() > 4096 {
                return Err(bad(format!(
                    "token file {} is {} bytes; a token is at most 255",
                    f.display(),
                    meta.len()
                )));
            }
            std::fs::read_to_string(f)
                .map_err(|e| bad(format!("cannot read token file {}: {e}", f.display())))?
                .trim()
                .to_owned()
        }
        _ => return Err(bad("give exactly one of `token` and `file`".into())),
    };
    if secret.len() < 16 || secret.len() > 255 {
        return Err(bad(format!(
            "a token must be 16 to 255 bytes, this one is {}",
            secret.len()
        )));
    }
    Ok(secret)
}

fn compile_rule(i: usize, r: &AclRule) -> Result<CompiledRule, ConfigError> {
    let valid_identity = r.identity == "*"
        || ["uid:", "token:", "cert:"].iter().any(|p| {
            r.identity
                .strip_prefix(p)
                .is_some_and(|rest| !rest.is_empty())
        });
    if !valid_identity {
        return Err(ConfigError::Invalid(format!(
            "acl[{i}].identity = {:?}: expected uid:N, token:NAME, cert:NAME or *",
            r.identity
        )));
    }
    let patterns = |what: &str, list: &[String]| {
        list.iter()
            .map(|p| {
                Pattern::parse(p).map_err(|e| {
                    ConfigError::Invalid(format!("acl[{i}].{what}: pattern {p:?}: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(CompiledRule {
        identity: r.identity.clone(),
        publish: patterns("publish", &r.publish)?,
        subscribe: patterns("subscribe", &r.subscribe)?,
        admin: r.admin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(identity: &str, publish: &[&str], subscribe: &[&str], admin: bool) -> AclRule {
        AclRule {
            identity: identity.into(),
            publish: publish.iter().map(|s| s.to_string()).collect(),
            subscribe: subscribe.iter().map(|s| s.to_string()).collect(),
            admin,
        }
    }

    fn auth(rules: &[AclRule]) -> Authenticator {
        let cfg = AuthConfig {
            tokens: vec![TokenConfig {
                name: "alice".into(),
                token: Some("alice-secret-0123456789".into()),
                file: None,
            }],
            ..AuthConfig::default()
        };
        Authenticator::new(&cfg, rules, 1000, Some("local-secret-0123456789".into()))
            .expect("valid auth config")
    }

    #[test]
    fn owner_and_root_over_unix_get_every_right_and_strangers_without_rules_are_refused() {
        let a = auth(&[]);
        for uid in [1000, 0] {
            let (id, r) = a
                .authenticate(&Transport::Unix { uid: Some(uid) }, "")
                .expect("owner accepted");
            assert_eq!(&*id, format!("uid:{uid}"));
            assert!(r.admin && r.may_publish("/x"));
        }
        let (code, msg) = a
            .authenticate(&Transport::Unix { uid: Some(1001) }, "")
            .unwrap_err();
        assert_eq!(code, ErrorCode::PermissionDenied);
        assert!(msg.contains("uid:1001"), "{msg}");
    }

    #[test]
    fn tcp_needs_a_valid_token_and_the_local_token_is_the_owner() {
        let a = auth(&[acl("token:alice", &["/a/**"], &[], false)]);
        let tcp = Transport::Tcp { cert: None };
        assert_eq!(
            a.authenticate(&tcp, "").unwrap_err().0,
            ErrorCode::Unauthenticated
        );
        assert_eq!(
            a.authenticate(&tcp, "local-secret-012345678X")
                .unwrap_err()
                .0,
            ErrorCode::Unauthenticated
        );
        let (id, r) = a
            .authenticate(&tcp, "local-secret-0123456789")
            .expect("owner");
        assert_eq!(&*id, "uid:1000");
        assert!(r.admin);
        let (id, r) = a
            .authenticate(&tcp, "alice-secret-0123456789")
            .expect("alice");
        assert_eq!(&*id, "token:alice");
        assert!(!r.admin && r.may_publish("/a/b") && !r.may_publish("/b"));
    }

    #[test]
    fn acl_rules_add_up_and_subscriptions_must_be_covered() {
        let a = auth(&[
            acl("uid:1001", &["/s/**"], &["/s/*/temp"], false),
            acl("*", &[], &["/public/**"], false),
        ]);
        let r = a.rights("uid:1001");
        let p = |s: &str| Pattern::parse(s).expect("valid pattern");
        assert!(r.may_subscribe(&p("/s/x/temp")));
        assert!(r.may_subscribe(&p("/s/*/temp")));
        assert!(r.may_subscribe(&p("/public/a/**")));
        assert!(
            !r.may_subscribe(&p("/s/**")),
            "/s/** is wider than /s/*/temp"
        );
        assert!(!r.may_subscribe(&p("/**")));
        assert!(r.may_publish("/s/a/b") && !r.may_publish("/public/a"));
        let other = a.rights("uid:1002");
        assert!(other.may_subscribe(&p("/public/x")) && !other.may_publish("/s/x"));
    }

    #[test]
    fn bad_rules_and_tokens_are_named() {
        let e = Authenticator::new(
            &AuthConfig::default(),
            &[acl("bob", &[], &[], true)],
            1,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("acl[0].identity") && e.contains("bob"), "{e}");
        let e = Authenticator::new(
            &AuthConfig::default(),
            &[acl("*", &["x"], &[], false)],
            1,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("acl[0].publish") && e.contains("\"x\""), "{e}");
        let cfg = AuthConfig {
            tokens: vec![TokenConfig {
                name: "short".into(),
                token: Some("abc".into()),
                file: None,
            }],
            ..AuthConfig::default()
        };
        let e = Authenticator::new(&cfg, &[], 1, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("auth.tokens[0]") && e.contains("16 to 255"),
            "{e}"
        );
        let twin = |name: &str| TokenConfig {
            name: name.into(),
            token: Some("the-same-secret-0123456789".into()),
            file: None,
        };
        let cfg = AuthConfig {
            tokens: vec![twin("a"), twin("b")],
            ..AuthConfig::default()
        };
        let e = Authenticator::new(&cfg, &[], 1, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("auth.tokens[1] (b)") && e.contains("same secret"),
            "{e}"
        );
    }

    #[test]
    fn a_refused_daemon_is_told_the_daemon_side_setting_and_a_client_the_client_one() {
        let a = auth(&[]);
        let tcp = Transport::Tcp { cert: None };
        let hello = |name: &str, token: &str| tagwire_core::connection::ClientHello {
            name: name.into(),
            token: token.into(),
            session: [0; tagwire_proto::SESSION_ID_LEN],
            ..Default::default()
        };
        let (code, m) = a
            .authenticate_hello(&tcp, &hello("link:b", "wrong-secret-0123456789"))
            .unwrap_err();
        assert_eq!(code, ErrorCode::Unauthenticated);
        assert!(
            m.contains("daemon \"b\"") && m.contains("[federation] token / --cluster-secret-file"),
            "{m}"
        );
        let (_, m) = a
            .authenticate_hello(&tcp, &hello("link:b", ""))
            .unwrap_err();
        assert!(
            m.contains("presented no token") && !m.contains("TAGWIRE_TOKEN"),
            "{m}"
        );
        let (_, m) = a
            .authenticate_hello(&tcp, &hello("tagwire-cli", ""))
            .unwrap_err();
        assert!(m.contains("TAGWIRE_TOKEN"), "{m}");
    }

    #[test]
    fn disabled_auth_makes_everyone_anonymous_with_every_right() {
        let a = Authenticator::disabled(1000);
        let (id, r) = a
            .authenticate(&Transport::Tcp { cert: None }, "")
            .expect("accepted");
        assert_eq!(&*id, "anonymous");
        assert!(r.admin);
    }
}
