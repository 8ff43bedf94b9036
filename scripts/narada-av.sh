#!/usr/bin/env bash
# Narada Fig. 4–5 (one daemon) and 7–9 (4 linked daemons, listeners spread
# evenly) with `tagwire bench av`: audio (252 B / 30 ms) and video (15
# frames/s, ~740 B packets) to N listeners; prints one line per point
# (mean latency, RTP jitter, late > 100 ms, lost) for BENCHMARKS.md.
# Everything runs on this machine: the listeners' load generator competes
# with the daemons for the same cores.
#
#   scripts/narada-av.sh [SECONDS]     (default 5 per point)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
cargo build --release -q -p tagwire-cli
BIN=target/release
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cat > "$WORK/tw.toml" <<TOML
[limits]
max_connections = 20000
max_connections_per_identity = 20000
max_pending_handshakes = 20000
max_endpoints_per_identity = 100000
TOML
start() { # NAME PORT [PEER]
  local extra=()
  [[ -n ${3:-} ]] && extra=(--peer "$3")
  XDG_RUNTIME_DIR="$WORK" "$BIN/tagwired" --name "$1" --tcp "127.0.0.1:$2" --no-unix -c "$WORK/tw.toml" "${extra[@]}" 2>"$WORK/$1.log" &
  PIDS+=($!)
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$2") 2>/dev/null && return; sleep 0.05; done
  echo "tagwired $1 did not start" >&2; exit 1
}
av() { XDG_RUNTIME_DIR="$WORK" "$BIN/tagwire" bench av --duration "$SECS" "$@"; }
start d0 7960
echo "== Fig. 4-5: one daemon, audio"
av --daemons tcp://127.0.0.1:7960 --listeners 500,1000,1500,2000,2500,3000,4000,5000 --kind audio
echo "== Fig. 4-5: one daemon, video"
av --daemons tcp://127.0.0.1:7960 --listeners 500,1000,1500,2000,3000 --kind video
start d1 7970 tcp://127.0.0.1:7960
start d2 7980 tcp://127.0.0.1:7960
start d3 7990 tcp://127.0.0.1:7960
sleep 2
ALL=tcp://127.0.0.1:7960,tcp://127.0.0.1:7970,tcp://127.0.0.1:7980,tcp://127.0.0.1:7990
echo "== Fig. 7-8: 4 daemons (a star), one meeting, audio"
av --daemons "$ALL" --listeners 1000,2000,3000,4000,5000 --kind audio
echo "== Fig. 9: 4 daemons, 4 meetings (one speaker on each daemon), audio"
av --daemons "$ALL" --meetings 4 --listeners 1000,2000,3000,4000 --kind audio
echo "command: scripts/narada-av.sh $SECS; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD)"
