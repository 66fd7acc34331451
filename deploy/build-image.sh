#!/bin/sh
# Builds the kube-proxy-ipvs image from a release binary, with podman, buildah or docker
# (the first found; BUILDER=docker to choose). The build context is a temporary directory
# holding only the binary and the init script, not the repository.
#
#   deploy/build-image.sh [--binary PATH] [--tag TAG] [--save FILE] [-- extra build args]
#
#   --binary  the agent (default: target/release/kube-proxy-ipvs; build it with
#             `cargo build --release -p kube-proxy-ipvs-agent` on Debian 12 or older glibc)
#   --tag     the image name (default: localhost/kube-proxy-ipvs:dev, as deploy/ uses)
#   --save    also write a docker-archive tarball, for `ctr -n k8s.io images import FILE`
#             on nodes without a registry (the vagrant cluster does this)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
binary=$repo/target/release/kube-proxy-ipvs
tag=localhost/kube-proxy-ipvs:dev
save=

while [ $# -gt 0 ]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --save) save=$2; shift 2 ;;
        --) shift; break ;;
        -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ ! -x "$binary" ]; then
    echo "no agent binary at $binary: run cargo build --release -p kube-proxy-ipvs-agent, or pass --binary" >&2
    exit 1
fi

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

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/kube-proxy-ipvs"
cp "$here/init-sysctls.sh" "$context/init-sysctls.sh"
chmod 0755 "$context/kube-proxy-ipvs" "$context/init-sysctls.sh"

echo "building $tag with $builder from $binary"
case $builder in
    buildah) buildah bud -f "$here/Containerfile" -t "$tag" "$@" "$context" ;;
    *) "$builder" build -f "$here/Containerfile" -t "$tag" "$@" "$context" ;;
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
