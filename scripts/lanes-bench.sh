#!/usr/bin/env bash
# Lanes benchmark (not in CI): TAO RT-Notification §4, Fig. 9–15, against
# tagwire's priority bands. Method: docs/benchmarks.md, "Lanes".
#
#   scripts/lanes-bench.sh             # ~4 min of runs plus the release build;
#                                      # writes the lanes section of BENCHMARKS.md
#                                      # and docs/lanes-fig*.svg
#   scripts/lanes-bench.sh --quick     # ~1.5 min: fewer loads, shorter windows
#   scripts/lanes-bench.sh --no-write  # print the markdown, touch nothing
#   scripts/lanes-bench.sh --redo      # no measuring: the section and plots again
#                                      # from the last run's results (after editing
#                                      # bench/lanes-notes.md)
#
# It builds experiments/src/bin/lanes.rs (the experiments workspace) in
# release mode and runs
# it pinned to CPU 0 (`taskset -c 0`: on one CPU the threads' priorities
# decide who runs, as on TAO's single-CPU testbed). Everything runs in that
# one process: an embedded router with the default bands and the clients,
# each on its own thread with its path's scheduling policy. Real-time
# policies (`fifo`) need root or CAP_SYS_NICE; without them the lanes and
# threads fall back to nice levels and the section's lane table says so.
# The run is bounded: it is killed after 10 minutes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
write=1
redo=0
args=()
for a in "$@"; do
    case "$a" in
        --no-write) write=0 ;;
        --redo) redo=1 ;;
        --quick) args+=(--quick) ;;
        *) echo "lanes-bench: unknown option $a (use --quick, --no-write, --redo)" >&2; exit 2 ;;
    esac
done
target="${CARGO_TARGET_DIR:-$root/target}"
results="$target/lanes/results.jsonl"
mkdir -p "$target/lanes"
cargo build --release --quiet --manifest-path experiments/Cargo.toml --bin lanes
bin="${CARGO_TARGET_DIR:-$root/experiments/target}/release/lanes"

out=(--notes bench/lanes-notes.md)
if [[ $write -eq 1 ]]; then
    out+=(--write BENCHMARKS.md --svg-dir docs)
fi
if [[ $redo -eq 1 ]]; then
    exec "$bin" --from-json "$results" "${out[@]}"
fi
if [[ $(id -u) -ne 0 ]] && ! grep -q 'cap_sys_nice' <(capsh --print 2>/dev/null || true); then
    echo "lanes-bench: not root: real-time lanes will fall back to nice levels (see the lane table)" >&2
fi
command="scripts/lanes-bench.sh${*:+ $*}"
timeout 600 taskset -c 0 "$bin" "${args[@]}" --json "$results" "${out[@]}" \
    --command "$command" \
    --date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
    --revision "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "lanes-bench: results in $results" >&2
