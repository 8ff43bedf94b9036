#!/usr/bin/env bash
# Push-pull paper §3.3 (Fig. 5–11, Tables 1, 2 and 4) on the netns testbed:
# round trips with no proxy and a scaling proxy at the subscriber's daemon,
# the publisher's daemon or an intermediate daemon, over one node, two nodes
# and chains of one and two intermediate ("router") daemons, against raw TCP
# relays in the same run; delay per router daemon; round trips across a
# 10 Mbit/s router egress under a UDP flood without and with a reservation;
# bytes per link and CPU per process per proxy place; pull vs round trip.
# Runs twice: free, and pinned to one core (taskset -c 0: the software's own
# cost, without cross-core wake-ups). Prints the tables for BENCHMARKS.md
# and writes docs/pushpull-fig6-9.svg, -fig10.svg, -fig11.svg (free run).
# Needs root; the namespaces go when it ends (also on failure).
#
#   scripts/pushpull-fig5-11.sh [PINGS]     (default 300 per point)
set -euo pipefail
cd "$(dirname "$0")/.."
PINGS=${1:-300}
[[ $(id -u) == 0 ]] || { echo "pushpull-fig5-11.sh: needs root (network namespaces)" >&2; exit 1; }
cargo build --release -q -p tagwire-cli --bins
cargo build --release -q --manifest-path experiments/Cargo.toml --bin pushpull_proxies
BIN="${CARGO_TARGET_DIR:-experiments/target}/release/pushpull_proxies"
echo "== free (both cores)"
"$BIN" --bin "${CARGO_TARGET_DIR:-target}/release" --pings "$PINGS" --svg-dir docs
echo
echo "== pinned: taskset -c 0"
taskset -c 0 "$BIN" --bin "${CARGO_TARGET_DIR:-target}/release" --pings "$PINGS" --only rtt
echo
echo "command: scripts/pushpull-fig5-11.sh $PINGS; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
echo "plots: docs/pushpull-fig6-9.svg docs/pushpull-fig10.svg docs/pushpull-fig11.svg"
