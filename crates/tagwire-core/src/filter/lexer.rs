//! Tokens of the filter language, with the byte offset of each.

use super::FilterError;

/// One token of a filter or mapping text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// `$name`: a header field.
    Header(String),
    /// `$.name` or `$.'any name'`: a filterable (body) field.
    Field(String),
    /// Integer literal (also a duration literal converted to nanoseconds).
    Int(i128),
    /// Floating-point literal.
    Float(f64),
    /// String literal, escapes resolved.
    Str(String),
    /// A bare word that is not a keyword (`map`, `when`, `high`, property names).
    Ident(String),
    And,
    Or,
    Not,
    In,
    Exist,
    True,
    False,
    LParen,
    RParen,
    Comma,
    Semi,
    EqEq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Assign,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Tilde,
    TildeCaret,
    RegexMatch,
    Eof,
}

impl Tok {
    /// How the token is named in an error message ("found ...").
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Header(n) => format!("'${n}'"),
            Tok::Field(n) => format!("'$.{n}'"),
            Tok::Int(v) => format!("number {v}"),
            Tok::Float(v) => format!("number {v}"),
            Tok::Str(s) => {
                let short: String = s.chars().take(32).collect();
                if short.len() < s.len() {
                    format!("string '{short}...'")
                } else {
                    format!("string '{short}'")
                }
            }
            Tok::Ident(w) => format!("'{w}'"),
            Tok::Eof => "end of input".to_owned(),
            other => format!("'{}'", other.symbol()),
        }
    }

    /// The spelling of a keyword or punctuation token.
    pub(crate) fn symbol(&self) -> &'static str {
        match self {
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Not => "not",
            Tok::In => "in",
            Tok::Exist => "exist",
            Tok::True => "true",
            Tok::False => "false",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Semi => ";",
            Tok::EqEq => "==",
            Tok::Ne => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Assign => "=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::Tilde => "~",
            Tok::TildeCaret => "~^",
            Tok::RegexMatch => "=~",
            _ => "?",
        }
    }
}

/// A token and the byte offset where it starts.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub at: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Splits `text` into tokens; the last is always [`Tok::Eof`].
///
/// Runs in one pass over the bytes (no backtracking), so its cost is linear in
/// the text length, which the caller has already bounded.
pub(crate) fn tokenize(text: &str) -> Result<Vec<Token>, FilterError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let at = i;
        let syntax = |expected: &str, found: String| FilterError::Syntax {
            at,
            expected: expected.to_owned(),
            found,
        };
        let two = |next: u8| b.get(i + 1) == Some(&next);
        let (tok, len) = match c {
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b',' => (Tok::Comma, 1),
            b';' => (Tok::Semi, 1),
            b'+' => (Tok::Plus, 1),
            b'-' => (Tok::Minus, 1),
            b'*' => (Tok::Star, 1),
            b'/' => (Tok::Slash, 1),
            b'%' => (Tok::Percent, 1),
            b'=' if two(b'=') => (Tok::EqEq, 2),
            b'=' if two(b'~') => (Tok::RegexMatch, 2),
            b'=' => (Tok::Assign, 1),
            b'!' if two(b'=') => (Tok::Ne, 2),
            b'<' if two(b'=') => (Tok::Le, 2),
            b'<' => (Tok::Lt, 1),
            b'>' if two(b'=') => (Tok::Ge, 2),
            b'>' => (Tok::Gt, 1),
            b'~' if two(b'^') => (Tok::TildeCaret, 2),
            b'~' => (Tok::Tilde, 1),
            b'\'' | b'"' => {
                let (s, end) = string_literal(text, i)?;
                out.push(Token {
                    tok: Tok::Str(s),
                    at,
                });
                i = end;
                continue;
            }
            b'$' => {
                if b.get(i + 1) == Some(&b'.') {
                    // Body field: `$.name` or `$.'any name'`.
                    match b.get(i + 2) {
                        Some(b'\'') | Some(b'"') => {
                            let (s, end) = string_literal(text, i + 2)?;
                            if s.is_empty() {
                                return Err(syntax(
                                    "a field name after '$.'",
                                    "an empty name".to_owned(),
                                ));
                            }
                            out.push(Token {
                                tok: Tok::Field(s),
                                at,
                            });
                            i = end;
                            continue;
                        }
                        Some(&d) if is_ident_start(d) => {
                            let end = scan_ident(b, i + 2);
                            (Tok::Field(text[i + 2..end].to_owned()), end - i)
                        }
                        _ => {
                            return Err(syntax(
                                "a field name after '$.'",
                                describe_char(text, i + 2),
                            ))
                        }
                    }
                } else {
                    match b.get(i + 1) {
                        Some(&d) if is_ident_start(d) => {
                            let end = scan_ident(b, i + 1);
                            (Tok::Header(text[i + 1..end].to_owned()), end - i)
                        }
                        _ => {
                            return Err(syntax(
                                "a header field name or '.' after '$'",
                                describe_char(text, i + 1),
                            ))
                        }
                    }
                }
            }
            d if d.is_ascii_digit() => {
                let (tok, end) = number(text, i)?;
                out.push(Token { tok, at });
                i = end;
                continue;
            }
            d if is_ident_start(d) => {
                let end = scan_ident(b, i);
                let word = &text[i..end];
                let tok = match word {
                    "and" | "AND" => Tok::And,
                    "or" | "OR" => Tok::Or,
                    "not" | "NOT" => Tok::Not,
                    "in" | "IN" => Tok::In,
                    "exist" | "EXIST" => Tok::Exist,
                    "true" | "TRUE" => Tok::True,
                    "false" | "FALSE" => Tok::False,
                    _ => Tok::Ident(word.to_owned()),
                };
                (tok, end - i)
            }
            _ => {
                return Err(syntax(
                    "an operator, a value or a field",
                    describe_char(text, i),
                ))
            }
        };
        out.push(Token { tok, at });
        i += len;
    }
    out.push(Token {
        tok: Tok::Eof,
        at: b.len(),
    });
    Ok(out)
}

