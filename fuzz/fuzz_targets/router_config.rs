//! Fuzz target: arbitrary bytes as the daemon's TOML configuration file,
//! through `RouterConfig::from_toml` (parse, then `validate`). Errors are
//! expected; a panic is a bug. Properties checked:
//! - parsing is deterministic (same config, or same error message);
//! - an accepted config validates again, and has a listener (a file can set
//!   `tcp`/`unix` but never unset them);
//! - an accepted config written back as TOML (`RouterConfig` is
//!   `Serialize`) parses to an equal config;
//! - the `[auth]` and `[[acl]]` parts build an `Authenticator` (as the
//!   router does at start; token `file` entries are dropped so the fuzzer
//!   reads no file) without panicking; a refusal names the rule or token;
//!   the owner has every right; a configured token authenticates as its
//!   `token:NAME` identity (or is refused for want of rights), and plain TCP
//!   without a token is refused (when authentication is on); ACL grants are
//!   exactly the union of the rules naming the identity or `*`, on the
//!   rules' own patterns and tags.
//!
//! Seed corpus: the file-format example of docs/configuration.md
//! (scripts/fuzz.sh).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tagwire_core::tags::{validate_tag, Pattern};
use tagwire_proto::ErrorCode;
use tagwire_router::auth::{Authenticator, Transport};
use tagwire_router::RouterConfig;

/// The uid treated as the daemon's owner.
const OWNER: u32 = 1000;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let first = RouterConfig::from_toml(text, path);
    let second = RouterConfig::from_toml(text, path);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "parsing is not deterministic"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("parsing is not deterministic: {first:?} vs {second:?}"),
    }
    let Ok(cfg) = first else {
        return;
    };
    if let Err(e) = cfg.validate() {
        panic!("an accepted config does not validate: {e}");
    }
    assert!(
        cfg.tcp.is_some() || cfg.unix.is_some(),
        "accepted without a listener"
    );
    let written = toml::to_string(&cfg).expect("an accepted config serialises as TOML");
    match RouterConfig::from_toml(&written, path) {
        Ok(again) => assert_eq!(cfg, again, "TOML round trip changed the config:\n{written}"),
        Err(e) => panic!("re-serialised config is refused: {e}\n{written}"),
    }
    check_authenticator(&cfg);
});

fn check_authenticator(cfg: &RouterConfig) {
    let mut auth = cfg.auth.clone();
    auth.tokens.retain(|t| t.file.is_none());
    let a = match Authenticator::new(&auth, &cfg.acl, OWNER, None) {
        Ok(a) => a,
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.contains("acl[") || e.contains("auth.tokens["),
                "a refusal names the rule or token: {e}"
            );
            return;
        }
    };
    let _ = a.describe();
    for id in [format!("uid:{OWNER}"), "uid:0".to_owned()] {
        let r = a.rights(&id);
        assert!(r.admin && r.may_publish("/any/tag"), "{id} has every right");
    }
    let tcp = Transport::Tcp { cert: None };
    if !auth.enabled {
        let (id, _) = a.authenticate(&tcp, "").expect("anonymous is accepted");
        assert_eq!(&*id, "anonymous");
        return;
    }
    assert_eq!(
        a.authenticate(&tcp, "").map(|_| ()).expect_err("refused").0,
        ErrorCode::Unauthenticated,
        "plain TCP without a token"
    );
    for t in &auth.tokens {
        let Some(secret) = t.token.as_deref() else {
            continue;
        };
        let first = auth
            .tokens
            .iter()
            .find(|u| u.token.as_deref() == Some(secret))
            .map_or(&t.name, |u| &u.name);
        let want = format!("token:{first}");
        match a.authenticate(&tcp, secret) {
            Ok((id, _)) => assert_eq!(&*id, want),
            Err((code, message)) => {
                assert_eq!(code, ErrorCode::PermissionDenied, "{message}");
                assert!(a.rights(&want).is_empty(), "{message}");
            }
        }
    }
    for rule in &cfg.acl {
        let id = &rule.identity;
        if *id == format!("uid:{OWNER}") || id == "uid:0" {
            continue;
        }
        let r = a.rights(id);
        let rules: Vec<_> = cfg
            .acl
            .iter()
            .filter(|x| x.identity == "*" || x.identity == *id)
            .collect();
        assert_eq!(r.admin, rules.iter().any(|x| x.admin), "{id}: admin");
        let parse = |p: &String| Pattern::parse(p).expect("the authenticator accepted it");
        let publish: Vec<Pattern> = rules.iter().flat_map(|x| &x.publish).map(parse).collect();
        let subscribe: Vec<Pattern> = rules.iter().flat_map(|x| &x.subscribe).map(parse).collect();
        for p in publish.iter().chain(&subscribe) {
            let text = p.as_str();
            if validate_tag(text).is_ok() {
                assert_eq!(
                    r.may_publish(text),
                    publish.iter().any(|g| g.matches(text)),
                    "{id}: publish on {text}"
                );
            }
            assert_eq!(
                r.may_subscribe(p),
                subscribe.iter().any(|g| g.covers(p)),
                "{id}: subscribe to {text}"
            );
        }
    }
}
