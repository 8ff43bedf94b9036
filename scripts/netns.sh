#!/usr/bin/env bash
# netns testbed: N host network namespaces joined by veth pairs to a router
# namespace that forwards IPv4, with optional tc shaping on the bottleneck.
# The Rust helper crates/tagwire-testbed builds the same topology from tests;
# docs/testbed.md explains both. Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN)
# and iproute2 (`ip`, `tc`).
#
#   scripts/netns.sh up [--prefix NAME] [--hosts N] [--delay MS] [--rate KBIT] [--dscp-priority]
#                       [--shape-host I] [--mtu-packets]
#   scripts/netns.sh down PREFIX        remove one testbed (its processes are killed)
#   scripts/netns.sh down --all         remove every testbed namespace (twtb-*)
#   scripts/netns.sh status [PREFIX]    list testbed namespaces (exit 0 either way)
#   scripts/netns.sh check [QDISC...]   root? iproute2? does the kernel have the
#                                       qdiscs (default: htb netem)? exit 3 if a
#                                       qdisc is missing, 1 for anything else
#
# Topology of a testbed with prefix P (default twtb-sh<pid>; every name
# starts with twtb-, so `status` sees the Rust helper's twtb-<pid>-<n> too):
#   P-r     the router namespace, net.ipv4.ip_forward=1
#   P-hI    host I (I = 0 … N-1): veth0 = 10.200.I.2/24, default via 10.200.I.1
#           the router's end of that link: to-hI = 10.200.I.1/24
# Addresses repeat across testbeds; each testbed lives in its own namespaces,
# and both veth ends are created directly inside them, so parallel testbeds
# never collide.
#
# Shaping goes on P-r's to-h(N-1): the port toward the last host, where the
# traffic of all other hosts converges (the switch port of the YARP paper's
# Fig. 4(b)); it shapes the direction toward the last host only.
#   --delay MS       netem delay MS ms (needs CONFIG_NET_SCH_NETEM in the kernel)
#   --rate KBIT      htb rate limit of the link
#   --dscp-priority  htb classes by DSCP (u32 `match ip dsfield TOS 0xfc`):
#                      1:10 prio 0  DSCP 36 AF42 (TOS 0x90), 44 VA (0xb0)
#                      1:20 prio 1  everything else (default class)
#                      1:30 prio 2  DSCP 10 AF11 (TOS 0x28)
#                    normal and low are guaranteed 1 % of the rate each, high
#                    the rest; all may borrow up to the full rate, high first.
#                    Without --rate the classes get 10 Gbit/s (order, no limit).
#   --shape-host I   put that shaping on host I's own veth0 (everything host I
#                    sends) instead of the router's port: congestion in the
#                    sender's network driver, the YARP paper's Fig. 4(a)
#   --mtu-packets    gso_max_segs 1 on every host's veth0: TCP hands the
#                    qdiscs one-MTU packets, as a NIC sends them and a switch
#                    port queues them (not 64 KiB offload "super-packets")
#
# Use it:
#   P=$(scripts/netns.sh up --hosts 3 --rate 10000 --dscp-priority | sed -n 's/^prefix=//p')
#   ip netns exec $P-h0 ping -Q 0x90 -c 3 10.200.2.2
#   tc -n $P-r -s class show dev to-h2      # packets per class
#   scripts/netns.sh down $P
# If `up` fails half-way, a trap removes what it made.
# Exit status: 0 ok, 1 failure (message on stderr), 2 unknown subcommand or
# option, 3 (check) a qdisc is missing.
set -euo pipefail

STEM=twtb-
MAX_HOSTS=64
UNLIMITED_KBIT=10000000

die() { echo "netns.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

need_root() {
    if [[ $(id -u) -ne 0 ]]; then
        die "needs root (network namespaces, veth pairs, tc): run it with sudo, or as root in CI"
    fi
    command -v ip >/dev/null || die "ip not found: apt-get install -y iproute2"
    command -v tc >/dev/null || die "tc not found: apt-get install -y iproute2"
}

# All testbed namespaces, one per line.
testbed_namespaces() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep "^$STEM" | sort || true
}

# The namespaces of testbed $1 (P-r and P-hN, nothing else).
namespaces_of() {
    local prefix=$1 ns
    for ns in $(testbed_namespaces); do
        if [[ $ns =~ ^${prefix}-(r|h[0-9]+)$ ]]; then echo "$ns"; fi
    done
}

