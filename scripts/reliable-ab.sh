#!/usr/bin/env bash
# scripts/reliable-ab.sh [--rounds N] [--size B] [--duration S] [--modes M,...] CLIENT_A DAEMON_A CLIENT_B DAEMON_B
#
# Same-run A/B of the reliable path (issue 25, "Cost"; BENCHMARKS.md "Reliable
# cost: where it went"): two builds, each its own `tagwire` client and
# `tagwired`, in interleaved rounds. Each round runs, for A then B (B first
# in even rounds), a fresh daemon on loopback TCP and
# `CLIENT bench throughput --size B` three ways:
#   best_effort  — nothing acknowledged;
#   publisher    — `--reliability reliable` (acknowledged publishing);
#   subscriber   — after `admin qos '/bench/**' reliability=reliable`, which
#                  makes the subscription acknowledged (acknowledged
#                  delivery), the publisher best effort;
#   both         — the two together: what `reliable` promises end to end.
# (--modes LIST picks some: best_effort is always run, as the reference.)
# Each line gives msgs/s and the CPU time per event of the daemon and of the
# client process (user+sys ns, /proc and /usr/bin/time): throughput moves with
# the machine's load, CPU per event much less. Not a timing assertion: run it
# under `flock /work/bench.lock` (a quiet machine: /work/bisect/quiet5.sh).
set -uo pipefail
ROUNDS=3 SIZE=64 DURATION=3 MODES=publisher,subscriber,both
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --size) SIZE=${2:?}; shift ;;
        --duration) DURATION=${2:?}; shift ;;
        --modes) MODES=${2:?}; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        -*) echo "reliable-ab.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [[ $# -ne 4 ]]; then
    echo "usage: reliable-ab.sh [--rounds N] [--size B] [--duration S] CLIENT_A DAEMON_A CLIENT_B DAEMON_B" >&2
    exit 2
fi
for b in "$@"; do
    [[ -x $b ]] || { echo "reliable-ab.sh: $b is not an executable" >&2; exit 2; }
done
W=$(mktemp -d /tmp/tagwire-relab.XXXXXX)
PID=
cleanup() {
    [[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/rtc"; chmod 700 "$W/rtc"
printf '[auth]\nenabled = false\n' >"$W/c.toml"
TCK=$(getconf CLK_TCK)

# run CLIENT DAEMON PORT MODE: prints "msgs/s daemon_ns client_ns received sent".
run() {
    local c=$1 d=$2 port=$3 mode=$4 out u0 s0 u1 s1 n rel=()
    mkdir -p "$W/rt$port"; chmod 700 "$W/rt$port"
    XDG_RUNTIME_DIR=$W/rt$port "$d" --config "$W/c.toml" --tcp "127.0.0.1:$port" --no-unix --log warn >"$W/d$port.log" 2>&1 &
    PID=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
    if [[ $mode == both || $mode == subscriber ]]; then
        XDG_RUNTIME_DIR=$W/rtc "$c" -s "tcp://127.0.0.1:$port" admin qos '/bench/**' reliability=reliable >/dev/null 2>&1 ||
            { echo "admin qos failed" >&2; }
    fi
    [[ $mode == publisher || $mode == both ]] && rel=(--reliability reliable)
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$PID/stat")
    out=$(XDG_RUNTIME_DIR=$W/rtc timeout 120 /usr/bin/time -f 'CPU %U %S' "$c" -s "tcp://127.0.0.1:$port" \
        bench throughput --size "$SIZE" --duration "$DURATION" --json "${rel[@]}" 2>&1)
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$PID/stat")
    kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=
    local json cpu
    json=$(grep -m1 '^{' <<<"$out")
    cpu=$(grep -m1 '^CPU ' <<<"$out")
    n=$(sed -n 's/.*"received":\([0-9]*\).*/\1/p' <<<"$json")
    awk -v r="$(sed -n 's/.*"msgs_per_sec":\([0-9.e+]*\).*/\1/p' <<<"$json")" -v n="${n:-0}" \
        -v sent="$(sed -n 's/.*"sent":\([0-9]*\).*/\1/p' <<<"$json")" \
        -v du=$((u1 - u0)) -v ds=$((s1 - s0)) -v t="$TCK" -v c="$cpu" 'BEGIN{
        split(c, a, " ");
        if (n > 0) printf "%.0f %.0f %.0f %d %d", r, (du + ds) * 1e9 / t / n, (a[2] + a[3]) * 1e9 / n, n, sent;
        else print "0 0 0 0 0" }'
}

echo "A = $1 + $2; B = $3 + $4; ${SIZE} B, ${DURATION} s per run; $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | build | mode | msgs/s | ÷ same build's best_effort | daemon CPU ns/event | client CPU ns/event | received of sent |"
echo "|---:|---|---|---:|---:|---:|---:|---|"
for r in $(seq "$ROUNDS"); do
    order=(A B); (( r % 2 == 0 )) && order=(B A)
    for who in "${order[@]}"; do
        if [[ $who == A ]]; then c=$1 d=$2 port=18811; else c=$3 d=$4 port=18812; fi
        be=
        for mode in best_effort ${MODES//,/ }; do
            read -r rate dns cns n sent <<<"$(run "$c" "$d" "$port" "$mode")"
            [[ $mode == best_effort ]] && be=$rate
            echo "| $r | $who | $mode | $rate | $(awk -v a="$rate" -v b="$be" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "—" }') | $dns | $cns | $n of $sent |"
        done
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
