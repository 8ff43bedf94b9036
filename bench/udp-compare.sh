#!/usr/bin/env bash
# bench/udp-compare.sh [--duration S] [--rounds N] — tagwire over UDP against
# Zenoh over UDP (issue 27), on loopback, in one run: 64 B RTT (ping → echo →
# pong through the broker, one in flight) and 1 → 10 fan-out throughput,
# each system also over TCP as the reference of the same run.
#   Zenoh: `baseline zenoh-router --udp` (a router listening on
#     tcp/ and udp/127.0.0.1:17823), client sessions connecting to
#     `udp/127.0.0.1:17823` (or tcp/); bench/src/zenoh_client.rs.
#   tagwire: one release `tagwired --tcp 127.0.0.1:17824 --udp
#     127.0.0.1:17825`, `tagwire bench -s udp://…` (or tcp://).
#   Cyclone DDS (Debian's cyclonedds-tools, its own benchmark `ddsperf`),
#     when installed: brokerless peers over UDP unicast on loopback (no
#     multicast, discovery through a peer list), best effort (`-u`), topic
#     KS with 64 B; RTT: `ddsperf ping size 64` against `ddsperf pong`
#     (ddsperf prints half the round trip: doubled here); fan-out: one
#     `ddsperf pub size 64` as fast as it goes, ten `ddsperf sub`
#     processes, the median of each subscriber's per-second rates.
# Loopback only: this 2-CPU machine cannot give each process its own
# host, and a namespace LAN adds veth hops to both alike. Prints markdown
# for BENCHMARKS.md; run it under `flock /work/bench.lock` (quiet:
# /work/bisect/quiet5.sh). Every process it starts is killed on exit.
set -uo pipefail
DURATION=3
ROUNDS=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) DURATION=${2:?}; shift ;;
        --rounds) ROUNDS=${2:?}; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "udp-compare.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release --quiet -p tagwire-cli --bin tagwired --bin tagwire || exit 1
(cd bench && CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$root/bench/target}" cargo build --release --quiet --bin baseline) || exit 1
bin="${CARGO_TARGET_DIR:-$root/target}/release"
baseline="${BENCH_TARGET_DIR:-$root/bench/target}/release/baseline"
tmp="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
ZPORT=17823; TPORT=17824; UPORT=17825
wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "udp-compare.sh: nothing listens on 127.0.0.1:$1" >&2
    exit 1
}
mkdir -p "$tmp/rt"
"$baseline" zenoh-router --port "$ZPORT" --udp 2>"$tmp/zenoh.log" & pids+=($!)
XDG_RUNTIME_DIR="$tmp/rt" "$bin/tagwired" --tcp "127.0.0.1:$TPORT" --udp "127.0.0.1:$UPORT" --no-unix --log warn 2>"$tmp/tagwired.log" & pids+=($!)
wait_port "$ZPORT"; wait_port "$TPORT"
sleep 0.5
run() { # system transport mode -> JSON line
    local out
    case "$1/$2" in
        zenoh/tcp) out=$(timeout 60 "$baseline" zenoh "$3" --size 64 --duration "$DURATION" --subscribers 10 --server "tcp/127.0.0.1:$ZPORT" 2>>"$tmp/err") ;;
        zenoh/udp) out=$(timeout 60 "$baseline" zenoh "$3" --size 64 --duration "$DURATION" --subscribers 10 --server "udp/127.0.0.1:$ZPORT" 2>>"$tmp/err") ;;
        tagwire/tcp) out=$(XDG_RUNTIME_DIR="$tmp/rt" timeout 60 "$bin/tagwire" -s "tcp://127.0.0.1:$TPORT" bench "$3" --size 64 --duration "$DURATION" --subscribers 10 --json 2>>"$tmp/err") ;;
        tagwire/udp) out=$(XDG_RUNTIME_DIR="$tmp/rt" timeout 60 "$bin/tagwire" -s "udp://127.0.0.1:$UPORT" bench "$3" --size 64 --duration "$DURATION" --subscribers 10 --json 2>>"$tmp/err") ;;
    esac
    out=$(printf '%s\n' "$out" | grep '^{' | tail -1)
    [[ -n $out ]] || out='{"error": "'"$(tail -1 "$tmp/err" | tr -d '"' | cut -c1-120)"'"}'
    echo "$out"
}
# Cyclone DDS, with ddsperf: prints "p50 p99" of the RTT in µs, or
# "per_sub total received" of the fan-out.
cdds() { # latency|fanout
    export CYCLONEDDS_URI="file://$tmp/cyclonedds.xml"
    local pong p i
    case $1 in
        latency)
            ddsperf -u -D $((DURATION + 3)) pong >"$tmp/pong.log" 2>&1 & pong=$!
            sleep 0.5
            ddsperf -u -D "$DURATION" ping size 64 >"$tmp/ping.log" 2>&1
            kill "$pong" 2>/dev/null; wait "$pong" 2>/dev/null
            python3 - "$tmp/ping.log" <<'PY'
