//! `tagwire ping`: round trips to the router, with min/avg/max like ping(8).

use std::time::Duration;

use tagwire::Session;

use super::CmdResult;
use crate::cli::PingArgs;

pub fn run(session: &Session, a: PingArgs) -> CmdResult {
    let mut rtts = Vec::with_capacity(a.count as usize);
    for i in 0..a.count {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(a.interval));
        }
        let rtt = session.ping()?;
        outln!("pong seq={} time={:.1} µs", i + 1, rtt.as_secs_f64() * 1e6);
        rtts.push(rtt.as_secs_f64() * 1e6);
    }
    if !rtts.is_empty() {
        let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rtts.iter().copied().fold(0.0, f64::max);
        let avg = rtts.iter().sum::<f64>() / rtts.len() as f64;
        outln!(
            "{} pings: min/avg/max = {min:.1}/{avg:.1}/{max:.1} µs",
            rtts.len()
        );
    }
    Ok(())
}
