#!/usr/bin/env bash
# Soak run (not in CI): tagwired's memory stays bounded while a subscriber
# that never reads is flooded, stalled subscribers die with full queues, and
# clients keep connecting and leaving.
#
#   scripts/soak.sh [SECONDS]        (default 120)
#
# Starts a release `tagwired` on 127.0.0.1:7781 (TCP only), then for SECONDS:
#   - a subscriber on /soak/** that is stopped (SIGSTOP) and so never reads;
#   - a healthy subscriber on /soak/** that reads everything;
#   - a publisher sending 4 KiB events on /soak/data as fast as it can;
#   - churn: every second a short-lived publisher and subscriber come and go;
#   - killed stalled subscribers: every 5 s a subscriber on /soak/** is
#     started, stopped (SIGSTOP) so its queue fills with 4 KiB events, and
#     killed (SIGKILL) with its queue full (a leaked queue is ~64 MB each).
# It samples the daemon's resident memory (RSS) every second and fails
# (exit 1) if the daemon died, if RSS in the last quarter of the run exceeds
# the peak of the first quarter by more than 10 % + 16 MB (growth = a leak
# or an unbounded queue), or if the stalled subscriber's drops were not
# counted. Everything it starts is killed on exit.
set -euo pipefail

seconds="${1:-120}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
addr="127.0.0.1:7781"
server="tcp://$addr"
cd "$root"
cargo build --release --quiet --bin tagwired --bin tagwire
bin="${CARGO_TARGET_DIR:-$root/target}/release"

pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -f "${conf:-}"
}
trap cleanup EXIT

# A long idle timeout: the stalled subscriber never answers the router's
# Pings, and must stay for the whole run.
conf="$(mktemp)"
printf '[limits]\nidle_timeout = 86400\n' >"$conf"
"$bin/tagwired" --config "$conf" --tcp "$addr" --no-unix --log warn &
daemon=$!
pids+=("$daemon")
for _ in $(seq 50); do
    "$bin/tagwire" ping --server "$server" --count 1 >/dev/null 2>&1 && break
    sleep 0.1
done

"$bin/tagwire" sub '/soak/**' --server "$server" --endpoint /soak/stalled >/dev/null &
stalled=$!
pids+=("$stalled")
"$bin/tagwire" sub '/soak/**' --server "$server" --endpoint /soak/healthy >/dev/null &
pids+=("$!")
sleep 0.5
kill -STOP "$stalled"
(
    while true; do
        "$bin/tagwire" pub /soak/data --server "$server" --size 4096 --count 1000000 \
            --endpoint /soak/flood >/dev/null 2>&1 || sleep 0.2
    done
) &
pids+=("$!")
(
    i=0
    while true; do
        i=$((i + 1))
        "$bin/tagwire" sub '/soak/churn' --server "$server" --count 1 --timeout 2 \
            --endpoint "/soak/churn-sub-$i" >/dev/null 2>&1 &
        sleep 0.2
        "$bin/tagwire" pub /soak/churn hello --server "$server" --count 10 \
            --endpoint "/soak/churn-pub-$i" >/dev/null 2>&1 || true
        wait 2>/dev/null || true
        sleep 0.8
    done
) &
pids+=("$!")

(
    i=0
    while true; do
        i=$((i + 1))
        "$bin/tagwire" sub '/soak/**' --server "$server" --endpoint "/soak/killed-$i" >/dev/null 2>&1 &
        victim=$!
        sleep 1
        kill -STOP "$victim" 2>/dev/null || true
        sleep 3
        kill -KILL "$victim" 2>/dev/null || true
        wait "$victim" 2>/dev/null || true
        sleep 1
    done
) &
pids+=("$!")

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon/status"; }
samples=()
for s in $(seq "$seconds"); do
    sleep 1
    if ! kill -0 "$daemon" 2>/dev/null; then
        echo "soak: FAIL: tagwired exited after ${s}s" >&2
        exit 1
    fi
    samples+=("$(rss_kb)")
    printf 'soak: %4ds  tagwired RSS %6d KiB\n' "$s" "${samples[-1]}"
done

quarter=$(( ${#samples[@]} / 4 ))
[[ $quarter -ge 1 ]] || quarter=1
early_peak=0
for v in "${samples[@]:0:$quarter}"; do (( v > early_peak )) && early_peak=$v; done
late_peak=0
for v in "${samples[@]: -$quarter}"; do (( v > late_peak )) && late_peak=$v; done
limit=$(( early_peak * 11 / 10 + 16384 ))

listing="$("$bin/tagwire" list --server "$server" --json)"
dropped="$(printf '%s' "$listing" | python3 -c '
import json, sys
l = json.load(sys.stdin)
print(sum(s["dropped"] for s in l["subscriptions"] if s["endpoint"] == "/soak/stalled"))')"

echo "soak: RSS peak first quarter ${early_peak} KiB, last quarter ${late_peak} KiB (limit ${limit} KiB)"
echo "soak: the stalled subscriber's queue dropped ${dropped} events"
status=0
if (( late_peak > limit )); then
    echo "soak: FAIL: memory grew during the run" >&2
    status=1
fi
if (( dropped == 0 )); then
    echo "soak: FAIL: the stalled subscriber never hit its queue bound" >&2
    status=1
fi
[[ $status -eq 0 ]] && echo "soak: PASS"
exit $status
