//! Publishes ten events with fields on /demo/counter, one every 100 ms.
//!
//! Run: `cargo run --example publish` (with `tagwired` running).
//! Prints: `sent 1` … `sent 10`.

use std::time::Duration;

fn main() -> Result<(), tagwire::Error> {
    let session = tagwire::Session::connect_local()?;
    let publisher = session.declare_publisher("/examples/counter")?;
    for i in 1..=10i64 {
        publisher
            .event("/demo/counter", format!("count {i}"))
            .field("count", i)
            .field("even", i % 2 == 0)
            .priority(1)
            .send()?;
        println!("sent {i}");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
