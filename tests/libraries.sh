#!/usr/bin/env bash
# The two libraries as products (issue 18), a step of the test command:
#   1. each packages and passes `cargo publish --dry-run` (the package builds on its own),
#      and carries the repository's LICENSE (the agent's package too);
#   2. tests/consumer, a program outside the workspace, builds against those packages as a
#      user of the published crates would ([patch.crates-io] points at what would be uploaded);
#   3. the public API of each is checked against the baseline below with cargo-semver-checks
#      (installed from crates.io when missing): a breaking change fails unless the version
#      says so.
#
#   tests/libraries.sh [--allow-dirty]   (--allow-dirty: package uncommitted changes too)
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
dirty=()
[[ ${1:-} == --allow-dirty ]] && dirty=(--allow-dirty)

# The commit whose API each library's current version promises (0.1.0). Move it only with a
# release: after a version bump, to the commit of that release.
baseline=$(cat crates/API-BASELINE)

version() { cargo metadata --no-deps --format-version 1 |
    python3 -c "import json,sys; print(next(p['version'] for p in json.load(sys.stdin)['packages'] if p['name']=='$1'))"; }

for package in ipvs-netlink libipset; do
    echo "libraries: cargo publish --dry-run -p $package"
    crate=$package-$(version "$package")
    # The dry run unpacks the package it would upload here to build it (and leaves no .crate).
    rm -rf "${target:?}/package/$crate"
    cargo publish --dry-run --quiet -p "$package" "${dirty[@]}"
    # The licence travels with the package (crates/X/LICENSE links to the root's): the
    # package's LICENSE is the repository's, byte for byte.
    cmp -s "$target/package/$crate/LICENSE" LICENSE ||
        { echo "libraries: the package $crate does not carry the repository's LICENSE" >&2; exit 1; }
done
# The agent is not published, but its package carries the licence too.
cargo package --list --quiet -p kube-proxy-ipvs-agent "${dirty[@]}" | grep -qx LICENSE ||
    { echo "libraries: kube-proxy-ipvs-agent's package does not list LICENSE" >&2; exit 1; }

echo "libraries: tests/consumer against the packages"
cargo fmt --manifest-path tests/consumer/Cargo.toml --check
patch=()
for package in ipvs-netlink libipset; do
    patch+=(--config "patch.crates-io.$package.path=\"$target/package/$package-$(version "$package")\"")
done
cargo build --quiet --manifest-path tests/consumer/Cargo.toml --target-dir "$target" "${patch[@]}"
# What it resolved is the packages, not the workspace's sources.
resolved=$(cargo tree --manifest-path tests/consumer/Cargo.toml "${patch[@]}" \
    --depth 1 --prefix none | grep -E "^(ipvs-netlink|libipset) v[0-9.]+ \($target/package/" || true)
echo "$resolved"
[[ $(wc -l <<<"$resolved") == 2 ]] || { echo "libraries: the consumer did not use the packages" >&2; exit 1; }

if ! command -v cargo-semver-checks >/dev/null; then
    # Pinned: a new release's lints would change what this step passes.
    echo "libraries: installing cargo-semver-checks 0.51.0 (crates.io)"
    cargo install --locked --quiet cargo-semver-checks --version 0.51.0
fi
if ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
    echo "libraries: the API baseline $baseline is not in this clone (a shallow one?); fetch it" >&2
    exit 1
fi
for package in ipvs-netlink libipset; do
    echo "libraries: cargo semver-checks -p $package against $baseline"
    cargo semver-checks check-release -p "$package" --baseline-rev "$baseline"
done

echo "libraries: the tools' --help and usage errors"
for tool in "ipvs-netlink ipvs" "libipset ipset-rs"; do
    read -r package example <<<"$tool"
    help=$(cargo run --quiet -p "$package" --example "$example" -- --help)
    grep -q "Exit status: 0" <<<"$help" || { echo "libraries: $example --help says no exit status" >&2; exit 1; }
    status=0
    cargo run --quiet -p "$package" --example "$example" -- --no-such-flag >/dev/null 2>&1 || status=$?
    [[ $status == 2 ]] || { echo "libraries: $example with a bad flag exited $status, not 2" >&2; exit 1; }
done
echo "libraries: ok"
