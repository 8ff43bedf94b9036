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
# Loopback by default. With --lan (root): network namespaces on one
# bridge (10.206.0.0/24, `twtb-uc*`, removed on exit): the brokers
# (tagwired, the Zenoh router) on host 0, the measuring process (`tagwire
# bench`, `baseline zenoh`: one process holds the pinger, the echo and the
# ten subscribers, so they share host 1) on host 1; every event crosses the
# bridge to the broker and back. Cyclone DDS is brokerless: ping on host 1,
# pong on host 2; fan-out: the publisher on host 1 and each of the ten
# subscribers on a host of its own (2..11), once with multicast (Cyclone's
# default: SPDP and data to the group) and once unicast only (peers list).
# Zenoh's multicast transport (--lan only; a loopback run skips it and
# says so): `baseline zenoh-mcast ROLE --group udp/224.0.5.x:PORT#iface=eth0`
# (bench/src/zenoh_mcast.rs), peer sessions whose only listener is the group
# (no scouting, no unicast session), one process per host like Cyclone:
# ping on host 1, pong on host 2; the publisher on host 1 and a subscriber
# on each of hosts 2..11 (each prints its per-second counts; per subscriber:
# the median of them). A line under the table gives the bytes and packets
# host 1's eth0 sent per event (one copy on the wire = multicast) and the
# group traffic the subscribers made before the publisher started. A second
# fan-out row, "receive-only subscribers", drops at the bridge what hosts
# 2..11 send to the group: zenoh 1.10.2's peers echo each other's subscriber
# declarations on a group (a storm with several subscribers; see
# BENCHMARKS.md), and this row measures the data path without it.
# tagwire's [[multicast]] (--lan only), the same fan-out topology: a daemon
# on each of hosts 1..11 (hosts 2..11 linked to host 1's, one group for
# /bench/**), `tagwire bench fanout --subscribers 1` on host 1 publishing
# (its one subscriber on host 1's daemon), a `tagwire sub` on each of hosts
# 2..11, its lines counted per second (the median of its full seconds); no
# RTT (`tagwire bench latency` is one process).
# All hosts still share this machine's 2 CPUs. --systems LIST (default
# zenoh,zenoh-mcast,tagwire,tagwire-mcast,cyclonedds) runs only those (no
# Zenoh: no bench build).
# Prints markdown for BENCHMARKS.md; run it under `flock /work/bench.lock`
# (quiet: /work/bisect/quiet5.sh). Every process it starts is killed on exit.
set -uo pipefail
DURATION=3
ROUNDS=1
LAN=0
SYSTEMS=zenoh,zenoh-mcast,tagwire,tagwire-mcast,cyclonedds
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) DURATION=${2:?}; shift ;;
        --rounds) ROUNDS=${2:?}; shift ;;
        --lan) LAN=1 ;;
        --systems) SYSTEMS=${2:?}; shift ;;
        -h|--help) sed -n '2,49p' "$0"; exit 0 ;;
        *) echo "udp-compare.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# UDP_COMPARE_BIN=DIR: tagwired and tagwire from DIR, no build.
if [[ -z ${UDP_COMPARE_BIN:-} ]]; then
    cargo build --release --quiet -p tagwire-cli --bin tagwired --bin tagwire || exit 1
fi
want() { [[ ",$SYSTEMS," == *",$1,"* ]]; }
if want zenoh || want zenoh-mcast; then
    (cd bench && CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$root/bench/target}" cargo build --release --quiet --bin baseline) || exit 1
fi
bin="${UDP_COMPARE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release}"
baseline="${BENCH_TARGET_DIR:-$root/bench/target}/release/baseline"
tmp="$(mktemp -d)"
pids=()
LANHOSTS=12
NS=twtb-uc$$
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if (( LAN )); then
        for n in "$NS-br" $(seq -f "$NS-h%g" 0 $((LANHOSTS - 1))); do
            for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
            ip netns del "$n" 2>/dev/null
        done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
