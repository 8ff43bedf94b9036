#!/usr/bin/env bash
# scripts/durable-jetstream.sh [--rounds N] [--sizes "64 65536"] [--duration S] [--reliability R]
#
# `durable` against NATS JetStream with a file-backed stream, in one run on
# this machine (issue 25, "Cost"; BENCHMARKS.md "Durable against NATS
# JetStream"). Each round and size, interleaved:
#   tagwire: a fresh release tagwired (--state-dir in a temporary directory)
#     with `[store] tags = ["/bench/**"]`, `tagwire bench throughput
#     --reliability R` (one publisher, one subscriber; R = durable, the
#     default: acknowledged publishing, paced by the store's commits, each
#     acknowledgement after the commit that holds the event; best_effort:
#     a flood, the store keeps what it keeps up with); then the store counters
#     are polled every 50 ms until `stored` stops moving: "stored/s" is
#     stored ÷ (the moment it reached its final value − the bench's start).
#   JetStream: a fresh `nats-server -js` (file store in a temporary
#     directory), `baseline nats-js throughput` (bench/src/nats_jetstream.rs):
#     one publisher with up to 4,096 acknowledgements outstanding, one core
#     subscriber; "stored/s" is acknowledged publishes per second (JetStream
#     acknowledges once the event is in the file store).
# Same fsync policy: nats-server 2.9.10 (Debian's) has no sync option; its
# file store syncs on a 2-minute timer (docs.nats.io: sync_interval, default
# 2m), so tagwired runs `fsync = "interval"` with `fsync_interval_ms =
# 120000`: in a run of a few seconds neither calls fsync. Run under
# `flock /work/bench.lock` (a quiet machine: /work/bisect/quiet5.sh). Prints
# markdown for BENCHMARKS.md.
set -uo pipefail
ROUNDS=3
SIZES="64 65536"
DURATION=3
RELIABILITY=durable
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --sizes) SIZES=${2:?}; shift ;;
        --duration) DURATION=${2:?}; shift ;;
        --reliability) RELIABILITY=${2:?}; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "durable-jetstream.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v nats-server >/dev/null || { echo "durable-jetstream.sh: nats-server is not installed (apt-get install -y nats-server)" >&2; exit 1; }
cargo build --release --quiet -p tagwire-cli --bin tagwired --bin tagwire || exit 1
bin="${CARGO_TARGET_DIR:-$root/target}/release"
# BASELINE=PATH: a built bench/ `baseline` binary (skips its build).
if [[ -n "${BASELINE:-}" ]]; then
    baseline=$BASELINE
else
    (cd bench && CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$root/bench/target}" cargo build --release --quiet --bin baseline) || exit 1
    baseline="${BENCH_TARGET_DIR:-$root/bench/target}/release/baseline"
fi
tmp="$(mktemp -d)"
pid=
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
tw_port=7794
js_port=17810
wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "durable-jetstream.sh: nothing listens on 127.0.0.1:$1" >&2
    return 1
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=; }
now() { date +%s.%N; }
store_json() {
    XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwire" -s "tcp://127.0.0.1:$tw_port" list --json |
        python3 -c 'import json,sys; s=json.load(sys.stdin).get("store") or {}; print(s.get("stored",0), s.get("not_stored",0), s.get("commits",0))'
}
tagwire_run() { # size -> "delivered stored_per_s stored not_stored sent acked_per_s failed"
    rm -rf "$tmp/state" "$tmp/rt"; mkdir -p "$tmp/rt"
    printf '[store]\ntags = ["/bench/**"]\nfsync = "interval"\nfsync_interval_ms = 120000\n' >"$tmp/tagwired.toml"
    XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwired" --tcp "127.0.0.1:$tw_port" --no-unix \
        --config "$tmp/tagwired.toml" --state-dir "$tmp/state" --log warn &
    pid=$!
    wait_port "$tw_port" || return 1
    local t0 line stored last t_final n=0
    t0=$(now)
    line=$(XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwire" -s "tcp://127.0.0.1:$tw_port" \
        bench throughput --size "$1" --duration "$DURATION" --reliability "$RELIABILITY" --json 2>/dev/null | grep '^{' | tail -1)
    last=-1; t_final=$(now)
    while (( n < 100 )); do
        read -r stored _ _ < <(store_json)
        if [[ $stored == "$last" ]]; then
            break
        fi
        last=$stored; t_final=$(now); n=$((n + 1))
        sleep 0.05
    done
    read -r stored not_stored commits < <(store_json)
    python3 - "$line" "$t0" "$t_final" "$stored" "$not_stored" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); t0, t1 = float(sys.argv[2]), float(sys.argv[3])
