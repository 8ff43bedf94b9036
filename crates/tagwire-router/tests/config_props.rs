//! Property tests of the configuration file parser (the `router_config`
//! fuzz target does the same with arbitrary bytes): TOML-ish text built from
//! the config's keys and odd values — `[limits]`, `[tls]`, `[auth]`,
//! `[[auth.tokens]]`, `[[acl]]` and `reservations_file` included — and
//! arbitrary text, never panics; an accepted config validates, has a
//! listener, and reads back equal after being written as TOML. From every
//! accepted config an `Authenticator` is built (as the router does at
//! start), which never panics, names the rule or token it refuses, and
//! grants exactly what the rules say.

use std::path::Path;

use proptest::prelude::*;
use tagwire_core::tags::{validate_tag, Pattern};
use tagwire_proto::ErrorCode;
use tagwire_router::auth::{Authenticator, Transport};
use tagwire_router::RouterConfig;

/// The uid the authenticators of these tests treat as the daemon's owner.
const OWNER: u32 = 1000;

/// A section's keys, each with the values it is given (mostly of its own
/// type and shape, valid or not; sometimes any value of [`ANY_VALUES`]) and
/// whether the section needs it (then it is left out only now and then).
type Keys = &'static [(&'static str, &'static [&'static str], Need)];

/// Whether a key is required in its section.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Need {
    Required,
    Optional,
}
use Need::{Optional, Required};

const STRINGS: &[&str] = &["\"tagwired\"", "\"\"", "\"caf\\u00e9 \\n\"", "'single'"];

const ADDRESSES: &[&str] = &[
    "\"127.0.0.1:0\"",
    "\"[::1]:0\"",
    "\"[fe80::1%2]:1\"",
    "\"0.0.0.0:0\"",
    "\"127.0.0.1:7700\"",
    "\"localhost:7700\"",
];

const PATHS: &[&str] = &[
    "\"/tmp/x.sock\"",
    "\"reservations.json\"",
    "\"/nonexistent/tagwire-props\"",
    "\"\"",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "64",
    "1000",
    "-1",
    "4095",
    "4096",
    "16777216",
    "268435456",
    "268435457",
    "4294967296",
    "9223372036854775807",
    "1_000",
    "0x10",
];

const SECONDS: &[&str] = &[
    "0.001",
    "0.0009",
    "0.25",
    "0.1",
    "0.3",
    "1",
    "5",
    "60",
    "86400",
    "86399.999999999",
    "86400.5",
    "-1",
    "nan",
    "inf",
    "1e-9",
];

const BOOLS: &[&str] = &["true", "false"];

const TOP: Keys = &[
    ("name", STRINGS, Optional),
    ("tcp", ADDRESSES, Optional),
    ("unix", PATHS, Optional),
    ("reservations_file", PATHS, Optional),
];

const LIMITS: Keys = &[
    ("max_frame", NUMBERS, Optional),
    ("max_connections", NUMBERS, Optional),
    ("max_endpoints", NUMBERS, Optional),
    ("max_subscriptions", NUMBERS, Optional),
    ("max_endpoints_per_connection", NUMBERS, Optional),
    ("max_subscriptions_per_connection", NUMBERS, Optional),
    ("max_queue_bytes", NUMBERS, Optional),
    ("max_control_bytes", NUMBERS, Optional),
    ("max_tracked_tags", NUMBERS, Optional),
    ("max_deferred_events", NUMBERS, Optional),
    ("max_deferred_bytes", NUMBERS, Optional),
    ("max_connections_per_identity", NUMBERS, Optional),
    ("max_endpoints_per_identity", NUMBERS, Optional),
    ("max_subscriptions_per_identity", NUMBERS, Optional),
    ("endpoint_reservation_secs", NUMBERS, Optional),
    ("max_reservations", NUMBERS, Optional),
    ("max_buffered_bytes", NUMBERS, Optional),
    ("max_pending_handshakes", NUMBERS, Optional),
    ("handshake_timeout", SECONDS, Optional),
    ("idle_timeout", SECONDS, Optional),
    ("max_protocol_errors", NUMBERS, Optional),
];

const TLS: Keys = &[
    ("cert", PATHS, Required),
    ("key", PATHS, Required),
    ("client_ca", PATHS, Optional),
];

const AUTH: Keys = &[
    ("enabled", BOOLS, Optional),
    ("local_token", BOOLS, Optional),
];

/// `[[auth.tokens]]`: names (valid and not), secrets of every length class
/// (too short, the 16-byte minimum, over 255 bytes), files that do not
/// exist.
const TOKEN: Keys = &[
    (
        "name",
        &["\"alice\"", "\"bob\"", "\"\"", "\"two words\"", "\"caf\u{e9}\""],
        Required,
    ),
    (
        "token",
        &[
            "\"short\"",
            "\"0123456789abcdef\"",
            "\"alice-secret-0123456789\"",
            "\"bob-secret-0123456789\"",
            "\"alice-secret-0123456789\"",
            "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"",
        ],
        Required,
    ),
    ("file", PATHS, Optional),
];

