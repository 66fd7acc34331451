#!/bin/sh
# Builds the kube-proxy-ipvs image from the repository's sources, with podman, buildah or
# docker (the first that works; BUILDER=docker to choose): deploy/Containerfile compiles the agent
# in a builder stage, so this machine needs no Rust toolchain. The build context is the
# repository, less what .dockerignore leaves out.
#
# Without any of them (or BUILDER=rootfs), the same image is made another way, on a Debian
# bookworm machine with Rust and libipset-dev: the agent from `cargo build --release --locked`
# here (bookworm's glibc, as the Containerfile's builder stage), the Containerfile's runtime
# packages installed by mmdebstrap (deploy/debian-rootfs.sh: minbase, cached under
# target/image-cache, one layer) and the binary and the init script as a second layer,
# checked with `kube-proxy-ipvs --version` chrooted in the result, and written as a
# docker-archive by deploy/oci-archive.py (--save FILE, else target/kube-proxy-ipvs-image.tar).
#
#   deploy/build-image.sh [--tag TAG] [--save FILE] [--arch amd64|arm64] [-- extra build args]
#   deploy/build-image.sh --packages      the runtime packages (the Containerfile's, and
#                                         EXTRA_PACKAGES), one line
#
#   --tag     the image name (default: localhost/kube-proxy-ipvs:dev, as deploy/ uses)
#   --arch    the image's architecture (default: this machine's). With podman, buildah or
#             docker: --platform linux/ARCH (the Containerfile then builds under their
#             emulation; register qemu-user with binfmt_misc first). The rootfs way
#             cross-compiles the agent (cargo --target aarch64-unknown-linux-gnu: Debian's
#             gcc-aarch64-linux-gnu and libipset-dev:arm64, which tests/setup.sh installs; see
#             .cargo/config.toml) and builds the arm64 Debian tree under qemu-user
#             (deploy/debian-rootfs.sh, DEBIAN_ARCH).
#   --save    also write a docker-archive tarball, for `ctr -n k8s.io images import FILE`
#             on nodes without a registry (the vagrant cluster does this)
#   AGENT_BINARY=PATH   (rootfs only) put this agent binary in the image instead of building
#             one with cargo (the test command gives the lab tests' build, so that CI does
#             not compile the agent a third time)
#   EXTRA_PACKAGES="ipset ipvsadm"   (or `-- --build-arg EXTRA_PACKAGES="ipset ipvsadm"`)
#             more Debian packages in the image; with rootfs, other build args are ignored
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
tag=localhost/kube-proxy-ipvs:dev
save=
packages_only=0
host_arch=$(dpkg --print-architecture 2>/dev/null || uname -m | sed 's/x86_64/amd64/;s/aarch64/arm64/')
arch=$host_arch

while [ $# -gt 0 ]; do
    case $1 in
        --tag) tag=$2; shift 2 ;;
        --save) save=$2; shift 2 ;;
        --packages) packages_only=1; shift ;;
        --arch) arch=$2; shift 2 ;;
        --) shift; break ;;
        -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

# The runtime stage's packages, read from the Containerfile (its one line with
# ${EXTRA_PACKAGES}), so that the two ways install the same.
runtime_packages() {
    # shellcheck disable=SC2016 # a literal ${EXTRA_PACKAGES}
    pkgs=$(sed -n 's/.*apt-get install -y --no-install-recommends \(.*\)\${EXTRA_PACKAGES}.*/\1/p' \
        "$here/Containerfile")
    if [ -z "$pkgs" ]; then
        echo "cannot find the runtime packages in $here/Containerfile" >&2
        exit 1
    fi
    extra=${EXTRA_PACKAGES:-}
    while [ $# -gt 0 ]; do
        case $1 in
            --build-arg) [ $# -ge 2 ] || break; a=$2; shift 2 ;;
            --build-arg=*) a=${1#--build-arg=}; shift ;;
            *) echo "rootfs: ignoring build argument $1" >&2; shift; continue ;;
        esac
        case $a in
            EXTRA_PACKAGES=*) extra=${a#EXTRA_PACKAGES=} ;;
            *) echo "rootfs: ignoring build argument $a" >&2 ;;
        esac
    done
    # shellcheck disable=SC2086 # lists of words
    echo $pkgs $extra
}

case $arch in
    amd64) triple=x86_64-unknown-linux-gnu ;;
    arm64) triple=aarch64-unknown-linux-gnu ;;
    *) echo "--arch $arch: amd64 or arm64" >&2; exit 2 ;;
