//! Embedded mode: the router runs inside this process, no daemon needed.
//! Two sessions on one in-process router exchange an event.
//!
//! Run: `cargo run --example embedded`
//! Prints: `embedded: /sensors/temp 21.5`

fn main() -> Result<(), tagwire::Error> {
    let router = tagwire::EmbeddedRouter::start()?;
    let sub_session = router.session()?;
    let subscriber = sub_session.subscribe("/sensors/*").receiver()?;
    let pub_session = router.session()?;
    let publisher = pub_session.declare_publisher("/examples/thermometer")?;
    publisher.publish("/sensors/temp", "21.5")?;
    let sample = subscriber.recv()?;
    println!(
        "embedded: {} {}",
        sample.tag(),
        String::from_utf8_lossy(&sample.payload())
    );
    Ok(())
}