import re, sys
lines = [l for l in open(sys.argv[1]) if " size 64 mean " in l]
if len(lines) < 2:
    print("— —"); sys.exit()
# The first second holds discovery and warm-up; the rest are pooled by
# their counts (ddsperf prints percentiles per second only).
def us(l, k): return float(re.search(k + r" ([0-9.]+)us", l).group(1))
rest = lines[1:]
n = sum(int(re.search(r"cnt (\d+)", l).group(1)) for l in rest)
p50 = sum(us(l, "50%") * int(re.search(r"cnt (\d+)", l).group(1)) for l in rest) / n
p99 = max(us(l, "99%") for l in rest)
print(f"{2 * p50:.0f} {2 * p99:.0f}")
PY
            ;;
        fanout)
            local subs=()
            for i in $(seq 10); do
                ddsperf -u -D $((DURATION + 3)) sub >"$tmp/sub$i.log" 2>&1 & subs+=($!)
            done
            sleep 1
            ddsperf -u -D "$DURATION" pub size 64 >"$tmp/pub.log" 2>&1
            sleep 1
            for p in "${subs[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
            python3 - "$tmp" <<'PY'
import re, statistics, sys
rates, totals = [], []
for i in range(1, 11):
    ls = [l for l in open(f"{sys.argv[1]}/sub{i}.log") if " total " in l and " rate " in l]
    r = [float(re.search(r"rate ([0-9.]+) kS/s", l).group(1)) * 1e3 for l in ls]
    r = [x for x in r if x > 0]
    rates.append(statistics.median(r) if r else 0.0)
    totals.append(int(re.search(r"total (\d+)", ls[-1]).group(1)) if ls else 0)
print(f"{statistics.mean(rates):.0f} {sum(rates):.0f} {min(totals)} {max(totals)}")
PY
            ;;
    esac
}
have_dds=0
if command -v ddsperf >/dev/null; then
    have_dds=1
    cat >"$tmp/cyclonedds.xml" <<'XML'
<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="lo"/></Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>40</MaxAutoParticipantIndex><Peers><Peer address="127.0.0.1"/></Peers></Discovery></Domain></CycloneDDS>
XML
else
    echo "udp-compare.sh: ddsperf not found (apt-get install -y cyclonedds-tools): no Cyclone DDS rows" >&2
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
for r in $(seq "$ROUNDS"); do
    for sys in zenoh tagwire; do
        for tr in udp tcp; do
            lat=$(run "$sys" "$tr" latency)
            fan=$(run "$sys" "$tr" fanout)
            echo "round $r $sys/$tr: $lat $fan" >&2
            rows+=("$(python3 - "$r" "$sys" "$tr" "$lat" "$fan" <<'PY'
import json, sys
r, system, tr = sys.argv[1:4]
lat, fan = json.loads(sys.argv[4]), json.loads(sys.argv[5])
def f(d, k, fmt="{:,.0f}"):
    v = d.get(k)
    return fmt.format(v) if isinstance(v, (int, float)) else ("error: " + d["error"] if "error" in d else "—")
got = "—"
if isinstance(fan.get("received"), list) and fan.get("sent"):
    rec = fan["received"]
    got = f"{min(rec):,}–{max(rec):,} of {fan['sent']:,}"
print(f"| {r} | {system} | {tr} | {f(lat, 'rtt_p50_us')} | {f(lat, 'rtt_p99_us')} | {f(fan, 'per_sub_msgs_per_sec')} | {f(fan, 'total_msgs_per_sec')} | {got} |")
PY
)")
        done
    done
    if (( have_dds )); then
        read -r d50 d99 <<<"$(cdds latency)"
        read -r dper dtot dmin dmax <<<"$(cdds fanout)"
        echo "round $r cyclonedds/udp: RTT $d50 $d99; fan-out $dper $dtot $dmin $dmax" >&2
        rows+=("$(python3 -c 'import sys; r,a,b,c,d,e,f=sys.argv[1:]; fm=lambda x: f"{float(x):,.0f}" if x not in ("—","") else "—"; print(f"| {r} | cyclonedds (ddsperf, peers) | udp | {fm(a)} | {fm(b)} | {fm(c)} | {fm(d)} | {int(e):,}–{int(f):,} received |")' "$r" "$d50" "$d99" "$dper" "$dtot" "$dmin" "$dmax")")
    fi
done
echo "\`bench/udp-compare.sh --duration $DURATION --rounds $ROUNDS\`: $(date -u '+%Y-%m-%d %H:%M UTC'), revision $(git rev-parse --short HEAD)," \
    "\`nproc\` = $(nproc), CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $load_before before → $(cut -d' ' -f1-3 /proc/loadavg) after;" \
    "zenoh $(grep -m1 -A1 'name = "zenoh"' bench/Cargo.lock | sed -n 's/version = "\(.*\)"/\1/p'); loopback; 64 B payloads, ${DURATION} s per run."
echo
echo "| round | system | transport | RTT p50 µs | RTT p99 µs | fan-out 1→10: msgs/s per subscriber | total msgs/s | received per subscriber of sent |"
echo "|---:|---|---|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
