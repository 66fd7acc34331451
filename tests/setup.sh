#!/usr/bin/env bash
# Installs what the build, the tests and the lab need on a Debian 12 machine (as root).
# Safe to run again: it installs only what is missing.
set -euo pipefail
packages=(
    # the lab VM and the image build
    qemu-system-x86 busybox-static cpio zstd kmod binutils
    # the real tools, in the image and as cross-checks
    ipvsadm ipset iptables nftables conntrack iproute2 dash bash coreutils util-linux ca-certificates
    # the test control plane's certificates (lab::controlplane)
    openssl
    # tests/check-deploy.sh: shellcheck of every script, ruby -c of the Vagrantfile
    shellcheck ruby
    # crates/ipset: libipset and bindgen's libclang
    libipset-dev pkg-config libclang-dev clang
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The lab resolves the current cloud kernel with apt-cache: package lists must exist.
if ! apt-cache depends linux-image-cloud-amd64 2>/dev/null | grep -q 'Depends: linux-image-'; then
    apt-get update -qq
fi
# cargo-deny, for tests/deny.sh: built from crates.io once, then kept in ~/.cargo/bin.
if ! command -v cargo-deny >/dev/null; then
    echo "setup: installing cargo-deny (cargo install --locked, a few minutes)" >&2
    cargo install --locked --quiet cargo-deny --version 0.20.2
fi
