//! Token proofs of the version-3 handshake: the client and the server each
//! prove that they know a shared token without sending it, the **server
//! first**, so that a program holding the daemon's port without its token
//! (a daemon killed with `kill -9`, its port bound by another user) learns
//! nothing the client could not tell a stranger. See `docs/protocol.md`,
//! "Token proof".
//!
//! All three values are HMAC-SHA-256 keyed by the token's bytes, over a
//! label (domain separation: no value can stand for another) and the
//! nonces:
//!
//! - the **tag** in `Hello`: `HMAC(token, "tagwire-v3 token tag" | Nc)`,
//!   lets the server find which of its tokens the client holds;
//! - the server's **proof** in `Challenge`:
//!   `HMAC(token, "tagwire-v3 server proof" | Nc | Ns)`;
//! - the client's **proof** in `Proof`:
//!   `HMAC(token, "tagwire-v3 client proof" | Nc | Ns)`.
//!
//! `Nc` is the client's fresh random nonce, `Ns` the server's.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a handshake nonce (`Nc`, `Ns`).
pub const NONCE_LEN: usize = 32;
/// Bytes of a token tag or proof (an HMAC-SHA-256 output).
pub const PROOF_LEN: usize = 32;

/// A version-3 `Hello`'s token credential: the client's nonce and the tag
/// that names its token without revealing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenTag {
    /// The client's fresh random nonce (`Nc`).
    pub nonce: [u8; NONCE_LEN],
    /// `HMAC(token, "tagwire-v3 token tag" | Nc)`.
    pub tag: [u8; PROOF_LEN],
}

const TAG_LABEL: &[u8] = b"tagwire-v3 token tag";
const SERVER_LABEL: &[u8] = b"tagwire-v3 server proof";
const CLIENT_LABEL: &[u8] = b"tagwire-v3 client proof";

fn mac(token: &str, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes())
        .expect("invariant: HMAC accepts keys of every length");
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m
}

fn out(m: Hmac<Sha256>) -> [u8; PROOF_LEN] {
    m.finalize().into_bytes().into()
}

impl TokenTag {
    /// The tag a client holding `token` sends with its nonce `nonce`.
    pub fn new(token: &str, nonce: [u8; NONCE_LEN]) -> TokenTag {
        TokenTag {
            nonce,
            tag: out(mac(token, TAG_LABEL, &[&nonce])),
        }
    }

    /// Whether this tag was made with `token` (constant time in the tag).
    pub fn names(&self, token: &str) -> bool {
        mac(token, TAG_LABEL, &[&self.nonce])
            .verify_slice(&self.tag)
            .is_ok()
    }
}

/// The server's proof that it knows `token`, for nonces `nc` (client) and
/// `ns` (server).
pub fn server_proof(token: &str, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN]) -> [u8; PROOF_LEN] {
    out(mac(token, SERVER_LABEL, &[nc, ns]))
}

/// The client's proof that it knows `token`, for nonces `nc` and `ns`.
pub fn client_proof(token: &str, nc: &[u8; NONCE_LEN], ns: &[u8; NONCE_LEN]) -> [u8; PROOF_LEN] {
    out(mac(token, CLIENT_LABEL, &[nc, ns]))
}

/// Compares two proofs in constant time.
pub fn same_proof(a: &[u8; PROOF_LEN], b: &[u8; PROOF_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_names_its_token_only_and_the_three_values_differ() {
        let nc = [1u8; NONCE_LEN];
        let ns = [2u8; NONCE_LEN];
        let t = TokenTag::new("secret-0123456789", nc);
        assert!(t.names("secret-0123456789"));
        assert!(!t.names("secret-012345678X"));
        let s = server_proof("secret-0123456789", &nc, &ns);
        let c = client_proof("secret-0123456789", &nc, &ns);
        assert_ne!(s, c, "a server proof cannot be reflected as a client proof");
        assert_ne!(t.tag, s);
        assert!(same_proof(&s, &s) && !same_proof(&s, &c));
        assert_ne!(s, server_proof("secret-0123456789", &nc, &[3; NONCE_LEN]));
    }
}
