#!/usr/bin/env bash
# Where shared memory starts to pay (the `shm=auto` size threshold,
# `SessionBuilder::shm_threshold`, docs/shm.md): one `tagwired`, its Unix
# socket, `tagwire bench` with payloads over the socket (`shm=off`) and in
# shared memory (`--shm`, i.e. `require`), interleaved per size, ROUNDS
# rounds. Prints a markdown table of the medians with the spread of the
# ratio (min–max over rounds) for BENCHMARKS.md.
#
#   scripts/shm-threshold.sh [ROUNDS] [SECONDS]     (default 3 rounds of 2 s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-2}
SIZES=(64 512 1024 2048 4096 8192 16384 65536)
cargo build --release -q -p tagwire-cli
BIN=target/release
dir=$(mktemp -d)
trap 'kill $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -rf "$dir"' EXIT
XDG_RUNTIME_DIR=$dir "$BIN/tagwired" --no-tcp >"$dir/log" 2>&1 &
daemon=$!
sock=$dir/tagwire/tagwire.sock
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
[[ -S $sock ]] || { cat "$dir/log"; echo "the daemon did not start"; exit 1; }
export XDG_RUNTIME_DIR=$dir
out=$dir/results
for round in $(seq "$ROUNDS"); do
    for size in "${SIZES[@]}"; do
        for mode in throughput latency; do
            for shm in socket shm; do
                flag=(); [[ $shm == shm ]] && flag=(--shm)
                r=$("$BIN/tagwire" -s "unix://$sock" bench "$mode" --size "$size" --duration "$SECS" --json "${flag[@]}")
                echo "$round $size $mode $shm $r" >>"$out"
            done
        done
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    rnd, size, mode, shm, js = line.split(" ", 4)
    r = json.loads(js)
    v = r["msgs_per_sec"] if mode == "throughput" else r["rtt_p50_us"]
    rows.setdefault((int(size), mode), {}).setdefault(int(rnd), {})[shm] = v
print("| size | throughput socket, msgs/s | shm | shm / socket (min–max) | RTT p50 socket, µs | shm | shm / socket (min–max) |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for size in sorted({s for s, _ in rows}):
    cells = []
    for mode in ("throughput", "latency"):
        per = rows[(size, mode)].values()
        a = statistics.median(p["socket"] for p in per)
        b = statistics.median(p["shm"] for p in per)
        ratios = [p["shm"] / p["socket"] for p in per]
        fmt = (lambda x: f"{x:,.0f}") if mode == "throughput" else (lambda x: f"{x:.1f}")
        cells += [fmt(a), fmt(b), f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}–{max(ratios):.2f})"]
    print(f"| {size} | " + " | ".join(cells) + " |")
PY
echo
echo "command: scripts/shm-threshold.sh $ROUNDS $SECS; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%Y-%m-%dT%H:%MZ); git $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
