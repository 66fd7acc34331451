#!/usr/bin/env bash
# tests/setup.sh on a machine without the toolchains, or with old ones: it must stop at once,
# before apt-get, and say what to install. Stubs stand in for `rustc` and `go`.
set -euo pipefail
cd "$(dirname "$0")/.."
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
mkdir -p "$stubs/old" "$stubs/tools"
# Only the plain tools setup.sh's first lines use: a machine's own rustc or go stays out.
for tool in bash dirname sort head sed awk grep; do ln -s "$(command -v "$tool")" "$stubs/tools/$tool"; done
printf '#!/bin/sh\necho "rustc 1.80.0 (0000000 2024-07-21)"\n' >"$stubs/old/rustc"
printf '#!/bin/sh\necho go1.22.1\n' >"$stubs/old/go"
chmod +x "$stubs/old/rustc" "$stubs/old/go"
ln -s "$(command -v cargo)" "$stubs/old/cargo"
failed=0
expect() { # NAME PATH WORDS...: setup exits non-zero and its output holds each word
    local name=$1 path=$2 out rc=0
    shift 2
    out=$(env PATH="$path" "$stubs/tools/bash" tests/setup.sh 2>&1) || rc=$?
    if [[ $rc == 0 ]]; then
        echo "check-setup: $name: setup.sh succeeded" >&2
        failed=1
    fi
    for word in "$@"; do
        grep -qF -- "$word" <<<"$out" || {
            echo "check-setup: $name: no \"$word\" in: $out" >&2
            failed=1
        }
    done
}
expect "no toolchains" "$stubs/tools" "Rust is missing" "rustup" "Go is missing" "https://go.dev/dl/"
expect "old toolchains" "$stubs/old:$stubs/tools" "Rust 1.80.0 is older than the workspace's rust-version" \
    "Go 1.22.1 is older than"
[[ $failed == 0 ]] && echo "check-setup: a missing or old Rust or Go stops tests/setup.sh with its fix"
exit "$failed"
