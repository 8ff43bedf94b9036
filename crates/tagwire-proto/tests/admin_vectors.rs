//! The admin test vectors of `docs/admin.md` ("Test vectors"): every
//! documented request parses to the typed request written beside its name
//! here and survives `parse(to_json(request))`; every documented reply
//! parses as the answer to its request and re-encodes to the same JSON; every
//! `bad_*` request is refused naming what was wrong. No vector is left
//! unchecked, and no name here lacks its vector.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use tagwire_proto::admin::{AdminError, AdminOp, AdminReply, AdminRequest, FilterLevel};

/// The admin document, compiled in (cargo rebuilds the tests when it changes).
const ADMIN_MD: &str = include_str!("../../../docs/admin.md");

/// Every ` ```json title=NAME ` block of `doc`: (name, text), in order.
fn json_vectors(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        match &mut current {
            None => {
                if let Some(rest) = line.trim().strip_prefix("```json") {
                    if let Some(name) = rest.trim().strip_prefix("title=") {
                        assert!(!name.trim().is_empty(), "line {}: empty title", i + 1);
                        current = Some((name.trim().to_owned(), String::new()));
                    }
                }
            }
            Some((name, text)) => {
                if line.trim() == "```" {
                    out.push((std::mem::take(name), std::mem::take(text)));
                    current = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    assert!(current.is_none(), "an admin vector block is not closed");
    out
}

fn s(v: &str) -> String {
    v.to_owned()
}

/// The requests of the document and what each must parse to.
fn requests() -> Vec<(&'static str, AdminRequest)> {
    vec![
        ("time", AdminRequest::Time),
        (
            "list",
            AdminRequest::List {
                after: None,
                limit: None,
            },
        ),
        (
            "list_page",
            AdminRequest::List {
                after: Some(s("subscriptions:4294967301")),
                limit: Some(500),
            },
        ),
        (
            "filter_add",
            AdminRequest::FilterAdd {
                endpoint: s("/viewer3"),
                level: FilterLevel::Channel,
                filter: Some(s("$priority < 2")),
                map: None,
            },
        ),
        (
            "filter_add_map",
            AdminRequest::FilterAdd {
                endpoint: s("/viewer3"),
                level: FilterLevel::Channel,
                filter: None,
                map: Some(s("map priority=high when $.severity > 3")),
            },
        ),
        (
            "filter_add_publisher",
            AdminRequest::FilterAdd {
                endpoint: s("/sensors/pub"),
                level: FilterLevel::Publisher,
                filter: Some(s("$.severity > 3")),
                map: None,
            },
        ),
        (
            "filter_list",
            AdminRequest::FilterList {
                after: None,
                limit: None,
            },
        ),
        (
            "filter_list_page",
            AdminRequest::FilterList {
                after: Some(3),
                limit: Some(500),
            },
        ),
        ("filter_remove", AdminRequest::FilterRemove { id: 3 }),
        (
            "filter_op",
            AdminRequest::FilterOp {
                endpoint: s("/viewer3"),
                interfilter: s("or"),
            },
        ),
        (
            "qos_channel",
            AdminRequest::Qos {
                target: vec![s("/viewer3")],
                set: BTreeMap::from([
                    (s("priority"), s("high")),
                    (s("max_queue_length"), s("100")),
                ]),
                unset: vec![],
            },
        ),
        (
            "qos_pair_unset",
            AdminRequest::Qos {
                target: vec![s("/cam/left"), s("/viewer3")],
                set: BTreeMap::new(),
                unset: vec![s("priority")],
            },
        ),
        (
            "qos_daemon",
            AdminRequest::Qos {
                target: vec![s("daemon")],
                set: BTreeMap::from([(s("dscp"), s("af42"))]),
                unset: vec![s("max_queue_length")],
            },
        ),
        (
            "show",
            AdminRequest::Show {
                target: s("/viewer3"),
            },
        ),
        (
            "show_link",
            AdminRequest::Show {
                target: s("link:east"),
            },
        ),
        (
            "shm_open",
            AdminRequest::ShmOpen {
                endpoint: s("/cam/left"),
                id: 0,
                max_packet: Some(1_048_576),
                pid: Some(4242),
            },
        ),
    ]
}

/// The replies of the document and the request each answers.
fn replies() -> Vec<(&'static str, AdminOp)> {
    vec![
        ("time_reply", AdminOp::Time),
        ("list_reply", AdminOp::List),
        ("filter_add_reply", AdminOp::FilterAdd),
        ("filter_list_reply", AdminOp::FilterList),
        ("filter_remove_reply", AdminOp::FilterRemove),
        ("filter_op_reply", AdminOp::FilterOp),
        ("qos_reply", AdminOp::Qos),
        ("show_endpoint_reply", AdminOp::Show),
        ("show_tag_reply", AdminOp::Show),
        ("show_link_reply", AdminOp::Show),
        ("show_reservations_reply", AdminOp::Show),
        ("shm_open_reply", AdminOp::ShmOpen),
    ]
}

/// The refused requests of the document and words their message must hold.
fn refused() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "bad_unknown_key",
            "unknown field `colour`, expected `after` or `limit`",
        ),
        ("bad_unknown_op", "unknown variant `reboot`"),
        ("bad_missing_field", "missing field `id`"),
        ("bad_wrong_type", "invalid type: string \"three\""),
        (
            "bad_not_an_object",
            r#"expected a JSON object with an "op" key, got "[\"list\"]""#,
        ),
        (
            "bad_not_json",
            r#"expected a JSON object with an "op" key, got "op=list""#,
        ),
    ]
}

