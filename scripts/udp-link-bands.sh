#!/usr/bin/env bash
# scripts/udp-link-bands.sh [--rounds N] [--probes N] [--floods N] — the
# high band's latency across a UDP link under a low-band flood (issue 27
# item 1): does the flood on the low band delay the high band's events
# between two daemons? Not in CI (root for namespaces, a minute per round).
#
# Two network namespaces joined by a veth pair; daemon a (`--udp`) and
# daemon b (`--peer udp://a`). On b, --floods `tagwire --band low pub
# --size 1024` publish as fast as they can, and a low-band subscriber on a
# takes them, so the flood crosses the link; meanwhile b publishes --probes
# high-band events at 100/s to a high-band subscriber on a, which stamps
# each arrival (the namespaces share one clock): latency = arrival - the
# event's source time. Two cases per round, the same binaries:
#
#   v5  b speaks link version 5 (`[federation] link_version = 5`): the UDP
#       link carries every band on the default band's session (the
#       behaviour before link version 6);
#   v6  the newest: a UDP session per band, each band's own queue, socket,
#       DSCP and lane at both ends.
#
# Prints p50/p99/max per case and round, and how many probes arrived.
# TAGWIRE_BIN=DIR runs the binaries in DIR (default: a release build of
# this checkout, built first).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ROUNDS=3
PROBES=300
FLOODS=2
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift ;;
        --probes) PROBES=${2:?}; shift ;;
        --floods) FLOODS=${2:?}; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "udp-link-bands.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ $(id -u) != 0 ]]; then
    echo "udp-link-bands.sh: needs root (network namespaces); run it with sudo" >&2
    exit 2
fi
for t in ip perl python3; do
    command -v "$t" >/dev/null || { echo "udp-link-bands.sh: needs $t" >&2; exit 2; }
done
if [[ -n ${TAGWIRE_BIN:-} ]]; then
    BIN=$TAGWIRE_BIN
else
    cargo build --release -p tagwire-cli --bins >&2
    BIN=$ROOT/target/release
