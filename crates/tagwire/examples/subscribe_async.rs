//! Receives events on /demo/** as an async stream inside a tokio runtime.
//!
//! Run: `cargo run --example subscribe_async` (with `tagwired` running).
//! Prints: `async: /demo/counter count 1` …

fn main() -> Result<(), tagwire::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let session = tagwire::Session::connect_local()?;
        let subscriber = session.subscribe("/demo/**").receiver()?;
        loop {
            let sample = subscriber.recv_async().await?;
            println!(
                "async: {} {}",
                sample.tag(),
                String::from_utf8_lossy(&sample.payload())
            );
        }
    })
}
