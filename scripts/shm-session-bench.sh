#!/usr/bin/env bash
# Issue 16, experiment 3: tagwire's normal API with shared memory negotiated
# by the daemon (`tagwire bench --shm`) against the same daemon's Unix socket
# path, 64 B and 1 MiB: throughput (one publisher, one subscriber) and
# round trip (ping-pong through an echo client), in one run, free and pinned
# to one core (`taskset -c 0`). Prints a markdown table for BENCHMARKS.md.
#
#   scripts/shm-session-bench.sh [SECONDS]     (default 3 per point)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
cargo build --release -q -p tagwire-cli
BIN=target/release
dir=$(mktemp -d)
trap 'kill $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -rf "$dir"' EXIT
XDG_RUNTIME_DIR=$dir "$BIN/tagwired" --tcp 127.0.0.1:0 >"$dir/log" 2>&1 &
daemon=$!
sock=$dir/tagwire/tagwire.sock
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
[[ -S $sock ]] || { cat "$dir/log"; echo "the daemon did not start"; exit 1; }
url=unix://$sock
export XDG_RUNTIME_DIR=$dir
run() { # pin mode size shm
    local pin=$1 mode=$2 size=$3 shm=$4 pre=()
    [[ $pin == pinned ]] && pre=(taskset -c 0)
    "${pre[@]}" "$BIN/tagwire" -s "$url" bench "$mode" --size "$size" --duration "$SECS" --json $shm
}
echo "| placement | size | mode | Unix socket | shared memory | shm / socket |"
echo "|---|---:|---|---:|---:|---:|"
for pin in free pinned; do
    for size in 64 1048576; do
        for mode in throughput latency; do
            a=$(run $pin $mode $size "")
            b=$(run $pin $mode $size --shm)
            python3 - "$pin" "$size" "$mode" "$a" "$b" <<'PY'
import json, sys
pin, size, mode, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
label = "64 B" if size == 64 else "1 MiB"
if mode == "throughput":
    x, y = a["msgs_per_sec"], b["msgs_per_sec"]
    print(f"| {pin} | {label} | throughput, msgs/s | {x:,.0f} | {y:,.0f} | {y/x:.2f}x |")
else:
    for q in ("rtt_p50_us", "rtt_p99_us"):
        x, y = a[q], b[q]
        print(f"| {pin} | {label} | RTT {q[4:7]}, µs | {x:.1f} | {y:.1f} | {y/x:.2f}x |")
PY
        done
    done
done
echo
echo "command: scripts/shm-session-bench.sh $SECS; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
