//! Reads the tables of `docs/protocol.md`, so that what the document
//! promises is what the tests check.
#![allow(dead_code)] // each test binary uses a different part

/// The protocol document, compiled in (cargo rebuilds the tests when it changes).
pub const PROTOCOL_MD: &str = include_str!("../../../../docs/protocol.md");

/// The text under `heading` (a whole line, e.g. `### Mapping filters`) up to
/// the next `##` or `###` heading.
pub fn section(heading: &str) -> &'static str {
    let start = PROTOCOL_MD
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/protocol.md has no heading {heading:?}"))
        + heading.len()
        + 2;
    let rest = &PROTOCOL_MD[start..];
    let end = ["\n## ", "\n### "]
        .iter()
        .filter_map(|h| rest.find(h))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The body rows of every table in the section under `heading`, each as its
/// cells (trimmed, surrounding backticks removed); header rows and
/// separator rows are left out.
pub fn table_rows(heading: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = section(heading)
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .collect();
    let is_separator = |l: &str| l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '));
    lines
        .iter()
        .enumerate()
        .filter(|(i, l)| !is_separator(l) && !lines.get(i + 1).is_some_and(|n| is_separator(n)))
        .map(|(_, l)| {
            let inner = l.trim().trim_start_matches('|').trim_end_matches('|');
            inner.split('|').map(code).collect()
        })
        .collect()
}

/// A cell's text without its surrounding backticks.
fn code(cell: &str) -> String {
    let c = cell.trim();
    c.strip_prefix('`')
        .and_then(|c| c.strip_suffix('`'))
        .unwrap_or(c)
        .to_owned()
}
