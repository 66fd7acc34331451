#!/usr/bin/env bash
# The image deploy/build-image.sh builds says which build it is: the agent in it prints, with
# --version (run in the image's root), the commit of the sources it was built from, and the
# image carries it in its OCI labels (org.opencontainers.image.revision, .version). The rootfs
# way (no container engine here), with an agent binary already built from this checkout.
#
#   tests/check-image.sh [AGENT_BINARY]    (default target/debug/kube-proxy-ipvs)
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:-target/debug/kube-proxy-ipvs}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
    echo "check-image: FAIL: $*" >&2
    exit 1
}
[[ -x $binary ]] || fail "no agent binary at $binary (cargo build -p kube-proxy-ipvs-agent)"
want=$(git log -1 --format=%H -- crates Cargo.toml Cargo.lock)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
BUILDER=rootfs AGENT_BINARY=$binary bash deploy/build-image.sh --tag localhost/kube-proxy-ipvs:check \
    --save "$out/image.tar" >"$out/build.log" 2>&1 || { cat "$out/build.log" >&2; fail "deploy/build-image.sh"; }
said=$(grep -m1 '^kube-proxy-ipvs v' "$out/build.log" || true)
[[ $said == "kube-proxy-ipvs v$version (commit $want, "* ]] ||
    fail "the image's agent says '$said', not v$version built from $want"
python3 - "$out/image.tar" "$want" "$version" <<'PY' || fail "the image's labels"
import json, sys, tarfile
tar = tarfile.open(sys.argv[1])
manifest = json.load(tar.extractfile("manifest.json"))
labels = json.load(tar.extractfile(manifest[0]["Config"]))["config"].get("Labels") or {}
for key, want in (("org.opencontainers.image.revision", sys.argv[2]),
                  ("org.opencontainers.image.version", sys.argv[3])):
    if labels.get(key) != want:
        sys.exit(f"check-image: label {key} is {labels.get(key)!r}, not {want!r} (labels: {labels})")
PY
echo "check-image: the image says v$version, commit ${want:0:12}, in --version and in its labels"
