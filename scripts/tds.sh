#!/usr/bin/env bash
# NaradaBrokering Fig. 16–20 (buffering service input vs time-differential
# service output): a video-like stream across a jittery link (the testbed's
# software delay relay on loopback, 50 ± 20 ms), the same on the LAN, and
# events 500 µs apart; RFC 3550 jitter at a plain subscriber (the input) and
# at one with --qos playout=tds:D (the output), the spacing error p50/p99,
# and the TDS's CPU per stream. Prints the table for BENCHMARKS.md ("Time
# services"). No root needed.
#
#   scripts/tds.sh [SECONDS] [FIG] [OPTIONS…]   (default 20 s per run; FIG all|16|19|20)
#
# OPTIONS go to narada_tds: --client-playout (the TDS in the subscribing
# client instead of the daemon), --spin US (with --client-playout: the
# playout thread busy-waits the last US µs before each release and hands
# events to a callback), --sched fifo:N (the TDS channel's lane real-time),
# --warmup N (events left out, default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
FIG=${2:-all}
shift $(($# < 2 ? $# : 2))
cargo build --release -q --manifest-path experiments/Cargo.toml --bin narada_tds
"${CARGO_TARGET_DIR:-experiments/target}/release/narada_tds" --seconds "$SECS" --fig "$FIG" "$@"
echo
echo "command: scripts/tds.sh $SECS $FIG $*; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
