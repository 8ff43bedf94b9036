#!/usr/bin/env bash
# Narada Fig. 12–14 (network time) on the netns testbed: three linked
# daemons in network namespaces, two with a software-skewed clock (19,235 ms
# and 544,461 ms off, as Narada's Cardiff and Indiana machines, drifting at
# +150 and −80 ppm), sampled once a second; writes docs/narada-fig12-14.svg
# and prints the table for BENCHMARKS.md. Needs root.
#
#   scripts/narada-fig12-14.sh [SECONDS]      (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=${1:-120}
[[ $(id -u) == 0 ]] || { echo "narada-fig12-14.sh: needs root (network namespaces)" >&2; exit 1; }
cargo build --release -q --manifest-path experiments/Cargo.toml --bin narada_clock
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"${CARGO_TARGET_DIR:-experiments/target}/release/narada_clock" --seconds "$SECONDS_RUN" \
  --csv "$OUT/clock.csv" --svg docs/narada-fig12-14.svg | tee "$OUT/table.txt"
echo
echo "command: scripts/narada-fig12-14.sh $SECONDS_RUN; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
echo "plot: docs/narada-fig12-14.svg; samples: $(($(wc -l < "$OUT/clock.csv") - 1))"
