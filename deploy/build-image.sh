#!/bin/sh
# Builds the kube-proxy-ipvs image from the repository's sources, with podman, buildah or
# docker (the first found; BUILDER=docker to choose): deploy/Containerfile compiles the agent
# in a builder stage, so this machine needs no Rust toolchain. The build context is the
# repository, less what .dockerignore leaves out.
#
#   deploy/build-image.sh [--tag TAG] [--save FILE] [-- extra build args]
#
#   --tag     the image name (default: localhost/kube-proxy-ipvs:dev, as deploy/ uses)
#   --save    also write a docker-archive tarball, for `ctr -n k8s.io images import FILE`
#             on nodes without a registry (the vagrant cluster does this)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
tag=localhost/kube-proxy-ipvs:dev
save=

while [ $# -gt 0 ]; do
    case $1 in
        --tag) tag=$2; shift 2 ;;
        --save) save=$2; shift 2 ;;
        --) shift; break ;;
        -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

builder=${BUILDER:-}
if [ -z "$builder" ]; then
    for b in podman buildah docker; do
        if command -v "$b" >/dev/null 2>&1; then builder=$b; break; fi
    done
fi
if [ -z "$builder" ]; then
    echo "no image builder: install podman, buildah or docker" >&2
    exit 1
fi

echo "building $tag with $builder from $repo"
case $builder in
    buildah) buildah bud -f "$here/Containerfile" -t "$tag" "$@" "$repo" ;;
    *) "$builder" build -f "$here/Containerfile" -t "$tag" "$@" "$repo" ;;
esac

if [ -n "$save" ]; then
    rm -f "$save"
    case $builder in
        docker) docker save -o "$save" "$tag" ;;
        podman) podman save --format docker-archive -o "$save" "$tag" ;;
        buildah) buildah push "$tag" "docker-archive:$save:$tag" ;;
    esac
    echo "saved $tag to $save"
fi
