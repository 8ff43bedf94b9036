#!/usr/bin/env bash
# scripts/reliable-cost.sh [ARGS...] — the cost of `reliability=reliable`
# (acknowledged publishing and acknowledged delivery: both hops) against
# best effort on one release tagwired over loopback TCP (issue 25, "Cost";
# the one source of that number; `tagwire bench --reliability` acknowledges
# only the publisher's hop; BENCHMARKS.md
# "Reliable publishing: cost against best effort"): throughput (1 → 1) and
# round trip, 64 B and 64 KiB, interleaved rounds. ARGS go to
# experiments/src/bin/reliable_cost (default: --sizes 64,65536 --rounds 3
# --duration 3 --ends both; about 1.5 min; --ends publisher,subscriber,both
# measures each hop alone too; --throughput-only skips the round trips;
# --only VARIANT runs one variant, for a profiler). Prints markdown for
# BENCHMARKS.md, with each run's client and daemon CPU and context switches
# per event (the daemon's pid is passed as --daemon-pid). Not a
# timing assertion: run it under `flock /work/bench.lock` on a shared
# machine, and compare within a run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release --quiet -p tagwire-cli --bin tagwired
cargo build --release --quiet --manifest-path experiments/Cargo.toml --bin reliable_cost
bin="${CARGO_TARGET_DIR:-$root/target}/release"
exp="${CARGO_TARGET_DIR:-$root/experiments/target}/release"
tmp="$(mktemp -d)"
pid=
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
port=${PORT:-7795}
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { echo "reliable-cost.sh: port $port is in use (PORT=...)" >&2; exit 1; }
mkdir -p "$tmp/rt"
XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwired" --tcp "127.0.0.1:$port" --no-unix --log warn &
pid=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
[[ $# -eq 0 ]] && set -- --sizes 64,65536 --rounds 3 --duration 3 --ends both
out=$(XDG_RUNTIME_DIR="$tmp/rt" "$exp/reliable_cost" --server "tcp://127.0.0.1:$port" --daemon-pid "$pid" "$@")
echo "\`scripts/reliable-cost.sh $*\`: $(date -u '+%Y-%m-%d %H:%M UTC'), revision $(git rev-parse --short HEAD)," \
    "\`nproc\` = $(nproc), CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
    "load average $load_before before → $(cut -d' ' -f1-3 /proc/loadavg) after; one release \`tagwired\` on 127.0.0.1 (TCP)," \
    "every client a \`tagwire::Session\` in one process."
echo
echo "$out"
