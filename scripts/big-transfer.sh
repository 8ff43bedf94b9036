#!/usr/bin/env bash
# Issue 25's experiment: a 2 GiB payload over a link cut twice during the
# transfer arrives intact (SHA-256 at both ends), with its resume points.
# Runs the netns test crates/tagwire-cli/tests/fragments_netns.rs (three
# daemons in a triangle, the publisher at d0, the subscriber at d1, the
# d0-d1 link cut until d0 drops it, healed, cut again) at MIB MiB, d0's
# egress shaped to RATE, release build; prints the daemons' resume lines,
# their reliable counters and the peak RSS of the test's tagwired and
# tagwire processes.
# As root (network namespaces, tc). Memory: each daemon on the path holds
# the whole event while it passes it on, and the publishing/saving CLI about
# 2-3x its size: ~12-16 GB at 2 GiB.
#
#   scripts/big-transfer.sh [MIB] [RATE] [TIMEOUT_S]   (defaults: 2048 1gbit 900)
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-2048}
RATE=${2:-1gbit}
TIMEOUT=${3:-900}
[[ $(id -u) == 0 ]] || { echo "big-transfer.sh: needs root (network namespaces, tc)" >&2; exit 1; }
log=$(mktemp)
# Peak RSS (VmHWM) of the test's tagwired/tagwire processes: those in its
# namespaces (twtb-*), not other daemons on the machine.
( while sleep 1; do
    for p in $(pgrep -x 'tagwire(d)?'); do
      [[ $(ip netns identify "$p" 2>/dev/null) == twtb-* ]] || continue
      awk -v p="$p" -v c="$(cat "/proc/$p/comm" 2>/dev/null)" '/VmHWM/ { print c, p, $2 }' "/proc/$p/status" 2>/dev/null
    done
  done ) > "$log.rss" & RSS=$!
trap 'kill $RSS 2>/dev/null; rm -f "$log" "$log.rss"' EXIT
t0=$(date +%s)
FRAG_NETNS_MIB=$MIB FRAG_NETNS_RATE=$RATE FRAG_NETNS_TIMEOUT=$TIMEOUT NETNS_SHOW_LOGS=1 \
  cargo test --release -q -p tagwire-cli --test fragments_netns -- --nocapture 2>&1 | tee "$log" \
  | grep -E "cut [0-9]|sha256|arrived intact|reliable counters|test result|panicked" || true
echo
echo "resume points (the daemons' log lines):"
grep -iE "resum" "$log" | sed -E 's/^.*(INFO|WARN|DEBUG) //' | head -40 || true
echo
echo "peak RSS (KiB) per process:"
awk '{ m[$1 " " $2] = $3 } END { for (k in m) print "  " k, m[k] }' "$log.rss"
echo "command: scripts/big-transfer.sh $MIB $RATE $TIMEOUT; $(( $(date +%s) - t0 )) s; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
grep -q "test result: ok" "$log"
