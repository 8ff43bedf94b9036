#!/usr/bin/env bash
# Narada Fig. 2 (transit delay and its standard deviation vs message size
# over 0–4 daemon hops) against a chain of raw TCP relays measured in the
# same run, and the routing-efficiency count (8 daemons, subscribers on 2).
# Runs twice: free, and pinned to one core (the software's own cost, without
# the ~50 µs cross-core wake-ups of this 2-vCPU VM). Output: tables for
# BENCHMARKS.md ("Narada Fig. 2").
#
#   scripts/narada-fig2.sh [PINGS]     (default 1000 per point)
set -euo pipefail
cd "$(dirname "$0")/.."
PINGS=${1:-1000}
cargo build --release -q --manifest-path experiments/Cargo.toml --bin narada_hops
BIN="${CARGO_TARGET_DIR:-experiments/target}/release/narada_hops"
echo "== free (both cores)"
"$BIN" --pings "$PINGS" --max-hops 4 --sizes 64,1024,16384,65536
echo
echo "== pinned: taskset -c 0"
taskset -c 0 "$BIN" --pings "$PINGS" --max-hops 4 --sizes 64,1024,16384,65536
echo
echo "command: scripts/narada-fig2.sh $PINGS; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