fn describe_char(text: &str, i: usize) -> String {
    match text.get(i..).and_then(|s| s.chars().next()) {
        Some(c) => format!("'{c}'"),
        None => "end of input".to_owned(),
    }
}

fn scan_ident(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ident_char(b[i]) {
        i += 1;
    }
    i
}

/// Reads a quoted string starting at `start` (the quote). `\\`, `\'` and
/// `\"` are escapes; any other backslash stands for itself.
fn string_literal(text: &str, start: usize) -> Result<(String, usize), FilterError> {
    let b = text.as_bytes();
    let quote = b[start];
    let mut s = String::new();
    let mut i = start + 1;
    let mut run = i;
    while i < b.len() {
        match b[i] {
            c if c == quote => {
                s.push_str(&text[run..i]);
                return Ok((s, i + 1));
            }
            b'\\' => match b.get(i + 1) {
                // `\\`, `\'` and `\"` escape; any other backslash is kept
                // as written, so regex escapes such as `\d` need no doubling.
                Some(&c @ (b'\\' | b'\'' | b'"')) => {
                    s.push_str(&text[run..i]);
                    s.push(c as char);
                    i += 2;
                    run = i;
                }
                _ => i += 1,
            },
            _ => i += 1,
        }
    }
    Err(FilterError::Syntax {
        at: start,
        expected: "a closing quote for this string".to_owned(),
        found: "end of input".to_owned(),
    })
}

/// Reads a number: `123`, `1.5`, `2e3`, or a duration `500ms`, `2s`, `10us`,
/// `7ns`, `1m`, `1h` (an integer count of nanoseconds).
fn number(text: &str, start: usize) -> Result<(Tok, usize), FilterError> {
    let b = text.as_bytes();
    let mut i = start;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut is_float = false;
    if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
        is_float = true;
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            is_float = true;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    let digits = &text[start..i];
    let unit_end = scan_ident(b, i);
    let unit = &text[i..unit_end];
    let bad = |expected: &str| FilterError::Syntax {
        at: start,
        expected: expected.to_owned(),
        found: format!("'{}'", &text[start..unit_end]),
    };
    if is_float {
        if !unit.is_empty() {
            return Err(bad("a whole number before a duration unit"));
        }
        let v: f64 = digits.parse().map_err(|_| bad("a number"))?;
        if !v.is_finite() {
            return Err(bad("a finite number"));
        }
        return Ok((Tok::Float(v), i));
    }
    let v: i128 = digits
        .parse::<u64>()
        .map_err(|_| bad("an integer between 0 and 18446744073709551615"))?
        .into();
    let scale: i128 = match unit {
        "" => 1,
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        // `1and`, `5x`: letters glued to a number are never read as a
        // separate word; only a duration unit may follow without a space.
        _ => {
            return Err(bad(
                "a number, or a duration with unit ns, us, ms, s, m or h (put a space between a number and a following word)",
            ))
        }
    };
    let ns = v * scale;
    if ns > u64::MAX as i128 {
        return Err(bad("a duration below 2^64 nanoseconds"));
    }
    Ok((Tok::Int(ns), unit_end))
}
