//! Prints every event on /demo/** with a blocking iterator.
//!
//! Run: `cargo run --example subscribe` (with `tagwired` running), then
//! `cargo run --example publish` in another terminal.
//! Prints: `/demo/counter count 1 (seq 1, fields: count=Int(1) even=Bool(false))` …

fn main() -> Result<(), tagwire::Error> {
    let session = tagwire::Session::connect_local()?;
    let subscriber = session
        .subscribe("/demo/**")
        .endpoint("/examples/viewer")
        .receiver()?;
    for sample in subscriber.iter() {
        let ev = sample.event();
        let fields: Vec<String> = ev.fields().map(|(k, v)| format!("{k}={v:?}")).collect();
        println!(
            "{} {} (seq {}, fields: {})",
            sample.tag(),
            String::from_utf8_lossy(ev.payload),
            ev.seq,
            fields.join(" ")
        );
    }
    Ok(())
}