ZPORT=17823; TPORT=17824; UPORT=17825
# BROKER: the brokers' address; on H0 / H1 / H2 / H[i]: prefixes running a
# command on that host (empty on loopback).
BROKER=127.0.0.1
H0=(); H1=(); H2=()
host() { (( LAN )) && echo ip netns exec "$NS-h$1"; }
if (( LAN )); then
    [[ $(id -u) == 0 ]] || { echo "udp-compare.sh --lan: needs root (network namespaces)" >&2; exit 1; }
    ip netns add "$NS-br" || exit 1
    ip -n "$NS-br" link add br0 type bridge && ip -n "$NS-br" link set br0 up || exit 1
    for i in $(seq 0 $((LANHOSTS - 1))); do
        h="$NS-h$i"
        ip netns add "$h" &&
            ip link add eth0 netns "$h" type veth peer name "p$i" netns "$NS-br" &&
            ip -n "$NS-br" link set "p$i" master br0 && ip -n "$NS-br" link set "p$i" up &&
            ip -n "$h" addr add "10.206.0.$((i + 1))/24" dev eth0 &&
            ip -n "$h" link set eth0 up multicast on && ip -n "$h" link set lo up &&
            ip -n "$h" route add 224.0.0.0/4 dev eth0 || exit 1
    done
    BROKER=10.206.0.1
    read -ra H0 <<<"$(host 0)"; read -ra H1 <<<"$(host 1)"; read -ra H2 <<<"$(host 2)"
fi
wait_port() {
    for _ in $(seq 200); do
        "${H1[@]}" bash -c "exec 3<>/dev/tcp/$BROKER/$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "udp-compare.sh: nothing listens on $BROKER:$1" >&2
    exit 1
}
mkdir -p "$tmp/rt"
# Off loopback the daemon's local token does not apply: a token of its own.
twcfg=()
if (( LAN )); then
    export TAGWIRE_TOKEN=udp-compare-lan-token-0123456789
    cat >"$tmp/tagwired.toml" <<TOML
[auth]
local_token = false
[[auth.tokens]]
name = "bench"
token = "$TAGWIRE_TOKEN"
[[acl]]
identity = "token:bench"
publish = ["/**"]
subscribe = ["/**"]
admin = true
TOML
    twcfg=(--config "$tmp/tagwired.toml")
fi
if want zenoh; then
    "${H0[@]}" "$baseline" zenoh-router --host "$BROKER" --port "$ZPORT" --udp 2>"$tmp/zenoh.log" & pids+=($!)
    wait_port "$ZPORT"