esac

if [ "$packages_only" = 1 ]; then
    runtime_packages "$@"
    exit 0
fi

# What the image is: the last commit of the agent's sources (as build.rs reads it, so that
# --version, kubernetes_build_info and the labels agree), its date, and the crate's version.
# The builder stage has no .git (.dockerignore), so both go in as build arguments.
sources="crates Cargo.toml Cargo.lock"
# shellcheck disable=SC2086 # a list of paths
git_commit=$(git -C "$repo" log -1 --format=%H -- $sources 2>/dev/null || true)
# shellcheck disable=SC2086
build_date=$(TZ=UTC git -C "$repo" log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ -- $sources 2>/dev/null || true)
git_commit=${git_commit:-unknown} build_date=${build_date:-1970-01-01T00:00:00Z}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -1)
export KUBE_PROXY_IPVS_GIT_COMMIT="$git_commit" KUBE_PROXY_IPVS_BUILD_DATE="$build_date"
label_args="--label=org.opencontainers.image.title=kube-proxy-ipvs
--label=org.opencontainers.image.revision=$git_commit
--label=org.opencontainers.image.version=$version
--label=org.opencontainers.image.created=$build_date
--label=org.opencontainers.image.licenses=Apache-2.0"

builder=${BUILDER:-}
if [ -z "$builder" ]; then
    for b in podman buildah docker; do
        # `info`: a docker client without a daemon to talk to is no builder.
        if command -v "$b" >/dev/null 2>&1 && "$b" info >/dev/null 2>&1; then builder=$b; break; fi
    done
fi
if [ -z "$builder" ]; then
    echo "no image builder (podman, buildah or docker): building the image's root file system" >&2
    builder=rootfs
fi

if [ "$builder" = rootfs ]; then
    packages=$(runtime_packages "$@")
    save=${save:-$repo/target/kube-proxy-ipvs-image.tar}
    if ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
        echo "warning: not a Debian bookworm host: the binary may need a newer glibc than the image's" >&2
    fi
    echo "building $tag ($arch) from $repo: cargo, then Debian bookworm minbase + $packages" >&2
    binary=${AGENT_BINARY:-}
    if [ -z "$binary" ] && [ "$arch" = "$host_arch" ]; then
        (cd "$repo" && cargo build --release --locked -p kube-proxy-ipvs-agent)
        binary=$repo/target/release/kube-proxy-ipvs
    elif [ -z "$binary" ]; then
        (cd "$repo" && cargo build --release --locked -p kube-proxy-ipvs-agent --target "$triple")
        binary=$repo/target/$triple/release/kube-proxy-ipvs
    fi
    export DEBIAN_ARCH="$arch"
    # shellcheck disable=SC2086 # a list of words
    layers=$("$here/debian-rootfs.sh" $packages)
    rootfs=$(echo "$layers" | sed -n 's/^rootfs //p')
    agent=$repo/target/image-cache/agent-layer
    rm -rf "$agent"
    mkdir -p "$agent/usr/local/bin"
    install -m 0755 "$binary" "$agent/usr/local/bin/kube-proxy-ipvs"
    install -m 0755 "$here/init-sysctls.sh" "$agent/usr/local/bin/kube-proxy-ipvs-sysctls"
    # Fail the build, not the node, if a library is missing (the Containerfile's last step).
    "$here/debian-rootfs.sh" --run "$rootfs" "$agent" -- /usr/local/bin/kube-proxy-ipvs --version
    mkdir -p "$(dirname "$save")"
    ifs=$IFS
    IFS='
'
    # shellcheck disable=SC2046 # one path a line
    set -- $(echo "$layers" | sed -n 's/^layer //p') "$agent"
    IFS=$ifs
    IFS='
'
    # shellcheck disable=SC2086 # one argument a line
    python3 "$here/oci-archive.py" image --tag "$tag" --arch "$arch" --gzip -o "$save" $label_args \
        --entrypoint '["/usr/local/bin/kube-proxy-ipvs"]' "$@"
    IFS=$ifs
    echo "saved $tag to $save"
    exit 0
fi

echo "building $tag with $builder from $repo (commit $git_commit)"
[ "$arch" = "$host_arch" ] || set -- --platform "linux/$arch" "$@"
set -- --build-arg "GIT_COMMIT=$git_commit" --build-arg "BUILD_DATE=$build_date" \
    --build-arg "VERSION=$version" "$@"
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
