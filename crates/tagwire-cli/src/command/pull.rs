//! `tagwire pull TAG --latest | --nth N | --seq S | --range A..B | --since
//! DURATION [--publisher P] [--at MODE] [--json]`: reads a tag's history and
//! prints each event as `tagwire sub` does (`TAG PAYLOAD`, or one JSON
//! object per line). Exit codes: 0 events printed, 3 gone (the message
//! names the oldest sequence number still held), 4 the tag keeps no
//! history, 1 anything else (bad arguments, out of range, unknown node, no
//! connection).

use std::io::Write;
use std::time::Duration;

use tagwire::{HistoryAt, Pull, PullError, PullOptions, Session};

use super::{CmdResult, ExitCode};
use crate::cli::PullArgs;

/// Exit code for "gone".
pub const EXIT_GONE: u8 = 3;
/// Exit code for "no history".
pub const EXIT_NO_HISTORY: u8 = 4;

pub fn run(
    connect: &dyn Fn() -> Result<Session, Box<dyn std::error::Error>>,
    a: PullArgs,
) -> CmdResult {
    // Arguments first: a bad one is refused before connecting.
    let pull = query(&a)?;
    let at: HistoryAt = a.at.parse()?;
    let options = PullOptions {
        publisher: a.publisher.clone(),
        at,
    };
    let session = connect()?;
    let samples = match session.pull_with(&a.tag, pull, &options) {
        Ok(s) => s,
        Err(e @ PullError::Gone { .. }) => {
            return Err(Box::new(ExitCode {
                code: EXIT_GONE,
                message: format!("{}: {e}", a.tag),
            }))
        }
        Err(e @ PullError::NoHistory { .. }) => {
            return Err(Box::new(ExitCode {
                code: EXIT_NO_HISTORY,
                message: e.to_string(),
            }))
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for s in &samples {
        if a.json {
            writeln!(out, "{}", super::subscribe::to_json(s))?;
        } else {
            writeln!(out, "{} {}", s.tag(), String::from_utf8_lossy(&s.payload()))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The query the options ask for (clap makes exactly one present).
fn query(a: &PullArgs) -> Result<Pull, String> {
    if let Some(n) = a.nth {
        return Ok(Pull::Nth(n));
    }
    if let Some(s) = a.seq {
        return Ok(Pull::Seq(s));
    }
    if let Some(r) = &a.range {
        return parse_range(r);
    }
    if let Some(d) = &a.since {
        return Ok(Pull::since(parse_duration(d)?));
    }
    Ok(Pull::Latest)
}

/// `A..B` or `A..=B`, both ends included, `A <= B`.
pub fn parse_range(s: &str) -> Result<Pull, String> {
    let bad = |why: &str| format!("invalid --range {s:?}: {why}");
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| bad("expected A..B (sequence numbers, both included)"))?;
    let b = b.strip_prefix('=').unwrap_or(b);
    let first: u64 = a.parse().map_err(|_| bad("A is not a sequence number"))?;
    let last: u64 = b.parse().map_err(|_| bad("B is not a sequence number"))?;
    if first > last {
        return Err(bad("A is after B"));
    }
    Ok(Pull::SeqRange { first, last })
}

/// A whole number with a unit: `ns`, `us`, `ms`, `s`, `m`, `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("invalid --since {s:?}: expected a whole number with a unit (ns, us, ms, s, m, h), e.g. 2m")
    };
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let scale: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(scale)
        .map(Duration::from_nanos)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_durations_parse_or_name_the_problem() {
        assert_eq!(
            parse_range("3..7"),
            Ok(Pull::SeqRange { first: 3, last: 7 })
        );
        assert_eq!(
            parse_range("3..=7"),
            Ok(Pull::SeqRange { first: 3, last: 7 })
        );
        assert!(parse_range("7..3").unwrap_err().contains("A is after B"));
        assert!(parse_range("x..3").unwrap_err().contains("A is not"));
        assert!(parse_range("3").unwrap_err().contains("expected A..B"));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("2").unwrap_err().contains("with a unit"));
        assert!(parse_duration("2d").is_err());
        assert!(parse_duration("99999999999999h").is_err());
    }

    proptest::proptest! {
        #[test]
        fn pull_arguments_parse_or_are_refused_without_panicking(s in ".{0,40}") {
            let _ = parse_range(&s);
            let _ = parse_duration(&s);
            let _ = s.parse::<HistoryAt>();
        }

        #[test]
        fn a_valid_range_parses_to_its_ends(a in 0u64..u64::MAX, len in 0u64..1000) {
            let b = a.saturating_add(len);
            proptest::prop_assert_eq!(parse_range(&format!("{a}..{b}")), Ok(Pull::SeqRange { first: a, last: b }));
        }
    }
}
