#!/usr/bin/env bash
# Fuzzes the decoders of untrusted bytes, each target for SECONDS (default 60), one after
# the other on one core:
#   ipvs_message    a generic-netlink IPVS message (crates/ipvs-netlink)
#   ctnetlink       a ctnetlink datagram, as the conntrack cleanup reads it (crates/agent)
#   manifests_yaml  a --manifests YAML file (crates/agent)
#   manifests_json  a --manifests JSON file (crates/agent)
#
#   tests/fuzz.sh [SECONDS] [TARGET...]
#
# Stable Rust: cargo-fuzz (installed from crates.io when missing) builds with libFuzzer's
# coverage instrumentation and `--sanitizer none` (AddressSanitizer needs nightly, and the
# decoders are `forbid(unsafe_code)`), in release with debug assertions and overflow checks.
# Each target starts from its seed corpus and regression files
# (CRATE/tests/fuzz-corpus/TARGET, CRATE/tests/fuzz-regressions/TARGET) and keeps what it
# learns in fuzz/corpus/TARGET (not versioned). Every crash is copied to
# CRATE/tests/fuzz-regressions/TARGET, where `cargo test` replays it from then on; the
# script then exits 1. FUZZ_JOBS=N runs N fuzzing processes per target (default 1).
set -euo pipefail

seconds=${1:-60}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
target_dir=${FUZZ_TARGET_DIR:-$root/target/fuzz}
jobs=${FUZZ_JOBS:-1}

declare -A crate=(
    [ipvs_message]=crates/ipvs-netlink
    [ctnetlink]=crates/agent
    [manifests_yaml]=crates/agent
    [manifests_json]=crates/agent
)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(ipvs_message ctnetlink manifests_yaml manifests_json)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cd "$root/fuzz"
cargo fuzz build --sanitizer none --target-dir "$target_dir"

new=0
for t in "${targets[@]}"; do
    c=${crate[$t]:?unknown target $t}
    seeds=$root/$c/tests/fuzz-corpus/$t
    regressions=$root/$c/tests/fuzz-regressions/$t
    mkdir -p "corpus/$t" "artifacts/$t" "$regressions"
    dict=()
    case $t in manifests_*) dict=(-dict=dict/manifests.dict) ;; esac
    echo "== $t: $seconds s"
    # Fork mode with -ignore_crashes: a crash is recorded and fuzzing goes on.
    cargo fuzz run --sanitizer none --target-dir "$target_dir" "$t" \
        "corpus/$t" "$seeds" "$regressions" -- \
        -max_total_time="$seconds" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
        -ignore_ooms=1 -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -artifact_prefix="artifacts/$t/" "${dict[@]}" 2>&1 |
        grep -E '^#[0-9]+: .*DONE|^#[0-9]+: cov|INFO: fuzzed for|crash-|panicked at' | tail -n 40 || true
    for f in "artifacts/$t"/crash-* "artifacts/$t"/timeout-* "artifacts/$t"/oom-*; do
        [ -e "$f" ] || continue
        name=$(basename "$f")
        if [ ! -e "$regressions/$name" ]; then
            cp "$f" "$regressions/$name"
            echo "new: $c/tests/fuzz-regressions/$t/$name"
            new=$((new + 1))
        fi
    done
done

if [ "$new" -gt 0 ]; then
    echo "$new new crashing input(s): fix the decoder, keep the file; cargo test replays it" >&2
    exit 1
fi
echo "no crash"
