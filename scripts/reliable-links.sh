#!/usr/bin/env bash
# scripts/reliable-links.sh [--rounds N] [--events N] [--size B] [--faults N] [--ring5 N] [--acked N]
#
# Reliable links (issue 25, BENCHMARKS.md "Reliable links"):
#
# 1. Throughput of a `reliability=reliable` tag against a best-effort one
#    over one link: two release tagwired on loopback (a dials b), a
#    publisher on a (`tagwire pub -n EVENTS --size B`, as fast as it goes),
#    a subscriber on b. For `reliable`, a's daemon layer says
#    `reliability = "reliable"` (every event crosses as `Reliable` and is
#    acknowledged); for `best_effort` nothing is set. Each round runs both,
#    on fresh daemons. The subscriber's queues hold every event (the
#    client connection is not what is measured). Prints events received (of
#    EVENTS), the rate between the first and the last arrival, and a's link
#    drops (best effort: the link queue's) and window drops (reliable). Not a timing assertion: a
#    shared machine moves these numbers; compare within a run.
# 2. With --faults N (root, network namespaces): runs the fault experiment
#    crates/tagwire-cli/tests/reliable_netns.rs N times (four daemons in a
#    ring, 20,000 events at 1,000/s, a 6 s cut of the link carrying the
#    stream, then kill -9 of the daemon carrying it; reliable and
#    best_effort) and prints what the subscriber saw, with each fault's
#    delivery gap.
# 3. With --ring5 N (root): runs issue 25's five-daemon experiment
#    crates/tagwire-cli/tests/ring5_netns.rs N times (a ring of five,
#    50,000 events at 1,000/s from d0 to d2 with the publisher's
#    connection acknowledged; kill -9 of d1, a 10 s cut of d0-d1, a 10 s
#    partition of d2; reliable, then best_effort once) and prints lost /
#    duplicated / out of order / delivery gap per fault, with `uptime`.
#    With --ring5 alone (--rounds 0) the loopback throughput part is skipped.
# 4. With --acked N: the cost of acknowledged publishing (protocol version
#    4) on one release tagwired on loopback: `tagwire pub -n EVENTS --size
#    B` as fast as it goes, plain and with `--qos reliability=reliable`
#    (each event held until the daemon acknowledges it), N rounds
#    interleaved on fresh daemons; rate between the first and the last
#    arrival at a subscriber on the same daemon, and the publisher's wall
#    time (it waits for the last acknowledgement).
set -uo pipefail
ROUNDS=3
EVENTS=200000
SIZE=64
FAULTS=0
RING5=0
ACKED=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --events) EVENTS=${2:?}; shift ;;
        --size) SIZE=${2:?}; shift ;;
        --faults) FAULTS=${2:?}; shift ;;
        --ring5) RING5=${2:?}; shift ;;
        --acked) ACKED=${2:?}; shift ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "reliable-links.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z ${RELIABLE_LINKS_BIN_DIR:-} && ( $ROUNDS -gt 0 || $ACKED -gt 0 ) ]]; then
    cargo build --release --quiet --bin tagwired --bin tagwire -p tagwire-cli --manifest-path "$root/Cargo.toml" || exit 1
fi
# RELIABLE_LINKS_BIN_DIR=DIR: the tagwired and tagwire in DIR instead of a release build.
bin="${RELIABLE_LINKS_BIN_DIR:-${CARGO_TARGET_DIR:-$root/target}/release}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
pa=7811
pb=7821
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "reliable-links.sh: nothing listens on $1" >&2
    return 1
}
run() { # $1: reliable|best_effort
    rm -rf "$tmp/rt"
    mkdir -p "$tmp/rt"
    : >"$tmp/a.toml"
    [[ $1 == reliable ]] && printf '[qos]\nreliability = "reliable"\n' >"$tmp/a.toml"
    export XDG_RUNTIME_DIR="$tmp/rt"
    "$bin/tagwired" --name b --tcp "127.0.0.1:$pb" --no-unix --log warn &
    pids+=($!)
    wait_port "$pb" || return 1
    "$bin/tagwired" --name a --tcp "127.0.0.1:$pa" --no-unix --config "$tmp/a.toml" \
        --peer "tcp://127.0.0.1:$pb" --log warn &
    pids+=($!)
    wait_port "$pa" || return 1
    # The subscriber on b, its arrivals counted and timed.
    "$bin/tagwire" -s "tcp://127.0.0.1:$pb" sub '/bench/**' -n "$EVENTS" --timeout 5 \
        --max-queue "$EVENTS" --local-queue "$EVENTS" 2>/dev/null |
        perl -MTime::HiRes=time -ne '$n++; $f //= time; $l = time;
            END { printf "%d %.0f\n", $n, ($n > 1 && $l > $f) ? ($n - 1) / ($l - $f) : 0 }' \
        >"$tmp/sub.out" &
    local sub=$!
    # Until a knows b's interest (its link and b's advert).
    for _ in $(seq 100); do
        "$bin/tagwire" -s "tcp://127.0.0.1:$pa" list --links --json 2>/dev/null |
            python3 -c 'import json,sys; f=json.load(sys.stdin); sys.exit(0 if any(d.get("interest",0)>0 for d in f.get("known",[])) else 1)' &&
            break
        sleep 0.1
    done
    "$bin/tagwire" -s "tcp://127.0.0.1:$pa" pub /bench/x x -n "$EVENTS" --size "$SIZE" >/dev/null
    wait "$sub"
    local got rate
    read -r got rate <"$tmp/sub.out"
    local counters
    counters=$("$bin/tagwire" -s "tcp://127.0.0.1:$pa" list --links --json 2>/dev/null |
        python3 -c 'import json,sys; f=json.load(sys.stdin); r=f.get("reliable",{}); l=(f.get("links") or [{}])[0]; print("link dropped", l.get("dropped"), "window_dropped", r.get("window_dropped"), "held", r.get("held"))')
    printf '%-12s received %8s of %s   %8s events/s   (a: %s)\n' "$1" "$got" "$EVENTS" "$rate" "$counters"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    pids=()
}
[[ $ROUNDS -gt 0 ]] && echo "nproc $(nproc), $EVENTS events of $SIZE B over one loopback link, $ROUNDS rounds"
for _ in $(seq "$ROUNDS"); do
    run best_effort
    run reliable
