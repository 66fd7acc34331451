#!/bin/sh
# Runs on the host before `vagrant up`, `reload` and `provision` (a Vagrant trigger): copies
# the agent binary, and an image archive if KPI_IMAGE_TAR names one, into vagrant/.build/,
# which the rsync synced folder takes to every node as /src/vagrant/.build/.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
binary=${KPI_BINARY:-$repo/target/release/kube-proxy-ipvs}
build=$here/.build

mkdir -p "$build"
if [ ! -x "$binary" ]; then
    echo "no agent binary at $binary" >&2
    echo "build it first: cargo build --release -p kube-proxy-ipvs-agent (on Debian 12), or set KPI_BINARY" >&2
    exit 1
fi
cp "$binary" "$build/kube-proxy-ipvs"
echo "staged $binary"

rm -f "$build/kube-proxy-ipvs.tar"
if [ -n "${KPI_IMAGE_TAR:-}" ]; then
    cp "$KPI_IMAGE_TAR" "$build/kube-proxy-ipvs.tar"
    echo "staged $KPI_IMAGE_TAR"
fi
