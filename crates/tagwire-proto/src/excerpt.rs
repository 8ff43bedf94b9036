//! Quoting peer-supplied text in error messages: [`excerpt`] shows the start
//! of the text and its size, so an error never echoes kilobytes of a
//! client's own pattern, filter or name back at it (or into a log).

use std::fmt;

/// How many characters of the text an [`Excerpt`] shows.
pub const EXCERPT_CHARS: usize = 120;

/// Quotes `text` for an error message: the whole text, quoted as by `{:?}`,
/// when it has at most [`EXCERPT_CHARS`] characters; otherwise its first
/// [`EXCERPT_CHARS`] characters followed by `… (N bytes)`.
///
/// ```
/// let long = "x".repeat(65_536);
/// let msg = format!("invalid filter {}", tagwire_proto::excerpt(&long));
/// assert!(msg.len() < 200 && msg.ends_with("… (65536 bytes)"));
/// assert_eq!(tagwire_proto::excerpt("$a < 1").to_string(), "\"$a < 1\"");
/// ```
pub fn excerpt(text: &str) -> Excerpt<'_> {
    Excerpt(text)
}

/// Displays client-supplied text shortened for an error message; see [`excerpt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Excerpt<'a>(pub &'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(EXCERPT_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((cut, _)) => write!(f, "{:?}… ({} bytes)", &self.0[..cut], self.0.len()),
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary (for text bounded in bytes: frames, log lines).
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }

    #[test]
    fn short_text_is_quoted_whole() {
        assert_eq!(excerpt("").to_string(), "\"\"");
        let exact = "é".repeat(EXCERPT_CHARS);
        assert_eq!(excerpt(&exact).to_string(), format!("{exact:?}"));
    }

    #[test]
    fn long_text_shows_its_start_and_byte_size() {
        let long = format!("{}{}", "ab".repeat(EXCERPT_CHARS), "é".repeat(30_000));
        let shown = excerpt(&long).to_string();
        let head = &long[..EXCERPT_CHARS];
        assert_eq!(shown, format!("{head:?}… ({} bytes)", long.len()));
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let long = "é".repeat(EXCERPT_CHARS + 1);
        let shown = excerpt(&long).to_string();
        assert!(shown.starts_with(&format!("{:?}", "é".repeat(EXCERPT_CHARS))));
        assert!(shown.ends_with(&format!("… ({} bytes)", long.len())));
    }
}
