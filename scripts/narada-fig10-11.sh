#!/usr/bin/env bash
# Narada Fig. 10–11 (video conferencing over a WAN) on the netns testbed:
# a hub daemon with the speaker ("indiana") and four listener sites linked
# to it over WAN links of 10±1, 25±3, 40±5 and 100±10 ms one way (netem
# where the kernel has it, else the testbed's software delay relay — the
# output says which). `tagwire bench av --kind video --speaker-daemon` runs
# the load; the same sweep over undelayed links runs first (LAN baseline).
# Prints the table for BENCHMARKS.md and writes docs/narada-fig10-11.svg.
# Needs root.
#
#   scripts/narada-fig10-11.sh [SECONDS] [LISTENERS]   (default 10 s per point; 40,152,400)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
LISTENERS=${2:-40,152,400}
[[ $(id -u) == 0 ]] || { echo "narada-fig10-11.sh: needs root (network namespaces)" >&2; exit 1; }
cargo build --release -q -p tagwire-cli --bins
cargo build --release -q --manifest-path experiments/Cargo.toml --bin narada_wan
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
"${CARGO_TARGET_DIR:-experiments/target}/release/narada_wan" --bin "${CARGO_TARGET_DIR:-target}/release" --seconds "$SECS" \
  --listeners "$LISTENERS" --svg docs/narada-fig10-11.svg
echo
echo "command: scripts/narada-fig10-11.sh $SECS $LISTENERS; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
echo "plot: docs/narada-fig10-11.svg"
