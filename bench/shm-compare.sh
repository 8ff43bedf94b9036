#!/usr/bin/env bash
# bench/shm-compare.sh — same-host transport against iceoryx2 (issue 16).
#
# In one run, two-process ping-pong RTT (p50/p99, hdrhistogram, a fixed
# number of round trips after 1,000 warm-up ones) of
#   tagwire-shm (loan + publish, next / next_blocking),
#   iceoryx2 0.10 publish-subscribe (loan + send, receive; event listener
#   when blocking), and a raw Unix stream socket (a copy each way),
# at 64 B and 1 MiB, busy-poll and blocking, with
#   pinned:   both processes on core 0 (`taskset -c 0`); busy poll = poll +
#             sched_yield (spinning would only measure the time slice);
#   unpinned: ping on core 0, pong on core 1 (`taskset -c 0` / `-c 1`);
#             busy poll = spin.
# Each configuration runs --repeat times, the systems interleaved; the table
# gives the median of the repeats. Writes the `shm-iceoryx2` section of
# BENCHMARKS.md (between its markers; after `shm-fig3` the first time).
# Method: the header of bench/src/shm_pingpong.rs.
#
#   --iterations N        round trips at 64 B (default 100000)
#   --large-iterations N  round trips at 1 MiB (default 20000)
#   --repeat R            runs per configuration (default 3)
#   --quick               10x fewer round trips, 1 repeat
#   --no-write            print the markdown instead of editing BENCHMARKS.md
#   --report-only         no runs: render the last run's raw lines again
#
# Environment: BENCH_TARGET_DIR (bench/'s build, default <repo>/bench/target).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMMAND="bench/shm-compare.sh${*:+ $*}"
ITER=100000
ITER_LARGE=20000
REPEAT=3
WRITE=1
RUNS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --iterations) ITER=${2:?--iterations needs a count}; shift ;;
    --large-iterations) ITER_LARGE=${2:?--large-iterations needs a count}; shift ;;
    --repeat) REPEAT=${2:?--repeat needs a count}; shift ;;
    --quick) ITER=10000; ITER_LARGE=2000; REPEAT=1 ;;
    --no-write) WRITE=0 ;;
    --report-only) RUNS=0 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "shm-compare.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $(nproc) -ge 2 ]] || { echo "shm-compare.sh: needs 2 CPUs for the unpinned runs" >&2; exit 1; }

log() { printf '[shm-compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

BENCH_TARGET=${BENCH_TARGET_DIR:-$ROOT/bench/target}
BASELINE="$BENCH_TARGET/release/baseline"
RESULTS="$BENCH_TARGET/shm-compare-last.jsonl"
META="$BENCH_TARGET/shm-compare-last.meta"
SYSTEMS="tagwire-shm iceoryx2 unix"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# run PLACEMENT WAIT SIZE SYSTEM REP: one ping-pong, its JSON line appended.
run() {
  local placement=$1 wait=$2 size=$3 system=$4 rep=$5 iters=$ITER pong=()
  [[ $size -ge 65536 ]] && iters=$ITER_LARGE
  [[ $placement == unpinned ]] && pong=(--pong-cpu 1)
  local line
  if line=$(timeout 600 taskset -c 0 "$BASELINE" shm-pingpong "$system" --wait "$wait" \
      --size "$size" --iterations "$iters" "${pong[@]}"); then
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(placement=sys.argv[2],rep=int(sys.argv[3])); print(json.dumps(d))' \
      "$line" "$placement" "$rep" >> "$RESULTS"
    log "$placement $wait $size B $system #$rep: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("p50 %.2f us, p99 %.2f us" % (d["rtt_p50_us"], d["rtt_p99_us"]))' "$line")"
  else
    log "$placement $wait $size B $system #$rep: FAILED"
  fi
}

if [[ $RUNS == 1 ]]; then
  log "building bench/ (release) in $BENCH_TARGET"
  (cd "$ROOT/bench" && CARGO_TARGET_DIR="$BENCH_TARGET" cargo build --release -q --bin baseline)
  : > "$RESULTS"
  printf '%s\n%s\n%s\n%s\n%s\n' "$COMMAND" "$ITER" "$ITER_LARGE" "$REPEAT" "$(loadavg)" > "$META"
  for rep in $(seq "$REPEAT"); do
    for placement in pinned unpinned; do
      if [[ $placement == pinned ]]; then busy=yield; else busy=spin; fi
      for wait in $busy blocking; do
        for size in 64 1048576; do
          for system in $SYSTEMS; do
            run "$placement" "$wait" "$size" "$system" "$rep"
          done
        done
      done
    done
  done
  printf '%s\n%s\n' "$(loadavg)" "$(date -u +%Y-%m-%dT%H:%MZ)" >> "$META"
fi
[[ -s $RESULTS && -s $META ]] || { echo "shm-compare.sh: no results in $RESULTS" >&2; exit 1; }

MARKDOWN=$(python3 - "$RESULTS" "$META" "$(nproc)" "$(git -C "$ROOT" rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
path, meta, nproc, rev = sys.argv[1:5]
command, iters, iters_large, repeat, load_start, load_end, when = open(meta).read().splitlines()[:7]
rows = [json.loads(l) for l in open(path) if l.strip()]
systems = ["tagwire-shm", "iceoryx2", "unix-socket"]
def cell(p, w, s, sysname, q):
    v = [r[q] for r in rows if (r["placement"], r["wait"], r["size"], r["system"]) == (p, w, s, sysname)]
    return statistics.median(v) if v else None
def fmt(v):
    return "—" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.0f}")
def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}x"
def size_name(s):
    return "1 MiB" if s == 1048576 else f"{s} B"
