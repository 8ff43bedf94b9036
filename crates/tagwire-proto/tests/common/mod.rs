//! Shared by the integration tests: reads the hex test vectors out of
//! `docs/protocol.md`, so that the document is what the tests check.
#![allow(dead_code)] // each test binary uses a different part

/// The protocol document, compiled in (cargo rebuilds the tests when it changes).
pub const PROTOCOL_MD: &str = include_str!("../../../../docs/protocol.md");

/// One test vector: its title and the bytes of its block.
#[derive(Debug, Clone)]
pub struct Vector {
    /// The `title=` of its block.
    pub name: String,
    /// The decoded hex.
    pub bytes: Vec<u8>,
}

/// Every ` ```hex title=NAME ` block of `doc`, in document order.
///
/// Inside a block, whitespace is ignored and `#` starts a comment. Panics
/// (this is test code) naming the line of a malformed block.
pub fn parse_vectors(doc: &str) -> Vec<Vector> {
    let mut out = Vec::new();
    let mut current: Option<(String, String, usize)> = None;
    for (i, line) in doc.lines().enumerate() {
        let lineno = i + 1;
        match &mut current {
            None => {
                if let Some(rest) = line.trim().strip_prefix("```hex") {
                    let name = rest
                        .trim()
                        .strip_prefix("title=")
                        .unwrap_or_else(|| panic!("line {lineno}: hex block without title="))
                        .trim()
                        .to_owned();
                    assert!(!name.is_empty(), "line {lineno}: empty vector title");
                    current = Some((name, String::new(), lineno));
                }
            }
            Some((name, hex, start)) => {
                if line.trim() == "```" {
                    let bytes = decode_hex(hex)
                        .unwrap_or_else(|e| panic!("vector {name} (line {start}): {e}"));
                    out.push(Vector {
                        name: std::mem::take(name),
                        bytes,
                    });
                    current = None;
                } else {
                    let code = line.split('#').next().unwrap_or("");
                    hex.extend(code.chars().filter(|c| !c.is_whitespace()));
                }
            }
        }
    }
    if let Some((name, _, start)) = current {
        panic!("vector {name} (line {start}) is not closed");
    }
    out
}

fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() & 1 == 1 {
        return Err(format!("odd number of hex digits ({})", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| format!("bad hex {:?} at digit {i}", &s[i..i + 2]))
        })
        .collect()
}

/// The vectors of `docs/protocol.md`.
pub fn doc_vectors() -> Vec<Vector> {
    parse_vectors(PROTOCOL_MD)
}

/// The fuzzing seed corpus made from the vectors: each vector as its own
/// input, plus one input holding every valid vector in document order (a
/// whole session), as `(file name, bytes)`.
pub fn seed_corpus() -> Vec<(String, Vec<u8>)> {
    let vectors = doc_vectors();
    let session: Vec<u8> = vectors
        .iter()
        .filter(|v| !v.name.starts_with("bad_"))
        .flat_map(|v| v.bytes.iter().copied())
        .collect();
    let mut corpus: Vec<(String, Vec<u8>)> = vectors
        .into_iter()
        .map(|v| (format!("vector-{}", v.name), v.bytes))
        .collect();
    corpus.push(("session-all-valid-vectors".to_owned(), session));
    corpus
}
