#!/usr/bin/env bash
# scripts/isolation.sh [--rounds N] [--pings N] [--rtt-secs S] [--no-write] [--section NAME] — band isolation
# (issue 23, "Isolation"): does a saturating low-band flood delay a real-time
# high-band client? Not in CI (it needs root for SCHED_FIFO and a quiet-ish
# machine); writes the `isolation` section (or NAME's) of BENCHMARKS.md.
#
# One daemon (release build, default bands). Real-time clients run under
# `chrt -f 50`, as a real-time application runs them. Every p99 is compared
# with a busy-idle baseline measured in the same round: both CPUs kept busy
# by ordinary `yes` processes, so idle-state wake-ups do not count. Cases:
#
#   unix  high-band `tagwire ping` over the high band's Unix socket while two
#         ordinary `tagwire pub --size 1024` floods and a subscriber run on
#         the low band's Unix socket; also the high band's publish→deliver
#         round trip (`tagwire bench latency`, echo client) under that flood.
#   tcp   the same over TCP (high band's port; floods on the low band's
#         port), against a raw TCP flood of the machine that never touches
#         the daemon (a relay in this script's helper: 1 KiB writes through
#         loopback), whose p99 is the kernel's floor.
#   crit  the critical band's ping under the Unix flood, no worse than high:
#         a high-band and a critical-band ping run at the same time (the same
#         flood, the same moment; where their round trips overlap, the
#         critical lane goes first, as it should), so the two p99s are a
#         paired comparison. Measured one after the other they followed the
#         order of measurement, not the band (isolation-s34/-s34b).
#
# TAGWIRE_BIN=DIR runs the binaries in DIR instead of building (A/B runs;
# TAGWIRE_REV names their revision in the table);
# TAGWIRE_CONFIG=FILE starts the daemon with that config (e.g. bands pinned
# to CPUs, docs/configuration.md); TAGWIRE_FLOOD_CPUS=LIST and
# TAGWIRE_RT_CPUS=LIST run the floods and the real-time clients under
# `taskset -c LIST` (the recipe of docs/configuration.md, "Pinning bands").
#
# Output: the result, each case pooled over all rounds (every sample of
# every round; the rounds alternate the cases, so the host's load drifting
# during the run weighs on every case alike) with the ratios the issue sets
# (unix ≤ 1.3x busy-idle; tcp ≤ 1.2x the raw flood's p99) and whether each
# is met; then a table per round (one round's p99 rests on its ~10–20
# slowest samples and moves by 2x between rounds on a shared VM).
# Defaults: 5 rounds, 1,000 pings and 1 s of round trips per case and round.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ROUNDS=5
PINGS=1000
RTT_SECS=1
WRITE=1
SECTION=isolation
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --pings) PINGS=${2:?}; shift ;;
        --rtt-secs) RTT_SECS=${2:?}; shift ;;
        --no-write) WRITE=0 ;;
        --section) SECTION=${2:?}; shift ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "isolation.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ $(id -u) != 0 ]]; then
    echo "isolation.sh: needs root (SCHED_FIFO clients and lanes); run it with sudo" >&2
    exit 2
fi
command -v python3 >/dev/null || { echo "isolation.sh: needs python3 (the raw TCP flood)" >&2; exit 2; }
# TAGWIRE_BIN=DIR: use the tagwire and tagwired in DIR (e.g. an older build,
# for an A/B) instead of building this checkout.
if [[ -n ${TAGWIRE_BIN:-} ]]; then
    B=$TAGWIRE_BIN
else
    TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
    cargo build --release --quiet -p tagwire-cli
    B=$TARGET/release
fi
WORK=$(mktemp -d /tmp/tagwire-isolation.XXXXXX)
export XDG_RUNTIME_DIR=$WORK/rt
mkdir -p "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
PORT=17900
"$B/tagwired" ${TAGWIRE_CONFIG:+--config "$TAGWIRE_CONFIG"} --tcp 127.0.0.1:$PORT >"$WORK/daemon.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -S $XDG_RUNTIME_DIR/tagwire/tagwire-high.sock ]] && break; sleep 0.1; done
SOCK=$XDG_RUNTIME_DIR/tagwire
HIGH_UNIX=unix://$SOCK/tagwire-high.sock
CRIT_UNIX=unix://$SOCK/tagwire-critical.sock
LOW_UNIX=unix://$SOCK/tagwire-low.sock
HIGH_TCP=tcp://127.0.0.1:$((PORT + 2))
LOW_TCP=tcp://127.0.0.1:$((PORT + 1))