out = []
out.append("<!-- BEGIN shm-iceoryx2 -->")
out.append("## Same-host shared memory against iceoryx2 (issue 16)")
out.append("")
out.append("Two-process ping-pong (the ping process starts the pong process; one "
           "message in flight), RTT in µs, median of "
           f"{repeat} run(s) per cell, each of {int(iters):,} round trips at 64 B and "
           f"{int(iters_large):,} at 1 MiB after 1,000 warm-up ones. tagwire-shm: "
           "`Producer::loan` + `Loan::publish`, `Consumer::next` (busy) or "
           "`next_blocking` (futex). iceoryx2 0.10: publish-subscribe `loan_slice_uninit` "
           "+ `send`, `receive`; blocking adds its event service (notify after send, "
           "the subscriber waits on its listener). Both shared-memory systems write "
           "only a sequence number at both ends of the loaned payload (zero copy); "
           "the Unix socket copies the whole payload each way. **busy** is spin "
           "with a core per process, poll + `sched_yield` when both share core 0.")
out.append("")
out.append("| placement | wait | size | tagwire-shm p50 / p99 | iceoryx2 p50 / p99 | Unix socket p50 / p99 | tagwire-shm / iceoryx2 p50 | p99 | tagwire-shm / Unix p50 |")
out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
verdicts = []
for p in ["pinned", "unpinned"]:
    for w in (["yield", "blocking"] if p == "pinned" else ["spin", "blocking"]):
        for s in [64, 1048576]:
            t50, t99 = cell(p, w, s, "tagwire-shm", "rtt_p50_us"), cell(p, w, s, "tagwire-shm", "rtt_p99_us")
            i50, i99 = cell(p, w, s, "iceoryx2", "rtt_p50_us"), cell(p, w, s, "iceoryx2", "rtt_p99_us")
            u50, u99 = cell(p, w, s, "unix-socket", "rtt_p50_us"), cell(p, w, s, "unix-socket", "rtt_p99_us")
            place = "core 0 (both)" if p == "pinned" else "cores 0 / 1"
            wait = {"yield": "busy (yield)", "spin": "busy (spin)", "blocking": "blocking"}[w]
            out.append(f"| {place} | {wait} | {size_name(s)} | {fmt(t50)} / {fmt(t99)} | {fmt(i50)} / {fmt(i99)} "
                       f"| {fmt(u50)} / {fmt(u99)} | {ratio(t50, i50)} | {ratio(t99, i99)} | {ratio(t50, u50)} |")
            if t50 is not None and i50 is not None:
                verdicts.append((t50 <= i50, t99 is not None and i99 is not None and t99 <= i99, f"{place}, {wait}, {size_name(s)}"))
out.append("")
met50 = sum(1 for a, _, _ in verdicts if a)
met99 = sum(1 for _, b, _ in verdicts if b)
out.append(f"Target ≤ 1.0x iceoryx2: p50 met in {met50} of {len(verdicts)} cells, p99 in {met99} of {len(verdicts)}.")
missed = [n for a, b, n in verdicts if not (a and b)]
if missed:
    out.append("Missed (p50 or p99): " + "; ".join(missed) + ".")
spread = []
for key in sorted({(r["placement"], r["wait"], r["size"], r["system"]) for r in rows}):
    v = [r["rtt_p50_us"] for r in rows if (r["placement"], r["wait"], r["size"], r["system"]) == key]
    if len(v) > 1 and min(v) > 0:
        spread.append((max(v) / min(v), key))
if spread:
    worst = max(spread)
    p, w, s, sysname = worst[1]
    out.append(f"Run-to-run spread of p50 (max/min over the repeats): at most {worst[0]:.2f}x "
               f"({sysname}, {p}, {w}, {size_name(s)}); median over all cells "
               f"{statistics.median(x for x, _ in spread):.2f}x.")
out.append("")
out.append("Reading: cross-core blocking is dominated by waking a sleeping vCPU "
           "(~30 µs on this VM for all three systems, the Unix socket included), and its "
           "p99 of milliseconds is the other builds sharing the two cores, not the "
           "transport; pinned blocking shows the mechanisms themselves (tagwire-shm: a "
           "futex wake only when the peer sleeps; iceoryx2: a datagram per notify). "
           "Method and limits: docs/benchmarks.md.")
out.append("")
out.append("```")
out.append(command)
out.append(f"# {nproc} CPUs, {when}, git {rev}, load average {load_start} at the start and {load_end} at the end; raw lines: bench/target/shm-compare-last.jsonl")
out.append("```")
out.append("<!-- END shm-iceoryx2 -->")
print("\n".join(out))
PY
)

if [[ $WRITE == 1 ]]; then
  python3 - "$ROOT/BENCHMARKS.md" "$MARKDOWN" <<'PY'
import sys, re
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- BEGIN shm-iceoryx2 -->", "<!-- END shm-iceoryx2 -->"
if begin in text and end in text:
    a, b = text.index(begin), text.index(end) + len(end)
    text = text[:a] + section + text[b:]
elif "<!-- END shm-fig3 -->" in text:
    i = text.index("<!-- END shm-fig3 -->") + len("<!-- END shm-fig3 -->")
    text = text[:i] + "\n\n" + section + text[i:]
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
PY
  log "wrote the shm-iceoryx2 section of BENCHMARKS.md"
else
  printf '%s\n' "$MARKDOWN"
fi
