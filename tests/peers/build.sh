#!/usr/bin/env bash
# Builds the upstream test peers from their pinned Go modules (go.mod, go.sum; the Go module
# proxy only, nothing vendored) into target/peers: kube-apiserver, kube-proxy and kubectl of
# k8s.io/kubernetes v1.37.2, and etcd (etcd/main.go around go.etcd.io/etcd/server/v3/embed).
# Static (CGO_ENABLED=0). Cached: a build is skipped when target/peers/STAMP matches the hash
# of the inputs and the Go version. Prints the directory on its last line.
# Usage: tests/peers/build.sh [--force]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/target/peers"
mkdir -p "$out"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
if ! command -v go >/dev/null; then
    echo "peers: Go (1.26 or newer) is needed to build the upstream peers; it is not on PATH" >&2
    exit 1
fi
stamp=$( (go version; cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go" "$here/build.sh") | sha256sum | cut -c1-16)
bins=(kube-apiserver kube-proxy kubectl etcd)
if [[ "${1:-}" != --force && -f "$out/STAMP" && "$(cat "$out/STAMP")" == "$stamp" ]]; then
    ok=1; for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || ok=0; done
    if [[ $ok == 1 ]]; then echo "peers: cached ($stamp)" >&2; echo "$out"; exit 0; fi
fi
start=$(date +%s)
cd "$here"
echo "peers: downloading modules" >&2
go mod download
echo "peers: building ${bins[*]} ($(go version | cut -d' ' -f3))" >&2
# The version the programs report (kubectl version, the API server's /version, kube-proxy's logs).
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=v1.37.2 -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean"
go build -trimpath -ldflags="$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubectl \
    ./etcd
echo "$stamp" > "$out/STAMP"
echo "peers: built in $(( $(date +%s) - start ))s" >&2
echo "$out"
