//! Counts events on /demo/** in a callback (the lowest-latency way to
//! receive: it runs on the session's reader thread), printing a total
//! every second.
//!
//! Run: `cargo run --example subscribe_callback` (with `tagwired` running).
//! Prints: `received 10 events so far` …

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn main() -> Result<(), tagwire::Error> {
    let session = tagwire::Session::connect_local()?;
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let _subscription = session.subscribe("/demo/**").callback(move |_sample| {
        c.fetch_add(1, Ordering::Relaxed);
    })?;
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        println!("received {} events so far", count.load(Ordering::Relaxed));
    }
}
