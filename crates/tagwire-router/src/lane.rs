//! Lanes: an OS thread with its own single-threaded event loop. Connections
//! are served by the lane that accepted them; lanes never steal work from one
//! another. There is one lane today; priority lanes will add more, each with
//! its own scheduling policy.

use std::future::Future;
use std::thread::JoinHandle;

/// Spawns a lane thread named `name` running `make()` to completion on a
/// current-thread tokio runtime with a `LocalSet` (so tasks may use `Rc`).
pub(crate) fn spawn<F, Fut>(name: &str, make: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, make());
        })
}
