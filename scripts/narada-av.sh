#!/usr/bin/env bash
# Narada Fig. 4–5 (one daemon) and 7–9 (4 linked daemons, listeners spread
# evenly) with `tagwire bench av`: audio (252 B / 30 ms) and video (15
# frames/s, ~740 B packets) to N listeners; prints one line per point
# (mean latency, RTP jitter, late > 100 ms, lost) and then, per section, the
# markdown table for BENCHMARKS.md (scripts/av-table.py: one row per point
# with the spread of its runs; paste it unedited).
# Everything runs on this machine: the listeners' load generator competes
# with the daemons for the same cores. Each point leaves out each
# listener's first 100 packets (Narada's warm-up, `--warmup`) and runs
# RUNS times (`--runs`); the script prints every run and the spread.
# With CPUSETS=1 and at least 2 CPUs per process group, each daemon and
# the load generator get their own CPUs (taskset); on fewer CPUs it says so
# and shares them (Fig. 7-9 then cannot show capacity growing with daemons).
#
#   scripts/narada-av.sh [SECONDS] [RUNS]   (default 30 s per run, 3 runs)
#   ONLY="4-5a" scripts/narada-av.sh 15 3   (one section: 4-5a, 4-5v, 7-8a, 7-8v, 9a)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
RUNS=${2:-3}
ONLY=${ONLY:-}
CPUS=$(nproc)
# CPU sets: daemon i on CPU i+1, the load generator on CPU 0, when there
# are at least 5 CPUs (4 daemons + the generator); else everything shares.
PIN_D=() PIN_G=()
if [[ ${CPUSETS:-0} == 1 ]]; then
  if (( CPUS >= 5 )); then PIN_G=(taskset -c 0); else
    echo "CPUSETS=1: $CPUS CPUs are too few for 4 daemons and a load generator on CPUs of their own; sharing them" >&2
  fi
fi
want() { [[ -z $ONLY || $ONLY == "$1" ]]; }
# BIN=DIR: use the tagwire and tagwired in DIR instead of building them.
if [[ -z ${BIN:-} ]]; then
  cargo build --release -q -p tagwire-cli
  BIN=target/release
fi
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
NEXT_CPU=1
start() { # NAME PORT [PEER]
  local extra=() pin=()
  [[ -n ${3:-} ]] && extra=(--peer "$3")
  if [[ ${#PIN_G[@]} -gt 0 ]]; then pin=(taskset -c "$NEXT_CPU"); NEXT_CPU=$((NEXT_CPU + 1)); fi
  XDG_RUNTIME_DIR="$WORK" "${pin[@]}" "$BIN/tagwired" --name "$1" --tcp "127.0.0.1:$2" --no-unix -c "$WORK/tw.toml" "${extra[@]}" 2>"$WORK/$1.log" &
  PIDS+=($!)
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$2") 2>/dev/null && return; sleep 0.05; done
  echo "tagwired $1 did not start" >&2; exit 1
}
av() {
  XDG_RUNTIME_DIR="$WORK" "${PIN_G[@]}" "$BIN/tagwire" bench av --duration "$SECS" --runs "$RUNS" --warmup 100 --json "$@" > "$WORK/av.json"
  echo
  scripts/av-table.py < "$WORK/av.json"
  echo
}
start d0 7960
if want 4-5a; then
echo "== Fig. 4-5: one daemon, audio"
av --daemons tcp://127.0.0.1:7960 --listeners ${LISTENERS:-500,1000,1500,2000,2500,3000,4000,5000} --kind audio
fi
if want 4-5v; then
echo "== Fig. 4-5: one daemon, video"
av --daemons tcp://127.0.0.1:7960 --listeners ${LISTENERS:-500,1000,1500,2000,3000} --kind video
fi
[[ -z $ONLY || $ONLY == 7-8a || $ONLY == 7-8v || $ONLY == 9a ]] || { echo "command: ONLY=$ONLY scripts/narada-av.sh $SECS $RUNS; $CPUS CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"; exit 0; }
start d1 7970 tcp://127.0.0.1:7960
start d2 7980 tcp://127.0.0.1:7960
start d3 7990 tcp://127.0.0.1:7960
sleep 2
ALL=tcp://127.0.0.1:7960,tcp://127.0.0.1:7970,tcp://127.0.0.1:7980,tcp://127.0.0.1:7990
if want 7-8a; then
echo "== Fig. 7-8: 4 daemons (a star), one meeting, audio"
av --daemons "$ALL" --listeners ${LISTENERS:-1000,2000,3000,4000,5000} --kind audio
fi
if want 7-8v; then
echo "== Fig. 7-8: 4 daemons (a star), one meeting, video (the paper's stream)"
av --daemons "$ALL" --listeners ${LISTENERS:-1000,2000,3000,4000} --kind video
fi
if want 9a; then
echo "== Fig. 9: 4 daemons, 4 meetings (one speaker on each daemon), audio"
av --daemons "$ALL" --meetings 4 --listeners ${LISTENERS:-1000,2000,3000,4000} --kind audio
fi
echo "command: ONLY=$ONLY scripts/narada-av.sh $SECS $RUNS; $CPUS CPUs; CPU sets: ${PIN_G[*]:-shared}; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
