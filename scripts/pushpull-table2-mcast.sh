#!/usr/bin/env bash
# Push-pull paper Tables 1 and 2 measured on a LAN segment (issue 27): one
# publisher's daemon d0 (host 0), an intermediate daemon r2 (host 2, dials
# d0) and two subscribers' daemons d1, d3 (hosts 1 and 3, dial r2), all on
# one bridge; a stream of 4,000 events/s of 1 KiB from host 0, d1's
# subscriber scaled by 2 and d3's by 3 (the paper's Table 2 case: two
# subscribers with different factors), per proxy place (none, at the
# subscribers, at the publisher, on r2), over unicast links and with
# `[[multicast]]` on all four daemons (the group delivering to the
# subscribers' daemons); ROUNDS rounds, the two transports interleaved.
# Measures bytes per host link (`ip -s link` on each host's eth0), CPU per
# process (/proc/PID/stat) and the one-way delay (source stamp → subscriber
# callback); prints the markdown tables for BENCHMARKS.md, the paper's
# entries beside ours. Needs root; the namespaces (`twtb-pp*`) go when it
# ends (also on failure). About 40 s per round.
#
#   scripts/pushpull-table2-mcast.sh [ROUNDS]     (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
[[ $(id -u) == 0 ]] || { echo "pushpull-table2-mcast.sh: needs root (network namespaces)" >&2; exit 1; }
cargo build --release -q -p tagwire-cli --bins
cargo build --release -q --manifest-path experiments/Cargo.toml --bin pushpull_proxies
BIN="${CARGO_TARGET_DIR:-experiments/target}/release/pushpull_proxies"
"$BIN" --bin "${CARGO_TARGET_DIR:-target}/release" --only lan --rounds "$ROUNDS"
echo
echo "command: scripts/pushpull-table2-mcast.sh $ROUNDS; $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD); load average $(cut -d' ' -f1-3 /proc/loadavg)"
