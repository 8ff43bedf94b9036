#!/usr/bin/env bash
# scripts/test.sh [CARGO TEST ARGS…] — the README's test command: the
# workspace's tests (`cargo test --workspace`), with what they need.
#
# Some tests drive real tools or the kernel (docs/testbed.md):
#   - the network-namespace tests run as root and need ping, tcpdump and nft;
#   - the MQTT tests drive mosquitto's clients (docs/mqtt.md);
#   - the dashboard test loads the page in headless Chromium (docs/metrics.md).
# As root on Debian/Ubuntu this script installs what is missing (apt-get);
# otherwise it says what is missing and how to get it, and the tests that
# need it fail naming it (they never pass silently). A kernel without the
# netem qdisc cannot run the testbed's delay test: the script checks and then
# lets that one test skip (TAGWIRE_TESTBED_SKIP_NETEM=1), saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

root=0
[[ $(id -u) -eq 0 ]] && root=1
missing=()
command -v ping >/dev/null || missing+=(iputils-ping)
command -v tcpdump >/dev/null || missing+=(tcpdump)
command -v nft >/dev/null || missing+=(nftables)
command -v mosquitto_pub >/dev/null || missing+=(mosquitto-clients)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
if (( ${#missing[@]} )); then
    if (( root )) && command -v apt-get >/dev/null; then
        echo "== apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "NOTE: the tests that drive ${missing[*]} will fail until you install them" >&2
        echo "      (Debian/Ubuntu: sudo apt-get install ${missing[*]}), or run this script as root." >&2
    fi
fi
if (( root )); then
    netem=0
    scripts/netns.sh check netem || netem=$?
    if (( netem == 3 )); then
        echo "NOTE: this kernel has no netem qdisc: the testbed's delay test is skipped (TAGWIRE_TESTBED_SKIP_NETEM=1)"
        export TAGWIRE_TESTBED_SKIP_NETEM=1
    fi
else
    echo "NOTE: not root: the network-namespace tests (docs/testbed.md) will fail saying they need root;" >&2
    echo "      run \`sudo scripts/test.sh\` to run them too." >&2
fi
echo "== cargo test --workspace $*"
exec cargo test --workspace "$@"
