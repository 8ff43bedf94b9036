//! Fuzz target: arbitrary bytes as an admin request body (`docs/admin.md`),
//! through `AdminRequest::parse`, and as the reply to each kind of request,
//! through `AdminReply::parse`. Seeds: the JSON test vectors of
//! docs/admin.md (written by scripts/fuzz.sh). Errors are expected; a panic
//! is a bug. Properties checked:
//! - a request that parses re-encodes (`to_json`) to JSON that parses to
//!   the same request;
//! - a refused request's error is not empty (it names what was wrong);
//! - a reply that parses re-encodes to JSON that parses to the same reply,
//!   of the kind asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagwire_proto::admin::{AdminOp, AdminReply, AdminRequest};

const OPS: [AdminOp; 9] = [
    AdminOp::Time,
    AdminOp::List,
    AdminOp::FilterAdd,
    AdminOp::FilterList,
    AdminOp::FilterRemove,
    AdminOp::Qos,
    AdminOp::Show,
    AdminOp::FilterOp,
    AdminOp::ShmOpen,
];

fuzz_target!(|data: &[u8]| {
    // Admin frames carry UTF-8 (the frame decoder refuses anything else).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match AdminRequest::parse(text) {
        Ok(req) => {
            let json = req.to_json();
            let again = AdminRequest::parse(&json)
                .unwrap_or_else(|e| panic!("{req:?} encodes as {json}, refused: {e}"));
            assert_eq!(again, req, "parse(to_json(request)) differs: {json}");
        }
        Err(e) => assert!(!e.to_string().is_empty(), "an empty error for {text:?}"),
    }
    for op in OPS {
        if let Ok(reply) = AdminReply::parse(op, text) {
            assert_eq!(reply.op(), op);
            let json = reply.to_json();
            let again = AdminReply::parse(op, &json)
                .unwrap_or_else(|e| panic!("{op} reply encodes as {json}, refused: {e}"));
            assert_eq!(again, reply, "parse(to_json(reply)) differs: {json}");
        }
    }
});