const PATTERN_LISTS: &[&str] = &[
    "[]",
    "[\"/**\"]",
    "[\"/s/**\", \"/status/*\"]",
    "[\"/a/*/b\"]",
    "[\"/x\", \"/public/**\"]",
    "[\"/*/*\"]",
    "[\"x\"]",
    "[\"/a//b\"]",
    "[\"/a/b**\"]",
    "[1]",
];

/// `[[acl]]`: identities of every form (valid and not), pattern lists
/// (valid, invalid, everything, empty), the admin flag.
const ACL: Keys = &[
    (
        "identity",
        &[
            "\"*\"",
            "\"uid:1001\"",
            "\"uid:1000\"",
            "\"uid:\"",
            "\"token:alice\"",
            "\"token:bob\"",
            "\"cert:carol\"",
            "\"bob\"",
        ],
        Required,
    ),
    ("publish", PATTERN_LISTS, Optional),
    ("subscribe", PATTERN_LISTS, Optional),
    ("admin", BOOLS, Optional),
];

/// Values of any type, for any key.
const ANY_VALUES: &[&str] = &["\"tagwired\"", "0", "1.5", "true", "[]", "{}", "1979-05-27"];

/// Lines and headers that do not belong, or not there.
const ODD: &[&str] = &[
    "tcpp = 1",
    "[other]",
    "[limits]",
    "[tls]",
    "[auth]",
    "[[acl]]",
    "[[auth.tokens]]",
    "acl = []",
    "[auth.tokens]",
];

/// `key = value` lines for distinct keys of a section, in any order:
/// required keys nearly always, each optional key with a chance of 2 in 5,
/// mostly with a value meant for that key.
fn lines(keys: Keys) -> impl Strategy<Value = Vec<String>> {
    keys.iter()
        .map(|&(k, values, need)| {
            let p = if need == Required { 0.95 } else { 0.4 };
            prop::option::weighted(
                p,
                prop_oneof![
                    30 => prop::sample::select(values),
                    1 => prop::sample::select(ANY_VALUES),
                ]
                .prop_map(move |v| format!("{k} = {v}")),
            )
        })
        .collect::<Vec<_>>()
        .prop_map(|lines| lines.into_iter().flatten().collect::<Vec<_>>())
        .prop_shuffle()
}

/// Up to two `[[header]]` entries of an array of tables, with their lines.
fn tables(header: &'static str, keys: Keys) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(lines(keys), 0..3).prop_map(move |entries| {
        let mut out = Vec::new();
        for entry in entries {
            out.push(format!("[[{header}]]"));
            out.extend(entry);
        }
        out
    })
}

fn config_text() -> impl Strategy<Value = String> {
    (
        lines(TOP),
        prop::option::weighted(0.5, lines(LIMITS)),
        prop::option::weighted(0.15, lines(TLS)),
        prop::option::weighted(0.5, lines(AUTH)),
        tables("auth.tokens", TOKEN),
        tables("acl", ACL),
        prop::option::weighted(
            0.2,
            (
                any::<prop::sample::Index>(),
                prop_oneof![
                    prop::sample::select(ODD).prop_map(str::to_owned),
                    "\\PC{0,8}"
                ],
            ),
        ),
    )
        .prop_map(|(top, limits, tls, auth, tokens, acl, odd)| {
            let mut all = top;
            for (header, section) in [("[limits]", limits), ("[tls]", tls), ("[auth]", auth)] {
                if let Some(section) = section {
                    all.push(header.to_owned());
                    all.extend(section);
                }
            }
            all.extend(tokens);
            all.extend(acl);
            if let Some((at, line)) = odd {
                all.insert(at.index(all.len() + 1), line);
            }
            all.join("\n")
        })
}

fn check(text: &str) {
    let path = Path::new("props.toml");
    let first = RouterConfig::from_toml(text, path);
    let second = RouterConfig::from_toml(text, path);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("not deterministic: {first:?} vs {second:?}"),
    }
    let Ok(cfg) = first else {
        return;
    };
    cfg.validate().expect("an accepted config validates");
    assert!(cfg.tcp.is_some() || cfg.unix.is_some());
    let written = toml::to_string(&cfg).expect("serialises");
    let again = RouterConfig::from_toml(&written, path).expect("re-serialised config parses");
    assert_eq!(cfg, again, "{written}");
    check_authenticator(&cfg);
}