# p50 and p99 (µs) of the samples in file $1 (one number per line), by
# nearest rank (the ceil(n·p)-th smallest), as the pooled table below.
quantiles() {
    sort -n "$1" |
        awk 'function rank(p) { r = NR * p; r = (r == int(r)) ? r : int(r) + 1; return r < 1 ? 1 : r }
             {a[NR]=$1} END{if (NR==0) {print "nan nan"} else {print a[rank(0.5)], a[rank(0.99)]}}'
}
RT=(); [[ -n ${TAGWIRE_RT_CPUS:-} ]] && RT=(taskset -c "$TAGWIRE_RT_CPUS")
FLOOD=(); [[ -n ${TAGWIRE_FLOOD_CPUS:-} ]] && FLOOD=(taskset -c "$TAGWIRE_FLOOD_CPUS")
# Every sample is kept ($WORK/samples/CASE.ROUND): the summary pools each
# case over all rounds, which alternate the cases, so that the host's load
# drifting during a run weighs on every case alike.
mkdir -p "$WORK/samples"
ping_q() { # server case round
    timeout 60 "${RT[@]}" chrt -f 50 "$B/tagwire" -s "$1" ping -n "$PINGS" -i 1 2>/dev/null |
        grep -o 'time=[0-9.]*' | cut -d= -f2 >"$WORK/samples/$2.$3"
    quantiles "$WORK/samples/$2.$3"
}
# p50 and p99 (µs) of the publish→deliver round trip through an echo client;
# its histogram (`--histogram`: nanoseconds and count per line) is kept.
rtt_q() { # server case round
    timeout 60 "${RT[@]}" chrt -f 50 "$B/tagwire" -s "$1" bench latency --size 64 --duration "$RTT_SECS" --json \
        --histogram "$WORK/samples/$2.$3.hist" 2>/dev/null |
        python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d["rtt_p50_us"], d["rtt_p99_us"])' ||
        echo "nan nan"
}
busy_on() { yes >/dev/null & Y1=$!; yes >/dev/null & Y2=$!; sleep 0.3; }
busy_off() { kill $Y1 $Y2; wait $Y1 $Y2 2>/dev/null || true; }
flood_on() { # server of the low band
    FL=()
    "${FLOOD[@]}" "$B/tagwire" -s "$1" sub '/iso/**' >/dev/null 2>&1 & FL+=($!)
    for _ in 1 2; do
        "${FLOOD[@]}" "$B/tagwire" -s "$1" pub /iso/x --size 1024 --count 1000000000 >/dev/null 2>&1 & FL+=($!)
    done
    sleep 1
}
flood_off() { kill "${FL[@]}" 2>/dev/null || true; wait "${FL[@]}" 2>/dev/null || true; }
# A raw TCP flood on loopback that never touches the daemon: 1 KiB writes.
raw_flood_on() {
    "${FLOOD[@]}" python3 - "$WORK/raw.port" <<'PY' &
import socket, sys, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4)
open(sys.argv[1], "w").write(str(srv.getsockname()[1]))
def sink(c):
    while c.recv(1 << 16):
        pass
def pump(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b"x" * 1024
    while True:
        s.sendall(buf)
port = srv.getsockname()[1]
for _ in range(2):
    threading.Thread(target=pump, args=(port,), daemon=True).start()
    c, _ = srv.accept()
    threading.Thread(target=sink, args=(c,), daemon=True).start()
threading.Event().wait()
PY
    RAW=$!
    sleep 1
}
raw_flood_off() { kill $RAW 2>/dev/null || true; wait $RAW 2>/dev/null || true; }

