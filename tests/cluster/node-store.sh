#!/bin/bash
# containerd's image store for the lab nodes, filled on the host: a containerd v2.2 (the
# nodes' own build) imports every image of tests/cluster/images.sh into the k8s.io namespace
# and unpacks it with the overlayfs snapshotter, and its root directory is packed into one
# tarball that node.sh unpacks into the node's /var/lib/containerd before containerd starts.
# Why: under the lab's software emulation `ctr images import` takes about a minute per 60 MB
# (hashing and unpacking in emulated Go code), minutes per node per boot; unpacking the
# finished store is the kernel copying memory. The images are the same bytes either way.
# Cached: rebuilt only when the image tarballs change. Prints the tarball's path.
#
#   node-store.sh IMAGES_DIR CONTAINERD_BIN_DIR [MORE_IMAGES_DIR...]
set -euo pipefail
images=$(cd "$1" && pwd) bin=$(cd "$2" && pwd)
tars=("$images"/*.tar)
for d in "${@:3}"; do tars+=("$(cd "$d" && pwd)"/*.tar); done
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/target/cluster/node-store.tar
stamp=$( (ls -l --time-style=+%s "${tars[@]}"; cat "$0") | sha256sum | cut -c1-16)
if [[ -f "$out" && -f "$out.stamp" && "$(cat "$out.stamp")" == "$stamp" ]]; then
    echo "cluster: node image store cached ($stamp)" >&2
    echo "$out"
    exit 0
fi
work=$(mktemp -d "$root/target/cluster/store.XXXXXX")
cd "$work"
mkdir -p root state
cat >config.toml <<EOF
version = 3
root = "$work/root"
state = "$work/state"
[grpc]
  address = "$work/state/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
EOF
"$bin/containerd" --config config.toml >containerd.log 2>&1 &
pid=$!
# shellcheck disable=SC2317 # the EXIT trap
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap stop EXIT
# A stopped run (run.sh stops the previous one) still removes its half-filled store.
trap 'exit 1' INT TERM HUP
ctr() { "$bin/ctr" -a "$work/state/containerd.sock" -n k8s.io "$@"; }
for _ in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
for image in "${tars[@]}"; do
    # (ctr warns that this host's cgroup v1 is deprecated: not the nodes' concern)
    ctr images import --snapshotter overlayfs "$image" >/dev/null 2>import.log ||
        { cat import.log >&2; exit 1; }
done
names=$(ctr images ls -q 2>/dev/null | grep -vc '^sha256:')
kill "$pid"
wait "$pid" 2>/dev/null || true
tar -C root --numeric-owner --xattrs --xattrs-include='trusted.*' -cf "$out.new" .
mv "$out.new" "$out"
echo "$stamp" >"$out.stamp"
echo "cluster: node image store: $names images, $(du -h "$out" | cut -f1)" >&2
echo "$out"