/// Builds the config's `Authenticator` as the router does at start (token
/// `file` entries dropped: a test reads no file a config names) and checks
/// what it grants against the rules themselves.
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
    assert_eq!(a.enabled(), auth.enabled);
    // The owner and root have every right; with authentication off, so
    // has everyone.
    for id in [format!("uid:{OWNER}"), "uid:0".to_owned()] {
        let r = a.rights(&id);
        assert!(
            r.admin && r.may_publish("/any/tag") && !r.is_empty(),
            "{id}"
        );
    }
    let tcp = Transport::Tcp { cert: None };
    if !auth.enabled {
        let (id, r) = a.authenticate(&tcp, "").expect("anonymous is accepted");
        assert_eq!(&*id, "anonymous");
        assert!(r.admin);
        return;
    }
    assert_eq!(
        a.authenticate(&tcp, "").map(|_| ()).expect_err("refused").0,
        ErrorCode::Unauthenticated,
        "plain TCP without a token"
    );
    assert_eq!(
        a.authenticate(&tcp, "no-such-token-in-any-config")
            .map(|_| ())
            .expect_err("refused")
            .0,
        ErrorCode::Unauthenticated,
        "an unknown token"
    );
    // A configured token gives its identity (the first one listed, if two
    // names share a secret), refused only for want of any right.
    for t in &auth.tokens {
        let secret = t.token.as_deref().expect("file entries were dropped");
        let first = auth
            .tokens
            .iter()
            .find(|u| u.token.as_deref() == Some(secret))
            .expect("t itself");
        let want = format!("token:{}", first.name);
        match a.authenticate(&tcp, secret) {
            Ok((id, r)) => {
                assert_eq!(&*id, want);
                assert!(!r.is_empty());
            }
            Err((code, message)) => {
                assert_eq!(code, ErrorCode::PermissionDenied, "{message}");
                assert!(a.rights(&want).is_empty());
                assert!(message.contains(&want), "{message}");
            }
        }
    }
    // For everyone else, every right granted comes from a rule naming the
    // identity or `*`, and every rule's grants are there.
    let identities = cfg
        .acl
        .iter()
        .map(|r| r.identity.clone())
        .chain(["uid:4242".to_owned(), "token:nobody".to_owned()])
        // The owner and root have every right whatever the rules (above).
        .filter(|id| *id != format!("uid:{OWNER}") && id != "uid:0");
    for id in identities {
        let r = a.rights(&id);
        let rules: Vec<_> = cfg
            .acl
            .iter()
            .filter(|rule| rule.identity == "*" || rule.identity == id)
            .collect();
        assert_eq!(r.admin, rules.iter().any(|rule| rule.admin), "{id}: admin");
        let granted = |f: fn(&tagwire_router::auth::AclRule) -> &Vec<String>| -> Vec<Pattern> {
            rules
                .iter()
                .flat_map(|rule| f(rule))
                .map(|p| Pattern::parse(p).expect("the authenticator accepted it"))
                .collect()
        };
        let publish = granted(|rule| &rule.publish);
        let subscribe = granted(|rule| &rule.subscribe);
        for tag in ["/s/x", "/status/a", "/a/q/b", "/public", "/x/y/z"]
            .into_iter()
            .chain(publish.iter().map(Pattern::as_str))
            .filter(|t| validate_tag(t).is_ok())
        {
            assert_eq!(
                r.may_publish(tag),
                publish.iter().any(|p| p.matches(tag)),
                "{id}: publish on {tag}"
            );
        }
        for p in &subscribe {
            assert!(r.may_subscribe(p), "{id}: subscribe to its own grant {p}");
        }
        for text in ["/**", "/s/*", "/a/*/b", "/status/*", "/x"] {
            let p = Pattern::parse(text).expect("valid pattern");
            assert_eq!(
                r.may_subscribe(&p),
                subscribe.iter().any(|g| g.covers(&p)),
                "{id}: subscribe to {text}"
            );
        }
        assert_eq!(
            r.is_empty(),
            !r.admin && publish.is_empty() && subscribe.is_empty(),
            "{id}: empty rights"
        );
    }
}

#[test]
fn the_documented_example_round_trips() {
    let text = "name = \"x\"\ntcp = \"[::1]:7700\"\n[limits]\nmax_frame = 4096\n";
    check(text);
    let cfg = RouterConfig::from_toml(text, Path::new("x.toml")).expect("valid");
    assert_eq!(cfg.limits.max_frame, 4096);
}

#[test]
fn an_auth_and_acl_example_round_trips_and_grants_what_it_says() {
    let text = "reservations_file = \"/tmp/r.json\"\n\
                [auth]\nlocal_token = false\n\
                [[auth.tokens]]\nname = \"alice\"\ntoken = \"alice-secret-0123456789\"\n\
                [[acl]]\nidentity = \"token:alice\"\npublish = [\"/s/**\"]\n\
                subscribe = [\"/status/*\"]\n\
                [[acl]]\nidentity = \"*\"\nsubscribe = [\"/public/**\"]\n";
    check(text);
    let cfg = RouterConfig::from_toml(text, Path::new("x.toml")).expect("valid");
    assert_eq!(cfg.acl.len(), 2);
    assert_eq!(cfg.auth.tokens.len(), 1);
    assert_eq!(
        cfg.reservations_file.as_deref(),
        Some(Path::new("/tmp/r.json"))
    );
    let a = Authenticator::new(&cfg.auth, &cfg.acl, OWNER, None).expect("valid rules");
    let (id, r) = a
        .authenticate(&Transport::Tcp { cert: None }, "alice-secret-0123456789")
        .expect("alice");
    assert_eq!(&*id, "token:alice");
    assert!(r.may_publish("/s/a") && !r.may_publish("/status/a"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn config_like_text_never_panics_and_accepted_configs_round_trip(text in config_text()) {
        check(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,48}") {
        check(&text);
    }
}
