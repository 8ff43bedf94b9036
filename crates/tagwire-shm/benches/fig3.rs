//! DSI Figure 3 (placeholder until the benchmark lands).
fn main() {}