# Kill what runs in namespace $1, then delete it (its veth ends go with it).
remove_ns() {
    local ns=$1 pids tries=0
    while pids=$(ip netns pids "$ns" 2>/dev/null) && [[ -n $pids ]] && (( tries++ < 100 )); do
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null || true
        sleep 0.05
    done
    ip netns del "$ns"
}

down_prefix() {
    local prefix=$1 ns found=0
    for ns in $(namespaces_of "$prefix"); do
        remove_ns "$ns"
        found=1
    done
    return $(( found ? 0 : 1 ))
}

# Is $1 a whole number in $2..=$3?
in_range() { [[ $1 =~ ^[0-9]{1,9}$ ]] && (( $1 >= $2 && $1 <= $3 )); }

# prefix: a chosen NAME becomes twtb-NAME; letters, digits and '-' only.
full_prefix() {
    local p=$1
    [[ $p == "$STEM"* ]] || p="$STEM$p"
    [[ $p =~ ^[A-Za-z0-9-]+$ && ${#p} -le 40 ]] || die "bad prefix '$1': letters, digits and '-', at most 40 characters"
    echo "$p"
}

cmd_up() {
    local prefix="${STEM}sh$$" hosts=2 delay_ms="" rate="" dscp=0 shape_host="" mtu=0
    while (( $# )); do
        case $1 in
            --prefix) prefix=$(full_prefix "${2:?--prefix NAME}"); shift 2 ;;
            --hosts) hosts=${2:?--hosts N}; shift 2 ;;
            --delay) delay_ms=${2:?--delay MS}; shift 2 ;;
            --rate) rate=${2:?--rate KBIT}; shift 2 ;;
            --dscp-priority) dscp=1; shift ;;
            --shape-host) shape_host=${2:?--shape-host I}; shift 2 ;;
            --mtu-packets) mtu=1; shift ;;
            -h|--help) usage ;;
            *) echo "netns.sh up: unknown option '$1'" >&2; usage ;;
        esac
    done
    in_range "$hosts" 1 "$MAX_HOSTS" || die "--hosts $hosts is out of range 1..=$MAX_HOSTS"
    if [[ -n $delay_ms ]] && ! in_range "$delay_ms" 1 10000; then
        die "--delay $delay_ms is out of range 1..=10000 (ms)"
    fi
    if [[ -n $rate ]] && ! in_range "$rate" 8 "$UNLIMITED_KBIT"; then
        die "--rate $rate is out of range 8..=$UNLIMITED_KBIT (kbit/s)"
    fi
    if [[ -n $shape_host ]] && ! in_range "$shape_host" 0 $(( hosts - 1 )); then
        die "--shape-host $shape_host is not a host of this testbed (0..=$(( hosts - 1 )))"
    fi
    need_root
    [[ -z $(namespaces_of "$prefix") ]] || die "testbed $prefix exists already (scripts/netns.sh down $prefix)"

    # From here on, a failure removes everything made so far.
    # shellcheck disable=SC2064 # expand now: $prefix is local
    trap "echo 'netns.sh: up failed, removing $prefix' >&2; down_prefix '$prefix' || true; exit 1" EXIT
    trap 'exit 1' INT TERM

    local r="$prefix-r" i h
    ip netns add "$r"
    ip -n "$r" link set lo up
    ip netns exec "$r" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
    for (( i = 0; i < hosts; i++ )); do
        h="$prefix-h$i"
        ip netns add "$h"
        ip link add veth0 netns "$h" type veth peer name "to-h$i" netns "$r"
        ip -n "$r" addr add "10.200.$i.1/24" dev "to-h$i"
        ip -n "$r" link set "to-h$i" up
        ip -n "$h" addr add "10.200.$i.2/24" dev veth0
        ip -n "$h" link set veth0 up
        ip -n "$h" link set lo up
        ip -n "$h" route add default via "10.200.$i.1"
        if (( mtu )); then ip -n "$h" link set dev veth0 gso_max_segs 1; fi
    done

    local dev="to-h$(( hosts - 1 ))" shaped_ns=$r
    if [[ -n $shape_host ]]; then
        dev=veth0
        shaped_ns="$prefix-h$shape_host"
    fi
    local tcr=(tc -n "$shaped_ns")
    leaf() { # parent handle
        if [[ -n $delay_ms ]]; then
            "${tcr[@]}" qdisc add dev "$dev" parent "$1" handle "$2": netem delay "${delay_ms}ms" limit 10000
        else
            "${tcr[@]}" qdisc add dev "$dev" parent "$1" handle "$2": pfifo limit 1000
        fi
    }
    if [[ -z $rate && $dscp -eq 0 ]]; then
        if [[ -n $delay_ms ]]; then
            "${tcr[@]}" qdisc add dev "$dev" root handle 1: netem delay "${delay_ms}ms" limit 10000
        fi
    else
        local link=${rate:-$UNLIMITED_KBIT}
        "${tcr[@]}" qdisc add dev "$dev" root handle 1: htb default 20
        "${tcr[@]}" class add dev "$dev" parent 1: classid 1:1 htb rate "${link}kbit" ceil "${link}kbit" quantum 1514
        if (( dscp )); then
            local floor=$(( link / 100 > 1 ? link / 100 : 1 ))
            "${tcr[@]}" class add dev "$dev" parent 1:1 classid 1:10 htb rate "$(( link - 2 * floor ))kbit" ceil "${link}kbit" prio 0 quantum 1514
            leaf 1:10 10
            "${tcr[@]}" class add dev "$dev" parent 1:1 classid 1:20 htb rate "${floor}kbit" ceil "${link}kbit" prio 1 quantum 1514
            leaf 1:20 20
            "${tcr[@]}" class add dev "$dev" parent 1:1 classid 1:30 htb rate "${floor}kbit" ceil "${link}kbit" prio 2 quantum 1514
            leaf 1:30 30
            "${tcr[@]}" filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip dsfield 0x90 0xfc flowid 1:10
            "${tcr[@]}" filter add dev "$dev" parent 1: protocol ip prio 2 u32 match ip dsfield 0xb0 0xfc flowid 1:10
            "${tcr[@]}" filter add dev "$dev" parent 1: protocol ip prio 3 u32 match ip dsfield 0x28 0xfc flowid 1:30
        else
            "${tcr[@]}" class add dev "$dev" parent 1:1 classid 1:20 htb rate "${link}kbit" ceil "${link}kbit" prio 0 quantum 1514
            leaf 1:20 20
        fi
    fi
    trap - EXIT INT TERM

    echo "prefix=$prefix"
    echo "router=$r shaped=$shaped_ns:$dev"
    for (( i = 0; i < hosts; i++ )); do
        echo "host$i=$prefix-h$i addr=10.200.$i.2 gateway=10.200.$i.1"
    done
    echo "run:    ip netns exec $prefix-h0 ping -c 3 10.200.$(( hosts - 1 )).2"
    echo "remove: $0 down $prefix"
}

