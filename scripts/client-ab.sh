#!/usr/bin/env bash
# scripts/client-ab.sh [--rounds N] [--unix] DAEMON CLIENT_A CLIENT_B
#
# Interleaved A/B of two `tagwire` client builds against one daemon: each
# round runs `CLIENT bench throughput --size 64 --duration 3` (publisher and
# subscriber in the client's one process) with A, then with B, and prints
# the rate and the client process's CPU time per event (user+sys, from
# /usr/bin/time): the client library's own cost, which a busy host moves
# far less than the rate. --unix uses the daemon's Unix socket instead of TCP.
# On a shared machine, pause other heavy processes while it runs.
set -uo pipefail
ROUNDS=3
KIND=tcp
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --unix) KIND=unix ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        -*) echo "client-ab.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [[ $# -ne 3 ]]; then
    echo "usage: client-ab.sh [--rounds N] [--unix] DAEMON CLIENT_A CLIENT_B" >&2
    exit 2
fi
D=$1 A=$2 B=$3
[[ -x /usr/bin/time ]] || { echo "client-ab.sh: needs /usr/bin/time (apt-get install -y time)" >&2; exit 2; }
W=$(mktemp -d)
PORT=18931
mkdir -p "$W/rt" "$W/rtc" && chmod 700 "$W/rt" "$W/rtc"
printf '[auth]\nenabled = false\n' > "$W/c.toml"
XDG_RUNTIME_DIR=$W/rt "$D" --config "$W/c.toml" --tcp 127.0.0.1:$PORT --unix "$W/s.sock" > "$W/d.log" 2>&1 &
DP=$!
trap 'kill $DP 2>/dev/null; wait $DP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
URL=tcp://127.0.0.1:$PORT
[[ $KIND == unix ]] && URL=unix://$W/s.sock
one() {
    local out rate n cpu
    out=$(XDG_RUNTIME_DIR=$W/rtc timeout 60 /usr/bin/time -f "CPU %U %S" "$1" -s "$URL" bench throughput --size 64 --duration 3 2>&1)
    rate=$(grep -o '[0-9]* msgs/s' <<<"$out" | head -1 | cut -d' ' -f1)
    n=$(grep -o '([0-9]* received' <<<"$out" | tr -dc 0-9)
    cpu=$(awk '/^CPU /{print $2 + $3}' <<<"$out")
    if [[ -z $rate || -z $n || $n == 0 ]]; then echo "failed: $(tail -n 1 <<<"$out")"; return; fi
    echo "$rate msgs/s, client CPU $(awk -v c="$cpu" -v n="$n" 'BEGIN{printf "%d", c * 1e9 / n}') ns/event"
}
echo "daemon $D; A = $A; B = $B; $KIND; $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p'))"
for r in $(seq "$ROUNDS"); do
    echo "round $r: A $(one "$A"); B $(one "$B")"
done