fi
XDG_RUNTIME_DIR="$tmp/rt" "${H0[@]}" "$bin/tagwired" "${twcfg[@]}" --tcp "$BROKER:$TPORT" --udp "$BROKER:$UPORT" --no-unix --log warn 2>"$tmp/tagwired.log" & pids+=($!)
wait_port "$TPORT"
sleep 0.5
run() { # system transport mode -> JSON line
    local out
    case "$1/$2" in
        zenoh/tcp) out=$(timeout 60 "${H1[@]}" "$baseline" zenoh "$3" --size 64 --duration "$DURATION" --subscribers 10 --server "tcp/$BROKER:$ZPORT" 2>>"$tmp/err") ;;
        zenoh/udp) out=$(timeout 60 "${H1[@]}" "$baseline" zenoh "$3" --size 64 --duration "$DURATION" --subscribers 10 --server "udp/$BROKER:$ZPORT" 2>>"$tmp/err") ;;
        tagwire/tcp) out=$(XDG_RUNTIME_DIR="$tmp/rt" timeout 60 "${H1[@]}" "$bin/tagwire" -s "tcp://$BROKER:$TPORT" bench "$3" --size 64 --duration "$DURATION" --subscribers 10 --json 2>>"$tmp/err") ;;
        tagwire/udp) out=$(XDG_RUNTIME_DIR="$tmp/rt" timeout 60 "${H1[@]}" "$bin/tagwire" -s "udp://$BROKER:$UPORT" bench "$3" --size 64 --duration "$DURATION" --subscribers 10 --json 2>>"$tmp/err") ;;
    esac
    out=$(printf '%s\n' "$out" | grep '^{' | tail -1)
    [[ -n $out ]] || out='{"error": "'"$(tail -1 "$tmp/err" | tr -d '"' | cut -c1-120)"'"}'
    echo "$out"
}
# Cyclone DDS, with ddsperf: prints "p50 p99" of the RTT in µs, or
# "per_sub total received" of the fan-out.
cdds() { # latency|fanout [mcast|ucast]
    export CYCLONEDDS_URI="file://$tmp/cyclonedds-${2:-ucast}.xml"
    local pong p i
    case $1 in
        latency)
            "${H2[@]}" ddsperf -u -D $((DURATION + 3)) pong >"$tmp/pong.log" 2>&1 & pong=$!
            sleep 0.5
            "${H1[@]}" ddsperf -u -D "$DURATION" ping size 64 >"$tmp/ping.log" 2>&1
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
                local on=()
                (( LAN )) && read -ra on <<<"$(host $((i + 1)))"
                "${on[@]}" ddsperf -u -D $((DURATION + 3)) sub >"$tmp/sub$i.log" 2>&1 & subs+=($!)
            done
            sleep 1
            "${H1[@]}" ddsperf -u -D "$DURATION" pub size 64 >"$tmp/pub.log" 2>&1
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
# Zenoh's multicast transport, one role per host: prints "p50 p99 lost" of
# the RTT, or "per_sub total min max sent" of the fan-out (and writes the
# link counters to $tmp/zmc-wire).
link_counter() { # host field(rx_bytes|rx_packets|tx_bytes|tx_packets)
    ip netns exec "$NS-h$1" cat "/sys/class/net/eth0/statistics/$2"
}
zmc() { # latency | fanout [defaults|rxonly]
    local p i
    case $1 in
        latency)
            local group="udp/224.0.5.2:17831#iface=eth0" pong
            timeout 60 "${H2[@]}" "$baseline" zenoh-mcast pong --group "$group" --wait 30 >"$tmp/zpong.json" 2>>"$tmp/err" & pong=$!; pids+=("$pong")
            sleep 0.5
            # Host 3 has no role: it sees the group's traffic (the bridge floods it).
            local seen0 seen1
            seen0=$(link_counter 3 rx_packets)
            timeout 60 "${H1[@]}" "$baseline" zenoh-mcast ping --group "$group" --size 64 --duration "$DURATION" --wait 30 >"$tmp/zping.json" 2>>"$tmp/err"
            wait "$pong" 2>/dev/null
            seen1=$(link_counter 3 rx_packets)
            python3 - "$tmp/zping.json" "$tmp/zpong.json" "$((seen1 - seen0))" <<'PY'
import json, sys
def last(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")][-1]
    except (IndexError, ValueError, OSError):
        return {}
d, echo = last(sys.argv[1]), last(sys.argv[2])
if "rtt_p50_us" in d:
    print(f"{d['rtt_p50_us']:.0f} {d['rtt_p99_us']:.0f} {d['lost']} {echo.get('echoed', 0)} {sys.argv[3]}")
else:
    print(f"— — — {echo.get('echoed', 0)} {sys.argv[3]}")
PY
            ;;
        fanout)
            local group="udp/224.0.5.1:17830#iface=eth0" subs=() h
            if [[ ${2:-defaults} == rxonly ]]; then
                # Receive-only subscribers: the bridge drops what hosts 2..11
                # send to the group (their JOINs and declarations), so the
                # subscribers cannot answer each other's declarations. A
                # drop at the bridge, not in the hosts: a host's own
                # netfilter drop makes Zenoh's send fail (EPERM) and close
                # the transport.
                ip netns exec "$NS-br" nft -f - <<NFT || return 1