cmd_down() {
    [[ $# -eq 1 ]] || usage
    need_root
    if [[ $1 == --all ]]; then
        local ns
        for ns in $(testbed_namespaces); do remove_ns "$ns"; done
        return 0
    fi
    local prefix
    prefix=$(full_prefix "$1")
    down_prefix "$prefix" || die "no testbed $prefix (scripts/netns.sh status lists them)"
}

cmd_status() {
    [[ $# -le 1 ]] || usage
    local all ns
    if [[ $# -eq 1 ]]; then
        all=$(namespaces_of "$(full_prefix "$1")")
    else
        all=$(testbed_namespaces)
    fi
    if [[ -z $all ]]; then
        echo "no testbed namespaces (${STEM}*)"
        return 0
    fi
    for ns in $all; do
        printf '%s\t%s\n' "$ns" "$(ip -n "$ns" -4 -br addr show 2>/dev/null | awk '$1 != "lo" {printf "%s %s  ", $1, $3}')"
    done
}

cmd_check() {
    need_root
    echo "root: yes; ip: $(command -v ip); tc: $(command -v tc)"
    local kinds=("$@") ns="${STEM}check$$" kind missing=0 err
    (( ${#kinds[@]} )) || kinds=(htb netem)
    # shellcheck disable=SC2064 # expand now: $ns is local
    trap "ip netns del '$ns' 2>/dev/null || true" EXIT
    ip netns add "$ns"
    ip -n "$ns" link add chk0 type veth peer name chk1
    for kind in "${kinds[@]}"; do
        local args=("$kind")
        case $kind in
            netem) args=(netem delay 1ms) ;;
            tbf) args=(tbf rate 1mbit burst 16kb latency 50ms) ;;
        esac
        if err=$(tc -n "$ns" qdisc replace dev chk0 root "${args[@]}" 2>&1); then
            echo "qdisc $kind: yes"
        else
            echo "qdisc $kind: NO ($err; the kernel needs CONFIG_NET_SCH_${kind^^} or the module sch_$kind)"
            missing=3
        fi
    done
    return "$missing"
}

(( $# )) || usage
sub=$1; shift
case $sub in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    check) cmd_check "$@" ;;
    -h|--help|help) usage ;;
    *) echo "netns.sh: unknown subcommand '$sub'" >&2; usage ;;
esac