done
if [[ $FAULTS -gt 0 ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "reliable-links.sh: --faults needs root (network namespaces)" >&2
        exit 1
    fi
    for _ in $(seq "$FAULTS"); do
        CARGO_PROFILE_DEV_DEBUG=line-tables-only cargo test --quiet -p tagwire-cli \
            --manifest-path "$root/Cargo.toml" --test reliable_netns -- --nocapture --test-threads 1 2>&1 |
            grep -E "^(cutting|killing|reliable|best_effort|missing|d[02] reliable)"
    done
fi
if [[ $RING5 -gt 0 ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "reliable-links.sh: --ring5 needs root (network namespaces)" >&2
        exit 1
    fi
    ring5() { # $1: test name filter
        uptime
        CARGO_PROFILE_DEV_DEBUG=line-tables-only cargo test --quiet -p tagwire-cli \
            --manifest-path "$root/Cargo.toml" --test ring5_netns -- --nocapture --test-threads 1 "$1" 2>&1 |
            grep -E "^(reliable|best_effort|d[02] reliable|publisher exit|test result)|panicked"
    }
    for _ in $(seq "$RING5"); do
        ring5 ring_of_five_reliable
    done
    ring5 ring_of_five_best_effort
    uptime
fi
run_acked() { # $1: best_effort|acked
    rm -rf "$tmp/rt"
    mkdir -p "$tmp/rt"
    export XDG_RUNTIME_DIR="$tmp/rt"
    local pc=7831
    "$bin/tagwired" --name c --tcp "127.0.0.1:$pc" --no-unix --log warn &
    pids+=($!)
    wait_port "$pc" || return 1
    "$bin/tagwire" -s "tcp://127.0.0.1:$pc" sub '/bench/**' -n "$EVENTS" --timeout 5 \
        --max-queue "$EVENTS" --local-queue "$EVENTS" 2>/dev/null |
        perl -MTime::HiRes=time -ne '$n++; $f //= time; $l = time;
            END { printf "%d %.0f\n", $n, ($n > 1 && $l > $f) ? ($n - 1) / ($l - $f) : 0 }' \
        >"$tmp/sub.out" &
    local sub=$!
    sleep 0.3
    local qos=()
    [[ $1 == acked ]] && qos=(--qos reliability=reliable)
    local t0 t1
    t0=$(date +%s.%N)
    "$bin/tagwire" -s "tcp://127.0.0.1:$pc" pub /bench/x x -n "$EVENTS" --size "$SIZE" "${qos[@]}" >/dev/null 2>"$tmp/pub.err"
    t1=$(date +%s.%N)
    wait "$sub"
    local got rate
    read -r got rate <"$tmp/sub.out"
    printf '%-12s received %8s of %s   %8s events/s at the subscriber   publisher %.2f s\n' \
        "$1" "$got" "$EVENTS" "$rate" "$(echo "$t1 - $t0" | bc)"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    pids=()
}
if [[ $ACKED -gt 0 ]]; then
    echo "nproc $(nproc), $EVENTS events of $SIZE B to one daemon on loopback, $ACKED rounds; $(uptime)"
    for _ in $(seq "$ACKED"); do
        run_acked best_effort
        run_acked acked
    done
    uptime
fi
