#!/usr/bin/env bash
# scripts/durable-ab.sh [--rounds N] [--size B] [--fsync batch|interval]
#
# Throughput of a `reliability=durable` tag against a best-effort one on the
# same release tagwired (issue 25, BENCHMARKS.md "Durable store: cost of
# durable against best_effort"). Each round runs
# `tagwire bench throughput --size B --duration 3` over TCP twice, against a
# fresh daemon each time: once with `[store] tags = ["/bench/**"]` (every
# bench event goes to the store; fsync as given) and once without (the
# store is open, no tag is durable). After a durable run it prints the
# daemon's store counters (stored, not_stored: events delivered but not
# stored because the store's queue was full). Not a timing assertion: a
# shared machine moves these numbers; compare within a run.
set -uo pipefail
ROUNDS=3
SIZE=64
FSYNC=batch
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --size) SIZE=${2:?}; shift ;;
        --fsync) FSYNC=${2:?}; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "durable-ab.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cargo build --release --quiet --bin tagwired --bin tagwire -p tagwire-cli --manifest-path "$root/Cargo.toml" || exit 1
bin="${CARGO_TARGET_DIR:-$root/target}/release"
tmp="$(mktemp -d)"
pid=
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
port=7793
run() { # $1: durable|best_effort
    rm -rf "$tmp/state" "$tmp/rt"
    mkdir -p "$tmp/rt"
    {
        echo "[store]"
        echo "fsync = \"$FSYNC\""
        [[ $1 == durable ]] && echo 'tags = ["/bench/**"]'
    } >"$tmp/tagwired.toml"
    XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwired" --tcp "127.0.0.1:$port" --no-unix \
        --config "$tmp/tagwired.toml" --state-dir "$tmp/state" --log warn &
    pid=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.05
    done
    local line
    line=$(XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwire" -s "tcp://127.0.0.1:$port" \
        bench throughput --size "$SIZE" --duration 3 2>&1 | tail -1)
    local store=""
    if [[ $1 == durable ]]; then
        sleep 1 # the store thread drains its queue
        store=$(XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwire" -s "tcp://127.0.0.1:$port" list --json |
            python3 -c 'import json,sys; s=json.load(sys.stdin).get("store") or {}; print("stored", s.get("stored"), "not_stored", s.get("not_stored"), "commits", s.get("commits"))')
    fi
    printf '%-12s %s %s\n' "$1" "$line" "$store"
    kill "$pid"
    wait "$pid" 2>/dev/null
    pid=
}
echo "nproc $(nproc), size $SIZE B, fsync $FSYNC, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
    run best_effort
    run durable
done