RES=$WORK/results.txt
: > "$RES"
# One measurement of round $r: KIND (ping|rtt) of case CASE on SERVER, its
# p50 and p99 into $RES (its samples into $WORK/samples).
measure() { # kind case server
    echo "$r $2 $("$1_q" "$3" "$2" "$r")" >>"$RES"
}
for r in $(seq "$ROUNDS"); do
    busy_on
    measure ping unix-idle-ping "$HIGH_UNIX"
    measure rtt unix-idle-rtt "$HIGH_UNIX"
    measure ping tcp-idle-ping "$HIGH_TCP"
    measure rtt tcp-idle-rtt "$HIGH_TCP"
    busy_off
    flood_on "$LOW_UNIX"
    measure ping unix-flood-ping "$HIGH_UNIX"
    measure rtt unix-flood-rtt "$HIGH_UNIX"
    # At the same moment: both lines land in $RES, in either order.
    measure ping pair-high-ping "$HIGH_UNIX" & PH=$!
    measure ping crit-flood-ping "$CRIT_UNIX" & PC=$!
    wait $PH $PC || true
    flood_off
    flood_on "$LOW_TCP"
    measure ping tcp-flood-ping "$HIGH_TCP"
    measure rtt tcp-flood-rtt "$HIGH_TCP"
    flood_off
    raw_flood_on
    measure ping tcp-raw-ping "$HIGH_TCP"
    measure rtt tcp-raw-rtt "$HIGH_TCP"
    raw_flood_off
    echo "round $r done" >&2
done
# The lanes' waits for the routing tables' lock over the whole run (the
# daemon counts each time a lane blocked on it while another thread held it).
"$B/tagwire" --server "tcp://127.0.0.1:$PORT" list --json >"$WORK/list.json" 2>/dev/null || echo '{}' >"$WORK/list.json"
cat "$RES"
python3 - "$RES" "$ROUNDS" "$PINGS" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "${TAGWIRE_REV:-$(git rev-parse --short HEAD)}" "$SECTION" "$WORK/samples" "$RTT_SECS" "$WORK/list.json" >"$WORK/section.md" <<'PY'
import sys, collections, glob, math, os
res, rounds, pings, nproc, cpu, rev, section, samples, rtt_secs, listing = sys.argv[1:11]
d = collections.defaultdict(dict)
for line in open(res):
    r, case, p50, p99 = line.split()
    d[int(r)][case] = (float(p50), float(p99))
def ratio(a, b):
    return "n/a" if b != b or b == 0 else f"{a / b:.2f}x"
print(f"<!-- BEGIN {section} -->")
print(f"## Band isolation (issue 23): a low-band flood against a real-time high band ({section})\n")
print(f"`scripts/isolation.sh --rounds {rounds} --pings {pings} --rtt-secs {rtt_secs}`; tagwire revision {rev}; "
      f"`nproc` = {nproc} ({cpu}). Clients under `chrt -f 50`; default bands "
      "(high lane `fifo:10`, critical `fifo:20`, low `other`). Baseline: busy-idle "
      "(two `yes` processes keep both CPUs out of idle). p50/p99 in µs.\n")
import os
extra = [f"{k}={os.environ[k]}" for k in ("TAGWIRE_CONFIG", "TAGWIRE_FLOOD_CPUS", "TAGWIRE_RT_CPUS") if os.environ.get(k)]
if extra:
    print("Settings: " + ", ".join(f"`{e}`" for e in extra) + ".\n")
ROWS = [
    ("Unix, ping, busy-idle", "unix-idle-ping", None, ""),
    ("Unix, ping, low-band flood", "unix-flood-ping", "unix-idle-ping", "≤ 1.3x busy-idle"),
    ("Unix, high ping beside critical's, low-band flood", "pair-high-ping", None, ""),
    ("Unix, critical ping beside high's, low-band flood", "crit-flood-ping", "pair-high-ping", "≤ 1.0x high's (÷ high beside it)"),
    ("Unix, pub→deliver RTT, busy-idle", "unix-idle-rtt", None, ""),
    ("Unix, pub→deliver RTT, low-band flood", "unix-flood-rtt", "unix-idle-rtt", "≤ 1.3x busy-idle"),
    ("TCP, ping, busy-idle", "tcp-idle-ping", None, ""),
    ("TCP, ping, raw TCP flood", "tcp-raw-ping", "tcp-idle-ping", "(the kernel's floor)"),
    ("TCP, ping, tagwire low-band flood", "tcp-flood-ping", "tcp-raw-ping", "≤ 1.2x raw flood (÷ raw)"),
    ("TCP, pub→deliver RTT, busy-idle", "tcp-idle-rtt", None, ""),
    ("TCP, pub→deliver RTT, raw TCP flood", "tcp-raw-rtt", "tcp-idle-rtt", "(the kernel's floor)"),
    ("TCP, pub→deliver RTT, tagwire low-band flood", "tcp-flood-rtt", "tcp-raw-rtt", "≤ 1.2x raw flood (÷ raw)"),
]
def pooled(case):
    """(p50, p99, samples) of every round's samples of `case`, in µs."""
    counts = collections.Counter()
    for f in glob.glob(os.path.join(samples, case + ".*")):
        hist = f.endswith(".hist")
        for line in open(f):
            parts = line.split()
            if hist and len(parts) == 2:
                counts[float(parts[0]) / 1e3] += int(parts[1])
            elif not hist and len(parts) == 1:
                counts[float(parts[0])] += 1
    n = sum(counts.values())
    if n == 0:
        return float("nan"), float("nan"), 0
    def q(x):
        # Nearest rank: the ceil(n·x)-th smallest (0-based: that less one).
        rank, seen = max(0, math.ceil(n * x) - 1), 0
        for v in sorted(counts):
            seen += counts[v]
            if seen > rank:
                return v
        return max(counts)
    return q(0.5), q(0.99), n