stored, not_stored = int(sys.argv[4]), int(sys.argv[5])
print(f"{d['msgs_per_sec']:.0f} {stored / (t1 - t0):.0f} {stored} {not_stored} {d['sent']} {d.get('acked_per_sec', 0):.0f} {d.get('failed', 0)}")
PY
    stop
}
jetstream_run() { # size -> "delivered acked_per_s stored sent"
    rm -rf "$tmp/js"; mkdir -p "$tmp/js"
    nats-server -js -sd "$tmp/js" -a 127.0.0.1 -p "$js_port" 2>"$tmp/nats.log" &
    pid=$!
    wait_port "$js_port" || return 1
    local line
    line=$("$baseline" nats-js throughput --size "$1" --duration "$DURATION" --server "nats://127.0.0.1:$js_port" 2>"$tmp/js.err" | grep '^{' | tail -1)
    [[ -n $line ]] || { echo "durable-jetstream.sh: baseline nats-js failed: $(tail -2 "$tmp/js.err")" >&2; stop; return 1; }
    python3 - "$line" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
print(f"{d['msgs_per_sec']:.0f} {d['acked_per_sec']:.0f} {d['stored']} {d['sent']}")
PY
    stop
}
fmt() { python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$1"; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
for r in $(seq "$ROUNDS"); do
    for size in $SIZES; do
        if (( r % 2 )); then
            tw=$(tagwire_run "$size") || exit 1; js=$(jetstream_run "$size") || exit 1
        else
            js=$(jetstream_run "$size") || exit 1; tw=$(tagwire_run "$size") || exit 1
        fi
        read -r tw_del tw_rate tw_stored tw_not tw_sent tw_acked tw_failed <<<"$tw"
        read -r js_del js_rate js_stored js_sent <<<"$js"
        ratio=$(python3 -c "print(f'{$tw_rate / max($js_rate, 1):.2f}')")
        echo "round $r ${size} B: tagwire $tw | jetstream $js | ratio $ratio" >&2
        rows+=("| $r | $size B | $(fmt "$tw_del") | $(fmt "$tw_rate") | $(fmt "$tw_acked") | $(fmt "$tw_stored") of $(fmt "$tw_sent") ($(fmt "$tw_not") not stored, $(fmt "$tw_failed") failed) | $(fmt "$js_del") | $(fmt "$js_rate") | $(fmt "$js_stored") of $(fmt "$js_sent") | $ratio |")
    done
done
echo "\`scripts/durable-jetstream.sh --rounds $ROUNDS --sizes \"$SIZES\" --duration $DURATION --reliability $RELIABILITY\`: $(date -u '+%Y-%m-%d %H:%M UTC'), revision $(git rev-parse --short HEAD)," \
    "\`nproc\` = $(nproc), CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $load_before before → $(cut -d' ' -f1-3 /proc/loadavg) after;" \
    "$(nats-server --version); tagwired and nats-server on 127.0.0.1, fresh state per run, ${DURATION} s of publishing per run."
echo
echo "| round | size | tagwire delivered msgs/s | tagwire stored/s | tagwire acknowledged/s | tagwire stored of sent | JetStream delivered msgs/s | JetStream acked (stored)/s | JetStream stored of sent | stored/s: tagwire ÷ JetStream |"
echo "|---:|---:|---:|---:|---:|---|---:|---:|---|---:|"
printf '%s\n' "${rows[@]}"