table bridge zmc {
    chain subs_out {
        type filter hook forward priority 0; policy accept;
        iifname != "p1" ip daddr 224.0.5.1 udp dport 17830 drop
    }
}
NFT
            fi
            for i in $(seq 10); do
                timeout 90 ip netns exec "$NS-h$((i + 1))" "$baseline" zenoh-mcast sub --group "$group" --wait 30 >"$tmp/zsub$i.json" 2>>"$tmp/err" & subs+=($!); pids+=($!)
            done
            sleep 1
            # Before the publisher: what the subscribers alone put on the group.
            local quiet0 quiet1 tx0 txp0 tx1 txp1 rx0=() rx1=()
            quiet0=$(link_counter 1 rx_packets); sleep 1; quiet1=$(link_counter 1 rx_packets)
            tx0=$(link_counter 1 tx_bytes); txp0=$(link_counter 1 tx_packets)
            for h in $(seq 2 11); do rx0+=("$(link_counter "$h" rx_bytes)"); done
            timeout 60 "${H1[@]}" "$baseline" zenoh-mcast pub --group "$group" --size 64 --duration "$DURATION" >"$tmp/zpub.json" 2>>"$tmp/err"
            for p in "${subs[@]}"; do wait "$p" 2>/dev/null; done
            tx1=$(link_counter 1 tx_bytes); txp1=$(link_counter 1 tx_packets)
            for h in $(seq 2 11); do rx1+=("$(link_counter "$h" rx_bytes)"); done
            [[ ${2:-defaults} == rxonly ]] && ip netns exec "$NS-br" nft delete table bridge zmc
            python3 - "$tmp" "$((quiet1 - quiet0))" "$((tx1 - tx0))" "$((txp1 - txp0))" "${rx0[*]}" "${rx1[*]}" <<'PY'