pool = {key: pooled(key) for _, key, _, _ in ROWS}
spread = collections.defaultdict(list)
for r in d:
    for key, (_, p99) in d[r].items():
        spread[key].append(p99)
print("**Pooled over the rounds** (the result: every case's samples from all rounds; the rounds alternate the cases). "
      "p50/p99 in µs; the last column is the range of the rounds' own p99s.\n")
print("| case | samples | p50 | p99 | p99 ÷ baseline | target | met | rounds' p99 |")
print("|---|---:|---:|---:|---:|---|---|---|")
limits = {"≤ 1.3x busy-idle": 1.3, "≤ 1.2x raw flood (÷ raw)": 1.2, "≤ 1.0x high's (÷ high beside it)": 1.0}
for name, key, base, target in ROWS:
    p50, p99, n = pool[key]
    if n == 0:
        continue
    rat, met = "", ""
    if base and pool[base][2]:
        x = p99 / pool[base][1]
        rat = f"{x:.2f}x"
        if target in limits:
            met = "yes" if x <= limits[target] else "**no**"
    rs = spread.get(key, [])
    rng = f"{min(rs):.0f}–{max(rs):.0f}" if rs else ""
    print(f"| {name} | {n} | {p50:.0f} | {p99:.0f} | {rat} | {target} | {met} | {rng} |")
print("\nEach round on its own (a p99 of one round rests on its ~20 slowest samples):\n")
print("| round | case | p50 | p99 | p99 ÷ baseline | target |")
print("|---:|---|---:|---:|---:|---|")
for r in sorted(d):
    x = d[r]
    for name, key, base, target in ROWS:
        if key not in x:
            continue
        p50, p99 = x[key]
        rat = ratio(p99, x[base][1]) if base and base in x else ""
        print(f"| {r} | {name} | {p50:.0f} | {p99:.0f} | {rat} | {target} |")
import json
try:
    lanes = json.load(open(listing)).get("lanes", [])
except (OSError, ValueError):
    lanes = []
if lanes:
    print("\nEach lane's waits for the routing tables' lock over the whole run (all cases and rounds; "
          "`tagwire list --lanes`, column TABLE WAITS: times the lane blocked on the lock another thread held):\n")
    print("| lane | waits | < 8 µs | 8–63 µs | 64–511 µs | ≥ 512 µs | longest µs | total ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for l in lanes:
        b = l.get("table_waits_us", [])
        part = lambda lo, hi: sum(b[lo:hi])
        print(f"| {l['band']} | {sum(b)} | {part(0, 4)} | {part(4, 7)} | {part(7, 10)} | {part(10, len(b))} | "
              f"{l.get('table_wait_max_us', 0)} | {l.get('table_wait_total_us', 0) / 1000:.1f} |")
print(f"<!-- END {section} -->")
PY
cat "$WORK/section.md"
if (( WRITE )); then
    python3 - "$ROOT/BENCHMARKS.md" "$WORK/section.md" "$SECTION" <<'PY'
import sys, re
path, sec, name = sys.argv[1], open(sys.argv[2]).read().strip() + "\n", sys.argv[3]
text = open(path).read()
pat = re.compile(r"<!-- BEGIN " + re.escape(name) + r" -->.*?<!-- END " + re.escape(name) + r" -->\n?", re.S)
text = pat.sub(lambda m: sec, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + sec
open(path, "w").write(text)
PY
    echo "wrote the $SECTION section of BENCHMARKS.md"
fi
