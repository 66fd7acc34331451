#!/usr/bin/env bash
# The README's test command as a new CI machine runs it: a fresh clone of HEAD, with empty Go
# module and build caches and an empty cargo home (registry, git checkouts, installed tools such
# as cargo-deny and cargo-semver-checks), so that every download and compile is counted. Only
# the toolchains (rustup's, Go's) and Debian's packages are kept: a CI machine has them.
#
#   tests/cold.sh [DIR]     (default target/cold; needs about 30 GB free there)
#
# Prints the test command's own steps and its total; the clone and the caches stay in DIR for a
# look afterwards and are removed at the next run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/target/cold}
rm -rf "$dir"
mkdir -p "$dir/bin"
git clone --quiet --no-hardlinks "$root" "$dir/repo"
git -C "$dir/repo" checkout --quiet "$(git -C "$root" rev-parse HEAD)"
# rustup's proxies only: anything else in ~/.cargo/bin was installed by an earlier run.
for tool in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver rustup; do
    ln -s "$(command -v "$tool")" "$dir/bin/$tool"
done
go=$(dirname "$(command -v go)")
# tests/setup.sh finds the RustSec snapshot beside the repository it runs from.
[[ ! -d $root/../shared ]] || ln -s "$(cd "$root/../shared" && pwd)" "$dir/shared"
echo "cold: $(git -C "$dir/repo" log --oneline -1) in $dir, caches empty" >&2
start=$(date +%s)
rc=0
(cd "$dir/repo" && env -i HOME="$HOME" TERM="${TERM:-dumb}" USER="${USER:-root}" \
    RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" RUSTUP_AUTO_INSTALL=0 \
    CARGO_HOME="$dir/cargo" GOPATH="$dir/go" GOMODCACHE="$dir/go/pkg/mod" GOCACHE="$dir/go-build" \
    PATH="$dir/cargo/bin:$dir/bin:$go:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    ./tests/run.sh) || rc=$?
echo "cold: the test command took $(($(date +%s) - start)) s from empty caches (exit $rc)" >&2
exit "$rc"
