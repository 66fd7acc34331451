#!/bin/sh
# Runs on the host before `vagrant up`, `reload` and `provision` (a Vagrant trigger): copies an
# image archive, if KPI_IMAGE_TAR names one, into vagrant/.build/, which the rsync synced
# folder takes to every node as /src/vagrant/.build/; without one, each node builds the image
# from the sources.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=$here/.build

mkdir -p "$build"
rm -f "$build/kube-proxy-ipvs.tar"
if [ -n "${KPI_IMAGE_TAR:-}" ]; then
    cp "$KPI_IMAGE_TAR" "$build/kube-proxy-ipvs.tar"
    echo "staged $KPI_IMAGE_TAR"
fi
