#!/usr/bin/env bash
# Installs what the build, the tests and the lab need on a Debian 12 machine (as root).
# Safe to run again: it installs only what is missing.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# The toolchains are not Debian's packages (Debian 12 has Rust 1.63 and Go 1.19): they must be
# there before anything else, and new enough, or nothing below can build.
toolchain_problems=()
# Whether version $1 is at least $2 (dotted numbers).
at_least() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1) == "$2" ]]; }
rust_min=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$repo/Cargo.toml")
rust_have=$(rustc --version 2>/dev/null | awk '{print $2}' || true)
if [[ -z $rust_have ]]; then
    toolchain_problems+=("Rust is missing: install rustup (https://rustup.rs), then \`rustup toolchain install $rust_min\`")
elif ! at_least "${rust_have%%-*}" "$rust_min"; then
    toolchain_problems+=("Rust $rust_have is older than the workspace's rust-version $rust_min: \`rustup update stable\`")
fi
for component in rustfmt clippy; do
    [[ -z $rust_have ]] || cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 ||
        toolchain_problems+=("the Rust component $component is missing: \`rustup component add $component\`")
done
go_min=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$repo/tests/peers/go.mod")
go_have=$(go env GOVERSION 2>/dev/null | sed 's/^go//' || true)
if [[ -z $go_have ]]; then
    toolchain_problems+=("Go is missing (it builds kube-proxy, kube-apiserver, kubelet... from their modules): install Go $go_min or newer from https://go.dev/dl/ and put its bin/ on PATH")
elif ! at_least "$go_have" "$go_min"; then
    toolchain_problems+=("Go $go_have is older than the $go_min that tests/peers/go.mod needs: install a newer Go from https://go.dev/dl/")
fi
if ((${#toolchain_problems[@]})); then
    printf 'setup: %s\n' "${toolchain_problems[@]}" >&2
    exit 1
fi
packages=(
    # the lab VM and the image build
    qemu-system-x86 busybox-static cpio zstd kmod binutils
    # the real tools, in the image and as cross-checks
    ipvsadm ipset iptables nftables conntrack iproute2 dash bash coreutils util-linux ca-certificates
    # the test control plane's certificates (lab::controlplane)
    openssl
    # tests/deny.sh: the RustSec database is a git repository (its commit and date)
    git
    # tests/check-deploy.sh: shellcheck of every script, ruby -c of the Vagrantfile
    shellcheck ruby
    # crates/ipset: libipset and bindgen's libclang
    libipset-dev pkg-config libclang-dev clang
    # the lab cluster (tests/cluster): runc's static seccomp, the images' Debian root (mmdebstrap)
    libseccomp-dev gcc libc6-dev mmdebstrap python3
    # run.sh --lb metallb: the outside client asks who answers ARP (tests/cluster/lb-traffic.sh)
    iputils-arping
    # arm64 (tests/check-arm64.sh): the cross linker, and qemu-user to run the result
    # (arch-test: mmdebstrap's check that it can; libipset-dev:arm64 below)
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static arch-test
)
# arm64's libipset (and with it the arm64 glibc that qemu-user runs the agent on) come from
# Debian's multiarch, which needs the architecture added first.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: dpkg --add-architecture arm64" >&2
    dpkg --add-architecture arm64
    apt-get update -qq
fi
packages+=(libipset-dev:arm64)
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
# The arm64 Rust standard library, for tests/check-arm64.sh (rustup's; a toolchain without
# rustup must bring its own).
if ! rustc --print target-libdir --target aarch64-unknown-linux-gnu 2>/dev/null | xargs -r ls 2>/dev/null | grep -q '^libstd-'; then
    echo "setup: rustup target add aarch64-unknown-linux-gnu" >&2
    rustup target add aarch64-unknown-linux-gnu
fi
# cargo-deny, for tests/deny.sh: built from crates.io once, then kept in ~/.cargo/bin.
if ! command -v cargo-deny >/dev/null; then
    echo "setup: installing cargo-deny (cargo install --locked, a few minutes)" >&2
    cargo install --locked --quiet cargo-deny --version 0.20.2
fi
# The RustSec advisory database, for tests/deny.sh's advisories check: a snapshot beside the
# repository (../shared/rustsec/advisory-db.tar.gz, a git clone; RUSTSEC_SNAPSHOT names another)
# goes where cargo-deny 0.20 looks for the default database, unless the copy there is as new or
# newer. "New" is the database's own last commit date (git), never a file's mtime: a copy
# cargo-deny fetched later than the snapshot was taken stays.
# Beside the repository, or where RUSTSEC_SNAPSHOT says (.ci/run names the CI machine's).
snapshot=${RUSTSEC_SNAPSHOT:-$(dirname "$repo")/shared/rustsec/advisory-db.tar.gz}
db_root="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
# The folder name cargo-deny derives from the default database URL (deny.toml sets no db-urls).
db="$db_root/advisory-db-3157b0e258782691"
# The last commit's time of the database in $1, 0 when $1 is no git repository (--git-dir: never
# a repository further up).
commit_time() { git --git-dir="$1/.git" log -1 --format=%ct 2>/dev/null || echo 0; }
if [ -f "$snapshot" ]; then
    mkdir -p "$db_root"
    unpacked=$(mktemp -d "$db_root/.snapshot.XXXXXX")
    tar -xzf "$snapshot" -C "$unpacked"
    new=$(commit_time "$unpacked/advisory-db")
    old=$(commit_time "$db")
    if [ "$new" = 0 ]; then
        echo "setup: $snapshot holds no git repository advisory-db/; not installed" >&2
    elif [ "$new" -gt "$old" ]; then
        # An older or broken copy is cargo-deny's cache, replaced whole.
        [ ! -e "$db" ] || mv "$db" "$unpacked/replaced"
        mv "$unpacked/advisory-db" "$db"
        # The snapshot was cloned from a mirror; cargo-deny fetches from "origin", which must
        # be the database's real address for a fetch to bring anything newer.
        git --git-dir="$db/.git" remote set-url origin https://github.com/RustSec/advisory-db
        echo "setup: RustSec database from $snapshot installed (its last commit" \
            "$(git --git-dir="$db/.git" log -1 --format='%h of %cs')$([ "$old" = 0 ] || echo ", newer than the copy there"))" >&2
    else
        echo "setup: RustSec database: the copy in $db_root is as new as $snapshot or newer; kept" >&2
    fi
    rm -rf "$unpacked"
else
    echo "setup: no RustSec snapshot at $snapshot: tests/deny.sh needs a copy fetched before or GitHub" >&2
fi