fi
TOKEN=udp-link-bands-token-0123456789
NA=twtb-ulb$$-a
NB=twtb-ulb$$-b
WORK=$(mktemp -d)
cleanup() {
    for n in "$NA" "$NB"; do
        for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        ip netns del "$n" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$NA"
ip netns add "$NB"
ip link add eth0 netns "$NA" type veth peer name eth0 netns "$NB"
ip -n "$NA" addr add 10.204.0.1/24 dev eth0
ip -n "$NB" addr add 10.204.0.2/24 dev eth0
for n in "$NA" "$NB"; do
    ip -n "$n" link set eth0 up
    ip -n "$n" link set lo up
done

config() { # $1 = file, $2 = link_version line (or empty)
    cat > "$1" <<EOF
[auth]
local_token = false
[[auth.tokens]]
name = "lan"
token = "$TOKEN"
[[acl]]
identity = "token:lan"
publish = ["/**"]
subscribe = ["/**"]
admin = true
[federation]
token = "$TOKEN"
gossip_enabled = false
$2
EOF
}
tw() { # $1 = namespace, $2 = HOST or HOST:PORT (default port 7700), rest: tagwire arguments
    local ns=$1 addr=$2
    shift 2
    [[ $addr == *:* ]] || addr=$addr:7700
    ip netns exec "$ns" env TAGWIRE_TOKEN=$TOKEN "$BIN/tagwire" -s "tcp://$addr" "$@"
}
# Clients connect straight to their band's port (main + 1 low, + 2 high):
# under the flood the default band's lane is busy (with link version 5 it
# carries the link's flood), and a client's handshake there could wait.

run_case() { # $1 = case name, $2 = b's link version
    local name=$1 version=$2
    mkdir -p "$WORK/a" "$WORK/b"
    config "$WORK/a/t.toml" ""
    config "$WORK/b/t.toml" "link_version = $version"
    ip netns exec "$NA" env XDG_RUNTIME_DIR="$WORK/a" "$BIN/tagwired" --config "$WORK/a/t.toml" \
        --tcp 10.204.0.1:7700 --udp 10.204.0.1:7710 --no-unix --name a 2> "$WORK/a.log" &
    local pa=$!
    sleep 0.5
    ip netns exec "$NB" env XDG_RUNTIME_DIR="$WORK/b" "$BIN/tagwired" --config "$WORK/b/t.toml" \
        --tcp 10.204.0.2:7700 --no-unix --name b --peer udp://10.204.0.1:7710 2> "$WORK/b.log" &
    local pb=$!
    local want=0
    [[ $version -ge 6 ]] && want=3
    for _ in $(seq 100); do
        local bands
        bands=$(tw "$NB" 10.204.0.2 list --links --json 2>/dev/null \
            | python3 -c 'import json,sys; v=json.load(sys.stdin) or {}; l=v.get("links") or [{}]; print(len(l[0].get("bands",[])) if l[0] else -1)' 2>/dev/null || echo -1)
        [[ $bands == "$want" ]] && break
        sleep 0.1
    done
    tw "$NA" 10.204.0.1:7701 sub '/flood/**' > /dev/null 2>&1 &
    local subs=$!
    tw "$NA" 10.204.0.1:7702 sub '/probe/**' --json -n "$PROBES" --timeout 20 2> /dev/null \
        | perl -MTime::HiRes=time -ne '$|=1; printf "%.9f %s", time, $_' > "$WORK/probe.out" &
    local probe=$!
    sleep 1
    local floods=()
    for i in $(seq "$FLOODS"); do
        tw "$NB" 10.204.0.2:7701 pub "/flood/$i" --size 1024 -n 100000000 > /dev/null 2>&1 &
        floods+=($!)
    done
    sleep 1
    tw "$NB" 10.204.0.2:7702 pub /probe/x p -n "$PROBES" --rate 100 > /dev/null \
        || echo "      the probe publisher failed (see above)"
    wait "$probe" || true
    # What the link did meanwhile: b's link queues, a's sessions from b.
    tw "$NB" 10.204.0.2 list --links --json > "$WORK/links.json" 2>/dev/null || true
    tw "$NA" 10.204.0.1 list --json > "$WORK/list.json" 2>/dev/null || true
    kill "${floods[@]}" "$subs" 2>/dev/null || true
    wait "${floods[@]}" "$subs" 2>/dev/null || true
    kill "$pa" "$pb" 2>/dev/null || true
    wait "$pa" "$pb" 2>/dev/null || true
    if [[ -n ${ULB_SHOW_LOGS:-} ]]; then
        echo "--- a ($name)"; cat "$WORK/a.log"; echo "--- b ($name)"; cat "$WORK/b.log"
    fi
    python3 - "$WORK/links.json" "$WORK/list.json" <<'EOF'
import json, sys
def load(p):
    try:
        return json.load(open(p)) or {}
    except (OSError, ValueError):
        return {}
link = (load(sys.argv[1]).get("links") or [{}])[0]
conns = [c for c in load(sys.argv[2]).get("connections", []) if c.get("name") == "link:b"]
s = lambda k: sum((c.get("udp") or {}).get(k, 0) for c in conns)
print(f"      b: link queues dropped {link.get('dropped', 0)}, written {link.get('events_out_by_band', {})}; "
      f"a: b's sessions received {s('received')} datagrams, lost {s('lost')}, overrun {s('overrun')}")
EOF
    python3 - "$name" "$PROBES" "$WORK/probe.out" <<'EOF'
import json, sys
name, want, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lat = []
for line in open(path):
    at, _, rest = line.partition(" ")
    try:
        ev = json.loads(rest)
    except ValueError:
        continue
    lat.append(float(at) * 1e9 - ev["source_time_ns"])
lat.sort()
def q(p):
    return lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6 if lat else float("nan")
print(f"{name:4}  probes {len(lat):4}/{want}  p50 {q(0.5):9.3f} ms  p99 {q(0.99):9.3f} ms  max {q(1.0):9.3f} ms")
EOF
}

echo "high-band latency across a UDP link, $FLOODS low-band floods of 1 KiB events ($(nproc) CPUs)"
for r in $(seq "$ROUNDS"); do
    echo "round $r"
    run_case v5 5
    run_case v6 6
done
