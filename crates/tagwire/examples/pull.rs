//! Pull: a tag keeps its last events (`history=3`), and a late client reads
//! them instead of waiting for the next one. Runs an in-process router.
//!
//! Run: `cargo run --example pull`
//! Prints:
//! ```text
//! latest: 25 (seq 5)
//! range: 23 24 25
//! seq 1: gone: not held any more (the history holds 3 event(s), sequence numbers 3..=5)
//! ```

use tagwire::{Pull, PullError};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let router = tagwire::EmbeddedRouter::start()?;
    let session = router.session()?;
    // Keep the last 3 events of every publisher on /sensors/** (an admin request).
    session.set_qos(&["/sensors/**"], &[("history", "3")], &[])?;
    let thermometer = session.declare_publisher("/examples/thermometer")?;
    for t in 21..=25 {
        thermometer.publish("/sensors/temp", t.to_string())?;
    }
    let latest = session.pull("/sensors/temp", Pull::Latest)?;
    let text = |s: &tagwire::Sample| String::from_utf8_lossy(&s.payload()).into_owned();
    println!(
        "latest: {} (seq {})",
        text(&latest[0]),
        latest[0].event().seq
    );
    let range = session.pull("/sensors/temp", Pull::SeqRange { first: 3, last: 5 })?;
    let values: Vec<String> = range.iter().map(text).collect();
    println!("range: {}", values.join(" "));
    match session.pull("/sensors/temp", Pull::Seq(1)) {
        Err(e @ PullError::Gone { .. }) => println!("seq 1: {e}"),
        other => println!("seq 1: unexpected {other:?}"),
    }
    Ok(())
}
