#!/usr/bin/env bash
# The agent on arm64, as far as this amd64 machine can show it (issue 43):
#   1. it cross-compiles (cargo --target aarch64-unknown-linux-gnu, .cargo/config.toml);
#   2. the arm64 binary, run under qemu-user, prints the same --version, the same --dry-run plan
#      of the demo manifests and the same --write-config-to file as the native build of the
#      same sources: the same program, not only one that starts;
#   3. deploy/build-image.sh --arch arm64 makes an arm64 image (the rootfs way): its config says
#      arm64, its labels name the commit, and the agent in it runs in its own Debian tree
#      (build-image.sh runs `--version` there).
# It shows nothing of IPVS, ipset or iptables on an arm64 kernel: the lab has no arm64 VM.
#
#   tests/check-arm64.sh [NATIVE_BINARY]    (default: target/debug/kube-proxy-ipvs, built here)
set -euo pipefail
cd "$(dirname "$0")/.."
native=${1:-}
if [[ -z $native ]]; then
    cargo build --locked --quiet -p kube-proxy-ipvs-agent
    native=target/debug/kube-proxy-ipvs
fi
triple=aarch64-unknown-linux-gnu
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
    echo "check-arm64: FAIL: $*" >&2
    exit 1
}
[[ -x $native ]] || fail "no native agent binary at $native (cargo build -p kube-proxy-ipvs-agent)"
command -v qemu-aarch64-static >/dev/null || fail "qemu-aarch64-static is missing (tests/setup.sh installs qemu-user-static)"

echo "check-arm64: cargo build --target $triple"
cargo build --locked --quiet -p kube-proxy-ipvs-agent --target "$triple"
arm=target/$triple/debug/kube-proxy-ipvs
machine=$(readelf -h "$arm" | sed -n 's/^ *Machine: *//p')
[[ $machine == AArch64 ]] || fail "$arm is built for '$machine', not AArch64"

# No -L: the loader and libc are Debian's libc6:arm64 (multiarch, beside libipset-dev:arm64).
# The cross toolchain's own copy under /usr/aarch64-linux-gnu is another build of glibc, and a
# loader and libc of two builds loop for ever in pthread_create.
run_arm() { QEMU_LD_PREFIX='' qemu-aarch64-static "$arm" "$@"; }

# Each mode on both builds; stdout and the exit code must agree.
same() { # NAME ARGS...
    name=$1
    shift
    rc_native=0 rc_arm=0
    "$native" "$@" >"$out/$name.native" 2>"$out/$name.native.err" || rc_native=$?
    run_arm "$@" >"$out/$name.arm64" 2>"$out/$name.arm64.err" || rc_arm=$?
    [[ $rc_native == "$rc_arm" ]] ||
        { cat "$out/$name.arm64.err" >&2; fail "$name: the arm64 build exits $rc_arm, the native $rc_native"; }
    cmp -s "$out/$name.native" "$out/$name.arm64" ||
        { diff "$out/$name.native" "$out/$name.arm64" | head -20 >&2; fail "$name: the arm64 build's output differs"; }
}

same version --version
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
grep -q "^kube-proxy-ipvs v$version (commit " "$out/version.arm64" ||
    fail "--version says '$(cat "$out/version.arm64")'"

same dry-run --dry-run --manifests tests/demo/manifests --hostname-override node-a \
    --cluster-cidr 10.244.0.0/16
# The plan is the demo's Services, not an empty one (a build that read nothing would agree too).
services=$(grep -c '^add service ' "$out/dry-run.arm64" || true)
((services >= 4)) || { head "$out/dry-run.arm64" >&2; fail "--dry-run planned $services services"; }

same write-config --write-config-to /dev/stdout --ipvs-scheduler wrr --cluster-cidr 10.244.0.0/16 \
    --nodeport-addresses 192.168.0.0/16 --ipvs-strict-arp
grep -q 'scheduler: wrr' "$out/write-config.arm64" || fail "--write-config-to lost --ipvs-scheduler"
grep -q 'strictARP: true' "$out/write-config.arm64" || fail "--write-config-to lost --ipvs-strict-arp"
echo "check-arm64: the arm64 build under qemu-user agrees with the native one" \
    "(--version, --dry-run: $services services, --write-config-to)"

echo "check-arm64: deploy/build-image.sh --arch arm64 (rootfs way)"
BUILDER=rootfs AGENT_BINARY=$arm bash deploy/build-image.sh --arch arm64 \
    --tag localhost/kube-proxy-ipvs:check-arm64 --save "$out/image.tar" >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log" >&2; fail "deploy/build-image.sh --arch arm64"; }
# build-image.sh ran the agent's --version in the image's own arm64 tree.
grep -qxF "$(cat "$out/version.arm64")" "$out/build.log" ||
    { tail -5 "$out/build.log" >&2; fail "the agent did not run in the arm64 image's tree"; }
want=$(git log -1 --format=%H -- crates Cargo.toml Cargo.lock)
python3 - "$out/image.tar" "$want" <<'PY' || fail "the arm64 image's config"
import json, sys, tarfile
tar = tarfile.open(sys.argv[1])
manifest = json.load(tar.extractfile("manifest.json"))
config = json.load(tar.extractfile(manifest[0]["Config"]))
if config.get("architecture") != "arm64":
    sys.exit(f"check-arm64: the image's architecture is {config.get('architecture')!r}, not 'arm64'")
revision = (config["config"].get("Labels") or {}).get("org.opencontainers.image.revision")
if revision != sys.argv[2]:
    sys.exit(f"check-arm64: the image's revision label is {revision!r}, not {sys.argv[2]!r}")
PY
echo "check-arm64: the arm64 image says arm64 and commit ${want:0:12}, and its agent runs in it"
