#!/usr/bin/env bash
# scripts/daemon-ab.sh [--mode throughput|latency] [--rounds N] [--pin CPU] CLIENT DAEMON_A DAEMON_B
#
# Interleaved A/B of two tagwired builds with one client build (BENCHMARKS.md,
# "The daemon's 64 B throughput regression"): each round starts DAEMON_A,
# runs `CLIENT bench MODE --size 64 --duration 3` over TCP against it, stops
# it, then the same for DAEMON_B, so both see the same machine. Each daemon
# gets `[auth] enabled = false` (an old client has no token), or no config
# if it does not know `[auth]` (revisions before b0c6c7e's successors).
# --pin CPU runs daemon and client under `taskset -c CPU` (the software's own
# cost, no cross-core wake-ups).
# In throughput mode each run also prints the daemon's CPU time per event
# (user and system ns, from /proc/PID/stat): a busy host (other VMs) moves
# throughput by 2x between runs, but hardly the CPU an event costs.
#
# Build an old revision beside this checkout with
#   git worktree add /tmp/wt REV && (cd /tmp/wt && cargo build --release -p tagwire-cli)
# On a shared machine, pause other heavy processes while it runs: a pair's
# two runs must see the same load.
set -uo pipefail
MODE=throughput
ROUNDS=3
PIN=
while [[ $# -gt 0 ]]; do
    case "$1" in
        --mode) MODE=${2:?}; shift ;;
        --rounds) ROUNDS=${2:?}; shift ;;
        --pin) PIN=${2:?}; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        -*) echo "daemon-ab.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [[ $# -ne 3 ]]; then
    echo "usage: daemon-ab.sh [--mode throughput|latency] [--rounds N] [--pin CPU] CLIENT DAEMON_A DAEMON_B" >&2
    exit 2
fi
case "$MODE" in throughput|latency) ;; *) echo "daemon-ab.sh: --mode is throughput or latency" >&2; exit 2 ;; esac
CLIENT=$1 A=$2 B=$3
for b in "$CLIENT" "$A" "$B"; do
    [[ -x $b ]] || { echo "daemon-ab.sh: $b is not an executable" >&2; exit 2; }
done
W=$(mktemp -d /tmp/tagwire-ab.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/rtc"; chmod 700 "$W/rtc"
printf '[auth]\nenabled = false\n' >"$W/c.toml"
TASKSET=(); [[ -n $PIN ]] && TASKSET=(taskset -c "$PIN")

# One run: start DAEMON on PORT, bench it, stop it; prints the figure.
run() {
    local d=$1 port=$2 pid
    mkdir -p "$W/rt$port"; chmod 700 "$W/rt$port"
    XDG_RUNTIME_DIR=$W/rt$port "${TASKSET[@]}" "$d" --config "$W/c.toml" --tcp 127.0.0.1:$port --unix "$W/s$port.sock" >"$W/d$port.log" 2>&1 &
    pid=$!
    sleep 0.3
    if ! kill -0 $pid 2>/dev/null; then
        XDG_RUNTIME_DIR=$W/rt$port "${TASKSET[@]}" "$d" --tcp 127.0.0.1:$port --unix "$W/s$port.sock" >"$W/d$port.log" 2>&1 &
        pid=$!
    fi
    for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    local out u0 s0 u1 s1 n
    read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
    out=$(XDG_RUNTIME_DIR=$W/rtc timeout 60 "${TASKSET[@]}" "$CLIENT" -s tcp://127.0.0.1:$port bench "$MODE" --size 64 --duration 3 2>&1)
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
    if [[ $MODE == throughput ]]; then
        n=$(grep -o '([0-9]* received' <<<"$out" | head -1 | tr -dc 0-9)
        echo "$(grep -o '[0-9]* msgs/s' <<<"$out" | head -1 | cut -d' ' -f1) $(awk -v t="$(getconf CLK_TCK)" -v n="${n:-0}" -v u=$((u1 - u0)) -v s=$((s1 - s0)) \
            'BEGIN{if (n > 0) printf "%d %d", u * 1e9 / t / n, s * 1e9 / t / n; else print "0 0"}')"
    else
        grep -o 'p50 [0-9.]* µs, p99 [0-9.]* µs' <<<"$out" | head -1
    fi
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
}

echo "client $CLIENT; A = $A; B = $B; mode $MODE${PIN:+, pinned to CPU $PIN}; $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
for r in $(seq "$ROUNDS"); do
    a=$(run "$A" 18801)
    b=$(run "$B" 18802)
    if [[ $MODE == throughput && -n $a && -n $b ]]; then
        read -r ar au as <<<"$a"
        read -r br bu bs <<<"$b"
        echo "round $r: A $ar msgs/s, B $br msgs/s, B/A $(awk "BEGIN{printf \"%.2f\", $br/$ar}"); daemon CPU per event: A ${au}+${as} ns, B ${bu}+${bs} ns (user+sys), B/A $(awk "BEGIN{printf \"%.2f\", ($bu+$bs)/($au+$as)}")"
    else
        echo "round $r: A ${a:-failed}; B ${b:-failed}"
    fi
done
