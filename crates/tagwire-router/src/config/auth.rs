//! The `[auth]` section and the `[[acl]]` rules: who may connect and what
//! each identity is granted, as the configuration states it. Checking
//! identities and rights is `auth`'s.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the daemon authenticates clients (`[auth]` in the configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// `false` switches authentication off: every client is `anonymous` with
    /// every right, and TCP may only listen on loopback. Default `true`.
    pub enabled: bool,
    /// Write a random token for the daemon's owner into the private runtime
    /// directory (mode 0600), so the same user's clients reach the daemon
    /// over TCP with no configuration. Default `true`.
    pub local_token: bool,
    /// Named tokens: a client presenting one gets identity `token:NAME`.
    pub tokens: Vec<TokenConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: true,
            local_token: true,
            tokens: Vec::new(),
        }
    }
}

/// One named token (`[[auth.tokens]]`): give `token` or `file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The identity's name (the identity is `token:NAME`).
    pub name: String,
    /// The secret itself.
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the secret (surrounding whitespace ignored).
    #[serde(default)]
    pub file: Option<PathBuf>,
}

/// One ACL rule (`[[acl]]`): what an identity may do. Rules add up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclRule {
    /// `uid:N`, `token:NAME`, `cert:NAME`, or `*` for every authenticated
    /// identity.
    pub identity: String,
    /// Patterns of the tags it may publish on.
    #[serde(default)]
    pub publish: Vec<String>,
    /// Patterns it may subscribe within: a subscription is allowed when one
    /// of these covers every tag its pattern can match.
    #[serde(default)]
    pub subscribe: Vec<String>,
    /// Whether it may administer every endpoint (see and change anyone's
    /// filters, list everything). Without it, admin requests reach only the
    /// identity's own endpoints.
    #[serde(default)]
    pub admin: bool,
}
