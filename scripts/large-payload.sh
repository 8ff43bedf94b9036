#!/usr/bin/env bash
# A large reliable event over one link (issue 25 item 5; BENCHMARKS.md,
# "Large payloads over a link"): two tagwired on loopback (a dials b),
# `reliability = reliable`, an event of MIB MiB of random bytes published
# at a with `tagwire pub --file` and saved at b with `tagwire sub --save`;
# prints the time from publishing to the saved file, per round, and checks
# the bytes.
#
#   scripts/large-payload.sh [MIB] [ROUNDS] [FRAGMENT_SIZE]   (defaults: 64 3 1048576)
#
# Uses target/debug (or $BIN_DIR) tagwire and tagwired; builds them if missing.
set -euo pipefail
mib=${1:-64}
rounds=${2:-3}
piece=${3:-1048576}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN_DIR:-$root/target/debug}
if [[ ! -x $bin/tagwired || ! -x $bin/tagwire ]]; then
    (cd "$root" && cargo build -p tagwire-cli --bins)
fi
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
token=large-payload-token-0123456789abcdef
base=$((20000 + RANDOM % 20000))
for n in a b; do
    mkdir -p "$work/$n"
    peers=""
    [[ $n == a ]] && peers="\"tcp://127.0.0.1:$((base + 10))\""
    cat > "$work/$n/tagwired.toml" <<TOML
[auth]
local_token = false
[[auth.tokens]]
name = "bench"
token = "$token"
[[acl]]
identity = "token:bench"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[qos]
reliability = "reliable"
[limits]
max_frame = 268435456
max_buffered_bytes = 2147483648
max_queue_bytes = 536870912
[federation]
token = "$token"
peers = [$peers]
reliable_window_bytes = 536870912
fragment_size = $piece
TOML
done
start_daemon() { # name port
    XDG_RUNTIME_DIR=$work/$1 "$bin/tagwired" --tcp "127.0.0.1:$2" --no-unix --name "$1" \
        --config "$work/$1/tagwired.toml" > "$work/$1/log" 2>&1 &
    pids+=($!)
}
start_daemon b $((base + 10))
start_daemon a $((base))
export TAGWIRE_TOKEN=$token
head -c $((mib << 20)) /dev/urandom > "$work/sent.bin"
for _ in $(seq 50); do
    "$bin/tagwire" -s "tcp://127.0.0.1:$base" list --links --json 2>/dev/null | grep -q '"peer": *"b"' && break
    sleep 0.2
done
for r in $(seq "$rounds"); do
    rm -f "$work/got.bin"
    "$bin/tagwire" -s "tcp://127.0.0.1:$((base + 10))" --max-frame 268435456 sub /big/x -n 1 \
        --save "$work/got.bin" --timeout 120 > "$work/sub.out" 2>&1 &
    sub=$!
    sleep 1
    t0=$(date +%s.%N)
    "$bin/tagwire" -s "tcp://127.0.0.1:$base" pub /big/x --file "$work/sent.bin" 2>/dev/null
    wait "$sub"
    t1=$(date +%s.%N)
    cmp -s "$work/sent.bin" "$work/got.bin" || { echo "round $r: payload differs" >&2; exit 1; }
    awk -v a="$t0" -v b="$t1" -v m="$mib" -v r="$r" -v p="$piece" \
        'BEGIN { printf "round %d: %d MiB in %.2f s (%.1f MiB/s), fragment_size %d, intact\n", r, m, b - a, m / (b - a), p }'
done
echo "load: $(uptime)"
