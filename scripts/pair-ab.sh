#!/usr/bin/env bash
# scripts/pair-ab.sh [--rounds N] DIR_A DIR_B
#
# Interleaved A/B of two whole builds (client and daemon together): each round
# starts DIR_A/tagwired, runs `DIR_A/tagwire bench throughput --size 64
# --duration 3` over TCP against it, stops it, then the same for DIR_B, so
# both see the same machine. Prints each round's rates and B/A. Use it where a
# change touches both sides (a build profile, the protocol); daemon-ab.sh and
# client-ab.sh split a change's effect by side.
set -uo pipefail
ROUNDS=3
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        -*) echo "pair-ab.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [[ $# -ne 2 ]]; then
    echo "usage: pair-ab.sh [--rounds N] DIR_A DIR_B (each holding tagwire and tagwired)" >&2
    exit 2
fi
A=$1 B=$2
for d in "$A" "$B"; do
    for bin in tagwire tagwired; do
        [[ -x "$d/$bin" ]] || { echo "pair-ab.sh: $d/$bin is missing (build with cargo build --release -p tagwire-cli)" >&2; exit 2; }
    done
done
PORT=${PAIR_AB_PORT:-17460}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[auth]\nenabled = false\n' > "$work/tagwired.toml"
run() {
    local dir=$1 pid rate
    "$dir/tagwired" --tcp "127.0.0.1:$PORT" --unix "$work/s.sock" --config "$work/tagwired.toml" \
        >"$work/daemon.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        sleep 0.1
    done
    rate=$("$dir/tagwire" bench throughput --size 64 --duration 3 --server "tcp://127.0.0.1:$PORT" 2>&1 |
        grep -o '[0-9]* msgs/s' | cut -d' ' -f1)
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -f "$work"/s*.sock
    echo "${rate:-0}"
}
echo "A = $A; B = $B; 64 B over TCP; $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'))"
for i in $(seq "$ROUNDS"); do
    a=$(run "$A")
    b=$(run "$B")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "n/a" }')
    echo "round $i: A $a msgs/s, B $b msgs/s, B/A $ratio"
done