fn doc() -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for (name, text) in json_vectors(ADMIN_MD) {
        assert!(
            all.insert(name.clone(), text).is_none(),
            "vector {name} appears twice in docs/admin.md"
        );
    }
    all
}

#[test]
fn every_admin_vector_is_checked_and_every_check_has_its_vector() {
    let documented: BTreeSet<String> = doc().into_keys().collect();
    let checked: BTreeSet<String> = requests()
        .iter()
        .map(|(n, _)| n.to_string())
        .chain(replies().iter().map(|(n, _)| n.to_string()))
        .chain(refused().iter().map(|(n, _)| n.to_string()))
        .collect();
    let unchecked: Vec<_> = documented.difference(&checked).collect();
    let missing: Vec<_> = checked.difference(&documented).collect();
    assert!(unchecked.is_empty(), "vectors not checked: {unchecked:?}");
    assert!(
        missing.is_empty(),
        "vectors not in docs/admin.md: {missing:?}"
    );
}

#[test]
fn documented_requests_parse_to_their_typed_form_and_round_trip() {
    let doc = doc();
    for (name, want) in requests() {
        let text = &doc[name];
        let got = AdminRequest::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}");
        assert_eq!(got.op().name(), {
            let v: Value = serde_json::from_str(text).expect("a JSON vector");
            v["op"].as_str().expect("an op").to_owned()
        });
        let again = AdminRequest::parse(&got.to_json())
            .unwrap_or_else(|e| panic!("{name}: its own JSON {}: {e}", got.to_json()));
        assert_eq!(again, got, "{name}: parse(to_json(request))");
    }
}

#[test]
fn documented_replies_parse_and_re_encode_to_the_same_json() {
    let doc = doc();
    for (name, op) in replies() {
        let text = &doc[name];
        let reply = AdminReply::parse(op, text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reply.op(), op, "{name}");
        let want: Value = serde_json::from_str(text).expect("a JSON vector");
        let got: Value = serde_json::from_str(&reply.to_json()).expect("its own JSON");
        assert_eq!(got, want, "{name}: to_json(parse(reply))");
        assert_eq!(
            AdminReply::parse(op, &reply.to_json()).expect("its own JSON"),
            reply,
            "{name}"
        );
    }
}

#[test]
fn documented_bad_requests_are_refused_naming_what_was_wrong() {
    let doc = doc();
    for (name, words) in refused() {
        let text = doc[name].trim();
        let e = AdminRequest::parse(text).expect_err(name);
        assert!(
            matches!(
                e,
                AdminError::BadRequest { .. } | AdminError::NotAnObject { .. }
            ),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains(words), "{name}: {e}");
    }
}

#[test]
fn a_reply_of_the_wrong_shape_is_refused_naming_the_request() {
    let e = AdminReply::parse(AdminOp::FilterAdd, r#"{"removed":3}"#).expect_err("no id");
    let text = e.to_string();
    assert!(
        text.contains("filter_add") && text.contains("missing field `id`"),
        "{text}"
    );
    let e = AdminReply::parse(AdminOp::Show, r#"{"colour":1}"#).expect_err("no shape");
    assert!(e.to_string().contains("\"endpoint\""), "{e}");
}

#[test]
#[ignore = "writes fuzz/corpus/admin_request; run by scripts/fuzz.sh"]
fn write_admin_fuzz_seed_corpus() {
    let dir = std::env::var_os("TAGWIRE_FUZZ_CORPUS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../fuzz/corpus/admin_request")
        });
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let vectors = doc();
    for (name, text) in &vectors {
        let path = dir.join(format!("doc-{name}.json"));
        std::fs::write(&path, text.trim())
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    println!("wrote {} seed inputs to {}", vectors.len(), dir.display());
}
