#!/usr/bin/env bash
# scripts/durable-kill-all.sh [--events N] [--rate R] [--daemons D] [--rounds K]
#
# Issue 25's durable experiment (BENCHMARKS.md "Durable: every daemon killed"):
# D release tagwireds (default 5) on loopback linked in a ring, each with its
# own state directory and `[store] tags = ["/durable/**"]`; `tagwire pub
# --qos reliability=durable` publishes N events (default 10,000) at R a second
# (default 1,000) at d0; then every daemon is killed with SIGKILL and started
# again on its state directory. Then, per round:
#   - at d0 (the publisher's daemon) and at d2 (two links away: its store holds
#     only what was delivered there, nothing here, so its replay reads d0's
#     store over the links): `tagwire sub --replay-from start` counts what it
#     gets, the duplicates, and whether it is in order;
#   - at d2 with `--spacing original`: the spacing error of each consecutive
#     pair, |arrival gap - source-time gap| (arrival: when this script read
#     the line from the subscriber's stdout), p50/p99/max, and the total
#     duration against the publisher's.
# Prints markdown for BENCHMARKS.md. Needs only loopback. Not a timing
# assertion: the spacing error is this VM's scheduling as much as ours.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
events=10000 rate=1000 daemons=5 rounds=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) events=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --daemons) daemons=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        *) echo "durable-kill-all.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $daemons -ge 3 ]] || { echo "durable-kill-all.sh: --daemons must be at least 3" >&2; exit 2; }
cargo build --release --quiet -p tagwire-cli
bin="${CARGO_TARGET_DIR:-$root/target}/release"
tmp="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
base=${PORT:-7840}
port() { echo $((base + 10 * $1)); }
token=durable-kill-all-0123456789abcdef
for i in $(seq 0 $((daemons - 1))); do
    p=$(port "$i")
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && { echo "durable-kill-all.sh: port $p is in use (PORT=...)" >&2; exit 1; }
    next=$(port $(((i + 1) % daemons)))
    mkdir -p "$tmp/d$i/rt"
    cat > "$tmp/d$i/tagwired.toml" <<EOF
name = "d$i"
[[auth.tokens]]
name = "fed"
token = "$token"
[[acl]]
identity = "token:fed"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[store]
tags = ["/durable/**"]
[federation]
token = "$token"
peers = ["127.0.0.1:$next"]
EOF
done
start() {
    local i=$1
    XDG_RUNTIME_DIR="$tmp/d$i/rt" "$bin/tagwired" --tcp "127.0.0.1:$(port "$i")" --no-unix \
        --config "$tmp/d$i/tagwired.toml" --state-dir "$tmp/d$i/state" --log warn 2>>"$tmp/d$i/log" &
    pids[i]=$!
}
wait_listening() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$(port "$1")") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "durable-kill-all.sh: d$1 did not start (log: $(tail -3 "$tmp/d$1/log"))" >&2
    exit 1
}
tw() { local i=$1; shift; XDG_RUNTIME_DIR="$tmp/d$i/rt" "$bin/tagwire" -s "tcp://127.0.0.1:$(port "$i")" "$@"; }
# Waits until daemon $1 knows all the daemons (the ring is up).
wait_ring() {
    for _ in $(seq 200); do
        local n
        n=$(tw "$1" list --json 2>/dev/null | python3 -c 'import json,sys; f=json.load(sys.stdin).get("federation") or {}; print(len(f.get("known", [])))' 2>/dev/null || echo 0)
        [[ "$n" -ge "$daemons" ]] && return 0
        sleep 0.1
    done
    echo "durable-kill-all.sh: d$1 never saw all $daemons daemons" >&2
    exit 1
}
for i in $(seq 0 $((daemons - 1))); do start "$i"; done
for i in $(seq 0 $((daemons - 1))); do wait_listening "$i"; done
wait_ring 0
wait_ring 2
pub_start=$(date +%s%N)
tw 0 pub /durable/x hello -n "$events" --rate "$rate" --endpoint /exp/pub --qos reliability=durable >"$tmp/pub.out" 2>&1
pub_end=$(date +%s%N)
pub_secs=$(python3 -c "print(f'{($pub_end - $pub_start) / 1e9:.2f}')")
for i in $(seq 0 $((daemons - 1))); do kill -9 "${pids[i]}"; done
wait 2>/dev/null || true
for i in $(seq 0 $((daemons - 1))); do start "$i"; done
for i in $(seq 0 $((daemons - 1))); do wait_listening "$i"; done
wait_ring 0
wait_ring 2
# Runs a subscriber (the command after the event count) and reads its JSON
# lines as they come, stamping each (the reader starts first, so that its
# own start-up does not delay the first lines); prints the count, missing,
# duplicates, out-of-order pairs, the spacing error quantiles, the replay's
# duration and the source times' span.
analyse() {
    python3 -u -c '
import json, subprocess, sys, time
n = int(sys.argv[1]); rows = []
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
for line in iter(p.stdout.readline, b""):
    t = time.monotonic_ns()
    try:
        v = json.loads(line)
    except ValueError:
        continue
    if "seq" not in v:
        print(f"subscriber: {line.decode().strip()}", file=sys.stderr)
        continue
    rows.append((t, v["seq"], v["source_time_ns"]))
p.wait()
seqs = [r[1] for r in rows]
dups = len(seqs) - len(set(seqs))
disorder = sum(1 for a, b in zip(seqs, seqs[1:]) if b <= a)
missing = len(set(range(1, n + 1)) - set(seqs))
errs = sorted(abs((b[0] - a[0]) - (b[2] - a[2])) / 1000 for a, b in zip(rows, rows[1:]))
q = lambda p: errs[min(len(errs) - 1, int(p * len(errs)))] if errs else float("nan")
span = (rows[-1][0] - rows[0][0]) / 1e9 if len(rows) > 1 else 0
src = (rows[-1][2] - rows[0][2]) / 1e9 if len(rows) > 1 else 0
print(f"{len(rows)}|{missing}|{dups}|{disorder}|{q(0.5):.0f}|{q(0.99):.0f}|{errs[-1] if errs else 0:.0f}|{span:.2f}|{src:.2f}")
' "$@"
}
echo "\`scripts/durable-kill-all.sh --events $events --rate $rate --daemons $daemons --rounds $rounds\`:" \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), revision $(git rev-parse --short HEAD), \`nproc\` = $(nproc)," \
    "CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $daemons release \`tagwired\`s on" \
    "loopback in a ring, publisher at d0 ($events events at $rate/s, \`--qos reliability=durable\`, took ${pub_secs} s:" \
    "$(tail -1 "$tmp/pub.out")), then every daemon killed with SIGKILL and started again on its state directory."
echo
echo "| round | subscriber at | spacing | received | missing | duplicates | out of order | spacing error p50 µs | p99 µs | max µs | replay took s | source span s |"
echo "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
timeout_s=$((events / rate * 3 + 30))
for r in $(seq 1 "$rounds"); do
    for case in "0 fast" "2 fast" "2 original"; do
        set -- $case
        res=$(XDG_RUNTIME_DIR="$tmp/d$1/rt" analyse "$events" "$bin/tagwire" -s "tcp://127.0.0.1:$(port "$1")" \
            sub /durable/x --replay-from start --spacing "$2" --json -n "$events" --timeout "$timeout_s")
        IFS='|' read -r got miss dup dis p50 p99 max span src <<<"$res"
        if [[ "$2" == fast ]]; then p50=—; p99=—; max=—; fi
        echo "| $r | d$1 | $2 | $got | $miss | $dup | $dis | $p50 | $p99 | $max | $span | $src |"
    done
done
