#!/bin/bash
# Builds MetalLB's controller and speaker (v0.16.1, layer 2: the speaker without FRR) from
# tests/cluster/metallb/go.mod into target/cluster/metallb, for run.sh's --lb metallb only:
# the test command's cluster never runs them, so tests/cluster/build.sh leaves them out.
# Static (CGO_ENABLED=0), as MetalLB's own images carry them. Cached: skipped when
# target/cluster/metallb/STAMP matches the inputs and the Go version. Prints the directory.
#   tests/cluster/metallb/build.sh [--force]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$root/target/cluster/metallb
mkdir -p "$out"
stamp=$( (go version; cat "$here/go.mod" "$here/go.sum" "$here/build.sh") | sha256sum | cut -c1-16)
if [[ "${1:-}" != --force && -f "$out/STAMP" && "$(cat "$out/STAMP")" == "$stamp" &&
    -x "$out/controller" && -x "$out/speaker" ]]; then
    echo "metallb: programs cached ($stamp)" >&2
    echo "$out"
    exit 0
fi
start=$(date +%s)
echo "metallb: building controller and speaker v0.16.1" >&2
cd "$here"
CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags="-s -w" -o "$out/" \
    go.universe.tf/metallb/controller go.universe.tf/metallb/speaker
echo "$stamp" >"$out/STAMP"
echo "metallb: built in $(($(date +%s) - start))s" >&2
echo "$out"
