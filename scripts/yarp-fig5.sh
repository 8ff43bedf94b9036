#!/usr/bin/env bash
# YARP Fig. 5 as a benchmark: the round trip time of a measured channel
# with a load channel at 20 % and 70 % of a 10 Mbit/s link, without and
# with channel prioritization (band high: AF42 + SCHED_FIFO), congested at
# the sender's interface and at the router. Two host namespaces and a router
# namespace (crates/tagwire-testbed), the real `tagwired` on one host.
#
#   scripts/yarp-fig5.sh              build (release), run (~2.5 min), rewrite
#                                     the yarp-fig5 section of BENCHMARKS.md
#                                     and docs/yarp-fig5.svg
#   scripts/yarp-fig5.sh --no-write   the same, printing the table only
#   scripts/yarp-fig5.sh [--no-write] ARGS...
#                                     ARGS go to the benchmark program, e.g.
#                                     --places router --loads 70 --secs 2
#                                     (experiments/target/release/yarp_fig5 --help)
#   scripts/yarp-fig5.sh [--no-write] PRESET
#                                     a preset run, each under 5 minutes, that
#                                     rewrites its own section of BENCHMARKS.md:
#     udp-sender   every combination of TCP and UDP for the measured and the
#                  load channel (issue 27), congested at the sender (Fig. 5a);
#                  section yarp-fig5-udp-sender
#     udp-router   the same, congested at the router (Fig. 5b's place);
#                  section yarp-fig5-udp-router
#     fig5b        Fig. 5b as the paper ran it (issue 26): the load publisher
#                  on a third host of its own, 1,024 B measured events, every
#                  transport combination; section yarp-fig5b
#                  The presets use 1,200 B load events (a UDP event must fit
#                  one datagram) published 7 at a time (about one 8 KiB event
#                  of the TCP run's queue), and 4 s per point in 2 segments.
#
# Needs root (network namespaces, tc, SCHED_FIFO) and iproute2 with the
# kernel's htb qdisc (`scripts/netns.sh check htb`). The run is bounded
# (killed after LIMIT seconds, default 420); whatever happens, the
# namespaces it made and the daemon inside them are removed on exit.
# Method and caveats: docs/benchmarks.md, "Channel prioritization".
set -euo pipefail

cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-420}

write=1
if [[ ${1:-} == --no-write ]]; then
    write=0
    shift
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "yarp-fig5.sh: needs root (network namespaces, tc, SCHED_FIFO): run it with sudo -E env \"PATH=\$PATH\" $0" >&2
    exit 1
fi
if ! scripts/netns.sh check htb >/dev/null; then
    scripts/netns.sh check htb >&2 || true
    echo "yarp-fig5.sh: the kernel lacks the htb qdisc (see docs/testbed.md)" >&2
    exit 1
fi

cargo build --release -p tagwire-cli --bin tagwired
cargo build --release --manifest-path experiments/Cargo.toml --bin yarp_fig5

command="scripts/yarp-fig5.sh $*"
all_transports=tcp/tcp,tcp/udp,udp/tcp,udp/udp
preset=(--load-size 1200 --load-burst 7 --secs 4 --rounds 2)
# Later single values override earlier ones; a list would be appended to, so
# the preset's transports go only where the caller gave none.
[[ " $* " == *" --transports "* ]] || preset+=(--transports "$all_transports")
case ${1:-} in
    udp-sender) shift; set -- "${preset[@]}" --places sender --section yarp-fig5-udp-sender "$@" ;;
    udp-router) shift; set -- "${preset[@]}" --places router --section yarp-fig5-udp-router "$@" ;;
    fig5b) shift; set -- "${preset[@]}" --places router --load-host separate --ping-size 1024 --section yarp-fig5b "$@" ;;
esac

args=(--tagwired target/release/tagwired --command "$command")
if (( write )); then
    args+=(--markdown BENCHMARKS.md --svg docs/yarp-fig5.svg)
fi

pid=""
watchdog=""
cleanup() {
    local status=$? ns prefix
    trap - EXIT INT TERM
    if [[ -n $watchdog ]]; then kill "$watchdog" 2>/dev/null || true; fi
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        sleep 0.5
        kill -KILL "$pid" 2>/dev/null || true
    fi
    # The testbed removes its namespaces when it ends normally; if it was
    # killed, its namespaces (twtb-PID-N-…) and the daemon in them remain.
    if [[ -n $pid ]]; then
        for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^twtb-$pid-" || true); do
            prefix=${ns%-*}
            scripts/netns.sh down "$prefix" 2>/dev/null || true
        done
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${CARGO_TARGET_DIR:-experiments/target}/release/yarp_fig5" "${args[@]}" "$@" &
pid=$!
(
    trap 'kill "$timer" 2>/dev/null; exit 0' TERM
    sleep "$LIMIT" & timer=$!
    wait "$timer"
    echo "yarp-fig5.sh: still running after $LIMIT s, stopping it" >&2
    kill -TERM "$pid" 2>/dev/null
) &
watchdog=$!
wait "$pid"
