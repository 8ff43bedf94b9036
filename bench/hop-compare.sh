#!/usr/bin/env bash
# One broker hop, compared: each system's ping-pong RTT with the echo on
# the same server (0 hops) and on a second server linked to the first
# (1 hop each way): two tagwired linked by --peer, two nats-servers joined
# by a cluster route, two Zenoh routers connected to each other. Per-hop
# added one-way delay = (p50(1 hop) − p50(0 hops)) / 2. Also pinned to one
# core. Prints a table for BENCHMARKS.md ("Daemon hops").
#
#   bench/hop-compare.sh [SECONDS]      (default 3 per run)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
command -v nats-server >/dev/null || { echo "hop-compare.sh: nats-server is not installed (apt-get install nats-server)" >&2; exit 1; }
cargo build --release -q -p tagwire-cli
(cd bench && cargo build --release -q)
BASE=bench/target/release/baseline
[[ -n ${CARGO_TARGET_DIR:-} ]] && BASE=$CARGO_TARGET_DIR/release/baseline
TW=target/release
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
wait_tcp() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
nats-server -a 127.0.0.1 -p 4301 --cluster nats://127.0.0.1:6301 --routes nats://127.0.0.1:6302 2>"$WORK/n1.log" & PIDS+=($!)
nats-server -a 127.0.0.1 -p 4302 --cluster nats://127.0.0.1:6302 --routes nats://127.0.0.1:6301 2>"$WORK/n2.log" & PIDS+=($!)
"$BASE" zenoh-router --port 7461 2>"$WORK/z1.log" & PIDS+=($!)
BASELINE_ZENOH_CONNECT=tcp/127.0.0.1:7461 "$BASE" zenoh-router --port 7462 2>"$WORK/z2.log" & PIDS+=($!)
XDG_RUNTIME_DIR="$WORK" "$TW/tagwired" --name t1 --tcp 127.0.0.1:7501 --no-unix 2>"$WORK/t1.log" & PIDS+=($!)
XDG_RUNTIME_DIR="$WORK" "$TW/tagwired" --name t2 --tcp 127.0.0.1:7511 --no-unix --peer tcp://127.0.0.1:7501 2>"$WORK/t2.log" & PIDS+=($!)
for p in 4301 4302 7461 7462 7501 7511; do wait_tcp $p; done
sleep 2
p50() { python3 -c 'import json,sys; d=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print(d[-1]["rtt_p50_us"])'; }
run() { # PIN SYSTEM HOPS SIZE
  local pin=() ; [[ $1 == 1 ]] && pin=(taskset -c 0)
  case $2 in
    tagwire) local echo=(); [[ $3 == 1 ]] && echo=(--echo-server tcp://127.0.0.1:7511)
      XDG_RUNTIME_DIR="$WORK" "${pin[@]}" "$TW/tagwire" -s tcp://127.0.0.1:7501 bench latency --size "$4" --duration "$SECS" --json "${echo[@]}" | p50 ;;
    nats) local e=nats://127.0.0.1:4301; [[ $3 == 1 ]] && e=nats://127.0.0.1:4302
      BASELINE_ECHO_SERVER=$e "${pin[@]}" "$BASE" nats latency --size "$4" --duration "$SECS" --server nats://127.0.0.1:4301 | p50 ;;
    zenoh) local e=tcp/127.0.0.1:7461; [[ $3 == 1 ]] && e=tcp/127.0.0.1:7462
      BASELINE_ECHO_SERVER=$e "${pin[@]}" "$BASE" zenoh latency --size "$4" --duration "$SECS" --server tcp/127.0.0.1:7461 | p50 ;;
  esac
}
pin_all() { for p in "${PIDS[@]}"; do taskset -a -p -c "$1" "$p" >/dev/null 2>&1 || true; done; }
echo "| pinned | size | system | RTT p50, 0 hops (µs) | RTT p50, 1 hop (µs) | added per hop, one way (µs) |"
echo "|---|---:|---|---:|---:|---:|"
for pin in 0 1; do
  [[ $pin == 1 ]] && pin_all 0 || pin_all "0-$(( $(nproc) - 1 ))"
  for size in 64 1024; do
    for sys in tagwire nats zenoh; do
      a=$(run $pin $sys 0 $size); b=$(run $pin $sys 1 $size)
      python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'| {\"yes\" if sys.argv[5]==\"1\" else \"no\"} | {sys.argv[3]} B | {sys.argv[4]} | {a:.1f} | {b:.1f} | {(b-a)/2:.1f} |')" "$a" "$b" "$size" "$sys" "$pin"
    done
  done
done
echo
echo "command: bench/hop-compare.sh $SECS; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD); $(nats-server --version 2>&1 | head -1)"
