#!/usr/bin/env bash
# scripts/reliable-cpu-ab.sh [--rounds N] [--events N] DAEMON_A DAEMON_B — reliable links' cost as daemon CPU
# per event (issue 25, BENCHMARKS.md "Reliable links"): for each round and each of the two `tagwired`
# binaries (e.g. an older build and this one), best_effort then reliable over one loopback link (daemon a
# dials b; `tagwire pub -n EVENTS --size 64` on a, `tagwire sub` on b, queues sized to hold everything),
# prints the subscriber's rate and each daemon's CPU per event (`perf stat -e task-clock -p`: CPU time is
# steadier than a rate on a shared machine). Needs `perf` and a release `tagwire` client (built here).
set -uo pipefail
ROUNDS=3; N=200000
while [[ $# -gt 2 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --events) N=${2:?}; shift 2 ;;
        *) echo "reliable-cpu-ab.sh: unknown argument $1 (try the header of this file)" >&2; exit 2 ;;
    esac
done
[[ $# -eq 2 ]] || { sed -n '2,8p' "$0"; exit 2; }
command -v perf >/dev/null || { echo "reliable-cpu-ab.sh: needs perf (apt-get install -y linux-perf)" >&2; exit 1; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cargo build --release --quiet --bin tagwire -p tagwire-cli --manifest-path "$root/Cargo.toml" || exit 1
client="${CARGO_TARGET_DIR:-$root/target}/release/tagwire"
one() { # daemon mode
    local d=$1 mode=$2 t; t=$(mktemp -d)
    export XDG_RUNTIME_DIR=$t
    : >"$t/a.toml"; [[ $mode == reliable ]] && printf '[qos]\nreliability = "reliable"\n' >"$t/a.toml"
    "$d" --name b --tcp 127.0.0.1:7921 --no-unix --log error & local pb=$!; sleep 0.4
    "$d" --name a --tcp 127.0.0.1:7911 --no-unix --config "$t/a.toml" --peer tcp://127.0.0.1:7921 --log error &
    local pa=$!; sleep 0.4
    "$client" -s tcp://127.0.0.1:7921 sub '/bench/**' -n "$N" --timeout 5 --max-queue "$N" --local-queue "$N" 2>/dev/null |
        perl -MTime::HiRes=time -ne '$n++; $f //= time; $l = time; END { printf "%d %.0f\n", $n, ($n > 1 && $l > $f) ? ($n - 1) / ($l - $f) : 0 }' >"$t/sub.out" &
    local s=$!
    for _ in $(seq 100); do
        "$client" -s tcp://127.0.0.1:7911 list --links --json 2>/dev/null |
            python3 -c 'import json,sys; f=json.load(sys.stdin); sys.exit(0 if any(d.get("interest",0)>0 for d in f.get("known",[])) else 1)' && break
        sleep 0.1
    done
    perf stat -x, -e task-clock -p $pa -o "$t/pa" 2>/dev/null & local sa=$!
    perf stat -x, -e task-clock -p $pb -o "$t/pb" 2>/dev/null & local sb=$!
    sleep 0.2
    "$client" -s tcp://127.0.0.1:7911 pub /bench/x x -n "$N" --size 64 >/dev/null 2>&1
    wait $s; kill -INT $sa $sb; wait $sa $sb 2>/dev/null
    kill $pa $pb; wait $pa $pb 2>/dev/null
    local got rate; read -r got rate <"$t/sub.out"
    python3 - "$mode" "$got" "$rate" "$N" "$t/pa" "$t/pb" <<'PY'
import sys
mode, got, rate, n, fa, fb = sys.argv[1:7]
ms = lambda f: float(next(l for l in open(f) if "task-clock" in l).split(",")[0])
print(f"{mode:12} received {got} of {n}  {rate} events/s  CPU per event a {ms(fa)*1e6/int(n):.0f} ns  b {ms(fb)*1e6/int(n):.0f} ns")
PY
    rm -rf "$t"
}
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $N events of 64 B, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
    for d in "$1" "$2"; do
        for m in best_effort reliable; do echo -n "$r $d "; one "$d" "$m"; done
    done
done
