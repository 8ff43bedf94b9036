#!/usr/bin/env bash
# Abuse run (not in CI, issue 12): tagwired's memory and a healthy client's
# latency while hostile or careless clients attack it.
#
#   scripts/abuse.sh [ATTACK ...]     (default: all attacks, in order)
#
# Starts a release `tagwired` on 127.0.0.1:7782 (TCP only) with a temporary
# config (limits.max_buffered_bytes = 256 MiB, so the budget is visible),
# records its baseline resident memory (RSS) and a healthy client's round
# trip p99 while idle, then runs each attack from
# crates/tagwire-router/examples/abuse.rs and prints, per attack: peak RSS
# during it, RSS after the attackers left (PASS if within 10 % of the
# baseline, with a 4 MiB floor for small baselines), and the healthy
# client's round-trip p50/p99 during the attack next to its idle ones.
#
# The daemon runs with glibc's default allocator settings; set
# TAGWIRED_ENV="MALLOC_MMAP_THRESHOLD_=65536" (for example) to run it with
# others. Besides RSS it prints the router's own accounting of buffered
# bytes (`tagwire list`: memory.buffered_bytes), which must be back to 0.
#
# Adding an attack: a function `attack_NAME` below that runs the attacker
# (in the foreground) and one `run NAME "description"` line in `main`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
addr="127.0.0.1:7782"
cd "$root"
cargo build --release --quiet --bin tagwired --bin tagwire -p tagwire-cli
cargo build --release --quiet -p tagwire-router --example abuse
bin="${CARGO_TARGET_DIR:-$root/target}/release"
abuse="$bin/examples/abuse"
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)"

tmp="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/tagwired.toml" <<TOML
tcp = "$addr"
[limits]
max_buffered_bytes = 268435456
handshake_timeout = 5
idle_timeout = 60
TOML
env ${TAGWIRED_ENV:-} "$bin/tagwired" --config "$tmp/tagwired.toml" --tcp "$addr" --no-unix --log warn 2>"$tmp/daemon.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 50); do
    "$abuse" ping --server "$addr" --count 1 --interval-ms 0 >/dev/null 2>&1 && break
    sleep 0.1
done

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon/status"; }
buffered() {
    "$bin/tagwire" list --server "tcp://$addr" --json | python3 -c '
import json, sys
m = json.load(sys.stdin)["memory"]
print(m["buffered_bytes"], m["discarded_events"], m["refused_connections"])'
}

# Samples RSS every 50 ms into $tmp/peak until $tmp/stop exists.
sample_peak() {
    local peak=0 v
    while [[ ! -e "$tmp/stop" ]]; do
        v="$(rss_kb)"
        (( v > peak )) && peak=$v
        echo "$peak" >"$tmp/peak"
        sleep 0.05
    done
}

# Waits until RSS stops falling (up to 10 s) and prints it.
settled_rss() {
    local last now
    last="$(rss_kb)"
    for _ in $(seq 20); do
        sleep 0.5
        now="$(rss_kb)"
        (( now >= last )) && break
        last=$now
    done
    rss_kb
}

attack_stalled_killed() { "$abuse" stalled-killed --server "$addr" --rounds 10 --events 1200; }
attack_small_queued() { "$abuse" small-queued --server "$addr" --events 16384 --hold 3; }
attack_big_frames() { "$abuse" big-frames --server "$addr" --conns 64 --hold 3; }
attack_idle() { "$abuse" idle --server "$addr" --conns 4096 --hold 7; }
attack_malformed() { "$abuse" malformed --server "$addr" --frames 1000000; }

status=0
run() {
    local name="$1" what="$2"
    local fn="attack_${name//-/_}"
    local base idle_lat during_lat peak after limit verdict log_before log_after
    base="$(settled_rss)"
    idle_lat="$("$abuse" ping --server "$addr" --count 200 --interval-ms 5)"
    log_before="$(wc -c <"$tmp/daemon.log")"
    rm -f "$tmp/stop" "$tmp/peak"
    sample_peak &
    local sampler=$!
    "$fn" >"$tmp/attack.out" 2>&1 &
    local attacker=$!
    sleep 0.5
    during_lat="$("$abuse" ping --server "$addr" --count 200 --interval-ms 5 || echo "- -")"
    wait "$attacker" || { echo "abuse: $name: the attacker failed: $(cat "$tmp/attack.out")" >&2; status=1; }
    touch "$tmp/stop"
    wait "$sampler" || true
    peak="$(cat "$tmp/peak" 2>/dev/null || echo 0)"
    after="$(settled_rss)"
    log_after="$(wc -c <"$tmp/daemon.log")"
    limit=$(( base * 11 / 10 ))
    (( limit < base + 4096 )) && limit=$(( base + 4096 ))
    if ! kill -0 "$daemon" 2>/dev/null; then
        verdict="FAIL (daemon died)"; status=1
    elif (( after > limit )); then
        verdict="FAIL"; status=1
    else
        verdict="PASS"
    fi
    read -r acct discarded refused <<<"$(buffered)"
    (( acct == 0 )) || { verdict="$verdict, FAIL (router still accounts $acct bytes)"; status=1; }
    read -r idle_p50 idle_p99 <<<"$idle_lat"
    read -r during_p50 during_p99 <<<"$during_lat"
    echo "== $name: $what"
    echo "   $(tail -1 "$tmp/attack.out")"
    printf '   RSS KiB: baseline %d, peak %d, after %d (limit %d): %s\n' "$base" "$peak" "$after" "$limit" "$verdict"
    printf '   healthy round trip µs: idle p50 %s p99 %s; during p50 %s p99 %s\n' \
        "$idle_p50" "$idle_p99" "$during_p50" "$during_p99"
    printf '   router accounting after: %s bytes buffered; budget discards %s, refused connections %s (cumulative)\n' \
        "$acct" "$discarded" "$refused"
    printf '   daemon log: %d bytes during the attack\n' $(( log_after - log_before ))
}

main() {
    local want=("$@")
    [[ ${#want[@]} -gt 0 ]] || want=(stalled-killed small-queued big-frames idle malformed)
    echo "abuse: tagwired pid $daemon on $addr, $(nproc) CPUs, baseline RSS $(settled_rss) KiB"
    for a in "${want[@]}"; do
        case "$a" in
            stalled-killed) run stalled-killed "subscribers that never read get 64 KiB events, then die (x10)" ;;
            small-queued) run small-queued "16,384 small events queued to a stalled subscriber, one per read buffer" ;;
            big-frames) run big-frames "64 connections announce 16 MiB frames and send all but the last byte" ;;
            idle) run idle "4,096 sockets that never say Hello" ;;
            malformed) run malformed "one connection sends 1M frames of an unknown type" ;;
            *) echo "abuse: unknown attack $a" >&2; exit 2 ;;
        esac
    done
    [[ $status -eq 0 ]] && echo "abuse: PASS" || echo "abuse: FAIL"
    return $status
}

main "$@"
