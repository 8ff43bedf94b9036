#!/usr/bin/env bash
# Runs a cargo-fuzz target of fuzz/ for a while.
#
#   scripts/fuzz.sh [TARGET] [SECONDS]     (defaults: frame_decoder 60)
#
# Targets (fuzz/fuzz_targets/TARGET.rs):
#   frame_decoder  wire frames and events (tagwire-proto)
#   filter_parser  filter and mapping-filter compiler, index vs filter
#   tag_pattern    patterns and tags, TagTable trie vs the naive matcher,
#                  Pattern::covers sound
#   routes_ops     sequences of changes to Routes vs a levels_pass model
#   router_config  the daemon's TOML config file (RouterConfig), and the
#                  Authenticator built from its [auth] and [[acl]] parts
#   reservations   the reservations file a router reads at start (starts
#                  and stops a router on each input)
#   qos_property   QoS properties at levels (QosLayer::set), resolve,
#                  change and Resolved::for_event vs the event's layer
#   place_model    placement topology files (TOML and JSON), exhaustive
#                  search vs MIP on small valid instances (tagwire-place)
#   shm_region     a shared-memory region's header and control area (pin
#                  rows included) scribbled over by a peer (attach, read,
#                  adopt pins), and the events' shared-memory reference
#                  (tagwire-shm, proto); inputs up to 16 KiB
#   metrics_credential  the token of a metrics/dashboard request
#                  (Authorization header bytes and query string)
#   admin_request  admin request bodies (AdminRequest::parse) and replies
#                  (AdminReply::parse) round-tripping through to_json
#   mqtt_packet    an MQTT client's bytes into the MQTT listener's parser
#                  (CONNECT and version, then packets of that version) and
#                  its topic/filter mapping (tagwire-router's mqtt module)
#   store_record   a durable store record read back from the database
#                  (tagwire-core's store module)
#   publish_ack    a client's PublishReliable and a daemon's PublishAck
#                  frames (protocol version 4) into the reliability windows
#                  (seeds: frame_decoder's)
#   deliver_ack    a daemon's DeliverReliable and a subscriber's DeliverAck
#                  frames (protocol version 4) into the delivery windows
#                  (seeds: frame_decoder's)
#   client_piece   a client's PublishPiece and a daemon's DeliverPiece and
#                  PieceResume frames (protocol version 5) into the bounded
#                  reassembler (seeds: frame_decoder's)
#   link_fragment  a peer daemon's Fragment/FragmentResume frames into the
#                  bounded reassembler and a sender's resume point
#                  (tagwire-core's fragment module)
#   link_compressed  a peer daemon's ForwardCompressed/ReliableCompressed
#                  frames into the bounded decompressor (lz4, zstd;
#                  tagwire-core's compress module)
#   datagram       a UDP datagram (header, frames, padding, cookie,
#                  report) and the sequence window (tagwire-proto, core)
#
# Installs cargo-fuzz if it is missing, writes the target's seed corpus (for
# frame_decoder and publish_ack: the test vectors of docs/protocol.md; for admin_request
# the JSON test vectors of docs/admin.md; for the others the
# files in fuzz/seeds/TARGET/, plus examples/*.toml for place_model and the
# example file of docs/configuration.md for router_config), then fuzzes.
# Uses the nightly toolchain if rustup has one, else stable with
# RUSTC_BOOTSTRAP=1; uses AddressSanitizer unless it cannot be built here
# (then --sanitizer none).
# Environment: FUZZ_TOOLCHAIN (nightly|stable) forces a toolchain,
# FUZZ_SANITIZER (address|none|...) forces a sanitizer,
# FUZZ_TARGET_DIR overrides the build directory (default fuzz/target),
# FUZZ_JOBS runs that many fuzzing processes (default 1).
# Exit status: 0 if no crash was found; a crash input is left in
# fuzz/artifacts/TARGET/ and the status is non-zero.
set -euo pipefail

target="${1:-frame_decoder}"
seconds="${2:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${FUZZ_TARGET_DIR:-$root/fuzz/target}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

# Toolchain: cargo-fuzz needs nightly flags (-Z sanitizer, ...).
toolchain="${FUZZ_TOOLCHAIN:-}"
if [[ -z "$toolchain" ]]; then
    if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
        toolchain=nightly
    else
        toolchain=stable
    fi
fi
if [[ "$toolchain" == nightly ]]; then
    fuzz=(cargo +nightly fuzz)
else
    echo "fuzz.sh: using the stable toolchain with RUSTC_BOOTSTRAP=1" >&2
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

# Seed corpus.
corpus="$root/fuzz/corpus/$target"
mkdir -p "$corpus"
case "$target" in
    frame_decoder|publish_ack|deliver_ack|client_piece)
        TAGWIRE_FUZZ_CORPUS_DIR="$corpus" \
            cargo test --quiet --manifest-path "$root/Cargo.toml" -p tagwire-proto \
            --test fuzz_seed_corpus -- --ignored --nocapture
        ;;
    admin_request)
        TAGWIRE_FUZZ_CORPUS_DIR="$corpus" \
            cargo test --quiet --manifest-path "$root/Cargo.toml" -p tagwire-proto \
            --test admin_vectors -- --ignored --nocapture write_admin_fuzz_seed_corpus
        ;;
    *)
        if [[ -d "$root/fuzz/seeds/$target" ]]; then
            cp "$root/fuzz/seeds/$target"/* "$corpus"/
        else
            echo "fuzz.sh: no seeds for $target; starting from $corpus as it is" >&2
        fi
        ;;
esac
case "$target" in
    place_model)
        cp "$root"/examples/*.toml "$corpus"/
        ;;
    router_config)
        # The ```toml block of docs/configuration.md's "File format".
        awk '/^```toml$/ { on = 1; next } /^```$/ { on = 0 } on' \
            "$root/docs/configuration.md" >"$corpus/configuration-md.toml"
        ;;
esac

cd "$root/fuzz"
build_flags=(--debug-assertions --target-dir "$target_dir")
sanitizer="${FUZZ_SANITIZER:-}"
if [[ -z "$sanitizer" ]]; then
    if "${fuzz[@]}" build "${build_flags[@]}" "$target"; then
        sanitizer=address
    else
        echo "fuzz.sh: build with AddressSanitizer failed; retrying with --sanitizer none" >&2
        sanitizer=none
    fi
fi
echo "fuzz.sh: fuzzing $target for ${seconds}s (sanitizer: $sanitizer)" >&2
libfuzzer_flags=(-max_total_time="$seconds" -timeout=10 -print_final_stats=1)
if [[ $target == shm_region ]]; then
    # The pin rows start past the header page: inputs must reach them.
    libfuzzer_flags+=(-max_len=16384)
fi
if [[ "${FUZZ_JOBS:-1}" -gt 1 ]]; then
    # Parallel workers log to fuzz-N.log in fuzz/.
    libfuzzer_flags+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
fi
"${fuzz[@]}" run "${build_flags[@]}" --sanitizer "$sanitizer" "$target" "$corpus" -- \
    "${libfuzzer_flags[@]}"