import json, statistics, sys
tmp, quiet, txb, txp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rx = [b - a for a, b in zip(map(int, sys.argv[5].split()), map(int, sys.argv[6].split()))]
def last(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")][-1]
    except (IndexError, ValueError, OSError):
        return {}
sent = last(f"{tmp}/zpub.json").get("sent", 0)
subs = [last(f"{tmp}/zsub{i}.json") for i in range(1, 11)]
rates = [s.get("msgs_per_sec", 0.0) for s in subs]
got = [s.get("received", 0) for s in subs]
print(f"{statistics.mean(rates):.0f} {sum(rates):.0f} {min(got)} {max(got)} {sent}")
per = f"{txb / sent:.1f} bytes" if sent else "— bytes"
with open(f"{tmp}/zmc-wire", "w") as f:
    f.write(f"host 1's eth0 sent {txb:,} bytes in {txp:,} packets for {sent:,} events ({per} per event); "
            f"hosts 2–11 each received {min(rx):,}–{max(rx):,} bytes; "
            f"in the second before the publisher started, host 1 received {quiet:,} packets (the subscribers' traffic to the group, flooded by the bridge)")
PY
            ;;
    esac
}
# tagwire's [[multicast]] (daemon to daemon), the same fan-out topology: a
# daemon on each of hosts 1..11 (port MPORT, federation links from hosts
# 2..11 to host 1's daemon, one [[multicast]] group for /bench/**), the
# publisher (`tagwire bench fanout --subscribers 1`: its one subscriber sits
# on host 1's daemon) on host 1 and a `tagwire sub` on each of hosts 2..11,
# its lines counted per second. Prints "per_sub total min max sent" (per
# subscriber: the median of its full seconds) and writes $tmp/twmc-wire.
MPORT=17826; MGROUP=239.206.0.1:17840
twmc() {
    local base="$tmp/twmc" i addr peers dp=() sp=() ready=0
    rm -rf "$base"; mkdir -p "$base"
    for i in $(seq 1 11); do
        addr=10.206.0.$((i + 1)); peers=""
        (( i > 1 )) && peers="\"tcp://10.206.0.2:$MPORT\""
        { cat "$tmp/tagwired.toml"
          printf '[federation]\ntoken = "%s"\npeers = [%s]\ngossip_enabled = false\n' "$TAGWIRE_TOKEN" "$peers"
          printf '[[multicast]]\ngroup = "%s"\ntags = ["/bench/**"]\ninterface = "%s"\n' "$MGROUP" "$addr"
        } >"$base/d$i.toml"
        XDG_RUNTIME_DIR="$tmp/rt" ip netns exec "$NS-h$i" "$bin/tagwired" --config "$base/d$i.toml" --tcp "$addr:$MPORT" \
            --no-unix --name "mc$i" --log warn 2>"$base/d$i.log" & dp+=($!); pids+=($!)
    done
    # Ready when host 1's daemon lists the other ten as live group members.
    for _ in $(seq 150); do
        ready=$(XDG_RUNTIME_DIR="$tmp/rt" "${H1[@]}" "$bin/tagwire" -s "tcp://10.206.0.2:$MPORT" list --json 2>/dev/null |
            python3 -c 'import json,sys
try: print(len(json.load(sys.stdin)["multicast"][0]["members"]))
except Exception: print(0)')
        (( ready >= 10 )) && break
        sleep 0.2
    done
    if (( ready < 10 )); then
        echo "udp-compare.sh: tagwire [[multicast]]: only $ready of 10 members after 30 s" >&2
        for i in "${dp[@]}"; do kill "$i" 2>/dev/null; wait "$i" 2>/dev/null; done
        echo "— — 0 0 0"; return
    fi
    # Each subscriber's lines counted per second from the first (reads in
    # 64 KiB blocks: the counter costs a syscall per block, not per event).
    cat >"$base/count.py" <<'PY'
import json, statistics, sys, time
n, first, buckets = 0, None, []
while True:
    b = sys.stdin.buffer.read1(65536)
    if not b:
        break
    now = time.monotonic()
    if first is None:
        first = now
    k = int(now - first)
    while len(buckets) <= k:
        buckets.append(0)
    c = b.count(b"\n")
    buckets[k] += c
    n += c
full = [x for x in buckets[:-1] if x > 0] or [x for x in buckets if x > 0]
json.dump({"received": n, "per_second": buckets, "msgs_per_sec": statistics.median(full) if full else 0}, open(sys.argv[1], "w"))
PY
    for i in $(seq 2 11); do
        XDG_RUNTIME_DIR="$tmp/rt" ip netns exec "$NS-h$i" "$bin/tagwire" -s "tcp://10.206.0.$((i + 1)):$MPORT" \
            sub '/bench/*/data' 2>>"$tmp/err" > >(python3 "$base/count.py" "$base/count$i.json") & sp+=($!); pids+=($!)
    done
    sleep 1.5   # the subscriptions reach host 1's daemon over the links
    local tx0 tx1 txp0 txp1 fan
    tx0=$(link_counter 1 tx_bytes); txp0=$(link_counter 1 tx_packets)
    fan=$(XDG_RUNTIME_DIR="$tmp/rt" timeout 60 "${H1[@]}" "$bin/tagwire" -s "tcp://10.206.0.2:$MPORT" bench fanout \
        --subscribers 1 --size 64 --duration "$DURATION" --json 2>>"$tmp/err" | grep '^{' | tail -1)
    sleep 1
    tx1=$(link_counter 1 tx_bytes); txp1=$(link_counter 1 tx_packets)
    for i in $(seq 2 11); do
        XDG_RUNTIME_DIR="$tmp/rt" ip netns exec "$NS-h$i" "$bin/tagwire" -s "tcp://10.206.0.$((i + 1)):$MPORT" list --json \
            2>/dev/null >"$base/list$i.json"
    done
    XDG_RUNTIME_DIR="$tmp/rt" "${H1[@]}" "$bin/tagwire" -s "tcp://10.206.0.2:$MPORT" list --links --json 2>/dev/null >"$base/links1.json"
    XDG_RUNTIME_DIR="$tmp/rt" "${H1[@]}" "$bin/tagwire" -s "tcp://10.206.0.2:$MPORT" list --json 2>/dev/null >"$base/list1.json"
    for i in "${sp[@]}"; do kill "$i" 2>/dev/null; wait "$i" 2>/dev/null; done
    for i in "${dp[@]}"; do kill "$i" 2>/dev/null; wait "$i" 2>/dev/null; done
    sleep 0.5   # each subscriber's counter writes its counts
    python3 - "$base" "$fan" "$DURATION" "$((tx1 - tx0))" "$((txp1 - txp0))" "$tmp/twmc-wire" <<'PY'
import json, sys
base, fan, duration, txb, txp, wire = sys.argv[1], json.loads(sys.argv[2] or "{}"), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
sent = fan.get("sent", 0)
def count(i):
    try:
        return json.load(open(f"{base}/count{i}.json"))
    except (OSError, ValueError):
        return {}
subs = [count(i) for i in range(2, 12)]
got = [c.get("received", 0) for c in subs]
lost = []
for i in range(2, 12):
    try:
        lost.append(json.load(open(f"{base}/list{i}.json"))["multicast"][0]["lost"])
    except (OSError, ValueError, KeyError, IndexError):
        pass
rates = [c.get("msgs_per_sec", 0) for c in subs]
try:
    group_sent = f'{json.load(open(f"{base}/list1.json"))["multicast"][0]["sent"]:,}'
except (OSError, ValueError, KeyError, IndexError):
    group_sent = "—"
try:
    link_events = f'{sum(l.get("events_out", 0) for l in json.load(open(f"{base}/links1.json"))["links"]):,}'
except (OSError, ValueError, KeyError, TypeError):
    link_events = "—"
print(f"{sum(rates) / len(rates):.0f} {sum(rates):.0f} {min(got)} {max(got)} {sent}")
per = f"{txb / sent:.1f} bytes" if sent else "— bytes"
lost_s = f"{min(lost):,}–{max(lost):,}" if lost else "—"
with open(wire, "w") as f:
    f.write(f"host 1's eth0 sent {txb:,} bytes in {txp:,} packets for {sent:,} events ({per} per event); "
            f"host 1's daemon sent {group_sent} datagrams to the group and {link_events} events over its ten links; "
            f"the subscribers' daemons counted {lost_s} group datagrams lost; the publisher's own subscriber on host 1's daemon got "
            f"{fan.get('per_sub_msgs_per_sec', 0):,.0f} events/s")
PY
}
have_dds=0
if ! want cyclonedds; then
    :
elif command -v ddsperf >/dev/null; then
    have_dds=1
    if (( LAN )); then
        peers=$(for i in $(seq 1 $((LANHOSTS - 1))); do printf '<Peer address="10.206.0.%d"/>' $((i + 1)); done)
        cat >"$tmp/cyclonedds-ucast.xml" <<XML
<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="eth0"/></Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>40</MaxAutoParticipantIndex><Peers>$peers</Peers></Discovery></Domain></CycloneDDS>
XML
        cat >"$tmp/cyclonedds-mcast.xml" <<'XML'
<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="eth0"/></Interfaces><AllowMulticast>true</AllowMulticast></General></Domain></CycloneDDS>
XML
    else
        cat >"$tmp/cyclonedds-ucast.xml" <<'XML'
<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="lo"/></Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>40</MaxAutoParticipantIndex><Peers><Peer address="127.0.0.1"/></Peers></Discovery></Domain></CycloneDDS>
XML
    fi
else
    echo "udp-compare.sh: ddsperf not found (apt-get install -y cyclonedds-tools): no Cyclone DDS rows" >&2
fi
if want zenoh-mcast && (( ! LAN )); then
    echo "udp-compare.sh: no zenoh (peer, multicast) rows on loopback: its roles need a host each (run with --lan)" >&2
fi
if want tagwire-mcast && (( ! LAN )); then
    echo "udp-compare.sh: no tagwire ([[multicast]]) row on loopback: it needs a daemon per host (run with --lan)" >&2
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
wire=()
for r in $(seq "$ROUNDS"); do
    for sys in zenoh tagwire; do
        want "$sys" || continue
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
    if want zenoh-mcast && (( LAN )); then
        read -r z50 z99 zlost zechoed zseen <<<"$(zmc latency)"
        for variant in defaults rxonly; do
            if [[ $variant == defaults ]]; then
                label="zenoh (peer, multicast)"
                read -r a b c d e f g <<<"$z50 $z99 $(zmc fanout defaults)"
            else
                label="zenoh (peer, multicast, receive-only subscribers)"
                read -r a b c d e f g <<<"— — $(zmc fanout rxonly)"
            fi
            echo "round $r $label: RTT $a $b; fan-out $c $d $e $f of $g" >&2
            rows+=("$(python3 -c 'import sys; r,l,a,b,c,d,e,f,g=sys.argv[1:]; fm=lambda x: f"{float(x):,.0f}" if x not in ("—","") else "—"; print(f"| {r} | {l} | udp | {fm(a)} | {fm(b)} | {fm(c)} | {fm(d)} | {int(e):,}–{int(f):,} of {int(g):,} |")' "$r" "$label" "$a" "$b" "$c" "$d" "$e" "$f" "$g")")
            wire+=("round $r, $label fan-out: $(cat "$tmp/zmc-wire" 2>/dev/null).")
        done
        wire+=("round $r, zenoh (peer, multicast) RTT: $zechoed pings echoed, $zlost resent after 200 ms without an answer; host 3 (no role) received $zseen packets meanwhile.")
    fi
    if want tagwire-mcast && (( LAN )); then
        read -r c d e f g <<<"$(twmc)"
        label="tagwire ([[multicast]], a daemon per host)"
        echo "round $r $label: fan-out $c $d $e $f of $g" >&2
        rows+=("$(python3 -c 'import sys; r,l,c,d,e,f,g=sys.argv[1:]; fm=lambda x: f"{float(x):,.0f}" if x not in ("—","") else "—"; print(f"| {r} | {l} | udp | — | — | {fm(c)} | {fm(d)} | {int(e):,}–{int(f):,} of {int(g):,} |")' "$r" "$label" "$c" "$d" "$e" "$f" "$g")")
        wire+=("round $r, $label fan-out: $(cat "$tmp/twmc-wire" 2>/dev/null).")
    fi
    if (( have_dds )); then
        casts=(ucast)
        (( LAN )) && casts=(ucast mcast)
        for cast in "${casts[@]}"; do
            read -r d50 d99 <<<"$(cdds latency "$cast")"
            read -r dper dtot dmin dmax <<<"$(cdds fanout "$cast")"
            label="cyclonedds (ddsperf, peers)"
            [[ $cast == mcast ]] && label="cyclonedds (ddsperf, multicast)"
            echo "round $r cyclonedds/udp $cast: RTT $d50 $d99; fan-out $dper $dtot $dmin $dmax" >&2
            rows+=("$(python3 -c 'import sys; r,l,a,b,c,d,e,f=sys.argv[1:]; fm=lambda x: f"{float(x):,.0f}" if x not in ("—","") else "—"; print(f"| {r} | {l} | udp | {fm(a)} | {fm(b)} | {fm(c)} | {fm(d)} | {int(e):,}–{int(f):,} received |")' "$r" "$label" "$d50" "$d99" "$dper" "$dtot" "$dmin" "$dmax")")
        done
    fi
done
echo "\`bench/udp-compare.sh --duration $DURATION --rounds $ROUNDS$( (( LAN )) && echo " --lan")\`: $(date -u '+%Y-%m-%d %H:%M UTC'), revision $(git rev-parse --short HEAD)," \
    "\`nproc\` = $(nproc), CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $load_before before → $(cut -d' ' -f1-3 /proc/loadavg) after;" \
    "zenoh $(grep -m1 -A1 'name = "zenoh"' bench/Cargo.lock | sed -n 's/version = "\(.*\)"/\1/p'); $( (( LAN )) && echo "namespace LAN (brokers on host 0, the measuring process on host 1, Cyclone's, Zenoh multicast's and tagwire multicast's processes one per host)" || echo loopback); 64 B payloads, ${DURATION} s per run."
echo
echo "| round | system | transport | RTT p50 µs | RTT p99 µs | fan-out 1→10: msgs/s per subscriber | total msgs/s | received per subscriber of sent |"
echo "|---:|---|---|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
if (( ${#wire[@]} )); then
    echo
    printf -- '- %s\n' "${wire[@]}"
fi
