#!/usr/bin/env bash
# scripts/daemon-instructions.sh [--seconds S] [--rounds N] CLIENT DAEMON_A DAEMON_B
#
# Instructions the daemon executes per event of `CLIENT bench throughput
# --size 64 --duration S` over TCP, DAEMON_A and DAEMON_B interleaved
# (BENCHMARKS.md, "Jitter of every channel: what it costs"). Instruction
# counts do not move with the machine's load, where wall time does.
#
# `perf stat -e instructions` needs the CPU's hardware counters; a VM
# without PMU passthrough (this one: `perf stat` says "<not supported>")
# has none, so valgrind's callgrind counts them instead: the daemon runs
# under `valgrind --tool=callgrind --instr-atstart=no`, instrumentation is
# switched on (`callgrind_control -i on`) only while the bench runs, and
# the total Ir of the dump is divided by the events the subscriber
# received. Under valgrind the daemon runs ~50x slower, so batches are
# larger than natively: compare A with B, not with native runs.
set -uo pipefail
SECS=5
ROUNDS=2
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) SECS=${2:?}; shift ;;
        --rounds) ROUNDS=${2:?}; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "daemon-instructions.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [[ $# -ne 3 ]]; then
    echo "usage: daemon-instructions.sh [--seconds S] [--rounds N] CLIENT DAEMON_A DAEMON_B" >&2
    exit 2
fi
for tool in valgrind callgrind_control; do
    command -v $tool >/dev/null || { echo "daemon-instructions.sh: needs $tool (apt-get install -y valgrind)" >&2; exit 2; }
done
CLIENT=$1 A=$2 B=$3
for b in "$CLIENT" "$A" "$B"; do
    [[ -x $b ]] || { echo "daemon-instructions.sh: $b is not an executable" >&2; exit 2; }
done
W=$(mktemp -d /tmp/tagwire-inst.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/rtc"; chmod 700 "$W/rtc"
printf '[auth]\nenabled = false\n' >"$W/c.toml"

# One run: DAEMON under callgrind on PORT, bench it; prints "Ir received Ir/event".
run() {
    local d=$1 port=$2 pid out n ir
    mkdir -p "$W/rt$port"; chmod 700 "$W/rt$port"
    XDG_RUNTIME_DIR=$W/rt$port valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$W/cg.$port" "$d" --config "$W/c.toml" --tcp 127.0.0.1:$port --no-unix \
        >"$W/d$port.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    callgrind_control -i on $pid >/dev/null
    out=$(XDG_RUNTIME_DIR=$W/rtc timeout 120 "$CLIENT" -s tcp://127.0.0.1:$port bench throughput --size 64 --duration "$SECS" 2>&1)
    callgrind_control -i off $pid >/dev/null
    kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null
    n=$(grep -o '([0-9]* received' <<<"$out" | head -1 | tr -dc 0-9)
    ir=$(grep -h '^totals:' "$W"/cg.$port* 2>/dev/null | awk '{s += $2} END {print s + 0}')
    rm -f "$W"/cg.$port*
    awk -v ir="$ir" -v n="${n:-0}" 'BEGIN{ if (n > 0) printf "%d %d %.0f", ir, n, ir / n; else printf "%d 0 -", ir }'
}

echo "client $CLIENT; A = $A; B = $B; bench throughput --size 64 --duration $SECS under callgrind; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round  A: Ir, received, Ir/event  |  B: Ir, received, Ir/event  |  B/A per event"
for r in $(seq "$ROUNDS"); do
    a=$(run "$A" 18811)
    b=$(run "$B" 18812)
    ratio=$(awk -v a="${a##* }" -v b="${b##* }" 'BEGIN{ if (a > 0) printf "%.3f", b / a; else print "-" }')
    echo "$r  $a  |  $b  |  $ratio"
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
